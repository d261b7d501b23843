"""Shared pieces of the ``ccl`` command: the argument parser class, output and registration."""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Callable
from typing import Any

from ..core.display import safe_lines, shown
from ..core.errors import InputError
from ..core.units import parse_seconds
from .examples import epilog
from .outputs import check_args
from .progress import QUIET_ENV, erase_all


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that text written with line breaks (the examples) is kept
    line for line; one-line descriptions are still wrapped to the terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "\n".join(indent + line if line else line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


class Parser(argparse.ArgumentParser):
    """argparse that reports option errors as bad input (exit 2) in the project's words, and
    ends every ``--help`` with the examples of its command (``ccl.cli.examples``), found by the
    command path in ``prog`` (``ccl emit msccl`` -> ``emit msccl``), wherever it is created."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        if self.epilog is None:
            self.epilog = epilog(self.prog.partition(" ")[2])

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: bad input: {shown(message)} (see `{self.prog} --help`)\n")


def emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    """Print ``data`` as one JSON object with --json, else the readable ``text`` (any control
    character but its line breaks escaped: ``ccl.core.display.safe_lines``)."""
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(safe_lines(text))


def command(parent: Any, name: str, help: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """Add a subcommand with the flags every command has (--json, --quiet); its --help ends
    with its examples (see ``Parser``)."""
    p = parent.add_parser(name, help=help, description=help)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--quiet", "-q", action="store_true",
                   help=f"no progress lines on stderr (errors still print; also {QUIET_ENV}=1)")
    p.set_defaults(func=_quietly(func))
    return p


def _quietly(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a command with CCL_QUIET=1 in the environment under --quiet (the solvers read it:
    they never import the CLI), restored afterwards, and erase any progress line left on the
    terminal before the report or an error is printed."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        quiet = getattr(args, "quiet", False)
        saved = os.environ.get(QUIET_ENV)
        if quiet:
            os.environ[QUIET_ENV] = "1"
        try:
            check_args(args)  # no lost files: outputs checked before any work (ccl.cli.outputs)
            return func(args)
        finally:
            erase_all()
            if quiet:
                if saved is None:
                    os.environ.pop(QUIET_ENV, None)
                else:
                    os.environ[QUIET_ENV] = saved

    return run


MAX_INT_TEXT = 30  # digits of an integer option: longer text is refused before it is read


def _integer(text: str, what: str) -> int:
    stripped = text.strip()
    if len(stripped) > MAX_INT_TEXT:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text[:MAX_INT_TEXT]!r}... "
                                         f"({len(stripped)} characters)")
    try:
        return int(stripped)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An option's whole number >= 1 (resource limits on counts are checked where they are
    used: ``ccl.core.limits``)."""
    value = _integer(text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def count_int(text: str) -> int:
    """An option's whole number >= 0 (iterations, ranks), at most 10**6."""
    value = _integer(text, "a whole number >= 0")
    if not 0 <= value <= 10**6:
        raise argparse.ArgumentTypeError(f"expected a whole number in 0..1000000, got {text!r}")
    return value


def rank_int(text: str) -> int:
    """A rank number (>= 0; the collective checks it against its ranks)."""
    value = _integer(text, "a rank number (0, 1, ...)")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a rank number (0, 1, ...), got {text!r}")
    return value


def parsed(parse: Callable[[str], Any], text: str, *, positive: str | None = None) -> Any:
    """``parse(text)`` (a ``ccl.core.units`` reader) as an option type: its InputError becomes
    argparse's error (exit 2, one line); with ``positive``, a value not above 0 is refused with
    that message."""
    try:
        value = parse(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    if positive is not None and not value > 0:
        raise argparse.ArgumentTypeError(f"{positive}, got {text!r}")
    return value


def seconds_arg(text: str) -> float:
    """A time limit or timeout: more than 0 seconds, finite and at most ``ccl.core.units.MAX_SECONDS``
    (``60``, ``60s``, ``2ms``, ``1.5``)."""
    return parsed(parse_seconds, text, positive="expected more than 0 seconds")


def budget_arg(text: str) -> float:
    """A time budget: 0 or more seconds (``seconds_arg``'s forms)."""
    return parsed(parse_seconds, text)


def add_problem_arguments(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--topology, --collective and --root, as every command that builds a problem takes them."""
    p.add_argument("--topology", "-t", required=required,
                   help="NAME, NAME:ARGS, a topology JSON file or FILE.ccl[:NAME[:ARGS]]")
    p.add_argument("--collective", "-c", required=required,
                   help="allgather, reducescatter, allreduce, alltoall, broadcast, reduce, gather, scatter")
    p.add_argument("--root", type=rank_int, default=None, help="root rank of broadcast, reduce, gather, scatter")
