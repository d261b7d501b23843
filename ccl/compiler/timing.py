"""Timing a schedule: the simulator (``backends.sim``, physics only) on the lowered Program,
completed with what the driver knows: the lower bound (``solvers.bounds``), NCCL's cost models
(``backends.cost.nccl``) and the synthesis figures. Also the cost judge solvers receive.

The Program is lowered with the options given (``channels``, ``fuse``) and is not run through
``ccl.verify_program`` first: the algorithm was verified, the lowering is checked against the
Program verifier by the tests, and a Program that cannot run to the end stops the simulator
with an error (a stall) rather than a time. Runtimes, which execute Programs, verify them.
"""

from __future__ import annotations

from typing import Any

from backends.cost.nccl import baselines as nccl_baselines
from backends.sim import run
from solvers.bounds import lower_bound

from ..core.algorithm import Algorithm
from ..core.problem import SynthesisResult
from ..core.program import Program
from ..core.report import Report
from ..core.units import parse_size
from .group_bound import groups_bound, recognize
from .lowering import program as program_stage


class SimulationJudge:
    """The cost judge (``ccl.core.judge.CostJudge``) the driver gives solvers: the simulator's time
    of the lowered Program (default physics, no bound, no baselines)."""

    def __init__(self, *, channels: int = 1, fuse: bool = True) -> None:
        self.channels = channels
        self.fuse = fuse
        self.last_effort_us: float | None = None  # the last call's cost (``ccl.core.judge.effort_us``)
        self.spent_us = 0.0  # every call's cost so far (what a solver's judgements cost, from counts)
        self.calls = 0
        self._fastest: tuple[float, Algorithm, Program] | None = None

    def time_us(self, algorithm: Algorithm, size: float) -> float:
        program = program_stage(algorithm, channels=self.channels, fuse=self.fuse, check=False)
        sim = run(program, size)
        self.last_effort_us = LOWER_OP_US * program.n_ops + sim.effort_us
        self.spent_us += self.last_effort_us
        self.calls += 1
        us = sim.report.time_us
        if self._fastest is None or us < self._fastest[0]:
            self._fastest = (us, algorithm, program)
        return us

    def lowered(self, algorithm: Algorithm) -> tuple[int, bool, Program] | None:
        """(channels, fuse, Program) when ``algorithm`` (this very object) is the fastest this
        judge timed: a solver returns the schedule it judged fastest, and the program stage
        need not lower it again (at 128 ranks, seconds)."""
        if self._fastest is None or self._fastest[1] is not algorithm:
            return None
        return self.channels, self.fuse, self._fastest[2]


# The lowering's cost per op, in microseconds of the reference machine the simulator's effort
# constants were measured on (a count of work, not the clock of the machine running now).
LOWER_OP_US = 2.0


def size_in_bytes(size: int | float | str) -> float:
    return parse_size(size) if isinstance(size, str) else size


def simulation(schedule: Algorithm | SynthesisResult | Program, size: int | float | str, *, channels: int = 1,
               fuse: bool = True, bound: bool = True, baselines: bool = True, **options: Any) -> Any:
    """Lower (unless given a Program) and simulate one call of ``size`` bytes; returns the
    ``backends.sim.Simulation`` (timings for traces and plots) whose report carries the lower
    bound, NCCL's models and, for a SynthesisResult, the synthesis figures. ``options``: the
    simulator's (``mode``, ``slices``, ``in_place``, ``overlap_latency``, ``local_bandwidth``)."""
    nbytes = size_in_bytes(size)
    # in place: the Program lowered to be correct in place (what such a call runs)
    program = program_stage(schedule, channels=channels, fuse=fuse, check=False, in_place=bool(options.get("in_place")))
    sim = run(program, nbytes, **options)
    sim.report = complete(sim.report, program, nbytes, schedule, bound=bound, baselines=baselines,
                          lane_latency=not options.get("overlap_latency", False))
    return sim


def simulate(schedule: Algorithm | SynthesisResult | Program, size: int | float | str, **options: Any) -> Report:
    """``simulation(...).report``: time, busbw, the lower bound and NCCL's models."""
    return simulation(schedule, size, **options).report


def complete(report: Report, program: Program, size: float, schedule: Any = None, *, bound: bool = True,
             baselines: bool = True, lane_latency: bool = True) -> Report:
    """The simulator's report with the bound, the NCCL baselines and the synthesis figures
    (``lane_latency``: False when the simulation overlapped latencies, see ``lower_bound``)."""
    topo, coll = program.topology, program.collective
    if bound:
        grouped = recognize(coll, topo)  # a schedule of groups at once: their bound, as synthesize --groups gives it
        if grouped is not None:
            g = groups_bound(topo, grouped.groups, grouped.kind, grouped.collectives, size, lane_latency=lane_latency)
            report = report.with_bound(g.bound_us, g.latency_us, g.bandwidth_us, g.binding,
                                       f"{len(grouped.groups)} group(s) of {grouped.kind} at once: {g.why}")
        else:
            b = lower_bound(topo, coll, size, lane_latency=lane_latency)
            report = report.with_bound(b.bound_us, b.latency_us, b.bandwidth_us, b.binding, b.method)
    if baselines and coll.kind != "custom":
        report = report.with_baselines(tuple(nccl_baselines(coll.kind, topo, size)))
    if isinstance(schedule, SynthesisResult):
        report = report.with_synthesis(schedule.seconds, schedule.status, schedule.gap)
    return report
