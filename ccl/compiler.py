"""The driver: the pipeline as functions, tying the core to the other packages.

This module (and ``cli``) is the only part of ``ccl`` that imports ``topologies``, ``solvers``,
``dsl`` and ``backends``, and it does so inside functions so ``import ccl`` stays cheap.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

from .algorithm import Algorithm
from .collective import Collective, builtin
from .errors import InputError, SolverTimeout
from .problem import Problem, Request
from .serialize import read_json, topology_from_json
from .topology import Topology
from .verify import VerificationResult, verify


def load_topology(spec: str | Topology) -> Topology:
    """A topology from a library spec (``ring:8``, ``dgx1``, ``ndv2:2``), a topology JSON file,
    or a description file: ``FILE.ccl``, ``FILE.ccl:NAME``, ``FILE.ccl:NAME:ARGS`` or
    ``FILE.ccl:NAME(ARGS)`` (see ``dsl.spec``)."""
    if isinstance(spec, Topology):
        return spec
    if re.search(r"\.ccl(:|$)", spec):
        import dsl

        return dsl.load_topology(spec)
    if spec.endswith(".json") or (os.path.sep in spec and ":" not in spec) or os.path.isfile(spec):
        if not os.path.exists(spec):
            raise InputError(f"{spec}: no such file")
        data = read_json(spec)
        if isinstance(data, dict) and data.get("format") == "ccl-topology":
            data = data["topology"]
        elif isinstance(data, dict) and data.get("format") == "ccl-algorithm":
            data = data["topology"]
        try:
            return topology_from_json(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{spec}: malformed topology file: {exc}") from None
    import topologies

    return topologies.build(spec)


def make_collective(kind: str, n_ranks: int, root: int | None = None) -> Collective:
    return builtin(kind, n_ranks, root)


@dataclass(frozen=True)
class SynthesisResult:
    """What a synthesis run produced: the schedule (None when there is none), its status
    ("ok" or "timeout"), the solver's wall time and optimality gap, and the verification."""

    algorithm: Algorithm | None
    status: str
    seconds: float
    gap: float | None
    verification: VerificationResult | None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "synthesis_seconds": round(self.seconds, 6), "gap": self.gap}
        if self.algorithm is not None:
            out.update(self.algorithm.summary())
            out["verified"] = self.verification is not None
        return out


def synthesize(problem: Problem) -> SynthesisResult:
    """Run the requested solver and verify what it returns. A schedule that fails verification
    raises VerificationError: nothing unverified leaves this function."""
    import solvers

    start = time.perf_counter()
    status, gap = "ok", None
    try:
        algorithm: Algorithm | None = solvers.synthesize(problem)
    except SolverTimeout as exc:
        if exc.best is None:
            raise
        algorithm, status, gap = exc.best, "timeout", exc.gap
    seconds = time.perf_counter() - start
    assert algorithm is not None
    checked = verify(algorithm)
    return SynthesisResult(algorithm, status, seconds, gap, checked)


def problem_from_options(
    topology: str | Topology,
    collective: str,
    *,
    root: int | None = None,
    solver: str = "ring",
    chunks: int = 1,
    **request: Any,
) -> Problem:
    topo = load_topology(topology)
    coll = make_collective(collective, topo.n_ranks, root)
    return Problem(topo, coll, Request(solver=solver, chunks=chunks, **request))


def simulate(schedule: Algorithm | SynthesisResult, size: int | str, **options: Any) -> Any:
    """Simulate an Algorithm (assumed verified) or a SynthesisResult at ``size`` bytes
    (``64MiB`` style text accepted); returns a ``ccl.report.Report``."""
    from backends.sim import simulate as run

    from .units import parse_size

    nbytes = parse_size(size) if isinstance(size, str) else size
    if isinstance(schedule, SynthesisResult):
        if schedule.algorithm is None:
            raise InputError("the synthesis produced no schedule to simulate")
        report = run(schedule.algorithm, nbytes, **options)
        return report.with_synthesis(schedule.seconds, schedule.status, schedule.gap)
    return run(schedule, nbytes, **options)
