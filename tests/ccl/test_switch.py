"""Switch reductions in the IR: transfers to and from a reducing switch (pushes and pulls), the
verifier's semantics (sums, multicasts, a slot readable the next step only), the lowering to
push and pull ops, and the Program verifier's matching, in pairs: a correct schedule accepted,
a broken one refused naming rank, step, switch and slot."""

from __future__ import annotations

import pytest

import topologies as T
from ccl import CollectiveError, VerificationError, lower, verify, verify_program
from ccl.core.algorithm import Algorithm, Transfer
from ccl.core.collective import builtin
from ccl.core.program import Op, Program
from ccl.core.serialize import program_from_json, program_to_json

H100 = T.build("dgx-h100")
SW = 8  # dgx-h100's NVSwitch: the vertex after its 8 ranks
N = 8


def nvls(transfers_of=None, extra=(), topo=H100) -> Algorithm:
    """NVLS allreduce as NVLink SHARP runs it: every rank push-reduces its 8 shards into the
    switch (step 0), rank j pulls shard j's sum (1), pushes it back as a copy (2), and every other
    rank pulls it (3: the multicast)."""
    t = [Transfer(0, r, "input", 0, SW, "scratch", 0, N, "reduce") for r in range(N)]
    t += [Transfer(1, SW, "scratch", j, j, "output", j, 1, "copy") for j in range(N)]
    t += [Transfer(2, j, "output", j, SW, "scratch", N + j, 1, "copy") for j in range(N)]
    t += [Transfer(3, SW, "scratch", N + j, r, "output", j, 1, "copy") for r in range(N) for j in range(N) if j != r]
    if transfers_of is not None:
        t = transfers_of(t)
    return Algorithm("nvls", builtin("allreduce", N, None, N), topo, tuple(t) + tuple(extra))


def test_an_nvls_allreduce_verifies_out_of_place_and_in_place():
    alg = nvls()
    assert alg.switch_transfers == tuple(range(len(alg.transfers)))
    assert alg.scratch_slots == (0,) * N  # a switch's slots are not a rank's scratch
    assert verify(alg).chunk_transfers == 8 * 8 + 8 + 8 + 56
    assert verify(alg, in_place=True).in_place


def test_a_multicast_read_two_steps_later_is_refused():
    late = nvls(lambda t: [x._replace(step=4) if x.step == 3 else x for x in t])
    with pytest.raises(VerificationError) as err:
        verify(late)
    e = err.value
    assert (e.rank, e.step, e.switch, e.buffer) == (0, 4, "nvswitch", "scratch") and e.index == N + 1
    assert "last pushed in step 2" in e.message and "next step only" in e.message
    assert "switch 'nvswitch' slot 9" in e.message


def test_a_pull_of_a_slot_never_pushed_is_refused():
    with pytest.raises(VerificationError, match="nothing is ever pushed into it") as err:
        verify(nvls(extra=[Transfer(3, SW, "scratch", 40, 0, "scratch", 0, 1, "copy")]))
    assert (err.value.rank, err.value.step, err.value.index, err.value.switch) == (0, 3, 40, "nvswitch")


def test_a_pull_in_the_step_of_the_push_is_refused():
    early = nvls(lambda t: [x._replace(step=2) if x.step == 3 else x for x in t])
    with pytest.raises(VerificationError, match="it is pushed in step 2, readable in step 3"):
        verify(early)


def test_a_copy_colliding_with_a_reduce_in_one_switch_slot_is_refused():
    with pytest.raises(VerificationError) as err:
        verify(nvls(extra=[Transfer(0, 3, "input", 2, SW, "scratch", 2, 1, "copy")]))
    e = err.value
    assert e.step == 0 and e.switch == "nvswitch" and e.index == 2
    assert "receives a copy and another write" in e.message and "multicast's one source" in e.message


def test_two_copies_into_one_slot_collide_and_one_copy_alone_is_a_multicast():
    two = nvls(lambda t: t + [Transfer(2, 0, "output", 1, SW, "scratch", N + 1, 1, "copy")])
    with pytest.raises(VerificationError, match="a copy and another write"):
        verify(two)


def test_a_chunk_the_switch_sums_twice_is_caught_at_the_output():
    twice = nvls(extra=[Transfer(0, 5, "input", 3, SW, "scratch", 3, 1, "reduce")])
    with pytest.raises(VerificationError, match="counted more than once: chunks 43") as err:
        verify(twice)
    assert (err.value.rank, err.value.buffer, err.value.index) == (0, "output", 3)  # rank 0 takes shard 3 first


def test_a_transfer_to_a_switch_that_does_not_reduce_is_refused():
    a100 = T.build("dgx-a100")  # NVSwitch generation 2: no NVLink SHARP
    with pytest.raises(CollectiveError, match="switch 'nvswitch' does not reduce or multicast"):
        nvls(topo=a100)
    push = (Transfer(0, 0, "input", 0, SW, "scratch", 0, 1, "reduce"),)
    Algorithm("h", builtin("allreduce", N, None, N), H100, push)  # on dgx-h100 the same push is fine


