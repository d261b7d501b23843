"""The tuner behind ``--solver auto``: every applicable solver within a budget of work, each
schedule simulated over a size sweep, the fastest kept per size, as a schedule set.

Candidates, in the order they run:

1. every template implementing the collective (instant constructions; always run, so a set
   always exists and the baselines are always measured); on machines of up to 16 ranks with
   multi-lane links also with a piece per lane (label ``NAME/kL``);
2. size-aware solvers (``packing``: its pipeline depth is chosen for a size) at anchor sizes
   spread over the sweep, the largest first (one schedule per 16x of size);
3. the exact solver ``smt`` (fewest steps: the latency-optimal schedule small messages want) on
   machines of up to ``SMT_UP_TO`` ranks, within ``candidates.SMT_CONFLICTS`` SAT conflicts; the
   searching solvers named with ``solvers`` (``smt``, ``milp``, ``teccl``) elsewhere (the MILPs
   at the anchor sizes, each with the budget as its time limit).

Each schedule is lowered once and simulated at every swept size (the simulator of
``backends.sim``, as ``ccl simulate`` times it). Per size the fastest wins (ties: fewer
messages, then the earlier candidate), unless NCCL itself is faster: where NCCL's pick (the
table's ``nccl`` baseline, ``backends.cost.nccl``) beats every candidate, the size goes to a
native entry naming NCCL's algorithm and protocol (``Entry.native``; the table's winner is
``nccl``), so no size of the set is slower than NCCL. A run of sizes with one winner (for
NCCL: one algorithm and protocol) becomes one entry, and ranges meet at the geometric midpoint
of the swept sizes on either side. Identical schedules
(same transfers) are kept once. Every candidate is timed under the charges of the runtime the
set is for (``runtime_of``: the MSCCL executor by default) with each protocol it offers; a run
of sizes with one winner and one protocol (the one its schedule is fastest with there) is an
entry, so each entry runs its protocol and the table times it under that protocol.

Reproducible. The budget (``time_budget``, in seconds of work on the reference machine the
simulator's effort constants were measured on) bounds the optional candidates (2 and 3),
counted from the first of them: an optional candidate starts only while the work charged so far
is within it (``candidates``: counts of ops simulated, judgements and transfers, never the
clock), so the same request runs the same candidates and gives the same set, byte for byte, on
a fast or a loaded machine. ``deadline`` (wall-clock seconds) is only a hard stop: candidates it
skips or cuts short make the set depend on the machine's speed, so the set is marked incomplete
(``ScheduleSet.complete``) and never cached.

Target. With ``target`` ``msccl`` or ``rccl``, a schedule that the MSCCL export cannot fit in
that runtime's limits (``msccl.unfit``: written, read back and verified as ``ccl emit msccl``
writes it) is never chosen: the winners are checked, an unfit one is left out with its reason
and the sizes it won go to the next fastest, so every entry of the set exports for the target.
``torch`` runs every Program; the set records its target. Native entries are NCCL's (the msccl
executor and torch fall back to it); a set for ``rccl`` gets none, since RCCL's own choice is
not the NCCL pick the table measures.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import solvers as registry
from backends.cost.calibration import fingerprint
from backends.cost.nccl import baselines
from backends.cost.runtime import DEFAULT_RUNTIME
from solvers.bounds import lower_bound

from ..core import interrupt, limits, validate
from ..core.collective import builtin, check_size
from ..core.errors import BackendError, InputError, Interrupted
from ..core.report import Baseline
from ..core.schedule_set import Entry, ScheduleSet, native_label
from ..core.topology import Topology
from ..core.units import format_size, parse_size, parse_sizes
from . import cache as result_cache
from .candidates import SEARCHING, SIZE_AWARE, Candidate, Run, label_of
from .candidates import run as run_candidates
from .msccl import unfit

DEFAULT_SIZES = "1KiB..1GiB"
DEFAULT_BUDGET = 30.0  # seconds of work on the reference machine; a second per rank above 30 ranks
TARGETS = ("msccl", "rccl", "torch")  # runtimes a set can be tuned for (the first two check the export)


def default_budget(n_ranks: int) -> float:
    """The default work budget: 30 s of the reference machine, or a second per rank on larger
    machines (where one tree packing and each schedule's simulations cost more)."""
    return max(DEFAULT_BUDGET, float(n_ranks))


ANCHOR_STEP = 16  # one size-aware schedule per this factor of size
SMT_UP_TO = 8  # ranks up to which auto runs smt unnamed
LANE_VARIANTS_UP_TO = 16  # ranks up to which templates also run with a piece per lane


@dataclass(frozen=True)
class TuneResult:
    """A tuned set, the wall-clock seconds it took, whether it came from the cache, and the
    wall-clock seconds of every candidate's synthesis (``timings``: reported, never stored in
    the set, which holds only what the inputs decide)."""

    schedule_set: ScheduleSet
    seconds: float
    cached: bool
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        s = self.schedule_set
        return {"status": "ok" if s.complete else "incomplete", "cached": self.cached,
                "seconds": round(self.seconds, 3), **s.summary(), "table": list(s.table),
                "candidates": list(s.candidates), "timings": {k: round(v, 3) for k, v in self.timings.items()}}


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


W = TypeVar("W", bound=Hashable)
NCCL_WINS = -1  # a size's winner when NCCL's own pick beats every candidate (``_winners``)


def boundaries(sizes: Sequence[int], winners: Sequence[W]) -> list[tuple[int, int | None, W]]:
    """Runs of one winner over the sorted sizes as (min_bytes, max_bytes, winner), covering
    every size from 0 up; adjacent runs meet at the geometric midpoint of the sizes between
    them."""
    runs: list[tuple[int, int | None, W]] = []
    lo = 0
    for k, w in enumerate(winners):
        last = k == len(winners) - 1
        if not last and winners[k + 1] == w:
            continue
        hi = None if last else max(sizes[k] + 1, int(round(math.sqrt(sizes[k] * sizes[k + 1]))))
        runs.append((lo, hi, w))
        lo = hi if hi is not None else lo
    return runs


def _check_arguments(topology: Any, kind: Any, sizes: Any, solvers: Any, chunks: Any, time_budget: Any,
                     channels: Any, fuse: Any, options: Any, progress: Any, cache: Any, target: Any,
                     deadline: Any) -> None:
    """``tune``'s arguments, each of the right type and range (InputError naming it)."""
    validate.instance(topology, Topology, "topology")
    validate.text(kind, "collective", empty=False)
    if sizes is not None and not isinstance(sizes, str):
        validate.sequence(sizes, "sizes (text such as '1KiB..1GiB' or a list of bytes)")
    if solvers is not None:
        for name in validate.sequence(solvers, "solvers (a list of names)"):
            validate.text(name, "a solver name", empty=False)
    validate.integer(chunks, "chunks", least=1)
    for value, what in ((time_budget, "work budget (seconds)"), (deadline, "deadline (seconds)")):
        if value is not None:
            validate.number(value, what, positive=True)
            if not math.isfinite(value):
                raise InputError(f"{what} must be a finite number of seconds, got {value!r}")
    validate.integer(channels, "channels", least=1, most=2**31 - 1)
    validate.flag(fuse, "fuse")
    for item in validate.sequence(options, "options ((name, value) pairs)"):
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
            raise InputError(f"options must be (name, value) pairs, got {validate.show(item)}")
    if progress is not None and not callable(progress):
        raise InputError(f"progress must be a function or None, got {validate.show(progress)}")
    validate.flag(cache, "cache")
    if target is not None:
        validate.choice(target, "target", TARGETS)


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
    target: str | None = None,
    deadline: float | None = None,
    native: bool = True,
) -> TuneResult:
    """A schedule set for ``kind`` on ``topology`` (see module docstring). ``time_budget``:
    the work budget of the optional candidates, in seconds of the reference machine;
    ``deadline``: a wall-clock stop (the set is then incomplete and not cached); ``target``:
    the runtime every entry must export for (``TARGETS``); ``native``: sizes where NCCL's own
    pick is faster go to NCCL (False: every size to a schedule of ours, for callers that must
    simulate it, such as concurrent groups). ``progress(message, fraction)`` is
    told what runs and how far along the budget or the plan is. With ``cache``, an identical
    earlier request is answered from the result cache (``ccl.compiler.cache``)."""
    start = time.perf_counter()
    _check_arguments(topology, kind, sizes, solvers, chunks, time_budget, channels, fuse, options, progress, cache,
                     target, deadline)
    validate.flag(native, "native")
    sweep = parse_sizes(sizes) if isinstance(sizes, str) else sorted(set(parse_size(s) for s in sizes or ()))
    if not sweep:
        sweep = parse_sizes(DEFAULT_SIZES)
    if any(s < 1 for s in sweep):
        raise InputError("sizes must be at least 1 byte")
    limits.SET_ENTRIES.check(len(sweep), "the sizes to tune over (each may become an entry of the set)")
    if time_budget is None:
        time_budget = default_budget(topology.n_ranks)
    collective = builtin(kind, topology.n_ranks, root)
    kind = collective.kind
    check_size(kind, topology.n_ranks, chunks)  # before any solver builds the chunked collective
    planned = plan(kind, topology.n_ranks, sweep, solvers)
    if not planned:
        raise InputError(f"no solver implements {kind}")
    todo = with_lane_variants(planned, topology, chunks)
    asked = {"sizes": [format_size(s) for s in sweep], "solvers": [label_of(*item, chunks) for item in todo],
             "chunks": chunks, "work_budget_s": time_budget, "channels": channels, "fuse": fuse,
             "options": {k: v for k, v in options}, "target": target, "native": native,
             "runtime": runtime_of(target), "calibration": fingerprint()}
    key = None
    if cache:  # the deadline is not part of the key: only complete sets are stored
        key = result_cache.key("schedule-set", topology=topology, collective=collective, asked=asked)
        hit = result_cache.load_set(key)
        if hit is not None:
            return TuneResult(hit, time.perf_counter() - start, True)
    say = progress or (lambda message, fraction: None)
    candidates: list[Candidate] = []
    setup = Run(topology, collective, chunks, sweep, bool(solvers), options, channels, fuse, time_budget, deadline,
                say, runtime_of(target))
    with interrupt.cooperative():  # Ctrl-C: stop after the candidate running, keep the ones timed
        run_candidates(setup, todo, candidates)
    stopped = interrupt.requested()
    if stopped:
        interrupt.acknowledge()
    timed = [c for c in candidates if c.error is None and c.same_as is None and c.times_us]
    if not timed:
        if stopped:
            raise Interrupted(f"stopped by Ctrl-C before any schedule of {kind} on {topology.name} was timed")
        reasons = "; ".join(f"{c.label}: {c.error}" for c in candidates if c.error)
        raise InputError(f"no schedule for {kind} on {topology.name}: {reasons}")
    models = [baselines(kind, topology, size) for size in sweep]
    natives = [None if target == "rccl" or not native else _nccl_time(m) for m in models]
    winners = _winners(sweep, timed, natives, target, channels, fuse, say)
    complete = not stopped and not any(c.cut for c in candidates)
    result = _schedule_set(topology, collective, kind, sweep, candidates, timed, winners, models, asked, target,
                           complete)
    timings = {c.label: c.seconds for c in candidates if c.seconds is not None}
    if stopped:
        raise Interrupted(f"stopped by Ctrl-C; the set holds the {len(timed)} schedule(s) timed so far",
                          best=TuneResult(result, time.perf_counter() - start, False, timings))
    if key is not None and complete:
        result_cache.store_set(key, result)
    say("done", 1.0)
    return TuneResult(result, time.perf_counter() - start, False, timings)


