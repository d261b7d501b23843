"""How long parsing and lowering descriptions takes, from 1,024 to 10,000 GPUs.

For each description: the time to parse the file (text -> syntax tree), the time to load and
lower it (parse, imports, evaluation, IR construction), and, where the library has a Python
builder for the same topology, that builder's time measured side by side, and the ratio.
Each figure is the best of REPEAT runs in this process (fresh loader each run).

    python benchmarks/dsl_lowering.py            # table on stdout
    python benchmarks/dsl_lowering.py --json     # also writes benchmarks/results/dsl_lowering.json

Results go to benchmarks/results/dsl_lowering.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dsl  # noqa: E402
import topologies as T  # noqa: E402

REPEAT = 3
CASES = [
    # (label, file, topology, args, python builder or None)
    ("DGX H100 x 128, rail fabric (library)", "topologies/machines.ccl", "dgx_h100", (128,), lambda: T.dgx_h100(128)),
    ("DGX H100 x 1250, rail fabric (library)", "topologies/machines.ccl", "dgx_h100", (1250,), lambda: T.dgx_h100(1250)),
    ("DGX A100 x 1250, leaf-spine (library)", "topologies/machines.ccl", "dgx_a100", (1250,),
     lambda: T.dgx_a100(1250, fabric="leafspine")),
    ("32 x 32 torus (library)", "topologies/basic.ccl", "torus", ((32, 32),), lambda: T.torus((32, 32))),
    ("100 x 100 torus (library)", "topologies/basic.ccl", "torus", ((100, 100),), lambda: T.torus((100, 100))),
    ("H100 x 128, hand-written fat tree", "dsl/examples/cluster.ccl", "h100_cluster", (128,), None),
    ("H100 x 1250, hand-written fat tree", "dsl/examples/cluster.ccl", "h100_cluster", (1250,), None),
]
KWARGS = {"DGX A100 x 1250, leaf-spine (library)": {"fabric": "leafspine"}}


def best(fn, repeat: int = REPEAT) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args()
    os.chdir(ROOT)
    dsl.parse("let warm = 1\n")  # build (or load) the parser tables once, outside the timings
    rows = []
    for label, file, name, targs, builder in CASES:
        text = Path(file).read_text()
        kwargs = KWARGS.get(label, {})
        parse_s, _ = best(lambda text=text, file=file: dsl.parse(text, file))

        def lower(file=file, name=name, targs=targs, kwargs=kwargs):
            return dsl.load(file).topology(name, *targs, **kwargs)

        lower_s, topo = best(lower)
        row = {"description": label, "file": file, "gpus": topo.n_ranks, "vertices": topo.n_vertices,
               "links": len(topo.links), "parse_ms": round(parse_s * 1e3, 2), "parse_and_lower_s": round(lower_s, 3)}
        if builder is not None:
            python_s, ref = best(builder)
            assert ref == topo, f"{label}: the description does not lower to the Python builder's topology"
            row["python_builder_s"] = round(python_s, 3)
            row["ratio_to_python"] = round(lower_s / python_s, 2)
        rows.append(row)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "repeat": REPEAT, "note": "best of REPEAT runs; the machine may be shared: compare ratios"}
    out = {"benchmark": "dsl_lowering", "meta": meta, "rows": rows}
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / "dsl_lowering.json").write_text(json.dumps(out, indent=2) + "\n")
    head = "| description | GPUs | links | parse ms | parse+lower s | Python builder s | ratio |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['description']} | {r['gpus']} | {r['links']} | {r['parse_ms']} | "
                     f"{r['parse_and_lower_s']} | {r.get('python_builder_s', '-')} | {r.get('ratio_to_python', '-')} |")
    table = "\n".join(lines)
    (results / "dsl_lowering.md").write_text(
        "# Parsing and lowering descriptions\n\n`python benchmarks/dsl_lowering.py`; best of "
        f"{REPEAT} runs, Python {meta['python']}, {meta['cpus']} CPUs (shared machine: compare the ratios).\n\n"
        + table + "\n")
    print(json.dumps(out, indent=2) if args.json else table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
