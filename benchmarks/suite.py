"""The benchmark suite: ``python -m benchmarks`` from the repository root.

For every machine and collective of the suite, the tuner (``ccl.compiler.tuner.tune``, what
``ccl synthesize --solver auto`` runs) tries every applicable solver within a time budget and
keeps the fastest simulated schedule per size, or NCCL itself where NCCL's pick is faster than
every candidate (a native entry). Every time is priced by the calibrated cost model
(``docs/costmodel.md``): ours for the MSCCL executor with the protocol the tuner chose, NCCL's
pick (``backends.cost.nccl``) as NCCL 2.30 would run it. Each (machine, collective) runs in a
fresh process, whose peak resident memory is recorded. Per size the results show the winner's
time and label, NCCL's pick (its algorithm and protocol) and the ratio to it (its time / ours:
above 1 we are faster; 1 exactly where the entry is NCCL itself), the ratio to NCCL's ring as
secondary information, to the best template (its time / ours) and to the lower bound (ours /
bound), the winner's synthesis time and the tuner's wall time for the case. The headline
quotes the model's error on measurements it was not fitted on (``results/validate.json``,
written by ``python benchmarks/validate.py``). Two more sections:

* gloo runs: the winning schedule for a size executed on local gloo processes (CPU), checked
  against torch's collective and timed next to it (``ccl.compiler.runtimes.run_local_sizes``);
* exact synthesis: the SMT solver's time on a few classic instances (each in a fresh process,
  with a time limit).

Writes ``RESULTS.md``, ``results/suite.json`` and a time-vs-size plot per case,
``results/plots/<machine>-<collective>.png`` (a ``:`` of the machine spec becomes ``_``), under
``--out`` (default: this folder). ``--quick`` is a CI-sized run writing ``RESULTS-quick.md``,
``results/suite-quick.json`` and ``results/plots-quick/`` instead. The headline of the md is
computed from the data. Everything but the timing fields (seconds, memory, the date and the
machine it ran on) is deterministic: same tree and options, same files.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MACHINES = ("dgx1", "amd8", "ndv2:2", "dgx2:2", "dgx-a100:4", "dgx-h100:2", "torus:4x4", "dgx-h100:16")
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast")
SIZES = (KiB, 64 * KiB, MiB, 64 * MiB, GiB)
ROOTED = ("broadcast", "reduce", "gather", "scatter")  # run with root 0
PICK = "nccl"  # the table's baseline: NCCL's pick (its fastest enabled algorithm and protocol)
SECONDARY = "nccl-ring"  # shown beside it: NCCL's ring (the pick itself where the pick is Ring)
NATIVE = "nccl (native)"  # the schedule column where the set's entry is NCCL itself
VALIDATION = os.path.join(HERE, "results", "validate.json")  # the cost model's error (validate.py)
TIE = 0.01  # speedups within 1% of 1 count as ties in the headline
DEFAULT_BUDGET = 30.0  # tuner seconds per case
CASE_TIMEOUT = 1800.0  # a case still running after this is stopped and reported
SMT_LIMIT = 60.0  # seconds per exact-synthesis instance
GLOO_REPEAT = 5


@dataclass(frozen=True)
class GlooCase:
    """A schedule set executed on local gloo processes at ``sizes``."""

    machine: str
    collective: str
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class SmtInstance:
    """One exact synthesis (``solver="smt"``); ``steps``/``rounds`` None: the fewest."""

    name: str
    machine: str
    collective: str
    chunks: int = 1
    steps: int | None = None
    rounds: int | None = None


GLOO = (
    GlooCase("dgx1", "allreduce", (64 * KiB, MiB)),
    GlooCase("dgx1", "allgather", (64 * KiB, MiB)),
    GlooCase("amd8", "broadcast", (64 * KiB, MiB)),
)
SMT = (
    SmtInstance("DGX-1 allgather, fewest steps", "dgx1", "allgather"),
    SmtInstance("DGX-1 allgather, 3 steps 7 rounds 6 chunks (bandwidth-optimal)", "dgx1", "allgather", 6, 3, 7),
    SmtInstance("ring of 8 allgather, fewest steps", "ring:8", "allgather"),
    SmtInstance("DGX-1 allreduce, fewest steps", "dgx1", "allreduce"),
    SmtInstance("DGX-1 alltoall, fewest steps", "dgx1", "alltoall"),
)


@dataclass(frozen=True)
class Config:
    machines: tuple[str, ...] = MACHINES
    collectives: tuple[str, ...] = COLLECTIVES
    sizes: tuple[int, ...] = SIZES
    time_budget: float = DEFAULT_BUDGET
    gloo: tuple[GlooCase, ...] = GLOO
    smt: tuple[SmtInstance, ...] = SMT
    smt_limit: float = SMT_LIMIT
    case_timeout: float = CASE_TIMEOUT
    plots: bool = True
    quick: bool = False
    verbose: bool = False
    command: str = "python -m benchmarks"

    def to_json(self) -> dict[str, Any]:
        from ccl.core.units import format_size

        return {
            "machines": list(self.machines), "collectives": list(self.collectives),
            "sizes": [format_size(s) for s in self.sizes], "time_budget_s": self.time_budget,
            "gloo": [{"machine": g.machine, "collective": g.collective, "sizes": [format_size(s) for s in g.sizes]}
                     for g in self.gloo],
            "smt": [{"name": s.name, "machine": s.machine, "collective": s.collective, "chunks": s.chunks,
                     "steps": s.steps, "rounds": s.rounds} for s in self.smt],
            "smt_limit_s": self.smt_limit, "case_timeout_s": self.case_timeout, "quick": self.quick,
        }


QUICK = Config(
    machines=("dgx1", "ndv2:2", "torus:4x4"), collectives=("allreduce", "allgather"), sizes=(KiB, MiB, GiB),
    time_budget=10.0, gloo=(GlooCase("dgx1", "allreduce", (MiB,)),), smt=(SMT[0],), quick=True,
)


@dataclass(frozen=True)
class Paths:
    md: str
    json: str
    plots: str

    @staticmethod
    def under(out: str, quick: bool) -> Paths:
        tail = "-quick" if quick else ""
        return Paths(os.path.join(out, f"RESULTS{tail}.md"), os.path.join(out, "results", f"suite{tail}.json"),
                     os.path.join(out, "results", f"plots{tail}"))


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ fresh processes
def in_fresh_process(fn: Callable[..., dict[str, Any]], args: tuple, timeout: float) -> dict[str, Any]:
    """``fn(*args)`` in a forked process of its own (its peak memory is the work's; everything
    it allocated is gone afterwards); stopped after ``timeout`` seconds."""
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        pending = pool.apply_async(fn, args)
        try:
            return pending.get(timeout)
        except multiprocessing.TimeoutError:
            return {"error": f"stopped: still running after {timeout:g} s"}
        except Exception as exc:  # the case's own failure (an import error too) is the case's, not the run's
            return {"error": f"{type(exc).__name__}: {exc}"}


def peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # kilobytes on Linux


def plain(value: Any) -> Any:
    """JSON-ready copy (numpy scalars become floats)."""
    return json.loads(json.dumps(value, default=float))


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a and b else None


# ------------------------------------------------------------------ tuned cases
def case_rows(table: Sequence[dict[str, Any]], candidates: Sequence[dict[str, Any]],
              picks: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """Per swept size: the tuner's winner and its ratios to NCCL's pick, to NCCL's ring, the
    best template and the bound, from a schedule set's ``table`` and ``candidates``;
    ``picks``: per size NCCL's pick as "algorithm/protocol" ("NVLS/Simple")."""
    by_label = {c["label"]: c for c in candidates}
    picks = picks or {}
    rows = []
    for row in table:
        t = row["time_us"]
        native = row["winner"] == PICK
        winner = {} if native else by_label.get(row["winner"], {})
        pick = picks.get(row["size"])
        nccl_us = row.get(f"{PICK}_us")
        # NCCL's ring: a runner-up of its own, or the pick itself when the pick is Ring
        ring_us = row.get(f"{SECONDARY}_us")
        if ring_us is None and pick and pick.split("/")[0] == "Ring":
            ring_us = nccl_us
        out = {"size": row["size"], "winner": row["winner"], "native": native, "solver": winner.get("solver"),
               "protocol": row.get("protocol"), "time_us": t, "bound_us": row["bound_us"],
               "bound_ratio": row["bound_ratio"],
               "best_template": row.get("best_template"), "best_template_us": row.get("best_template_us"),
               "vs_best_template": ratio(row.get("best_template_us"), t),
               "winner_synthesis_s": winner.get("synthesis_seconds"),
               "nccl_pick": pick, "nccl_us": nccl_us, "vs_nccl": 1.0 if native and nccl_us else ratio(nccl_us, t),
               "nccl_ring_us": ring_us, "vs_nccl_ring": ratio(ring_us, t),
               "nccl_runners_up": {k[:-3]: v for k, v in row.items()
                                   if k.startswith(f"{PICK}-") and k.endswith("_us")}}
        rows.append(out)
    return plain(rows)


