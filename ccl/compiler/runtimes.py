"""Running schedules on torch.distributed: the driver lowers and verifies, ``backends.torch``
runs the Program.

* ``executor(schedule, group)``: a collective on a live process group (training scripts);
* ``torch_script(schedule)``: a standalone torchrun script;
* ``run_local(schedule, size=...)``: local gloo processes, checked against torch and timed;
* ``run_local_sizes(schedule, sizes=[...])``: the same at several sizes in one launch.

``schedule`` is a schedule file (JSON written by ``ccl synthesize``), an Algorithm, a
SynthesisResult or a Program; ``channels`` and ``fuse`` are the lowering's options. The local
runs also take a schedule set (a file holding one, or a ``ScheduleSet``): each size runs the
entry ``pick(size)`` chooses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from backends.torch import launch
from backends.torch.codegen import emit_script

from ..core.algorithm import Algorithm
from ..core.errors import InputError, VerificationError
from ..core.limits import LOCAL_PROCESSES
from ..core.problem import SynthesisResult
from ..core.program import Program
from ..core.schedule_set import ScheduleSet
from ..core.units import format_size, parse_seconds, parse_size
from ..core.verify import verify
from ..core.verify_program import verify_program
from .loader import load_any, load_schedule
from .lowering import program as program_stage


def runnable(schedule: Any, *, channels: int = 1, fuse: bool = True, topology: Any = None,
             in_place: bool = False) -> Program:
    """The verified Program of a schedule file (algorithm, program or MSCCL XML: its Program
    for in-place calls with ``in_place``; ``topology`` places an XML file on a machine),
    Algorithm, SynthesisResult or Program: an algorithm is verified, lowered (with ``in_place``,
    to a Program correct in place too, verified both ways), and its Program verified. A Program
    given for in-place calls that is not correct in place runs them on a private copy of the
    input (the torch runtime's ``in_place_safe``)."""
    if isinstance(schedule, (str, os.PathLike)):
        schedule = load_schedule(schedule, topology=topology, in_place=in_place)
    if isinstance(schedule, Algorithm):
        verify(schedule)
    if not in_place or isinstance(schedule, (Algorithm, SynthesisResult)):
        return program_stage(schedule, channels=channels, fuse=fuse, check=True, in_place=in_place)
    program = program_stage(schedule, channels=channels, fuse=fuse, check=False)
    try:  # for in-place calls: right in place, or right out of place (then run on a private copy)
        verify_program(program, in_place=True)
    except VerificationError:
        verify_program(program)
    return program


def executor(schedule: Any, group: Any = None, *, channels: int = 1, fuse: bool = True,
             timeout: float | None = None, validate: str = "first") -> Any:
    """A ``backends.torch.Executor``: the schedule as a collective on ``group`` (None: the
    default process group); see ``Executor`` for ``timeout`` and ``validate``."""
    program = runnable(schedule, channels=channels, fuse=fuse)  # bad input is refused before torch loads
    from backends.torch import Executor  # loads torch, or says how to install it

    return Executor(program, group, timeout=timeout, validate=validate)


def collectives(schedule: Any, group: Any = None, *, channels: int = 1, fuse: bool = True,
                timeout: float | None = None, validate: str = "first", topology: Any = None) -> Any:
    """A ``backends.torch.Collectives``: torch.distributed's calling conventions (``async_op``
    included) on ``group`` over a schedule, or over a schedule set whose entries are lowered and
    verified on first use (a file holding either, an Algorithm, a SynthesisResult, a Program or a
    ``ScheduleSet``). A set's native entries (sizes left to NCCL) run torch.distributed's own
    collective on ``group``."""
    from backends.torch import Collectives  # loads torch, or says how to install it

    if isinstance(schedule, (str, os.PathLike)):
        schedule = load_any(schedule, topology=topology)
    if isinstance(schedule, ScheduleSet):
        def maker(algorithm: Algorithm | None):  # None: a native entry, torch's own collective serves it
            return None if algorithm is None else lambda: runnable(algorithm, channels=channels, fuse=fuse)

        coll = schedule.collective
        entries = [(e.min_bytes, e.max_bytes, e.label, maker(e.algorithm)) for e in schedule.entries]
        return Collectives(schedule.name, coll.kind, coll.n_ranks, coll.root, entries, group, timeout=timeout,
                           validate=validate)
    program = runnable(schedule, channels=channels, fuse=fuse)
    coll = program.collective
    return Collectives(program.name, coll.kind, coll.n_ranks, coll.root, [(0, None, program.name, lambda: program)],
                       group, timeout=timeout, validate=validate)


def torch_script(schedule: Any, *, channels: int = 1, fuse: bool = True, source: str | None = None) -> str:
    """The text of a standalone torchrun script running the schedule (needs torch only)."""
    return emit_script(runnable(schedule, channels=channels, fuse=fuse), source=source)


class SizeRun(NamedTuple):
    """One size of a local run: the size asked for, the schedule set's entry that served it
    (None for a single schedule) and the ``backends.torch.launch.RunReport`` (None where the
    entry is native: the set leaves that size to NCCL, torch's own collective, and nothing of
    ours runs)."""

    size: int
    entry: Any
    report: Any


def run_local(schedule: Any, *, size: int | str, channels: int = 1, fuse: bool = True, topology: Any = None,
              **options: Any) -> Any:
    """Run on local gloo processes, check against torch's collective, time both
    (``backends.torch.launch.run_local`` for the options); returns its RunReport."""
    [run] = run_local_sizes(schedule, sizes=[size], channels=channels, fuse=fuse, topology=topology, **options)
    if run.entry is not None and run.entry.is_native:
        raise InputError(f"calls of {format_size(run.size)} are left to NCCL by the set (entry {run.entry.served_by}, "
                         f"sizes {run.entry.range_text()}): no schedule of ours runs there")
    return run.report


# The element types a local run takes (gloo's, as nccl-tests names them) and their bytes.
DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "complex64": 8, "complex128": 16, "int8": 1,
          "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1}
RUN_OPTIONS = ("ranks", "repeat", "warmup", "dtype", "op", "in_place", "timeout", "check")
MAX_REPEAT = 10**6  # timed (or warm-up) iterations of one local run


def run_local_sizes(schedule: Any, *, sizes: Sequence[int | str], channels: int = 1, fuse: bool = True,
                    topology: Any = None, round_sizes: bool = False, **options: Any) -> list[SizeRun]:
    """``run_local`` at every size, in one launch of processes (see
    ``backends.torch.launch.run_local_sizes``); a schedule set serves each size with the entry
    it picks (a size its native entry leaves to NCCL runs nothing: its report is None). Every
    Program is verified before anything runs.

    A size must be a whole number of ``dtype`` elements in every part of the buffer nccl-tests
    counts (so the size run is the size asked); with ``round_sizes`` it is rounded down to the
    nearest such size (at least one element per part) and the report's ``size_bytes`` says what
    ran. Bad values (size, dtype, counts, timeout) raise InputError before any process starts."""
    unknown = sorted(set(options) - set(RUN_OPTIONS))
    if unknown:
        raise InputError(f"unknown option {unknown[0]!r} of a local run (known: channels, fuse, topology, "
                         f"round_sizes, {', '.join(RUN_OPTIONS)})")
    _check_run_options(options)
    channels, fuse, round_sizes = _positive(channels, "channels"), _flag(fuse, "fuse"), _flag(round_sizes, "round_sizes")
    if isinstance(sizes, (str, int)) or not isinstance(sizes, Sequence) or not sizes:
        raise InputError(f"sizes must be a non-empty list of sizes, got {sizes!r:.60}")
    sizes = [parse_size(size) for size in sizes]
    if min(sizes) < 1:
        raise InputError(f"a local run needs a size of at least 1 byte, got {min(sizes)}")
    in_place = bool(options.get("in_place"))
    if isinstance(schedule, (str, os.PathLike)):
        schedule = load_any(schedule, topology=topology, in_place=in_place)
    n_ranks = getattr(getattr(schedule, "collective", None), "n_ranks", None)
    if isinstance(n_ranks, int):  # before lowering anything: one local process per rank
        _check_processes(n_ranks, f"the schedule {getattr(schedule, 'name', '')!r} is for {n_ranks} ranks")
    asked = sizes
    picked = [schedule.pick(size) if isinstance(schedule, ScheduleSet) else None for size in asked]
    ours = [e is None or e.algorithm is not None for e in picked]  # the rest is left to NCCL: nothing to run
    if not any(ours):
        return [SizeRun(size, e, None) for size, e in zip(asked, picked)]
    entries = [e for e, run in zip(picked, ours) if run]
    sizes = [size for size, run in zip(asked, ours) if run]
    programs: dict[int, Program] = {}
    for entry in entries:
        which = schedule if entry is None else entry.algorithm
        if id(which) not in programs:
            programs[id(which)] = runnable(which, channels=channels, fuse=fuse, in_place=in_place)
    chosen = [programs[id(schedule if e is None else e.algorithm)] for e in entries]
    ranks = options.get("ranks")
    if ranks is not None and ranks != chosen[0].collective.n_ranks:
        raise InputError(f"the schedule {chosen[0].name!r} is for {chosen[0].collective.n_ranks} ranks, not {ranks}")
    if not round_sizes:
        for program, size in zip(chosen, sizes):
            _check_whole(program, size, options.get("dtype", "float32"))
    _check_memory(chosen, sizes, options.get("dtype", "float32"))

    reports = iter(launch.run_local_sizes(chosen, sizes, **options))
    return [SizeRun(size, e, next(reports) if run else None) for size, e, run in zip(asked, picked, ours)]


def _check_processes(n: int, what: str) -> None:
    """A local run starts one process per rank: at most ``ccl.core.limits.LOCAL_PROCESSES``."""
    LOCAL_PROCESSES.check(n, f"{what}: a local run starts one process per rank")


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r:.60}")
    return value


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False, got {value!r:.60}")
    return value


