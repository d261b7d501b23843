"""``ccl check FILE.ccl``: parse, lower and verify a description; ``ccl synthesize FILE.ccl``
runs its requests (the file half of ``ccl synthesize`` lives here).

Both take ``--emit ast|problem|algorithm|program`` (``stages``) to print a stage instead of the
summary: ``check`` prints the file's hand-written algorithms and their Programs, ``synthesize``
the schedules it synthesizes and theirs.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from .common import command, emit
from .outputs import declare, guard, inputs_of
from .stages import (
    STAGES,
    add_emit,
    emit_algorithms,
    emit_ast,
    emit_problems,
    emit_programs,
    emit_topologies,
)


def _load(path: str):
    from .. import compiler

    return compiler.describe(path)


def _read_files(args: argparse.Namespace, module: Any) -> list[str]:
    """The files the command reads: its input options' and every file the description
    imports (an output must be none of them)."""
    loaded = getattr(getattr(module, "loader", None), "modules", {}).values()
    return inputs_of(args) + [str(m.path) for m in loaded if getattr(m, "path", None) is not None]


def _default_topologies(module: Any) -> list[tuple[str, Any]]:
    """(name, Topology or None) for the file's topologies; None when parameters lack defaults."""
    out = []
    for name, definition in module.topologies().items():
        if all(p.default is not None for p in definition.params):
            out.append((name, module.topology(name)))
        else:
            out.append((name, None))
    return out


def _emit_problems(args: argparse.Namespace, module: Any, requests: list) -> int:
    if requests:
        return emit_problems(args, [(r.name, str(r.span), r.problem) for r in requests])
    return emit_topologies(args, [t for _, t in _default_topologies(module) if t is not None])


def cmd_check(args: argparse.Namespace) -> int:
    import dsl
    from solvers import SOLVERS

    from ..core.errors import InputError
    from ..core.serialize import save_algorithm
    from ..core.verify import VerificationError

    if args.emit == "ast":
        return emit_ast(args, args.file)
    module = _load(args.file)
    if args.output:
        guard(_read_files(args, module), files=[("-o", args.output)])
    topologies = _default_topologies(module)
    requests = module.requests()
    items = module.algorithms()
    if args.algorithm:
        names = [item.name for item in items] + [d for d in module.algorithm_definitions()]
        items = [item for item in items if item.name in args.algorithm or item.name.split("(")[0] in args.algorithm]
        if not items:
            raise InputError(f"{args.file} has no algorithm {', '.join(args.algorithm)} "
                             f"(algorithms: {', '.join(names) or 'none'})")
    rows = []
    for item in items:
        result = dsl.verify_algorithm(item)
        try:
            dsl.verify_algorithm(item, in_place=True)
            in_place = True
        except VerificationError:
            in_place = False
        alg = item.algorithm
        rows.append({"name": alg.name, "line": item.span.line, "topology": alg.topology.name,
                     "collective": alg.collective.kind, "ranks": alg.collective.n_ranks,
                     "chunks": alg.collective.chunk_factor, "steps": result.steps, "transfers": result.transfers,
                     "verified": True, "in_place_ok": in_place})
    if args.output:
        if len(items) != 1:
            raise InputError(f"-o writes one schedule, but {args.file} has {len(items)} algorithms; "
                             "pick one with --algorithm NAME")
        save_algorithm(items[0].algorithm, args.output)
    if args.emit == "problem":
        return _emit_problems(args, module, requests)
    if args.emit in ("algorithm", "program") and not items:
        raise InputError(f"{args.file} has no hand-written algorithms to print (`ccl synthesize {args.file} "
                         f"--emit {args.emit}` prints the schedules of its requests)")
    if args.emit == "algorithm":
        return emit_algorithms(args, [item.algorithm for item in items])
    if args.emit == "program":
        return emit_programs(args, [item.algorithm for item in items])
    topo_rows = []
    for name, topo in topologies:
        definition = module.topologies()[name]
        row: dict[str, Any] = {"name": name, "params": [p.name for p in definition.params],
                               "line": definition.node.span.line}
        if topo is not None:
            row.update(lowered=topo.name, ranks=topo.n_ranks, nodes=topo.n_nodes, switches=len(topo.switches),
                       links=len(topo.links), limits=len(topo.limits))
        topo_rows.append(row)
    req_rows = []
    for r in requests:
        p = r.problem
        req_rows.append({"name": r.name, "line": r.span.line, "collective": p.collective.kind,
                         "topology": p.topology.name, "ranks": p.topology.n_ranks, "solver": p.request.solver,
                         "solver_available": p.request.solver in SOLVERS, "chunks": p.request.chunks})
    checked = {item.name.split("(")[0] for item in module.algorithms()}
    unchecked = [name for name in module.algorithm_definitions() if name not in checked]
    collectives = [name for name, d in module.definitions.items() if d.kind == "collective"]
    fabrics = [name for name, d in module.definitions.items() if d.kind == "fabric"]
    data = {"ok": True, "file": args.file, "topologies": topo_rows, "collectives": collectives,
            "fabrics": fabrics, "algorithms": rows, "unchecked_algorithms": unchecked, "requests": req_rows,
            "output": args.output}
    text = _summary(args.file, topo_rows, collectives, fabrics, rows, req_rows, args.output)
    if unchecked:
        text += (f"\n  not checked (parameters without defaults; add `verify NAME(args)`): {', '.join(unchecked)}")
    emit(args, data, text)
    return 0


