"""``ccl simulate``: verify a schedule, simulate it, print its report; trace and plot on request."""

from __future__ import annotations

import argparse
from typing import Any

from .bounds import size_arg
from .common import command, emit
from .stages import add_emit, emit_programs, lowering


def bandwidth_arg(text: str) -> float:
    from ..errors import InputError
    from ..units import parse_bandwidth

    try:
        value = parse_bandwidth(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"bandwidth must be positive, got {text!r}")
    return value


def cmd_simulate(args: argparse.Namespace) -> int:
    from .. import compiler
    from ..algorithm import Algorithm
    from ..compiler.msccl import load_schedule
    from ..errors import InputError
    from ..verify import verify
    from ..verify_program import verify_program

    alg = load_schedule(args.file, topology=args.topology, in_place=args.in_place)
    if isinstance(alg, Algorithm):
        verify(alg, in_place=args.in_place)
    else:
        verify_program(alg, in_place=args.in_place)
    if args.emit == "program":
        return emit_programs(args, [alg])
    if args.size is None:
        raise InputError("--size is required (the bytes the collective is called with, e.g. 64MiB)")
    sim = compiler.simulation(alg, args.size, mode=args.mode, slices=args.slices, in_place=args.in_place,
                              overlap_latency=args.overlap_latency, local_bandwidth=args.local_bandwidth,
                              **lowering(args))
    if args.trace:
        sim.write_trace(args.trace)
    if args.plot:
        sim.plot(args.plot)
    report = sim.report
    data = {"file": args.file, "verified": True, **report.to_json(links=not args.summary),
            "trace": args.trace, "plot": args.plot}
    text = report.text()
    for what, path in (("trace", args.trace), ("plot", args.plot)):
        if path:
            text += f"\n  {what} written to {path}"
    emit(args, data, text)
    return 0


def register(sub: Any) -> None:
    p = command(sub, "simulate", "verify, lower and simulate a schedule: time, bandwidth, bound, trace, plots",
                cmd_simulate)
    p.add_argument("file", help="schedule file: JSON written by `ccl synthesize` or `ccl import`, or MSCCL XML")
    p.add_argument("--topology", "-t", help="for an XML file: the machine to time it on (default: every pair of "
                                            "gpus linked)")
    add_emit(p, ("program",), "the report (the Program the simulator times)")
    p.add_argument("--size", type=size_arg,
                   help="bytes the collective is called with, nccl-tests convention (64MiB, 1GB, 4096); "
                        "required unless --emit")
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
    p.add_argument("--trace", help="write a Chrome trace (open in https://ui.perfetto.dev)")
    p.add_argument("--plot", help="write a PNG: timeline and link-utilization heatmap")
    p.add_argument("--summary", action="store_true", help="with --json: leave out the per-link and per-rank lists")


def _positive(text: str) -> int:
    from .common import positive_int

    return positive_int(text)
