"""Benchmark: large messages on multi-node machines, tree packing against the bound, the best
template and NCCL's pick (NCCL's ring beside it), all in one run.

    PYTHONPATH=. python benchmarks/scale.py [--cases dgx-h100:2/allreduce,ndv2:2/allgather]
        [--sizes 64KiB,64MiB,1GiB] [--solvers packing] [--scale-cases M/C/SIZE/SOLVER,...] [--quick]

For every (machine, collective, size): the synthesis wall time and the case's peak memory (the
resident set of a fresh process running the case) of each named solver (``ccl.compiler.compare``: templates are synthesized too and serve as the baseline),
the simulated time of its schedule (lowered to the Program the runtimes run, as the driver
times it), its ratio to the lower bound, to the best template and to NCCL's pick (the
algorithm and protocol NCCL 2.30's rules choose, priced by the calibrated cost model; named per
row), with NCCL's ring as secondary information. Every schedule is verified before it is timed (the driver's synthesize verifies).
Then the cases at scale (``--scale-cases``: 128 GPUs, the 16x16 and 8x8x8 tori, 1,024 GPUs), each
synthesized, verified and simulated with the three timed apart. Prints the tables and writes
``benchmarks/results/scale.json`` and ``scale.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import topologies  # noqa: E402
from ccl.compiler import compare  # noqa: E402
from ccl.core.units import format_size, parse_size  # noqa: E402

MACHINES = ("ndv2:2", "dgx2:2", "dgx-a100:4", "dgx-h100:2", "dgx-h100:16")
DEFAULT_CASES = tuple(f"{m}/{k}" for m in MACHINES for k in ("allgather", "reducescatter", "allreduce")) + tuple(
    f"{m}/{k}" for m in ("dgx1", "amd8", "torus:4x4", "dgx2:2", "dgx-h100:2") for k in ("broadcast", "reduce")) + tuple(
    f"{m}/{k}" for m in ("dgx2:2", "dgx-h100:2") for k in ("gather", "scatter"))
QUICK_CASES = ("ndv2:2/allreduce", "dgx-h100:2/allgather", "dgx1/broadcast")
# synthesis at scale: (machine/collective/size/solver); synthesize, verify and simulate timed apart
SCALE_CASES = ("dgx-h100:16/allreduce/64MiB/packing", "torus:16x16/allgather/1GiB/packing",
               "torus:8x8x8/allgather/1GiB/packing", "dgx-h100:128/allgather/1GiB/packing",
               "dgx-h100:128/allreduce/1GiB/hierarchical", "dgx-h100:16/broadcast/256MiB/packing",
               "dgx-h100:128/broadcast/1GiB/packing")


def run_case(spec: str, kind: str, sizes: list[int], names: list[str]) -> list[dict]:
    """One case in a fresh process (its peak resident memory is the case's)."""
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(_run_case, (spec, kind, sizes, names))


def _run_case(spec: str, kind: str, sizes: list[int], names: list[str]) -> list[dict]:
    topo = topologies.build(spec)
    start = time.perf_counter()
    comparisons = compare(topo, kind, sizes, root=0 if kind in ("broadcast", "reduce") else None,
                          solvers=names, progress=lambda m: print(f"  {spec} {kind}: {m}", file=sys.stderr))
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
    out = []
    for size, comparison in zip(sizes, comparisons):
        out.extend(_rows(spec, topo, kind, size, names, comparison, wall, peak))
    return out


def _rows(spec, topo, kind, size, names, comparison, wall, peak) -> list[dict]:
    rows = {r.name: r for r in comparison.rows}
    bound = rows["lower bound"].time_us
    templates = [r for r in comparison.rows if r.source == "schedule" and r.name not in names and r.time_us]
    best = min(templates, key=lambda r: r.time_us) if templates else None
    pick, ring = nccl_rows(comparison.rows)
    out = []
    for name in names:
        r = rows.get(name)
        t = r.time_us if r is not None else None
        out.append({
            "machine": spec, "ranks": topo.n_ranks, "collective": kind, "size": size, "solver": name,
            "time_us": t, "error": None if r is None else r.error,
            "synthesis_s": None if r is None or r.synthesis_seconds is None else round(r.synthesis_seconds, 3),
            "case_wall_s": round(wall, 3), "peak_MiB": round(peak / 2**20, 1),
            "bound_us": bound, "vs_bound": t / bound if t else None,
            "best_template": best.name if best else None,
            "vs_best_template": t / best.time_us if t and best else None,
            "nccl_pick": pick_name(pick), "nccl_us": pick.time_us if pick else None,
            "nccl_speedup": pick.time_us / t if t and pick and pick.time_us else None,
            "nccl_ring_speedup": ring.time_us / t if t and ring and ring.time_us else None,
        })
    return out


def run_scale_case(case: str) -> dict:
    """One synthesis at scale in a fresh process: its wall time and peak memory, then the
    verification and the simulation (lowering included) timed apart."""
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(_run_scale_case, (case,))


def _run_scale_case(case: str) -> dict:
    import ccl
    from ccl import compiler

    spec, kind, size_text, solver = case.split("/")
    size = int(parse_size(size_text))
    topo = topologies.build(spec)
    t0 = time.perf_counter()
    result = compiler.synthesize(compiler.problem_from_options(topo, kind, solver=solver, size=size))
    synth = time.perf_counter() - t0
    peak_synth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    ccl.verify(result.algorithm)
    verify_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = compiler.simulate(result.algorithm, size)  # lowered again: the time counts the lowering
    sim_s = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    pick, ring = nccl_rows(report.baselines or ())
    return {"machine": spec, "ranks": topo.n_ranks, "collective": kind, "size": size, "solver": solver,
            "transfers": len(result.algorithm.transfers), "synthesis_s": round(synth, 2),
            "synthesis_peak_MiB": round(peak_synth / 2**20), "verify_s": round(verify_s, 2),
            "simulate_s": round(sim_s, 2), "peak_MiB": round(peak / 2**20), "time_us": report.time_us,
            "vs_bound": report.bound_ratio, "nccl_pick": pick_name(pick),
            "nccl_speedup": pick.time_us / report.time_us if pick else None,
            "nccl_ring_speedup": ring.time_us / report.time_us if ring else None}


def pick_name(row) -> str | None:
    """"NVLS/Simple": the algorithm and protocol of NCCL's pick, from its baseline's detail."""
    return row.detail.split(" (")[0].removeprefix("NCCL ") if row is not None else None


def nccl_rows(rows):
    """(NCCL's pick, NCCL's ring) among a comparison's rows or a report's baselines: the ring
    is the pick itself where the pick is Ring (the runners-up list other algorithms only)."""
    pick = next((r for r in rows if r.name == "nccl"), None)
    ring = next((r for r in rows if r.name == "nccl-ring"), None)
    if ring is None and pick is not None and (pick_name(pick) or "").startswith("Ring/"):
        ring = pick
    return pick, ring


def fmt(x, spec=".3f"):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES))
    ap.add_argument("--sizes", default="64KiB,64MiB,1GiB")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_CASES)} (a CI-sized run)")
    ap.add_argument("--solvers", default="packing")
    ap.add_argument("--scale-cases", default=",".join(SCALE_CASES),
                    help="machine/collective/size/solver synthesized, verified and simulated at scale "
                         "(an empty string skips them)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "scale"))
    args = ap.parse_args()
    names = [x for x in args.solvers.split(",") if x]
    rows: list[dict] = []
    sizes = [int(parse_size(x)) for x in args.sizes.split(",") if x]
    for case in QUICK_CASES if args.quick else [c for c in args.cases.split(",") if c]:
        spec, kind = case.split("/")
        print(f"{spec} {kind} ...", file=sys.stderr, flush=True)
        rows.extend(run_case(spec, kind, sizes, names))
    header = ("machine", "ranks", "collective", "size", "solver", "time", "/bound", "/best tmpl",
              "NCCL pick", "vs nccl", "vs nccl-ring", "synth s", "peak MiB")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join([
            r["machine"], str(r["ranks"]), r["collective"], format_size(r["size"]), r["solver"],
            fmt(r["time_us"], ".1f") + " us" if r["time_us"] else (r["error"] or "-"),
            fmt(r["vs_bound"]), fmt(r["vs_best_template"]), r["nccl_pick"] or "-", fmt(r["nccl_speedup"], ".2f") + "x",
            fmt(r["nccl_ring_speedup"], ".2f") + "x", fmt(r["synthesis_s"], ".1f"), fmt(r["peak_MiB"], ".0f"),
        ]) + " |")
    table = "\n".join(lines)
    print(table)
    scale_rows = []
    for case in [] if args.quick else [c for c in args.scale_cases.split(",") if c]:
        print(f"{case} ...", file=sys.stderr, flush=True)
        scale_rows.append(run_scale_case(case))
    scale_header = ("machine", "ranks", "collective", "size", "solver", "transfers", "synth s", "synth peak MiB",
                    "verify s", "simulate s", "peak MiB", "time", "/bound", "NCCL pick", "vs nccl", "vs nccl-ring")
    scale_lines = ["| " + " | ".join(scale_header) + " |", "|" + "---|" * len(scale_header)]
    for r in scale_rows:
        scale_lines.append("| " + " | ".join([
            r["machine"], str(r["ranks"]), r["collective"], format_size(r["size"]), r["solver"], str(r["transfers"]),
            fmt(r["synthesis_s"], ".1f"), str(r["synthesis_peak_MiB"]), fmt(r["verify_s"], ".1f"),
            fmt(r["simulate_s"], ".1f"), str(r["peak_MiB"]), fmt(r["time_us"], ".1f") + " us", fmt(r["vs_bound"]),
            r["nccl_pick"] or "-", fmt(r["nccl_speedup"], ".2f") + "x", fmt(r["nccl_ring_speedup"], ".2f") + "x"]) + " |")
    scale_table = "\n".join(scale_lines) if scale_rows else ""
    if scale_table:
        print(scale_table)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cores": os.cpu_count()}
    with open(args.out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows, "scale": scale_rows}, f, indent=1, sort_keys=True)
    with open(args.out + ".md", "w") as f:
        f.write("# Tree packing at scale (`python benchmarks/scale.py`)\n\n"
                "Times are simulated under the calibrated cost model (docs/costmodel.md), ours for the MSCCL "
                "executor. NCCL pick: the algorithm/protocol NCCL 2.30's rules choose for the row; vs nccl: its "
                "modelled time over ours (>1: ours is faster); vs nccl-ring: NCCL's Ring alone over ours "
                "(secondary: NCCL would not run Ring where it picks another algorithm); "
                "/bound and /best tmpl: time ratios (lower is better).\n\n" + table + "\n")
        if scale_table:
            f.write("\n## Synthesis, verification and simulation at scale\n\n"
                    "Each case in a fresh process: the synthesis (wall seconds, peak resident memory), then "
                    "`ccl.verify` and the driver's simulation (lowering included) timed apart; peak MiB is "
                    "the whole case's.\n\n" + scale_table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
