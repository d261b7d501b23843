"""Sat/unsat boundaries of the exact solver: where z3 must find a schedule and where a bound or
z3 must prove there is none. Every schedule returned is verified."""

from __future__ import annotations

import pytest

import solvers
import topologies as T
from ccl import InfeasibleError, Problem, Request, verify
from ccl.core.collective import builtin
from solvers.smt import searcher
from solvers.smt.search import Unsatisfiable


def smt(topo, kind, **request):
    problem = Problem(topo, builtin(kind, topo.n_ranks), Request("smt", **request))
    algorithm = solvers.synthesize(problem)
    verify(algorithm)
    assert algorithm.solver == "smt" and algorithm.rounds is not None
    assert len(algorithm.rounds) == algorithm.n_steps
    return algorithm


@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
def test_dgx1_has_no_one_step_schedule_and_has_a_two_step_one(kind):
    dgx1 = T.dgx1()
    with pytest.raises(InfeasibleError) as err:
        smt(dgx1, kind, steps=1, rounds=20)
    assert err.value.bound == "hop bound"
    # z3 proves it too, without the bound: one step, any number of rounds.
    decision = searcher(dgx1, builtin(kind, 8)).decide(1, None, 1)
    assert decision == Unsatisfiable(rounds_bound_used=False)
    two = smt(dgx1, kind, steps=2)
    assert two.n_steps == 2
    assert smt(dgx1, kind).n_steps == 2  # least steps


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_directed_ring_allgather_needs_exactly_n_minus_1_steps(n):
    ring = T.ring(n, directed=True)
    assert smt(ring, "allgather").n_steps == n - 1
    assert isinstance(searcher(ring, builtin("allgather", n)).decide(n - 2, None, 1), Unsatisfiable)
    with pytest.raises(InfeasibleError):
        smt(ring, "allgather", steps=n - 2)


@pytest.mark.parametrize("n", [4, 5, 6, 7])
def test_bidirectional_ring_allgather_needs_half_the_ring(n):
    # Both directions at once: the hop bound floor(n/2) is met (the unidirectional ring's n-1
    # steps are what one direction alone needs).
    assert smt(T.ring(n), "allgather").n_steps == n // 2
    assert isinstance(searcher(T.ring(n), builtin("allgather", n)).decide(n // 2 - 1, None, 1), Unsatisfiable)


@pytest.mark.parametrize("n", [3, 4, 6, 8])
def test_fully_connected_allgather_has_a_one_step_schedule(n):
    algorithm = smt(T.fully_connected(n), "allgather", steps=1, rounds=1)
    assert algorithm.n_steps == 1 and algorithm.rounds == (1,)


def test_z3_proves_the_rounds_boundary_of_two_step_dgx1_allgather():
    dgx1 = T.dgx1()
    assert smt(dgx1, "allgather", steps=2, rounds=3, chunks=2).total_rounds == 3
    with pytest.raises(InfeasibleError) as err:  # 4/3 rounds per chunk is above the 7/6 bound: z3's proof
        smt(dgx1, "allgather", steps=2, rounds=4, chunks=3)
    assert err.value.bound == "z3 proof (unsat)"
    with pytest.raises(InfeasibleError) as err:
        smt(dgx1, "allgather", steps=3, rounds=6, chunks=6)
    assert "rounds per chunk" in err.value.bound
    with pytest.raises(InfeasibleError) as err:
        smt(dgx1, "allgather", steps=3, rounds=2)
    assert err.value.bound == "rounds >= steps"


def test_least_rounds_at_fixed_steps_is_proven():
    dgx1 = T.dgx1()
    algorithm = smt(dgx1, "allgather", steps=2, chunks=2)
    assert algorithm.total_rounds == 3
    with pytest.raises(InfeasibleError):
        smt(dgx1, "allgather", steps=2, rounds=2, chunks=2)


def test_least_steps_within_a_rounds_budget():
    ring = T.ring(6, directed=True)
    algorithm = smt(ring, "allgather", rounds=5)
    assert algorithm.n_steps == 5 and algorithm.total_rounds == 5
    with pytest.raises(InfeasibleError):
        smt(ring, "allgather", rounds=4)
