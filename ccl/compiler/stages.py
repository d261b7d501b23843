"""The pipeline's stages, each a function from values to values:

    FILE.ccl --parse--> AST --describe--> requests (Problems), topologies, hand-written algorithms
    names and options --problem_from_options--> Problem
    Problem --synthesize--> SynthesisResult (solver, then ccl.verify: nothing unverified leaves)
    Algorithm --program--> Program (ccl.lower, then ccl.verify_program)

The program stage lives in ``lowering`` (the cost judge in ``timing`` lowers through it).
``timing`` (simulate, compare's rows), ``compare`` and ``runtimes`` (torch) take it from there.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import dsl
import solvers
import topologies

from ..core import interrupt
from ..core.algorithm import Algorithm
from ..core.collective import Collective, builtin
from ..core.errors import InputError, Interrupted, SolverTimeout
from ..core.judge import CostJudge
from ..core.problem import Problem, Request, Sketch, SynthesisResult
from ..core.serialize import read_json, topology_from_json
from ..core.topology import Topology
from ..core.verify import verify
from .timing import SimulationJudge


def load_topology(spec: str | Topology) -> Topology:
    """A topology from a library spec (``ring:8``, ``dgx1``, ``ndv2:2``), a topology JSON file,
    or a description file: ``FILE.ccl``, ``FILE.ccl:NAME``, ``FILE.ccl:NAME:ARGS`` or
    ``FILE.ccl:NAME(ARGS)`` (see ``dsl.topology_ref``)."""
    if isinstance(spec, Topology):
        return spec
    if re.search(r"\.ccl(:|$)", spec):
        return dsl.load_topology(spec)
    if spec.endswith(".json") or (os.path.sep in spec and ":" not in spec) or os.path.isfile(spec):
        if not os.path.exists(spec):
            raise InputError(f"{spec}: no such file")
        data = read_json(spec)
        try:
            if isinstance(data, dict) and data.get("format") in ("ccl-topology", "ccl-algorithm"):
                data = data["topology"]
            return topology_from_json(data)
        except InputError as exc:
            raise InputError(f"{spec}: {exc.message}") from None
        except KeyError as exc:
            raise InputError(f"{spec}: malformed topology file: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: int() of Infinity, 1e400
            raise InputError(f"{spec}: malformed topology file: {exc}") from None

    return topologies.build(spec)


def load_sketch(path: str) -> Sketch:
    """A sketch from a JSON file: {"relays": [..], "internode": [[a, b], ..], "switch_policy":
    "fewest"|"most", "symmetry": [k, ..], "chunk_partition": k}, every field optional."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: a sketch is a JSON object")
    known = {"relays", "internode", "switch_policy", "symmetry", "chunk_partition"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"{path}: unknown sketch field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    try:
        return Sketch(
            relays=None if data.get("relays") is None else tuple(data["relays"]),
            internode=None if data.get("internode") is None else tuple(tuple(p) for p in data["internode"]),
            switch_policy=data.get("switch_policy", "fewest"),
            symmetry=tuple(data.get("symmetry", ())),
            chunk_partition=data.get("chunk_partition"),
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: malformed sketch: {exc}") from None
    except InputError as exc:
        raise InputError(f"{path}: {exc.message}") from None


def make_collective(kind: str, n_ranks: int, root: int | None = None) -> Collective:
    return builtin(kind, n_ranks, root)


def problem_from_options(
    topology: str | Topology,
    collective: str,
    *,
    root: int | None = None,
    solver: str = "ring",
    chunks: int = 1,
    **request: Any,
) -> Problem:
    """The problem stage from names: a topology spec (or Topology), a collective name and the
    Request's fields."""
    topo = load_topology(topology)
    coll = make_collective(collective, topo.n_ranks, root)
    return Problem(topo, coll, Request(solver=solver, chunks=chunks, **request))


def parse(path: str) -> Any:
    """The AST stage: a description file's syntax tree (``dsl.ast.File``), every node with its
    source span."""
    return dsl.parse_file(path)


def describe(path: str) -> Any:
    """A description file lowered: its topologies, collectives, requests (each a named
    Problem) and hand-written algorithms (``dsl.Module``)."""
    return dsl.load(path)


def synthesize(problem: Problem, *, judge: CostJudge | None = None) -> SynthesisResult:
    """The algorithm stage: run the problem's solver and verify what it returns. Cost-aware
    solvers get ``judge`` (default: the simulator timing the lowered Program, see
    ``timing.SimulationJudge``). A schedule that fails verification raises
    VerificationError: nothing unverified leaves this function. When Ctrl-C stops the solver
    (``ccl.core.interrupt``) with a schedule in hand, ``Interrupted`` is raised with ``best`` the
    verified SynthesisResult (status "interrupted") for the caller to save."""
    if judge is None:
        judge = SimulationJudge()
    start = time.perf_counter()
    status, gap = "ok", None
    try:
        with interrupt.clock():  # the request's time limit counts from here: imports and models included
            outcome = solvers.solve(problem, judge=judge)
        algorithm, details = outcome.algorithm, outcome.details
    except SolverTimeout as exc:
        if not isinstance(exc.best, Algorithm):
            raise
        algorithm, status, gap, details = exc.best, "timeout", exc.gap, exc.details
    except Interrupted as exc:  # Ctrl-C: the best schedule so far, verified, travels in the error
        if not isinstance(exc.best, Algorithm):
            raise
        interrupt.acknowledge()
        result = SynthesisResult(exc.best, "interrupted", time.perf_counter() - start, None, verify(exc.best),
                                 exc.details)
        raise Interrupted(exc.message, best=result, details=exc.details) from None
    seconds = time.perf_counter() - start
    checked = verify(algorithm)
    lowered = getattr(judge, "lowered", None)
    return SynthesisResult(algorithm, status, seconds, gap, checked, details,
                           lowered=lowered(algorithm) if lowered is not None else None)
