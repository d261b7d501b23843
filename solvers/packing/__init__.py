"""Throughput-optimal tree packing (ForestColl class): ``--solver packing``.

1. Rate. The optimal allgather time per part is the cut ratio
   ``max_S |S ∩ ranks| / cap_out(S)`` over vertex sets S missing a rank, switches included
   (``solvers.bounds.max_cut_ratio``, exact: a Fraction p/q in integer capacity units).
   Scaling capacities by p, every root needs q units of rate; for broadcast the root needs
   the least max-flow to a rank (Edmonds).
2. Constructions (``plan.plans``), each with its rate measured on the physical links:
   * stitched (``stitch``): identical nodes, one node packed once, rail stars across nodes;
   * packed: switch vertices split off pair by pair while every rank can still receive the
     total demand (``split``), then spanning out-trees per root with integer multiplicities
     summing to the root's demand, packed within the arc capacities (``trees``);
   * two-hop (``twohop``): up to 16 fully linked ranks, the star and relay trees of each root
     weighted by an LP;
   * shallow: per root the tree of fewest hops over the flattened links (latency).
3. Schedule (``schedule``): each root's part is cut into slots, shared among its trees in
   proportion to their multiplicities, and pipelined down (allgather, broadcast) or up
   (reducescatter, reduce: trees of the reversed graph) the trees; allreduce is reducescatter
   then allgather, every slot starting down as soon as its sum is complete.

Slots and stages: each part is cut into enough slots that every tree's share follows its rate
and has the pipeline's stages (within a budget of transfers, a multiple of the request's
chunks). With ``--size`` the cost judge times every construction over pipeline shapes
(``_search``: stage counts by hill climbing, then tapered stages when long pipelines win) and
keeps the fastest; otherwise the best-rate construction with 4 stages.

A time limit (from the start of the synthesis, ``ccl.interrupt.deadline``) or Ctrl-C cuts the
planning and the search short wherever they are (``_Budget``: ``ccl.interrupt.abandoning``),
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

from ccl import interrupt
from ccl.collective import builtin
from ccl.errors import InputError, Interrupted, SolverTimeout
from ccl.judge import CostJudge
from ccl.problem import Problem

from ..common import pieces
from . import routes
from .plan import KINDS as TREE_KINDS
from .plan import Packing, Phase, plan, plans
from .schedule import build

__all__ = ["KINDS", "Packing", "plan", "plans", "synthesize"]

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
    size = problem.request.size
    tried: list[dict] = []
    fallback = None  # (packing index, shape, Algorithm): the schedule kept if the search is cut
    if budget.cut is None and budget.deadline is not None:
        # under a time limit, the best-rate schedule first: kept if nothing judged beats it in
        # time, and its build time sets the reserve
        shape = DEFAULT_SHAPE
        fallback = (0, shape, budget.timed_build(
            lambda: build(problem, candidates[0], slot_count(candidates[0], base, n, shape, lanes), *shape)))
    if size is None or judge is None or budget.cut is not None:
        index, shape = 0, DEFAULT_SHAPE
    else:
        proxies: dict[int, object] = {}

        def proxy(pk: Packing):
            if id(pk) not in proxies:
                proxies[id(pk)] = _proxy(problem, pk)
            return proxies[id(pk)]

        def longest(pk: Packing) -> int:
            out = 16
            while out < 256 and _per_slot(pk, n) * pk.trees_per_root() * out * 8 <= MAX_TRANSFERS:
                out *= 2
            return out

        picked, tried = _pick(
            candidates, size, progress, name=_construction,
            rate=lambda pk: max(ph.achieved for ph in pk.phases()) * (size if pk.root is not None else size / n),
            evaluate=lambda pk, c: _time(problem, pk, base, n, lanes, c, judge, size, proxy(pk), budget),
            tapered=lambda pk: proxy(pk) is None or pk.kind == "reducescatter", longest=longest,
            judged_as=lambda pk: "allgather" if proxy(pk) is not None else kind, budget=budget,
            stagger=lambda pk: n <= STAGGER_RANKS and kind in STAGGER_KINDS)
        index, shape = picked if picked is not None else (0, DEFAULT_SHAPE)
    packing = candidates[index]
    slots = slot_count(packing, base, n, shape, lanes)
    if fallback is not None and fallback[:2] == (index, shape):
        alg = fallback[2]
    else:
        alg = build(problem, packing, slots, *shape)
    details = packing.details()
    details.update({"slots_per_part": slots, "stages": shape[0], "taper": shape[1], "stagger": shape[2],
                    "plan_seconds": round(planned, 3)})
    if len(candidates) > 1:
        details["constructions"] = [_construction(p) for p in candidates]
    if tried:
        details["pipeline_candidates"] = tried
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

    def slots_of(rt: routes.Routing, shape: tuple[int, float, bool]) -> int:
        want = rt.routes_per_piece() * _per_share(shape, lanes)
        target = min(want, max(1, MAX_TRANSFERS // max(1, routes.transfers_per_slot(rt))))
        return base * max(1, target // base)

    fallback = None
    if budget.deadline is not None:
        shape = DEFAULT_SHAPE
        fallback = (0, shape, budget.timed_build(
            lambda: routes.build(problem, candidates[0], slots_of(candidates[0], shape), *shape[:2])))
    if size is None or judge is None:
        index, shape = 0, DEFAULT_SHAPE
    else:
        def longest(rt: routes.Routing) -> int:
            out = 16
            while out < 256 and routes.transfers_per_slot(rt) * out * 8 <= MAX_TRANSFERS:
                out *= 2
            return out

        def evaluate(rt: routes.Routing, c: tuple[int, float, bool]) -> float:
            alg = budget.timed_build(lambda: routes.build(problem, rt, slots_of(rt, c), *c[:2]))
            return judge.time_us(alg, size)

        picked, tried = _pick(
            candidates, size, progress, name=lambda rt: rt.construction,
            rate=lambda rt: rt.achieved * size / rt.n_ranks,
            evaluate=evaluate, tapered=lambda rt: True, longest=longest, judged_as=lambda rt: rt.kind,
            budget=budget, stagger=lambda rt: False)
        index, shape = picked if picked is not None else (0, DEFAULT_SHAPE)
    routing = candidates[index]
    slots = slots_of(routing, shape)
    if fallback is not None and fallback[:2] == (index, shape):
        alg = fallback[2]
    else:
        alg = routes.build(problem, routing, slots, *shape[:2])
    details = routing.details()
    details.update({"slots_per_part": slots, "stages": shape[0], "taper": shape[1],
                    "plan_seconds": round(planned, 3), "constructions": [rt.construction for rt in candidates]})
    if tried:
        details["pipeline_candidates"] = tried
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


def _pick(candidates: list, size: float, progress, *, name, rate, evaluate, tapered, longest,
          judged_as, budget: _Budget, stagger) -> tuple[tuple[int, tuple[int, float, bool]] | None, list[dict]]:
    """The judged search: every construction over the uniform pipeline shapes (``_search``),
    skipping those whose bandwidth time alone (``rate``) exceeds the best time so far, then the
    finer shapes (``_refine``) of the construction that leads, until the budget is due (the best
    shape judged by then wins; each judgement runs in ``budget.region()`` and one cut short is
    given up). Returns (the winner's index and shape, or None when nothing was judged) and every
    shape tried with its time."""
    best: tuple[float, int, tuple[int, float, bool]] | None = None
    tried: list[dict] = []
    seen: dict[int, dict[tuple[int, float, bool], float]] = {}

    def guarded(candidate, c):
        with budget.region():
            return evaluate(candidate, c)

    def record(index: int, run) -> None:
        nonlocal best
        candidate = candidates[index]
        times = seen.setdefault(index, {})
        known = set(times)
        try:
            run(lambda c, x=candidate: guarded(x, c), times)
        except interrupt.Abandon:
            budget.abandoned()
        for shape, us in times.items():
            if shape in known:
                continue
            tried.append({"construction": name(candidate), "stages": shape[0], "taper": shape[1],
                          "stagger": shape[2], "judged_as": judged_as(candidate), "time_us": round(us, 3)})
            progress(f"{name(candidate)}, {shape[0]} stages, taper {shape[1]}"
                     f"{', staggered' if shape[2] else ''}: {us:.4g} us")
            if best is None or us < best[0]:
                best = (us, index, shape)

    def stopped() -> bool:
        if budget.cut is not None or budget.due():
            if budget.cut is None:
                budget.abandoned()
            return True
        return False

    for index, candidate in enumerate(candidates):
        if stopped():
            break
        if best is not None and rate(candidate) >= best[0]:
            progress(f"{name(candidate)}: its rate alone takes longer than the best so far")
            continue
        record(index, lambda ev, times, x=candidate: _search(ev, longest=longest(x), seen=times))
    if best is not None and not stopped():
        lead = candidates[best[1]]
        record(best[1], lambda ev, times: _refine(ev, times, tapered=tapered(lead), longest=longest(lead),
                                                  stagger=stagger(lead)))
    return (None if best is None else (best[1], best[2])), tried


DEFAULT_STAGES = 4
DEFAULT_SHAPE = (DEFAULT_STAGES, 1.0, False)
MAX_TRANSFERS = 800_000
STAGGER_RANKS = 64  # above this many ranks staggered shapes are not judged: their simulation (every
# shared link's fair shares recomputed at each of many more distinct instants) takes minutes
STAGGER_KINDS = ("allgather", "broadcast")  # reductions staggered chain their partial sums through
# many more local ops, which the simulator's dependency contraction walks one level at a time
STAGGER_STAGES = 64  # the most stages a staggered shape is judged with
PROXY_RANKS = 32  # above this many ranks, allreduce and reducescatter pipelines are judged as allgathers


def _construction(packing: Packing) -> str:
    return "+".join(sorted({p.construction for p in packing.phases()}))


def _search(evaluate, longest: int = 16, seen: dict | None = None):
    """Uniform pipeline shapes (stages, taper 1, not staggered) tried by the judge, with their
    times: stage counts by hill climbing from 4 over 1, 2, 4, 8, 16 (up to ``longest``, a power
    of two; rooted trees carry few transfers per slot and afford up to 256). ``seen``: the dict
    the times go to as they come (the caller keeps them if the search is abandoned)."""
    ladder = [(1 << k, 1.0, False) for k in range(longest.bit_length())]
    if seen is None:
        seen = {}

    def ev(c: tuple[int, float, bool]) -> float:
        if c not in seen:
            seen[c] = evaluate(c)
        return seen[c]

    i = 2
    ev(ladder[i])
    for step in (-1, 1):
        j = i
        while 0 <= j + step < len(ladder) and ev(ladder[j + step]) < ev(ladder[j]):
            j += step
        if j != i:
            break  # improving one way; the other side of a unimodal curve is worse
    return list(seen.items())


def _refine(evaluate, seen: dict, tapered: bool = True, longest: int = 16, stagger: bool = False):
    """Finer shapes around the best uniform one in ``seen`` (the leading construction's):
    3/2 and 3/4 of its stage count (the time is flat near its minimum, but a power of two can
    be a tenth off); then, when the best has 8 or more stages (bandwidth binds) and ``tapered``,
    two tapered shapes whose last pieces are small (not for an allreduce under the allgather
    proxy: its slots start down as their sums complete, and tapering the proxy favoured did not
    carry over; a reducescatter's growing stages are the time reverse of the allgather's
    shrinking ones, so the proxy holds); with ``stagger``, staggered shapes (each branch of a
    tree shifts its stage boundaries, ``schedule._phase``) from twice the best stage count,
    doubled or halved while that pays (at most ``STAGGER_STAGES``), and the best of those
    tapered (allgather and broadcast on up to ``STAGGER_RANKS`` ranks): a link shared by several
    pairs no longer sits idle while every pair waits out its latency at the same stage
    boundary, which lets longer pipelines pay."""

    def ev(c: tuple[int, float, bool]) -> float:
        if c not in seen:
            seen[c] = evaluate(c)
        return seen[c]

    def best() -> tuple[int, float, bool]:
        return min(seen, key=lambda c: (seen[c], c))

    top = best()
    for k in (top[0] * 3 // 2, top[0] * 3 // 4):
        if 2 <= k <= longest:
            ev((k, 1.0, False))
    top = best()
    if tapered and top[0] >= 8:
        for c in ((top[0] * 3 // 4, 0.85, False), (top[0], 0.9, False)):
            ev(c)
    if stagger and top[0] >= 2:
        most = min(longest, STAGGER_STAGES)
        k = min(max(4, 2 * top[0]), most)
        ev((k, 1.0, True))
        for factor in (2, 0.5):
            j = k
            while 4 <= int(j * factor) <= most and ev((int(j * factor), 1.0, True)) < ev((j, 1.0, True)):
                j = int(j * factor)
            if j != k:
                break
        staggered = min((c for c in seen if c[2]), key=lambda c: (seen[c], c))
        if tapered and staggered[0] >= 8:
            ev((staggered[0], 0.95, True))
    return list(seen.items())


def _time(problem: Problem, packing: Packing, base: int, n: int, lanes: int, shape: tuple[int, float, bool],
          judge: CostJudge, size: float, proxy, budget: _Budget | None = None) -> float:
    if proxy is not None:
        problem, packing = proxy

    def make():
        return build(problem, packing, slot_count(packing, base, n, shape, lanes), *shape)

    return judge.time_us(make() if budget is None else budget.timed_build(make), size)


def _proxy(problem: Problem, packing: Packing):
    """For allreduce and reducescatter on many ranks: the allgather over the same trees (the
    reduce trees read forward), which pipelines the same way and simulates several times
    faster; None when the schedule is judged as itself."""
    if packing.kind not in ("allreduce", "reducescatter") or problem.topology.n_ranks <= PROXY_RANKS:
        return None
    phase = packing.down if packing.down is not None else packing.up
    assert phase is not None
    topo = problem.topology
    for t in phase.trees:
        for v, p in t.parent.items():
            if topo.flat_link(p, v) is None:
                return None
    forward = Phase(False, phase.trees, phase.optimal, phase.achieved, phase.exact, phase.construction)
    proxy_packing = Packing("allgather", packing.n_ranks, None, forward, None)
    proxy_problem = Problem(topo, builtin("allgather", n=topo.n_ranks), problem.request)
    return proxy_problem, proxy_packing


def slot_count(packing: Packing, base: int, n: int, shape: tuple[int, float, bool] = DEFAULT_SHAPE,
               lanes: int = 1) -> int:
    """Slots per part: fine enough that shares follow the trees' rates (8 per tree of the root
    with most trees) and that every tree's share has the pipeline's stages (``_per_share``);
    within a budget of transfers; a multiple of the request's chunks. A tree's consecutive slots
    of one stage travel as one transfer per arc, so the budget bounds the stages (twice as many
    runs when staggered: an allreduce's slots go down as the staggered sums complete), not the
    slots, which are bounded by ``MAX_BUFFER_SLOTS`` per rank instead; when even one slot per
    stage is over budget, the slots are (every slot may then be a transfer of its own)."""
    per_slot = _per_slot(packing, n)
    want = packing.trees_per_root() * _per_share(shape, lanes)
    runs = packing.trees_per_root() * shape[0] * (2 if shape[2] else 1)
    if per_slot * runs <= MAX_TRANSFERS:
        cap = MAX_BUFFER_SLOTS // n
    else:
        cap = MAX_TRANSFERS // per_slot
    target = min(want, max(1, cap))
    return base * max(1, target // base)


MAX_BUFFER_SLOTS = 1 << 15  # slots of all parts together in a rank's buffer


def _per_share(shape: tuple[int, float, bool], lanes: int) -> int:
    """Slots of one tree's share: at least 8, and per stage as many as ``lanes`` (a message
    takes one lane, and the lowering cuts a pair's slots of a step into one message per lane:
    a stage of one slot would leave the others idle), eight when tapered (the stages follow the
    geometric sizes closely: dgx-h100:16 allgather at 1 GiB, 16 stages, 1.048x the bound with 8
    per stage, 1.054x with 4) and four when staggered (a boundary moves by whole slots). Uniform
    stages are a multiple of ``lanes`` slots each, so every lane of a link gets the same bytes:
    8 slots over 5 lanes would go as 2, 2, 2, 1, 1 and take 1.25x the time of 8/5 per lane."""
    stages, taper, stagger = shape
    want = max(8, stages * max(lanes, 8 if taper < 1 else 4 if stagger else 1))
    if lanes > 1 and taper >= 1:
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
