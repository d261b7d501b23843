from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topologies as T
from ccl import CollectiveError, Link, Switch, Topology
from ccl.core.collective import builtin
from solvers.bounds import cut_ratio, needed_pairs, rounds_per_chunk_bound, step_bound


def test_dgx1_rounds_per_chunk_is_seven_sixths():
    dgx1 = T.dgx1()
    assert rounds_per_chunk_bound(dgx1, "allgather") == Fraction(7, 6)
    assert rounds_per_chunk_bound(dgx1, "reducescatter") == Fraction(7, 6)
    # allreduce: one-way gossip, 2(n-1) sends per chunk over 48 lanes (RS + AG would claim 7/3,
    # which combining schedules can beat on some topologies, so it is not used)
    assert rounds_per_chunk_bound(dgx1, "allreduce") == Fraction(14, 48)
    assert rounds_per_chunk_bound(dgx1, "broadcast") is None


def test_dgx1_bandwidth_bound_is_seven_parts_over_six_lanes():
    bound = cut_ratio(T.dgx1(), "bandwidth")
    assert bound.ratio == pytest.approx(7 / (6 * 25.0), rel=1e-12)
    assert bound.unit == "GB/s"


@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_switch_bound_is_n_minus_one_parts_over_port_bandwidth(n):
    # allgather of M bytes total on one switch with per-rank bandwidth b: (n-1) M / (n b)
    bound = cut_ratio(T.switch(n, bandwidth=40.0), "bandwidth")
    assert bound.ratio == pytest.approx((n - 1) / 40.0, rel=1e-12)


def test_multinode_bound_is_the_nic():
    bound = cut_ratio(T.ndv2(2), "bandwidth")
    assert bound.ratio == pytest.approx(8 / (1e6 / 105 / 1e3), rel=1e-5)
    assert {v for v in bound.witness if v < 16} in ({*range(8)}, {*range(8, 16)})


def test_step_bounds():
    assert step_bound(T.dgx1(), builtin("allgather", 8)) == 2
    assert step_bound(T.ring(8), builtin("allgather", 8)) == 4
    assert step_bound(T.line(5), builtin("allgather", 5)) == 4
    assert step_bound(T.fully_connected(6), builtin("alltoall", 6)) == 1
    assert step_bound(T.line(5), builtin("broadcast", 5, 0)) == 4
    assert step_bound(T.line(5), builtin("broadcast", 5, 2)) == 2
    assert step_bound(T.switch(4), builtin("allgather", 4)) == 1
    assert step_bound(T.ndv2(2), builtin("allgather", 16)) == 2


def test_disconnected_topology():
    topo = Topology("split", 4, (Link(0, 1, 1.0, 1.0), Link(1, 0, 1.0, 1.0), Link(2, 3, 1.0, 1.0), Link(3, 2, 1.0, 1.0)))
    with pytest.raises(CollectiveError, match="no path"):
        step_bound(topo, builtin("allgather", 4))
    assert cut_ratio(topo, "lanes").ratio == math.inf


def test_needed_pairs():
    assert set(needed_pairs(builtin("broadcast", 3, 1))) == {(1, 0), (1, 2)}
    assert len(needed_pairs(builtin("alltoall", 4))) == 12


def brute_force(topo: Topology, reverse: bool = False) -> Fraction:
    n, V = topo.n_ranks, topo.n_vertices
    best = Fraction(0)
    for size in range(1, V + 1):
        for S in itertools.combinations(range(V), size):
            S = set(S)
            k = sum(1 for v in S if v < n)
            if k == 0 or k == n:
                continue
            cut = sum(link.lanes for link in topo.links
                      if ((link.dst in S and link.src not in S) if reverse else (link.src in S and link.dst not in S)))
            if cut == 0:
                return Fraction(10**18)
            best = max(best, Fraction(k, cut))
    return best


@st.composite
def small_topologies(draw):
    n = draw(st.integers(2, 5))
    s = draw(st.integers(0, 2))
    V = n + s
    pairs = [(a, b) for a in range(V) for b in range(V) if a != b]
    chosen = draw(st.lists(st.sampled_from(pairs), min_size=1, unique=True))
    links = tuple(Link(a, b, 1.0, 1.0, draw(st.integers(1, 3))) for a, b in chosen)
    return Topology("random", n, links, tuple(Switch(f"s{i}") for i in range(s)))


@settings(max_examples=150)
@given(small_topologies(), st.booleans())
def test_cut_ratio_matches_brute_force(topo, reverse):
    got = cut_ratio(topo, "lanes", reverse=reverse).ratio
    want = brute_force(topo, reverse)
    if want == Fraction(10**18):
        assert got == math.inf
    else:
        assert got == want
