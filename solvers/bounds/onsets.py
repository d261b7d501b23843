"""Latency onsets: no byte crosses a link before the latency of the route carrying it has passed.

The simulator's physics: a message pays its route's latency, then moves its bytes; with
overlapping latencies it lands that long after moving them. So each bandwidth bound counts
its cut's capacity only from each link's onset, the least latency of a rank-to-rank route
through it (``link_onsets``): a cut whose links all start at alpha gives alpha + V / C, and a
cut with links of several latencies needs the least T with sum_e c_e (T - alpha_e)+ >= V
(``onset_time``): a cut through NICs starts a NIC route's latency late. The LP and the per-rank
volume start at the least latency of any link (``first_onset``).

The cut bounds of allgather, reducescatter, broadcast and reduce also count the far side's
last (first) hop: with k ranks beyond the cut, a byte landing there less than tau (the least
rank-to-rank latency) before the end serves only its own rank, and one leaving the
contributing side before tau sums only its sender's contribution, so each link's capacity
counts 1/k from its onset and the rest from tau later (``far_side``): (k - 1)/k x tau more for
a node's NIC cut with k ranks behind it.
"""

from __future__ import annotations

import heapq
import math
import weakref

from ccl.core.topology import Topology

from ..builders import symmetry

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
# (``far_side``). A node's NIC cut with k ranks behind it (tau: a route inside the node) ends
# (k - 1)/k x tau later than the cut alone would.


def rank_separation(topology: Topology) -> float:
    """The least latency of a route from one rank to another (the routes the flattened view
    fixes, which every message takes; inf with fewer than two ranks). One rank per orbit of
    the topology's rank symmetries is enough."""
    if topology in _SEPARATION:
        return _SEPARATION[topology]
    best = math.inf
    for orbit in symmetry.rank_orbits(topology):
        s = orbit[0]
        for t in topology.routes_from(s):
            best = min(best, topology.flat_link(s, t).latency)  # type: ignore[union-attr]
    _SEPARATION[topology] = best
    return best


_SEPARATION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def far_side(topology: Topology, onsets: Onsets, witness: frozenset[int]) -> Onsets:
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


def first_onset(topology: Topology) -> Onsets:
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
