"""Program IR and its verifier: well-formedness, level order, matching, races, deadlock,
symbolic results."""

from __future__ import annotations

import pytest

import ccl
import topologies as T
from ccl import CollectiveError, VerificationError
from ccl.core.collective import allgather
from ccl.core.lower import lower
from ccl.core.program import Op, Program, piece_sizes
from ccl.core.verify_program import _Execution, verify_program


def ring_allreduce(n: int = 4) -> Program:
    return lower(ccl.synthesize(ccl.problem(f"ring:{n}", "allreduce", solver="ring")).algorithm)


def replace_op(program: Program, rank: int, at: int, **fields) -> Program:
    ranks = [list(ops) for ops in program.ranks]
    ranks[rank][at] = ranks[rank][at]._replace(**fields)
    return Program(program.name, program.collective, program.topology, tuple(tuple(x) for x in ranks),
                   program.scratch, program.channels, program.solver, program.steps)


def exchange_program(rank0: list[Op], rank1: list[Op]) -> Program:
    """A 2-rank allgather program from hand-written ops (output[own] is aliased)."""
    return Program("hand", allgather(2), T.ring(2), (tuple(rank0), tuple(rank1)), ((), ()), steps=1)


GOOD = (
    [Op("recv", 0, "output", 1, 1, 1, tag=0), Op("send", 0, "input", 0, 1, 1, tag=0)],
    [Op("recv", 0, "output", 0, 1, 0, tag=0), Op("send", 0, "input", 0, 1, 0, tag=0)],
)


def test_piece_sizes_split_unevenly_down_to_one_element():
    assert piece_sizes(10, 4) == (3, 3, 2, 2)
    assert piece_sizes(1, 3) == (1, 0, 0)
    assert piece_sizes(12, 3) == (4, 4, 4)
    assert sum(piece_sizes(101, 7)) == 101


def test_hand_written_exchange_verifies_in_and_out_of_place():
    program = exchange_program(*GOOD)
    result = verify_program(program)
    assert result.messages == 2 and not result.writes_input
    assert verify_program(program, in_place=True).in_place


@pytest.mark.parametrize(("op", "message"), [
    (Op("send", 0, "input", 0, 1, 0, tag=0), "peer 0 is not another rank"),
    (Op("send", 0, "input", 0, 2, 1, tag=0), "outside the rank's 1 input slots"),
    (Op("send", 0, "nowhere", 0, 1, 1, tag=0), "buffer 'nowhere'"),
    (Op("copy", 0, "output", 1, 1, -1, "input", 0, deps=(5,)), "dependency 5 is not an earlier op"),
    (Op("copy", 0, "output", 1, 1, 1, "input", 0), "a local op has peer -1"),
    (Op("jump", 0, "output", 1, 1), "kind 'jump'"),
    (Op("send", 0, "input", 0, 1, 1, tag=0, channel=2), "channel 2 is not in 0..0"),
])
def test_malformed_ops_are_rejected_with_the_reason(op, message):
    with pytest.raises(CollectiveError, match=message):
        exchange_program([op], [])


def test_tags_must_match():
    bad = [GOOD[0][0], GOOD[0][1]._replace(tag=3)]
    with pytest.raises(VerificationError, match="disagree: tags 3 and 0"):
        verify_program(exchange_program(bad, GOOD[1]))


def test_a_send_without_a_receive_is_reported():
    with pytest.raises(VerificationError, match="has no matching receive on rank 1"):
        verify_program(exchange_program(list(GOOD[0]), [GOOD[1][1]]))


def test_message_sizes_must_match():
    bad = [GOOD[0][0]._replace(count=2, index=0), GOOD[0][1]]
    with pytest.raises(VerificationError, match="disagree: 1 and 2 slots"):
        verify_program(exchange_program(bad, GOOD[1]))


def test_send_depending_on_a_receive_of_its_own_step_breaks_the_level_order():
    # Both ranks receive first and send only after their receive completed: a runtime posting the
    # step's messages together (NCCL groups) would wait forever.
    rank0 = [GOOD[0][0], GOOD[0][1]._replace(deps=(0,))]
    rank1 = [GOOD[1][0], GOOD[1][1]._replace(deps=(0,))]
    with pytest.raises(VerificationError, match="depends on op 0 .* of the same step"):
        verify_program(exchange_program(rank0, rank1))


def test_execution_reports_a_deadlock_with_the_blocked_ops():
    rank0 = [GOOD[0][0], GOOD[0][1]._replace(deps=(0,))]
    rank1 = [GOOD[1][0], GOOD[1][1]._replace(deps=(0,))]
    with pytest.raises(VerificationError, match="deadlock: rank 0 cannot issue op 1 .*rank 1 cannot issue op 1"):
        _Execution(exchange_program(rank0, rank1), False).run()


def test_ops_out_of_level_order_are_rejected():
    rank0 = [Op("send", 1, "input", 0, 1, 1, tag=0), Op("recv", 0, "output", 1, 1, 1, tag=0)]
    with pytest.raises(VerificationError, match="out of level order"):
        verify_program(exchange_program(rank0, GOOD[1]))


