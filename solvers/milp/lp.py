"""PuLP plumbing shared by the MILP stages: the open solvers, time limits, gaps, model sizes,
progress lines on stderr, and translation of solver failures into the project's errors.

Time: a stage gets a ``time.monotonic()`` deadline; building a model calls ``tick(deadline)``,
which raises ``OutOfTime`` once the deadline has passed or Ctrl-C asked to stop
(``ccl.core.interrupt``), so the stage can fall back to its heuristic (``not_solved`` records that).
HiGHS models are handed over in bulk (``_solve_highs``: arrays, not a call per row) and HiGHS
is stopped at the deadline or on Ctrl-C from its interrupt callbacks.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from ccl.core import interrupt
from ccl.core.errors import CclError, InputError

# pulp and highspy are imported where a model is built or solved: they are slow to import, and
# importing the MILP solvers' modules stays cheap.

BACKENDS = ("highs", "cbc")
MIN_SOLVE_SECONDS = 0.05  # with less time than this left, a model is not handed to a solver
ABANDON_AFTER = 0.3  # seconds HiGHS gets to stop after Ctrl-C before its result is given up


class OutOfTime(Exception):
    """The stage's deadline passed, or Ctrl-C asked to stop, while a model was being built."""


def long_sum(terms: list, deadline: float | None, chunk: int = 4096):
    """``pulp.lpSum(terms)`` for long lists, built a chunk at a time with a ``tick`` between
    (one lpSum of 100k terms takes seconds in PuLP)."""
    import pulp

    total = pulp.LpAffineExpression()
    for i in range(0, len(terms), chunk):
        tick(deadline)
        total.addInPlace(pulp.lpSum(terms[i:i + chunk]))
    return total


def tick(deadline: float | None) -> None:
    """Raise OutOfTime once ``deadline`` (``time.monotonic()``) has passed or Ctrl-C asked to stop;
    model builders call it as they go."""
    if interrupt.stop_due(deadline):
        raise OutOfTime


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


