"""The judged search of the packing solver: which construction, and which pipeline shape
(``schedule.Shape``: stages, taper, stagger, coalescing, leaves first, ramps, the root's own
share), the cost judge finds fastest at the requested size.

``pick`` runs the whole search over the constructions (``_first``, then ``_search``: stage
counts by hill climbing, then ``_refine``: the finer shapes around the best), within a budget
of what the judgements cost (``_Work``, ``Costs``: the transfers built and the judge's effort,
both from counts, so the same request judges the same shapes on every machine) and within the
synthesis's deadline (the caller's budget: ``region``, ``due``, ``abandoned``, ``cut``).
"""

from __future__ import annotations

import math

from ccl.core import interrupt
from ccl.core.collective import ROOTED_KINDS

from .phases import Packing
from .schedule import Shape, root_leaves
from .stages import RAMPS, ramp_fits

DEFAULT_STAGES = 4
DEFAULT_SHAPE = Shape(DEFAULT_STAGES)
STAGGER_STAGES = 64  # the most stages a staggered shape is judged with
RUNNER_UP = 0.05  # the second construction is refined too when its best uniform time is this close
SEARCH_WORK = 2_500_000  # transfers the judgements of one search may cost in all (``US_PER_TRANSFER``
# each to build, lower and simulate: sized so that the search at 128 ranks stays within about a
# minute, benchmarks/results/scale.md; a judgement whose simulation costs more counts as more,
# ``Costs``); the first judgement of the first construction always runs, and on small machines
# everything fits


def _has_root_leaves(packing: Packing) -> bool:
    """Whether a tree's root has a child that is a leaf (``Shape.lead`` changes something)."""
    return any(root_leaves(t) for phase in packing.phases() for t in phase.trees)


class _Work:
    """The search's work budget: judgements are run while the estimated transfers they build
    (``work(shape)``), summed over the whole search, stay within ``SEARCH_WORK``; the first
    judgement of a search always runs. Deterministic (no clock): the same request judges the
    same shapes on every machine."""

    def __init__(self, work, spent: list[int] | None) -> None:
        self.work = work
        self.spent = spent if spent is not None else [0]

    def affordable(self, c: Shape, seen: dict) -> bool:
        return (c in seen or self.work is None or not self.spent[0]
                or self.spent[0] + self.work(c) <= SEARCH_WORK)

    def judged(self, c: Shape, seen: dict, evaluate) -> float:
        """``c``'s time, judged (and charged) unless ``seen`` has it; the charge comes after the
        judgement, when ``work(c)`` is what it cost where that was measured."""
        if c not in seen:
            seen[c] = evaluate(c)
            if self.work is not None:
                self.spent[0] += self.work(c)
        return seen[c]


class Costs:
    """The work function of a search (``_Work``), in transfers: a judgement's estimate
    (``estimate(candidate, shape)``, the transfers it builds weighted by what they cost) until
    it is judged, then what it cost: the transfers built (``BUILD_SHARE`` of one each) plus the
    judge's effort (``ccl.core.judge.effort_us``, from counts) in ``US_PER_TRANSFER``, never less
    than the estimate. Shapes not judged yet are estimated times the most a judgement of the
    same construction and kind of shape (staggered or not, coalesced or not) cost over its
    estimate: the kinds differ most (a coalesced shape's messages carry many pieces each, and
    simulating it computes far fewer fair rates than an uncoalesced one), so a kind not judged
    yet has its plain estimate. So a search whose simulations are slow (the fair shares of many
    flows under the NVSwitch ports and the NICs) ends within the budget's time instead of its
    transfers'. Deterministic: counts, not the clock."""

    def __init__(self, estimate) -> None:
        self.estimate = estimate
        self.measured: dict[tuple[int, Shape], int] = {}
        self.ratio: dict[tuple[int, bool, bool], float] = {}

    def __call__(self, candidate, c: Shape) -> int:
        key = (id(candidate), c)
        if key in self.measured:
            return self.measured[key]
        return int(self.estimate(candidate, c) * self.ratio.get((id(candidate), c.stagger, c.coalesce), 1.0))

    def record(self, candidate, c: Shape, transfers: int, effort: float | None) -> None:
        """A judgement of ``c`` built ``transfers`` and cost the judge ``effort`` us."""
        if effort is None:
            return
        guess = max(1, self.estimate(candidate, c))
        cost = BUILD_SHARE * transfers + effort / US_PER_TRANSFER
        self.measured[(id(candidate), c)] = max(guess, int(cost))
        key = (id(candidate), c.stagger, c.coalesce)
        self.ratio[key] = max(self.ratio.get(key, 1.0), cost / guess)


