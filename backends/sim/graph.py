"""What the event loop needs of a Program, built once per Program (it does not depend on size).

* **Messages.** The k-th send from rank a to rank b on a channel and the k-th receive at b from
  a on that channel are one message (``ccl.core.program``'s matching rule). A message moves
  ``count`` slots over the flattened link (a, b). A push or a pull is a one-sided message of its
  own (its op is both its send and its receive; it completes when it lands) over the links
  between its rank and its switch (``msg_src`` or ``msg_dst`` is then the switch's vertex id);
  a pull waits for every push of the switch instances it reads (``ccl.core.program``), as an
  extra dependency edge from each of those pushes, the only edges between ranks.
* **Dependencies.** An op is issued once every op it depends on has completed (the Program's
  execution model lets a runtime run each op as soon as it is ready). ``op_lists`` gives the
  general loop, per op, how many ops it waits for and which ops wait for it.
* **Contraction.** When local ops take no time, a local op completes the moment its last
  dependency does, so every send and receive really waits for the sends and receives it
  reaches through local ops (``contracted``). ``message_lists`` gives the message loops the
  graph of messages: a message is ready when the sends and receives its two ops reach have
  completed (a send when its message left, a receive when it landed). Where that would cost
  the square of a chain of local ops, the graph keeps some local ops as nodes (``hubs``), each
  complete when what it waits for is. Local ops' times follow afterwards, on demand
  (``local_deps``; they never end a rank: every dependency is of the op's own rank).

Everything the loops read is flat ``array.array`` or lists (one element at a time), derived with
numpy from the Program's columns and built on first use. Ops and messages are numbered step by step (ops by
(step, rank, position), messages by their sends), the order the loop meets them in: on programs
of millions of ops that keeps the loop's memory accesses close together (rank-major numbers made
it three times slower at 1,024 ranks).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccl.core.errors import BackendError
from ccl.core.program import KIND_CODE, Program

SEND, RECV, COPY, REDUCE, PUSH, PUSH_REDUCE, PULL = (KIND_CODE[k] for k in ("send", "recv", "copy", "reduce", "push",
                                                                              "push-reduce", "pull"))


@dataclass
class ProgramGraph:
    """Ops are numbered in (step, rank, position) order: op i is row ``row[i]`` of the
    Program's op table; op ``dep_dst[k]`` waits for op ``dep_src[k]``. Messages are numbered in
    the order of their sends."""

    program: Program
    n_ops: int
    row: np.ndarray
    op_rank: np.ndarray
    op_step: np.ndarray
    count: np.ndarray
    op_message: np.ndarray  # message of a send, receive, push or pull, -1 for local ops
    is_recv: np.ndarray  # receives, pushes and pulls: complete when their message lands
    dep_src: np.ndarray
    dep_dst: np.ndarray
    n_messages: int
    msg_send: np.ndarray  # op of each message's send
    msg_recv: np.ndarray
    msg_src: np.ndarray
    msg_dst: np.ndarray
    msg_count: np.ndarray
    msg_step: np.ndarray
    msg_next: np.ndarray  # the next message of the same (src, dst, channel) in list order, -1 at the last
    # (for pushes and pulls: of the same rank, switch and direction)
    msg_one_sided: np.ndarray  # a push or pull (its send and receive are one op)
    msg_rank_src: np.ndarray  # the rank at each end (for a push or pull: its rank at both)
    msg_rank_dst: np.ndarray
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, program: Program) -> ProgramGraph:
        t = program.ops
        n_ops = len(t)
        n = program.n_ranks
        rank_row = t.rank_of()
        step_row = t.step
        row = _stable_order(step_row)  # op id -> table row: rows are rank-major already
        inv = np.empty(n_ops, dtype=np.int64)
        inv[row] = np.arange(n_ops)
        rank = rank_row[row]
        kind, peer, channel, count = (t.kind[row], t.peer[row], t.channel[row], t.count[row])

        # messages: the k-th send of (a, b, channel) with the k-th receive; in (step, rank,
        # position) order the ops of one key stay in list order, as steps rise along a list
        sends = np.flatnonzero(kind == SEND)
        recvs = np.flatnonzero(kind == RECV)
        chans = max(program.channels, 1)
        s_key = (rank[sends] * n + peer[sends]) * chans + channel[sends]
        r_key = (peer[recvs].astype(np.int64) * n + rank[recvs]) * chans + channel[recvs]
        s_order = np.argsort(s_key, kind="stable")
        r_order = np.argsort(r_key, kind="stable")
        if len(sends) != len(recvs) or not np.array_equal(s_key[s_order], r_key[r_order]):
            raise BackendError(f"program {program.name!r}: its sends and receives do not pair up (check it "
                               "with ccl.verify_program)")
        msg_send, msg_recv = sends[s_order], recvs[r_order]
        by_send = np.argsort(msg_send, kind="stable")
        msg_send, msg_recv = msg_send[by_send], msg_recv[by_send]
        n_pairs = len(msg_send)
        switched = np.flatnonzero(kind >= PUSH)  # pushes and pulls: one-sided messages, after the pairs
        msg_send = np.concatenate([msg_send, switched])
        msg_recv = np.concatenate([msg_recv, switched])
        n_msg = len(msg_send)
        op_message = np.full(n_ops, -1, dtype=np.int64)
        op_message[msg_send] = np.arange(n_msg)
        op_message[msg_recv] = np.arange(n_msg)
        # rule 3 of the execution model: a pair's messages on a channel are posted in list order
        # (and a rank's pushes to a switch, its pulls from it: ``ccl.core.program``'s rule 5)
        V = program.topology.n_vertices
        is_pull = kind[switched] == PULL
        msg_src, msg_dst = rank[msg_send].astype(np.int64), rank[msg_recv].astype(np.int64)
        rank_src, rank_dst = msg_src.copy(), msg_dst.copy()
        msg_src[n_pairs:] = np.where(is_pull, peer[switched], rank[switched])
        msg_dst[n_pairs:] = np.where(is_pull, rank[switched], peer[switched])
        pair_key = (msg_src * V + msg_dst) * chans + channel[msg_send]
        by_pair = np.argsort(pair_key, kind="stable")  # within a key: message (list) order
        msg_next = np.full(n_msg, -1, dtype=np.int64)
        same = pair_key[by_pair][1:] == pair_key[by_pair][:-1]
        msg_next[by_pair[:-1][same]] = by_pair[1:][same]
        del s_key, r_key, s_order, r_order, sends, recvs, by_send, pair_key, by_pair, same
        owner_row = np.repeat(np.arange(n_ops, dtype=np.int64), np.diff(t.dep_ptr))
        dep_row = t.rank_ptr[rank_row[owner_row]]
        dep_row += t.dep_idx
        dep_src = inv[dep_row].astype(np.int32)
        del dep_row
        dep_dst = inv[owner_row].astype(np.int32)
        del owner_row, inv, rank_row
        op_step = step_row[row].astype(np.int32)
        if len(switched):
            src_e, dst_e = _pull_edges(kind, peer, t.slot[row], count, op_step, program.topology.n_vertices)
            dep_src = np.concatenate([dep_src, src_e.astype(np.int32)])
            dep_dst = np.concatenate([dep_dst, dst_e.astype(np.int32)])
        one_sided = np.zeros(n_msg, dtype=bool)
        one_sided[n_pairs:] = True
        return cls(
            program=program, n_ops=n_ops, row=row, op_rank=rank.astype(np.int32), op_step=op_step,
            count=count.astype(np.int32), op_message=op_message.astype(np.int32), is_recv=(kind == RECV) | (kind >= PUSH),
            dep_src=dep_src, dep_dst=dep_dst, n_messages=n_msg, msg_send=msg_send, msg_recv=msg_recv,
            msg_src=msg_src, msg_dst=msg_dst, msg_count=count[msg_send].astype(np.int64),
            msg_step=op_step[msg_send].astype(np.int64), msg_next=msg_next, msg_one_sided=one_sided,
            msg_rank_src=rank_src, msg_rank_dst=rank_dst,
        )

    def op_lists(self) -> tuple[list[int], list[int], list[int]]:
        """For the general loop: (ops each op waits for, out_ptr, out_idx): the ops waiting for
        op i are ``out_idx[out_ptr[i]:out_ptr[i+1]]``."""
        if "ops" not in self._cache:
            n = self.n_ops
            remaining = np.bincount(self.dep_dst, minlength=n)
            order = np.argsort(self.dep_src, kind="stable")
            out_ptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.dep_src, minlength=n), out=out_ptr[1:])
            self._cache["ops"] = (remaining.tolist(), out_ptr.tolist(), self.dep_dst[order].tolist())
        return self._cache["ops"]

    def contracted(self, budget: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """(src, dst) arrays: the send or receive dst waits, directly or through local ops only,
        for the send or receive src (deps on local ops replaced by their own, repeatedly;
        unordered, and a pair may repeat, which only counts the same wait twice). Each round
        expands only the waits still passing through a local op. Only sends and receives are
        contracted: a local op's own waits (``local_deps``) would cost the square of a chain's
        length (a reduction accumulating many pieces: 144 million pairs for the 24-stage
        reducescatter on dgx-h100:16, whose sends wait for 322,560). ``budget``: None once the
        expansions exceed it (many paths through local ops: the message graph then keeps some
        of them, ``hubs``)."""
        if "contracted" not in self._cache:
            out = self._contract(self.op_message >= 0, budget)
            if out is None:
                return None
            self._cache["contracted"] = out
        return self._cache["contracted"]

    def _contract(self, kept: np.ndarray, budget: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """(src, dst): the kept op dst waits, directly or through ops not kept (local ops
        only), for the kept op src; None once the expansions exceed ``budget``."""
        n = self.n_ops
        local = ~kept
        in_ptr, in_idx = self._waits_of(local)
        by_local = local[self.dep_dst]
        src, dst = self.dep_src[~by_local].astype(np.int64), self.dep_dst[~by_local].astype(np.int64)
        del by_local
        limit = 4 * len(src) + 1024
        out_src: list[np.ndarray] = []
        out_dst: list[np.ndarray] = []
        work = 0
        while len(src):
            through = local[src]
            out_src.append(src[~through])
            out_dst.append(dst[~through])
            via, to = src[through], dst[through]
            counts = in_ptr[via + 1] - in_ptr[via]
            work += int(counts.sum())
            if budget is not None and work > budget:
                return None
            which = np.repeat(np.arange(len(via), dtype=np.int64), counts)
            off = np.arange(len(which), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            src = in_idx[in_ptr[via][which] + off]
            dst = to[which]
            if len(src) > limit:  # many paths through local ops: drop repeats before going on
                key = _sorted_unique(dst * max(n, 1) + src)
                dst, src = np.divmod(key, max(n, 1))
        return (np.concatenate(out_src) if out_src else src, np.concatenate(out_dst) if out_dst else dst)

    def _waits_of(self, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(in_ptr, in_idx): the ops op i waits for are ``in_idx[in_ptr[i]:in_ptr[i+1]]``, for
        the ops marked in ``ops`` (none for the others)."""
        n = self.n_ops
        mine = ops[self.dep_dst]
        dst, src = self.dep_dst[mine], self.dep_src[mine]
        in_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=in_ptr[1:])
        return in_ptr, src[np.argsort(dst, kind="stable")]

    def local_deps(self) -> tuple[np.ndarray, list[int], list[int]]:
        """For the times of local ops (``Engine.op_times``): (the local ops in an order where
        each comes after the ops it waits for, in_ptr, in_idx): the ops local op i waits for
        are ``in_idx[in_ptr[i]:in_ptr[i+1]]``. Op numbers are such an order when every Program
        list is sorted by step (``lower``'s are); otherwise Kahn's order."""
        if "local" not in self._cache:
            n = self.n_ops
            local = self.op_message < 0
            in_ptr, in_idx = self._waits_of(local)
            if np.all(self.dep_src < self.dep_dst):
                order = np.flatnonzero(local)
            else:
                remaining, out_ptr, out_idx = self.op_lists()
                left = list(remaining)
                queue = [p for p in range(n) if not left[p]]
                for p in queue:  # grows as ops become ready
                    for k in range(out_ptr[p], out_ptr[p + 1]):
                        w = out_idx[k]
                        left[w] -= 1
                        if not left[w]:
                            queue.append(w)
                ordered = np.asarray(queue, dtype=np.int64)
                order = ordered[local[ordered]]
            self._cache["local"] = (order, in_ptr.tolist(), in_idx.tolist())
        return self._cache["local"]

    def contraction_is_cheap(self) -> bool:
        """Whether ``contracted`` costs little more than the dependencies themselves (computing
        it keeps the result); otherwise the message graph keeps some local ops (``hubs``). The
        search's schedules expand about half their dependencies or far more (dgx-h100:16 at
        64 MiB: the 24-stage reducescatter 645,120 of 1,124,040; the 16-stage allreduce gives up
        past twice its 2,368,080, 0.2 s)."""
        if "cheap" not in self._cache:
            self._cache["cheap"] = self.contracted(budget=2 * len(self.dep_src) + 100_000) is not None
        return self._cache["cheap"]

    def hubs(self) -> np.ndarray:
        """The local ops the message graph keeps as nodes of their own (ascending): none when
        the contraction is cheap, else every local op that more than one op waits for and
        that reaches more than one kept op (``_many``). A local op contracted away then either
        has one op waiting for it, or reaches one kept op at most: each wait of the
        contracted graph stands for one of the Program's (a reduction chain whose result
        several sends forward, as an allreduce's halves meet: the 16-stage allreduce on
        dgx-h100:16 would contract to 530 million waits)."""
        if "hubs" not in self._cache:
            if self.contraction_is_cheap():
                self._cache["hubs"] = np.zeros(0, dtype=np.int64)
            else:
                self._cache["hubs"] = np.flatnonzero(self._many())
        return self._cache["hubs"]

    def _many(self) -> np.ndarray:
        """Per op, whether it is a hub: a local op that more than one op waits for, and that
        waits for more than one op, or for one local op alone that is like it but for being
        waited for once (so reaches more than one kept op, counted conservatively)."""
        n = self.n_ops
        local = self.op_message < 0
        waits = np.bincount(self.dep_dst, minlength=n)
        waited = np.bincount(self.dep_src, minlength=n) >= 2
        multi = local & (waits >= 2)
        hub = multi & waited
        single = local[self.dep_dst] & (waits[self.dep_dst] == 1)
        ops, pred = self.dep_dst[single].astype(np.int64), self.dep_src[single].astype(np.int64)
        while len(ops):  # along chains of single waits from a multi op that is not a hub
            grows = multi[pred] & ~hub[pred] & local[pred] & ~multi[ops]
            if not np.any(grows):
                break
            multi[ops[grows]] = True
            hub[ops[grows]] = waited[ops[grows]]
            ops, pred = ops[~grows], pred[~grows]
        return hub

    def message_lists(self, slices: int = 1) -> tuple[array, array, array]:
        """For the message loops, over the instances (q = message * slices + j, then the hubs'
        instances n_q + h * slices + j, with n_q message instances and h a hub's place in
        ``hubs``): (the completions each waits for, out_ptr, out_idx) over the completions (2q:
        message instance q's send, 2q+1: its receive, 2 n_q + h * slices + j: the hub
        instance's); the instances waiting for completion c are
        ``out_idx[out_ptr[c]:out_ptr[c+1]]``. Slice j waits for slice j of what it waits for.
        A hub instance completes when its waits are in (local ops take no time)."""
        key = f"messages/{slices}"
        if key not in self._cache:
            hubs = self.hubs()
            network = self.op_message >= 0
            if len(hubs) or "contracted" not in self._cache:
                kept = network.copy()
                kept[hubs] = True
                src, dst = self._contract(kept)  # type: ignore[misc]  # no budget: never None
            else:
                src, dst = self.contracted()  # type: ignore[misc]
            m = slices
            n_msg, n_q = self.n_messages, self.n_messages * m
            hub_of = np.full(self.n_ops, -1, dtype=np.int64)
            hub_of[hubs] = np.arange(len(hubs))
            # per op: its target (message or n_msg + hub) and completion (2 message + side, or hub)
            t_net = network[dst]
            target = np.where(t_net, self.op_message[dst], n_msg + hub_of[dst]).astype(np.int64)
            s_net = network[src]
            side = np.where(s_net, self.is_recv[src], 0).astype(np.int64)
            origin = np.where(s_net, self.op_message[src], hub_of[src]).astype(np.int64)
            if m > 1:
                j = np.tile(np.arange(m, dtype=np.int64), len(target))
                target = np.repeat(target, m) * m + j
                origin = np.repeat(origin, m) * m + j
                side = np.repeat(side, m)
                s_net = np.repeat(s_net, m)
            done = np.where(s_net, 2 * origin + side, 2 * n_q + origin)
            nodes = 2 * n_q + len(hubs) * m
            out_ptr = np.zeros(nodes + 1, dtype=np.int64)
            np.cumsum(np.bincount(done, minlength=nodes), out=out_ptr[1:])
            remaining = np.bincount(target, minlength=n_q + len(hubs) * m)
            has_prev = np.zeros(self.n_messages, dtype=np.int64)  # waits for its predecessor's posting
            has_prev[self.msg_next[self.msg_next >= 0]] = 1
            remaining[:n_q] += np.repeat(has_prev, m)
            out_idx = target[np.argsort(done, kind="stable")]
            self._cache[key] = (as_array("q", remaining), as_array("q", out_ptr), as_array("q", out_idx))
        return self._cache[key]


