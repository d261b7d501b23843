"""``ccl probe --nccl-tests``: the cost model's parameters fitted to a user's own nccl-tests runs.

nccl-tests (and rccl-tests) print a table per run: a row per size with ``size count type redop
root``, then the out-of-place ``time algbw busbw #wrong`` and the in-place ones; ``#`` starts the
comment lines (the arguments, the devices, the column names, the closing "Avg bus bandwidth").
``read_nccl_tests`` reads that table checking every number, and from the comments the devices
listed (their count must be the topology's ranks), whether the calls ran in a CUDA graph
(``graph: 1``) and the collective the run names (it must be the one asked for).

``fit_machine`` prices every row with the calibration in use (``calibration()``: the shipped
one, or the file ``CCL_CALIBRATION`` names), fits the parameters that apply to the machine
(``backends.cost.fit.applicable``) pulled toward that calibration (``PRIOR_WEIGHT``), and
prices them again: the measured time (out of place), the time before and after the fit, per row.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from dataclasses import dataclass
from typing import Any

from backends.cost import fit as cost_fit
from backends.cost import nccl
from backends.cost.calibration import ENVIRONMENT, Calibration, calibration
from backends.cost.machine import Machine

from ..core.display import shown
from ..core.errors import InputError
from ..core.limits import read_input_text
from ..core.topology import Topology
from ..core.units import MAX_SIZE

MAX_ROWS = 5000  # rows over all files: a sweep has tens; the fit prices every row many times
PRIOR_WEIGHT = 0.1  # the pull of the prior calibration on each fitted parameter (backends.cost.fit)
KINDS = nccl.RING_KINDS + nccl.P2P_KINDS  # what nccl-tests measures and the model prices
COLUMNS = 13  # size count type redop root, then time algbw busbw #wrong out of place and in place
BANDWIDTH_SLACK = 0.05  # algbw printed may differ this much (and 0.01 GB/s of rounding) from size / time
TESTS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
         "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "gather": "gather",
         "scatter": "scatter", "sendrecv": "sendrecv", "hypercube": "hypercube"}


@dataclass(frozen=True)
class Run:
    """One measured row: where it was read, the size (bytes) and out-of-place time (us)."""

    file: str
    line: int
    size: int
    time_us: float


@dataclass(frozen=True)
class Sweep:
    """What one nccl-tests output holds: its rows, the ranks its device lines list (None when it
    lists none), whether its calls ran in a graph, the collective its header names (or None)."""

    file: str
    runs: tuple[Run, ...]
    ranks: int | None
    graph: bool
    collective: str | None


def _number(text: str, name: str, line: int, what: str, *, whole: bool = False) -> float:
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise InputError(f"{name}:{line}: {what}: expected {kind}, got {shown(text[:40])}") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{name}:{line}: {what}: expected a finite number, not negative, got {shown(text[:40])}")
    return value


def parse_nccl_tests(text: str, name: str, budget: int = MAX_ROWS) -> Sweep:
    """The rows of nccl-tests' standard output ``text`` (module docstring); InputError naming
    ``name`` and the line of the first malformed row, or when it holds more than ``budget``."""
    runs: list[Run] = []
    ranks: set[int] = set()
    graph = False
    collective = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("Avg bus bandwidth", "Out of bounds values")):
            continue  # the closing summary, when a capture dropped its '#'
        if line.startswith("#"):
            found = re.match(r"#\s*Rank\s+(\d+)\b", line)
            if found:
                ranks.add(int(found.group(1)))
            found = re.search(r"\bgraph:\s*(\d+)", line)
            if found:
                graph = int(found.group(1)) > 0
            found = re.search(r"Collective test starting:\s*(\w+?)_perf\b", line)
            if found:
                collective = TESTS.get(found.group(1), found.group(1))
            continue
        fields = line.split()
        if len(fields) != COLUMNS:
            raise InputError(f"{name}:{number}: expected an nccl-tests row of {COLUMNS} columns (size count type "
                             f"redop root, then time algbw busbw #wrong out of place and in place), got "
                             f"{len(fields)}: {shown(line[:80])}")
        size = int(_number(fields[0], name, number, "size (bytes)", whole=True))
        _number(fields[1], name, number, "count (elements)", whole=True)
        if fields[4] != "-1":
            _number(fields[4], name, number, "root", whole=True)
        time = _number(fields[5], name, number, "out-of-place time (us)")
        algbw = _number(fields[6], name, number, "out-of-place algbw (GB/s)")
        _number(fields[7], name, number, "out-of-place busbw (GB/s)")
        for k in (8, 12):
            if fields[k] != "N/A" and _number(fields[k], name, number, "#wrong", whole=True) > 0:
                raise InputError(f"{name}:{number}: the run reports {fields[k]} wrong results at {size} bytes: its "
                                 "times do not describe a working collective")
        _number(fields[9], name, number, "in-place time (us)")
        _number(fields[10], name, number, "in-place algbw (GB/s)")
        _number(fields[11], name, number, "in-place busbw (GB/s)")
        if size > MAX_SIZE:
            raise InputError(f"{name}:{number}: size {size} bytes is larger than any the model prices ({MAX_SIZE})")
        if size == 0:
            continue  # a call that moves nothing (nccl-tests -b 0): no time of the model's to hold it to
        if time <= 0:
            raise InputError(f"{name}:{number}: out-of-place time must be positive, got {shown(fields[5])}")
        expected = size / time / 1e3
        if abs(expected - algbw) > BANDWIDTH_SLACK * algbw + 0.01:
            raise InputError(f"{name}:{number}: algbw {fields[6]} GB/s is not size / time ({expected:.3g} GB/s): "
                             "the columns are not nccl-tests' (size in bytes, time in us)")
        if len(runs) >= budget:
            raise InputError(f"{name}:{number}: more than {MAX_ROWS} rows in the files given (at most {MAX_ROWS})")
        runs.append(Run(name, number, size, time))
    if not runs:
        raise InputError(f"{name}: no nccl-tests rows (expected the table of size count type redop root time "
                         "algbw busbw #wrong ...)")
    return Sweep(name, tuple(runs), len(ranks) or None, graph, collective)


def read_nccl_tests(paths: list[str], topology: Topology, kind: str) -> list[Sweep]:
    """The sweeps of ``paths`` (``parse_nccl_tests``), each checked against the topology's ranks
    and ``kind``."""
    if kind not in KINDS:
        raise InputError(f"collective {kind!r}: nccl-tests runs the model prices are {', '.join(KINDS)}")
    sweeps = []
    left = MAX_ROWS
    for path in paths:
        name = os.fsdecode(path)
        sweep = parse_nccl_tests(read_input_text(path, "nccl-tests output"), name, left)
        left -= len(sweep.runs)
        if sweep.ranks is not None and sweep.ranks != topology.n_ranks:
            raise InputError(f"{name}: the run lists {sweep.ranks} devices, the topology {topology.name} has "
                             f"{topology.n_ranks} ranks")
        if sweep.collective is not None and sweep.collective != kind:
            raise InputError(f"{name}: the run is {sweep.collective}, not {kind} (-c)")
        sweeps.append(sweep)
    return sweeps


def _errors(pairs: list[tuple[float, float]]) -> dict[str, float]:
    errs = [abs(p / m - 1) for p, m in pairs]
    return {"median": statistics.median(errs), "worst": max(errs)}


def fit_machine(sweeps: list[Sweep], topology: Topology, kind: str) -> tuple[Calibration, dict[str, Any]]:
    """The calibration in use fitted to the sweeps, and the report: per row measured, before
    and after; the error summaries; the parameters fitted, before and after."""
    machine = Machine.of(topology)
    if machine.n_ranks < 2:
        raise InputError(f"topology {topology.name} has {machine.n_ranks} rank: a collective needs at least 2")
    runtime = "rccl" if machine.generation.name.startswith("cdna") else "nccl"
    rows = [cost_fit.Row(id=f"{r.file}:{r.line}", group=s.file, machine=machine, kind=kind, size=float(r.size),
                         measured_us=r.time_us, runtime=runtime, graph=s.graph)
            for s in sweeps for r in s.runs]
    base = calibration()
    names = cost_fit.applicable(rows)
    fitted = cost_fit.fit(rows, base, names=names, prior_weight=PRIOR_WEIGHT)
    before = [cost_fit.predict(r, base) for r in rows]
    after = [cost_fit.predict(r, fitted) for r in rows]
    old, new = cost_fit.vector(base, names, base), cost_fit.vector(fitted, names, base)
    report = {
        "collective": kind, "topology": topology.name, "n_ranks": topology.n_ranks,
        "generation": machine.generation.name, "runtime": runtime, "files": [s.file for s in sweeps],
        "prior": os.environ.get(ENVIRONMENT) or "shipped",
        "parameters": {n: {"before": a, "after": b} for n, a, b in zip(names, old, new)},
        "rows": [{"file": s.file, "line": r.line, "size_bytes": r.size, "measured_us": r.time_us,
                  "before_us": b[0], "after_us": a[0], "pick_before": b[1], "pick_after": a[1]}
                 for s, r, b, a in zip([s for s in sweeps for _ in s.runs], [r for s in sweeps for r in s.runs],
                                       before, after)],
        "error": {"before": _errors([(b[0], r.measured_us) for b, r in zip(before, rows)]),
                  "after": _errors([(a[0], r.measured_us) for a, r in zip(after, rows)])},
    }
    return fitted, report


def calibration_file(fitted: Calibration, report: dict[str, Any]) -> dict[str, Any]:
    """The calibration file of a fit: the fitted parameters name the runs as their source."""
    files = ", ".join(os.path.basename(f) for f in report["files"])
    source = (f"fitted by `ccl probe --nccl-tests` on {len(report['rows'])} {report['collective']} runs on "
              f"{report['topology']} ({files}), pulled toward the {report['prior']} calibration")
    return cost_fit.to_json(fitted, list(report["parameters"]), source)
