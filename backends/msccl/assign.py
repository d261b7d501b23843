"""Threadblocks and channels of an MSCCL export: which in-order queue (threadblock) of a gpu runs
each op, on which channel every message travels, and the search for a layout within a target's
limits.

Order. Every rank's ops are put in one order first, the key ``(Program step, class, position)``
with class 0 for sends, 1 for receives (fused receive-reduces included) and 2 for local ops
(``order``); every threadblock runs its ops in that order. The key is a topological order of
the Program (a send or receive of step s depends on ops of steps < s, a local op on earlier ops
of its step or before), and it keeps every connection's messages in their order.

Why no assignment made here can deadlock (under the execution model ``interpret`` reads files
with: a receive, copy or reduction holds its threadblock until it is done, a send does not, a
step with a wait holds it until that step of another threadblock is done). Every wait goes to an
op of a smaller key: a threadblock's earlier op (the key orders the threadblock), a dependency
(a topological order), an earlier message of the same connection (the key keeps their order),
or, for a receive, the matching send on another gpu, which has the same step and class 0 < 1.
(A step that overwrites what an earlier send of its threadblock reads waits for that send to
be received: the same cross-gpu wait.) A wait across gpus therefore always goes to a send of
the same or an earlier step, and a send waits only within its gpu for ops of earlier steps or
earlier sends of its step; a wait within a gpu lowers the key. A cycle of waits would have to
cross gpus and come back, lowering (step, class) on every crossing and never raising it: the
waits form no cycle, so every op is reached and completes. Putting a send and a receive in
one threadblock (``merge``) adds waits of that kind only; it relies, as published files do, on
the connection's buffer taking a send without its receiver having reached it. The read-back of
the written file (``ccl.compiler.msccl``) checks the result independently.

Layout (``Layout``): how many channels each connection's messages are spread over (``split``: a
connection with m messages split p ways sends message k on its piece ``k * p // m``, which both
ends compute alike), whether a send and a receive connection share a threadblock (``merge``),
how many local ops may join the threadblock of the receive they follow (``attach``) and over how
many local threadblocks the others are spread (``local``). Channel of piece j of a connection
on Program channel c: ``c + C * (lane + L * j)`` (C: the Program's channels; L lanes keep at
most ``max_peers`` send and receive threadblocks per channel, lane ``(b - a) mod n * L // n`` for
a connection from a to b, so every gpu's peers spread evenly over the lanes at both ends).

``fit`` starts from the layout every connection's message count asks for, builds, and grows the
layout where a threadblock has too many steps (its connections split further, or fewer local
ops attached, or more local threadblocks) until every threadblock fits; then, if a gpu still
has too many threadblocks, it fits again with send and receive connections sharing
threadblocks, and last with local ops filling any threadblock with room (``pack``: the fewest
threadblocks). What still does not fit raises ``limits.Unfit`` with the gpu, the need and the
limit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .limits import Target, Unfit, check

SENDS, RECEIVES, LOCAL = 0, 1, 2
NETWORK_KINDS = ("s", "r", "rrc")  # the kinds a message has before forwards are fused
MAX_ROUNDS = 48  # layout changes one fitting may try (each grows something, so the search ends)
# (merge, pack) in the order tried: a threadblock per connection, then send and receive
# connections sharing threadblocks, then local ops filling any threadblock with room
MODES = ((False, False), (True, False), (True, True))


def op_class(kind: str) -> int:
    if kind == "s":
        return SENDS
    if kind in ("r", "rrc", "rcs", "rrcs"):
        return RECEIVES
    return LOCAL


def order(ops: list) -> list:
    """The ops in key order (step, class, position), their deps renumbered (see the module
    docstring); ``ops`` are the exporter's per-rank ops with ``kind``, ``step`` and ``deps``."""
    keyed = sorted(range(len(ops)), key=lambda i: (ops[i].step, op_class(ops[i].kind), i))
    if keyed == list(range(len(ops))):
        return ops
    new = {old: k for k, old in enumerate(keyed)}
    out = []
    for old in keyed:
        x = ops[old]
        x.deps = sorted(new[d] for d in x.deps)
        out.append(x)
    return out


def connection(rank: int, x) -> tuple[int, int, int]:
    """(sender, receiver, channel) of a message op of ``rank``."""
    return (rank, x.peer, x.channel) if x.kind == "s" else (x.peer, rank, x.channel)