@pytest.mark.parametrize("transfer,why", [
    (Transfer(0, 16, "scratch", 0, 25, "scratch", 0, 1, "copy"), "a switch transfer joins a rank and a switch"),
    (Transfer(0, 0, "input", 0, 25, "scratch", 0, 1, "reduce"), "no link from rank 0 to switch 'n1.nvswitch'"),
    (Transfer(0, 0, "input", 0, 16, "output", 0, 1, "reduce"), "a switch has scratch slots only"),
    (Transfer(0, 0, "input", 0, 17, "scratch", 0, 1, "reduce"), "switch 'n0.nic0' does not reduce"),
    (Transfer(0, 0, "input", 0, 34, "scratch", 0, 1, "reduce"), "switch 'rail0' does not reduce"),
    (Transfer(0, 0, "input", 0, 99, "scratch", 0, 1, "reduce"), "rank 99 is not in 0..15"),
])
def test_switch_transfers_that_do_not_fit_the_topology_are_refused(transfer, why):
    topo = T.build("dgx-h100:2")  # 16 ranks; switches: n0.nvswitch 16, n0.nic0 17, ..., rail0 34
    with pytest.raises(CollectiveError, match=why):
        Algorithm("x", builtin("allreduce", 16), topo, (transfer,))


def test_a_network_switch_is_reached_through_the_ranks_nic():
    topo = T.build("dgx-h100:2,sharp=on")
    assert topo.switch_path(0, 34) == (0, 17, 34) and topo.switch_path(34, 8) == (34, 26, 8)
    assert topo.switch_path(9, 34) is None  # rank 9's NIC is on rail 1
    assert topo.switch_path(0, 17) is None  # a NIC does not reduce
    assert topo.switch_link(0, 34).bandwidth == 50.0 and topo.switch_link(0, 34).latency == pytest.approx(1.3)
    # rank 0 and rank 8 (index 0 of each node) sum a slot in rail 0's switch and both read the total
    coll = builtin("allreduce", 16)
    t = [Transfer(0, 0, "input", 0, 34, "scratch", 0, 1, "reduce"), Transfer(0, 8, "input", 0, 34, "scratch", 0, 1,
                                                                             "reduce")]
    t += [Transfer(1, 34, "scratch", 0, r, "output", 0, 1, "copy") for r in (0, 8)]
    alg = Algorithm("sharp", coll, topo, tuple(t))
    with pytest.raises(VerificationError, match=r"rank 0 output\[0\] should hold .* but holds sum of chunks 0, 8 "
                                                r"\(missing chunks 1,"):  # only ranks 0 and 8 summed: the rest is missing
        verify(alg)


def test_a_step_may_read_a_slot_and_write_it_again():
    """A slot pushed in step t is read in t + 1 while the pushes of t + 1 refill it for t + 2:
    the multicast reuses slots 0..7 once their sums are pulled."""
    reuse = nvls(lambda t: [x._replace(dst_index=x.dst_index - N) if x.step == 2 else
                            x._replace(src_index=x.src_index - N) if x.step == 3 else x for x in t])
    verify(reuse)
    verify_program(lower(reuse), in_place=True)


# ---------------------------------------------------------------------- the Program
def test_lowering_makes_pushes_and_pulls_that_verify():
    alg = nvls()
    for fuse, channels in ((True, 1), (False, 2)):
        program = lower(alg, fuse=fuse, channels=channels)
        assert program.n_switch_ops == len(alg.transfers) if not fuse else program.n_switch_ops < len(alg.transfers)
        assert program.n_messages == 0 and program.summary()["pushes"] > 0
        verify_program(program)
        verify_program(program, in_place=True)
        assert program_from_json(program_to_json(program)) == program
    ops = lower(alg).ranks[3]
    assert ops[0] == Op("push-reduce", 0, "input", 0, 8, SW, "", -1, 0, 0, (), 0)
    assert ops[1].kind == "pull" and ops[1].slot == 3 and ops[1].deps == (0,)  # output[3] aliases input[3]
    assert "push-reduce input[0..7] into switch 8 slot 0..7" in lower(alg).to_text()


def test_a_pull_landing_in_a_slot_its_step_still_reads_is_staged():
    """Rank 0 pushes output[1] in step 2 while a pull of step 2 writes it: the pull lands in
    scratch and a local copy finishes it after the push has read."""
    def also(t):  # rank 0 also pushes output[1] in step 3, the step its multicast pull writes it
        return t + [Transfer(3, 0, "output", 1, SW, "scratch", 20, 1, "copy"),
                    Transfer(4, SW, "scratch", 20, 0, "scratch", 0, 1, "copy")]
    alg = nvls(also)
    verify(alg)
    program = lower(alg)
    verify_program(program)
    verify_program(program, in_place=True)
    pulls = [op for op in program.ranks[0] if op.kind == "pull" and op.step == 3 and op.index <= 1]
    assert pulls and pulls[0].buf == "scratch"  # staged, then copied into output[1] after the push


