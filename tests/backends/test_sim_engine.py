"""The event loop's two paths agree, and every template's schedule runs to completion."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
import topologies as T
from backends.sim import Simulator
from backends.sim.engine import Engine
from ccl import Problem, Request
from ccl.collective import ROOTED_KINDS, builtin

SPECS = ["ring:5", "dgx1", "torus:2x3", "line:4", "amd8", "hypercube:8", "star:5"]


def schedules(spec: str):
    topo = T.build(spec)
    n = topo.n_ranks
    for name in solvers.TEMPLATES:
        info = solvers.SOLVERS[name]
        for kind in info.kinds:
            root = n - 1 if kind in ROOTED_KINDS else None
            try:
                yield solvers.synthesize(Problem(topo, builtin(kind, n, root), Request(name, chunks=2)))
            except Exception:  # noqa: BLE001 - hierarchical on one node
                continue


@pytest.mark.parametrize("spec", SPECS)
def test_fluid_path_matches_fast_path_without_limits(spec, monkeypatch):
    assert not T.build(spec).flat().limits
    for alg in schedules(spec):
        for options in ({}, {"mode": "step"}, {"slices": 2, "overlap_latency": True}):
            fast = Simulator(alg).run(3e6 + 1, bound=False, baselines=False, **options)
            with monkeypatch.context() as m:
                m.setattr(Engine, "_loop", lambda self, ready: self._loop_fluid(ready))
                fluid = Simulator(alg).run(3e6 + 1, bound=False, baselines=False, **options)
            assert np.allclose(fast.done, fluid.done, rtol=1e-9, atol=1e-9), (alg.name, options)
            assert np.allclose(fast.start, fluid.start, rtol=1e-9, atol=1e-9), (alg.name, options)


def test_every_transfer_runs_once_per_slice():
    alg = solvers.synthesize(Problem(T.ndv2(2), builtin("allreduce", 16), Request("hierarchical", chunks=2)))
    sim = Simulator(alg).run(2**24, slices=3)
    assert len(sim.done) == 3 * len(alg.transfers)
    assert np.all(np.isfinite(sim.done)) and np.all(sim.done >= sim.sent - 1e-9) and np.all(sim.sent >= sim.start)
    assert sim.report.time_us == pytest.approx(float(sim.done.max()))
    # a lane never carries two transfers at once
    for r in range(len(sim.resource_pairs)):
        for lane in range(sim.resource_lanes[r]):
            sel = np.flatnonzero((sim.resource == r) & (sim.lane == lane))
            order = np.argsort(sim.start[sel], kind="stable")
            s, e = sim.start[sel][order], sim.sent[sel][order]
            assert np.all(s[1:] >= e[:-1] - 1e-9)
