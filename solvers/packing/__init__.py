"""Throughput-optimal tree packing (ForestColl class): ``--solver packing``.

1. Rate. The optimal allgather time per part is the cut ratio
   ``max_S |S ∩ ranks| / cap_out(S)`` over vertex sets S missing a rank, switches included
   (``solvers.bounds.max_cut_ratio``, exact: a Fraction p/q in integer capacity units).
   Scaling capacities by p, every root needs q units of rate; for broadcast the root needs
   the least max-flow to a rank (Edmonds).
2. Switch removal (``split``): switch vertices are split off pair by pair while every rank can
   still receive the total demand from a super source feeding the roots, leaving a rank-only
   graph (an arc u -> t there is u sending to t through switches, as the flattened topology
   routes it).
3. Trees (``trees``): spanning out-trees per root with integer multiplicities summing to the
   root's demand, packed within the arc capacities.
4. Schedule (``schedule``): each root's part is cut into slots, shared among its trees in
   proportion to their multiplicities, and pipelined down (allgather, broadcast) or up
   (reducescatter, reduce: trees of the reversed graph) the trees; allreduce is reducescatter
   then allgather, every slot starting down as soon as its sum is complete.

Slots and stages: each part is cut into enough slots that every tree's share follows its rate
(a multiple of the request's chunks, within a budget of transfers), and the slots of a tree
travel in a few pipeline stages; with ``--size`` the cost judge picks the stage count that
runs fastest at that size (1, 2, 4, 8 or 16), otherwise 4.

The details report the rate the trees reach, the bound it meets and the trees per root.
"""

from __future__ import annotations

import time

from ccl.algorithm import Algorithm
from ccl.errors import InputError
from ccl.judge import CostJudge
from ccl.problem import Problem

from ..common import pieces
from .plan import KINDS, Packing, plan
from .schedule import build

__all__ = ["KINDS", "Packing", "plan", "synthesize"]


def synthesize(problem: Problem, judge: CostJudge | None = None):
    from solvers import Solution

    if problem.request.options:
        raise InputError(f"solver 'packing' has no option {problem.request.options[0][0]!r}")
    if problem.request.steps is not None or problem.request.rounds is not None:
        raise InputError("solver 'packing' does not take --steps or --rounds: it optimizes throughput")
    start = time.perf_counter()
    packing = plan(problem.topology, problem.collective.kind, problem.collective.root)
    planned = time.perf_counter() - start
    slots = slot_count(packing, pieces(problem), problem.topology.n_ranks)
    size = problem.request.size
    chosen = DEFAULT_STAGES
    tried: list[dict] = []
    best_alg: Algorithm | None = None
    if size is not None and judge is not None:
        best_time = None
        for c in STAGES:
            alg = build(problem, packing, slots, c)
            us = judge.time_us(alg, size)
            tried.append({"stages": c, "time_us": round(us, 3)})
            if best_time is None or us < best_time:
                best_time, chosen, best_alg = us, c, alg
    alg = best_alg if best_alg is not None else build(problem, packing, slots, chosen)
    details = packing.details()
    details.update({"slots_per_part": slots, "stages": chosen, "plan_seconds": round(planned, 3)})
    if tried:
        details["pipeline_candidates"] = tried
    return Solution(alg, details)


STAGES = (1, 2, 4, 8, 16)
DEFAULT_STAGES = 4
MAX_TRANSFERS = 400_000


def slot_count(packing: Packing, base: int, n: int) -> int:
    """Slots per part: fine enough that shares follow the trees' rates (8 per tree of the
    root with most trees, within a budget of transfers), a multiple of the request's chunks."""
    per_slot = n * (n - 1) * max(len(packing.phases()), 1)  # transfers one slot of every part costs
    target = min(8 * max(packing.trees_per_root(), 1), max(1, MAX_TRANSFERS // per_slot))
    return base * max(1, target // base)
