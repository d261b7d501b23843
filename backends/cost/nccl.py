"""NCCL's cost model (src/graph/tuning.cc) as reference baselines: "x times faster than NCCL".

NCCL predicts ``time = latency + bytes / (1000 * algbw)`` for each (algorithm, protocol) and
picks the fastest. We follow its structure with the v2.30 latencies (us):

==========  ========================  ===========================  ===========================
algorithm   base (LL, LL128, Simple)  per hop on NVLink             per hop on the network
==========  ========================  ===========================  ===========================
ring        6.6, 14.0, 8.4            0.6, 1.9, 3.4                 2.7, 4.0, 14.0
tree        6.8, 14.0, 8.4            0.6, 1.25, 4.0                5.0, 8.5, 14.0
==========  ========================  ===========================  ===========================

* ring: ``nsteps`` = 2(n-1) for allreduce, n-1 for allgather/reducescatter, n for
  broadcast/reduce; of those, 2(N-1), N-1 or N cross nodes (N nodes) and pay the network
  latency. algbw = busbw x n / nsteps.
* tree (allreduce only): latency 2 ((n/N - 1) intra + log2(N) inter); algbw = busbw x 0.9 / 2.
* protocols scale busbw: LL 1/4 (1/3 for single-node allgather/reducescatter/broadcast),
  LL128 0.92 (tree: 7/9 on one node, 0.915 across nodes), Simple 1; tree LL 1/3.8.
* bytes: the nccl-tests size (allgather/reducescatter: the total, as NCCL's nBytes).

``busbw`` is what NCCL's channels can drive per rank: NCCL builds as many rings/trees over
the fabric as its topology search finds and they saturate every rank's links in the best case,
so we take the least, over ranks, of the bandwidth a rank has into the node's fabric (links to
other ranks and switches of its node, in and out), and for several nodes the least network
capacity of a node (links leaving the node's ranks, switches and NICs). This is optimistic for
NCCL where no set of rings uses every link (a line, a star), which only makes "x times faster
than NCCL" claims conservative. Not modelled: NCCL's hardware-specific caps and per-size
correction factors, the number of channels, PCIe-only machines (NVLink latencies are used
inside nodes), and its p2p alltoall (``nccl-p2p`` below is a plain model: one round of direct
sends at busbw, with Simple ring latencies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccl.core.report import Baseline
from ccl.core.topology import Topology

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LAT = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}
NVLINK_LAT = {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)}
NET_LAT = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0)}

RING_KINDS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")
P2P_KINDS = ("alltoall", "gather", "scatter")


@dataclass(frozen=True)
class Prediction:
    algorithm: str
    protocol: str
    time_us: float
    latency_us: float
    algbw_GBps: float

    def baseline(self) -> Baseline:
        return Baseline(f"nccl-{self.algorithm}", self.time_us,
                        f"NCCL model, {self.protocol}: {self.latency_us:.3g} us + size / {self.algbw_GBps:.4g} GB/s")


def bus_bandwidth(topology: Topology) -> float:
    """Per-rank bus bandwidth NCCL's channels can reach at best (GB/s, see module docstring)."""
    n = topology.n_ranks
    node_of_vertex = list(topology.node_of) + [s.node for s in topology.switches]

    def local(v: int, node: int) -> bool:
        if v < n:
            return topology.node_of[v] == node
        sw = topology.switches[v - n]
        return sw.kind == "switch" and sw.node == node or (sw.node is None and topology.n_nodes == 1)

    per_rank = math.inf
    for r in range(n):
        a = topology.node_of[r]
        out = sum(x.capacity for x in topology.out_links[r] if local(x.dst, a))
        inc = sum(x.capacity for x in topology.in_links[r] if local(x.src, a))
        per_rank = min(per_rank, out, inc)
    if topology.n_nodes > 1:
        for a in range(topology.n_nodes):
            members = {v for v in range(topology.n_vertices) if node_of_vertex[v] == a}
            out = sum(x.capacity for x in topology.links if x.src in members and x.dst not in members)
            inc = sum(x.capacity for x in topology.links if x.dst in members and x.src not in members)
            per_rank = min(per_rank, out, inc)
    return per_rank


