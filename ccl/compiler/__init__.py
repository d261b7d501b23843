"""The driver: the pipeline as functions, tying the core to the other packages.

    parse -> problem -> synthesize (and verify) -> program (lower and verify) -> backends

``stages`` holds the stages up to synthesis, ``lowering`` the program stage, ``timing`` the
simulator with the bound and NCCL's models added (and the cost judge solvers receive),
``loader`` the one schedule loader, ``compare`` every solver side by side, ``tuner`` the best
schedule per size, ``runtimes`` the torch backend. This package, ``ccl.cli`` and ``ccl.torch``
are the only parts of ``ccl`` that import ``topologies``, ``solvers``, ``dsl`` and ``backends``;
the public face (``ccl``) loads them on first use, so ``import ccl`` stays cheap.
"""

from __future__ import annotations

from .compare import Comparison, Row, compare, solver_names
from .lowering import program
from .runtimes import collectives, executor, run_local, runnable, torch_script
from .stages import (
    describe,
    load_sketch,
    load_topology,
    make_collective,
    parse,
    problem_from_options,
    synthesize,
)
from .timing import SimulationJudge, complete, simulate, simulation

__all__ = [
    "Comparison",
    "Row",
    "SimulationJudge",
    "collectives",
    "compare",
    "complete",
    "describe",
    "executor",
    "load_sketch",
    "load_topology",
    "make_collective",
    "parse",
    "problem_from_options",
    "program",
    "run_local",
    "runnable",
    "simulate",
    "simulation",
    "solver_names",
    "synthesize",
    "torch_script",
]
