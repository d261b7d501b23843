"""Benchmark: the MILP solvers (milp, teccl) on 2-node machines against templates, NCCL, the bound.

    PYTHONPATH=. python benchmarks/milp.py [--machines ndv2:2,dgx2:2,dgx-h100:2]
        [--collectives allgather,alltoall] [--sizes 1KiB,1MiB,1GiB] [--solvers milp,teccl]
        [--time-limit 100]

For every (machine, collective, size, solver): the synthesis wall time and status (``timeout``
when a MILP stopped at its limit before proving optimality; the schedule is still returned and
verified), the largest MILP gap, the routing model's size, the simulated time of the schedule,
of the best template (every registered template, simulated the same way), of NCCL's ring (or
its point-to-point model for alltoall) from ``backends.sim``'s cost model, and the lower bound.
Schedules are timed as the driver times them: lowered to the Program the runtimes run, then
simulated (``ccl.compiler.simulate``); the MILP solvers get the driver's judge, the same.
Prints a table and writes ``benchmarks/results/milp.json`` and ``milp.md``. Goals: never slower
than the best template, at least 1.5x faster than NCCL's ring at 1 MiB, each solve within 120 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import solvers  # noqa: E402
import topologies  # noqa: E402
from backends.cost import nccl_baselines  # noqa: E402
from ccl import InfeasibleError, InputError, Problem, Request, SolverTimeout, verify  # noqa: E402
from ccl.compiler import SimulationJudge, simulate  # noqa: E402
from ccl.core.collective import builtin  # noqa: E402
from ccl.core.units import format_size, parse_size  # noqa: E402
from solvers.bounds import lower_bound  # noqa: E402


def best_template(topo, kind: str, size: int) -> tuple[str, float]:
    best = ("none", float("inf"))
    for name, info in solvers.SOLVERS.items():
        if not info.template or kind not in info.kinds:
            continue
        try:
            algorithm = solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks), Request(name)))
        except (InputError, InfeasibleError):  # a template that does not apply to this topology
            continue
        t = simulate(algorithm, size, bound=False, baselines=False).time_us
        if t < best[1]:
            best = (name, t)
    return best


def nccl(topo, kind: str, size: int, bound: float) -> tuple[str, float]:
    """NCCL's ring (its point-to-point model for alltoall), never below the lower bound."""
    rows = nccl_baselines(kind, topo, size)
    ring = [b for b in rows if "ring" in b.name] or rows
    if not ring:
        return ("none", float("nan"))
    b = min(ring, key=lambda b: b.time_us)
    return (b.name, b.time_us)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default="ndv2:2,dgx2:2,dgx-h100:2")
    parser.add_argument("--collectives", default="allgather,alltoall")
    parser.add_argument("--sizes", default="1KiB,1MiB,1GiB")
    parser.add_argument("--solvers", default="milp,teccl")
    parser.add_argument("--time-limit", type=float, default=100.0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "milp"))
    args = parser.parse_args()
    rows = []
    header = (f"{'machine':<11} {'coll':<9} {'size':>5} {'solver':<6} {'status':<8} {'solve s':>8} {'gap':>6} "
              f"{'vars':>6} {'ours us':>11} {'template':>24} {'NCCL':>11} {'bound us':>11} "
              f"{'vs tmpl':>7} {'vs NCCL':>7} {'/bound':>6}")
    print(header, flush=True)
    for spec in args.machines.split(","):
        topo = topologies.build(spec)
        for kind in args.collectives.split(","):
            for size_text in args.sizes.split(","):
                size = parse_size(size_text)
                t_name, t_time = best_template(topo, kind, size)
                bound = lower_bound(topo, builtin(kind, topo.n_ranks), size).bound_us
                n_name, n_time = nccl(topo, kind, size, bound)
                for solver in args.solvers.split(","):
                    problem = Problem(topo, builtin(kind, topo.n_ranks),
                                      Request(solver, size=size, time_limit=args.time_limit))
                    start = time.perf_counter()
                    try:
                        outcome = solvers.solve(problem, judge=SimulationJudge())
                        algorithm, details, status, gap = outcome.algorithm, outcome.details, "ok", None
                    except SolverTimeout as exc:
                        algorithm, details, status, gap = exc.best, exc.details, "timeout", exc.gap
                    seconds = time.perf_counter() - start
                    verify(algorithm)
                    ours = simulate(algorithm, size, bound=False, baselines=False).time_us
                    routing = next((s for s in details.get("solves", []) if s["stage"] != "contiguity MILP"), {})
                    row = {
                        "machine": spec, "collective": kind, "size": size, "solver": solver, "status": status,
                        "synthesis_seconds": round(seconds, 2), "gap": gap,
                        "routing_variables": routing.get("variables"), "routing_constraints": routing.get("constraints"),
                        "simulated_us": ours, "best_template": t_name, "best_template_us": t_time,
                        "nccl": n_name, "nccl_us": n_time, "bound_us": bound,
                        "speedup_vs_template": t_time / ours, "speedup_vs_nccl": n_time / ours,
                        "bound_ratio": ours / bound,
                        "solves": details.get("solves", []),
                    }
                    rows.append(row)
                    gap_text = "-" if gap is None else f"{100 * gap:.0f}%"
                    print(f"{spec:<11} {kind:<9} {format_size(size):>5} {solver:<6} {status:<8} {seconds:8.1f} "
                          f"{gap_text:>6} {routing.get('variables', 0):>6} {ours:11.2f} "
                          f"{t_name + ' ' + format(t_time, '.2f'):>24} {n_time:11.2f} {bound:11.2f} "
                          f"{t_time / ours:7.2f} {n_time / ours:7.2f} {ours / bound:6.2f}", flush=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "time_limit": args.time_limit}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    with open(args.out + ".md", "w") as fh:
        fh.write("| machine | collective | size | solver | status | solve s | gap | ours us | best template | "
                 "NCCL us (ring; p2p for alltoall) | bound us | vs template | vs NCCL | / bound |\n")
        fh.write("|---|---|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
        for r in rows:
            gap_text = "-" if r["gap"] is None else f"{100 * r['gap']:.0f}%"
            fh.write(f"| {r['machine']} | {r['collective']} | {format_size(r['size'])} | {r['solver']} | {r['status']} | "
                     f"{r['synthesis_seconds']} | {gap_text} | {r['simulated_us']:.2f} | {r['best_template']} "
                     f"{r['best_template_us']:.2f} | {r['nccl_us']:.2f} | {r['bound_us']:.2f} | "
                     f"{r['speedup_vs_template']:.2f} | {r['speedup_vs_nccl']:.2f} | {r['bound_ratio']:.2f} |\n")
        fh.write(f"\nMeasured with `python benchmarks/milp.py` on {meta['cpus']} shared CPUs "
                 f"(load average {meta['load_average'][0]:.1f} at the end), time limit {args.time_limit:g} s.\n")
    worst = min(r["speedup_vs_template"] for r in rows)
    slowest = max(r["synthesis_seconds"] for r in rows)
    print(f"\nworst ratio template/ours {worst:.3f} (goal >= 1); slowest solve {slowest:.1f} s (goal <= 120)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
