"""The driver: the pipeline as functions, tying the core to the other packages.

This module (and ``cli``) is the only part of ``ccl`` that imports ``topologies``, ``solvers``,
``dsl`` and ``backends``, and it does so inside functions so ``import ccl`` stays cheap.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from .algorithm import Algorithm
from .collective import Collective, builtin
from .errors import InputError, SolverTimeout
from .problem import Problem, Request, Sketch
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


@dataclass(frozen=True)
class SynthesisResult:
    """What a synthesis run produced: the schedule (None when there is none), its status
    ("ok" or "timeout"), the solver's wall time and optimality gap, and the verification."""

    algorithm: Algorithm | None
    status: str
    seconds: float
    gap: float | None
    verification: VerificationResult | None
    details: dict[str, Any] = field(default_factory=dict)  # the solver's own account (model sizes...)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "synthesis_seconds": round(self.seconds, 6), "gap": self.gap}
        if self.algorithm is not None:
            out.update(self.algorithm.summary())
            out["verified"] = self.verification is not None
        if self.details:
            out["details"] = self.details
        return out


def synthesize(problem: Problem) -> SynthesisResult:
    """Run the requested solver and verify what it returns. A schedule that fails verification
    raises VerificationError: nothing unverified leaves this function."""
    import solvers

    start = time.perf_counter()
    status, gap = "ok", None
    try:
        outcome = solvers.solve(problem)
        algorithm: Algorithm | None = outcome.algorithm
        details = outcome.details
    except SolverTimeout as exc:
        if exc.best is None:
            raise
        algorithm, status, gap, details = exc.best, "timeout", exc.gap, exc.details
    seconds = time.perf_counter() - start
    assert algorithm is not None
    checked = verify(algorithm)
    return SynthesisResult(algorithm, status, seconds, gap, checked, details)


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
