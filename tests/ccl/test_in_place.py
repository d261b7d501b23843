"""In place, as the runtimes run it: the aliasing every built-in collective has in an in-place
call (NCCL, RCCL, MSCCL, torch.distributed), and Programs judged by dependencies alone: pairs of
Programs that differ in one dependency (or one staging copy), refused without it naming rank, op
and slot, accepted with it; the in-place lowering; and the driver's verdicts."""

from __future__ import annotations

import json

import pytest

import solvers
import topologies as T
from ccl import Algorithm, Problem, Program, Request, Transfer, VerificationError, verify
from ccl.cli import main
from ccl.compiler.lowering import in_place_verdict
from ccl.core.collective import Collective, allreduce, alltoall, builtin, runtime_aliases
from ccl.core.errors import CollectiveError
from ccl.core.lower import lower
from ccl.core.program import Op
from ccl.core.serialize import collective_from_json, collective_to_json
from ccl.core.verify_program import verify_program


# ---------------------------------------------------------------------- the aliasing
@pytest.mark.parametrize("k", [1, 2])
def test_every_builtin_has_the_runtimes_in_place_aliasing(k):
    n, root = 4, 2
    expect = {  # output slot -> input slot, per rank, from the runtimes' pointer arithmetic
        "allreduce": lambda r: {j: j for j in range(k)},
        "broadcast": lambda r: {j: j for j in range(k)} if r == root else {},
        "reduce": lambda r: {j: j for j in range(k)} if r == root else {},
        "alltoall": lambda r: {j: j for j in range(n * k)},  # one buffer: every block, not only the own
        "allgather": lambda r: {r * k + t: t for t in range(k)},  # send = recv + rank x count
        "reducescatter": lambda r: {t: r * k + t for t in range(k)},  # recv = send + rank x count
        "gather": lambda r: {root * k + t: t for t in range(k)} if r == root else {},
        "scatter": lambda r: {t: root * k + t for t in range(k)} if r == root else {},
    }
    for kind, want in expect.items():
        coll = builtin(kind, n, root if kind in ("broadcast", "reduce", "gather", "scatter") else None, k)
        for r in range(n):
            got = {j: a for j, a in enumerate(coll.in_place_aliases[r]) if a is not None}
            assert got == want(r), (kind, r)
            # what starts out holding its input is always that memory in place
            assert all(coll.in_place_aliases[r][j] == a for j, a in enumerate(coll.aliases[r]) if a is not None)
        assert coll.in_place_aliases == runtime_aliases(coll)
        assert (coll.in_place_aliases == coll.aliases) == (kind != "alltoall")


def test_custom_collectives_declare_their_in_place_memory():
    base = alltoall(2)
    custom = Collective("x", "custom", 2, base.inputs, base.outputs, base.aliases)
    assert custom.in_place_aliases == custom.aliases  # the declared aliases by default
    wide = Collective("x", "custom", 2, base.inputs, base.outputs, base.aliases, in_place_aliases=((0, 1), (0, 1)))
    assert wide.in_place_aliases == ((0, 1), (0, 1))
    assert collective_from_json(collective_to_json(wide)) == wide
    assert wide.chunk_up(2).in_place_aliases == ((0, 1, 2, 3), (0, 1, 2, 3))
    # an alltoall read back from tables (as an imported file's) keeps the kind's convention
    tables = Collective("alltoall", "alltoall", 2, base.inputs, base.outputs, ((None, None), (None, None)))
    assert tables.in_place_aliases == ((0, 1), (0, 1))
    assert collective_from_json(collective_to_json(tables)) == tables


@pytest.mark.parametrize("table, needle", [
    (((1, 0), (0, 1)), "aliases input slot 0 but is input slot 1 in place"),
    (((0, 0), (0, 1)), "input slot 0 is two output slots in place"),
    (((0, 5), (0, 1)), "is input slot 5 in place"),
    (((None, 1), (0, 1)), "aliases input slot 0 but is not that memory in place"),
    (((0, 1),), "have 1 ranks, expected 2"),
])
def test_bad_in_place_aliases_are_refused(table, needle):
    base = alltoall(2)
    with pytest.raises(CollectiveError, match=needle):
        Collective("x", "custom", 2, base.inputs, base.outputs, base.aliases, in_place_aliases=table)


