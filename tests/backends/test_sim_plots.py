"""PNG plots: timeline, utilization heatmap, time-vs-size curves; matplotlib loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import solvers
import topologies as T
from backends.sim import Simulator
from backends.sim.plots import plot_sizes
from ccl import Problem, Request
from ccl.compiler import simulation
from ccl.core.collective import builtin
from ccl.core.lower import lower

PNG = b"\x89PNG\r\n\x1a\n"


def test_simulation_plot(tmp_path):
    topo = T.dgx1()
    alg = solvers.synthesize(Problem(topo, builtin("allreduce", 8), Request("recursive-halving", chunks=2)))
    path = tmp_path / "sim.png"
    simulation(alg, 2**24).plot(str(path))
    assert path.read_bytes()[:8] == PNG


def test_large_timeline_merges_bars(tmp_path, monkeypatch):
    import backends.sim.plots as plots

    monkeypatch.setattr(plots, "MAX_BARS", 50)
    monkeypatch.setattr(plots, "MAX_ROWS", 8)
    topo = T.ring(16)
    alg = solvers.synthesize(Problem(topo, builtin("allreduce", 16), Request("ring", chunks=2)))
    path = tmp_path / "big.png"
    simulation(alg, 2**24, fuse=False).plot(str(path))  # 960 messages: bars merged, busiest 8 lanes shown
    assert path.read_bytes()[:8] == PNG


def test_size_curves(tmp_path):
    topo = T.ring(8)
    curves = {}
    bound = []
    from solvers.bounds import lower_bound

    sizes = [2**k for k in range(10, 27, 4)]
    for name in ("ring", "recursive-doubling"):
        sim = Simulator(lower(solvers.synthesize(Problem(topo, builtin("allgather", 8), Request(name)))))
        curves[name] = [(s, sim.run(s).time_us) for s in sizes]
    bound = [(s, lower_bound(topo, builtin("allgather", 8), s).bound_us) for s in sizes]
    path = tmp_path / "sizes.png"
    plot_sizes(curves, bound, str(path), title="allgather on ring8", bus_factor=7 / 8)
    assert path.read_bytes()[:8] == PNG


def test_matplotlib_is_imported_only_for_plots():
    code = ("import sys, backends.sim, ccl.cli; import solvers.bounds; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
