"""The logical topology a sketch leaves, with alpha-beta costs at the target size.

The flattened rank view (``Topology.flat()``) restricted by the sketch: inter-node links only
between allowed (local source, local destination) pairs and relay ranks. Each kept link has a
latency ``alpha`` (us) and ``beta``, the time one slot of the target size occupies one lane
(us); shared limits of the flattened view become per-slot costs on the limit.

Cost model (the simulator's default alpha-beta model): a transfer of k slots on a lane is
busy alpha + k beta and lands at its end; a link with L lanes serves L transfers at once; the
links under a shared limit share its bandwidth.

Default sketch: every link of the flattened view (no restriction), and on a multi-node topology
of equal nodes rotational symmetry by the node size. A sketch narrows it, e.g. to rails.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ccl.core.errors import InputError
from ccl.core.problem import Sketch
from ccl.core.topology import Topology


@dataclass(frozen=True)
class LogicalLink:
    index: int
    src: int
    dst: int
    alpha: float
    beta: float  # us per slot on one lane
    lanes: int
    internode: bool


@dataclass(frozen=True)
class LogicalLimit:
    name: str
    links: tuple[int, ...]  # logical link indices
    beta: float  # us of the limit's bandwidth per slot


class LogicalTopology:
    """Links and limits a sketch allows, their costs for slots of ``slot_bytes`` bytes, the
    rotation that maps the topology onto itself (if the sketch asks for symmetry), and
    hop-shortest-path DAGs used to prune routing variables."""

    def __init__(self, topology: Topology, sketch: Sketch, slot_bytes: float, *, reverse: bool = False,
                 switch_policy: str | None = None) -> None:
        self.topology = topology
        self.reverse = reverse
        self.switch_policy = switch_policy  # None: no preference (the sketch's applies when one is given)
        self.sketch = sketch
        flat = topology.flat()
        self.flat = flat
        self.n = flat.n_ranks
        local = [topology.local_index(r) for r in range(self.n)] if topology.n_nodes > 1 else list(range(self.n))
        self.local = local
        relays = set(sketch.relays) if sketch.relays is not None else None
        pairs = set(sketch.internode) if sketch.internode is not None else None
        if topology.n_nodes > 1:
            size = max(len(ranks) for ranks in topology.node_ranks)
            named = [("relay", r) for r in sorted(relays or ())]
            named += [("inter-node pair", pair) for pair in sorted(pairs or ()) if max(pair) >= size]
            for what, value in named:
                if (max(value) if isinstance(value, tuple) else value) >= size:
                    raise InputError(f"sketch {what} {value} names a node-local rank, but the nodes of "
                                     f"{topology.name!r} have ranks 0..{size - 1}")
        links: list[LogicalLink] = []
        for link in flat.links:
            cross = topology.node_of[link.src] != topology.node_of[link.dst]
            if cross:
                a, b = local[link.src], local[link.dst]
                if relays is not None and (a not in relays or b not in relays):
                    continue
                if pairs is not None and (a, b) not in pairs:
                    continue
            beta = slot_bytes / (link.bandwidth * 1e3)
            src, dst = (link.dst, link.src) if reverse else (link.src, link.dst)
            links.append(LogicalLink(len(links), src, dst, link.latency, beta, link.lanes, cross))
        self.links = links
        self.index = {(x.src, x.dst): x.index for x in links}
        self.out: list[list[LogicalLink]] = [[] for _ in range(self.n)]
        self.into: list[list[LogicalLink]] = [[] for _ in range(self.n)]
        for x in links:
            self.out[x.src].append(x)
            self.into[x.dst].append(x)
        limits = []
        for limit in flat.limits:
            pairs = [(b, a) for a, b in limit.links] if reverse else limit.links
            members = tuple(self.index[p] for p in pairs if p in self.index)
            if len(members) > 1:
                limits.append(LogicalLimit(limit.name, members, slot_bytes / (limit.bandwidth * 1e3)))
        self.limits = limits
        self.rotation = self._rotation(sketch.symmetry)

    def _rotation(self, symmetry: tuple[int, ...]) -> int | None:
        """The smallest rotation r -> r + k (mod n) among ``symmetry`` that maps every logical link
        onto a logical link with the same costs, or None."""
        for k in sorted(symmetry):
            if k % self.n == 0 or self.n % k:
                continue
            ok = True
            for x in self.links:
                j = self.index.get(((x.src + k) % self.n, (x.dst + k) % self.n))
                if j is None:
                    ok = False
                    break
                y = self.links[j]
                if (abs(y.alpha - x.alpha) > 1e-12 or abs(y.beta - x.beta) > 1e-12 * max(1.0, x.beta)
                        or y.lanes != x.lanes):
                    ok = False
                    break
            if ok:
                return k
        return None

    def signature(self) -> tuple:
        """Links and limits as comparable values: two logical topologies with equal signatures
        are the same network (used to reuse an allgather plan for the reversed problem)."""
        links = frozenset((x.src, x.dst, round(x.alpha, 12), round(x.beta, 15), x.lanes) for x in self.links)
        limits = frozenset((frozenset((self.links[e].src, self.links[e].dst) for e in lim.links), round(lim.beta, 15))
                           for lim in self.limits)
        return links, limits

    def rotate_link(self, index: int, times: int) -> int:
        """The logical link ``times`` rotations away (requires a rotation)."""
        assert self.rotation is not None
        x = self.links[index]
        k = self.rotation * times
        return self.index[((x.src + k) % self.n, (x.dst + k) % self.n)]

    def hops_from(self, src: int) -> list[int]:
        """Fewest logical links from ``src`` to every rank (n + 1 where unreachable)."""
        dist = [self.n + 1] * self.n
        dist[src] = 0
        frontier = deque([src])
        while frontier:
            u = frontier.popleft()
            for x in self.out[u]:
                if dist[x.dst] > self.n:
                    dist[x.dst] = dist[u] + 1
                    frontier.append(x.dst)
        return dist

    def hops_to(self, dst: int) -> list[int]:
        dist = [self.n + 1] * self.n
        dist[dst] = 0
        frontier = deque([dst])
        while frontier:
            v = frontier.popleft()
            for x in self.into[v]:
                if dist[x.src] > self.n:
                    dist[x.src] = dist[v] + 1
                    frontier.append(x.src)
        return dist


def default_sketch(topology: Topology, sketch: Sketch | None) -> Sketch:
    """The sketch as given, or the default for the topology (see module docstring)."""
    if sketch is not None:
        return sketch
    if topology.n_nodes > 1 and topology.uniform_nodes:
        return Sketch(symmetry=(len(topology.node_ranks[0]),))
    return Sketch()
