"""Program -> MSCCL XML (``Algo``): threadblocks, steps, dependencies.

Threadblocks and channels (``assign``): every rank's ops are put in the key order (Program
step, sends, receives, local ops), which every threadblock follows; that order is a
topological order of the Program in which a wait across gpus always goes to a lower (step,
class), so the threadblocks cannot wait on each other in a cycle (the proof is in ``assign``).
Each connection gets its own threadblock: the sends to one peer on one channel, and apart the
receives from one peer on one channel. A local op runs in the threadblock of the receive it
follows (the receive whose data it consumes, when that is the latest thing it waits for) while
that one has room, else in one of the rank's local threadblocks. ``assign.fit`` searches the
layout that fits the target: connections with many messages spread over more channels, fewer
local ops beside the receives, more local threadblocks, and when a gpu still has too many
threadblocks, a send and a receive connection share one (what published files do; it relies on
the runtime's connection buffer to absorb a send).

Fusion (targets that run fused steps; RCCL does not): a receive into a staging chunk that only a following reduction reads becomes one
``rrc`` step (receive, add into the destination); a receive whose chunks are only sent on
unchanged could become ``rcs``, but that needs the receive and the send in one threadblock,
which the one-queue-per-connection layout above does not give, so it is left as ``r`` + ``s``.

Dependencies: a step waits (``depid``/``deps``) for the steps of other threadblocks holding the
ops its ops depend on, reduced to the latest step per threadblock and dropping what another
wait already implies (steps of a threadblock finish in order); a second or later wait goes into
a ``nop`` before the step. ``hasdep`` marks every step another waits for.

Out of place, output chunks that start as a copy of input chunks are copied first (``cpy``
steps in the local threadblock; every step touching them waits for the copy). A file for both
uses keeps the copies: in place they copy a chunk onto itself.

Limits: a message longer than the target's ``cnt`` limit is cut into several; the layout
search above fits the steps per threadblock, the threadblocks per gpu, the channels and the
threadblocks per channel. What still does not fit is an error naming the gpu, what it needs
and the target's limit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ccl.core.errors import BackendError, InputError
from ccl.core.program import COPY, RECV, REDUCE, SEND, Program

from . import assign
from .limits import Target, Unfit
from .model import BUFFER_LETTERS, Algo, Gpu, Step, Threadblock


@dataclass
class _XOp:
    """An op of one rank on its way to a step: ``kind`` is a step type."""

    kind: str  # s, r, rrc, cpy, re
    src: tuple[str, int]  # buffer letter, chunk offset (-1: unused)
    dst: tuple[str, int]
    cnt: int
    peer: int
    channel: int
    deps: list[int]  # indices of earlier _XOps of the rank
    conn: int = 0  # k-th message on its (peer, channel) connection
    step: int = -1  # the Program step it comes from (-1: out-of-place copies)
    to: int = -1  # rcs, rrcs: the peer the received data goes on to

    @property
    def receives(self) -> bool:
        return self.kind in ("r", "rrc", "rcs", "rrcs")

    @property
    def sends(self) -> bool:
        return self.kind in ("s", "rcs", "rrcs")


def _ops_of(program: Program, rank: int, copies: bool, fuse: bool) -> list[_XOp]:
    """Rank ``rank``'s ops as _XOps: out-of-place copies first (with ``copies``), receive +
    reduce pairs fused into ``rrc``."""
    ops = program.ranks[rank]
    out: list[_XOp] = []
    index: dict[int, int] = {}  # program op -> _XOp
    alias_copy: dict[int, int] = {}  # output slot -> the _XOp copying into it
    if copies:
        for a, j, c in program.alias_runs[rank]:
            alias_copy.update({j + x: len(out) for x in range(c)})
            out.append(_XOp("cpy", ("i", a), ("o", j), c, -1, 0, []))
    fused = _fusable(ops) if fuse else {}

    def touches(op) -> list[int]:
        slots = []
        for buf, idx in ((op.buf, op.index), (op.src_buf, op.src_index)):
            if buf == "output":
                slots.extend(alias_copy[idx + x] for x in range(op.count) if idx + x in alias_copy)
        return slots

    for i, op in enumerate(ops):
        if i in fused.values():
            continue
        deps = sorted({index[d] for d in op.deps if d in index} | set(touches(op)))
        if op.kind == SEND:
            x = _XOp("s", (BUFFER_LETTERS[op.buf], op.index), ("o", -1), op.count, op.peer, op.channel, deps)
        elif op.kind == RECV:
            if i in fused:
                red = ops[fused[i]]  # its other deps all come before the receive (see _fusable)
                deps = sorted(set(deps) | {index[d] for d in red.deps if d != i and d in index} | set(touches(red)))
                here = (BUFFER_LETTERS[red.buf], red.index)
                x = _XOp("rrc", here, here, op.count, op.peer, op.channel, deps)
                index[fused[i]] = len(out)
            else:
                x = _XOp("r", ("i", -1), (BUFFER_LETTERS[op.buf], op.index), op.count, op.peer, op.channel, deps)
        else:
            x = _XOp("cpy" if op.kind == COPY else "re", (BUFFER_LETTERS[op.src_buf], op.src_index),
                     (BUFFER_LETTERS[op.buf], op.index), op.count, -1, 0, deps)
        x.step = op.step
        index[i] = len(out)
        out.append(x)
    return out


def _fusable(ops) -> dict[int, int]:
    """receive -> the reduce that is the only reader of what it received (into staging that
    the reduce adds into its destination)."""
    readers: dict[int, list[int]] = defaultdict(list)  # writer op -> ops reading its slots
    last: dict[tuple[str, int], int] = {}
    for i, op in enumerate(ops):
        srcs = []
        if op.kind == SEND:
            srcs = [(op.buf, op.index + x) for x in range(op.count)]
        elif op.kind in (COPY, REDUCE):
            srcs = [(op.src_buf, op.src_index + x) for x in range(op.count)]
            if op.kind == REDUCE:
                srcs += [(op.buf, op.index + x) for x in range(op.count)]
        for s in srcs:
            w = last.get(s)
            if w is not None and (not readers[w] or readers[w][-1] != i):
                readers[w].append(i)
        if op.kind != SEND:
            for x in range(op.count):
                last[(op.buf, op.index + x)] = i
    out = {}
    for i, op in enumerate(ops):
        if op.kind != RECV or op.buf != "scratch":
            continue
        rd = readers.get(i, [])
        if len(rd) != 1:
            continue
        red = ops[rd[0]]
        if red.kind == REDUCE and red.src_buf == "scratch" and red.src_index == op.index and \
                red.count == op.count and i in red.deps and all(d < i for d in red.deps if d != i):
            out[i] = rd[0]  # (a reduce waiting for ops after the receive cannot move up to it)
    return out


def _cut(ops: list[_XOp], max_cnt: int) -> list[_XOp]:
    """Ops moving more than ``max_cnt`` chunks as several ops (a message as several messages)."""
    if all(x.cnt <= max_cnt for x in ops):
        return ops
    out: list[_XOp] = []
    last: dict[int, int] = {}  # old index -> index of its last piece
    first: dict[int, int] = {}
    for i, x in enumerate(ops):
        deps = sorted({p for d in x.deps for p in range(first[d], last[d] + 1)})
        first[i] = len(out)
        for lo in range(0, x.cnt, max_cnt):
            c = min(max_cnt, x.cnt - lo)
            src = x.src if x.src[1] < 0 else (x.src[0], x.src[1] + lo)
            dst = x.dst if x.dst[1] < 0 else (x.dst[0], x.dst[1] + lo)
            out.append(replace(x, src=src, dst=dst, cnt=c, deps=list(deps)))
        last[i] = len(out) - 1
    return out


def _forward(ops: list[_XOp]) -> tuple[list[_XOp], dict[tuple[int, int], int]]:
    """Fuse a receive and the send that forwards exactly what it received into one ``rcs`` (or
    ``rrcs`` after a receive-reduce), in a threadblock that owns both connections. Within a
    Program step, such a threadblock runs its sends before its receives (a send never waits for
    a receive of its own step, and a receive that blocked a send of its step could deadlock a
    ring); a forward fuses only where that keeps its connection's message order and waits for
    nothing the receive does not. Returns the ops (in that order) and the merged connections."""
    cand: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    for si, x in enumerate(ops):
        if x.kind != "s":
            continue
        for d in sorted(x.deps, reverse=True):
            y = ops[d]
            if y.kind in ("r", "rrc") and y.dst == x.src and y.cnt == x.cnt and y.channel == x.channel:
                if all(e < d for e in x.deps if e != d):
                    cand[(y.peer, x.peer, x.channel)].append((d, si))
                break
    original = [replace(x, deps=list(x.deps)) for x in ops]
    forwards: dict[tuple[int, int], int] = {}
    used_send: set[tuple[int, int]] = set()
    for (q, p, c), _pairs in sorted(cand.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if (q, c) in forwards or (p, c) in used_send:
            continue
        forwards[(q, c)] = p
        used_send.add((p, c))
    if not forwards:
        return ops, forwards
    def key(i: int) -> tuple[int, int, int]:
        x = ops[i]
        return (x.step, 0 if x.kind == "s" else 1 if x.receives else 2, i)

    fused: dict[int, int] = {}  # send -> receive it joins
    for (q, p, c), pairs in sorted(cand.items()):
        if forwards.get((q, c)) != p:
            continue
        # sends to p on c before the forward must not come after the receive in the threadblock
        prefix, top = {}, -2
        for i, x in enumerate(ops):
            if x.kind == "s" and x.peer == p and x.channel == c:
                prefix[i] = top
                top = max(top, x.step)
        mine = {si: d for d, si in pairs if prefix[si] <= ops[d].step and d not in fused.values()}
        # and a send that stays a send must not queue behind a receive (it would wait for data it
        # does not need): merge only where every other send comes before every receive
        first_recv = min(key(i) for i, x in enumerate(ops) if x.receives and x.peer == q and x.channel == c)
        others = [key(i) for i, x in enumerate(ops) if x.kind == "s" and x.peer == p and x.channel == c
                  and i not in mine]
        if not mine or (others and max(others) > first_recv):
            del forwards[(q, c)]
            continue
        fused.update(mine)
    if not fused:
        return ops, {}
    for si, d in fused.items():
        y, x = ops[d], ops[si]
        y.kind = "rcs" if y.kind == "r" else "rrcs"
        y.to = x.peer
        y.deps = sorted(set(y.deps) | {e for e in x.deps if e != d})
    keep = [i for i in range(len(ops)) if i not in fused]
    order = sorted(keep, key=key)
    new_index = {i: k for k, i in enumerate(order)}
    for si, d in fused.items():
        new_index[si] = new_index[d]
    out = []
    for i in order:
        x = replace(ops[i], deps=sorted({new_index[e] for e in ops[i].deps} - {new_index[i]}))
        if x.deps and x.deps[-1] >= len(out):  # not expected for a well-leveled Program: do not fuse
            return original, {}
        out.append(x)
    return out, forwards


def _steps(rank: int, ops: list[_XOp], tb_of: list[int], n_tbs: int, partner) -> list[list[Step]]:
    """The steps of every threadblock of a rank, with waits (depid/deps and nops); hasdep is
    set afterwards."""
    steps: list[list[Step]] = [[] for _ in range(n_tbs)]
    where_op: list[tuple[int, int]] = []  # op -> (tb, step index)
    # implied[t][s]: what step s of tb t finishing implies: tb -> latest step known finished
    implied: list[dict[int, dict[int, int]]] = [{} for _ in range(n_tbs)]
    current: list[dict[int, int]] = [{} for _ in range(n_tbs)]
    for i, x in enumerate(ops):
        t = tb_of[i]
        have = dict(current[t])
        targets: dict[int, int] = {}
        for d in x.deps:
            u, s = where_op[d]
            if u != t and s > targets.get(u, -1):
                targets[u] = s
        need = []  # waits another wait (or the threadblock's own past) does not imply
        for u, s in sorted(targets.items(), key=lambda us: (-len(implied[us[0]][us[1]]), us)):
            if have.get(u, -1) >= s:
                continue
            need.append((u, s))
            for v, z in implied[u][s].items():
                if z > have.get(v, -1):
                    have[v] = z
        for u, s in need[:-1]:
            steps[t].append(Step(len(steps[t]), "nop", "i", -1, "o", -1, 0, u, s, 0))
        depid, deps = need[-1] if need else (-1, -1)
        src, dst = x.src, x.dst
        if x.kind == "s":
            dst = partner(rank, "s", x.peer, x.channel)
        if x.receives:
            came_from = partner(rank, "r", x.peer, x.channel)
            if x.kind in ("r", "rcs"):
                src = came_from
        if x.kind in ("rcs", "rrcs"):
            partner(rank, "s", x.to, x.channel)
        here = len(steps[t])
        steps[t].append(Step(here, x.kind, src[0], src[1], dst[0], dst[1], x.cnt, depid, deps, 0))
        have[t] = here
        current[t] = have
        implied[t][here] = have
        where_op.append((t, here))
    return steps


def check_exportable(program: Program, tgt: Target) -> None:
    """InputError when the Program reduces in a switch: an XML file's steps are sends,
    receives, copies and reductions between GPUs, and the runtimes that run them (MSCCL,
    RCCL, MSCCL++) have no step that pushes into or pulls from a reducing switch."""
    if program.n_switch_ops:
        raise InputError(f"{tgt.name} cannot run schedule {program.name!r}: it reduces in a switch "
                         f"({program.n_switch_ops} push and pull ops: NVLink SHARP or InfiniBand SHARP), and {tgt.name} "
                         "XML has no in-switch reduction step; simulate it, or run it with `ccl run` (switch ops "
                         "emulated)")


def export(program: Program, tgt: Target, *, name: str | None = None, proto: str = "Simple",
           in_place: bool, out_of_place: bool, min_bytes: int = 0, max_bytes: int = 0, forward: bool = True) -> Algo:
    """The Algo of a verified Program for ``tgt``; BackendError when it cannot fit the target.
    ``forward``: fuse receives with the sends forwarding them (rcs, rrcs) where the target runs
    fused steps."""
    check_exportable(program, tgt)
    coll = program.collective
    kind = coll.kind
    if kind not in tgt.coll:
        raise Unfit(f"{tgt.name} has no {kind} collective (it runs {', '.join(sorted(tgt.coll))})", target=tgt.name,
                    limit="collective", allowed=None, need=None)
    if not (in_place or out_of_place):
        raise BackendError("a file must be usable in place, out of place or both")
    n, k = coll.n_ranks, coll.chunk_factor
    blocked = kind in ("allgather", "reducescatter", "alltoall")
    nchunks = n * k if blocked else k
    base = [assign.order(_cut(_ops_of(program, r, out_of_place, tgt.fused), tgt.max_cnt)) for r in range(n)]
    assign.least_threadblocks(base, tgt)
    start, counts = assign.initial(base, program.channels, tgt)
    if start.n_channels > tgt.max_channels:
        (a, b, chan), most = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        raise Unfit(
            f"the schedule does not fit {tgt.name}: gpu {a} sends {most} messages to gpu {b} on channel {chan}, and "
            f"one connection's messages are steps of one threadblock ({tgt.max_steps} at most) on at most "
            f"{tgt.max_channels} channels ({tgt.max_steps * tgt.max_channels // program.channels} messages); "
            "synthesize it with fewer chunks or pipeline stages (the runtime loops over the buffer itself)",
            target=tgt.name, limit="channels", allowed=tgt.max_channels, need=start.n_channels, gpu=a)

    def build(layout: assign.Layout) -> tuple[Algo, list[assign.Blocks]]:
        ranks = [[replace(x, deps=list(x.deps)) for x in ops] for ops in base]
        return _build(program, ranks, tgt, name or program.name, proto, in_place, out_of_place, min_bytes,
                      max_bytes, nchunks, layout, counts, forward)

    return assign.fit(tgt, start, build)


def _build(program: Program, ranks: list[list[_XOp]], tgt: Target, name: str, proto: str, in_place: bool,
           out_of_place: bool, min_bytes: int, max_bytes: int, nchunks: int, layout: assign.Layout,
           counts: dict[tuple[int, int, int], int], forward: bool) -> tuple[Algo, list[assign.Blocks]]:
    coll = program.collective
    n = coll.n_ranks
    assign.place_channels(ranks, layout, counts)
    forwards: list[dict[tuple[int, int], int]] = [{} for _ in ranks]
    if tgt.fused and forward and not layout.merge:
        for r in range(n):
            ranks[r], forwards[r] = _forward(ranks[r])
    # where every message comes from and lands, for the other end's srcbuf/dstbuf (informational)
    ends: dict[tuple[str, int, int, int, int], tuple[str, int]] = {}
    for r, ops in enumerate(ranks):
        counter: dict[tuple[str, int, int], int] = defaultdict(int)
        for x in ops:
            if x.receives:
                key = ("r", x.peer, x.channel)
                ends[("r", x.peer, r, x.channel, counter[key])] = x.dst
                counter[key] += 1
            if x.sends:
                to = x.to if x.kind != "s" else x.peer
                key = ("s", to, x.channel)
                ends[("s", r, to, x.channel, counter[key])] = x.src if x.kind == "s" else x.dst
                counter[key] += 1
    seq: dict[tuple[int, str, int, int], int] = defaultdict(int)

    def partner(rank: int, role: str, peer: int, chan: int) -> tuple[str, int]:
        """The other end of this rank's next message on a connection: for a send ("s"), where
        the receiver puts it; for a receive ("r"), where the sender takes it from."""
        key = (rank, role, peer, chan)
        k = seq[key]
        seq[key] += 1
        if role == "s":
            return ends.get(("r", rank, peer, chan, k), ("o", -1))
        return ends.get(("s", peer, rank, chan, k), ("i", -1))

    gpus = []
    blocks = []
    for r, ops in enumerate(ranks):
        layout_r = assign.threadblocks(ops, r, layout, forwards[r])
        blocks.append(layout_r)
        tb_of, shape = layout_r.tb_of, layout_r.shape
        steps = _steps(r, ops, tb_of, len(shape), partner)
        waited = {(s.depid, s.deps) for tb in steps for s in tb if s.depid != -1}
        tbs = []
        for t, (send, recv, chan) in enumerate(shape):
            body = tuple(Step(s.s, s.type, s.srcbuf, s.srcoff, s.dstbuf, s.dstoff, s.cnt, s.depid, s.deps,
                              1 if (t, s.s) in waited else 0) for s in steps[t])
            tbs.append(Threadblock(t, send, recv, chan, body))
        gpus.append(Gpu(r, len(coll.inputs[r]), len(coll.outputs[r]), len(program.scratch[r]), tuple(tbs)))
    used = max((tb.chan for g in gpus for tb in g.tbs), default=0) + 1
    algo = Algo(name=name, proto=proto, nchannels=max(used, program.channels), nchunksperloop=nchunks, ngpus=n,
                coll=tgt.coll[coll.kind], inplace=int(in_place), outofplace=int(out_of_place),
                min_bytes=min_bytes, max_bytes=max_bytes, gpus=tuple(gpus))
    return algo, blocks
