"""``ccl verify``: check that a schedule implements its collective (a schedule file, a program
file, or an MSCCL XML file, which is also checked against each runtime's limits)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from typing import Any

from backends.msccl import limits, model

from ..compiler.loader import is_xml, load_any, read_xml, verify_imported
from ..compiler.lowering import in_place_note, in_place_verdict
from ..core.algorithm import Algorithm
from ..core.display import shown
from ..core.errors import InputError
from ..core.schedule_set import ScheduleSet
from ..core.verify import verify
from ..core.verify_program import verify_program
from .common import command, emit
from .stages import add_emit, emit_algorithms, emit_programs


def cmd_verify(args: argparse.Namespace) -> int:
    """One file, or several one after the other (the first that fails stops with its error)."""
    if len(args.files) == 1:
        args.file = args.files[0]
        return verify_one(args)

    if args.emit is not None:
        raise InputError("--emit takes one file")
    reports = []
    for path in args.files:
        args.file = path
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            verify_one(args)
        reports.append(json.loads(buffer.getvalue()) if args.json else buffer.getvalue().rstrip("\n"))
    emit(args, {"ok": True, "files": reports}, "\n".join(reports) if not args.json else "")
    return 0


def verify_one(args: argparse.Namespace) -> int:
    if is_xml(args.file):
        return _verify_xml(args)

    schedule = load_any(args.file, topology=args.topology)
    if isinstance(schedule, ScheduleSet):
        return _verify_set(args, schedule)
    if not isinstance(schedule, Algorithm):
        if args.emit == "algorithm":
            raise InputError(f"{shown(args.file)} is a program file: it has no algorithm stage (try --emit program)")
        if args.emit == "program":
            return emit_programs(args, [schedule])
        verify_program(schedule)
        verdict = in_place_verdict(schedule)
        data = {"ok": True, "file": args.file, **schedule.summary(), **_in_place_fields(verdict)}
        emit(args, data, f"ok: {shown(args.file)}: program {schedule.name} implements {schedule.collective} on "
                         f"{schedule.topology.name}\n  {schedule.n_ops} ops, {schedule.n_messages} messages; "
                         f"{in_place_note(verdict)}")
        return 0
    alg = schedule
    result = verify(alg)
    if args.emit == "algorithm":
        return emit_algorithms(args, [alg])
    if args.emit == "program":
        return emit_programs(args, [alg])
    verdict = in_place_verdict(alg)
    data = {"ok": True, "file": args.file, **alg.summary(), **_in_place_fields(verdict),
            "chunk_transfers": result.chunk_transfers}
    text = (f"ok: {shown(args.file)}: {alg.name} implements {alg.collective} on {alg.topology.name}\n"
            f"  {alg.n_steps} steps, {len(alg.transfers)} transfers; {in_place_note(verdict)}")
    emit(args, data, text)
    return 0


def _verify_set(args: argparse.Namespace, sset: Any) -> int:
    """Every entry of a schedule set verified (``load_any`` did it; here in place too)."""
    if args.emit == "algorithm":
        return emit_algorithms(args, [e.algorithm for e in sset.schedules])
    if args.emit == "program":
        return emit_programs(args, [e.algorithm for e in sset.schedules])
    if args.emit is not None:
        raise InputError(f"--emit {args.emit} does not apply to a schedule set")
    rows, lines = [], []
    for k, e in enumerate(sset.entries):
        if e.algorithm is None:  # NCCL's own: no schedule of ours to verify
            rows.append({"entry": k, **e.summary(), "in_place_ok": True, "verified": False})
            lines.append(f"  {k}: {e.range_text():<26} {e.served_by}: left to NCCL, nothing to verify")
            continue
        verdict = in_place_verdict(e.algorithm)
        rows.append({"entry": k, "label": e.label, "min_bytes": e.min_bytes, "max_bytes": e.max_bytes,
                     **e.algorithm.summary(), **_in_place_fields(verdict)})
        lines.append(f"  {k}: {e.range_text():<26} {e.label}: {e.algorithm.n_steps} steps, "
                     f"{len(e.algorithm.transfers)} transfers; {in_place_note(verdict)}")
    data = {"ok": True, "file": args.file, "name": sset.name, "collective": sset.collective.kind,
            "topology": sset.topology.name, "n_ranks": sset.topology.n_ranks,
            "in_place_ok": all(r["in_place_ok"] for r in rows), "entries": rows}
    ours, native = len(sset.schedules), len(sset.entries) - len(sset.schedules)
    head = (f"ok: {shown(args.file)}: schedule set {sset.name}: {ours} schedule{'s' if ours != 1 else ''} of "
            f"{sset.collective.kind} on {sset.topology.name}, every one verified"
            + (f"; {native} range{'s' if native != 1 else ''} left to NCCL" if native else ""))
    emit(args, data, "\n".join([head, *lines]))
    return 0


def _in_place_fields(verdict: dict[str, Any]) -> dict[str, Any]:
    """The in-place verdict (``ccl.compiler.lowering.in_place_verdict``: judged by dependencies
    on the Program an in-place call runs) as a report's fields."""
    out = {"in_place_ok": verdict["ok"], "in_place_reason": verdict["reason"],
           "in_place_lowered": verdict["lowered_in_place"]}
    if verdict["lowered_in_place"]:
        out.update(in_place_ops_added=verdict["ops_added"], in_place_scratch_added=verdict["scratch_added"],
                   in_place_why_lowered=verdict["why"])
    return out


