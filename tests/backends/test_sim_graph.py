"""The simulator's graph and event loop against a reference written for clarity, not speed.

The reference runs the Program's execution model literally: an op is issued when its deps have
completed; a message is ready when both its send and its receive are issued and the message
before it of its pair and channel is ready (rule 3: posted in list order); among the messages
whose ready time is known it always serves the earliest (ties: step, sending rank, position in
its list, the engine's order) on the lane of its link that frees first. A message whose ready
time is not yet known waits on ops that complete no earlier than any known ready time, so
serving the earliest known one is serving the earliest.
"""

from __future__ import annotations

import importlib.util
import math
import pathlib

import pytest

import solvers
import topologies as T
from backends.sim import Simulator
from backends.sim.graph import ProgramGraph
from ccl import InfeasibleError, InputError, Problem, Request, verify
from ccl.core.collective import ROOTED_KINDS, builtin
from ccl.core.lower import lower
from ccl.core.report import slot_bytes

_LOWER_TESTS = pathlib.Path(__file__).resolve().parents[1] / "ccl" / "test_lower.py"
_spec = importlib.util.spec_from_file_location("lower_cases", _LOWER_TESTS)
lower_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lower_cases)  # type: ignore[union-attr]


def reference_finish(program, size: float) -> dict[tuple[int, int], float]:
    """Completion time of every op, keyed (rank, index in its list)."""
    topo = program.topology.flat()
    per_slot = slot_bytes(program.collective, size)
    ranks = program.ranks
    done: dict[tuple[int, int], float] = {}
    issued: dict[tuple[int, int], float] = {}
    # messages: the k-th send from a to b on a channel with the k-th receive
    sends: dict[tuple[int, int, int], list[int]] = {}
    recvs: dict[tuple[int, int, int], list[int]] = {}
    for r, ops in enumerate(ranks):
        for i, op in enumerate(ops):
            if op.kind == "send":
                sends.setdefault((r, op.peer, op.channel), []).append(i)
            elif op.kind == "recv":
                recvs.setdefault((op.peer, r, op.channel), []).append(i)
    messages = []  # (send (rank, i), recv (rank, i))
    before: dict[int, int] = {}  # message -> the pair's previous message on its channel
    for key, out in sends.items():
        a, b, _ = key
        for k, (i, j) in enumerate(zip(out, recvs[key])):
            if k:
                before[len(messages)] = len(messages) - 1
            messages.append(((a, i), (b, j)))
    ready_at: dict[int, float] = {}
    lane_free: dict[tuple[int, int], list[float]] = {}
    pending = set(range(len(messages)))
    while True:
        progress = True
        while progress:  # issue every op whose deps are done; local ops complete at once
            progress = False
            for r, ops in enumerate(ranks):
                for i, op in enumerate(ops):
                    if (r, i) in issued or any((r, d) not in done for d in op.deps):
                        continue
                    issued[(r, i)] = max([done[(r, d)] for d in op.deps], default=0.0)
                    if not op.is_network:
                        done[(r, i)] = issued[(r, i)]
                    progress = True
        # rule 3: a pair's messages on a channel are posted in list order, so a message is
        # ready no earlier than the one before it
        known = [(max(issued[s], issued[t], ready_at.get(before.get(q, -1), 0.0)), ranks[s[0]][s[1]].step, s[0],
                  s[1], q)
                 for q in pending for s, t in [messages[q]]
                 if s in issued and t in issued and (q not in before or before[q] in ready_at)]
        if not known:
            break
        ready, _, _, _, q = min(known)
        pending.discard(q)
        ready_at[q] = ready
        (a, i), (b, j) = messages[q]
        link = topo.flat_link(a, b)
        lanes = lane_free.setdefault((a, b), [0.0] * link.lanes)
        k = min(range(len(lanes)), key=lanes.__getitem__)
        start = max(ready, lanes[k])
        end = start + link.latency + ranks[a][i].count * per_slot / (link.bandwidth * 1e3)
        lanes[k] = end
        done[(a, i)] = end
        done[(b, j)] = end
    assert not pending, "the reference stalled"
    return done


def check_against_reference(program, size: float) -> None:
    sim = Simulator(program).run(size)
    ref = reference_finish(program, size)
    table = program.ops
    ptr = table.rank_ptr.tolist()
    for p, row in enumerate(sim.graph.row.tolist()):
        r = int(sim.graph.op_rank[p])
        want = ref[(r, row - ptr[r])]
        assert math.isclose(sim.finish[p], want, rel_tol=1e-9, abs_tol=1e-9), (program.name, r, row - ptr[r])
    assert sim.report.time_us == pytest.approx(max(ref.values(), default=0.0), rel=1e-9, abs=1e-9)


def test_messages_pair_the_kth_send_with_the_kth_receive():
    alg = solvers.synthesize(Problem(T.fully_connected(4), builtin("allgather", 4), Request("direct", chunks=2)))
    program = lower(alg, fuse=False, channels=2)
    g = ProgramGraph.build(program)
    table = program.ops
    assert g.n_messages == program.n_messages
    for q in range(g.n_messages):
        s, t = int(g.row[g.msg_send[q]]), int(g.row[g.msg_recv[q]])
        assert table.kind[s] == 0 and table.kind[t] == 1
        assert (table.tag[s], table.channel[s], table.step[s]) == (table.tag[t], table.channel[t], table.step[t])
        assert table.peer[s] == g.msg_dst[q] and table.peer[t] == g.msg_src[q]
    # ops are numbered by step: the loop meets them in that order
    steps = g.op_step.tolist()
    assert steps == sorted(steps)


@pytest.mark.parametrize("seed", range(12))
def test_random_schedules_match_reference(seed):
    for gen in (lower_cases.random_allgather, lower_cases.random_reducescatter):
        alg = gen(3 + seed % 3, 1 + seed % 2, seed)
        verify(alg)
        for fuse in (True, False):
            check_against_reference(lower(alg, fuse=fuse, channels=1 + seed % 2), 3e5 + seed)


@pytest.mark.parametrize(("spec", "kind", "solver"), [
    ("ring:5", "allreduce", "ring"), ("dgx1", "allgather", "multi-ring"), ("torus:2x3", "allreduce", "direct"),
    ("hypercube:8", "allreduce", "recursive-halving"), ("dgx1", "broadcast", "double-binary-tree"),
    ("line:4", "reduce", "binomial-tree"), ("amd8", "alltoall", "direct"),
])
def test_template_schedules_match_reference(spec, kind, solver):
    topo = T.build(spec)
    root = topo.n_ranks - 1 if kind in ROOTED_KINDS else None
    try:
        alg = solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks, root), Request(solver, chunks=2)))
    except (InputError, InfeasibleError):
        pytest.skip("template does not apply")
    for fuse in (True, False):
        check_against_reference(lower(alg, fuse=fuse), 2**22)
