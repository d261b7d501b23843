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
and has the pipeline's stages (within a budget of transfers, a multiple of the request's
chunks). With ``--size`` the cost judge times every construction over pipeline shapes
(``search``: stage counts by hill climbing, then tapered stages when long pipelines win) and
keeps the fastest, within a budget of what the judgements cost (``search.Costs``: the transfers built
and the judge's effort, both from counts, so the same request judges the same shapes on every
machine); otherwise the best-rate construction with 4 stages.

A time limit (from the start of the synthesis, ``ccl.core.interrupt.deadline``) or Ctrl-C cuts the
planning and the search short wherever they are (``_Budget``: ``ccl.core.interrupt.abandoning``),
early enough for the final build, verification and writing to end at the limit: the
constructions made and the shapes judged by then decide (with none judged, the best-rate
construction with 4 stages), reported as SolverTimeout or Interrupted carrying that schedule;
with no construction made yet, SolverTimeout or Interrupted without one. Without a limit and
without Ctrl-C nothing is cut: the schedule is the one the full search picks.

The details report the rate the trees reach, the bound it meets, the construction, the trees
per root and every shape tried. Once a synthesis has taken a second, progress lines go to
stderr, none when ``CCL_QUIET`` is set (``ccl ... --quiet``).
"""

from __future__ import annotations

import math
import os
import sys
import time

from ccl.core import interrupt
from ccl.core.collector import gc_paused
from ccl.core.errors import InputError, Interrupted, SolverTimeout
from ccl.core.judge import CostJudge, effort_us
from ccl.core.problem import Problem

from ..builders.common import pieces
from . import routes
from .plan import KINDS as TREE_KINDS
from .plan import Packing, plan, plans
from .schedule import Shape, build, remote
from .search import DEFAULT_SHAPE, Costs, pick

__all__ = ["KINDS", "Packing", "Shape", "plan", "plans", "synthesize"]

KINDS = (*TREE_KINDS, *routes.KINDS)


def synthesize(problem: Problem, judge: CostJudge | None = None):
    if problem.request.options:
        raise InputError(f"solver 'packing' has no option {problem.request.options[0][0]!r}")
    if problem.request.steps is not None or problem.request.rounds is not None:
        raise InputError("solver 'packing' does not take --steps or --rounds: it optimizes throughput")
    start = time.perf_counter()
    budget = _Budget(interrupt.deadline(problem.request.time_limit))

    quiet = os.environ.get("CCL_QUIET", "") not in ("", "0")

    def progress(message: str) -> None:  # on stderr, once the synthesis has taken a second
        budget.poll()
        if not quiet and time.perf_counter() - start > 1.0:
            print(f"ccl: packing: {message}", file=sys.stderr, flush=True)

    with interrupt.cooperative():  # Ctrl-C stops the planning or the search: the budget sees it
        if problem.collective.kind in routes.KINDS:
            return _synthesize_routes(problem, judge, progress, start, budget)
        return _synthesize_trees(problem, judge, progress, start, budget)


class _Budget:
    """The synthesis's deadline (``time.monotonic()``, or None) and Ctrl-C. The planning and every
    judged shape run in ``region()``: given up (``interrupt.abandoning``) once ``due()``, which
    is ``reserve`` seconds before the deadline: the time the final schedule takes to build, be
    verified and be written (``RESERVE`` times the longest build seen), so the whole synthesis
    ends at the limit. ``cut`` records what stopped early: "time limit" or "Ctrl-C"."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.reserve = 0.0
        self.cut: str | None = None
        self._inside = 0

    def due(self) -> bool:
        if interrupt.requested():
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline - self.reserve

    def poll(self) -> None:
        """Between steps (where no alarm reaches, e.g. outside the main thread)."""
        if self._inside and self.due():
            raise interrupt.Abandon

    def region(self):
        import contextlib

        @contextlib.contextmanager
        def inside():
            self._inside += 1
            try:
                with interrupt.abandoning(self.due):
                    yield
            finally:
                self._inside -= 1
        return inside()

    def abandoned(self) -> None:
        """A region was given up: note why."""
        self.cut = "Ctrl-C" if interrupt.requested() else "time limit"

    def timed_build(self, make):
        """``make()`` (a schedule build), its time counted in the reserve."""
        t0 = time.monotonic()
        with gc_paused():  # a build makes millions of tuples
            out = make()
        self.reserve = max(self.reserve, RESERVE * (time.monotonic() - t0))
        return out


RESERVE = 2.5  # the final build, verification and writing take about this many builds' time


