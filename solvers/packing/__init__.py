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
    deadline = interrupt.deadline(problem.request.time_limit)  # bounds the pipeline-shape search

    quiet = os.environ.get("CCL_QUIET", "") not in ("", "0")

    def progress(message: str) -> None:  # on stderr, once the synthesis has taken a second
        _stop_check()
        if not quiet and time.perf_counter() - start > 1.0:
            print(f"ccl: packing: {message}", file=sys.stderr, flush=True)

    kind = problem.collective.kind
    if kind in routes.KINDS:
        return _synthesize_routes(problem, judge, progress, start, deadline)
    candidates = plans(problem.topology, kind, problem.collective.root, progress)
    planned = time.perf_counter() - start
    progress(f"planned in {planned:.1f} s: " + ", ".join(
        f"{_construction(p)} at {max(ph.achieved / ph.optimal for ph in p.phases()):.3f}x the bound rate"
        for p in candidates))
    base, n, lanes = pieces(problem), problem.topology.n_ranks, _lanes(problem)
    size = problem.request.size
    tried: list[dict] = []
    if size is None or judge is None:
        packing, shape = candidates[0], (DEFAULT_STAGES, 1.0)
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

        index, shape, tried = _pick(
            candidates, size, progress, name=_construction,
            rate=lambda pk: max(ph.achieved for ph in pk.phases()) * (size if pk.root is not None else size / n),
            evaluate=lambda pk, c: _time(problem, pk, base, n, lanes, c, judge, size, proxy(pk)),
            tapered=lambda pk: proxy(pk) is None or pk.kind == "reducescatter", longest=longest,
            judged_as=lambda pk: "allgather" if proxy(pk) is not None else kind, deadline=deadline)
        packing = candidates[index]
    slots = slot_count(packing, base, n, shape, lanes)
    alg = build(problem, packing, slots, *shape)
    details = packing.details()
    details.update({"slots_per_part": slots, "stages": shape[0], "taper": shape[1],
                    "plan_seconds": round(planned, 3)})
    if len(candidates) > 1:
        details["constructions"] = [_construction(p) for p in candidates]
    if tried:
        details["pipeline_candidates"] = tried
    return _finish(problem, alg, details, deadline)