def _nccl(models: list[Baseline]) -> Baseline | None:
    """NCCL's pick among a size's baselines (None: NCCL has no such collective)."""
    return next((b for b in models if b.name == "nccl"), None)


def _nccl_time(models: list[Baseline]) -> float | None:
    pick = _nccl(models)
    return None if pick is None else pick.time_us


def _winners(sweep: list[int], timed: list[Candidate], natives: list[float | None], target: str | None,
             channels: int, fuse: bool, say: Callable[[str, float | None], None]) -> list[int]:
    """Per swept size, the index in ``timed`` of the fastest candidate (ties: fewer messages,
    then the earlier candidate) among those that export for ``target``, or ``NCCL_WINS`` where
    NCCL's pick (``natives``, its time per size; None: not an option) is faster still: the
    winners are checked (``msccl.unfit``), an unfit one is marked and left out, until every
    winner fits."""
    checked: set[int] = set()
    while True:
        fits = [j for j, c in enumerate(timed) if c.unfit is None]
        if not fits:
            reasons = "; ".join(f"{c.label}: {c.unfit}" for c in timed)
            raise BackendError(f"no schedule tried exports for {target}: {reasons}")
        winners = [min(fits, key=lambda j: (round(timed[j].times_us[i], 6), timed[j].messages, j))
                   for i in range(len(sweep))]
        winners = [NCCL_WINS if natives[i] is not None and round(natives[i], 6) < round(timed[w].times_us[i], 6)
                   else w for i, w in enumerate(winners)]
        if target not in ("msccl", "rccl"):
            return winners
        todo = [j for j in dict.fromkeys(winners) if j != NCCL_WINS and j not in checked]
        if not todo:
            return winners
        for j in todo:
            checked.add(j)
            say(f"checking that {timed[j].label} exports for {target}", None)
            why = unfit(timed[j].algorithm, target, channels=channels, fuse=fuse)
            if why is not None:
                timed[j].unfit = why.message


