"""Timing a schedule: the simulator (``backends.sim``) on the lowered Program, charged for the
runtime that would execute it (``backends.cost.runtime``: launch, per-hop latency, protocol and
link efficiency, pipeline fill, all calibrated), completed with what the driver knows: the lower
bound (``solvers.bounds``), NCCL's pick and its other algorithms under the same calibrated model
(``backends.cost.nccl``) and the synthesis figures. Also the cost judge solvers receive.

The runtime is ``msccl`` by default (the MSCCL executor running the exported XML, the way the
project's schedules reach a GPU); ``physics`` charges nothing (the links alone, as the bounds
see them). Without a protocol given, the schedule is timed under each protocol the runtime
offers and the fastest is reported (the protocol is part of the schedule: the tuner and the
exports choose it the same way); the report names runtime and protocol.

The Program is lowered with the options given (``channels``, ``fuse``) and is not run through
``ccl.verify_program`` first: the algorithm was verified, the lowering is checked against the
Program verifier by the tests, and a Program that cannot run to the end stops the simulator
with an error (a stall) rather than a time. Runtimes, which execute Programs, verify them.
"""

from __future__ import annotations

from typing import Any

from backends.cost.nccl import baselines as nccl_baselines
from backends.cost.runtime import DEFAULT_RUNTIME, charges, default_protocol, protocols
from backends.sim import Simulator
from solvers.bounds import lower_bound

from ..core.algorithm import Algorithm
from ..core.errors import InputError
from ..core.problem import SynthesisResult
from ..core.program import Program
from ..core.report import Report
from ..core.units import parse_size
from .group_bound import groups_bound, recognize
from .lowering import program as program_stage


class SimulationJudge:
    """The cost judge (``ccl.core.judge.CostJudge``) the driver gives solvers: the simulator's time
    of the lowered Program (default physics, no bound, no baselines)."""

    def __init__(self, *, channels: int = 1, fuse: bool = True, runtime: str = DEFAULT_RUNTIME) -> None:
        self.channels = channels
        self.fuse = fuse
        self.runtime = runtime  # charged under the protocol a call of the size would use (one run per judgement)
        self.last_effort_us: float | None = None  # the last call's cost (``ccl.core.judge.effort_us``)
        self.spent_us = 0.0  # every call's cost so far (what a solver's judgements cost, from counts)
        self.calls = 0
        self._fastest: tuple[float, Algorithm, Program] | None = None

    def time_us(self, algorithm: Algorithm, size: float) -> float:
        program = program_stage(algorithm, channels=self.channels, fuse=self.fuse, check=False)
        sim = Simulator(program).run(size, runtime=runtime_charges(program, size, self.runtime))
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


def runtime_charges(program: Program, size: float, runtime: str = DEFAULT_RUNTIME, protocol: str | None = None) -> Any:
    """The charges of ``runtime`` for ``program`` (None for ``physics``): under ``protocol``,
    or where none is given the protocol a call of ``size`` bytes would most likely use
    (``default_protocol``: one simulation, where ``simulation`` tries them all)."""
    check_runtime(runtime, protocol)
    if runtime == "physics":
        return None
    offered = protocols(runtime)
    chosen = protocol or (default_protocol(size) if default_protocol(size) in offered else offered[-1])
    return charges(runtime, chosen, program.topology)


def check_runtime(runtime: str, protocol: str | None = None) -> None:
    """InputError unless ``runtime`` is known and offers ``protocol`` (checked before any work)."""
    offered = protocols(runtime)  # refuses an unknown runtime
    if protocol is not None and protocol not in offered:
        raise InputError(f"runtime {runtime} runs protocols {', '.join(offered)}, not {protocol!r}")


def simulation(schedule: Algorithm | SynthesisResult | Program, size: int | float | str, *, channels: int = 1,
               fuse: bool = True, bound: bool = True, baselines: bool = True, runtime: str = DEFAULT_RUNTIME,
               protocol: str | None = None, **options: Any) -> Any:
    """Lower (unless given a Program) and simulate one call of ``size`` bytes under the charges
    of ``runtime`` (``backends.cost.runtime.RUNTIMES``; ``physics``: the links alone) with
    ``protocol`` (None: each protocol the runtime offers, the fastest kept); returns the
    ``backends.sim.Simulation`` (timings for traces and plots) whose report names runtime and
    protocol and carries the lower bound, NCCL's pick and models and, for a SynthesisResult,
    the synthesis figures. ``options``: the simulator's (``mode``, ``slices``, ``in_place``,
    ``overlap_latency``, ``local_bandwidth``)."""
    check_runtime(runtime, protocol)
    nbytes = size_in_bytes(size)
    # in place: the Program lowered to be correct in place (what such a call runs)
    program = program_stage(schedule, channels=channels, fuse=fuse, check=False, in_place=bool(options.get("in_place")))
    sim = fastest(by_protocol(Simulator(program), nbytes, runtime, protocol, **options))
    sim.report = complete(sim.report, program, nbytes, schedule, bound=bound, baselines=baselines,
                          lane_latency=not options.get("overlap_latency", False))
    return sim


def by_protocol(sim: Simulator, size: float, runtime: str = DEFAULT_RUNTIME, protocol: str | None = None,
                **options: Any) -> dict[str, Any]:
    """``sim`` run at ``size`` under ``runtime``'s charges, once per protocol it offers (or only
    ``protocol``): protocol -> ``Simulation``, in the runtime's order; ``physics``: one run, "".
    """
    if runtime == "physics":
        return {"": sim.run(size, **options)}
    topology = sim.program.topology
    return {p: sim.run(size, runtime=charges(runtime, p, topology), **options)
            for p in ([protocol] if protocol else protocols(runtime))}


def fastest(runs: dict[str, Any]) -> Any:
    """The fastest of ``by_protocol``'s runs (ties: the first in the runtime's order)."""
    return min(runs.values(), key=lambda t: t.report.time_us)


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
