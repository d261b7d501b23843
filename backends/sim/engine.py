"""The event loop: a Program run under its execution model, on links with lanes and limits.

Every op is issued as soon as every op it depends on has completed (``ccl.core.program``: a runtime
may run each op when it is ready; ranks start when their out-of-place alias copies are done).
Issuing a send or a receive posts it; a message is *ready* when both its send and its receive
are posted (rendezvous; a push or pull, one-sided, when it is issued, a pull's issue waiting
for the pushes it reads to land: ``graph``) and the message before it of the same pair and channel is ready (rule 3
of the model: a runtime posts a pair's messages on a channel in list order), then it queues
first come first served on its link, takes the lane that frees first, and:

* ``overlap_latency=False`` (the alpha-beta model): holds the lane for latency + bytes /
  bandwidth; its send and its receive complete at the end of that time;
* ``overlap_latency=True`` (cut-through): holds the lane for bytes / bandwidth; the send
  completes then, the receive a latency later. Pushes and pulls always move so
  (``Resource.cut_through``): a switch's latency is the delay of a pass through it, which
  overlaps the requests in flight, not a round trip a connection waits out per message.

Links under a shared limit are *fluid*: while several of their messages are active, rates are
max-min fair subject to every lane's rate and every limit's bandwidth (progressive filling),
recomputed whenever a limited message starts or finishes. With ``local_rate`` a local op takes
bytes / local_rate on its rank's copy engine (one per rank, first come first served); otherwise
local ops complete when issued.

In ``step`` mode the ops of step s are issued no earlier than the completion of every op of
the steps before (a barrier between steps).

Three loops implement this. The fast one handles links without limits and free local ops: there
a message's times are known when it takes its lane, so its completions are applied at once,
and so are those of every op they make ready (everything those post becomes ready no earlier,
and ready messages are taken in time order from one heap). The op-level one (``fluid``)
handles dependency mode with free local ops otherwise: links under limits (with lazy flow
progress and fair shares recomputed per connected component), and programs whose chains of
local ops would make the fast loop's contraction quadratic. The general one takes every event
(local ops included) in time order from the heap and recomputes every fair share. The tests
check all three agree.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque

import numpy as np

from ccl.core.errors import BackendError

from .fluid import run as run_fluid
from .graph import ProgramGraph, as_array
from .shares import FairShare, Resource, hub_ready, on_grid

INF = math.inf
_EPS = 1e-12


class Engine:
    """One run: fills per op instance (op p, slice j: v = p * slices + j) ``issue`` and
    ``done``, and per message instance (q = message * slices + j) ``start``, ``sent``,
    ``landed`` and ``lane``. Slice j of an op depends on slice j of its dependencies only."""

    follow_ops = False  # the fluid loop follows every op, not the message graph (the tests compare both)

    def __init__(self, graph: ProgramGraph, msg_resource: np.ndarray, msg_bytes: np.ndarray,
                 resources: list[Resource], limit_caps: list[float], *, slices: int, overlap_latency: bool,
                 local_rate: float | None, op_bytes: list[float], rank_start: list[float]) -> None:
        self.g = graph
        self.m = slices
        self.msg_resource = msg_resource
        self.msg_bytes = msg_bytes  # per message, numpy (a slice carries msg_bytes / slices)
        self.resources = resources
        self.limit_caps = limit_caps
        self.overlap = overlap_latency
        self.local_rate = local_rate
        self.op_bytes = op_bytes  # per op (a slice: / slices)
        self.rank_start = rank_start
        m = slices
        n_msg = graph.n_messages
        self.issue: list[float] | np.ndarray = []  # per op instance, filled by the loops
        self.done: list[float] | np.ndarray = []
        self.start: list[float] | array = [INF] * (n_msg * m)
        self.sent: list[float] | array = [INF] * (n_msg * m)
        self.landed: list[float] | np.ndarray = []  # the general loop fills it; the fast one derives it
        self.lane: list[int] | array = [0] * (n_msg * m)
        self.fluid = any(r.limits for r in resources)
        res = np.asarray(msg_resource, dtype=np.int64)
        rate = np.array([r.rate for r in resources] + [1.0])[res]
        self.latency = np.array([r.latency for r in resources] + [0.0])[res]  # per message
        data = np.asarray(msg_bytes, dtype=float) / m / rate
        cut = np.array([r.cut_through for r in resources] + [False])[res] | overlap_latency
        self.lands_after = np.where(cut, self.latency, 0.0)  # per message: its landing after its lane frees
        self.cut = cut.tolist()
        self.svc_array = np.where(cut, data, data + self.latency)  # lane time per message
        self.lane_free = [[0.0] * res.lanes for res in resources]
        self.op_times_known = False
        self.rate_updates = 0  # fair rates computed (flows per recomputation, summed): the fluid loops' work
        self._phases: tuple[np.ndarray, np.ndarray, float] | None = None

    @property
    def uses_fast_loop(self) -> bool:
        return not self.fluid and self.local_rate is None

    def uses_fluid_loop(self, mode: str) -> bool:
        """The loop of ``fluid``: dependency mode and local ops free, on links under limits."""
        return self.local_rate is None and mode == "dependency" and self.fluid

    # ------------------------------------------------------------------ entry points
    def run(self, mode: str) -> None:
        """``dependency``: every op as soon as it is ready; ``step``: a barrier between steps."""
        if self.uses_fast_loop and not self.uses_fluid_loop(mode):
            self._fast(mode)
        elif self.uses_fluid_loop(mode):
            run_fluid(self)
        else:
            self._general_run(mode)
        self._check_finished()

    def _check_finished(self) -> None:
        g, m = self.g, self.m
        table = g.program.ops
        if self.op_times_known:
            stuck = np.flatnonzero(~np.isfinite(np.asarray(self.done, dtype=float))) // m
        else:  # a message that never moved: its send is the op that never completed
            stuck = g.msg_send[np.flatnonzero(~np.isfinite(np.asarray(self.sent, dtype=float))) // m]
        if len(stuck):
            p = int(stuck[0])
            r = int(g.op_rank[p])
            i = int(g.row[p] - table.rank_ptr[r])
            raise BackendError(f"simulation stalled: rank {r} op {i} ({table.rank_ops(r)[i].describe()}) never "
                               f"completed ({len(stuck)} op(s) in all); the program is not executable as given "
                               "(check it with ccl.verify_program)")

    # ------------------------------------------------------------------ fast loop
    def _fast(self, mode: str) -> None:
        """The message graph (``ProgramGraph.message_lists``): a message instance is ready when
        the completions it waits for are in and its ranks have started; instances are taken in
        time order from one heap, and an instance's completions are applied as it takes its
        lane. The ops' times follow from the messages' on demand (``op_times``)."""
        g, m = self.g, self.m
        remaining, out_ptr, out_idx = g.message_lists(m)
        rem = array("q", remaining)
        ready = hub_ready(g, m, self.rank_start)
        step = as_array("q", np.repeat(g.msg_step, m))
        res_of = as_array("q", np.repeat(self.msg_resource, m))
        svc = as_array("d", np.repeat(self.svc_array, m))
        # a receive lands this after its send leaves
        post = as_array("d", np.repeat(self.lands_after, m)) if np.any(self.lands_after) else None
        lane_free = self.lane_free
        n_q = g.n_messages * m
        start = self.start = as_array("d", np.full(n_q, INF))
        sent = self.sent = as_array("d", np.full(n_q, INF))
        lane = self.lane = as_array("q", np.zeros(n_q, dtype=np.int64))
        nxt = g.msg_next.tolist()
        single = [len(x) == 1 for x in lane_free]
        free1 = [x[0] for x in lane_free]
        heap: list[tuple[float, int]] = []
        push, pop = heapq.heappush, heapq.heappop
        stepped = mode == "step"
        pending: dict[int, list[int]] = {}
        limit = -1

        def fire(h: int) -> None:
            """Hub instance h (``ProgramGraph.hubs``) has its waits in: it completes at once,
            and so do the hubs it alone held back."""
            todo = [h]
            while todo:
                h = todo.pop()
                t = ready[h]
                c = n_q + h  # 2 n_q + (h - n_q)
                for k in range(out_ptr[c], out_ptr[c + 1]):
                    w = out_idx[k]
                    rem[w] -= 1
                    if ready[w] < t:
                        ready[w] = t
                    if rem[w] == 0:
                        if w >= n_q:
                            todo.append(w)
                        elif stepped and step[w] > limit:
                            pending.setdefault(step[w], []).append(w)
                        else:
                            push(heap, (ready[w], w))

        if stepped:
            barrier = max(self.rank_start, default=0.0)
            phases = np.unique(g.msg_step).tolist() if g.n_messages else []
            for q in range(n_q):
                if not rem[q]:
                    pending.setdefault(step[q], []).append(q)
        else:
            barrier, phases = 0.0, [None]
            for q in range(n_q):
                if not rem[q]:
                    push(heap, (ready[q], q))
        for h in range(n_q, len(rem)):
            if not rem[h]:
                fire(h)
        begins = []
        for s in phases:
            latest = barrier
            begins.append(barrier)
            if stepped:
                limit = s
                for q in pending.pop(s, []):
                    if ready[q] < barrier:
                        ready[q] = barrier
                    push(heap, (ready[q], q))
            while heap:
                t, q = pop(heap)
                r = res_of[q]
                if single[r]:
                    f = free1[r]
                    b = t if t >= f else f
                    e = b + svc[q]
                    free1[r] = e
                else:
                    lanes = lane_free[r]
                    k = min(range(len(lanes)), key=lanes.__getitem__)
                    f = lanes[k]
                    b = t if t >= f else f
                    e = b + svc[q]
                    lanes[k] = e
                    lane[q] = k
                start[q] = b
                sent[q] = e
                w = nxt[q // m]
                if w >= 0:  # the pair's next message may be posted now (rule 3: list order)
                    w = w * m + q % m
                    rem[w] -= 1
                    if ready[w] < t:
                        ready[w] = t
                    if rem[w] == 0:
                        if stepped and step[w] > limit:
                            pending.setdefault(step[w], []).append(w)
                        else:
                            push(heap, (ready[w], w))
                a = e if post is None else e + post[q]
                if a > latest:
                    latest = a
                c = 2 * q
                for k in range(out_ptr[c], out_ptr[c + 1]):  # waiting for the send
                    w = out_idx[k]
                    rem[w] -= 1
                    if ready[w] < e:
                        ready[w] = e
                    if rem[w] == 0:
                        if w >= n_q:
                            fire(w)
                        elif stepped and step[w] > limit:
                            pending.setdefault(step[w], []).append(w)
                        else:
                            push(heap, (ready[w], w))
                for k in range(out_ptr[c + 1], out_ptr[c + 2]):  # waiting for the receive
                    w = out_idx[k]
                    rem[w] -= 1
                    if ready[w] < a:
                        ready[w] = a
                    if rem[w] == 0:
                        if w >= n_q:
                            fire(w)
                        elif stepped and step[w] > limit:
                            pending.setdefault(step[w], []).append(w)
                        else:
                            push(heap, (ready[w], w))
            barrier = latest
        for r, one in enumerate(single):
            if one:
                lane_free[r][0] = free1[r]
        self.landed = np.asarray(sent, dtype=float)
        if np.any(self.lands_after):
            self.landed = self.landed + np.repeat(self.lands_after, m)
        self._phases = (np.array(phases, dtype=np.int64), np.array(begins), barrier) if stepped else None
        self.op_times_known = False

    def op_times(self) -> tuple[np.ndarray, np.ndarray]:
        """(issue, done) of every op instance. The general loop records them; after the fast
        one they follow from the messages' times: an op is ready when the sends and receives it
        reaches through local ops have completed and its rank has started (in step mode: and
        its step has begun); a send completes when its message has left, a receive when it has
        landed, a local op when it is ready."""
        if self.op_times_known:
            return np.asarray(self.issue, dtype=float), np.asarray(self.done, dtype=float)
        g, m = self.g, self.m
        ready = np.repeat(np.asarray(self.rank_start, dtype=float)[g.op_rank][:, None], m, axis=1)
        sent = np.asarray(self.sent, dtype=float).reshape(-1, m)
        landed = np.asarray(self.landed, dtype=float).reshape(-1, m)
        msg = g.op_message
        network = msg >= 0
        completion = np.zeros((g.n_ops, m))
        completion[network] = np.where(g.is_recv[network][:, None], landed[msg[network]], sent[msg[network]])
        # local ops, each after the ops it waits for: done (and issued) once those are done
        done = np.where(network[:, None], completion, ready)
        order, in_ptr, in_idx = g.local_deps()
        for j in range(m if len(order) else 0):
            d = done[:, j].tolist()
            for p in order.tolist():
                t = d[p]
                for k in range(in_ptr[p], in_ptr[p + 1]):
                    x = d[in_idx[k]]
                    if x > t:
                        t = x
                d[p] = t
            done[:, j] = d
        ready[order] = done[order]
        into = network[g.dep_dst]  # then sends and receives: once the ops they wait for are done
        if np.any(into):
            np.maximum.at(ready, g.dep_dst[into], done[g.dep_src[into]])
        if self._phases is not None:
            steps, begins, final = self._phases
            at = np.searchsorted(steps, g.op_step)  # the first message step >= the op's step
            if len(steps):
                begin = np.where(at < len(steps), begins[np.minimum(at, len(steps) - 1)], final)
            else:
                begin = np.full(g.n_ops, final)
            ready = np.maximum(ready, begin[:, None])
        self.issue = ready.ravel()
        self.done = np.where(network[:, None], completion, ready).ravel()
        self.op_times_known = True
        return self.issue, self.done

    # ------------------------------------------------------------------ general loop
    def _general_run(self, mode: str) -> None:
        g, m = self.g, self.m
        remaining, _, _ = g.op_lists()
        self.remaining = list(remaining) if m == 1 else [x for x in remaining for _ in range(m)]
        self.dep_ready = [0.0] * (g.n_ops * m)
        # one-sided messages (pushes and pulls) have their one op only: as if the other side were posted
        self.posted = bytearray(np.repeat(g.msg_one_sided.astype(np.uint8), m).tobytes())
        first = np.ones(g.n_messages, dtype=np.uint8)
        first[g.msg_next[g.msg_next >= 0]] = 0
        self.prev_posted = bytearray(np.repeat(first, m).tobytes())  # its predecessor is ready (or none)
        self.held = bytearray(g.n_messages * m)  # both sides posted, waiting for its predecessor
        self.post_time = [0.0] * (g.n_messages * m)
        self.landed = [INF] * (g.n_messages * m)
        self.msg_bytes = self.msg_bytes.tolist()
        self.res_of = self.msg_resource.tolist()
        self.svc = self.svc_array.tolist()
        self.issue = [INF] * (g.n_ops * m)
        self.done = [INF] * (g.n_ops * m)
        self.op_times_known = True
        start = self.rank_start
        op_rank = g.op_rank.tolist()
        ready_now = [(p * m + j, start[op_rank[p]]) for p in range(g.n_ops) if not remaining[p] for j in range(m)]
        if mode == "dependency":
            self._general(ready_now, None)
            return
        pending: dict[int, list[int]] = {}
        op_step = g.op_step.tolist()
        for v, _ in ready_now:
            pending.setdefault(op_step[v // m], []).append(v)
        t = max(start, default=0.0)
        for s in np.unique(g.op_step).tolist():
            t = max(t, self._general([(v, t) for v in pending.pop(s, [])], (s, pending)))

    def _general(self, ready: list[tuple[int, float]], barrier: tuple[int, dict[int, list[int]]] | None) -> float:
        """Every event in time order: completions, then local-op ends, fluid rate changes, lane
        releases and readiness at one instant (see module docstring)."""
        g, m = self.g, self.m
        _, out_ptr, out_idx = g.op_lists()
        op_message, op_rank = g.op_message.tolist(), g.op_rank.tolist()
        step = g.op_step.tolist() if barrier is not None else None
        limit, pending = barrier if barrier is not None else (0, {})
        msg_send, msg_recv = g.msg_send.tolist(), g.msg_recv.tolist()
        rem, dep_ready, issue, done = self.remaining, self.dep_ready, self.issue, self.done
        posted, post_time = self.posted, self.post_time
        prev_posted, held, nxt = self.prev_posted, self.held, g.msg_next.tolist()
        res_of, resources = self.res_of, self.resources
        start, sent, landed, lane = self.start, self.sent, self.landed, self.lane
        local_rate, op_bytes = self.local_rate, self.op_bytes
        n_ranks = len(self.rank_start)
        heap: list[tuple[float, int, int]] = []
        push, pop = heapq.heappush, heapq.heappop
        fair = FairShare(resources, self.limit_caps)
        COMPLETE, LOCAL, FLUID, RELEASE, READY = 0, 1, 2, 3, 4  # at one instant, in this order
        engine_busy = [False] * n_ranks
        engine_queue: list[deque[int]] = [deque() for _ in range(n_ranks)]
        link_queue: dict[int, deque[int]] = {}
        active: dict[int, list[float]] = {}  # limited messages in flight: [bytes left, rate]
        clock_fluid = [0.0]
        version = [0]
        dirty = [False]
        latest = [0.0]

        def begin(v: int, t: float) -> None:
            issue[v] = t
            p = v // m
            msg = op_message[p]
            if msg >= 0:
                q = msg * m + v - p * m
                if post_time[q] < t:
                    post_time[q] = t
                if not posted[q]:
                    posted[q] = 1
                elif prev_posted[q]:
                    push(heap, (t, READY, q))
                else:
                    held[q] = 1
            elif local_rate is None:
                complete(v, t)
            else:
                r = op_rank[p]
                if engine_busy[r]:
                    engine_queue[r].append(v)
                else:
                    run_local(v, r, t)

        def run_local(v: int, r: int, t: float) -> None:
            engine_busy[r] = True
            issue[v] = t
            push(heap, (t + op_bytes[v // m] / m / local_rate, LOCAL, v))

        def complete(v: int, t: float) -> None:
            done[v] = t
            if t > latest[0]:
                latest[0] = t
            p = v // m
            j = v - p * m
            for k in range(out_ptr[p], out_ptr[p + 1]):
                w = out_idx[k]
                vw = w * m + j
                rem[vw] -= 1
                if dep_ready[vw] < t:
                    dep_ready[vw] = t
                if rem[vw] == 0:
                    if step is not None and step[w] > limit:
                        pending.setdefault(step[w], []).append(vw)
                    else:
                        begin(vw, t)

        def advance_fluid(t: float) -> None:
            dt = t - clock_fluid[0]
            if dt > 0:
                for st in active.values():
                    st[0] -= st[1] * dt
            clock_fluid[0] = t

        def take_lane(q: int, t: float, k: int) -> None:
            msg = q // m
            r = res_of[msg]
            start[q] = t
            lane[q] = k
            if resources[r].limits:
                advance_fluid(t)
                active[q] = [self.msg_bytes[msg] / m, 0.0]
                dirty[0] = True
                return
            e = t + self.svc[msg]
            self.lane_free[r][k] = e
            push(heap, (e, RELEASE, q))

        def message_ready(q: int, t: float) -> None:
            w = nxt[q // m]
            if w >= 0:  # the pair's next message may be posted now (rule 3: list order)
                w = w * m + q % m
                prev_posted[w] = 1
                if held[w]:
                    held[w] = 0
                    push(heap, (t, READY, w))
            r = res_of[q // m]
            lanes = self.lane_free[r]
            if resources[r].limits:
                for k in range(len(lanes)):
                    if lanes[k] <= t:
                        lanes[k] = INF  # busy until the fluid transfer finishes
                        take_lane(q, t, k)
                        return
                link_queue.setdefault(r, deque()).append(q)
                return
            k = min(range(len(lanes)), key=lanes.__getitem__) if len(lanes) > 1 else 0
            take_lane(q, t if t >= lanes[k] else lanes[k], k)

        def released(q: int, t: float) -> None:
            """q's lane is free at t (its data has left): its send completes."""
            msg = q // m
            r = res_of[msg]
            sent[q] = t
            if resources[r].limits:
                self.lane_free[r][lane[q]] = t
                waiting = link_queue.get(r)
                if waiting:
                    self.lane_free[r][lane[q]] = INF
                    take_lane(waiting.popleft(), t, lane[q])
            j = q - msg * m
            a = t + (resources[r].latency if self.cut[msg] else 0.0)
            landed[q] = a
            if msg_send[msg] != msg_recv[msg]:  # a push or pull completes once, when it lands
                complete(msg_send[msg] * m + j, t)
            if a > t:
                push(heap, (a, COMPLETE, msg_recv[msg] * m + j))
            else:
                complete(msg_recv[msg] * m + j, a)

        def reschedule() -> None:
            dirty[0] = False
            version[0] += 1
            if not active:
                return
            self.rate_updates += len(active)
            rates = fair(np.fromiter((res_of[q // m] for q in active), dtype=np.int64, count=len(active))).tolist()
            nxt = INF
            for st, rate in zip(active.values(), rates):
                st[1] = rate
                if st[1] > 0 and st[0] / st[1] < nxt:
                    nxt = st[0] / st[1]
            if nxt < INF:
                push(heap, (on_grid(clock_fluid[0] + max(nxt, 0.0)), FLUID, version[0]))

        for v, t in ready:
            push(heap, (t, READY, -1 - v))  # ops issued at their start time, in order
        while heap:
            t, what, x = pop(heap)
            if what == COMPLETE:
                complete(x, t)
            elif what == LOCAL:
                r = op_rank[x // m]
                engine_busy[r] = False
                if engine_queue[r]:
                    run_local(engine_queue[r].popleft(), r, t)
                complete(x, t)
            elif what == READY:
                if x < 0:
                    begin(-1 - x, t)
                else:
                    message_ready(x, t)
            elif what == RELEASE:
                released(x, t)
            else:  # FLUID
                if x != version[0]:
                    continue
                advance_fluid(t)
                finished = sorted(q for q, st in active.items()
                                  if st[0] <= _EPS * max(1.0, self.msg_bytes[q // m] / m)
                                  or (st[1] > 0 and on_grid(t + st[0] / st[1]) <= t))
                if not finished:  # rounding: the nearest one finishes now
                    finished = [min(active, key=lambda q: (active[q][0] / active[q][1] if active[q][1] > 0 else INF,
                                                           q))]
                for q in finished:
                    del active[q]
                    dirty[0] = True
                    if self.cut[q // m]:
                        released(q, t)
                    else:
                        push(heap, (t + resources[res_of[q // m]].latency, RELEASE, q))
            if dirty[0] and (not heap or heap[0][0] > t):
                advance_fluid(t)
                reschedule()
        return max(latest[0], max((t for _, t in ready), default=0.0))
