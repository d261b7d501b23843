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
* **Switch reductions.** A push is a flow over the links from its rank to its switch
  (``Topology.switch_path``), a pull over the links back; the pulls of a switch slot start when
  every push into it has landed (a slot is the unit of pipelining: schedules pipeline by
  using several). The switch sums and replicates at line rate; its latency delays a push's or
  pull's landing without holding the lane (a pass through the switch overlaps the requests in
  flight). A rank's pushes to a switch, and its pulls from it, are posted in list order (an
  in-order queue, as a pair's messages). Where a push or pull shares a link with other
  messages (a rank's NVSwitch port, a NIC's uplink), the link's capacity caps them together.
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

* **Runtime.** ``runtime`` (``backends.cost.runtime.charges``: a runtime and protocol priced
  for the machine) adds what the runtime running the Program charges: a message's latency is
  at least the protocol's per-hop latency on its link's class (in a node or across nodes), its
  bytes move at the link's rate times the calibrated efficiency of the class and protocol, and
  the call starts after the runtime's launch and pipeline fill; switch traffic moves at the
  NVLS efficiency and pays the NVLS latency (``backends.cost.runtime``). Without it, the links
  alone (the physics the lower bounds assume).

Not modelled: compute time of reductions, GPU SM or copy-engine contention between links of
one rank. The lower bound and NCCL's algorithms are not the simulator's: the driver
(``ccl.compiler``) adds them to the Report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from backends.cost.runtime import LINK_CLASSES, RuntimeCharges
from ccl.core import limits, validate
from ccl.core.collector import gc_paused
from ccl.core.errors import InputError, VerificationError
from ccl.core.program import Program
from ccl.core.report import LinkUsage, RankUsage, Report, bus_factor, check_size, slot_bytes
from ccl.core.topology import Topology

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


