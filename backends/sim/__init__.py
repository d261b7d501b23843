"""The simulator backend: how fast a lowered Program runs on its topology.

    from backends.sim import simulate
    report = simulate(program, 64 * 2**20)        # nccl-tests size convention
    print(report.time_us, report.busbw_GBps)

``simulate`` returns a ``ccl.core.report.Report`` (physics only: the driver, ``ccl.compiler``, adds
the lower bound and NCCL's models); ``run`` returns a ``Simulation`` with per-message timings for
Chrome traces (``Simulation.write_trace``) and plots (``Simulation.plot``); ``Simulator``
simulates one Program at many sizes. NCCL's cost model, the reference baselines, is ``backends.cost``.
See ``simulator`` for the model and its justification.
"""

from __future__ import annotations

from .simulator import MODES, Simulation, Simulator, run, simulate

__all__ = ["MODES", "Simulation", "Simulator", "run", "simulate"]
