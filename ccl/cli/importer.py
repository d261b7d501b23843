"""``ccl import msccl FILE.xml -o out.json``: an MSCCL XML file as a verified program file."""

from __future__ import annotations

import argparse
from typing import Any

from ..compiler.loader import read_xml, verify_imported
from ..core.display import shown
from ..core.errors import InputError
from ..core.serialize import dumps, program_to_json, write_text_atomic
from .common import Parser, command, emit
from .outputs import declare


def cmd_msccl(args: argparse.Namespace) -> int:
    imported = read_xml(args.file, args.topology)
    checked = verify_imported(imported)
    program = imported.in_place if args.in_place else imported.program
    if program is None:
        raise InputError(f"{shown(args.file)}: the file is not for in-place calls (inplace=0)")
    algo = imported.algo
    summary = {"ok": True, "file": args.file, "output": args.output, "coll": algo.coll, "proto": algo.proto,
               "nchannels": algo.nchannels, "nchunksperloop": algo.nchunksperloop, "inplace": algo.inplace,
               "outofplace": algo.outofplace, "minBytes": algo.min_bytes, "maxBytes": algo.max_bytes,
               "verified": checked, **program.summary()}
    modes = " and ".join(m.replace("_", "-") for m in checked)
    text = (f"ok: {shown(args.file)}: {algo.name} ({algo.coll}, {algo.ngpus} gpus, {algo.proto}) implements "
            f"{program.collective} ({modes}); {program.n_ops} ops, {program.n_messages} messages")
    if args.output:
        data = program_to_json(program)
        data["protocol"] = algo.proto  # kept for a later export (``ccl emit msccl``)
        write_text_atomic(args.output, dumps(data) + "\n")
        text += f"\n  program written to {shown(args.output)}"
    emit(args, summary, text)
    return 0


def register(sub: Any) -> None:
    group = sub.add_parser("import", help="read a schedule another tool wrote (MSCCL XML)",
                           description="read a schedule another tool wrote: MSCCL XML as a verified program file")
    kinds = group.add_subparsers(dest="kind", metavar="FORMAT", parser_class=Parser)
    kinds.required = True
    p = command(kinds, "msccl", "an MSCCL XML file (msccl executor, RCCL) as a verified program file", cmd_msccl)
    p.add_argument("file", help="the XML file")
    p.add_argument("-o", "--output", help="write the program file here (JSON; verify, simulate, run and emit "
                                          "take it)")
    p.add_argument("--topology", "-t", help="the machine it runs on (default: every pair of gpus linked)")
    p.add_argument("--in-place", action="store_true", help="write the Program of in-place calls")
    declare(p, inputs=("file", "topology"), files=("output",))
