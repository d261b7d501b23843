"""The latency/throughput set of the packing solver: which schedule wins at which size.

Deep trees and long pipelines reach the bound's rate but pay a message latency per stage and
per level; shallow trees (stars) and single trees pay little latency but load some links more.
``frontier`` runs the judged search (``synthesize`` with a size) at every size of a sweep, keeps
the winners, merges neighbouring sizes won by the same schedule, and finds the size where one
winner hands over to the next by bisection (in log size) between the two sweep sizes: the
crossover is where their simulated times cross, to within ``CROSSOVER_STEPS`` halvings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ccl.core.algorithm import Algorithm
from ccl.core.judge import CostJudge
from ccl.core.problem import Problem

from . import synthesize

CROSSOVER_STEPS = 6  # bisection steps in log size between two sweep sizes (16x apart: within 5%)


@dataclass
class Member:
    """One schedule of the set, the sizes of the sweep it won and the range it wins."""

    algorithm: Algorithm
    details: dict
    sizes: list[float]  # the sweep sizes it won
    times_us: list[float]  # its time at each of them
    wins_from: float  # bytes (0: from the smallest size)
    wins_to: float  # bytes (inf: to the largest)

    @property
    def key(self) -> tuple:
        d = self.details
        return (d.get("construction") or _construction(d), d.get("stages"), d.get("taper"), d.get("stagger"),
                d.get("slots_per_part"), d.get("coalesce"), d.get("sequential"), d.get("lead"), d.get("ramp"),
                d.get("own"))


def _construction(details: dict) -> str:
    names = {details[p]["construction"] for p in ("reduce_phase", "broadcast_phase") if p in details}
    return "+".join(sorted(names))


def frontier(problem: Problem, judge: CostJudge, sizes: Sequence[float],
             progress: Callable[[str], None] | None = None) -> list[Member]:
    """The schedules that win some size of ``sizes`` (bytes), smallest sizes first, with the
    size ranges where each is the fastest of the set."""
    sweep = sorted(set(int(s) for s in sizes))
    members: list[Member] = []
    for size in sweep:
        if progress is not None:
            progress(f"judging at {size:.0f} bytes")
        solution = synthesize(replace(problem, request=replace(problem.request, size=size)), judge)
        us = judge.time_us(solution.algorithm, size)
        candidate = Member(solution.algorithm, solution.details, [size], [us], 0.0, math.inf)
        if members and members[-1].key == candidate.key:
            members[-1].sizes.append(size)
            members[-1].times_us.append(us)
            continue
        if members:
            a = members[-1]
            cross = _crossover(judge, a.algorithm, candidate.algorithm, a.sizes[-1], size)
            a.wins_to = candidate.wins_from = cross
        members.append(candidate)
    return members


def _crossover(judge: CostJudge, small: Algorithm, large: Algorithm, lo: float, hi: float) -> float:
    """The size in [lo, hi] where ``large`` becomes faster than ``small`` (bisection in log
    size; their times are compared at each midpoint)."""
    a, b = math.log(lo), math.log(hi)
    for _ in range(CROSSOVER_STEPS):
        mid = (a + b) / 2
        size = math.exp(mid)
        if judge.time_us(large, size) < judge.time_us(small, size):
            b = mid
        else:
            a = mid
    return float(round(math.exp(b)))