US_PER_TRANSFER = 20.0  # what ``SEARCH_WORK`` assumes a transfer costs to build, lower and simulate
BUILD_SHARE = 0.45  # of which building it


LEAD_KINDS = ("allgather", "broadcast", "reducescatter", "reduce")  # where a uniform shape may lead with leaves
CLIMB_GAIN = 0.002  # a stage count doubled or halved must gain this much for the climb to go on (the
# curve is flat near its minimum, and long pipelines cost the most to judge: a step that gains
# almost nothing would buy the next, dearest judgement)


def _search(evaluate, longest: int = 16, seen: dict | None = None, work=None, spent: list[int] | None = None,
            lead: bool = False):
    """Uniform pipeline shapes (stages, taper 1, nothing else) tried by the judge, with their
    times: stage counts by hill climbing (while a step gains ``CLIMB_GAIN``) from 4 over 1, 2, 4, 8, 16 (up to ``longest``, a power
    of two; rooted trees carry few transfers per slot and afford up to 256), within the work
    budget (``_Work``). With ``lead`` (the trees' roots have leaf children) 4 stages are judged
    both ways (``Shape.lead``) and the climb keeps the faster. ``seen``: the dict the times go
    to as they come (the caller keeps them if the search is abandoned)."""
    if seen is None:
        seen = {}
    budget = _Work(work, spent)

    def ev(c: Shape) -> float:
        return budget.judged(c, seen, evaluate)

    i = 2
    if not budget.affordable(Shape(1 << i), seen):
        return list(seen.items())
    ev(Shape(1 << i))
    lead = lead and budget.affordable(Shape(1 << i, lead=True), seen) and \
        ev(Shape(1 << i, lead=True)) < ev(Shape(1 << i))
    ladder = [Shape(1 << k, lead=lead) for k in range(longest.bit_length())]
    for step in (-1, 1):
        j = i
        while (0 <= j + step < len(ladder) and budget.affordable(ladder[j + step], seen)
               and ev(ladder[j + step]) < ev(ladder[j]) * (1 - CLIMB_GAIN)):
            j += step
        if j != i:
            break  # improving one way; the other side of a unimodal curve is worse
    return list(seen.items())


