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

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from ccl.core.errors import InfeasibleError

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
               progress: Callable[[str], None] | None = None, *, by_levels: bool = False) -> list[Tree]:
    """Trees spanning ranks 0..n-1, ``demand[r]`` units rooted at each r, using at most
    ``caps`` on every arc. Raises InfeasibleError if the demands do not pack (a caller's bug: it
    checks the flow condition first).

    Each tree grows breadth first. By default a tree grows until it spans before the next one
    starts, so the first trees take the short arcs and the last ones may be deep; ``by_levels``
    grows the trees in turn, one level each per turn, which shares the short arcs out and
    evens the depths (a pipeline's fill is the deepest tree's). Either way the result packs."""
    residual = {k: v for k, v in caps.items() if v > 0}
    heads: dict[int, list[int]] = {}
    for a, b in sorted(residual):
        heads.setdefault(a, []).append(b)
    active: list[Tree] = []
    for r in sorted(demand):
        if demand[r] > 0:
            active.append(Tree(r, demand[r], {}, [r]))
    queues = {id(t): deque(t.order) for t in active}
    turn: deque[Tree] = deque(active)
    out: list[Tree] = []
    big = min(INT32 - 1, sum(residual.values()) + sum(demand.values()) + 1)
    while turn:
        tree = turn.popleft()
        if progress is not None and len(out) % 16 == 0:
            progress(f"packing trees: {len(out)} done, {len(active)} to go")
        queue = queues[id(tree)]
        inside = set(tree.order)
        level = len(queue) if by_levels else -1  # vertices to expand this turn (-1: all)
        while queue and len(inside) < n and level != 0:
            level -= 1
            x = queue.popleft()
            for y in heads.get(x, ()):
                if y in inside or (x, y) not in residual:
                    continue
                mu = _extension(n, residual, active, tree, x, y, big)
                if mu <= 0:
                    continue
                if mu < tree.weight:
                    rest = Tree(tree.root, tree.weight - mu, dict(tree.parent), list(tree.order))
                    active.append(rest)
                    queues[id(rest)] = deque(rest.order)
                    turn.append(rest)
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
        if len(inside) == n:
            active.remove(tree)
            out.append(tree)
        elif not queue:
            raise InfeasibleError(f"tree packing failed: a tree of root {tree.root} cannot reach every rank",
                                  bound="branching condition")
        else:
            turn.append(tree)
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


def topological_order(root: int, parent: dict[int, int]) -> list[int]:
    """The vertices in an order where every parent comes before its children."""
    children: dict[int, list[int]] = {}
    for v, p in parent.items():
        children.setdefault(p, []).append(v)
    order = [root]
    for v in order:
        order.extend(sorted(children.get(v, [])))
    return order


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


def pack_shallow(n: int, caps: dict[tuple[int, int], int], root: int, q: int, depth: int,
                 node_limit: int = 2000) -> list[Tree] | None:
    """``q`` unit trees rooted at ``root``, spanning ranks 0..n-1 within ``caps``, none deeper
    than ``depth``, with the least summed depth of their vertices the MILP finds (HiGHS under a
    node limit, so the answer does not depend on the machine's speed); None when it proves there
    are none or finds none within the limit.

    Variables y[t, arc, l]: tree t reaches the arc's head at level l over the arc. Each rank
    but the root has one parent per tree; an arc at level l > 1 leaves a vertex its tree
    reaches at level l - 1, at level 1 only the root's arcs; an arc carries at most its
    capacity of trees. Trees are interchangeable, so they are ordered (by the summed index of
    the root arcs each takes) to cut the symmetry."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # slow to import: loaded when used

    arcs = sorted((a, b) for (a, b), c in caps.items() if c > 0 and a != b and b != root and a < n and b < n)
    if q < 1 or depth < 1 or not arcs:
        return None
    L = depth
    index = {}
    for t in range(q):
        for i, (a, _) in enumerate(arcs):
            for lv in range(1, L + 1):
                if lv == 1 and a != root or lv > 1 and a == root:
                    continue
                index[(t, i, lv)] = len(index)
    nv = len(index)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def row(entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    into: dict[int, list[int]] = {}
    for i, (_, b) in enumerate(arcs):
        into.setdefault(b, []).append(i)
    for t in range(q):
        for v in range(n):
            if v == root:
                continue
            entries = [(index[(t, i, lv)], 1.0) for i in into.get(v, ()) for lv in range(1, L + 1)
                       if (t, i, lv) in index]
            if not entries:
                return None
            row(entries, 1.0, 1.0)
        for i, (a, _) in enumerate(arcs):
            if a == root:
                continue
            for lv in range(2, L + 1):
                parent = [(index[(t, k, lv - 1)], -1.0) for k in into.get(a, ()) if (t, k, lv - 1) in index]
                row([(index[(t, i, lv)], 1.0), *parent], -math.inf, 0.0)
    for i, (a, b) in enumerate(arcs):
        entries = [(index[(t, i, lv)], 1.0) for t in range(q) for lv in range(1, L + 1) if (t, i, lv) in index]
        row(entries, -math.inf, float(caps[(a, b)]))
    # symmetry: the summed index (among the root's arcs) of the root arcs a tree takes does not
    # decrease from tree t to tree t + 1 (any packing can be renumbered so)
    first = [i for i, (a, _) in enumerate(arcs) if a == root]
    for t in range(q - 1):
        entries = [(index[(t, i, 1)], float(k)) for k, i in enumerate(first)]
        entries += [(index[(t + 1, i, 1)], -float(k)) for k, i in enumerate(first)]
        row(entries, -math.inf, 0.0)
    cost = np.zeros(nv)
    for (_, _, lv), c in index.items():
        cost[c] = lv
    matrix = csr_matrix((vals, (rows, cols)), shape=(len(lo), nv))
    result = milp(cost, integrality=np.ones(nv), bounds=Bounds(0, 1),
                  constraints=LinearConstraint(matrix, lo, hi), options={"node_limit": node_limit})
    if result.x is None or result.status not in (0, 1):
        return None
    chosen = np.round(result.x).astype(int)
    trees: list[Tree] = []
    for t in range(q):
        parent: dict[int, int] = {}
        level: dict[int, int] = {root: 0}
        for (tt, i, lv), c in index.items():
            if tt == t and chosen[c]:
                a, b = arcs[i]
                parent[b] = a
                level[b] = lv
        order = sorted(level, key=lambda v: (level[v], v))
        tree = Tree(root, 1, parent, order)
        trees.append(tree)
    return merge_equal(trees)
