"""Packing spanning out-trees of the roots in a rank-only graph (Edmonds' branching theorem,
constructively).

Given integer arc capacities and a demand per root such that every rank can receive the total
demand from a super source feeding the roots, grow all trees at once: a tree of multiplicity C
(C units of the root's rate travel over it) takes an arc x -> y (x in the tree, y not) with
the largest multiplicity mu that keeps the rest packable, tested by one maximum flow: from x
to y, with every other unfinished tree sigma offered as a detour x -> sigma -> (its vertices)
of capacity C_sigma, the flow must still leave mu beyond their sum. When mu < C the tree splits
in two: a copy with C - mu goes on growing without the arc. Every tree ends spanning every
rank; the multiplicities of a root's trees sum to its demand.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from ccl.errors import InfeasibleError

from .flows import INT32


@dataclass
class Tree:
    """An out-tree: ``parent[v]`` for every vertex but the root; ``weight`` units of rate."""

    root: int
    weight: int
    parent: dict[int, int] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # vertices in the order they joined

    def depth(self) -> dict[int, int]:
        out = {self.root: 0}
        for v in self.order:
            if v != self.root:
                out[v] = out[self.parent[v]] + 1
        return out


def pack_trees(n: int, caps: dict[tuple[int, int], int], demand: dict[int, int],
               progress: Callable[[str], None] | None = None) -> list[Tree]:
    """Trees spanning ranks 0..n-1, ``demand[r]`` units rooted at each r, using at most
    ``caps`` on every arc. Raises InfeasibleError if the demands do not pack (a caller's bug: it
    checks the flow condition first)."""
    residual = {k: v for k, v in caps.items() if v > 0}
    pending: deque[Tree] = deque()
    for r in sorted(demand):
        if demand[r] > 0:
            pending.append(Tree(r, demand[r], {}, [r]))
    active: list[Tree] = list(pending)
    out: list[Tree] = []
    big = min(INT32 - 1, sum(residual.values()) + sum(demand.values()) + 1)
    done_count = 0
    while pending:
        tree = pending.popleft()
        if progress is not None and done_count % 16 == 0:
            progress(f"packing trees: {done_count} done, {len(pending) + 1} to go")
        inside = set(tree.order)
        queue = deque(tree.order)
        while queue and len(inside) < n:
            x = queue.popleft()
            for y in sorted(b for (a, b) in residual if a == x):
                if y in inside:
                    continue
                mu = _extension(n, residual, active, tree, x, y, big)
                if mu <= 0:
                    continue
                if mu < tree.weight:
                    rest = Tree(tree.root, tree.weight - mu, dict(tree.parent), list(tree.order))
                    pending.append(rest)
                    active.append(rest)
                    tree.weight = mu
                tree.parent[y] = x
                tree.order.append(y)
                inside.add(y)
                queue.append(y)
                left = residual[(x, y)] - mu
                if left > 0:
                    residual[(x, y)] = left
                else:
                    del residual[(x, y)]
        if len(inside) < n:
            raise InfeasibleError(f"tree packing failed: a tree of root {tree.root} cannot reach every rank",
                                  bound="branching condition")
        active.remove(tree)
        out.append(tree)
        done_count += 1
    return merge_equal(out)


def merge_equal(trees: list[Tree]) -> list[Tree]:
    """One tree per distinct (root, parent map), with the summed weight (splits often end in
    equal copies)."""
    merged: dict[tuple, Tree] = {}
    for t in trees:
        key = (t.root, tuple(sorted(t.parent.items())))
        if key in merged:
            merged[key].weight += t.weight
        else:
            merged[key] = Tree(t.root, t.weight, dict(t.parent), list(t.order))
    return list(merged.values())


def _extension(n: int, residual: dict[tuple[int, int], int], active: list[Tree], tree: Tree,
               x: int, y: int, big: int) -> int:
    """The multiplicity with which ``tree`` may take arc x -> y."""
    rows: list[int] = []
    cols: list[int] = []
    data: list[int] = []
    for (a, b), c in residual.items():
        rows.append(a)
        cols.append(b)
        data.append(c)
    others = 0
    node = n
    for sigma in active:
        if sigma is tree:
            continue
        for v in sigma.order:
            rows.append(node)
            cols.append(v)
            data.append(big)
        rows.append(x)
        cols.append(node)
        data.append(sigma.weight)
        others += sigma.weight
        node += 1
    graph = csr_matrix((np.array(data, dtype=np.int64), (np.array(rows), np.array(cols))), shape=(node, node))
    graph.data = np.minimum(graph.data, INT32 - 1).astype(np.int32)
    flow = int(maximum_flow(graph, x, y).flow_value)
    return min(tree.weight, residual[(x, y)], flow - others)
