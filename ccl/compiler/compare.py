"""Side by side: every applicable solver's schedule, simulated, NCCL's cost models and the bound.

``compare(topology, kind, sizes)`` synthesizes (and verifies) one schedule per solver: every
template that implements the collective (instant), the size-aware solvers fast enough to run
unnamed (``SolverInfo.compare_up_to``: at one size, on up to that many ranks) plus the solvers
named (``only``: just those). Solvers whose ``SolverInfo.template`` is False get the size in
their request and run once per size (or once, for ``synthesis_size``, whose schedule is then
simulated at every size). Every solver implementing the collective that does not run is listed
as left out, with the reason (``Comparison.left_out``), so a table never silently lacks one. Each schedule is lowered once and its Program simulated at every
size; NCCL's ring/tree (and p2p) models and the lower bound are added, and every row says how it
compares to NCCL's ring (or the best NCCL model the collective has).

``sweep(schedule, sizes)`` times one schedule, or a schedule set (each size served by the entry
the set picks for it), at every size: the rows of ``ccl simulate --size 1KiB..1GiB``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import solvers
from backends.cost.nccl import baselines
from backends.cost.runtime import DEFAULT_RUNTIME, protocols
from backends.sim import Simulator
from solvers import SOLVERS
from solvers.bounds import lower_bound

from ..core import interrupt
from ..core.collective import builtin
from ..core.errors import CclError, InputError, Interrupted
from ..core.problem import Problem, Request
from ..core.report import SIZE_MEANING, Report, bus_factor, format_bytes, format_us
from ..core.schedule_set import ScheduleSet
from ..core.topology import Topology
from .candidates import SMT_CONFLICTS
from .lowering import program
from .stages import synthesize
from .timing import by_protocol, check_runtime, complete, fastest
from .tuner import SMT_UP_TO


@dataclass(frozen=True)
class Row:
    """One line of a comparison: a simulated schedule, a cost model, or the lower bound."""

    name: str
    source: str  # "schedule", "model" or "bound"
    time_us: float | None
    steps: int | None = None
    messages: int | None = None
    synthesis_seconds: float | None = None
    detail: str = ""
    error: str | None = None
    report: Report | None = field(default=None, compare=False, repr=False)
    algorithm: Any = field(default=None, compare=False, repr=False)  # the schedule simulated (an Algorithm)
    synthesis_size: int | None = None  # the size its solver was given (size-specific solvers)
    baseline: Any = field(default=None, compare=False, repr=False)  # a model's Baseline (NCCL's choice it prices)

    def to_json(self, size: float, factor: float, reference: float | None, bound: float) -> dict[str, Any]:
        ok = self.time_us is not None and self.time_us > 0
        return {
            "name": self.name,
            "source": self.source,
            "time_us": self.time_us,
            "algbw_GBps": size / self.time_us / 1e3 if ok else None,
            "busbw_GBps": size / self.time_us / 1e3 * factor if ok else None,
            "bound_ratio": self.time_us / bound if ok and bound > 0 else None,
            "speedup_vs_reference": reference / self.time_us if ok and reference else None,
            "steps": self.steps,
            "messages": self.messages,
            "synthesis_seconds": None if self.synthesis_seconds is None else round(self.synthesis_seconds, 6),
            "detail": self.detail,
            "error": self.error,
        }


@dataclass(frozen=True)
class Comparison:
    topology: str
    collective: str
    n_ranks: int
    size: float
    mode: str
    chunks: int
    rows: tuple[Row, ...]
    bound: dict[str, Any]
    left_out: tuple[tuple[str, str], ...] = ()  # (solver, why) of every applicable solver not run

    @property
    def reference(self) -> Row | None:
        """The baseline every row is compared with: NCCL's pick (``nccl``), else the fastest model."""
        models = [r for r in self.rows if r.source == "model" and r.time_us]
        for r in models:
            if r.name == "nccl":
                return r
        return min(models, key=lambda r: r.time_us or math.inf, default=None)

    @property
    def best(self) -> Row | None:
        done = [r for r in self.rows if r.source == "schedule" and r.time_us is not None]
        return min(done, key=lambda r: (r.time_us, r.name), default=None)

    def to_json(self) -> dict[str, Any]:
        factor = bus_factor(self.collective, self.n_ranks)
        ref = self.reference
        bound = self.bound.get("bound_us") or 0.0
        return {
            "topology": self.topology,
            "collective": self.collective,
            "n_ranks": self.n_ranks,
            "size": self.size,
            "size_meaning": SIZE_MEANING.get(self.collective, ""),
            "mode": self.mode,
            "chunks": self.chunks,
            "reference": None if ref is None else ref.name,
            "best": None if self.best is None else self.best.name,
            "bound": self.bound,
            "rows": [r.to_json(self.size, factor, ref.time_us if ref else None, bound) for r in self.rows],
            "left_out": [{"solver": name, "reason": why} for name, why in self.left_out],
        }

    def text(self) -> str:
        factor = bus_factor(self.collective, self.n_ranks)
        ref = self.reference
        bound = self.bound.get("bound_us") or 0.0
        head = (f"{self.collective} on {self.topology} ({self.n_ranks} ranks), size {format_bytes(self.size)} "
                f"({SIZE_MEANING.get(self.collective, '')}), {self.mode} mode, chunks {self.chunks}")
        ref_name = f"vs {ref.name}" if ref else ""
        lines = [head, f"  {'':<22}{'steps':>6}{'messages':>10}{'time':>12}{'busbw GB/s':>12}{'/bound':>8}  {ref_name}"]
        for r in self.rows:
            if r.error is not None:
                continue
            time_text = format_us(r.time_us) if r.time_us is not None else "-"
            busbw = f"{self.size / r.time_us / 1e3 * factor:.4g}" if r.time_us else "-"
            ratio = f"{r.time_us / bound:.3f}" if r.time_us and bound > 0 else "-"
            versus = ""
            if ref and ref.time_us and r.time_us and r is not ref and r.source != "bound":
                s = ref.time_us / r.time_us
                versus = f"{s:.2f}x faster" if s >= 1 else f"{1 / s:.2f}x slower"
            label = r.name + (" (model)" if r.source == "model" else "")
            steps = "" if r.steps is None else str(r.steps)
            messages = "" if r.messages is None else str(r.messages)
            lines.append(f"  {label:<22}{steps:>6}{messages:>10}{time_text:>12}{busbw:>12}{ratio:>8}  {versus}")
        if self.bound:
            lines.append(f"  bound: {self.bound.get('binding')} binds; {self.bound.get('method')}")
        for r in self.rows:
            if r.error is not None:
                lines.append(f"  n/a {r.name}: {r.error}")
        lines += [f"  left out {name}: {why}" for name, why in self.left_out]
        return "\n".join(lines)


