"""Shared pieces of the ``ccl`` command: the argument parser class, output and registration."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any


class Parser(argparse.ArgumentParser):
    """argparse that reports option errors as bad input (exit 2) in the project's words."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: bad input: {message} (see `{self.prog} --help`)\n")


def emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    """Print ``data`` as one JSON object with --json, else the readable ``text``."""
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(text)


def command(parent: Any, name: str, help: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """Add a subcommand with the --json flag every command has."""
    p = parent.add_parser(name, help=help, description=help)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=func)
    return p


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_problem_arguments(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--topology, --collective and --root, as every command that builds a problem takes them."""
    p.add_argument("--topology", "-t", required=required,
                   help="NAME, NAME:ARGS, a topology JSON file or FILE.ccl[:NAME[:ARGS]]")
    p.add_argument("--collective", "-c", required=required,
                   help="allgather, reducescatter, allreduce, alltoall, broadcast, reduce, gather, scatter")
    p.add_argument("--root", type=int, default=None, help="root rank of broadcast, reduce, gather, scatter")
