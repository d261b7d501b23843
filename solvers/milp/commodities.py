"""Commodities and their routes, shared by the routing stages and the ones after.

A commodity is one slot's data: a source rank and the ranks that need it (every other rank for
allgather and broadcast, one rank for alltoall). ``Routes`` gives every commodity its tree of
logical links. Under the sketch's rotational symmetry only the commodities whose source is
below the rotation k get variables (``representatives``); commodity c rotated a times
(``rotate``) uses link e rotated a times.
"""

from __future__ import annotations

from dataclasses import dataclass

from .logical import LogicalTopology


@dataclass(frozen=True)
class Commodity:
    id: int
    source: int
    dests: tuple[int, ...]
    piece: int


def commodities(kind: str, n: int, pieces: int, root: int = 0) -> list[Commodity]:
    """Allgather-like (every rank's pieces to every other rank), broadcast (the root's pieces to
    everyone) or alltoall (each (source, destination) pair's pieces)."""
    out: list[Commodity] = []
    if kind == "allgather":
        for q in range(n):
            others = tuple(r for r in range(n) if r != q)
            for p in range(pieces):
                out.append(Commodity(len(out), q, others, p))
    elif kind == "broadcast":
        others = tuple(r for r in range(n) if r != root)
        for p in range(pieces):
            out.append(Commodity(len(out), root, others, p))
    elif kind == "alltoall":
        for s in range(n):
            for d in range(n):
                if d == s:
                    continue
                for p in range(pieces):
                    out.append(Commodity(len(out), s, (d,), p))
    else:
        raise ValueError(kind)
    return out


class Routes:
    """The tree of every commodity: ``links[c]`` are the logical link indices it uses."""

    def __init__(self, logical: LogicalTopology, items: list[Commodity], links: dict[int, list[int]]) -> None:
        self.logical = logical
        self.commodities = items
        self.links = links


def representatives(logical: LogicalTopology, items: list[Commodity]) -> tuple[list[Commodity], int, dict]:
    """Commodities that get variables, the number of rotations, and the map
    (source, dests, piece) -> commodity for expanding rotated copies."""
    key = {(c.source, c.dests, c.piece): c for c in items}
    k = logical.rotation
    if k is None:
        return items, 1, key
    n = logical.n
    reps = [c for c in items if c.source < k]
    rotations = n // k
    # the rotations of the representatives must be exactly the commodities (a broadcast's
    # single root, for one, is not symmetric)
    seen = set()
    for c in reps:
        for a in range(rotations):
            dests = tuple(sorted((d + a * k) % n for d in c.dests))
            image = ((c.source + a * k) % n, dests, c.piece)
            if image not in key or image in seen:
                return items, 1, key
            seen.add(image)
    if len(seen) != len(items):
        return items, 1, key
    return reps, n // k, key


def rotate(c: Commodity, a: int, k: int, n: int, key: dict) -> Commodity:
    dests = tuple(sorted((d + a * k) % n for d in c.dests))
    return key[((c.source + a * k) % n, dests, c.piece)]
