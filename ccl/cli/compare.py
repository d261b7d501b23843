"""``ccl compare``: every applicable solver's schedule, NCCL's models and the bound, side by side."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .bounds import sizes_arg
from .common import add_problem_arguments, command, emit, positive_int
from .stages import add_lowering_options, lowering

SWEEP = [4**k * 1024 for k in range(11)]  # 1KiB .. 1GiB


def cmd_compare(args: argparse.Namespace) -> int:
    from ..compiler import compare, load_topology
    from ..errors import InputError

    topo = load_topology(args.topology)
    from solvers import SOLVERS

    names = None
    if args.solvers:
        names = [x.strip() for x in args.solvers.split(",") if x.strip()]
        if not names:
            raise InputError(f"no solver named in --solvers {args.solvers!r}")

    def progress(message: str) -> None:
        print(f"ccl: {message}", file=sys.stderr, flush=True)

    slow = bool(names) and any(not SOLVERS[x].template for x in names if x in SOLVERS)
    results = compare(topo, args.collective, args.size, root=args.root, chunks=args.chunks, solvers=names,
                      only=args.only, mode=args.mode, slices=args.slices, time_limit=args.time_limit,
                      progress=progress if slow else None, **lowering(args))
    plot_note = ""
    if args.plot:
        sweep = args.size if len(args.size) > 1 else SWEEP
        curves_src = results if len(args.size) > 1 else compare(
            topo, args.collective, sweep, root=args.root, chunks=args.chunks, solvers=names, only=args.only,
            mode=args.mode, slices=args.slices, time_limit=args.time_limit, progress=progress if slow else None,
            **lowering(args))
        _plot(curves_src, args.plot)
        plot_note = f"\ntime-vs-size plot ({len(sweep)} sizes) written to {args.plot}"
    first = results[0]
    data = {"topology": first.topology, "collective": first.collective, "n_ranks": first.n_ranks,
            "comparisons": [c.to_json() for c in results], "plot": args.plot}
    text = "\n\n".join(c.text() for c in results) + plot_note
    emit(args, data, text)
    return 0


def _plot(results: list, path: str) -> None:
    from backends.sim.plots import plot_sizes

    from ..report import bus_factor

    curves: dict[str, list[tuple[float, float]]] = {}
    bound = []
    for c in results:
        for row in c.rows:
            if row.time_us is None or row.time_us <= 0:
                continue
            if row.source == "bound":
                bound.append((c.size, row.time_us))
            else:
                curves.setdefault(row.name, []).append((c.size, row.time_us))
    first = results[0]
    plot_sizes(curves, bound, path, title=f"{first.collective} on {first.topology} ({first.n_ranks} ranks)",
               bus_factor=bus_factor(first.collective, first.n_ranks))


def register(sub: Any) -> None:
    p = command(sub, "compare", "simulate every applicable solver's schedule against NCCL's models and the bound",
                cmd_compare)
    add_problem_arguments(p)
    p.add_argument("--size", required=True, type=sizes_arg,
                   help="size(s), comma-separated, nccl-tests convention (64MiB or 1KiB,1MiB,1GiB)")
    p.add_argument("--chunks", "-k", type=positive_int, default=1, help="chunk factor given to every solver")
    p.add_argument("--solvers", help="comma-separated solvers to add to the templates (every template that "
                   "implements the collective always runs; slow solvers such as smt or milp run only when named)")
    p.add_argument("--only", action="store_true", help="compare just the solvers named in --solvers")
    p.add_argument("--mode", choices=("dependency", "step"), default="dependency", help="simulation mode")
    p.add_argument("--slices", type=positive_int, default=1,
                   help="run every rank's program this many times side by side on 1/slices of the data each")
    add_lowering_options(p)
    p.add_argument("--time-limit", type=float, default=None, help="seconds per slow solver")
    p.add_argument("--plot", help="write a PNG of time and bus bandwidth against size (a sweep 1KiB..1GiB when "
                   "one size is given)")
