"""``ccl solvers``: solver names and the collectives each implements."""

from __future__ import annotations

import argparse
from typing import Any

import solvers

from .common import command, emit


def cmd_solvers(args: argparse.Namespace) -> int:
    rows = [{"name": s.name, "collectives": list(s.kinds), "summary": s.summary} for s in solvers.SOLVERS.values()]
    width = max(len(r["name"]) for r in rows)
    text = "\n".join(f"{r['name']:<{width}}  {', '.join(r['collectives'])}\n{'':<{width}}  {r['summary']}" for r in rows)
    emit(args, {"solvers": rows}, text)
    return 0


def register(sub: Any) -> None:
    command(sub, "solvers", "list the solvers and the collectives each implements", cmd_solvers)
