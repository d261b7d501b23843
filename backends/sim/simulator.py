"""Simulate a Program: ``simulate(program, size, **options) -> Report``.

The simulator times the lowered Program, the one every runtime executes, under its execution
model (``ccl.core.program``): per rank, ops issue in list order once the sends and receives they
depend on have completed; a message moves when both its send and its receive are posted. The
physics (stated once here; ``engine`` and ``graph`` give the mechanics):

* **Bytes.** ``size`` follows nccl-tests (see ``ccl.core.report``): the largest per-rank buffer
  holds ``size`` bytes, so a slot holds ``size / max_slots`` bytes and a message of ``count``
  slots moves ``count`` times that.
* **Links.** A message between two ranks uses the flattened topology's link for the pair
  (``Topology.flat()``): through switches and NICs that link's latency is the sum over its
  path and its bandwidth the narrowest hop's. A message of b bytes costs latency + b /
  bandwidth of a lane (``overlap_latency`` says whether the latency holds the lane).
* **Lanes.** A link with k lanes carries k messages at once, each at the per-lane bandwidth;
  one message never spreads over several lanes (``ccl.lower`` keeps a message per lane when
  it fuses). Ready messages queue on their link first come first served; the messages of one
  pair and channel become ready in list order (rule 3 of the model: a runtime posts them so,
  as NCCL's and MSCCL's connections do), so a pair's later messages whose data is ready early
  never overtake an earlier one still waiting for its data (a reduce tree's leaf pieces would
  otherwise crowd out the partial sums coming up a deeper tree).
* **Shared limits** (a NIC, a PCIe switch, a switch port several flattened links cross) cap
  the summed rate of their links; messages under limits share them max-min fairly.
* **Local ops** (the copy or reduce finishing a staged receive, snapshots, prologue copies,
  and the out-of-place copy of aliased output slots a runtime makes first) are free unless
  ``local_bandwidth`` (GB/s) is given; then each rank has one copy engine of that bandwidth and
  a rank waits for its own local ops, as the runtimes do.
* **Modes.** ``dependency`` (default): ranks run on as far as their dependencies allow, as the
  runtimes do. ``step``: the ops of step s start when every op of every earlier step has
  completed (a barrier after each step, SCCL's step model); as a rule slower.
* **Slicing.** ``slices=m`` runs every rank's program m times side by side, each copy on 1/m
  of the data with its own dependencies (as m channels would), sharing the links: the slices
  pipeline through the schedule like NCCL's (each piece pays the latency again).

Not modelled: compute time of reductions, GPU SM or copy-engine contention between links of
one rank, protocol overheads. The lower bound and NCCL's cost models are not the simulator's:
the driver (``ccl.compiler``) adds them to the Report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ccl.core import limits, validate
from ccl.core.collector import gc_paused
from ccl.core.errors import InputError, VerificationError
from ccl.core.program import Program
from ccl.core.report import LinkUsage, RankUsage, Report, bus_factor, check_size, slot_bytes

from .engine import Engine
from .graph import ProgramGraph
from .plots import plot_simulation
from .shares import Resource
from .trace import chrome_trace, write_trace

MODES = ("dependency", "step")


# A simulation's effort, in microseconds of one reference machine: per op instance, and per fair
# rate computed (where shared limits couple many flows, as a node's NVSwitch ports do, rates
# dominate). Fitted once on large cases; a count of work, so the same on any machine.
EFFORT_OP_US = 4.0
EFFORT_RATE_US = 3.5


@dataclass
class Simulation:
    """One run: the report plus timings for traces and plots.

    Per message instance (``q = message * slices + j``, j the slice): ``start`` (took its lane),
    ``sent`` (released it), ``done`` (landed), ``lane``, ``resource`` (index into
    ``resource_pairs``) and ``nbytes``. Per op instance (``v = op * slices + j``, ops numbered as
    in ``graph``): ``issue`` and ``finish``, derived on first use."""

    program: Program
    report: Report
    slices: int
    graph: ProgramGraph
    start: np.ndarray
    sent: np.ndarray
    done: np.ndarray
    lane: np.ndarray
    resource: np.ndarray
    nbytes: np.ndarray
    engine: Engine
    resource_pairs: list[tuple[int, int]]
    resource_lanes: list[int]

    @property
    def issue(self) -> np.ndarray:
        return self.engine.op_times()[0]

    @property
    def finish(self) -> np.ndarray:
        return self.engine.op_times()[1]

    @property
    def time_us(self) -> float:
        return self.report.time_us

    @property
    def effort_us(self) -> float:
        """What this run cost to compute, estimated from counts (never the clock, so the same
        Program gives the same figure on every machine): microseconds on the machine the
        constants were measured on, ``EFFORT_OP_US`` per op instance and ``EFFORT_RATE_US`` per
        fair rate computed under shared limits (``Engine.rate_updates``). For a solver that
        budgets the judgements of its search (``ccl.core.judge``)."""
        return EFFORT_OP_US * self.graph.n_ops * self.slices + EFFORT_RATE_US * self.engine.rate_updates

    def trace(self) -> dict[str, Any]:
        return chrome_trace(self)

    def write_trace(self, path: str) -> None:
        write_trace(self, path)

    def plot(self, path: str) -> None:
        """A PNG with the timeline and the link-utilization heatmap."""
        plot_simulation(self, path)


OPTIONS = ("mode", "slices", "in_place", "overlap_latency", "local_bandwidth")  # of Simulator.run


class Simulator:
    """Simulates one Program at many sizes and options; the graph (which does not depend on
    the size) is built once."""

    def __init__(self, program: Program) -> None:
        if not isinstance(program, Program):
            raise InputError(f"the simulator runs a Program (ccl.lower), got {type(program).__name__}")
        self.program = program
        self._graph: ProgramGraph | None = None
        self._links: tuple[list[tuple[int, int]], np.ndarray] | None = None

    @property
    def graph(self) -> ProgramGraph:
        if self._graph is None:
            self._graph = ProgramGraph.build(self.program)
        return self._graph

    def _map_links(self) -> tuple[list[tuple[int, int]], np.ndarray]:
        """The flattened links the messages use, in (src, dst) order, and each message's."""
        if self._links is not None:
            return self._links
        g = self.graph
        topo = self.program.topology
        n = topo.n_ranks
        codes = g.msg_src * n + g.msg_dst
        uniq, which = np.unique(codes, return_inverse=True)
        pairs = [(int(c) // n, int(c) % n) for c in uniq]
        for a, b in pairs:
            if topo.flat_link(a, b) is None:
                q = int(np.flatnonzero(codes == a * n + b)[0])
                raise VerificationError(f"message {q} (step {int(g.msg_step[q])}): topology {topo.name!r} has no "
                                        f"link from rank {a} to rank {b}", rank=a, step=int(g.msg_step[q]))
        self._links = pairs, which.astype(np.int64)
        return self._links

    def run(self, size: float, **options: Any) -> Simulation:
        """Simulate one call of ``size`` bytes (see ``simulate`` for the options)."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise InputError(f"unknown simulator option {unknown[0]!r} (known: {', '.join(OPTIONS)})")
        with gc_paused():  # millions of short-lived tuples
            return self._run(size, **options)

    def _run(self, size: float, *, mode: str = "dependency", slices: int = 1, in_place: bool = False,
             overlap_latency: bool = False, local_bandwidth: float | None = None) -> Simulation:
        program = self.program
        check_size(size)
        if mode not in MODES:
            raise InputError(f"simulation mode must be one of {MODES}, got {mode!r}")
        validate.integer(slices, "slices", least=1)
        if local_bandwidth is not None:
            validate.number(local_bandwidth, "local bandwidth (GB/s)", positive=True)
        validate.flag(in_place, "in_place")
        validate.flag(overlap_latency, "overlap_latency")
        wall = time.perf_counter()
        topo = program.topology
        flat = topo.flat()
        n_ranks = topo.n_ranks
        g = self.graph
        m = slices
        limits.SIM_OPS.check(g.n_ops * m, f"simulating {g.n_ops} ops x {m} slices needs too many op instances")
        per_slot = slot_bytes(program.collective, size)
        pairs, msg_res = self._map_links()

        # resources: the flattened links the messages use, with the shared limits that can bind
        index = {p: i for i, p in enumerate(pairs)}
        limit_of: dict[tuple[int, int], list[int]] = {}
        caps: list[float] = []
        for limit, total in zip(flat.limits, flat.limit_capacities):
            if limit.bandwidth >= total - 1e-12:
                continue  # can never bind
            used = [p for p in limit.links if p in index]
            if not used:
                continue
            caps.append(limit.bandwidth * 1e3)
            for p in used:
                limit_of.setdefault(p, []).append(len(caps) - 1)
        resources = []
        for p in pairs:
            link = flat.link(*p)
            resources.append(Resource(link.lanes, link.bandwidth * 1e3, link.latency,  # type: ignore[union-attr]
                                      tuple(limit_of.get(p, ()))))
        msg_bytes = g.msg_count.astype(float) * per_slot
        op_bytes = (g.count.astype(float) * per_slot).tolist()
        local_rate = None if local_bandwidth is None else local_bandwidth * 1e3
        rank_start = [0.0] * n_ranks
        if local_rate is not None and not in_place:  # a rank first copies its aliased output slots
            rank_start = [sum(c for _a, _j, c in runs) * per_slot / local_rate for runs in program.alias_runs]
        engine = Engine(g, msg_res, msg_bytes, resources, caps, slices=m,
                        overlap_latency=overlap_latency, local_rate=local_rate, op_bytes=op_bytes,
                        rank_start=rank_start)
        engine.run(mode)

        start, sent, landed = (np.asarray(x, dtype=float) for x in (engine.start, engine.sent, engine.landed))
        res_q = np.repeat(msg_res, m)
        bytes_q = np.repeat(msg_bytes / m, m)
        # every op ends on its own rank no later than the rank's last message (local ops wait for
        # the rank's own sends and receives only), unless local ops take time: then their times count
        rank_finish = np.asarray(rank_start, dtype=float).copy()
        if engine.op_times_known and g.n_ops:
            np.maximum.at(rank_finish, np.repeat(g.op_rank, m), np.asarray(engine.done, dtype=float))
        if len(sent):
            np.maximum.at(rank_finish, np.repeat(g.msg_src, m), sent)
            np.maximum.at(rank_finish, np.repeat(g.msg_dst, m), landed)
        end = float(rank_finish.max()) if len(rank_finish) else 0.0
        report = self._report(size, per_slot, mode, m, in_place, overlap_latency, local_bandwidth, end, pairs,
                              resources, res_q, bytes_q, start, sent, rank_finish)
        report = replace(report, simulation_seconds=time.perf_counter() - wall)
        return Simulation(
            program=program, report=report, slices=m, graph=g, start=start, sent=sent, done=landed,
            lane=np.asarray(engine.lane, dtype=np.int64), resource=res_q, nbytes=bytes_q, engine=engine,
            resource_pairs=list(pairs), resource_lanes=[x.lanes for x in resources],
        )

    def _report(self, size, per_slot, mode, m, in_place, overlap, local_bw, end, pairs, resources, res_q,
                bytes_q, start, sent, rank_finish) -> Report:
        program = self.program
        g = self.graph
        topo = program.topology
        coll = program.collective
        n_ranks = topo.n_ranks
        n_links = len(pairs)
        links: list[LinkUsage] = []
        if n_links:
            link_bytes = np.bincount(res_q, weights=bytes_q, minlength=n_links)
            link_busy = np.bincount(res_q, weights=sent - start, minlength=n_links)
            link_count = np.bincount(res_q, minlength=n_links) // m
            for i, (a, b) in enumerate(pairs):
                res = resources[i]
                capacity = res.lanes * res.rate / 1e3
                util = link_bytes[i] / (capacity * 1e3 * end) if end > 0 else 0.0
                links.append(LinkUsage(a, b, float(link_bytes[i]), int(link_count[i]),
                                       float(link_busy[i] / res.lanes), capacity, res.lanes, float(util)))
        src_q, dst_q = np.repeat(g.msg_src, m), np.repeat(g.msg_dst, m)
        sent_bytes = np.bincount(src_q, weights=bytes_q, minlength=n_ranks)
        recv_bytes = np.bincount(dst_q, weights=bytes_q, minlength=n_ranks)
        ranks = tuple(RankUsage(r, float(sent_bytes[r]), float(recv_bytes[r]), float(rank_finish[r]))
                      for r in range(n_ranks))
        options = {"slices": m, "in_place": in_place, "overlap_latency": overlap, "local_bandwidth_GBps": local_bw,
                   "channels": program.channels}
        return Report(
            algorithm=program.name, collective=coll.kind, n_ranks=n_ranks, topology=topo.name, solver=program.solver,
            size=size, slot_bytes=per_slot, mode=mode, steps=program.steps, messages=program.n_messages,
            ops=program.n_ops, time_us=float(end), bus_factor=bus_factor(coll.kind, n_ranks), links=tuple(links),
            ranks=ranks, options=options,
        )


def simulate(program: Program, size: float, **options: Any) -> Report:
    """Simulate ``program`` called with ``size`` bytes (nccl-tests convention, see
    ``ccl.core.report``) and return its Report (without the lower bound and baselines, which the
    driver adds). Options: ``mode`` ("dependency" or "step"), ``slices``, ``in_place``,
    ``overlap_latency``, ``local_bandwidth`` (GB/s). The Program is assumed verified
    (``ccl.verify_program``); a Program that cannot run to the end raises BackendError."""
    return run(program, size, **options).report


def run(program: Program, size: float, **options: Any) -> Simulation:
    """Like ``simulate`` but returns the Simulation (per-message timings, trace, plots)."""
    return Simulator(program).run(size, **options)
