"""The cost judge: how a cost-aware solver asks "how fast does this schedule run at this size?".

The core defines the protocol; the driver (``ccl.compiler``) passes an implementation to the
solvers that need one (``solvers.solve(problem, judge=...)``): the simulator timing the lowered
Program, so a solver optimizes what the runtimes run. Solvers never import a backend.
"""

from __future__ import annotations

from typing import Protocol

from .algorithm import Algorithm


class CostJudge(Protocol):
    """Times schedules for a solver."""

    def time_us(self, algorithm: Algorithm, size: float) -> float:
        """Microseconds ``algorithm`` takes when called with ``size`` bytes (the nccl-tests
        convention of ``ccl.core.report``). The algorithm may be a candidate a solver has not
        verified yet; a judge raises the project's errors for one it cannot time."""
        ...


def effort_us(judge: CostJudge) -> float | None:
    """What the judge's last ``time_us`` call cost, in microseconds estimated from counts (the
    same on every machine), for a solver that budgets its search deterministically; None when the
    judge does not say (its optional ``last_effort_us`` attribute)."""
    value = getattr(judge, "last_effort_us", None)
    return None if value is None else float(value)
