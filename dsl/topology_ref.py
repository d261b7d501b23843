"""Picking a topology out of a ``.ccl`` file on the command line (``--topology``).

* ``FILE.ccl``: the file's only topology, with its default arguments (a file that defines
  several must name one);
* ``FILE.ccl:NAME``: the topology NAME (defined or imported by the file) with its defaults;
* ``FILE.ccl:NAME:ARGS``: with arguments in the library's spelling, positional values then
  ``key=value`` options, comma-separated: ``cluster.ccl:pod:4,fabric=rail,nic=400Gbps``;
* ``FILE.ccl:NAME(ARGS)``: with arguments as the language writes a call:
  ``cluster.ccl:pod(4, fabric = rail)``.

Argument values are expressions of the language (``8``, ``50GB/s``, ``[4, 4]``); ``4x4`` is the
list [4, 4] as in ``torus:4x4``, and a bare word that names nothing is a string.
"""

from __future__ import annotations

import re

from ccl.core.errors import DslError, InputError, Span
from ccl.core.topology import Topology

from . import ast
from .evaluate import Scope
from .loader import Loader, Module
from .parser import parse_expression

_DIMS = re.compile(r"^\s*[0-9]+(\s*x\s*[0-9]+)+\s*$")
_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)")


def split_spec(spec: str) -> tuple[str, str | None, str | None, bool]:
    """(path, topology name or None, argument text or None, written as a call?)."""
    match = re.search(r"\.ccl(?=:|$)", spec)
    if match is None:
        raise InputError(f"{spec!r} is not a .ccl file spec (FILE.ccl[:NAME[:ARGS]])")
    path, rest = spec[: match.end()], spec[match.end() + 1:]
    if not rest:
        return path, None, None, False
    paren = rest.find("(")
    colon = rest.find(":")
    if paren >= 0 and (colon < 0 or paren < colon):
        if not rest.rstrip().endswith(")"):
            raise InputError(f"topology {spec!r}: the argument list has no closing ')'")
        return path, rest[:paren].strip(), rest[paren + 1: rest.rstrip().rfind(")")], True
    if colon >= 0:
        return path, rest[:colon].strip(), rest[colon + 1:], False
    return path, rest.strip(), None, False


def _split_args(text: str) -> list[str]:
    parts, depth, current, in_string = [], 0, [], False
    for ch in text:
        if ch == '"':
            in_string = not in_string
        elif not in_string and ch in "([":
            depth += 1
        elif not in_string and ch in ")]":
            depth -= 1
        if ch == "," and depth == 0 and not in_string:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()] if any(p.strip() for p in parts) else []


def _value(loader: Loader, module: Module, text: str, spec: str):
    if _DIMS.match(text):
        return tuple(int(x) for x in text.replace(" ", "").split("x"))
    try:
        expr = parse_expression(text.strip(), "--topology")
        if isinstance(expr, ast.Name) and not module.scope.has(expr.id):
            return expr.id
        return loader.evaluator.eval(expr, Scope(module.scope))
    except DslError as exc:
        raise InputError(f"topology {spec!r}: argument {text.strip()!r}: {exc.message}") from None


def load_topology(spec: str, *, max_steps: int | None = None) -> Topology:
    """The topology a ``FILE.ccl[:NAME[:ARGS]]`` spec names (see module docstring)."""
    path, name, args_text, _ = split_spec(spec)
    loader = Loader(max_steps)
    module = loader.load_file(path)
    if name is None:
        local = module.topologies()
        if len(local) != 1:
            listed = ", ".join(local) or "none"
            raise InputError(f"{path} defines {len(local)} topologies ({listed}); pick one: {path}:NAME")
        name = next(iter(local))
    definition = module.lookup(name, "topology")
    args: list = []
    kwargs: dict = {}
    span = Span("--topology", 1, 1)
    for part in _split_args(args_text or ""):
        key = _KEY.match(part)
        if key:
            if key.group(1) in kwargs:
                raise InputError(f"topology {spec!r}: '{key.group(1)}' is given twice")
            kwargs[key.group(1)] = (_value(loader, module, part[key.end():], spec), span)
        elif kwargs:
            raise InputError(f"topology {spec!r}: positional value {part.strip()!r} after an option")
        else:
            args.append(_value(loader, module, part, spec))

    def build() -> Topology:
        return loader.evaluator.invoke(definition, tuple(args), kwargs, span)

    try:
        return loader.guard(build)
    except DslError as exc:
        if exc.span is not None and exc.span.file == "--topology":
            raise InputError(f"topology {spec!r}: {exc.message}") from None
        raise
