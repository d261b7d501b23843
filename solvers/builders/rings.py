"""Finding rings that follow the topology's links.

``find_ring(topology, ranks)`` returns a cyclic order of ``ranks``:

1. the ranks in increasing order, if consecutive ranks are linked all the way round (rings,
   switches, fully connected machines, NVSwitch nodes: the common case, found at once);
2. otherwise a Hamiltonian cycle found by depth-first search (widest links first, Warnsdorff's
   fewest-exits rule to break ties) within a node budget;
3. otherwise a Hamiltonian path p0..p(m-1), folded into the order p0, p2, p4, ..., p5, p3, p1, in
   which consecutive ranks are at most two links apart (a line becomes a ring of dilation 2);
4. otherwise increasing order.

Orders from 3 and 4 have unlinked neighbours; ``ScheduleBuilder`` routes those hops through
intermediate ranks with explicit forwarding transfers.
"""

from __future__ import annotations

from collections.abc import Sequence

from ccl.core.topology import Topology

SEARCH_BUDGET = 200_000  # DFS nodes per search
PATH_STARTS = 8  # start ranks tried for a Hamiltonian path


def _adjacency(topology: Topology, ranks: Sequence[int]) -> dict[int, list[int]]:
    members = set(ranks)
    adj: dict[int, list[int]] = {}
    for r in ranks:
        nbrs = []
        for q in ranks:
            if q != r:
                link = topology.flat_link(r, q)
                if link is not None:
                    nbrs.append((-link.capacity, q))
        adj[r] = [q for _, q in sorted(nbrs) if q in members]
    return adj


def _linked_cycle(topology: Topology, order: Sequence[int]) -> bool:
    m = len(order)
    return all(topology.flat_link(order[i], order[(i + 1) % m]) is not None for i in range(m))


def _search(adj: dict[int, list[int]], start: int, m: int, cycle: bool) -> list[int] | None:
    """Iterative DFS for a Hamiltonian cycle (or path) from ``start``; None when the budget runs
    out or none exists."""
    path = [start]
    on_path = {start}
    rev: dict[int, set[int]] = {v: set() for v in adj}
    for v, nbrs in adj.items():
        for w in nbrs:
            rev[w].add(v)

    def ordered(v: int) -> list[int]:
        cands = [w for w in adj[v] if w not in on_path]
        # Warnsdorff: fewest onward exits first; the adjacency order (widest first) breaks ties.
        rank = {w: i for i, w in enumerate(cands)}
        return sorted(cands, key=lambda w: (sum(1 for x in adj[w] if x not in on_path), rank[w]))

    stack = [iter(ordered(start))]
    budget = SEARCH_BUDGET
    while stack:
        budget -= 1
        if budget < 0:
            return None
        if len(path) == m:
            if not cycle or start in adj[path[-1]]:
                return path
            stack.pop()
            on_path.discard(path.pop())
            continue
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            on_path.discard(path.pop())
            continue
        if cycle and m > 2 and len(path) < m - 1 and not (rev[start] - on_path - {nxt}):
            continue  # nothing left could close the cycle back to start
        path.append(nxt)
        on_path.add(nxt)
        stack.append(iter(ordered(nxt)))
    return None


def find_ring(topology: Topology, ranks: Sequence[int] | None = None) -> list[int]:
    """A cyclic order of ``ranks`` (default: all ranks) following links where possible."""
    order = list(range(topology.n_ranks)) if ranks is None else sorted(ranks)
    m = len(order)
    if m <= 2 or _linked_cycle(topology, order):
        return order
    adj = _adjacency(topology, order)
    found = _search(adj, order[0], m, cycle=True)
    if found is not None:
        return found
    for start in order[:PATH_STARTS]:
        path = _search(adj, start, m, cycle=False)
        if path is not None:
            return path[0::2] + path[1::2][::-1]
    return order


def is_linked_ring(topology: Topology, order: Sequence[int]) -> bool:
    return _linked_cycle(topology, order)


def find_disjoint_rings(topology: Topology, max_rings: int) -> list[list[int]]:
    """Up to ``max_rings`` directed Hamiltonian cycles over all ranks that together fit the
    topology: each flattened link is used by at most ``lanes`` rings and each shared limit by at
    most its lane count, so the rings can run side by side at full rate (NCCL's channels).
    Greedy: the increasing and decreasing orders first, then depth-first search on what capacity
    is left. Returns at least one ring (``find_ring``'s, possibly routed) even when no linked
    cycle exists."""
    flat = topology.flat()
    n = flat.n_ranks
    left = {link.pair: link.lanes for link in flat.links}
    limit_left = [limit.lanes(flat) for limit in flat.limits]
    limits_of: dict[tuple[int, int], list[int]] = {}
    for i, limit in enumerate(flat.limits):
        for pair in limit.links:
            limits_of.setdefault(pair, []).append(i)
    rings: list[list[int]] = []

    def fits(order: Sequence[int]) -> bool:
        use: dict[tuple[int, int], int] = {}
        lim: dict[int, int] = {}
        for i in range(len(order)):
            pair = (order[i], order[(i + 1) % len(order)])
            use[pair] = use.get(pair, 0) + 1
            for k in limits_of.get(pair, ()):
                lim[k] = lim.get(k, 0) + 1
        return all(left.get(p, 0) >= u for p, u in use.items()) and all(limit_left[k] >= u for k, u in lim.items())

    def take(order: Sequence[int]) -> None:
        for i in range(len(order)):
            pair = (order[i], order[(i + 1) % len(order)])
            left[pair] -= 1
            for k in limits_of.get(pair, ()):
                limit_left[k] -= 1
        rings.append(list(order))

    if n < 3:
        return [list(range(n))]
    for order in (list(range(n)), [0] + list(range(n - 1, 0, -1))):
        if len(rings) < max_rings and fits(order):
            take(order)
    while len(rings) < max_rings:
        adj: dict[int, list[int]] = {}
        for r in range(n):
            nbrs = [(-flat.link(r, q).capacity, q) for q in range(n)  # type: ignore[union-attr]
                    if q != r and left.get((r, q), 0) > 0 and all(limit_left[k] > 0 for k in limits_of.get((r, q), ()))]
            adj[r] = [q for _, q in sorted(nbrs)]
        found = _search(adj, 0, n, cycle=True)
        if found is None or not fits(found):
            break
        take(found)
    return rings or [find_ring(topology)]
