"""``ccl emit TARGET FILE``: a schedule as a backend's output.

Targets: ``torch``, a standalone torchrun script that depends on torch only; ``msccl``, an MSCCL
XML file for the msccl executor or RCCL (``--target``). (The pipeline's
stages, the lowered Program among them, print with ``--emit`` on the commands that reach them:
``ccl verify FILE --emit program``.)
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from backends.msccl.limits import Unfit
from backends.torch.codegen import emit_script, emit_set_script

from .. import compiler
from ..compiler.loader import is_xml, load_any, load_schedule
from ..compiler.msccl import export_xml, msccl_bytes, protocol_for, recorded_protocol
from ..core.display import shown
from ..core.errors import BackendError, InputError
from ..core.schedule_set import ScheduleSet
from ..core.serialize import write_all, write_text_atomic
from ..core.units import parse_size
from .common import Parser, command, emit, positive_int
from .outputs import declare, guard, inputs_of, make_folder
from .progress import Progress
from .stages import add_lowering_options, lowering


def _printed(args: argparse.Namespace, summary: dict[str, Any], key: str, text: str) -> bool:
    """Without -o: print the text (with --json, inside the summary under ``key``)."""
    if args.output:
        return False
    if args.json:
        emit(args, {**summary, key: text}, "")
    else:
        print(text, end="")
    return True


def cmd_torch(args: argparse.Namespace) -> int:
    if not is_xml(args.file):
        sset = load_any(args.file, topology=args.topology)
        if isinstance(sset, ScheduleSet):
            return _torch_set(args, sset)
    program = compiler.runnable(args.file, topology=args.topology, **lowering(args))

    script = emit_script(program, source=args.file)
    summary = {"ok": True, "output": args.output, **program.summary(), "bytes": len(script.encode())}
    if _printed(args, summary, "script", script):
        return 0
    write_text_atomic(args.output, script)
    n = program.n_ranks
    emulated = ""
    if program.n_switch_ops:  # torch has no switch to reduce in: the script runs them emulated
        summary["emulated_switch_ops"] = program.n_switch_ops
        emulated = (f"\n  emulated: {program.n_switch_ops} switch ops run as point-to-point messages (values the "
                    "switch's, timing not)")
    emit(args, summary, f"ok: {program.name}: {program.collective} -> {shown(args.output)} "
                        f"({program.n_ops} ops, {program.n_messages} messages){emulated}\n"
                        f"  run: torchrun --nproc-per-node {n} {shown(args.output)} --size 16MiB --check --repeat 10")
    return 0


def _torch_set(args: argparse.Namespace, sset: Any) -> int:
    """A schedule set as one script that runs the schedule serving its --size."""
    if not sset.schedules:
        raise InputError(f"every size of the set {sset.name!r} is left to NCCL (native entries only): there is no "
                         "schedule to write a script for")
    entries = [(e.min_bytes, e.max_bytes, e.label,
                None if e.algorithm is None else compiler.runnable(e.algorithm, **lowering(args)))
               for e in sset.entries]  # a native entry: the script leaves its sizes to NCCL
    script = emit_set_script(sset.name, entries, source=args.file)
    n = sset.topology.n_ranks
    summary = {"ok": True, "output": args.output, "name": sset.name, "collective": sset.collective.kind,
               "n_ranks": n, "entries": [{"label": lbl, "min_bytes": lo, "max_bytes": hi,
                                          **(e.summary() if p is None else p.summary())}
                                         for (lo, hi, lbl, p), e in zip(entries, sset.entries)],
               "bytes": len(script.encode())}
    if _printed(args, summary, "script", script):
        return 0
    write_text_atomic(args.output, script)
    emit(args, summary, f"ok: {sset.name}: {len(entries)} schedules by size -> {shown(args.output)} (the one serving "
                        f"--size runs)\n  run: torchrun --nproc-per-node {n} {shown(args.output)} --size 16MiB --check "
                        "--repeat 10")
    return 0


def cmd_msccl(args: argparse.Namespace) -> int:
    if not is_xml(args.file):
        sset = load_any(args.file, topology=args.topology)
        if isinstance(sset, ScheduleSet):
            return _msccl_set(args, sset)
    guard(inputs_of(args), files=[("-o", args.output)])  # one schedule: one file, not a folder
    schedule = load_schedule(args.file, topology=args.topology)
    sizes = {}
    for name in ("min_bytes", "max_bytes"):
        value = getattr(args, name)
        sizes[name] = 0 if value is None else int(parse_size(value))
    protocol = args.protocol or recorded_protocol(args.file) or "Simple"
    text, summary = export_xml(schedule, target=args.target, protocol=protocol, instances=args.instances,
                               mode=args.mode, name=args.name, forward=args.forward, **sizes, **lowering(args))
    summary = {"ok": True, "output": args.output, **summary}
    if _printed(args, summary, "xml", text):
        return 0
    write_text_atomic(args.output, text)
    uses = " and ".join(u for u, on in (("in place", summary["inplace"]), ("out of place", summary["outofplace"])) if on)
    top = "no limit" if not summary["maxBytes"] else f"{summary['maxBytes']} bytes"
    emit(args, summary,
         f"ok: {summary['name']}: {summary['collective']} on {summary['ngpus']} gpus -> {shown(args.output)} "
         f"({summary['target']}, {summary['proto']}, {uses})\n"
         f"  {summary['nchannels']} channel(s), {summary['nchunksperloop']} chunks per loop, up to "
         f"{summary['threadblocks']} threadblocks per gpu (limit {summary['limits']['threadblocks']}) and "
         f"{summary['max_steps']} steps per threadblock (limit {summary['limits']['steps']}); "
         f"{summary['fused']} fused steps, {summary['nops']} nops\n"
         f"  picked for calls of {summary['minBytes']} bytes up to {top}; deploy: "
         f"MSCCL_ALGO_DIR=<folder of this file> (see docs/msccl.md)" + _in_place_line(summary["in_place"]))
    return 0


def _in_place_line(claim: dict[str, Any]) -> str:
    """What the summary says of the in-place claim, when there is more to say than the modes."""
    if claim["claimed"] and claim.get("lowered_in_place"):
        return (f"\n  in place: lowered for it ({claim['ops_added']} more ops, {claim['scratch_added']} more scratch "
                "chunks: an in-place call overlays memory the schedule still reads)")
    if not claim["claimed"] and claim["reason"] != "--mode outofplace":
        return f"\n  not for in-place calls: {claim['reason']}"
    return ""


def _msccl_set(args: argparse.Namespace, sset: Any) -> int:
    """A schedule set as one XML file per size range (minBytes/maxBytes from the ranges, in the
    bytes the runtimes count) into the folder -o; every file or none. A native entry's range
    gets no file: the runtimes run NCCL's own algorithms for calls outside every file's range."""
    if args.min_bytes is not None or args.max_bytes is not None:
        raise InputError("a schedule set carries its size ranges: --min-bytes/--max-bytes do not apply")
    if args.name is not None:
        raise InputError("--name does not apply to a schedule set (each file is named after its range)")
    if not args.output:
        raise InputError("a schedule set exports one file per size range: give -o FOLDER")
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise InputError(f"-o {args.output!r} is a file; a schedule set needs a folder (one file per size range)")
    kind, n = sset.collective.kind, sset.topology.n_ranks
    if not sset.schedules:
        raise InputError(f"every size of the set {sset.name!r} is left to NCCL (native entries only): there is no "
                         "file to write; the runtimes run NCCL's own algorithms without one")
    files, skipped, rows, native = [], [], [], []
    width = len(str(len(sset.entries) - 1))
    progress = Progress()
    swept = [row["size"] for row in sset.table if isinstance(row, dict) and isinstance(row.get("size"), int)]
    for k, e in enumerate(sset.entries):
        progress(f"emit: entry {k + 1} of {len(sset.entries)} ({shown(e.label)})", k / len(sset.entries))
        lo, hi = msccl_bytes(kind, n, e.min_bytes, e.max_bytes)
        if e.algorithm is None:  # NCCL itself serves it: no file, the runtimes fall back to NCCL there
            native.append({"entry": k, "label": e.label, "native": e.served_by, "min_bytes": e.min_bytes,
                           "max_bytes": e.max_bytes, "minBytes": lo, "maxBytes": hi})
            continue
        label = re.sub(r"[^A-Za-z0-9_.-]", "_", e.label)
        name = f"{sset.name}-{k:0{width}d}-{label}"
        protocol = args.protocol or e.protocol or protocol_for(kind, sset.topology, e.min_bytes, e.max_bytes, swept)
        try:
            text, summary = export_xml(e.algorithm, target=args.target, protocol=protocol,
                                       instances=args.instances, mode=args.mode, name=name, forward=args.forward,
                                       min_bytes=lo, max_bytes=hi, **lowering(args))
        except Unfit as exc:
            where = f"entry {k} ({e.label}, calls of {_span(lo, hi)})"
            if not args.skip_unfit:
                raise BackendError(f"{where} does not fit {args.target}: {exc.message} (--skip-unfit writes the "
                                   "other ranges; calls in this one then fall back to NCCL)") from None
            skipped.append({"entry": k, "label": e.label, "min_bytes": e.min_bytes, "max_bytes": e.max_bytes,
                            "minBytes": lo, "maxBytes": hi, "limit": exc.limit, "allowed": exc.allowed,
                            "need": exc.need, "gpu": exc.gpu, "reason": exc.message})
            continue
        path = os.path.join(args.output, f"{name}.xml")
        files.append((path, text))
        rows.append({"entry": k, "label": e.label, "file": path, **summary})
    progress.close()
    if not files:
        raise BackendError(f"no entry of the set fits {args.target}: " + "; ".join(
            f"entry {s['entry']} ({s['label']}): {s['reason']}" for s in skipped))
    guard(inputs_of(args), files=[("-o file", path) for path, _ in files], new_folders=True,
          hint="give another folder")
    if not os.path.isdir(args.output):
        parent = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(parent):
            raise InputError(f"cannot create {args.output!r}: folder {parent!r} does not exist")
        make_folder("-o", args.output)
    write_all([(path, lambda fh, text=text: fh.write(text)) for path, text in files])  # all or none
    data = {"ok": True, "output": args.output, "name": sset.name, "target": args.target, "files": rows,
            "skipped": skipped, "native": native}
    folder = os.path.normpath(args.output)
    lines = [f"ok: {sset.name}: {len(files)} file{'s' if len(files) != 1 else ''} for {args.target} -> "
             f"{shown(folder)}/ (one per size range; deploy: MSCCL_ALGO_DIR={shown(os.path.abspath(folder))})"]
    for r in rows:
        lines.append(f"  {os.path.basename(r['file'])}: calls of {_span(r['minBytes'], r['maxBytes'])}, {r['proto']}, "
                     f"{r['threadblocks']} threadblocks, {r['max_steps']} steps at most")
    for r in native:
        lines.append(f"  left to NCCL: entry {r['entry']} ({r['native']}, calls of {_span(r['minBytes'], r['maxBytes'])}): "
                     "no file; calls there run NCCL's own algorithm (the runtimes' fallback outside the files' ranges)")
    for s in skipped:
        lines.append(f"  not written: entry {s['entry']} ({s['label']}, calls of {_span(s['minBytes'], s['maxBytes'])}): "
                     f"{s['reason']}; calls there fall back to NCCL")
    emit(args, data, "\n".join(lines))
    return 0


def _span(lo: int, hi: int) -> str:
    """A range of call sizes in the runtimes' bytes (both ends inclusive, 0: no upper limit)."""
    return f"{lo} bytes and up" if not hi else f"{lo} to {hi} bytes"


