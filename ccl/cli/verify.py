"""``ccl verify``: check that a schedule implements its collective."""

from __future__ import annotations

import argparse
from typing import Any

from .common import command, emit
from .stages import add_emit, emit_algorithms, emit_programs


def cmd_verify(args: argparse.Namespace) -> int:
    from ..errors import VerificationError
    from ..serialize import load_algorithm
    from ..verify import verify

    alg = load_algorithm(args.file)
    result = verify(alg)
    if args.emit == "algorithm":
        return emit_algorithms(args, [alg])
    if args.emit == "program":
        return emit_programs(args, [alg])
    try:
        verify(alg, in_place=True)
        in_place, in_place_reason = True, None
    except VerificationError as exc:
        in_place, in_place_reason = False, exc.message
    data = {"ok": True, "file": args.file, **alg.summary(), "in_place_ok": in_place,
            "in_place_reason": in_place_reason, "chunk_transfers": result.chunk_transfers}
    note = "also correct in place" if in_place else f"not correct in place ({in_place_reason})"
    text = (f"ok: {args.file}: {alg.name} implements {alg.collective} on {alg.topology.name}\n"
            f"  {alg.n_steps} steps, {len(alg.transfers)} transfers; {note}")
    emit(args, data, text)
    return 0


def register(sub: Any) -> None:
    ver = command(sub, "verify", "check that a schedule implements its collective", cmd_verify)
    ver.add_argument("file", help="schedule JSON written by `ccl synthesize`")
    add_emit(ver, ("algorithm", "program"), "the verdict")
