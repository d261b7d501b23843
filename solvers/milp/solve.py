"""One synthesis of the MILP solvers (``milp``, ``teccl``): the stages run per collective.

``_Run`` holds the settings, the time budget, the cost judge and the record of every solve;
``_schedule`` runs stages 2 to 5 on one set of commodities (routing, ordering of every
candidate, judging, contiguity); the collectives build on it (allgather and broadcast
directly, reducescatter as the time reversal of an allgather, allreduce as both, alltoall
with relays' scratch slots), and the result is compared with the templates' whole schedules.

Time: the stages share one deadline, counted from the driver's clock (``ccl.core.interrupt.deadline``:
from the start of the synthesis, imports included) and kept short of the limit by what the end
takes (``FINISH_RESERVE``): each MILP gets a share of
what is left (its model building included: past the deadline a stage falls back to its
heuristic), candidates are judged and templates compared while time is left (at least one
candidate always), so the whole synthesis ends close to the limit. Ctrl-C (``ccl.core.interrupt``)
acts as a deadline reached now: HiGHS stops, the stages finish with what they have, and
``Interrupted`` carries that schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import solvers
from ccl.core import interrupt
from ccl.core.algorithm import Algorithm, Transfer
from ccl.core.collective import Collective
from ccl.core.errors import CclError, CollectiveError, InputError, Interrupted, SolverTimeout
from ccl.core.judge import CostJudge
from ccl.core.problem import Problem, Request

from .. import Solution
from ..bounds.call import lower_bound
from ..builders.common import collective_for, pieces
from .commodities import Commodity, Routes, commodities
from .contiguity import merge
from .emit import Batch, emit, reverse, scratch_slots
from .logical import LogicalTopology, default_sketch
from .lp import BACKENDS, Solved, progress
from .ordering import Plan, build_hops, list_schedule
from .routing import route
from .seeds import template_routes
from .teccl import route_time_expanded

KINDS = ("allgather", "alltoall", "reducescatter", "allreduce", "broadcast")
DEFAULT_SIZE = 1 << 20
DEFAULT_TIME_LIMIT = 60.0
FINISH_RESERVE = 0.1  # share of the time limit (at most 2 s) kept for the end: details, verification

SlotFn = Callable[[Commodity, int], tuple[str, int]]
Build = Callable[[Plan, list[Batch], SlotFn], list[Transfer]]


class _Run:
    """One synthesis: settings, the time budget, the judge and the record of every solve."""

    def __init__(self, problem: Problem, collective: Collective, judge: CostJudge) -> None:
        req = problem.request
        self.problem = problem
        self.cost = judge
        self.collective = collective
        self.variant = req.solver
        self.size = req.size or DEFAULT_SIZE
        self.sketch = default_sketch(problem.topology, req.sketch)
        self.switch_policy = req.sketch.switch_policy if req.sketch is not None else None
        self.pieces = self.sketch.chunk_partition or pieces(problem)
        unknown = sorted(key for key, _ in req.options if key != "backend")
        if unknown:
            raise InputError(f"the {req.solver} solver has no option {unknown[0]!r}; options: backend")
        if req.objective not in (None, "time"):
            raise InputError(f"the {req.solver} solver minimises the simulated time (objective \"time\"), "
                             f"not {req.objective!r}")
        if req.steps is not None or req.rounds is not None:
            raise InputError(f"steps and rounds bound the exact solver (smt), not {req.solver}")
        self.backend = str(req.option("backend", "highs"))
        if self.backend not in BACKENDS:
            raise InputError(f"unknown MILP backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        limit = req.time_limit or DEFAULT_TIME_LIMIT
        # one deadline for every stage, short of the limit by what the end takes (the report's
        # bound, verification by the caller)
        self.deadline = interrupt.deadline(limit) - min(FINISH_RESERVE * limit, 2.0)
        self.solves: list[Solved] = []
        self.candidates: list[dict] = []
        self.limited = False
        self.bound_us = 0.0  # the lower bound at the target size (``synthesize`` sets it)

    def budget(self, share: float) -> float:
        """Seconds for a stage: ``share`` of what is left before the deadline (0 after Ctrl-C)."""
        return interrupt.left(self.deadline) * share

    def out_of_time(self) -> bool:
        """The deadline has passed or Ctrl-C asked to stop: the stages finish with what they
        have (at least one candidate) and optional work is skipped."""
        if interrupt.stop_due(self.deadline):
            self.limited = True
            return True
        return False

    def record(self, solved: Solved | None) -> None:
        if solved is not None:
            self.solves.append(solved)
            if solved.status != "optimal":
                self.limited = True

    def judge(self, transfers: list[Transfer]) -> float:
        """Simulated time (us) of ``transfers`` at the target size."""
        return self.time_of(Algorithm("candidate", self.collective, self.problem.topology, tuple(transfers)))

    def time_of(self, algorithm: Algorithm) -> float:
        """Simulated time (us) of a schedule at the target size."""
        return self.cost.time_us(algorithm, self.size)


def synthesize(problem: Problem, judge: CostJudge) -> Algorithm:
    with interrupt.cooperative():  # every stage polls Ctrl-C (``_Run.out_of_time``) and HiGHS stops on it
        return _synthesize(problem, judge)


def _synthesize(problem: Problem, judge: CostJudge) -> Algorithm:
    kind = problem.collective.kind
    if kind not in KINDS:
        raise CollectiveError(f"the MILP solvers implement {', '.join(KINDS)}, not {kind}")
    n = problem.topology.n_ranks
    probe = default_sketch(problem.topology, problem.request.sketch)
    P = probe.chunk_partition or pieces(problem)
    coll = collective_for(problem, n * P if kind == "allreduce" else P)
    run = _Run(problem, coll, judge)
    # the report's bound, first: its cost (scipy.optimize's import, the first time) is inside
    # the deadline
    run.bound_us = lower_bound(problem.topology, problem.collective, run.size).bound_us
    slot_bytes = run.size / max(coll.max_input_slots, coll.max_output_slots, 1)
    progress(f"{run.variant}: {kind} on {problem.topology.name}, {slot_bytes:.6g} bytes per slot, "
             f"{P} piece(s) per part")
    if kind in ("allgather", "broadcast"):
        logical = LogicalTopology(problem.topology, run.sketch, slot_bytes, switch_policy=run.switch_policy)
        transfers = _multicast(run, logical, kind, coll.root or 0)
    elif kind == "alltoall":
        transfers = _alltoall(run, LogicalTopology(problem.topology, run.sketch, slot_bytes, switch_policy=run.switch_policy))
    elif kind == "reducescatter":
        transfers = _reducescatter(run, slot_bytes)
    else:
        transfers = _allreduce(run, slot_bytes)
    algorithm = Algorithm(f"{run.variant}-{kind}-{problem.topology.name}", coll, problem.topology,
                          tuple(transfers), solver=run.variant)
    algorithm, chosen, simulated = _against_templates(run, algorithm)
    if interrupt.requested():
        raise Interrupted("stopped by Ctrl-C; kept the best schedule of the stages run so far", best=algorithm,
                          details={"size": run.size, "solves": [s.to_json() for s in run.solves],
                                   "candidates": run.candidates, "schedule": chosen, "simulated_us": simulated})
    details = _details(run, simulated, chosen)
    if run.limited:
        gaps = [s.gap for s in run.solves if s.gap is not None]
        raise SolverTimeout("a MILP reached its time limit before proving optimality",
                            best=algorithm, gap=max(gaps) if gaps else None, details=details)
    return Solution(algorithm, details)


def _why() -> str:
    return "stopped by Ctrl-C" if interrupt.requested() else "no time left"


def _against_templates(run: _Run, algorithm: Algorithm) -> tuple[Algorithm, str, float]:
    """The MILP pipeline's schedule, or a template's whole schedule when that simulates faster
    at the target size (templates may chunk finer than the pipeline, e.g. multi-ring's halves).
    Skipped when the user gives a sketch: a template does not follow one."""
    problem = run.problem
    best_us, best, chosen = run.time_of(algorithm), algorithm, "MILP pipeline"
    if problem.request.sketch is not None:
        return best, chosen, best_us
    for name in solvers.TEMPLATES:
        if run.out_of_time():
            progress(f"{_why()}: the remaining templates are skipped")
            break
        if problem.collective.kind not in solvers.SOLVERS[name].kinds:
            continue
        request = Request(solver=name, chunks=problem.request.chunks)
        try:
            template = solvers.synthesize(Problem(problem.topology, problem.collective, request), judge=run.cost)
        except CclError:
            continue  # a template that does not apply (hierarchical on one node)
        us = run.time_of(template)
        run.candidates.append({"routes": f"{name} template, whole schedule", "planned_us": None, "simulated_us": us})
        progress(f"candidate {name} template, whole schedule: simulated {us:.4g} us")
        if us < best_us - 1e-9:
            best_us, chosen = us, f"{name} template"
            best = replace(template, name=f"{run.variant}-{problem.collective.kind}-{problem.topology.name}",
                           solver=run.variant)
    if best is not algorithm:
        progress(f"chosen instead: the {chosen}'s schedule, simulated {best_us:.4g} us")
    return best, chosen, best_us


def _details(run: _Run, simulated: float, chosen: str) -> dict:
    """What the solver reports: settings, every MILP/LP solve with its size and gap, the
    candidates and their simulated times, which schedule was kept, its simulated time and the
    lower bound."""
    bound = run.bound_us
    sketch = run.sketch
    return {
        "size": run.size,
        "pieces": run.pieces,
        "backend": run.backend,
        "sketch": {"relays": sketch.relays, "internode": sketch.internode, "switch_policy": sketch.switch_policy,
                   "symmetry": list(sketch.symmetry), "chunk_partition": sketch.chunk_partition},
        "solves": [s.to_json() for s in run.solves],
        "candidates": run.candidates,
        "schedule": chosen,
        "simulated_us": simulated,
        "bound_us": bound,
        "bound_ratio": simulated / bound if bound > 0 else None,
    }


# ---------------------------------------------------------------------- stages 2 to 5
def _schedule(run: _Run, logical: LogicalTopology, items: list[Commodity], seeds: list[tuple[str, Routes]],
              final_slot: SlotFn | Callable[[Plan], SlotFn], build: Build) -> list[Transfer]:
    """Route ``items``, play every candidate out, judge, batch the best; returns its transfers.
    ``final_slot`` gives where a commodity sits on a rank in the emitted schedule (or builds that
    function from a plan, for relays' scratch); ``build`` turns a plan into transfers."""
    if run.variant == "teccl":
        multicast = any(len(c.dests) > 1 for c in items)
        routes, solved, extras = route_time_expanded(logical, items, run.backend, run.budget(0.6), lp=not multicast)
    else:
        routes, solved, extras = route(logical, items, run.backend, run.budget(0.6))
    run.record(solved)
    label = "routing MILP" if run.variant == "milp" else "time-expanded model"
    candidates = [(f"{label}'s routes", routes)] + extras + seeds

    def slots_of(plan: Plan) -> SlotFn:
        return final_slot(plan) if getattr(final_slot, "needs_plan", False) else final_slot  # type: ignore[return-value]

    best = None
    for i, (name, cand) in enumerate(candidates):
        if best is not None and run.out_of_time():
            progress(f"{_why()}: the other {len(candidates) - i} candidate(s) are not judged")
            break
        plan = list_schedule(cand)
        slot = slots_of(plan)
        transfers = build(plan, [Batch((h.id,)) for h in plan.hops], slot)
        simulated = run.judge(transfers)
        run.candidates.append({"routes": name, "planned_us": plan.makespan, "simulated_us": simulated})
        progress(f"candidate {name}: planned {plan.makespan:.4g} us, simulated {simulated:.4g} us")
        if best is None or simulated < best[0] - 1e-9:
            best = (simulated, name, cand, plan, slot, transfers)
    assert best is not None
    simulated, name, cand, plan, slot, transfers = best
    by_id = {c.id: c for c in items}
    links = logical.links

    def mergeable(a: int, b: int) -> bool:
        ha, hb = plan.hops[a], plan.hops[b]
        ca, cb = by_id[ha.commodity], by_id[hb.commodity]
        for rank in (links[ha.link].src, links[ha.link].dst):
            (buf_a, idx_a), (buf_b, idx_b) = slot(ca, rank), slot(cb, rank)
            if buf_a != buf_b or idx_b != idx_a + 1:
                return False
        return True

    if run.out_of_time():
        progress(f"chosen: {name}, simulated {simulated:.4g} us ({_why()}: no contiguity MILP)")
        return transfers
    proposed, _, solved = merge(logical, plan, mergeable, run.backend, run.budget(0.5))
    run.record(solved)
    if any(len(b.hops) > 1 for b in proposed):
        trial = list_schedule(cand, build_hops(cand), [b.hops for b in proposed])
        batched = build(trial, proposed, slot)
        faster = run.judge(batched)
        merged = sum(1 for b in proposed if len(b.hops) > 1)
        progress(f"contiguity: {merged} batches, simulated {faster:.4g} us (unbatched {simulated:.4g} us)")
        if faster < simulated - 1e-9:
            return batched
    progress(f"chosen: {name}, simulated {simulated:.4g} us")
    return transfers


def _seeded(run: _Run, logical: LogicalTopology | None) -> bool:
    """Whether the templates' routes join the candidates: not on a reversed topology (they do
    not read backwards), nor once time is up or Ctrl-C came (running the templates takes time)."""
    return not (logical is not None and logical.reverse) and not run.out_of_time()


def _ends(logical: LogicalTopology):
    links = logical.links
    return lambda e: (links[e].src, links[e].dst)


def _multicast(run: _Run, logical: LogicalTopology, kind: str, root: int) -> list[Transfer]:
    """Allgather (every rank's pieces to everyone) or broadcast (the root's pieces)."""
    P = run.pieces
    items = commodities(kind, logical.n, P, root)
    by_id = {c.id: c for c in items}
    seeds = template_routes(run.problem, logical, items, kind, P, root) if _seeded(run, logical) else []

    def slot(c: Commodity, rank: int) -> tuple[str, int]:
        return ("output", c.source * P + c.piece) if kind == "allgather" else ("output", c.piece)

    def build(plan: Plan, batches: list[Batch], slot_fn: SlotFn) -> list[Transfer]:
        return emit(plan, batches, by_id, _ends(logical), slot_fn)

    return _schedule(run, logical, items, seeds, slot, build)


def _reduce_scatter_like(run: _Run, slot_bytes: float, accumulate: Callable[[int, str, int], tuple[str, int]]
                         ) -> tuple[list[Transfer], LogicalTopology]:
    """Reducescatter of P pieces per block as the time reversal of an allgather on the reversed
    topology (on the topology itself when it is its own reverse). Candidates are judged as the
    reduction they become. Returns the transfers and the logical topology used."""
    forward = LogicalTopology(run.problem.topology, run.sketch, slot_bytes, switch_policy=run.switch_policy)
    backward = LogicalTopology(run.problem.topology, run.sketch, slot_bytes, reverse=True, switch_policy=run.switch_policy)
    logical = forward if forward.signature() == backward.signature() else backward
    P = run.pieces
    items = commodities("allgather", logical.n, P)
    by_id = {c.id: c for c in items}
    seeds = template_routes(run.problem, logical, items, "allgather", P) if _seeded(run, logical) else []

    def ag_slot(c: Commodity, rank: int) -> tuple[str, int]:
        return ("output", c.source * P + c.piece)

    def final(c: Commodity, rank: int) -> tuple[str, int]:
        return accumulate(rank, *ag_slot(c, rank))

    def build(plan: Plan, batches: list[Batch], slot_fn: SlotFn) -> list[Transfer]:
        return reverse(emit(plan, batches, by_id, _ends(logical), ag_slot), accumulate)

    return _schedule(run, logical, items, seeds, final, build), logical


def _reducescatter(run: _Run, slot_bytes: float) -> list[Transfer]:
    P = run.pieces

    def accumulate(rank: int, buf: str, idx: int) -> tuple[str, int]:
        owner, piece = divmod(idx, P)
        return ("output", piece) if owner == rank else ("input", idx)

    return _reduce_scatter_like(run, slot_bytes, accumulate)[0]


def _allreduce(run: _Run, slot_bytes: float) -> list[Transfer]:
    rs, used = _reduce_scatter_like(run, slot_bytes, lambda rank, buf, idx: ("output", idx))
    last = max((t.step for t in rs), default=-1)
    if not used.reverse:  # the topology is its own reverse: the allgather is the mirror image
        ag = [t._replace(step=2 * last + 1 - t.step, src=t.dst, dst=t.src, op="copy") for t in reversed(rs)]
        return rs + ag
    logical = LogicalTopology(run.problem.topology, run.sketch, slot_bytes, switch_policy=run.switch_policy)
    ag = _multicast(run, logical, "allgather", 0)
    return rs + [t._replace(step=t.step + last + 1) for t in ag]


def _alltoall(run: _Run, logical: LogicalTopology) -> list[Transfer]:
    P = run.pieces
    items = commodities("alltoall", logical.n, P)
    by_id = {c.id: c for c in items}
    links = logical.links

    def fixed(c: Commodity, rank: int) -> tuple[str, int] | None:
        d = c.dests[0]
        if rank == c.source:
            return ("input", d * P + c.piece)
        if rank == d:
            return ("output", c.source * P + c.piece)
        return None

    def slots_for(plan: Plan) -> SlotFn:
        relay = scratch_slots(plan, by_id, lambda e: links[e].src, fixed)

        def slot(c: Commodity, rank: int) -> tuple[str, int]:
            where = fixed(c, rank)
            return where if where is not None else relay[(c.id, rank)]

        return slot

    slots_for.needs_plan = True  # type: ignore[attr-defined]

    def build(plan: Plan, batches: list[Batch], slot_fn: SlotFn) -> list[Transfer]:
        return emit(plan, batches, by_id, _ends(logical), slot_fn)

    seeds = template_routes(run.problem, logical, items, "alltoall", P) if _seeded(run, None) else []
    return _schedule(run, logical, items, seeds, slots_for, build)