def _interrupt_children() -> None:
    """Pass Ctrl-C on to this process's children (the CBC binary PuLP runs; a terminal's Ctrl-C
    reaches them anyway, ``kill -INT`` of ccl alone does not), and kill those still running half
    a second later. Linux's /proc lists them."""
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            children = [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return
    def send(sig: int) -> None:
        for child in children:
            try:
                os.kill(child, sig)
            except OSError:
                pass

    send(signal.SIGINT)
    threading.Timer(0.5, send, (signal.SIGKILL,)).start()  # CBC may not stop at once on SIGINT


def _cbc_path() -> str:
    """The CBC binary: one on PATH, else the one PuLP ships."""
    found = shutil.which("cbc")
    if found:
        return found
    from pulp.apis import coin_api

    return coin_api.pulp_cbc_path


def _run_unless_interrupted(h) -> bool:
    """Run HiGHS in a worker thread; False when Ctrl-C came and HiGHS did not stop within
    ``ABANDON_AFTER`` seconds (its presolve calls no interrupt callback: a large MILP's can take
    seconds). The abandoned run ends at its time limit or with the process, which is ending."""
    done = threading.Event()

    def work() -> None:
        try:
            h.run()
        finally:
            done.set()

    threading.Thread(target=work, name="highs", daemon=True).start()
    while not done.wait(0.05):
        if interrupt.requested():
            return done.wait(ABANDON_AFTER)
    return True


def _solve_highs(model, variables, n_int: int, deadline: float, warm: bool):
    """Solve ``model`` with HiGHS (highspy) until ``deadline`` or Ctrl-C: the model handed over
    as arrays (PuLP's own bridge adds a row per call and lists the variables several times,
    seconds on large models), the variables' initial values as a starting solution when
    ``warm``, the values found written back to the variables. Returns (found, bound, gap,
    PuLP status, PuLP solution status); found is None when the deadline passed before HiGHS
    could start."""
    import highspy
    import pulp

    inf = highspy.kHighsInf
    n = len(variables)
    index = {id(v): i for i, v in enumerate(variables)}
    sign = -1.0 if model.sense == pulp.LpMaximize else 1.0
    cost = np.zeros(n)
    for v, c in model.objective.items():
        cost[index[id(v)]] = sign * c
    lower = np.array([-inf if v.lowBound is None else float(v.lowBound) for v in variables], dtype=float)
    upper = np.array([inf if v.upBound is None else float(v.upBound) for v in variables], dtype=float)
    starts, cols, vals, row_lo, row_hi = [], [], [], [], []
    listed = model.constraints() if callable(model.constraints) else list(model.constraints.values())
    for k, con in enumerate(listed):
        if k % 4096 == 0 and interrupt.stop_due(deadline):
            return None, None, None, pulp.LpStatusNotSolved, None
        starts.append(len(cols))
        for v, c in con.items():
            if c:
                cols.append(index[id(v)])
                vals.append(c)
        lo, hi = con.getLb(), con.getUb()
        row_lo.append(-inf if lo is None else float(lo))
        row_hi.append(inf if hi is None else float(hi))
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.addCols(n, cost, lower, upper, 0, np.zeros(n + 1, dtype=np.int32), np.zeros(0, dtype=np.int32),
              np.zeros(0))
    if starts:
        h.addRows(len(starts), np.array(row_lo), np.array(row_hi), len(cols), np.array(starts, dtype=np.int32),
                  np.array(cols, dtype=np.int32), np.array(vals, dtype=float))
    ints = np.array([i for i, v in enumerate(variables) if v.cat == pulp.LpInteger], dtype=np.int32)
    if len(ints):
        h.changeColsIntegrality(len(ints), ints, np.full(len(ints), highspy.HighsVarType.kInteger, dtype=np.uint8))
    if warm and any(v.varValue is not None for v in variables):
        start = highspy.HighsSolution()
        start.col_value = [float(v.varValue or 0.0) for v in variables]
        start.value_valid = True
        h.setSolution(start)
    left = interrupt.left(deadline)
    if left < MIN_SOLVE_SECONDS:
        return None, None, None, pulp.LpStatusNotSolved, None
    h.setOptionValue("time_limit", left)

    def stop_check(event) -> None:  # HiGHS's interrupt callbacks: Ctrl-C, or the deadline
        if interrupt.stop_due(deadline):
            event.interrupt()

    h.cbSimplexInterrupt += stop_check
    h.cbIpmInterrupt += stop_check
    h.cbMipInterrupt += stop_check
    if not _run_unless_interrupted(h):
        return None, None, None, pulp.LpStatusNotSolved, None
    status = h.getModelStatus()
    info = h.getInfo()
    found = info.primal_solution_status == 2  # a feasible point, not our start echoed
    if found:
        for v, x in zip(variables, h.getSolution().col_value):
            v.varValue = x
    bound = gap = None
    if n_int and found:
        bound = float(info.mip_dual_bound)
        gap = float(info.mip_gap) if info.mip_gap < 1e300 else None
    S = highspy.HighsModelStatus
    if status == S.kOptimal:
        return found, bound, gap, pulp.LpStatusOptimal, pulp.LpSolutionOptimal
    if status in (S.kInfeasible, S.kUnboundedOrInfeasible):
        return False, bound, gap, pulp.LpStatusInfeasible, pulp.LpSolutionInfeasible
    if found:
        return found, bound, gap, pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible
    return found, bound, gap, pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound


def solve(model, name: str, backend: str, time_limit: float, *, verbose: bool = True,
          start: dict | None = None) -> Solved:
    """Solve a ``pulp.LpProblem`` with HiGHS (default) or CBC within ``time_limit`` seconds,
    starting from ``start`` (variable -> value, a feasible solution) when given."""
    import pulp

    if backend not in BACKENDS:
        raise InputError(f"unknown MILP backend {backend!r}; known: {', '.join(BACKENDS)}")
    if time_limit < MIN_SOLVE_SECONDS or interrupt.requested():  # before listing the variables (slow in PuLP)
        return not_solved(name, verbose=verbose)
    variables = model.variables()
    n_bin = sum(1 for v in variables if v.cat == pulp.LpInteger)
    n_con = model.numConstraints()
    deadline = time.monotonic() + time_limit
    if verbose:
        progress(f"{name}: {len(variables)} variables ({n_bin} integer), {n_con} constraints, "
                 f"{backend}, limit {time_limit:.3g} s")
    if interrupt.left(deadline) < MIN_SOLVE_SECONDS:
        return not_solved(name, verbose=verbose)
    if start:
        for var, value in start.items():
            var.setInitialValue(value)
    t0 = time.perf_counter()
    if backend == "highs":
        _highs_banner_to_stderr()
        found, bound, gap, status_code, sol = _solve_highs(model, variables, n_bin, deadline, bool(start))
        if found is None:  # the deadline passed while the model was handed over
            return not_solved(name, time.perf_counter() - t0, verbose=verbose)
    else:
        limit = max(1.0, interrupt.left(deadline))  # CBC takes whole seconds (and at least one)
        solver = pulp.COIN_CMD(msg=False, timeLimit=limit, threads=1, warmStart=bool(start), path=_cbc_path())
        try:
            with interrupt.on_interrupt(_interrupt_children):  # CBC stops on SIGINT with its best solution
                model.solve(solver)
        except pulp.PulpSolverError as exc:  # the solver binary failed: report, do not crash
            if interrupt.requested():  # killed on Ctrl-C (``_interrupt_children``)
                return not_solved(name, time.perf_counter() - t0, verbose=verbose)
            raise CclError(f"{name}: MILP solver {backend} failed: {exc}") from None
        status_code = model.status
        sol = getattr(model, "sol_status", None)
        bound = gap = None
        found = all(v.varValue is not None for v in variables)
    seconds = time.perf_counter() - t0
    objective = pulp.value(model.objective)
    found = found and objective is not None
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


def not_solved(name: str, seconds: float = 0.0, *, verbose: bool = True) -> Solved:
    """The record of a stage whose model was not solved: its deadline passed (or Ctrl-C came)
    while the model was built or before it could be handed over."""
    if verbose:
        why = "stopped by Ctrl-C" if interrupt.requested() else "no time left"
        progress(f"{name}: {why}, not solved")
    return Solved(name, "none", None, None, None, seconds, 0, 0, 0)


def new_var(model, name: str, lowBound: float | None = None, upBound: float | None = None,  # noqa: N803
            cat: str = "Continuous"):
    """A variable of ``model`` (PuLP 3.3+ attaches variables to their problem; older PuLP
    creates free-standing ones)."""
    import pulp

    if hasattr(model, "add_variable"):
        return model.add_variable(name, lowBound, upBound, cat=cat)
    return pulp.LpVariable(name, lowBound, upBound, cat=cat)
