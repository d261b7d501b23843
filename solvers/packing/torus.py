"""Tori with equal dimensions: one root's trees translated to every root (allgather-like phases).

On a k-dimensional torus of side p (a ``linked_grid`` whose lines are linked rings, all of one
size), translating coordinates by a vector is an automorphism that maps every link to a link of
the same direction (+j or -j along dimension j). So if root 0's trees are translated to every
root, a link of direction d carries, summed over all roots, exactly the weighted number of
root 0's tree arcs of direction d. The 2k directions are balanced when root 0's trees are the
images of one tree under a group acting on the directions regularly: the cyclic shift of the
axes (coordinate j becomes j + 1) together with negating every coordinate, 2k maps (for k = 2 the
rotations by quarter turns). Each direction then carries (n - 1) / 2k arcs' worth of every
root's part, which on a torus whose links are all alike is the cut bound (every rank receives
through its 2k in-links at once): the packing meets the bound with trees of depth
k * floor(p / 2), where the whole-graph packer takes minutes beyond a few hundred ranks.

The base tree goes dimension by dimension (the last dimension first), along every line both
ways round from the position the data enters it, so every rank is at its hop distance from the
root.
"""

from __future__ import annotations

from ccl.core.topology import Topology

from ..builders.grids import linked_grid
from .trees import Tree

__all__ = ["positions", "symmetries", "torus_trees"]


def positions(topology: Topology) -> tuple[list[tuple[int, ...]], dict[tuple[int, ...], int], int] | None:
    """(coordinates of every rank, rank of every coordinate vector, side) with coordinates
    that follow each line's ring, when the ranks form a torus of equal sides whose parallel lines
    are aligned; else None."""
    grid = linked_grid(topology)
    if grid is None or len(set(grid.dims)) != 1 or grid.dims[0] < 3:
        return None
    side = grid.dims[0]
    k = len(grid.dims)
    n = topology.n_ranks
    coords = [[0] * k for _ in range(n)]
    for j, level in enumerate(grid.levels):
        for line in level.lines:
            start = min(line)  # position 0: the line's smallest rank, the others in ring order
            at = line.index(start)
            ring = line[at:] + line[:at]
            if len(ring) > 2 and topology.flat_link(ring[0], ring[1]) is None:
                return None
            for pos, r in enumerate(ring):
                coords[r][j] = pos
    index = {tuple(c): r for r, c in enumerate(coords)}
    if len(index) != n:
        return None
    return [tuple(c) for c in coords], index, side


def _base_tree(k: int, side: int) -> dict[tuple[int, ...], tuple[int, ...]]:
    """Parent of every coordinate vector (but the origin) in the dimension-order tree: the
    last dimension is spread first, along its line both ways, then each earlier one from
    every vector reached so far."""
    parent: dict[tuple[int, ...], tuple[int, ...]] = {}
    reached = [tuple([0] * k)]
    for j in reversed(range(k)):
        grown = []
        for c in reached:
            for sign in (1, -1):
                steps = side // 2 if sign == 1 else (side - 1) // 2
                prev = c
                for s in range(1, steps + 1):
                    v = list(c)
                    v[j] = (c[j] + sign * s) % side
                    nxt = tuple(v)
                    parent[nxt] = prev
                    grown.append(nxt)
                    prev = nxt
        reached += grown
    return parent


def symmetries(k: int, side: int):
    """The 2k maps of coordinate vectors: shift the axes s times, then negate or not."""
    for s in range(k):
        for neg in (False, True):
            def f(c: tuple[int, ...], s: int = s, neg: bool = neg) -> tuple[int, ...]:
                shifted = c[-s:] + c[:-s] if s else c
                return tuple((-x) % side for x in shifted) if neg else shifted
            yield f


def torus_trees(topology: Topology, root: int | None = None) -> list[Tree] | None:
    """2k trees per root of weight 1 (of every root, or of ``root`` alone), or None when the
    ranks are not a torus of equal sides (every tree arc is checked to be a link)."""
    found = positions(topology)
    if found is None:
        return None
    coords, index, side = found
    k = len(coords[0])
    base = _base_tree(k, side)
    order_base = sorted(base, key=lambda c: sum(min(x, side - x) for x in c))  # parents first
    out: list[Tree] = []
    roots = range(topology.n_ranks) if root is None else [root]
    for f in list(symmetries(k, side)):
        image = {f(v): f(p) for v, p in base.items()}
        order = [f(v) for v in order_base]
        for r in roots:
            origin = coords[r]

            def at(c: tuple[int, ...], origin: tuple[int, ...] = origin) -> int:
                return index[tuple((a + b) % side for a, b in zip(c, origin))]

            parent = {at(v): at(p) for v, p in image.items()}
            out.append(Tree(r, 1, parent, [r] + [at(v) for v in order]))
    links = topology.flat()
    for t in out:
        for v, p in t.parent.items():
            if links.link(p, v) is None:
                return None
    return out
