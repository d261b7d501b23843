"""Broadcast and reduce trees on a torus of equal sides: 2k arc-disjoint spanning trees of the
root, the images of one base tree under the torus's symmetries about the root, as shallow as
a SAT search finds them.

On a k-dimensional torus of side p (k >= 2, every link alike) the root sends through its 2k
out-links, so the broadcast's rate is the bound's when 2k trees of weight 1 share no arc. The
2k maps that shift the axes (coordinate j becomes j + 1) and negate or not fix the root and
permute the 2k directions regularly (``torus.symmetries``). Take a base tree T and its images
g(T): they share no arc exactly when, at every rank w but the root, the in-arcs the images take
are the 2k different ones, that is when the directions g(dir_T(g^-1 w)), over the maps g, are
all different (dir_T(v): the direction of the arc from v's parent to v in T). The whole packing
is then one tree's choice of parents, and every image has the base's depth.

A pipeline's fill and drain are its deepest tree's (the whole-graph packer's trees on
torus:8x8 are 9, 11, 11 and 15 deep; on torus:16x16 deeper still), so the base is searched
for at the least depth first: with one child of the root (the 2k images take the root's 2k
out-links), the rank farthest from that child is k * floor(p / 2) hops away, so no tree is
shallower than 1 + k * floor(p / 2). The SAT encoding (z3, pseudo-Boolean): per rank one
parent direction and one depth level, a parent one level up, and at every rank each direction
taken by exactly one image. torus:8x8 has depth-9 trees, torus:16x16 depth 17, torus:8x8x8
depth 13; torus:5x5 none of depth 5, but of 6.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

from ccl.core.topology import Topology

from .torus import positions, symmetries
from .trees import Tree, topological_order

__all__ = ["rooted_torus_trees", "base_directions", "least_depth"]

UP_TO = 512  # ranks up to which the base tree is searched for (the SAT search grows steeply beyond)
EXTRA_DEPTH = 2  # depths tried beyond the least possible before giving up


def least_depth(k: int, side: int) -> int:
    """No spanning tree of the root with one child is shallower (the child's farthest rank is
    k * floor(side / 2) hops away)."""
    return 1 + k * (side // 2)


def _directions(k: int) -> list[tuple[int, int]]:
    return [(j, s) for j in range(k) for s in (1, -1)]


def _step_back(c: tuple[int, ...], d: tuple[int, int], side: int) -> tuple[int, ...]:
    """The neighbour a direction-d arc into c comes from."""
    j, s = d
    out = list(c)
    out[j] = (out[j] - s) % side
    return tuple(out)


def _maps(k: int, side: int):
    """The symmetries as (map of coordinates, map of directions, inverse map of coordinates)."""
    dirs = _directions(k)
    for s, f in enumerate(symmetries(k, side)):
        shift, neg = divmod(s, 2)

        def fd(d: int, shift: int = shift, neg: int = neg) -> int:
            j, sign = dirs[d]
            return dirs.index(((j + shift) % k, -sign if neg else sign))

        def inverse(c: tuple[int, ...], shift: int = shift, neg: int = neg) -> tuple[int, ...]:
            c = tuple((-x) % side for x in c) if neg else c
            return c[shift:] + c[:shift] if shift else c

        yield f, fd, inverse


@lru_cache(maxsize=16)
def base_directions(k: int, side: int, depth: int) -> dict[tuple[int, ...], int] | None:
    """A base tree of at most ``depth`` levels whose images share no arc, as the direction
    (an index into ``(axis, sign)`` pairs, axis-major) of the arc into every coordinate vector
    but the origin; None when there is none (unsat)."""
    import z3  # slow to import: loaded when a base tree is searched for

    dirs = _directions(k)
    nd = len(dirs)
    origin = (0,) * k
    verts = [v for v in itertools.product(range(side), repeat=k) if v != origin]
    maps = list(_maps(k, side))

    def far(v: tuple[int, ...]) -> int:
        return sum(min(x, side - x) for x in v)

    solver = z3.Solver()
    pick = {(v, d): z3.Bool(f"p{v}{d}") for v in verts for d in range(nd)}
    level = {(v, h): z3.Bool(f"h{v}{h}") for v in verts for h in range(1, depth + 1)}
    for v in verts:
        solver.add(z3.PbEq([(pick[v, d], 1) for d in range(nd)], 1))
        solver.add(z3.PbEq([(level[v, h], 1) for h in range(1, depth + 1)], 1))
        for h in range(1, min(far(v), depth + 1)):
            solver.add(z3.Not(level[v, h]))  # no rank is nearer than its hop distance
        for d in range(nd):
            parent = _step_back(v, dirs[d], side)
            if parent == origin:
                solver.add(z3.Implies(pick[v, d], level[v, 1]))
                continue
            solver.add(z3.Implies(pick[v, d], z3.Not(level[v, 1])))
            for h in range(2, depth + 1):
                solver.add(z3.Implies(z3.And(pick[v, d], level[v, h]), level[parent, h - 1]))
    for w in verts:  # at w, each direction is the in-arc of exactly one image
        for e in range(nd):
            lits = [pick[inverse(w), d] for _, fd, inverse in maps for d in range(nd) if fd(d) == e]
            solver.add(z3.PbEq([(b, 1) for b in lits], 1))
    if solver.check() != z3.sat:
        return None
    model = solver.model()
    return {v: next(d for d in range(nd) if z3.is_true(model.eval(pick[v, d]))) for v in verts}


def rooted_torus_trees(topology: Topology, root: int, reverse: bool = False) -> list[Tree] | None:
    """The 2k trees of ``root`` (weight 1 each), or None when the ranks are no torus of equal
    sides and at least two dimensions, have more than ``UP_TO`` ranks, no base tree is found
    within ``EXTRA_DEPTH`` levels of the least depth, or a tree arc is not a link (the reversed
    arc with ``reverse``)."""
    found = positions(topology)
    if found is None or topology.n_ranks > UP_TO:
        return None
    coords, index, side = found
    k = len(coords[0])
    if k < 2:
        return None
    least = least_depth(k, side)
    base = None
    for depth in range(least, least + EXTRA_DEPTH + 1):
        base = base_directions(k, side, depth)
        if base is not None:
            break
    if base is None:
        return None
    dirs = _directions(k)
    origin = coords[root]

    def rank(c: tuple[int, ...]) -> int:
        return index[tuple((a + b) % side for a, b in zip(c, origin))]

    parents = {v: _step_back(v, dirs[d], side) for v, d in base.items()}
    links = topology.flat()
    out: list[Tree] = []
    for f, _, _ in _maps(k, side):
        parent = {rank(f(v)): rank(f(p)) for v, p in parents.items()}
        for v, p in parent.items():
            if (links.link(v, p) if reverse else links.link(p, v)) is None:
                return None
        out.append(Tree(root, 1, parent, topological_order(root, parent)))
    return out
