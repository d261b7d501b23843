"""Grids of ranks for the decomposition templates (``solvers.templates.cascade``).

A grid gives every rank coordinates (c_1, ..., c_k) in dimensions of sizes p_1 x ... x p_k = n.
The *lines* of level j are the sets of ranks that differ in coordinate j only; the templates
run rings along them. Two ways to find a grid:

* ``node_grid``: a multi-node machine with equally sized nodes, rank (a, i) the i-th rank of
  node a. The node-local ranks form one level (or, split finer, the levels of a grid of the
  node's local indices that every node has), the rails {(a, i) : a} the last level. Rails are
  taken as they are, linked or not (unlinked hops are routed, as in ``hierarchical``).
* ``linked_grid``: any topology. A factorization n = p_1 x ... x p_k with rank = the row-major
  index of its coordinates qualifies when every line of every level is a ring of linked ranks
  (``rings.find_ring``; a line of two needs links both ways). The dimensions are found from the
  links alone, never from the topology's name: ``torus:4x4x4`` yields 4 x 4 x 4 (and, with two
  levels, 4 x 16, whose 16-rank lines are rings through 4x4 planes), a DGX-1 2 x 2 x 2, a ring
  of 8 nothing.

Each level records the ring of every line, the capacity of its slowest hop, and whether it may
be run both ways round (``two_way``: the reversed rings use links and shared limits the forward
rings do not, as on a torus, unlike a switch port or a line of two). ``Grid.groups`` are the
runs of consecutive levels whose order the templates may rotate between data parts: equally
fast and on disjoint links and limits (the dimensions of a torus, not the levels of a node
behind one NVSwitch port).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ccl.core.topology import Topology

from .rings import find_ring, is_linked_ring

MAX_LEVELS = 12


@dataclass(frozen=True)
class Level:
    size: int
    lines: tuple[tuple[int, ...], ...]  # the ring order of each line
    capacity: float  # GB/s of the slowest linked hop of its rings (0 when a hop is routed)
    latency: float  # us of the slowest linked hop of its rings
    two_way: bool


@dataclass(frozen=True)
class Grid:
    """Levels in the order the templates reduce over them (the first carries the most data)."""

    coords: tuple[tuple[int, ...], ...]  # coords[rank][level]
    levels: tuple[Level, ...]
    groups: tuple[tuple[int, ...], ...]  # runs of level indices whose order may rotate
    how: str

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(level.size for level in self.levels)

    def describe(self) -> str:
        return f"{'x'.join(map(str, reversed(self.dims)))} ({self.how})"


def node_grid(topology: Topology, *, split: bool = False) -> Grid | None:
    """Nodes x rails (None on a single node or unequal nodes); with ``split`` the node level is
    replaced by the finest linked grid of the local indices that every node has."""
    if topology.n_nodes < 2 or not topology.uniform_nodes:
        return None
    nodes = topology.node_ranks
    N, L = len(nodes), len(nodes[0])
    local_dims: tuple[int, ...] = (L,)
    if split and L > 1:
        for dims in _factorizations(L):
            if all(_lines_linked(topology, [nodes[a][i] for i in range(L)], dims) for a in range(N)):
                local_dims = dims
                break
    # coordinates: the local index's digits (innermost first), then the node
    m = len(local_dims)
    coords: list[tuple[int, ...]] = [()] * topology.n_ranks
    for a in range(N):
        for i, r in enumerate(nodes[a]):
            digits = _digits(i, local_dims)
            coords[r] = tuple(reversed(digits)) + (a,)
    sizes = tuple(reversed(local_dims)) + (N,)
    levels = tuple(_level(topology, coords, sizes, j) for j in range(m + 1))
    groups = _groups(topology, levels, range(m)) + ((m,),)
    how = "nodes x rails" if m == 1 else "node-local grid x rails"
    return Grid(tuple(coords), levels, groups, how)


def linked_grid(topology: Topology, n_levels: int | None = None) -> Grid | None:
    """A factorization of the ranks whose lines are linked rings: with ``n_levels`` exactly that
    many dimensions (the most balanced first), otherwise the most dimensions. None if none."""
    cache = topology._cache.setdefault("linked_grids", {})
    if n_levels not in cache:
        cache[n_levels] = _linked_grid(topology, n_levels)
    return cache[n_levels]


def _linked_grid(topology: Topology, n_levels: int | None) -> Grid | None:
    n = topology.n_ranks
    cands = [d for d in _factorizations(n) if len(d) >= 2 and (n_levels is None or len(d) == n_levels)]
    if n_levels is not None:
        cands.sort(key=lambda d: (max(d) - min(d), d))
    for dims in cands:
        if _lines_linked(topology, list(range(n)), dims):
            # coordinates innermost first (the last row-major digit is level 0)
            coords = tuple(tuple(reversed(_digits(r, dims))) for r in range(n))
            sizes = tuple(reversed(dims))
            levels = [_level(topology, coords, sizes, j) for j in range(len(dims))]
            order = sorted(range(len(levels)), key=lambda j: -levels[j].capacity)
            levels = [levels[j] for j in order]
            coords = tuple(tuple(c[j] for j in order) for c in coords)
            shape = "x".join(map(str, dims))
            return Grid(coords, tuple(levels), _groups(topology, levels, range(len(levels))),
                        f"linked grid {shape}, rank = row-major index")
    return None


def _digits(x: int, dims: Sequence[int]) -> list[int]:
    """Row-major digits of ``x`` in ``dims`` (the first digit the most significant)."""
    out = []
    for d in reversed(dims):
        out.append(x % d)
        x //= d
    return out[::-1]


def _factorizations(n: int) -> list[tuple[int, ...]]:
    """Ordered factorizations of ``n`` into factors >= 2 (at most MAX_LEVELS), most factors
    first; ``(n,)`` last."""
    out: list[tuple[int, ...]] = []

    def grow(rest: int, prefix: tuple[int, ...]) -> None:
        if rest == 1:
            if prefix:
                out.append(prefix)
            return
        if len(prefix) == MAX_LEVELS:
            return
        for d in range(2, rest + 1):
            if rest % d == 0:
                grow(rest // d, prefix + (d,))

    grow(n, ())
    out.sort(key=lambda d: -len(d))
    return out


def _lines_linked(topology: Topology, members: Sequence[int], dims: Sequence[int]) -> bool:
    """Whether every line of the row-major grid ``dims`` over ``members`` (index -> rank) is a
    linked ring. Lines through index 0 first: most candidates fail there."""
    total = math.prod(dims)
    strides = [math.prod(dims[j + 1:]) for j in range(len(dims))]
    for first_only in (True, False):
        for j, d in enumerate(dims):
            if d == 1:
                continue
            s = strides[j]
            bases = [0] if first_only else [x for x in range(total) if (x // s) % d == 0]
            for base in bases:
                line = [members[base + t * s] for t in range(d)]
                if _ring_of(topology, line) is None:
                    return False
    return True


def _ring_of(topology: Topology, line: Sequence[int]) -> list[int] | None:
    """The line as a ring of linked ranks, or None."""
    if len(line) == 2:
        a, b = line
        ok = topology.flat_link(a, b) is not None and topology.flat_link(b, a) is not None
        return sorted(line) if ok else None
    members = set(line)
    for r in line:  # cheap necessary condition before the search: two linked neighbours each
        if sum(1 for q in members if q != r and topology.flat_link(r, q) is not None) < 2:
            return None
    order = find_ring(topology, line)
    return order if is_linked_ring(topology, order) else None


def _level(topology: Topology, coords: Sequence[tuple[int, ...]], sizes: Sequence[int], j: int) -> Level:
    """Level j: the lines of ranks equal in every coordinate but j, each as a ring."""
    by_rest: dict[tuple[int, ...], list[int]] = {}
    for r, c in enumerate(coords):
        by_rest.setdefault(c[:j] + c[j + 1:], []).append(r)
    lines = []
    for members in by_rest.values():
        members.sort(key=lambda r: coords[r][j])
        lines.append(tuple(find_ring(topology, members)))
    capacity, latency = math.inf, 0.0
    for line in lines:
        for a, b in _hops(line):
            link = topology.flat_link(a, b)
            capacity = min(capacity, link.capacity if link is not None else 0.0)
            latency = max(latency, link.latency if link is not None else 0.0)
    if capacity == math.inf:
        capacity = 0.0
    forward = _footprint(topology, lines, False)
    two_way = sizes[j] > 2 and not forward & _footprint(topology, lines, True)
    return Level(sizes[j], tuple(lines), capacity, latency, two_way)


def _hops(line: Sequence[int], reverse: bool = False) -> list[tuple[int, int]]:
    m = len(line)
    if m < 2:
        return []
    pairs = [(line[i], line[(i + 1) % m]) for i in range(m)] if m > 2 else [(line[0], line[1]), (line[1], line[0])]
    return [(b, a) for a, b in pairs] if reverse else pairs


def _footprint(topology: Topology, lines: Sequence[Sequence[int]], reverse: bool) -> set:
    """The flattened links and shared limits the rings of ``lines`` use (one way round)."""
    flat = topology.flat()
    limits = topology._cache.get("limit_index")
    if limits is None:
        limits = {}
        for i, limit in enumerate(flat.limits):
            for pair in limit.links:
                limits.setdefault(pair, []).append(i)
        topology._cache["limit_index"] = limits
    out: set = set()
    for line in lines:
        for pair in _hops(line, reverse):
            out.add(("link", pair))
            out.update(("limit", i) for i in limits.get(pair, ()))
    return out


def _groups(topology: Topology, levels: Sequence[Level], indices: range) -> tuple[tuple[int, ...], ...]:
    """Consecutive runs of ``indices`` whose levels are equally fast and use disjoint links and
    limits (both ways round where they are two-way): their order may rotate."""
    prints = {j: _footprint(topology, levels[j].lines, False) | (
        _footprint(topology, levels[j].lines, True) if levels[j].two_way else set()) for j in indices}
    groups: list[list[int]] = []
    for j in indices:
        if groups:
            run = groups[-1]
            same = math.isclose(levels[run[0]].capacity, levels[j].capacity, rel_tol=1e-6)
            if same and levels[j].capacity > 0 and all(not prints[i] & prints[j] for i in run):
                run.append(j)
                continue
        groups.append([j])
    return tuple(tuple(g) for g in groups)
