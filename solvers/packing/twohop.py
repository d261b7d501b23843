"""Two-hop trees: per root, the star and the trees that relay through one rank, weighted by a
linear program for the best rate (``plan`` adds them where every pair is linked and the other
constructions miss the bound).

Per root r the candidates are the star (r sends to every rank) and, for each other rank w, the
relay tree (r sends to w, w to every other rank). Each tree is two hops deep at most, so a
pipeline of few stages drains fast, and together they use the links unevenly where the links
differ: amd8's pairs have 5 or 6 lanes, where the star alone falls short of the optimal
rate. The LP maximizes the rate t at which every root's part flows, with the weights
of its trees summing to t and every link (and shared limit) carrying at most its capacity:
link x -> y carries root x's star, root x's relay through y, and every other root's relay
through x. The weights are then rounded to integers over ``DENOMINATOR`` (largest remainders),
and the rate the rounded trees reach is measured on the physical links. The LP's optimum can be
a vertex that loads a few relays to their links' capacity and leaves others out (dgx2: 14
relays of 15, each port exactly full), where rounding overloads a port; so a second LP holds
the rate and makes the heaviest tree lightest, and the weights are also rounded over a finer
denominator (a multiple of n - 1: switch:15's 14 relays of 60/14 each); the rounding whose trees
reach the best rate is kept (on dgx2 the first LP's weights round to 6/7 of the rate, the
balanced ones to the bound's, and the two-hop trees then beat the deep chain).
"""

from __future__ import annotations

import math

import numpy as np

from ccl.core.topology import Topology

from .phases import Phase
from .stitch import physical_time
from .trees import Tree

# scipy.optimize is imported where an LP is solved: it is slow to import.

DENOMINATOR = 60  # weights per root: divisible by 5 and 6 lanes, and fine enough for the rates
UP_TO = 16  # ranks: n^2 trees per phase


def two_hop_phase(topology: Topology, reverse: bool, roots: list[int], optimal: float, exact: bool) -> Phase | None:
    """The best two-hop trees of ``roots`` (None where a pair is not linked, or the LP fails)."""
    from scipy.optimize import linprog

    flat = topology.flat()
    n = flat.n_ranks
    if not 3 <= n <= UP_TO:
        return None

    def physical(a: int, b: int) -> tuple[int, int]:
        return (b, a) if reverse else (a, b)

    cap: dict[tuple[int, int], float] = {}
    for a in range(n):
        for b in range(n):
            if a != b:
                link = flat.link(*physical(a, b))
                if link is None:
                    return None
                cap[(a, b)] = link.capacity
    # variables: t, then per root r: star a_r, relays b_{r,w} (w != r)
    index: dict[tuple[int, int], int] = {}
    for r in roots:
        index[(r, r)] = len(index) + 1
        for w in range(n):
            if w != r:
                index[(r, w)] = len(index) + 1
    size = len(index) + 1

    def arc_row(x: int, y: int) -> np.ndarray:
        """The load of arc x -> y (per unit of each tree's weight)."""
        row = np.zeros(size)
        if (x, x) in index:
            row[index[(x, x)]] += 1.0  # x's star
            row[index[(x, y)]] += 1.0  # x's relay through y: its first hop
        for r in roots:
            if r not in (x, y):
                row[index[(r, x)]] += 1.0  # r's relay through x: x forwards to y
        return row

    rows, bounds = [], []
    arcs = {}
    for (x, y), c in sorted(cap.items()):
        arcs[(x, y)] = arc_row(x, y)
        rows.append(arcs[(x, y)])
        bounds.append(c)
    for limit in flat.limits:
        pairs = {physical(a, b) for a, b in limit.links}  # the arcs whose data crosses the limit
        row = sum((arcs[p] for p in pairs if p in arcs), np.zeros(size))
        rows.append(row)
        bounds.append(limit.bandwidth)
    eq = []
    for r in roots:
        row = np.zeros(size)
        row[0] = -1.0
        row[index[(r, r)]] = 1.0
        for w in range(n):
            if w != r:
                row[index[(r, w)]] = 1.0
        eq.append(row)
    objective = np.zeros(size)
    objective[0] = -1.0
    A_ub, b_ub, A_eq = np.array(rows), np.array(bounds), np.array(eq)
    try:
        result = linprog(objective, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=np.zeros(len(eq)),
                         bounds=[(0, None)] * size, method="highs")
    except ValueError:
        return None
    if result.status != 0 or not result.x[0] > 0:
        return None
    solutions = [result.x]
    balanced = _balanced(result.x[0], A_ub, b_ub, A_eq, size)
    if balanced is not None:
        solutions.append(balanced)
    best: tuple[float, list[Tree]] | None = None
    for denominator in sorted({DENOMINATOR, math.lcm(DENOMINATOR, n - 1)}):
        for x in solutions:  # the balanced weights, or finer ones, where they round to a better rate
            trees = _rounded(x, index, roots, n, denominator)
            achieved = physical_time(topology, trees, reverse)
            if best is None or achieved < best[0] * (1 - 1e-9):
                best = (achieved, trees)
    assert best is not None
    achieved, trees = best
    return Phase(reverse, tuple(trees), optimal, achieved, exact, "two-hop")


