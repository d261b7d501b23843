"""The lane bound of broadcast and reduce (solvers.bounds.lane_bound, docs/bounds.md): its
closed-form minimum against projections onto the simplex, its values on amd8, where it applies, and no
simulated schedule below it (pipelined templates and the judged packing, on random
switchless topologies, both kinds)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
import topologies as T
from ccl import CclError, Link, Problem, Request, Topology, compiler
from ccl.core.collective import builtin
from solvers.bounds import lane_bound, lower_bound, root_lanes
from solvers.bounds.lanes import lane_cost


def _simplex_lane_cost(a: float, b: float, tau: float, most: int) -> float:
    """min over m <= most of the gaps' cost: a d.d + b j.d is a |d + b j / (2a)|^2 less a
    constant, so the best gaps are the Euclidean projection of -b j / (2a) onto the simplex
    {d >= 0, sum d = tau} (sorting, Held-Wolfe-Crowder)."""
    best = a * tau * tau
    for m in range(1, most + 1):
        j = np.arange(m + 1, dtype=float)
        v = -b * j / (2 * a)
        u = np.sort(v)[::-1]
        cum = np.cumsum(u) - tau
        k = np.nonzero(u - cum / np.arange(1, m + 2) > 0)[0][-1]
        d = np.maximum(v - cum[k] / (k + 1), 0.0)
        assert d.sum() == pytest.approx(tau)
        best = min(best, a * d @ d + b * j @ d)
    return best


@pytest.mark.parametrize("a, b, tau", [(3.0, 7.0, 20.0), (30000.0, 70000.0, 40.0), (1.0, 50.0, 10.0),
                                       (2.0, 0.5, 3.0), (5.0, 1.0, 0.2)])
def test_lane_cost_is_the_least_over_gaps(a, b, tau):
    exact = lane_cost(a, b, tau)
    m = int(((1 + 16 * a * tau / b) ** 0.5 - 1) / 2)
    assert m <= 12  # the numeric search below covers every useful m
    assert exact == pytest.approx(_simplex_lane_cost(a, b, tau, m + 6), rel=1e-9)


def test_lane_cost_edges():
    assert lane_cost(0.0, 5.0, 10.0) == 0.0  # two ranks: no gap to pay for
    assert lane_cost(5.0, 0.0, 10.0) == 0.0  # free messages
    assert lane_cost(5.0, 1e9, 10.0) == pytest.approx(5.0 * 100)  # latency dear: no delivery pays


@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_amd8_rooted_bound_is_raised_by_the_root_lanes(kind):
    topo = T.amd8()
    size = 2**26
    held = lower_bound(topo, builtin(kind, 8, 0), size)
    parts = dict(held.parts)
    assert parts["cut"] == pytest.approx(178.46, abs=0.01)
    assert parts["lanes"] == pytest.approx(188.08, abs=0.01) and held.bound_us == parts["lanes"]
    assert not held.exact and "root's lanes" in held.method
    overlapped = lower_bound(topo, builtin(kind, 8, 0), size, lane_latency=False)
    assert "lanes" not in dict(overlapped.parts) and overlapped.bound_us == pytest.approx(parts["cut"])
    # the report of a simulation with overlapped latencies carries the cut bound
    alg = solvers.synthesize(Problem(topo, builtin(kind, 8, 0), Request("direct")))
    assert compiler.simulate(alg, size, baselines=False).bound_us == pytest.approx(parts["lanes"])
    assert compiler.simulate(alg, size, baselines=False, overlap_latency=True).bound_us == pytest.approx(parts["cut"])


def test_lane_bound_applies_without_switches_only():
    assert root_lanes(T.dgx2(2), 0, False) is None
    assert "lanes" not in dict(lower_bound(T.dgx2(2), builtin("broadcast", 32, 0), 2**26).parts)
    assert root_lanes(T.ring(2), 0, False) is None  # two ranks: nothing to forward
    lanes = root_lanes(T.amd8(), 3, True)  # reduce to rank 3: the lanes into it
    assert lanes is not None and sum(k for _, _, k in lanes.lanes) == 38 and lanes.root == pytest.approx(380e3)
    # never below what it is given
    assert lane_bound(lanes, 1.0, 50.0) == 50.0


def test_lane_bound_grows_like_the_square_root_of_the_size():
    # the excess over the cut bound: twice sqrt(size) gives about sqrt(2) times it
    topo, coll = T.amd8(), builtin("broadcast", 8, 0)
    excess = []
    for size in (2**28, 2**30):
        b = dict(lower_bound(topo, coll, size).parts)
        excess.append(b["lanes"] - b["cut"])
    assert excess[1] / excess[0] == pytest.approx(2.0, rel=0.1)


@st.composite
def switchless(draw):
    n = draw(st.integers(3, 5))
    pairs = {(i, (i + 1) % n) for i in range(n)}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    pairs |= {(a, b) for a, b in extra if a != b}
    if draw(st.booleans()):
        pairs |= {(b, a) for a, b in pairs}
    links = tuple(Link(a, b, draw(st.sampled_from([10.0, 25.0])), draw(st.sampled_from([0.3, 1.0, 2.6])),
                       draw(st.integers(1, 3))) for a, b in sorted(pairs))
    return Topology("random", n, links)


@settings(max_examples=25, deadline=None)
@given(switchless(), st.data())
def test_no_schedule_below_the_lane_bound(topo, data):
    n = topo.n_ranks
    kind = data.draw(st.sampled_from(["broadcast", "reduce"]))
    root = data.draw(st.integers(0, n - 1))
    size = data.draw(st.sampled_from([2**16, 2**20, 2**24]))
    coll = builtin(kind, n, root)
    bound = lower_bound(topo, coll, size)
    requests = [Request(name, chunks=k) for name, k in itertools.product(
        [s for s in sorted(solvers.TEMPLATES) if kind in solvers.SOLVERS[s].kinds], (1, 8))]
    requests.append(Request("packing", size=size))
    for request in requests:
        try:
            result = compiler.synthesize(Problem(topo, coll, request))
        except CclError:
            continue
        for options in ({}, {"slices": 4}):
            report = compiler.simulate(result, size, baselines=False, **options)
            assert report.bound_us == pytest.approx(bound.bound_us)
            assert report.time_us >= bound.bound_us * (1 - 1e-9), (request, options, report.time_us, bound)
