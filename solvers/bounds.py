"""Lower bounds every solver and report uses.

Building blocks:

* ``step_bound``: the hop bound. A chunk crosses one link per step, so a schedule needs at
  least as many steps as the longest shortest path (in hops over the flattened rank graph,
  relaying allowed) from where a chunk starts to a rank that needs it.
* ``cut_ratio``: the cut bound of allgather-like traffic. Every vertex set S of the topology
  (switches included) that misses at least one rank (of ``sinks``, default any) must send
  out the |S ∩ ranks| parts its ranks own, through the capacity leaving S, so per part
  T >= max_S |S ∩ ranks| / capacity_out(S).
  Computed exactly: Dinkelbach's method on the ratio, each step a minimum cut (one per choice
  of the rank kept outside S, one per orbit of the topology's rank symmetries) with integer
  capacities, so the answer is an exact fraction. Capacities are lanes (chunks per round:
  SCCL's rounds-per-chunk bound, exact) or bandwidth (GB/s, rounded up to integer units of
  10^-6 GB/s or coarser on very large fabrics; rounding up keeps the bound sound).
* ``rounds_per_chunk_bound``: the cut bound in lanes for allgather, for reducescatter on the
  reversed topology, and their sum for allreduce (SCCL's accounting; see ``lower_bound`` for
  why the sum is not a valid time bound on every topology).

``lower_bound(topology, collective, size) -> Bounds``: the bound of one call, in the
simulator's physics (a transfer pays its link's latency; a link carries at most lanes x
bandwidth; switches forward but neither combine nor replicate). ``bound = max(latency,
bandwidth)``:

* latency: the alpha-weighted shortest path (Dijkstra over the flattened rank graph, whose
  links through switches carry their path's latency) between the farthest pair of ranks that
  must exchange data: all pairs for allgather/reducescatter/allreduce/alltoall, root to every
  rank (or back) for the rooted kinds, the needed pairs for custom collectives.
* bandwidth, with S = size (nccl-tests convention) and n ranks:

  - allgather, reducescatter: cut_ratio x S / n (reducescatter on the reversed graph). Exact
    in the fluid limit: spanning-tree packings reach it (ForestColl), when transfers may take
    any path through the switches. With fixed routes (the flattened topology's, which the
    simulator follows) the routed delivery bound (``routed_delivery``) may be higher.
  - gather, scatter: the same with S forced to miss the root. Exact (single-commodity flow).
  - broadcast, reduce: S / min over ranks t of maxflow(root -> t) (reversed for reduce).
    Exact in the fluid limit (Edmonds' arborescence packing).
  - allreduce: the largest of (a) S / (least capacity leaving a vertex set that holds a rank
    and misses one: 2(n-1) max-flows), and (b) one-way gossip volume: every element must be
    sent at least 2(k-1) times between k parts (the minimum number of one-way calls for k
    parties to all learn everything), and a part sends only through the capacity leaving it,
    so T >= 2(k-1) S / sum of the parts' out- (and in-) capacities, for k = n single ranks and
    k = the nodes of a multi-node topology; with switches (up to ``ROUTED_GOSSIP_RANKS``) also
    over the capacity the fixed routes of all pairs (of different nodes) can carry together
    (``routed_capacity``). On a uniform fabric (every rank b) (b) is
    2(n-1) S / (n b): the reducescatter + allgather bound. RS + AG is *not* used in general:
    on a star (hub linked to k leaves at b) reduce-to-hub-and-broadcast, pipelined, takes
    about S / b while RS + AG claims 2k/(k+1) S / b. Not exact in general.
  - alltoall: m = S / n bytes per ordered pair. The product-demand cut bound
    max_S m |S ∩ R| |R - S| / cap_out(S), every S enumerated when the topology has at most
    16 vertices, otherwise structured candidate sets (valid, maybe loose); and the LP
    relaxation (concurrent multicommodity flow, HiGHS via scipy) when it has at most 120k
    variables: the exact fluid optimum, never below a cut bound (``flows``).
  - custom: what every rank must send (chunks only it holds that others need) and receive
    (output slots it cannot fill locally) over its own links.

Latency onsets: no byte crosses a link before the latency of the route carrying it has passed
(the simulator's physics: a message pays its route's latency, then moves its bytes; with
overlapping latencies it lands that long after moving them). So each bandwidth bound above
counts its cut's capacity only from each link's onset, the least latency of a rank-to-rank
route through it (``link_onsets``): a cut whose links all start at alpha gives alpha + V / C,
and a cut with links of several latencies needs the least T with sum_e c_e (T - alpha_e)+ >= V
(``onset_time``). On dgx-h100:16 the NIC cut of an allgather starts 2.6 us late (1.7% of the
bound at 64 MiB). The LP and the per-rank volume start at the least latency of any link.
The cut bounds of allgather, reducescatter, broadcast and reduce also count the far side's
last (first) hop: with k ranks beyond the cut, a byte landing there less than tau (the least
rank-to-rank latency) before the end serves only its own rank, and one leaving the
contributing side before tau sums only its sender's contribution, so each link's capacity
counts 1/k from its onset and the rest from tau later (``_far_side``): 7/8 x 0.7 us more for
a node's NIC cut on dgx-h100:16.

The lane bound of broadcast and reduce (``lane_bound``; proof in docs/bounds.md): a message
holds one lane of its link for its latency plus its bytes' time (the simulator's default
physics, not ``overlap_latency``), and a rank forwards only bytes that have landed. When the
root's lanes are the cut, they must keep delivering until the end, yet every byte they
deliver late still has to reach (or, for reduce, come from) every other rank. Averaged over
the first tau microseconds of the call, a lane that delivers in few large messages leaves
long stretches with nothing new landed, and one that delivers in many pays a latency per
message; the least of the two costs over every lane, in closed form, raises the bound: amd8
broadcast at 64 MiB 188.1 us against the cut's 178.5. Topologies without switches only (with
them the flattened links into the ranks overstate what they can receive, and the term gives
nothing).

Shared limits declared on links are not part of cuts or the LP (bounds stay valid, maybe
looser); switch and NIC vertices are. The bounds are affine in the size above the cuts'
latencies: their coefficients and onsets are computed once per (topology, collective kind,
root) and cached.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from ccl.core.collective import Collective
from ccl.core.errors import CollectiveError
from ccl.core.topology import Topology

from .paths import latency_bound

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


def _needs(collective: Collective) -> Iterator[tuple[int, int, set[int]]]:
    """(destination rank, chunk, ranks the chunk starts on) for every chunk an output slot of
    the destination needs and the destination does not start with (each chunk once per rank)."""
    origins = collective.origins()
    for r, slots in enumerate(collective.outputs):
        seen: set[int] = set()
        for need in slots:
            for c in need:
                if c in seen:
                    continue
                seen.add(c)
                ranks = {q for q, _ in origins[c]}
                if r not in ranks:
                    yield r, c, ranks


def needed_pairs(collective: Collective) -> dict[tuple[int, int], None]:
    """(origin rank, destination rank) pairs data must travel along: for every output slot and
    every chunk of its required sum, from each rank where the chunk starts (when the destination
    does not hold it already). Chunks starting on several ranks contribute all their origins;
    ``step_bound`` takes the nearest."""
    return {(q, r): None for r, _, ranks in _needs(collective) for q in sorted(ranks)}


def step_bound(topology: Topology, collective: Collective) -> int:
    """Least number of steps any schedule needs (see module docstring). Raises CollectiveError
    naming a pair when some chunk can never reach a rank that needs it."""
    dist: dict[int, list[float]] = {}
    worst = 0
    for r, c, ranks in _needs(collective):
        best = math.inf
        for q in ranks:
            if q not in dist:
                dist[q] = hop_distances(topology, q)
            best = min(best, dist[q][r])
        if best == math.inf:
            raise CollectiveError(
                f"rank {r} needs {collective.describe_chunk(c)} but topology {topology.name!r} has no path to it"
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
        from .builders.symmetry import rank_orbits

        targets = [orbit[0] for orbit in rank_orbits(topology)]
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


# ---------------------------------------------------------------------- routed delivery
# The cut bound lets data take any path through the switches, but a transfer between two ranks
# takes the route the flattened topology fixes for the pair (``Topology.routes_from``). Where a
# physical link no route uses would relieve a cut (two DGX-2 GPUs reach each other through
# their shared NIC's PCIe switch, but their transfers go through the NVSwitch), the routes
# deliver less: in an allgather every rank r of a set R must receive the n - 1 parts it lacks,
# each in some transfer into r, so R receives |R| (n - 1) parts at most as fast as the routes
# into its ranks can carry together, C_in(R) = max sum of pair rates into R under every
# physical link's capacity (an LP; sources anywhere, R's own ranks included). A reducescatter
# rank must send its contribution to the n - 1 other parts (it may be summed on the way, but
# only after it left the rank): the same out of R. Sets tried: every rank (one per orbit of
# the symmetries) and the ranks one switch vertex links to (a NIC's GPUs, a node's).


def routed_delivery(topology: Topology, reverse: bool) -> tuple[float, frozenset[int], Onsets] | None:
    """(parts per GB/s, the set R attaining it, the onset of its routes) of the routed delivery
    bound (see above), or None without switches (every route is then its own link, which the
    cut bound already counts)."""
    if not topology.switches or topology.n_ranks < 2:
        return None
    from .builders.symmetry import rank_orbits

    n = topology.n_ranks
    candidates: list[frozenset[int]] = [frozenset([orbit[0]]) for orbit in rank_orbits(topology)]
    first_node = topology.node_of[0] if topology.node_of else None
    for k, sw in enumerate(topology.switches):
        if first_node is not None and sw.node not in (None, first_node):
            continue  # identical nodes: the first node's switches stand for every node's
        w = n + k
        links = topology.in_links[w] if reverse else topology.out_links[w]
        ranks = frozenset((link.src if reverse else link.dst) for link in links) & frozenset(range(n))
        if len(ranks) >= 2 and ranks not in candidates:
            candidates.append(ranks)
    best: tuple[float, frozenset[int], Onsets] | None = None
    for R in candidates:
        pairs = [(u, v) for v in sorted(R) for u in range(n) if u != v] if not reverse else \
            [(u, v) for u in sorted(R) for v in range(n) if u != v]
        found = routed_capacity(topology, pairs)
        if found is None:
            continue
        capacity, onset = found
        ratio = len(R) * (n - 1) / capacity if capacity > 0 else math.inf
        if best is None or ratio > best[0]:
            best = (ratio, R, ((onset, 1.0),))
    return best


def routed_capacity(topology: Topology, pairs: list[tuple[int, int]]) -> tuple[float, float] | None:
    """The most GB/s the fixed routes of ``pairs`` of ranks can carry together under every
    physical link's capacity (an LP), and the least latency of those routes; None when the LP
    fails or no pair has a route."""
    from scipy.optimize import linprog

    hops: dict[tuple[int, int], int] = {}
    rows: list[int] = []
    cols: list[int] = []
    onset = math.inf
    paths = [p for p in (topology.routes_from(u).get(v) for u, v in pairs) if p is not None]  # others relay
    for j, path in enumerate(paths):
        latency = 0.0
        for hop in zip(path, path[1:]):
            rows.append(hops.setdefault(hop, len(hops)))
            cols.append(j)
            latency += topology.link(*hop).latency  # type: ignore[union-attr]
        onset = min(onset, latency)
    if not hops:
        return None
    from scipy.sparse import csr_matrix

    caps = np.array([topology.link(*hop).capacity for hop in hops], dtype=float)  # type: ignore[union-attr]
    A = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(hops), len(paths)))
    result = linprog(-np.ones(len(paths)), A_ub=A, b_ub=caps, bounds=(0, None), method="highs")
    if result.status != 0:
        return None
    return -float(result.fun) * (1 + 1e-9), onset  # a hair more capacity: the LP's tolerance stays sound


# ---------------------------------------------------------------------- latency onsets
# A message's bytes move only once its route's latency has passed (the lane is held meanwhile;
# with overlapping latencies they land that long after they moved): a byte crossing link e
# lands at least alpha(e) after the start, alpha(e) being the least latency of a rank-to-rank
# route through e (at least: the least latency from a rank to e's tail, plus e's, plus from
# e's head to a rank). So a cut whose links (capacity c_e) must carry V bytes by time T needs
# sum_e c_e (T - alpha(e))+ >= V: with one latency alpha on every link of the cut,
# T >= alpha + V / C, the cut bound shifted by alpha. ``Onsets``: (alpha, share of the cut's
# capacity), by alpha.
Onsets = tuple[tuple[float, float], ...]


def _latency_floor(topology: Topology, forward: bool, ends: tuple[int, ...] | None = None) -> list[float]:
    """The least latency from any of ``ends`` (default: every rank) to each vertex over the
    topology's links (``forward``), or from each vertex to any of them; cached per topology."""
    import heapq

    cache = _FLOORS.setdefault(topology, {})
    key = (forward, ends)
    if key in cache:
        return cache[key]
    starts = range(topology.n_ranks) if ends is None else ends
    dist = [math.inf] * topology.n_vertices
    for r in starts:
        dist[r] = 0.0
    heap = [(0.0, r) for r in starts]
    while heap:
        d, x = heapq.heappop(heap)
        if d > dist[x]:
            continue
        for link in (topology.out_links[x] if forward else topology.in_links[x]):
            y = link.dst if forward else link.src
            if d + link.latency < dist[y]:
                dist[y] = d + link.latency
                heapq.heappush(heap, (dist[y], y))
    cache[key] = dist
    return dist


_FLOORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def link_onsets(topology: Topology, links, origin: int | None = None, sink: int | None = None) -> Onsets:
    """The onsets of a set of links: (alpha(e), share of their capacity) summed by alpha. With
    an ``origin`` (broadcast, scatter: every byte starts at the root) a route's latency is
    counted from it; with a ``sink`` (reduce, gather) up to it."""
    to_v = _latency_floor(topology, True, None if origin is None else (origin,))
    from_v = _latency_floor(topology, False, None if sink is None else (sink,))
    share: dict[float, float] = {}
    total = 0.0
    for link in links:
        alpha = to_v[link.src] + link.latency + from_v[link.dst]
        total += link.capacity
        if math.isfinite(alpha):  # a link no route reaches carries nothing
            share[alpha] = share.get(alpha, 0.0) + link.capacity
    if total <= 0:
        return ()
    return tuple((alpha, c / total) for alpha, c in sorted(share.items()))


def cut_onsets(topology: Topology, witness: frozenset[int], reverse: bool, origin: int | None = None,
               sink: int | None = None) -> Onsets:
    """Onsets of the links leaving ``witness`` (entering it when ``reverse``: the cut of the
    reversed graph); ``origin`` and ``sink`` as for ``link_onsets``."""
    if reverse:
        links = [link for link in topology.links if link.dst in witness and link.src not in witness]
    else:
        links = [link for link in topology.links if link.src in witness and link.dst not in witness]
    return link_onsets(topology, links, origin, sink)


