"""Lower bounds every solver and report uses.

* ``step_bound``: the hop bound. A chunk crosses one link per step, so a schedule needs at
  least as many steps as the longest shortest path (in hops over the flattened rank graph,
  relaying allowed) from where a chunk starts to a rank that needs it.
* ``cut_ratio``: the cut bound of allgather-like traffic. Every vertex set S of the topology
  (switches included) that misses at least one rank must send out the |S ∩ ranks| parts its
  ranks own, through the capacity leaving S, so per part
  T >= max_S |S ∩ ranks| / capacity_out(S).
  Computed exactly: Dinkelbach's method on the ratio, each step a minimum cut (one per choice of
  the rank kept outside S) with integer capacities, so the answer is an exact fraction.
  Capacities are lanes (chunks per round: SCCL's rounds-per-chunk bound, exact) or bandwidth
  (GB/s, rounded up to integer units of 10^-6 GB/s or coarser on very large fabrics; rounding
  up keeps the bound sound).
* ``rounds_per_chunk_bound``: the cut bound in lanes for allgather, for reducescatter on the
  reversed topology, and their sum for allreduce.

Shared limits declared on rank-to-rank links are not part of the cut (the bound stays valid,
possibly looser); switch and NIC vertices are.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from ccl.collective import Collective
from ccl.errors import CollectiveError
from ccl.topology import Topology

MICRO = 10**6  # finest bandwidth unit of the cut: 1e-6 GB/s


# ---------------------------------------------------------------------- the hop bound
def hop_distances(topology: Topology, src: int) -> list[float]:
    """Fewest links from ``src`` to every rank over the flattened rank graph (inf if none)."""
    dist = [math.inf] * topology.n_ranks
    dist[src] = 0
    frontier = deque([src])
    while frontier:
        u = frontier.popleft()
        nbrs = topology.routes_from(u) if topology.switches else [link.dst for link in topology.out_links[u]]
        for v in nbrs:
            if dist[v] == math.inf:
                dist[v] = dist[u] + 1
                frontier.append(v)
    return dist


def needed_pairs(collective: Collective) -> dict[tuple[int, int], None]:
    """(origin rank, destination rank) pairs data must travel along: for every output slot and
    every chunk of its required sum, from each rank where the chunk starts (when the destination
    does not hold it already). Chunks starting on several ranks contribute all their origins;
    ``step_bound`` takes the nearest."""
    origins = collective.origins()
    out: dict[tuple[int, int], None] = {}
    for r, slots in enumerate(collective.outputs):
        seen: set[int] = set()
        for need in slots:
            for c in need:
                if c in seen:
                    continue
                seen.add(c)
                ranks = {q for q, _ in origins[c]}
                if r in ranks:
                    continue
                for q in ranks:
                    out[(q, r)] = None
    return out


def step_bound(topology: Topology, collective: Collective) -> int:
    """Least number of steps any schedule needs (see module docstring). Raises CollectiveError
    naming a pair when some chunk can never reach a rank that needs it."""
    origins = collective.origins()
    dist: dict[int, list[float]] = {}
    worst = 0
    for r, slots in enumerate(collective.outputs):
        seen: set[int] = set()
        for need in slots:
            for c in need:
                if c in seen:
                    continue
                seen.add(c)
                ranks = {q for q, _ in origins[c]}
                if r in ranks:
                    continue
                best = math.inf
                for q in ranks:
                    if q not in dist:
                        dist[q] = hop_distances(topology, q)
                    best = min(best, dist[q][r])
                if best == math.inf:
                    raise CollectiveError(
                        f"rank {r} needs {collective.describe_chunk(c)} but topology {topology.name!r} has "
                        "no path to it"
                    )
                worst = max(worst, int(best))
    return worst


# ---------------------------------------------------------------------- the cut bound
@dataclass(frozen=True)
class CutBound:
    """max over vertex sets S missing a rank of |S ∩ ranks| / capacity_out(S), and a set S that
    attains it (vertex ids of the topology)."""

    ratio: Fraction | float
    witness: frozenset[int]
    unit: str  # "lanes" (chunks per round) or "GB/s"

    def per_part(self) -> float:
        return float(self.ratio)


def _capacities(topology: Topology, unit: str, reverse: bool) -> tuple[dict[tuple[int, int], int], float]:
    """Integer capacities and the size of their unit. Lanes are exact. Bandwidths are rounded *up*
    to a multiple of a unit (1e-6 GB/s, coarser for very large fabrics so the minimum cuts fit
    the 32-bit flows of the max-flow code): rounding up only adds capacity, so the bound stays a
    lower bound."""
    if unit == "lanes":
        values = {link.pair: link.lanes for link in topology.links}
        size = 1.0
    else:
        micro = {link.pair: round(link.capacity * MICRO) for link in topology.links}
        common = math.gcd(*micro.values())
        limit = 2**29 // max(topology.n_ranks, 1)
        if sum(micro.values()) // common < limit and all(
            abs(m - link.capacity * MICRO) < 1e-6 for m, link in zip(micro.values(), topology.links)
        ):
            size = common / MICRO  # exact: every capacity is a whole number of this unit
            values = {pair: m // common for pair, m in micro.items()}
        else:
            total = sum(link.capacity for link in topology.links)
            size = max(1.0 / MICRO, 4.0 * topology.n_ranks * total / 2**31)
            values = {link.pair: math.ceil(link.capacity / size - 1e-9) for link in topology.links}
    caps: dict[tuple[int, int], int] = {}
    for (a, b), value in values.items():
        key = (b, a) if reverse else (a, b)
        caps[key] = caps.get(key, 0) + value
    return caps, size


def cut_ratio(topology: Topology, unit: str = "lanes", *, reverse: bool = False) -> CutBound:
    """The allgather cut bound (reducescatter with ``reverse``: traffic flows the other way).

    With ``unit="lanes"`` the ratio is rounds per part (a Fraction). With ``unit="bandwidth"`` it
    is parts per GB/s: every rank's part of b bytes takes at least ``ratio * b / 1e3``
    microseconds to spread (1 GB/s moves 1e3 bytes per microsecond)."""
    if unit not in ("lanes", "bandwidth"):
        raise ValueError(unit)
    n, V = topology.n_ranks, topology.n_vertices
    caps, size = _capacities(topology, unit, reverse)
    ranks = range(n)
    if n < 2:
        return CutBound(Fraction(0), frozenset(), "lanes" if unit == "lanes" else "GB/s")

    def cut_of(S: frozenset[int]) -> int:
        return sum(c for (u, v), c in caps.items() if u in S and v not in S)

    def ratio_of(S: frozenset[int]) -> Fraction:
        """Parts per integer capacity unit (lanes, or 1e-6 GB/s)."""
        k = sum(1 for v in S if v < n)
        if k == 0:
            return Fraction(0)
        cut = cut_of(S)
        if cut == 0:
            return Fraction(10**18)  # disconnected: no finite schedule
        return Fraction(k, cut)

    # Start from the best single-rank complement, then improve by minimum cuts.
    candidates = [frozenset(range(n)) - {t} for t in ranks]
    candidates += [frozenset(range(V)) - {t} for t in ranks]
    best_S = max(candidates, key=lambda S: (ratio_of(S), -len(S)))
    lam = ratio_of(best_S)
    if lam >= Fraction(10**18):
        return CutBound(math.inf, best_S, "lanes" if unit == "lanes" else "GB/s")
    src, sink = V, V + 1
    rows, cols, base = [], [], []
    for (u, v), c in caps.items():
        rows.append(u)
        cols.append(v)
        base.append(c)
    base_arr = np.array(base, dtype=np.int64)
    while True:
        improved = False
        # minimise q|R \ S| + p cut(S) where lam = p / q; S beats lam iff the minimum < q|R|
        p, q = lam.numerator, lam.denominator
        for t in ranks:
            r_rows = rows + [src] * n + [t]
            r_cols = cols + list(ranks) + [sink]
            big = q * n + 1  # more than the whole source capacity: t stays outside S
            data = np.concatenate([base_arr * p, np.full(n, q, dtype=np.int64), np.array([big], dtype=np.int64)])
            graph = csr_matrix((data, (r_rows, r_cols)), shape=(V + 2, V + 2))
            flow = maximum_flow(graph, src, sink)
            if flow.flow_value >= q * n:
                continue
            S = _source_side(graph, flow.flow, src) - {src}
            cand = ratio_of(frozenset(S))
            if cand >= Fraction(10**18):
                return CutBound(math.inf, frozenset(S), "lanes" if unit == "lanes" else "GB/s")
            if cand > lam:
                lam, best_S, improved = cand, frozenset(S), True
                break
        if not improved:
            break
    ratio: Fraction | float = lam if unit == "lanes" else float(lam) / size
    return CutBound(ratio, best_S, "lanes" if unit == "lanes" else "GB/s")


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
    """SCCL's bandwidth bound in rounds per chunk (lanes), or None for kinds it does not cover."""
    if kind == "allgather":
        return _fraction(cut_ratio(topology, "lanes").ratio)
    if kind == "reducescatter":
        return _fraction(cut_ratio(topology, "lanes", reverse=True).ratio)
    if kind == "allreduce":
        return _fraction(cut_ratio(topology, "lanes").ratio) + _fraction(cut_ratio(topology, "lanes", reverse=True).ratio)
    return None


