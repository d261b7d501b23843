"""The program stage: a schedule as the verified Program every backend runs.

    Algorithm --program--> Program (ccl.lower, then ccl.verify_program)

Below the other stages: the cost judge (``timing``) lowers what it times through it.
"""

from __future__ import annotations

from typing import Any

from ..core.algorithm import Algorithm
from ..core.errors import InputError, VerificationError
from ..core.lower import lower
from ..core.problem import SynthesisResult
from ..core.program import Program
from ..core.verify_program import verify_program


def program(schedule: Algorithm | SynthesisResult | Program, *, channels: int = 1, fuse: bool = True,
            check: bool = True, in_place: bool = False) -> Program:
    """The program stage: ``ccl.lower`` with its options (``channels``, ``fuse``, ``in_place``),
    then, with ``check``, ``ccl.verify_program`` (in place too with ``in_place``). A Program
    passes through (verified with ``check``: a Program given for in-place use that is not correct
    in place is a VerificationError). The algorithm must have passed ``ccl.verify``
    (``synthesize`` and the loaders see to that). ``in_place``: the Program is correct both out
    of place and in place, with the runtimes' aliasing (``ccl.lower``)."""
    value = schedule.algorithm if isinstance(schedule, SynthesisResult) else schedule
    reuse = schedule.lowered if isinstance(schedule, SynthesisResult) else None
    if reuse is not None and reuse[:2] == (channels, fuse) and not in_place:  # as the cost judge lowered it
        out = reuse[2]
    elif isinstance(value, Program):
        out = value
    elif isinstance(value, Algorithm):
        out = lower(value, channels=channels, fuse=fuse, in_place=in_place)
    else:
        raise InputError(f"expected an Algorithm, a SynthesisResult or a Program, got {type(value).__name__}")
    if check:
        verify_program(out)
        if in_place:
            verify_program(out, in_place=True)
    return out


def in_place_verdict(schedule: Algorithm | SynthesisResult | Program, *, channels: int = 1,
                     fuse: bool = True) -> dict[str, Any]:
    """Whether a schedule serves in-place calls, judged as runtimes run it: by a Program whose
    every read of a memory the runtimes alias (``Collective.in_place_aliases``) is ordered
    before every write to it by dependencies (``verify_program(..., in_place=True)``), never by
    the lock-step steps. A Program is judged as it is; an algorithm by its Program, lowered in
    place when the out-of-place one is not correct in place. Returns ``ok``, ``reason`` (why
    not, the verifier's message), ``lowered_in_place`` (a Program of its own is needed), and
    then ``ops_added``, ``scratch_added`` and ``why`` (what the out-of-place Program gets wrong
    in place)."""
    plain = program(schedule, channels=channels, fuse=fuse, check=False)
    problem = in_place_problem(plain)
    out: dict[str, Any] = {"ok": problem is None, "reason": problem, "lowered_in_place": False}
    if problem is None or isinstance(schedule, Program):
        return out
    fixed = program(schedule, channels=channels, fuse=fuse, check=False, in_place=True)
    again = in_place_problem(fixed)
    out.update(ok=again is None, reason=again, lowered_in_place=True, ops_added=fixed.n_ops - plain.n_ops,
               scratch_added=sum(map(len, fixed.scratch)) - sum(map(len, plain.scratch)), why=problem)
    return out


def in_place_note(verdict: dict[str, Any]) -> str:
    """The verdict in a few words for a report."""
    if not verdict["ok"]:
        return f"not correct in place ({verdict['reason']})"
    if verdict["lowered_in_place"]:
        return (f"also correct in place as lowered for it ({verdict['ops_added']} more ops, "
                f"{verdict['scratch_added']} more scratch slots)")
    return "also correct in place"


def in_place_problem(value: Program) -> str | None:
    """Why a Program is not correct in place (the verifier's message), or None."""
    try:
        verify_program(value, in_place=True)
    except VerificationError as exc:
        return exc.message
    return None