# A cut whose far side holds k > 1 ranks carries each byte once only if that byte then reaches
# (allgather, broadcast) or sums (reducescatter, reduce) all k of them there. Moving data between
# two ranks takes at least tau, the least latency of a rank-to-rank route (``rank_separation``).
# So a byte that lands across the cut after T - tau serves only the rank it lands at (a rank it
# is forwarded to gets it too late), and a byte that leaves the contributing side before tau
# carries one rank's contribution (nothing from another rank has arrived yet). Credit a byte
# with the share of the k ranks it serves (or whose contributions it sums): the k ranks need
# the cut's volume V in credit. By the onset argument shifted by tau, link e carries at most
# c_e (T - alpha_e - tau)+ bytes that land by T - tau (leave after tau), all at credit 1, and
# c_e (T - alpha_e)+ in all, the rest at credit 1/k:
#     sum_e c_e [(T - alpha_e)+ / k + (1 - 1/k) (T - alpha_e - tau)+] >= V,
# an onset list with each link's share split between alpha_e and alpha_e + tau
# (``_far_side``). On dgx-h100:16 (k = 8 ranks behind a node's NICs, tau = 0.7 us over the
# NVSwitch) an allgather's or reducescatter's NIC cut ends 7/8 x 0.7 us later.


def rank_separation(topology: Topology) -> float:
    """The least latency of a route from one rank to another (the routes the flattened view
    fixes, which every message takes; inf with fewer than two ranks). One rank per orbit of
    the topology's rank symmetries is enough."""
    if topology in _SEPARATION:
        return _SEPARATION[topology]
    from .builders.symmetry import rank_orbits

    best = math.inf
    for orbit in rank_orbits(topology):
        s = orbit[0]
        for t in topology.routes_from(s):
            best = min(best, topology.flat_link(s, t).latency)  # type: ignore[union-attr]
    _SEPARATION[topology] = best
    return best


