"""Chrome trace JSON (Trace Event Format) of a simulation, for Perfetto and chrome://tracing.

Layout: one process per rank ("rank r"); inside it one thread (track) per lane of every link
the rank sends on ("-> d" or "-> d lane k"), plus "local" for its local copies. Every transfer
(every slice of it) is one complete event ("ph": "X") on the track of the lane it used, from
when it took the lane to when it released it, named after what it moves, with args: transfer
index, step, slice, op, chunk (the smallest input-chunk id in the value moved) and chunks (how
many input chunks are summed in it), bytes, source and destination slots, and when its data
landed. Times are microseconds, the format's unit. ``TRACE_SCHEMA`` is a JSON schema of
exactly the subset emitted; the tests validate traces against it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

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
                            "cat": {"enum": ["copy", "reduce"]},
                            "ph": {"const": "X"},
                            "ts": {"type": "number", "minimum": 0},
                            "dur": {"type": "number", "minimum": 0},
                            "pid": {"type": "integer", "minimum": 0},
                            "tid": {"type": "integer", "minimum": 0},
                            "args": {
                                "type": "object",
                                "required": ["transfer", "step", "slice", "chunk", "chunks", "bytes", "src", "dst",
                                             "lands_us"],
                                "additionalProperties": False,
                                "properties": {
                                    "transfer": {"type": "integer", "minimum": 0},
                                    "step": {"type": "integer", "minimum": 0},
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


def chunk_labels(sim: Simulation) -> list[tuple[int | None, int]]:
    """For each transfer in execution order: (smallest input-chunk id, number of chunks) of the
    value it moves (its first slot), by running the schedule on (min, count) labels."""
    g = sim.graph
    coll = sim.algorithm.collective
    state: dict[tuple[int, int, int], tuple[int, int]] = {}
    for r, slots in enumerate(coll.inputs):
        for i, c in enumerate(slots):
            state[(r, 0, i)] = (c, 1)
    for r, slots in enumerate(coll.aliases):
        for j, a in enumerate(slots):
            if a is not None:
                state[(r, 1, j)] = (coll.inputs[r][a], 1)
    src, sbuf, sidx = g.src.tolist(), g.src_buf.tolist(), g.src_index.tolist()
    dst, dbuf, didx = g.dst.tolist(), g.dst_buf.tolist(), g.dst_index.tolist()
    count, reduce = g.count.tolist(), g.reduce.tolist()
    out: list[tuple[int | None, int]] = [(None, 0)] * g.n
    ptr = g.step_ptr
    for s in range(len(ptr) - 1):
        writes: list[tuple[tuple[int, int, int], tuple[int, int], bool]] = []
        for v in range(ptr[s], ptr[s + 1]):
            for j in range(count[v]):
                value = state.get((src[v], sbuf[v], sidx[v] + j), (None, 0))
                if j == 0:
                    out[v] = value  # type: ignore[assignment]
                writes.append(((dst[v], dbuf[v], didx[v] + j), value, reduce[v]))  # type: ignore[arg-type]
        landed: dict[tuple[int, int, int], tuple[int, int]] = {}
        for key, value, is_reduce in writes:
            base = landed.get(key, state.get(key)) if is_reduce else None
            if base is None or base[0] is None:
                landed[key] = value
            elif value[0] is None:
                landed[key] = base
            else:
                landed[key] = (min(base[0], value[0]), base[1] + value[1])
        state.update(landed)
    return out


def _events(sim: Simulation) -> Iterator[dict[str, Any]]:
    g = sim.graph
    n_ranks = sim.algorithm.collective.n_ranks
    m = sim.slices
    labels = chunk_labels(sim)
    pairs = sim.resource_pairs
    lanes = sim.resource_lanes
    # tracks: per rank, the lanes of its outgoing links, then "local"
    tid: dict[tuple[int, int], int] = {}
    for r in range(n_ranks):
        yield {"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}}
        yield {"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0, "args": {"sort_index": r}}
    next_tid = [1] * n_ranks
    for k, (a, b) in enumerate(pairs):
        for lane in range(lanes[k]):
            tid[(k, lane)] = next_tid[a]
            if a == b:
                name = "local copies"
            else:
                name = f"-> {b}" + (f" lane {lane}" if lanes[k] > 1 else "")
            yield {"name": "thread_name", "ph": "M", "pid": a, "tid": next_tid[a], "args": {"name": name}}
            next_tid[a] += 1
    local_tid = []
    for r in range(n_ranks):
        local_tid.append(next_tid[r])
        yield {"name": "thread_name", "ph": "M", "pid": r, "tid": next_tid[r], "args": {"name": "local (free)"}}
    src, sbuf, sidx = g.src.tolist(), g.src_buf.tolist(), g.src_index.tolist()
    dst, dbuf, didx = g.dst.tolist(), g.dst_buf.tolist(), g.dst_index.tolist()
    count, reduce, step = g.count.tolist(), g.reduce.tolist(), g.step.tolist()
    index = sim.transfer_index.tolist()
    start, sent, done = sim.start.tolist(), sim.sent.tolist(), sim.done.tolist()
    res, lane_of, nbytes = sim.resource.tolist(), sim.lane.tolist(), sim.nbytes.tolist()
    for i in range(g.n):
        chunk, chunks = labels[i]
        op = "reduce" if reduce[i] else "copy"
        span = "" if count[i] == 1 else f"..+{count[i]}"
        what = "nothing" if chunk is None else (f"c{chunk}" if chunks == 1 else f"sum of {chunks} from c{chunk}")
        name = f"{op} {what}"
        s_slot = f"{src[i]} {BUFFER_NAMES[sbuf[i]]}[{sidx[i]}{span}]"
        d_slot = f"{dst[i]} {BUFFER_NAMES[dbuf[i]]}[{didx[i]}{span}]"
        for j in range(m):
            v = i * m + j
            r = res[v]
            if r < 0:
                pid, track = src[i], local_tid[src[i]]
            else:
                pid, track = pairs[r][0], tid[(r, lane_of[v])]
            yield {
                "name": name, "cat": op, "ph": "X", "ts": start[v], "dur": max(0.0, sent[v] - start[v]),
                "pid": pid, "tid": track,
                "args": {"transfer": index[i], "step": step[i], "slice": j, "chunk": chunk, "chunks": chunks,
                         "bytes": nbytes[v], "src": s_slot, "dst": d_slot, "lands_us": done[v]},
            }


def _other(sim: Simulation) -> dict[str, Any]:
    rep = sim.report
    return {"algorithm": rep.algorithm, "collective": rep.collective, "topology": rep.topology,
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
