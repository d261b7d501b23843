"""The exact solver's entry points: options checked, the search built (``searcher``), and the
registry's ``synthesize`` and ``pareto`` run it under the time limit and Ctrl-C.

The searches (``search``, ``formulation``, ``compose``) load z3 and networkx: they are imported
where they are used, so importing ``solvers.smt`` stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ccl.core import interrupt, limits
from ccl.core.algorithm import Algorithm
from ccl.core.collective import Collective
from ccl.core.errors import InputError, Interrupted, SolverTimeout
from ccl.core.problem import Problem
from ccl.core.topology import Topology

METHODS = ("auto", "routing", "dual", "combining", "compose")
OPTIONS = ("method", "scratch", "symmetry", "max_steps", "conflicts")


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
    conflicts = options.get("conflicts")
    if conflicts is not None and (isinstance(conflicts, bool) or not isinstance(conflicts, int) or conflicts < 1):
        raise InputError(f"smt option conflicts must be a positive integer, got {conflicts!r}")
    return {"method": method, "scratch": scratch, "max_steps": max_steps, "symmetry": symmetry,
            "conflicts": conflicts}


def searcher(topology: Topology, collective: Collective, *, time_limit: float | None = None,
             progress: Callable[[str], None] | None = None, **options: Any):
    """A search object with ``instance(S, R, C)``, ``least_rounds(S, C)``, ``least_steps(C, R)``
    and ``pareto(max_chunks)`` (see ``search.py`` and ``compose.py``)."""
    opts = _options(options)
    if opts["method"] == "compose":
        from .compose import ComposedSearch

        return ComposedSearch(topology, collective, time_limit=time_limit, progress=progress,
                              scratch=opts["scratch"], symmetry=opts["symmetry"], conflicts=opts["conflicts"])
    from .formulation import formulation
    from .search import Search

    f = formulation(topology, collective, opts["method"], scratch=opts["scratch"], symmetry=opts["symmetry"])
    return Search(f, time_limit=time_limit, progress=progress, max_steps=opts["max_steps"],
                  conflicts=opts["conflicts"])


def _check_model_size(topology: Topology, collective: Collective, chunks: int, steps: Any) -> None:
    """Before encoding: a model of ``steps`` steps has up to one variable per chunk, link and step
    (``ccl.core.limits.SMT_VARS``; z3 is hopeless long before memory runs out beyond it)."""
    if type(steps) is not int:
        return
    size = collective.n_chunks * chunks * max(1, len(topology.flat().links)) * steps
    limits.SMT_VARS.check(size, f"an exact model of {collective.name} on {topology.name} with {steps} steps and "
                                f"chunk factor {chunks} is too large")


def synthesize(problem: Problem) -> Algorithm:
    from .search import OutOfTime, Partial

    req = problem.request
    C = req.chunks
    _check_model_size(problem.topology, problem.collective, C, req.steps or dict(req.options).get("max_steps"))
    search = searcher(problem.topology, problem.collective, time_limit=req.time_limit, **dict(req.options))
    try:
        with interrupt.cooperative():  # Ctrl-C interrupts z3 (base.Encoding.check); OutOfTime follows
            if req.steps is not None and req.rounds is not None:
                point = search.instance(req.steps, req.rounds, C)
            elif req.steps is not None:
                point = search.least_rounds(req.steps, C)
            else:
                point = search.least_steps(C, req.rounds)
    except Partial as exc:
        best = exc.best
        floor = search.min_rounds(best.steps, C) if hasattr(search, "min_rounds") else best.rounds
        what = (f"a schedule with {best.steps} steps and {best.rounds} rounds whose rounds are not proven fewest "
                f"(bound {floor})")
        if interrupt.requested():
            raise Interrupted(f"stopped by Ctrl-C; kept {what}", best=best.algorithm) from None
        raise SolverTimeout(f"{_limit(search, req)} reached; returning {what}", best=best.algorithm,
                            gap=(best.rounds - floor) / best.rounds) from None
    except OutOfTime:
        if interrupt.requested():
            raise Interrupted("stopped by Ctrl-C before z3 found a schedule") from None
        raise SolverTimeout(f"{_limit(search, req)} reached before z3 found a schedule") from None
    return point.algorithm


def _limit(search: Any, req: Any) -> str:
    """What stopped a search: its budget of conflicts (option ``conflicts``) or the time limit."""
    if getattr(search, "out_of_work", False) or getattr(getattr(search, "rs", None), "out_of_work", False) or \
            getattr(getattr(search, "ag", None), "out_of_work", False):
        return f"the budget of {dict(req.options).get('conflicts')} SAT conflicts"
    return f"time limit of {req.time_limit} s"


def pareto(topology: Topology, collective: Collective, max_chunks: int, *, time_limit: float | None = None,
           progress: Callable[[str], None] | None = None, **options: Any):
    """The Pareto frontier of steps against rounds per chunk for C = 1..max_chunks
    (``search.Frontier``; ``complete`` is False when the time limit or Ctrl-C cut it short,
    ``interrupted`` True for Ctrl-C)."""
    if isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1:
        raise InputError(f"max chunks must be a positive integer, got {max_chunks!r}")
    collective.check_chunk_up(max_chunks)  # the largest instance the search builds
    search = searcher(topology, collective, time_limit=time_limit, progress=progress, **options)
    with interrupt.cooperative():  # Ctrl-C ends the search with the points found (``interrupted``)
        return search.pareto(max_chunks)