def solver_names(kind: str, names: Sequence[str] | None = None, *, only: bool = False,
                 n_ranks: int | None = None, n_sizes: int = 1) -> list[str]:
    """Solvers to compare: every template implementing ``kind`` (instant; also the baselines),
    the solvers fast enough on ``n_ranks`` ranks to run unnamed at one size (``compare_up_to``),
    the exact solver on up to ``SMT_UP_TO`` ranks (within ``SMT_CONFLICTS``, as the tuner runs
    it), plus the named ones (other slow solvers run only when named), or with ``only`` just
    the named."""
    names = list(names or ())
    unknown = [x for x in names if x not in solvers.SOLVERS]
    if unknown:
        raise InputError(f"unknown solver {unknown[0]!r}; known: {', '.join(solvers.SOLVERS)}")
    if only and not names:
        raise InputError("no solver named to compare")
    templates = [] if only else [
        n for n, info in solvers.SOLVERS.items()
        if kind in info.kinds and (info.template or (n_ranks is not None and n_sizes == 1 and n_ranks <= info.compare_up_to)
                                   or (n == "smt" and n_ranks is not None and n_ranks <= SMT_UP_TO))
    ]
    return list(dict.fromkeys(templates + names))


def left_out(kind: str, run: Sequence[str], *, only: bool, n_ranks: int, n_sizes: int) -> list[tuple[str, str]]:
    """Every solver implementing ``kind`` that ``run`` does not hold, with why it was left out
    (none with ``only``: the caller chose the solvers)."""
    out: list[tuple[str, str]] = []
    if only:
        return out
    for name, info in solvers.SOLVERS.items():
        if name in run or kind not in info.kinds:
            continue
        if info.template:
            why = "not run"  # not reached: every template runs unless --only
        elif info.compare_up_to and n_sizes > 1:
            why = (f"synthesizes a schedule per size: runs unnamed at one size only (name it with --solvers {name} "
                   f"to run it at each of the {n_sizes} sizes)")
        elif info.compare_up_to and n_ranks > info.compare_up_to:
            why = (f"runs unnamed on up to {info.compare_up_to} ranks ({n_ranks} here: its synthesis takes minutes); "
                   f"name it with --solvers {name}")
        elif name == "smt":
            why = (f"the exact search runs unnamed on up to {SMT_UP_TO} ranks ({n_ranks} here: it can take hours); "
                   "name it with --solvers smt")
        else:
            why = (f"the MILP runs only when named (--solvers {name}): one solve per size, minutes to hours on large "
                   "machines")
        out.append((name, why))
    return out