def predict(kind: str, n_ranks: int, n_nodes: int, size: float, busbw: float, algorithm: str) -> Prediction | None:
    """NCCL's predicted time for ``algorithm`` ("ring" or "tree") with its fastest protocol, or
    None when NCCL has no such algorithm for the collective."""
    n, N = n_ranks, max(1, n_nodes)
    if n < 2 or busbw <= 0 or not math.isfinite(busbw):
        return None
    if algorithm == "ring" and kind not in RING_KINDS:
        return None
    if algorithm == "tree" and kind != "allreduce":
        return None
    best: Prediction | None = None
    for p, proto in enumerate(PROTOCOLS):
        bw = busbw
        if algorithm == "ring":
            if proto == "LL":
                bw *= 1 / 4 if (N > 1 or kind in ("allreduce", "reduce")) else 1 / 3
            elif proto == "LL128":
                bw *= 0.92
        else:
            bw *= 0.9
            if proto == "LL":
                bw *= 1 / 3.8
            elif proto == "LL128":
                bw *= 7 / 9 if N == 1 else 0.915
        intra = NVLINK_LAT[algorithm][p] * (1.8 if N > 1 and proto == "LL" else 1.0)
        inter = NET_LAT[algorithm][p]
        lat = BASE_LAT[algorithm][p]
        if algorithm == "ring":
            nsteps = 2 * (n - 1) if kind == "allreduce" else n - 1 if kind in ("allgather", "reducescatter") else n
            inter_steps = 2 * (N - 1) if kind == "allreduce" else N - 1 if kind in ("allgather", "reducescatter") else N
            if N == 1:
                inter_steps = 0
            if kind in ("broadcast", "reduce"):
                hop = (NET_LAT if N > 1 else NVLINK_LAT)["tree" if proto == "Simple" else "ring"][p]
                lat += nsteps * hop
            else:
                lat += (nsteps - inter_steps) * intra + inter_steps * inter
            algbw = bw * n / nsteps
            if proto == "Simple" and N > 1 and kind == "allreduce" and size >= n / 16 * 65536:
                lat *= 1.9  # NCCL's "plateau effect of ring"
        else:
            lat += 2 * ((n // N - 1) * intra + math.log2(N) * inter)
            algbw = bw * 0.5
        time = lat + size / (1000 * algbw)
        if best is None or time < best.time_us:
            best = Prediction(algorithm, proto, time, lat, algbw)
    return best


def p2p_model(kind: str, n_ranks: int, n_nodes: int, size: float, busbw: float) -> Prediction | None:
    """A plain model of NCCL's grouped point-to-point alltoall/gather/scatter: every rank (the
    root for gather/scatter) moves (n-1)/n of the size at busbw, after one Simple ring latency."""
    if kind not in P2P_KINDS or n_ranks < 2 or busbw <= 0:
        return None
    p = PROTOCOLS.index("Simple")
    hop = (NET_LAT if n_nodes > 1 else NVLINK_LAT)["ring"][p]
    lat = BASE_LAT["ring"][p] + hop
    moved = size * (n_ranks - 1) / n_ranks
    time = lat + moved / (1000 * busbw)
    return Prediction("p2p", "Simple", time, lat, size / (time - lat) / 1000 if time > lat else math.inf)


def baselines(kind: str, topology: Topology, size: float, floor_us: float = 0.0) -> list[Baseline]:
    """NCCL ring, tree and p2p model times for this collective (those that apply). A model
    time below ``floor_us`` (the lower bound: no runtime beats physics, but a cost model with an
    optimistic busbw can) is raised to it, and the detail says so."""
    busbw = bus_bandwidth(topology)
    preds = [predict(kind, topology.n_ranks, topology.n_nodes, size, busbw, a) for a in ("ring", "tree")]
    preds.append(p2p_model(kind, topology.n_ranks, topology.n_nodes, size, busbw))
    out = []
    for pred in preds:
        if pred is None:
            continue
        b = pred.baseline()
        if b.time_us < floor_us:
            b = Baseline(b.name, floor_us, b.detail + f"; below the lower bound ({b.time_us:.4g} us), shown at it")
        out.append(b)
    return out


P2P_LL_THRESHOLD = 16384  # NCCL_P2P_LL_THRESHOLD's default (src/enqueue.cc): LL for p2p up to this per peer


def protocol(kind: str, topology: Topology, size: float) -> str:
    """The protocol NCCL itself would use for a call of ``size`` bytes (the nccl-tests size):
    for the collectives NCCL runs as rings and trees, the protocol of its fastest predicted
    (algorithm, protocol) in the tuning model above (``src/graph/tuning.cc``: LL for small
    calls, LL128 in between, Simple for large ones, where the latencies and bandwidth factors
    cross on this machine); for alltoall, gather and scatter, which NCCL runs as point-to-point
    sends, LL when one peer's share (``size / n``) is at most ``NCCL_P2P_LL_THRESHOLD`` (16 KiB
    by default, ``src/enqueue.cc``), else Simple. Collectives NCCL does not have: Simple."""
    n = topology.n_ranks
    if kind in P2P_KINDS:
        return "LL" if size / max(1, n) <= P2P_LL_THRESHOLD else "Simple"
    busbw = bus_bandwidth(topology)
    preds = [p for p in (predict(kind, n, topology.n_nodes, size, busbw, a) for a in ("ring", "tree")) if p]
    if not preds:
        return "Simple"
    return min(preds, key=lambda p: (p.time_us, PROTOCOLS.index(p.protocol))).protocol
