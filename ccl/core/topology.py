"""Topology: compute ranks, switch vertices, directed links, shared bandwidth limits, nodes.

Vertices are numbered ranks first (0 .. n_ranks-1), then switches (n_ranks .. n_vertices-1).
A ``Link`` is directed; its ``bandwidth`` is per lane in GB/s, so a link carries
``bandwidth * lanes`` GB/s in total and up to ``lanes`` chunks at once in the step model.

Two views of the same hardware:

* the vertex view (this class as built): switches and NICs are vertices, which is what cut
  bounds and multi-hop fabrics need;
* the flattened rank view (``Topology.flat()``): only ranks, with one link per rank pair that
  can talk directly or through switch vertices, and ``SharedLimit``s for every vertex link that
  several flattened links share. SCCL/TACCL-style solvers and the verifier use this view.
  ``flat()`` is the one place it is derived; nothing else re-derives it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from . import limits, validate
from .errors import InputError, TopologyError
from .hardware import generation
from .limits import LINKS as _LINKS

SWITCH_KINDS = ("switch", "nic")
# The columns of a link row in a topology file.
LINK_FIELDS = ("src", "dst", "bandwidth_GBps", "latency_us", "lanes")


@dataclass(frozen=True, order=True)
class Link:
    """A directed link. ``bandwidth`` is GB/s per lane, ``latency`` is microseconds."""

    src: int
    dst: int
    bandwidth: float
    latency: float
    lanes: int = 1

    def __post_init__(self) -> None:
        validate.integer(self.src, "link source", least=0, error=TopologyError)
        validate.integer(self.dst, "link destination", least=0, error=TopologyError)
        where = f"link {self.src} -> {self.dst}"
        validate.number(self.bandwidth, f"{where}: bandwidth", error=TopologyError)
        validate.number(self.latency, f"{where}: latency", error=TopologyError)
        if isinstance(self.lanes, bool) or not isinstance(self.lanes, int) or self.lanes < 1:
            raise TopologyError(f"{where}: lanes must be a positive integer, got {self.lanes!r}")
        if not self.bandwidth > 0 or self.bandwidth == float("inf"):
            raise TopologyError(f"{where}: bandwidth must be positive, got {self.bandwidth!r} GB/s")
        if not self.latency >= 0 or self.latency == float("inf"):
            raise TopologyError(f"{where}: latency must be >= 0, got {self.latency!r} us")

    @property
    def capacity(self) -> float:
        """Total GB/s over all lanes."""
        return self.bandwidth * self.lanes

    @property
    def pair(self) -> tuple[int, int]:
        return (self.src, self.dst)


@dataclass(frozen=True)
class Switch:
    """A non-rank vertex. A ``nic`` forwards only between its hosts and the network: a path
    never goes rank -> nic -> rank. A ``switch`` forwards between any of its ports; one with
    ``reduce`` also sums what several ports send it and multicasts a result to several ports
    (in-network reduction: NVLink SHARP on NVSwitch generation 3 and later, InfiniBand SHARP)."""

    name: str
    kind: str = "switch"
    node: int | None = None
    reduce: bool = False

    def __post_init__(self) -> None:
        validate.name(self.name, "switch name", error=TopologyError)
        if self.node is not None:
            validate.integer(self.node, f"switch {self.name!r}: node", least=0, error=TopologyError)
        if self.kind not in SWITCH_KINDS:
            raise TopologyError(f"switch {self.name!r}: kind must be one of {SWITCH_KINDS}, got {self.kind!r}")
        if not self.name:
            raise TopologyError("a switch needs a name")
        validate.flag(self.reduce, f"switch {self.name!r}: reduce", error=TopologyError)
        if self.reduce and self.kind != "switch":
            raise TopologyError(f"switch {self.name!r}: only a switch (not a {self.kind}) can reduce")


@dataclass(frozen=True)
class SharedLimit:
    """A cap in GB/s on the summed traffic of a set of links (a NIC port, a PCIe switch)."""

    name: str
    links: tuple[tuple[int, int], ...]
    bandwidth: float

    def __post_init__(self) -> None:
        validate.name(self.name, "shared limit name", error=TopologyError)
        validate.number(self.bandwidth, f"shared limit {self.name!r}: bandwidth", positive=True, error=TopologyError)
        given = validate.sequence(self.links, f"shared limit {self.name!r}: links", error=TopologyError)
        if not given:
            raise TopologyError(f"shared limit {self.name!r} covers no links")
        plain = True  # every pair a tuple already (the flattened machines: 3.9 million pairs)
        for pair in given:
            if type(pair) is tuple and len(pair) == 2:
                a, b = pair
                if type(a) is int and type(b) is int and a >= 0 and b >= 0:
                    continue
            plain = False
            if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                    or not all(type(v) is int and v >= 0 for v in pair)):
                raise TopologyError(f"shared limit {self.name!r}: a link must be a pair of vertex numbers, got "
                                    f"{validate.show(pair)}")
        links = tuple(sorted(set(given) if plain else {(int(a), int(b)) for a, b in given}))
        object.__setattr__(self, "links", links)

    def lanes(self, topology: Topology) -> int:
        """Chunks the limit lets through at once: its bandwidth over the widest lane it caps."""
        widest = max(topology.link(a, b).bandwidth for a, b in self.links)  # type: ignore[union-attr]
        return max(1, int(self.bandwidth / widest + 1e-9))


def _trusted_link(src: int, dst: int, bandwidth: float, latency: float, lanes: int) -> Link:
    """A Link made of validated links' values (``Topology.flat``): no check per link, unless
    the summed latency overflowed (then ``Link`` raises its error)."""
    if not latency < math.inf:
        return Link(src, dst, bandwidth, latency, lanes)
    link = object.__new__(Link)
    link.__dict__.update(src=src, dst=dst, bandwidth=bandwidth, latency=latency, lanes=lanes)
    return link


def _trusted_limit(name: str, links: tuple[tuple[int, int], ...], bandwidth: float) -> SharedLimit:
    """A SharedLimit over distinct, sorted pairs of rank numbers and a validated link's
    bandwidth (``Topology.flat``: 6 million pairs on dgx-h100:128)."""
    limit = object.__new__(SharedLimit)
    limit.__dict__.update(name=name, links=links, bandwidth=bandwidth)
    return limit


@dataclass(frozen=True)
class Topology:
    name: str
    n_ranks: int
    links: tuple[Link, ...]
    switches: tuple[Switch, ...] = ()
    limits: tuple[SharedLimit, ...] = ()
    node_of: tuple[int, ...] = ()
    accelerator: str = ""  # the accelerator model ("H100", "A100", ...) the cost model prices; "" generic
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        validate.name(self.name, "topology name", error=TopologyError)
        validate.text(self.accelerator, f"topology {self.name!r}: accelerator", error=TopologyError)
        if self.accelerator:
            try:
                generation(self.accelerator)
            except InputError as exc:
                raise TopologyError(f"topology {self.name!r}: {exc.message}") from None
        if isinstance(self.n_ranks, bool) or not isinstance(self.n_ranks, int) or self.n_ranks < 1:
            raise TopologyError(f"topology {self.name!r}: needs at least 1 rank, got {validate.show(self.n_ranks)}")
        for what, cls in (("links", Link), ("switches", Switch), ("limits", SharedLimit)):
            items = validate.sequence(getattr(self, what), f"topology {self.name!r}: {what}", error=TopologyError)
            for item in items:
                validate.instance(item, cls, f"topology {self.name!r}: each of {what}", error=TopologyError)
        node_of = validate.sequence(self.node_of, f"topology {self.name!r}: node_of", error=TopologyError)
        if any(type(x) is not int or x < 0 for x in node_of):
            raise TopologyError(f"topology {self.name!r}: node_of must list node numbers >= 0, got "
                                f"{validate.show(node_of)}")
        if self.n_ranks > limits.RANKS.value:
            raise TopologyError(limits.RANKS.message(self.n_ranks, f"topology {self.name!r} has too many ranks"))
        if len(self.links) > limits.LINKS.value:
            raise TopologyError(limits.LINKS.message(len(self.links), f"topology {self.name!r} has too many links"))
        widest = max(self.links, key=lambda x: x.lanes, default=None)
        if widest is not None and widest.lanes > limits.LANES.value:  # solvers and the simulator keep a slot per lane
            raise TopologyError(limits.LANES.message(widest.lanes, f"topology {self.name!r}: link {widest.src} -> "
                                                                   f"{widest.dst} has too many lanes"))
        n_vertices = self.n_ranks + len(self.switches)
        names = [s.name for s in self.switches]
        if len(set(names)) != len(names):
            dup = sorted({x for x in names if names.count(x) > 1})[0]
            raise TopologyError(f"topology {self.name!r}: switch {dup!r} is defined twice")
        seen: set[tuple[int, int]] = set()
        for link in self.links:
            for v in (link.src, link.dst):
                if not 0 <= v < n_vertices:
                    raise TopologyError(
                        f"topology {self.name!r}: link {link.src} -> {link.dst} names vertex {v}, "
                        f"but there are {self.n_ranks} ranks and {len(self.switches)} switches"
                    )
            if link.src == link.dst:
                raise TopologyError(f"topology {self.name!r}: link {link.src} -> {link.dst} connects a vertex to itself")
            if link.pair in seen:
                raise TopologyError(
                    f"topology {self.name!r}: link {link.src} -> {link.dst} is defined twice "
                    "(use lanes for parallel links)"
                )
            seen.add(link.pair)
        for limit in self.limits:
            if seen.issuperset(limit.links):
                continue
            for pair in limit.links:
                if pair not in seen:
                    raise TopologyError(
                        f"topology {self.name!r}: shared limit {limit.name!r} names link "
                        f"{pair[0]} -> {pair[1]}, which does not exist"
                    )
        node_of = tuple(self.node_of) if self.node_of else (0,) * self.n_ranks
        if len(node_of) != self.n_ranks:
            raise TopologyError(
                f"topology {self.name!r}: node_of has {len(node_of)} entries for {self.n_ranks} ranks"
            )
        if any((not isinstance(a, int)) or a < 0 for a in node_of):
            raise TopologyError(f"topology {self.name!r}: node indices must be integers >= 0")
        ids = sorted(set(node_of))  # 0..N-1 without gaps, checked without a list of max(node_of) entries
        if node_of and ids != list(range(len(ids))):
            raise TopologyError(f"topology {self.name!r}: nodes must be numbered 0..N-1 without gaps")
        last_node = max(node_of)
        for s in self.switches:
            if s.node is not None and not 0 <= s.node <= last_node:
                raise TopologyError(f"switch {s.name!r} is on node {s.node}, which has no ranks")
        object.__setattr__(self, "node_of", node_of)
        object.__setattr__(self, "links", tuple(sorted(self.links)))
        object.__setattr__(self, "limits", tuple(sorted(self.limits, key=lambda x: (x.name, x.links))))

    # ---------------------------------------------------------------- vertices and links
    @property
    def n_vertices(self) -> int:
        return self.n_ranks + len(self.switches)

    def vertex_name(self, v: int) -> str:
        return str(v) if v < self.n_ranks else self.switches[v - self.n_ranks].name

    def vertex(self, name: str) -> int:
        """Vertex id of a rank number or a switch name."""
        if name.isdigit() and int(name) < self.n_ranks:
            return int(name)
        for i, s in enumerate(self.switches):
            if s.name == name:
                return self.n_ranks + i
        raise TopologyError(f"topology {self.name!r} has no vertex {name!r}")

    @cached_property
    def _link_map(self) -> dict[tuple[int, int], Link]:
        return {link.pair: link for link in self.links}

    def link(self, src: int, dst: int) -> Link | None:
        return self._link_map.get((src, dst))

    @cached_property
    def limit_capacities(self) -> tuple[float, ...]:
        """The summed capacity (GB/s) of each shared limit's links, in ``limits`` order (a limit
        at or above it can never bind). Cached: the flattened 1,024-GPU machines have 3.9
        million limited links."""
        link = self._link_map
        return tuple(sum(link[p].capacity for p in limit.links) for limit in self.limits)

    @cached_property
    def out_links(self) -> tuple[tuple[Link, ...], ...]:
        out: list[list[Link]] = [[] for _ in range(self.n_vertices)]
        for link in self.links:
            out[link.src].append(link)
        return tuple(tuple(x) for x in out)

    @cached_property
    def in_links(self) -> tuple[tuple[Link, ...], ...]:
        inc: list[list[Link]] = [[] for _ in range(self.n_vertices)]
        for link in self.links:
            inc[link.dst].append(link)
        return tuple(tuple(x) for x in inc)

    # ---------------------------------------------------------------- nodes
    @property
    def n_nodes(self) -> int:
        return max(self.node_of) + 1

    @cached_property
    def node_ranks(self) -> tuple[tuple[int, ...], ...]:
        """Ranks of each node in increasing order."""
        out: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for r, a in enumerate(self.node_of):
            out[a].append(r)
        return tuple(tuple(x) for x in out)

    def local_index(self, rank: int) -> int:
        return self.node_ranks[self.node_of[rank]].index(rank)

    @property
    def uniform_nodes(self) -> bool:
        """Every node has the same number of ranks."""
        return len({len(x) for x in self.node_ranks}) == 1

    # ---------------------------------------------------------------- the flattened view
    def routes_from(self, src: int) -> Mapping[int, tuple[int, ...]]:
        """Rank-to-rank routes from ``src`` in the flattened view: for each reachable rank, the
        vertex path (src, switches..., dst). A direct link is always the route when it exists;
        otherwise the path through switch vertices with least latency (then fewest hops, then
        smallest vertex ids), never passing through another rank or turning around at a NIC."""
        cache = self._cache.setdefault("routes", {})
        if src not in cache:
            cache[src] = self._compute_routes(src)
        return cache[src]

    def _compute_routes(self, src: int) -> dict[int, tuple[int, ...]]:
        n = self.n_ranks
        routes: dict[int, tuple[int, ...]] = {}
        for link in self.out_links[src]:
            if link.dst < n:
                routes[link.dst] = (src, link.dst)
        if not self.switches:
            return routes
        # Dijkstra over (vertex, came_from_rank) states through switch vertices only.
        best: dict[tuple[int, bool], tuple[float, int, tuple[int, ...]]] = {}
        heap: list[tuple[float, int, tuple[int, ...], int, bool]] = []
        for link in self.out_links[src]:
            if link.dst >= n:
                key = (link.latency, 1, (src, link.dst))
                heapq.heappush(heap, (*key, link.dst, True))
        found: dict[int, tuple[float, int, tuple[int, ...]]] = {}
        while heap:
            lat, hops, path, v, from_rank = heapq.heappop(heap)
            state = (v, from_rank)
            if state in best:
                continue
            best[state] = (lat, hops, path)
            is_nic = self.switches[v - n].kind == "nic"
            for link in self.out_links[v]:
                w = link.dst
                key = (lat + link.latency, hops + 1, path + (w,))
                if w < n:
                    if w == src or (is_nic and from_rank):
                        continue
                    if w not in found or key < found[w]:
                        found[w] = key
                    continue
                nstate = (w, False)
                if nstate not in best and w not in path:
                    heapq.heappush(heap, (*key, w, False))
        for w, (_, _, path) in found.items():
            routes.setdefault(w, path)
        return routes

    def switch_path(self, src: int, dst: int) -> tuple[int, ...] | None:
        """The vertex path of a transfer between a rank and a switch that reduces (one of
        ``src``, ``dst`` a rank, the other such a switch): a direct link, or else the path with
        least latency (then fewest hops) through NIC vertices only, the way a GPU reaches a
        network switch through its own NIC. None when there is none, or when the pair is not a
        rank and a reducing switch. A switch reduction never relays through another rank or
        switch: what reaches the switch is what the rank sent."""
        cache = self._cache.setdefault("switch_paths", {})
        key = (src, dst)
        if key not in cache:
            cache[key] = self._switch_path(src, dst)
        return cache[key]

    def _switch_path(self, src: int, dst: int) -> tuple[int, ...] | None:
        n = self.n_ranks
        if not (0 <= src < self.n_vertices and 0 <= dst < self.n_vertices) or (src < n) == (dst < n):
            return None
        switch = self.switches[max(src, dst) - n]
        if not switch.reduce:
            return None
        if (src, dst) in self._link_map:
            return (src, dst)
        best: dict[int, tuple[float, int]] = {}
        heap: list[tuple[float, int, tuple[int, ...]]] = [(0.0, 0, (src,))]
        while heap:
            lat, hops, path = heapq.heappop(heap)
            v = path[-1]
            if v == dst:
                return path
            if v in best:
                continue
            best[v] = (lat, hops)
            for link in self.out_links[v]:
                w = link.dst
                through = w == dst or (w >= n and self.switches[w - n].kind == "nic")
                if through and w not in best:
                    heapq.heappush(heap, (lat + link.latency, hops + 1, path + (w,)))
        return None

    def switch_link(self, src: int, dst: int) -> Link | None:
        """The path of ``switch_path`` as one link (its narrowest hop's lanes and capacity, the
        hops' latencies summed), or None."""
        path = self.switch_path(src, dst)
        return None if path is None else self._path_link(path)

    @cached_property
    def reducing_switches(self) -> tuple[int, ...]:
        """Vertex ids of the switches that reduce and multicast."""
        return tuple(self.n_ranks + i for i, s in enumerate(self.switches) if s.reduce)

    def flat_link(self, src: int, dst: int) -> Link | None:
        """The flattened rank-to-rank link, or None if the ranks cannot talk without relaying
        through another rank."""
        if not self.switches:
            return self.link(src, dst)
        path = self.routes_from(src).get(dst)
        if path is None:
            return None
        return self._path_link(path)

    @cached_property
    def _hop_values(self) -> dict[tuple[int, int], tuple[int, float, float]]:
        """(lanes, capacity, latency) of every link, by pair: what a route's link is made of."""
        return {pair: (link.lanes, link.capacity, link.latency) for pair, link in self._link_map.items()}

    def _path_link(self, path: tuple[int, ...]) -> Link:
        """The link of a route: its narrowest hop's lanes and capacity, its hops' latencies
        summed. Made of validated links' values, so without Link's checks (``flat`` makes a
        million on dgx-h100:128)."""
        if len(path) == 2:
            return self._link_map[path]
        hop_of = self._hop_values
        lanes, capacity, latency = hop_of[path[0], path[1]]
        for hop in zip(path[1:], path[2:]):
            k, c, lat = hop_of[hop]
            lanes = k if k < lanes else lanes
            capacity = c if c < capacity else capacity
            latency += lat
        return _trusted_link(path[0], path[-1], capacity / lanes, latency, lanes)

    def flat(self) -> Topology:
        """The rank-only view (see module docstring). Cached; returns self when there are no
        switches."""
        if not self.switches:
            return self
        if "flat" in self._cache:
            return self._cache["flat"]
        links: list[Link] = []
        users: dict[tuple[int, int], list[tuple[int, int]]] = {}
        carried: dict[tuple[int, int], float] = {}  # summed capacity of the flattened links over a hop
        most = _LINKS.value
        for s in range(self.n_ranks):
            routes = self.routes_from(s)
            # one link per pair of ranks that can talk: refuse before making them when there
            # would be too many (every rank usually reaches as many ranks as rank 0 does)
            estimate = len(routes) * self.n_ranks if s == 0 else len(links) + len(routes)
            if estimate > most:
                raise TopologyError(_LINKS.message(estimate, f"the rank-to-rank view of topology {self.name!r} (one "
                                                             "link per pair of ranks that can talk) has too many links"))
            for t, path in sorted(routes.items()):
                link = self._path_link(path)
                links.append(link)
                capacity = link.capacity
                pair = (s, t)
                for hop in zip(path, path[1:]):
                    users.setdefault(hop, []).append(pair)
                    carried[hop] = carried.get(hop, 0.0) + capacity
        limits: dict[tuple[tuple[int, int], ...], SharedLimit] = {}

        def add(limit: SharedLimit) -> None:
            old = limits.get(limit.links)
            if old is None or limit.bandwidth < old.bandwidth:
                limits[limit.links] = limit

        for hop, pairs in sorted(users.items()):
            vlink = self._link_map[hop]
            if len(pairs) < 2 or vlink.capacity >= carried[hop] - 1e-9:
                continue
            name = f"{self.vertex_name(hop[0])}->{self.vertex_name(hop[1])}"
            # the pairs are distinct and in order already (sources ascending, then destinations)
            add(_trusted_limit(name, tuple(pairs), vlink.capacity))
        for limit in self.limits:
            pairs_set: set[tuple[int, int]] = set()
            for hop in limit.links:
                pairs_set.update(users.get(hop, ()))
            if pairs_set:
                add(SharedLimit(limit.name, tuple(pairs_set), limit.bandwidth))
        flat = Topology(
            name=self.name,
            n_ranks=self.n_ranks,
            links=tuple(links),
            limits=tuple(limits.values()),
            node_of=self.node_of,
            accelerator=self.accelerator,
        )
        self._cache["flat"] = flat
        return flat

    # ---------------------------------------------------------------- summaries
    def total_out_bandwidth(self, v: int) -> float:
        return sum(link.capacity for link in self.out_links[v])

    def to_json(self) -> dict:
        """The topology's file form (``ccl.core.serialize`` reads it back)."""
        return {
            "name": self.name,
            "n_ranks": self.n_ranks,
            "node_of": list(self.node_of),
            "switches": [{"name": s.name, "kind": s.kind, "node": s.node, **({"reduce": True} if s.reduce else {})}
                         for s in self.switches],
            **({"accelerator": self.accelerator} if self.accelerator else {}),
            "link_fields": list(LINK_FIELDS),
            "links": [[x.src, x.dst, x.bandwidth, x.latency, x.lanes] for x in self.links],
            "limits": [
                {"name": x.name, "bandwidth_GBps": x.bandwidth, "links": [list(p) for p in x.links]}
                for x in self.limits
            ],
        }
