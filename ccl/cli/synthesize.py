"""``ccl synthesize``: synthesize, verify and save a schedule."""

from __future__ import annotations

import argparse
from typing import Any

from ..units import parse_seconds, parse_size
from .common import command, emit, positive_int


def cmd_synthesize(args: argparse.Namespace) -> int:
    from .. import compiler
    from ..errors import InputError
    from ..serialize import save_algorithm

    if args.file:
        from .check import synthesize_file

        return synthesize_file(args)
    if not args.topology or not args.collective:
        raise InputError("give a description FILE.ccl, or both --topology and --collective")
    if args.emit or args.request:
        raise InputError("--emit and --request apply to a description FILE.ccl")
    request: dict[str, Any] = {}
    if args.size is not None:
        request["size"] = parse_size(args.size)
    if args.time_limit is not None:
        request["time_limit"] = parse_seconds(args.time_limit)
    if args.sketch is not None:
        request["sketch"] = compiler.load_sketch(args.sketch)
    if args.backend is not None:
        request["options"] = (("backend", args.backend),)
    problem = compiler.problem_from_options(
        args.topology, args.collective, root=args.root, solver=args.solver, chunks=args.chunks, **request,
    )
    result = compiler.synthesize(problem)
    alg = result.algorithm
    assert alg is not None
    if args.output:
        save_algorithm(alg, args.output)
    data = result.to_json()
    data["output"] = args.output
    where = f" -> {args.output}" if args.output else " (not written: no -o given)"
    text = (f"{result.status}: {alg.name}: {alg.collective} on {alg.topology.name}\n"
            f"  solver {alg.solver}, {alg.n_steps} steps, {len(alg.transfers)} transfers, "
            f"verified, {result.seconds:.3f} s{where}")
    details = result.details
    if result.gap is not None:
        text += f"\n  time limit reached: MILP gap {100 * result.gap:.1f}%"
    if "simulated_us" in details and "bound_us" in details:
        text += (f"\n  simulated {details['simulated_us']:.4g} us at {details['size']} bytes, lower bound "
                 f"{details['bound_us']:.4g} us (ratio {details['simulated_us'] / details['bound_us']:.3f})")
    emit(args, data, text)
    return 0


def register(sub: Any) -> None:
    from .check import add_emit

    syn = command(sub, "synthesize", "synthesize, verify and save a schedule", cmd_synthesize)
    syn.add_argument("file", nargs="?", help="a .ccl description: run its `synthesize` requests")
    syn.add_argument("--request", action="append", metavar="NAME", help="run only this request of FILE; repeatable")
    add_emit(syn, "solving (problem) or the summary (algorithm)")
    syn.add_argument("--topology", "-t", help="NAME, NAME:ARGS, a topology JSON file or FILE.ccl[:NAME[:ARGS]]")
    syn.add_argument("--collective", "-c", help="allgather, reducescatter, allreduce, alltoall, "
                     "broadcast, reduce, gather, scatter")
    syn.add_argument("--root", type=int, default=None, help="root rank of broadcast, reduce, gather, scatter")
    syn.add_argument("--chunks", "-k", type=positive_int, default=1, help="chunk factor (pieces per rank's part)")
    syn.add_argument("--solver", "-s", default="ring", help="solver name (see `ccl solvers`)")
    syn.add_argument("--size", help="target buffer size for cost-aware solvers (nccl-tests convention: 1KiB, 64MiB)")
    syn.add_argument("--time-limit", help="seconds the solver may take (default 60 for the MILP solvers)")
    syn.add_argument("--sketch", help="a sketch JSON file for the MILP solvers (relays, internode, switch_policy, "
                     "symmetry, chunk_partition)")
    syn.add_argument("--backend", choices=("highs", "cbc"), help="MILP solver backend (default highs)")
    syn.add_argument("-o", "--output", help="write the schedule (JSON) here (a folder when FILE has several requests)")