def _synthesize_routes(problem: Problem, judge: CostJudge | None, progress, start: float,
                       deadline: float | None = None):
    """Gather and scatter: flow routes or direct ones (``routes``), judged like the trees."""
    root = problem.collective.root
    assert root is not None
    candidates = routes.plans(problem.topology, problem.collective.kind, root)
    planned = time.perf_counter() - start
    base, lanes = pieces(problem), _lanes(problem)
    size = problem.request.size
    tried: list[dict] = []

    def slots_of(rt: routes.Routing, shape: tuple[int, float]) -> int:
        want = rt.routes_per_piece() * _per_share(shape, lanes)
        target = min(want, max(1, MAX_TRANSFERS // max(1, routes.transfers_per_slot(rt))))
        return base * max(1, target // base)

    if size is None or judge is None:
        routing, shape = candidates[0], (DEFAULT_STAGES, 1.0)
    else:
        def longest(rt: routes.Routing) -> int:
            out = 16
            while out < 256 and routes.transfers_per_slot(rt) * out * 8 <= MAX_TRANSFERS:
                out *= 2
            return out

        index, shape, tried = _pick(
            candidates, size, progress, name=lambda rt: rt.construction,
            rate=lambda rt: rt.achieved * size / rt.n_ranks,
            evaluate=lambda rt, c: _stop_check() or judge.time_us(routes.build(problem, rt, slots_of(rt, c), *c), size),
            tapered=lambda rt: True, longest=longest, judged_as=lambda rt: rt.kind, deadline=deadline)
        routing = candidates[index]
    slots = slots_of(routing, shape)
    alg = routes.build(problem, routing, slots, *shape)
    details = routing.details()
    details.update({"slots_per_part": slots, "stages": shape[0], "taper": shape[1],
                    "plan_seconds": round(planned, 3), "constructions": [rt.construction for rt in candidates]})
    if tried:
        details["pipeline_candidates"] = tried
    return _finish(problem, alg, details, deadline)


def _finish(problem: Problem, alg, details: dict, deadline: float | None):
    """The Solution, or SolverTimeout carrying it when the time limit cut the search short."""
    from solvers import Solution

    if deadline is not None and time.monotonic() >= deadline:
        details["time_limited"] = True
        raise SolverTimeout(f"time limit of {problem.request.time_limit:g} s reached: the pipeline shapes judged by "
                            "then decided the schedule", best=alg, details=details)
    return Solution(alg, details)


def _pick(candidates: list, size: float, progress, *, name, rate, evaluate, tapered, longest,
          judged_as, deadline: float | None = None) -> tuple[int, tuple[int, float], list[dict]]:
    """The judged search: every construction over pipeline shapes (``_search``), skipping those
    whose bandwidth time alone (``rate``) exceeds the best time so far, until ``deadline``
    (``time.monotonic()``; the best shape judged by then wins). Returns the winner's index, its
    shape and every shape tried with its time."""
    best: tuple[float, int, tuple[int, float]] | None = None
    tried: list[dict] = []
    for index, candidate in enumerate(candidates):
        if best is not None and interrupt.stop_due(deadline):
            break
        if best is not None and rate(candidate) >= best[0]:
            progress(f"{name(candidate)}: its rate alone takes longer than the best so far")
            continue
        for shape, us in _search(lambda c, x=candidate: evaluate(x, c), tapered=tapered(candidate),
                                 longest=longest(candidate)):
            tried.append({"construction": name(candidate), "stages": shape[0], "taper": shape[1],
                          "judged_as": judged_as(candidate), "time_us": round(us, 3)})
            progress(f"{name(candidate)}, {shape[0]} stages, taper {shape[1]}: {us:.4g} us")
            if best is None or us < best[0]:
                best = (us, index, shape)
            if interrupt.stop_due(deadline):
                break
    assert best is not None
    return best[1], best[2], tried


DEFAULT_STAGES = 4
MAX_TRANSFERS = 800_000
PROXY_RANKS = 32  # above this many ranks, allreduce and reducescatter pipelines are judged as allgathers


def _construction(packing: Packing) -> str:
    return "+".join(sorted({p.construction for p in packing.phases()}))


def _search(evaluate, tapered: bool = True, longest: int = 16):
    """Pipeline shapes (stages, taper) tried by the judge, with their times: uniform stage
    counts by hill climbing from 4 over 1, 2, 4, 8, 16 (up to ``longest``, a power of two;
    rooted trees carry few transfers per slot and afford up to 256), then, when the best has 8 or more
    stages (bandwidth binds) and ``tapered``, two tapered shapes whose last pieces are small
    (not for an allreduce under the allgather proxy: its slots start down as their sums
    complete, and tapering the proxy favoured did not carry over; a reducescatter's growing
    stages are the time reverse of the allgather's shrinking ones, so the proxy holds)."""
    ladder = [(1 << k, 1.0) for k in range(longest.bit_length())]
    seen: dict[tuple[int, float], float] = {}

    def ev(c: tuple[int, float]) -> float:
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
    best = min(seen, key=lambda c: (seen[c], c))
    if tapered and best[0] >= 8:
        for c in ((best[0] * 3 // 4, 0.85), (best[0], 0.9)):
            ev(c)
    return list(seen.items())


def _stop_check() -> None:
    """Between steps (progress lines, each shape judged): Ctrl-C inside a caller's cooperative
    region (``ccl.interrupt``; the tuner's) stops the packing here."""
    if interrupt.requested():
        raise Interrupted("stopped by Ctrl-C while packing trees")


def _time(problem: Problem, packing: Packing, base: int, n: int, lanes: int, shape: tuple[int, float],
          judge: CostJudge, size: float, proxy) -> float:
    _stop_check()
    if proxy is not None:
        problem, packing = proxy
    return judge.time_us(build(problem, packing, slot_count(packing, base, n, shape, lanes), *shape), size)


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


def slot_count(packing: Packing, base: int, n: int, shape: tuple[int, float] = (DEFAULT_STAGES, 1.0),
               lanes: int = 1) -> int:
    """Slots per part: fine enough that shares follow the trees' rates (8 per tree of the root
    with most trees) and that every tree's share has the pipeline's stages (``_per_share``);
    within a budget of transfers; a multiple of the request's chunks."""
    per_slot = _per_slot(packing, n)
    want = packing.trees_per_root() * _per_share(shape, lanes)
    target = min(want, max(1, MAX_TRANSFERS // per_slot))
    return base * max(1, target // base)


def _per_share(shape: tuple[int, float], lanes: int) -> int:
    """Slots of one tree's share: at least 8, and per stage as many as ``lanes`` (a message
    takes one lane, and the lowering cuts a pair's slots of a step into one message per lane:
    a stage of one slot would leave the others idle) and four when tapered. Uniform stages are
    a multiple of ``lanes`` slots each, so every lane of a link gets the same bytes: 8 slots
    over 5 lanes would go as 2, 2, 2, 1, 1 and take 1.25x the time of 8/5 per lane."""
    stages, taper = shape
    want = max(8, stages * max(lanes, 4 if taper < 1 else 1))
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
