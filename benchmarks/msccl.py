"""Benchmark: what exporting to MSCCL XML costs a schedule, and how published XML compares.

    python benchmarks/msccl.py                  # every case below, both targets
    python benchmarks/msccl.py --quick          # three cases

For each schedule: the Program simulated as it is, then exported for the target (``msccl``: the
executor, fused receive-reduce steps; ``rccl``: plain steps only, 64 threadblocks), the file read
back by the importer (threadblocks in order, eager connections) and that Program simulated on the
same machine at the same size; the table gives both times, their ratio (what the threadblock
layout costs, as far as the simulator can tell), the bound, NCCL's pick (the algorithm and protocol
NCCL 2.30's rules choose, named; NCCL's ring beside it), the export time and
the file's shape (channels, threadblocks, longest threadblock, nops, fused steps). Then the
published RCCL files shipped with the tests (tests/data/msccl-xml) timed on amd8 at
their own largest size against the bound and NCCL's pick. Every time is the calibrated cost
model's (docs/costmodel.md). Writes benchmarks/results/msccl.json
and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from backends.msccl import interpret, model  # noqa: E402
from ccl import compiler  # noqa: E402
from ccl.compiler.loader import read_xml  # noqa: E402
from ccl.compiler.msccl import export_xml  # noqa: E402
from ccl.core.errors import BackendError  # noqa: E402
from ccl.core.serialize import write_text_atomic  # noqa: E402
from ccl.core.units import format_size, parse_size  # noqa: E402

CASES = [  # topology, collective, solver, size
    ("dgx1", "allreduce", "ring", "64MiB"),
    ("dgx1", "allgather", "packing", "64MiB"),
    ("dgx1", "broadcast", "packing", "64MiB"),
    ("amd8", "allreduce", "packing", "64MiB"),
    ("amd8", "alltoall", "direct", "16MiB"),
    ("ndv2:2", "allreduce", "packing", "256MiB"),
    ("dgx2:2", "allgather", "packing", "64MiB"),
    ("dgx-h100:2", "allreduce", "hierarchical-pipelined", "256MiB"),
    ("dgx-h100:2", "allreduce", "packing", "256MiB"),
    ("dgx-h100:2", "reducescatter", "packing", "64MiB"),
]
QUICK = [CASES[0], CASES[3], CASES[7]]


def _nccl(report) -> tuple[str | None, float | None, float | None]:
    """(NCCL's pick as "algorithm/protocol", its time, NCCL's ring time) from a report's
    baselines; the ring is the pick itself where the pick is Ring."""
    by_name = {b.name: b for b in report.baselines or ()}
    pick = by_name.get("nccl")
    name = pick.detail.split(" (")[0].removeprefix("NCCL ") if pick else None
    ring = by_name.get("nccl-ring")
    ring_us = ring.time_us if ring else pick.time_us if pick and name and name.startswith("Ring/") else None
    return name, pick.time_us if pick else None, ring_us


def _over(a: float | None, b: float) -> float | None:
    return None if a is None else round(a / b, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "msccl"))
    parser.add_argument("--published", default=str(Path(HERE).parent / "tests" / "data" / "msccl-xml"),
                        help="folder of published XML files to time (default: tests/data/msccl-xml)")
    args = parser.parse_args(argv)
    rows = []
    for topo, kind, solver, size_text in QUICK if args.quick else CASES:
        size = parse_size(size_text)
        extra = {"size": size} if solver == "packing" else {}
        result = compiler.synthesize(compiler.problem_from_options(topo, kind, solver=solver, **extra))
        program = compiler.program(result)
        base = compiler.simulate(program, size)
        for target in ("msccl", "rccl"):
            start = time.perf_counter()
            try:
                text, summary = export_xml(program, target=target)
            except BackendError as exc:
                rows.append({"machine": topo, "collective": kind, "solver": solver, "size": size_text,
                             "target": target, "program_us": round(base.time_us, 2), "error": exc.message})
                print(f"{topo:<11} {kind:<13} {solver:<22} {size_text:>6} {target:<5} {exc.message}", flush=True)
                continue
            seconds = time.perf_counter() - start
            again = interpret.read_program(model.parse(text), program.topology)
            timed = compiler.simulate(again.program, size)
            pick, nccl_us, ring = _nccl(timed)
            row = {"machine": topo, "collective": kind, "solver": solver, "size": size_text, "target": target,
                   "program_us": round(base.time_us, 2), "xml_us": round(timed.time_us, 2),
                   "xml_over_program": round(timed.time_us / base.time_us, 3),
                   "xml_over_bound": round(timed.time_us / timed.bound_us, 3),
                   "nccl_pick": pick, "nccl_over_xml": _over(nccl_us, timed.time_us),
                   "nccl_ring_over_xml": _over(ring, timed.time_us),
                   "export_s": round(seconds, 2), "bytes": len(text.encode()),
                   **{k: summary[k] for k in ("nchannels", "threadblocks", "max_steps", "nops", "fused")}}
            rows.append(row)
            print(f"{topo:<11} {kind:<13} {solver:<22} {size_text:>6} {target:<5} program {base.time_us:>9.1f} us "
                  f"xml {timed.time_us:>9.1f} us  x{row['xml_over_program']:.3f}  /bound {row['xml_over_bound']:.3f}  "
                  f"nccl({pick})/xml {row['nccl_over_xml']}  {seconds:.1f}s  ch {summary['nchannels']} "
                  f"tb {summary['threadblocks']} steps {summary['max_steps']}", flush=True)
    published = []
    folder = Path(args.published)
    if not folder.is_dir():
        print(f"no published files: {folder} is not a folder (--published DIR)", flush=True)
    for path in sorted(folder.glob("*.xml")):
        imported = read_xml(path, "amd8")
        algo = imported.algo
        size = algo.max_bytes or (64 << 20)
        report = compiler.simulate(imported.program, size)
        pick, nccl_us, ring = _nccl(report)
        published.append({"file": path.name, "coll": algo.coll, "size": format_size(size),
                          "xml_us": round(report.time_us, 2), "xml_over_bound": round(report.time_us / report.bound_us, 3),
                          "nccl_pick": pick, "nccl_over_xml": _over(nccl_us, report.time_us),
                          "nccl_ring_over_xml": _over(ring, report.time_us)})
        print(f"{path.name:<45} {algo.coll:<10} {format_size(size):>8} {report.time_us:>9.2f} us "
              f"/bound {published[-1]['xml_over_bound']:.3f} nccl({pick})/xml {published[-1]['nccl_over_xml']}", flush=True)
    write_text_atomic(args.output + ".json", json.dumps({"exported": rows, "published": published}, indent=1) + "\n")
    lines = ["# MSCCL XML export (`python benchmarks/msccl.py`)", "",
             "program / xml: simulated time of the Program and of the exported file read back (threadblocks in "
             "order); xml/program is what the threadblock layout costs; NCCL pick: the algorithm/protocol NCCL "
             "2.30's rules choose; nccl/xml > 1: the file is faster than NCCL's pick; ring/xml: NCCL's Ring alone "
             "(secondary). All times are the calibrated cost model's (docs/costmodel.md).", "",
             "| machine | collective | solver | size | target | program | xml | xml/program | xml/bound | NCCL pick "
             "| nccl/xml | ring/xml | export s | channels | tbs | max steps | nops | fused |", "|" + "---|" * 18]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['machine']} | {r['collective']} | {r['solver']} | {r['size']} | {r['target']} | "
                         f"{r['program_us']} us | does not fit: {r['error']} |" + " |" * 11)
            continue
        lines.append(f"| {r['machine']} | {r['collective']} | {r['solver']} | {r['size']} | {r['target']} | "
                     f"{r['program_us']} us | {r['xml_us']} us | {r['xml_over_program']} | {r['xml_over_bound']} | "
                     f"{r['nccl_pick'] or '-'} | {r['nccl_over_xml']} | {r['nccl_ring_over_xml']} | {r['export_s']} | {r['nchannels']} | {r['threadblocks']} | "
                     f"{r['max_steps']} | {r['nops']} | {r['fused']} |")
    if published:
        lines += ["", "Published RCCL files on amd8 at their largest size (maxBytes; 64 MiB when unlimited):", "",
                  "| file | coll | size | time | /bound | NCCL pick | nccl/xml | ring/xml |", "|" + "---|" * 8]
        for p in published:
            lines.append(f"| {p['file']} | {p['coll']} | {p['size']} | {p['xml_us']} us | {p['xml_over_bound']} | "
                         f"{p['nccl_pick'] or '-'} | {p['nccl_over_xml']} | {p['nccl_ring_over_xml']} |")
    write_text_atomic(args.output + ".md", "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
