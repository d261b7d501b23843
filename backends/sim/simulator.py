"""Simulate a schedule: ``simulate(algorithm, size, **options) -> Report``.

The model (stated once here; ``engine`` and ``graph`` give the mechanics):

* **Bytes.** ``size`` follows nccl-tests (see ``ccl.report``): the largest per-rank buffer
  holds ``size`` bytes, so a slot holds ``size / max_slots`` bytes and a transfer of ``count``
  slots moves ``count`` times that.
* **Links.** Transfers between ranks use the flattened topology's link for their rank pair
  (``Topology.flat()``): through switches and NICs that link's latency is the sum over its
  path and its bandwidth the narrowest hop's. A transfer of b bytes costs latency + b /
  bandwidth of a lane (``overlap_latency`` says whether the latency holds the lane).
* **Lanes.** A link with k lanes serves k transfers at once, each at the per-lane bandwidth;
  one transfer never spreads over several lanes. Lanes are parallel physical links (the two
  NVLinks of a DGX-1 pair), and this is the accounting the schedule IR and SCCL use (a link
  with L lanes carries L chunks per round), so a schedule that sends one big transfer over a
  double link uses half of it, exactly as the verifier's lanes x rounds capacity implies.
* **FIFO.** Ready transfers queue on their link first come first served.
* **Shared limits** (a NIC, a PCIe switch, a switch port several flattened links cross) cap
  the summed rate of their links; transfers under limits share them max-min fairly.
* **Dependency-driven** (``mode="dependency"``, default): a transfer starts once its source
  data has landed and a lane is free; its data lands once its destination may be overwritten
  (see ``graph``). This is how MSCCL-style runtimes run schedules: no global barriers.
* **Step-synchronous** (``mode="step"``): step s starts when every transfer of step s-1 has
  landed, as SCCL's step model assumes; never faster in practice, useful for comparison.
* **Rounds** (SCCL) cost nothing by themselves: the simulator charges the transfers a step
  actually carries. A link with L lanes carrying m <= L x rounds[s] slots in a step needs
  ceil(m / L) back-to-back transfers, so a full step costs rounds[s] x (latency + slot /
  bandwidth), which is SCCL's accounting when latency holds the lane.
* **Local copies** (src == dst, and the out-of-place copy of aliased slots) are free unless
  ``local_bandwidth`` (GB/s) is given; then each rank has one copy engine of that bandwidth.
* **Aliased slots.** Out of place (default) an output slot that aliases an input slot starts
  as a local copy of it, made at time 0 on every rank; ``in_place=True`` makes them one memory.
* **Slicing.** ``slices=m`` cuts every transfer into m equal pieces; slice j of a transfer
  depends only on slice j of the transfers it depends on, so slices pipeline through the
  schedule like NCCL's slices (each piece pays the latency again).

Not modelled: compute time of reductions, GPU SM or copy-engine contention between links of
one rank, protocol overheads; the NCCL baselines are cost models, not simulations.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ccl.algorithm import Algorithm
from ccl.errors import InputError, VerificationError
from ccl.report import LinkUsage, RankUsage, Report, bus_factor, check_size, slot_bytes

from .engine import Engine, Resource
from .graph import DependencyGraph

MODES = ("dependency", "step")


@dataclass
class Simulation:
    """One run: the report plus per-transfer timings for traces and plots.

    Arrays are indexed by internal id ``v = i * slices + j`` where i is the transfer's position
    in execution order (``transfer_index[i]`` is its index in ``algorithm.transfers``) and j its
    slice. ``resource_pairs[r]`` is (src, dst) of link r, or (rank, rank) for a copy engine."""

    algorithm: Algorithm
    report: Report
    slices: int
    transfer_index: np.ndarray
    start: np.ndarray
    sent: np.ndarray
    done: np.ndarray
    lane: np.ndarray
    resource: np.ndarray
    nbytes: np.ndarray
    resource_pairs: list[tuple[int, int]]
    resource_lanes: list[int]
    resource_capacity: list[float]
    graph: DependencyGraph

    @property
    def time_us(self) -> float:
        return self.report.time_us

    def trace(self) -> dict[str, Any]:
        from .trace import chrome_trace

        return chrome_trace(self)

    def write_trace(self, path: str) -> None:
        from .trace import write_trace

        write_trace(self, path)

    def plot(self, path: str) -> None:
        """A PNG with the timeline and the link-utilization heatmap."""
        from .plots import plot_simulation

        plot_simulation(self, path)


class Simulator:
    """Simulates one schedule at many sizes and options; the dependency graph (which depends
    only on the schedule and ``in_place``) is built once."""

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm
        self._graphs: dict[bool, DependencyGraph] = {}
        self._links: tuple[list[tuple[int, int]], dict[tuple[int, int], int]] | None = None

    def graph(self, in_place: bool) -> DependencyGraph:
        if in_place not in self._graphs:
            self._graphs[in_place] = DependencyGraph(self.algorithm, in_place=in_place)
        return self._graphs[in_place]

    def _map_links(self, g: DependencyGraph) -> tuple[list[tuple[int, int]], dict[tuple[int, int], int]]:
        """The flattened links the schedule uses, in (src, dst) order."""
        if self._links is not None:
            return self._links
        alg = self.algorithm
        topo = alg.topology
        n = topo.n_ranks
        remote = g.src != g.dst
        codes = np.unique(g.src[remote] * n + g.dst[remote])
        pairs = [(int(c) // n, int(c) % n) for c in codes]
        for a, b in pairs:
            if topo.flat_link(a, b) is None:
                k = next(i for i, t in enumerate(alg.transfers) if (t.src, t.dst) == (a, b))
                raise VerificationError(
                    f"transfer {k} ({alg.transfers[k].describe()}): topology {topo.name!r} has no link "
                    f"from rank {a} to rank {b}",
                    rank=a, step=alg.transfers[k].step, transfer=k,
                )
        self._links = pairs, {p: i for i, p in enumerate(pairs)}
        return self._links

    def run(self, size: float, **options: Any) -> Simulation:
        """Simulate one call of ``size`` bytes (see ``simulate`` for the options)."""
        enabled = gc.isenabled()
        gc.disable()  # millions of short-lived tuples: the cyclic collector only costs time here
        try:
            return self._run(size, **options)
        finally:
            if enabled:
                gc.enable()

    def _run(
        self,
        size: float,
        *,
        mode: str = "dependency",
        slices: int = 1,
        in_place: bool = False,
        overlap_latency: bool = False,
        local_bandwidth: float | None = None,
        bound: bool = True,
        baselines: bool = True,
    ) -> Simulation:
        alg = self.algorithm
        check_size(size)
        if mode not in MODES:
            raise InputError(f"simulation mode must be one of {MODES}, got {mode!r}")
        if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
            raise InputError(f"slices must be a positive integer, got {slices!r}")
        if local_bandwidth is not None and not (local_bandwidth > 0):
            raise InputError(f"local bandwidth must be positive GB/s, got {local_bandwidth!r}")
        wall = time.perf_counter()
        topo = alg.topology
        flat = topo.flat()
        n_ranks = topo.n_ranks
        g = self.graph(in_place)
        cg = g.compiled(slices, mode)
        m = slices
        per_slot = slot_bytes(alg.collective, size)

        # resources: flattened links used by the schedule, then one copy engine per rank
        pairs, index = self._map_links(g)
        limit_of: dict[tuple[int, int], list[int]] = {}
        caps: list[float] = []
        for limit in flat.limits:
            total = sum(flat.link(a, b).capacity for a, b in limit.links)  # type: ignore[union-attr]
            if limit.bandwidth >= total - 1e-12:
                continue  # can never bind
            used = [p for p in limit.links if p in index]
            if len(used) < 1:
                continue
            caps.append(limit.bandwidth * 1e3)
            for p in used:
                limit_of.setdefault(p, []).append(len(caps) - 1)
        resources: list[Resource] = []
        for p in pairs:
            link = flat.link(*p)
            assert link is not None
            resources.append(Resource(link.lanes, link.bandwidth * 1e3, link.latency, tuple(limit_of.get(p, ()))))
        local_base = len(resources)
        if local_bandwidth is not None:
            resources.extend(Resource(1, local_bandwidth * 1e3, 0.0) for _ in range(n_ranks))

        # per internal transfer: resource and bytes
        codes = g.src * n_ranks + g.dst
        link_codes = np.array([a * n_ranks + b for a, b in pairs], dtype=np.int64)  # sorted
        res = np.searchsorted(link_codes, codes) if len(link_codes) else np.zeros(len(codes), dtype=np.int64)
        local = g.src == g.dst
        if local_bandwidth is not None:
            res = np.where(local, local_base + g.src, res)
        else:
            res = np.where(local, -1, res)
        nbytes = g.count.astype(float) * (per_slot / m)
        res_v = np.repeat(res, m)
        bytes_v = np.repeat(nbytes, m)

        engine = Engine(cg, res_v.tolist(), bytes_v.tolist(), resources, caps, overlap_latency=overlap_latency)
        init_done = [0.0] * n_ranks
        if local_bandwidth is not None:
            for r in range(n_ranks):
                init_done[r] = g.aliased[r] * per_slot / (local_bandwidth * 1e3)
                engine.lane_free[local_base + r][0] = init_done[r]
        if mode == "dependency":
            engine.run_dependency(init_done)
            end = max(engine.done, default=0.0)
        else:
            times = engine.run_steps(max(init_done, default=0.0))
            end = times[-1]
        end = max(end, max(init_done, default=0.0))

        start = np.asarray(engine.start)
        sent = np.asarray(engine.sent)
        done = np.asarray(engine.done)
        lane = np.asarray(engine.lane, dtype=np.int64)
        report = self._report(size, per_slot, mode, m, in_place, overlap_latency, local_bandwidth,
                              end, pairs, resources, res_v, bytes_v, start, sent, done, g, bound, baselines)
        report = replace(report, simulation_seconds=time.perf_counter() - wall)
        pair_list = list(pairs)
        if local_bandwidth is not None:
            pair_list += [(r, r) for r in range(n_ranks)]
        return Simulation(
            algorithm=alg, report=report, slices=m, transfer_index=g.order, start=start, sent=sent,
            done=done, lane=lane, resource=res_v, nbytes=bytes_v, resource_pairs=pair_list,
            resource_lanes=[x.lanes for x in resources],
            resource_capacity=[x.lanes * x.rate / 1e3 for x in resources], graph=g,
        )

    def _report(self, size, per_slot, mode, m, in_place, overlap, local_bw, end, pairs, resources,
                res_v, bytes_v, start, sent, done, g, want_bound, want_baselines) -> Report:
        alg = self.algorithm
        topo = alg.topology
        coll = alg.collective
        n_ranks = topo.n_ranks
        links: list[LinkUsage] = []
        n_links = len(pairs)
        on_link = res_v >= 0
        if n_links:
            sel = on_link & (res_v < n_links)
            ids = res_v[sel]
            link_bytes = np.bincount(ids, weights=bytes_v[sel], minlength=n_links)
            link_busy = np.bincount(ids, weights=(sent - start)[sel], minlength=n_links)
            link_count = np.bincount(ids, minlength=n_links) // m
            for i, (a, b) in enumerate(pairs):
                res = resources[i]
                capacity = res.lanes * res.rate / 1e3
                util = link_bytes[i] / (capacity * 1e3 * end) if end > 0 else 0.0
                links.append(LinkUsage(a, b, float(link_bytes[i]), int(link_count[i]),
                                       float(link_busy[i] / res.lanes), capacity, res.lanes, float(util)))
        src_v = np.repeat(g.src, m)
        dst_v = np.repeat(g.dst, m)
        remote = src_v != dst_v
        sent_bytes = np.bincount(src_v[remote], weights=bytes_v[remote], minlength=n_ranks)
        recv_bytes = np.bincount(dst_v[remote], weights=bytes_v[remote], minlength=n_ranks)
        finish = np.zeros(n_ranks)
        if len(done):
            order = np.argsort(dst_v, kind="stable")
            ranks_sorted = dst_v[order]
            firsts = np.flatnonzero(np.r_[True, ranks_sorted[1:] != ranks_sorted[:-1]])
            finish[ranks_sorted[firsts]] = np.maximum.reduceat(done[order], firsts)
        ranks = tuple(RankUsage(r, float(sent_bytes[r]), float(recv_bytes[r]), float(finish[r]))
                      for r in range(n_ranks))
        if want_bound:
            from solvers.bounds import lower_bound

            b = lower_bound(topo, coll, size)
            bound_us, lat_us, bw_us, binding, method = b.bound_us, b.latency_us, b.bandwidth_us, b.binding, b.method
        else:
            bound_us = lat_us = bw_us = 0.0
            binding, method = "none", "not computed"
        base = []
        if want_baselines and coll.kind != "custom":
            from .nccl import baselines

            base = baselines(coll.kind, topo, size, bound_us if math.isfinite(bound_us) else 0.0)
        options = {"slices": m, "in_place": in_place, "overlap_latency": overlap,
                   "local_bandwidth_GBps": local_bw}
        return Report(
            algorithm=alg.name, collective=coll.kind, n_ranks=n_ranks, topology=topo.name,
            solver=alg.solver, size=size, slot_bytes=per_slot, mode=mode, steps=alg.n_steps,
            transfers=len(alg.transfers), time_us=float(end), bus_factor=bus_factor(coll.kind, n_ranks),
            bound_us=bound_us if math.isfinite(bound_us) else 0.0, latency_bound_us=lat_us,
            bandwidth_bound_us=bw_us if math.isfinite(bw_us) else 0.0, bound_binding=binding,
            bound_method=method, links=tuple(links), ranks=ranks, baselines=tuple(base), options=options,
        )


def simulate(algorithm: Algorithm, size: float, **options: Any) -> Report:
    """Simulate ``algorithm`` called with ``size`` bytes (nccl-tests convention, see
    ``ccl.report``) and return its Report. Options: ``mode`` ("dependency" or "step"),
    ``slices``, ``in_place``, ``overlap_latency``, ``local_bandwidth`` (GB/s), ``bound``
    and ``baselines`` (compute the lower bound and the NCCL models; default True). The
    schedule is assumed verified (``ccl.verify``); ``ccl simulate`` verifies first."""
    return run(algorithm, size, **options).report


def run(algorithm: Algorithm, size: float, **options: Any) -> Simulation:
    """Like ``simulate`` but returns the Simulation (per-transfer timings, trace, plots)."""
    return Simulator(algorithm).run(size, **options)
