"""Throughput-optimal tree packing (ForestColl class): ``--solver packing``.

1. Rate. The optimal allgather time per part is the cut ratio
   ``max_S |S ∩ ranks| / cap_out(S)`` over vertex sets S missing a rank, switches included
   (``solvers.bounds.cuts.max_cut_ratio``, exact: a Fraction p/q in integer capacity units).
   Scaling capacities by p, every root needs q units of rate; for broadcast the root needs
   the least max-flow to a rank (Edmonds).
2. Constructions (``plan.plans``), each with its rate measured on the physical links:
   * stitched (``stitch``): identical nodes, one node packed once, rail stars across nodes;
   * packed: switch vertices split off pair by pair while every rank can still receive the
     total demand (``split``), then spanning out-trees per root with integer multiplicities
     summing to the root's demand, packed within the arc capacities (``trees``);
   * two-hop (``twohop``): up to 16 fully linked ranks, the star and relay trees of each root
     weighted by an LP;
   * shallow: per root the tree of fewest hops over the flattened links (latency);
   * exchange (allreduce on identical nodes, small sizes): node trees up to every co-root, one
     exchange step between the co-roots, node trees down (``exchange``).
3. Schedule (``schedule``): each root's part is cut into slots, shared among its trees in
   proportion to their multiplicities, and pipelined down (allgather, broadcast) or up
   (reducescatter, reduce: trees of the reversed graph) the trees; allreduce is reducescatter
   then allgather, every slot starting down as soon as its sum is complete.

Slots and stages: each part is cut into enough slots that every tree's share follows its rate
and has the pipeline's stages (``slots``: within a budget of transfers, a multiple of the
request's chunks). With ``--size`` the cost judge times every construction over pipeline shapes
(``search``: stage counts by hill climbing, then tapered stages when long pipelines win) and
keeps the fastest, within a budget of what the judgements cost (``search.Costs``: the transfers built
and the judge's effort, both from counts, so the same request judges the same shapes on every
machine); otherwise the best-rate construction with 4 stages (``solve``).

A time limit or Ctrl-C cuts the planning and the search short; the constructions made and the
shapes judged by then decide (``solve``). Once a synthesis has taken a second, progress lines
go to stderr, none when ``CCL_QUIET`` is set (``ccl ... --quiet``).
"""

from __future__ import annotations

import os
import sys
import time

from ccl.core import interrupt
from ccl.core.errors import InputError
from ccl.core.judge import CostJudge
from ccl.core.problem import Problem

from . import routes
from .phases import Packing
from .plan import KINDS as TREE_KINDS
from .plan import plan, plans
from .schedule import Shape
from .slots import slot_count
from .solve import Budget, synthesize_routes, synthesize_trees

__all__ = ["KINDS", "Packing", "Shape", "plan", "plans", "slot_count", "synthesize"]

KINDS = (*TREE_KINDS, *routes.KINDS)


def synthesize(problem: Problem, judge: CostJudge | None = None):
    """The registry's entry: the request checked, the progress lines (on this module's clock),
    then the trees or the routes (``solve``)."""
    if problem.request.options:
        raise InputError(f"solver 'packing' has no option {problem.request.options[0][0]!r}")
    if problem.request.steps is not None or problem.request.rounds is not None:
        raise InputError("solver 'packing' does not take --steps or --rounds: it optimizes throughput")
    start = time.perf_counter()
    budget = Budget(interrupt.deadline(problem.request.time_limit))

    quiet = os.environ.get("CCL_QUIET", "") not in ("", "0")

    def progress(message: str) -> None:  # on stderr, once the synthesis has taken a second
        budget.poll()
        if not quiet and time.perf_counter() - start > 1.0:
            print(f"ccl: packing: {message}", file=sys.stderr, flush=True)

    with interrupt.cooperative():  # Ctrl-C stops the planning or the search: the budget sees it
        if problem.collective.kind in routes.KINDS:
            return synthesize_routes(problem, judge, progress, start, budget)
        return synthesize_trees(problem, judge, progress, start, budget)
