"""Pareto frontiers: exact, verified, starting from the bounds and stopping at the bandwidth
bound."""

from __future__ import annotations

from fractions import Fraction

import pytest

import topologies as T
from ccl import verify
from ccl.core.collective import builtin
from solvers.smt import pareto


def points(frontier):
    return [(p.steps, p.rounds, p.chunks) for p in frontier.points]


def check(frontier):
    ratios = [p.rounds_per_chunk for p in frontier.points]
    steps = [p.steps for p in frontier.points]
    assert steps == sorted(set(steps)), "one point per step count, in order"
    assert ratios == sorted(set(ratios), reverse=True), "each point strictly better in bandwidth"
    for p in frontier.points:
        verify(p.algorithm)
        assert p.algorithm.n_steps == p.steps and p.algorithm.total_rounds == p.rounds
        assert p.algorithm.collective.chunk_factor == p.chunks
        assert p.rounds_per_chunk >= frontier.rounds_bound


def test_dgx1_allgather_frontier_reaches_seven_sixths_with_a_two_step_point():
    frontier = pareto(T.dgx1(), builtin("allgather", 8), 6)
    check(frontier)
    assert frontier.step_bound == 2 and frontier.rounds_bound == Fraction(7, 6)
    assert frontier.complete and frontier.reached_bound
    assert points(frontier) == [(2, 3, 2), (3, 7, 6)]
    # Every instance below the frontier was proven unsat, never assumed.
    unsat = {(c.steps, c.rounds, c.chunks) for c in frontier.checks if c.status == "unsat"}
    assert {(2, 7, 6), (2, 6, 5), (2, 5, 4), (2, 4, 3), (2, 8, 6), (2, 7, 5)} <= unsat


def test_frontier_stops_at_max_chunks_when_the_bound_is_out_of_reach():
    # A directed 4-ring allgather: 3 steps; 3 rounds per chunk is the bound (3 chunks through 1 lane).
    frontier = pareto(T.ring(4, directed=True), builtin("allgather", 4), 2)
    check(frontier)
    assert points(frontier) == [(3, 3, 1)]
    assert frontier.reached_bound


def test_bidirectional_ring_frontier():
    frontier = pareto(T.ring(4), builtin("allgather", 4), 2)
    check(frontier)
    assert frontier.points[0].steps == 2
    assert frontier.points[-1].rounds_per_chunk == Fraction(3, 2)  # 3 chunks over 2 lanes
    assert frontier.reached_bound


def test_allreduce_frontier_with_the_combining_encoding():
    frontier = pareto(T.ring(3), builtin("allreduce", 3), 2)
    check(frontier)
    assert frontier.points[0].steps == 1  # everyone sends to everyone and reduces
    assert frontier.complete


def test_reducescatter_frontier_through_the_dual():
    frontier = pareto(T.ring(4), builtin("reducescatter", 4), 2)
    check(frontier)
    assert frontier.points[-1].rounds_per_chunk == Fraction(3, 2)


@pytest.mark.slow
def test_dgx1_frontier_is_the_same_without_symmetry_breaking():
    """Symmetry breaking keeps the search exact: the frontier without it is the same."""
    on = pareto(T.dgx1(), builtin("allgather", 8), 6)
    off = pareto(T.dgx1(), builtin("allgather", 8), 6, symmetry=False)
    assert points(on) == points(off)


@pytest.mark.slow
def test_dgx1_reducescatter_and_composed_allreduce_frontiers():
    rs = pareto(T.dgx1(), builtin("reducescatter", 8), 6)
    check(rs)
    assert rs.reached_bound and rs.points[-1].rounds_per_chunk == Fraction(7, 6)
    composed = pareto(T.dgx1(), builtin("allreduce", 8), 2, method="compose")
    for p in composed.points:
        verify(p.algorithm)
    assert composed.points[0].steps == 4


@pytest.mark.parametrize("spec", ["ring:4", "line:4", "star:4", "torus:2x3"])
def test_frontier_matches_brute_force(spec):
    """The search logic against every instance decided one by one: same frontier."""
    from solvers.smt import searcher
    from solvers.smt.search import Satisfiable

    topo = T.build(spec)
    coll = builtin("allgather", topo.n_ranks)
    frontier = pareto(topo, coll, 2)
    last = frontier.points[-1].steps
    search = searcher(topo, coll)
    feasible = []
    for steps in range(frontier.step_bound, last + 2):
        for chunks in (1, 2):
            for rounds in range(steps, steps + 4 * chunks * topo.n_ranks):
                if isinstance(search.decide(steps, rounds, chunks), Satisfiable):
                    feasible.append((steps, Fraction(rounds, chunks), chunks, rounds))
                    break
    expected = []
    for steps, ratio, chunks, rounds in sorted(feasible, key=lambda x: (x[0], x[1], x[2])):
        if all(ratio < p[1] for p in expected):
            expected.append((steps, ratio, chunks, rounds))
    assert points(frontier) == [(s, r, c) for s, _, c, r in expected]
