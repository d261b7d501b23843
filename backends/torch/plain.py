"""The plain-data form of a Program that the torch runtime reads (no torch needed to build it).

``to_plain(program)`` is what the in-process executor hands to ``runtime.ScheduleRunner`` and
what ``ccl emit torch`` writes into standalone scripts as ``SCHEDULE``. The backend runs the
Program ``ccl.lower`` made (the driver lowers; this package never does).
"""

from __future__ import annotations

from typing import Any

from ccl.core.errors import InputError, VerificationError
from ccl.core.program import Program
from ccl.core.verify_program import verify_program

from .emulate import emulate_switches

FORMAT = "ccl-torch-program"  # the runtime checks it (runtime.FORMAT)
EMULATION = ("in-switch reductions and multicasts emulated with point-to-point messages (a hub rank per switch "
             "slot sums the pushes and sends the result to the other pullers): the values are the switch's, the "
             "timing is not")


def to_plain(program: Program, *, checked: bool = False) -> dict[str, Any]:
    """The plain-data form the runtime reads. Verifies the Program (out of place, unless
    ``checked``) and records whether it is also correct in place (``in_place_safe``: with the
    runtimes' aliasing, ``in_place_aliases``; an in-place call of a Program that is not runs on
    a private copy of the input). A Program correct in place only (an in-place-only MSCCL file's)
    is taken with ``out_of_place_safe`` False: the runtime refuses out-of-place calls of it. A
    Program with switch ops (pushes and pulls: in-network reduction) runs as its point-to-point
    emulation (``emulate.emulate_switches``, verified like any Program); ``emulated`` then says
    how many switch ops were emulated."""
    if not isinstance(program, Program):
        raise InputError(f"the torch backend runs a Program (see ccl.compiler.program), got {type(program).__name__}")
    switch_ops = program.n_switch_ops
    if switch_ops:
        if not checked:
            verify_program(program)
        program = emulate_switches(program)
        checked = False  # the emulation is verified below, like any Program
    try:
        verify_program(program, in_place=True)
        in_place_safe = True
    except VerificationError:
        in_place_safe = False
    out_of_place_safe = True
    if not checked:
        try:
            verify_program(program)
        except VerificationError:
            if not in_place_safe:
                raise
            out_of_place_safe = False  # an in-place-only file's Program: it reads its input through its output
    coll = program.collective
    spec = {
        "format": FORMAT,
        "version": 1,
        "name": program.name,
        "collective": coll.kind,
        "root": coll.root,
        "n_ranks": coll.n_ranks,
        "chunk_factor": coll.chunk_factor,
        "topology": program.topology.name,
        "solver": program.solver,
        "steps": program.steps,
        "input_slots": [len(x) for x in coll.inputs],
        "output_slots": [len(x) for x in coll.outputs],
        "aliases": [[list(run) for run in runs] for runs in program.alias_runs],
        "in_place_aliases": [[list(run) for run in runs] for runs in program.in_place_runs],
        "reduced": [[list(run) for run in runs] for runs in program.reduced_runs],
        "scratch": [list(x) for x in program.scratch],
        "writes_input": [any(op.kind != "send" and op.buf == "input" for op in ops) for ops in program.ranks],
        "in_place_safe": in_place_safe,
        "out_of_place_safe": out_of_place_safe,
        "ops": [[[*op[:10], list(op.deps)] for op in ops] for ops in program.ranks],
    }
    if switch_ops:
        spec["emulated"] = {"switch_ops": switch_ops, "how": EMULATION}
    if coll.n_chunks <= 1 << 16:  # what a check computes outputs from where torch has no collective
        spec["chunks"] = {"inputs": [list(x) for x in coll.inputs],
                          "outputs": [[sorted(need) for need in slots] for slots in coll.outputs]}
    return spec
