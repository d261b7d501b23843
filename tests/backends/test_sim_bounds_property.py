"""The lower bound is never above a simulated schedule: random topologies (switches, NICs,
lanes, latencies, bandwidths, shared limits), every template that applies, lowered fused and
unfused, both modes and the simulator's options."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from backends.sim import Simulator
from ccl import CclError, Link, Problem, Request, SharedLimit, Switch, Topology, verify
from ccl.core.collective import ROOTED_KINDS, builtin
from ccl.core.lower import lower
from solvers.bounds import lower_bound

OPTIONS = [{}, {"mode": "step"}, {"slices": 3}, {"overlap_latency": True}, {"in_place": True},
           {"local_bandwidth": 50.0, "mode": "step"}]


@st.composite
def topologies(draw):
    n = draw(st.integers(2, 6))
    s = draw(st.integers(0, 2))
    V = n + s
    order = draw(st.permutations(range(V)))
    pairs = {(order[i], order[(i + 1) % V]) for i in range(V)}  # strongly connected
    extra = draw(st.lists(st.tuples(st.integers(0, V - 1), st.integers(0, V - 1)), max_size=2 * V))
    pairs |= {(a, b) for a, b in extra if a != b}
    links = tuple(Link(a, b, draw(st.sampled_from([5.0, 10.0, 12.5, 25.0])), draw(st.sampled_from([0.0, 0.3, 1.0, 2.6])),
                       draw(st.integers(1, 3))) for a, b in sorted(pairs))
    switches = tuple(Switch(f"s{i}", draw(st.sampled_from(["switch", "nic"]))) for i in range(s))
    limits = ()
    if draw(st.booleans()):
        chosen = draw(st.lists(st.sampled_from(sorted(pairs)), min_size=1, max_size=3, unique=True))
        limits = (SharedLimit("cap", tuple(chosen), draw(st.sampled_from([4.0, 15.0]))),)
    return Topology("random", n, links, switches, limits)


@settings(max_examples=60)
@given(topologies(), st.data())
def test_bound_never_above_simulation(topo, data):
    n = topo.n_ranks
    try:
        topo.flat()
    except CclError:
        return
    name = data.draw(st.sampled_from(sorted(solvers.TEMPLATES)))
    kind = data.draw(st.sampled_from(solvers.SOLVERS[name].kinds))
    root = data.draw(st.integers(0, n - 1)) if kind in ROOTED_KINDS else None
    try:
        alg = solvers.synthesize(Problem(topo, builtin(kind, n, root), Request(name, chunks=data.draw(st.integers(1, 3)))))
    except CclError:
        return  # e.g. hierarchical on one node
    verify(alg)
    size = data.draw(st.sampled_from([1, 999, 2**20, 3 * 2**24 + 7]))
    bounds = {held: lower_bound(topo, alg.collective, size, lane_latency=held) for held in (True, False)}
    for fuse in (True, False):
        sim = Simulator(lower(alg, fuse=fuse))
        for options in OPTIONS:
            report = sim.run(size, **options).report
            bound = bounds[not options.get("overlap_latency", False)]
            assert report.time_us >= bound.bound_us * (1 - 1e-9), (name, kind, fuse, options, report.time_us, bound)