def test_a_missing_dependency_is_a_race():
    program = ring_allreduce()
    # Rank 0 op 9 receives into output[3] which op 1 (step 0) sends: it must wait for that send.
    op = program.ranks[0][9]
    assert op.kind == "recv" and op.deps == (1,)
    with pytest.raises(VerificationError, match="op 9 .* writes output\\[3\\] while op 1 .* may still be using it"):
        verify_program(replace_op(program, 0, 9, deps=()))


def test_a_wrong_destination_is_caught_by_the_symbolic_run():
    program = ring_allreduce()
    last = len(program.ranks[0]) - 2  # the final receive of rank 0
    op = program.ranks[0][last]
    assert op.kind == "recv"
    with pytest.raises(VerificationError) as info:
        verify_program(replace_op(program, 0, last, index=(op.index + 1) % 4))
    assert info.value.rank == 0


def test_links_are_checked():
    program = exchange_program(*GOOD)
    line = Program("hand", allgather(2), T.line(2), program.ranks, program.scratch, steps=1)
    verify_program(line)
    one_way = ccl.Topology("oneway", 2, (ccl.Link(0, 1, 10.0, 1.0),))
    with pytest.raises(VerificationError, match="no link from rank 1 to rank 0"):
        verify_program(Program("hand", allgather(2), one_way, program.ranks, program.scratch, steps=1))


def test_text_listing_names_every_op():
    text = ring_allreduce(3).to_text()
    assert "rank 2:" in text and "recv scratch[0] from rank 1 (tag 0)" in text and "after 0" in text


def test_list_order_orders_nothing_every_dependency_is_explicit():
    # Under the dependency-driven model a runtime may issue ops in any order their deps allow,
    # so a send reading a slot a local reduce wrote must depend on that reduce, even though the
    # reduce comes first in the list.
    program = ring_allreduce()
    ops = program.ranks[0]
    at = next(i for i, op in enumerate(ops) if op.kind == "send" and any(ops[d].kind == "reduce" for d in op.deps))
    reduce_dep = next(d for d in ops[at].deps if ops[d].kind == "reduce")
    pruned = tuple(d for d in ops[at].deps if d != reduce_dep)
    with pytest.raises(VerificationError, match=f"op {at} .* reads output\\[\\d+\\] while op {reduce_dep}"):
        verify_program(replace_op(program, 0, at, deps=pruned))


def run_in_reverse_ready_order(program: Program) -> list[dict]:
    """Execute the Program issuing, on every rank, the ready op listed LAST (the opposite of
    list order; messages of one pair and channel still post in list order, as the model asks).
    A message completes when both sides are posted. Returns every rank's final slot values."""
    from ccl.core.verify import Chunks

    coll = program.collective
    chunks = Chunks(coll)
    state = [{("input", i): chunks.value(c) for i, c in enumerate(coll.inputs[r])} for r in range(coll.n_ranks)]
    for r, aliases in enumerate(coll.aliases):
        for j, a in enumerate(aliases):
            if a is not None:
                state[r][("output", j)] = state[r][("input", a)]
    done: list[set[int]] = [set() for _ in program.ranks]
    issued: list[set[int]] = [set() for _ in program.ranks]
    sends: dict[tuple[int, int, int], tuple[int, list]] = {}  # (src, dst, tag) -> (op, values)
    recvs: dict[tuple[int, int, int], int] = {}
    while True:
        moved = False
        for r, ops in enumerate(program.ranks):
            ready = [i for i, op in enumerate(ops) if i not in issued[r] and all(d in done[r] for d in op.deps)
                     and not any(o.kind == op.kind and o.peer == op.peer and o.channel == op.channel
                                 and k not in issued[r] for k, o in enumerate(ops[:i]) if op.is_network)]
            if not ready:
                continue
            i = ready[-1]
            op = ops[i]
            issued[r].add(i)
            moved = True
            if op.kind == "send":
                sends[(r, op.peer, op.tag)] = (i, [state[r][(op.buf, op.index + j)] for j in range(op.count)])
            elif op.kind == "recv":
                recvs[(op.peer, r, op.tag)] = i
            else:
                for j in range(op.count):
                    value = state[r][(op.src_buf, op.src_index + j)]
                    key = (op.buf, op.index + j)
                    state[r][key] = chunks.add(state[r][key], value) if op.kind == "reduce" else value
                done[r].add(i)
            for key in [k for k in recvs if k in sends]:
                a, b, _ = key
                s_op, values = sends.pop(key)
                r_op = recvs.pop(key)
                dst = program.ranks[b][r_op]
                for j, value in enumerate(values):
                    state[b][(dst.buf, dst.index + j)] = value
                done[a].add(s_op)
                done[b].add(r_op)
        if not moved:
            break
    assert all(len(done[r]) == len(ops) for r, ops in enumerate(program.ranks)), "did not finish"
    return [{key: chunks.counts(v) for key, v in st.items()} for st in state]


def test_lowered_programs_give_the_same_result_in_any_order_the_deps_allow():
    for program in (ring_allreduce(5), lower(ccl.synthesize(ccl.problem("dgx1", "allreduce", solver="double-binary-tree",
                                                                           chunks=2)).algorithm)):
        final = run_in_reverse_ready_order(program)
        for r, slots in enumerate(program.collective.outputs):
            for j, need in enumerate(slots):
                assert final[r][("output", j)] == {c: 1 for c in need}, (program.name, r, j)
