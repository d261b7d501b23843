"""``ccl simulate``: verify a schedule, simulate it, print its report; trace and plot on request."""

from __future__ import annotations

import argparse
from typing import Any

from backends.cost.nccl import baselines
from backends.sim.plots import plot_sizes

from .. import compiler
from ..compiler.compare import sweep
from ..compiler.loader import load_any
from ..compiler.msccl import recorded_protocol
from ..core.algorithm import Algorithm
from ..core.display import shown
from ..core.errors import InputError
from ..core.files import batch
from ..core.report import SIZE_MEANING
from ..core.schedule_set import ScheduleSet
from ..core.units import format_size, parse_bandwidth
from ..core.verify import verify
from ..core.verify_program import verify_program
from .bounds import SIZE_COLUMNS, SIZE_HELP, fixed, nccl_columns, size_cells, sizes_arg, table
from .common import command, emit, parsed, positive_int
from .outputs import declare
from .stages import add_emit, add_runtime_options, charged, emit_programs, lowering


def bandwidth_arg(text: str) -> float:
    return parsed(parse_bandwidth, text, positive="bandwidth must be positive")


def cmd_simulate(args: argparse.Namespace) -> int:
    alg = load_any(args.file, topology=args.topology, in_place=args.in_place)
    if isinstance(alg, Algorithm):
        verify(alg)  # in place, it runs as lowered in place (correct in place by dependencies)
    elif not isinstance(alg, ScheduleSet):  # a set's entries were verified as it was read
        verify_program(alg, in_place=args.in_place)
    if args.emit == "program":
        return emit_programs(args, [e.algorithm for e in alg.schedules] if isinstance(alg, ScheduleSet) else [alg])
    if args.size is None:
        raise InputError("--size is required (the bytes the collective is called with, e.g. 64MiB)")
    if len(args.size) > 1:
        return _sweep(args, alg)
    [size] = args.size
    entry = alg.pick(size) if isinstance(alg, ScheduleSet) else None
    if entry is not None and entry.algorithm is None:
        return _native(args, alg, [size])
    recorded = entry.protocol if entry is not None else recorded_protocol(args.file)
    sim = compiler.simulation(alg if entry is None else entry.algorithm, size, mode=args.mode, slices=args.slices,
                              in_place=args.in_place, overlap_latency=args.overlap_latency,
                              local_bandwidth=args.local_bandwidth, **lowering(args), **charged(args, recorded))
    with batch():  # the trace and the plot, both or neither
        if args.trace:
            sim.write_trace(args.trace)
        if args.plot:
            sim.plot(args.plot)
    report = sim.report
    data = {"file": args.file, "verified": True, **report.to_json(links=not args.summary),
            "trace": args.trace, "plot": args.plot}
    text = report.text()
    if entry is not None:
        data["set"] = alg.name
        data["entry"] = _entry_json(entry)
        text += f"\n  served by {entry.label!r}, the entry of set {alg.name!r} for sizes {entry.range_text()}"
    for what, path in (("trace", args.trace), ("plot", args.plot)):
        if path:
            text += f"\n  {what} written to {shown(path)}"
    emit(args, data, text)
    return 0


def _entry_json(entry: Any) -> dict[str, Any]:
    """A set's entry in the JSON (``native``: NCCL's algorithm where the set leaves the sizes to NCCL)."""
    return {"label": entry.label, "algorithm": None if entry.algorithm is None else entry.algorithm.name,
            "native": entry.served_by if entry.is_native else None, "min_bytes": entry.min_bytes,
            "max_bytes": entry.max_bytes}


def _native_rows(sset: ScheduleSet, sizes: list[int]) -> list[dict[str, Any]]:
    """Sizes the set leaves to NCCL: nothing of ours to simulate; NCCL's pick as the calibrated
    model times it (the ``nccl`` baseline, what the tuner compared against)."""
    rows = []
    for size in sizes:
        model = next((b for b in baselines(sset.collective.kind, sset.topology, size) if b.name == "nccl"), None)
        rows.append({"size": size, "entry": _entry_json(sset.pick(size)),
                     "nccl_us": None if model is None else model.time_us})
    return rows


