"""The description language: topologies, collectives, synthesis requests and hand-written
algorithms in ``.ccl`` files, lowered to the core IR.

    import dsl
    module = dsl.load("cluster.ccl")          # parse, resolve imports, register definitions
    topo = module.topology("ring", 8)         # any topology the file defines or imports
    topo = module.evaluate("ring(8, bandwidth = 50 GB/s)")   # any expression, in the file's scope
    for request in module.requests():         # `synthesize` statements -> ccl.Problem
        print(request.name, request.problem)
    for item in module.algorithms():          # hand-written algorithms -> ccl.Algorithm
        dsl.verify_algorithm(item)

Every error is a ``ccl.DslError`` rendered as ``file:line:col: message`` with the source line
and a caret. The language is described in ``docs/dsl.md``; the grammar is ``dsl/grammar.lark``.
"""

from __future__ import annotations

from ccl.core.errors import DslError, InputError
from ccl.core.limits import read_input_text

from . import ast
from .algorithm import HandWritten, verify_algorithm
from .evaluate import DEFAULT_MAX_STEPS
from .loader import Loader, Module, library_dir, library_modules
from .parser import grammar_text, parse, parse_expression
from .request import LoweredRequest
from .topology_ref import load_topology, split_spec

__all__ = [
    "DEFAULT_MAX_STEPS",
    "HandWritten",
    "Loader",
    "LoweredRequest",
    "Module",
    "grammar_text",
    "library_dir",
    "library_modules",
    "load",
    "load_string",
    "load_topology",
    "parse",
    "parse_file",
    "parse_expression",
    "split_spec",
    "verify_algorithm",
]


def load(path: str, *, max_steps: int | None = None) -> Module:
    """Load a ``.ccl`` file (and its imports)."""
    return Loader(max_steps).load_file(path)


def parse_file(path: str) -> ast.File:
    """Parse a ``.ccl`` file without lowering it (``--emit ast``)."""
    text = read_input_text(path, "description file")
    try:
        return parse(text, path)
    except DslError as exc:
        exc.source = text
        raise
    except MemoryError:
        raise InputError(f"{path}: too large to parse in memory (input files are limited by "
                         "CCL_MAX_INPUT_BYTES; lower it to refuse such files early, or free memory)") from None


def load_string(text: str, filename: str = "<string>", *, base: str | None = None,
                max_steps: int | None = None) -> Module:
    """Load description text; ``filename`` names it in errors, imports resolve from ``base``."""
    return Loader(max_steps).load_text(text, filename, base)