def _tune_case(machine: str, kind: str, sizes: tuple[int, ...], budget: float, keep_set: bool,
               verbose: bool) -> dict[str, Any]:
    from backends.cost.nccl import pick as nccl_pick
    from ccl.compiler import load_topology
    from ccl.compiler.tuner import tune
    from ccl.core.errors import CclError

    start = time.perf_counter()
    if not verbose:
        os.environ["CCL_QUIET"] = "1"  # the solvers' own progress lines (this process only)
    try:
        topology = load_topology(machine)
        progress = None
        if verbose:
            def progress(message: str, _fraction: float | None) -> None:
                say(f"    {machine} {kind}: {message}")
        result = tune(topology, kind, root=0 if kind in ROOTED else None, sizes=list(sizes), time_budget=budget,
                      cache=False, progress=progress)
    except CclError as exc:
        return {"error": exc.message, "tuner_s": round(time.perf_counter() - start, 3), "peak_MiB": peak_mib()}
    sset = result.schedule_set
    # the set stores no wall-clock times (the same request gives the same set anywhere): the
    # report takes each candidate's synthesis seconds from the tuner's timings
    candidates = [{**c, "synthesis_seconds": round(result.timings[c["label"]], 3) if c["label"] in result.timings
                   else None} for c in sset.candidates]
    picks = {}
    for row in sset.table:
        choice = nccl_pick(kind, topology, row["size"])
        if choice is not None:
            picks[row["size"]] = f"{choice.algorithm}/{choice.protocol}"
    out = {
        "ranks": topology.n_ranks, "nodes": topology.n_nodes, "root": sset.collective.root,
        "tuner_s": round(result.seconds, 3), "peak_MiB": peak_mib(), "error": None,
        "entries": [{"label": e.label, "min_bytes": e.min_bytes, "max_bytes": e.max_bytes, "native": e.is_native}
                    for e in sset.entries],
        "rows": case_rows(sset.table, candidates, picks), "candidates": plain(candidates),
    }
    if keep_set:
        out["set"] = sset
    return out


