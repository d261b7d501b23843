"""NCCL as NCCL would run: its algorithms and protocols, enabled by its rules for the machine,
each priced by the calibrated cost model, and its pick, the fastest of them.

Algorithms (NCCL 2.30's set) and what each moves, for a call of S bytes (nccl-tests size) on n
ranks, N nodes of m ranks; B_i is a rank's effective bandwidth into its node's fabric and B_n a
node's network bandwidth (NCCL runs a channel per NIC), both the nominal rate times the
calibrated efficiency (``calibration``), B_s a rank's through a reducing switch:

==============  ==============================  =========================================
algorithm       collectives                     bytes term (the latency terms follow
                                                NCCL's per-hop structure)
==============  ==============================  =========================================
Ring            allreduce, allgather,           every link of the ring carries 2(n-1)/n S
                reducescatter, broadcast,       (allreduce), (n-1)/n S or S, at the
                reduce                          protocol's share of min(B_i, B_n)
Tree            allreduce                       double binary tree: 2S at 0.92 min(B_i, B_n)
NVLS            allreduce (one node, or with    a switch reduction: each rank sends and
                SHARP), allgather,              receives (m+1)/m S at B_s (allgather and
                reducescatter (one node)        reducescatter: (m-1)/m S, nothing to gain);
                                                with SHARP a node's S once up and down, at B_n
NVLSTree        allreduce, several nodes        NVLS in the node, a tree across nodes: a
                                                node's 2S at B_n (S on 2 nodes)
CollNetDirect   allreduce with SHARP and        direct exchange in the node, the node's S up
                NVSwitch nodes                  and down to the reducing network switch
CollNetChain    allreduce with SHARP            a chain in the node, S through the network
PAT             allgather, reducescatter,       (n-1)/n S at 0.75 of the bandwidth, a
                one rank per node               logarithmic network latency
P2P             alltoall, gather, scatter       grouped sends: (n-1)/n S, the in-node and
                                                network shares at once
AllPairs        allreduce, allgather,           RCCL only, on fully connected nodes (the
                reducescatter (one node)        MSCCL schedules it runs by default): the
                                                ring's bytes over every peer's link at once,
                                                one or two steps of latency
==============  ==============================  =========================================

``runtime`` is "nccl" or "rccl" (AMD's fork: the same algorithms but NVLS, and AllPairs).
Protocols: LL keeps half the bandwidth (and at most NCCL's per-generation LL cap), LL128 0.92,
Simple all of it; each has its own launch and per-hop latency. NVLS, NVLSTree, CollNet and PAT
run Simple only. Enabled as NCCL 2.30 enables them (src/graph/tuning.cc): NVLS needs an NVSwitch
that reduces (Hopper and later) and, across nodes, SHARP; NVLSTree several nodes; CollNet SHARP;
PAT one rank per node. NCCL's pick is the fastest enabled (algorithm, protocol) under the model,
the baseline every "vs NCCL" figure is against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ccl.core.report import Baseline
from ccl.core.topology import Topology

from .calibration import Calibration, calibration, nccl_constants
from .machine import Machine

PROTOCOLS = ("LL", "LL128", "Simple")
RING_KINDS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")
P2P_KINDS = ("alltoall", "gather", "scatter")
NCCL_VERSION = "2.30"


@dataclass(frozen=True)
class Choice:
    """One (algorithm, protocol) NCCL could run, priced: ``time_us`` = ``latency_us`` + the
    bytes at ``algbw_GBps`` (nccl-tests size over the time the bytes take)."""

    algorithm: str
    protocol: str
    time_us: float
    latency_us: float
    algbw_GBps: float

    @property
    def name(self) -> str:
        return f"NCCL {self.algorithm}/{self.protocol}"

    def to_json(self) -> dict:
        return {"algorithm": self.algorithm, "protocol": self.protocol, "time_us": self.time_us,
                "latency_us": self.latency_us, "algbw_GBps": self.algbw_GBps}


def enabled(kind: str, machine: Machine, cal: Calibration | None = None, runtime: str = "nccl") -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs NCCL 2.30 (or RCCL) would consider for ``kind`` on ``machine``."""
    cal = cal or calibration()
    n, nodes = machine.n_ranks, machine.n_nodes
    if n < 2:
        return []
    out: list[tuple[str, str]] = []
    if runtime == "rccl":
        machine = replace(machine, nvls=False)
        if machine.direct and nodes == 1 and kind in ("allreduce", "allgather", "reducescatter"):
            out += [("AllPairs", p) for p in PROTOCOLS]
    if kind in RING_KINDS:
        out += [("Ring", p) for p in PROTOCOLS]
    if kind == "allreduce":
        out += [("Tree", p) for p in PROTOCOLS]
        nvls = machine.nvls and machine.ppn >= cal.nvls_min_ranks.get(machine.generation.name, 2)
        if nvls and (nodes == 1 or machine.sharp):
            out.append(("NVLS", "Simple"))
        if nvls and nodes > 1:
            out.append(("NVLSTree", "Simple"))
        if machine.sharp and machine.nvswitch:
            out.append(("CollNetDirect", "Simple"))
        if machine.sharp:
            out.append(("CollNetChain", "Simple"))
    if kind in ("allgather", "reducescatter"):
        if machine.nvls and nodes == 1 and machine.ppn >= cal.nvls_min_ranks.get(machine.generation.name, 2):
            out.append(("NVLS", "Simple"))
        if machine.ppn == 1 and nodes > 1:
            out.append(("PAT", "Simple"))
    if kind in P2P_KINDS:
        out += [("P2P", "LL"), ("P2P", "Simple")]
    return out


