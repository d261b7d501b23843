"""``ccl synthesize``: synthesize, verify and save a schedule."""

from __future__ import annotations

import argparse
from typing import Any

from .. import compiler
from ..compiler.groups import synthesize_groups as run
from ..compiler.tuner import DEFAULT_SIZES, tune
from ..core.display import shown
from ..core.errors import InputError, Interrupted
from ..core.problem import Problem, Request, SynthesisResult
from ..core.schedule_set import save_set
from ..core.serialize import save_algorithm
from ..core.units import format_size, parse_size
from .bounds import size_arg
from .common import add_problem_arguments, budget_arg, command, emit, positive_int
from .exact import add_exact_arguments, collective_from_args, parse_options, progress_on_stderr
from .outputs import declare, guard, inputs_of
from .progress import Progress
from .requests import synthesize_file
from .results import interrupted_exit, set_summary, summary, tuner_progress
from .stages import STAGES, add_emit, emit_algorithms, emit_problems, emit_programs


def cmd_synthesize(args: argparse.Namespace) -> int:
    if args.file:
        return synthesize_file(args)
    if not args.topology or not args.collective:
        raise InputError("give a description FILE.ccl, or both --topology and --collective")
    guard(inputs_of(args), files=[("-o", args.output)])  # one schedule (or set): -o is a file, not a folder
    if args.request:
        raise InputError("--request applies to a description FILE.ccl")
    if args.emit == "ast":
        raise InputError("--emit ast prints the syntax tree of a description FILE.ccl")
    topo = compiler.load_topology(args.topology)
    if args.groups is not None:
        return synthesize_groups(args, topo)
    if args.solver == "auto":
        return synthesize_auto(args, topo)
    for flag in ("sizes", "time_budget", "solvers", "target", "deadline"):
        if getattr(args, flag) is not None:
            raise InputError(f"--{flag.replace('_', '-')} applies to --solver auto (the tuner), not {args.solver!r}")
    options = dict(parse_options(args.option))
    if args.backend is not None:
        options["backend"] = args.backend
    request = Request(solver=args.solver, chunks=args.chunks, steps=args.steps, rounds=args.rounds,
                      size=parse_size(args.size) if args.size is not None else None,
                      time_limit=args.time_limit,
                      sketch=compiler.load_sketch(args.sketch) if args.sketch is not None else None,
                      options=tuple(options.items()))
    problem = Problem(topo, collective_from_args(args, topo.n_ranks), request)
    if args.emit == "problem":
        return emit_problems(args, [(f"{problem.collective.kind}-{topo.name}-{request.solver}", "command line",
                                     problem)])
    interrupted = None
    try:
        with progress_on_stderr():
            result = compiler.synthesize(problem)
    except Interrupted as exc:  # Ctrl-C with a verified schedule in hand: save it, exit 130
        if not isinstance(exc.best, SynthesisResult):
            raise
        interrupted, result = exc, exc.best
    alg = result.algorithm
    if args.emit == "algorithm":
        return emit_algorithms(args, [alg]) if interrupted is None else _after_interrupt(args, emit_algorithms, [alg])
    if args.emit == "program":
        return emit_programs(args, [alg]) if interrupted is None else _after_interrupt(args, emit_programs, [alg])
    if args.output:
        save_algorithm(alg, args.output)
    data = result.to_json()
    data["output"] = args.output
    where = f" -> {shown(args.output)}" if args.output else " (not written: no -o given)"
    text = summary(result, alg.name, where)
    emit(args, data, text)
    if interrupted is not None:
        return interrupted_exit(args.output, "schedule")
    return 0


def _after_interrupt(args: argparse.Namespace, show: Any, algs: list) -> int:
    show(args, algs)
    return interrupted_exit(None, "schedule")