def compare(
    topology: Topology,
    kind: str,
    sizes: Sequence[float],
    *,
    root: int | None = None,
    chunks: int = 1,
    solvers: Sequence[str] | None = None,
    only: bool = False,
    mode: str = "dependency",
    slices: int = 1,
    channels: int = 1,
    fuse: bool = True,
    time_limit: float | None = None,
    synthesis_size: float | None = None,
    progress: Callable[[str], None] | None = None,
    runtime: str = DEFAULT_RUNTIME,
    protocol: str | None = None,
) -> list[Comparison]:
    """One Comparison per size (see module docstring). Simulator options: ``mode``,
    ``slices``; lowering options: ``channels``, ``fuse``; every schedule is charged for
    ``runtime`` with ``protocol`` (None: its fastest, ``timing.by_protocol``), NCCL's rows are
    its pick and its other algorithms under the same calibrated model. ``synthesis_size``: synthesize the
    size-specific (slow) solvers once, for this size, and simulate their schedules at every
    size, instead of once per size. ``progress`` is told what runs, and first how many runs a
    solver synthesizing per size will take."""
    if not sizes:
        raise InputError("compare needs at least one size")
    collective = builtin(kind, topology.n_ranks, root)
    kind = collective.kind
    once = synthesis_size is not None
    n_sizes = 1 if once else len(sizes)
    names = solver_names(kind, solvers, only=only, n_ranks=topology.n_ranks, n_sizes=n_sizes)
    omitted = left_out(kind, names, only=only, n_ranks=topology.n_ranks, n_sizes=n_sizes)
    say = progress or (lambda _: None)
    # name -> (simulator of its Program, synthesis seconds, error, algorithm, size given); per size for slow solvers
    fixed: dict[str, tuple[Any, float | None, str | None, Any, int | None]] = {}
    finished: list[tuple[str, Any, int | None]] = []  # (solver, algorithm, size given) of every schedule made
    out: list[Comparison] = []

    def build(name: str, size: float | None) -> tuple[Any, float | None, str | None, Any, int | None]:
        info = SOLVERS[name]
        if kind not in info.kinds:
            return None, None, f"does not implement {kind}", None, None
        given = None if size is None else int(math.ceil(size))
        bounded = name == "smt" and time_limit is None  # unnamed, or named without a limit: a budget of work
        request = Request(solver=name, chunks=chunks, size=given, time_limit=time_limit,
                          options=(("conflicts", SMT_CONFLICTS),) if bounded else ())
        say(f"synthesizing {kind} with {name}" + ("" if given is None else f" for {format_bytes(given)}") + "...")
        start = time.perf_counter()
        try:
            result = synthesize(Problem(topology, collective, request))
        except Interrupted:  # Ctrl-C ends the comparison, not just this solver's row
            raise
        except CclError as exc:
            return None, None, exc.message, None, given
        lowered = program(result, channels=channels, fuse=fuse, check=False)
        finished.append((name, result.algorithm, given))
        return Simulator(lowered), time.perf_counter() - start, None, result.algorithm, given

    try:
        check_runtime(runtime, protocol)
        _compare(names, sizes, fixed, build, out, topology, collective, kind, chunks, mode, slices, once,
                 synthesis_size, time_limit, say, tuple(omitted), (runtime, protocol))
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C: what is finished is kept (and saved by the CLI)
        interrupt.acknowledge()
        raise Interrupted(f"stopped by Ctrl-C; {len(finished)} schedule(s) made and {len(out)} of {len(sizes)} "
                          "size(s) compared", best=Unfinished(tuple(out), tuple(finished))) from None
    return out


@dataclass(frozen=True)
class Unfinished:
    """What a comparison stopped by Ctrl-C finished: the sizes compared, and every schedule
    made (solver, algorithm, size it was synthesized for or None)."""

    comparisons: tuple[Comparison, ...]
    schedules: tuple[tuple[str, Any, int | None], ...]


