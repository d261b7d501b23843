"""The ``ccl`` command: a thin layer over ``ccl.compiler``.

Every command prints a readable report by default and one JSON object with ``--json``. Errors
print one line on stderr (and a JSON object on stdout with ``--json``) and exit with the code of
their class: 0 ok, 1 internal error, 2 bad input, 3 infeasible, 4 verification failed, 5 time
limit with no schedule, 6 backend failure. Set CCL_DEBUG=1 to see tracebacks of internal errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .errors import EXIT_INTERNAL, CclError, InfeasibleError, SolverTimeout, VerificationError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: bad input: {message}\n")


def _emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        print(text)


# ---------------------------------------------------------------------- topology
def cmd_topology_list(args: argparse.Namespace) -> int:
    import topologies

    rows = [{"name": b.name, "usage": b.usage, "summary": b.summary, "example": b.example}
            for b in topologies.BUILDERS.values()]
    width = max(len(r["usage"]) for r in rows)
    text = "\n".join(f"{r['usage']:<{width}}  {r['summary']}" for r in rows)
    _emit(args, {"topologies": rows}, text)
    return 0


def _fmt_bw(x: float) -> str:
    return f"{x:.6g} GB/s"


def cmd_topology_show(args: argparse.Namespace) -> int:
    from .compiler import load_topology
    from .serialize import topology_to_json

    topo = load_topology(args.topology)
    if args.flat:
        topo = topo.flat()
    data = {"format": "ccl-topology", "version": 1, "topology": topology_to_json(topo),
            "n_nodes": topo.n_nodes, "n_switches": len(topo.switches), "n_links": len(topo.links)}
    lines = [f"topology {topo.name}: {topo.n_ranks} ranks on {topo.n_nodes} node(s), "
             f"{len(topo.switches)} switch vertices, {len(topo.links)} directed links, "
             f"{len(topo.limits)} shared limits"]
    if topo.n_nodes > 1:
        sizes = sorted({len(x) for x in topo.node_ranks})
        lines.append(f"nodes: {topo.n_nodes} x {'/'.join(map(str, sizes))} ranks (rank = node * size + local)")
    if topo.switches:
        lines.append("switches: " + ", ".join(f"{s.name} ({s.kind})" for s in topo.switches))
    lines.append("links:")
    done = set()
    for link in topo.links:
        if link.pair in done:
            continue
        back = topo.link(link.dst, link.src)
        same = back is not None and (back.bandwidth, back.latency, back.lanes) == (link.bandwidth, link.latency, link.lanes)
        arrow = "<->" if same else "->"
        done.add(link.pair)
        if same:
            done.add((link.dst, link.src))
        lanes = f" x{link.lanes}" if link.lanes > 1 else ""
        lines.append(f"  {topo.vertex_name(link.src)} {arrow} {topo.vertex_name(link.dst)}: "
                     f"{_fmt_bw(link.bandwidth)}{lanes}, {link.latency:.6g} us")
    if topo.limits:
        lines.append("shared limits:")
        for limit in topo.limits:
            lines.append(f"  {limit.name}: {_fmt_bw(limit.bandwidth)} over {len(limit.links)} links")
    _emit(args, data, "\n".join(lines))
    return 0


# ---------------------------------------------------------------------- solvers
def cmd_solvers(args: argparse.Namespace) -> int:
    import solvers

    rows = [{"name": s.name, "collectives": list(s.kinds), "summary": s.summary} for s in solvers.SOLVERS.values()]
    width = max(len(r["name"]) for r in rows)
    text = "\n".join(f"{r['name']:<{width}}  {', '.join(r['collectives'])}\n{'':<{width}}  {r['summary']}" for r in rows)
    _emit(args, {"solvers": rows}, text)
    return 0


# ---------------------------------------------------------------------- synthesize
def cmd_synthesize(args: argparse.Namespace) -> int:
    from . import compiler
    from .serialize import save_algorithm

    problem = compiler.problem_from_options(
        args.topology, args.collective, root=args.root, solver=args.solver, chunks=args.chunks,
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
    _emit(args, data, text)
    return 0


# ---------------------------------------------------------------------- verify
def cmd_verify(args: argparse.Namespace) -> int:
    from .serialize import load_algorithm
    from .verify import verify

    alg = load_algorithm(args.file)
    result = verify(alg)
    try:
        verify(alg, in_place=True)
        in_place, in_place_reason = True, None
    except VerificationError as exc:
        in_place, in_place_reason = False, exc.message
    data = {"ok": True, "file": args.file, **alg.summary(), "in_place_ok": in_place,
            "in_place_reason": in_place_reason, "chunk_transfers": result.chunk_transfers}
    note = "also correct in place" if in_place else f"not correct in place ({in_place_reason})"
    text = (f"ok: {args.file}: {alg.name} implements {alg.collective} on {alg.topology.name}\n"
            f"  {alg.n_steps} steps, {len(alg.transfers)} transfers; {note}")
    _emit(args, data, text)
    return 0


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ccl", description="Collective-communication synthesis compiler.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def command(name: str, help: str, func: Callable[[argparse.Namespace], int], parent: Any = sub) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help, description=help)
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        p.set_defaults(func=func)
        return p

    topo = sub.add_parser("topology", help="the topology library")
    tsub = topo.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=_Parser)
    tsub.required = True
    command("list", "list the topology library", cmd_topology_list, tsub)
    show = command("show", "show a topology's ranks, links, bandwidths, limits and nodes", cmd_topology_show, tsub)
    show.add_argument("topology", help="NAME, NAME:ARGS or a topology JSON file")
    show.add_argument("--flat", action="store_true", help="show the flattened rank-to-rank view")

    command("solvers", "list the solvers and the collectives each implements", cmd_solvers)

    syn = command("synthesize", "synthesize, verify and save a schedule", cmd_synthesize)
    syn.add_argument("--topology", "-t", required=True, help="NAME, NAME:ARGS or a topology JSON file")
    syn.add_argument("--collective", "-c", required=True, help="allgather, reducescatter, allreduce, alltoall, "
                     "broadcast, reduce, gather, scatter")
    syn.add_argument("--root", type=int, default=None, help="root rank of broadcast, reduce, gather, scatter")
    syn.add_argument("--chunks", "-k", type=_positive, default=1, help="chunk factor (pieces per rank's part)")
    syn.add_argument("--solver", "-s", default="ring", help="solver name (see `ccl solvers`)")
    syn.add_argument("-o", "--output", help="write the schedule (JSON) here")

    ver = command("verify", "check that a schedule implements its collective", cmd_verify)
    ver.add_argument("file", help="schedule JSON written by `ccl synthesize`")
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CclError as exc:
        print(f"ccl: {exc.render()}", file=sys.stderr)
        if getattr(args, "json", False):
            status = "infeasible" if isinstance(exc, InfeasibleError) else (
                "timeout" if isinstance(exc, SolverTimeout) else "error")
            out = {"status": status, "ok": False, **exc.to_json()}
            print(json.dumps(out, indent=2))
        return exc.exit_code
    except KeyboardInterrupt:
        print("ccl: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback for users
        if os.environ.get("CCL_DEBUG"):
            raise
        print(f"ccl: internal error: {type(exc).__name__}: {exc} (set CCL_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
