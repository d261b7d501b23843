"""The synthesis problems the encodings read, derived once from a Topology and a Collective.

Two shapes of problem:

* ``RoutingSpec``: non-reducing. Every chunk starts on its origin ranks and must reach the ranks
  whose output asks for it (SCCL's pre/postconditions); ranks may relay chunks they do not need.
  Allgather, alltoall, broadcast, gather, scatter and custom copies are routing problems, and so
  are the duals of reduce and reducescatter (see ``DualFormulation`` in ``formulation.py``).
* ``CombiningSpec``: reducing. Every output slot must end holding the sum of a set of chunks,
  each counted once. Allreduce and custom reducing collectives are combining problems.

Both work on the flattened rank-only view (``Topology.flat()``, the one place it is derived):
links carry ``lanes`` chunks per round and each shared limit caps the summed chunks of its links
at ``SharedLimit.lanes(flat)`` per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ccl.core.collective import Collective
from ccl.core.errors import CollectiveError
from ccl.core.topology import Link, SharedLimit, Topology

from ..bounds.steps import hop_distances


@dataclass(frozen=True)
class Network:
    """The flattened topology as numbers: links (src, dst, lanes) and shared limits (name, link
    indices, lanes). ``reversed()`` is the same hardware with every link turned around, the
    network of dual problems."""

    topology: Topology  # flattened: ranks only
    links: tuple[tuple[int, int, int], ...]
    limits: tuple[tuple[str, tuple[int, ...], int], ...]

    @staticmethod
    def of(topology: Topology) -> Network:
        flat = topology.flat()
        links = tuple((x.src, x.dst, x.lanes) for x in flat.links)
        index = {(a, b): i for i, (a, b, _) in enumerate(links)}
        limits = tuple(
            (x.name, tuple(index[p] for p in x.links), x.lanes(flat)) for x in flat.limits
        )
        return Network(flat, links, limits)

    def reversed(self) -> Network:
        flat = self.topology
        links = tuple(Link(x.dst, x.src, x.bandwidth, x.latency, x.lanes) for x in flat.links)
        limits = tuple(SharedLimit(x.name, tuple((b, a) for a, b in x.links), x.bandwidth) for x in flat.limits)
        topo = Topology(f"{flat.name}-reversed", flat.n_ranks, links, limits=limits, node_of=flat.node_of,
                        accelerator=flat.accelerator)
        return Network.of(topo)

    @property
    def n_ranks(self) -> int:
        return self.topology.n_ranks

    @cached_property
    def dist(self) -> tuple[tuple[float, ...], ...]:
        """Hops between ranks (inf when unreachable)."""
        return tuple(tuple(hop_distances(self.topology, r)) for r in range(self.n_ranks))

    @cached_property
    def in_lanes(self) -> tuple[int, ...]:
        out = [0] * self.n_ranks
        for _, b, lanes in self.links:
            out[b] += lanes
        return tuple(out)

    @cached_property
    def out_lanes(self) -> tuple[int, ...]:
        out = [0] * self.n_ranks
        for a, _, lanes in self.links:
            out[a] += lanes
        return tuple(out)


@dataclass(frozen=True)
class RoutingSpec:
    """Chunks with their origin ranks and the ranks that must receive them.

    ``allowed[c]`` (None: every rank) restricts the ranks chunk ``c`` may visit; duals use it so
    partial sums only pass through ranks that hold an accumulator."""

    network: Network
    chunks: tuple[int, ...]
    origins: dict[int, frozenset[int]]
    dests: dict[int, frozenset[int]]
    allowed: dict[int, frozenset[int]] | None = None

    def __post_init__(self) -> None:
        dist = self.network.dist
        for c in self.chunks:
            for r in sorted(self.dests[c]):
                if min(dist[o][r] for o in self.origins[c]) == math.inf:
                    raise CollectiveError(
                        f"rank {r} needs chunk {c} but topology {self.network.topology.name!r} has no path to it "
                        f"from rank {min(self.origins[c])}"
                    )

    @cached_property
    def from_origin(self) -> dict[int, tuple[float, ...]]:
        """Hops from the nearest origin of each chunk to every rank."""
        dist, n = self.network.dist, self.network.n_ranks
        return {c: tuple(min(dist[o][r] for o in self.origins[c]) for r in range(n)) for c in self.chunks}

    @cached_property
    def to_dest(self) -> dict[int, tuple[float, ...]]:
        """Hops from every rank to the nearest rank that still needs each chunk (0 for those)."""
        dist, n = self.network.dist, self.network.n_ranks
        return {c: tuple(min((dist[r][d] for d in self.dests[c]), default=math.inf) for r in range(n))
                for c in self.chunks}

    def may_visit(self, c: int, r: int) -> bool:
        return self.allowed is None or r in self.allowed[c]


def routing_spec(network: Network, collective: Collective) -> RoutingSpec:
    """The routing problem of a non-reducing collective. Raises CollectiveError for a reducing one
    or one asking a rank for the same chunk in two output slots."""
    origins: dict[int, set[int]] = {}
    for r, slots in enumerate(collective.inputs):
        for c in slots:
            origins.setdefault(c, set()).add(r)
    dests: dict[int, set[int]] = {c: set() for c in origins}
    for r, slots in enumerate(collective.outputs):
        seen: set[int] = set()
        for j, need in enumerate(slots):
            if len(need) != 1:
                raise CollectiveError(
                    f"collective {collective.name!r}: rank {r} output slot {j} is a sum of {len(need)} chunks; "
                    "routing handles copies only (reducing collectives go through the dual or the combining encoding)"
                )
            (c,) = need
            if c in seen:
                raise CollectiveError(
                    f"collective {collective.name!r}: rank {r} asks for chunk {c} in two output slots; "
                    "the smt solver needs each chunk at most once per rank"
                )
            seen.add(c)
            if r not in origins[c]:
                dests[c].add(r)
    chunks = tuple(sorted(origins))
    return RoutingSpec(
        network,
        chunks,
        {c: frozenset(origins[c]) for c in chunks},
        {c: frozenset(dests[c]) for c in chunks},
    )


@dataclass(frozen=True)
class Group:
    """One required sum: the chunks it adds up, the rank each starts on, and the ranks whose
    output must hold it."""

    chunks: tuple[int, ...]
    holder: tuple[int, ...]  # holder[k]: the rank where chunks[k] starts
    owners: frozenset[int]


@dataclass(frozen=True)
class CombiningSpec:
    """Sums to form. ``groups`` are the distinct required sums; ``collective`` gives the slots."""

    network: Network
    collective: Collective
    groups: tuple[Group, ...]


def combining_spec(network: Network, collective: Collective) -> CombiningSpec:
    """The combining problem of any collective (reducing or not). Every chunk of a required sum
    must start on exactly one rank, and a rank may not ask for the same sum twice."""
    origins = collective.origins()
    groups: dict[frozenset[int], set[int]] = {}
    for r, slots in enumerate(collective.outputs):
        for need in slots:
            owners = groups.setdefault(need, set())
            if r in owners:
                raise CollectiveError(
                    f"collective {collective.name!r}: rank {r} asks for the same sum in two output slots; "
                    "the smt solver needs each sum at most once per rank"
                )
            owners.add(r)
            for c in need:
                if len(origins[c]) != 1:
                    raise CollectiveError(
                        f"collective {collective.name!r}: {collective.describe_chunk(c)} starts on several ranks; "
                        "a sum needs each of its chunks on exactly one rank"
                    )
    out = []
    for need, owners in sorted(groups.items(), key=lambda kv: sorted(kv[0])):
        chunks = tuple(sorted(need))
        out.append(Group(chunks, tuple(origins[c][0][0] for c in chunks), frozenset(owners)))
    dist = network.dist
    for g in out:
        for r in sorted(g.owners):
            for c, q in zip(g.chunks, g.holder):
                if dist[q][r] == math.inf:
                    raise CollectiveError(
                        f"rank {r} needs {collective.describe_chunk(c)} but topology {network.topology.name!r} "
                        "has no path to it"
                    )
    return CombiningSpec(network, collective, tuple(out))
