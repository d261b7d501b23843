"""The event loop: lanes served first come first served, shared limits shared max-min fairly.

Resources are the flattened topology's links (one per rank pair that talks) and, when local
copies have a bandwidth, one copy engine per rank. A resource has ``lanes`` lanes; each lane
carries one transfer at a time at the lane's rate. A transfer that becomes ready (its start
dependencies landed) takes the lane that frees first; ready transfers queue in the order they
became ready (ties: execution order), so a link is never idle while a ready transfer waits for
it.

Cost of a transfer of b bytes over a lane of bandwidth B (bytes/us) and latency a (us):

* ``overlap_latency=False`` (default, the alpha-beta model): the lane is busy for a + b/B and
  the data lands at the end of that time;
* ``overlap_latency=True`` (cut-through, LogP's L): the lane is busy for b/B only and the data
  lands a later, so back-to-back transfers on a lane overlap their latencies.

Links under a shared limit are *fluid*: while several of their transfers are active, rates are
max-min fair subject to every lane's rate and every limit's bandwidth (progressive filling),
recomputed whenever a limited transfer starts or finishes. Links under no limit never need
rates, so their transfers are timed when they start, which keeps the common case fast.

``sent`` is when the lane is released (the source has been read); ``done`` is when the data
has landed and every landing condition (see ``graph``) holds.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ccl.errors import BackendError

from .graph import CompiledGraph

INF = math.inf
_EPS = 1e-12


@dataclass(frozen=True)
class Resource:
    """A link (or a rank's copy engine): lanes, per-lane rate in bytes/us, latency in us, and
    the shared limits it is under (indices into the limit capacities)."""

    lanes: int
    rate: float
    latency: float
    limits: tuple[int, ...] = ()


class Engine:
    """One run over a compiled dependency graph: fills ``start``, ``sent``, ``done`` and
    ``lane`` per internal transfer id (see the module docstring for the rules)."""

    def __init__(
        self,
        graph: CompiledGraph,
        res_of: list[int],
        nbytes: list[float],
        resources: list[Resource],
        limit_caps: list[float],
        *,
        overlap_latency: bool,
    ) -> None:
        self.g = graph
        self.res_of = res_of
        self.nbytes = nbytes
        self.resources = resources
        self.limit_caps = limit_caps
        self.overlap = overlap_latency
        n = graph.n
        self.start = [INF] * n
        self.sent = [INF] * n
        self.done = [INF] * n
        self.lane = [0] * n
        self.fluid = any(r.limits for r in resources)
        # service (lane busy) time and post-send delay of unlimited transfers
        res = np.asarray(res_of, dtype=np.int64)
        rate = np.array([x.rate for x in resources] + [INF])[res]  # index -1: free local copy
        latency = np.array([x.latency for x in resources] + [0.0])[res]
        data = np.asarray(nbytes, dtype=float) / rate
        if self.overlap:
            self.svc, self.post = data.tolist(), latency.tolist()
        else:
            self.svc, self.post = (data + latency).tolist(), [0.0] * n
        self.lane_free = [[0.0] * res.lanes for res in resources]
        self.init_done: list[float] = []
        # mutable per-run state, shared by every call of the loop (step mode calls it per step)
        self.raw_count = list(graph.raw_count)
        self.land_count = list(graph.land_count)
        self.land_time = [0.0] * n
        self.arrive = [0.0] * n
        self.started = bytearray(n)

    # ------------------------------------------------------------------ entry points
    def run_dependency(self, init_done: list[float]) -> None:
        """Every transfer starts as soon as its data is there (``init_done[r]``: when rank r's
        out-of-place initial copy has finished)."""
        g = self.g
        self.init_done = list(init_done)
        ready = []
        for v in range(g.n):
            if g.raw_count[v] == 0:
                r = g.raw_init[v]
                ready.append((init_done[r] if r >= 0 else 0.0, v))
        for v in range(g.n):
            r = g.land_init[v]
            if r >= 0:
                self.land_time[v] = init_done[r]
        self._loop(ready)
        self._check_all_done(range(g.n))

    def run_steps(self, t0: float) -> list[float]:
        """Step-synchronous: step s starts when every transfer of step s-1 has landed.
        Returns the start time of every step and, last, the end time."""
        g = self.g
        times = []
        t = t0
        for s in range(len(g.step_ptr) - 1):
            lo, hi = g.step_ptr[s], g.step_ptr[s + 1]
            times.append(t)
            if lo == hi:
                continue
            for v in range(lo, hi):
                self.land_time[v] = t
            self._loop([(t, v) for v in range(lo, hi)])
            self._check_all_done(range(lo, hi))
            t = max(t, max(self.done[lo:hi]))
        times.append(t)
        return times

    def _check_all_done(self, ids: range) -> None:
        for v in ids:
            if self.done[v] == INF:
                raise BackendError(
                    f"simulation stalled: transfer {v} never ran (its dependencies never landed); "
                    "the schedule is not executable as given"
                )

    def _loop(self, ready: list[tuple[float, int]]) -> None:
        if self.fluid:
            self._loop_fluid(ready)
        else:
            self._loop_fast(ready)

    # ------------------------------------------------------------------ no shared limits
    def _loop_fast(self, ready: list[tuple[float, int]]) -> None:
        """The loop without shared limits: a transfer's times are known when it starts.

        Events are (time, code): code v < N means transfer v has landed, code N + v that it is
        ready. Every event of one instant is taken together: landings first (they make
        transfers ready), then the transfers ready at that instant start in execution order,
        each on the lane of its link that frees first. Written out inline: this loop runs
        once per transfer, millions of times."""
        g = self.g
        raw_ptr, raw_idx, raw_count = g.raw_ptr, g.raw_idx, self.raw_count
        waw_ptr, waw_idx, war_ptr, war_idx = g.waw_ptr, g.waw_idx, g.war_ptr, g.war_idx
        land_count = self.land_count
        raw_init = g.raw_init
        land_time = self.land_time
        res_of, svc, post, lane_free = self.res_of, self.svc, self.post, self.lane_free
        start, sent, done, lane = self.start, self.sent, self.done, self.lane
        single = [len(x) == 1 for x in lane_free]
        free1 = [x[0] for x in lane_free]  # the one lane of single-lane links
        arrive, started = self.arrive, self.started
        heap: list[tuple[float, int]] = []
        push, pop = heapq.heappush, heapq.heappop
        N = g.n + 1
        for t, v in ready:
            push(heap, (t, N + v))
        init_release = self._init_release()

        while heap:
            t, code = pop(heap)
            batch: list[int] = []
            while True:
                if code < N:  # code has landed: dependents whose data is complete are ready
                    done[code] = t
                    k0, k1 = raw_ptr[code], raw_ptr[code + 1]
                    while k0 < k1:
                        w = raw_idx[k0]
                        k0 += 1
                        c = raw_count[w] - 1
                        raw_count[w] = c
                        if c == 0:
                            r0 = raw_init[w]
                            if r0 >= 0 and init_release[r0] > t:
                                push(heap, (init_release[r0], N + w))
                            else:
                                batch.append(w)
                    k0, k1 = waw_ptr[code], waw_ptr[code + 1]
                    while k0 < k1:
                        x = waw_idx[k0]
                        k0 += 1
                        if land_time[x] < t:
                            land_time[x] = t
                        lc = land_count[x] - 1
                        land_count[x] = lc
                        if lc == 0 and started[x]:
                            a = arrive[x]
                            push(heap, (a if a >= land_time[x] else land_time[x], x))
                else:
                    batch.append(code - N)
                if heap and heap[0][0] == t:
                    code = pop(heap)[1]
                else:
                    break
            if len(batch) > 1:
                batch.sort()
            i = 0
            nb = len(batch)
            while i < nb:
                v = batch[i]
                i += 1
                r = res_of[v]
                if r < 0:
                    s = e = t
                elif single[r]:
                    f = free1[r]
                    s = t if t >= f else f
                    e = s + svc[v]
                    free1[r] = e
                else:
                    lanes = lane_free[r]
                    kk = min(range(len(lanes)), key=lanes.__getitem__)
                    f = lanes[kk]
                    s = t if t >= f else f
                    e = s + svc[v]
                    lanes[kk] = e
                    lane[v] = kk
                start[v] = s
                sent[v] = e
                q0, q1 = war_ptr[v], war_ptr[v + 1]
                while q0 < q1:
                    x = war_idx[q0]
                    q0 += 1
                    if land_time[x] < e:
                        land_time[x] = e
                    lc = land_count[x] - 1
                    land_count[x] = lc
                    if lc == 0 and started[x]:
                        a = arrive[x]
                        push(heap, (a if a >= land_time[x] else land_time[x], x))
                a = e + post[v]
                if land_count[v] == 0:
                    push(heap, (a if a >= land_time[v] else land_time[v], v))
                else:
                    started[v] = 1
                    arrive[v] = a
                if heap and heap[0][0] <= t and i < nb:
                    # v landed at once (a free local copy): its landing comes before the rest
                    for w in batch[i:]:
                        push(heap, (t, N + w))
                    break
        for r, one in enumerate(single):
            if one:
                lane_free[r][0] = free1[r]

    def _init_release(self) -> list[float]:
        return self.init_done

    # ------------------------------------------------------------------ with shared limits
    def _loop_fluid(self, ready: list[tuple[float, int]]) -> None:
        g = self.g
        raw_count, land_count, land_time = self.raw_count, self.land_count, self.land_time
        res_of, resources = self.res_of, self.resources
        start, sent, done, lane = self.start, self.sent, self.done, self.lane
        init_release = self._init_release()
        arrive, started = self.arrive, self.started
        heap: list[tuple[float, int, int]] = []
        push, pop = heapq.heappush, heapq.heappop
        DONE, FLUID, RELEASE, READY = 0, 1, 2, 3  # at equal times, in this order (see _loop_fast)
        for t, v in ready:
            push(heap, (t, READY, v))
        queues: dict[int, deque[int]] = {}
        # fluid state: active limited transfers -> [remaining bytes, rate]
        active: dict[int, list[float]] = {}
        clock = [0.0]
        version = [0]
        dirty = [False]

        def advance(t: float) -> None:
            dt = t - clock[0]
            if dt > 0:
                for st in active.values():
                    st[0] -= st[1] * dt
            clock[0] = t

        def land_ready(x: int, t: float) -> None:
            lc = land_count[x] - 1
            land_count[x] = lc
            if lc == 0 and started[x]:
                a = arrive[x]
                push(heap, (a if a >= land_time[x] else land_time[x], DONE, x))

        def release(v: int, t: float) -> None:
            """v's lane is free at t: its source has been read."""
            sent[v] = t
            for q in range(g.war_ptr[v], g.war_ptr[v + 1]):
                x = g.war_idx[q]
                if land_time[x] < t:
                    land_time[x] = t
                land_ready(x, t)

        def arrived(v: int, a: float) -> None:
            if land_count[v] == 0:
                push(heap, (a if a >= land_time[v] else land_time[v], DONE, v))
            else:
                started[v] = 1
                arrive[v] = a

        def begin(v: int, t: float, k: int) -> None:
            """Start v on lane k of its resource at time t."""
            start[v] = t
            lane[v] = k
            r = res_of[v]
            res = resources[r]
            if res.limits:
                advance(t)
                active[v] = [self.nbytes[v], 0.0]
                dirty[0] = True
                return
            e = t + self.svc[v]
            self.lane_free[r][k] = e
            push(heap, (e, RELEASE, v))
            sent[v] = e

        def ready_now(v: int, t: float) -> None:
            r = res_of[v]
            if r < 0:
                start[v] = t
                release(v, t)
                arrived(v, t)
                return
            res = resources[r]
            lanes = self.lane_free[r]
            if res.limits:
                # fluid lanes are marked busy with INF until they finish
                for k in range(len(lanes)):
                    if lanes[k] <= t:
                        lanes[k] = INF
                        begin(v, t, k)
                        return
                queues.setdefault(r, deque()).append(v)
                return
            k = min(range(len(lanes)), key=lanes.__getitem__) if len(lanes) > 1 else 0
            s = t if t >= lanes[k] else lanes[k]
            begin(v, s, k)

        def finish_data(v: int, t: float) -> None:
            """A limited transfer has sent its last byte at t."""
            del active[v]
            dirty[0] = True
            r = res_of[v]
            res = resources[r]
            if self.overlap:
                lane_free_at(v, r, t)
                arrived(v, t + res.latency)
            else:
                push(heap, (t + res.latency, RELEASE, v))

        def lane_free_at(v: int, r: int, t: float) -> None:
            release(v, t)
            self.lane_free[r][lane[v]] = t
            q = queues.get(r)
            if q:
                w = q.popleft()
                self.lane_free[r][lane[v]] = INF
                begin(w, t, lane[v])

        def reschedule() -> None:
            dirty[0] = False
            version[0] += 1
            if not active:
                return
            rates = _max_min_rates(active, res_of, resources, self.limit_caps)
            nxt = INF
            for v, st in active.items():
                st[1] = rates[v]
                if st[1] > 0:
                    left = st[0] / st[1]
                    if left < nxt:
                        nxt = left
            if nxt < INF:
                push(heap, (clock[0] + max(nxt, 0.0), FLUID, version[0]))

        while heap:
            t, kind, v = pop(heap)
            if kind == DONE:
                done[v] = t
                for k in range(g.raw_ptr[v], g.raw_ptr[v + 1]):
                    w = g.raw_idx[k]
                    raw_count[w] -= 1
                    if raw_count[w] == 0:
                        r0 = g.raw_init[w]
                        rel = init_release[r0] if r0 >= 0 else t
                        push(heap, (rel if rel > t else t, READY, w))
                for k in range(g.waw_ptr[v], g.waw_ptr[v + 1]):
                    x = g.waw_idx[k]
                    if land_time[x] < t:
                        land_time[x] = t
                    land_ready(x, t)
            elif kind == READY:
                ready_now(v, t)
            elif kind == RELEASE:
                r = res_of[v]
                if resources[r].limits:
                    lane_free_at(v, r, t)
                    arrived(v, t)
                else:
                    release(v, t)
                    arrived(v, t + self.post[v])
            else:  # FLUID
                if v != version[0]:
                    continue
                advance(t)
                finished = sorted(w for w, st in active.items() if st[0] <= _EPS * max(1.0, self.nbytes[w]) or
                                  (st[1] > 0 and st[0] / st[1] <= 1e-12 * max(1.0, t)))
                if not finished:  # rounding: the nearest one finishes now
                    finished = [min(active, key=lambda w: (active[w][0] / active[w][1] if active[w][1] > 0 else INF, w))]
                for w in finished:
                    finish_data(w, t)
            if dirty[0] and (not heap or heap[0][0] > t):
                # rates are only needed once time moves on: batch every change at this instant
                advance(t)
                reschedule()


def _max_min_rates(active: dict[int, list[float]], res_of: list[int], resources: list[Resource],
                   caps: list[float]) -> dict[int, float]:
    """Max-min fair rates (progressive filling): every active transfer is capped by its lane's
    rate and shares every limit it is under. Each round raises all unfixed rates to the next
    level at which a limit saturates or a lane's own rate is reached, and fixes those."""
    rate: dict[int, float] = {}
    users: dict[int, set[int]] = {}
    for v in active:
        for lim in resources[res_of[v]].limits:
            users.setdefault(lim, set()).add(v)
    left = {lim: caps[lim] for lim in users}
    by_cap = sorted(active, key=lambda v: (resources[res_of[v]].rate, v))
    at = 0
    remaining = len(by_cap)
    tol = 1 + 1e-12
    while remaining:
        while at < len(by_cap) and by_cap[at] in rate:
            at += 1
        cap_level = resources[res_of[by_cap[at]]].rate
        level, tight = INF, []
        for lim, us in users.items():
            if us:
                share = left[lim] / len(us)
                if share < level * tol:
                    if share < level / tol:
                        tight = []
                    level = min(level, share)
                    tight.append(lim)
        if cap_level <= level * tol:
            level = cap_level
            fixed = []
            k = at
            while k < len(by_cap) and resources[res_of[by_cap[k]]].rate <= cap_level * tol:
                if by_cap[k] not in rate:
                    fixed.append(by_cap[k])
                k += 1
        else:
            fixed = sorted({v for lim in tight for v in users[lim]})
        for v in fixed:
            rate[v] = level
            remaining -= 1
            for lim in resources[res_of[v]].limits:
                users[lim].discard(v)
                left[lim] = max(0.0, left[lim] - level)
    return rate
