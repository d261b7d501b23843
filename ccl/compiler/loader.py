"""The one schedule loader: any schedule file the project reads, as the value every stage takes.

* ``load_schedule(path)``: one schedule, from an algorithm file, a program file (the project's
  JSON formats, told apart by their "format" field) or an MSCCL XML file (its Program for the
  call asked for, in place or out of place, verified).
* ``load_any(path)``: ``load_schedule``, or a schedule set (every entry verified).
* ``read_xml(path, topology=None)``: an XML file as a ``backends.msccl.interpret.Imported`` (its
  out-of-place and in-place Programs). Without a topology, every pair of gpus is linked
  (``fully-connected:N``); give the machine the file is for to simulate it there.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from backends.msccl import interpret, model
from backends.msccl.limits import never_signalled

from ..core.algorithm import Algorithm
from ..core.errors import InputError, VerificationError
from ..core.program import Program
from ..core.schedule_set import ScheduleSet, is_set_data, set_from_json, verify_set
from ..core.serialize import (
    PROGRAM_FORMAT,
    algorithm_from_json,
    decode,
    program_from_json,
    read_json,
)
from ..core.topology import Topology
from ..core.verify_program import verify_program
from .stages import load_topology

TOPOLOGY_ONLY_FOR_XML = "--topology only applies to MSCCL XML files (a schedule file carries its topology)"


def read_json_schedule(path: str | os.PathLike[str]) -> Any:
    """An algorithm, a program or a schedule set from a JSON file, by its "format" (sets are not
    verified here: ``verify_set``)."""
    data = read_json(path)
    if isinstance(data, dict) and data.get("format") == PROGRAM_FORMAT:
        return decode(path, data, program_from_json, "program")
    if is_set_data(data):
        return decode(path, data, set_from_json, "schedule set")
    return decode(path, data, algorithm_from_json, "algorithm")


def is_xml(path: str | os.PathLike[str]) -> bool:
    """A file to read as MSCCL XML: its name ends in .xml, or its text starts with '<'."""
    path = os.fspath(path)
    if path.lower().endswith(".xml"):
        return True
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a device or FIFO: never read here
            return False
        with open(path, "rb") as fh:
            head = fh.read(256).lstrip()
    except (OSError, ValueError):  # ValueError: a NUL byte in the name (the reader refuses it)
        return False
    return head.startswith(b"<")


def read_xml(path: str | os.PathLike[str], topology: str | Topology | None = None) -> Any:
    """The file as a ``backends.msccl.interpret.Imported``."""
    path = os.fspath(path)
    algo = model.read(path)
    topo = load_topology(topology if topology is not None else f"fully-connected:{max(algo.ngpus, 1)}")
    try:
        return interpret.read_program(algo, topo, path=path)
    except (InputError, VerificationError) as exc:
        raise _noted(exc, algo, []) from None


def _noted(exc: Any, algo: Any, notes: list[str]) -> Any:
    """The error with what the reader adds: the notes given, and the elements the runtimes
    skip (as this reading does) when the file has any."""
    if algo.skipped:
        notes = [*notes, f"the runtimes skip {model.skipped_text(algo)}, and so does this reading"]
    if notes:
        exc.message = f"{exc.message} ({'; '.join(notes)})"
        exc.args = (exc.message,)
    return exc


def verify_imported(imported: Any) -> dict[str, Any]:
    """Verify every way a file claims to be called; VerificationError naming gpu/tb/step (and,
    in place, saying so; and the elements the runtimes skip, when the file has any). A step that
    waits for a step which never signals (hasdep=0) is a deadlock on both runtimes, whatever the
    data: the file fails, however its data would flow."""
    out: dict[str, Any] = {}
    algo = imported.algo
    stuck = never_signalled(algo)
    if stuck:
        gpu, tb, step, line = stuck[0]
        s = algo.gpus[[g.id for g in algo.gpus].index(gpu)].tbs[tb].steps[step]
        more = f" ({len(stuck) - 1} more step(s) wait the same way)" if len(stuck) > 1 else ""
        raise VerificationError(f"{imported.path}:{line}: {model.where(gpu, tb, step)}: deadlock: waits for tb "
                                f"{s.depid} step {s.deps}, which has hasdep=0 and so never signals: msccl and rccl "
                                f"would wait here forever{more}", rank=gpu)
    for mode, claimed, program in (("out_of_place", algo.outofplace, imported.program),
                                   ("in_place", algo.inplace, imported.in_place)):
        if not claimed:
            continue
        try:
            verify_program(program, in_place=mode == "in_place")
        except VerificationError as exc:
            notes = ["the file claims in-place calls (inplace=1)"] if mode == "in_place" else []
            raise _noted(imported.explain(exc, in_place=mode == "in_place"), algo, notes) from None
        out[mode] = True
    return out


def load_schedule(path: str | os.PathLike[str], *, topology: str | Topology | None = None,
                  in_place: bool = False) -> Algorithm | Program:
    """A schedule from a file: an algorithm, a program, or an MSCCL XML file (its Program for
    the call asked for, ``in_place`` or out of place, verified)."""
    if is_xml(path):
        imported = read_xml(path, topology)
        if in_place:
            if imported.in_place is None:
                raise InputError(f"{os.fspath(path)}: the file is not for in-place calls (inplace=0)")
            verify_imported(imported)
            return imported.in_place
        verify_imported(imported)
        if not imported.algo.outofplace:  # its Program is the in-place one: is it right out of place too?
            try:
                verify_program(imported.program)
            except VerificationError:
                raise InputError(f"{os.fspath(path)}: the file is for in-place calls only (outofplace=0) and "
                                 "reads its input through its output: use it in place (--in-place)") from None
        return imported.program
    schedule = read_json_schedule(path)
    if not isinstance(schedule, (Algorithm, Program)):
        raise InputError(f"{os.fspath(path)}: a schedule set ({len(schedule.entries)} schedules by message size); "
                         "this takes one schedule (verify, simulate, run and emit take sets)")
    if topology is not None:
        raise InputError(TOPOLOGY_ONLY_FOR_XML)
    return schedule


def load_any(path: str | os.PathLike[str], *, topology: str | Topology | None = None,
             in_place: bool = False) -> Any:
    """``load_schedule``, or a schedule set (``ccl.core.schedule_set.ScheduleSet``, every entry
    verified) when the file holds one. ``in_place`` picks an XML file's in-place Program; an
    algorithm serves in-place calls through its in-place lowering (``ccl.lower(...,
    in_place=True)``), so it is verified as it is."""
    if is_xml(path):
        return load_schedule(path, topology=topology, in_place=in_place)
    value = read_json_schedule(path)
    if topology is not None:
        raise InputError(TOPOLOGY_ONLY_FOR_XML)
    if isinstance(value, ScheduleSet):
        verify_set(value)
    return value
