"""The packing solver's run: plan the constructions, judge pipeline shapes, build the winner.

``synthesize_trees`` (allgather, reducescatter, allreduce, broadcast, reduce: the packed trees
of ``plan``, scheduled by ``schedule``) and ``synthesize_routes`` (gather and scatter: the
flow routes of ``routes``) plan the candidate constructions, then, with a size and a cost
judge, let ``search.pick`` judge pipeline shapes and keep the fastest; otherwise the best-rate
construction with 4 stages.

A time limit (from the start of the synthesis, ``ccl.core.interrupt.deadline``) or Ctrl-C cuts the
planning and the search short wherever they are (``Budget``: ``ccl.core.interrupt.abandoning``),
early enough for the final build, verification and writing to end at the limit: the
constructions made and the shapes judged by then decide (with none judged, the best-rate
construction with 4 stages), reported as SolverTimeout or Interrupted carrying that schedule;
with no construction made yet, SolverTimeout or Interrupted without one. Without a limit and
without Ctrl-C nothing is cut: the schedule is the one the full search picks.

The details report the rate the trees reach, the bound it meets, the construction, the trees
per root and every shape tried.
"""

from __future__ import annotations

import contextlib
import time

from ccl.core import interrupt
from ccl.core.collector import gc_paused
from ccl.core.errors import Interrupted, SolverTimeout
from ccl.core.judge import CostJudge, effort_us
from ccl.core.problem import Problem

from .. import Solution
from ..builders.common import pieces
from . import routes
from .phases import Packing
from .plan import plans
from .schedule import Shape, build, remote
from .search import DEFAULT_SHAPE, Costs, pick
from .slots import MAX_TRANSFERS, per_share, slot_count, slot_transfers, stage_lanes


class Budget:
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


def _nothing(problem: Problem, budget: Budget, what: str):
    """Stopped before any schedule existed: Ctrl-C or the time limit, with no best."""
    if interrupt.requested():
        raise Interrupted(f"stopped by Ctrl-C while {what}, before any schedule was built")
    raise SolverTimeout(f"time limit of {problem.request.time_limit:g} s reached while {what}, before any "
                        "schedule was built (raise --time-limit)")


def synthesize_trees(problem: Problem, judge: CostJudge | None, progress, start: float, budget: Budget):
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
    base, n, lanes = pieces(problem), problem.topology.n_ranks, stage_lanes(problem)
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
            while out < 256 and slot_transfers(pk, n) * pk.trees_per_root() * out * 8 <= MAX_TRANSFERS:
                out *= 2
            return out

        def estimate(pk: Packing, c: Shape) -> int:
            """Transfers a judgement builds, estimated, weighted by what they cost to build, lower
            and simulate: a reduction's (staged receives, local reductions) about 1.8 times a
            copy's, a coalesced shape's about 1.3 times an uncoalesced one's (its packs and
            unpacks)."""
            runs = pk.trees_per_root() * c.stages * (2 if c.stagger and kind == "allreduce" and not c.sequential else 1)
            weight = sum(1.8 if ph.reverse else 1.0 for ph in pk.phases()) / len(pk.phases())
            return int(slot_transfers(pk, n) * runs * (1.3 if c.coalesce else 1) * weight)

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


def synthesize_routes(problem: Problem, judge: CostJudge | None, progress, start: float, budget: Budget):
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
    base, lanes = pieces(problem), stage_lanes(problem)
    size = problem.request.size
    tried: list[dict] = []

    def slots_of(rt: routes.Routing, shape: Shape) -> int:
        want = rt.routes_per_piece() * per_share(shape, lanes)
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


def _finish(problem: Problem, alg, details: dict, budget: Budget):
    """The Solution; SolverTimeout carrying it when the time limit cut the planning or the
    search short; Interrupted carrying it on Ctrl-C."""
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