def run_case(config: Config, machine: str, kind: str, sizes: tuple[int, ...] | None = None,
             keep_set: bool = False) -> dict[str, Any]:
    """One (machine, collective) tuned in a fresh process: the case's JSON record (with the
    ScheduleSet under "set" when ``keep_set``)."""
    got = in_fresh_process(_tune_case, (machine, kind, tuple(sizes or config.sizes), config.time_budget, keep_set,
                                        config.verbose), config.case_timeout)
    record = {"machine": machine, "collective": kind, "ranks": None, "nodes": None, "root": None, "tuner_s": None,
              "peak_MiB": None, "error": None, "entries": [], "rows": [], "candidates": []}
    record.update(got)
    return record


# ------------------------------------------------------------------ gloo runs
def run_gloo(config: Config, case: GlooCase, sset: Any) -> list[dict[str, Any]]:
    """The set's entry for each size run on local gloo processes (in this process: the runs
    start processes of their own), checked against torch and timed."""
    from ccl.compiler.runtimes import run_local_sizes
    from ccl.core.errors import CclError

    base = {"machine": case.machine, "collective": case.collective}
    if isinstance(sset, str):  # the tuning failed
        return [{**base, "size": s, "schedule": None, "error": sset} for s in case.sizes]
    try:
        runs = run_local_sizes(sset, sizes=list(case.sizes), repeat=GLOO_REPEAT)
    except CclError as exc:
        return [{**base, "size": s, "schedule": None, "error": exc.message} for s in case.sizes]
    out = []
    for run in runs:
        rep = run.report
        if rep is None:  # the set leaves this size to NCCL: torch's own collective, nothing of ours to run
            continue
        out.append({**base, "size": run.size, "schedule": run.entry.label, "ranks": rep.ranks,
                    "size_bytes": rep.size_bytes, "repeat": rep.repeat, "correct": rep.correct,
                    "max_error": rep.max_error, "ours_s": rep.ours_seconds, "torch_s": rep.native_seconds,
                    "torch_over_ours": None if not rep.ratio else round(1 / rep.ratio, 4), "error": None})
    return plain(out)


# ------------------------------------------------------------------ exact synthesis
def _smt(inst: SmtInstance, limit: float) -> dict[str, Any]:
    from ccl.compiler import problem_from_options, synthesize
    from ccl.core.errors import CclError, SolverTimeout

    start = time.perf_counter()
    try:
        res = synthesize(problem_from_options(inst.machine, inst.collective, root=0 if inst.collective in ROOTED else None,
                                              solver="smt", chunks=inst.chunks, steps=inst.steps, rounds=inst.rounds,
                                              time_limit=limit))
    except SolverTimeout as exc:
        return {"status": "timeout", "error": exc.message, "seconds": round(time.perf_counter() - start, 3)}
    except CclError as exc:
        return {"status": "error", "error": exc.message, "seconds": round(time.perf_counter() - start, 3)}
    alg = res.algorithm
    return {"status": res.status, "error": None, "seconds": round(res.seconds, 3), "steps_found": alg.n_steps,
            "rounds_found": None if alg.rounds is None else sum(alg.rounds), "peak_MiB": peak_mib()}


def run_smt(config: Config, inst: SmtInstance) -> dict[str, Any]:
    record = {"name": inst.name, "machine": inst.machine, "collective": inst.collective, "chunks": inst.chunks,
              "steps": inst.steps, "rounds": inst.rounds, "time_limit_s": config.smt_limit, "status": None,
              "seconds": None, "steps_found": None, "rounds_found": None, "peak_MiB": None, "error": None}
    got = in_fresh_process(_smt, (inst, config.smt_limit), config.smt_limit + 120)
    record.update(got)
    if record["status"] is None:
        record["status"] = "error"
    return record


# ------------------------------------------------------------------ plots
def plot_name(machine: str, kind: str) -> str:
    return f"{machine.replace(':', '_').replace('/', '_')}-{kind}.png"


def plot_case(case: dict[str, Any], path: str) -> None:
    """Time against size: every candidate the tuner timed, NCCL's pick and ring, and the bound."""
    from backends.sim.plots import plot_sizes
    from ccl.core.report import bus_factor

    rows = case["rows"]
    sizes = [r["size"] for r in rows]
    curves = {c["label"]: list(zip(sizes, c["times_us"])) for c in case["candidates"] if c.get("times_us")}
    for name, key in (("NCCL's pick", "nccl_us"), ("NCCL ring", "nccl_ring_us")):
        points = [(r["size"], r[key]) for r in rows if r.get(key)]
        if points:
            curves[f"{name} (model)"] = points
    bound = [(r["size"], r["bound_us"]) for r in rows if r["bound_us"]]
    plot_sizes(curves, bound, path, title=f"{case['collective']} on {case['machine']} ({case['ranks']} ranks): "
               "simulated time of every candidate", bus_factor=bus_factor(case["collective"], case["ranks"]))


# ------------------------------------------------------------------ the run
def meta() -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "python": platform.python_version(), "commit": commit}


