"""The tuner behind ``--solver auto``: every applicable solver within a time budget, each
schedule simulated over a size sweep, the fastest kept per size, as a schedule set.

Candidates, in the order they run:

1. every template implementing the collective (instant constructions; always run, so a set
   always exists and the baselines are always measured); on machines of up to 16 ranks with
   multi-lane links also with a piece per lane (label ``NAME/kL``);
2. size-aware solvers (``packing``: its pipeline depth is chosen for a size) at anchor sizes
   spread over the sweep, the largest first (one schedule per 16x of size);
3. the exact solver ``smt`` (fewest steps: the latency-optimal schedule small messages want) on
   machines of up to ``SMT_UP_TO`` ranks, with at most ``SMT_LIMIT`` seconds; the searching
   solvers named with ``solvers`` (``smt``, ``milp``, ``teccl``) elsewhere, each given the
   remaining budget as its time limit (the MILPs at the anchor sizes).

Each schedule is lowered once and simulated at every swept size (the simulator of
``backends.sim``, as ``ccl simulate`` times it). Per size the fastest wins (ties: fewer
messages, then the earlier candidate); a run of sizes with one winner becomes one entry, and
ranges meet at the geometric midpoint of the swept sizes on either side. Identical schedules
(same transfers) are kept once.

The budget bounds the optional candidates (2 and 3), counted from the first of them (the
templates always run, however long their simulations take on a large machine): one that would
start after it is spent is skipped and reported, and a searching solver's own time limit is what
remains. Within the budget the result is
deterministic (same input, same set); a budget that cuts a candidate makes it depend on the
machine's speed, which the set's ``candidates`` record.
"""

from __future__ import annotations

import hashlib
import math
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import solvers as registry
from backends.cost.nccl import baselines
from backends.sim import Simulator
from solvers.bounds import lower_bound

from ..core import interrupt, limits, validate
from ..core.algorithm import Algorithm
from ..core.collective import builtin, check_size
from ..core.errors import CclError, InputError, Interrupted
from ..core.problem import Problem, Request
from ..core.schedule_set import Entry, ScheduleSet
from ..core.topology import Topology
from ..core.units import format_size, parse_size, parse_sizes
from . import cache as result_cache
from .lowering import program as program_stage
from .stages import synthesize

DEFAULT_SIZES = "1KiB..1GiB"
DEFAULT_BUDGET = 30.0  # seconds; a second per rank on machines of more than 30 ranks


def default_budget(n_ranks: int) -> float:
    """The default time budget: 30 s, or a second per rank on larger machines (where one tree
    packing takes tens of seconds and each schedule's simulations longer)."""
    return max(DEFAULT_BUDGET, float(n_ranks))
SIZE_AWARE = ("packing",)  # solvers whose schedule depends on the size they are given
SEARCHING = ("smt", "milp", "teccl")  # they take the remaining budget as their time limit
ANCHOR_STEP = 16  # one size-aware schedule per this factor of size
SMT_UP_TO = 8  # ranks up to which auto runs smt unnamed
LANE_VARIANTS_UP_TO = 16  # ranks up to which templates also run with a piece per lane
SMT_LIMIT = 10.0  # seconds smt gets when it runs unnamed


@dataclass
class Candidate:
    label: str
    solver: str
    size: int | None = None  # the size it was synthesized for (size-aware solvers)
    algorithm: Algorithm | None = None
    seconds: float | None = None
    times_us: list[float] = field(default_factory=list)
    messages: int = 0
    error: str | None = None
    same_as: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "solver": self.solver, "size": self.size,
                               "synthesis_seconds": None if self.seconds is None else round(self.seconds, 3)}
        if self.error is not None:
            out["error"] = self.error
        elif self.same_as is not None:
            out["same_as"] = self.same_as
        else:
            out["messages"] = self.messages
            out["times_us"] = [round(t, 3) for t in self.times_us]
        return out


@dataclass(frozen=True)
class TuneResult:
    schedule_set: ScheduleSet
    seconds: float
    cached: bool

    def to_json(self) -> dict[str, Any]:
        s = self.schedule_set
        return {"status": "ok", "cached": self.cached, "seconds": round(self.seconds, 3), **s.summary(),
                "table": list(s.table), "candidates": list(s.candidates)}


def anchors(sizes: Sequence[int]) -> list[int]:
    """Sizes a size-aware solver is run at: the largest swept size, then every ``ANCHOR_STEP``
    times smaller one down the sweep (the smallest always included), largest first."""
    ordered = sorted(set(sizes), reverse=True)
    out = [ordered[0]]
    for s in ordered[1:]:
        if out[-1] / s >= ANCHOR_STEP - 1e-9:
            out.append(s)
    if ordered[-1] not in out:
        out.append(ordered[-1])
    return out


