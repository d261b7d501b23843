from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import topologies as T
from ccl import Algorithm, CollectiveError, Link, Topology, Transfer, VerificationError, verify
from ccl.core.collective import allgather, allreduce, reducescatter


def alg(topo, coll, transfers, rounds=None):
    return Algorithm("test", coll, topo, tuple(Transfer(*t) for t in transfers), rounds)


def ring_allgather_transfers(n):
    out = []
    for s in range(n - 1):
        for r in range(n):
            q = (r - s) % n
            out.append((s, r, "output", q, (r + 1) % n, "output", q))
    return out


def test_ring_allgather_is_correct():
    result = verify(alg(T.ring(4), allgather(4), ring_allgather_transfers(4)))
    assert result.steps == 3 and result.transfers == 12 and result.chunk_transfers == 12


def test_missing_transfer_names_rank_slot_and_what_was_expected():
    transfers = ring_allgather_transfers(4)[:-1]  # drop rank 3's last send to rank 0
    with pytest.raises(VerificationError) as info:
        verify(alg(T.ring(4), allgather(4), transfers))
    err = info.value
    assert err.rank == 0 and err.buffer == "output" and err.index == 1
    assert "should hold chunk 1" in err.message and "holds nothing" in err.message


def test_transfer_without_a_link():
    with pytest.raises(VerificationError, match="no link from rank 0 to rank 2") as info:
        verify(alg(T.ring(4), allgather(4), [(0, 0, "output", 0, 2, "output", 0)]))
    assert info.value.transfer == 0


def test_read_before_write():
    with pytest.raises(VerificationError, match="reads output\\[2\\] before anything was written") as info:
        verify(alg(T.ring(4), allgather(4), [(0, 0, "output", 2, 1, "output", 2)]))
    assert info.value.step == 0 and info.value.rank == 0


def test_copy_collision():
    with pytest.raises(VerificationError, match="receives a copy and another write"):
        verify(alg(T.fully_connected(3), allgather(3), [
            (0, 0, "output", 0, 2, "output", 0),
            (0, 1, "output", 1, 2, "output", 0),
        ]))


def test_reduce_into_nothing():
    with pytest.raises(VerificationError, match="reduces into scratch\\[0\\], which holds no value"):
        verify(alg(T.ring(2), allreduce(2), [(0, 0, "input", 0, 1, "scratch", 0, 1, "reduce")]))


def test_double_counting_is_an_error():
    twice = [(0, 0, "input", 0, 1, "output", 0, 1, "reduce"), (1, 0, "input", 0, 1, "output", 0, 1, "reduce")]
    with pytest.raises(VerificationError, match="counted more than once: chunks 0"):
        verify(alg(T.ring(2), allreduce(2), twice + [(0, 1, "input", 0, 0, "output", 0, 1, "reduce")]))


def test_several_reduces_in_one_step_add():
    n = 4
    transfers = [(0, r, "input", 0, q, "output", 0, 1, "reduce") for r in range(n) for q in range(n) if r != q]
    verify(alg(T.fully_connected(n), allreduce(n), transfers))


def test_reads_see_the_previous_step():
    # both ranks exchange and reduce in the same step: each reads the other's pre-step value
    transfers = [(0, 0, "output", 0, 1, "output", 0, 1, "reduce"), (0, 1, "output", 0, 0, "output", 0, 1, "reduce")]
    verify(alg(T.ring(2), allreduce(2), transfers))


def test_in_place_hazard_is_found_only_in_place():
    # rank 0 first accumulates rank 1's data, then sends its *input* to rank 1: right when the
    # buffers are separate, double counting when output aliases input
    transfers = [(0, 1, "input", 0, 0, "output", 0, 1, "reduce"), (1, 0, "input", 0, 1, "output", 0, 1, "reduce")]
    algorithm = alg(T.ring(2), allreduce(2), transfers)
    verify(algorithm)
    with pytest.raises(VerificationError, match="counted more than once"):
        verify(algorithm, in_place=True)


def test_wrong_chunk_in_slot():
    transfers = [(0, 0, "output", 0, 1, "output", 0), (0, 1, "output", 1, 0, "output", 0)]
    with pytest.raises(VerificationError, match="extra chunks 1"):
        verify(alg(T.ring(2), allgather(2), transfers))


def test_local_copy_needs_no_link():
    coll = reducescatter(2)
    transfers = [
        (0, 0, "input", 1, 0, "scratch", 0),
        (1, 0, "scratch", 0, 1, "output", 0, 1, "reduce"),
        (0, 1, "input", 0, 0, "output", 0, 1, "reduce"),
    ]
    verify(alg(T.ring(2), coll, transfers))


def test_capacity_checked_against_lanes_and_rounds():
    topo = Topology("pair", 2, (Link(0, 1, 1.0, 1.0, 1), Link(1, 0, 1.0, 1.0, 2)))
    coll = allgather(2).chunk_up(2)
    transfers = [(0, 0, "output", 0, 1, "output", 0, 2), (0, 1, "output", 2, 0, "output", 2, 2)]
    with pytest.raises(VerificationError, match="link 0 -> 1 carries 2 slots but has 1 lane"):
        verify(alg(topo, coll, transfers, rounds=(1,)))
    verify(alg(topo, coll, transfers, rounds=(2,)))
    verify(alg(topo, coll, transfers))  # no rounds: no capacity accounting


