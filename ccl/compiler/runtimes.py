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

from ..algorithm import Algorithm
from ..program import Program
from ..verify import verify
from .stages import program as program_stage


def runnable(schedule: Any, *, channels: int = 1, fuse: bool = True, topology: Any = None,
             in_place: bool = False) -> Program:
    """The verified Program of a schedule file (algorithm, program or MSCCL XML: its Program
    for in-place calls with ``in_place``; ``topology`` places an XML file on a machine),
    Algorithm, SynthesisResult or Program: an algorithm is verified, lowered, and its Program
    verified."""
    if isinstance(schedule, (str, os.PathLike)):
        from .msccl import load_schedule

        schedule = load_schedule(schedule, topology=topology, in_place=in_place)
    if isinstance(schedule, Algorithm):
        verify(schedule)
    return program_stage(schedule, channels=channels, fuse=fuse, check=True)


def executor(schedule: Any, group: Any = None, *, channels: int = 1, fuse: bool = True,
             timeout: float | None = None, validate: str = "first") -> Any:
    """A ``backends.torch.Executor``: the schedule as a collective on ``group`` (None: the
    default process group); see ``Executor`` for ``timeout`` and ``validate``."""
    from backends.torch import Executor

    return Executor(runnable(schedule, channels=channels, fuse=fuse), group, timeout=timeout, validate=validate)


def collectives(schedule: Any, group: Any = None, *, channels: int = 1, fuse: bool = True,
                timeout: float | None = None, validate: str = "first", topology: Any = None) -> Any:
    """A ``backends.torch.Collectives``: torch.distributed's calling conventions (``async_op``
    included) on ``group`` over a schedule, or over a schedule set whose entries are lowered and
    verified on first use (a file holding either, an Algorithm, a SynthesisResult, a Program or a
    ``ScheduleSet``)."""
    from backends.torch import Collectives

    from ..schedule_set import ScheduleSet

    if isinstance(schedule, (str, os.PathLike)):
        from .msccl import load_any

        schedule = load_any(schedule, topology=topology)
    if isinstance(schedule, ScheduleSet):
        def maker(algorithm: Algorithm):
            return lambda: runnable(algorithm, channels=channels, fuse=fuse)

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
    from backends.torch.codegen import emit_script

    return emit_script(runnable(schedule, channels=channels, fuse=fuse), source=source)


class SizeRun(NamedTuple):
    """One size of a local run: the size asked for, the schedule set's entry that served it
    (None for a single schedule) and the ``backends.torch.launch.RunReport``."""

    size: int
    entry: Any
    report: Any


def run_local(schedule: Any, *, size: int, channels: int = 1, fuse: bool = True, topology: Any = None,
              **options: Any) -> Any:
    """Run on local gloo processes, check against torch's collective, time both
    (``backends.torch.launch.run_local`` for the options); returns its RunReport."""
    [run] = run_local_sizes(schedule, sizes=[size], channels=channels, fuse=fuse, topology=topology, **options)
    return run.report


def run_local_sizes(schedule: Any, *, sizes: Sequence[int], channels: int = 1, fuse: bool = True,
                    topology: Any = None, **options: Any) -> list[SizeRun]:
    """``run_local`` at every size, in one launch of processes (see
    ``backends.torch.launch.run_local_sizes``); a schedule set serves each size with the entry
    it picks. Every Program is verified before anything runs."""
    from backends.torch.launch import run_local_sizes as launch

    from ..schedule_set import ScheduleSet

    in_place = bool(options.get("in_place"))
    if isinstance(schedule, (str, os.PathLike)):
        from .msccl import load_any

        schedule = load_any(schedule, topology=topology, in_place=in_place)
    sizes = list(sizes)
    entries = [schedule.pick(size) if isinstance(schedule, ScheduleSet) else None for size in sizes]
    programs: dict[int, Program] = {}
    for entry in entries:
        which = schedule if entry is None else entry.algorithm
        if id(which) not in programs:
            programs[id(which)] = runnable(which, channels=channels, fuse=fuse)
    reports = launch([programs[id(schedule if e is None else e.algorithm)] for e in entries], sizes, **options)
    return [SizeRun(size, entry, report) for size, entry, report in zip(sizes, entries, reports)]
