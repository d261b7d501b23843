"""``ccl bounds``: lower bounds on the time of a collective on a topology.

Also the size arguments every command takes (``size_arg``, ``sizes_arg``: one size or a sweep)
and the nccl-tests style table the commands print for a sweep (``nccl_columns``, ``table``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from solvers.bounds import lower_bound

from ..compiler import load_topology, make_collective
from ..core.report import SIZE_MEANING, bus_factor, format_bytes, format_us
from ..core.units import parse_size, parse_sizes
from .common import add_problem_arguments, command, emit, parsed

# nccl-tests' names of the element types and their sizes (count = size / element bytes)
NCCL_TYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
             "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int64": "int64"}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1, "int16": 2,
                 "int32": 4, "int64": 8}


def size_arg(text: str) -> int:
    """A size with units (``64MiB``, ``1GB``, bytes when bare), positive."""
    return parsed(parse_size, text, positive="size must be at least 1 byte")


def sizes_arg(text: str) -> list[int]:
    """One size or a sweep (``ccl.core.units.parse_sizes``): ``64MiB``, ``1KiB,64MiB``,
    ``1KiB..1GiB`` (powers of two), ``1KiB..1GiB*4``; sorted, without repeats."""
    return parsed(parse_sizes, text)


SIZE_HELP = ("bytes the collective is called with, nccl-tests convention: one size (64MiB, 1GB, 4096) or a "
             "sweep (1KiB,64MiB or 1KiB..1GiB in powers of two, 1KiB..1GiB*4 in powers of four): one row per size")


def nccl_columns(size: float, time_us: float | None, factor: float, *, dtype: str = "float32") -> dict[str, Any]:
    """The nccl-tests fields of a sweep row: ``size`` (bytes), ``count`` (elements of ``dtype``
    in it, rounded down as nccl-tests counts), ``type`` (nccl-tests' name), ``time_us``,
    ``algbw_GBps`` = size / time and ``busbw_GBps`` = algbw x ``factor`` (None without a time)."""
    ok = time_us is not None and time_us > 0
    element = ELEMENT_BYTES.get(dtype)
    algbw = size / time_us / 1e3 if ok else None
    return {"size": size, "count": None if element is None else int(size // element),
            "type": NCCL_TYPE.get(dtype, dtype), "time_us": time_us, "algbw_GBps": algbw,
            "busbw_GBps": None if algbw is None else algbw * factor}


def fixed(value: float | None, digits: int = 2) -> str:
    """A table cell: the number with ``digits`` decimals, "-" without one."""
    return "-" if value is None else f"{value:.{digits}f}"


def table(columns: Sequence[tuple[str, str, str]], rows: Sequence[Sequence[str]]) -> list[str]:
    """Lines of an nccl-tests style table: two header lines starting with '#' (``columns``:
    title, unit, alignment '<' or '>'), then one line per row, every column as wide as its
    widest cell."""
    widths = [max([len(title), len(unit)] + [len(row[k]) for row in rows]) for k, (title, unit, _) in
              enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(f"{cell:{align}{width}}" for cell, width, (_, _, align) in
                         zip(cells, widths, columns)).rstrip()

    return (["# " + line([title for title, _, _ in columns]), "# " + line([unit for _, unit, _ in columns])]
            + ["  " + line(row) for row in rows])


SIZE_COLUMNS = (("size", "(B)", ">"), ("count", "(elements)", ">"), ("type", "", ">"))


def size_cells(row: dict[str, Any]) -> list[str]:
    """The size, count and type cells of a row made by ``nccl_columns``."""
    count = row["count"]
    return [f"{row['size']:g}" if isinstance(row["size"], float) else str(row["size"]),
            "-" if count is None else str(count), row["type"]]


def cmd_bounds(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    coll = make_collective(args.collective, topo.n_ranks, args.root)
    if len(args.size) > 1:
        return _bounds_sweep(args, topo, coll)

    [size] = args.size
    b = lower_bound(topo, coll, size)
    data = {"topology": topo.name, **b.to_json()}
    pair = "" if b.latency_pair is None else f"rank {b.latency_pair[0]} -> rank {b.latency_pair[1]}, "
    witness = ""
    if b.witness and b.binding == "bandwidth":
        names = [topo.vertex_name(v) for v in b.witness]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        witness = f"\n  binding cut S = {{{shown}}}"
    parts = ", ".join(f"{name} {format_us(us)}" for name, us in b.parts)
    text = (f"{coll.kind} on {topo.name} ({topo.n_ranks} ranks), size {format_bytes(size)} "
            f"({SIZE_MEANING.get(coll.kind, '')})\n"
            f"  latency    {format_us(b.latency_us)}  ({pair}alpha-weighted shortest path; at least {b.steps} step{'' if b.steps == 1 else 's'})\n"
            f"  bandwidth  {format_us(b.bandwidth_us)}  ({b.method}{'' if b.exact else '; a valid bound, maybe not tight'})\n"
            f"  bound      {format_us(b.bound_us)}  ({b.binding} binds)\n"
            f"  bandwidth bounds: {parts or 'none'}{witness}")
    emit(args, data, text)
    return 0


def _bounds_sweep(args: argparse.Namespace, topo: Any, coll: Any) -> int:
    """One row per size: the bound is the least time any schedule takes, so its algbw and
    busbw are the most any schedule reaches."""
    factor = bus_factor(coll.kind, topo.n_ranks)
    rows, cells = [], []
    for size in args.size:
        b = lower_bound(topo, coll, size)
        bj = b.to_json()
        row = {**nccl_columns(size, bj["bound_us"], factor), "latency_us": bj["latency_us"],
               "bandwidth_us": bj["bandwidth_us"], "bound_us": bj["bound_us"], "binding": b.binding,
               "steps": b.steps, "method": b.method, "exact": b.exact}
        rows.append(row)
        cells.append(size_cells(row) + [fixed(row["latency_us"]), fixed(row["bandwidth_us"]), fixed(row["bound_us"]),
                                        fixed(row["algbw_GBps"]), fixed(row["busbw_GBps"]), b.binding])
    columns = SIZE_COLUMNS + (("latency", "(us)", ">"), ("bandwidth", "(us)", ">"), ("bound", "(us)", ">"),
                              ("algbw", "(GB/s)", ">"), ("busbw", "(GB/s)", ">"), ("binds", "", "<"))
    head = (f"{coll.kind} on {topo.name} ({topo.n_ranks} ranks), lower bounds at {len(rows)} sizes (size: "
            f"{SIZE_MEANING.get(coll.kind, '')}; algbw and busbw: the most any schedule reaches)")
    data = {"topology": topo.name, "collective": coll.kind, "n_ranks": topo.n_ranks, "bus_factor": factor,
            "rows": rows}
    emit(args, data, "\n".join([head] + table(columns, cells)))
    return 0


def register(sub: Any) -> None:
    p = command(sub, "bounds", "lower bounds (latency, bandwidth) on a collective's time", cmd_bounds)
    add_problem_arguments(p)
    p.add_argument("--size", required=True, type=sizes_arg, help=SIZE_HELP)
