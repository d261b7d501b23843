"""Benchmark: schedules run by the torch executor vs torch's own gloo collectives.

    python benchmarks/torch_executor.py                 # 4 ranks, 1/16/64 MiB, 10 timed iterations
    python benchmarks/torch_executor.py --repeat 10 --sizes 16MiB --ranks 4

Every schedule and size runs in one local gloo process group (4 CPU processes by default); each
iteration times our schedule and then torch's collective on the same buffers, after a barrier
each, so both see the same machine load; an iteration's time is its slowest rank's and the
table shows medians. Sizes are counted as nccl-tests does (allreduce: the buffer; allgather: the
whole output). Writes benchmarks/results/torch_executor.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import ccl  # noqa: E402
from backends.torch.harness import bus_factor  # noqa: E402
from backends.torch.launch import Job, run_jobs  # noqa: E402
from backends.torch.plain import to_plain  # noqa: E402
from ccl import compiler  # noqa: E402
from ccl.core.serialize import write_text_atomic  # noqa: E402
from ccl.core.units import format_size, parse_size  # noqa: E402

# (solver, chunk factor, fuse): fuse=False keeps the pieces of a chunked schedule separate
# messages, so the reduction of one overlaps the transfer of the next.
SCHEDULES = {
    "allreduce": [("ring", 1, True), ("ring", 4, False), ("recursive-halving", 1, True),
                  ("double-binary-tree", 2, True)],
    "allgather": [("ring", 1, True), ("recursive-doubling", 1, True), ("direct", 1, True)],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--sizes", default="1MiB,16MiB,64MiB")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--collectives", default="allreduce,allgather")
    parser.add_argument("--topology", default=None,
                        help="topology the schedules are built for (default fully-connected:RANKS: local "
                             "processes all reach each other over loopback TCP)")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "torch_executor"))
    args = parser.parse_args(argv)
    n = args.ranks
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows, jobs = [], []
    for kind in args.collectives.split(","):
        for solver, chunks, fuse in SCHEDULES[kind]:
            result = ccl.synthesize(ccl.problem(args.topology or f"fully-connected:{n}", kind, solver=solver,
                                                chunks=chunks))
            spec = to_plain(compiler.program(result, fuse=fuse))  # lowered and verified by the driver
            parts = max(max(spec["input_slots"]), max(spec["output_slots"])) // spec["chunk_factor"]
            for size in sizes:
                unit = max(1, size // (4 * parts))
                name = f"{solver} k={chunks}" + ("" if fuse else " unfused")
                rows.append({"collective": kind, "schedule": name, "size_bytes": unit * parts * 4,
                             "steps": spec["steps"], "messages": sum(1 for ops in spec["ops"] for op in ops
                                                                    if op[0] == "send")})
                jobs.append(Job(spec, unit, "float32", "sum", False, args.repeat, args.warmup, check=True,
                                label=f"{kind} {solver} {format_size(size)}"))
    print(f"{len(jobs)} runs on {n} local gloo ranks ({platform.node()}, {os.cpu_count()} CPUs)...", file=sys.stderr)
    start = time.perf_counter()
    results = run_jobs(n, jobs, timeout=600)
    elapsed = time.perf_counter() - start
    for row, res in zip(rows, results):
        ours, native = statistics.median(res.ours), statistics.median(res.native)
        per_iteration = statistics.median(a / b for a, b in zip(res.ours, res.native))
        row.update(correct=res.correct, ours_ms=ours * 1e3, native_ms=native * 1e3, ratio=per_iteration,
                   ratio_of_medians=ours / native, ratio_of_best=min(res.ours) / min(res.native),
                   busbw_GBps=row["size_bytes"] / ours / 1e9 * bus_factor(row["collective"], n),
                   native_busbw_GBps=row["size_bytes"] / native / 1e9 * bus_factor(row["collective"], n),
                   ours_iterations_ms=[t * 1e3 for t in res.ours], native_iterations_ms=[t * 1e3 for t in res.native])
    header = ("| collective | schedule | size | ours (ms) | gloo (ms) | ours/gloo | best/best | busbw ours (GB/s) | "
              "busbw gloo (GB/s) | correct |\n|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    lines = [header]
    for row in rows:
        lines.append(f"| {row['collective']} | {row['schedule']} | {format_size(row['size_bytes'])} | "
                     f"{row['ours_ms']:.2f} | {row['native_ms']:.2f} | {row['ratio']:.2f} | {row['ratio_of_best']:.2f} | "
                     f"{row['busbw_GBps']:.3f} | "
                     f"{row['native_busbw_GBps']:.3f} | {'yes' if row['correct'] else 'NO'} |")
    best = []
    for kind in args.collectives.split(","):
        for size in sizes:
            cands = [r for r in rows if r["collective"] == kind and abs(r["size_bytes"] - size) <= 4 * n * 8]
            if cands:
                top = min(cands, key=lambda r: r["ratio"])
                best.append(f"- {kind} {format_size(size)}: best {top['schedule']} at {top['ratio']:.2f}x gloo's time")
    note = (f"Schedules for {args.topology or f'fully-connected:{n}'}; {n} CPU processes on {os.cpu_count()} cores (shared with other work while measured); medians of "
            f"{args.repeat} iterations after {args.warmup} warm-up, ours and gloo's alternating; ours/gloo is the "
            f"median of the per-iteration ratios (each pair measured back to back), best/best the ratio of the "
            f"fastest iterations; float32 sum, out of place; torch threads 1 per rank. Total wall time "
            f"{elapsed:.0f} s.")
    text = "\n".join(["# Torch executor vs torch.distributed (gloo)", "", note, "", *lines, "", *best, ""])
    print(text)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    write_text_atomic(args.output + ".md", text)
    meta = {"ranks": n, "repeat": args.repeat, "warmup": args.warmup, "cpus": os.cpu_count(),
            "python": platform.python_version(), "note": note}
    write_text_atomic(args.output + ".json", json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
