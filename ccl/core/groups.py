"""Process groups over a cluster: collectives on subsets of the ranks, all groups at once.

A training job runs its collectives on groups: tensor-parallel groups inside nodes,
data-parallel groups across them, every group at the same time over shared links. Here:

* ``parse_groups(spec, topology)``: ``tp`` (the ranks of each node), ``dp`` (the ranks with one
  local index, across nodes), ``blocks:K`` (consecutive blocks of K ranks), ``stride:K`` (K
  groups of the ranks equal mod K), or rank lists ``0-3;4-7`` / ``0,2,4,6;1,3,5,7``;
* ``group_topology(topology, groups, i)``: group i's own machine: its ranks (renumbered from 0),
  the links on the routes between them, each link's bandwidth divided by the number of groups
  whose routes use it (every group runs the same collective at once: a fair share);
* ``union(topology, groups, algorithms)``: the groups' schedules as one schedule of the whole
  machine (a custom collective whose chunks are every group's), which the verifier checks for
  every group at once and the simulator times with all groups sharing the links;
* ``shared_bound(...)``: a lower bound for all groups at once: no group alone can be faster than
  its own bound, and a node's links carry what every group crossing the node's boundary must
  move.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from . import validate
from .algorithm import Algorithm, Transfer
from .collective import Collective
from .errors import CollectiveError, InputError
from .topology import Link, SharedLimit, Switch, Topology


@dataclass(frozen=True)
class Groups:
    """Disjoint groups of ranks of a topology (each of at least 2 ranks); ``spec`` as written."""

    spec: str
    members: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return len(self.members)

    def of(self, rank: int) -> int | None:
        for i, g in enumerate(self.members):
            if rank in g:
                return i
        return None

    def to_json(self) -> dict:
        return {"spec": self.spec, "members": [list(g) for g in self.members]}


def parse_groups(spec: str, topology: Topology) -> Groups:
    """Groups from their spec (module docstring); InputError naming what is wrong."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"groups: expected tp, dp, blocks:K, stride:K or rank lists such as 0-3;4-7, got "
                         f"{validate.show(spec)}")
    text = spec.strip()
    shown_spec = validate.show(spec)
    n = topology.n_ranks
    nodes = topology.node_ranks if topology.n_nodes > 0 else (tuple(range(n)),)
    if text == "tp":
        members = [tuple(node) for node in nodes]
    elif text == "dp":
        sizes = {len(node) for node in nodes}
        if len(sizes) != 1:
            raise InputError(f"groups dp: the nodes of {topology.name!r} have different numbers of ranks")
        members = [tuple(node[i] for node in nodes) for i in range(sizes.pop())]
    elif m := re.fullmatch(r"(blocks|stride):(\d{1,30})", text):
        k = int(m.group(2))
        if k < 1 or n % k:
            raise InputError(f"groups {text}: {k} does not divide the {n} ranks of {topology.name!r}")
        if m.group(1) == "blocks":
            members = [tuple(range(s, s + k)) for s in range(0, n, k)]
        else:
            members = [tuple(range(i, n, k)) for i in range(k)]
    else:
        members = []
        total = 0  # ranks named so far: ranges are checked before they are expanded
        for part in text.split(";"):
            ranks: list[int] = []
            for item in part.split(","):
                item = item.strip()
                m = re.fullmatch(r"(\d{1,30})(?:-(\d{1,30}))?", item)
                if not m:
                    raise InputError(f"groups {shown_spec}: {validate.show(item)} is not a rank or a range a-b")
                a, b = int(m.group(1)), int(m.group(2) or m.group(1))
                if b < a:
                    raise InputError(f"groups {shown_spec}: the range {item} is empty")
                if b >= n:
                    raise InputError(f"groups {shown_spec}: rank {b} is not a rank of {topology.name!r} (0..{n - 1})")
                total += b - a + 1
                if total > n:  # more ranks than the topology has: some rank is in two groups
                    raise InputError(f"groups {shown_spec}: names {total} or more ranks but {topology.name!r} has "
                                     f"{n}: a rank is in two groups")
                ranks.extend(range(a, b + 1))
            members.append(tuple(ranks))
    seen: set[int] = set()
    for g in members:
        if len(g) < 2:
            raise InputError(f"groups {shown_spec}: a group needs at least 2 ranks, got {list(g)}")
        for r in g:
            if not 0 <= r < n:
                raise InputError(f"groups {shown_spec}: rank {r} is not a rank of {topology.name!r} (0..{n - 1})")
            if r in seen:
                raise InputError(f"groups {shown_spec}: rank {r} is in two groups")
            seen.add(r)
    return Groups(text, tuple(members))