def _native_line(row: dict[str, Any]) -> str:
    time = "" if row["nccl_us"] is None else f", modelled at {row['nccl_us']:.4g} us"
    return f"{format_size(row['size'])} ({row['entry']['native']}{time})"


def _native(args: argparse.Namespace, sset: ScheduleSet, sizes: list[int]) -> int:
    """Every size asked is left to NCCL by the set: say so, with NCCL's modelled time."""
    rows = _native_rows(sset, sizes)
    emit(args, {"file": args.file, "verified": True, "set": sset.name, "native": rows},
         f"calls of {', '.join(_native_line(r) for r in rows)} are left to NCCL by the set {sset.name!r}: no "
         "schedule of ours to simulate")
    return 0


def _sweep(args: argparse.Namespace, schedule: Any) -> int:
    """Several sizes: one nccl-tests row per size (a set: the entry serving each size); with
    --plot, time and bus bandwidth against size."""
    if args.trace:
        raise InputError(f"--trace writes the timeline of one call: give one size, not {len(args.size)}")
    recorded = None if isinstance(schedule, ScheduleSet) else recorded_protocol(args.file)
    is_set = isinstance(schedule, ScheduleSet)
    left = [s for s in args.size if is_set and schedule.pick(s).algorithm is None]  # sizes left to NCCL
    if left and len(left) == len(args.size):
        return _native(args, schedule, left)
    points = sweep(schedule, [s for s in args.size if s not in left], mode=args.mode, slices=args.slices,
                   in_place=args.in_place, overlap_latency=args.overlap_latency, local_bandwidth=args.local_bandwidth,
                   **lowering(args), **charged(args, recorded))
    first = points[0].report
    reference = _reference(first)
    rows, cells = [], []
    for p in points:
        rep = p.report
        row = {**nccl_columns(p.size, rep.time_us, rep.bus_factor), "bound_us": rep.bound_us,
               "bound_ratio": rep.bound_ratio if rep.bound_us > 0 else None, "bound_binding": rep.bound_binding,
               "algorithm": rep.algorithm, "steps": rep.steps, "messages": rep.messages,
               "baselines": [{"name": b.name, "time_us": b.time_us, "speedup": rep.speedup(b.name)}
                             for b in rep.baselines],
               "simulation_seconds": None if rep.simulation_seconds is None else round(rep.simulation_seconds, 6)}
        if is_set:
            row["entry"] = p.entry.label
        rows.append(row)
        model = rep.baseline(reference) if reference else None
        speedup = rep.speedup(reference) if reference else None
        cells.append(size_cells(row) + [fixed(rep.time_us), fixed(row["algbw_GBps"]), fixed(row["busbw_GBps"]),
                                        fixed(rep.bound_us), fixed(row["bound_ratio"], 3)]
                     + ([fixed(None if model is None else model.time_us), fixed(speedup)] if reference else [])
                     + ([p.entry.label] if is_set else []))
    columns = SIZE_COLUMNS + (("time", "(us)", ">"), ("algbw", "(GB/s)", ">"), ("busbw", "(GB/s)", ">"),
                              ("bound", "(us)", ">"), ("/bound", "", ">"))
    if reference:
        columns += ((reference, "(us)", ">"), ("speedup", "(x)", ">"))
    if is_set:
        columns += (("entry", "(of the set)", "<"),)
    what = (f"set {schedule.name!r} ({len(schedule.entries)} entries by size)" if is_set
            else f"{first.algorithm}: solver {first.solver or '-'}, {first.steps} steps, {first.messages} messages")
    head = (f"{what}; {first.collective} on {first.topology} ({first.n_ranks} ranks), {first.mode} mode, "
            f"{len(points)} sizes (size: {SIZE_MEANING.get(first.collective, SIZE_MEANING['custom'])})")
    data: dict[str, Any] = {"file": args.file, "verified": True, "collective": first.collective,
                            "topology": first.topology, "n_ranks": first.n_ranks, "mode": first.mode,
                            "bus_factor": first.bus_factor, "options": dict(first.options)}
    if is_set:
        data["set"] = schedule.summary()
    else:
        data["algorithm"] = first.algorithm
        data["solver"] = first.solver
    data["rows"] = rows
    data["plot"] = args.plot
    text = "\n".join([head] + table(columns, cells))
    if left:
        data["native"] = _native_rows(schedule, left)
        text += "\n  left to NCCL (no schedule of ours to simulate): " + ", ".join(map(_native_line, data["native"]))
    if args.plot:
        _plot_sweep(points, args.plot, what)
        text += f"\n  time-vs-size plot written to {shown(args.plot)}"
    emit(args, data, text)
    return 0


