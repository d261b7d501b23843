"""``ccl synthesize FILE.ccl``: every request of a description file, each synthesized (or tuned),
verified and written."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from .. import compiler
from ..compiler.groups import synthesize_groups
from ..compiler.tuner import DEFAULT_SIZES, tune
from ..core import interrupt
from ..core.display import shown
from ..core.errors import EXIT_INTERRUPTED, InputError, Interrupted
from ..core.schedule_set import set_to_json
from ..core.serialize import algorithm_to_json, dumps, write_all
from .common import emit
from .describe import emit_request_problems, load_description, read_files
from .outputs import guard
from .progress import Progress
from .results import set_summary, summary, tuner_progress
from .stages import (
    emit_algorithms,
    emit_ast,
    emit_programs,
)


def synthesize_file(args: argparse.Namespace) -> int:
    """``ccl synthesize FILE.ccl``: run the file's requests (all, or those named by --request),
    verify every schedule, and write them only when all succeed."""
    for flag, default in (("topology", None), ("collective", None), ("root", None), ("chunks", 1), ("solver", "auto"),
                          ("sizes", None), ("time_budget", None), ("solvers", None), ("no_cache", False)):
        if getattr(args, flag, default) != default:
            raise InputError(f"--{flag} does not combine with a description file: set it in {shown(args.file)}")
    if args.emit == "ast":
        return emit_ast(args, args.file)
    module = load_description(args.file)
    requests = module.requests()
    if args.request:
        known = [r.name for r in requests]
        missing = [n for n in args.request if n not in known]
        if missing:
            raise InputError(f"{shown(args.file)} has no request {missing[0]!r} (requests: {', '.join(known) or 'none'})")
        requests = [r for r in requests if r.name in args.request]
    if not requests:
        raise InputError(f"{shown(args.file)} has no `synthesize` requests (or give --topology and --collective)")
    if args.emit == "problem":
        return emit_request_problems(args, module, requests)
    if args.output and len(requests) > 1 and not os.path.isdir(args.output):
        raise InputError(f"{len(requests)} requests write {len(requests)} schedules: -o must be an existing folder")
    tuned = [r.name for r in requests if r.problem.request.solver == "auto"]
    if tuned and args.emit is not None:
        raise InputError(f"request {tuned[0]!r} uses the tuner (auto), which writes a schedule set: --emit "
                         f"{args.emit} applies to requests naming one solver")
    outputs: list[str | None] = [None] * len(requests)
    if args.output and args.emit is None:
        outputs = [os.path.join(args.output, f"{re.sub(r'[^A-Za-z0-9_.()=,+-]', '_', r.name)}.json")
                   if len(requests) > 1 else args.output for r in requests]
        # before any solver runs: no schedule may overwrite an input or another request's file
        guard(read_files(args, module), files=[(f"request {r.name!r}" if len(requests) > 1 else "-o", target)
                                                for r, target in zip(requests, outputs)],
              hint="give another folder" if len(requests) > 1 else "give another name")
    results: list[Any] = []

    bar = Progress()
    stopped = None  # Ctrl-C: the message, once the requests stop (see below)
    kept_best = False  # the interrupted request's best schedule is the last result
    try:
        for k, request in enumerate(requests):
            bar.update(f"[{k + 1}/{len(requests)}] {request.name}: {request.problem.request.solver} ...",
                       k / len(requests))
            if request.groups is not None:
                req = request.problem.request
                results.append(synthesize_groups(request.problem.topology, request.problem.collective.kind,
                                                 request.groups, size=req.size, solver=req.solver, chunks=req.chunks,
                                                 root=request.problem.collective.root, time_budget=req.time_limit))
            elif request.problem.request.solver == "auto":
                results.append(_tune_request(request))
            else:
                results.append(compiler.synthesize(request.problem))
    except (Interrupted, KeyboardInterrupt) as exc:
        # Ctrl-C: the requests finished and the interrupted one's best verified schedule (if
        # any) are written together (all of those or none); the rest are reported not run
        interrupt.acknowledge()
        stopped = f"request {requests[len(results)].name!r} stopped by Ctrl-C"
        best = getattr(exc, "best", None)
        if best is not None and (hasattr(best, "algorithm") or hasattr(best, "schedule_set")):
            results.append(best)
            kept_best = True
    if stopped is not None and not results:
        raise Interrupted(f"{stopped}, before any schedule was found: nothing written")

    def stop_exit(kept: str) -> int:
        which = ("the finished ones and the interrupted one's best" if kept_best
                 else "the finished ones; the interrupted one had none yet")
        print(f"ccl: interrupted: {shown(stopped)}; the verified schedules of {len(results)} of {len(requests)} "
              f"request(s) ({which}) {shown(kept)}", file=sys.stderr)
        return EXIT_INTERRUPTED

    if args.emit == "algorithm":
        code = emit_algorithms(args, [r.algorithm for r in results])
        return code if stopped is None else stop_exit("were printed")
    if args.emit == "program":
        code = emit_programs(args, [r.algorithm for r in results])
        return code if stopped is None else stop_exit("were printed")

    def writer(result: Any) -> Any:
        def write(fh: Any) -> None:
            value = (set_to_json(result.schedule_set) if hasattr(result, "schedule_set")
                     else algorithm_to_json(result.algorithm))
            fh.write(dumps(value) + "\n")
        return write

    write_all([(target, writer(result)) for result, target in zip(results, outputs) if target])  # all or none
    rows = [{"request": request.name, **result.to_json(), "output": target}
            for request, result, target in zip(requests, results, outputs)]
    if kept_best:  # the interrupted request's best (a tuned set's own status says "ok")
        rows[-1]["status"] = "interrupted"
    rows += [{"request": request.name, "status": "not run", "output": None}  # after Ctrl-C
             for request in requests[len(results):]]
    lines = []
    for request, result, target in zip(requests, results, outputs):
        where = f" -> {target}" if target else ""
        if hasattr(result, "schedule_set"):
            lines.append(f"{request.name}: " + set_summary(result, where))
        elif hasattr(result, "together_us"):
            lines.append(f"{request.name}: {result.kind} on {len(result.groups)} groups at once: "
                         f"{result.together_us:.4g} us together, {max(result.alone_us):.4g} us alone, bound "
                         f"{result.bound_us:.4g} us; every group verified{where}")
        else:
            lines.append(summary(result, request.name, where))
    lines.extend(f"{request.name}: not run (stopped by Ctrl-C)" for request in requests[len(results):])
    if not args.output:
        lines.append("(not written: no -o given)")
    emit(args, {"status": "ok" if stopped is None else "interrupted", "file": args.file, "requests": rows},
         "\n".join(lines))
    if stopped is not None:
        return stop_exit(f"were written to {shown(args.output)}" if args.output else "were not written: no -o given")
    return 0


def _tune_request(request: Any) -> Any:
    """A request `with auto`: the tuner over its `size` (one size) or the default sweep, its
    `time_limit` as the budget, its `chunks` and solver options."""
    req, problem = request.problem.request, request.problem
    return tune(problem.topology, problem.collective.kind, root=problem.collective.root,
                sizes=[req.size] if req.size else DEFAULT_SIZES, chunks=req.chunks,
                time_budget=req.time_limit or None, options=req.options, progress=tuner_progress())