def _fraction(x: Fraction | float) -> Fraction:
    if isinstance(x, Fraction):
        return x
    raise CollectiveError("the topology is disconnected: no schedule can finish")


# ---------------------------------------------------------------------- rounds of any collective
def rank_capacities(topology: Topology) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Chunks per round each rank can receive and send in the flattened view: the lanes of its
    links, or less when one shared limit caps all of them (a switch or NIC port)."""
    flat = topology.flat()
    n = flat.n_ranks
    ins: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    outs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for link in flat.links:
        ins[link.dst].append(link.pair)
        outs[link.src].append(link.pair)
    cap_in = [sum(flat.link(*p).lanes for p in ins[r]) for r in range(n)]  # type: ignore[union-attr]
    cap_out = [sum(flat.link(*p).lanes for p in outs[r]) for r in range(n)]  # type: ignore[union-attr]
    for limit in flat.limits:
        covered = set(limit.links)
        lanes = limit.lanes(flat)
        for r in range(n):
            if ins[r] and covered.issuperset(ins[r]):
                cap_in[r] = min(cap_in[r], lanes)
            if outs[r] and covered.issuperset(outs[r]):
                cap_out[r] = min(cap_out[r], lanes)
    return tuple(cap_in), tuple(cap_out)


def rounds_lower_bound(topology: Topology, collective: Collective) -> tuple[Fraction, str]:
    """A lower bound on rounds per chunk (total rounds R over the chunk factor C the collective
    is split further by) that holds for every schedule of the step model on the flattened view,
    with its name.

    * cut (allgather, reducescatter): ``rounds_per_chunk_bound`` on the flattened links;
    * node cut: the ranks of a node (or all the others) must send the slots only they hold
      through the links leaving them, capped by a shared limit covering all of those links (the
      node's NIC);
    * degree: a rank that must receive N slots it does not start with, through links taking K
      slots per round, needs N/K rounds per chunk; a rank that alone holds N slots others need
      must send them. For sums: a rank needs at least one transfer per sum it does not hold
      alone, and a contributor one per sum another rank owns;
    * gossip (allreduce): every slot of a sum all n ranks contribute to and all n need is one-way
      gossip, which takes at least 2(n-1) transfers (Harary and Schwenk), through at most
      (total lanes) transfers per round. Reduce-scatter + allgather cut sums are *not* lower
      bounds for allreduce in general: on a star the centre rank reduces, and the allreduce
      needs n parts per lane where those sums give 2(n-1).
    """
    flat = topology.flat()
    n = flat.n_ranks
    cap_in, cap_out = rank_capacities(topology)
    best, name = Fraction(0), "none"

    def offer(value: Fraction, label: str) -> None:
        nonlocal best, name
        if value > best:
            best, name = value, label

    origins = collective.origins()
    reducing = collective.is_reducing
    if collective.kind in ("allgather", "reducescatter"):
        cut = rounds_per_chunk_bound(flat, collective.kind)
        if cut is not None:
            offer(cut, "cut bound" + (" (reversed)" if collective.kind == "reducescatter" else ""))
    if not reducing:
        for S in _node_sets(flat):
            slots = {next(iter(s)) for r in range(n) if r not in S for s in collective.outputs[r]}
            only = sum(1 for c in slots if all(q in S for q, _ in origins[c]))
            cap = _cut_lanes(flat, S)
            if only and cap:
                offer(Fraction(only, cap), f"node cut: {only} slots leave ranks {_short_set(S)} through {cap} lane(s)")
        for r, slots in enumerate(collective.outputs):
            need = sum(1 for s in slots if not any(q == r for q, _ in origins[next(iter(s))]))
            if need and cap_in[r]:
                offer(Fraction(need, cap_in[r]), f"rank {r} receives {need} slots through {cap_in[r]} lane(s)")
        sole: dict[int, set[int]] = {}
        for r, slots in enumerate(collective.outputs):
            for s in slots:
                places = origins[next(iter(s))]
                if len(places) == 1 and places[0][0] != r:
                    sole.setdefault(places[0][0], set()).add(next(iter(s)))
        for q, chunks in sole.items():
            if cap_out[q]:
                offer(Fraction(len(chunks), cap_out[q]), f"rank {q} sends {len(chunks)} slots through {cap_out[q]} lane(s)")
        return best, name
    sums = list(dict.fromkeys(s for slots in collective.outputs for s in slots))
    owners = {s: {r for r, slots in enumerate(collective.outputs) if s in slots} for s in sums}
    holders = {s: {q for c in s for q, _ in origins[c]} for s in sums}
    for r, slots in enumerate(collective.outputs):
        need = sum(1 for s in slots if holders[s] - {r})
        if need and cap_in[r]:
            offer(Fraction(need, cap_in[r]), f"rank {r} receives {need} sums through {cap_in[r]} lane(s)")
    for q in range(n):
        out = sum(1 for s in sums if q in holders[s] and owners[s] - {q})
        if out and cap_out[q]:
            offer(Fraction(out, cap_out[q]), f"rank {q} contributes to {out} sums through {cap_out[q]} lane(s)")
    everyone = set(range(n))
    gossip = sum(2 * (n - 1) for s in sums if n > 1 and owners[s] == everyone and holders[s] == everyone)
    lanes = sum(link.lanes for link in flat.links)
    if gossip and lanes:
        offer(Fraction(gossip, lanes), f"gossip bound: {gossip} transfers over {lanes} lanes per round")
    return best, name


def _node_sets(flat: Topology) -> list[frozenset[int]]:
    if flat.n_nodes < 2:
        return []
    everyone = frozenset(range(flat.n_ranks))
    out = []
    for ranks in flat.node_ranks:
        out += [frozenset(ranks), everyone - frozenset(ranks)]
    return out


def _cut_lanes(flat: Topology, S: frozenset[int]) -> int:
    """Slots per round that can leave the rank set S in the flattened view."""
    leaving = [link for link in flat.links if link.src in S and link.dst not in S]
    cap = sum(link.lanes for link in leaving)
    pairs = {link.pair for link in leaving}
    for limit in flat.limits:
        if pairs and pairs.issubset(limit.links):
            cap = min(cap, limit.lanes(flat))
    return cap


def _short_set(S: frozenset[int]) -> str:
    items = sorted(S)
    return "{" + ", ".join(map(str, items[:4])) + (", ...}" if len(items) > 4 else "}")