_SEPARATION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _far_side(topology: Topology, onsets: Onsets, witness: frozenset[int]) -> Onsets:
    """``onsets`` of a cut whose far side (the ranks outside ``witness``) holds k ranks, each
    link's share split: 1/k from its onset, the rest tau later (see above)."""
    n = topology.n_ranks
    k = n - sum(1 for v in witness if v < n)
    tau = rank_separation(topology)
    if k <= 1 or not onsets or not (0 < tau < math.inf):
        return onsets
    share: dict[float, float] = {}
    for alpha, f in onsets:
        share[alpha] = share.get(alpha, 0.0) + f / k
        share[alpha + tau] = share.get(alpha + tau, 0.0) + f * (k - 1) / k
    return tuple(sorted(share.items()))


def _first_onset(topology: Topology) -> Onsets:
    """No byte moves anywhere before the least latency of any link's routes."""
    onsets = link_onsets(topology, topology.links)
    return ((onsets[0][0], 1.0),) if onsets else ()


def onset_time(t0: float, onsets: Onsets) -> float:
    """The least T with sum_k share_k (T - alpha_k)+ >= t0: the time a cut needs to carry what
    takes ``t0`` at its full capacity, its links starting at their onsets (``t0`` itself when
    there are none)."""
    if not onsets or not math.isfinite(t0) or t0 <= 0:
        return t0
    F = A = 0.0
    for k, (alpha, f) in enumerate(onsets):
        F += f
        A += f * alpha
        T = (t0 + A) / F
        if k + 1 == len(onsets) or T <= onsets[k + 1][0]:
            return T
    return t0  # pragma: no cover - the loop returns at its last onset


