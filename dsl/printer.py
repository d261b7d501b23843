"""Printers for ``--emit``: the syntax tree (text and JSON), and the lowered IR written back as
the language itself.

The IR printers write a self-contained, flat description (every link spelled out) that lowers
to the same Topology, Collective, Request and transfers: ``--emit problem`` output can be edited
and fed back to ``ccl synthesize``, and ``--emit algorithm`` turns any schedule, a solver's
included, into a hand-written algorithm to start from. Output is deterministic.
"""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass
from typing import Any

from ccl.core.algorithm import Algorithm, Transfer
from ccl.core.collective import BUILTIN_KINDS, Collective, builtin
from ccl.core.display import shown
from ccl.core.errors import CclError, InputError, Span
from ccl.core.problem import Problem, Request, Sketch
from ccl.core.topology import Topology

from . import ast
from .parser import parse, parse_expression
from .values import format_number

INDENT = "  "


# ---------------------------------------------------------------------- syntax tree
def _where(span: Span) -> str:
    return f"@{span.line}:{span.column}"


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def dump_ast(node: ast.Node) -> str:
    """The tree, one node per line with its position: ``Kind field=value @line:col``."""
    lines: list[str] = []
    _dump(node, 0, lines, "")
    return "\n".join(lines) + "\n"


def _dump(node: Any, depth: int, lines: list[str], label: str) -> None:
    pad = INDENT * depth
    if isinstance(node, str):
        lines.append(f"{pad}{label}{_shown_quote(node)}")
        return
    if not is_dataclass(node):
        lines.append(f"{pad}{label}{node!r}")
        return
    head = [type(node).__name__]
    children: list[tuple[str, Any]] = []
    for f in fields(node):
        if f.name in ("span", "solver_span", "sketch_span"):
            continue
        value = getattr(node, f.name)
        if _scalar(value):
            if value is not None and value is not False:
                head.append(f"{f.name}={_shown_quote(value) if isinstance(value, str) else value}")
        elif isinstance(value, tuple) and not value:
            continue
        elif isinstance(value, tuple) and all(isinstance(v, str) for v in value) and not isinstance(node, ast.String):
            head.append(f"{f.name}=[{', '.join(value)}]")
        else:
            children.append((f.name, value))
    lines.append(f"{pad}{label}{' '.join(head)} {_where(node.span)}")
    for name, value in children:
        if isinstance(value, tuple):
            lines.append(f"{pad}{INDENT}{name}:")
            for item in value:
                _dump(item, depth + 2, lines, "")
        else:
            _dump(value, depth + 1, lines, f"{name}: ")


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "{": "{{", "}": "}}"}


def _quote(text: str) -> str:
    """``text`` as a string literal of the language, read back as the same text: quotes,
    backslashes, newlines and tabs escaped, braces doubled (a brace would start an
    interpolation). A character the language cannot write (another control character) is
    refused: a written file never carries one."""
    bad = next((ch for ch in text if not ch.isprintable() and ch not in "\n\t"), None)
    if bad is not None:
        raise InputError(f"the name {shown(text)!s} cannot be written in a description: it holds the control "
                         f"character {shown(bad)}")
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in text) + '"'


def _shown_quote(text: str) -> str:
    """A string of a syntax tree as printed for reading (``--emit ast``): escaped as a literal,
    other control characters as Python writes them."""
    return '"' + "".join(_ESCAPES.get(ch, ch) if ch.isprintable() or ch in "\n\t" else shown(ch) for ch in text) + '"'


def ast_to_json(node: Any) -> Any:
    """The tree as JSON-ready data: ``{"node": Kind, "span": [line, col, end_line, end_col], ...}``."""
    if isinstance(node, tuple):
        return [ast_to_json(v) for v in node]
    if not is_dataclass(node):
        return node
    out: dict[str, Any] = {"node": type(node).__name__}
    for f in fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Span):
            out[f.name] = [value.line, value.column, value.end_line, value.end_column]
        else:
            out[f.name] = ast_to_json(value)
    return out