def _refine(evaluate, seen: dict, longest: int = 16, kind: str = "allgather", work=None,
            variants: bool = True, spent: list[int] | None = None, own: bool = False, leaves: bool = False):
    """Finer shapes around the best uniform one in ``seen`` (the leading construction's), the
    most valuable first, within the search's work budget (``_Work``: all of them on up to about
    64 ranks; at 128 the first few):

    0. when the best uniform shape has 8 or more stages, 3/2 and 3/4 of its count (see 5.):
       first when it is the longest the climb may reach (then 3/2 of it too: on the largest
       machines the best count lies beyond the climb's longest; and 3/4 only when 3/2 does not
       gain, as the climb goes one way), else (``variants``) after the first seed of 1. (which
       gains more, and where simulations are slow the budget ends after a few); when it has
       one, the same coalesced (small sizes: a rank's pieces for one peer in one message);
    1. (``variants``) at twice the best stage count (up to 16; the count itself above): staggered and coalesced (and, for
       allreduce, sequential) with stages tapered by 0.95, whose stage count is then climbed
       (2.), then the same untapered, coalesced alone (and for allreduce staggered and
       coalesced but pipelined). Staggering (``schedule._phase``) keeps the pairs
       sharing a port from waiting out their message latency at the same stage boundary, so
       longer pipelines pay; coalescing sends the pieces of many roots a relay forwards to one
       peer in a step as one message (NVSwitch stars after the NIC rails); an allreduce whose
       allgather half follows its reducescatter half keeps each half's pipeline in its own
       stagger; with ``leaves`` (the trees' roots have leaf children) an allreduce's seeds
       also have its sequential halves tapered with leaves first, each half then as the
       reducescatter and the allgather are fastest alone (judged after the first seed's climb:
       at 128 ranks it is the slower of the two, and the budget ends before it);
    2. the best so far with its stage count doubled or halved while that pays (at most
       ``STAGGER_STAGES`` when staggered);
    3. tapered stages (when the best has 8 or more: bandwidth binds), 0.95 of the one before:
       the last pieces small, whose trip after the bottleneck is the pipeline's tail (up a tree
       the first ones, whose climb to it is the fill); then 5. (at 128 ranks the budget may
       not reach the other seeds);
    4. the other seeds of 1., and 2. again;
    5. 3/2 and 3/4 of the best stage count (the time is flat near its minimum, but a power of
       two can be a tenth off), up to 3/2 of ``longest`` (0. stays within it);
    6. tapered again: 0.95, 0.9, and 0.85 with 3/4 of the stages;
    7. the best with the root's leaf children served the other way (``Shape.lead``: in one
       message, or pipelined like the rest), where that applies;
    8. the best unstaggered shape coalesced the other way (the steps before can leave a uniform
       best whose coalesced twin was never judged);
    9. broadcast and reduce: the best with each other ramp (``Shape.ramp``: none, steep,
       gentle), and with ``own`` (the construction has trees whose root sends only to other
       nodes: the root's own part of the rail constructions) the best with that part's share at
       each of ``OWN_SHARES``, with each ramp; the stage count of the winner climbed, then 3/2
       and 3/4 of it (a gentle ramp's pieces grow over three stages, and fewer stages then
       pay). The own part goes down the root's rail and back over the other rails, a longer
       path than the others', and a ramp helps only once that path is no longer the last to
       finish: the two are judged together.
   10. broadcast and reduce: a polish. The winner's neighbours, a stage more and a stage fewer,
       and with ``own`` its own part's share ``OWN_STEP`` lighter and heavier (each pair of
       those), then the same around the new winner while one wins, ``POLISH_ROUNDS`` moves
       at most. Times over stage counts and shares are not smooth where a ramp and the own
       part's longer path meet: the best of 9. can lie a few stages and share steps away from
       a faster shape.

    The seeds of 1. serve the root's leaf children as the best uniform shape does."""

    budget = _Work(work, spent)

    def affordable(c: Shape) -> bool:
        return budget.affordable(c, seen)

    def ev(c: Shape) -> float:
        return budget.judged(c, seen, evaluate)

    def best() -> Shape:
        return min(seen, key=lambda c: (seen[c], c))

    def limit(c: Shape) -> int:
        return min(longest, STAGGER_STAGES) if c.stagger else longest

    def climb() -> None:
        start = best()
        for factor in (2, 0.5):
            j = start
            while True:
                nxt = j._replace(stages=int(j.stages * factor))
                if not (2 <= nxt.stages <= limit(nxt)) or not affordable(nxt) or ev(nxt) >= ev(j) * (1 - CLIMB_GAIN):
                    break
                j = nxt
            if j != start:
                break

    def thirds(beyond: bool = True, one_side: bool = False) -> None:
        """3/2 and 3/4 of the best stage count (between the powers of two); with ``beyond`` up to
        3/2 of the longest the climb may reach (not for uniform shapes, whose long pipelines
        cost the most to simulate); with
        ``one_side``, 3/4 only where 3/2 does not gain (the climb's rule: the other side of
        the curve's minimum is worse)."""
        top = best()
        for k in (top.stages * 3 // 2, top.stages * 3 // 4):
            c = top._replace(stages=k)
            if one_side and k < top.stages and best() != top:
                break
            if 2 <= k <= (limit(c) * 3 // 2 if beyond else limit(c)) and affordable(c):
                ev(c)

    capped = best().stages >= longest  # the climb stopped at its longest pipeline: longer ones first
    if best().stages >= 8 and (not variants or capped):  # the uniform optimum between powers of two
        thirds(beyond=capped, one_side=capped)  # capped: the climb went up all the way, so the
        # longer count may gain, and the shorter one is judged only when it does not
    top = best()
    if variants and top.stages == 1 and affordable(top._replace(coalesce=True)):
        ev(top._replace(coalesce=True))  # small sizes: one message per pair and step
    seeds = []
    if variants and top.stages >= 2:
        k = min(max(4, 2 * top.stages if top.stages <= 16 else top.stages), longest)
        allreduce = kind == "allreduce"
        first = Shape(k, stagger=True, coalesce=True, sequential=allreduce, lead=top.lead)
        seeds = [first._replace(taper=0.95), first, Shape(k, coalesce=True, lead=top.lead)]
        if allreduce:
            seeds.append(Shape(k, stagger=True, coalesce=True))
            if leaves:  # each half's leaves served at once, as the reducescatter and allgather do alone
                seeds.insert(1, first._replace(taper=0.95, lead=True))
    def taper(candidates) -> None:
        top = best()
        if top.stages >= 8:
            for c in candidates(top):
                if affordable(c):
                    ev(c)

    if seeds and affordable(seeds[0]):
        ev(seeds[0])
    if variants and top.stages >= 8 and not capped:  # 0. after the first seed, which gains more where the budget ends soon
        thirds(beyond=False)
    climb()  # from the best so far: the first seed's stage count where it wins
    taper(lambda top: [top._replace(taper=0.95)])  # at scale all there is time for
    thirds()  # before the other seeds, which at scale the budget may not reach
    for c in seeds[1:]:
        if affordable(c):
            ev(c)
    climb()
    thirds()
    taper(lambda top: [top._replace(taper=0.95), top._replace(taper=0.9),
                       top._replace(stages=top.stages * 3 // 4, taper=0.85)])
    top = best()
    if variants and (kind in LEAD_KINDS or top.sequential):  # 7. the best with its leaves the other way
        flipped = top._replace(lead=not top.lead)
        if affordable(flipped):
            ev(flipped)
    top = best()
    if variants and top.stages >= 2 and not top.stagger:  # 8. and coalesced the other way
        flipped = top._replace(coalesce=not top.coalesce)
        if affordable(flipped):
            ev(flipped)
    if variants and kind in ROOTED_KINDS:  # 9. ramped ends, the root's own part lighter (trees: broadcast, reduce)
        top = best()
        ramps = [int(top.ramp), *(r for r in range(len(RAMPS)) if r != top.ramp and ramp_fits(r, top.stages))]
        for share in (top.own, *(OWN_SHARES if own else ())):
            for ramp in ramps:
                c = top._replace(ramp=ramp, own=share)
                if affordable(c):
                    ev(c)
        if best() != top:
            climb()
            thirds()
    if variants and kind in ROOTED_KINDS:  # 10. the winner's neighbours, while one of them is faster
        for _ in range(POLISH_ROUNDS):
            top = best()
            shares = [top.own, *(round(top.own + d, 2) for d in (-OWN_STEP, OWN_STEP)
                                 if own and OWN_LEAST <= top.own + d <= 1.0)]
            for stages in (top.stages - 1, top.stages + 1, top.stages):
                for share in shares:
                    c = top._replace(stages=stages, own=share)
                    if 2 <= stages <= limit(c) and (not c.ramp or ramp_fits(c.ramp, stages)) and affordable(c):
                        ev(c)
            if best() == top:
                break
    return list(seen.items())


OWN_SHARES = (0.9, 0.8)  # the root's own part's share (``Shape.own``) the search tries
OWN_STEP, OWN_LEAST = 0.05, 0.5  # the polish (step 10 of ``_refine``) moves the share by this, not below that
POLISH_ROUNDS = 6  # moves of the polish at most


def pick(candidates: list, size: float, progress, *, name, rate, evaluate, longest, kind: str,
          budget, work, variants: bool = True,
          own=lambda candidate: False) -> tuple[tuple[int, Shape] | None, list[dict]]:
    """The judged search, until the budget is due (the best shape judged by then wins; each
    judgement runs in ``budget.region()`` and one cut short is given up), skipping a
    construction whose bandwidth time alone (``rate``) exceeds the best time so far:

    1. every construction of the best rate at the first uniform shape (4 stages);
    2. the fastest of those over the uniform shapes (``_search``), then its finer shapes
       (``_refine``);
    3. the others over the uniform shapes, those of step 1 fastest first, then the rest in
       order, and the finer shapes of the best of them whose best uniform time is within
       ``RUNNER_UP`` of the leader's (or below it).

    On small machines everything fits and the order does not matter; at scale, or where the
    simulations are slow, the budget goes to the construction that leads first (the climbs of
    slower constructions would otherwise use it all before the leader's finer shapes).
    ``work(candidate, shape)``: the transfers a judgement builds (estimated), which
    bounds the refinement; ``variants``: whether staggered, coalesced, sequential and ramped
    shapes exist (trees; not routes); ``own(candidate)``: whether its root's own part can be
    made lighter (``Shape.own``). Returns (the winner's index and shape, or None when nothing was
    judged) and every shape tried with its time."""
    best: tuple[float, int, Shape] | None = None
    tried: list[dict] = []
    seen: dict[int, dict[Shape, float]] = {}

    def guarded(candidate, c):
        with budget.region():
            us = evaluate(candidate, c)
        progress(f"{name(candidate)}, {c.describe()}: {us:.4g} us")  # as it comes: judgements take seconds at scale
        return us

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
            tried.append({"construction": name(candidate), **shape._asdict(), "time_us": round(us, 3)})
            if best is None or us < best[0]:
                best = (us, index, shape)

    def stopped() -> bool:
        if budget.cut is not None or budget.due():
            if budget.cut is None:
                budget.abandoned()
            return True
        return False

    spent = [0]  # transfers the judgements so far cost (``SEARCH_WORK``)

    def skipped(index: int) -> bool:
        if best is not None and rate(candidates[index]) >= best[0]:
            progress(f"{name(candidates[index])}: its rate alone takes longer than the best so far")
            return True
        return False

    def climb(index: int) -> None:
        x = candidates[index]
        record(index, lambda ev, times: _search(ev, longest=longest(x), seen=times, work=lambda c: work(x, c),
                                                spent=spent, lead=variants and kind in LEAD_KINDS
                                                and _has_root_leaves(x)))

    def refine(index: int) -> None:
        x = candidates[index]
        record(index, lambda ev, times: _refine(ev, times, longest=longest(x), kind=kind, work=lambda c: work(x, c),
                                                variants=variants, spent=spent, own=own(x),
                                                leaves=variants and _has_root_leaves(x)))

    def uniform(index: int) -> float:
        return min((us for c, us in seen.get(index, {}).items() if c._replace(lead=False) == Shape(c.stages)),
                   default=math.inf)

    first = Shape(DEFAULT_STAGES)
    fastest = min((rate(x) for x in candidates), default=math.inf)
    for index in range(len(candidates)):
        if stopped():
            break
        if rate(candidates[index]) <= fastest * (1 + 1e-9) and not skipped(index):
            record(index, lambda ev, times, x=candidates[index]: _first(ev, times, first, lambda c: work(x, c), spent))
    order = sorted((uniform(index), index) for index in seen if seen[index])
    if order and not stopped():
        leader = order[0][1]
        climb(leader)
        if not stopped():
            refine(leader)
        others = [index for _, index in order[1:]] + [i for i in range(len(candidates)) if i not in seen]
        for index in others:
            if stopped():
                break
            if not skipped(index):
                climb(index)
        # the finer shapes can reorder constructions whose uniform bests are close (a runner-up
        # coalesced can beat the leader)
        close = sorted((uniform(index), index) for index in others
                       if uniform(index) <= uniform(leader) * (1 + RUNNER_UP))
        if close and not stopped():
            refine(close[0][1])
    return (None if best is None else (best[1], best[2])), tried


def _first(evaluate, seen: dict, shape: Shape, work, spent: list[int]) -> list:
    """One judgement (step 1 of ``pick``), within the search's budget (``_Work``)."""
    budget = _Work(work, spent)
    if budget.affordable(shape, seen):
        budget.judged(shape, seen, evaluate)
    return list(seen.items())