def _compare(names, sizes, fixed, build, out, topology, collective, kind, chunks, mode, slices, once, synthesis_size,
             time_limit, say, omitted, charged) -> None:
    """The body of ``compare``: ``out`` gets one Comparison per size as each is done."""
    for name in names:
        if SOLVERS[name].template or name == "smt":  # smt's schedule does not depend on the size
            fixed[name] = build(name, None)
        elif once:
            fixed[name] = build(name, synthesis_size)
        elif len(sizes) > 1 and kind in SOLVERS[name].kinds:
            limit = "" if time_limit is None else f" of up to {time_limit:g} s each"
            say(f"{name} synthesizes a schedule per size: {len(sizes)} runs{limit}")
    for size in sizes:
        bounds = lower_bound(topology, collective, size)
        rows: list[Row] = []
        for name in names:
            sim, seconds, error, alg, given = fixed[name] if name in fixed else build(name, size)
            if sim is None:
                rows.append(Row(name, "schedule", None, error=error))
                continue
            say(f"simulating {name} at {format_bytes(size)}...")
            rep = fastest(by_protocol(sim, size, *charged, mode=mode, slices=slices)).report
            rep = rep.with_bound(bounds.bound_us, bounds.latency_us, bounds.bandwidth_us, bounds.binding,
                                 bounds.method)
            prog = sim.program
            rows.append(Row(name, "schedule", rep.time_us, prog.steps, prog.n_messages, seconds,
                            f"{rep.bound_ratio:.3f}x bound", report=rep, algorithm=alg, synthesis_size=given))
        for b in baselines(kind, topology, size):
            rows.append(Row(b.name, "model", b.time_us, detail=b.detail, baseline=b))
        rows.append(Row("lower bound", "bound", bounds.bound_us, steps=bounds.steps,
                        detail=f"{bounds.binding}: {bounds.method}"))
        rows.sort(key=lambda r: (r.error is not None, math.inf if r.time_us is None else r.time_us, r.name))
        out.append(Comparison(topology.name, kind, topology.n_ranks, size, mode, chunks, tuple(rows),
                              bounds.to_json(), omitted))


@dataclass(frozen=True)
class SweepPoint:
    """One size of a sweep: the report of the schedule that serves it (with the bound and
    NCCL's models) and, for a schedule set, the entry that served it."""

    size: float
    report: Report
    entry: Any = None  # a ccl.core.schedule_set.Entry, or None for a single schedule


def sweep(schedule: Any, sizes: Sequence[float], *, channels: int = 1, fuse: bool = True,
          runtime: str = DEFAULT_RUNTIME, protocol: str | None = None, **options: Any) -> list[SweepPoint]:
    """Simulate a schedule (Algorithm, SynthesisResult or Program, verified) or a
    ``ScheduleSet`` (each size served by ``pick(size)``) at every size, with the lower bound
    and NCCL's models; every Program is lowered once. ``options``: the simulator's (``mode``,
    ``slices``, ``in_place``, ``overlap_latency``, ``local_bandwidth``). Charged for ``runtime``
    with ``protocol``; None: a set's entry's own protocol, else the fastest."""
    if not sizes:
        raise InputError("a sweep needs at least one size")
    check_runtime(runtime, protocol)
    simulators: dict[int, tuple[Any, Any]] = {}  # id of the schedule -> (its Simulator, the schedule)
    out = []
    for size in sizes:
        entry = schedule.pick(size) if isinstance(schedule, ScheduleSet) else None
        if entry is not None and entry.algorithm is None:
            raise InputError(f"calls of {format_bytes(size)} are left to NCCL by the set ({entry.served_by}): no "
                             "schedule of ours to simulate there")
        which = schedule if entry is None else entry.algorithm
        if id(which) not in simulators:
            lowered = program(which, channels=channels, fuse=fuse, check=False,
                              in_place=bool(options.get("in_place")))  # the Program an in-place call runs
            simulators[id(which)] = (Simulator(lowered), which)
        sim, _ = simulators[id(which)]
        proto = protocol or (entry.protocol if entry is not None and entry.protocol in protocols(runtime) else None)
        report = complete(fastest(by_protocol(sim, size, runtime, proto, **options)).report, sim.program, size, which,
                          lane_latency=not options.get("overlap_latency", False))
        out.append(SweepPoint(size, report, entry))
    return out
