"""Description files (``.ccl``) on the command line: loading one, the files it reads, its default
topologies, and its requests' problem stage; shared by ``ccl check`` and ``ccl synthesize FILE``."""

from __future__ import annotations

import argparse
from typing import Any

from .. import compiler
from .outputs import inputs_of
from .stages import (
    emit_problems,
    emit_topologies,
)


def load_description(path: str):
    return compiler.describe(path)


def read_files(args: argparse.Namespace, module: Any) -> list[str]:
    """The files the command reads: its input options' and every file the description
    imports (an output must be none of them)."""
    loaded = getattr(getattr(module, "loader", None), "modules", {}).values()
    return inputs_of(args) + [str(m.path) for m in loaded if getattr(m, "path", None) is not None]


def default_topologies(module: Any) -> list[tuple[str, Any]]:
    """(name, Topology or None) for the file's topologies; None when parameters lack defaults."""
    out = []
    for name, definition in module.topologies().items():
        if all(p.default is not None for p in definition.params):
            out.append((name, module.topology(name)))
        else:
            out.append((name, None))
    return out


def emit_request_problems(args: argparse.Namespace, module: Any, requests: list) -> int:
    """``--emit problem``: the problems of the file's requests, or its default topologies."""
    if requests:
        return emit_problems(args, [(r.name, str(r.span), r.problem) for r in requests])
    return emit_topologies(args, [t for _, t in default_topologies(module) if t is not None])
