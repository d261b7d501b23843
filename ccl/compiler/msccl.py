"""MSCCL XML in the pipeline: export a schedule's Program (``backends.msccl.export``), and read
a file as Programs every other stage takes (``backends.msccl.interpret``).

* ``export_xml(schedule, target=...)``: the verified Program of a schedule as an ``<algo>`` file,
  checked against the target's limits before anything is written, and read back and verified
  (the file's own semantics, through the importer) before it is returned.
* ``unfit(schedule, target)``: why a schedule cannot be exported for a target (the tuner's
  check, so a set tuned for a target holds only schedules that export for it), or None.
* ``protocol_for(kind, topology, lo, hi, sizes)``: the NCCL protocol a size range runs with, by
  NCCL's own rule (``backends.cost.nccl.protocol``) for most of the swept sizes it serves; a
  schedule set's entries carry it and the export writes it.

Reading a file back (as a schedule every stage takes) is the loader's (``ccl.compiler.loader``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from backends.cost.nccl import protocol as nccl_protocol
from backends.msccl import export, interpret, limits, model
from backends.msccl import instances as copies

from ..core import validate
from ..core.algorithm import Algorithm
from ..core.errors import BackendError, InputError, VerificationError
from ..core.program import Program
from ..core.serialize import read_json
from ..core.topology import Topology
from ..core.units import MAX_SIZE
from ..core.verify import verify
from ..core.verify_program import verify_program
from .loader import is_xml, load_schedule, verify_imported
from .lowering import in_place_problem
from .lowering import program as program_stage
from .timing import simulate


def msccl_bytes(kind: str, n_ranks: int, lo: int, hi: int | None) -> tuple[int, int]:
    """A half-open range of call sizes in this tool's convention (``ccl.core.report.SIZE_MEANING``)
    as the runtimes' (minBytes, maxBytes): both inclusive, maxBytes 0 for no limit, in the
    bytes they count (one rank's part for gather and scatter, else the same)."""
    per = n_ranks if kind in ("gather", "scatter") else 1
    lo_x = -(-lo // per)
    if hi is None:
        return lo_x, 0
    hi_x = -(-hi // per) - 1
    return lo_x, max(hi_x, lo_x)


RULE_SIZES = tuple(2**k for k in range(10, 31))  # the tuner's default sweep, 1KiB..1GiB


def representative_size(lo: int, hi: int | None) -> int:
    """The size a range's protocol is chosen at: its geometric middle (from 1 byte), or its
    start when it has no upper limit."""
    if hi is None:
        return max(1, lo)
    return max(1, math.isqrt(max(1, lo) * max(1, hi - 1)))


def protocol_for(kind: str, topology: Topology, lo: int, hi: int | None, sizes: Sequence[int] = ()) -> str:
    """The protocol calls of ``lo <= size < hi`` bytes run with, by NCCL's own choice
    (``backends.cost.nccl.protocol``): the one it makes for most of ``sizes`` (the swept sizes
    the range serves, by default the tuner's default sweep ``RULE_SIZES``; ties go to the larger
    sizes' choice), or, when none falls in the range, its choice at the range's
    ``representative_size``. A rule until a calibrated cost model times the protocols."""
    inside = [x for x in (sizes or RULE_SIZES) if x >= lo and (hi is None or x < hi)]
    if not inside:
        return nccl_protocol(kind, topology, representative_size(lo, hi))
    votes: dict[str, tuple[int, int]] = {}
    for x in inside:
        p = nccl_protocol(kind, topology, x)
        count, top = votes.get(p, (0, 0))
        votes[p] = (count + 1, max(top, x))
    return max(votes, key=lambda p: votes[p])


def recorded_protocol(path: Any) -> str | None:
    """The protocol a schedule file records: an MSCCL XML file's ``proto``, or the ``protocol``
    a program file imported from one keeps; None for files without one."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    if is_xml(path):
        proto = model.read(os.fspath(path)).proto
        return proto if proto in model.PROTOCOLS else None
    try:
        data = read_json(path)
    except (InputError, OSError, ValueError):
        return None
    proto = data.get("protocol") if isinstance(data, dict) else None
    return proto if proto in model.PROTOCOLS else None


def unfit(schedule: Any, target: str, *, channels: int = 1, fuse: bool = True) -> limits.Unfit | None:
    """Why ``schedule`` (verified) cannot be exported for ``target``, or None when it can: its
    layout for out-of-place calls, whose input copies make it the largest a default export
    writes (``ccl emit msccl`` lays out the same ops, and reads the file back before writing
    it), without the forward fusion, which an export drops where only the plain layout fits."""
    tgt = limits.target(target)
    program = program_stage(schedule, channels=channels, fuse=fuse, check=False)
    try:
        export.export(program, tgt, in_place=False, out_of_place=True, forward=False)
    except limits.Unfit as exc:
        return exc
    return None


def export_xml(schedule: Any, *, target: str = "msccl", protocol: str = "Simple", instances: int = 1,
               min_bytes: int = 0, max_bytes: int = 0, mode: str = "auto", name: str | None = None,
               forward: str = "auto", channels: int = 1, fuse: bool = True) -> tuple[str, dict[str, Any]]:
    """The XML text of a schedule (file path, Algorithm, SynthesisResult or Program) and a
    summary. ``mode``: ``auto`` (in place too wherever a Program correct in place can be had,
    see ``_claim``), ``both``, ``inplace``, ``outofplace``; the summary's ``in_place`` says
    what was claimed, how, and why not. ``forward``: fuse a receive and the send forwarding
    it into rcs/rrcs steps (targets that run them): ``on``, ``off``, or ``auto``, where the
    simulator keeps them only if the file is no slower at ``max_bytes`` (64 MiB when
    unlimited)."""
    validate.text(target, "target")
    tgt = limits.target(target)
    validate.choice(protocol, "protocol", tuple(model.PROTOCOLS))
    validate.choice(mode, "mode", ("auto", "both", "inplace", "outofplace"))
    validate.choice(forward, "forward", ("auto", "on", "off"))
    if name is not None:
        validate.text(name, "name", empty=False)
    validate.integer(instances, "instances", least=1)
    if instances > tgt.max_channels:
        raise InputError(f"--instances {instances}: {tgt.name} allows at most {tgt.max_channels} channels")

    validate.integer(min_bytes, "min_bytes", least=0, most=MAX_SIZE)
    validate.integer(max_bytes, "max_bytes (0: no limit)", least=0, most=MAX_SIZE)
    if min_bytes < 0 or max_bytes < 0 or (max_bytes and max_bytes < min_bytes):
        raise InputError(f"--min-bytes {min_bytes} and --max-bytes {max_bytes}: need 0 <= min <= max "
                         "(max 0: no upper limit)")
    if isinstance(schedule, (str, os.PathLike)):
        schedule = load_schedule(schedule)
    if isinstance(schedule, Algorithm):
        verify(schedule)
    program, in_place, out_of_place, claim, fallback = _claim(schedule, mode, tgt, instances, channels, fuse)

    def build(forward: bool) -> tuple[Any, str, Any]:
        algo = export.export(program, tgt, name=name, proto=protocol, in_place=in_place,
                             out_of_place=out_of_place, min_bytes=min_bytes, max_bytes=max_bytes, forward=forward)
        text = model.dumps(algo)
        # read the file back: what the runtime will run must be what was verified
        again = interpret.read_program(model.parse(text, "<exported>"), program.topology, path="<exported>")
        try:
            verify_imported(again)
        except VerificationError as exc:  # a defect of the exporter, never the user's
            raise BackendError(f"internal error: the exported file does not verify: {exc.message}") from None
        return algo, text, again

    if forward not in ("auto", "on", "off"):
        raise InputError(f"forward must be auto, on or off, got {forward!r}")
    def attempt() -> tuple[Any, str, Any]:
        try:
            return build(forward != "off")
        except limits.Unfit:
            if forward != "auto":
                raise
            return build(False)  # the fused layout does not fit, the plain one may

    try:
        algo, text, again = attempt()
    except BackendError as exc:
        if fallback is None or exc.message.startswith("internal error"):
            raise
        # auto: the Program lowered for in-place calls does not fit the target; the
        # out-of-place one may (a file for out-of-place calls only, and the summary says why)
        program, in_place, out_of_place = fallback, False, True
        claim = {**claim, "claimed": False, "reason": f"the Program lowered for in-place calls does not fit "
                                                      f"{tgt.name}: {exc.message}"}
        algo, text, again = attempt()
    judged = None
    fused_forwards = sum(1 for g in algo.gpus for tb in g.tbs for s in tb.steps if s.type in ("rcs", "rrcs"))
    if forward == "auto" and fused_forwards:
        # a threadblock holding a receive and the send it forwards to runs them in one queue:
        # keep that only where the simulator finds it no slower than separate queues

        size = max_bytes or 64 << 20
        plain = build(False)
        fused_us = simulate(again.program, size, bound=False, baselines=False).time_us
        plain_us = simulate(plain[2].program, size, bound=False, baselines=False).time_us
        judged = {"size": size, "forwards_fused_us": round(fused_us, 3), "separate_us": round(plain_us, 3)}
        if plain_us < fused_us * (1 - 1e-9):
            algo, text, again = plain
    steps = [len(tb.steps) for g in algo.gpus for tb in g.tbs]
    summary = {"name": algo.name, "target": tgt.name, "collective": algo.coll, "ngpus": algo.ngpus,
               "proto": algo.proto, "nchannels": algo.nchannels, "nchunksperloop": algo.nchunksperloop,
               "inplace": algo.inplace, "outofplace": algo.outofplace, "minBytes": algo.min_bytes,
               "maxBytes": algo.max_bytes, "instances": instances, "in_place": claim,
               "threadblocks": max(len(g.tbs) for g in algo.gpus),
               "max_steps": max(steps, default=0), "steps": sum(steps),
               "nops": sum(1 for g in algo.gpus for tb in g.tbs for s in tb.steps if s.type == "nop"),
               "fused": sum(1 for g in algo.gpus for tb in g.tbs for s in tb.steps if s.type in ("rrc", "rcs", "rrs", "rrcs")),
               "forward": judged,
               "limits": {"threadblocks": tgt.max_tbs, "steps": tgt.max_steps, "channels": tgt.max_channels,
                          "cnt": tgt.max_cnt}}
    return text, summary


def _claim(schedule: Any, mode: str, tgt: Any, instances: int, channels: int,
           fuse: bool) -> tuple[Program, bool, bool, dict[str, Any], Program | None]:
    """The Program a file is made of, the calls it claims (in place, out of place), and what the
    summary says of the in-place claim. An in-place claim holds only for a Program whose every
    read of a memory the runtimes alias (``Collective.in_place_aliases``: an alltoall's whole
    buffer) is ordered before every write to it by dependencies (``verify_program(...,
    in_place=True)``). The out-of-place lowering often is (every built-in but alltoall, as a
    rule); else an algorithm is lowered in place (``ccl.lower(..., in_place=True)``: staging,
    snapshots and dependencies added, ``ops_added`` and ``scratch_added`` in the summary), and
    one Program serves both kinds of call. A Program given as it is (a program file, an XML
    file) claims in place only when it is correct in place; ``auto`` then leaves the claim out
    and says why. The last value is the out-of-place Program ``auto`` falls back on when the
    one lowered in place does not fit the target (None where there is no such choice)."""
    plain = program_stage(schedule, channels=channels, fuse=fuse, check=True)
    export.check_exportable(plain, tgt)  # the MSCCL runtimes cannot run in-switch reductions
    if instances * plain.channels > tgt.max_channels:  # each instance has its own channels
        raise InputError(f"--instances {instances} with {plain.channels} channel(s) each needs "
                         f"{instances * plain.channels} channels; {tgt.name} allows at most {tgt.max_channels}")
    plain = _replicated(plain, instances)
    if mode == "outofplace":
        return plain, False, True, {"claimed": False, "reason": "--mode outofplace", "lowered_in_place": False}, None
    why = in_place_problem(plain)
    if why is None:
        return plain, True, mode != "inplace", {"claimed": True, "reason": None, "lowered_in_place": False}, None
    if isinstance(schedule, Program):
        if mode == "auto":
            return plain, False, True, {"claimed": False, "reason": f"not correct in place: {why}",
                                        "lowered_in_place": False}, None
        raise BackendError(f"the schedule is not correct in place ({why}); export it with --mode outofplace")
    fixed = program_stage(schedule, channels=channels, fuse=fuse, check=False, in_place=True)
    try:
        verify_program(fixed)
    except VerificationError as exc:  # a defect of the lowering, never the user's
        raise BackendError(f"internal error: the in-place lowering does not verify: {exc.message}") from None
    fixed = _replicated(fixed, instances)
    problem = in_place_problem(fixed)
    if problem is not None:  # likewise
        raise BackendError(f"internal error: the in-place lowering is not correct in place: {problem}")
    return fixed, True, mode != "inplace", {
        "claimed": True, "reason": None, "lowered_in_place": True, "ops_added": fixed.n_ops - plain.n_ops,
        "scratch_added": sum(map(len, fixed.scratch)) - sum(map(len, plain.scratch)),
        "why": f"the out-of-place lowering is not correct in place ({why})"}, plain if mode == "auto" else None


def _replicated(program: Program, instances: int) -> Program:
    if instances == 1:
        return program
    program = copies.replicate(program, instances)
    try:
        verify_program(program)
    except VerificationError as exc:  # a defect of the replication, never the user's
        raise BackendError(f"internal error: {instances} instances do not verify: {exc.message}") from None
    return program
