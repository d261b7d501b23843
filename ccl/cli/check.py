"""``ccl check FILE.ccl``: parse, lower and verify a description (``ccl synthesize FILE.ccl``,
which runs its requests, is ``requests``).

Both take ``--emit ast|problem|algorithm|program`` (``stages``) to print a stage instead of the
summary: ``check`` prints the file's hand-written algorithms and their Programs, ``synthesize``
the schedules it synthesizes and theirs.
"""

from __future__ import annotations

import argparse
from typing import Any

import dsl
from solvers import SOLVERS

from ..compiler.lowering import in_place_verdict
from ..core.display import shown
from ..core.errors import InputError
from ..core.serialize import save_algorithm
from .common import command, emit
from .describe import default_topologies, emit_request_problems, load_description, read_files
from .outputs import declare, guard
from .stages import (
    STAGES,
    add_emit,
    emit_algorithms,
    emit_ast,
    emit_programs,
)


def cmd_check(args: argparse.Namespace) -> int:
    if args.emit == "ast":
        return emit_ast(args, args.file)
    module = load_description(args.file)
    if args.output:
        guard(read_files(args, module), files=[("-o", args.output)])
    topologies = default_topologies(module)
    requests = module.requests()
    items = module.algorithms()
    if args.algorithm:
        names = [item.name for item in items] + [d for d in module.algorithm_definitions()]
        items = [item for item in items if item.name in args.algorithm or item.name.split("(")[0] in args.algorithm]
        if not items:
            raise InputError(f"{shown(args.file)} has no algorithm {', '.join(args.algorithm)} "
                             f"(algorithms: {', '.join(names) or 'none'})")
    rows = []
    for item in items:
        result = dsl.verify_algorithm(item)
        in_place = in_place_verdict(item.algorithm)["ok"]  # by dependencies, on the Program it runs as
        alg = item.algorithm
        rows.append({"name": alg.name, "line": item.span.line, "topology": alg.topology.name,
                     "collective": alg.collective.kind, "ranks": alg.collective.n_ranks,
                     "chunks": alg.collective.chunk_factor, "steps": result.steps, "transfers": result.transfers,
                     "verified": True, "in_place_ok": in_place})
    if args.output:
        if len(items) != 1:
            raise InputError(f"-o writes one schedule, but {shown(args.file)} has {len(items)} algorithms; "
                             "pick one with --algorithm NAME")
        save_algorithm(items[0].algorithm, args.output)
    if args.emit == "problem":
        return emit_request_problems(args, module, requests)
    if args.emit in ("algorithm", "program") and not items:
        raise InputError(f"{shown(args.file)} has no hand-written algorithms to print (`ccl synthesize {shown(args.file)} "
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
    lines = [f"ok: {shown(path)}"]
    if topos:
        lines.append(f"  topologies ({len(topos)}):")
        for t in topos:
            params = f"({', '.join(t['params'])})" if t["params"] else ""
            if "ranks" in t:
                lines.append(f"    {t['name']}{params}: {t['lowered']}, {t['ranks']} ranks on {t['nodes']} node(s), "
                             f"{t['switches']} switch vertices, {t['links']} links")
            else:
                lines.append(f"    {t['name']}{params}: needs arguments (try --topology {shown(path)}:{t['name']}:...)")
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


def register(sub: Any) -> None:
    chk = command(sub, "check", "parse and lower a description file, verify its hand-written algorithms", cmd_check)
    chk.add_argument("file", help="a .ccl description")
    add_emit(chk, STAGES, "the summary")
    chk.add_argument("--algorithm", action="append", metavar="NAME",
                     help="check only this algorithm (NAME or NAME(args) as the summary shows it); repeatable")
    chk.add_argument("-o", "--output", help="write the (single or selected) hand-written schedule here (JSON)")
    declare(chk, inputs=("file",), files=("output",))
