"""``ccl pareto``: the latency-bandwidth frontier of exact (z3) schedules.

Also the pieces ``ccl synthesize`` shares for exact solvers: multi-root collectives (``--roots``),
solver options (``--option key=value``) and progress lines on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from .common import add_problem_arguments, command, emit, positive_int

DEFAULT_SIZES = ("64KiB", "256MiB")


# ---------------------------------------------------------------------- shared with synthesize
def add_exact_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--roots", help="several roots (comma-separated) for a multi-root broadcast, gather, scatter or "
                   "reduce (a custom collective; exact solvers only)")
    p.add_argument("--time-limit", help="stop after this long (e.g. 60, 60s, 2ms; the MILP solvers default to 60 s); the best "
                   "schedule so far is kept")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="solver option, repeatable (smt: method=auto|routing|dual|combining|compose, scratch=K, "
                   "symmetry=false, max_steps=S)")


def parse_options(items: list[str]) -> tuple[tuple[str, Any], ...]:
    from ..errors import InputError

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
    from ..errors import InputError

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
    from ..collective import builtin, multi_root
    from ..errors import InputError

    if getattr(args, "roots", None):
        if args.root is not None:
            raise InputError("give --root or --roots, not both")
        return multi_root(args.collective, n_ranks, parse_roots(args.roots, n_ranks))
    return builtin(args.collective, n_ranks, args.root)


class Progress(logging.Handler):
    """Progress of exact searches on stderr (never stdout), from the first second on: quick
    runs stay silent, long ones say which instance ran and how long it took."""

    def __init__(self, after: float = 1.0) -> None:
        super().__init__(logging.INFO)
        self.start = time.monotonic()
        self.after = after
        self.held: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = f"ccl: smt: {record.getMessage()}"
        if time.monotonic() - self.start < self.after:
            self.held.append(line)
            return
        for old in self.held:
            print(old, file=sys.stderr)
        self.held = []
        print(line, file=sys.stderr, flush=True)


class progress_on_stderr:
    """Context manager attaching ``Progress`` to the solvers' logger."""

    def __enter__(self) -> Progress:
        self.handler = Progress()
        self.logger = logging.getLogger("solvers.smt")
        self.level = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)
        return self.handler

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)


# ---------------------------------------------------------------------- ccl pareto
def cmd_pareto(args: argparse.Namespace) -> int:
    from fractions import Fraction

    from .. import compiler
    from ..errors import SolverTimeout
    from ..serialize import save_algorithm
    from ..units import format_size, parse_seconds, parse_size
    from ..verify import verify

    topo = compiler.load_topology(args.topology)
    coll = collective_from_args(args, topo.n_ranks)
    options = dict(parse_options(args.option))
    time_limit = parse_seconds(args.time_limit) if args.time_limit else None
    sizes = [parse_size(x) for x in args.sizes.split(",")] if args.sizes else [parse_size(x) for x in DEFAULT_SIZES]
    import solvers.smt as smt

    with progress_on_stderr():
        frontier = smt.pareto(topo, coll, args.max_chunks, time_limit=time_limit, **options)
    if not frontier.points and not frontier.complete:
        raise SolverTimeout(f"time limit reached before the first frontier point of {coll.name} on {topo.name}")
    if not frontier.points:
        from ..errors import InfeasibleError

        raise InfeasibleError(f"z3 found no schedule of {coll.name} on {topo.name} with at most {args.max_chunks} "
                              "chunks within the step limit (raise --option max_steps=S)", bound="z3 proof (unsat)")
    rows = []
    for p in frontier.points:
        verify(p.algorithm)  # nothing unverified leaves the tool
        row: dict[str, Any] = {"steps": p.steps, "rounds": p.rounds, "chunks": p.chunks,
                               "rounds_per_chunk": str(p.rounds_per_chunk),
                               "rounds_per_chunk_value": float(p.rounds_per_chunk),
                               "step_rounds": list(p.algorithm.rounds or ()),
                               "solve_seconds": round(p.seconds, 3)}
        row["time_us"] = {format_size(s): compiler.simulate(p.algorithm, s, bound=False, baselines=False).time_us
                          for s in sizes}
        if args.save_dir:
            os.makedirs(args.save_dir, exist_ok=True)
            path = os.path.join(args.save_dir, f"{coll.name}-{topo.name}-s{p.steps}-r{p.rounds}-c{p.chunks}.json")
            save_algorithm(p.algorithm, path)
            row["file"] = path
        rows.append(row)
    status = "ok" if frontier.complete else "timeout"
    data = {
        "status": status, "topology": topo.name, "collective": coll.name, "max_chunks": args.max_chunks,
        "step_bound": frontier.step_bound, "rounds_per_chunk_bound": str(frontier.rounds_bound),
        "rounds_per_chunk_bound_name": frontier.rounds_bound_name, "reached_bound": frontier.reached_bound,
        "complete": frontier.complete, "seconds": round(frontier.seconds, 3), "points": rows,
        "checks": [c.to_json() for c in frontier.checks],
    }
    bound = frontier.rounds_bound
    head = (f"{status}: Pareto frontier of {coll.name} on {topo.name}, chunks 1..{args.max_chunks}: "
            f"{len(rows)} point(s) in {frontier.seconds:.2f} s, {len(frontier.checks)} z3 checks")
    lines = [head, f"  bounds: {frontier.step_bound} steps; {bound} rounds per chunk ({frontier.rounds_bound_name})"]
    cols = ["steps", "rounds", "chunks", "rounds/chunk", "solve s"]
    cols += [f"time @{format_size(s)} (us)" for s in sizes]
    table = [cols]
    for p, row in zip(frontier.points, rows):
        cells = [str(p.steps), str(p.rounds), str(p.chunks), f"{p.rounds_per_chunk} ({float(p.rounds_per_chunk):.3f})",
                 f"{p.seconds:.2f}"]
        cells += [f"{t:.2f}" for t in row["time_us"].values()]
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(cols))]
    for r in table:
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)))
    if frontier.reached_bound:
        lines.append(f"  the last point meets the bandwidth bound ({bound} rounds per chunk)")
    elif frontier.complete:
        lines.append(f"  no schedule with at most {args.max_chunks} chunks reaches the bound {bound}; "
                     f"raise --max-chunks to look further")
    else:
        lines.append("  time limit reached: the frontier may be incomplete")
    if args.save_dir:
        lines.append(f"  schedules written to {args.save_dir}/")
    emit(args, data, "\n".join(lines))
    if frontier.points and Fraction(frontier.points[-1].rounds, frontier.points[-1].chunks) < bound:
        raise RuntimeError("a frontier point beats the lower bound")  # pragma: no cover - bound bug
    return 0


def register(sub: Any) -> None:
    p = command(sub, "pareto", "exact latency-bandwidth frontier (steps vs rounds per chunk) with z3", cmd_pareto)
    add_problem_arguments(p)
    p.add_argument("--max-chunks", type=positive_int, default=4, help="largest chunk factor C to try (default 4)")
    p.add_argument("--sizes", help=f"two or more buffer sizes for the simulated columns (default {','.join(DEFAULT_SIZES)})")
    p.add_argument("--save-dir", help="write every frontier schedule (JSON) into this directory")
    add_exact_arguments(p)
