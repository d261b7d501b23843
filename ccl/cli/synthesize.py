"""``ccl synthesize``: synthesize, verify and save a schedule."""

from __future__ import annotations

import argparse
from typing import Any

from ..units import parse_seconds, parse_size
from .common import add_problem_arguments, command, emit, positive_int
from .pareto import add_exact_arguments
from .stages import STAGES, add_emit, emit_algorithms, emit_problems, emit_programs


def cmd_synthesize(args: argparse.Namespace) -> int:
    from .. import compiler
    from ..errors import InputError
    from ..problem import Problem, Request
    from ..serialize import save_algorithm
    from .pareto import collective_from_args, parse_options, progress_on_stderr

    if args.file:
        from .check import synthesize_file

        return synthesize_file(args)
    if not args.topology or not args.collective:
        raise InputError("give a description FILE.ccl, or both --topology and --collective")
    if args.request:
        raise InputError("--request applies to a description FILE.ccl")
    if args.emit == "ast":
        raise InputError("--emit ast prints the syntax tree of a description FILE.ccl")
    topo = compiler.load_topology(args.topology)
    options = dict(parse_options(args.option))
    if args.backend is not None:
        options["backend"] = args.backend
    request = Request(solver=args.solver, chunks=args.chunks, steps=args.steps, rounds=args.rounds,
                      size=parse_size(args.size) if args.size is not None else None,
                      time_limit=parse_seconds(args.time_limit) if args.time_limit else None,
                      sketch=compiler.load_sketch(args.sketch) if args.sketch is not None else None,
                      options=tuple(options.items()))
    problem = Problem(topo, collective_from_args(args, topo.n_ranks), request)
    if args.emit == "problem":
        return emit_problems(args, [(f"{problem.collective.kind}-{topo.name}-{request.solver}", "command line",
                                     problem)])
    with progress_on_stderr():
        result = compiler.synthesize(problem)
    alg = result.algorithm
    if args.emit == "algorithm":
        return emit_algorithms(args, [alg])
    if args.emit == "program":
        return emit_programs(args, [alg])
    if args.output:
        save_algorithm(alg, args.output)
    data = result.to_json()
    data["output"] = args.output
    where = f" -> {args.output}" if args.output else " (not written: no -o given)"
    text = summary(result, alg.name, where)
    emit(args, data, text)
    return 0


def summary(result: Any, label: str, where: str) -> str:
    """The readable lines for one synthesis: status, size of the schedule, and what the solver
    reported (gap at a time limit, a template chosen instead, simulated time against the bound)."""
    alg = result.algorithm
    rounds = f"{alg.total_rounds} rounds, " if alg.rounds is not None else ""
    text = (f"{result.status}: {label}: {alg.collective} on {alg.topology.name}\n"
            f"  solver {alg.solver}, {alg.n_steps} steps, {rounds}{len(alg.transfers)} transfers, "
            f"verified, {result.seconds:.3f} s{where}")
    details = result.details
    if result.gap is not None:
        text += f"\n  time limit reached: gap {100 * result.gap:.1f}% to the solver's own bound"
    if details.get("schedule", "MILP pipeline") != "MILP pipeline":
        text += f"\n  schedule: the {details['schedule']}'s, which simulates faster than the MILP pipeline's"
    if "simulated_us" in details and "bound_us" in details:
        text += (f"\n  simulated {details['simulated_us']:.4g} us at {details['size']} bytes, lower bound "
                 f"{details['bound_us']:.4g} us (ratio {details['simulated_us'] / details['bound_us']:.3f})")
    return text


def register(sub: Any) -> None:
    syn = command(sub, "synthesize", "synthesize, verify and save a schedule", cmd_synthesize)
    syn.add_argument("file", nargs="?", help="a .ccl description: run its `synthesize` requests")
    syn.add_argument("--request", action="append", metavar="NAME", help="run only this request of FILE; repeatable")
    add_emit(syn, STAGES, "solving (ast, problem) or the summary (algorithm, program)")
    add_problem_arguments(syn, required=False)
    syn.add_argument("--chunks", "-k", type=positive_int, default=1, help="chunk factor (pieces per rank's part)")
    syn.add_argument("--solver", "-s", default="ring", help="solver name (see `ccl solvers`)")
    syn.add_argument("--size", help="target buffer size for cost-aware solvers (nccl-tests convention: 1KiB, 64MiB)")
    syn.add_argument("--sketch", help="a sketch JSON file for the MILP solvers (relays, internode, switch_policy, "
                     "symmetry, chunk_partition)")
    syn.add_argument("--backend", choices=("highs", "cbc"), help="MILP solver backend (default highs)")
    syn.add_argument("-o", "--output", help="write the schedule (JSON) here (a folder when FILE has several requests)")
    syn.add_argument("--steps", type=positive_int, help="exact solvers: number of steps S")
    syn.add_argument("--rounds", type=positive_int, help="exact solvers: at most R rounds in all (R >= S)")
    add_exact_arguments(syn)