# ---------------------------------------------------------------------- IR as the language
def check_identifier(name: str, what: str = "name") -> str:
    """``name`` if a definition may be called so (letters, digits and underscores, not starting
    with a digit, not a word of the language: what the parser reads back as that name), else
    InputError naming it."""
    ok = isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,99}", name) is not None
    if ok:
        try:
            tree = parse(f"topology {name} {{\n  ranks 2\n}}\n", "<name>")
            used = parse_expression(name, "<name>")  # where a request names the definition
            ok = ([d.name for d in tree.body if isinstance(d, ast.TopologyDef)] == [name]
                  and isinstance(used, ast.Name) and used.id == name)
        except CclError:
            ok = False
    if not ok:
        raise InputError(f"{what} {shown(repr(name))[:60]} is not a name a description can use: letters, digits and "
                         "underscores, not starting with a digit, at most 100 characters, not a word of the "
                         "language (such as topology, for, let)")
    return name


def identifier(name: str) -> str:
    """A name usable as a definition name: letters, digits and underscores."""
    text = re.sub(r"\W", "_", name)
    if not text or text[0].isdigit():
        text = "t_" + text
    return text


def _vertex(topo: Topology, v: int) -> str:
    return str(v) if v < topo.n_ranks else _quote(topo.switches[v - topo.n_ranks].name)


def _props(bandwidth: float, latency: float, lanes: int) -> str:
    text = f"{format_number(bandwidth)} GB/s, {format_number(latency)} us"
    return text + (f" x {lanes}" if lanes > 1 else "")


