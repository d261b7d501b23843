"""``ccl pareto``: the latency-bandwidth frontier of exact (z3) schedules.

Also the pieces ``ccl synthesize`` shares for exact solvers: multi-root collectives (``--roots``),
solver options (``--option key=value``) and progress lines on stderr.
"""

from __future__ import annotations

import argparse
import os
import time
from fractions import Fraction
from typing import Any

import solvers.packing.pareto as pareto
import solvers.smt as smt
from solvers.bounds import lower_bound

from .. import compiler
from ..core import interrupt
from ..core.display import shown
from ..core.errors import InfeasibleError, InputError, Interrupted, SolverTimeout
from ..core.problem import Problem, Request
from ..core.serialize import algorithm_to_json, dumps, write_all
from ..core.units import format_size, parse_size
from ..core.verify import verify
from .common import add_problem_arguments, command, emit, positive_int
from .exact import (
    add_exact_arguments,
    collective_from_args,
    parse_options,
    progress_on_stderr,
)
from .outputs import declare, guard, inputs_of, make_folder
from .progress import Progress
from .results import interrupted_exit

DEFAULT_SIZES = ("64KiB", "256MiB")


# ---------------------------------------------------------------------- ccl pareto
def cmd_pareto(args: argparse.Namespace) -> int:
    if args.solver == "packing":
        return _packing_set(args)
    if args.solver != "smt":
        raise InputError(f"ccl pareto lists the frontier of solver 'smt' (exact) or 'packing' (the latency/"
                         f"throughput set), not {args.solver!r}")
    topo = compiler.load_topology(args.topology)
    coll = collective_from_args(args, topo.n_ranks)
    options = dict(parse_options(args.option))
    time_limit = args.time_limit
    sizes = [parse_size(x) for x in args.sizes.split(",")] if args.sizes else [parse_size(x) for x in DEFAULT_SIZES]

    with progress_on_stderr():
        with interrupt.clock():  # --time-limit counts from here: the formulation's building included
            frontier = smt.pareto(topo, coll, args.max_chunks, time_limit=time_limit, **options)
    if frontier.interrupted:
        interrupt.acknowledge()  # the search stopped: verifying and saving the points is quick
        if not frontier.points:
            raise Interrupted(f"stopped by Ctrl-C before the first frontier point of {coll.name} on {topo.name}")
    if not frontier.points and not frontier.complete:
        raise SolverTimeout(f"time limit reached before the first frontier point of {coll.name} on {topo.name}")
    if not frontier.points:
        raise InfeasibleError(f"z3 found no schedule of {coll.name} on {topo.name} with at most {args.max_chunks} "
                              "chunks within the step limit (raise --option max_steps=S)", bound="z3 proof (unsat)")
    rows, planned = [], []
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
            path = os.path.join(args.save_dir, f"{coll.name}-{topo.name}-s{p.steps}-r{p.rounds}-c{p.chunks}.json")
            planned.append((path, p.algorithm))
            row["file"] = path
        rows.append(row)
    save_all(args, planned)
    status = "ok" if frontier.complete else "interrupted" if frontier.interrupted else "timeout"
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
    elif frontier.interrupted:
        lines.append("  interrupted (Ctrl-C): the frontier may be incomplete")
    else:
        lines.append("  time limit reached: the frontier may be incomplete")
    if args.save_dir:
        lines.append(f"  schedules written to {shown(args.save_dir)}/")
    emit(args, data, "\n".join(lines))
    if frontier.points and Fraction(frontier.points[-1].rounds, frontier.points[-1].chunks) < bound:
        raise RuntimeError("a frontier point beats the lower bound")  # pragma: no cover - bound bug
    if frontier.interrupted:
        return interrupted_exit(f"{shown(args.save_dir)}/" if args.save_dir else None,
                                f"frontier ({len(rows)} point{'s' if len(rows) != 1 else ''})", "no --save-dir given")
    return 0


def save_all(args: argparse.Namespace, planned: list[tuple[str, Any]]) -> None:
    """Write the (path, algorithm) schedules into --save-dir (created when missing): checked
    against the inputs and each other first, then all or none."""
    if not planned:
        return
    guard(inputs_of(args), files=[("--save-dir file", path) for path, _ in planned], new_folders=True,
          hint="give another --save-dir")
    make_folder("--save-dir", args.save_dir)
    write_all([(path, lambda fh, alg=alg: fh.write(dumps(algorithm_to_json(alg)) + "\n")) for path, alg in planned])


PACKING_SIZES = ("1KiB", "16KiB", "256KiB", "4MiB", "64MiB", "1GiB")


