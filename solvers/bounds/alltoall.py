"""Alltoall bandwidth bounds: the product-demand cut bound and the concurrent-flow LP.

With m bytes for every ordered pair of ranks, every vertex set S (switches included) must
send m |S ∩ R| |R \\ S| bytes out through its outgoing capacity, so

    T >= m * max_S |S ∩ R| |R \\ S| / cap_out(S)                        (cut bound)

Maximising over S is a sparsest-cut problem (NP-hard in general), so ``alltoall_cut``
enumerates every S exactly when the topology has at most ``ENUMERATE_LIMIT`` vertices and
otherwise evaluates structured candidates (single ranks and their complements, nodes, halves
of the rank order, with and without the switches they own): always a valid bound, exact only
when enumerated.

Cuts can be loose for multi-commodity traffic (every pair is its own commodity), so
``concurrent_flow_time`` solves the LP relaxation exactly: route every source's data to every
destination as a fractional flow over the vertex topology (any paths, split freely), each
link carrying at most capacity x T, and minimise T. Commodities are aggregated per source,
which is exact for single-source demands. Its optimum is the exact fluid lower bound (it is at
least every cut bound); it is solved with HiGHS through scipy when the LP has at most
``LP_LIMIT`` variables.

Shared limits declared on vertex links are left out: a flattened transfer crossing two links
of one limit counts once against it, so adding them to the LP could overstate the bound.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix

from ccl.core.topology import Topology

ENUMERATE_LIMIT = 16
LP_LIMIT = 120_000


def _arrays(topology: Topology) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u = np.array([link.src for link in topology.links], dtype=np.int64)
    v = np.array([link.dst for link in topology.links], dtype=np.int64)
    cap = np.array([link.capacity for link in topology.links], dtype=float)
    return u, v, cap


def alltoall_cut(topology: Topology) -> tuple[float, frozenset[int], bool]:
    """(max_S |S∩R| |R\\S| / cap_out(S) in pairs per GB/s, a set attaining it, exact?)."""
    n, V = topology.n_ranks, topology.n_vertices
    if n < 2:
        return 0.0, frozenset(), True
    u, v, cap = _arrays(topology)
    if V <= ENUMERATE_LIMIT:
        masks = np.arange(1, 2**V - 1, dtype=np.int64)
        bits = ((masks[:, None] >> np.arange(V)) & 1).astype(bool)
        k = bits[:, :n].sum(axis=1)
        demand = (k * (n - k)).astype(float)
        cut = (bits[:, u] & ~bits[:, v]).astype(float) @ cap
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where(demand > 0, np.where(cut > 0, demand / np.where(cut > 0, cut, 1.0), np.inf), 0.0)
        best = int(np.argmax(value))
        return float(value[best]), frozenset(np.flatnonzero(bits[best]).tolist()), True
    best_value, best_set = 0.0, frozenset()
    for mask in _candidates(topology):
        k = int(mask[:n].sum())
        if k in (0, n):
            continue
        cut = float(cap[mask[u] & ~mask[v]].sum())
        value = k * (n - k) / cut if cut > 0 else np.inf
        if value > best_value:
            best_value, best_set = float(value), frozenset(np.flatnonzero(mask).tolist())
    return best_value, best_set, False


def _candidates(topology: Topology):
    n, V = topology.n_ranks, topology.n_vertices
    rank_nbrs: list[set[int]] = [set() for _ in range(V)]
    for link in topology.links:
        if link.src < n:
            rank_nbrs[link.dst].add(link.src)
        if link.dst < n:
            rank_nbrs[link.src].add(link.dst)

    def with_owned(ranks: np.ndarray) -> np.ndarray:
        """The ranks plus every switch whose rank neighbours are all among them."""
        mask = np.zeros(V, dtype=bool)
        mask[:n] = ranks
        members = set(np.flatnonzero(ranks).tolist())
        for w in range(n, V):
            if rank_nbrs[w] and rank_nbrs[w] <= members:
                mask[w] = True
        return mask

    def both(ranks: np.ndarray):
        plain = np.zeros(V, dtype=bool)
        plain[:n] = ranks
        yield plain
        yield with_owned(ranks)
        yield ~with_owned(~ranks)

    for r in range(n):
        one = np.zeros(n, dtype=bool)
        one[r] = True
        yield from both(one)
        yield from both(~one)
    for nodes in topology.node_ranks if topology.n_nodes > 1 else ():
        ranks = np.zeros(n, dtype=bool)
        ranks[list(nodes)] = True
        yield from both(ranks)
    if topology.n_nodes > 1:
        half_nodes = np.array([topology.node_of[r] < topology.n_nodes // 2 for r in range(n)])
        yield from both(half_nodes)
    for length in sorted({n // 2, n // 4} - {0}):
        for start in range(0, n, max(1, n // 64)):
            ranks = np.zeros(n, dtype=bool)
            ranks[(np.arange(length) + start) % n] = True
            yield from both(ranks)


def concurrent_flow_time(topology: Topology) -> float | None:
    """The LP optimum: least T (us per byte-per-pair, times 1e3) such that one unit per ordered
    pair fits through capacities x T; in units of 1/(GB/s) per unit. None when the LP is larger
    than ``LP_LIMIT`` variables or the solver fails."""
    from scipy.optimize import linprog  # slow to import: loaded when an LP is solved

    n, V = topology.n_ranks, topology.n_vertices
    if n < 2:
        return 0.0
    u, v, cap = _arrays(topology)
    E = len(u)
    n_vars = n * E + 1
    if n_vars > LP_LIMIT:
        return None
    T = n * E  # index of the time variable
    # flow conservation per (source, vertex): out - in = supply
    rows, cols, vals = [], [], []
    for s in range(n):
        base_row = s * V
        base_col = s * E
        rows.append(base_row + u)
        cols.append(base_col + np.arange(E))
        vals.append(np.ones(E))
        rows.append(base_row + v)
        cols.append(base_col + np.arange(E))
        vals.append(-np.ones(E))
    A_eq = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(n * V, n_vars)).tocsr()
    b_eq = np.zeros(n * V)
    for s in range(n):
        b_eq[s * V: s * V + n] = -1.0
        b_eq[s * V + s] = n - 1.0
    # capacity: sum over sources of the flow on e <= cap_e * T
    ub_rows = np.concatenate([np.tile(np.arange(E), n), np.arange(E)])
    ub_cols = np.concatenate([np.arange(n * E), np.full(E, T)])
    ub_vals = np.concatenate([np.ones(n * E), -cap])
    A_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(E, n_vars)).tocsr()
    c = np.zeros(n_vars)
    c[T] = 1.0
    result = linprog(c, A_ub=A_ub, b_ub=np.zeros(E), A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if result.status != 0:
        return None
    # HiGHS meets constraints to ~1e-7 relative; shave 1e-6 so the bound stays a bound
    return float(result.x[T]) * (1 - 1e-6)
