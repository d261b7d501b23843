"""The hop bound: a chunk crosses one link per step, so a schedule needs at least as many steps
as the longest shortest path (in hops over the flattened rank graph, relaying allowed) from
where a chunk starts to a rank that needs it (``step_bound``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

from ccl.core.collective import Collective
from ccl.core.errors import CollectiveError
from ccl.core.topology import Topology


def hop_distances(topology: Topology, src: int) -> list[float]:
    """Fewest links from ``src`` to every rank over the flattened rank graph (inf if none)."""
    dist = [math.inf] * topology.n_ranks
    dist[src] = 0
    frontier = deque([src])
    while frontier:
        u = frontier.popleft()
        nbrs = topology.routes_from(u) if topology.switches else [link.dst for link in topology.out_links[u]]
        for v in nbrs:
            if dist[v] == math.inf:
                dist[v] = dist[u] + 1
                frontier.append(v)
    return dist


def _needs(collective: Collective) -> Iterator[tuple[int, int, set[int]]]:
    """(destination rank, chunk, ranks the chunk starts on) for every chunk an output slot of
    the destination needs and the destination does not start with (each chunk once per rank)."""
    origins = collective.origins()
    for r, slots in enumerate(collective.outputs):
        seen: set[int] = set()
        for need in slots:
            for c in need:
                if c in seen:
                    continue
                seen.add(c)
                ranks = {q for q, _ in origins[c]}
                if r not in ranks:
                    yield r, c, ranks


def needed_pairs(collective: Collective) -> dict[tuple[int, int], None]:
    """(origin rank, destination rank) pairs data must travel along: for every output slot and
    every chunk of its required sum, from each rank where the chunk starts (when the destination
    does not hold it already). Chunks starting on several ranks contribute all their origins;
    ``step_bound`` takes the nearest."""
    return {(q, r): None for r, _, ranks in _needs(collective) for q in sorted(ranks)}


def step_bound(topology: Topology, collective: Collective) -> int:
    """Least number of steps any schedule needs (see module docstring). Raises CollectiveError
    naming a pair when some chunk can never reach a rank that needs it."""
    dist: dict[int, list[float]] = {}
    worst = 0
    for r, c, ranks in _needs(collective):
        best = math.inf
        for q in ranks:
            if q not in dist:
                dist[q] = hop_distances(topology, q)
            best = min(best, dist[q][r])
        if best == math.inf:
            raise CollectiveError(
                f"rank {r} needs {collective.describe_chunk(c)} but topology {topology.name!r} has no path to it"
            )
        worst = max(worst, int(best))
    return worst


def needed_pairs_exist(collective: Collective) -> bool:
    """Whether any data must move between ranks (always, for a built-in on two ranks or more)."""
    if collective.kind != "custom":
        return collective.n_ranks > 1
    return bool(needed_pairs(collective))