def _program(ops0, topo=H100):
    """Rank 0's ops replaced in the lowered NVLS allreduce."""
    program = lower(nvls())
    ranks = [list(x) for x in program.ranks]
    ranks[0] = ops0(ranks[0])
    return Program(program.name, program.collective, topo, ranks, program.scratch, program.channels,
                   program.solver, program.steps)


def test_the_program_verifier_refuses_a_pull_a_step_late():
    bad = _program(lambda ops: [op._replace(step=op.step + 1) if op.kind == "pull" and op.step == 3 else op
                                for op in ops])
    with pytest.raises(VerificationError, match="holds nothing in step 4: its last push before is in step 2") as err:
        verify_program(bad)
    assert err.value.switch == "nvswitch" and err.value.rank == 0


def test_the_program_verifier_refuses_a_copy_push_with_another_push():
    bad = _program(lambda ops: [op._replace(kind="push") if op.kind == "push-reduce" else op for op in ops])
    with pytest.raises(VerificationError, match="a push \\(copy\\) is its slot's one source") as err:
        verify_program(bad)
    assert err.value.index == 0 and err.value.switch == "nvswitch"


def test_the_program_verifier_refuses_a_push_that_waits_on_its_own_step():
    """Rank 0's multicast push moved into the step of the pull it waits for: a runtime posting
    the step's ops together would deadlock."""
    bad = _program(lambda ops: [op._replace(step=1) if op.kind == "push" else op for op in ops])
    with pytest.raises(VerificationError, match="of the same step"):
        verify_program(bad)


def test_the_program_verifier_refuses_a_race_with_a_pull():
    """Rank 0's pull into output[0] (step 1) no longer waits for its push of input[0] (step 0),
    which it aliases in place."""
    bad = _program(lambda ops: [op._replace(deps=()) if op.kind == "pull" and op.step == 1 else op for op in ops])
    verify_program(bad)  # out of place: different memory
    with pytest.raises(VerificationError, match="may still be using it"):
        verify_program(bad, in_place=True)


def test_a_push_or_pull_must_name_a_reducing_switch_and_a_slot():
    with pytest.raises(CollectiveError, match="peer 3 is not a switch that reduces"):
        _program(lambda ops: [ops[0]._replace(peer=3)] + ops[1:])
    with pytest.raises(CollectiveError, match="slot 5 belongs to a push or pull only"):
        _program(lambda ops: ops + [Op("copy", 3, "output", 0, 1, -1, "input", 1, -1, 0, (), 5)])
    topo = T.build("dgx-h100:2,sharp=on")
    ops = [[Op("push-reduce", 0, "input", 0, 1, 34, "", -1, 0, 0, (), 0)] if r == 9 else [] for r in range(16)]
    with pytest.raises(VerificationError, match="no link from rank 9 to switch 'rail0'"):
        verify_program(Program("x", builtin("allreduce", 16), topo, ops, ((),) * 16))


# ---------------------------------------------------------------------- the DSL
def test_hand_written_switch_transfers_name_the_switch_and_print_back():
    import dsl
    from ccl import DslError
    from dsl.printer import format_algorithm

    text = """
from machines import dgx_h100
algorithm nv implements allreduce(chunks = 8) on dgx_h100 {
  for r in 0..8 { reduce input[0..8] of r to scratch[0..8] of "nvswitch" at step 0 }
  for j in 0..8 { copy scratch[j] of "nvswitch" to output[j] of j at step 1 }
  for j in 0..8 { copy output[j] of j to scratch[8 + j] of "nvswitch" at step 2 }
  for r in 0..8, j in 0..8 { if j != r { copy scratch[8 + j] of "nvswitch" to output[j] of r at step STEP } }
}
"""
    (hand,) = dsl.load_string(text.replace("STEP", "3"), "nv.ccl").algorithms()
    assert hand.algorithm.transfers == nvls().transfers
    (back,) = dsl.load_string(format_algorithm(hand.algorithm), "again.ccl").algorithms()
    assert back.algorithm.transfers == hand.algorithm.transfers
    (late,) = dsl.load_string(text.replace("STEP", "4"), "nv.ccl").algorithms()
    with pytest.raises(VerificationError, match=r"rank 0 reads switch 'nvswitch' slot 9") as err:
        dsl.verify_algorithm(late)
    assert str(err.value).startswith("nv.ccl:7:")  # the line of the late pull
    with pytest.raises(DslError, match="no switch nvswitch2"):
        dsl.load_string(text.replace('of r to scratch[0..8] of "nvswitch"', 'of r to scratch[0..8] of "nvswitch2"'),
                        "nv.ccl").algorithms()
    with pytest.raises(DslError, match="a switch has scratch slots only, not output"):
        dsl.load_string(text.replace('to scratch[0..8] of "nvswitch"', 'to output[0..8] of "nvswitch"'),
                        "nv.ccl").algorithms()