def _reference(report: Any) -> str | None:
    """The NCCL model a sweep's rows are compared with: ring where NCCL has it, else the first."""
    names = [b.name for b in report.baselines]
    return "nccl" if "nccl" in names else (names[0] if names else None)


def _plot_sweep(points: list, path: str, what: str) -> None:
    """Time and bus bandwidth against size: the schedule (a set: one curve per entry, over the
    sizes it serves), NCCL's models and the bound."""
    curves: dict[str, list[tuple[float, float]]] = {}
    bound = []
    for p in points:
        rep = p.report
        name = rep.algorithm if p.entry is None else f"entry {p.entry.label}"
        curves.setdefault(name, []).append((p.size, rep.time_us))
        for b in rep.baselines:
            curves.setdefault(f"{b.name} (model)", []).append((p.size, b.time_us))
        if rep.bound_us > 0:
            bound.append((p.size, rep.bound_us))
    first = points[0].report
    plot_sizes(curves, bound, path, title=f"{what}: {first.collective} on {first.topology} ({first.n_ranks} ranks)",
               bus_factor=first.bus_factor)


def register(sub: Any) -> None:
    p = command(sub, "simulate", "verify, lower and simulate a schedule: time, bandwidth, bound, trace, plots",
                cmd_simulate)
    p.add_argument("file", help="schedule file: JSON written by `ccl synthesize` or `ccl import` (a schedule set: "
                                "each size served by the entry for it), or MSCCL XML")
    p.add_argument("--topology", "-t", help="for an XML file: the machine to time it on (default: every pair of "
                                            "gpus linked)")
    add_emit(p, ("program",), "the report (the Program the simulator times)")
    p.add_argument("--size", type=sizes_arg, help=SIZE_HELP + "; required unless --emit")
    p.add_argument("--mode", choices=("dependency", "step"), default="dependency",
                   help="dependency: every rank runs on as its dependencies allow (default); step: a barrier "
                        "after every step")
    p.add_argument("--slices", type=_positive, default=1,
                   help="run every rank's program this many times side by side on 1/slices of the data each")
    p.add_argument("--in-place", action="store_true", help="aliased output slots are their input slots (no copy)")
    p.add_argument("--overlap-latency", action="store_true",
                   help="a lane is busy for bytes/bandwidth only; latency overlaps the next transfer")
    p.add_argument("--local-bandwidth", type=bandwidth_arg, default=None,
                   help="charge local copies at this bandwidth (e.g. 1500GB/s); free by default")
    add_runtime_options(p)
    p.add_argument("--trace", help="write a Chrome trace (open in https://ui.perfetto.dev); one size only")
    p.add_argument("--plot", help="write a PNG: timeline and link-utilization heatmap (several sizes: time and "
                                  "bus bandwidth against size, with NCCL's models and the bound)")
    p.add_argument("--summary", action="store_true", help="with --json: leave out the per-link and per-rank lists")
    declare(p, inputs=("file", "topology"), files=("trace", "plot"))


def _positive(text: str) -> int:
    return positive_int(text)
