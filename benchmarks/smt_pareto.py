"""Benchmark: the exact Pareto search of DGX-1 allgather (chunks up to 6) with z3.

Prints every z3 check (instance, answer, seconds, conflicts) and the total, over several runs,
and writes benchmarks/results/smt_pareto.json and .md. Options:

    python benchmarks/smt_pareto.py                   # 3 runs of the default search
    python benchmarks/smt_pareto.py --ablations       # + the same search without each speed-up
    python benchmarks/smt_pareto.py --sccl ~/msccl-tools   # + SCCL's own search, same process

Satisfiable instances are heavy-tailed in z3's random seed, so ``--seeds K`` runs every variant
with K different base seeds (0, 1000, 2000, ...) and reports the median and the worst: one run
of each variant would compare luck, not encodings. Repeated runs with the same seed (``--repeat``)
measure the machine's noise instead (the z3 conflict counts are then identical).

``--sccl DIR`` runs ``solve_all_latency_bandwidth_tradeoffs`` of an msccl-tools checkout (the
SCCL code, MIT licensed) in this process, side by side, so the ratio is measured on one machine
at one time. The machine load average is recorded: on a shared machine absolute seconds move,
ratios measured in one run are what to compare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import z3  # noqa: E402

import topologies  # noqa: E402
from ccl.core.collective import builtin  # noqa: E402
from ccl.core.verify import verify  # noqa: E402
from solvers.smt import base, pareto  # noqa: E402
from solvers.smt.routing import RoutingEncoding  # noqa: E402


@contextlib.contextmanager
def variant(name: str):
    """Temporarily switch one speed-up off (for the ablation rows)."""
    workers = base.WORKERS
    defaults = dict(RoutingEncoding.__init__.__kwdefaults__)
    try:
        if name == "no implied constraints":
            RoutingEncoding.__init__.__kwdefaults__["implied"] = False
        elif name == "one solver (no seeded portfolio)":
            base.WORKERS = 1
        yield
    finally:
        base.WORKERS = workers
        RoutingEncoding.__init__.__kwdefaults__.update(defaults)


LIMIT = 300.0  # seconds per search; a variant that needs more is reported as ">= LIMIT"


def run_ours(max_chunks: int, seed: int = 0, **options) -> dict:
    base.BASE_SEED = seed
    start = time.perf_counter()
    frontier = pareto(topologies.dgx1(), builtin("allgather", 8), max_chunks, progress=lambda _: None,
                      time_limit=LIMIT, **options)
    total = time.perf_counter() - start
    for p in frontier.points:
        verify(p.algorithm)
    return {
        "total_seconds": total,
        "solve_seconds": sum(c.seconds for c in frontier.checks),
        "build_seconds": sum(c.build_seconds for c in frontier.checks),
        "conflicts": sum(c.conflicts for c in frontier.checks),
        "checks": [c.to_json() for c in frontier.checks],
        "frontier": [[p.steps, p.rounds, p.chunks] for p in frontier.points],
        "reached_bound": frontier.reached_bound,
        "complete": frontier.complete,
        "seed": seed,
    }


def run_sccl(directory: str, max_chunks: int) -> dict:
    """SCCL's Pareto search from an msccl-tools checkout, without its optional extras."""
    pkg = types.ModuleType("msccl")
    pkg.__path__ = [str(Path(directory).expanduser() / "msccl")]
    sys.modules["msccl"] = pkg
    from msccl.collectives import allgather  # type: ignore[import-not-found]
    from msccl.strategies import prune_pareto_optimal, solve_all_latency_bandwidth_tradeoffs  # type: ignore
    from msccl.topologies import dgx1  # type: ignore[import-not-found]

    start = time.perf_counter()
    found = list(solve_all_latency_bandwidth_tradeoffs(dgx1(), allgather(8), max_chunks=max_chunks))
    total = time.perf_counter() - start
    points = sorted((len(a.steps), len(a.steps) + a.extra_rounds(), a.instance.chunks)
                    for a in prune_pareto_optimal(found))
    return {"total_seconds": total, "frontier": [list(p) for p in points]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-chunks", type=int, default=6)
    ap.add_argument("--ablations", action="store_true", help="also run without each speed-up")
    ap.add_argument("--seeds", type=int, default=1, help="base seeds per variant (median and worst reported)")
    ap.add_argument("--sccl", help="path to an msccl-tools checkout: run SCCL's search side by side")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--limit", type=float, default=LIMIT, help="seconds per search (default 300)")
    args = ap.parse_args()
    globals()["LIMIT"] = args.limit

    load_before = os.getloadavg()
    runs = [run_ours(args.max_chunks) for _ in range(args.repeat)]
    totals = [r["total_seconds"] for r in runs]
    first = runs[0]
    print(f"DGX-1 allgather, exact Pareto search, chunks 1..{args.max_chunks} (z3 {z3.get_version_string()}, "
          f"load average {load_before[0]:.1f} on {os.cpu_count()} cores)")
    print(f"frontier (steps, rounds, chunks): {first['frontier']}; bandwidth bound reached: {first['reached_bound']}")
    print(f"\n{'steps':>5} {'rounds':>6} {'chunks':>6} {'answer':>7} {'build s':>8} {'solve s':>8} {'conflicts':>9}")
    for c in first["checks"]:
        rounds = "any" if c["rounds"] is None else c["rounds"]
        print(f"{c['steps']:>5} {rounds:>6} {c['chunks']:>6} {c['status']:>7} {c['build_seconds']:>8.3f} "
              f"{c['seconds']:>8.3f} {c['conflicts']:>9}")
    print(f"\nruns: {', '.join(f'{t:.2f} s' for t in totals)}; median {statistics.median(totals):.2f} s, "
          f"min {min(totals):.2f} s, max {max(totals):.2f} s; z3 conflicts per run "
          f"{', '.join(str(r['conflicts']) for r in runs)}")

    seeds = [1000 * i for i in range(args.seeds)]
    variants = [("ours (default)", {})]
    if args.ablations:
        variants += [("no symmetry breaking", {"symmetry": False}), ("no implied constraints", {}),
                     ("one solver (no seeded portfolio)", {})]
    rows = []
    sampled = {}
    for name, options in variants:
        with variant(name):
            rs = runs if (name.startswith("ours") and seeds == [0]) else [run_ours(args.max_chunks, s, **options)
                                                                          for s in seeds]
        sampled[name] = rs
        secs = [r["total_seconds"] for r in rs]
        rows.append((name, statistics.median(secs), max(secs), int(statistics.median(r["conflicts"] for r in rs)),
                     rs[0]["frontier"]))
    base.BASE_SEED = 0
    sccl = None
    if args.sccl:
        sccl = run_sccl(args.sccl, args.max_chunks)
        rows.append(("SCCL solve_all_latency_bandwidth_tradeoffs", sccl["total_seconds"], sccl["total_seconds"],
                     None, sccl["frontier"]))
    load_after = os.getloadavg()
    base_s = rows[0][1]
    print(f"\nover {len(seeds)} base seed(s):")
    print(f"{'variant':<44} {'median s':>8} {'worst s':>8} {'x ours':>7} {'conflicts':>10}  frontier")
    for name, secs, worst, conflicts, front in rows:
        print(f"{name:<44} {secs:>8.2f} {worst:>8.2f} {secs / base_s:>7.2f} {'' if conflicts is None else conflicts:>10}"
              f"  {front}")
    print(f"(a search stopped at the {LIMIT:.0f} s limit counts as {LIMIT:.0f} s: a lower bound on its time)")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "smt_pareto", "topology": "dgx1", "collective": "allgather", "max_chunks": args.max_chunks,
        "z3": z3.get_version_string(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_average_before": load_before, "load_average_after": load_after,
        "runs": runs, "median_total_seconds": statistics.median(totals), "seeds": seeds, "variants": sampled,
        "sccl": sccl,
    }
    (out / "smt_pareto.json").write_text(json.dumps(result, indent=2) + "\n")
    md = [f"# DGX-1 allgather: exact Pareto search, chunks 1..{args.max_chunks}", "",
          f"z3 {z3.get_version_string()}, {os.cpu_count()} cores shared with other work (load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after). Frontier (steps, rounds, chunks): "
          f"{first['frontier']}.", "",
          "| steps | rounds | chunks | answer | build s | solve s | conflicts |", "|---|---|---|---|---|---|---|"]
    for c in first["checks"]:
        md.append(f"| {c['steps']} | {'any' if c['rounds'] is None else c['rounds']} | {c['chunks']} | {c['status']} | "
                  f"{c['build_seconds']:.3f} | {c['seconds']:.3f} | {c['conflicts']} |")
    md += ["", f"Total per run: {', '.join(f'{t:.2f} s' for t in totals)} (median {statistics.median(totals):.2f} s).",
           ""]
    md += [f"Variants over {len(seeds)} base seed(s) (median and worst total seconds; median z3 conflicts):", "",
           "| variant | median s | worst s | x ours | conflicts | frontier |", "|---|---|---|---|---|---|"]
    for name, secs, worst, conflicts, front in rows:
        md.append(f"| {name} | {secs:.2f} | {worst:.2f} | {secs / base_s:.2f} | {'' if conflicts is None else conflicts} | "
                  f"{front} |")
    (out / "smt_pareto.md").write_text("\n".join(md) + "\n")
    print(f"\nwrote {out / 'smt_pareto.json'} and {out / 'smt_pareto.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
