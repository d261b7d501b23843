"""The public functions and names behind ``import ccl`` (the package's face loads this module
on first use of any of them, so that ``import ccl`` and the ``ccl`` command's entry point cost
nothing before the command has set up its Ctrl-C handling). Use them as ``ccl.NAME``."""

from __future__ import annotations

from typing import Any

from .core import collective as collectives
from .core import validate
from .core.algorithm import BUFFERS, OPS, Algorithm, Transfer
from .core.collective import Collective
from .core.errors import (
    BackendError,
    CclError,
    CollectiveError,
    DslError,
    InfeasibleError,
    InputError,
    Interrupted,
    SolverTimeout,
    Span,
    TopologyError,
    VerificationError,
    Z3Error,
)
from .core.problem import Problem, Request, Sketch, SynthesisResult
from .core.program import Op, Program
from .core.report import Report
from .core.schedule_set import ScheduleSet
from .core.schedule_set import load_set as _load_set
from .core.serialize import load_algorithm as _load
from .core.serialize import save_algorithm as _save
from .core.topology import Link, SharedLimit, Switch, Topology
from .core.units import parse_size
from .core.verify import VerificationResult, verify
from .core.verify_program import ProgramVerification, verify_program

__all__ = [
    "BUFFERS",
    "OPS",
    "Algorithm",
    "BackendError",
    "CclError",
    "Collective",
    "CollectiveError",
    "DslError",
    "InfeasibleError",
    "InputError",
    "Interrupted",
    "Link",
    "Op",
    "Problem",
    "Program",
    "ProgramVerification",
    "Report",
    "Request",
    "SharedLimit",
    "Sketch",
    "SolverTimeout",
    "Span",
    "Switch",
    "ScheduleSet",
    "SynthesisResult",
    "Topology",
    "TopologyError",
    "Transfer",
    "VerificationError",
    "VerificationResult",
    "Z3Error",
    "collectives",
    "executor",
    "from_msccl",
    "load",
    "load_set",
    "lower",
    "problem",
    "save",
    "simulate",
    "synthesize",
    "to_msccl",
    "topology",
    "tune",
    "verify",
    "verify_program",
]


def lower(algorithm: Algorithm, *, channels: int = 1, fuse: bool = True, in_place: bool = False) -> Program:
    """The Program that runs ``algorithm`` on point-to-point runtimes (``ccl.core.lower``: the
    order, staging and dependency rules). ``channels`` spreads each pair's messages over that
    many channels; ``fuse=False`` keeps every transfer its own message; ``in_place=True`` makes
    it correct in place too (with the runtimes' aliasing, ordered by dependencies)."""
    from .core.lower import lower as run  # the lowering runs on numpy: loaded on first use

    return run(algorithm, channels=channels, fuse=fuse, in_place=in_place)


def topology(spec: str) -> Topology:
    """A topology from the library (``"ring:8"``, ``"dgx1"``, ``"ndv2:2"``) or a JSON file."""
    from .compiler import load_topology

    return load_topology(_topology_spec(spec))


def _topology_spec(spec: Any, what: str = "topology") -> Any:
    """``spec`` if it names a topology (a spec or file name, or a Topology), else InputError."""
    if isinstance(spec, Topology):
        return spec
    if not isinstance(spec, str) and not hasattr(spec, "__fspath__"):
        raise InputError(f"{what} must be a spec such as 'ring:8', a file name or a Topology, got "
                         f"{type(spec).__name__} {validate.show(spec)}")
    return validate.path(spec, what)


def problem(topology: str | Topology, collective: str, **options: Any) -> Problem:
    """A Problem from a topology spec (or Topology) and a collective name; options are the
    Request's fields (solver, chunks, steps, rounds, size, time_limit, ...) and ``root``."""
    from .compiler import problem_from_options

    validate.options(options, PROBLEM_OPTIONS, "ccl.problem")
    return problem_from_options(_topology_spec(topology), validate.text(collective, "collective", empty=False),
                                **options)


def synthesize(problem: Problem) -> SynthesisResult:
    """Run the problem's solver and verify the schedule (cost-aware solvers are judged by the
    simulator)."""
    from .compiler import synthesize as run

    return run(validate.instance(problem, Problem, "ccl.synthesize's problem"))


def simulate(schedule: Algorithm | SynthesisResult | Program, size: int | str, **options: Any) -> Report:
    """Lower a schedule (unless it is a Program) and simulate it called with ``size`` bytes (an
    int or text such as ``"64MiB"``, nccl-tests convention); the report carries the lower bound,
    NCCL's models and, for a SynthesisResult, the synthesis figures. Options: the lowering's
    (``channels``, ``fuse``) and the simulator's (``mode``, ``slices``, ``in_place``,
    ``overlap_latency``, ``local_bandwidth``; see ``backends.sim``)."""
    from .compiler import simulate as run

    validate.instance(schedule, (Algorithm, SynthesisResult, Program), "ccl.simulate's schedule")
    validate.options(options, SIMULATE_OPTIONS, "ccl.simulate")
    nbytes = parse_size(size)
    if nbytes < 1:
        raise InputError(f"size must be at least 1 byte, got {validate.show(size)}")
    return run(schedule, nbytes, **options)


