"""Running schedules on torch.distributed: the driver lowers and verifies, ``backends.torch``
runs the Program.

* ``executor(schedule, group)``: a collective on a live process group (training scripts);
* ``torch_script(schedule)``: a standalone torchrun script;
* ``run_local(schedule, size=...)``: local gloo processes, checked against torch and timed.

``schedule`` is a schedule file (JSON written by ``ccl synthesize``), an Algorithm, a
SynthesisResult or a Program; ``channels`` and ``fuse`` are the lowering's options.
"""

from __future__ import annotations

import os
from typing import Any

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


def torch_script(schedule: Any, *, channels: int = 1, fuse: bool = True, source: str | None = None) -> str:
    """The text of a standalone torchrun script running the schedule (needs torch only)."""
    from backends.torch.codegen import emit_script

    return emit_script(runnable(schedule, channels=channels, fuse=fuse), source=source)


def run_local(schedule: Any, *, size: int, channels: int = 1, fuse: bool = True, topology: Any = None,
              **options: Any) -> Any:
    """Run on local gloo processes, check against torch's collective, time both
    (``backends.torch.launch.run_local`` for the options); returns its RunReport."""
    from backends.torch.launch import run_local as launch

    program = runnable(schedule, channels=channels, fuse=fuse, topology=topology,
                       in_place=bool(options.get("in_place")))
    return launch(program, size=size, **options)