def _packing_set(args: argparse.Namespace) -> int:
    """``ccl pareto -s packing``: the packing solver's schedules that win some size of the sweep
    (tree height and pipeline depth against throughput), with the size range each wins."""
    if args.option or args.time_limit is not None or getattr(args, "roots", None):
        raise InputError("ccl pareto -s packing takes no --option, --time-limit or --roots")
    topo = compiler.load_topology(args.topology)
    coll = collective_from_args(args, topo.n_ranks)
    sizes = [parse_size(x) for x in (args.sizes.split(",") if args.sizes else PACKING_SIZES)]
    if any(s <= 0 for s in sizes):
        raise InputError("--sizes must be positive")

    start = time.monotonic()
    problem = Problem(topo, coll, Request("packing", chunks=args.chunks))
    judge = compiler.SimulationJudge()
    with Progress() as progress:
        members = pareto.frontier(problem, judge, sizes, lambda message: progress.update(f"pareto: {message}"))
    bound_at = {s: lower_bound(topo, coll, s).bound_us for s in sorted(set(sizes))}
    rows, planned = [], []
    table = [["wins from", "wins to", "construction", "trees/root", "height", "stages", "taper",
              "rate/bound", "steps", "at sweep sizes: time (x bound)"]]
    for i, m in enumerate(members):
        verify(m.algorithm)  # nothing unverified leaves the tool
        d = m.details
        phases = [d[p] for p in ("reduce_phase", "broadcast_phase") if p in d]
        height = max((p["max_depth"] for p in phases), default=d.get("max_hops", 0))
        rate = max((p["achieved_us_per_MB"] / p["optimal_us_per_MB"] for p in phases),
                   default=d.get("achieved_us_per_MB", 0) / d["optimal_us_per_MB"] if "optimal_us_per_MB" in d else 0)
        row: dict[str, Any] = {
            "construction": m.key[0], "trees_per_root": d.get("trees_per_root", d.get("routes_per_piece")),
            "height": height, "stages": d["stages"], "taper": d["taper"], "stagger": bool(d.get("stagger")),
            "lead": bool(d.get("lead")), "ramp": int(d.get("ramp") or 0), "own": d.get("own", 1.0),
            "slots_per_part": d["slots_per_part"],
            "rate_over_bound": round(rate, 6), "steps": m.algorithm.n_steps,
            "wins_from_bytes": int(m.wins_from) if i else None,
            "wins_to_bytes": int(m.wins_to) if i < len(members) - 1 else None,
            "sweep": [{"size": format_size(s), "bytes": s, "time_us": t, "bound_ratio": t / bound_at[s]}
                      for s, t in zip(m.sizes, m.times_us)],
        }
        if args.save_dir:
            path = os.path.join(args.save_dir, f"{coll.name}-{topo.name}-{i + 1}-{row['construction']}"
                                f"-s{row['stages']}{'-staggered' if row['stagger'] else ''}.json")
            planned.append((path, m.algorithm))
            row["file"] = path
        rows.append(row)
        table.append([_approx(m.wins_from) if i else "-", _approx(m.wins_to) if i < len(members) - 1 else "-",
                      row["construction"], str(row["trees_per_root"]), str(height),
                      str(d["stages"]) + ("s" if row["stagger"] else "") + ("l" if row["lead"] else "")
                      + ("r" * row["ramp"]) + (f"o{row['own']:g}" if row["own"] != 1.0 else ""), str(d["taper"]),
                      f"{rate:.3f}", str(row["steps"]),
                      ", ".join(f"{x['size']}: {x['time_us']:.4g} us ({x['bound_ratio']:.2f})" for x in row["sweep"])])
    save_all(args, planned)
    data = {"status": "ok", "solver": "packing", "topology": topo.name, "collective": coll.name,
            "sizes": [format_size(s) for s in sorted(set(sizes))], "members": rows,
            "seconds": round(time.monotonic() - start, 3)}
    lines = [f"ok: latency/throughput set of {coll.name} on {topo.name} (packing), {len(rows)} schedule(s) win "
             f"the {len(set(sizes))} sizes {format_size(min(sizes))}..{format_size(max(sizes))}",
             "  (height: tree levels or route hops; rate/bound: the busiest link's load against the cut bound's; "
             "ranges from bisection between sweep sizes)"]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        lines.append("  " + "  ".join(c.ljust(w) if j in (2, 9) else c.rjust(w)
                                      for j, (c, w) in enumerate(zip(r, widths))).rstrip())
    if args.save_dir:
        lines.append(f"  schedules written to {shown(args.save_dir)}/")
    emit(args, data, "\n".join(lines))
    return 0


def _approx(size: float) -> str:
    """A crossover size to three digits: 881744 -> '861KiB' (the bisection is not exact anyway)."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.3g}{unit}"
    return f"{size:.0f}B"


def register(sub: Any) -> None:
    p = command(sub, "pareto", "exact latency-bandwidth frontier (steps vs rounds per chunk) with z3, or the "
                "packing solver's latency/throughput set (-s packing)", cmd_pareto)
    add_problem_arguments(p)
    p.add_argument("--solver", "-s", default="smt", help="smt (default): the exact frontier; packing: the schedules "
                   "that win some size of --sizes and the size range each wins")
    p.add_argument("--chunks", type=positive_int, default=1, help="packing: pieces per part (default 1)")
    p.add_argument("--max-chunks", type=positive_int, default=4, help="largest chunk factor C to try (default 4)")
    p.add_argument("--sizes", help=f"two or more buffer sizes for the simulated columns (default {','.join(DEFAULT_SIZES)}; "
                   f"packing: the sweep, default {','.join(PACKING_SIZES)})")
    p.add_argument("--save-dir", help="write every frontier schedule (JSON) into this directory")
    add_exact_arguments(p)
    declare(p, inputs=("topology",), folders=("save_dir",))
