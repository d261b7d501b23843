"""Options of exact synthesis (the smt solver) shared by ``ccl synthesize`` and ``ccl pareto``:
the solver options, custom roots, the collective they name, and the solver's log as progress."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from ..core.collective import builtin, multi_root
from ..core.errors import InputError
from .common import seconds_arg
from .progress import Progress


# ---------------------------------------------------------------------- shared with synthesize
def add_exact_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--roots", help="several roots (comma-separated) for a multi-root broadcast, gather, scatter or "
                   "reduce (a custom collective; exact solvers only)")
    p.add_argument("--time-limit", type=seconds_arg, help="stop after this long (e.g. 60, 60s, 2ms; the MILP solvers default to 60 s); the best "
                   "schedule so far is kept")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="solver option, repeatable (smt: method=auto|routing|dual|combining|compose, scratch=K, "
                   "symmetry=false, max_steps=S)")


def parse_options(items: list[str]) -> tuple[tuple[str, Any], ...]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise InputError(f"--option expects KEY=VALUE, got {item!r}")
        value: Any = text
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            try:
                value = int(text)
            except ValueError:
                pass
        out[key.strip()] = value
    return tuple(sorted(out.items()))


def parse_roots(text: str, n_ranks: int) -> tuple[int, ...]:
    try:
        roots = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"--roots expects comma-separated ranks, got {text!r}") from None
    for r in roots:
        if not 0 <= r < n_ranks:
            raise InputError(f"--roots: rank {r} is not in 0..{n_ranks - 1}")
    return roots


def collective_from_args(args: argparse.Namespace, n_ranks: int):
    """The built-in collective, or the multi-root one when --roots is given."""
    if getattr(args, "roots", None):
        if args.root is not None:
            raise InputError("give --root or --roots, not both")
        return multi_root(args.collective, n_ranks, parse_roots(args.roots, n_ranks))
    return builtin(args.collective, n_ranks, args.root)


class SolverLog(logging.Handler):
    """The exact solvers' log records (``solvers.smt``) as progress lines (``ccl.cli.progress``):
    quick runs stay silent, long ones say which instance ran and how long it took."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.INFO)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        self.progress.update(f"smt: {record.getMessage()}")


class progress_on_stderr:
    """Context manager: the ``solvers.smt`` logger's records as progress on stderr, none with
    --quiet (CCL_QUIET); yields the ``Progress``."""

    def __enter__(self) -> Progress:
        self.progress = Progress()
        self.handler = SolverLog(self.progress)
        self.logger = logging.getLogger("solvers.smt")
        self.level = self.logger.level
        if not self.progress.quiet:
            self.logger.addHandler(self.handler)
            self.logger.setLevel(logging.INFO)
        return self.progress

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)
        self.progress.close()
