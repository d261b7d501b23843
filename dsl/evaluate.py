"""The interpreter: scopes, expressions, the statements every block shares (let, for, if,
require), calls and argument binding.

Blocks are run against a *context* (a topology, node, collective, algorithm or the file's top
level) that handles the statements of its kind; a statement its context does not take is an
error naming where it belongs. Evaluation is bounded: loops and comprehensions share a budget
of iterations and calls nest at most ``MAX_DEPTH`` deep, so no description can run away.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Any

from ccl.core import limits
from ccl.core.errors import DslError, Span
from ccl.core.topology import Topology

from . import ast
from .builtins import BuiltinError
from .values import (
    Builtin,
    BuiltinCollective,
    Definition,
    LinkClass,
    ModuleValue,
    NicSpec,
    Quantity,
    combine,
    literal,
    show,
    type_name,
)

MAX_DEPTH = 64
NIC_FIELDS = ("hosts", "bandwidth", "latency", "host_bandwidth")
DEFAULT_MAX_STEPS = limits.DSL_WORK.default  # CCL_MAX_DSL_WORK overrides it
MAX_STRING = 1 << 20  # characters in one string value
INT_LIMIT = 1 << 63

# Where each kind of statement belongs, for "misplaced statement" messages.
PLACES: dict[type, tuple[str, str]] = {
    ast.Ranks: ("`ranks`", "a topology or a collective"),
    ast.NameStmt: ("`name`", "a topology or a collective"),
    ast.Accelerator: ("`accelerator`", "a topology"),
    ast.NodeOf: ("`node_of`", "a topology"),
    ast.Vertex: ("a switch or NIC declaration", "a topology or a fabric"),
    ast.NicPort: ("a NIC with hosts and bandwidths", "the block of a `node ... x N` statement"),
    ast.NodeStmt: ("`node`", "a topology"),
    ast.FabricUse: ("`fabric`", "a topology"),
    ast.Limit: ("`limit`", "a topology or a fabric"),
    ast.LinkStmt: ("a link", "a topology or a fabric"),
    ast.LinkClass: ("a link class", "a file or a topology"),
    ast.Pre: ("`pre`", "a collective"),
    ast.Post: ("`post`", "a collective"),
    ast.TransferStmt: ("a transfer", "an algorithm"),
    ast.StepBlock: ("a `step` block", "an algorithm"),
    ast.Rounds: ("`rounds`", "an algorithm"),
    ast.Synthesize: ("`synthesize`", "the top level of a file"),
    ast.Verify: ("`verify`", "the top level of a file"),
    ast.Import: ("`import`", "the top level of a file"),
    ast.TopologyDef: ("a topology definition", "the top level of a file"),
    ast.CollectiveDef: ("a collective definition", "the top level of a file"),
    ast.AlgorithmDef: ("an algorithm definition", "the top level of a file"),
    ast.FabricDef: ("a fabric definition", "the top level of a file"),
}


class Scope:
    """Names visible in a block; ``spans`` remembers where each was defined."""

    __slots__ = ("vars", "parent", "spans")

    def __init__(self, parent: Scope | None = None, values: dict[str, Any] | None = None) -> None:
        self.vars: dict[str, Any] = values if values is not None else {}
        self.parent = parent
        self.spans: dict[str, Span] = {}

    def define(self, name: str, value: Any, span: Span, what: str = "name") -> None:
        if name in self.vars:
            where = self.spans.get(name)
            at = f" at line {where.line}" if where and where.file == span.file else (f" at {where}" if where else "")
            raise DslError(f"'{name}' is already defined{at}; a {what} is defined once", span)
        self.vars[name] = value
        self.spans[name] = span

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            vars_ = scope.vars
            if name in vars_:
                return vars_[name]
            scope = scope.parent
        raise KeyError(name)

    def has(self, name: str) -> bool:
        try:
            self.lookup(name)
        except KeyError:
            return False
        return True

    def visible(self) -> list[str]:
        out: set[str] = set()
        scope: Scope | None = self
        while scope is not None:
            out.update(scope.vars)
            scope = scope.parent
        return sorted(out)


def suggest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return f"; did you mean '{close[0]}'?" if close else ""


def describe(value: Any) -> str:
    """'a bandwidth (25 GB/s)', 'an integer (8)'."""
    text = show(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type_name(value)} ({text})"


def require_int(value: Any, what: str, span: Span, least: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        hint = " (use // for integer division)" if isinstance(value, float) and value == int(value) else ""
        raise DslError(f"{what} must be an integer, got {describe(value)}{hint}", span)
    if least is not None and value < least:
        raise DslError(f"{what} must be at least {least}, got {value}", span)
    return value


def require_bool(value: Any, what: str, span: Span) -> bool:
    if not isinstance(value, bool):
        raise DslError(f"{what} must be true or false, got {describe(value)}", span)
    return value


def require_str(value: Any, what: str, span: Span) -> str:
    if not isinstance(value, str):
        raise DslError(f"{what} must be a string, got {describe(value)}", span)
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


VERBS = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide", "//": "floor-divide", "%": "take the remainder of",
         "**": "raise to a power", "|": "or bits of", "^": "xor", "&": "and bits of", "<<": "shift", ">>": "shift"}


# What calling a definition does (``calls.invoke``: build a topology or an algorithm, bind a
# collective or a fabric) and what calling a built-in collective does (``collective.builtin_spec``):
# the loader passes them in, since the builders themselves evaluate through an Evaluator.
Invoke = Callable[["Evaluator", Definition, tuple, dict, Span], Any]
BuiltinCall = Callable[[str, tuple, dict, Any], Any]


class Evaluator:
    """Evaluates expressions and runs blocks. One per loaded program (it owns the budget)."""

    def __init__(self, max_steps: int | None = None, *, invoke: Invoke, builtin_collective: BuiltinCall) -> None:
        self._invoke = invoke
        self._builtin_collective = builtin_collective
        if max_steps is None:
            max_steps = limits.DSL_WORK.value
        self.max_steps = max_steps
        self.steps_left = max_steps
        self.depth = 0
        self.current = Span("<input>", 1, 1)  # the statement running (for errors without a node)
        self.literals: dict[tuple[str, str | None], Any] = {}
        self._expr: dict[type, Callable[[Any, Scope], Any]] = {
            ast.Number: self._number, ast.String: self._string, ast.Name: self._name, ast.Bool: self._bool,
            ast.ListExpr: self._list, ast.TupleExpr: self._list, ast.Comprehension: self._comprehension,
            ast.Unary: self._unary, ast.Binary: self._binary, ast.Compare: self._compare, ast.Range: self._range,
            ast.Ternary: self._ternary, ast.Call: self._call, ast.Index: self._index, ast.Attr: self._attr,
        }
        self._common: dict[type, Callable[[Any, Any, Scope], None]] = {
            ast.Let: self._let, ast.For: self._for, ast.If: self._if, ast.Require: self._require,
        }

    def charge(self, amount: int, span: Span) -> None:
        """Count ``amount`` units of work (loop iterations, list items, ranks) against the budget."""
        self.steps_left -= amount
        if self.steps_left < 0:
            raise DslError(f"the description does more than {self.max_steps} steps of work in all (loop "
                           "iterations, list items, ranks); is a number far larger than meant? (set "
                           f"{limits.DSL_WORK.env} to raise the limit)", span)

    # ------------------------------------------------------------------ expressions
    def eval(self, node: ast.Expr, scope: Scope) -> Any:
        return self._expr[type(node)](node, scope)

    def _number(self, node: ast.Number, scope: Scope) -> Any:
        key = (node.text, node.unit)  # the value depends on these alone (never key on id(): nodes die)
        value = self.literals.get(key)
        if value is None:
            value = self.literals[key] = literal(node.text, node.unit)
        return value

    def _string(self, node: ast.String, scope: Scope) -> str:
        return self.check_string("".join(p if isinstance(p, str) else show(self.eval(p, scope)) for p in node.parts),
                                 node.span)

    @staticmethod
    def check_string(text: str, span: Span) -> str:
        """``text`` if at most ``MAX_STRING`` characters long, else a located DslError (strings
        doubled in a loop would otherwise outgrow memory within the work budget)."""
        if len(text) > MAX_STRING:
            raise DslError(f"a string of {len(text)} characters; strings stop at {MAX_STRING} characters", span)
        return text

    def _name(self, node: ast.Name, scope: Scope) -> Any:
        try:
            return scope.lookup(node.id)
        except KeyError:
            raise DslError(f"unknown name '{node.id}'{suggest(node.id, scope.visible())}", node.span) from None

    def _bool(self, node: ast.Bool, scope: Scope) -> bool:
        return node.value

    def _list(self, node: ast.ListExpr, scope: Scope) -> tuple:
        return tuple(self.eval(item, scope) for item in node.items)

    def _comprehension(self, node: ast.Comprehension, scope: Scope) -> tuple:
        out: list[Any] = []
        for inner in self.iterate(node.clauses, node.condition, scope, node.span):
            out.append(self.eval(node.element, inner))
        return tuple(out)

    def _unary(self, node: ast.Unary, scope: Scope) -> Any:
        value = self.eval(node.operand, scope)
        op = node.op
        if op == "not":
            return not require_bool(value, "the operand of 'not'", node.operand.span)
        if op == "~":
            return ~require_int(value, "the operand of '~'", node.operand.span)
        if isinstance(value, Quantity):
            return Quantity(-value.value if op == "-" else value.value, value.dim)
        if not is_number(value):
            raise DslError(f"'{op}' needs a number, got {describe(value)}", node.span)
        return -value if op == "-" else value

    def _binary(self, node: ast.Binary, scope: Scope) -> Any:
        op = node.op
        if op in ("and", "or"):
            left = require_bool(self.eval(node.left, scope), f"the left side of '{op}'", node.left.span)
            if (op == "and" and not left) or (op == "or" and left):
                return left
            return require_bool(self.eval(node.right, scope), f"the right side of '{op}'", node.right.span)
        a = self.eval(node.left, scope)
        b = self.eval(node.right, scope)
        return self.arith(op, a, b, node)

    def arith(self, op: str, a: Any, b: Any, node: ast.Node) -> Any:
        ta, tb = type(a), type(b)
        if ta is int and tb is int:
            return self._int_op(op, a, b, node)
        if (ta is int or ta is float) and (tb is int or tb is float):
            return self._float_op(op, a, b, node)
        if ta is Quantity or tb is Quantity:
            return self._quantity_op(op, a, b, node)
        if op == "+" and ta is str and tb is str:
            if len(a) + len(b) > MAX_STRING:
                raise DslError(f"joining strings of {len(a)} and {len(b)} characters; strings stop at {MAX_STRING} "
                               "characters", node.span)
            return a + b
        if op == "+" and ta is tuple and tb is tuple:
            self.charge(len(a) + len(b), node.span)
            return a + b
        raise DslError(f"cannot {VERBS.get(op, op)} {describe(a)} and {describe(b)}", node.span)

    def _int_op(self, op: str, a: int, b: int, node: ast.Node) -> Any:
        if op in ("/", "//", "%") and b == 0:
            raise DslError("division by zero", node.span)
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "*":
            r = a * b
        elif op == "/":
            return a / b
        elif op == "//":
            return a // b
        elif op == "%":
            return a % b
        elif op == "**":
            if b < 0:
                if a == 0:
                    raise DslError("0 cannot be raised to a negative power", node.span)
                return float(a) ** b
            if a not in (0, 1, -1) and b * max(1, abs(a).bit_length() - 1) > 64:
                raise DslError(f"{a} ** {b} is too large (integers stop at 2**63)", node.span)
            r = a ** b
        elif op == "|":
            return a | b
        elif op == "^":
            return a ^ b
        elif op == "&":
            return a & b
        elif op in ("<<", ">>"):
            if b < 0:
                raise DslError(f"cannot shift by a negative amount ({b})", node.span)
            if op == ">>":
                return a >> b
            if b > 63:
                raise DslError(f"{a} << {b} is too large (integers stop at 2**63)", node.span)
            r = a << b
        else:
            raise DslError(f"unknown operator {op}", node.span)
        if not -INT_LIMIT <= r < INT_LIMIT:
            raise DslError(f"the result {show(a)} {op} {show(b)} is too large (integers stop at 2**63)", node.span)
        return r

    def _float_op(self, op: str, a: float, b: float, node: ast.Node) -> Any:
        if op in ("/", "//", "%") and b == 0:
            raise DslError("division by zero", node.span)
        try:
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return a / b
            if op == "//":
                return a // b
            if op == "%":
                return a % b
            if op == "**":
                r = a ** b
                if isinstance(r, complex):
                    raise DslError(f"{show(a)} ** {show(b)} is not a real number", node.span)
                return r
        except OverflowError:
            raise DslError(f"{show(a)} {op} {show(b)} is too large", node.span) from None
        raise DslError(f"'{op}' works on integers only, got {describe(a)} and {describe(b)}", node.span)

    def _quantity_op(self, op: str, a: Any, b: Any, node: ast.Node) -> Any:
        qa, qb = isinstance(a, Quantity), isinstance(b, Quantity)
        if op in ("+", "-"):
            if qa and qb and a.dim == b.dim:
                return Quantity(a.value + b.value if op == "+" else a.value - b.value, a.dim)
            if qa != qb and (is_number(a) or is_number(b)):
                plain = a if not qa else b
                raise DslError(f"cannot {VERBS[op]} {describe(a)} and {describe(b)}: give {show(plain)} a unit",
                               node.span)
            raise DslError(f"cannot {VERBS[op]} {describe(a)} and {describe(b)}", node.span)
        if op in ("*", "/"):
            if (qa or is_number(a)) and (qb or is_number(b)):
                if op == "/" and (b.value if qb else b) == 0:
                    raise DslError("division by zero", node.span)
                return combine(op, a, b)
            raise DslError(f"cannot {VERBS[op]} {describe(a)} and {describe(b)}", node.span)
        if op == "//" and qa and qb and a.dim == b.dim:
            if b.value == 0:
                raise DslError("division by zero", node.span)
            return int(a.value // b.value)
        raise DslError(f"cannot {VERBS.get(op, op)} {describe(a)} and {describe(b)}", node.span)

    def _compare(self, node: ast.Compare, scope: Scope) -> bool:
        a = self.eval(node.left, scope)
        b = self.eval(node.right, scope)
        op = node.op
        if op in ("in", "not in"):
            if not isinstance(b, (tuple, range)):
                raise DslError(f"'{op}' needs a list or a range on its right, got {describe(b)}", node.right.span)
            found = a in b
            return found if op == "in" else not found
        if op in ("==", "!="):
            same = self._equal(a, b)
            return same if op == "==" else not same
        if is_number(a) and is_number(b):
            x, y = a, b
        elif isinstance(a, Quantity) and isinstance(b, Quantity) and a.dim == b.dim:
            x, y = a.value, b.value
        elif isinstance(a, str) and isinstance(b, str):
            x, y = a, b
        else:
            raise DslError(f"cannot compare {describe(a)} with {describe(b)}", node.span)
        if op == "<":
            return x < y
        if op == "<=":
            return x <= y
        if op == ">":
            return x > y
        return x >= y

    @staticmethod
    def _equal(a: Any, b: Any) -> bool:
        if isinstance(a, bool) != isinstance(b, bool):
            return False
        return a == b

    def _range(self, node: ast.Range, scope: Scope) -> range:
        lo = require_int(self.eval(node.lo, scope), "the start of a range", node.lo.span)
        hi = require_int(self.eval(node.hi, scope), "the end of a range", node.hi.span)
        return range(lo, hi)

    def _ternary(self, node: ast.Ternary, scope: Scope) -> Any:
        if require_bool(self.eval(node.condition, scope), "the condition", node.condition.span):
            return self.eval(node.then, scope)
        return self.eval(node.otherwise, scope)

    def _index(self, node: ast.Index, scope: Scope) -> Any:
        target = self.eval(node.target, scope)
        index = self.eval(node.index, scope)
        if not isinstance(target, (tuple, range, str)):
            raise DslError(f"cannot index {describe(target)}", node.target.span)
        if isinstance(index, range):
            if index.step != 1 or index.start < 0 or index.stop > len(target) or index.start > index.stop:
                raise DslError(f"slice {show(index)} is out of range for {describe(target)} "
                               f"of {len(target)} items", node.index.span)
            piece = target[index.start:index.stop]
            return tuple(piece) if isinstance(piece, range) else piece
        k = require_int(index, "an index", node.index.span)
        if not -len(target) <= k < len(target):
            raise DslError(f"index {k} is out of range for {describe(target)} of {len(target)} items",
                           node.index.span)
        return target[k]

    def _attr(self, node: ast.Attr, scope: Scope) -> Any:
        target = self.eval(node.target, scope)
        return self.attribute(target, node.name, node)

    def attribute(self, target: Any, name: str, node: ast.Node) -> Any:
        if isinstance(target, NicSpec) and name in NIC_FIELDS:  # the hot case (fabrics)
            return getattr(target, name)
        table: dict[str, Any] | None = None
        if isinstance(target, ModuleValue):
            table = target.module.exports
        elif isinstance(target, LinkClass):
            table = {"bandwidth": target.bandwidth, "latency": target.latency, "lanes": target.lanes}
        elif isinstance(target, NicSpec):
            table = {k: getattr(target, k) for k in NIC_FIELDS}
        elif isinstance(target, Topology):
            table = {"ranks": target.n_ranks, "nodes": target.n_nodes, "name": target.name,
                     "switches": tuple(s.name for s in target.switches)}
        elif isinstance(target, Quantity):
            table = {"value": target.value}
        if table is None:
            raise DslError(f"{describe(target)} has no attributes", node.span)
        if name not in table or table[name] is None:
            names = sorted(k for k, v in table.items() if v is not None)
            raise DslError(f"{describe(target)} has no '{name}'{suggest(name, names)} (it has: {', '.join(names)})",
                           node.span)
        return table[name]

    # ------------------------------------------------------------------ calls
    def _call(self, node: ast.Call, scope: Scope) -> Any:
        func = self.eval(node.func, scope)
        args = tuple(self.eval(a, scope) for a in node.args)
        kwargs = {}
        for kw in node.kwargs:
            if kw.name in kwargs:
                raise DslError(f"argument '{kw.name}' is given twice", kw.span)
            kwargs[kw.name] = (self.eval(kw.value, scope), kw.span)
        return self.call(func, args, kwargs, node)

    def call(self, func: Any, args: tuple, kwargs: dict[str, tuple[Any, Span]], node: ast.Node) -> Any:
        if isinstance(func, Builtin):
            if kwargs:
                raise DslError(f"{func.name}() takes no keyword arguments", next(iter(kwargs.values()))[1])
            for arg in args:
                if isinstance(arg, range):
                    self.charge(len(arg), node.span)
            try:
                result = func.function(*args)
            except BuiltinError as exc:
                raise DslError(str(exc), node.span) from None
            if type(result) is int and not -INT_LIMIT <= result < INT_LIMIT:
                raise DslError(f"{func.name}() gives a result too large (integers stop at 2**63)", node.span)
            if type(result) is str:
                self.check_string(result, node.span)
            return result
        if isinstance(func, BuiltinCollective):
            return self._builtin_collective(func.kind, args, kwargs, node)
        if isinstance(func, Definition):
            return self.invoke(func, args, kwargs, node.span)
        raise DslError(f"{describe(func)} cannot be called", node.span)

    def invoke(self, definition: Definition, args: tuple, kwargs: dict[str, tuple[Any, Span]], span: Span) -> Any:
        """Call a definition: topologies and algorithms are built, collectives and fabrics bound."""
        return self._invoke(self, definition, args, kwargs, span)

    def bind(self, definition: Definition, args: tuple, kwargs: dict[str, tuple[Any, Span]],
             span: Span) -> tuple[Scope, tuple]:
        """A scope with the definition's parameters bound; also the argument values in order."""
        params = definition.params
        what = f"{definition.kind} {definition.name}"
        if len(args) > len(params):
            raise DslError(f"{what} takes {len(params)} argument{'s' if len(params) != 1 else ''}, "
                           f"got {len(args)}", span)
        scope = Scope(definition.module.scope)
        known = [p.name for p in params]
        for name, (_, kw_span) in kwargs.items():
            if name not in known:
                listed = ", ".join(known) or "none"
                raise DslError(f"{what} has no parameter '{name}'{suggest(name, known)} (parameters: {listed})",
                               kw_span)
        values = []
        for k, param in enumerate(params):
            if k < len(args):
                if param.name in kwargs:
                    raise DslError(f"argument '{param.name}' of {what} is given twice", kwargs[param.name][1])
                value = args[k]
            elif param.name in kwargs:
                value = kwargs[param.name][0]
            elif param.default is not None:
                value = self.eval(param.default, scope)
            else:
                raise DslError(f"{what} needs argument '{param.name}'", span)
            scope.vars[param.name] = value
            scope.spans[param.name] = param.span
            values.append(value)
        return scope, tuple(values)

    def enter(self, span: Span) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.depth = 0
            raise DslError(f"calls nest more than {MAX_DEPTH} deep (does a definition call itself?)", span)

    def leave(self) -> None:
        self.depth -= 1

    # ------------------------------------------------------------------ blocks
    def run(self, body: tuple[ast.Stmt, ...], ctx: Any, scope: Scope) -> None:
        common = self._common
        handlers = ctx.handlers
        for stmt in body:
            self.current = stmt.span
            kind = type(stmt)
            handler = common.get(kind)
            if handler is not None:
                handler(stmt, ctx, scope)
                continue
            method = handlers.get(kind)
            if method is None:
                what, where = PLACES.get(kind, ("this statement", "another block"))
                raise DslError(f"{what} belongs in {where}, not in {ctx.describe}", stmt.span)
            method(stmt, scope)

    def _let(self, stmt: ast.Let, ctx: Any, scope: Scope) -> None:
        scope.define(stmt.name, self.eval(stmt.value, scope), stmt.span, "variable")

    def iterate(self, clauses: tuple[ast.ForClause, ...], condition: ast.Expr | None, scope: Scope,
                span: Span) -> Iterator[Scope]:
        """One scope per combination of the clauses' values (nested, left to right) that passes
        the condition."""
        clause = clauses[0]
        items = self.eval(clause.iterable, scope)
        if not isinstance(items, (tuple, range)):
            raise DslError(f"a loop runs over a list or a range, got {describe(items)}", clause.iterable.span)
        names = clause.names
        single = names[0] if len(names) == 1 else None
        rest = clauses[1:]
        for item in items:
            self.steps_left -= 1
            if self.steps_left < 0:
                self.charge(1, span)
            inner = Scope(scope)
            if single is not None:
                inner.vars[single] = item
            else:
                if not isinstance(item, tuple) or len(item) != len(names):
                    raise DslError(f"cannot unpack {describe(item)} into {len(names)} names", clause.span)
                for name, value in zip(names, item):
                    inner.vars[name] = value
            if rest:
                yield from self.iterate(rest, condition, inner, span)
            elif condition is None or require_bool(self.eval(condition, inner), "a loop's condition",
                                                   condition.span):
                yield inner

    def _for(self, stmt: ast.For, ctx: Any, scope: Scope) -> None:
        body = stmt.body
        for inner in self.iterate(stmt.clauses, stmt.condition, scope, stmt.span):
            self.run(body, ctx, inner)

    def _if(self, stmt: ast.If, ctx: Any, scope: Scope) -> None:
        if require_bool(self.eval(stmt.condition, scope), "the condition of 'if'", stmt.condition.span):
            self.run(stmt.then, ctx, Scope(scope))
        elif stmt.otherwise is not None:
            self.run(stmt.otherwise, ctx, Scope(scope))

    def _require(self, stmt: ast.Require, ctx: Any, scope: Scope) -> None:
        ok = require_bool(self.eval(stmt.condition, scope), "the condition of 'require'", stmt.condition.span)
        if not ok:
            message = self.eval(stmt.message, scope)
            raise DslError(message if isinstance(message, str) else show(message), stmt.span)


def relocate(exc: DslError, where: str, span: Span) -> DslError:
    """An error raised inside a definition from another file is reported at the call, naming
    where it was raised, so users see their own line first."""
    if exc.span is None or exc.span.file == span.file:
        return exc
    return DslError(f"{exc.message} (raised in {where} at {exc.span})", span)