# ---------------------------------------------------------------------- the bound of a run
# Everything below answers: how fast could *any* schedule of this collective run at this size
# on this topology, in the simulator's physics (see backends.sim): a transfer between ranks
# costs at least its link's latency, every link carries at most lanes x bandwidth, and
# switch vertices forward without combining or replicating data. All bounds are linear in
# the size, so the size-independent coefficients are computed once per (topology, collective)
# and cached.

@dataclass(frozen=True)
class Bounds:
    """Lower bounds on the time of one collective call of ``size`` bytes (nccl-tests
    convention, see ``ccl.core.report``), in microseconds.

    ``latency_us``: the alpha-weighted shortest path between the farthest pair of ranks that
    must exchange data (``latency_pair``); ``steps``: the hop bound. ``bandwidth_us``: the
    largest of the bandwidth bounds in ``parts`` (name -> us), computed by ``method``;
    ``exact`` says whether it is the exact fluid optimum (unlimited chunking, no latency).
    ``witness``: the vertex set of the binding cut, when one binds."""

    collective: str
    n_ranks: int
    size: float
    latency_us: float
    bandwidth_us: float
    steps: int
    method: str
    exact: bool
    witness: tuple[int, ...] = ()
    latency_pair: tuple[int, int] | None = None
    parts: tuple[tuple[str, float], ...] = ()

    @property
    def bound_us(self) -> float:
        return max(self.latency_us, self.bandwidth_us)

    @property
    def binding(self) -> str:
        """Which bound binds: "bandwidth" or "latency"."""
        return "bandwidth" if self.bandwidth_us >= self.latency_us and self.bandwidth_us > 0 else "latency"

    def to_json(self) -> dict:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "collective": self.collective,
            "n_ranks": self.n_ranks,
            "size": self.size,
            "latency_us": num(self.latency_us),
            "bandwidth_us": num(self.bandwidth_us),
            "bound_us": num(self.bound_us),
            "binding": self.binding,
            "steps": self.steps,
            "method": self.method,
            "exact": self.exact,
            "witness": list(self.witness),
            "latency_pair": None if self.latency_pair is None else list(self.latency_pair),
            "parts": {name: num(us) for name, us in self.parts},
        }


@dataclass(frozen=True)
class _Model:
    """Size-independent part of a bound: bandwidth parts in us per byte of ``size``."""

    latency_us: float
    latency_pair: tuple[int, int] | None
    steps: int
    per_byte: tuple[tuple[str, float, Onsets], ...]  # (name, us per byte, when the capacity starts)
    method: str
    exact: bool
    witness: tuple[int, ...]
    lanes: RootLanes | None = None  # broadcast and reduce: for ``lane_bound``


_MODELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def lower_bound(topology: Topology, collective: Collective, size: float, *, lane_latency: bool = True) -> Bounds:
    """``max(latency, bandwidth)`` lower bounds for one call of ``size`` bytes (see ``Bounds``).
    ``lane_latency``: a message holds its lane for its latency (the simulator's default; False
    for ``overlap_latency``, where the lane bound does not hold). Raises CollectiveError when
    the topology cannot deliver the collective at all."""
    if collective.n_ranks != topology.n_ranks:
        raise CollectiveError(
            f"collective {collective.name!r} has {collective.n_ranks} ranks but topology "
            f"{topology.name!r} has {topology.n_ranks}"
        )
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
        raise CollectiveError(f"size must be a positive number of bytes, got {size!r}")
    key = (collective.kind, collective.root) if collective.kind != "custom" else collective
    models = _MODELS.setdefault(topology, {})
    model = models.get(key)
    if model is None:
        model = models[key] = _model(topology, collective)
    parts = tuple((name, onset_time(coef * size, onsets)) for name, coef, onsets in model.per_byte)
    bandwidth = max((us for _, us in parts), default=0.0)
    method, exact = model.method, model.exact
    if model.lanes is not None and lane_latency:
        lanes = lane_bound(model.lanes, size, max(bandwidth, model.latency_us))
        if lanes > max(bandwidth, model.latency_us):
            parts += (("lanes", lanes),)
            bandwidth = lanes
            method, exact = method + "; raised by the root's lanes (a latency per message, docs/bounds.md)", False
    return Bounds(
        collective=collective.kind,
        n_ranks=collective.n_ranks,
        size=size,
        latency_us=model.latency_us,
        bandwidth_us=bandwidth,
        steps=model.steps,
        method=method,
        exact=exact,
        witness=model.witness,
        latency_pair=model.latency_pair,
        parts=parts,
    )


