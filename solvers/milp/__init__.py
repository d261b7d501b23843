"""MILP synthesis (TACCL class), on open solvers: PuLP with HiGHS (default) or CBC.

``synthesize(problem)`` runs, in memory, one command:

1. the logical topology the sketch leaves, with alpha-beta costs at the target size
   (``logical``);
2. the routing MILP (``routing``);
3. the ordering heuristic, a list schedule of the routes (``ordering``);
4. the scheduling / contiguity MILP that may batch consecutive slots on a lane (``contiguity``);
5. conversion to the Algorithm IR (``emit``), verified by the caller.

Collectives: allgather, alltoall, broadcast directly; reducescatter as the time reversal of an
allgather on the reversed topology; allreduce as reducescatter then allgather.

Request fields used: ``size`` (bytes, nccl-tests convention, default 1 MiB), ``chunks`` (pieces
per part; the sketch's ``chunk_partition`` overrides), ``time_limit`` (seconds for the whole
synthesis, default 60), ``sketch`` (default: rails between nodes and rotational symmetry by the
node size), option ``backend`` ("highs" or "cbc"). When a stage stops at its time limit the best
schedule found is returned through ``SolverTimeout`` with the routing gap.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ccl.algorithm import Algorithm, Transfer
from ccl.collective import Collective
from ccl.errors import CollectiveError, InputError, SolverTimeout
from ccl.problem import Problem

from ..common import collective_for, pieces
from .contiguity import merge
from .emit import Batch, emit, reverse, scratch_slots
from .logical import LogicalTopology, default_sketch
from .lp import BACKENDS, Solved, progress
from .ordering import Plan, build_hops, list_schedule
from .routing import Commodity, commodities, route

KINDS = ("allgather", "alltoall", "reducescatter", "allreduce", "broadcast")
DEFAULT_SIZE = 1 << 20
DEFAULT_TIME_LIMIT = 60.0


class _Run:
    """One synthesis: settings, the time budget and the record of every solve."""

    def __init__(self, problem: Problem) -> None:
        req = problem.request
        self.problem = problem
        self.variant = req.solver
        self.size = req.size or DEFAULT_SIZE
        self.sketch = default_sketch(problem.topology, req.sketch)
        self.pieces = self.sketch.chunk_partition or pieces(problem)
        self.backend = str(req.option("backend", "highs"))
        if self.backend not in BACKENDS:
            raise InputError(f"unknown MILP backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        self.deadline = time.perf_counter() + (req.time_limit or DEFAULT_TIME_LIMIT)
        self.solves: list[Solved] = []
        self.limited = False

    def budget(self, share: float) -> float:
        return max(1.0, (self.deadline - time.perf_counter()) * share)

    def record(self, solved: Solved | None) -> None:
        if solved is not None:
            self.solves.append(solved)
            if solved.status != "optimal":
                self.limited = True


def synthesize(problem: Problem) -> Algorithm:
    kind = problem.collective.kind
    if kind not in KINDS:
        raise CollectiveError(f"the MILP solver implements {', '.join(KINDS)}, not {kind}")
    run = _Run(problem)
    n = problem.topology.n_ranks
    P = run.pieces
    if kind in ("allgather", "broadcast", "alltoall"):
        coll = collective_for(problem, P)
    elif kind == "reducescatter":
        coll = collective_for(problem, P)
    else:
        coll = collective_for(problem, n * P)
    slot_bytes = run.size / max(coll.max_input_slots, coll.max_output_slots, 1)
    progress(f"{run.variant}: {kind} on {problem.topology.name}, {slot_bytes:.6g} bytes per slot, {P} piece(s) per part")
    if kind == "allgather":
        transfers = _allgather(run, coll, slot_bytes)
    elif kind == "broadcast":
        transfers = _broadcast(run, coll, slot_bytes)
    elif kind == "alltoall":
        transfers = _alltoall(run, coll, slot_bytes)
    elif kind == "reducescatter":
        transfers = _reducescatter(run, coll, slot_bytes)
    else:
        transfers = _allreduce(run, coll, slot_bytes)
    algorithm = Algorithm(f"{run.variant}-{kind}-{problem.topology.name}", coll, problem.topology,
                          tuple(transfers), solver=run.variant)
    if run.limited:
        gaps = [s.gap for s in run.solves if s.gap is not None]
        raise SolverTimeout("the MILP time limit was reached before optimality was proven",
                            best=algorithm, gap=max(gaps) if gaps else None)
    return algorithm


# ---------------------------------------------------------------------- pipelines
SlotFn = Callable[[Commodity, int], tuple[str, int]]


def _schedule(run: _Run, logical: LogicalTopology, items: list[Commodity],
              final_slot: SlotFn | Callable[[Plan], SlotFn]) -> tuple[Plan, list[Batch], SlotFn]:
    """Stages 1 to 3 for ``items``. ``final_slot`` gives where a commodity sits on a rank in the
    schedule that will be emitted (or builds that function from the plan, for relays' scratch);
    it decides which hops may merge."""
    if run.variant == "teccl":
        from .teccl import route_time_expanded

        multicast = any(len(c.dests) > 1 for c in items)
        routes, solved = route_time_expanded(logical, items, run.backend, run.budget(0.6), lp=not multicast)
    else:
        routes, solved = route(logical, items, run.backend, run.budget(0.6))
    run.record(solved)
    plan = list_schedule(routes)
    progress(f"ordering heuristic: {len(plan.hops)} hops, planned makespan {plan.makespan:.3f} us")
    slot = final_slot(plan) if getattr(final_slot, "needs_plan", False) else final_slot
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

    stage2 = plan.makespan
    proposed, _, solved = merge(logical, plan, mergeable, run.backend, run.budget(0.5))
    run.record(solved)
    batched = [b for b in proposed if len(b.hops) > 1]
    if batched:
        # replay the proposal with the list scheduler (which knows shared limits) and keep it
        # only if it beats one hop per transfer
        trial = list_schedule(routes, build_hops(routes), [b.hops for b in proposed])
        if trial.makespan < stage2 - 1e-9:
            plan, batches = trial, proposed
        else:
            batches = [Batch((h.id,)) for h in plan.hops]
    else:
        batches = [Batch((h.id,)) for h in plan.hops]
    merged = sum(1 for b in batches if len(b.hops) > 1)
    progress(f"contiguity: {len(batches)} transfers ({merged} batched), planned makespan "
             f"{plan.makespan:.3f} us (one hop per transfer: {stage2:.3f} us)")
    return plan, batches, slot


def _multicast(run: _Run, logical: LogicalTopology, kind: str, root: int,
               final_slot: SlotFn) -> list[Transfer]:
    items = commodities(kind, logical.n, run.pieces, root)
    plan, batches, slot = _schedule(run, logical, items, final_slot)
    links = logical.links
    by_id = {c.id: c for c in items}
    return emit(plan, batches, by_id, lambda e: (links[e].src, links[e].dst), slot)


def _allgather(run: _Run, coll: Collective, slot_bytes: float) -> list[Transfer]:
    logical = LogicalTopology(run.problem.topology, run.sketch, slot_bytes)
    P = run.pieces
    return _multicast(run, logical, "allgather", 0, lambda c, r: ("output", c.source * P + c.piece))


def _broadcast(run: _Run, coll: Collective, slot_bytes: float) -> list[Transfer]:
    logical = LogicalTopology(run.problem.topology, run.sketch, slot_bytes)
    return _multicast(run, logical, "broadcast", coll.root or 0, lambda c, r: ("output", c.piece))


def _reduce_scatter_like(run: _Run, slot_bytes: float, accumulate: Callable[[int, str, int], tuple[str, int]]
                         ) -> tuple[list[Transfer], LogicalTopology]:
    """Reducescatter of pieces ``P`` per block as the time reversal of an allgather on the reversed
    topology (the topology itself when it is its own reverse). Returns the transfers and the
    logical topology used, so an allreduce can reuse it."""
    forward = LogicalTopology(run.problem.topology, run.sketch, slot_bytes)
    backward = LogicalTopology(run.problem.topology, run.sketch, slot_bytes, reverse=True)
    logical = forward if forward.signature() == backward.signature() else backward
    P = run.pieces

    def final(c: Commodity, rank: int) -> tuple[str, int]:
        return accumulate(rank, "output", c.source * P + c.piece)

    items = commodities("allgather", logical.n, P)
    plan, batches, _ = _schedule(run, logical, items, final)
    links = logical.links
    by_id = {c.id: c for c in items}
    ag = emit(plan, batches, by_id, lambda e: (links[e].src, links[e].dst),
              lambda c, r: ("output", c.source * P + c.piece))
    return reverse(ag, accumulate), logical


def _reducescatter(run: _Run, coll: Collective, slot_bytes: float) -> list[Transfer]:
    P = run.pieces

    def accumulate(rank: int, buf: str, idx: int) -> tuple[str, int]:
        owner, piece = divmod(idx, P)
        return ("output", piece) if owner == rank else ("input", idx)

    return _reduce_scatter_like(run, slot_bytes, accumulate)[0]


def _allreduce(run: _Run, coll: Collective, slot_bytes: float) -> list[Transfer]:
    rs, used = _reduce_scatter_like(run, slot_bytes, lambda rank, buf, idx: ("output", idx))
    if not used.reverse:  # the topology is its own reverse: the allgather is the mirror image
        last = max((t.step for t in rs), default=-1)
        ag = [t._replace(step=2 * last + 1 - t.step, src=t.dst, dst=t.src, op="copy") for t in reversed(rs)]
        return rs + ag
    logical = LogicalTopology(run.problem.topology, run.sketch, slot_bytes)
    P = run.pieces
    ag = _multicast(run, logical, "allgather", 0, lambda c, r: ("output", c.source * P + c.piece))
    offset = 1 + max((t.step for t in rs), default=-1)
    return rs + [t._replace(step=t.step + offset) for t in ag]


def _alltoall(run: _Run, coll: Collective, slot_bytes: float) -> list[Transfer]:
    logical = LogicalTopology(run.problem.topology, run.sketch, slot_bytes)
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
    plan, batches, slot = _schedule(run, logical, items, slots_for)
    return emit(plan, batches, by_id, lambda e: (links[e].src, links[e].dst), slot)