def test_shared_limit_capacity():
    topo = T.switch(3, bandwidth=1.0)
    coll = allgather(3)
    transfers = [(0, 0, "output", 0, q, "output", 0) for q in (1, 2)]
    transfers += [(1, r, "output", r, q, "output", r) for r in (1, 2) for q in range(3) if q != r]
    with pytest.raises(VerificationError, match="shared limit '0->switch' carries 2 slots"):
        verify(alg(topo, coll, transfers, rounds=(1, 1)))
    verify(alg(topo, coll, transfers, rounds=(2, 2)))


def test_structural_errors_at_construction():
    with pytest.raises(CollectiveError, match="rank 9 is not in 0..3"):
        alg(T.ring(4), allgather(4), [(0, 0, "output", 0, 9, "output", 0)])
    with pytest.raises(CollectiveError, match="buffer 'outpt'"):
        alg(T.ring(4), allgather(4), [(0, 0, "outpt", 0, 1, "output", 0)])
    with pytest.raises(CollectiveError, match="writes output\\[4..4\\] of rank 1, which has 4 output slots"):
        alg(T.ring(4), allgather(4), [(0, 0, "output", 0, 1, "output", 4)])
    with pytest.raises(CollectiveError, match="op 'add'"):
        alg(T.ring(4), allgather(4), [(0, 0, "output", 0, 1, "output", 0, 1, "add")])
    with pytest.raises(CollectiveError, match="local transfer onto the slots it reads"):
        alg(T.ring(4), allgather(4), [(0, 0, "output", 0, 0, "output", 0)])
    with pytest.raises(CollectiveError, match="rounds has 1 entries but transfers use 2 steps"):
        alg(T.ring(4), allgather(4), [(1, 0, "output", 0, 1, "output", 0)], rounds=(1,))
    with pytest.raises(CollectiveError, match="collective has 4 ranks but topology"):
        alg(T.ring(3), allgather(4), [])


_slot = st.tuples(st.sampled_from(["input", "output", "scratch"]), st.integers(0, 3))


@st.composite
def random_transfers(draw):
    n = 3
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        sbuf, sidx = draw(_slot)
        dbuf, didx = draw(_slot)
        rows.append((draw(st.integers(0, 3)), draw(st.integers(0, n - 1)), sbuf, sidx,
                     draw(st.integers(0, n - 1)), dbuf, didx, 1, draw(st.sampled_from(["copy", "reduce"]))))
    return rows


@given(random_transfers(), st.sampled_from(["allgather", "allreduce", "alltoall", "reducescatter"]))
def test_random_schedules_only_ever_raise_project_errors(rows, kind):
    from ccl.core.collective import builtin

    coll = builtin(kind, 3)
    try:
        algorithm = alg(T.fully_connected(3), coll, rows)
    except CollectiveError:
        return
    try:
        verify(algorithm)
        verify(algorithm, in_place=True)
    except VerificationError as exc:
        assert exc.message


_span = st.tuples(st.sampled_from(["input", "output", "scratch"]), st.integers(0, 5))


@st.composite
def random_ranges(draw):
    """Transfers of 1 to 3 slots on 3 ranks (inputs of 2 slots, outputs of up to 6): writes of
    several transfers into one slot in a step, reads of slots written in the same step."""
    rows = []
    for _ in range(draw(st.integers(0, 14))):
        sbuf, sidx = draw(_span)
        dbuf, didx = draw(_span)
        rows.append((draw(st.integers(0, 2)), draw(st.integers(0, 2)), sbuf, sidx, draw(st.integers(0, 2)), dbuf,
                     didx, draw(st.integers(1, 3)), draw(st.sampled_from(["copy", "reduce", "reduce"]))))
    return rows


def _outcome(run):
    try:
        return run()
    except VerificationError as exc:
        return exc.message, exc.rank, exc.step, exc.buffer, exc.index, exc.transfer


@given(random_ranges(), st.sampled_from(["allgather", "allreduce", "alltoall", "reducescatter"]))
def test_range_steps_agree_with_slot_steps(rows, kind):
    """The verifier's two ways through a step (a transfer's slots as one slice, or slot by slot)
    accept the same schedules and name the same first error."""
    import importlib

    from ccl.core.collective import builtin

    checker = importlib.import_module("ccl.core.verify")
    coll = builtin(kind, 3, chunks=2)
    try:
        algorithm = alg(T.fully_connected(3), coll, rows)
    except CollectiveError:
        return
    assert _outcome(lambda: checker._verify(algorithm, False)) == \
        _outcome(lambda: checker._verify(algorithm, False, by_range=False))


def test_tree_reductions_stay_range_by_range(monkeypatch):
    """Steps where several children reduce into their parent's slots, and a reduction whose
    chunks are counted twice, are run as ranges (not slot by slot), with the same outcome."""
    import importlib

    from ccl import Problem, Request, synthesize
    from ccl.core.collective import builtin

    checker = importlib.import_module("ccl.core.verify")
    topo = T.build("dgx-h100:2")
    result = synthesize(Problem(topo, builtin("reducescatter", topo.n_ranks), Request("packing", size=2**26)))
    reduces = [t for t in result.algorithm.transfers if t.op == "reduce"]
    steps = {}
    for t in reduces:
        steps.setdefault((t.step, t.dst, t.dst_buf, t.dst_index), []).append(t)
    assert any(len(ts) > 1 for ts in steps.values())  # several reductions into one slot in one step

    def refuse(*args):
        raise AssertionError("a step ran slot by slot")

    monkeypatch.setattr(checker, "_slot_step", refuse)
    assert checker._verify(result.algorithm, False).transfers == len(result.algorithm.transfers)
    twice = result.algorithm.with_transfers(result.algorithm.transfers + (reduces[-1]._replace(step=result.algorithm.n_steps),))
    with pytest.raises(VerificationError, match="counted more than once"):
        checker._verify(twice, False)