def register(sub: Any) -> None:
    group = sub.add_parser("emit", help="write a schedule as a torch script or MSCCL XML",
                           description="write a schedule as a backend's output: a standalone torch script or an "
                                       "MSCCL XML file")
    targets = group.add_subparsers(dest="target", metavar="TARGET", parser_class=Parser)
    targets.required = True
    p = command(targets, "torch", "a standalone torchrun script (torch only) that runs, checks and times it",
                cmd_torch)
    p.add_argument("file", help="schedule file: JSON written by `ccl synthesize` or `ccl import`, or MSCCL XML")
    p.add_argument("-o", "--output", help="write here (default: standard output)")
    p.add_argument("--topology", "-t", help="for an XML file: the machine (default: every pair of gpus linked)")
    add_lowering_options(p)
    declare(p, inputs=("file", "topology"), files=("output",))
    m = command(targets, "msccl", "an MSCCL XML file for the msccl executor or RCCL", cmd_msccl)
    m.add_argument("file", help="schedule file: JSON written by `ccl synthesize` or `ccl import`, or MSCCL XML")
    m.add_argument("-o", "--output", help="write here (default: standard output); for a schedule set, a folder "
                   "that gets one file per size range")
    m.add_argument("--target", choices=("msccl", "rccl"), default="msccl",
                   help="the runtime: its coll spelling and limits (default msccl)")
    m.add_argument("--protocol", choices=("Simple", "LL", "LL128"),
                   help="NCCL protocol the runtime uses for it, for every file (default: a schedule set's entries "
                        "each carry theirs, chosen by NCCL's own rule for their sizes; one schedule keeps the proto "
                        "of the XML it was imported from, else Simple)")
    m.add_argument("--instances", type=positive_int, default=1,
                   help="copies of the schedule side by side on their own channels (default 1)")
    m.add_argument("--min-bytes", help="smallest call (bytes, e.g. 1MiB) the runtime picks it for (default 0)")
    m.add_argument("--max-bytes", help="largest call it is picked for (default: no limit, written as 0)")
    m.add_argument("--mode", choices=("auto", "both", "inplace", "outofplace"), default="auto",
                   help="the calls it serves: auto = out of place, and in place too when correct in place")
    m.add_argument("--name", help="the <algo> name (default: the schedule's)")
    m.add_argument("--forward", choices=("auto", "on", "off"), default="auto",
                   help="fuse a receive and the send forwarding it into rcs/rrcs steps (msccl target): auto keeps "
                        "them where the simulator finds the file no slower at --max-bytes (64MiB when unlimited)")
    m.add_argument("--topology", "-t", help="for an XML file: the machine (default: every pair of gpus linked)")
    m.add_argument("--skip-unfit", action="store_true",
                   help="schedule set: write the ranges that fit the target's limits and report the others (their "
                        "calls fall back to NCCL) instead of writing nothing")
    add_lowering_options(m)
    declare(m, inputs=("file", "topology"), either=("output",))
