"""The tuner's candidates: run each planned solver, time its schedule over the sweep, and charge
what it cost in work, so the tuner's decisions depend on the inputs and on counts, never on the
clock of the machine running it.

Work is counted in microseconds of the reference machine the simulator's effort constants were
measured on (``backends.sim``'s ``EFFORT_OP_US``, ``timing.LOWER_OP_US``), from counts:

* what a cost-aware solver's judgements cost (``timing.SimulationJudge.spent_us``: the ops it
  lowered and the simulator's effort);
* ``TRANSFER_US`` per transfer of the schedule a solver returns (building and verifying it);
* lowering the schedule (``LOWER_OP_US`` per op) and simulating it at every swept size (each
  ``Simulation.effort_us``).

The exact solver runs under a budget of SAT conflicts (``SMT_CONFLICTS`` when it runs unnamed),
which stops it at the same point on every machine. A wall-clock limit is only a hard stop: a
candidate it skips or cuts short (``Candidate.cut``) makes the set depend on the machine's
speed, so the tuner marks the set incomplete and keeps it out of the cache. The MILP solvers
(run only when named) have no deterministic budget: their time limit is such a stop.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.cost.runtime import DEFAULT_RUNTIME
from backends.sim import Simulator

from ..core import interrupt
from ..core.algorithm import Algorithm
from ..core.errors import CclError, Interrupted, SolverTimeout
from ..core.problem import Problem, Request
from ..core.topology import Topology
from ..core.units import format_size
from .lowering import program as program_stage
from .stages import synthesize
from .timing import LOWER_OP_US, SimulationJudge, by_protocol

SIZE_AWARE = ("packing",)  # solvers whose schedule depends on the size they are given
SEARCHING = ("smt", "milp", "teccl")  # searching solvers (optional, after the size-aware ones)
TRANSFER_US = 5.0  # work per transfer a solver returns: building and verifying it
SMT_CONFLICTS = 100_000  # SAT conflicts the exact solver may spend when the tuner runs it unnamed


@dataclass
class Candidate:
    label: str
    solver: str
    size: int | None = None  # the size it was synthesized for (size-aware solvers)
    algorithm: Algorithm | None = None
    seconds: float | None = None  # wall clock: reported, never decides anything
    work_us: float = 0.0  # what it cost, from counts (module docstring)
    times_us: list[float] = field(default_factory=list)  # per swept size, under its fastest protocol
    protocols: list[str] = field(default_factory=list)  # that protocol, per swept size
    times_by: dict[str, list[float]] = field(default_factory=dict)  # protocol -> time per swept size
    messages: int = 0
    error: str | None = None
    same_as: str | None = None
    unfit: str | None = None  # why it does not export for the set's target (then never chosen)
    cut: bool = False  # a wall-clock limit skipped or shortened it

    @property
    def optional(self) -> bool:
        return self.solver in SIZE_AWARE or self.solver in SEARCHING

    def to_json(self) -> dict[str, Any]:
        """Deterministic: the same inputs give the same text on every machine (no wall-clock
        times; ``TuneResult.timings`` has those)."""
        out: dict[str, Any] = {"label": self.label, "solver": self.solver, "size": self.size,
                               "work_us": round(self.work_us, 1)}
        if self.error is not None:
            out["error"] = self.error
        elif self.same_as is not None:
            out["same_as"] = self.same_as
        else:
            out["messages"] = self.messages
            out["times_us"] = [round(t, 3) for t in self.times_us]
            out["protocols"] = list(self.protocols)
            if self.unfit is not None:
                out["unfit"] = self.unfit
        if self.cut:
            out["cut_by_clock"] = True
        return out


def label_of(name: str, size: int | None, factor: int, chunks: int) -> str:
    label = name if size is None else f"{name}@{format_size(size)}"
    return label if factor == chunks else f"{label}/k{factor}"


def digest(alg: Algorithm) -> str:
    h = hashlib.sha256()
    for t in alg.transfers:
        h.update(repr(tuple(t)).encode())
    return h.hexdigest()


@dataclass
class Run:
    """What ``run`` needs besides the plan: the problem's parts and the tuner's options."""

    topology: Topology
    collective: Any
    chunks: int
    sweep: list[int]
    named: bool  # the solvers were named (smt then runs without the unnamed budget)
    options: Sequence[tuple[str, Any]]
    channels: int
    fuse: bool
    budget_s: float  # work budget, seconds of the reference machine
    deadline_s: float | None  # the wall-clock stop (None: none)
    say: Callable[[str, float | None], None]
    runtime: str = DEFAULT_RUNTIME  # whose charges the candidates are timed under (``backends.cost.runtime``)


def run(r: Run, todo: list[tuple[str, int | None, int]], candidates: list[Candidate]) -> None:
    """Synthesize, time and charge the planned candidates into ``candidates``: the optional
    ones (size-aware and searching solvers) while the work they have cost stays within the
    budget (the first always runs); returns early on Ctrl-C, keeping an interrupted solver's
    best schedule as a candidate."""
    start = time.perf_counter()
    budget_us = r.budget_s * 1e6
    spent = 0.0  # work of the optional candidates so far
    seen: dict[str, str] = {}
    first_optional = True
    for k, (name, size, factor) in enumerate(todo):
        if interrupt.requested():
            return
        cand = Candidate(label_of(name, size, factor, r.chunks), name, size)
        candidates.append(cand)
        elapsed = time.perf_counter() - start
        if cand.optional and r.deadline_s is not None and elapsed >= r.deadline_s:  # templates always run
            cand.error, cand.cut = f"stopped: the wall-clock limit ({r.deadline_s:g} s) was reached", True
            continue
        if cand.optional and not first_optional and spent >= budget_us:
            cand.error = f"skipped: the work budget ({r.budget_s:g} s) was spent"
            continue
        fraction = min(1.0, max(k / len(todo), spent / budget_us if budget_us else 1.0))
        r.say(f"[{k + 1}/{len(todo)}] synthesizing {cand.label}", fraction)
        if not _synthesize(r, cand, factor, elapsed):
            return
        if cand.optional:
            first_optional = False
            spent += cand.work_us
        if cand.algorithm is None:
            continue
        key = digest(cand.algorithm)
        if key in seen:
            cand.same_as = seen[key]
            continue
        seen[key] = cand.label
        r.say(f"[{k + 1}/{len(todo)}] simulating {cand.label} at {len(r.sweep)} sizes",
              min(1.0, max((k + 0.5) / len(todo), spent / budget_us if budget_us else 1.0)))
        work = _simulate(r, cand)
        if cand.optional:
            spent += work
        if interrupt.requested():
            return


def _synthesize(r: Run, cand: Candidate, factor: int, elapsed: float) -> bool:
    """Run one candidate's solver into ``cand`` (its schedule, or its error) and charge its
    synthesis; False when Ctrl-C stopped it with nothing to keep (the tuner stops)."""
    name = cand.solver
    limit = None
    options: tuple[tuple[str, Any], ...] = tuple(r.options) if name in SEARCHING else ()
    if name in ("milp", "teccl"):
        limit = r.budget_s  # no deterministic budget: a stop that marks the set when it binds
    if name == "smt" and not r.named and not any(k == "conflicts" for k, _ in options):
        options = (*options, ("conflicts", SMT_CONFLICTS))
    if r.deadline_s is not None and cand.optional:
        left = max(0.1, r.deadline_s - elapsed)
        limit = left if limit is None else min(limit, left)
    judge = SimulationJudge(channels=r.channels, fuse=r.fuse, runtime=r.runtime)
    request = Request(solver=name, chunks=factor, size=cand.size, time_limit=limit, options=options)
    t0 = time.perf_counter()
    try:
        result = synthesize(Problem(r.topology, r.collective, request), judge=judge)
    except Interrupted as exc:  # the solver's best schedule so far, verified, is still a candidate
        cand.work_us = judge.spent_us
        if exc.best is None:
            cand.error = exc.message
            return False
        result = exc.best
    except SolverTimeout as exc:  # a limit ran out before any schedule
        cand.error, cand.work_us, cand.cut = exc.message, judge.spent_us, limit is not None
        return True
    except CclError as exc:
        cand.error, cand.work_us = exc.message, judge.spent_us
        return True
    cand.seconds = time.perf_counter() - t0
    cand.algorithm = result.algorithm
    cand.cut = result.status == "timeout" and limit is not None
    cand.work_us = judge.spent_us + TRANSFER_US * len(result.algorithm.transfers)
    return True


def _simulate(r: Run, cand: Candidate) -> float:
    """Lower ``cand``'s schedule once and time it at every swept size; returns the work."""
    assert cand.algorithm is not None
    prog = program_stage(cand.algorithm, channels=r.channels, fuse=r.fuse, check=False)
    sim = Simulator(prog)
    cand.messages = prog.n_messages
    work = LOWER_OP_US * prog.n_ops
    try:
        times, protos, by = [], [], {}
        for s in r.sweep:
            if interrupt.requested():  # an untimed candidate is dropped
                cand.error = "stopped by Ctrl-C while it was simulated"
                break
            runs = by_protocol(sim, s, r.runtime)
            for p, done in runs.items():
                work += done.effort_us
                by.setdefault(p, []).append(done.report.time_us)
            best = min(runs, key=lambda p: runs[p].report.time_us)
            times.append(runs[best].report.time_us)
            protos.append(best)
        else:
            cand.times_us, cand.protocols, cand.times_by = times, protos, by
    except CclError as exc:
        cand.error = f"simulation failed: {exc.message}"
    cand.work_us += work
    return work