def plan(kind: str, n_ranks: int, sizes: Sequence[int], solvers: Sequence[str] | None = None) -> list[tuple[str, int | None]]:
    """(solver, size or None) in the order the tuner runs them (see module docstring). With
    ``solvers``: just those (size-aware and MILP ones at the anchors)."""
    names = list(dict.fromkeys(solvers or ()))
    unknown = [x for x in names if x not in registry.SOLVERS and x != "auto"]
    if unknown:
        raise InputError(f"unknown solver {unknown[0]!r}; known: {', '.join(registry.SOLVERS)}")
    names = [x for x in names if x != "auto"]
    if not names:
        names = [n for n, info in registry.SOLVERS.items() if info.template and kind in info.kinds]
        names += [n for n in SIZE_AWARE if kind in registry.SOLVERS[n].kinds]
        if n_ranks <= SMT_UP_TO and kind in registry.SOLVERS["smt"].kinds:
            names.append("smt")
    wrong = [x for x in names if kind not in registry.SOLVERS[x].kinds]
    if wrong and len(wrong) == len(names):
        raise InputError(f"no solver named implements {kind}: {', '.join(wrong)}")
    out: list[tuple[str, int | None]] = []
    for name in names:
        if kind not in registry.SOLVERS[name].kinds:
            continue
        if name in SIZE_AWARE or name in ("milp", "teccl"):
            out.extend((name, a) for a in anchors(sizes))
        else:
            out.append((name, None))
    order = {n: i for i, n in enumerate(("template", "size", "search"))}

    def rank(item: tuple[str, int | None]) -> int:
        name = item[0]
        return order["search" if name in SEARCHING else "size" if name in SIZE_AWARE else "template"]

    return sorted(out, key=rank)


def with_lane_variants(planned: Sequence[tuple[str, int | None]], topology: Topology,
                       chunks: int) -> list[tuple[str, int | None, int]]:
    """(solver, size, chunk factor) to run: the plan at ``chunks``, and on machines of up to
    ``LANE_VARIANTS_UP_TO`` ranks whose links have several lanes, each template once more with
    as many pieces per part as the widest link has lanes (one message uses one lane: a template
    sending one piece per pair leaves the other lanes idle)."""
    lanes = max((link.lanes for link in topology.links), default=1)
    out: list[tuple[str, int | None, int]] = []
    for name, size in planned:
        out.append((name, size, chunks))
        template = size is None and name not in SEARCHING
        if template and lanes > chunks and topology.n_ranks <= LANE_VARIANTS_UP_TO:
            out.append((name, None, lanes))
    return out


def _label(name: str, size: int | None, factor: int, chunks: int) -> str:
    label = name if size is None else f"{name}@{format_size(size)}"
    return label if factor == chunks else f"{label}/k{factor}"


def boundaries(sizes: Sequence[int], winners: Sequence[int]) -> list[tuple[int, int | None, int]]:
    """Runs of one winner over the sorted sizes as (min_bytes, max_bytes, winner), covering
    every size from 0 up; adjacent runs meet at the geometric midpoint of the sizes between
    them."""
    runs: list[tuple[int, int | None, int]] = []
    lo = 0
    for k, w in enumerate(winners):
        last = k == len(winners) - 1
        if not last and winners[k + 1] == w:
            continue
        hi = None if last else max(sizes[k] + 1, int(round(math.sqrt(sizes[k] * sizes[k + 1]))))
        runs.append((lo, hi, w))
        lo = hi if hi is not None else lo
    return runs


def _digest(alg: Algorithm) -> str:
    h = hashlib.sha256()
    for t in alg.transfers:
        h.update(repr(tuple(t)).encode())
    return h.hexdigest()


def _check_arguments(topology: Any, kind: Any, sizes: Any, solvers: Any, chunks: Any, time_budget: Any,
                     channels: Any, fuse: Any, options: Any, progress: Any, cache: Any) -> None:
    """``tune``'s arguments, each of the right type and range (InputError naming it)."""
    validate.instance(topology, Topology, "topology")
    validate.text(kind, "collective", empty=False)
    if sizes is not None and not isinstance(sizes, str):
        validate.sequence(sizes, "sizes (text such as '1KiB..1GiB' or a list of bytes)")
    if solvers is not None:
        for name in validate.sequence(solvers, "solvers (a list of names)"):
            validate.text(name, "a solver name", empty=False)
    validate.integer(chunks, "chunks", least=1)
    if time_budget is not None:
        validate.number(time_budget, "time budget (seconds)", positive=True)
    validate.integer(channels, "channels", least=1, most=2**31 - 1)
    validate.flag(fuse, "fuse")
    for item in validate.sequence(options, "options ((name, value) pairs)"):
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
            raise InputError(f"options must be (name, value) pairs, got {validate.show(item)}")
    if progress is not None and not callable(progress):
        raise InputError(f"progress must be a function or None, got {validate.show(progress)}")
    validate.flag(cache, "cache")


