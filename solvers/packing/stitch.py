"""Identical nodes solved once and stitched with the fabric (allgather-like phases at scale).

A cluster of identical nodes (the same ranks, switches and links inside every node, local
index for local index) gets trees of two levels instead of one packing of the whole graph:

* inside a node: the packing of one node alone (its ranks and non-NIC switches), computed
  once; local root i has trees I_i with weights;
* across nodes: rank (a, i) (local index i of node a) sends to (b, i) of every other node
  directly (a star over the rail of local index i, through the fabric as the flattened
  topology routes it).

The tree of root (a, i) is the rail star followed, in every node b, by a copy of an intra-node
tree of root i hung from (b, i). Its rate is not assumed: ``physical_time`` routes every tree
arc over the physical links (and shared limits) and reports the busiest one, which is what
the schedule will meet. On rail-optimized and single-switch fabrics whose NICs are the
bottleneck (the usual multi-node case from a few nodes up) this meets the cut bound; where the
NICs could also relieve the intra-node links (2 nodes of DGX H100), the whole-graph packing does
better and the caller keeps it when it is affordable.
"""

from __future__ import annotations

import math

from ccl.core.topology import Link, Switch, Topology

from ..builders.schedule import Router
from .trees import Tree, merge_equal, topological_order


def node_topology(topology: Topology) -> Topology | None:
    """One node alone (ranks and non-NIC switches, local numbering), or None unless the
    topology has at least two nodes and every node is the same, local index for local index."""
    if topology.n_nodes < 2 or not topology.uniform_nodes:
        return None
    if "node" not in topology._cache:
        topology._cache["node"] = _node_topology(topology)
    return topology._cache["node"]


def _node_topology(topology: Topology) -> Topology | None:
    n = topology.n_ranks
    node_switches: list[list[int]] = [[] for _ in range(topology.n_nodes)]
    for k, s in enumerate(topology.switches):
        if s.node is not None:
            node_switches[s.node].append(n + k)
    shapes = []
    for a, ranks in enumerate(topology.node_ranks):
        local = {r: i for i, r in enumerate(ranks)}
        m = len(ranks)
        for j, v in enumerate(node_switches[a]):
            local[v] = m + j
        links = sorted(
            (local[link.src], local[link.dst], link.bandwidth, link.latency, link.lanes)
            for v in local for link in topology.out_links[v] if link.dst in local
        )
        kinds = tuple(topology.switches[v - n].kind for v in node_switches[a])
        shapes.append((kinds, tuple(links)))
    if any(shape != shapes[0] for shape in shapes[1:]):
        return None
    kinds, links = shapes[0]
    m = len(topology.node_ranks[0])
    keep = {i: i for i in range(m)}
    switches: list[Switch] = []
    for j, kind in enumerate(kinds):
        if kind != "nic":
            keep[m + j] = m + len(switches)
            switches.append(Switch(f"switch{len(switches)}", kind))
    inner = tuple(Link(keep[s], keep[d], bw, lat, lanes)
                  for s, d, bw, lat, lanes in links if s in keep and d in keep)
    return Topology(name=f"{topology.name}.node", n_ranks=m, links=inner, switches=tuple(switches),
                    accelerator=topology.accelerator)


def stitch(topology: Topology, intra: list[Tree] | None, grouped: bool = False,
           root: int | None = None) -> list[Tree] | None:
    """Trees of every rank of ``topology`` (or of ``root`` alone) from the intra-node trees of
    one node (local ranks; None for one rank per node). None when some rail pair has no route.

    The rail tree is a star, or with ``grouped`` a star of stars: the other nodes are grouped
    by the switch their NIC hangs from (their leaf), the root sends once into each other group,
    to a member that passes it on inside the group, so each part crosses an oversubscribed
    spine once per leaf rather than once per node (members take turns by root)."""
    ranks = topology.node_ranks
    m = len(ranks[0])
    by_root: dict[int, list[Tree]] = {}
    for t in intra or [Tree(0, 1, {}, [0])]:
        by_root.setdefault(t.root, []).append(t)
    out: list[Tree] = []
    for a, members in enumerate(ranks):
        for i, r in enumerate(members):
            if root is not None and r != root:
                continue
            routes = topology.routes_from(r)
            rail = [ranks[b][i] for b in range(len(ranks)) if b != a]
            if any(x not in routes or r not in topology.routes_from(x) for x in rail):
                return None
            rail_parent = {x: r for x in rail}
            rail_order = [r]
            if grouped:
                groups: dict[int, list[int]] = {}
                for x in rail:
                    groups.setdefault(_leaf(routes[x]), []).append(x)
                mine = _leaf(topology.routes_from(rail[0])[r]) if rail else None
                for leaf, xs in sorted(groups.items()):
                    if leaf == mine or len(xs) == 1:
                        rail_order.extend(xs)
                        continue
                    head = xs[a % len(xs)]
                    if any(y not in topology.routes_from(head) or head not in topology.routes_from(y)
                           for y in xs if y != head):
                        return None
                    rail_order.append(head)
                    for y in xs:
                        if y != head:
                            rail_parent[y] = head
                    rail_order.extend(y for y in xs if y != head)
            else:
                rail_order.extend(rail)
            for t in by_root.get(i, []):
                parent = dict(rail_parent)
                order = list(rail_order)
                for node in ranks:
                    for v in t.order[1:]:
                        parent[node[v]] = node[t.parent[v]]
                        order.append(node[v])
                out.append(Tree(r, t.weight, parent, order))
    if m > 1 and len({t.root for t in out}) != (1 if root is not None else topology.n_ranks):
        return None
    return out


