"""What the event loop needs of a Program, built once per Program (it does not depend on size).

* **Messages.** The k-th send from rank a to rank b on a channel and the k-th receive at b from
  a on that channel are one message (``ccl.program``'s matching rule). A message moves
  ``count`` slots over the flattened link (a, b).
* **Dependencies.** An op is issued once every op it depends on has completed (the Program's
  execution model lets a runtime run each op as soon as it is ready): the loop counts them
  (``remaining``) and issues the op when the last one completes (``out_ptr``/``out_idx``: the
  ops waiting for each op).

Everything is flat Python lists (the loop reads them one element at a time) derived with numpy
from the Program's columns. Ops and messages are numbered step by step (ops by (step, rank,
position), messages by their sends), the order the loop meets them in: on programs of millions
of ops that keeps the loop's memory accesses close together (rank-major numbers made it three
times slower at 1,024 ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ccl.errors import BackendError
from ccl.program import KIND_CODE, Program

SEND, RECV, COPY, REDUCE = (KIND_CODE[k] for k in ("send", "recv", "copy", "reduce"))


@dataclass
class ProgramGraph:
    """Ops are numbered in (step, rank, position) order: op i is row ``row[i]`` of the
    Program's op table. Messages are numbered in the order of their sends."""

    program: Program
    n_ops: int
    row: np.ndarray
    op_rank: list[int]
    op_step: np.ndarray
    count: np.ndarray
    op_message: list[int]  # message of a send or receive, -1 for local ops
    remaining: list[int]  # ops each op waits for
    out_ptr: list[int]  # ops waiting for op i: out_idx[out_ptr[i]:out_ptr[i+1]]
    out_idx: list[int]
    n_messages: int
    msg_send: np.ndarray  # op of each message's send
    msg_recv: np.ndarray
    msg_src: np.ndarray
    msg_dst: np.ndarray
    msg_count: np.ndarray
    msg_step: np.ndarray

    @classmethod
    def build(cls, program: Program) -> ProgramGraph:
        t = program.ops
        n_ops = len(t)
        n = program.n_ranks
        rank_row = t.rank_of()
        step_row = t.step.astype(np.int64)
        row = np.argsort(step_row, kind="stable")  # op id -> table row: rows are rank-major already
        inv = np.empty(n_ops, dtype=np.int64)
        inv[row] = np.arange(n_ops)
        rank = rank_row[row]
        kind = t.kind.astype(np.int64)[row]
        peer = t.peer.astype(np.int64)[row]
        channel = t.channel.astype(np.int64)[row]
        count = t.count.astype(np.int64)[row]
        # messages: the k-th send of (a, b, channel) with the k-th receive; in (step, rank,
        # position) order the ops of one key stay in list order, as steps rise along a list
        sends = np.flatnonzero(kind == SEND)
        recvs = np.flatnonzero(kind == RECV)
        chans = max(program.channels, 1)
        s_key = (rank[sends] * n + peer[sends]) * chans + channel[sends]
        r_key = (peer[recvs] * n + rank[recvs]) * chans + channel[recvs]
        s_order = np.argsort(s_key, kind="stable")
        r_order = np.argsort(r_key, kind="stable")
        if len(sends) != len(recvs) or not np.array_equal(s_key[s_order], r_key[r_order]):
            raise BackendError(f"program {program.name!r}: its sends and receives do not pair up (check it "
                               "with ccl.verify_program)")
        msg_send, msg_recv = sends[s_order], recvs[r_order]
        by_send = np.argsort(msg_send, kind="stable")
        msg_send, msg_recv = msg_send[by_send], msg_recv[by_send]
        n_msg = len(msg_send)
        op_message = np.full(n_ops, -1, dtype=np.int64)
        op_message[msg_send] = np.arange(n_msg)
        op_message[msg_recv] = np.arange(n_msg)

        # dependencies, in op ids
        owner_row = np.repeat(np.arange(n_ops, dtype=np.int64), np.diff(t.dep_ptr))
        dep_row = t.rank_ptr[rank_row[owner_row]] + t.dep_idx
        owner, dep = inv[owner_row], inv[dep_row]
        remaining = np.bincount(owner, minlength=n_ops)
        order = np.argsort(dep, kind="stable")
        out_ptr = np.zeros(n_ops + 1, dtype=np.int64)
        np.cumsum(np.bincount(dep, minlength=n_ops), out=out_ptr[1:])
        return cls(
            program=program, n_ops=n_ops, row=row, op_rank=rank.tolist(), op_step=step_row[row], count=count,
            op_message=op_message.tolist(), remaining=remaining.tolist(), out_ptr=out_ptr.tolist(),
            out_idx=owner[order].tolist(), n_messages=n_msg, msg_send=msg_send, msg_recv=msg_recv,
            msg_src=rank[msg_send], msg_dst=rank[msg_recv], msg_count=count[msg_send],
            msg_step=step_row[row][msg_send],
        )