OPTIONS = ("mode", "slices", "in_place", "overlap_latency", "local_bandwidth", "runtime")  # of Simulator.run


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
        """The flattened links the messages use (and the rank-switch paths the pushes and
        pulls use), in (src, dst) order, and each message's."""
        if self._links is not None:
            return self._links
        g = self.graph
        topo = self.program.topology
        n, V = topo.n_ranks, topo.n_vertices
        codes = g.msg_src * V + g.msg_dst
        uniq, which = np.unique(codes, return_inverse=True)
        pairs = [(int(c) // V, int(c) % V) for c in uniq]
        for a, b in pairs:
            if (topo.flat_link(a, b) if a < n and b < n else topo.switch_path(a, b)) is None:
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
             overlap_latency: bool = False, local_bandwidth: float | None = None,
             runtime: RuntimeCharges | None = None) -> Simulation:
        program = self.program
        check_size(size)
        if mode not in MODES:
            raise InputError(f"simulation mode must be one of {MODES}, got {mode!r}")
        validate.integer(slices, "slices", least=1)
        if local_bandwidth is not None:
            validate.number(local_bandwidth, "local bandwidth (GB/s)", positive=True)
        validate.flag(in_place, "in_place")
        validate.flag(overlap_latency, "overlap_latency")
        if runtime is not None and not isinstance(runtime, RuntimeCharges):
            raise InputError(f"runtime must be a runtime's charges (backends.cost.runtime.charges), got "
                             f"{type(runtime).__name__}")
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
        node_of = topo.node_of

        def link_class(a: int, b: int) -> str:
            if a >= n_ranks or b >= n_ranks:  # a push or pull: the switch's own class
                sw = topo.switches[max(a, b) - n_ranks]
                return "sharp" if sw.node is None and topo.n_nodes > 1 else "switch"
            return "net" if node_of[a] != node_of[b] else "nvlink"

        # a class the runtime's charges do not list is charged nothing (``RuntimeCharges``)
        efficiency = dict.fromkeys(LINK_CLASSES, 1.0) | (runtime.efficiency if runtime is not None else {})
        hop_us = dict.fromkeys(LINK_CLASSES, 0.0) | (runtime.hop_us if runtime is not None else {})
        # hops a push or pull shares with other messages: limits of their own
        shared = _switch_hops(topo, pairs) if np.any(g.msg_one_sided) else _SharedHops()
        for limit, total in zip(flat.limits, flat.limit_capacities):
            if limit.name in shared.names:
                continue  # the hop's limit, with the switch traffic too, is below
            if limit.bandwidth >= total - 1e-12:
                continue  # can never bind
            used = [p for p in limit.links if p in index]
            if not used:
                continue
            cls = "net" if any(link_class(*p) == "net" for p in used) else "nvlink"
            caps.append(limit.bandwidth * 1e3 * efficiency[cls])
            for p in used:
                limit_of.setdefault(p, []).append(len(caps) - 1)
        for bandwidth, cls, used in shared.limits:
            caps.append(bandwidth * 1e3 * efficiency[cls])
            for p in used:
                limit_of.setdefault(p, []).append(len(caps) - 1)
        resources = []
        for p in pairs:
            link = flat.link(*p) if p[0] < n_ranks and p[1] < n_ranks else topo.switch_link(*p)
            cls = link_class(*p)
            latency = link.latency  # type: ignore[union-attr]
            if runtime is not None:
                latency = max(latency, hop_us[cls]) + runtime.per_step_us
            resources.append(Resource(link.lanes, link.bandwidth * 1e3 * efficiency[cls], latency,  # type: ignore[union-attr]
                                      tuple(limit_of.get(p, ())), cut_through=cls in ("switch", "sharp")))
        msg_bytes = g.msg_count.astype(float) * per_slot
        op_bytes = (g.count.astype(float) * per_slot).tolist()
        local_rate = None if local_bandwidth is None else local_bandwidth * 1e3
        rank_start = [0.0] * n_ranks
        if local_rate is not None and not in_place:  # a rank first copies its aliased output slots
            rank_start = [sum(c for _a, _j, c in runs) * per_slot / local_rate for runs in program.alias_runs]
        if runtime is not None:  # nothing moves before the runtime has launched the call
            rank_start = [t + runtime.call_us(size) for t in rank_start]
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
            np.maximum.at(rank_finish, np.repeat(g.msg_rank_src, m), sent)
            np.maximum.at(rank_finish, np.repeat(g.msg_rank_dst, m), landed)
        end = float(rank_finish.max()) if len(rank_finish) else 0.0
        report = self._report(size, per_slot, mode, m, in_place, overlap_latency, local_bandwidth, end, pairs,
                              resources, res_q, bytes_q, start, sent, rank_finish)
        report = replace(report, simulation_seconds=time.perf_counter() - wall,
                         runtime="" if runtime is None else runtime.name,
                         runtime_label="" if runtime is None else runtime.label)
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
        out, into = src_q < n_ranks, dst_q < n_ranks  # a switch's end of a push or pull is no rank's
        sent_bytes = np.bincount(src_q[out], weights=bytes_q[out], minlength=n_ranks)
        recv_bytes = np.bincount(dst_q[into], weights=bytes_q[into], minlength=n_ranks)
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


class _SharedHops:
    """The hops pushes and pulls share with other messages (``_switch_hops``): the flattened
    limits named after them (``names``, replaced) and a limit per hop over every resource
    crossing it (``limits``: bandwidth in GB/s, link class, pairs)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.limits: list[tuple[float, str, list[tuple[int, int]]]] = []


def _switch_hops(topo: Topology, pairs: list[tuple[int, int]]) -> _SharedHops:
    """Where a push or pull crosses a link other used pairs cross too (a rank's NVSwitch port
    carries its unicast messages and its pushes alike; a NIC's uplink its node's traffic and
    its SHARP pushes), the link's capacity caps them together. The flattened topology's limits
    see only rank pairs: the limit named after such a hop is replaced by one over every pair
    and switch path crossing it; a limit the topology declares (PCIe, a NIC port) over a hop a
    switch path crosses takes those paths too."""
    out = _SharedHops()
    n = topo.n_ranks
    hops_of: dict[tuple[int, int], set[tuple[int, int]]] = {}
    for p in pairs:
        path = topo.routes_from(p[0])[p[1]] if p[0] < n and p[1] < n else topo.switch_path(*p)
        assert path is not None
        hops_of[p] = set(zip(path, path[1:]))
    users: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for p, hops in hops_of.items():
        if p[0] >= n or p[1] >= n:
            for hop in hops:
                users[hop] = []
    for p, hops in hops_of.items():
        for hop in hops & users.keys():
            users[hop].append(p)
    for limit in topo.limits:  # the topology's own caps (a NIC port, a PCIe switch)
        caps = set(limit.links)
        crossing = [p for p, hops in hops_of.items() if hops & caps]
        if any(p[0] >= n or p[1] >= n for p in crossing):
            out.names.add(limit.name)
            out.limits.append((limit.bandwidth, _hop_class(topo, crossing), crossing))
    for hop, used in sorted(users.items()):
        link = topo.link(*hop)
        assert link is not None
        out.names.add(f"{topo.vertex_name(hop[0])}->{topo.vertex_name(hop[1])}")
        carried = sum((topo.flat_link(*p) if p[0] < n and p[1] < n else topo.switch_link(*p)).capacity  # type: ignore[union-attr]
                      for p in used)
        if len(used) > 1 and carried > link.capacity + 1e-9:
            out.limits.append((link.capacity, _hop_class(topo, used), sorted(used)))
    return out


def _hop_class(topo: Topology, used: list[tuple[int, int]]) -> str:
    """The efficiency class of a cap over ``used``: the network's when any of them crosses
    nodes or reaches a switch outside the nodes, else NVLink's."""
    n = topo.n_ranks
    for a, b in used:
        if a < n and b < n:
            if topo.node_of[a] != topo.node_of[b]:
                return "net"
        elif topo.switches[max(a, b) - n].node is None and topo.n_nodes > 1:
            return "net"
    return "nvlink"


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
