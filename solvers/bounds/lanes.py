"""The lane bound of broadcast and reduce (``lane_bound``; proof in docs/bounds.md).

A message holds one lane of its link for its latency plus its bytes' time (the simulator's
default physics, not ``overlap_latency``), and a rank forwards only bytes that have landed.
When the root's lanes are the cut, they must keep delivering until the end, yet every byte
they deliver late still has to reach (or, for reduce, come from) every other rank. Averaged
over the first tau microseconds of the call, a lane that delivers in few large messages leaves
long stretches with nothing new landed, and one that delivers in many pays a latency per
message; the least of the two costs over every lane, in closed form, raises the bound where the
root's few lanes are the cut (amd8's broadcast and reduce). Topologies without switches only (with
them the flattened links into the ranks overstate what they can receive, and the term gives
nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccl.core.topology import Topology

# Broadcast from root r of S bytes to n - 1 other ranks, in the simulator's default physics: a
# message of s bytes holds one lane of its link (bandwidth beta per lane, latency alpha) for
# alpha + s / beta, and a rank forwards only bytes that have landed. Let C be the capacity into
# the other ranks together and C_r the root's. For any c <= T (the call's end), with g_l(c)
# the time since lane l of the root last delivered a message and k_l(c) how many it has
# delivered (docs/bounds.md proves it, through the bytes landed at some other rank by c):
#     C T >= (n-1) S + (C - (n-1) C_r) c + sum_l beta_l ((n-2) g_l(c) + (n-1) alpha_l k_l(c)).
# Averaged over c in [0, tau] for any tau <= T, lane l's share is least (over how many messages
# it delivers before tau, and when) in closed form (``lane_cost``); the bound holds for every
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


def lane_cost(a: float, b: float, tau: float) -> float:
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
            total += k * lane_cost((n - 2) * beta / 2, (n - 1) * beta * alpha, tau) / tau
        return total / others

    tau = at_least
    for _ in range(100):
        t = averaged(tau)
        if t <= tau * (1 + 1e-12):
            break
        tau = t
    return tau