def tune(
    topology: Topology,
    kind: str,
    *,
    root: int | None = None,
    sizes: Sequence[int] | str | None = None,
    solvers: Sequence[str] | None = None,
    chunks: int = 1,
    time_budget: float | None = None,
    channels: int = 1,
    fuse: bool = True,
    options: Sequence[tuple[str, Any]] = (),
    progress: Callable[[str, float | None], None] | None = None,
    cache: bool = True,
) -> TuneResult:
    """A schedule set for ``kind`` on ``topology`` (see module docstring). ``progress(message,
    fraction)`` is told what runs and how far along the budget or the plan is. With
    ``cache``, an identical earlier request is answered from the result cache
    (``ccl.compiler.cache``)."""
    start = time.perf_counter()
    _check_arguments(topology, kind, sizes, solvers, chunks, time_budget, channels, fuse, options, progress, cache)
    sweep = parse_sizes(sizes) if isinstance(sizes, str) else sorted(set(parse_size(s) for s in sizes or ()))
    if not sweep:
        sweep = parse_sizes(DEFAULT_SIZES)
    if any(s < 1 for s in sweep):
        raise InputError("sizes must be at least 1 byte")
    limits.SET_ENTRIES.check(len(sweep), "the sizes to tune over (each may become an entry of the set)")
    if time_budget is None:
        time_budget = default_budget(topology.n_ranks)
    if not (isinstance(time_budget, (int, float)) and time_budget > 0 and math.isfinite(time_budget)):
        raise InputError(f"time budget must be a positive number of seconds, got {time_budget!r}")
    collective = builtin(kind, topology.n_ranks, root)
    kind = collective.kind
    check_size(kind, topology.n_ranks, chunks)  # before any solver builds the chunked collective
    planned = plan(kind, topology.n_ranks, sweep, solvers)
    if not planned:
        raise InputError(f"no solver implements {kind}")
    todo = with_lane_variants(planned, topology, chunks)
    asked = {"sizes": [format_size(s) for s in sweep], "solvers": [_label(*item, chunks) for item in todo],
             "chunks": chunks, "time_budget_s": time_budget, "channels": channels, "fuse": fuse,
             "options": {k: v for k, v in options}}
    key = None
    if cache:
        key = result_cache.key("schedule-set", topology=topology, collective=collective, asked=asked)
        hit = result_cache.load_set(key)
        if hit is not None:
            return TuneResult(hit, time.perf_counter() - start, True)
    say = progress or (lambda message, fraction: None)
    candidates: list[Candidate] = []
    with interrupt.cooperative():  # Ctrl-C: stop after the candidate running, keep the ones timed
        _run_candidates(topology, collective, todo, chunks, sweep, solvers, options, channels, fuse, time_budget,
                        say, candidates)
    stopped = interrupt.requested()
    if stopped:
        interrupt.acknowledge()
    timed = [c for c in candidates if c.error is None and c.same_as is None and c.times_us]
    if not timed:
        if stopped:
            raise Interrupted(f"stopped by Ctrl-C before any schedule of {kind} on {topology.name} was timed")
        reasons = "; ".join(f"{c.label}: {c.error}" for c in candidates if c.error)
        raise InputError(f"no schedule for {kind} on {topology.name}: {reasons}")
    result = _schedule_set(topology, collective, kind, sweep, candidates, timed, asked)
    if stopped:
        raise Interrupted(f"stopped by Ctrl-C; the set holds the {len(timed)} schedule(s) timed so far",
                          best=TuneResult(result, time.perf_counter() - start, False))
    if key is not None:
        result_cache.store_set(key, result)
    say("done", 1.0)
    return TuneResult(result, time.perf_counter() - start, False)


