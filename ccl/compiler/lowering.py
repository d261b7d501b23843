"""The program stage: a schedule as the verified Program every backend runs.

    Algorithm --program--> Program (ccl.lower, then ccl.verify_program)

Below the other stages: the cost judge (``timing``) lowers what it times through it.
"""

from __future__ import annotations

from ..core.algorithm import Algorithm
from ..core.errors import InputError
from ..core.lower import lower
from ..core.problem import SynthesisResult
from ..core.program import Program
from ..core.verify_program import verify_program


def program(schedule: Algorithm | SynthesisResult | Program, *, channels: int = 1, fuse: bool = True,
            check: bool = True) -> Program:
    """The program stage: ``ccl.lower`` with its options (``channels``, ``fuse``), then, with
    ``check``, ``ccl.verify_program``. A Program passes through (verified with ``check``). The
    algorithm must have passed ``ccl.verify`` (``synthesize`` and the loaders see to that)."""
    value = schedule.algorithm if isinstance(schedule, SynthesisResult) else schedule
    reuse = schedule.lowered if isinstance(schedule, SynthesisResult) else None
    if reuse is not None and reuse[:2] == (channels, fuse):  # as the cost judge lowered it
        out = reuse[2]
    elif isinstance(value, Program):
        out = value
    elif isinstance(value, Algorithm):
        out = lower(value, channels=channels, fuse=fuse)
    else:
        raise InputError(f"expected an Algorithm, a SynthesisResult or a Program, got {type(value).__name__}")
    if check:
        verify_program(out)
    return out
