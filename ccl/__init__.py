"""ccl: a collective-communication synthesis compiler.

The core: IR types (Topology, Collective, Algorithm, Program), the verifiers, the lowering,
serialization and errors. Solvers, topologies, the DSL and backends live in their own packages
and are reached through the driver (``ccl.compiler``) by the functions here, which import it on
first use so ``import ccl`` stays cheap.

    import ccl
    problem = ccl.problem("dgx1", "allgather", solver="ring", chunks=2)
    result = ccl.synthesize(problem)          # verified on the way out
    ccl.save(result.algorithm, "ag.json")
    program = ccl.lower(result.algorithm)     # the per-rank ops every backend runs
    report = ccl.simulate(result, "64MiB")    # time, busbw, lower bound, NCCL baselines
    allreduce = ccl.executor("ar.json")       # on a live torch.distributed process group
    xml = ccl.to_msccl(result, target="rccl") # MSCCL XML for the msccl executor or RCCL
    tuned = ccl.tune("dgx1", "allreduce")     # every solver, the best per size: a ScheduleSet
    tuned.pick(64 << 20).algorithm            # the schedule serving 64 MiB calls (None: left to NCCL)
    program = ccl.from_msccl("algo.xml")      # a published XML file, verified, as a Program
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The public names (``ccl.api.__all__``) load on first use, and ``ccl.torch`` (drop-in
    collectives for training code, which imports torch) too, so ``import ccl`` loads nothing:
    the command's entry point sets up its Ctrl-C handling before any of the core is imported."""
    if name == "torch":
        return importlib.import_module(f"{__name__}.torch")
    api = importlib.import_module(f"{__name__}.api")
    if name == "__all__" or name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'ccl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *importlib.import_module(f"{__name__}.api").__all__, "torch"})