def executor(schedule: Any, group: Any = None, **options: Any) -> Any:
    """A schedule (file, Algorithm, SynthesisResult or Program) as a collective on a live
    torch.distributed process group (None: the default group): verified, lowered and verified
    again, then run by ``backends.torch.Executor``. Options: ``channels``, ``fuse``, ``timeout``,
    ``validate``."""
    from .compiler import executor as make

    validate.options(options, ("channels", "fuse", "timeout", "validate"), "ccl.executor")
    return make(_schedule(schedule, "ccl.executor"), group, **options)


def to_msccl(schedule: Any, **options: Any) -> str:
    """A schedule (file, Algorithm, SynthesisResult or Program) as MSCCL XML text, checked
    against the runtime's limits and read back and verified. Options: ``target`` ("msccl" or
    "rccl"), ``protocol``, ``instances``, ``min_bytes``, ``max_bytes``, ``mode``, ``name`` and the
    lowering's ``channels``, ``fuse`` (see ``ccl.compiler.msccl.export_xml``)."""
    from .compiler.msccl import export_xml

    validate.options(options, TO_MSCCL_OPTIONS, "ccl.to_msccl")
    return export_xml(_schedule(schedule, "ccl.to_msccl"), **options)[0]


def tune(topology: str | Topology, collective: str, **options: Any) -> ScheduleSet:
    """The best verified schedule per message size: every applicable solver within a work
    budget, each simulated over the sizes, kept per size range (what ``ccl synthesize`` does by
    default). Options: ``root``, ``sizes`` (text such as ``"1KiB..1GiB"`` or a list of bytes),
    ``solvers``, ``chunks``, ``time_budget`` (seconds of work on the reference machine: the same
    request gives the same set on any machine), ``deadline`` (a wall-clock stop that leaves the
    set incomplete), ``target`` ("msccl", "rccl" or "torch": every entry exports for it),
    ``channels``, ``fuse``, ``cache`` (the result cache; default on), ``native`` (default on: a
    size where NCCL's own pick beats every schedule goes to NCCL, an entry without algorithm).
    ``ScheduleSet.pick(size)`` is the entry serving a size; save it with
    ``ccl.core.schedule_set.save_set``."""
    from .compiler import load_topology
    from .compiler.tuner import tune as run

    validate.options(options, TUNE_OPTIONS, "ccl.tune")
    return run(load_topology(_topology_spec(topology)), validate.text(collective, "collective", empty=False),
               **options).schedule_set


def from_msccl(path: str, topology: str | Topology | None = None, *, in_place: bool = False) -> Program:
    """An MSCCL XML file as a verified Program (its out-of-place Program, or with ``in_place``
    its in-place one); ``topology`` is the machine it runs on (default: every pair of gpus
    linked). VerificationError names gpu/tb/step when the file is wrong."""
    from .compiler.loader import load_schedule

    if topology is not None:
        topology = _topology_spec(topology)
    return load_schedule(validate.path(path), topology=topology, in_place=validate.flag(in_place, "in_place"))


def _schedule(schedule: Any, where: str) -> Any:
    """A schedule argument: a file name, an Algorithm, a SynthesisResult or a Program."""
    if isinstance(schedule, (Algorithm, SynthesisResult, Program, ScheduleSet)):
        return schedule
    if isinstance(schedule, str) or hasattr(schedule, "__fspath__"):
        return validate.path(schedule, f"{where}'s schedule file")
    raise InputError(f"{where}: expected an Algorithm, a SynthesisResult or a Program, got "
                     f"{type(schedule).__name__} {validate.show(schedule)} (or give a schedule file name)")


PROBLEM_OPTIONS = ("root", "solver", "chunks", "steps", "rounds", "size", "time_limit", "objective", "sketch",
                   "options")
SIMULATE_OPTIONS = ("channels", "fuse", "bound", "baselines", "mode", "slices", "in_place", "overlap_latency", "runtime", "protocol",
                    "local_bandwidth")
TO_MSCCL_OPTIONS = ("target", "protocol", "instances", "min_bytes", "max_bytes", "mode", "name", "forward", "channels",
                    "fuse")
TUNE_OPTIONS = ("root", "sizes", "solvers", "chunks", "time_budget", "channels", "fuse", "options", "progress", "cache",
                "target", "deadline", "native")


def load(path: Any) -> Algorithm:
    """An algorithm file (JSON written by ``ccl.save`` or ``ccl synthesize``), not verified."""
    return _load(validate.path(path))


def save(alg: Algorithm, path: Any) -> None:
    """Write ``alg`` as JSON to ``path`` (atomically)."""
    _save(validate.instance(alg, Algorithm, "ccl.save's algorithm"), validate.path(path))


def load_set(path: Any) -> ScheduleSet:
    """A schedule set file (JSON written by ``ccl synthesize``'s tuner), not verified."""
    return _load_set(validate.path(path))