@dataclass
class Layout:
    n_ranks: int
    channels: int  # the Program's channels (C)
    lanes: int = 1  # L
    merge: bool = False
    pack: bool = False  # local ops fill any threadblock with room (fewest threadblocks)
    split: dict[tuple[int, int, int], int] = field(default_factory=dict)
    attach: list[int] = field(default_factory=list)  # per rank: ops a network threadblock may hold
    local: list[int] = field(default_factory=list)  # per rank: local threadblocks

    def lane(self, a: int, b: int) -> int:
        return (b - a) % self.n_ranks * self.lanes // self.n_ranks

    def channel(self, key: tuple[int, int, int], piece: int) -> int:
        a, b, c = key
        return c + self.channels * (self.lane(a, b) + self.lanes * piece)

    @property
    def n_channels(self) -> int:
        return self.channels * self.lanes * max(self.split.values(), default=1)

    def program_channel(self, channel: int) -> int:
        return channel % self.channels


def initial(ranks: list[list], program_channels: int, tgt: Target) -> tuple[Layout, dict[tuple[int, int, int], int]]:
    """The starting layout: every connection split as its message count asks for, lanes for
    the per-channel peer limit; and the message count of every connection."""
    counts: dict[tuple[int, int, int], int] = defaultdict(int)
    peers: dict[tuple[int, int], set[int]] = defaultdict(set)
    for r, ops in enumerate(ranks):
        for x in ops:
            if x.kind == "s":
                counts[connection(r, x)] += 1
            if x.kind in NETWORK_KINDS:
                peers[(r, op_class(x.kind))].add(x.peer)
    n = len(ranks)
    most = max((len(p) for p in peers.values()), default=0)
    lanes = max(1, -(-most // tgt.max_peers))
    layout = Layout(n, program_channels, lanes, attach=[tgt.max_steps] * n, local=[1] * n)
    layout.split = {key: max(1, -(-m // tgt.max_steps)) for key, m in counts.items()}
    return layout, dict(counts)


def place_channels(ranks: list[list], layout: Layout, counts: dict[tuple[int, int, int], int]) -> None:
    """Every message's channel under ``layout`` (in place): message k of a connection goes on
    its piece ``k * split // m``; ``conn`` numbers the messages of a connection."""
    seen: dict[tuple[tuple[int, int, int], int], int] = defaultdict(int)
    for r, ops in enumerate(ranks):
        for x in ops:
            if x.kind not in NETWORK_KINDS:
                continue
            key = connection(r, x)
            side = op_class(x.kind)
            k = seen[(key, side)]
            seen[(key, side)] += 1
            x.conn = k
            x.channel = layout.channel(key, k * layout.split.get(key, 1) // counts[key])


@dataclass
class Blocks:
    """One rank's threadblocks: ``tb_of[i]`` the threadblock of op i, ``shape[t]`` its (send
    peer, receive peer, channel), ``network[t]`` its sends and receives, ``attached[t]`` the
    local ops it holds beside them."""

    tb_of: list[int]
    shape: list[tuple[int, int, int]]
    network: list[int]
    attached: list[int]


def threadblocks(ops: list, rank: int, layout: Layout, forwards: dict[tuple[int, int], int]) -> Blocks:
    """The threadblocks of one rank's ops (in key order, channels placed). ``forwards``:
    receive connections (peer, channel) fused with the send connection to the peer they forward
    to (rcs, rrcs steps), which then share a threadblock."""
    keys: dict[tuple, int] = {}
    shape: list[tuple[int, int, int]] = []
    network: list[int] = []
    attached: list[int] = []
    tb_of = [-1] * len(ops)
    forwarded_to = {(p, c): q for (q, c), p in forwards.items()}
    pair_send, pair_recv = _pairs(ops, forwards) if layout.merge else ({}, {})

    def get(key: tuple, send: int, recv: int, chan: int) -> int:
        if key not in keys:
            keys[key] = len(shape)
            shape.append((send, recv, chan))
            network.append(0)
            attached.append(0)
        return keys[key]

    locals_left: list[int] = []
    filling = -1  # packing: the local threadblock being filled
    for i, x in enumerate(ops):
        if x.kind == "s" and (x.peer, x.channel) in forwarded_to:
            q = forwarded_to[(x.peer, x.channel)]
            t = get(("fwd", q, x.peer, x.channel), x.peer, q, x.channel)
        elif x.receives and (x.peer, x.channel) in forwards:
            p = forwards[(x.peer, x.channel)]
            t = get(("fwd", x.peer, p, x.channel), p, x.peer, x.channel)
        elif x.kind == "s":
            if layout.merge:
                q = pair_send[(x.peer, x.channel)]
                t = get(("pair", x.peer, q, x.channel), x.peer, q, x.channel)
            else:
                t = get(("s", x.peer, x.channel), x.peer, -1, x.channel)
        elif x.receives:
            if layout.merge:
                p = pair_recv[(x.peer, x.channel)]
                t = get(("pair", p, x.peer, x.channel), p, x.peer, x.channel)
            else:
                t = get(("r", x.peer, x.channel), -1, x.peer, x.channel)
        else:
            # a local op joins the threadblock of the receive it follows (no wait across
            # threadblocks) while that one has room for it; packing, the threadblock of its
            # latest dependency of any kind, else the last local threadblock with room
            cap = layout.attach[rank]
            if layout.pack:
                for d in sorted(x.deps, reverse=True):
                    t = tb_of[d]
                    if network[t] + attached[t] < cap:
                        break
                else:
                    t = filling
                    if t == -1 or attached[t] >= cap:
                        t = filling = get(("local", len(shape)), -1, -1, 0)
                attached[t] += 1
                tb_of[i] = t
                continue
            recv_deps = [d for d in x.deps if ops[d].receives]
            if recv_deps and max(x.deps) == max(recv_deps):
                t = tb_of[max(recv_deps)]
                if network[t] + attached[t] < cap:
                    attached[t] += 1
                    tb_of[i] = t
                    continue
            locals_left.append(i)
            continue
        network[t] += 1
        tb_of[i] = t
    # the other local ops: in runs of consecutive ones over the rank's local threadblocks
    # (a run keeps a chain of local ops in one threadblock)
    parts = max(1, min(layout.local[rank], len(locals_left)))
    for k, i in enumerate(locals_left):
        t = get(("local", k * parts // len(locals_left)), -1, -1, 0)
        attached[t] += 1
        tb_of[i] = t
    return Blocks(tb_of, shape, network, attached)


def _pairs(ops: list, forwards: dict[tuple[int, int], int]) -> tuple[dict, dict]:
    """Merged threadblocks: per channel, the send connection to a peer shares a threadblock
    with the receive connection from the same peer where both exist (as in published files),
    the others pair in peer order. Returns send (peer, channel) -> receive peer (-1: alone) and
    receive (peer, channel) -> send peer."""
    sends: dict[int, set[int]] = defaultdict(set)
    recvs: dict[int, set[int]] = defaultdict(set)
    fwd_sends = {(p, c) for (q, c), p in forwards.items()}
    for x in ops:
        if x.kind == "s" and (x.peer, x.channel) not in fwd_sends:
            sends[x.channel].add(x.peer)
        elif x.receives and (x.peer, x.channel) not in forwards:
            recvs[x.channel].add(x.peer)
    pair_send: dict[tuple[int, int], int] = {}
    pair_recv: dict[tuple[int, int], int] = {}
    for c in sorted(set(sends) | set(recvs)):
        both = sends[c] & recvs[c]
        for p in both:
            pair_send[(p, c)] = p
            pair_recv[(p, c)] = p
        s_rest, r_rest = sorted(sends[c] - both), sorted(recvs[c] - both)
        for k in range(max(len(s_rest), len(r_rest))):
            p = s_rest[k] if k < len(s_rest) else -1
            q = r_rest[k] if k < len(r_rest) else -1
            if p != -1:
                pair_send[(p, c)] = q
            if q != -1:
                pair_recv[(q, c)] = p
    return pair_send, pair_recv


def grow(layout: Layout, overfull: list[tuple[int, int, int, Blocks]], tgt: Target) -> str | None:
    """Change ``layout`` so the overfull threadblocks ((rank, tb, steps, blocks)) get fewer
    steps: a local threadblock's rank gets more local threadblocks; a network threadblock
    holding local ops takes fewer of them; one with only its messages (and their waits) has its
    connections split over more channels. Returns why nothing more can be done, or None."""
    m = tgt.max_steps
    local: dict[int, int] = {}  # rank -> local threadblocks wanted
    attach: dict[int, int] = {}  # rank -> ops a network threadblock may hold
    split: dict[tuple[int, int, int], int] = {}  # connection -> pieces wanted
    for r, t, steps, blocks in overfull:  # the wishes of one round are not compounded
        send, recv, chan = blocks.shape[t]
        if send == -1 and recv == -1 and not layout.pack:
            local[r] = max(local.get(r, 0), layout.local[r] + 1, -(-layout.local[r] * steps // m))
            continue
        if blocks.attached[t] and layout.attach[r] > blocks.network[t]:
            held = min(layout.attach[r], blocks.network[t] + blocks.attached[t])
            # nops come and go with the layout: give up a little more than the excess
            attach[r] = min(attach.get(r, layout.attach[r]), max(blocks.network[t], held - (steps - m) - m // 16))
            continue
        c = layout.program_channel(chan)
        for key in ((r, send, c), (recv, r, c)):
            if -1 in key[:2] or key not in layout.split:
                continue
            before = layout.split[key]
            split[key] = max(split.get(key, 0), before + 1, -(-before * steps // m))
    for r, v in local.items():
        layout.local[r] = v
    for r, v in attach.items():
        layout.attach[r] = v
    layout.split.update(split)
    changed = bool(local or attach or split)
    if layout.n_channels > tgt.max_channels:
        widest = max(layout.split, key=lambda k: (layout.split[k], k))
        a, b, c = widest
        return (f"the messages from gpu {a} to gpu {b} need {layout.split[widest]} channels of {tgt.max_steps} "
                f"steps each ({layout.n_channels} channels in all), {tgt.name} allows {tgt.max_channels} channels")
    return None if changed else "no change of the layout shortens the longest threadblock"


def least_threadblocks(ranks: list[list], tgt: Target) -> None:
    """Refuse at once a schedule whose steps cannot fit however they are laid out: a gpu with
    more ops than ``max_tbs`` threadblocks of ``max_steps`` steps hold (nops only add to it)."""
    for r, ops in enumerate(ranks):
        need = -(-len(ops) // tgt.max_steps)
        if need > tgt.max_tbs:
            raise Unfit(f"gpu {r} needs at least {need} threadblocks ({len(ops)} steps, {tgt.max_steps} per "
                        f"threadblock), {tgt.name} allows {tgt.max_tbs}; synthesize it with fewer chunks or "
                        "pipeline stages", target=tgt.name, limit="threadblocks", allowed=tgt.max_tbs, need=need,
                        gpu=r)


def fit(tgt: Target, start: Layout, build) -> object:
    """Search layouts from ``start`` (see the module docstring): ``build(layout)`` returns
    (algo, blocks per rank); the first algo within every limit (``limits.check``) is returned,
    else BackendError naming what does not fit, the need and the limit."""
    best_need: tuple[int, int, int] | None = None  # (threadblocks, gpu, mode): the fullest gpu once steps fit
    reason, limit, allowed, wanted = "", "layout", None, None
    for merge, pack in MODES:
        layout = Layout(start.n_ranks, start.channels, start.lanes, merge, pack, dict(start.split),
                        list(start.attach), list(start.local))
        for _ in range(MAX_ROUNDS):
            algo, blocks = build(layout)
            overfull = [(g.id, tb.id, len(tb.steps), blocks[g.id]) for g in algo.gpus for tb in g.tbs
                        if len(tb.steps) > tgt.max_steps]
            fullest = max(algo.gpus, key=lambda g: (len(g.tbs), -g.id))
            if overfull and len(fullest.tbs) > tgt.max_tbs:
                # growing the layout only adds threadblocks: this mode cannot fit (at least this many)
                if best_need is None or len(fullest.tbs) < best_need[0]:
                    best_need = (len(fullest.tbs), fullest.id, MODES.index((merge, pack)))
                break
            if overfull:
                stop = grow(layout, overfull, tgt)
                if stop is not None:
                    reason = stop
                    if layout.n_channels > tgt.max_channels:
                        limit, allowed, wanted = "channels", tgt.max_channels, layout.n_channels
                    break
                continue
            problems = check(algo, tgt)
            if not problems:
                return algo
            if len(fullest.tbs) > tgt.max_tbs:
                if best_need is None or len(fullest.tbs) < best_need[0]:
                    best_need = (len(fullest.tbs), fullest.id, MODES.index((merge, pack)))
            else:
                reason, limit, allowed, wanted = str(problems[0]), "layout", None, None
            break
    if best_need is not None:
        need, gpu, mode = best_need
        how = ("", "send and receive connections sharing threadblocks, ",
               "send and receive connections sharing threadblocks and local ops filling them, ")[mode]
        raise Unfit(f"gpu {gpu} needs {need} threadblocks ({how}each within {tgt.max_steps} steps), "
                    f"{tgt.name} allows {tgt.max_tbs}", target=tgt.name, limit="threadblocks",
                    allowed=tgt.max_tbs, need=need, gpu=gpu)
    raise Unfit(f"the schedule does not fit {tgt.name}'s limits: {reason}", target=tgt.name, limit=limit,
                allowed=allowed, need=wanted)
