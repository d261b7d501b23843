"""The core: the IR every stage shares (Topology, Collective, Algorithm, Program, Report), the
verifiers, the lowering, serialization, units, limits and the one error hierarchy.

It imports nothing of the project's outside ``ccl.core``: the DSL, the topology library, the
solvers and the backends build on it, and the driver (``ccl.compiler``, ``ccl.cli``,
``ccl.torch``, the public face ``ccl``) sits above them all. ``import ccl.core`` loads nothing
heavy; numpy is imported by the modules that need it when they first run.
"""
