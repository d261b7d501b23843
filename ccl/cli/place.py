"""``ccl place``: rank the placements of a parallel plan's axes on a cluster (P^2 class)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import compiler
from ..compiler.place import Model, model_shape, parse_plan, parse_traffic, place
from ..core.errors import InputError
from .common import command, emit, positive_int
from .progress import Progress


def cmd_place(args: argparse.Namespace) -> int:
    topo = compiler.load_topology(args.topology)
    axes = parse_plan(args.plan)
    traffic = parse_traffic(args.comm, axes) if args.comm else {}
    if args.model is not None:
        if args.layers is not None or args.hidden is not None:
            raise InputError("give --model, or --layers and --hidden, not both")
        args.layers, args.hidden = model_shape(args.model)
        args.tokens = args.tokens or 4096
    model_args = (args.layers, args.hidden, args.tokens)
    if any(x is not None for x in model_args):
        if None in model_args:
            raise InputError("a model needs --layers, --hidden and --tokens (per micro-batch)")
        derived = Model(args.layers, args.hidden, args.tokens, args.microbatches).traffic(axes)
        traffic = {**derived, **traffic}  # --comm overrides what the model gives an axis
    with Progress() as progress:
        ranked = place(topo, axes, traffic, solver=args.solver, progress=progress, quick=not args.tuned)
    shown = ranked if args.all else ranked[: args.top]
    best = ranked[0].total_us
    lines = [f"placements of {' x '.join(f'{a} {s}' for a, s in axes.items())} on {topo.name} "
             f"({topo.n_ranks} ranks, {max(1, topo.n_nodes)} node(s)); communication per step:",
             *([f"  (model: {args.layers} layers, hidden {args.hidden}, {args.tokens} tokens per micro-batch, "
                f"{args.microbatches} micro-batches)"] if args.layers else []),
             *(f"  {a}: {t.text()}" for a, t in traffic.items()),
             f"{'#':>3} {'comm per step':>14} {'vs best':>8}  placement (axis and its share)"]
    for i, p in enumerate(shown, 1):
        ratio = p.total_us / best if best > 0 else 1.0
        lines.append(f"{i:>3} {p.total_us / 1e3:>11.4g} ms {ratio:>7.3f}x  {p.label()}")
        lines.extend(f"        {reason}" for reason in p.reasons())
    if len(shown) < len(ranked):
        lines.append(f"({len(ranked) - len(shown)} more: --all)")
    data = {"topology": topo.name, "plan": axes,
            "traffic": {a: {"collective": t.kind, "size": t.size, "count": t.count} for a, t in traffic.items()},
            "placements": [p.to_json() for p in ranked]}
    emit(args, data, "\n".join(lines))
    return 0


def register(sub: Any) -> None:
    p = command(sub, "place", "rank the placements of a parallel plan's axes on a cluster (P^2)", cmd_place)
    p.description = ("enumerate how the axes of a parallel plan (tensor, pipeline, data, ...) split between the "
                     "inside of a node and across nodes, synthesize each axis's collective on its groups (all "
                     "groups at once, sharing links), predict the communication per step by simulation, and "
                     "rank the placements with the reasons")
    p.add_argument("--topology", "-t", required=True, help="the cluster (e.g. dgx-h100:16)")
    p.add_argument("--plan", required=True, help="axes and sizes, first varying fastest: tp=8,pp=2,dp=8")
    p.add_argument("--comm", help="per axis, what it communicates per step: AXIS=KIND:SIZE[*COUNT], comma-separated; "
                                  "KIND allreduce, allgather, reducescatter, alltoall or sendrecv (pipeline stages)")
    p.add_argument("--model", help="model: parameter count (7B, 13B, 70B, 175B or any, e.g. 6.7e9): its layers and "
                                   "hidden size (published shapes, else 128 hidden per layer); --tokens defaults "
                                   "to 4096")
    p.add_argument("--layers", type=positive_int, help="model: transformer layers (derives tp, pp and dp traffic)")
    p.add_argument("--hidden", type=positive_int, help="model: hidden size")
    p.add_argument("--tokens", type=positive_int, help="model: tokens per micro-batch (sequence x micro-batch size)")
    p.add_argument("--microbatches", type=positive_int, default=8,
                   help="model: micro-batches per step (gradient accumulation; default 8)")
    p.add_argument("--solver", "-s", default="packing",
                   help="solver for each axis's groups (default packing; ring where packing cannot)")
    p.add_argument("--tuned", action="store_true",
                   help="let the solver search its pipeline at each size (slower; default: its best-rate plan)")
    p.add_argument("--top", type=positive_int, default=5, help="placements to show (default 5)")
    p.add_argument("--all", action="store_true", help="show every placement")
