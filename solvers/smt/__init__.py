"""Exact synthesis with z3 (SCCL class): instances, least steps, least rounds, Pareto frontiers.

Entry point ``synthesize(problem)`` (the registry's), reading the request:

* ``steps`` and ``rounds``: the instance (S, R, C) - a schedule, or InfeasibleError naming the
  bound or z3's proof;
* ``steps`` only: the fewest rounds with exactly S steps;
* ``rounds`` only: the fewest steps within R rounds (then the fewest rounds at those steps);
* neither: the fewest steps (then the fewest rounds at those steps).

``chunks`` is C. ``time_limit`` (seconds) is honoured; on expiry SolverTimeout carries the best
schedule found, if any. Options (``Request.options``):

* ``method``: ``auto`` (default: routing for copies, the dual for reduce/reducescatter-like sums,
  the combining encoding otherwise), ``routing``, ``dual``, ``combining``, or ``compose``
  (allreduce = reducescatter + allgather);
* ``scratch``: at most this many scratch slots per rank;
* ``symmetry``: symmetry breaking (default True; exact either way);
* ``max_steps``: where least-steps and Pareto searches give up (default step bound + 2n + 2).

``pareto(topology, collective, max_chunks)`` returns the frontier. z3 is imported only when one
of these runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ccl.algorithm import Algorithm
from ccl.collective import Collective
from ccl.errors import InputError, SolverTimeout
from ccl.problem import Problem
from ccl.topology import Topology

__all__ = ["pareto", "searcher", "synthesize"]

METHODS = ("auto", "routing", "dual", "combining", "compose")
OPTIONS = ("method", "scratch", "symmetry", "max_steps")


def _options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InputError(f"smt solver has no option {unknown[0]!r}; options: {', '.join(OPTIONS)}")
    method = options.get("method", "auto")
    if method not in METHODS:
        raise InputError(f"smt method must be one of {', '.join(METHODS)}, got {method!r}")
    scratch = options.get("scratch")
    if scratch is not None and (isinstance(scratch, bool) or not isinstance(scratch, int) or scratch < 0):
        raise InputError(f"smt option scratch must be an integer >= 0, got {scratch!r}")
    max_steps = options.get("max_steps")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise InputError(f"smt option max_steps must be a positive integer, got {max_steps!r}")
    symmetry = options.get("symmetry", True)
    if not isinstance(symmetry, bool):
        raise InputError(f"smt option symmetry must be true or false, got {symmetry!r}")
    return {"method": method, "scratch": scratch, "max_steps": max_steps, "symmetry": symmetry}


def searcher(topology: Topology, collective: Collective, *, time_limit: float | None = None,
             progress: Callable[[str], None] | None = None, **options: Any):
    """A search object with ``instance(S, R, C)``, ``least_rounds(S, C)``, ``least_steps(C, R)``
    and ``pareto(max_chunks)`` (see ``search.py`` and ``compose.py``)."""
    opts = _options(options)
    if opts["method"] == "compose":
        from .compose import ComposedSearch

        return ComposedSearch(topology, collective, time_limit=time_limit, progress=progress,
                              scratch=opts["scratch"], symmetry=opts["symmetry"])
    from .formulation import formulation
    from .search import Search

    f = formulation(topology, collective, opts["method"], scratch=opts["scratch"], symmetry=opts["symmetry"])
    return Search(f, time_limit=time_limit, progress=progress, max_steps=opts["max_steps"])


def synthesize(problem: Problem) -> Algorithm:
    from .search import OutOfTime, _Partial

    req = problem.request
    search = searcher(problem.topology, problem.collective, time_limit=req.time_limit, **dict(req.options))
    C = req.chunks
    try:
        if req.steps is not None and req.rounds is not None:
            point = search.instance(req.steps, req.rounds, C)
        elif req.steps is not None:
            point = search.least_rounds(req.steps, C)
        else:
            point = search.least_steps(C, req.rounds)
    except _Partial as exc:
        best = exc.best
        floor = search.min_rounds(best.steps, C) if hasattr(search, "min_rounds") else best.rounds
        raise SolverTimeout(
            f"time limit of {req.time_limit} s reached; returning a schedule with {best.steps} steps and "
            f"{best.rounds} rounds whose rounds are not proven fewest (bound {floor})", best=best.algorithm,
            gap=(best.rounds - floor) / best.rounds) from None
    except OutOfTime:
        raise SolverTimeout(f"time limit of {req.time_limit} s reached before z3 found a schedule") from None
    return point.algorithm


def pareto(topology: Topology, collective: Collective, max_chunks: int, *, time_limit: float | None = None,
           progress: Callable[[str], None] | None = None, **options: Any):
    """The Pareto frontier of steps against rounds per chunk for C = 1..max_chunks
    (``search.Frontier``; ``complete`` is False when the time limit cut it short)."""
    if isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1:
        raise InputError(f"max chunks must be a positive integer, got {max_chunks!r}")
    return searcher(topology, collective, time_limit=time_limit, progress=progress, **options).pareto(max_chunks)
