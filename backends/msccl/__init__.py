"""The MSCCL XML backend: export Programs as the ``<algo>`` files the msccl executor and RCCL
load, and read such files back as Programs (then verify, simulate and run them).

    from backends.msccl import model, interpret
    algo = model.read("allreduce.xml")
    imported = interpret.read_program(algo, topology, path="allreduce.xml")
"""