def _balanced(rate: float, A_ub, b_ub, A_eq, size: int):
    """The weights of the best rate that make the heaviest tree lightest (a second LP: the rate
    held, the largest weight minimized), or None. The first LP's vertex can load a few trees up
    to their links' capacity and leave others out (dgx2: 14 relays of 15, each relay's port
    exactly full), so rounding the weights overloads a port (6/7 of the rate); spread over
    every relay the same rate leaves each port slack (14/15 full) and rounds exactly."""
    from scipy.optimize import linprog

    n_w = size - 1
    # variables: the first LP's, then z (the largest weight)
    ub = np.hstack([A_ub, np.zeros((A_ub.shape[0], 1))])
    cap = np.hstack([np.zeros((n_w, 1)), np.eye(n_w), -np.ones((n_w, 1))])  # weight - z <= 0
    floor = np.zeros((1, size + 1))
    floor[0, 0] = -1.0  # the rate held: t >= rate (within rounding)
    objective = np.zeros(size + 1)
    objective[-1] = 1.0
    try:
        result = linprog(objective, A_ub=np.vstack([ub, cap, floor]),
                         b_ub=np.hstack([b_ub, np.zeros(n_w), [-rate * (1 - 1e-9)]]),
                         A_eq=np.hstack([A_eq, np.zeros((A_eq.shape[0], 1))]), b_eq=np.zeros(A_eq.shape[0]),
                         bounds=[(0, None)] * (size + 1), method="highs")
    except ValueError:
        return None
    if result.status != 0:
        return None
    return result.x[:size]


def _rounded(x, index: dict[tuple[int, int], int], roots: list[int], n: int, denominator: int) -> list[Tree]:
    """The trees of an LP solution ``x``, weights rounded to integers over ``denominator`` per root
    (largest remainders)."""
    t = x[0]
    trees: list[Tree] = []
    for r in roots:
        keys = [(r, r)] + [(r, w) for w in range(n) if w != r]
        exact_w = [x[index[k]] / t * denominator for k in keys]
        weights = [int(v) for v in exact_w]
        order = sorted(range(len(keys)), key=lambda i: (-(exact_w[i] - weights[i]), i))
        for i in order[: denominator - sum(weights)]:
            weights[i] += 1
        for (root, w), weight in zip(keys, weights):
            if weight <= 0:
                continue
            others = [v for v in range(n) if v != root]
            if w == root:
                trees.append(Tree(root, weight, {v: root for v in others}, [root, *others]))
            else:
                rest = [v for v in others if v != w]
                trees.append(Tree(root, weight, {w: root, **{v: w for v in rest}}, [root, w, *rest]))
    return trees
