"""Text -> syntax tree: the Lark LALR parser, a post-lexer for newlines, and the tree builder.

``parse(text, filename)`` returns an ``ast.File`` or raises ``DslError`` located at the
offending token; no Lark exception leaves this module.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import lark
from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedInput

from ccl.core import private
from ccl.core.errors import DslError, Span

from . import ast
from .syntax_errors import describe_syntax_error


class _Newlines:
    """Drops newline tokens inside ( ) and [ ] and after a comma, so lists, argument lists and
    link properties may span lines."""

    always_accept = ("_NL",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        after_comma = False
        for tok in stream:
            kind = tok.type
            if kind == "_NL":
                if depth or after_comma:
                    continue
            elif kind in ("LPAR", "LSQB"):
                depth += 1
            elif kind in ("RPAR", "RSQB"):
                if depth:
                    depth -= 1
            after_comma = kind == "COMMA"
            yield tok


@lru_cache(maxsize=1)
def lark_parser() -> Lark:
    """The parser, built once per process. Lark's tables take about 0.3 s to compute; they are
    kept in a private cache folder (``ccl.core.private``: this user's, mode 0700, never the
    shared temporary folder, where any local user could plant a pickle that lark would load)
    and read back from there, a file of this user's only. Without such a folder (the cache off,
    a home that cannot be written) the tables are computed each time."""
    grammar = grammar_text()
    folder = _cache_folder()
    if folder is None:
        return Lark(grammar, **_OPTIONS)
    digest = hashlib.sha256(f"{grammar}\0{lark.__version__}\0{sys.version_info[:2]}".encode()).hexdigest()[:32]
    path = folder / f"grammar-{digest}.lark"
    if os.path.lexists(path) and not private.is_private_file(path):
        try:  # not a file of this user's (a symlink, say): never read, never written through
            os.unlink(path)
        except OSError:
            return Lark(grammar, **_OPTIONS)
    # lark reads the tables from there, checking the grammar's hash inside, or computes and
    # writes them (a half-written file another run reads is recomputed, not trusted)
    return Lark(grammar, **_OPTIONS, cache=str(path))


_OPTIONS: dict[str, Any] = dict(parser="lalr", lexer="contextual", postlex=_Newlines(), propagate_positions=True,
                                maybe_placeholders=False, start=["start", "expr"])


def _cache_folder() -> Path | None:
    root = private.cache_root()
    return None if root is None else private.private_folder(root / "parser")


def grammar_text() -> str:
    """The grammar, as shipped (``docs/dsl.md`` shows it too)."""
    return resources.files("dsl").joinpath("grammar.lark").read_text(encoding="utf-8")


def parse(text: str, filename: str = "<string>") -> ast.File:
    """Parse a whole file."""
    try:
        return _parse(text, filename, "start", 0, 0)
    except DslError as exc:
        if exc.source is None:
            exc.source = text
        raise


def parse_expression(text: str, filename: str = "<string>") -> ast.Expr:
    """Parse one expression (command-line arguments such as ``ring:8,bw=50GB/s``)."""
    try:
        return _parse(text, filename, "expr", 0, 0)
    except DslError as exc:
        if exc.source is None:
            exc.source = text
        raise


# Text limits, checked before Lark sees the text: its lexer takes memory in proportion to a
# token's length (about 180 bytes a character for a string), and no description needs lines or
# numbers longer than these (integers stop at 2**63, floats at about 1.8e308).
MAX_LINE = 1 << 20  # characters in one line (so in one string literal)
MAX_NUMBER = 100  # characters in one number literal
MAX_EXPONENT = 400  # |e| in a number literal's exponent


def _check_lines(text: str, filename: str, line_offset: int) -> None:
    """A located DslError at the first line longer than ``MAX_LINE`` characters."""
    if len(text) <= MAX_LINE:
        return
    match = re.search(rf"[^\n]{{{MAX_LINE + 1}}}", text)
    if match is not None:
        line = text.count("\n", 0, match.start()) + 1
        start = match.start() - (text.rfind("\n", 0, match.start()) + 1)
        raise DslError(f"line {line} is longer than {MAX_LINE} characters (a description's lines and "
                       "string literals stop there)", Span(filename, line + line_offset, start + MAX_LINE + 1))


def _parse(text: str, filename: str, start: str, line_offset: int, column_offset: int):
    _check_lines(text, filename, line_offset)
    parser = lark_parser()
    try:
        tree = parser.parse(text, start=start)
    except UnexpectedInput as exc:
        what = "file" if start == "start" else "expression"
        message, line, column, width = describe_syntax_error(exc, text, parser, what)
        span = Span(filename, line + line_offset, column + (column_offset if line == 1 else 0),
                    line + line_offset, column + width + (column_offset if line == 1 else 0))
        raise DslError(message, span, None) from None
    except LarkError as exc:  # any other parser failure: still ours, still located
        raise DslError(f"cannot parse: {exc}", Span(filename, 1, 1), None) from None
    builder = _TreeBuilder(filename, text, line_offset, column_offset)
    try:
        return builder.build(tree)
    except RecursionError:
        raise DslError("the file nests too deeply to read", Span(filename, 1, 1)) from None


def _unescape(raw: str, span: Span) -> list[str | tuple[int, str]]:
    """Split the inside of a string literal into text pieces and (offset, expression text)."""
    out: list[str | tuple[int, str]] = []
    buf: list[str] = []
    i, n = 0, len(raw)
    escapes = {'"': '"', "\\": "\\", "n": "\n", "t": "\t"}
    while i < n:
        ch = raw[i]
        if ch == "\\":
            nxt = raw[i + 1] if i + 1 < n else ""
            if nxt not in escapes:
                col = span.column + 1 + i
                raise DslError(f"unknown escape '\\{nxt}' in a string (known: \\\" \\\\ \\n \\t)",
                               Span(span.file, span.line, col, span.line, col + 2))
            buf.append(escapes[nxt])
            i += 2
        elif ch in "{}" and i + 1 < n and raw[i + 1] == ch:
            buf.append(ch)
            i += 2
        elif ch == "{":
            end = raw.find("}", i + 1)
            if end < 0:
                col = span.column + 1 + i
                raise DslError("'{' in a string starts an expression but has no closing '}' "
                               "(write '{{' for a brace)", Span(span.file, span.line, col, span.line, col + 1))
            if buf:
                out.append("".join(buf))
                buf = []
            out.append((i + 1, raw[i + 1:end]))
            i = end + 1
        elif ch == "}":
            col = span.column + 1 + i
            raise DslError("'}' in a string closes nothing (write '}}' for a brace)",
                           Span(span.file, span.line, col, span.line, col + 1))
        else:
            buf.append(ch)
            i += 1
    if buf or not out:
        out.append("".join(buf))
    return out


def _names(children: list) -> tuple[str, ...]:
    return tuple(str(c) for c in children)


class _TreeBuilder:
    """Lark tree -> ``ast`` nodes with spans: one method per rule, called with the rule's meta
    (positions) and its children already converted, bottom-up."""

    def __init__(self, filename: str, text: str, line_offset: int, column_offset: int) -> None:
        self.filename = filename
        self.text = text
        self.line_offset = line_offset
        self.column_offset = column_offset
        self._methods: dict[str, Any] = {}

    def build(self, tree: Tree) -> Any:
        methods = self._methods
        children = [self.build(c) if type(c) is Tree else c for c in tree.children]
        name = tree.data
        method = methods.get(name)
        if method is None:
            method = methods[name] = getattr(self, name)
        return method(tree.meta, children)

    # ------------------------------------------------------------------ positions
    def _span(self, meta) -> Span:
        if getattr(meta, "empty", True):
            return Span(self.filename, 1 + self.line_offset, 1 + self.column_offset)
        return self._at(meta.line, meta.column, meta.end_line, meta.end_column)

    def _tok(self, tok: Token) -> Span:
        return self._at(tok.line, tok.column, tok.end_line, tok.end_column)

    def _at(self, line: int, column: int, end_line: int | None, end_column: int | None) -> Span:
        col_off = self.column_offset if line == 1 else 0
        end_off = self.column_offset if end_line == 1 else 0
        return Span(self.filename, line + self.line_offset, column + col_off,
                    None if end_line is None else end_line + self.line_offset,
                    None if end_column is None else end_column + end_off)

    # ------------------------------------------------------------------ file and blocks
    def start(self, meta, children):
        end = self.text.count("\n") + 1
        return ast.File(Span(self.filename, 1, 1, end, 1), self.filename, tuple(children))

    def block(self, meta, children):
        return tuple(children)

    # ------------------------------------------------------------------ imports and definitions
    def module(self, meta, children):
        tok = children[0]
        if tok.type == "STRING":
            parts = _unescape(tok.value[1:-1], self._tok(tok))
            if len(parts) != 1 or not isinstance(parts[0], str):
                raise DslError("an import path is a plain string without {expressions}", self._tok(tok))
            return (parts[0], True)
        return (str(tok), False)

    def import_stmt(self, meta, children):
        (module, is_path) = children[0]
        alias = str(children[1]) if len(children) > 1 else None
        return ast.Import(self._span(meta), module, is_path, alias, None)

    def from_import(self, meta, children):
        (module, is_path) = children[0]
        names = () if isinstance(children[1], Token) and children[1].type == "STAR" else children[1]
        return ast.Import(self._span(meta), module, is_path, None, names)

    def names(self, meta, children):
        return _names(children)

    def params(self, meta, children):
        return ("params", tuple(children))

    def param(self, meta, children):
        return ast.Param(self._span(meta), str(children[0]), children[1] if len(children) > 1 else None)

    def _params_body(self, children, k):
        if isinstance(children[k], tuple) and len(children[k]) == 2 and children[k][0] == "params":
            return children[k][1], k + 1
        return (), k

    def topology_def(self, meta, children):
        params, k = self._params_body(children, 1)
        return ast.TopologyDef(self._span(meta), str(children[0]), params, children[k])

    def collective_def(self, meta, children):
        params, k = self._params_body(children, 1)
        return ast.CollectiveDef(self._span(meta), str(children[0]), params, children[k])

    def algorithm_def(self, meta, children):
        params, k = self._params_body(children, 1)
        coll, topo, body = children[k], children[k + 1], children[k + 2]
        return ast.AlgorithmDef(self._span(meta), str(children[0]), params, coll, topo, body)

    def fabric_stmt(self, meta, children):
        head = children[0]
        if len(children) == 1:
            return ast.FabricUse(self._span(meta), head)
        name, params = _signature(head)
        return ast.FabricDef(self._span(meta), name, params, children[1])

    # ------------------------------------------------------------------ common statements
    def link_class(self, meta, children):
        return ast.LinkClass(self._span(meta), str(children[0]), children[1])

    def let_stmt(self, meta, children):
        return ast.Let(self._span(meta), str(children[0]), children[1])

    def for_clause(self, meta, children):
        return ast.ForClause(self._span(meta), children[0], children[1])

    def for_stmt(self, meta, children):
        clauses = tuple(c for c in children if isinstance(c, ast.ForClause))
        rest = children[len(clauses):]
        condition = rest[0] if len(rest) == 2 else None
        return ast.For(self._span(meta), clauses, condition, rest[-1])

    def if_stmt(self, meta, children):
        otherwise = None
        if len(children) == 3:
            otherwise = children[2] if isinstance(children[2], tuple) else (children[2],)
        return ast.If(self._span(meta), children[0], children[1], otherwise)

    def require_stmt(self, meta, children):
        return ast.Require(self._span(meta), children[0], children[1])

    # ------------------------------------------------------------------ requests
    def solver(self, meta, children):
        tok = children[0]
        if tok.type == "STRING":
            parts = _unescape(tok.value[1:-1], self._tok(tok))
            if len(parts) != 1 or not isinstance(parts[0], str):
                raise DslError("a solver name is a plain string without {expressions}", self._tok(tok))
            return ("solver", parts[0], self._tok(tok))
        return ("solver", str(tok), self._tok(tok))

    def settings(self, meta, children):
        return ("settings", tuple(children), self._span(meta))

    def setting(self, meta, children):
        return ast.Setting(self._span(meta), str(children[0]), tuple(children[1:]))

    def sketch(self, meta, children):
        return ("sketch", children[0][1], self._span(meta))

    def option(self, meta, children):
        return ast.Setting(self._span(meta), str(children[0]), (children[1],), option=True)

    def synthesize_stmt(self, meta, children):
        coll, topo = children[0], children[1]
        solver = solver_span = label = None
        settings: list = []
        sketch = sketch_span = None
        for child in children[2:]:
            if isinstance(child, tuple) and child and child[0] == "solver":
                _, solver, solver_span = child
            elif isinstance(child, tuple) and child and child[0] == "settings":
                for item in child[1]:
                    if isinstance(item, tuple) and item[0] == "sketch":
                        if sketch is not None:
                            raise DslError("a request has one sketch block", item[2])
                        sketch, sketch_span = item[1], item[2]
                    else:
                        settings.append(item)
            else:
                label = child
        if sketch is not None:
            for item in sketch:
                if isinstance(item, tuple):
                    raise DslError("a sketch block holds settings, not another sketch", item[2])
        return ast.Synthesize(self._span(meta), coll, topo, solver, label, tuple(settings), sketch,
                              solver_span, sketch_span)

    def verify_stmt(self, meta, children):
        return ast.Verify(self._span(meta), children[0])

    # ------------------------------------------------------------------ topology statements
    def ranks_stmt(self, meta, children):
        return ast.Ranks(self._span(meta), children[0])

    def name_stmt(self, meta, children):
        return ast.NameStmt(self._span(meta), children[0])

    def node_of_stmt(self, meta, children):
        return ast.NodeOf(self._span(meta), children[0])

    def accelerator_stmt(self, meta, children):
        return ast.Accelerator(self._span(meta), children[0])

    def switch_stmt(self, meta, children):
        flag = next((k for k, c in enumerate(children) if isinstance(c, Token) and c.type == "REDUCE"), None)
        head = children if flag is None else children[:flag]
        reduce: ast.Expr | bool = False if flag is None else (children[flag + 1] if flag + 1 < len(children) else True)
        return ast.Vertex(self._span(meta), "switch", head[0], head[1] if len(head) > 1 else None, reduce)

    def nic_vertex(self, meta, children):
        return ast.Vertex(self._span(meta), "nic", children[0], children[1] if len(children) > 1 else None)

    def nic_port(self, meta, children):
        return ast.NicPort(self._span(meta), children[0], children[1])

    def node_stmt(self, meta, children):
        body = children[2] if len(children) > 2 else ()
        return ast.NodeStmt(self._span(meta), children[0], children[1], body)

    def limit_stmt(self, meta, children):
        return ast.Limit(self._span(meta), children[0], children[1], children[2])

    def link_stmt(self, meta, children):
        return ast.LinkStmt(self._span(meta), children[0], children[2], children[1] == "<->", children[3])

    def arrow(self, meta, children):
        return str(children[0])

    def props(self, meta, children):
        items = tuple(c for c in children if isinstance(c, ast.Prop))
        lanes = children[-1] if not isinstance(children[-1], ast.Prop) else None
        return ast.Props(self._span(meta), items, lanes)

    def prop(self, meta, children):
        return ast.Prop(self._span(meta), children[0])

    def host_prop(self, meta, children):
        return ast.Prop(self._span(meta), children[0], host=True)

    # ------------------------------------------------------------------ collective statements
    def pre_stmt(self, meta, children):
        return ast.Pre(self._span(meta), children[0], children[1])

    def post_stmt(self, meta, children):
        summed = isinstance(children[0], Token) and children[0].type == "SUM"
        rest = children[1:] if summed else children
        return ast.Post(self._span(meta), rest[0], rest[1], summed)

    # ------------------------------------------------------------------ algorithm statements
    def op(self, meta, children):
        return str(children[0])

    def slot(self, meta, children):
        return ast.Slot(self._span(meta), str(children[0]), children[1])

    def at_step(self, meta, children):
        return ("step", children[0])

    def transfer(self, meta, children):
        op, src_slot, src, dst_slot, dst = children[:5]
        step = children[5][1] if len(children) > 5 else None
        return ast.TransferStmt(self._span(meta), op, src_slot, src, dst_slot, dst, step)

    def transfer_same_slot(self, meta, children):
        op, slot, src, dst = children[:4]
        step = children[4][1] if len(children) > 4 else None
        return ast.TransferStmt(self._span(meta), op, slot, src, None, dst, step)

    def step_block(self, meta, children):
        return ast.StepBlock(self._span(meta), children[0], children[1])

    def rounds_stmt(self, meta, children):
        return ast.Rounds(self._span(meta), children[0])

    # ------------------------------------------------------------------ expressions
    def ternary(self, meta, children):
        then, cond, otherwise = children
        return ast.Ternary(self._span(meta), cond, then, otherwise)

    def or_(self, meta, children):
        return ast.Binary(self._span(meta), "or", children[0], children[1])

    def and_(self, meta, children):
        return ast.Binary(self._span(meta), "and", children[0], children[1])

    def not_(self, meta, children):
        return ast.Unary(self._span(meta), "not", children[0])

    def compare(self, meta, children):
        return ast.Compare(self._span(meta), children[1], children[0], children[2])

    def comp_op(self, meta, children):
        return " ".join(str(c) for c in children)

    def range(self, meta, children):
        return ast.Range(self._span(meta), children[0], children[1])

    def _binary(op):  # noqa: N805 - a factory used in the class body
        def method(self, meta, children):
            return ast.Binary(self._span(meta), op, children[0], children[1])

        return method

    bit_or = _binary("|")
    bit_xor = _binary("^")
    bit_and = _binary("&")
    lshift = _binary("<<")
    rshift = _binary(">>")
    add = _binary("+")
    sub = _binary("-")
    mul = _binary("*")
    div = _binary("/")
    floordiv = _binary("//")
    mod = _binary("%")
    pow = _binary("**")

    def neg(self, meta, children):
        return ast.Unary(self._span(meta), "-", children[0])

    def pos(self, meta, children):
        return ast.Unary(self._span(meta), "+", children[0])

    def invert(self, meta, children):
        return ast.Unary(self._span(meta), "~", children[0])

    def call(self, meta, children):
        func = children[0]
        items = children[1] if len(children) > 1 else ()
        args = tuple(a for a in items if not isinstance(a, ast.Keyword))
        kwargs = tuple(a for a in items if isinstance(a, ast.Keyword))
        seen_kw = False
        for item in items:
            if isinstance(item, ast.Keyword):
                seen_kw = True
            elif seen_kw:
                raise DslError("a positional argument cannot follow a keyword argument", item.span)
        return ast.Call(self._span(meta), func, args, kwargs)

    def args(self, meta, children):
        return tuple(children)

    def kwarg(self, meta, children):
        return ast.Keyword(self._span(meta), str(children[0]), children[1])

    def index(self, meta, children):
        return ast.Index(self._span(meta), children[0], children[1])

    def attr(self, meta, children):
        return ast.Attr(self._span(meta), children[0], str(children[1]))

    def number(self, meta, children):
        unit = str(children[1]) if len(children) > 1 else None
        text = str(children[0])
        mantissa, _, exponent = text.lower().partition("e")
        if len(text) > MAX_NUMBER or (exponent and abs(int(exponent)) > MAX_EXPONENT):
            what = (f"has {len(mantissa)} digits" if len(text) > MAX_NUMBER
                    else f"has the exponent {exponent}")
            raise DslError(f"the number {text[:20]}{'...' if len(text) > 20 else ''} {what}; number literals "
                           f"stop at {MAX_NUMBER} characters and exponents at {MAX_EXPONENT} (integers stop at "
                           "2**63, floats at about 1.8e308)", self._span(meta))
        if ("." in text or exponent) and float(text) == float("inf"):
            raise DslError(f"the number {text} is too large (floats stop at about 1.8e308)", self._span(meta))
        return ast.Number(self._span(meta), text, unit)

    def string(self, meta, children):
        tok = children[0]
        span = self._tok(tok)
        parts: list[str | ast.Expr] = []
        for piece in _unescape(tok.value[1:-1], span):
            if isinstance(piece, str):
                parts.append(piece)
                continue
            offset, text = piece
            if not text.strip():
                col = span.column + offset
                raise DslError("empty {} in a string (write '{{' for a brace)",
                               Span(span.file, span.line, col, span.line, col + 2))
            parts.append(_parse(text, self.filename, "expr", span.line - 1, span.column + offset))
        return ast.String(span, tuple(parts))

    def name(self, meta, children):
        return ast.Name(self._span(meta), str(children[0]))

    def true(self, meta, children):
        return ast.Bool(self._span(meta), True)

    def false(self, meta, children):
        return ast.Bool(self._span(meta), False)

    def list(self, meta, children):
        return ast.ListExpr(self._span(meta), tuple(children))

    def tuple(self, meta, children):
        return ast.TupleExpr(self._span(meta), tuple(children))

    def comprehension(self, meta, children):
        clauses = tuple(c for c in children[1:] if isinstance(c, ast.ForClause))
        cond = children[-1] if not isinstance(children[-1], ast.ForClause) else None
        return ast.Comprehension(self._span(meta), children[0], clauses, cond)

    def comp_for(self, meta, children):
        return ast.ForClause(self._span(meta), children[0], children[1])


def _signature(head: ast.Expr) -> tuple[str, tuple[ast.Param, ...]]:
    """``fabric NAME(a, b = 1) { ... }``: the definition's name and parameters, written as a call."""
    usage = "a fabric is defined as `fabric NAME(param, param = default) { ... }`"
    if isinstance(head, ast.Name):
        return head.id, ()
    if not isinstance(head, ast.Call) or not isinstance(head.func, ast.Name):
        raise DslError(usage, head.span)
    params = []
    for arg in head.args:
        if not isinstance(arg, ast.Name):
            raise DslError(f"a fabric parameter is a name: {usage}", arg.span)
        params.append(ast.Param(arg.span, arg.id, None))
    for kw in head.kwargs:
        params.append(ast.Param(kw.span, kw.name, kw.value))
    return head.func.id, tuple(params)