def _model(topology: Topology, collective: Collective) -> _Model:
    n = topology.n_ranks
    latency, pair, steps = latency_bound(topology, collective)
    if n < 2 or not needed_pairs_exist(collective):
        return _Model(latency, pair, steps, (), "none: nothing moves", True, ())
    kind = collective.kind
    root = collective.root
    per_byte: list[tuple[str, float, Onsets]] = []
    method, exact, witness = "", False, frozenset()
    lanes: RootLanes | None = None
    # 1 GB/s moves 1e3 bytes per us: x bytes over c GB/s take x / (1e3 c) us. Each part's
    # capacity starts carrying bytes only as the latency of a route over it has passed
    # (``onsets``): the first byte across a NIC lands a NIC's latency after the start.
    if kind in ("allgather", "reducescatter"):
        reverse = kind == "reducescatter"
        cut = cut_ratio(topology, "bandwidth", reverse=reverse)
        per_byte.append(("cut", _per_byte(cut.ratio) / n / 1e3,
                         _far_side(topology, cut_onsets(topology, cut.witness, reverse), cut.witness)))
        method, exact, witness = "exact cut bound (max-flow); tight in the fluid limit (ForestColl)", True, cut.witness
        routed = routed_delivery(topology, reverse)
        if routed is not None and routed[0] > _per_byte(cut.ratio) * (1 + 1e-9):
            # the routes the flattened topology fixes carry less than the switches could
            per_byte.append(("routed", routed[0] / n / 1e3, routed[2]))
            method = ("routed delivery bound (an LP over the flattened routes; the cut bound assumes any "
                      "route through the switches)")
            exact, witness = False, routed[1]
    elif kind in ("gather", "scatter"):
        reverse = kind == "scatter"
        cut = cut_ratio(topology, "bandwidth", reverse=reverse, sinks=[root or 0])
        ends = {"origin": root or 0} if reverse else {"sink": root or 0}  # scatter starts at the root
        per_byte.append(("cut", _per_byte(cut.ratio) / n / 1e3, cut_onsets(topology, cut.witness, reverse, **ends)))
        method, exact, witness = "exact cut bound (max-flow to/from the root)", True, cut.witness
    elif kind in ("broadcast", "reduce"):
        reverse = kind == "reduce"
        mincut, witness = _root_min_cut(topology, root or 0, reverse=reverse)
        ends = {"sink": root or 0} if reverse else {"origin": root or 0}  # reduce ends at the root
        per_byte.append(("cut", 1.0 / mincut / 1e3 if mincut > 0 else math.inf,
                         _far_side(topology, cut_onsets(topology, witness, reverse, **ends), witness)))
        method, exact = "exact cut bound (min over ranks of the root's max-flow; Edmonds)", True
        lanes = root_lanes(topology, root or 0, reverse)
    elif kind == "allreduce":
        per_byte.extend(_allreduce_parts(topology))
        mincut, witness = _global_min_cut(topology)
        per_byte.append(("cut", 1.0 / mincut / 1e3 if mincut > 0 else math.inf, cut_onsets(topology, witness, False)))
        method = "max(one-way gossip volume over ranks and nodes, minimum cut); not exact in general"
    elif kind == "alltoall":
        from .flows import alltoall_cut, concurrent_flow_time

        ratio, witness, enumerated = alltoall_cut(topology)
        # m = size / n bytes per ordered pair
        per_byte.append(("cut", ratio / n / 1e3, cut_onsets(topology, witness, False)))
        method = "product-demand cut bound, " + ("every cut enumerated" if enumerated else "candidate cuts")
        lp = concurrent_flow_time(topology)
        if lp is not None:
            per_byte.append(("lp", lp / n / 1e3, _first_onset(topology)))
            method, exact = "concurrent-flow LP (HiGHS), exact fluid optimum", True
    if kind == "custom":
        # the built-in kinds' cut bounds above already cover every single rank's volume
        per_byte.extend(_singleton_parts(topology, collective))
    if not method:
        method = "per-rank volume (data a rank must send or receive)"
    if any(onsets and onsets[0][0] > 0 for _, _, onsets in per_byte):
        method += "; each cut's links counted from their routes' latency"
    binding = max(per_byte, key=lambda x: x[1])[0] if per_byte else ""
    if binding == "volume":
        exact = False
        witness = frozenset()
    return _Model(latency, pair, steps, tuple(per_byte), method, exact, tuple(sorted(witness)), lanes)


