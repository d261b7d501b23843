"""Every kind of collective the exact solver takes: reducing ones through the dual and the
combining encoding, composition, custom and multi-root collectives, scratch bounds."""

from __future__ import annotations

import pytest

import solvers
import topologies as T
from ccl import CollectiveError, InfeasibleError, Problem, Request, verify
from ccl.core.collective import BUILTIN_KINDS, builtin, custom, multi_root, replicated_broadcast
from solvers.smt import searcher
from solvers.smt.formulation import dual_obstacle, formulation


def solve(topo, coll, **request):
    algorithm = solvers.synthesize(Problem(topo, coll, Request("smt", **request)))
    verify(algorithm)
    return algorithm


@pytest.mark.parametrize("kind", BUILTIN_KINDS)
@pytest.mark.parametrize("topo", [T.ring(4), T.star(4), T.line(3), T.hypercube(4)], ids=lambda t: t.name)
def test_every_builtin_least_steps_verifies(kind, topo):
    coll = builtin(kind, topo.n_ranks, 1 if kind in ("broadcast", "reduce", "gather", "scatter") else None)
    algorithm = solve(topo, coll, chunks=2)
    assert algorithm.n_steps >= 1


@pytest.mark.parametrize("kind", ["reducescatter", "reduce"])
def test_dual_and_combining_agree_on_least_steps_and_rounds(kind):
    topo = T.ring(4)
    coll = builtin(kind, 4)
    dual = solve(topo, coll, options=(("method", "dual"),))
    direct = solve(topo, coll, options=(("method", "combining"),))
    assert dual.n_steps == direct.n_steps
    # The combining model contains every dual schedule, so it never needs more rounds.
    assert direct.total_rounds <= dual.total_rounds
    assert {t.op for t in dual.transfers} == {"reduce"}


def test_allreduce_direct_and_composed_on_dgx1():
    dgx1 = T.dgx1()
    direct = solve(dgx1, builtin("allreduce", 8), steps=2)
    assert direct.n_steps == 2 and direct.collective.chunk_factor == 1
    composed = solve(dgx1, builtin("allreduce", 8), options=(("method", "compose"),))
    assert composed.n_steps == 4  # 2 steps of reducescatter + 2 of allgather
    assert composed.collective.chunk_factor == 8
    with pytest.raises(InfeasibleError):
        solve(dgx1, builtin("allreduce", 8), steps=3, rounds=20, options=(("method", "compose"),))


def test_allreduce_beats_the_reducescatter_plus_allgather_cut_sum_on_a_star():
    """The centre of a star reduces: allreduce needs fewer rounds per chunk than the sum of the
    reducescatter and allgather cut bounds, so that sum is no allreduce bound."""
    from solvers.bounds import rounds_per_chunk_bound

    star = T.star(4)
    rs_ag = rounds_per_chunk_bound(star, "allgather") + rounds_per_chunk_bound(star, "reducescatter")  # per part
    algorithm = solve(star, builtin("allreduce", 4), steps=4, chunks=3)  # pipelined: 4 rounds
    per_part = algorithm.total_rounds / algorithm.collective.chunk_factor * 4  # a part is a quarter
    assert algorithm.total_rounds == 4 and per_part < rs_ag


def test_custom_copy_and_custom_sum():
    ring = T.ring(5, directed=True)
    shift = custom("shift2", 5, pre=[(r, r) for r in range(5)], post=[(r, (r + 2) % 5) for r in range(5)])
    algorithm = solve(ring, shift)
    assert algorithm.n_steps == 2
    pair_sums = custom("pairs", 4, pre=[(r, r) for r in range(4)], post=[({0, 1}, 2), ({2, 3}, 0)])
    algorithm = solve(T.ring(4), pair_sums)
    assert algorithm.n_steps >= 1 and any(t.op == "reduce" for t in algorithm.transfers)


@pytest.mark.parametrize("kind", ["broadcast", "gather", "scatter", "reduce"])
def test_multi_root_collectives(kind):
    dgx1 = T.dgx1()
    coll = multi_root(kind, 8, (0, 7))
    assert coll.kind == "custom" and coll.name == f"{kind}-roots-0-7"
    algorithm = solve(dgx1, coll)
    assert algorithm.n_steps <= 3


def test_replicated_broadcast_uses_the_nearest_root():
    ring = T.ring(8)
    one = solve(ring, replicated_broadcast(8, (0,)))
    two = solve(ring, replicated_broadcast(8, (0, 4)))
    assert (one.n_steps, two.n_steps) == (4, 2)


def test_scratch_bound_on_relays():
    # On a line 0-1-2 rank 1 must relay chunk 0 to rank 2 without needing it: one scratch slot.
    coll = custom("far", 3, pre=[(0, 0)], post=[(0, 2)])
    line = T.line(3)
    algorithm = solve(line, coll)
    assert algorithm.scratch_slots == (0, 1, 0)
    with pytest.raises(InfeasibleError) as err:
        solve(line, coll, options=(("scratch", 0),))
    assert "z3" in err.value.bound
    assert solve(line, coll, options=(("scratch", 1),)).n_steps == 2


def test_shared_limits_are_respected():
    # On a switch every rank has one port: 3 chunks in need 3 rounds per chunk.
    topo = T.switch(4)
    algorithm = solve(topo, builtin("allgather", 4), steps=1)
    assert algorithm.total_rounds == 3
    with pytest.raises(InfeasibleError):
        solve(topo, builtin("allgather", 4), steps=2, rounds=2)


def test_dual_obstacles_are_named():
    assert dual_obstacle(builtin("reducescatter", 4)) is None
    assert "two sums" in dual_obstacle(builtin("allreduce", 4))
    assert "does not reduce" in dual_obstacle(builtin("allgather", 4))
    with pytest.raises(CollectiveError, match="reduces"):
        formulation(T.ring(4), builtin("allreduce", 4), "routing")
    with pytest.raises(CollectiveError, match="no dual"):
        formulation(T.ring(4), builtin("allreduce", 4), "dual")


def test_search_objects_answer_instances_directly():
    search = searcher(T.dgx1(), builtin("allgather", 8))
    point = search.instance(3, 7, 6)
    assert (point.steps, point.rounds, point.chunks) == (3, 7, 6)
    verify(point.algorithm)
