"""``ccl emit TARGET FILE``: a schedule in another form.

Targets: ``program`` (the lowered per-rank op lists, readable or ``--json``) and ``torch`` (a
standalone torchrun script that depends on torch only).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import Parser, command, emit, positive_int


def _program(args: argparse.Namespace):
    from ..lower import lower
    from ..serialize import load_algorithm
    from ..verify import verify
    from ..verify_program import verify_program

    alg = load_algorithm(args.file)
    verify(alg)
    program = lower(alg, channels=args.channels, fuse=not args.no_fuse)
    verify_program(program)
    return program


def cmd_program(args: argparse.Namespace) -> int:
    from ..serialize import write_text_atomic

    program = _program(args)
    data = {"format": "ccl-program", "version": 1, **program.summary(),
            "scratch": [list(x) for x in program.scratch],
            "op_fields": ["kind", "step", "buf", "index", "count", "peer", "src_buf", "src_index", "tag",
                          "channel", "deps"],
            "ops": [[[*op[:10], list(op.deps)] for op in ops] for ops in program.ranks]}
    text = program.to_text()
    if args.output:
        write_text_atomic(args.output, (json.dumps(data) if args.json else text) + "\n")
        summary = {"ok": True, "output": args.output, **program.summary()}
        emit(args, summary, f"ok: {program.name}: {program.n_ops} ops, {program.n_messages} messages "
                            f"-> {args.output}")
    else:
        emit(args, data, text)
    return 0


def cmd_torch(args: argparse.Namespace) -> int:
    from backends.torch.codegen import emit_script

    from ..serialize import write_text_atomic

    program = _program(args)
    script = emit_script(program, source=args.file)
    summary = {"ok": True, "output": args.output, **program.summary(), "bytes": len(script.encode())}
    if not args.output:
        if args.json:
            summary["script"] = script
            emit(args, summary, "")
        else:
            print(script, end="")
        return 0
    write_text_atomic(args.output, script)
    n = program.n_ranks
    emit(args, summary, f"ok: {program.name}: {program.collective} -> {args.output} "
                        f"({program.n_ops} ops, {program.n_messages} messages)\n"
                        f"  run: torchrun --nproc-per-node {n} {args.output} --size 16MiB --check --repeat 10")
    return 0


def register(sub: Any) -> None:
    group = sub.add_parser("emit", help="write a schedule as a program or a torch script",
                           description="write a schedule as a lowered program or a standalone torch script")
    targets = group.add_subparsers(dest="target", metavar="TARGET", parser_class=Parser)
    targets.required = True
    for name, func, what in (
        ("program", cmd_program, "the per-rank ordered ops (sends, receives, copies, reductions)"),
        ("torch", cmd_torch, "a standalone torchrun script (torch only) that runs, checks and times it"),
    ):
        p = command(targets, name, what, func)
        p.add_argument("file", help="schedule JSON written by `ccl synthesize`")
        p.add_argument("-o", "--output", help="write here (default: standard output)")
        p.add_argument("--channels", type=positive_int, default=1,
                       help="parallel channels per pair of ranks (default 1)")
        p.add_argument("--no-fuse", action="store_true",
                       help="keep every transfer its own message (pieces overlap instead of merging)")