def _check_run_options(options: dict[str, Any]) -> None:
    """The options of a local run, checked here so a bad one is bad input, not a backend error."""
    if options.get("ranks") is not None:
        _positive(options["ranks"], "ranks")
        _check_processes(options["ranks"], f"ranks {options['ranks']}")
    for name in ("repeat", "warmup"):
        if name in options:
            value = options[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPEAT:
                raise InputError(f"{name} must be a whole number in 0..{MAX_REPEAT}, got {value!r:.60}")
    dtype = options.get("dtype", "float32")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r:.40} (a local run takes {', '.join(DTYPES)})")
    op = options.get("op", "sum")
    if not isinstance(op, str) or not op:
        raise InputError(f"op must be a reduction name such as 'sum', got {op!r:.60}")
    for name in ("in_place", "check"):
        if name in options:
            _flag(options[name], name)
    if "timeout" in options:
        timeout = parse_seconds(options["timeout"])
        if not timeout > 0:
            raise InputError(f"timeout must be more than 0 seconds, got {options['timeout']!r}")
        options["timeout"] = timeout


def _part_bytes(program: Program, dtype: str) -> int:
    """Bytes of the smallest size a local run of ``program`` takes exactly: one ``dtype``
    element in each base slot of the buffer nccl-tests counts (``backends.torch.harness``)."""
    coll = program.collective
    slots = max(max(len(x) for x in coll.inputs), max(len(x) for x in coll.outputs)) // coll.chunk_factor
    return DTYPES[dtype] * max(1, slots)