def _nothing(problem: Problem, budget: _Budget, what: str):
    """Stopped before any schedule existed: Ctrl-C or the time limit, with no best."""
    if interrupt.requested():
        raise Interrupted(f"stopped by Ctrl-C while {what}, before any schedule was built")
    raise SolverTimeout(f"time limit of {problem.request.time_limit:g} s reached while {what}, before any "
                        "schedule was built (raise --time-limit)")


def _synthesize_trees(problem: Problem, judge: CostJudge | None, progress, start: float, budget: _Budget):
    kind = problem.collective.kind
    partial: list[Packing] = []
    try:
        with budget.region():
            candidates = plans(problem.topology, kind, problem.collective.root, progress, partial)
    except interrupt.Abandon:
        budget.abandoned()
        # the candidates made by then, best rate first (as ``plans`` orders them)
        candidates = sorted(partial, key=lambda p: sum(ph.achieved for ph in p.phases()))
        if not candidates:
            _nothing(problem, budget, "planning trees")
    planned = time.perf_counter() - start
    progress(f"planned in {planned:.1f} s: " + ", ".join(
        f"{_construction(p)} at {max(ph.achieved / ph.optimal for ph in p.phases()):.3f}x the bound rate"
        for p in candidates))
    base, n, lanes = pieces(problem), problem.topology.n_ranks, _lanes(problem)
    node_of = problem.topology.node_of
    size = problem.request.size
    tried: list[dict] = []
    fallback = None  # (packing index, shape, Algorithm): the schedule kept if the search is cut
    if budget.cut is None and budget.deadline is not None:
        # under a time limit, the best-rate schedule first: kept if nothing judged beats it in
        # time, and its build time sets the reserve
        shape = DEFAULT_SHAPE
        fallback = (0, shape, budget.timed_build(
            lambda: build(problem, candidates[0], slot_count(candidates[0], base, n, shape, lanes), shape)))
    if size is None or judge is None or budget.cut is not None:
        index, shape = 0, DEFAULT_SHAPE
    else:
        def longest(pk: Packing) -> int:
            out = 16
            while out < 256 and _per_slot(pk, n) * pk.trees_per_root() * out * 8 <= MAX_TRANSFERS:
                out *= 2
            return out

        def estimate(pk: Packing, c: Shape) -> int:
            """Transfers a judgement builds, estimated, weighted by what they cost to build, lower
            and simulate: a reduction's (staged receives, local reductions) about 1.8 times a
            copy's, a coalesced shape's about 1.3 times an uncoalesced one's (dgx-h100:16
            allgather: 7.5 s for 16 stages coalesced, 1.4 s for 4 uniform)."""
            runs = pk.trees_per_root() * c.stages * (2 if c.stagger and kind == "allreduce" and not c.sequential else 1)
            weight = sum(1.8 if ph.reverse else 1.0 for ph in pk.phases()) / len(pk.phases())
            return int(_per_slot(pk, n) * runs * (1.3 if c.coalesce else 1) * weight)

        work = Costs(estimate)

        def evaluate(pk: Packing, c: Shape) -> float:
            """The judged time; the fastest schedule so far is kept (not built again at the end)."""
            alg = budget.timed_build(lambda: build(problem, pk, slot_count(pk, base, n, c, lanes), c))
            us = judge.time_us(alg, size)
            work.record(pk, c, len(alg.transfers), effort_us(judge))
            if kept[0] is None or us < kept[0][0]:
                kept[0] = (us, id(pk), c, alg)
            return us

        kept: list = [None]
        picked, tried = pick(
            candidates, size, progress, name=_construction,
            rate=lambda pk: max(ph.achieved for ph in pk.phases()) * (size if pk.root is not None else size / n),
            evaluate=evaluate, longest=longest, kind=kind, budget=budget, work=work,
            own=lambda pk: pk.root is not None and any(remote(t, node_of) for ph in pk.phases() for t in ph.trees))
        index, shape = picked if picked is not None else (0, DEFAULT_SHAPE)
        if kept[0] is not None and kept[0][1:3] == (id(candidates[index]), shape):
            fallback = (index, shape, kept[0][3])
        kept[0] = None
    packing = candidates[index]
    slots = slot_count(packing, base, n, shape, lanes)
    if fallback is not None and fallback[:2] == (index, shape):
        alg = fallback[2]
    else:
        alg = build(problem, packing, slots, shape)
    details = packing.details()
    details.update({"slots_per_part": slots, **shape._asdict(), "plan_seconds": round(planned, 3)})
    if len(candidates) > 1:
        details["constructions"] = [_construction(p) for p in candidates]
    if tried:
        details["pipeline_candidates"] = tried
    progress(f"chose {_construction(packing)}, {shape.describe()}: {len(alg.transfers):,} transfers to verify")
    return _finish(problem, alg, details, budget)