# ---------------------------------------------------------------------- the lane bound
# Broadcast from root r of S bytes to n - 1 other ranks, in the simulator's default physics: a
# message of s bytes holds one lane of its link (bandwidth beta per lane, latency alpha) for
# alpha + s / beta, and a rank forwards only bytes that have landed. Let C be the capacity into
# the other ranks together and C_r the root's. For any c <= T (the call's end), with g_l(c)
# the time since lane l of the root last delivered a message and k_l(c) how many it has
# delivered (docs/bounds.md proves it, through the bytes landed at some other rank by c):
#     C T >= (n-1) S + (C - (n-1) C_r) c + sum_l beta_l ((n-2) g_l(c) + (n-1) alpha_l k_l(c)).
# Averaged over c in [0, tau] for any tau <= T, lane l's share is least (over how many messages
# it delivers before tau, and when) in closed form (``_lane_cost``); the bound holds for every
# schedule, so tau = a lower bound of T, raised again with the result until it stops growing.
# Reduce is the same on the reversed links (its time reversal).

@dataclass(frozen=True)
class RootLanes:
    """What ``lane_bound`` needs of a broadcast's or reduce's topology, in bytes per us."""

    ranks: int
    others: float  # capacity into the other ranks together (reduce: out of them)
    lanes: tuple[tuple[float, float, int], ...]  # the root's links: (bytes/us of a lane, latency, lanes)

    @property
    def root(self) -> float:
        """The root's capacity out (reduce: in)."""
        return sum(beta * k for beta, _, k in self.lanes)


def root_lanes(topology: Topology, root: int, reverse: bool) -> RootLanes | None:
    """The root's lanes and the other ranks' capacity (reduce: ``reverse``); None with switches
    (the flattened links into a rank overstate what it can receive) or fewer than 3 ranks."""
    n = topology.n_ranks
    if topology.switches or n < 3:
        return None
    others = 0.0
    lanes: dict[tuple[float, float], int] = {}
    for link in topology.links:
        near, far = (link.dst, link.src) if reverse else (link.src, link.dst)
        if far != root:
            others += link.capacity * 1e3
        if near == root and far != root:
            key = (link.bandwidth * 1e3, link.latency)
            lanes[key] = lanes.get(key, 0) + link.lanes
    if not lanes:
        return None
    return RootLanes(n, others, tuple((beta, alpha, k) for (beta, alpha), k in sorted(lanes.items())))


def _lane_cost(a: float, b: float, tau: float) -> float:
    """min over m >= 0 and gaps d_0..d_m >= 0 summing to tau of sum_j (a d_j^2 + b j d_j): a
    lane's averaged share, where d_j is the time between its j-th and (j+1)-th delivery (d_0
    from the start, d_m up to tau). Stationarity gives d_j = (lam - b j) / (2a); more deliveries
    never cost more while every gap stays positive, so m is the largest with m (m+1) <= 4 a tau / b,
    and the sum is ((m+1) lam^2 - b^2 m (m+1) (2m+1) / 6) / (4a)."""
    if a <= 0 or b <= 0 or tau <= 0:
        return 0.0  # no gap cost (two ranks), or free messages: as many as you like
    m = int((math.sqrt(1 + 16 * a * tau / b) - 1) / 2)
    while m > 0 and m * (m + 1) > 4 * a * tau / b:
        m -= 1
    while (m + 1) * (m + 2) <= 4 * a * tau / b:
        m += 1
    lam = 2 * a * tau / (m + 1) + b * m / 2
    return ((m + 1) * lam * lam - b * b * m * (m + 1) * (2 * m + 1) / 6) / (4 * a)


def lane_bound(lanes: RootLanes, size: float, at_least: float) -> float:
    """The lane bound (see above) of one call of ``size`` bytes, given a lower bound
    ``at_least`` of its time (us); ``at_least`` when it is not higher."""
    n, others, root = lanes.ranks, lanes.others, lanes.root
    if others <= 0 or not at_least > 0 or not math.isfinite(at_least):
        return at_least

    def averaged(tau: float) -> float:
        total = (n - 1) * size + (others - (n - 1) * root) * tau / 2
        for beta, alpha, k in lanes.lanes:
            total += k * _lane_cost((n - 2) * beta / 2, (n - 1) * beta * alpha, tau) / tau
        return total / others

    tau = at_least
    for _ in range(100):
        t = averaged(tau)
        if t <= tau * (1 + 1e-12):
            break
        tau = t
    return tau


def needed_pairs_exist(collective: Collective) -> bool:
    """Whether any data must move between ranks (always, for a built-in on two ranks or more)."""
    if collective.kind != "custom":
        return collective.n_ranks > 1
    return bool(needed_pairs(collective))


def _per_byte(ratio: Fraction | float) -> float:
    return float(ratio)


