"""A machine as NCCL sees it: ranks, nodes, the per-rank bandwidth inside a node and across the
network, and what the switches can do. NCCL's algorithms are priced on this view
(``backends.cost.nccl``); it is derived from the topology once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccl.core.hardware import Generation, generation
from ccl.core.topology import Topology


@dataclass(frozen=True)
class Machine:
    """``intra_GBps``: the least nominal bandwidth a rank has into its node's fabric (links to
    other ranks and switches of its node, the smaller of in and out; ``inf`` when no rank has a peer
    in its node); ``net_GBps``: the least
    nominal network bandwidth of a node (its links leaving it, the smaller of in and out; NCCL
    runs a channel per NIC, so a ring across nodes has all of it), ``inf`` on one node;
    ``net_latency_us``: the least latency between ranks of different nodes. ``nvswitch``: every rank of a node reaches the others through one switch of the
    node; ``nvls``: such a switch can reduce and multicast and the generation supports it;
    ``sharp``: a switch outside the nodes can reduce (InfiniBand SHARP); ``direct``: every two
    ranks of a node share a link of their own (a fully connected mesh such as AMD's Infinity
    Fabric nodes)."""

    n_ranks: int
    n_nodes: int
    ppn: int
    generation: Generation
    intra_GBps: float
    net_GBps: float
    net_latency_us: float
    nvswitch: bool
    nvls: bool
    sharp: bool
    direct: bool

    @classmethod
    def of(cls, topology: Topology) -> Machine:
        cache = topology._cache  # a Topology is frozen: its derived views live in its cache
        if "cost_machine" not in cache:
            cache["cost_machine"] = _machine(topology)
        return cache["cost_machine"]


def _machine(topology: Topology) -> Machine:
    n = topology.n_ranks
    gen = generation(topology.accelerator)

    def on_node(v: int, node: int) -> bool:
        if v < n:
            return topology.node_of[v] == node
        sw = topology.switches[v - n]
        return sw.kind == "switch" and (sw.node == node or (sw.node is None and topology.n_nodes == 1))

    intra = math.inf
    for r in range(n):
        a = topology.node_of[r]
        if len(topology.node_ranks[a]) == 1:
            continue  # no peer in its node: its node's fabric carries none of its traffic
        out = sum(x.capacity for x in topology.out_links[r] if on_node(x.dst, a))
        inc = sum(x.capacity for x in topology.in_links[r] if on_node(x.src, a))
        intra = min(intra, out, inc)
    net = math.inf
    if topology.n_nodes > 1:
        node_of_vertex = list(topology.node_of) + [s.node for s in topology.switches]
        for a in range(topology.n_nodes):
            members = {v for v in range(topology.n_vertices) if node_of_vertex[v] == a}
            out = sum(x.capacity for x in topology.links if x.src in members and x.dst not in members)
            inc = sum(x.capacity for x in topology.links if x.dst in members and x.src not in members)
            net = min(net, out, inc)
    nvswitch = nvls = False
    for i, sw in enumerate(topology.switches):
        if sw.kind != "switch" or sw.node is None and topology.n_nodes > 1:
            continue
        v = n + i
        linked = {x.dst for x in topology.out_links[v] if x.dst < n} & {x.src for x in topology.in_links[v] if x.src < n}
        node = topology.node_ranks[sw.node or 0]
        if set(node) <= linked and len(node) > 1:
            nvswitch = True
            nvls = nvls or (sw.reduce and gen.nvls)
    sharp = any(sw.reduce and sw.node is None for sw in topology.switches) and topology.n_nodes > 1
    ppn = min(len(x) for x in topology.node_ranks)
    net_latency = 0.0
    if topology.n_nodes > 1:
        flat = topology.flat()
        net_latency = min((x.latency for x in flat.links if topology.node_of[x.src] != topology.node_of[x.dst]),
                          default=0.0)
    direct = all(topology.link(a, b) is not None for node in topology.node_ranks for a in node for b in node if a != b)
    return Machine(n, topology.n_nodes, ppn, gen, intra, net, net_latency, nvswitch,
                   nvls, sharp, direct and ppn > 1)