def _run_candidates(topology: Topology, collective: Any, todo: list[tuple[str, int | None, int]], chunks: int,
                    sweep: list[int], solvers: Sequence[str] | None, options: Sequence[tuple[str, Any]],
                    channels: int, fuse: bool, time_budget: float, say: Callable[[str, float | None], None],
                    candidates: list[Candidate]) -> None:
    """Synthesize and time the planned candidates into ``candidates`` (see ``tune``); returns
    early on Ctrl-C, keeping an interrupted solver's best schedule as a candidate."""
    seen: dict[str, str] = {}
    optional_start: float | None = None  # the budget counts from the first optional candidate
    for k, (name, size, factor) in enumerate(todo):
        if interrupt.requested():
            return
        label = _label(name, size, factor, chunks)
        cand = Candidate(label, name, size)
        candidates.append(cand)
        optional = name in SIZE_AWARE or name in SEARCHING
        if optional and optional_start is None:
            optional_start = time.perf_counter()
            elapsed = 0.0  # the first optional candidate always runs
        else:
            elapsed = 0.0 if optional_start is None else time.perf_counter() - optional_start
        if optional and elapsed >= time_budget:
            cand.error = f"skipped: the time budget ({time_budget:g} s) was spent"
            continue
        say(f"[{k + 1}/{len(todo)}] synthesizing {label}", min(1.0, max(k / len(todo), elapsed / time_budget)))
        limit = None
        if name in SEARCHING:
            limit = max(0.1, time_budget - elapsed)
            if name == "smt" and not solvers:
                limit = min(limit, SMT_LIMIT)
        request = Request(solver=name, chunks=factor, size=size, time_limit=limit,
                          options=tuple(options) if name in SEARCHING else ())
        t0 = time.perf_counter()
        try:
            result = synthesize(Problem(topology, collective, request))
        except Interrupted as exc:  # the solver's best schedule so far, verified, is still a candidate
            if exc.best is None:
                cand.error = exc.message
                return
            result = exc.best
        except CclError as exc:
            cand.error = exc.message
            continue
        cand.seconds = time.perf_counter() - t0
        cand.algorithm = result.algorithm
        digest = _digest(result.algorithm)
        if digest in seen:
            cand.same_as = seen[digest]
            continue
        seen[digest] = label
        prog = program_stage(result.algorithm, channels=channels, fuse=fuse, check=False)
        sim = Simulator(prog)
        cand.messages = prog.n_messages
        spent = 0.0 if optional_start is None else time.perf_counter() - optional_start
        say(f"[{k + 1}/{len(todo)}] simulating {label} at {len(sweep)} sizes",
            min(1.0, max((k + 0.5) / len(todo), spent / time_budget)))
        try:
            times = []
            for s in sweep:
                if interrupt.requested():  # an untimed candidate is dropped
                    cand.error = "stopped by Ctrl-C while it was simulated"
                    return
                times.append(sim.run(s).report.time_us)
            cand.times_us = times
        except CclError as exc:
            cand.error = f"simulation failed: {exc.message}"
            continue


def _schedule_set(topology: Topology, collective: Any, kind: str, sweep: list[int], candidates: list[Candidate],
                  timed: list[Candidate], asked: dict[str, Any]) -> ScheduleSet:
    """The set of the timed candidates: the fastest per swept size, runs of one winner as
    entries, and the table against the bound and NCCL's models."""
    winners = []
    for i in range(len(sweep)):
        best = min(range(len(timed)), key=lambda j: (round(timed[j].times_us[i], 6), timed[j].messages, j))
        winners.append(best)
    runs = boundaries(sweep, winners)
    entries = []
    for lo, hi, w in runs:
        cand = timed[w]
        assert cand.algorithm is not None
        entries.append(Entry(cand.algorithm, lo, hi, cand.label, cand.seconds))
    starts = [e.min_bytes for e in entries]
    templates = [c for c in timed if c.solver not in SIZE_AWARE and c.solver not in SEARCHING]
    table = []
    for i, size in enumerate(sweep):
        cand = timed[winners[i]]
        b = lower_bound(topology, collective, size)
        row: dict[str, Any] = {"size": size, "winner": cand.label,
                               "entry": bisect_right(starts, size) - 1,
                               "time_us": round(cand.times_us[i], 3), "bound_us": round(b.bound_us, 3),
                               "bound_ratio": round(cand.times_us[i] / b.bound_us, 4) if b.bound_us > 0 else None}
        if templates:
            best_t = min(templates, key=lambda c: c.times_us[i])
            row["best_template"] = best_t.label
            row["best_template_us"] = round(best_t.times_us[i], 3)
        for model in baselines(kind, topology, size, b.bound_us):
            row[f"{model.name}_us"] = round(model.time_us, 3)
        table.append(row)
    name = f"{kind}-{topology.name}-auto"
    return ScheduleSet(name, topology, collective, tuple(entries), tuple(table),
                       tuple(c.to_json() for c in candidates), asked)
