"""Helpers for the DSL tests: golden files and lowering a whole module."""

from __future__ import annotations

import os
from pathlib import Path

import dsl

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
CASES = HERE / "cases"
ROOT = HERE.parent.parent
UPDATE = bool(os.environ.get("CCL_UPDATE_GOLDEN"))


def check_golden(path: Path, text: str) -> None:
    """Compare ``text`` with the golden file; with CCL_UPDATE_GOLDEN=1, rewrite it instead."""
    if UPDATE or not path.exists():
        if not UPDATE:
            raise AssertionError(f"golden file {path} is missing; run with CCL_UPDATE_GOLDEN=1 to create it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"output differs from {path} (CCL_UPDATE_GOLDEN=1 rewrites it)"


def lower_everything(module: dsl.Module) -> None:
    """What `ccl check` does: every default topology, every request, every algorithm verified."""
    for name, definition in module.topologies().items():
        if all(p.default is not None for p in definition.params):
            module.topology(name)
    module.requests()
    for item in module.algorithms():
        dsl.verify_algorithm(item)
