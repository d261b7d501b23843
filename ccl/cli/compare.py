"""``ccl compare``: every applicable solver's schedule, NCCL's models and the bound, side by side."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from backends.sim.plots import plot_sizes
from solvers import SOLVERS

from ..compiler import compare, load_topology
from ..compiler.compare import Unfinished
from ..core.display import shown
from ..core.errors import EXIT_INTERRUPTED, InputError, Interrupted
from ..core.files import batch
from ..core.report import SIZE_MEANING, bus_factor, format_bytes
from ..core.serialize import algorithm_to_json, dumps, write_all
from ..core.units import format_size
from .bounds import SIZE_COLUMNS, fixed, nccl_columns, size_cells, sizes_arg, table
from .common import add_problem_arguments, command, emit, positive_int, seconds_arg
from .outputs import declare, guard, inputs_of, make_folder
from .progress import quiet_from_env
from .stages import add_lowering_options, add_runtime_options, charged, lowering

SWEEP = [4**k * 1024 for k in range(11)]  # 1KiB .. 1GiB


def cmd_compare(args: argparse.Namespace) -> int:
    if args.save_dir and os.path.exists(args.save_dir) and not os.path.isdir(args.save_dir):
        raise InputError(f"--save-dir {shown(args.save_dir)}: exists and is not a folder")
    topo = load_topology(args.topology)

    names = None
    if args.solvers:
        names = [x.strip() for x in args.solvers.split(",") if x.strip()]
        if not names:
            raise InputError(f"no solver named in --solvers {args.solvers!r}")

    def progress(message: str) -> None:
        print(f"ccl: {shown(message)}", file=sys.stderr, flush=True)

    slow = bool(names) and any(not SOLVERS[x].template for x in names if x in SOLVERS) and not quiet_from_env()
    options = dict(root=args.root, chunks=args.chunks, solvers=names, only=args.only, mode=args.mode,
                   slices=args.slices, time_limit=args.time_limit, progress=progress if slow else None,
                   **lowering(args), **charged(args))
    sizes = args.size
    try:
        if args.plot and len(sizes) == 1:
            # one size: its table, and a sweep for the plot where every schedule is the one
            # synthesized for that size (slow solvers run once, not once per plotted size)
            plotted = compare(topo, args.collective, sorted(set(SWEEP) | set(sizes)), synthesis_size=sizes[0],
                              **options)
            results = [c for c in plotted if c.size == sizes[0]]
        else:
            results = compare(topo, args.collective, sizes, **options)
            plotted = results
    except Interrupted as exc:
        if not isinstance(exc.best, Unfinished):
            raise
        return _interrupted(args, exc)
    first = results[0]
    data: dict[str, Any] = {"topology": first.topology, "collective": first.collective, "n_ranks": first.n_ranks,
                            "comparisons": [c.to_json() for c in results], "plot": args.plot,
                            "left_out": [{"solver": name, "reason": why}
                                         for name, why in dict.fromkeys(x for c in results for x in c.left_out)]}
    if len(results) > 1:
        rows, text = _sweep_table(results)
        data["rows"] = rows
    else:
        text = results[0].text()
    planned = _planned(plotted, args.save_dir) if args.save_dir else []
    if planned:  # before anything is written: no schedule file may be an input or the plot
        guard(inputs_of(args), files=[("--plot", args.plot)] + [("--save-dir file", row["path"]) for row, _ in planned],
              new_folders=True, hint="give another --save-dir")
    with batch():  # the plot and the schedules, all or none
        if args.plot:
            _plot(plotted, args.plot)
            data["plot_sizes"] = [c.size for c in plotted]
            text += f"\ntime-vs-size plot ({len(plotted)} sizes) written to {shown(args.plot)}"
            if len(sizes) == 1 and any(r.synthesis_size is not None for r in results[0].rows):
                text += f" (size-specific solvers synthesized for {_size(sizes[0])} only)"
        if args.save_dir:
            saved = _save(planned, args.save_dir)
            data["saved"] = saved
            text += f"\n{len(saved)} schedule{'' if len(saved) == 1 else 's'} written to {shown(args.save_dir)}"
    emit(args, data, text)
    return 0


def _interrupted(args: argparse.Namespace, exc: Interrupted) -> int:
    """Ctrl-C: the schedules made so far written to --save-dir (all or none), the sizes compared
    reported, exit 130."""
    done = exc.best
    planned = []
    if args.save_dir:
        by_stem: dict[str, tuple[dict[str, Any], Any]] = {}
        for name, alg, given in done.schedules:
            stem = name if given is None else f"{name}@{format_size(given)}"
            by_stem.setdefault(stem, ({"solver": name, "synthesis_size": given,
                                       "path": os.path.join(args.save_dir, f"{stem}.json")}, alg))
        planned = [by_stem[k] for k in sorted(by_stem)]
    saved = []
    if planned:
        guard(inputs_of(args), files=[("--save-dir file", row["path"]) for row, _ in planned], new_folders=True,
              hint="give another --save-dir")
        saved = _save(planned, args.save_dir)
    data = {"status": "interrupted", "ok": False, **exc.to_json(), "comparisons": [c.to_json() for c in done.comparisons],
            "saved": saved}
    lines = [f"interrupted: {len(done.comparisons)} size(s) compared, {len(done.schedules)} schedule(s) made"]
    lines += [c.text() for c in done.comparisons]
    if args.save_dir:
        lines.append(f"{len(saved)} schedule{'' if len(saved) == 1 else 's'} written to {shown(args.save_dir)}")
    print(f"ccl: {exc.render()}", file=sys.stderr)
    emit(args, data, "\n".join(lines))
    return EXIT_INTERRUPTED


def _size(size: float) -> str:
    return format_bytes(size)


def _sweep_table(results: list) -> tuple[list[dict[str, Any]], str]:
    """Several sizes: the fastest schedule per size as an nccl-tests row, then every schedule's
    time over the bound per size (``*``: the fastest)."""
    first = results[0]
    factor = bus_factor(first.collective, first.n_ranks)
    schedules = list(dict.fromkeys(r.name for c in results for r in c.rows
                                   if r.source == "schedule" and r.error is None))
    rows, cells, matrix = [], [], []
    reference = None
    for c in results:
        best, ref = c.best, c.reference
        bound = c.bound.get("bound_us") or 0.0
        reference = reference or (ref.name if ref else None)
        time_us = best.time_us if best else None
        row = {**nccl_columns(c.size, time_us, factor), "best": best.name if best else None,
               "bound_us": bound or None,
               "bound_ratio": time_us / bound if time_us and bound > 0 else None,
               "reference": ref.name if ref else None, "reference_us": ref.time_us if ref else None,
               "speedup_vs_reference": ref.time_us / time_us if ref and ref.time_us and time_us else None,
               "schedules": {r.name: r.time_us for r in c.rows if r.source == "schedule"},
               "nccl_pick": pick_name(ref), "runtime": best.report.runtime if best and best.report else None}
        rows.append(row)
        cells.append(size_cells(row) + [row["best"] or "-", fixed(time_us), fixed(row["algbw_GBps"]),
                                        fixed(row["busbw_GBps"]), fixed(row["bound_us"]),
                                        fixed(row["bound_ratio"], 3), fixed(row["reference_us"]),
                                        fixed(row["speedup_vs_reference"]), row["nccl_pick"] or "-",
                                        row["runtime"] or "-"])
        times = row["schedules"]
        matrix.append(size_cells(row)[:1]
                      + [("-" if times.get(n) is None or bound <= 0 else f"{times[n] / bound:.3f}")
                         + ("*" if best and n == best.name else " ") for n in schedules])
    columns = SIZE_COLUMNS + (("best", "(schedule)", "<"), ("time", "(us)", ">"), ("algbw", "(GB/s)", ">"),
                              ("busbw", "(GB/s)", ">"), ("bound", "(us)", ">"), ("/bound", "", ">"),
                              (reference or "nccl", "(us)", ">"), ("speedup", "(x)", ">"),
                              ("NCCL's pick", "", "<"), ("ours on", "(runtime)", "<"))
    head = (f"{first.collective} on {first.topology} ({first.n_ranks} ranks), {first.mode} mode, chunks "
            f"{first.chunks}, {len(results)} sizes (size: {SIZE_MEANING.get(first.collective, '')})")
    lines = [head] + table(columns, cells)
    lines += ["", "every schedule's time / bound (* the fastest at the size):"]
    lines += table((("size", "(B)", ">"),) + tuple((n, "", ">") for n in schedules), matrix)
    failed = dict.fromkeys((r.name, r.error) for c in results for r in c.rows if r.error is not None)
    lines += [f"  n/a {name}: {error}" for name, error in failed]
    lines += [f"  left out {name}: {why}" for name, why in dict.fromkeys(x for c in results for x in c.left_out)]
    return rows, "\n".join(lines)


def pick_name(ref: Any) -> str | None:
    """NCCL's algorithm and protocol ("NVLS/Simple") when the reference is NCCL's pick."""
    if ref is None or ref.name != "nccl" or ref.baseline is None:
        return None
    return f"{ref.baseline.algorithm}/{ref.baseline.protocol}"


def _planned(results: list, folder: str) -> list[tuple[dict[str, Any], Any]]:
    """Every schedule ranked and where it goes, (row, algorithm): ``NAME.json`` for a schedule
    made without a size, ``NAME@SIZE.json`` for one synthesized for a size."""
    saved: dict[str, tuple[dict[str, Any], Any]] = {}
    for c in results:
        for r in c.rows:
            if r.algorithm is None:
                continue
            stem = r.name if r.synthesis_size is None else f"{r.name}@{format_size(r.synthesis_size)}"
            if stem in saved:
                continue
            path = os.path.join(folder, f"{stem}.json")
            saved[stem] = ({"solver": r.name, "synthesis_size": r.synthesis_size, "path": path}, r.algorithm)
    return [saved[k] for k in sorted(saved)]


def _save(planned: list[tuple[dict[str, Any], Any]], folder: str) -> list[dict[str, Any]]:
    """Write the planned schedules into ``folder`` (created when missing), all or none."""
    make_folder("--save-dir", folder)
    write_all([(row["path"], lambda fh, alg=alg: fh.write(dumps(algorithm_to_json(alg)) + "\n"))
               for row, alg in planned])
    return [row for row, _ in planned]


def _plot(results: list, path: str) -> None:
    curves: dict[str, list[tuple[float, float]]] = {}
    bound = []
    for c in results:
        for row in c.rows:
            if row.time_us is None or row.time_us <= 0:
                continue
            if row.source == "bound":
                bound.append((c.size, row.time_us))
                continue
            name = row.name + (" (model)" if row.source == "model" else "")
            if row.synthesis_size is not None and _fixed_size(results, row):
                name = f"{row.name}@{format_size(row.synthesis_size)}"
            curves.setdefault(name, []).append((c.size, row.time_us))
    first = results[0]
    plot_sizes(curves, bound, path, title=f"{first.collective} on {first.topology} ({first.n_ranks} ranks)",
               bus_factor=bus_factor(first.collective, first.n_ranks))


def _fixed_size(results: list, row: Any) -> bool:
    """Whether the row's solver was given one size for the whole sweep (its curve is then
    named after that size); a solver synthesizing per size keeps one curve under its name."""
    given = {r.synthesis_size for c in results for r in c.rows if r.name == row.name and r.source == "schedule"}
    return len(given) == 1


def register(sub: Any) -> None:
    p = command(sub, "compare", "simulate every applicable solver's schedule against NCCL's models and the bound",
                cmd_compare)
    add_problem_arguments(p)
    p.add_argument("--size", required=True, type=sizes_arg,
                   help="size(s), nccl-tests convention: 64MiB, 1KiB,1MiB,1GiB or a sweep 1KiB..1GiB (powers of "
                        "two; *4 for powers of four); several sizes print one row per size")
    p.add_argument("--chunks", "-k", type=positive_int, default=1, help="chunk factor given to every solver")
    p.add_argument("--solvers", help="comma-separated solvers to add to the templates (every template that "
                   "implements the collective always runs; slow solvers such as smt or milp run only when named, "
                   "once per size)")
    p.add_argument("--only", action="store_true", help="compare just the solvers named in --solvers")
    p.add_argument("--mode", choices=("dependency", "step"), default="dependency", help="simulation mode")
    p.add_argument("--slices", type=positive_int, default=1,
                   help="run every rank's program this many times side by side on 1/slices of the data each")
    add_lowering_options(p)
    add_runtime_options(p)
    p.add_argument("--time-limit", type=seconds_arg, default=None, help="seconds per slow solver")
    p.add_argument("--plot", help="write a PNG of time and bus bandwidth against size (one size given: a sweep "
                   "1KiB..1GiB of the schedules made for that size)")
    p.add_argument("--save-dir", help="write every schedule compared to this folder: NAME.json, or NAME@SIZE.json "
                   "for a solver given the size")
    declare(p, inputs=("topology",), files=("plot",), folders=("save_dir",))
