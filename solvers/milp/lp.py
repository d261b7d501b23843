"""PuLP plumbing shared by the MILP stages: the open solvers, time limits, gaps, model sizes,
progress lines on stderr, and translation of solver failures into the project's errors."""

from __future__ import annotations

import functools
import os
import sys
import time
from dataclasses import dataclass

from ccl.errors import InputError

BACKENDS = ("highs", "cbc")


@dataclass(frozen=True)
class Solved:
    """Outcome of one MILP/LP solve."""

    name: str
    status: str  # "optimal", "feasible" (time limit with a solution), "infeasible", "none"
    objective: float | None
    bound: float | None  # best proven bound on the objective (HiGHS), if known
    gap: float | None  # relative MILP gap, 0 when optimal
    seconds: float
    variables: int
    constraints: int
    binaries: int

    @property
    def has_solution(self) -> bool:
        return self.status in ("optimal", "feasible")

    def to_json(self) -> dict:
        return {
            "stage": self.name,
            "status": self.status,
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "seconds": round(self.seconds, 3),
            "variables": self.variables,
            "constraints": self.constraints,
            "binaries": self.binaries,
        }


def progress(message: str) -> None:
    """One progress line on stderr (never stdout: --json output stays clean); none when
    ``CCL_QUIET`` is set (``ccl ... --quiet``)."""
    if os.environ.get("CCL_QUIET", "") in ("", "0"):
        print(f"ccl: {message}", file=sys.stderr, flush=True)


@functools.cache
def _highs_banner_to_stderr() -> None:
    """HiGHS writes a banner ("Running HiGHS ...") to the process's stdout, from C++, when the
    first ``Highs`` object is made: that would break ``--json`` output. Make that first one with
    file descriptor 1 pointed at stderr (at /dev/null when ``CCL_QUIET`` is set)."""
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        if os.environ.get("CCL_QUIET", "") in ("", "0"):
            sys.stderr.flush()
            os.dup2(2, 1)
        else:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _cbc_path() -> str:
    """The CBC binary: one on PATH, else the one PuLP ships."""
    import shutil

    found = shutil.which("cbc")
    if found:
        return found
    from pulp.apis import coin_api

    return coin_api.pulp_cbc_path


def _warm_highs(pulp):
    """HiGHS through PuLP, handing the variables' initial values to HiGHS as a starting solution
    (PuLP's HiGHS class has no warm start of its own)."""

    class WarmHiGHS(pulp.HiGHS):
        def callSolver(self, lp):
            variables = lp.variables()
            if any(v.varValue is not None for v in variables):
                import highspy

                start = highspy.HighsSolution()
                start.col_value = [float(v.varValue or 0.0) for v in sorted(variables, key=lambda v: v.index)]
                start.value_valid = True
                lp.solverModel.setSolution(start)
            lp.solverModel.run()

    return WarmHiGHS


def solve(model, name: str, backend: str, time_limit: float, *, verbose: bool = True,
          start: dict | None = None) -> Solved:
    """Solve a ``pulp.LpProblem`` with HiGHS (default) or CBC within ``time_limit`` seconds,
    starting from ``start`` (variable -> value, a feasible solution) when given."""
    import pulp

    if backend not in BACKENDS:
        raise InputError(f"unknown MILP backend {backend!r}; known: {', '.join(BACKENDS)}")
    variables = model.variables()
    n_bin = sum(1 for v in variables if v.cat == pulp.LpInteger)
    n_con = model.numConstraints()
    if verbose:
        progress(f"{name}: {len(variables)} variables ({n_bin} integer), {n_con} constraints, "
                 f"{backend}, limit {time_limit:.0f} s")
    limit = max(1.0, time_limit)
    if start:
        for var, value in start.items():
            var.setInitialValue(value)
    if backend == "highs":
        _highs_banner_to_stderr()
        solver = _warm_highs(pulp)(msg=False, timeLimit=limit, threads=1)
    else:
        solver = pulp.COIN_CMD(msg=False, timeLimit=limit, threads=1, warmStart=bool(start), path=_cbc_path())
    start = time.perf_counter()
    try:
        model.solve(solver)
    except pulp.PulpSolverError as exc:  # the solver binary failed: report, do not crash
        from ccl.errors import CclError

        raise CclError(f"{name}: MILP solver {backend} failed: {exc}") from None
    seconds = time.perf_counter() - start
    status_code = model.status
    sol = getattr(model, "sol_status", None)
    objective = pulp.value(model.objective)
    bound = gap = None
    found = objective is not None and all(v.varValue is not None for v in variables)
    if backend == "highs" and getattr(model, "solverModel", None) is not None:
        info = model.solverModel.getInfo()
        found = found and info.primal_solution_status == 2  # a feasible point, not our start echoed
        if n_bin:
            bound = float(info.mip_dual_bound)
            gap = float(info.mip_gap) if info.mip_gap < 1e300 else None
    if not found:
        status = "infeasible" if status_code == pulp.LpStatusInfeasible else "none"
    elif status_code == pulp.LpStatusOptimal and sol in (None, pulp.LpSolutionOptimal):
        status = "optimal"
        gap = 0.0 if gap is None or gap < 1e-9 else gap
    elif sol == pulp.LpSolutionIntegerFeasible or (status_code == pulp.LpStatusOptimal and objective is not None):
        status = "feasible"
    elif status_code == pulp.LpStatusInfeasible:
        status = "infeasible"
    else:
        status = "none"
    if status not in ("optimal", "feasible"):
        objective = None
    result = Solved(name, status, objective, bound, gap, seconds, len(variables), n_con, n_bin)
    if verbose:
        gap_text = "" if result.gap is None else f", gap {100 * result.gap:.2f}%"
        obj_text = "" if objective is None else f", objective {objective:.6g}"
        progress(f"{name}: {status} in {seconds:.2f} s{obj_text}{gap_text}")
    return result


def new_var(model, name: str, lowBound: float | None = None, upBound: float | None = None,  # noqa: N803
            cat: str = "Continuous"):
    """A variable of ``model`` (PuLP 3.3+ attaches variables to their problem; older PuLP
    creates free-standing ones)."""
    import pulp

    if hasattr(model, "add_variable"):
        return model.add_variable(name, lowBound, upBound, cat=cat)
    return pulp.LpVariable(name, lowBound, upBound, cat=cat)