# ---------------------------------------------------------------------- cuts by max-flow
def _flow_graph(topology: Topology, reverse: bool = False) -> tuple[csr_matrix, float]:
    caps, size = _capacities(topology, "bandwidth", reverse)
    u, v, c = _edge_arrays(caps)
    V = topology.n_vertices
    return csr_matrix((c, (u, v)), shape=(V, V)), size


def _root_min_cut(topology: Topology, root: int, reverse: bool) -> tuple[float, frozenset[int]]:
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


def _global_min_cut(topology: Topology) -> tuple[float, frozenset[int]]:
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


def _vertex_sets_capacity(topology: Topology, groups: list[set[int]]) -> tuple[float, Onsets]:
    """The least of the summed capacities leaving and entering the groups (each group's own),
    and the onsets of the links that carry it."""
    member = {}
    for g, vs in enumerate(groups):
        for x in vs:
            member[x] = g
    leaving = [link for link in topology.links if member.get(link.src) is not None
               and member.get(link.src) != member.get(link.dst)]
    entering = [link for link in topology.links if member.get(link.dst) is not None
                and member.get(link.src) != member.get(link.dst)]
    out = sum(link.capacity for link in leaving)
    inc = sum(link.capacity for link in entering)
    return (out, link_onsets(topology, leaving)) if out <= inc else (inc, link_onsets(topology, entering))


def _allreduce_parts(topology: Topology) -> list[tuple[str, float, Onsets]]:
    """One-way gossip volume: every element must be sent at least 2(k-1) times between k parts
    (the minimum number of one-way calls for everyone to learn everything), and a part can send
    only through the capacity leaving it (and receive through the capacity entering it).
    Parts: every rank alone; and every node (with its switches and NICs) when there are several."""
    n = topology.n_ranks
    out: list[tuple[str, float, Onsets]] = []
    worst, onsets = _vertex_sets_capacity(topology, [{r} for r in range(n)])
    out.append(("gossip", 2 * (n - 1) / worst / 1e3 if worst > 0 else math.inf, onsets))
    if topology.n_nodes > 1:
        groups = [set(rs) for rs in topology.node_ranks]
        for w, sw in enumerate(topology.switches):
            if sw.node is not None:
                groups[sw.node].add(n + w)
        worst, onsets = _vertex_sets_capacity(topology, groups)
        k = topology.n_nodes
        out.append(("gossip-nodes", 2 * (k - 1) / worst / 1e3 if worst > 0 else math.inf, onsets))
    if topology.switches and n <= ROUTED_GOSSIP_RANKS:
        # the sends travel the routes the flattened topology fixes: all of them together carry
        # no more than the LP over those routes allows (on dgx2:2 a GPU's PCIe path to its NIC
        # partner is in the links leaving it but in no route)
        node = topology.node_of
        for name, k, between in (("gossip-routed", n, lambda u, v: True),
                                 ("gossip-nodes-routed", topology.n_nodes, lambda u, v: node[u] != node[v])):
            if k < 2:
                continue
            found = routed_capacity(topology, [(u, v) for u in range(n) for v in range(n) if u != v and between(u, v)])
            if found is not None and found[0] > 0:
                out.append((name, 2 * (k - 1) / found[0] / 1e3, ((found[1], 1.0),)))
    return out


ROUTED_GOSSIP_RANKS = 128  # ranks up to which the gossip's routed capacity is an LP (n^2 pairs)


def _singleton_parts(topology: Topology, collective: Collective) -> list[tuple[str, float, Onsets]]:
    """What every rank must send (its chunks that only it holds and others need) and receive
    (one slot for every output slot it cannot fill locally), over its own links."""
    n = topology.n_ranks
    slots = max(collective.max_input_slots, collective.max_output_slots, 1)
    origins = collective.origins()
    held = [set(x) for x in collective.inputs]
    send = [0] * n
    recv = [0] * n
    shipped: set[int] = set()
    for r, outs in enumerate(collective.outputs):
        for need in outs:
            if not need <= held[r]:
                recv[r] += 1
            for c in need:
                ranks = {q for q, _ in origins[c]}
                if r not in ranks and len(ranks) == 1 and c not in shipped:
                    shipped.add(c)
                    send[next(iter(ranks))] += 1
    worst = 0.0
    for r in range(n):
        cap_out = topology.total_out_bandwidth(r)
        cap_in = sum(link.capacity for link in topology.in_links[r])
        for count, cap in ((send[r], cap_out), (recv[r], cap_in)):
            if count:
                worst = max(worst, count / slots / cap / 1e3 if cap > 0 else math.inf)
    return [("volume", worst, _first_onset(topology))]
