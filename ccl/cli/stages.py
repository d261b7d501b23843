"""The one way every command prints a pipeline stage: ``--emit ast|problem|algorithm|program``.

A command offers the stages it reaches (``add_emit``) and prints one with these functions, as
text for people or one JSON object with ``--json``:

* ``ast``: the syntax tree of a description file, one node per line with its position;
* ``problem``: lowered requests as a flat, self-contained description (every link spelled out)
  that lowers to the same Problem, or a file's topologies when it has no requests;
* ``algorithm``: schedules as hand-written algorithms (JSON: schedule files);
* ``program``: the verified Programs the schedules lower to (``ccl.lower`` with the command's
  ``--channels`` and ``--no-fuse``), every rank's ops with their dependencies.
"""

from __future__ import annotations

import argparse
from typing import Any

from backends.cost.calibration import PROTOCOLS
from backends.cost.runtime import DEFAULT_RUNTIME, RUNTIMES, protocols
from dsl.printer import ast_to_json, dump_ast, format_algorithm, format_problem, format_topology

from .. import compiler
from ..core.serialize import (
    algorithm_to_json,
    collective_to_json,
    program_to_json,
    request_to_json,
    topology_to_json,
)
from .common import emit, positive_int

STAGES = ("ast", "problem", "algorithm", "program")
_WHAT = {
    "ast": "the syntax tree",
    "problem": "the lowered problem(s) as a flat description",
    "algorithm": "the algorithm(s) as a hand-written one",
    "program": "the verified per-rank programs",
}


def add_emit(parser: argparse.ArgumentParser, stages: tuple[str, ...], instead_of: str) -> None:
    """``--emit`` with the stages this command reaches (and the lowering options when it
    reaches the program stage)."""
    what = "; ".join(f"{s}: {_WHAT[s]}" for s in stages)
    parser.add_argument("--emit", choices=stages, help=f"print a stage instead of {instead_of} ({what})")
    if "program" in stages:
        add_lowering_options(parser)


def add_lowering_options(parser: argparse.ArgumentParser) -> None:
    """The lowering's options (``ccl.lower``), for every command that lowers a schedule."""
    parser.add_argument("--channels", type=positive_int, default=1,
                        help="parallel channels per pair of ranks in the lowered program (default 1)")
    parser.add_argument("--no-fuse", action="store_true",
                        help="lower every transfer to its own message (pieces overlap instead of merging)")


def lowering(args: argparse.Namespace) -> dict[str, Any]:
    return {"channels": args.channels, "fuse": not args.no_fuse}


def add_runtime_options(parser: argparse.ArgumentParser) -> None:
    """Whose charges a schedule is timed under (``backends.cost.runtime``), for every command
    that simulates."""
    parser.add_argument("--runtime", choices=tuple(RUNTIMES), default=DEFAULT_RUNTIME,
                        help="the runtime that executes the schedule, whose calibrated launch, latency and protocol "
                             f"costs are charged (default {DEFAULT_RUNTIME}; physics: the links alone)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default=None,
                        help="the protocol the runtime runs (default: the fastest it offers; a set's entry: its "
                             "own; an MSCCL XML file: its proto)")


def charged(args: argparse.Namespace, recorded: str | None = None) -> dict[str, Any]:
    """The runtime options of ``add_runtime_options``; ``recorded``: the protocol the schedule
    file names (used when --protocol is not given and the runtime offers it)."""
    protocol = args.protocol
    if protocol is None and recorded in protocols(args.runtime) and args.runtime != "physics":
        protocol = recorded
    return {"runtime": args.runtime, "protocol": protocol}


def emit_ast(args: argparse.Namespace, path: str) -> int:
    tree = compiler.parse(path)
    emit(args, {"ast": ast_to_json(tree)}, dump_ast(tree).rstrip("\n"))
    return 0


def emit_problems(args: argparse.Namespace, problems: list[tuple[str, str, Any]]) -> int:
    """``problems``: (name, where it comes from, Problem)."""
    texts = [f"# request {name} ({where})\n" + format_problem(p, name) for name, where, p in problems]
    data = {"problems": [{"name": name, "topology": topology_to_json(p.topology),
                          "collective": collective_to_json(p.collective), "request": request_to_json(p.request)}
                         for name, _, p in problems]}
    emit(args, data, "\n".join(texts).rstrip("\n"))
    return 0


def emit_topologies(args: argparse.Namespace, topologies: list[Any]) -> int:
    emit(args, {"topologies": [topology_to_json(t) for t in topologies]},
         "\n".join(format_topology(t) for t in topologies).rstrip("\n"))
    return 0


def emit_algorithms(args: argparse.Namespace, algorithms: list[Any]) -> int:
    text = "\n".join(format_algorithm(a) for a in algorithms).rstrip("\n")
    emit(args, {"algorithms": [algorithm_to_json(a) for a in algorithms]}, text)
    return 0


def emit_programs(args: argparse.Namespace, schedules: list[Any]) -> int:
    """Lower (with the command's options) and verify each schedule, then print the Programs."""
    programs = [compiler.program(s, **lowering(args)) for s in schedules]
    emit(args, {"programs": [program_to_json(p) for p in programs]},
         "\n".join(p.to_text() for p in programs).rstrip("\n"))
    return 0