def runtime_of(target: str | None) -> str:
    """The runtime a set's candidates are timed for: its target's (the torch executor runs over
    NCCL on GPUs), the MSCCL executor when the set has no target."""
    return {"rccl": "rccl", "torch": "torch-nccl"}.get(target or "", DEFAULT_RUNTIME)


def _schedule_set(topology: Topology, collective: Any, kind: str, sweep: list[int], candidates: list[Candidate],
                  timed: list[Candidate], winners: list[int], models: list[list[Baseline]], asked: dict[str, Any],
                  target: str | None, complete: bool) -> ScheduleSet:
    """The set of the timed candidates: the winners per swept size (NCCL's pick where it won),
    runs of one winner as entries (each with its protocol), and the table against the bound and
    NCCL's models (``models``: the baselines per swept size)."""
    picks = [_nccl(m) if w == NCCL_WINS else None for m, w in zip(models, winners)]
    # a run of sizes with one winner and one protocol is an entry: NCCL's (its algorithm and
    # protocol) or a schedule of ours with the protocol it is fastest with at each of those sizes
    keys: list[Hashable] = [("ours", w, timed[w].protocols[i]) if c is None else ("nccl", c.algorithm, c.protocol)
                            for i, (w, c) in enumerate(zip(winners, picks))]
    entries = []
    for lo, hi, key in boundaries(sweep, keys):
        if key[0] == "nccl":  # NCCL itself: one algorithm and protocol of NCCL's over the run
            _, algorithm, proto = key
            entries.append(Entry(None, lo, hi, native_label(algorithm, proto), None, proto, native=algorithm))
            continue
        _, w, proto = key
        cand = timed[w]
        assert cand.algorithm is not None
        entries.append(Entry(cand.algorithm, lo, hi, cand.label, None, proto))
    starts = [e.min_bytes for e in entries]
    templates = [c for c in timed if not c.optional]
    table = []
    for i, size in enumerate(sweep):
        native = winners[i] == NCCL_WINS
        nccl_us = _nccl_time(models[i])
        time_us = nccl_us if native and nccl_us is not None else timed[winners[i]].times_us[i]
        b = lower_bound(topology, collective, size)
        entry = bisect_right(starts, size) - 1
        row: dict[str, Any] = {"size": size, "winner": "nccl" if native else timed[winners[i]].label,
                               "entry": entry, "protocol": entries[entry].protocol,
                               "time_us": round(time_us, 3), "bound_us": round(b.bound_us, 3),
                               "bound_ratio": round(time_us / b.bound_us, 4) if b.bound_us > 0 else None}
        if templates:
            best_t = min(templates, key=lambda c: c.times_us[i])
            row["best_template"] = best_t.label
            row["best_template_us"] = round(best_t.times_us[i], 3)
        for model in models[i]:
            row[f"{model.name}_us"] = round(model.time_us, 3)
        table.append(row)
    name = f"{kind}-{topology.name}-auto"
    return ScheduleSet(name, topology, collective, tuple(entries), tuple(table),
                       tuple(c.to_json() for c in candidates), asked, target, complete)
