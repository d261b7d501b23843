"""``ccl run FILE --size S``: run a schedule on local gloo processes, check it, time it."""

from __future__ import annotations

import argparse
from typing import Any

from .. import compiler
from ..compiler.loader import load_any
from ..compiler.runtimes import run_local_sizes
from ..core.errors import EXIT_BACKEND, InputError
from ..core.report import bus_factor
from ..core.schedule_set import ScheduleSet
from ..core.units import format_size
from .bounds import SIZE_COLUMNS, fixed, nccl_columns, size_cells, sizes_arg, table
from .common import command, count_int, emit, positive_int, seconds_arg
from .stages import add_emit, emit_programs, lowering

# the element types and reductions of a local run (checked here, so a bad one is bad input at
# parse time; ``ccl.compiler.runtimes`` and ``backends.torch.runtime`` check them again)
DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "complex128", "int8", "uint8", "int16", "int32",
          "int64", "bool")
REDUCE_OPS = ("sum", "avg", "prod", "max", "min", "band", "bor", "bxor")


def _dtype(text: str) -> str:
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r} (known: {', '.join(DTYPES)})")
    return text


OP_ALIASES = {"product": "prod", "mean": "avg", "average": "avg"}


def _op(text: str) -> str:
    name = OP_ALIASES.get(text.lower(), text.lower())
    if name not in REDUCE_OPS:
        raise argparse.ArgumentTypeError(f"unknown reduction {text!r} (known: {', '.join(REDUCE_OPS)})")
    return name


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _bw(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_run(args: argparse.Namespace) -> int:
    if args.emit == "program":
        loaded = load_any(args.file, topology=args.topology, in_place=args.in_place)
        if isinstance(loaded, ScheduleSet):
            return emit_programs(args, [e.algorithm for e in loaded.schedules])
        return emit_programs(args, [compiler.runnable(loaded, **lowering(args))])
    if args.size is None:
        raise InputError("--size is required (the message size, as nccl-tests counts it, e.g. 16MiB)")
    runs = run_local_sizes(args.file, sizes=args.size, ranks=args.ranks, repeat=args.repeat, warmup=args.warmup,
                           dtype=args.dtype, op=args.op, in_place=args.in_place, timeout=args.timeout,
                           topology=args.topology, round_sizes=args.round, **lowering(args))
    ok = all(r.report is None or r.report.correct is not False for r in runs)
    if len(runs) > 1:
        _sweep(args, runs, ok)
        return 0 if ok else EXIT_BACKEND
    [(size, entry, report)] = runs
    if report is None:  # the set leaves this size to NCCL
        emit(args, {"ok": True, "file": args.file, "requested_size": size, "entry": _entry_json(entry), "ran": False},
             f"ok: calls of {format_size(size)} are left to NCCL by the set ({entry.served_by}, sizes "
             f"{entry.range_text()}): torch's own collective serves them; nothing of ours to run")
        return 0
    data = {"ok": report.correct is not False, "file": args.file, **report.to_json(), "requested_size": size}
    rounded = f" (rounded down from {format_size(size)}: --round)" if report.size_bytes != size else ""
    algbw, busbw = report.bandwidth(report.ours_seconds)
    nalgbw, nbusbw = report.bandwidth(report.native_seconds)
    place = "in place" if report.in_place else "out of place"
    lines = [
        f"{'ok' if report.correct is not False else 'WRONG'}: {report.name}: {report.collective} on "
        f"{report.ranks} local gloo ranks, {format_size(report.size_bytes)}{rounded} "
        f"({report.elements_per_part} {report.dtype} per part), {report.op}, {place}",
        f"  check: {'matches' if report.correct else 'DIFFERS from'} torch's {report.collective} "
        f"(largest difference {report.max_error:.3g})" if report.correct is not None else "  check: skipped",
    ]
    if entry is not None:
        data["entry"] = _entry_json(entry)
        lines.insert(1, f"  served by {entry.label!r}, the set's entry for sizes {entry.range_text()}")
    if report.emulated:
        lines.append(f"  emulated: {report.emulated}")
    if report.repeat:
        lines.append(f"  {'':<6} {'time':>12} {'algbw GB/s':>11} {'busbw GB/s':>11}   (median of {report.repeat})")
        lines.append(f"  {'ours':<6} {_ms(report.ours_seconds):>12} {_bw(algbw):>11} {_bw(busbw):>11}")
        lines.append(f"  {'torch':<6} {_ms(report.native_seconds):>12} {_bw(nalgbw):>11} {_bw(nbusbw):>11}")
        if report.ratio is not None:
            lines.append(f"  ratio {report.ratio:.2f} (ours / torch, timed alternately on this machine)")
    emit(args, data, "\n".join(lines))
    return 0 if report.correct is not False else EXIT_BACKEND


def _entry_json(entry: Any) -> dict[str, Any]:
    """A set's entry in a run's JSON (``native``: NCCL's algorithm where the set leaves the sizes to NCCL)."""
    return {"label": entry.label, "algorithm": None if entry.algorithm is None else entry.algorithm.name,
            "native": entry.served_by if entry.is_native else None, "min_bytes": entry.min_bytes,
            "max_bytes": entry.max_bytes}


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e6


def _sweep(args: argparse.Namespace, runs: list, ok: bool) -> None:
    """Several sizes: one nccl-tests row per size, ours against torch, and the check (a size the
    set leaves to NCCL: a row saying so, nothing run)."""
    left = [r for r in runs if r.report is None]
    runs = [r for r in runs if r.report is not None]
    if not runs:
        emit(args, {"ok": True, "file": args.file, "rows": [], "native": [_native_row(r) for r in left]},
             f"ok: every size asked is left to NCCL by the set ({', '.join(sorted({r.entry.served_by for r in left}))})"
             ": torch's own collective serves them; nothing of ours to run")
        return
    first = runs[0].report
    is_set = any(r.entry is not None for r in runs)
    rows, cells = [], []
    for size, entry, rep in runs:
        factor = bus_factor(rep.collective, rep.ranks)
        row = {**nccl_columns(rep.size_bytes, _us(rep.ours_seconds), factor, dtype=rep.dtype),
               "requested_size": size, "name": rep.name}
        if is_set:
            row["entry"] = entry.label
        native = nccl_columns(rep.size_bytes, _us(rep.native_seconds), factor, dtype=rep.dtype)
        row.update({"native_time_us": native["time_us"], "native_algbw_GBps": native["algbw_GBps"],
                    "native_busbw_GBps": native["busbw_GBps"], "ratio": rep.ratio, "correct": rep.correct,
                    "max_error": rep.max_error, "elements_per_part": rep.elements_per_part,
                    "ours_iterations": list(rep.ours_iterations), "native_iterations": list(rep.native_iterations)})
        rows.append(row)
        check = "skipped" if rep.correct is None else ("ok" if rep.correct else "WRONG")
        cells.append(size_cells(row) + ([entry.label] if is_set else [])
                     + [fixed(row["time_us"]), fixed(row["algbw_GBps"], 3), fixed(row["busbw_GBps"], 3),
                        fixed(row["native_time_us"]), fixed(row["native_busbw_GBps"], 3), fixed(rep.ratio),
                        check, f"{rep.max_error:.3g}" if rep.correct is not None else "-"])
    columns = SIZE_COLUMNS + ((("entry", "(of the set)", "<"),) if is_set else ()) + (
        ("time", "(us)", ">"), ("algbw", "(GB/s)", ">"), ("busbw", "(GB/s)", ">"), ("torch", "(us)", ">"),
        ("busbw", "(GB/s)", ">"), ("ratio", "(/torch)", ">"), ("check", "", "<"), ("max error", "", ">"))
    wrong = sum(1 for r in runs if r.report.correct is False)
    place = "in place" if first.in_place else "out of place"
    timing = (f"medians of {first.repeat} iterations, ours and torch's timed alternately" if first.repeat
              else "not timed (--repeat 0)")
    head = (f"{'ok' if ok else f'WRONG at {wrong} of {len(runs)} sizes'}: "
            f"{'the set' if is_set else first.name}: {first.collective} on {first.ranks} local gloo ranks, "
            f"{len(runs)} sizes, {first.dtype}, {first.op}, {place}; {timing}")
    emulated = sorted({r.report.emulated for r in runs if r.report.emulated})
    if emulated:
        head += "\n  emulated: " + "; ".join(emulated)
    changed = [r for r in runs if r.report.size_bytes != r.size]
    if changed:
        head += "\n  rounded down (--round): " + ", ".join(
            f"{format_size(r.size)} -> {format_size(r.report.size_bytes)}" for r in changed)
    if left:
        head += "\n  left to NCCL (torch's own collective serves them; nothing of ours ran): " + ", ".join(
            f"{format_size(r.size)} ({r.entry.served_by})" for r in left)
    data = {"ok": ok, "file": args.file, "collective": first.collective, "ranks": first.ranks, "dtype": first.dtype,
            "op": first.op, "in_place": first.in_place, "repeat": first.repeat, "rows": rows,
            **({"emulated": emulated} if emulated else {}), "native": [_native_row(r) for r in left]}
    emit(args, data, "\n".join([head] + table(columns, cells)))


def _native_row(run: Any) -> dict[str, Any]:
    """A size the set leaves to NCCL, in a sweep's JSON."""
    return {"requested_size": run.size, "entry": _entry_json(run.entry)}


def register(sub: Any) -> None:
    run = command(sub, "run", "run a schedule on local gloo processes, check it against torch and time it",
                  cmd_run)
    run.add_argument("file", help="schedule file: JSON written by `ccl synthesize` or `ccl import` (a schedule "
                                  "set: each size runs the entry for it), or MSCCL XML")
    run.add_argument("--topology", "-t", help="for an XML file: the machine (default: every pair of gpus linked)")
    run.add_argument("--size", type=sizes_arg,
                     help="message size, as nccl-tests counts it (16MiB), or a sweep (1KiB,16MiB or 1KiB..16MiB: "
                          "one row per size, all in one launch of the ranks); required unless --emit")
    run.add_argument("--ranks", "-n", type=positive_int, default=None,
                     help="number of processes (must equal the schedule's ranks; default: the schedule's)")
    run.add_argument("--round", action="store_true",
                     help="round each size down to a whole number of elements per part (reported as the size "
                          "run); without it such a size is refused")
    run.add_argument("--repeat", "-r", type=count_int, default=5, help="timed iterations (default 5; 0: check only)")
    run.add_argument("--warmup", type=count_int, default=1, help="untimed iterations first (default 1)")
    run.add_argument("--dtype", default="float32", type=_dtype,
                     help=f"element type: {', '.join(DTYPES)} (default float32)")
    run.add_argument("--op", default="sum", type=_op, help=f"reduction: {', '.join(REDUCE_OPS)} (default sum)")
    run.add_argument("--in-place", action="store_true", help="run in place (torch's in-place layout)")
    add_emit(run, ("program",), "running (the Program the ranks run)")
    run.add_argument("--timeout", type=seconds_arg, default=60.0,
                     help="seconds a rank waits for a peer before failing (default 60)")
