"""Chrome traces validate against the schema of the subset emitted; one event per message and
per local op (and slice)."""

from __future__ import annotations

import json

import jsonschema
import pytest

import solvers
import topologies as T
from backends.sim.trace import TRACE_SCHEMA, chunk_labels
from ccl import InputError, Problem, Request
from ccl.compiler import simulation as run
from ccl.core.collective import builtin


def schedule(spec: str, kind: str, solver: str, chunks: int = 1):
    topo = T.build(spec)
    return solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks), Request(solver, chunks=chunks)))


def test_dgx1_allgather_trace_is_valid_chrome_trace(tmp_path):
    alg = schedule("dgx1", "allgather", "ring", chunks=2)
    sim = run(alg, 2**26)
    program = sim.program
    path = tmp_path / "ag.trace.json"
    sim.write_trace(str(path))
    data = json.loads(path.read_text())
    jsonschema.validate(data, TRACE_SCHEMA)
    assert data == json.loads(json.dumps(sim.trace()))  # the streamed file is the dict
    events = [e for e in data["traceEvents"] if e["ph"] == "X"]
    messages = [e for e in events if e["cat"] == "message"]
    assert len(messages) == program.n_messages
    assert sorted(e["args"]["message"] for e in messages) == list(range(program.n_messages))
    assert len(events) - len(messages) == program.n_ops - 2 * program.n_messages  # local ops
    # a track per rank (process) and per link lane (thread)
    names = {(e["pid"], e["args"]["name"]) for e in data["traceEvents"] if e["name"] == "process_name"}
    assert names == {(r, f"rank {r}") for r in range(8)}
    threads = {(e["pid"], e["args"]["name"]) for e in data["traceEvents"] if e["name"] == "thread_name"}
    used = {(int(a), int(b)) for a, b in zip(sim.graph.msg_src, sim.graph.msg_dst)}
    for link in alg.topology.links:
        if (link.src, link.dst) in used:
            assert (link.src, f"-> {link.dst} lane 0" if link.lanes > 1 else f"-> {link.dst}") in threads
    # every message carries chunk, bytes and step; allgather moves single chunks
    for e in messages:
        q = e["args"]["message"]
        assert e["args"]["step"] == int(sim.graph.msg_step[q]) and e["args"]["chunks"] == 1
        assert e["args"]["bytes"] == pytest.approx(int(sim.graph.msg_count[q]) * 2**26 / 16)
        assert e["args"]["lands_us"] >= e["ts"] + e["dur"] - 1e-9
    assert max(e["args"]["lands_us"] for e in messages) == pytest.approx(sim.report.time_us)


def test_events_on_one_track_do_not_overlap():
    sim = run(schedule("ndv2:2", "allreduce", "hierarchical", 2), 2**24, slices=2)
    data = sim.trace()
    jsonschema.validate(data, TRACE_SCHEMA)
    tracks: dict = {}
    for e in data["traceEvents"]:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        for (_, end), (begin, _) in zip(spans, spans[1:]):
            assert begin >= end - 1e-9


def test_chunk_labels_follow_reductions():
    alg = schedule("ring:4", "allreduce", "ring")
    sim = run(alg, 4096)
    messages, ops = chunk_labels(sim)
    steps = sim.graph.msg_step.tolist()
    # ring reducescatter: step s moves partial sums of s + 1 chunks; allgather moves full sums
    for (_, count), s in zip(messages, steps):
        assert count == (s + 1 if s < 3 else 4)
    # the local reduces of step s hold sums of s + 2 chunks
    table = sim.program.ops
    for p, row in enumerate(sim.graph.row.tolist()):
        if table.kind[row] == 3:
            assert ops[p][1] == int(table.step[row]) + 2


def test_trace_into_missing_folder_is_bad_input(tmp_path):
    sim = run(schedule("ring:4", "allgather", "ring"), 4096)
    with pytest.raises(InputError, match="does not exist"):
        sim.write_trace(str(tmp_path / "nope" / "t.json"))
    assert not (tmp_path / "nope").exists()