def test_in_place_slots_of_different_sizes_are_refused():
    base = alltoall(2).chunk_up(2)
    with pytest.raises(CollectiveError, match="their sizes differ"):
        Collective("x", "custom", 2, base.inputs, base.outputs, base.aliases,
                   in_place_aliases=((0, 1, 3, 2), (0, 1, 2, 3)), chunk_factor=2)


# ---------------------------------------------------------------------- sat / unsat pairs
def _exchange(staged: bool, wait: bool = True) -> Program:
    """Alltoall on 2 ranks: each receives the peer's block into output[peer] and sends its
    input[peer], in one step. In place output[peer] is input[peer]: the receive must not land
    there while the send reads it. ``staged``: it lands in scratch and a copy finishes it
    (after the send with ``wait``)."""
    ops = []
    for r in range(2):
        q = 1 - r
        if staged:
            ops.append([Op("recv", 0, "scratch", 0, 1, q, "", -1, 0, 0, ()),
                        Op("send", 0, "input", q, 1, q, "", -1, 0, 0, ()),
                        Op("copy", 0, "output", q, 1, -1, "scratch", 0, -1, 0, (0, 1) if wait else (0,))])
        else:
            ops.append([Op("recv", 0, "output", q, 1, q, "", -1, 0, 0, ()),
                        Op("send", 0, "input", q, 1, q, "", -1, 0, 0, ())])
    return Program("exchange", alltoall(2), T.ring(2), ops, ((0,), (0,)) if staged else ((), ()))


def test_an_alltoall_receive_racing_the_send_of_the_same_memory_is_refused_in_place():
    racy = _exchange(staged=False)
    verify_program(racy)  # out of place: separate buffers, nothing to order
    with pytest.raises(VerificationError, match=r"rank 0 op 1 \(step 0 send input\[1\].*\) reads input\[1\] "
                                                r"\(in place, output\[1\] is input\[1\]\) while op 0") as err:
        verify_program(racy, in_place=True)
    assert (err.value.rank, err.value.buffer, err.value.index) == (0, "input", 1)
    fixed = _exchange(staged=True)
    verify_program(fixed)
    assert verify_program(fixed, in_place=True).in_place
    # the copy must wait for the send too: without that dependency it is the same race
    with pytest.raises(VerificationError, match=r"rank 0 op 2 \(step 0 copy .*\) writes input\[1\] \(in place, "
                                                r"output\[1\] is input\[1\]\) while op 1"):
        verify_program(_exchange(staged=True, wait=False), in_place=True)


def test_a_receive_cannot_simply_wait_for_the_send_of_its_step():
    """Ordering the receive after the send of its own step is no fix: with rendezvous sends
    both ranks would wait for each other (the level rule refuses it)."""
    ops = [[Op("send", 0, "input", 1 - r, 1, 1 - r, "", -1, 0, 0, ()),
            Op("recv", 0, "output", 1 - r, 1, 1 - r, "", -1, 0, 0, (0,))] for r in range(2)]
    with pytest.raises(VerificationError, match="depends on op 0 .* of the same step"):
        verify_program(Program("wait", alltoall(2), T.ring(2), ops, ((), ())), in_place=True)


def _reduce_pair(wait: bool) -> Program:
    """Allreduce on 2 ranks: each sends its input, receives the peer's into scratch, and adds
    it into its output, which starts as (in place: is) its input: the reduction must wait for
    the send."""
    ops = [[Op("send", 0, "input", 0, 1, 1 - r, "", -1, 0, 0, ()),
            Op("recv", 0, "scratch", 0, 1, 1 - r, "", -1, 0, 0, ()),
            Op("reduce", 0, "output", 0, 1, -1, "scratch", 0, -1, 0, (0, 1) if wait else (1,))] for r in range(2)]
    return Program("pair", allreduce(2), T.ring(2), ops, ((0,), (0,)))