def run_suite(config: Config, out: str = HERE, *, gloo: bool = True, smt: bool = True) -> dict[str, Any]:
    """Run everything ``config`` asks, write the md, JSON and plots under ``out``; returns the
    JSON document."""
    from ccl.core.units import format_size

    paths = Paths.under(out, config.quick)
    start = time.perf_counter()
    gloo_cases = config.gloo if gloo else ()
    gloo_keys = {(g.machine, g.collective) for g in gloo_cases}
    sets: dict[tuple[str, str], Any] = {}
    cases = []
    todo = [(m, k) for m in config.machines for k in config.collectives]
    for n, (machine, kind) in enumerate(todo, 1):
        say(f"[{n}/{len(todo)}] {machine} {kind}: tuning at {len(config.sizes)} sizes "
            f"(budget {config.time_budget:g} s)")
        case = run_case(config, machine, kind, keep_set=(machine, kind) in gloo_keys)
        if "set" in case:
            sets[(machine, kind)] = case.pop("set")
        if case["error"]:
            say(f"    failed: {case['error']}")
        else:
            last = case["rows"][-1]
            say(f"    {case['tuner_s']:.1f} s, {case['peak_MiB']:.0f} MiB; at {format_size(last['size'])}: "
                f"{last['winner']}, {last['bound_ratio']} x bound")
        cases.append(case)
    smt_rows = []
    for n, inst in enumerate(config.smt if smt else (), 1):
        say(f"[smt {n}/{len(config.smt)}] {inst.name} (limit {config.smt_limit:g} s)")
        smt_rows.append(run_smt(config, inst))
        r = smt_rows[-1]
        say(f"    {r['status']} in {r['seconds']} s" + (f": {r['error']}" if r["error"] else ""))
    gloo_rows = []
    for n, g in enumerate(gloo_cases, 1):
        sset = sets.get((g.machine, g.collective))
        sizes = tuple(sorted(set(config.sizes) | set(g.sizes)))
        if sset is None or any(s not in config.sizes for s in g.sizes):
            say(f"[gloo {n}/{len(gloo_cases)}] {g.machine} {g.collective}: tuning at {len(sizes)} sizes")
            case = run_case(config, g.machine, g.collective, sizes, keep_set=True)
            sset = case.get("set") or case["error"] or "no schedule set"
        say(f"[gloo {n}/{len(gloo_cases)}] {g.machine} {g.collective}: running at "
            f"{', '.join(format_size(s) for s in g.sizes)} on local gloo processes")
        gloo_rows.extend(run_gloo(config, g, sset))
    doc = {
        "format": "ccl-benchmark-suite", "version": 2, "command": config.command, "meta": meta(),
        "config": config.to_json(), "model": model_error(), "total_s": None, "headline": {}, "cases": cases,
        "gloo": gloo_rows, "smt": smt_rows,
    }
    if config.plots:
        os.makedirs(paths.plots, exist_ok=True)
        for case in cases:
            if case["rows"]:
                try:
                    plot_case(case, os.path.join(paths.plots, plot_name(case["machine"], case["collective"])))
                except Exception as exc:  # a plot must not lose the results
                    say(f"    plot of {case['machine']} {case['collective']} failed: {exc}")
    doc["total_s"] = round(time.perf_counter() - start, 1)
    try:
        doc["headline"] = headline(doc)
    except Exception:  # keep the run's data: the JSON is written before the error is raised
        write(doc, paths, config, md=False)
        raise
    write(doc, paths, config)
    say(f"wrote {paths.md} and {paths.json} in {doc['total_s']:.0f} s")
    return doc


def model_error(path: str = VALIDATION) -> dict[str, Any] | None:
    """The cost model's error on the measurements its fit never saw (``validate.py``'s
    ``validate`` block: rows, median and worst relative error, the worst row); None without
    the file."""
    try:
        with open(path, encoding="utf-8") as f:
            v = json.load(f)["validate"]
    except (OSError, ValueError, KeyError):
        return None
    return {"source": "benchmarks/results/validate.json", "rows": v["rows"],
            "median_error": round(v["median_error"], 4), "worst_error": round(v["worst_error"], 4),
            "worst_row": v["worst_row"]}


def write(doc: dict[str, Any], paths: Paths, config: Config, md: bool = True) -> None:
    os.makedirs(os.path.dirname(paths.json), exist_ok=True)
    os.makedirs(os.path.dirname(paths.md) or ".", exist_ok=True)
    text = json.dumps(doc, indent=1) + "\n"
    with open(paths.json + ".tmp", "w") as f:
        f.write(text)
    os.replace(paths.json + ".tmp", paths.json)
    if not md:
        return
    md = markdown(doc, paths, config)
    with open(paths.md + ".tmp", "w") as f:
        f.write(md)
    os.replace(paths.md + ".tmp", paths.md)