def synthesize_groups(args: argparse.Namespace, topo: Any) -> int:
    """``--groups SPEC``: the collective on every group at once (``ccl.compiler.groups``)."""
    if args.size is None:
        raise InputError("--groups needs --size (the message size every group calls the collective with)")
    for flag in ("sizes", "solvers", "emit", "steps", "rounds", "sketch", "time_limit"):
        if getattr(args, flag, None) is not None:
            raise InputError(f"--{flag.replace('_', '-')} does not apply with --groups")
    size = parse_size(args.size)
    budget = args.time_budget
    with Progress() as progress:
        result = run(topo, args.collective, args.groups, size=size, solver=args.solver, chunks=args.chunks,
                     root=args.root, time_budget=budget, progress=progress)
    if args.output:
        save_algorithm(result.algorithm, args.output)
    data = result.to_json()
    data["output"] = args.output
    g = result.groups
    lines = [f"{result.kind} on {len(g)} groups ({g.spec}: {', '.join(str(list(m)) for m in g.members[:4])}"
             f"{', ...' if len(g) > 4 else ''}) of {topo.name}, {format_size(size)}, all at once",
             f"  solver      {', '.join(result.solvers)} on each group's machine, its shared links at a fair share",
             f"  alone       {max(result.alone_us):.4g} us (slowest group with the links to itself)",
             f"  together    {result.together_us:.4g} us (every group at once, simulated; "
             f"{result.together_us / max(result.alone_us):.3f}x alone)",
             f"  bound       {result.bound_us:.4g} us ({result.bound_why}); together / bound = "
             f"{result.together_us / result.bound_us:.3f}" if result.bound_us > 0 else "  bound       -",
             f"  verified    every group's result, in one schedule of the whole machine "
             f"({len(result.algorithm.transfers)} transfers)"
             + (f" -> {shown(args.output)}" if args.output else " (not written: no -o given)")]
    emit(args, data, "\n".join(lines))
    return 0


def synthesize_auto(args: argparse.Namespace, topo: Any) -> int:
    """``--solver auto``: the tuner (``ccl.compiler.tuner``): every applicable solver within
    the budget, simulated over the sizes, the best per size range saved as a schedule set."""
    for flag in ("steps", "rounds", "sketch", "roots"):
        if getattr(args, flag, None) is not None:
            raise InputError(f"--{flag} applies to one solver: name it with --solver (auto runs them all)")
    if args.emit is not None:
        raise InputError(f"--emit {args.emit} applies to one solver: name it with --solver (auto writes a schedule set)")
    if args.size is not None and args.sizes is not None:
        raise InputError("give --size (one size) or --sizes (a sweep), not both")
    sizes = args.sizes if args.sizes is not None else (args.size if args.size is not None else DEFAULT_SIZES)
    budget = args.time_budget
    if args.time_limit is not None:
        raise InputError("--time-limit applies to one solver; with --solver auto give --time-budget (all solvers)")
    names = None
    if args.solvers is not None:
        names = [x.strip() for x in args.solvers.split(",") if x.strip()]
        if not names:
            raise InputError(f"no solver named in --solvers {args.solvers!r}")
    options = parse_options(args.option)
    if args.backend is not None:
        options = (*options, ("backend", args.backend))

    interrupted = False
    try:
        result = tune(topo, args.collective, root=args.root, sizes=sizes, solvers=names, chunks=args.chunks,
                      time_budget=budget, channels=args.channels, fuse=not args.no_fuse, options=options,
                      progress=tuner_progress(), cache=not args.no_cache, target=args.target,
                      deadline=args.deadline, native=not args.no_native)
    except Interrupted as exc:  # Ctrl-C: the set of the schedules timed so far (verified), saved
        if exc.best is None:
            raise
        result, interrupted = exc.best, True
    sset = result.schedule_set
    if args.output:
        save_set(sset, args.output)
    data = {**result.to_json(), "output": args.output}
    where = f" -> {shown(args.output)}" if args.output else " (not written: no -o given)"
    text = set_summary(result, where)
    if interrupted:
        data["status"] = "interrupted"
        text = "interrupted" + text[text.index(":"):] if text[:3] in ("ok:", "inc") else text
    emit(args, data, text)
    if interrupted:
        return interrupted_exit(args.output, "schedule set")
    return 0