def _summary(path: str, topos: list, collectives: list, fabrics: list, algs: list, reqs: list,
             output: str | None) -> str:
    lines = [f"ok: {path}"]
    if topos:
        lines.append(f"  topologies ({len(topos)}):")
        for t in topos:
            params = f"({', '.join(t['params'])})" if t["params"] else ""
            if "ranks" in t:
                lines.append(f"    {t['name']}{params}: {t['lowered']}, {t['ranks']} ranks on {t['nodes']} node(s), "
                             f"{t['switches']} switch vertices, {t['links']} links")
            else:
                lines.append(f"    {t['name']}{params}: needs arguments (try --topology {path}:{t['name']}:...)")
    if collectives:
        lines.append(f"  collectives: {', '.join(collectives)}")
    if fabrics:
        lines.append(f"  fabrics: {', '.join(fabrics)}")
    if algs:
        lines.append(f"  algorithms ({len(algs)}), verified:")
        for a in algs:
            place = "also in place" if a["in_place_ok"] else "out of place only"
            lines.append(f"    {a['name']}: {a['collective']} on {a['topology']}, {_count(a['steps'], 'step')}, "
                         f"{_count(a['transfers'], 'transfer')}, {place}")
    if reqs:
        lines.append(f"  requests ({len(reqs)}):")
        for r in reqs:
            note = "" if r["solver_available"] else " (solver not available in this installation)"
            lines.append(f"    {r['name']}: {r['collective']} on {r['topology']} with {r['solver']}{note}")
    if not (topos or collectives or fabrics or algs or reqs):
        lines.append("  (defines nothing)")
    if output:
        lines.append(f"  schedule written to {output}")
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def synthesize_file(args: argparse.Namespace) -> int:
    """``ccl synthesize FILE.ccl``: run the file's requests (all, or those named by --request),
    verify every schedule, and write them only when all succeed."""
    from .. import compiler
    from ..core.errors import InputError, Interrupted
    from .synthesize import summary

    for flag, default in (("topology", None), ("collective", None), ("root", None), ("chunks", 1), ("solver", "auto"),
                          ("sizes", None), ("time_budget", None), ("solvers", None), ("no_cache", False)):
        if getattr(args, flag, default) != default:
            raise InputError(f"--{flag} does not combine with a description file: set it in {args.file}")
    if args.emit == "ast":
        return emit_ast(args, args.file)
    module = _load(args.file)
    requests = module.requests()
    if args.request:
        known = [r.name for r in requests]
        missing = [n for n in args.request if n not in known]
        if missing:
            raise InputError(f"{args.file} has no request {missing[0]!r} (requests: {', '.join(known) or 'none'})")
        requests = [r for r in requests if r.name in args.request]
    if not requests:
        raise InputError(f"{args.file} has no `synthesize` requests (or give --topology and --collective)")
    if args.emit == "problem":
        return _emit_problems(args, module, requests)
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
        guard(_read_files(args, module), files=[(f"request {r.name!r}" if len(requests) > 1 else "-o", target)
                                                for r, target in zip(requests, outputs)],
              hint="give another folder" if len(requests) > 1 else "give another name")
    results: list[Any] = []
    from .progress import Progress

    bar = Progress()
    stopped = None  # Ctrl-C: the message, once the requests stop (see below)
    kept_best = False  # the interrupted request's best schedule is the last result
    try:
        for k, request in enumerate(requests):
            bar.update(f"[{k + 1}/{len(requests)}] {request.name}: {request.problem.request.solver} ...",
                       k / len(requests))
            if request.groups is not None:
                from ..compiler.groups import synthesize_groups

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
        from ..core import interrupt

        interrupt.acknowledge()
        stopped = f"request {requests[len(results)].name!r} stopped by Ctrl-C"
        best = getattr(exc, "best", None)
        if best is not None and (hasattr(best, "algorithm") or hasattr(best, "schedule_set")):
            results.append(best)
            kept_best = True
    if stopped is not None and not results:
        raise Interrupted(f"{stopped}, before any schedule was found: nothing written")

    def stop_exit(kept: str) -> int:
        import sys

        from ..core.errors import EXIT_INTERRUPTED

        which = ("the finished ones and the interrupted one's best" if kept_best
                 else "the finished ones; the interrupted one had none yet")
        print(f"ccl: interrupted: {stopped}; the verified schedules of {len(results)} of {len(requests)} "
              f"request(s) ({which}) {kept}", file=sys.stderr)
        return EXIT_INTERRUPTED

    if args.emit == "algorithm":
        code = emit_algorithms(args, [r.algorithm for r in results])
        return code if stopped is None else stop_exit("were printed")
    if args.emit == "program":
        code = emit_programs(args, [r.algorithm for r in results])
        return code if stopped is None else stop_exit("were printed")
    from ..core.schedule_set import set_to_json
    from ..core.serialize import algorithm_to_json, dumps, write_all
    from .synthesize import set_summary

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
        return stop_exit(f"were written to {args.output}" if args.output else "were not written: no -o given")
    return 0


def _tune_request(request: Any) -> Any:
    """A request `with auto`: the tuner over its `size` (one size) or the default sweep, its
    `time_limit` as the budget, its `chunks` and solver options."""
    from ..compiler.tuner import DEFAULT_SIZES, tune
    from .synthesize import tuner_progress

    req, problem = request.problem.request, request.problem
    return tune(problem.topology, problem.collective.kind, root=problem.collective.root,
                sizes=[req.size] if req.size else DEFAULT_SIZES, chunks=req.chunks,
                time_budget=req.time_limit or None, options=req.options, progress=tuner_progress())


def register(sub: Any) -> None:
    chk = command(sub, "check", "parse and lower a description file, verify its hand-written algorithms", cmd_check)
    chk.add_argument("file", help="a .ccl description")
    add_emit(chk, STAGES, "the summary")
    chk.add_argument("--algorithm", action="append", metavar="NAME",
                     help="check only this algorithm (NAME or NAME(args) as the summary shows it); repeatable")
    chk.add_argument("-o", "--output", help="write the (single or selected) hand-written schedule here (JSON)")
    declare(chk, inputs=("file",), files=("output",))