def price(kind: str, machine: Machine, algorithm: str, protocol: str, size: float,
          cal: Calibration | None = None, graph: bool = False) -> Choice:
    """The modelled time of one (algorithm, protocol) for a call of ``size`` bytes (``graph``:
    captured in a CUDA/HIP graph, which launches without the host)."""
    cal = cal or calibration()
    consts = nccl_constants(NCCL_VERSION)
    gen = machine.generation
    n, nodes, m = machine.n_ranks, machine.n_nodes, machine.ppn
    b_i = machine.intra_GBps * cal.efficiency("nvlink", gen.name)
    b_n = machine.net_GBps * cal.efficiency("net", gen.name) if nodes > 1 else math.inf
    b_s = machine.intra_GBps * cal.nvls_efficiency.get(gen.name, min(cal.nvls_efficiency.values()))
    bw = min(b_i, b_n)
    if not bw > 0:  # a rank with no bandwidth to move its bytes (a degenerate machine): never a choice
        return Choice(algorithm, protocol, math.inf, math.inf, 0.0)
    p = PROTOCOLS.index(protocol)
    scale = cal.latency(gen.name)
    hop_in = cal.hop_us["nvlink"][protocol] * scale
    hop_net = max(cal.hop_us["net"][protocol] * scale, machine.net_latency_us)  # a slow fabric's own latency shows
    launch = cal.launch_us[protocol] * scale * (cal.graph_launch_share if graph else 1.0)
    share = cal.protocol_efficiency[protocol]
    ll_cap = cal.ll_cap_scale * (consts["ll_max_GBps"][str(gen.compcap)][min(nodes, 3) - 1] if nodes == 1 else
                                 consts["ll_max_GBps"]["70"][min(nodes, 3) - 1])  # several nodes: the CPU's row (x86)

    fill = cal.fill(size)

    def bus(bandwidth: float) -> float:
        scaled = bandwidth * share
        return min(scaled, ll_cap) if protocol == "LL" else scaled

    if algorithm == "Ring":
        steps = 2 * (n - 1) if kind == "allreduce" else n - 1
        inter = 0 if nodes == 1 else (2 * (nodes - 1) if kind == "allreduce" else nodes - 1)
        latency = launch + (steps - inter) * hop_in + inter * hop_net
        per_byte = {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "reducescatter": (n - 1) / n}.get(kind, 1.0)
        if kind == "allreduce" and protocol == "Simple" and nodes > 1 and size >= 64 * 16 * n:
            key = "from_80" if gen.compcap >= 80 else "before_80"
            latency *= consts["ring_simple_multinode_allreduce_latency_factor"][key]  # NCCL's "plateau" of rings
        return _choice(algorithm, protocol, latency, size, size * per_byte / bus(bw), fill)
    if algorithm == "Tree":
        factor = consts["tree_allreduce_bandwidth_factor"]
        if protocol == "LL":
            tree_bw = min(bw * factor * consts["tree_ll_bandwidth_factor"], ll_cap)
        elif protocol == "LL128":
            tree_bw = bw * factor * consts["tree_ll128_bandwidth_factor"]["one_node" if nodes == 1 else "several_nodes"]
        else:
            tree_bw = bw * factor
        log = int(math.log2(max(size, 64) / 64))
        if 0 <= log < 23:
            tree_bw *= consts["tree_correction_factor"][protocol][log]
        latency = launch + 2 * ((m - 1) * hop_in + math.log2(nodes) * hop_net)
        return _choice(algorithm, protocol, latency, size, 2 * size / tree_bw, fill)
    if algorithm == "NVLS":
        latency = cal.nvls_latency_us * scale + (hop_net if nodes > 1 else 0.0)
        if kind == "allreduce":
            seconds = max(size * (m + 1) / m / b_s, size / b_n if nodes > 1 else 0.0)
        else:
            seconds = size * (m - 1) / m / b_s
        return _choice(algorithm, protocol, latency, size, seconds, fill)
    if algorithm == "NVLSTree":
        latency = cal.nvls_latency_us * scale + 2 * math.log2(nodes) * hop_net
        network = size / b_n * (1.0 if nodes <= 2 else 2.0)
        return _choice(algorithm, protocol, latency, size, max(size * (m + 1) / m / b_s, network), fill)
    if algorithm == "CollNetDirect":
        latency = launch + 2 * (hop_in + 0.4 * (m - 1)) + hop_net * consts["hop_latency_us"]["net"]["CollNetDirect"][2] / \
            consts["hop_latency_us"]["net"]["Ring"][2]
        return _choice(algorithm, protocol, latency, size, max(2 * (m - 1) / m * size / b_i, size / b_n), fill)
    if algorithm == "CollNetChain":
        latency = launch + 2 * (m - 1) * hop_in + hop_net * consts["hop_latency_us"]["net"]["CollNetChain"][2] / \
            consts["hop_latency_us"]["net"]["Ring"][2]
        return _choice(algorithm, protocol, latency, size, max(size / b_i, size / b_n), fill)
    if algorithm == "PAT":
        pat = consts["pat_latency"]
        latency = consts["base_latency_us"]["PAT"][p] + math.log2(nodes) * hop_net / pat["log_net_divisor"] \
            + n * pat["per_rank_us"]
        return _choice(algorithm, protocol, latency, size,
                       size * (n - 1) / n / (bw * consts["pat_bandwidth_factor"]), fill)
    if algorithm == "AllPairs":
        steps = 2 if kind == "allreduce" else 1
        per_byte = {"allreduce": 2 * (n - 1) / n}.get(kind, (n - 1) / n)
        return _choice(algorithm, protocol, launch + steps * hop_in, size, size * per_byte / bus(bw), fill)
    if algorithm == "P2P":
        latency = launch + (hop_net if nodes > 1 else hop_in)
        if kind == "alltoall":
            intra = size * (m - 1) / n / bus(b_i)
            net = m * size * (n - m) / n / bus(b_n) if nodes > 1 else 0.0
            seconds = max(intra, net)
        else:
            seconds = size * (n - 1) / n / bus(bw)
        return _choice(algorithm, protocol, latency, size, seconds, fill)
    raise ValueError(f"unknown NCCL algorithm {algorithm!r}")