def _route_hops(topology: Topology, ranks: tuple[int, ...]) -> set[tuple[int, int]]:
    """The physical links on the routes between the ranks (direct rank links included)."""
    hops: set[tuple[int, int]] = set()
    inside = set(ranks)
    for a in ranks:
        routes = topology.routes_from(a)
        for b in ranks:
            if a == b:
                continue
            path = routes.get(b)
            if path is not None:
                hops.update(zip(path, path[1:]))
    for link in topology.links:  # rank-to-rank links among the group (a schedule may relay on them)
        if link.src in inside and link.dst in inside:
            hops.add(link.pair)
    return hops


def usage(topology: Topology, groups: Groups) -> dict[tuple[int, int], int]:
    """Physical link -> how many groups' routes use it."""
    count: dict[tuple[int, int], int] = {}
    for g in groups.members:
        for hop in _route_hops(topology, g):
            count[hop] = count.get(hop, 0) + 1
    return count


def group_topologies(topology: Topology, groups: Groups, index: int,
                     count: dict[tuple[int, int], int] | None = None) -> tuple[Topology, Topology]:
    """Group ``index``'s machine with its shared links at a fair share, and alone (full
    bandwidths): one object when no link of the group is shared, and ``topology`` itself when
    the group is every rank in order and shares nothing: its machine is the whole machine (one
    of hundreds of ranks is then not built again, nor its routes computed again)."""
    g = groups.members[index]
    if len(groups) == 1 and g == tuple(range(topology.n_ranks)):
        return topology, topology
    hops = _route_hops(topology, g)
    if count is None:
        count = usage(topology, groups)
    alone_is_shared = all(count.get(hop, 1) == 1 for hop in hops)
    sub = _group_topology(topology, groups, index, hops, count, True)
    return sub, (sub if alone_is_shared else _group_topology(topology, groups, index, hops, {}, False))


def group_topology(topology: Topology, groups: Groups, index: int, *, shared: bool = True,
                   count: dict[tuple[int, int], int] | None = None) -> Topology:
    """Group ``index``'s machine (module docstring); ``shared=False`` keeps full bandwidths (the
    group alone). ``count``: ``usage(topology, groups)``, when the caller has it already."""
    g = groups.members[index]
    hops = _route_hops(topology, g)
    if not shared:
        count = {}
    elif count is None:
        count = usage(topology, groups)
    return _group_topology(topology, groups, index, hops, count, shared)


def _group_topology(topology: Topology, groups: Groups, index: int, hops: set[tuple[int, int]],
                    count: dict[tuple[int, int], int], shared: bool) -> Topology:
    g = groups.members[index]
    n = topology.n_ranks
    vertex: dict[int, int] = {r: i for i, r in enumerate(g)}
    switches: list[Switch] = []
    for a, b in sorted(hops):
        for v in (a, b):
            if v not in vertex:
                if v < n:
                    raise InputError(f"groups {validate.show(groups.spec)}: group {index} {validate.show(list(g))} "
                                     f"routes through rank {v}, which is not in it")
                vertex[v] = len(g) + len(switches)
                switches.append(topology.switches[v - n])
    renumber: dict[int, int] = {}
    node_of = tuple(renumber.setdefault(topology.node_of[r], len(renumber)) for r in g) if topology.node_of else ()
    if len(renumber) <= 1:
        node_of, renumber = (), {}
    switches = [replace(s, node=renumber.get(s.node) if s.node is not None else None) for s in switches]
    links = []
    for a, b in sorted(hops):
        link = topology.link(a, b)
        assert link is not None
        share = count.get((a, b), 1)
        links.append(Link(vertex[a], vertex[b], link.bandwidth / share, link.latency, link.lanes))
    limits = []
    for lim in topology.limits:
        kept = tuple((vertex[a], vertex[b]) for a, b in lim.links if (a, b) in hops)
        if kept:
            share = max(count.get((a, b), 1) for a, b in lim.links if (a, b) in hops)
            limits.append(SharedLimit(lim.name, kept, lim.bandwidth / share))
    name = f"{topology.name}.g{index}" + ("" if shared else ".alone")
    sub = Topology(name, len(g), tuple(links), tuple(switches), tuple(limits), node_of, topology.accelerator)
    flat = sub.flat()
    if not _connected(flat):
        raise InputError(f"groups {validate.show(groups.spec)}: group {index} {validate.show(list(g))} cannot reach all its ranks without "
                         "relaying through ranks outside it")
    return sub


def _connected(flat: Topology) -> bool:
    n = flat.n_ranks
    seen = {0}
    stack = [0]
    while stack:
        v = stack.pop()
        for link in flat.out_links[v]:
            if link.dst not in seen:
                seen.add(link.dst)
                stack.append(link.dst)
    return len(seen) == n


