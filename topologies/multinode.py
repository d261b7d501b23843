"""Multi-node composition: N copies of a node topology joined through NICs and a switched fabric.

Rank numbering: node * ranks_per_node + local rank. Node-local switch vertices are renamed
``n<node>.<name>``. Every NIC is a vertex of kind ``nic`` with a host link to and from each GPU
it serves (PCIe) and an up- and down-link to the fabric; the flattened view turns the NIC links
that many rank pairs share into per-NIC shared limits.

Fabrics:

* ``switch``: one non-blocking crossbar joining every NIC;
* ``leafspine``: a leaf switch per ``nodes_per_leaf`` nodes and one logical spine; each leaf's
  uplink carries the sum of its NICs' bandwidth divided by ``oversubscription``;
* ``rail``: rail-optimized: NIC k of every node on rail switch k, rails joined by a spine
  (a same-rail pair crosses one switch, a cross-rail pair three).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ccl.errors import TopologyError
from ccl.topology import Link, SharedLimit, Switch, Topology

from .hardware import NET_LAT

FABRICS = ("switch", "leafspine", "rail")
SWITCH_HOP_LAT = 0.25  # extra latency per leaf <-> spine hop (assumed)


@dataclass(frozen=True)
class Nic:
    """A NIC serving the node-local ranks ``hosts``: ``bandwidth`` to the network, ``host_bandwidth``
    between each host and the NIC (PCIe), ``latency`` end to end through the network."""

    hosts: tuple[int, ...]
    bandwidth: float
    host_bandwidth: float
    latency: float = NET_LAT


def multinode(
    node: Topology,
    n_nodes: int,
    nics: Sequence[Nic],
    *,
    fabric: str = "switch",
    nodes_per_leaf: int = 4,
    oversubscription: float = 1.0,
    name: str | None = None,
) -> Topology:
    """``n_nodes`` copies of ``node`` joined by ``nics`` through ``fabric``."""
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or n_nodes < 1:
        raise TopologyError(f"number of nodes must be a positive integer, got {n_nodes!r}")
    if fabric not in FABRICS:
        raise TopologyError(f"unknown fabric {fabric!r}; known: {', '.join(FABRICS)}")
    if node.n_nodes != 1:
        raise TopologyError(f"a node topology must be one node, {node.name!r} has {node.n_nodes}")
    if not nics and n_nodes > 1:
        raise TopologyError("nodes cannot be joined without NICs")
    if not oversubscription >= 1.0:
        raise TopologyError(f"oversubscription must be >= 1, got {oversubscription!r}")
    if isinstance(nodes_per_leaf, bool) or not isinstance(nodes_per_leaf, int) or nodes_per_leaf < 1:
        raise TopologyError(f"nodes_per_leaf must be a positive integer, got {nodes_per_leaf!r}")
    L = node.n_ranks
    for k, nic in enumerate(nics):
        if not nic.hosts or any(not 0 <= h < L for h in nic.hosts):
            raise TopologyError(f"NIC {k} serves ranks {list(nic.hosts)}, but a node has ranks 0..{L - 1}")
    name = name or f"{node.name}x{n_nodes}"
    n = L * n_nodes
    switches: list[Switch] = []
    links: list[Link] = []
    limits: list[SharedLimit] = []

    def add_switch(sw: Switch) -> int:
        switches.append(sw)
        return n + len(switches) - 1

    def both(a: int, b: int, bw: float, lat: float, lanes: int = 1) -> None:
        links.append(Link(a, b, bw, lat, lanes))
        links.append(Link(b, a, bw, lat, lanes))

    nic_ids: list[list[int]] = []
    for a in range(n_nodes):
        base = a * L
        local = {}
        for i, sw in enumerate(node.switches):
            local[L + i] = add_switch(Switch(f"n{a}.{sw.name}" if n_nodes > 1 else sw.name, sw.kind, a))

        def vid(v: int, base: int = base, local: dict[int, int] = local) -> int:
            return base + v if v < L else local[v]

        for link in node.links:
            links.append(Link(vid(link.src), vid(link.dst), link.bandwidth, link.latency, link.lanes))
        for limit in node.limits:
            prefix = f"n{a}." if n_nodes > 1 else ""
            limits.append(SharedLimit(prefix + limit.name, tuple((vid(x), vid(y)) for x, y in limit.links), limit.bandwidth))
        row = []
        if n_nodes > 1:
            for k, nic in enumerate(nics):
                v = add_switch(Switch(f"n{a}.nic{k}", "nic", a))
                for h in nic.hosts:
                    both(base + h, v, nic.host_bandwidth, 0.0)
                row.append(v)
        nic_ids.append(row)
    if n_nodes == 1:
        return Topology(name, n, tuple(links), tuple(switches), tuple(limits), (0,) * n)

    half = [nic.latency / 2 for nic in nics]
    if fabric == "switch":
        core = add_switch(Switch("fabric"))
        for a in range(n_nodes):
            for k, v in enumerate(nic_ids[a]):
                both(v, core, nics[k].bandwidth, half[k])
    elif fabric == "leafspine":
        n_leaves = -(-n_nodes // nodes_per_leaf)
        spine = add_switch(Switch("spine")) if n_leaves > 1 else None
        for leaf_index in range(n_leaves):
            leaf = add_switch(Switch(f"leaf{leaf_index}"))
            members = range(leaf_index * nodes_per_leaf, min(n_nodes, (leaf_index + 1) * nodes_per_leaf))
            uplink = 0.0
            for a in members:
                for k, v in enumerate(nic_ids[a]):
                    both(v, leaf, nics[k].bandwidth, half[k])
                    uplink += nics[k].bandwidth
            if spine is not None:
                both(leaf, spine, uplink / oversubscription, SWITCH_HOP_LAT)
    else:  # rail
        rails = [add_switch(Switch(f"rail{k}")) for k in range(len(nics))]
        spine = add_switch(Switch("spine")) if len(nics) > 1 else None
        for k, rail in enumerate(rails):
            for a in range(n_nodes):
                both(nic_ids[a][k], rail, nics[k].bandwidth, half[k])
            if spine is not None:
                both(rail, spine, nics[k].bandwidth * n_nodes / oversubscription, SWITCH_HOP_LAT)
    node_of = tuple(r // L for r in range(n))
    return Topology(name, n, tuple(links), tuple(switches), tuple(limits), node_of)
