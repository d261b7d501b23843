"""``ccl bounds``: lower bounds on the time of a collective on a topology."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_problem_arguments, command, emit


def size_arg(text: str) -> int:
    """A size with units (``64MiB``, ``1GB``, bytes when bare), positive."""
    from ..errors import InputError
    from ..units import parse_size

    try:
        size = parse_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"size must be at least 1 byte, got {text!r}")
    return size


def sizes_arg(text: str) -> list[int]:
    """One size or several, comma-separated."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"empty size in {text!r}")
    return [size_arg(p) for p in parts]


def cmd_bounds(args: argparse.Namespace) -> int:
    from ..compiler import load_topology, make_collective
    from ..report import SIZE_MEANING, format_bytes, format_us

    topo = load_topology(args.topology)
    coll = make_collective(args.collective, topo.n_ranks, args.root)
    from solvers.bounds import lower_bound

    b = lower_bound(topo, coll, args.size)
    data = {"topology": topo.name, **b.to_json()}
    pair = "" if b.latency_pair is None else f"rank {b.latency_pair[0]} -> rank {b.latency_pair[1]}, "
    witness = ""
    if b.witness and b.binding == "bandwidth":
        names = [topo.vertex_name(v) for v in b.witness]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        witness = f"\n  binding cut S = {{{shown}}}"
    parts = ", ".join(f"{name} {format_us(us)}" for name, us in b.parts)
    text = (f"{coll.kind} on {topo.name} ({topo.n_ranks} ranks), size {format_bytes(args.size)} "
            f"({SIZE_MEANING.get(coll.kind, '')})\n"
            f"  latency    {format_us(b.latency_us)}  ({pair}alpha-weighted shortest path; at least {b.steps} step{'' if b.steps == 1 else 's'})\n"
            f"  bandwidth  {format_us(b.bandwidth_us)}  ({b.method}{'' if b.exact else '; a valid bound, maybe not tight'})\n"
            f"  bound      {format_us(b.bound_us)}  ({b.binding} binds)\n"
            f"  bandwidth bounds: {parts or 'none'}{witness}")
    emit(args, data, text)
    return 0


def register(sub: Any) -> None:
    p = command(sub, "bounds", "lower bounds (latency, bandwidth) on a collective's time", cmd_bounds)
    add_problem_arguments(p)
    p.add_argument("--size", required=True, type=size_arg,
                   help="bytes the collective is called with, nccl-tests convention (64MiB, 1GB, 4096)")