def _pull_edges(kind: np.ndarray, peer: np.ndarray, slot: np.ndarray, count: np.ndarray, step: np.ndarray,
                n_vertices: int) -> tuple[np.ndarray, np.ndarray]:
    """(push, pull) op pairs: every pull after every push of the switch instances it reads
    ((switch, slot, step): a pull of step s reads what step s - 1 pushed), each pair once."""
    push = np.flatnonzero((kind == PUSH) | (kind == PUSH_REDUCE))
    pull = np.flatnonzero(kind == PULL)

    def units(ops: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray]:
        c = count[ops].astype(np.int64)
        which = np.repeat(np.arange(len(ops), dtype=np.int64), c)
        off = np.arange(len(which), dtype=np.int64) - np.repeat(np.cumsum(c) - c, c)
        at = ops[which]
        return at, slot[at].astype(np.int64) + off, peer[at].astype(np.int64), step[at].astype(np.int64) + shift

    push_op, push_slot, push_sw, push_step = units(push, 0)
    pull_op, pull_slot, pull_sw, pull_step = units(pull, -1)
    span = int(max(push_slot.max(initial=0), pull_slot.max(initial=0))) + 1

    def key_of(sw: np.ndarray, sl: np.ndarray, st: np.ndarray) -> np.ndarray:
        return ((st + 1) * n_vertices + sw) * span + sl

    push_key = key_of(push_sw, push_slot, push_step)
    order = np.argsort(push_key, kind="stable")
    push_key, push_op = push_key[order], push_op[order]
    pull_key = key_of(pull_sw, pull_slot, pull_step)
    lo = np.searchsorted(push_key, pull_key, side="left")
    hi = np.searchsorted(push_key, pull_key, side="right")
    which = np.repeat(np.arange(len(pull_key), dtype=np.int64), hi - lo)
    off = np.arange(len(which), dtype=np.int64) - np.repeat(np.cumsum(hi - lo) - (hi - lo), hi - lo)
    src, dst = push_op[lo[which] + off], pull_op[which]
    pair = np.unique(dst * max(len(kind), 1) + src)
    return pair % max(len(kind), 1), pair // max(len(kind), 1)


def _stable_order(steps: np.ndarray) -> np.ndarray:
    """A stable argsort of step numbers (radix sort when they fit in 16 bits)."""
    if len(steps) and -1 <= int(steps.min()) and int(steps.max()) < 2**15 - 1:
        return np.argsort((steps + 1).astype(np.int16), kind="stable")
    return np.argsort(steps, kind="stable")


def as_array(typecode: str, values: np.ndarray) -> array:
    """A flat ``array.array`` of numpy values: the loops index it one element at a time, and it
    is compact and contiguous where a list would hold one Python object per element."""
    dtype = {"q": np.int64, "d": np.float64}[typecode]
    return array(typecode, np.ascontiguousarray(values, dtype=dtype).tobytes())


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    a = np.sort(a)
    return a[np.r_[True, a[1:] != a[:-1]]] if len(a) else a