def _choice(algorithm: str, protocol: str, latency: float, size: float, byte_us_per_GBps: float,
            fill: float = 0.0) -> Choice:
    """``byte_us_per_GBps``: bytes over GB/s (so / 1e3 is microseconds); ``fill``: the call's
    pipeline fill (``Calibration.fill``)."""
    transfer = byte_us_per_GBps / 1e3 + fill
    time = latency + transfer
    return Choice(algorithm, protocol, time, latency, size / transfer / 1e3 if transfer > 0 else math.inf)


def choices(kind: str, topology: Topology, size: float, cal: Calibration | None = None,
            runtime: str = "nccl") -> list[Choice]:
    """Every enabled (algorithm, protocol), fastest first (ties: NCCL's algorithm order)."""
    machine = Machine.of(topology)
    out = [price(kind, machine, a, p, size, cal) for a, p in enabled(kind, machine, cal, runtime)]
    return sorted((c for c in out if math.isfinite(c.time_us)), key=lambda c: c.time_us)


def pick(kind: str, topology: Topology, size: float, cal: Calibration | None = None) -> Choice | None:
    """NCCL's pick: the fastest enabled (algorithm, protocol); None for a collective NCCL does
    not have (custom) or a single rank."""
    found = choices(kind, topology, size, cal)
    return found[0] if found else None


