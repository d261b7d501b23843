"""``ccl emit TARGET FILE``: a schedule as a backend's output.

Target: ``torch``, a standalone torchrun script that depends on torch only. (The pipeline's
stages, the lowered Program among them, print with ``--emit`` on the commands that reach them:
``ccl verify FILE --emit program``.)
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import Parser, command, emit
from .stages import add_lowering_options, lowering


def cmd_torch(args: argparse.Namespace) -> int:
    from .. import compiler
    from ..serialize import write_text_atomic

    program = compiler.runnable(args.file, **lowering(args))
    from backends.torch.codegen import emit_script

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
    group = sub.add_parser("emit", help="write a schedule as a standalone torch script",
                           description="write a schedule as a backend's output: a standalone torch script")
    targets = group.add_subparsers(dest="target", metavar="TARGET", parser_class=Parser)
    targets.required = True
    p = command(targets, "torch", "a standalone torchrun script (torch only) that runs, checks and times it",
                cmd_torch)
    p.add_argument("file", help="schedule JSON written by `ccl synthesize`")
    p.add_argument("-o", "--output", help="write here (default: standard output)")
    add_lowering_options(p)
