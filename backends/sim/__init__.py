"""The simulator backend: how fast a schedule runs, and how far from the best possible.

    from backends.sim import simulate
    report = simulate(algorithm, 64 * 2**20)        # nccl-tests size convention
    print(report.time_us, report.busbw_GBps, report.bound_ratio)

``simulate`` returns a ``ccl.report.Report``; ``run`` returns a ``Simulation`` with per-transfer
timings for Chrome traces (``Simulation.write_trace``) and plots (``Simulation.plot``);
``Simulator`` simulates one schedule at many sizes. ``nccl`` holds NCCL's cost model used as
the reference baseline. See ``simulator`` for the model and its justification.
"""

from __future__ import annotations

from .nccl import baselines as nccl_baselines
from .nccl import bus_bandwidth
from .simulator import MODES, Simulation, Simulator, run, simulate

__all__ = ["MODES", "Simulation", "Simulator", "bus_bandwidth", "nccl_baselines", "run", "simulate"]