def baselines(kind: str, topology: Topology, size: float, cal: Calibration | None = None) -> list[Baseline]:
    """NCCL's pick as the baseline named ``nccl`` (its detail names the algorithm and protocol),
    then the runner-up algorithms (``nccl-ring``, ``nccl-tree``, ...: each at its best protocol)."""
    found = choices(kind, topology, size, cal)
    if not found:
        return []
    best = found[0]
    out = [Baseline("nccl", best.time_us, f"{best.name} (NCCL {NCCL_VERSION} rules, calibrated model): "
                                          f"{best.latency_us:.3g} us + size / {best.algbw_GBps:.4g} GB/s",
                    best.algorithm, best.protocol)]
    seen = {best.algorithm}
    for c in found[1:]:
        if c.algorithm in seen:
            continue
        seen.add(c.algorithm)
        out.append(Baseline(f"nccl-{c.algorithm.lower()}", c.time_us,
                            f"{c.name}: {c.latency_us:.3g} us + size / {c.algbw_GBps:.4g} GB/s", c.algorithm,
                            c.protocol))
    return out


def bus_bandwidth(topology: Topology) -> float:
    """The nominal per-rank bandwidth NCCL's rings can drive (GB/s): the least of a rank's
    bandwidth into its node and its share of the node's network."""
    machine = Machine.of(topology)
    return min(machine.intra_GBps, machine.net_GBps)


P2P_LL_THRESHOLD = 16384  # NCCL_P2P_LL_THRESHOLD's default (src/enqueue.cc): LL for p2p up to this per peer


def protocol(kind: str, topology: Topology, size: float, cal: Calibration | None = None) -> str:
    """The protocol NCCL itself would run a point-to-point schedule of ``kind`` with, for a call
    of ``size`` bytes (the nccl-tests size): for the collectives NCCL runs as rings and trees,
    the protocol of the fastest of its Ring, Tree (and RCCL's AllPairs) choices in the model
    above (its in-network algorithms run Simple only and are not point-to-point); for alltoall,
    gather and scatter, which NCCL runs as point-to-point sends, LL when one peer's share
    (``size / n``) is at most ``NCCL_P2P_LL_THRESHOLD`` (16 KiB by default, ``src/enqueue.cc``),
    else Simple. Collectives NCCL does not have: Simple."""
    n = topology.n_ranks
    if kind in P2P_KINDS:
        return "LL" if size / max(1, n) <= P2P_LL_THRESHOLD else "Simple"
    found = [c for c in choices(kind, topology, size, cal) if c.algorithm in ("Ring", "Tree", "AllPairs")]
    return found[0].protocol if found else "Simple"