def _verify_xml(args: argparse.Namespace) -> int:
    imported = read_xml(args.file, args.topology)
    if args.emit == "algorithm":
        raise InputError(f"{shown(args.file)} is an MSCCL XML file: it has no algorithm stage (try --emit program)")
    checked = verify_imported(imported)
    if args.emit == "program":
        return emit_programs(args, [imported.program])
    algo, program = imported.algo, imported.program
    targets = {}
    for name, tgt in limits.TARGETS.items():
        problems = limits.check(algo, tgt)
        targets[name] = {"ok": not problems, "problems": [str(p) for p in problems[:20]],
                         "n_problems": len(problems)}
    data = {"ok": True, "file": args.file, "name": algo.name, "coll": algo.coll, "ngpus": algo.ngpus,
            "proto": algo.proto, "nchannels": algo.nchannels, "nchunksperloop": algo.nchunksperloop,
            "inplace": algo.inplace, "outofplace": algo.outofplace, "minBytes": algo.min_bytes,
            "maxBytes": algo.max_bytes, "verified": checked, "targets": targets,
            "skipped": [{"line": line, "element": tag, "inside": inside} for line, tag, inside in algo.skipped],
            **program.summary()}
    modes = " and ".join(m.replace("_", "-") for m in checked)
    lines = [f"ok: {shown(args.file)}: {algo.name} implements {program.collective} ({modes})",
             f"  {algo.ngpus} gpus, {algo.proto}, {algo.nchannels} channel(s), {algo.nchunksperloop} chunks per loop, "
             f"{algo.n_steps} steps -> {program.n_ops} ops, {program.n_messages} messages"]
    if not algo.inplace:
        lines.append("  not for in-place calls (inplace=0)")
    if algo.skipped:
        lines.append(f"  skipped, as both runtimes' parsers skip them: {model.skipped_text(algo)}")
    for name, t in targets.items():
        if t["ok"]:
            lines.append(f"  {name}: within its limits")
        else:
            more = f" (and {t['n_problems'] - 1} more)" if t["n_problems"] > 1 else ""
            lines.append(f"  {name}: would not load it: {t['problems'][0]}{more}")
    emit(args, data, "\n".join(lines))
    return 0


def register(sub: Any) -> None:
    ver = command(sub, "verify", "check that a schedule implements its collective", cmd_verify)
    ver.add_argument("files", nargs="+", metavar="file",
                     help="schedule file(s): JSON written by `ccl synthesize` (one schedule or a set) or `ccl import`, "
                          "or MSCCL XML; several are checked one after the other")
    ver.add_argument("--topology", "-t", help="for an XML file: the machine (default: every pair of gpus linked)")
    add_emit(ver, ("algorithm", "program"), "the verdict")
