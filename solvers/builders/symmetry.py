"""Rank symmetries of a topology, found by checking a few candidate permutations.

Exact bounds that minimise over "the rank left out" (``bounds.cut_ratio``) only need one rank
per orbit of the topology's automorphism group: an automorphism maps every cut to a cut of the
same capacity. Finding the whole group is graph-isomorphism hard, but the families users build
are symmetric under simple rank permutations, so we *try* those and keep the ones that are
automorphisms:

* rotation r -> r + b (mod n) for b = 1 and every divisor b of n (rings, switches, nodes);
* rotation inside consecutive blocks of b ranks (torus rows, the GPUs of every node);
* r -> r xor 2^k (hypercubes).

A candidate is extended to switch vertices by matching each switch to the one whose
neighbourhood (direction, capacity, mapped neighbours) is the image of its own, layer by layer
from the ranks outwards; it is kept only if every link then maps to a link of equal capacity
and lanes. Orbits are unions over the kept permutations, so they are always sound (possibly
finer than the true orbits, which only costs time).
"""

from __future__ import annotations

from collections.abc import Callable

from ccl.core.topology import Topology


def _candidates(n: int) -> list[Callable[[int], int]]:
    out: list[Callable[[int], int]] = []
    divisors = [b for b in range(1, n) if n % b == 0]
    for b in divisors:
        out.append(lambda r, b=b: (r + b) % n)
    for b in divisors:
        if b > 1:
            out.append(lambda r, b=b: (r // b) * b + (r % b + 1) % b)
    if n & (n - 1) == 0:
        k = 1
        while k < n:
            out.append(lambda r, k=k: r ^ k)
            k <<= 1
    return out


def _extend(topology: Topology, perm: list[int]) -> list[int] | None:
    """Extend a rank permutation to the switch vertices, or None if it does not extend to an
    automorphism."""
    n, V = topology.n_ranks, topology.n_vertices
    full = perm + [-1] * (V - n)

    def items(v: int, mapping: list[int] | None) -> set[tuple]:
        """(direction, neighbour, bandwidth, lanes, latency) of v's mapped neighbours."""
        out = set()
        for link in topology.out_links[v]:
            w = link.dst if mapping is None else mapping[link.dst]
            if w >= 0:
                out.add(("out", w, link.bandwidth, link.lanes, link.latency))
        for link in topology.in_links[v]:
            w = link.src if mapping is None else mapping[link.src]
            if w >= 0:
                out.add(("in", w, link.bandwidth, link.lanes, link.latency))
        return out

    own = {w: items(w, None) for w in range(n, V)}
    degree = {w: (len(topology.out_links[w]), len(topology.in_links[w])) for w in range(n, V)}
    taken: set[int] = set()
    pending = set(range(n, V))
    while pending:
        progress = False
        for v in sorted(pending):
            known = items(v, full)
            if not known:
                continue
            near = {x[1] for x in known}
            cands = {link.src for u in near for link in topology.in_links[u] if link.src >= n}
            cands |= {link.dst for u in near for link in topology.out_links[u] if link.dst >= n}
            match = [w for w in sorted(cands - taken)
                     if degree[w] == degree[v] and topology.switches[w - n].kind == topology.switches[v - n].kind
                     and known <= own[w]]
            if len(match) != 1:
                if not match:
                    return None
                continue
            full[v] = match[0]
            taken.add(match[0])
            pending.discard(v)
            progress = True
        if not progress:
            return None
    for link in topology.links:
        image = topology.link(full[link.src], full[link.dst])
        if image is None or (image.bandwidth, image.lanes, image.latency) != (link.bandwidth, link.lanes, link.latency):
            return None
    return full


def automorphisms(topology: Topology) -> list[list[int]]:
    """The candidate permutations (of all vertices) that are automorphisms."""
    n = topology.n_ranks
    found = []
    for f in _candidates(n):
        perm = [f(r) for r in range(n)]
        if sorted(perm) != list(range(n)) or perm == list(range(n)):
            continue
        full = _extend(topology, perm)
        if full is not None:
            found.append(full)
    return found


def rank_orbits(topology: Topology) -> list[list[int]]:
    """Ranks grouped into orbits under the automorphisms found (see module docstring)."""
    cache = topology._cache.get("rank_orbits")
    if cache is not None:
        return cache
    n = topology.n_ranks
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for perm in automorphisms(topology):
        for r in range(n):
            a, b = find(r), find(perm[r])
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for r in range(n):
        groups.setdefault(find(r), []).append(r)
    orbits = sorted(groups.values())
    topology._cache["rank_orbits"] = orbits
    return orbits