def _synthesize_routes(problem: Problem, judge: CostJudge | None, progress, start: float, budget: _Budget):
    """Gather and scatter: flow routes or direct ones (``routes``), judged like the trees."""
    root = problem.collective.root
    assert root is not None
    try:
        with budget.region():
            candidates = routes.plans(problem.topology, problem.collective.kind, root)
    except interrupt.Abandon:
        budget.abandoned()
        _nothing(problem, budget, "planning routes")
    planned = time.perf_counter() - start
    base, lanes = pieces(problem), _lanes(problem)
    size = problem.request.size
    tried: list[dict] = []

    def slots_of(rt: routes.Routing, shape: Shape) -> int:
        want = rt.routes_per_piece() * _per_share(shape, lanes)
        target = min(want, max(1, MAX_TRANSFERS // max(1, routes.transfers_per_slot(rt))))
        return base * max(1, target // base)

    fallback = None
    if budget.deadline is not None:
        shape = DEFAULT_SHAPE
        fallback = (0, shape, budget.timed_build(
            lambda: routes.build(problem, candidates[0], slots_of(candidates[0], shape), shape.stages, shape.taper)))
    if size is None or judge is None:
        index, shape = 0, DEFAULT_SHAPE
    else:
        def longest(rt: routes.Routing) -> int:
            out = 16
            while out < 256 and routes.transfers_per_slot(rt) * out * 8 <= MAX_TRANSFERS:
                out *= 2
            return out

        work = Costs(lambda rt, c: routes.transfers_per_slot(rt) * c.stages)

        def evaluate(rt: routes.Routing, c: Shape) -> float:
            alg = budget.timed_build(lambda: routes.build(problem, rt, slots_of(rt, c), c.stages, c.taper))
            us = judge.time_us(alg, size)
            work.record(rt, c, len(alg.transfers), effort_us(judge))
            return us

        picked, tried = pick(
            candidates, size, progress, name=lambda rt: rt.construction,
            rate=lambda rt: rt.achieved * size / rt.n_ranks,
            evaluate=evaluate, longest=longest, kind=problem.collective.kind, budget=budget,
            work=work, variants=False)
        index, shape = picked if picked is not None else (0, DEFAULT_SHAPE)
    routing = candidates[index]
    slots = slots_of(routing, shape)
    if fallback is not None and fallback[:2] == (index, shape):
        alg = fallback[2]
    else:
        alg = routes.build(problem, routing, slots, shape.stages, shape.taper)
    details = routing.details()
    details.update({"slots_per_part": slots, "stages": shape.stages, "taper": shape.taper,
                    "plan_seconds": round(planned, 3), "constructions": [rt.construction for rt in candidates]})
    if tried:
        details["pipeline_candidates"] = tried
    progress(f"chose {routing.construction}, {shape.describe()}: {len(alg.transfers):,} transfers to verify")
    return _finish(problem, alg, details, budget)


def _finish(problem: Problem, alg, details: dict, budget: _Budget):
    """The Solution; SolverTimeout carrying it when the time limit cut the planning or the
    search short; Interrupted carrying it on Ctrl-C."""
    from solvers import Solution

    if interrupt.requested():
        budget.cut = "Ctrl-C"
    if budget.cut == "Ctrl-C":
        details["interrupted"] = True
        raise Interrupted("stopped by Ctrl-C: the best packing schedule so far is kept", best=alg, details=details)
    if budget.cut is not None or (budget.deadline is not None and time.monotonic() >= budget.deadline):
        details["time_limited"] = True
        raise SolverTimeout(f"time limit of {problem.request.time_limit:g} s reached: the constructions planned "
                            "and pipeline shapes judged by then decided the schedule", best=alg, details=details)
    return Solution(alg, details)


def _construction(packing: Packing) -> str:
    return "+".join(sorted({p.construction for p in packing.phases()}))


MAX_TRANSFERS = 1_200_000  # transfers one judged or final schedule may have (``slot_count``)


def slot_count(packing: Packing, base: int, n: int, shape: Shape = DEFAULT_SHAPE, lanes: int = 1) -> int:
    """Slots per part: fine enough that shares follow the trees' rates (8 per tree of the root
    with most trees) and that every tree's share has the pipeline's stages (``_per_share``);
    within a budget of transfers; a multiple of the request's chunks. A tree's consecutive slots
    of one stage travel as one transfer per arc, so the budget bounds the stages (twice as many
    runs when staggered: a branch's shifted boundaries split a stage in two), not the slots,
    which are bounded by ``MAX_BUFFER_SLOTS`` per rank instead (``ROOTED_SLOTS`` for the one
    part of a broadcast or reduce); when even one slot per stage is
    over budget, the slots are (every slot may then be a transfer of its own), though never
    below one per tree, nor below three within three times the budget, else two within twice
    it (``LEAST_STAGES``: a pipeline of three or two stages; dgx-h100:128 allgather at 1 GiB
    takes 1.30x the bound with three, 3.1 million transfers, synthesized in 133 s with 5.0 GB;
    1.43x with two; 1.82x with one; four would take 7.5 GB to judge; a tree without a slot
    idles its links: torus:8x8x8's six trees per root on four slots took 1.5x the bound)."""
    per_slot = _per_slot(packing, n)
    want = packing.trees_per_root() * _per_share(shape, lanes)
    if per_slot * _runs_per_tree(packing, shape) <= MAX_TRANSFERS:
        cap = ROOTED_SLOTS if packing.root is not None else MAX_BUFFER_SLOTS // n
    else:  # but a slot per tree (every tree carries its share) and three stages, or two, within as many budgets
        cap = MAX_TRANSFERS // per_slot
        for stages in LEAST_STAGES:
            least = max(packing.trees_per_root(), stages)
            if per_slot * least <= stages * MAX_TRANSFERS:
                cap = max(cap, least)
                break
    target = min(want, max(1, cap))
    return base * max(1, target // base)


def _runs_per_tree(packing: Packing, shape: Shape) -> int:
    """Transfers per tree arc a shape makes (at most): one per stage, two when staggered."""
    return packing.trees_per_root() * shape.stages * (2 if shape.stagger else 1)


LEAST_STAGES = (3, 2)  # the pipelines kept over budget: three stages within three budgets, else two within two
# (``slot_count``)
MAX_BUFFER_SLOTS = 1 << 15  # slots of all parts together in a rank's buffer
ROOTED_SLOTS = 1 << 12  # slots of a broadcast's or reduce's one part, whatever the rank count (a
# rank's share of the all-parts budget left dgx-h100:16's 16 rail trees one slot per stage at 16
# stages: broadcast at 256 MiB 1.44x the bound, 1.32x with 48; amd8 at 64 MiB, 30 lanes, was
# 0.5% slower with 5,400 slots than with 4,096 and took 7x the time to synthesize)


def _per_share(shape: Shape, lanes: int) -> int:
    """Slots of one tree's share: at least 8, and per stage as many as ``lanes`` (a message
    takes one lane, and the lowering cuts a pair's slots of a step into one message per lane:
    a stage of one slot would leave the others idle), four when staggered (a boundary moves by
    whole slots; tapered too: four follow the geometric sizes closely enough there, and the
    lowering's work grows with the slots) and eight when only tapered (the stages follow the
    geometric sizes closely: dgx-h100:16 allgather at 1 GiB, 16 stages, 1.048x the bound with 8
    per stage, 1.054x with 4; ramped too, for its quarter stages, and with the own part's share
    changed, which the slots follow). Uniform
    stages are a multiple of ``lanes`` slots each, so every lane of a link gets the same bytes:
    8 slots over 5 lanes would go as 2, 2, 2, 1, 1 and take 1.25x the time of 8/5 per lane."""
    stages, taper, stagger = shape.stages, shape.taper, shape.stagger
    fine = taper < 1 or shape.ramp or shape.own != 1.0
    want = max(8, stages * max(lanes, 4 if stagger else 8 if fine else 1))
    if lanes > 1 and not fine:
        unit = stages * lanes
        want = -(-want // unit) * unit
    return want


def _lanes(problem: Problem) -> int:
    """Slots per stage the links' lanes ask for: the least common multiple of the lane counts of
    the flattened links (5 and 6 lanes: 30, which splits evenly over either), or the widest
    link's lanes when that multiple exceeds 64; at most 64."""
    counts = {link.lanes for link in problem.topology.flat().links}
    multiple = math.lcm(*counts)
    return multiple if multiple <= 64 else min(64, max(counts))


def _per_slot(packing: Packing, n: int) -> int:
    """Transfers one slot of every part costs: n - 1 per tree phase, for every root."""
    roots = 1 if packing.root is not None else n
    return roots * (n - 1) * max(len(packing.phases()), 1)