def union(topology: Topology, groups: Groups, algorithms: list[Algorithm], name: str | None = None) -> Algorithm:
    """The groups' schedules (``algorithms[i]`` on group i's ranks, numbered from 0) as one
    schedule of ``topology``: a custom collective whose chunks are every group's (offset so
    none collide) and the transfers renumbered."""
    if len(algorithms) != len(groups):
        raise CollectiveError(f"{len(groups)} groups but {len(algorithms)} schedules")
    n = topology.n_ranks
    inputs: list[tuple[int, ...]] = [() for _ in range(n)]
    outputs: list[tuple[frozenset[int], ...]] = [() for _ in range(n)]
    aliases: list[tuple[int | None, ...]] = [() for _ in range(n)]
    transfers: list[Transfer] = []
    offset = 0
    factors = {alg.collective.chunk_factor for alg in algorithms}
    for g, alg in zip(groups.members, algorithms):
        coll = alg.collective
        if coll.n_ranks != len(g):
            raise CollectiveError(f"a schedule for {coll.n_ranks} ranks given for a group of {len(g)}")
        chunks = 1 + max(c for slots in coll.inputs for c in slots)
        for local, r in enumerate(g):
            inputs[r] = tuple(c + offset for c in coll.inputs[local])
            outputs[r] = tuple(frozenset(c + offset for c in need) for need in coll.outputs[local])
            aliases[r] = coll.aliases[local]
        for t in alg.transfers:
            transfers.append(t._replace(src=g[t.src], dst=g[t.dst]))
        offset += chunks
    kinds = {alg.collective.kind for alg in algorithms}
    label = name or f"{'+'.join(sorted(kinds))}-groups-{groups.spec}"
    coll = Collective(label, "custom", n, tuple(inputs), tuple(outputs), tuple(aliases), None,
                      factors.pop() if len(factors) == 1 else 1)
    solvers = {alg.solver for alg in algorithms}
    return Algorithm(label, coll, topology, tuple(sorted(transfers)), None,
                     solvers.pop() if len(solvers) == 1 else "+".join(sorted(solvers)))


def _side_demand(kind: str, inside: int, size_g: int) -> tuple[float, float]:
    """(leaving, entering) fractions of a group's message that must cross a cut with ``inside``
    of its ``size_g`` ranks inside, for a collective of ``kind`` (0 when it does not split)."""
    if inside == 0 or inside == size_g:
        return 0.0, 0.0
    outside = size_g - inside
    if kind == "allgather":
        return inside / size_g, outside / size_g
    if kind == "reducescatter":
        return outside / size_g, inside / size_g
    if kind == "allreduce":
        return 1.0, 1.0
    if kind == "alltoall":
        return inside * outside / size_g ** 2, inside * outside / size_g ** 2
    return 0.0, 0.0


def shared_bound(topology: Topology, groups: Groups, kind: str, size: float) -> tuple[float, str]:
    """A lower bound in us on all groups' ``kind`` of ``size`` bytes at once, over candidate
    cuts: every node's vertices (ranks, and switches of the node), and every leaf switch with
    the nodes under it: what the groups crossing a cut must move over its links. Returns (us,
    the binding cut)."""
    best, where = 0.0, ""
    if topology.n_nodes < 2:
        return best, where
    n = topology.n_ranks
    node_vertices = [set(ranks) | {n + i for i, s in enumerate(topology.switches) if s.node == k}
                     for k, ranks in enumerate(topology.node_ranks)]
    owner = {v: k for k, vs in enumerate(node_vertices) for v in vs}
    cuts = [(f"node {k}'s links", vs) for k, vs in enumerate(node_vertices)]
    seen: set[frozenset[int]] = set()
    for i, sw in enumerate(topology.switches):  # a leaf switch and the nodes under it
        w = n + i
        if sw.node is not None:
            continue
        below = {owner[x.dst] for x in topology.out_links[w] if x.dst in owner}
        key = frozenset(below)
        if 2 <= len(below) < topology.n_nodes and key not in seen:
            seen.add(key)
            cuts.append((f"the uplinks of {sw.name} (nodes {', '.join(map(str, sorted(below)))})",
                         {w}.union(*(node_vertices[k] for k in below))))
    for label, inside in cuts:
        out_cap = sum(link.capacity for link in topology.links if link.src in inside and link.dst not in inside)
        in_cap = sum(link.capacity for link in topology.links if link.dst in inside and link.src not in inside)
        leave = enter = 0.0
        for g in groups.members:
            a, b = _side_demand(kind, sum(1 for r in g if r in inside), len(g))
            leave += a * size
            enter += b * size
        for demand, cap in ((leave, out_cap), (enter, in_cap)):
            if demand > 0 and cap > 0 and demand / (cap * 1e3) > best:
                best, where = demand / (cap * 1e3), label
    return best, where
