"""The loop for links under shared limits: ``Engine``'s physics (see ``engine``) for the common
case (dependency mode, local ops free).

Ops are followed through their dependencies as they complete (local ops complete when they
are issued, at once, without an event), and a message is ready when its send and its receive
are posted and the message before it of its pair and channel is ready. Where the local ops
contract cheaply, the run follows messages instead (each waits for the sends and receives it
reaches through local ops, as in the fast loop), and the ops' times are derived after. Messages on links
without limits take their lane first come first served and their completions are known at
once, as in the fast loop. Messages on limited links are *flows*: they share the limits max-min fairly while
their data moves, then hold their lane for the latency (or, with ``overlap_latency`` and for
pushes and pulls, land a
latency after their data has left).

Two things keep a run of many concurrent flows fast:

* **Lazy progress.** A flow keeps (bytes left, rate, the time both were set, the finish they
  give) and is brought up to date only when its rate changes. Only each component's next
  finish is an event (a finish reschedules its component, which pushes the next one), and a
  finish event whose flow has since finished or been given another time is dropped: a
  component of a thousand flows whose rates all change costs one vectorized update, not a
  thousand events.
* **Local fairness.** Max-min fair rates split over the connected components of the graph of
  active flows and the limits they are under: a flow starting or finishing can change only the
  rates of its component, so only that component's rates are recomputed (``MaxMin``), once per
  instant at which something changed. On a rail-optimized cluster a component is one rail's
  NICs or one node's NVSwitch ports, not the machine. Small components are solved in Python,
  large ones (several touched at the same instant) with numpy (``shares.FairShare``).

The tests check this loop against the general one (every event in time order, global fair
shares) on machines with NICs and NVSwitches.
"""

from __future__ import annotations

import heapq
import math
from array import array

import numpy as np

from .graph import as_array
from .shares import FairShare, hub_ready, on_grid, on_grid_array

INF = math.inf
TOL = 1 + 1e-12  # as ``FairShare``: levels this close are one level
VECTOR_FLOWS = 64  # components of more flows than this get their rates from numpy (``FairShare``)


class MaxMin:
    """Max-min fair rates of a set of flows by progressive filling: every unfixed rate rises
    to the next level at which a limit saturates (its capacity left, shared by its unfixed
    flows) or a flow's lane reaches its own rate, and the flows that hit it are fixed there.
    A round costs the limits still shared plus the flows it fixes (flows are taken by lane
    rate from one sorted list)."""

    def __init__(self, lane_rate: list[float], limits_of: list[tuple[int, ...]], caps: list[float]) -> None:
        self.lane_rate = lane_rate  # per resource
        self.limits_of = limits_of  # per resource
        self.caps = caps

    def __call__(self, flows: list[int], res_of, users: dict[int, list[int]]) -> dict[int, float]:
        """Rates of ``flows`` (message instances; ``res_of[q]`` their resource), which are
        exactly the flows under the limits of ``users`` (limit -> its flows)."""
        lane_rate, limits_of = self.lane_rate, self.limits_of
        left = {lim: self.caps[lim] for lim, qs in users.items() if qs}
        count = {lim: len(users[lim]) for lim in left}
        by_lane = sorted(flows, key=lambda q: lane_rate[res_of[q]])
        at = 0
        rate: dict[int, float] = {}
        while len(rate) < len(by_lane):
            while by_lane[at] in rate:
                at += 1
            cap_level = lane_rate[res_of[by_lane[at]]]
            level = INF
            for lim, c in count.items():
                share = left[lim] / c
                if share < level:
                    level = share
            if cap_level <= level * TOL:
                level = cap_level
                bound = cap_level * TOL
                fixed = []
                k = at
                while k < len(by_lane) and lane_rate[res_of[by_lane[k]]] <= bound:
                    if by_lane[k] not in rate:
                        fixed.append(by_lane[k])
                    k += 1
            else:
                bound = level * TOL
                fixed = [q for lim, c in count.items() if left[lim] / c <= bound for q in users[lim] if q not in rate]
            for q in fixed:
                if q in rate:
                    continue  # under two tight limits
                rate[q] = level
                for lim in limits_of[res_of[q]]:
                    c = count[lim] - 1
                    if c:
                        count[lim] = c
                        rest = left[lim] - level
                        left[lim] = rest if rest > 0.0 else 0.0
                    else:
                        del count[lim], left[lim]
        return rate


