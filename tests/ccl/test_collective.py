from __future__ import annotations

import pytest

from ccl import CollectiveError
from ccl.core.collective import (
    BUILTIN_KINDS,
    MULTI_ROOT_KINDS,
    ROOTED_KINDS,
    Collective,
    allgather,
    allreduce,
    alltoall,
    broadcast,
    builtin,
    custom,
    gather,
    multi_root,
    reduce,
    reducescatter,
    replicated_broadcast,
    scatter,
)


def test_allgather_layout():
    c = allgather(3)
    assert c.inputs == ((0,), (1,), (2,))
    assert c.outputs[1] == (frozenset({0}), frozenset({1}), frozenset({2}))
    assert c.aliases[1] == (None, 0, None)
    assert not c.is_reducing


def test_reducescatter_sums_one_slot_per_rank():
    c = reducescatter(3)
    # rank 1 ends with the sum of every rank's input slot 1
    assert c.outputs[1] == (frozenset({1, 4, 7}),)
    assert c.aliases[1] == (1,)
    assert c.is_reducing


def test_allreduce_and_reduce():
    assert allreduce(4).outputs[2] == (frozenset(range(4)),)
    r = reduce(4, root=2)
    assert r.outputs[2] == (frozenset(range(4)),)
    assert r.outputs[0] == ()
    assert r.aliases[2] == (0,)


def test_alltoall_layout():
    c = alltoall(3)
    # rank 2's slot 0 comes from rank 0's slot 2 (chunk 0*3+2)
    assert c.outputs[2][0] == frozenset({2})
    assert c.inputs[0] == (0, 1, 2)
    assert c.aliases[2] == (None, None, 2)


def test_rooted_layouts():
    b = broadcast(4, root=1)
    assert b.inputs == ((), (0,), (), ())
    assert all(slots == (frozenset({0}),) for slots in b.outputs)
    g = gather(3, root=0)
    assert g.outputs[0] == (frozenset({0}), frozenset({1}), frozenset({2}))
    assert g.outputs[1] == ()
    s = scatter(3, root=2)
    assert s.inputs[2] == (0, 1, 2)
    assert s.outputs[0] == (frozenset({0}),)
    assert s.aliases[2] == (2,)


def test_chunk_up_splits_every_slot_contiguously():
    c = allgather(2).chunk_up(3)
    assert c.inputs == ((0, 1, 2), (3, 4, 5))
    assert c.outputs[0] == tuple(frozenset({i}) for i in range(6))
    assert c.aliases[1] == (None, None, None, 0, 1, 2)
    assert c.chunk_factor == 3
    red = allreduce(2).chunk_up(2)
    assert red.outputs[0] == (frozenset({0, 2}), frozenset({1, 3}))


def test_chunk_up_composes():
    for make in (allgather, allreduce, alltoall, reducescatter):
        assert make(3).chunk_up(2).chunk_up(3) == make(3).chunk_up(6)


def test_chunk_up_builds_what_the_checked_constructor_accepts():
    """chunk_up skips the constructor's checks (its tables are valid by construction): the
    result passes them when built the checked way, and equals and hashes alike."""
    from ccl.core.collective import BUILTIN_KINDS, ROOTED_KINDS, Collective, builtin

    for kind in BUILTIN_KINDS:
        base = builtin(kind, 5, root=2 if kind in ROOTED_KINDS else None)
        for k in (2, 3):
            c = base.chunk_up(k)
            checked = Collective(c.name, c.kind, c.n_ranks, c.inputs, c.outputs, c.aliases, c.root, c.chunk_factor)
            assert c == checked and hash(c) == hash(checked) and repr(c) == repr(checked)
            assert c.chunk_up(2) == base.chunk_up(2 * k)


def test_chunk_up_shares_the_pieces_of_equal_needs():
    """Ranks that need the same chunks share one split (an allgather's 128 ranks: 128 splits of
    k sets each, not 16,384): memory and time at scale."""
    c = allgather(6).chunk_up(4)
    for slot in range(len(c.outputs[0])):
        assert all(c.outputs[r][slot] is c.outputs[0][slot] for r in range(6))
    red = allreduce(3).chunk_up(2)
    assert red.outputs[1][0] is red.outputs[2][0] and red.outputs[1][0] == frozenset({0, 2, 4})


def test_chunk_up_identity_and_bad_factor():
    c = allgather(4)
    assert c.chunk_up(1) is c
    with pytest.raises(CollectiveError):
        c.chunk_up(0)


def test_builtin_by_name_and_errors():
    for kind in BUILTIN_KINDS:
        root = 1 if kind in ROOTED_KINDS else None
        c = builtin(kind, 4, root, chunks=2)
        assert c.kind == kind and c.chunk_factor == 2 and c.n_ranks == 4
    assert builtin("reduce_scatter", 2).kind == "reducescatter"
    with pytest.raises(CollectiveError, match="unknown collective"):
        builtin("allshuffle", 4)
    with pytest.raises(CollectiveError, match="has no root"):
        builtin("allgather", 4, root=1)
    with pytest.raises(CollectiveError, match="root must be a rank"):
        builtin("broadcast", 4, root=4)
    with pytest.raises(CollectiveError, match="positive number of ranks"):
        builtin("allgather", 0)