def test_an_allreduce_that_adds_into_the_memory_it_still_sends_is_refused_in_place():
    verify_program(_reduce_pair(wait=False))
    with pytest.raises(VerificationError, match=r"rank 0 op 2 \(step 0 reduce .*\) writes input\[0\] \(in place, "
                                                r"output\[0\] is input\[0\]\) while op 0 \(step 0 send"):
        verify_program(_reduce_pair(wait=False), in_place=True)
    verify_program(_reduce_pair(wait=True), in_place=True)


# ---------------------------------------------------------------------- the in-place lowering
def _alg(coll, topo, rows) -> Algorithm:
    return Algorithm("hand", coll, topo, tuple(Transfer(*row) for row in rows))


def test_the_in_place_lowering_snapshots_inputs_read_after_their_memory_is_written():
    """Rank 1 receives its block from rank 0 in step 0, into output[0], and sends input[0] on to
    rank 0 only in step 1: in place that memory already holds rank 0's block. Lowered in place,
    input[0] is snapshotted first and the send reads the snapshot."""
    coll = alltoall(2)
    rows = [(0, 0, "input", 1, 1, "output", 0, 1, "copy"), (1, 1, "input", 0, 0, "output", 1, 1, "copy")]
    alg = _alg(coll, T.ring(2), rows)
    verify(alg)
    with pytest.raises(VerificationError):
        verify(alg, in_place=True)  # lock-step: wrong in place as written
    plain = lower(alg)
    with pytest.raises(VerificationError, match="rank 1"):
        verify_program(plain, in_place=True)
    fixed = lower(alg, in_place=True)
    verify_program(fixed)
    verify_program(fixed, in_place=True)
    prologue = [op for op in fixed.ranks[1] if op.step == -1]
    assert [(op.kind, op.src_buf, op.src_index, op.buf) for op in prologue] == [("copy", "input", 0, "scratch")]
    send = next(op for op in fixed.ranks[1] if op.kind == "send")
    assert send.buf == "scratch"


@pytest.mark.parametrize("spec, kind, solver", [
    ("amd8", "alltoall", "direct"), ("ndv2:2", "alltoall", "hierarchical"), ("line:3", "alltoall", "smt"),
    ("ring:4", "allgather", "ring"), ("dgx1", "reducescatter", "recursive-halving"),
    ("hypercube:8", "allreduce", "recursive-doubling"),
])
def test_lowered_in_place_the_program_is_correct_both_ways(spec, kind, solver):
    topo = T.build(spec)
    alg = solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks), Request(solver)))
    plain, fixed = lower(alg), lower(alg, in_place=True)
    for p in (plain, fixed):
        verify_program(p)
    verify_program(fixed, in_place=True)
    if kind == "alltoall":  # the whole buffer is aliased: out of place the Program races in place
        with pytest.raises(VerificationError, match="in place, output"):
            verify_program(plain, in_place=True)
        assert fixed.n_ops > plain.n_ops
    else:  # in place is out of place's aliasing: the same Program
        assert fixed == plain


def test_the_verdict_is_the_programs_not_the_steps(tmp_path, capsys):
    topo = T.build("amd8")
    alg = solvers.synthesize(Problem(topo, alltoall(8), Request("direct")))
    verdict = in_place_verdict(alg)
    assert verdict["ok"] and verdict["lowered_in_place"] and verdict["ops_added"] == 56
    assert "output[" in verdict["why"]
    assert in_place_verdict(lower(alg))["ok"] is False  # a Program is judged as it is
    path = tmp_path / "a.json"
    from ccl.core.serialize import save_algorithm

    save_algorithm(alg, str(path))
    assert main(["verify", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["in_place_ok"] is True and data["in_place_lowered"] is True and data["in_place_ops_added"] == 56
    assert main(["verify", str(path)]) == 0
    assert "also correct in place as lowered for it (56 more ops" in capsys.readouterr().out