def register(sub: Any) -> None:
    syn = command(sub, "synthesize", "synthesize, verify and save a schedule", cmd_synthesize)
    syn.add_argument("file", nargs="?", help="a .ccl description: run its `synthesize` requests")
    syn.add_argument("--request", action="append", metavar="NAME", help="run only this request of FILE; repeatable")
    syn.add_argument("--groups", metavar="SPEC",
                     help="run the collective on every group at once: tp (each node's ranks), dp (one local index "
                          "across nodes), blocks:K, stride:K, or rank lists 0-3;4-7 (needs --size; the schedule "
                          "written covers every group)")
    add_emit(syn, STAGES, "solving (ast, problem) or the summary (algorithm, program)")
    add_problem_arguments(syn, required=False)
    syn.add_argument("--chunks", "-k", type=positive_int, default=1, help="chunk factor (pieces per rank's part)")
    syn.add_argument("--solver", "-s", default="auto",
                     help="solver name (see `ccl solvers`), or auto (default): run the applicable solvers, simulate "
                          "each over --sizes and save the best per size range as a schedule set")
    syn.add_argument("--size", type=_size_text, help="target buffer size for cost-aware solvers (nccl-tests convention: 1KiB, 64MiB); "
                     "with auto: tune for this one size")
    syn.add_argument("--sizes", help="auto: the sizes to tune over (default 1KiB..1GiB: powers of two; also lists "
                     "such as 4MiB,64MiB)")
    syn.add_argument("--time-budget", type=budget_arg,
                     help="auto: the work the solvers beyond the templates may cost, in seconds of the reference "
                          "machine (counted from what they compute, not the clock, so the same command gives the "
                          "same set on any machine; default 30, or a second per rank above 30 ranks; templates "
                          "always run, slower solvers are skipped once it is spent)")
    syn.add_argument("--deadline", type=budget_arg,
                     help="auto: a wall-clock stop in seconds (default none); candidates it skips or cuts short "
                          "make the set incomplete: it then depends on the machine's speed and is not cached")
    syn.add_argument("--no-native", action="store_true",
                     help="auto: every size to a schedule of ours (by default a size where NCCL's own pick, under "
                          "the calibrated model, beats every schedule is left to NCCL: an entry with no file)")
    syn.add_argument("--target", choices=("msccl", "rccl", "torch"),
                     help="auto: the runtime the set is for; with msccl or rccl no schedule the MSCCL export "
                          "cannot fit in that runtime's limits is chosen (the set records the target)")
    syn.add_argument("--solvers", help="auto: only these solvers (comma-separated; smt, milp and teccl run only when "
                     "named here)")
    syn.add_argument("--no-cache", action="store_true",
                     help="auto: compute again instead of answering from the result cache (~/.cache/ccl, "
                          "CCL_CACHE_DIR)")
    syn.add_argument("--sketch", help="a sketch JSON file for the MILP solvers (relays, internode, switch_policy, "
                     "symmetry, chunk_partition)")
    syn.add_argument("--backend", choices=("highs", "cbc"), help="MILP solver backend (default highs)")
    syn.add_argument("-o", "--output", help="write the schedule (JSON) here (a folder when FILE has several requests)")
    syn.add_argument("--steps", type=positive_int, help="exact solvers: number of steps S")
    syn.add_argument("--rounds", type=positive_int, help="exact solvers: at most R rounds in all (R >= S)")
    add_exact_arguments(syn)
    declare(syn, inputs=("file", "topology", "sketch"), either=("output",))


def _size_text(text: str) -> str:
    """--size as given (the tuner reads the text), checked now: a bad size is refused before
    any work (``bounds.size_arg``)."""
    size_arg(text)
    return text