def format_topology(topo: Topology, ident: str | None = None) -> str:
    """A ``topology`` block that lowers to ``topo`` (links spelled out, ``<->`` where both
    directions are equal)."""
    ident = ident or identifier(topo.name)
    lines = [f"topology {ident} {{", f"{INDENT}name {_quote(topo.name)}", f"{INDENT}ranks {topo.n_ranks}"]
    if topo.accelerator:
        lines.append(f"{INDENT}accelerator {_quote(topo.accelerator)}")
    for sw in topo.switches:
        node = "" if sw.node is None else f" node {sw.node}"
        lines.append(f"{INDENT}{sw.kind} {_quote(sw.name)}{node}{' reduce' if sw.reduce else ''}")
    done: set[tuple[int, int]] = set()
    for link in topo.links:
        if link.pair in done:
            continue
        back = topo.link(link.dst, link.src)
        same = back is not None and (back.bandwidth, back.latency, back.lanes) == (link.bandwidth, link.latency, link.lanes)
        done.add(link.pair)
        if same:
            done.add((link.dst, link.src))
        arrow = "<->" if same else "->"
        lines.append(f"{INDENT}{_vertex(topo, link.src)} {arrow} {_vertex(topo, link.dst)} : "
                     f"{_props(link.bandwidth, link.latency, link.lanes)}")
    for limit in topo.limits:
        pairs = ", ".join(f"({_vertex(topo, a)}, {_vertex(topo, b)})" for a, b in limit.links)
        lines.append(f"{INDENT}limit {_quote(limit.name)} : {format_number(limit.bandwidth)} GB/s over [{pairs}]")
    if any(topo.node_of):
        lines.append(f"{INDENT}node_of [{', '.join(map(str, topo.node_of))}]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _is_builtin(coll: Collective) -> bool:
    if coll.kind not in BUILTIN_KINDS:
        return False
    try:
        return builtin(coll.kind, coll.n_ranks, coll.root, coll.chunk_factor) == coll
    except CclError:
        return False


def collective_expression(coll: Collective, ident: str | None = None) -> str:
    """How a request or algorithm header names the collective."""
    if not _is_builtin(coll):
        return ident or identifier(coll.name)
    options = []
    if coll.root is not None:
        options.append(f"root = {coll.root}")
    if coll.chunk_factor != 1:
        options.append(f"chunks = {coll.chunk_factor}")
    return coll.kind + (f"({', '.join(options)})" if options else "")


def format_collective(coll: Collective, ident: str | None = None) -> str:
    """A custom ``collective`` block by pre/post conditions ('' for a built-in)."""
    if _is_builtin(coll):
        return ""
    lines = [f"collective {ident or identifier(coll.name)} {{", f"{INDENT}name {_quote(coll.name)}",
             f"{INDENT}ranks {coll.n_ranks}"]
    for r, slots in enumerate(coll.inputs):
        for c in slots:
            lines.append(f"{INDENT}pre {c} at {r}")
    for r, slots in enumerate(coll.outputs):
        for need in slots:
            if len(need) == 1:
                lines.append(f"{INDENT}post {next(iter(need))} at {r}")
            else:
                lines.append(f"{INDENT}post sum [{', '.join(map(str, sorted(need)))}] at {r}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (int, float)):
        return format_number(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return _quote(str(value))


def _sketch(sketch: Sketch) -> list[str]:
    lines = []
    if sketch.relays is not None:
        lines.append(f"relays [{', '.join(map(str, sketch.relays))}]")
    if sketch.internode is not None:
        lines.append("internode [" + ", ".join(f"({a}, {b})" for a, b in sketch.internode) + "]")
    lines.append(f"switch_policy {_quote(sketch.switch_policy)}")
    if sketch.symmetry:
        lines.append(f"symmetry [{', '.join(map(str, sketch.symmetry))}]")
    if sketch.chunk_partition is not None:
        lines.append(f"chunk_partition {sketch.chunk_partition}")
    return lines


def format_request(request: Request) -> list[str]:
    lines = [f"chunks {request.chunks}"]
    for name in ("steps", "rounds"):
        if getattr(request, name) is not None:
            lines.append(f"{name} {getattr(request, name)}")
    if request.size is not None:
        lines.append(f"size {request.size} B")
    if request.time_limit is not None:
        lines.append(f"time_limit {format_number(request.time_limit)} s")
    if request.objective is not None:
        lines.append(f"objective {_quote(request.objective)}")
    if request.sketch is not None:
        lines.append("sketch {")
        lines.extend(INDENT + line for line in _sketch(request.sketch))
        lines.append("}")
    for name, value in request.options:
        lines.append(f"option {name} = {_value(value)}")
    return lines


def format_problem(problem: Problem, name: str | None = None) -> str:
    """A whole file: the topology, the collective (if custom) and the ``synthesize`` request."""
    topo_ident = identifier(problem.topology.name)
    coll_ident = identifier(problem.collective.name)
    if coll_ident == topo_ident:
        coll_ident += "_collective"
    parts = [format_topology(problem.topology, topo_ident)]
    custom = format_collective(problem.collective, coll_ident)
    if custom:
        parts.append(custom)
    label = f" as {_quote(name)}" if name else ""
    solver = problem.request.solver
    solver_text = solver if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*(-[A-Za-z0-9_]+)*", solver) else _quote(solver)
    body = "\n".join(INDENT + line for line in format_request(problem.request))
    parts.append(f"synthesize {collective_expression(problem.collective, coll_ident)} on {topo_ident} "
                 f"with {solver_text}{label} {{\n{body}\n}}\n")
    return "\n".join(parts)


def _slot(buf: str, index: int, count: int) -> str:
    return f"{buf}[{index}]" if count == 1 else f"{buf}[{index}..{index + count}]"


def format_transfer(t: Transfer, topo: Topology | None = None) -> str:
    """A transfer statement; a switch end (a push or a pull) is the switch's quoted name."""
    src, dst = (str(t.src), str(t.dst)) if topo is None else (_vertex(topo, t.src), _vertex(topo, t.dst))
    if t.src_buf == t.dst_buf and t.src_index == t.dst_index:
        return f"{t.op} {_slot(t.src_buf, t.src_index, t.count)} from {src} to {dst}"
    return (f"{t.op} {_slot(t.src_buf, t.src_index, t.count)} of {src} to "
            f"{_slot(t.dst_buf, t.dst_index, t.count)} of {dst}")


def format_algorithm(alg: Algorithm) -> str:
    """A whole file: topology, collective (if custom) and the algorithm, step by step."""
    topo_ident = identifier(alg.topology.name)
    coll_ident = identifier(alg.collective.name)
    alg_ident = identifier(alg.name)
    if coll_ident == topo_ident:
        coll_ident += "_collective"
    if alg_ident in (topo_ident, coll_ident):
        alg_ident += "_algorithm"
    parts = [f"# {alg.name}: {alg.collective} on {alg.topology.name}"
             + (f", by {alg.solver}" if alg.solver else "") + "\n", format_topology(alg.topology, topo_ident)]
    custom = format_collective(alg.collective, coll_ident)
    if custom:
        parts.append(custom)
    lines = [f"algorithm {alg_ident} implements {collective_expression(alg.collective, coll_ident)} on {topo_ident} {{"]
    if alg.rounds is not None:
        lines.append(f"{INDENT}rounds [{', '.join(map(str, alg.rounds))}]")
    for step, indices in alg.used_steps:
        lines.append(f"{INDENT}step {step} {{")
        lines.extend(f"{INDENT * 2}{format_transfer(alg.transfers[k], alg.topology)}" for k in indices)
        lines.append(f"{INDENT}}}")
    lines.append("}")
    parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)
