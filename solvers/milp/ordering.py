"""Stage 2: the ordering heuristic. In which order each link sends what it carries.

Given the routes, a list scheduler plays the schedule out in the alpha-beta model: a hop
becomes ready when its commodity has landed at the hop's source; a link's lanes take ready hops
first come first served and, among hops ready at the same moment, the one with the longest
remaining route below it first (the critical path), then the lowest commodity; a hop also waits
for every shared limit it crosses, each limit serving one slot at a time at its bandwidth. The
result is every hop's lane, start and landing time, which fixes each lane's order for stage 3.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .commodities import Routes


@dataclass
class Hop:
    """One commodity crossing one logical link."""

    id: int
    commodity: int
    link: int
    pred: int  # hop that brought the commodity to the link's source, -1 at the source
    height: int  # hops below this one on the longest branch of the commodity's tree
    lane: int = -1
    start: float = 0.0
    land: float = 0.0


@dataclass
class Plan:
    hops: list[Hop]
    lanes: dict[tuple[int, int], list[int]]  # (link, lane) -> hop ids in sending order
    makespan: float


def build_hops(routes: Routes) -> list[Hop]:
    logical = routes.logical
    hops: list[Hop] = []
    for c in routes.commodities:
        links = routes.links[c.id]
        into = {logical.links[e].dst: e for e in links}
        height = _heights(logical, links)
        ids: dict[int, int] = {}
        order = sorted(links, key=lambda e: _depth(logical, into, c.source, logical.links[e].src))
        for e in order:
            src = logical.links[e].src
            pred = -1 if src == c.source else ids[into[src]]
            hop = Hop(len(hops), c.id, e, pred, height.get(logical.links[e].dst, 0))
            ids[e] = hop.id
            hops.append(hop)
    return hops


def _heights(logical, links: list[int]) -> dict[int, int]:
    """Hops below each rank of a tree (leaves 0), deepest ranks first."""
    children: dict[int, list[int]] = {}
    for e in links:
        children.setdefault(logical.links[e].src, []).append(logical.links[e].dst)
    height: dict[int, int] = {}
    order: list[int] = []
    stack = [v for v in children if all(v != logical.links[e].dst for e in links)]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(children.get(v, ()))
    for v in reversed(order):
        height[v] = max((1 + height[w] for w in children.get(v, ())), default=0)
    return height


def _depth(logical, into: dict[int, int], source: int, v: int) -> int:
    d = 0
    while v != source:
        v = logical.links[into[v]].src
        d += 1
    return d


def list_schedule(routes: Routes, hops: list[Hop] | None = None,
                  batches: list[tuple[int, ...]] | None = None) -> Plan:
    """Play the routes out (see module docstring). ``batches`` groups hops of one link that travel
    as one transfer (alpha once, then beta per slot; it starts when all its hops' data is
    present); by default every hop travels alone."""
    logical = routes.logical
    hops = build_hops(routes) if hops is None else hops
    jobs = [tuple(b) for b in batches] if batches is not None else [(h.id,) for h in hops]
    job_of = {h: j for j, job in enumerate(jobs) for h in job}
    waiting = [sum(1 for h in job if hops[h].pred >= 0) for job in jobs]
    height = [max(hops[h].height for h in job) for job in jobs]
    succ: dict[int, list[int]] = {}
    for hop in hops:
        if hop.pred >= 0:
            succ.setdefault(hop.pred, []).append(job_of[hop.id])
    limits_of: dict[int, list[int]] = {}
    for i, limit in enumerate(logical.limits):
        for e in limit.links:
            limits_of.setdefault(e, []).append(i)
    lane_free = {x.index: [0.0] * x.lanes for x in logical.links}
    limit_free = [0.0] * len(logical.limits)
    queues: dict[int, list[tuple[float, int, int, int]]] = {}
    events: list[tuple[float, int, int, int]] = []  # (time, kind 0=ready 1=lane free, job or link, seq)
    seq = 0
    for j, left in enumerate(waiting):
        if left == 0:
            heapq.heappush(events, (0.0, 0, j, seq))
            seq += 1
    lanes: dict[tuple[int, int], list[int]] = {}
    makespan = 0.0
    while events:
        now, kind, what, _ = heapq.heappop(events)
        if kind == 0:
            link_id = hops[jobs[what][0]].link
            first = min(hops[h].commodity for h in jobs[what])
            heapq.heappush(queues.setdefault(link_id, []), (now, -height[what], first, what))
        else:
            link_id = what
        queue = queues.get(link_id)
        free = lane_free[link_id]
        while queue:
            lane = min(range(len(free)), key=lambda i: (free[i], i))
            if free[lane] > now + 1e-12:
                break
            _, _, _, j = heapq.heappop(queue)
            job = jobs[j]
            link = logical.links[link_id]
            start = now
            for i in limits_of.get(link_id, ()):
                start = max(start, limit_free[i])
            per_slot = link.beta
            for i in limits_of.get(link_id, ()):
                per_slot = max(per_slot, logical.limits[i].beta)
                limit_free[i] = start + logical.limits[i].beta * len(job)
            land = start + link.alpha + per_slot * len(job)
            free[lane] = land
            for h in job:
                hops[h].lane, hops[h].start, hops[h].land = lane, start, land
            lanes.setdefault((link_id, lane), []).extend(job)
            makespan = max(makespan, land)
            heapq.heappush(events, (land, 1, link_id, seq))
            seq += 1
            for h in job:
                for nxt in succ.get(h, ()):
                    waiting[nxt] -= 1
                    if waiting[nxt] == 0:
                        heapq.heappush(events, (land, 0, nxt, seq))
                        seq += 1
    return Plan(hops, lanes, makespan)
