"""What a construction makes: the trees of each direction (``Phase``) and a collective's phases
(``Packing``), with the rates the bound allows and the trees reach."""

from __future__ import annotations

from dataclasses import dataclass

from .trees import Tree


@dataclass(frozen=True)
class Phase:
    """Trees of one direction. ``reverse``: the trees are out-trees of the reversed graph (data
    flows from the leaves to the root). ``optimal`` and ``achieved``: microseconds per byte of
    one part (allgather-like) or of the buffer (rooted), the bound's and the trees'."""

    reverse: bool
    trees: tuple[Tree, ...]
    optimal: float
    achieved: float
    exact: bool
    construction: str = "packed"  # or "stitched": one node's packing and rail stars
    turns: int = 1  # trees per part a schedule takes in turn, stage by stage (``stitch.rail_chains``)

    def trees_per_root(self) -> int:
        count: dict[int, int] = {}
        for t in self.trees:
            count[t.root] = count.get(t.root, 0) + 1
        return max(count.values(), default=0)

    def by_root(self) -> dict[int, list[Tree]]:
        out: dict[int, list[Tree]] = {}
        for t in self.trees:
            out.setdefault(t.root, []).append(t)
        return out


@dataclass(frozen=True)
class Packing:
    kind: str
    n_ranks: int
    root: int | None
    down: Phase | None  # allgather, broadcast, allreduce's second half
    up: Phase | None  # reducescatter, reduce, allreduce's first half
    exchange: bool = False  # allreduce: node trees and an exchange between co-roots (``exchange``)

    def phases(self) -> list[Phase]:
        return [p for p in (self.up, self.down) if p is not None]

    def trees_per_root(self) -> int:
        return max(p.trees_per_root() for p in self.phases())

    def details(self) -> dict:
        out: dict = {"trees": sum(len(p.trees) for p in self.phases()), "trees_per_root": self.trees_per_root()}
        for name, p in (("reduce_phase", self.up), ("broadcast_phase", self.down)):
            if p is None:
                continue
            depth = max((max(t.depth().values()) for t in p.trees), default=0)
            out[name] = {
                "trees": len(p.trees),
                "max_depth": depth,
                "optimal_us_per_MB": round(p.optimal * 1e6, 6),
                "achieved_us_per_MB": round(p.achieved * 1e6, 6),
                "meets_bound": p.achieved <= p.optimal * (1 + 1e-9),
                "exact_capacities": p.exact,
                "construction": p.construction,
            }
        return out
