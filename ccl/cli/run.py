"""``ccl run FILE --size S``: run a schedule on local gloo processes, check it, time it."""

from __future__ import annotations

import argparse
from typing import Any

from .common import command, emit, positive_int
from .stages import add_emit, emit_programs, lowering


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _bw(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_run(args: argparse.Namespace) -> int:
    from .. import compiler
    from ..errors import EXIT_BACKEND, InputError
    from ..units import format_size, parse_size

    if args.emit == "program":
        return emit_programs(args, [compiler.runnable(args.file, topology=args.topology, in_place=args.in_place,
                                                      **lowering(args))])
    if args.size is None:
        raise InputError("--size is required (the message size, as nccl-tests counts it, e.g. 16MiB)")
    size = parse_size(args.size)
    if size < 1:
        raise InputError("--size must be at least 1 byte")
    report = compiler.run_local(args.file, size=size, ranks=args.ranks, repeat=args.repeat, warmup=args.warmup,
                                dtype=args.dtype, op=args.op, in_place=args.in_place, timeout=args.timeout,
                                topology=args.topology, **lowering(args))
    data = {"ok": report.correct is not False, "file": args.file, **report.to_json()}
    algbw, busbw = report.bandwidth(report.ours_seconds)
    nalgbw, nbusbw = report.bandwidth(report.native_seconds)
    place = "in place" if report.in_place else "out of place"
    lines = [
        f"{'ok' if report.correct is not False else 'WRONG'}: {report.name}: {report.collective} on "
        f"{report.ranks} local gloo ranks, {format_size(report.size_bytes)} "
        f"({report.elements_per_part} {report.dtype} per part), {report.op}, {place}",
        f"  check: {'matches' if report.correct else 'DIFFERS from'} torch's {report.collective} "
        f"(largest difference {report.max_error:.3g})" if report.correct is not None else "  check: skipped",
    ]
    if report.repeat:
        lines.append(f"  {'':<6} {'time':>12} {'algbw GB/s':>11} {'busbw GB/s':>11}   (median of {report.repeat})")
        lines.append(f"  {'ours':<6} {_ms(report.ours_seconds):>12} {_bw(algbw):>11} {_bw(busbw):>11}")
        lines.append(f"  {'torch':<6} {_ms(report.native_seconds):>12} {_bw(nalgbw):>11} {_bw(nbusbw):>11}")
        if report.ratio is not None:
            lines.append(f"  ratio {report.ratio:.2f} (ours / torch, timed alternately on this machine)")
    emit(args, data, "\n".join(lines))
    return 0 if report.correct is not False else EXIT_BACKEND


def register(sub: Any) -> None:
    run = command(sub, "run", "run a schedule on local gloo processes, check it against torch and time it",
                  cmd_run)
    run.add_argument("file", help="schedule file: JSON written by `ccl synthesize` or `ccl import`, or MSCCL XML")
    run.add_argument("--topology", "-t", help="for an XML file: the machine (default: every pair of gpus linked)")
    run.add_argument("--size", help="message size, as nccl-tests counts it (e.g. 16MiB); required unless --emit")
    run.add_argument("--ranks", "-n", type=positive_int, default=None,
                     help="number of processes (must equal the schedule's ranks; default: the schedule's)")
    run.add_argument("--repeat", "-r", type=int, default=5, help="timed iterations (default 5; 0: check only)")
    run.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    run.add_argument("--dtype", default="float32", help="torch dtype name (default float32)")
    run.add_argument("--op", default="sum", help="reduction: sum, avg, prod, max, min, band, bor, bxor")
    run.add_argument("--in-place", action="store_true", help="run in place (torch's in-place layout)")
    add_emit(run, ("program",), "running (the Program the ranks run)")
    run.add_argument("--timeout", type=float, default=60.0,
                     help="seconds a rank waits for a peer before failing (default 60)")