def test_custom_from_conditions():
    # a shift: chunk r moves from rank r to rank r+1
    c = custom("shift", 3, pre=[(r, r) for r in range(3)], post=[(r, (r + 1) % 3) for r in range(3)])
    assert c.kind == "custom"
    assert c.inputs == ((0,), (1,), (2,))
    assert c.outputs[1] == (frozenset({0}),)
    assert c.aliases == ((None,), (None,), (None,))


def test_custom_aliases_a_chunk_that_stays():
    c = custom("keep", 2, pre=[(0, 0), (1, 1)], post=[(0, 0), (1, 0)])
    assert c.aliases[0] == (0, None)


def test_custom_reducing_postcondition():
    c = custom("sum2", 2, pre=[(0, 0), (1, 1)], post=[({0, 1}, 1)])
    assert c.is_reducing
    assert c.aliases[1] == (0,)


def test_custom_postcondition_that_can_never_be_met():
    with pytest.raises(CollectiveError, match="can never be met"):
        custom("bad", 2, pre=[(0, 0)], post=[(5, 1)])


def test_custom_rank_out_of_range():
    with pytest.raises(CollectiveError, match="not in 0..1"):
        custom("bad", 2, pre=[(0, 2)], post=[])
    with pytest.raises(CollectiveError, match="postcondition names rank 7"):
        custom("bad", 2, pre=[(0, 0)], post=[(0, 7)])


def test_validation_of_explicit_form():
    with pytest.raises(CollectiveError, match="aliases input slot 3"):
        Collective("x", "custom", 1, ((0,),), ((frozenset({0}),),), ((3,),))
    with pytest.raises(CollectiveError, match="same input chunk in two slots"):
        Collective("x", "custom", 1, ((0, 0),), ((frozenset({0}),),), ((None,),))
    with pytest.raises(CollectiveError, match="requires nothing"):
        Collective("x", "custom", 1, ((0,),), ((frozenset(),),), ((None,),))
    with pytest.raises(CollectiveError, match="not part of what the slot must hold"):
        Collective("x", "custom", 1, ((0, 1),), ((frozenset({0}),),), ((1,),))


def test_origins_and_description():
    c = alltoall(2)
    assert c.origins()[3] == ((1, 1),)
    assert "rank 1 input[1]" in c.describe_chunk(3)


def test_multi_root_layouts():
    bcast = multi_root("broadcast", 3, (0, 2))
    assert bcast.kind == "custom" and bcast.name == "broadcast-roots-0-2"
    assert bcast.inputs == ((0,), (), (1,))
    assert all(slots == (frozenset({0}), frozenset({1})) for slots in bcast.outputs)
    assert bcast.aliases[2] == (None, 0)
    gather_ = multi_root("gather", 3, (1, 2))
    assert gather_.outputs[0] == () and gather_.outputs[1] == tuple(frozenset({q}) for q in range(3))
    scatter_ = multi_root("scatter", 2, (0, 1))
    assert scatter_.inputs == ((0, 1), (2, 3))
    assert scatter_.outputs == ((frozenset({0}), frozenset({2})), (frozenset({1}), frozenset({3})))
    reduce_ = multi_root("reduce", 3, (0, 1))
    assert reduce_.is_reducing and reduce_.outputs[2] == ()
    assert reduce_.outputs[0] == reduce_.outputs[1] == (frozenset({0, 1, 2}),)
    assert multi_root("gather", 4, (0, 3), chunks=2) == multi_root("gather", 4, (0, 3)).chunk_up(2)
    assert set(MULTI_ROOT_KINDS) == set(ROOTED_KINDS)


def test_replicated_broadcast_layout():
    coll = replicated_broadcast(4, (0, 2))
    assert coll.name == "broadcast-replicated-0-2" and coll.kind == "custom"
    assert coll.inputs == ((0,), (), (0,), ())
    assert all(slots == (frozenset({0}),) for slots in coll.outputs)
    assert coll.aliases == ((0,), (None,), (0,), (None,))


def test_multi_root_input_errors():
    with pytest.raises(CollectiveError, match="not a rank"):
        multi_root("broadcast", 4, (0, 9))
    with pytest.raises(CollectiveError, match="twice"):
        multi_root("gather", 4, (1, 1))
    with pytest.raises(CollectiveError, match="multi-root"):
        multi_root("alltoall", 4, (0,))
    with pytest.raises(CollectiveError, match="at least one root"):
        multi_root("reduce", 4, ())
    with pytest.raises(CollectiveError, match="positive number of ranks"):
        multi_root("scatter", 0, (0,))
    with pytest.raises(CollectiveError, match="not a rank"):
        replicated_broadcast(4, (True,))
    with pytest.raises(CollectiveError, match="distinct"):
        replicated_broadcast(4, (1, 1))