def second_entry(topology: Topology, trees: list[Tree], offset: int, share: int, scale: int) -> list[Tree] | None:
    """Stitched trees (``stitch``, no root given) where ``share`` of every ``scale`` units of
    each tree enter every other node twice: the root (a, i) also sends to (b, i + offset) over
    its NIC, which takes over the half of (b, i)'s children in the node that come last from i
    (by local index, cyclically). Where a node's NICs could carry more than each part once
    (dgx-h100 up to 4 nodes: a GPU's NVLink and NIC ingress together bind), the extra NIC
    traffic relieves the NVLink ports that forward the rail's parts: on dgx-h100:2, half of
    every part entering twice meets the cut bound (each GPU takes 1.5 parts through its NIC for
    13.5 through NVLink). None when a needed pair has no route."""
    ranks = topology.node_ranks
    m = len(ranks[0])
    where = {r: (a, i) for a, members in enumerate(ranks) for i, r in enumerate(members)}
    out: list[Tree] = []
    for t in trees:
        a, i = where[t.root]
        j = (i + offset) % m
        parent = dict(t.parent)
        routes = topology.routes_from(t.root)
        for b, members in enumerate(ranks):
            if b == a:
                continue
            head, second = members[i], members[j]
            if second not in routes:
                return None
            parent[second] = t.root
            children = sorted((v for v, p in t.parent.items() if p == head and v != second),
                              key=lambda v: (where[v][1] - i) % m)
            moved = children[(len(children) + 1) // 2:]
            hop = topology.routes_from(second)
            if any(v not in hop for v in moved):
                return None
            for v in moved:
                parent[v] = second
        out.append(Tree(t.root, t.weight * (scale - share), dict(t.parent), list(t.order)))
        out.append(Tree(t.root, t.weight * share, parent, topological_order(t.root, parent)))
    return out


def _leaf(path: tuple[int, ...]) -> int:
    """The switch a route's destination NIC hangs from (the vertex three from its end), or the
    destination itself on a route of fewer hops."""
    return path[-3] if len(path) >= 4 else path[-1]


def physical_time(topology: Topology, trees: list[Tree], reverse: bool) -> float:
    """Microseconds per byte of one root's part on the busiest physical link or shared limit
    when every root's trees carry its part in proportion to their weights (arcs routed as the
    flattened topology routes them; ``reverse``: the data flows from child to parent)."""
    total: dict[int, int] = {}
    for t in trees:
        total[t.root] = total.get(t.root, 0) + t.weight
    hops = []
    for t in trees:
        f = t.weight / total[t.root]
        hops.extend(((v, p) if reverse else (p, v), f) for v, p in t.parent.items())
    return busiest_time(topology, hops)


def busiest_time(topology: Topology, hops) -> float:
    """Microseconds per byte on the busiest physical link or shared limit when each
    ((src, dst), fraction) of ``hops`` sends that fraction of a byte from rank src to rank dst,
    routed as a schedule's transfer is: through relaying ranks where the pair is not linked
    (``ScheduleBuilder``), each rank-to-rank leg over the flattened topology's route."""
    router = Router(topology)
    load: dict[tuple[int, int], float] = {}
    for (src, dst), f in hops:
        relays = router.path(src, dst)
        for x, y in zip(relays, relays[1:]):
            path = topology.routes_from(x)[y]
            for hop in zip(path, path[1:]):
                load[hop] = load.get(hop, 0.0) + f
    worst = 0.0
    for hop, x in load.items():
        worst = max(worst, x / (topology.link(*hop).capacity * 1e3))  # type: ignore[union-attr]
    for limit in topology.limits:
        x = sum(load.get(hop, 0.0) for hop in limit.links)
        worst = max(worst, x / (limit.bandwidth * 1e3))
    return worst


def rail_chains(topology: Topology, intra: dict[int, list[Tree]], root: int,
                around: bool = False, fan: int = 1, turns: int = 1, relay: bool = False) -> list[Tree] | None:
    """Broadcast (reduce: reversed) trees of ``root`` that use every NIC rail: the data is split
    by local index i; part i goes from the root to its node-mate of index i, along rail i from
    node to node (each NIC receives each part once and sends it on at most once in all, so
    every rail carries 1/L of the data, the cut bound on rail-optimized fabrics), and in every
    node from (b, i) down that node's broadcast trees of local root i (``intra[i]``, weights
    kept in proportion). Along a rail the nodes form a chain (``fan`` 1), or with ``fan`` 2 two
    binary trees (``rail_trees``: half of each part down each; every node forwards in at most
    one, so the load is the chain's while the pipeline is about log2 of the node count deep
    instead of the node count: 3 hops instead of 7 on 8 nodes). In the root's node the root
    already holds everything: it is passed over in the node trees of the other local roots (its
    children there hang from its parent), so it sends each part once. With ``around`` (two or
    more nodes) the root's own part does not go through its port to its node-mates at all: it
    goes down its rail to a node that is a leaf of every rail tree (the chain's last), and from
    each rank there back along that rank's rail to its mate in the root's node (the rails'
    otherwise idle direction), so no root-to-mate pair carries two parts. With ``turns`` t > 1
    (chains, one intra-node tree per local root) every part has t trees that cross between
    nodes differently: turn f hands part i on from local index i + f k to i + f (k + 1) (mod
    L) between positions k and k + 1 (and the own part back to index j + f), so each NIC sends
    to and receives from t pairs, which a schedule taking the turns in order keeps busy while
    each pair waits out its message latency (``schedule``: ``Phase.turns``). With ``relay`` (not
    with ``around``) the root's node-mates get its own part through them in turn: each of the
    part's trees takes a node-mate j (spread evenly over them) that gets the part from the root
    and passes it to the others, so the root's port carries each part once and no node-mate
    waits for the part to come back round a rail (three NIC hops and more from four nodes). A
    head the root has no route to (a DGX-1 mesh) gets its part down the root's own first node
    tree instead, which stands for the head's in the root's node (not with turns, ``around`` or
    ``relay``). None when some hop has no route or a local root has no intra-node trees (or
    several, with turns)."""
    ranks = topology.node_ranks
    L, N = len(ranks[0]), len(ranks)
    a0 = next(a for a, members in enumerate(ranks) if root in members)
    single = [Tree(0, 1, {}, [0])]
    trees = {i: (intra.get(i, []) if L > 1 else single) for i in range(L)}
    totals = {i: sum(t.weight for t in trees[i]) for i in range(L)}
    if any(totals[i] == 0 for i in range(L)):
        return None
    scale = 1
    for i in range(L):
        scale = scale * totals[i] // math.gcd(scale, totals[i])
    order = [(a0 + k) % N for k in range(N)]  # position -> node; the root's node first
    node_trees = rail_trees(N - 1, fan, around and N > 1)
    if turns > 1 and (fan != 1 or any(len(trees[i]) != 1 for i in range(L))):
        return None
    mates = [v for v in ranks[a0] if v != root] if relay and not around else []
    if any(v not in topology.routes_from(j) for j in mates for v in mates if v != j):
        return None
    ways = turns * len(node_trees)  # trees per part
    out: list[Tree] = []
    local_root = ranks[a0].index(root)
    for i in range(L):
        head = ranks[a0][i]
        own = around and N > 1 and head == root
        # a head the root has no link to (a DGX-1 mesh) gets part i down the root's own tree,
        # which reaches every node-mate: in the root's node that tree stands for local root i's
        direct = head == root or head in topology.routes_from(root)
        if not direct and (turns > 1 or relay or around):
            return None
        for f in range(turns):
            col = [(i + f * k) % L for k in range(N)]  # position -> the local index part i takes there
            for x, level in enumerate(node_trees):
                hops = ([(root, head)] if head != root and direct else []) + [
                    (ranks[order[p]][col[p]], ranks[order[k]][col[k]]) for k, p in sorted(level.items())]
                if own:  # the last position's ranks (a leaf of every tree) pass the root's part back
                    hops += [(ranks[order[N - 1]][j], ranks[a0][(j + f) % L]) for j in range(L)
                             if ranks[a0][(j + f) % L] != root]
                if any(y not in topology.routes_from(x) for x, y in hops):
                    return None
                for t in trees[i]:
                    parent = {y: x for x, y in hops}
                    for k in range(1, N) if own else range(N):
                        node, local = ranks[order[k]], trees[col[k]][0] if turns > 1 else t
                        if k == 0 and not direct:
                            local = trees[local_root][0]
                        for v in local.order[1:]:
                            if node[v] != root:
                                u = local.parent[v]
                                if node[u] == root and u != local.root:
                                    u = local.parent[u]  # the root is passed over: its children hang from its parent
                                parent[node[v]] = node[u]
                    if mates and head == root:  # the own part's trees take the node-mates in turn
                        w = f * len(node_trees) + x
                        j = mates[w * len(mates) // ways if ways <= len(mates) else w % len(mates)]
                        parent.update({v: (root if v == j else j) for v in mates})
                    out.append(Tree(root, t.weight * scale // totals[i], parent, topological_order(root, parent)))
    return merge_equal(out)


TWO_HOP = 0  # ``fan`` of the rail trees two NIC hops deep (``rail_trees``)


def rail_trees(m: int, fan: int = 1, spare: bool = False) -> list[dict[int, int]]:
    """How a rail's nodes pass a part on: positions 0 (the root's node) to ``m``, each tree a map
    position -> parent position. With ``spare`` position m is a leaf of every tree (its NICs
    send nothing down the rail, free to send the root's own part back). ``fan`` 1: the chain
    0 -> 1 -> ... -> m. ``fan`` 2: two binary trees carrying half each, as in
    NCCL's double binary tree: A over positions 1..m' (m' = m, or m - 1 with ``spare``) is the
    in-order tree of the positions' binary representations (the top a power of two, a position
    with lowest set bit b the parent of position -+ b/2, leaves the odd positions), B the same
    with every position moved up by one (m' wraps to 1), so the interior positions of one are
    leaves of the other and every position forwards two halves at most, the chain's load; the
    root's node feeds both tops. With ``spare`` position m hangs as a leaf in both from a
    position that forwards nothing in one of them (checked for every m up to 256 by the tests).
    Not ``templates.phases.balanced_tree``: its middle split, shifted by one, leaves some
    positions inner in both trees (m = 5, 8 to 13, ...), forwarding a part and a half. ``fan`` ``TWO_HOP``: m
    trees (m - 1 with ``spare``), tree j taking position 0 -> j -> every other position, so
    every position is two hops from the root's node and a relay forwards (m - 1) / m of a part
    (one with ``spare``), a message to each other position per stage."""
    if fan == TWO_HOP and m >= 2:  # tree j: 0 -> j -> every other position (m one's leaf in all with spare)
        relays = range(1, m) if spare else range(1, m + 1)
        return [{k: (0 if k == j else j) for k in range(1, m + 1)} for j in relays]
    if fan <= 1 or m < 3:
        return [{k: k - 1 for k in range(1, m + 1)}]
    size = m - 1 if spare else m
    a = _binary_tree(size)
    b = {k % size + 1: (0 if p == 0 else p % size + 1) for k, p in a.items()}
    if spare:
        load: dict[int, int] = {}
        for tree in (a, b):
            for p in tree.values():
                load[p] = load.get(p, 0) + 1
        free = sorted((load.get(p, 0), p) for p in range(size + 1))
        first = free[0][1]
        a[m], b[m] = first, (first if free[0][0] == 0 else free[1][1])
    return [a, b]


def _binary_tree(size: int) -> dict[int, int]:
    """Positions 1..size as an in-order binary tree by their binary representations: position ->
    parent (0 above the top)."""
    top = 1
    while top * 2 <= size:
        top *= 2
    parent = {top: 0}
    stack = [top]
    while stack:
        r = stack.pop()
        low = r & -r
        if low == 1:
            continue
        parent[r - low // 2] = r
        stack.append(r - low // 2)
        step = low // 2
        while step >= 1 and r + step > size:
            step //= 2
        if step >= 1:
            parent[r + step] = r
            stack.append(r + step)
    return parent