def run(engine) -> None:
    """Fill ``engine.start``, ``sent``, ``landed`` and ``lane`` per message instance, and
    ``issue`` and ``done`` per op instance when the run follows ops (see ``by_message``)."""
    g, m = engine.g, engine.m
    # Dependencies are followed between messages (``ProgramGraph.message_lists``: a message
    # instance waits for the sends and receives it reaches through local ops, and for its
    # pair's message before it; where that contraction would be quadratic, through the local
    # ops kept as hubs); the ops' own times then follow from the messages' (``Engine.op_times``).
    # Coalesced schedules pack and unpack their messages with copies (dgx-h100:16 allgather at
    # 24 stages: 637,856 copies, 68,480 messages), which an op-level walk would visit one by
    # one at every judgement. ``Engine.follow_ops``: op by op (the tests compare both).
    by_message = not engine.follow_ops
    if by_message:
        m_remaining, m_ptr, m_idx = g.message_lists(m)
        m_rem = array("q", m_remaining)  # a copy: the lists are cached on the graph
        m_ready = hub_ready(g, m, engine.rank_start)
    else:
        remaining, out_ptr, out_idx = g.op_lists()
        n_v = g.n_ops * m
        rem = array("q", remaining) if m == 1 else array("q", np.repeat(np.asarray(remaining, dtype=np.int64), m))
        dep_ready = array("d", bytes(8 * n_v))  # zeros
        issue = array("d", np.full(n_v, INF).tobytes())
        op_done = array("d", np.full(n_v, INF).tobytes())
        op_message = g.op_message.tolist()
        op_rank = g.op_rank.tolist()
    msg_send, msg_recv = g.msg_send.tolist(), g.msg_recv.tolist()
    res_of_v = np.repeat(np.asarray(engine.msg_resource, dtype=np.int64), m)
    res_of = as_array("q", res_of_v)
    svc = as_array("d", np.repeat(engine.svc_array, m))  # lane time of an unlimited message
    nbytes = as_array("d", np.repeat(np.asarray(engine.msg_bytes, dtype=float) / m, m))
    lat_q = as_array("d", np.repeat(engine.latency, m))
    cut_q = bytearray(np.repeat(np.asarray(engine.cut, dtype=np.uint8), m).tobytes())  # lands a latency after it leaves
    resources = engine.resources
    limited = [bool(r.limits) for r in resources]
    limits_of = [r.limits for r in resources]
    lane_free = engine.lane_free
    n_q = g.n_messages * m
    start = engine.start = as_array("d", np.full(n_q, INF))
    sent = engine.sent = as_array("d", np.full(n_q, INF))
    landed = as_array("d", np.full(n_q, INF))
    lane = engine.lane = as_array("q", np.zeros(n_q, dtype=np.int64))
    if not by_message:  # (the message lists count these waits themselves)
        posted = bytearray(np.repeat(g.msg_one_sided.astype(np.uint8), m).tobytes())  # a side posted (one-sided: its one)
        post_time = array("d", bytes(8 * n_q))
        first = np.ones(g.n_messages, dtype=np.uint8)
        first[g.msg_next[g.msg_next >= 0]] = 0
        prev_ready = bytearray(np.repeat(first, m).tobytes())  # the pair's message before it is ready (or none)
        held = bytearray(n_q)  # both sides posted, waiting for the message before it
    nxt = g.msg_next.tolist()
    fair = MaxMin([r.rate for r in resources], limits_of, list(engine.limit_caps))
    vector = FairShare(resources, engine.limit_caps)
    heap: list[tuple] = []
    push, pop = heapq.heappush, heapq.heappop
    DONE, FINISH, RELEASE, READY = 0, 1, 2, 3  # at one instant, in this order (as the general loop)
    waiting: dict[int, list[int]] = {}  # limited link -> messages queued for a lane (FIFO)
    wait_at: dict[int, int] = {}
    users: dict[int, set[int]] = {}  # limit -> active flows
    # per flow (message instance), meaningful while it is active: bytes left at since[q], its
    # rate, and the finish that rate gives (a flat array for the loops, a numpy view of the
    # same memory for the components' updates)
    left = array("d", bytes(8 * n_q))
    rate = array("d", bytes(8 * n_q))
    since = array("d", bytes(8 * n_q))
    due = array("d", np.full(n_q, INF).tobytes())
    left_v, rate_v, since_v, due_v = (np.frombuffer(a, dtype=np.float64) for a in (left, rate, since, due))
    active = bytearray(n_q)
    touched: set[int] = set()

    def complete(v: int, t: float) -> None:
        """Op instance v completed at t: issue what it made ready; local ops complete when
        issued, so they are followed through at once (a stack, not recursion)."""
        stack = [(v, t)]
        while stack:
            v, t = stack.pop()
            op_done[v] = t
            p = v // m
            j = v - p * m
            for k in range(out_ptr[p], out_ptr[p + 1]):
                w = out_idx[k] * m + j
                rem[w] -= 1
                if dep_ready[w] < t:
                    dep_ready[w] = t
                if rem[w] == 0:
                    tw = dep_ready[w]
                    issue[w] = tw
                    msg = op_message[w // m]
                    if msg < 0:
                        stack.append((w, tw))
                    else:
                        post(msg * m + j, tw)

    def post(q: int, t: float) -> None:
        if post_time[q] < t:
            post_time[q] = t
        if posted[q]:
            if prev_ready[q]:
                push(heap, (post_time[q], READY, q))
            else:
                held[q] = 1
        else:
            posted[q] = 1

    def arrive(c: int, t: float) -> None:
        """Completion c (2q: instance q's send, 2q+1: its receive, past 2 n_q: a hub's) at t,
        followed to the instances waiting for it (``by_message``); a hub whose waits are in
        completes at once (a stack, not recursion)."""
        todo = None
        while True:
            for k in range(m_ptr[c], m_ptr[c + 1]):
                w = m_idx[k]
                m_rem[w] -= 1
                if m_ready[w] < t:
                    m_ready[w] = t
                if m_rem[w] == 0:
                    if w < n_q:
                        push(heap, (m_ready[w], READY, w))
                    elif todo is None:
                        todo = [w]
                    else:
                        todo.append(w)
            if not todo:
                return
            w = todo.pop()
            c, t = n_q + w, m_ready[w]

    if by_message:
        def finish(q: int, s: float, a: float) -> None:
            """q released its lane at s (its send completes) and landed at a."""
            sent[q] = s
            landed[q] = a
            arrive(2 * q, s)
            if a > s:
                push(heap, (a, DONE, 2 * q + 1))
            else:
                arrive(2 * q + 1, a)
    else:
        def finish(q: int, s: float, a: float) -> None:
            sent[q] = s
            landed[q] = a
            msg = q // m
            j = q - msg * m
            if msg_send[msg] != msg_recv[msg]:  # a push or pull completes once, when it lands
                complete(msg_send[msg] * m + j, s)
            if a > s:
                push(heap, (a, DONE, msg_recv[msg] * m + j))
            else:
                complete(msg_recv[msg] * m + j, a)

    def begin_flow(q: int, t: float, k: int) -> None:
        start[q] = t
        lane[q] = k
        left[q] = nbytes[q]
        rate[q] = 0.0
        since[q] = t
        due[q] = INF
        active[q] = 1
        for lim in limits_of[res_of[q]]:
            users.setdefault(lim, set()).add(q)
            touched.add(lim)

    def reschedule(t: float) -> None:
        """The rates of the components of the limits touched at t (set at once: only the flows
        whose rate changed get a new finish time), and each component's next finish as an
        event (the flows tied for it). Every finish reschedules its component (its limits are
        touched), so the component's next one is then pushed in turn."""
        component: dict[int, set[int]] = {}
        flows: set[int] = set()
        label: dict[int, int] = {}  # flow -> its component (numbered as found)
        seeds = list(touched)
        touched.clear()
        for seed in seeds:
            if seed in component:
                continue
            n = len(component)
            todo = [seed]
            while todo:
                lim = todo.pop()
                if lim in component:
                    continue
                qs = component[lim] = users.get(lim) or set()
                for q in qs - flows:
                    flows.add(q)
                    label[q] = n
                    todo.extend(limits_of[res_of[q]])
        if not flows:
            return
        engine.rate_updates += len(flows)
        if len(flows) > VECTOR_FLOWS:
            qs = np.fromiter(flows, dtype=np.int64, count=len(flows))
            r = vector(res_of_v[qs])
            changed = r != rate_v[qs]
            c, rc = qs[changed], r[changed]
            lc = left_v[c] - rate_v[c] * (t - since_v[c])
            left_v[c] = lc
            since_v[c] = t
            rate_v[c] = rc
            with np.errstate(divide="ignore", invalid="ignore"):
                due_v[c] = np.where(rc > 0.0, on_grid_array(t + np.maximum(lc, 0.0) / rc), INF)
            d = due_v[qs]
            lab = np.fromiter((label[q] for q in flows), dtype=np.int64, count=len(flows))
            soonest = np.full(len(component), INF)  # per component
            np.minimum.at(soonest, lab, d)
            tie = (d == soonest[lab]) & (d < INF)
            for f, q in zip(d[tie].tolist(), qs[tie].tolist()):
                push(heap, (f, FINISH, q))
        else:
            soonest_of: dict[int, tuple[float, list[int]]] = {}  # component -> (time, flows)
            for q, r in fair(list(flows), res_of, component).items():
                if r != rate[q]:
                    left[q] -= rate[q] * (t - since[q])
                    since[q] = t
                    rate[q] = r
                    due[q] = on_grid(t + max(left[q], 0.0) / r) if r > 0.0 else INF
                f = due[q]
                if f < INF:
                    best = soonest_of.get(label[q])
                    if best is None or f < best[0]:
                        soonest_of[label[q]] = (f, [q])
                    elif f == best[0]:
                        best[1].append(q)
            for f, ties in soonest_of.values():
                for q in ties:
                    push(heap, (f, FINISH, q))

    if by_message:
        for q in range(n_q):
            if not m_rem[q]:
                push(heap, (m_ready[q], READY, q))
        for h in range(n_q, len(m_rem)):
            if not m_rem[h]:
                arrive(n_q + h, m_ready[h])
    else:
        starts = engine.rank_start
        for p in range(g.n_ops):
            if not remaining[p]:
                t0 = starts[op_rank[p]]
                for j in range(m):
                    v = p * m + j
                    issue[v] = t0
                    if op_message[p] < 0:
                        complete(v, t0)
                    else:
                        post(op_message[p] * m + j, t0)
    landing = arrive if by_message else complete  # a receive landing after its send left
    while heap:
        event = pop(heap)
        t, what, x = event[0], event[1], event[2]
        if what == DONE:
            landing(x, t)
        elif what == READY:
            q = x
            w = nxt[q // m]
            if w >= 0:  # the pair's next message may be posted now (rule 3: list order)
                w = w * m + q % m
                if by_message:
                    m_rem[w] -= 1
                    if m_ready[w] < t:
                        m_ready[w] = t
                    if m_rem[w] == 0:
                        push(heap, (m_ready[w], READY, w))
                else:
                    prev_ready[w] = 1
                    if held[w]:
                        held[w] = 0
                        push(heap, (max(t, post_time[w]), READY, w))
            r = res_of[q]
            lanes = lane_free[r]
            if limited[r]:
                for k in range(len(lanes)):
                    if lanes[k] <= t:
                        lanes[k] = INF  # busy until the flow's lane is released
                        begin_flow(q, t, k)
                        break
                else:
                    waiting.setdefault(r, []).append(q)
            else:
                k = min(range(len(lanes)), key=lanes.__getitem__) if len(lanes) > 1 else 0
                b = t if t >= lanes[k] else lanes[k]
                e = b + svc[q]
                lanes[k] = e
                start[q] = b
                lane[q] = k
                finish(q, e, e + lat_q[q] if cut_q[q] else e)
        elif what == FINISH:
            if not active[x] or due[x] != t:
                continue  # an older rate's finish, or one already taken
            batch = {x}  # every flow finishing at this instant (their times are on the grid)
            while heap and heap[0][1] == FINISH and heap[0][0] == t:
                other = pop(heap)[2]
                if active[other] and due[other] == t:
                    batch.add(other)
            for q in sorted(batch):
                for lim in limits_of[res_of[q]]:
                    users[lim].discard(q)
                    touched.add(lim)
                active[q] = 0
                push(heap, (t if cut_q[q] else t + lat_q[q], RELEASE, q))
        else:  # RELEASE: the lane is free; the next queued message takes it
            q = x
            r = res_of[q]
            k = lane[q]
            lane_free[r][k] = t
            queue = waiting.get(r)
            if queue:
                at = wait_at.get(r, 0)
                if at + 1 == len(queue):
                    del waiting[r]
                    wait_at.pop(r, None)
                else:
                    wait_at[r] = at + 1
                lane_free[r][k] = INF
                begin_flow(queue[at], t, k)
            finish(q, t, t + lat_q[q] if cut_q[q] else t)
        if touched and (not heap or heap[0][0] > t):
            reschedule(t)
    engine.landed = np.asarray(landed, dtype=float)
    if by_message:
        engine.op_times_known = False  # ``Engine.op_times`` derives them when asked
    else:
        engine.issue = np.asarray(issue, dtype=float)
        engine.done = np.asarray(op_done, dtype=float)
        engine.op_times_known = True