# ------------------------------------------------------------------ the headline
def geomean(xs: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def where(x: Sequence[Any]) -> list[Any]:
    """[ratio, machine, collective, size] of a point, the ratio rounded as the md prints it."""
    return [round(x[0], 4), *x[1:]]


def versus(points: Sequence[tuple[dict[str, Any], dict[str, Any]]], key: str) -> dict[str, Any] | None:
    """How the points compare with one baseline (``key``: a row's ratio field, its time over
    ours): how many are faster by 1% or more, tie (NCCL's own entry, or within 1%) or are
    slower by more than 1%; the geometric mean, worst and best ratio."""
    have = sorted(((r[key], c["machine"], c["collective"], r["size"]) for c, r in points if r.get(key)),
                  key=lambda x: (x[0], x[1], x[2], x[3]))
    if not have:
        return None
    native = {(c["machine"], c["collective"], r["size"]) for c, r in points if r.get("native")}
    ties = [x for x in have if 1 - TIE < x[0] < 1 + TIE]
    return {"points": len(have), "faster": sum(1 for x in have if x[0] >= 1 + TIE), "tied": len(ties),
            "native": sum(1 for x in ties if tuple(x[1:]) in native),
            "slower": sum(1 for x in have if x[0] <= 1 - TIE),
            "geomean": round(geomean([x[0] for x in have]), 4), "worst": where(have[0]), "best": where(have[-1])}


def headline(doc: dict[str, Any]) -> dict[str, Any]:
    """Numbers the md's headline paragraph states, computed from the cases: over every (case,
    size) point and per size, how the tuned set compares with NCCL's pick (faster by 1% or
    more, tied, slower; geometric mean, worst, best), the points it only ties (each with NCCL's
    pick, native or not), NCCL's ring as secondary, the ratio to the bound, and the cost model's
    validation error the ratios stand on."""
    points = [(c, r) for c in doc["cases"] for r in c["rows"]]
    out: dict[str, Any] = {"cases": len(doc["cases"]), "failed": [f"{c['machine']} {c['collective']}"
                                                                    for c in doc["cases"] if c["error"]],
                           "points": len(points), "model": doc.get("model"),
                           "vs_nccl": versus(points, "vs_nccl"), "vs_nccl_ring": versus(points, "vs_nccl_ring"),
                           "no_nccl": sum(1 for _, r in points if not r.get("vs_nccl")), "sizes": {}}
    for size in sorted({r["size"] for _, r in points}):
        at = [(c, r) for c, r in points if r["size"] == size]
        entry: dict[str, Any] = {"cases": len(at), "vs_nccl": versus(at, "vs_nccl")}
        ratios = sorted(((r["bound_ratio"], c["machine"], c["collective"]) for c, r in at if r["bound_ratio"]),
                        key=lambda x: (-x[0], x[1], x[2]))
        if ratios:
            entry["bound"] = {"geomean": round(geomean([x[0] for x in ratios]), 3), "worst": list(ratios[0]),
                              "within_1_1": sum(1 for x in ratios if x[0] <= 1.1), "cases": len(ratios)}
        entry["synthesized_wins"] = sum(1 for _, r in at if r["solver"] and r["best_template"]
                                        and r["winner"] != r["best_template"])
        out["sizes"][str(size)] = entry
    # the points where the set is not faster than NCCL's pick by 1% or more, per case
    ties: dict[tuple[str, str], dict[str, Any]] = {}
    for c, r in points:
        if r.get("vs_nccl") and r["vs_nccl"] < 1 + TIE:
            t = ties.setdefault((c["machine"], c["collective"]), {"machine": c["machine"], "collective": c["collective"],
                                                                  "points": []})
            t["points"].append({"size": r["size"], "vs_nccl": r["vs_nccl"], "native": bool(r.get("native")),
                                "nccl_pick": r.get("nccl_pick")})
    out["not_faster"] = list(ties.values())
    worst = sorted(((r["bound_ratio"], c["machine"], c["collective"], r["size"]) for c, r in points
                    if r["bound_ratio"]), key=lambda x: (-x[0], x[1], x[2], x[3]))
    out["skipped"] = [[c["machine"], c["collective"], [k["label"] for k in c["candidates"]
                                                        if (k.get("error") or "").startswith("skipped")]]
                      for c in doc["cases"]]
    out["skipped"] = [x for x in out["skipped"] if x[2]]
    out["worst_bound"] = list(worst[0]) if worst else None
    # a time below the bound can only be a model's (NCCL's pick priced analytically): name them
    out["below_bound"] = [[x[1], x[2], x[3], x[0]] for x in sorted(worst, key=lambda x: (x[1], x[2], x[3]))
                          if x[0] < 1]
    out["geomean_bound_all"] = round(geomean([x[0] for x in worst]), 3) if worst else None
    out["synthesized_wins"] = sum(1 for _, r in points if r["solver"] and r["best_template"]  # not NCCL's own
                                  and r["winner"] != r["best_template"])
    gl = [g for g in doc["gloo"] if not g["error"]]
    out["gloo"] = {"runs": len(doc["gloo"]), "correct": sum(1 for g in gl if g["correct"]),
                   "failed": len(doc["gloo"]) - len(gl)}
    out["smt"] = {"instances": len(doc["smt"]), "solved": sum(1 for s in doc["smt"] if s["status"] == "ok"),
                  "slowest": max((s["seconds"] for s in doc["smt"] if s["seconds"] is not None), default=None)}
    return out


def point_text(x: Sequence[Any]) -> str:
    """"2.31x (dgx1 allgather, 1KiB)"."""
    from ccl.core.units import format_size

    return f"{x[0]:.2f}x ({x[1]} {x[2]}, {format_size(x[3])})"


def model_text(model: dict[str, Any] | None) -> str:
    """The sentence on what the ratios stand on: the calibrated model and its validation error."""
    said = ("Every time here is simulated under the calibrated cost model (docs/costmodel.md): ours for the "
            "MSCCL executor with the protocol the tuner chose, NCCL's pick as NCCL 2.30 would run it, so every "
            "ratio is a ratio of two modelled times, not a measurement")
    if not model:
        return said + "; no validation of the model was found (run `python benchmarks/validate.py`)."
    return (said + f"; on the {model['rows']} published measurements its fit never saw, the model's median "
            f"error is {model['median_error']:.1%} and its worst {model['worst_error']:.1%} "
            f"({model['worst_row']}).")


def ties_text(ties: Sequence[dict[str, Any]]) -> str:
    """"dgx-h100:2 allreduce at 64MiB, 1GiB (native NVLSTree/Simple)"; per case."""
    from ccl.core.units import format_size

    out = []
    for t in ties:
        groups: dict[str, list[str]] = {}
        for p in t["points"]:
            how = f"native {p['nccl_pick']}" if p["native"] else f"{p['vs_nccl']:.3f}x vs {p['nccl_pick']}"
            groups.setdefault(how, []).append(format_size(p["size"]))
        out.append(f"{t['machine']} {t['collective']} at " + "; ".join(f"{', '.join(sizes)} ({how})"
                                                                         for how, sizes in groups.items()))
    return "; ".join(out)


def headline_text(h: dict[str, Any]) -> str:
    from ccl.core.units import format_size

    parts = [f"{h['cases']} cases (machine x collective), {h['points']} (case, size) points"
             + (f"; {len(h['failed'])} case(s) failed: {', '.join(h['failed'])}" if h["failed"] else "") + ".",
             model_text(h.get("model"))]
    v = h.get("vs_nccl")
    if v:
        parts.append(
            f"Against NCCL's pick (the algorithm and protocol NCCL 2.30's rules choose for the machine, collective "
            f"and size: the `NCCL pick` column) the tuned set is faster by 1% or more at {v['faster']} of "
            f"{v['points']} points and ties at {v['tied']} ({v['native']} where the set's entry is NCCL itself, "
            f"because NCCL's pick beat every schedule of ours, {v['tied'] - v['native']} within 1%)"
            + (f"; it is slower by more than 1% at {v['slower']}" if v["slower"] else "; it is slower at none")
            + f". Geometric mean {v['geomean']:.2f}x; worst {point_text(v['worst'])}; best {point_text(v['best'])}.")
        if h["no_nccl"]:
            parts.append(f"NCCL has no pick at {h['no_nccl']} point(s).")
    by_size = []
    for size, e in sorted(h["sizes"].items(), key=lambda kv: int(kv[0])):
        s = e.get("vs_nccl")
        if s:
            by_size.append(f"at {format_size(int(size))} faster at {s['faster']} of {s['points']}, tied at "
                           f"{s['tied']} ({s['native']} native), geometric mean {s['geomean']:.2f}x")
    if by_size:
        parts.append("By size: " + "; ".join(by_size) + ".")
    if h.get("not_faster"):
        parts.append("Where the set only ties NCCL's pick: " + ties_text(h["not_faster"]) + ".")
    ring = h.get("vs_nccl_ring")
    if ring:
        parts.append(f"Secondary, against NCCL's Ring alone: faster at {ring['faster']} of {ring['points']} points, "
                     f"geometric mean {ring['geomean']:.2f}x.")
    for size, e in sorted(h["sizes"].items(), key=lambda kv: int(kv[0]))[-2:]:
        b = e.get("bound")
        if b:
            parts.append(f"At {format_size(int(size))} the set is on geometric mean {b['geomean']:.3f}x the lower "
                         f"bound (within 10% in {b['within_1_1']} of {b['cases']} cases; furthest: {b['worst'][1]} "
                         f"{b['worst'][2]}, {b['worst'][0]:.3f}x), and a synthesized schedule, not a template, wins "
                         f"{e['synthesized_wins']} of {e['cases']} cases.")
    if h["worst_bound"]:
        r, m, k, size = h["worst_bound"]
        parts.append(f"Over all sizes the geometric mean ratio to the bound is {h['geomean_bound_all']:.3f}x; the "
                     f"furthest from it is {m} {k} at {format_size(size)} ({r:.3f}x). Synthesized schedules win "
                     f"{h['synthesized_wins']} of {h['points']} points.")
    if h.get("below_bound"):
        parts.append(f"At {len(h['below_bound'])} point(s) the time (NCCL's pick, priced by its analytic model) is "
                     "below the lower bound, which no schedule can be: "
                     + ", ".join(f"{m} {k} at {format_size(size)} ({r:.3f}x)" for m, k, size, r in h["below_bound"])
                     + "; there the NCCL model is optimistic and the tie is NCCL's favour, not a measured fact.")
    if h["skipped"]:
        parts.append(f"The time budget cut candidates in {len(h['skipped'])} case(s) ("
                     + "; ".join(f"{m} {k}: {', '.join(labels)}" for m, k, labels in h["skipped"])
                     + "): their results depend on this machine's speed.")
    g = h["gloo"]
    if g["runs"]:
        parts.append(f"Executed on gloo: {g['correct']} of {g['runs']} runs correct"
                     + (f", {g['failed']} failed to run" if g["failed"] else "") + ".")
    s = h["smt"]
    if s["instances"]:
        parts.append(f"Exact synthesis: {s['solved']} of {s['instances']} instances solved, the slowest in "
                     f"{s['slowest']:.2f} s.")
    return " ".join(parts)


# ------------------------------------------------------------------ the md
def fmt(x: Any, spec: str = ".3f", suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec) + suffix


def fmt_us(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t / 1e3:.3f} ms" if t >= 1e3 else f"{t:.2f} us"


def schedule_cell(row: dict[str, Any]) -> str:
    """The md's schedule cell: the winner's label, or ``nccl (native)`` where NCCL runs the size."""
    return NATIVE if row.get("native") else f"`{row['winner']}`"


def markdown(doc: dict[str, Any], paths: Paths, config: Config) -> str:
    from ccl.core.units import format_size

    m = doc["meta"]
    here = os.path.dirname(paths.md) or "."
    quick = config.quick
    lines = [
        f"# Benchmark suite{' (quick run)' if quick else ''}",
        "",
        f"Regenerate with `{doc['command']}` from the repository root: it writes this file, "
        f"`{os.path.relpath(paths.json, here)}` (every number here and every candidate the tuner tried)"
        + (f" and the plots in `{os.path.relpath(paths.plots, here)}/`. " if config.plots else ". ")
        + ("The full suite is `python -m benchmarks` (writes RESULTS.md); " if quick else
           "`python -m benchmarks --quick` is a CI-sized run (writes RESULTS-quick.md); ")
        + "`python -m benchmarks --help` lists the options. Between runs of the same tree with the same "
        "options only the timing fields (seconds, memory) and the next paragraph change.",
        "",
        f"Ran on {m['platform']} ({m['processor']}, {m['cores']} cores, Python {m['python']}) on {m['date']}"
        + (f" at commit {m['commit']}" if m["commit"] else "")
        + f"; the whole run took {doc['total_s']:.0f} s.",
        "",
        "## Headline",
        "",
        headline_text(doc["headline"]),
        "",
        "## Simulated times",
        "",
        f"For each machine and collective the tuner (`ccl synthesize --solver auto`) tried every applicable "
        f"solver within a budget of {config.time_budget:g} s per case (templates always; tree packing at "
        "anchor sizes; the exact solver on machines of up to 8 ranks), simulated each schedule at every size "
        "for the MSCCL executor under each protocol, and kept the fastest per size, or NCCL itself where "
        "NCCL's pick was faster than every schedule. All times are the calibrated cost model's "
        "(docs/costmodel.md)."
        + (f" The default budget is {DEFAULT_BUDGET:g} s; this run cut it to {config.time_budget:g} s to keep "
           "its time down on a loaded machine, so candidates the budget cut are named under their machine."
           if config.time_budget < DEFAULT_BUDGET else "") + " Columns:",
        "",
        "* **schedule**: the candidate the set runs at the size (`packing@64MiB`: tree packing synthesized for "
        f"64 MiB; `smt`: the exact solver; other names are templates; `{NATIVE}`: the set leaves the size to "
        "NCCL); **proto**: the protocol it runs with; **time**: its simulated time;",
        "* **NCCL pick**: the algorithm/protocol NCCL 2.30's rules pick for the machine, collective and size, "
        "**NCCL us** its modelled time, **vs nccl**: that time over ours (above 1: ours is faster; 1.00x where "
        "the set's entry is NCCL itself); **vs nccl-ring**: NCCL's Ring alone over ours (secondary: NCCL would "
        "not run Ring where its pick is another algorithm; `-` where Ring does not apply);",
        "* **vs template**: the best template's time over ours (1.00: a template won), **best template** names "
        "it; **/ bound**: ours over the lower bound (1.00 is optimal);",
        "* **synth s**: the winning candidate's synthesis time; **tuner s**: the tuner's wall time for the whole "
        "case (all candidates, all sizes); **peak MiB**: the resident memory peak of the case's process.",
        "",
    ]
    header = ("collective", "size", "schedule", "proto", "time", "NCCL pick", "NCCL us", "vs nccl", "vs nccl-ring",
              "vs template", "best template", "/ bound", "synth s", "tuner s", "peak MiB")
    for machine in dict.fromkeys(c["machine"] for c in doc["cases"]):
        cases = [c for c in doc["cases"] if c["machine"] == machine]
        ranks = next((c["ranks"] for c in cases if c["ranks"]), None)
        lines += [f"### {machine}" + (f" ({ranks} ranks)" if ranks else ""), ""]
        if config.plots:
            links = [f"[{c['collective']}]({os.path.relpath(os.path.join(paths.plots, plot_name(machine, c['collective'])), here)})"
                     for c in cases if c["rows"]]
            if links:
                lines += ["Plots (time vs size, every candidate): " + ", ".join(links) + ".", ""]
        for c in cases:
            skipped = [k["label"] for k in c["candidates"] if (k.get("error") or "").startswith("skipped")]
            if skipped:
                lines += [f"{c['collective']}: the time budget was spent before {', '.join(skipped)} could run.", ""]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for c in cases:
            if c["error"]:
                lines.append(f"| {c['collective']} | all | failed: {c['error']} |" + " |" * (len(header) - 3))
                continue
            for r in c["rows"]:
                lines.append("| " + " | ".join([
                    c["collective"], format_size(r["size"]), schedule_cell(r), r.get("protocol") or "-",
                    fmt_us(r["time_us"]), r.get("nccl_pick") or "-", fmt_us(r.get("nccl_us")),
                    fmt(r.get("vs_nccl"), ".2f", "x"), fmt(r.get("vs_nccl_ring"), ".2f", "x"),
                    fmt(r["vs_best_template"], ".2f", "x"),
                    f"`{r['best_template']}`" if r["best_template"] else "-", fmt(r["bound_ratio"], ".3f"),
                    fmt(r["winner_synthesis_s"], ".2f"), fmt(c["tuner_s"], ".1f"), fmt(c["peak_MiB"], ".0f"),
                ]) + " |")
        lines.append("")
    if doc["gloo"]:
        lines += [
            "## Executed on gloo (CPU)",
            "",
            f"The schedule the tuner picked for the size, run as `ccl run` runs it: on local gloo processes (one per "
            f"rank, all on this {m['cores']}-core machine), checked against torch's own collective and timed "
            f"next to it (median of {GLOO_REPEAT} iterations). **These are CPU gloo timings on a shared "
            "machine with more processes than cores, not GPU numbers**: they show the schedules run and are "
            "correct, not how fast they are on the machine simulated above.",
            "",
            "| machine | collective | size | schedule | correct | ours ms | torch ms | torch / ours |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for g in doc["gloo"]:
            if g["error"]:
                lines.append(f"| {g['machine']} | {g['collective']} | {format_size(g['size'])} | - | "
                             f"failed: {g['error']} | - | - | - |")
                continue
            lines.append(f"| {g['machine']} | {g['collective']} | {format_size(g['size'])} | `{g['schedule']}` | "
                         f"{'yes' if g['correct'] else 'NO' if g['correct'] is False else '-'} | "
                         f"{fmt(None if g['ours_s'] is None else g['ours_s'] * 1e3, '.2f')} | "
                         f"{fmt(None if g['torch_s'] is None else g['torch_s'] * 1e3, '.2f')} | "
                         f"{fmt(g['torch_over_ours'], '.2f', 'x')} |")
        lines.append("")
    if doc["smt"]:
        lines += [
            "## Exact synthesis (SMT)",
            "",
            f"The exact solver (`--solver smt`, z3) on classic instances, each in a fresh process with a limit "
            f"of {config.smt_limit:g} s. Asked: the chunks and, where given, the steps and rounds (otherwise the "
            "fewest steps); found: the schedule's steps and rounds.",
            "",
            "| instance | machine | collective | chunks | asked steps / rounds | status | steps | rounds | seconds |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for s in doc["smt"]:
            asked = "fewest" if s["steps"] is None else f"{s['steps']} / {s['rounds'] if s['rounds'] else 'any'}"
            status = s["status"] + (f": {s['error']}" if s["error"] else "")
            lines.append(f"| {s['name']} | {s['machine']} | {s['collective']} | {s['chunks']} | {asked} | {status} | "
                         f"{fmt(s['steps_found'], 'd')} | {fmt(s['rounds_found'], 'd')} | {fmt(s['seconds'], '.2f')} |")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ command line
def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def main(argv: Sequence[str] | None = None) -> int:
    from ccl.core.errors import CclError
    from ccl.core.units import format_size, parse_sizes

    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0],
        epilog=f"Defaults: machines {','.join(MACHINES)}; collectives {','.join(COLLECTIVES)}; sizes "
               f"{','.join(format_size(s) for s in SIZES)}. --quick: machines {','.join(QUICK.machines)}, "
               f"collectives {','.join(QUICK.collectives)}, sizes {','.join(format_size(s) for s in QUICK.sizes)}, "
               f"budget {QUICK.time_budget:g} s, one gloo run, one SMT instance.")
    ap.add_argument("--quick", action="store_true", help="a CI-sized run (about 2 minutes); writes RESULTS-quick.md "
                    "and results/suite-quick.json, never the full results")
    ap.add_argument("--machines", help="comma-separated machine specs (default: the suite's)")
    ap.add_argument("--collectives", help="comma-separated collectives (default: the suite's)")
    ap.add_argument("--sizes", help="sizes as ccl takes them: 1KiB,64KiB,1GiB or 1KiB..1GiB")
    ap.add_argument("--time-budget", type=float, help=f"tuner seconds per case (default {DEFAULT_BUDGET:g}, "
                    f"{QUICK.time_budget:g} with --quick)")
    ap.add_argument("--smt-limit", type=float, help=f"seconds per SMT instance (default {SMT_LIMIT:g})")
    ap.add_argument("--case-timeout", type=float, help=f"stop a case after this many seconds (default {CASE_TIMEOUT:g})")
    ap.add_argument("--no-gloo", action="store_true", help="skip the runs on local gloo processes")
    ap.add_argument("--no-smt", action="store_true", help="skip the exact-synthesis timings")
    ap.add_argument("--no-plots", action="store_true", help="write no plots")
    ap.add_argument("--out", default=HERE, help="folder of RESULTS.md; the JSON and plots go in its results/ "
                    "(default: benchmarks/)")
    ap.add_argument("-v", "--verbose", action="store_true", help="also print the tuner's progress")
    args = ap.parse_args(argv)
    config = QUICK if args.quick else Config()
    try:
        changes: dict[str, Any] = {}
        if args.machines:
            changes["machines"] = _names(args.machines)
        if args.collectives:
            changes["collectives"] = _names(args.collectives)
        if args.sizes:
            changes["sizes"] = tuple(parse_sizes(args.sizes))
        for name in ("time_budget", "smt_limit", "case_timeout"):
            value = getattr(args, name)
            if value is not None:
                if not value > 0:
                    ap.error(f"--{name.replace('_', '-')} must be positive")
                changes[name] = value
    except CclError as exc:
        ap.error(exc.message)
    command = " ".join(["python -m benchmarks", *(shlex.quote(a) for a in argv)])
    config = replace(config, plots=not args.no_plots, verbose=args.verbose, command=command, **changes)
    if not config.machines or not config.collectives:
        ap.error("nothing to run: no machines or no collectives")
    doc = run_suite(config, args.out, gloo=not args.no_gloo, smt=not args.no_smt)
    failed = (doc["headline"]["failed"] or doc["headline"]["gloo"]["failed"]
              or doc["headline"]["gloo"]["correct"] < doc["headline"]["gloo"]["runs"]
              or any(s["status"] == "error" for s in doc["smt"]))
    return 1 if failed else 0


__all__ = ["Config", "GlooCase", "SmtInstance", "QUICK", "run_suite", "main", "case_rows", "headline"]
