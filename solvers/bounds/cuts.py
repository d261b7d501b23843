"""The cut bound of allgather-like traffic, and the least max-flow cuts.

* ``cut_ratio``: every vertex set S of the topology (switches included) that misses at least
  one rank (of ``sinks``, default any) must send out the |S ∩ ranks| parts its ranks own,
  through the capacity leaving S, so per part T >= max_S |S ∩ ranks| / capacity_out(S).
  Computed exactly: Dinkelbach's method on the ratio, each step a minimum cut (one per choice
  of the rank kept outside S, one per orbit of the topology's rank symmetries) with integer
  capacities, so the answer is an exact fraction. Capacities are lanes (chunks per round:
  SCCL's rounds-per-chunk bound, exact) or bandwidth (GB/s, rounded up to integer units of
  10^-6 GB/s or coarser on very large fabrics; rounding up keeps the bound sound).
* ``rounds_per_chunk_bound``: the cut bound in lanes for allgather, for reducescatter on the
  reversed topology, and their sum for allreduce (SCCL's accounting; see ``call.lower_bound``
  for why the sum is not a valid time bound on every topology).
* ``root_min_cut`` and ``global_min_cut``: the least capacity between the root and a rank
  (broadcast, reduce: Edmonds), and of a vertex set that holds a rank and misses one
  (allreduce), by max-flow.

Shared limits declared on links are not part of the cuts (bounds stay valid, maybe looser);
switch and NIC vertices are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from ccl.core.errors import CollectiveError
from ccl.core.topology import Topology

from ..builders import symmetry

MICRO = 10**6  # finest bandwidth unit of the cut: 1e-6 GB/s


@dataclass(frozen=True)
class CutBound:
    """max over vertex sets S missing a rank of |S ∩ ranks| / capacity_out(S), and a set S that
    attains it (vertex ids of the topology)."""

    ratio: Fraction | float
    witness: frozenset[int]
    unit: str  # "lanes" (chunks per round) or "GB/s"


def _capacities(topology: Topology, unit: str, reverse: bool) -> tuple[dict[tuple[int, int], int], float]:
    """Integer capacities and the size of their unit. Lanes are exact. Bandwidths are rounded *up*
    to a multiple of a unit (exact when every capacity is a whole number of the gcd unit, else
    coarse enough that the minimum cuts fit the 32-bit flows of the max-flow code): rounding up
    only adds capacity, so the bound stays a lower bound."""
    if unit == "lanes":
        values = {link.pair: link.lanes for link in topology.links}
        size = 1.0
    else:
        values, size, _ = integer_capacities(topology, 2**29 // max(topology.n_ranks, 1), round_up=True)
    caps: dict[tuple[int, int], int] = {}
    for (a, b), value in values.items():
        key = (b, a) if reverse else (a, b)
        caps[key] = caps.get(key, 0) + value
    return caps, size


def integer_capacities(topology: Topology, budget: int, *, round_up: bool
                       ) -> tuple[dict[tuple[int, int], int], float, bool]:
    """Every link's capacity as a whole number of one unit: (capacities, unit in GB/s, exact).
    Exact when every capacity is a whole multiple of 1e-6 GB/s and their sum in units of the
    gcd stays under ``budget``; otherwise the unit is the total over ``budget`` (at least
    1e-6 GB/s) and capacities are rounded up (bounds: only adds capacity) or down (schedules:
    never uses more than a link has, at least one unit)."""
    micro = {link.pair: round(link.capacity * MICRO) for link in topology.links}
    common = math.gcd(*micro.values()) if micro else 1
    if sum(micro.values()) // common < budget and all(
        abs(m - link.capacity * MICRO) < 1e-6 for m, link in zip(micro.values(), topology.links)
    ):
        return {pair: m // common for pair, m in micro.items()}, common / MICRO, True
    size = max(1.0 / MICRO, sum(link.capacity for link in topology.links) / budget)
    if round_up:
        return {link.pair: math.ceil(link.capacity / size - 1e-9) for link in topology.links}, size, False
    return {link.pair: max(1, math.floor(link.capacity / size + 1e-9)) for link in topology.links}, size, False


def _edge_arrays(caps: dict[tuple[int, int], int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pairs = sorted(caps)
    u = np.array([a for a, _ in pairs], dtype=np.int64)
    v = np.array([b for _, b in pairs], dtype=np.int64)
    c = np.array([caps[p] for p in pairs], dtype=np.int64)
    return u, v, c


def cut_ratio(topology: Topology, unit: str = "lanes", *, reverse: bool = False,
              sinks: Sequence[int] | None = None) -> CutBound:
    """The allgather cut bound (reducescatter with ``reverse``: traffic flows the other way).

    With ``unit="lanes"`` the ratio is rounds per part (a Fraction). With ``unit="bandwidth"`` it
    is parts per GB/s: every rank's part of b bytes takes at least ``ratio * b / 1e3``
    microseconds to spread (1 GB/s moves 1e3 bytes per microsecond).

    ``sinks`` restricts the ranks S must miss (gather: only the root needs the parts, so S
    must miss the root); by default any rank. Only one excluded rank per orbit of the
    topology's rank symmetries is tried (``symmetry.rank_orbits``): symmetric cuts have equal
    ratios, so the answer is the same, found n times faster on a ring or torus."""
    if unit not in ("lanes", "bandwidth"):
        raise ValueError(unit)
    n, V = topology.n_ranks, topology.n_vertices
    out_unit = "lanes" if unit == "lanes" else "GB/s"
    if n < 2:
        return CutBound(Fraction(0), frozenset(), out_unit)
    caps, size = _capacities(topology, unit, reverse)
    if sinks is None:
        targets = [orbit[0] for orbit in symmetry.rank_orbits(topology)]
        all_targets = list(range(n))
    else:
        targets = sorted(set(sinks))
        all_targets = targets
    lam, witness = max_cut_ratio(n, V, caps, targets, all_targets)
    if lam == math.inf:
        return CutBound(math.inf, witness, out_unit)
    ratio: Fraction | float = lam if unit == "lanes" else float(lam) / size
    return CutBound(ratio, witness, out_unit)


def max_cut_ratio(n: int, V: int, caps: dict[tuple[int, int], int], targets: Sequence[int],
                  all_targets: Sequence[int]) -> tuple[Fraction | float, frozenset[int]]:
    """max over vertex sets S that miss a rank of ``targets`` of |S ∩ ranks| / cut(S), over
    integer capacities ``caps`` of a graph whose vertices 0..n-1 are the ranks (of V): the exact
    Fraction (inf when some rank cannot be reached) and a set attaining it. ``all_targets``
    seeds the search with their single-rank complements; ``targets`` (one rank per orbit of
    the graph's symmetries suffices) are the ranks the minimum cuts exclude in turn."""
    u, v, c = _edge_arrays(caps)

    def ratio_of(mask: np.ndarray) -> Fraction:
        """Parts per integer capacity unit (lanes, or the bandwidth unit)."""
        k = int(mask[:n].sum())
        if k == 0:
            return Fraction(0)
        cut = int(c[mask[u] & ~mask[v]].sum())
        if cut == 0:
            return Fraction(10**18)  # disconnected: no finite schedule
        return Fraction(k, cut)

    def complement(t: int, with_switches: bool) -> np.ndarray:
        mask = np.zeros(V, dtype=bool)
        if with_switches:
            mask[:] = True
        else:
            mask[:n] = True
        mask[t] = False
        return mask

    # Start from the best single-rank complement, then improve by minimum cuts.
    best_mask = None
    lam = Fraction(-1)
    for t in all_targets:
        for with_switches in (False, True):
            mask = complement(t, with_switches)
            r = ratio_of(mask)
            if r > lam or (r == lam and best_mask is not None and mask.sum() < best_mask.sum()):
                lam, best_mask = r, mask
    assert best_mask is not None
    if lam >= Fraction(10**18):
        return math.inf, frozenset(np.flatnonzero(best_mask).tolist())
    src, sink = V, V + 1
    rows = np.concatenate([u, np.full(n, src, dtype=np.int64), np.array(targets, dtype=np.int64)])
    cols = np.concatenate([v, np.arange(n, dtype=np.int64), np.full(len(targets), sink, dtype=np.int64)])
    while True:
        improved = False
        # minimise q|R \ S| + p cut(S) with t outside S; S beats lam iff the minimum < q|R|
        p, q = lam.numerator, lam.denominator
        big = q * n + 1  # more than the whole source capacity: t stays outside S
        data = np.concatenate([c * p, np.full(n, q, dtype=np.int64), np.zeros(len(targets), dtype=np.int64)])
        graph = csr_matrix((data, (rows, cols)), shape=(V + 2, V + 2))
        sink_entry = {}
        for t in targets:
            lo, hi = graph.indptr[t], graph.indptr[t + 1]
            sink_entry[t] = lo + int(np.flatnonzero(graph.indices[lo:hi] == sink)[0])
        for t in targets:
            graph.data[sink_entry[t]] = big
            flow = maximum_flow(graph, src, sink)
            if flow.flow_value < q * n:
                S = _source_side(graph, flow.flow, src) - {src}
                mask = np.zeros(V, dtype=bool)
                mask[sorted(S)] = True
                cand = ratio_of(mask)
                if cand >= Fraction(10**18):
                    return math.inf, frozenset(S)
                if cand > lam:
                    lam, best_mask, improved = cand, mask, True
            graph.data[sink_entry[t]] = 0
            if improved:
                break
        if not improved:
            break
    return lam, frozenset(np.flatnonzero(best_mask).tolist())


def _source_side(graph: csr_matrix, flow: csr_matrix, src: int) -> set[int]:
    residual = (graph - flow).tocsr()
    residual.eliminate_zeros()
    reverse = flow.T.tocsr()
    seen = {src}
    frontier = [src]
    while frontier:
        u = frontier.pop()
        for mat in (residual, reverse):
            start, end = mat.indptr[u], mat.indptr[u + 1]
            for v, val in zip(mat.indices[start:end], mat.data[start:end]):
                if val > 0 and v not in seen:
                    seen.add(int(v))
                    frontier.append(int(v))
    return seen


def rounds_per_chunk_bound(topology: Topology, kind: str) -> Fraction | None:
    """SCCL's bandwidth bound in rounds per chunk (lanes), or None for kinds it does not cover.

    Allgather and reducescatter: the exact cut bound (reducescatter on the reversed topology).
    Allreduce: reducescatter + allgather is *not* a valid bound when partial sums may be combined
    on the way (a star reduces to its hub and broadcasts back in less), so it uses what holds for
    every schedule: the one-way gossip count (every chunk is sent at least 2(n-1) times, over
    the lanes leaving all ranks per round) and a single rank's own out- and in-lanes (it must send
    its contribution once and receive the result once)."""
    if kind == "allgather":
        return _fraction(cut_ratio(topology, "lanes").ratio)
    if kind == "reducescatter":
        return _fraction(cut_ratio(topology, "lanes", reverse=True).ratio)
    if kind == "allreduce":
        n = topology.n_ranks
        if n < 2:
            return Fraction(0)
        flat = topology.flat()
        out_lanes = [sum(link.lanes for link in flat.out_links[r]) for r in range(n)]
        in_lanes = [sum(link.lanes for link in flat.in_links[r]) for r in range(n)]
        if min(out_lanes) == 0 or min(in_lanes) == 0:
            raise CollectiveError("the topology is disconnected: no schedule can finish")
        gossip = Fraction(2 * (n - 1), sum(out_lanes))
        single = max(Fraction(1, min(out_lanes)), Fraction(1, min(in_lanes)))
        return max(gossip, single)
    return None


def _fraction(x: Fraction | float) -> Fraction:
    if isinstance(x, Fraction):
        return x
    raise CollectiveError("the topology is disconnected: no schedule can finish")


# ---------------------------------------------------------------------- cuts by max-flow
def _flow_graph(topology: Topology, reverse: bool = False) -> tuple[csr_matrix, float]:
    caps, size = _capacities(topology, "bandwidth", reverse)
    u, v, c = _edge_arrays(caps)
    V = topology.n_vertices
    return csr_matrix((c, (u, v)), shape=(V, V)), size


def root_min_cut(topology: Topology, root: int, reverse: bool) -> tuple[float, frozenset[int]]:
    """min over ranks t of maxflow(root -> t) in GB/s (reverse: the flow into the root)."""
    graph, size = _flow_graph(topology, reverse)
    best, witness = math.inf, frozenset()
    for t in range(topology.n_ranks):
        if t == root:
            continue
        flow = maximum_flow(graph, root, t)
        if flow.flow_value * size < best:
            best = flow.flow_value * size
            witness = frozenset(_source_side(graph, flow.flow, root))
    return best, witness


def global_min_cut(topology: Topology) -> tuple[float, frozenset[int]]:
    """The least capacity leaving a vertex set that holds a rank and misses a rank, in GB/s:
    min over ranks t of maxflow(0 -> t) and maxflow(t -> 0)."""
    graph, size = _flow_graph(topology)
    best, witness = math.inf, frozenset()
    for t in range(1, topology.n_ranks):
        for a, b in ((0, t), (t, 0)):
            flow = maximum_flow(graph, a, b)
            if flow.flow_value * size < best:
                best = flow.flow_value * size
                witness = frozenset(_source_side(graph, flow.flow, a))
    return best, witness
