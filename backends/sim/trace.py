"""Chrome trace JSON (Trace Event Format) of a simulation, for Perfetto and chrome://tracing.

Layout: one process per rank ("rank r"); inside it one thread (track) per lane of every link
the rank sends on ("-> d" or "-> d lane k"; pushes "-> switch S", pulls "<- switch S"), plus
"local ops" for its copies and reductions.
Every message (every slice of it) is one complete event ("ph": "X", category "message") on the
track of the lane it used, from when it took the lane to when it released it; every local op is
one on the rank's local track, from when it was issued to when it finished (no time unless local
copies have a bandwidth). Events are named after what they move, with args: the message number
(or the op's index in its rank's list), step, slice, chunk (the smallest input-chunk id in the
value moved) and chunks (how many input chunks are summed in it), bytes, source and destination
slots, and for messages when the data landed. Times are microseconds, the format's unit.
``TRACE_SCHEMA`` is a JSON schema of exactly the subset emitted; the tests validate traces
against it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from .files import write_atomic

if TYPE_CHECKING:
    from .simulator import Simulation

BUFFER_NAMES = ("input", "output", "scratch")

TRACE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Chrome Trace Event Format: the subset ccl emits",
    "type": "object",
    "required": ["traceEvents", "displayTimeUnit", "otherData"],
    "additionalProperties": False,
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
        "traceEvents": {
            "type": "array",
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["name", "ph", "pid", "tid", "args"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"enum": ["process_name", "thread_name", "process_sort_index",
                                              "thread_sort_index"]},
                            "ph": {"const": "M"},
                            "pid": {"type": "integer", "minimum": 0},
                            "tid": {"type": "integer", "minimum": 0},
                            "args": {
                                "type": "object",
                                "minProperties": 1,
                                "properties": {"name": {"type": "string"},
                                               "sort_index": {"type": "integer"}},
                                "additionalProperties": False,
                            },
                        },
                    },
                    {
                        "type": "object",
                        "required": ["name", "cat", "ph", "ts", "dur", "pid", "tid", "args"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "cat": {"enum": ["message", "copy", "reduce"]},
                            "ph": {"const": "X"},
                            "ts": {"type": "number", "minimum": 0},
                            "dur": {"type": "number", "minimum": 0},
                            "pid": {"type": "integer", "minimum": 0},
                            "tid": {"type": "integer", "minimum": 0},
                            "args": {
                                "type": "object",
                                "required": ["step", "slice", "chunk", "chunks", "bytes", "src", "dst"],
                                "additionalProperties": False,
                                "properties": {
                                    "message": {"type": "integer", "minimum": 0},
                                    "op": {"type": "integer", "minimum": 0},
                                    "step": {"type": "integer", "minimum": -1},
                                    "slice": {"type": "integer", "minimum": 0},
                                    "chunk": {"type": ["integer", "null"], "minimum": 0},
                                    "chunks": {"type": "integer", "minimum": 0},
                                    "bytes": {"type": "number", "minimum": 0},
                                    "src": {"type": "string"},
                                    "dst": {"type": "string"},
                                    "lands_us": {"type": "number", "minimum": 0},
                                },
                            },
                        },
                    },
                ]
            },
        },
    },
}


def chunk_labels(sim: Simulation) -> tuple[list[tuple[int | None, int]], list[tuple[int | None, int]]]:
    """(smallest input-chunk id, number of chunks) of the value every message moves (its first
    slot), by message, and of the value every local op writes, by op (graph numbering), from
    running the Program on such labels: per step, every send reads, every receive writes, then
    every rank's local ops run in list order (the order a well-leveled Program allows)."""
    program, g = sim.program, sim.graph
    coll = program.collective
    table = program.ops
    state: dict[tuple[int, int, int], tuple[int, int]] = {}
    for r, slots in enumerate(coll.inputs):
        for i, c in enumerate(slots):
            state[(r, 0, i)] = (c, 1)
    for r, slots in enumerate(coll.aliases):
        for j, a in enumerate(slots):
            if a is not None:
                state[(r, 1, j)] = (coll.inputs[r][a], 1)
    rank = g.op_rank.tolist()
    row = g.row.tolist()
    kind, buf, index = table.kind.tolist(), table.buf.tolist(), table.index.tolist()
    count, src_buf, src_index = table.count.tolist(), table.src_buf.tolist(), table.src_index.tolist()
    peer, slot = table.peer.tolist(), table.slot.tolist()
    held: dict[tuple[int, int, int], tuple[int | None, int]] = {}  # (switch, slot, step pushed) -> value
    op_message = g.op_message.tolist()
    msg_labels: list[tuple[int | None, int]] = [(None, 0)] * g.n_messages
    op_labels: list[tuple[int | None, int]] = [(None, 0)] * g.n_ops
    send_of = g.msg_send.tolist()
    recv_of = g.msg_recv.tolist()
    msg_of_send = {p: q for q, p in enumerate(send_of)}
    steps = g.op_step
    bounds = [0, *(np.flatnonzero(steps[1:] != steps[:-1]) + 1).tolist(), g.n_ops]
    for lo, hi in zip(bounds, bounds[1:]):  # ops are numbered by step
        carried: dict[int, list[tuple[int, int]]] = {}
        for p in range(lo, hi):
            x = row[p]
            if kind[x] == 0:  # send
                values = [state.get((rank[p], buf[x], index[x] + j), (None, 0)) for j in range(count[x])]
                q = msg_of_send[p]
                carried[q] = values  # type: ignore[assignment]
                msg_labels[q] = values[0] if values else (None, 0)  # type: ignore[assignment]
            elif kind[x] == 4 or kind[x] == 5:  # push, push-reduce: into the switch instance
                values = [state.get((rank[p], buf[x], index[x] + j), (None, 0)) for j in range(count[x])]
                msg_labels[op_message[p]] = values[0] if values else (None, 0)  # type: ignore[assignment]
                for j, v in enumerate(values):
                    key3 = (peer[x], slot[x] + j, int(steps[p]))
                    base = held.get(key3)
                    held[key3] = v if base is None or base[0] is None else \
                        (base if v[0] is None else (min(base[0], v[0]), base[1] + v[1]))
        for q, values in carried.items():
            x = row[recv_of[q]]
            for j, v in enumerate(values):
                state[(rank[recv_of[q]], buf[x], index[x] + j)] = v
        for p in range(lo, hi):
            x = row[p]
            if kind[x] == 6:  # pull: what the step before pushed
                values = [held.get((peer[x], slot[x] + j, int(steps[p]) - 1), (None, 0)) for j in range(count[x])]
                msg_labels[op_message[p]] = values[0] if values else (None, 0)  # type: ignore[assignment]
                for j, v in enumerate(values):
                    state[(rank[p], buf[x], index[x] + j)] = v
        for p in range(lo, hi):
            x = row[p]
            if kind[x] != 2 and kind[x] != 3:
                continue
            r = rank[p]
            for j in range(count[x]):
                v = state.get((r, src_buf[x], src_index[x] + j), (None, 0))
                key = (r, buf[x], index[x] + j)
                if kind[x] == 3:
                    base = state.get(key, (None, 0))
                    if base[0] is None:
                        pass
                    elif v[0] is None:
                        v = base
                    else:
                        v = (min(base[0], v[0]), base[1] + v[1])
                state[key] = v
                if j == 0:
                    op_labels[p] = v
    return msg_labels, op_labels