def _check_whole(program: Program, size: int, dtype: str) -> None:
    unit = _part_bytes(program, dtype)
    if size % unit:
        low, high = size - size % unit, size - size % unit + unit
        near = f"{format_size(low)} or {format_size(high)}" if low else format_size(high)
        raise InputError(f"size {size} bytes is not a whole number of {dtype} elements per part of "
                         f"{program.collective.kind} on {program.collective.n_ranks} ranks (a multiple of {unit} "
                         f"bytes): the nearest sizes run exactly are {near} (or round down: --round, round_sizes=True)")


def _check_memory(programs: Sequence[Program], sizes: Sequence[int], dtype: str) -> None:
    """Refuse a size whose buffers cannot fit in this machine's memory before any process
    starts (every rank holds its input and output and copies of them for the check)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        return
    for program, size in zip(programs, sizes):
        coll = program.collective
        unit = max(1, size // _part_bytes(program, dtype)) * DTYPES[dtype]
        per_rank = max(len(i) + len(o) for i, o in zip(coll.inputs, coll.outputs)) // coll.chunk_factor * unit
        need = 3 * per_rank * coll.n_ranks
        if need > total:
            raise InputError(f"size {format_size(size)} needs about {need / 2**30:.3g} GiB of memory for "
                             f"{coll.n_ranks} local ranks; this machine has {total / 2**30:.3g} GiB")