def _slots(rank: int, buf: int, index: int, count: int) -> str:
    span = "" if count == 1 else f"..+{count}"
    return f"{rank} {BUFFER_NAMES[buf]}[{index}{span}]"


def _what(label: tuple[int | None, int]) -> str:
    chunk, chunks = label
    return "nothing" if chunk is None else (f"c{chunk}" if chunks == 1 else f"sum of {chunks} from c{chunk}")


def _events(sim: Simulation) -> Iterator[dict[str, Any]]:
    program, g = sim.program, sim.graph
    table = program.ops
    n_ranks = program.n_ranks
    m = sim.slices
    msg_labels, op_labels = chunk_labels(sim)
    pairs = sim.resource_pairs
    lanes = sim.resource_lanes
    # tracks: per rank, the lanes of its outgoing links, then its local ops
    tid: dict[tuple[int, int], int] = {}
    for r in range(n_ranks):
        yield {"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}}
        yield {"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0, "args": {"sort_index": r}}
    next_tid = [1] * n_ranks
    topo = program.topology
    for k, (a, b) in enumerate(pairs):
        for lane in range(lanes[k]):
            owner = a if a < n_ranks else b  # a pull's track is on its rank
            tid[(k, lane)] = next_tid[owner]
            name = f"-> {b}" if b < n_ranks else f"-> switch {topo.vertex_name(b)}"
            if a >= n_ranks:
                name = f"<- switch {topo.vertex_name(a)}"
            name += f" lane {lane}" if lanes[k] > 1 else ""
            yield {"name": "thread_name", "ph": "M", "pid": owner, "tid": next_tid[owner], "args": {"name": name}}
            next_tid[owner] += 1
    local_tid = []
    for r in range(n_ranks):
        local_tid.append(next_tid[r])
        yield {"name": "thread_name", "ph": "M", "pid": r, "tid": next_tid[r], "args": {"name": "local ops"}}
    row = g.row.tolist()
    buf, index, count = table.buf.tolist(), table.index.tolist(), table.count.tolist()
    src_buf, src_index, kinds = table.src_buf.tolist(), table.src_index.tolist(), table.kind.tolist()
    rank_ptr = table.rank_ptr.tolist()
    rank = g.op_rank.tolist()
    start, sent, done = sim.start.tolist(), sim.sent.tolist(), sim.done.tolist()
    res, lane_of, nbytes = sim.resource.tolist(), sim.lane.tolist(), sim.nbytes.tolist()
    send_of, recv_of = g.msg_send.tolist(), g.msg_recv.tolist()
    steps = g.msg_step.tolist()
    peer, slot = table.peer.tolist(), table.slot.tolist()
    for q in range(g.n_messages):
        s_row, r_row = row[send_of[q]], row[recv_of[q]]
        a, b = rank[send_of[q]], rank[recv_of[q]]
        src = _slots(a, buf[s_row], index[s_row], count[s_row])
        dst = _slots(b, buf[r_row], index[r_row], count[r_row])
        if kinds[s_row] >= 4:  # a push or pull: one end is the switch's slots
            span = "" if count[s_row] == 1 else f"..+{count[s_row]}"
            switch = f"switch {topo.vertex_name(peer[s_row])} slot {slot[s_row]}{span}"
            src, dst = (switch, dst) if kinds[s_row] == 6 else (src, switch)
        chunk, chunks = msg_labels[q]
        for j in range(m):
            v = q * m + j
            yield {
                "name": _what(msg_labels[q]), "cat": "message", "ph": "X", "ts": start[v],
                "dur": max(0.0, sent[v] - start[v]), "pid": a, "tid": tid[(res[v], lane_of[v])],
                "args": {"message": q, "step": steps[q], "slice": j, "chunk": chunk, "chunks": chunks,
                         "bytes": nbytes[v], "src": src, "dst": dst, "lands_us": done[v]},
            }
    issue, finish = sim.issue.tolist(), sim.finish.tolist()
    op_bytes = (g.count.astype(float) * sim.report.slot_bytes / m).tolist()
    op_step = g.op_step.tolist()
    for p in range(g.n_ops):
        x = row[p]
        if kinds[x] != 2 and kinds[x] != 3:  # local ops only
            continue
        r = rank[p]
        cat = "reduce" if kinds[x] == 3 else "copy"
        chunk, chunks = op_labels[p]
        for j in range(m):
            v = p * m + j
            yield {
                "name": f"{cat} {_what(op_labels[p])}", "cat": cat, "ph": "X", "ts": issue[v],
                "dur": max(0.0, finish[v] - issue[v]), "pid": r, "tid": local_tid[r],
                "args": {"op": x - rank_ptr[r], "step": op_step[p], "slice": j, "chunk": chunk, "chunks": chunks,
                         "bytes": op_bytes[p], "src": _slots(r, src_buf[x], src_index[x], count[x]),
                         "dst": _slots(r, buf[x], index[x], count[x])},
            }


def _other(sim: Simulation) -> dict[str, Any]:
    rep = sim.report
    return {"program": rep.algorithm, "collective": rep.collective, "topology": rep.topology,
            "size": rep.size, "mode": rep.mode, "time_us": rep.time_us, "bound_us": rep.bound_us,
            "producer": "ccl simulator"}


def chrome_trace(sim: Simulation) -> dict[str, Any]:
    """The whole trace as one JSON-ready dict."""
    return {"traceEvents": list(_events(sim)), "displayTimeUnit": "ns", "otherData": _other(sim)}


def write_trace(sim: Simulation, path: str | os.PathLike[str]) -> None:
    """Write the trace, one event per line (streamed: large schedules make large traces),
    whole or not at all."""

    def write(fh: IO[str]) -> None:
        fh.write('{"traceEvents": [\n')
        first = True
        for event in _events(sim):
            if not first:
                fh.write(",\n")
            fh.write(json.dumps(event, separators=(",", ":")))
            first = False
        fh.write('\n],\n"displayTimeUnit": "ns",\n"otherData": ')
        fh.write(json.dumps(_other(sim)))
        fh.write("}\n")

    write_atomic(path, write)
