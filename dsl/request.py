"""Lowering synthesis requests to ``ccl.core.problem.Problem``:

    synthesize allgather on dgx1 with smt as "dgx1-ag" {
      chunks 6
      steps 3
      rounds 7
      time_limit 60 s
      sketch { relays 0, 4; internode [(i, i) for i in 0..8]; switch_policy most }
      option backend = "cbc"
    }

Settings: chunks, steps, rounds, size, time_limit, objective; a ``sketch`` block with relays,
internode, switch_policy, symmetry and chunk_partition (``ccl.core.problem.Sketch``); and
``option NAME = VALUE`` for solver-specific settings, passed through as ``Request.options``.
The solver name is not checked here: a solver that is not registered yet still lowers, and
running it fails with the registry's "unknown solver" error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ccl.core.errors import DslError, InputError, Span
from ccl.core.groups import parse_groups
from ccl.core.problem import SWITCH_POLICIES, Problem, Request, Sketch

from . import ast
from .collective import as_spec, instantiate, size_bytes
from .evaluate import Evaluator, Scope, describe, require_int, require_str, suggest
from .topology import eval_topology
from .values import TIME, Quantity, show

SETTINGS = ("chunks", "steps", "rounds", "size", "time_limit", "objective", "groups")
SKETCH_SETTINGS = ("relays", "internode", "switch_policy", "symmetry", "chunk_partition")
DEFAULT_SOLVER = Request().solver


@dataclass(frozen=True)
class LoweredRequest:
    """One ``synthesize`` statement, lowered: its name, the Problem, and where it was written."""

    name: str
    problem: Problem
    span: Span
    groups: str | None = None  # ``groups SPEC``: the collective on every group at once (ccl.core.groups)


def _one(setting: ast.Setting) -> ast.Expr:
    if len(setting.values) != 1:
        raise DslError(f"'{setting.name}' takes one value", setting.span)
    return setting.values[0]


def _symbol(ev: Evaluator, expr: ast.Expr, scope: Scope, what: str) -> str:
    """A word setting: a string, or a bare name that is not a variable (``switch_policy most``)."""
    if isinstance(expr, ast.Name) and not scope.has(expr.id):
        return expr.id
    return require_str(ev.eval(expr, scope), what, expr.span)


def _ints(ev: Evaluator, setting: ast.Setting, scope: Scope, what: str) -> tuple[int, ...]:
    out: list[int] = []
    for expr in setting.values:
        value = ev.eval(expr, scope)
        items = value if isinstance(value, (tuple, range)) else (value,)
        ev.charge(len(items), expr.span)
        out.extend(require_int(v, what, expr.span, least=0) for v in items)
    return tuple(out)


def _plain(value: Any, span: Span) -> Any:
    """A solver option as a plain value: numbers, strings, true/false, lists; a quantity in the
    IR's units (bytes, microseconds, GB/s)."""
    if isinstance(value, Quantity):
        return value.value
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, range):
        raise DslError(f"a solver option takes a list, not a range ({show(value)}); write [x for x in ...]", span)
    if isinstance(value, tuple):
        return tuple(_plain(v, span) for v in value)
    raise DslError(f"a solver option is a number, a string, true/false or a list, got {describe(value)}", span)


def _sketch(ev: Evaluator, settings: tuple[ast.Setting, ...], scope: Scope) -> Sketch:
    fields: dict[str, Any] = {}
    seen: dict[str, Span] = {}
    for setting in settings:
        name = setting.name
        if setting.option or name not in SKETCH_SETTINGS:
            raise DslError(f"unknown sketch setting '{name}'{suggest(name, list(SKETCH_SETTINGS))} "
                           f"(sketch settings: {', '.join(SKETCH_SETTINGS)})", setting.span)
        if name in seen:
            raise DslError(f"'{name}' is already given at line {seen[name].line}", setting.span)
        seen[name] = setting.span
        if name == "relays":
            fields["relays"] = _ints(ev, setting, scope, "a relay rank")
        elif name == "symmetry":
            fields["symmetry"] = tuple(require_int(k, "a symmetry rotation", setting.span, least=1)
                                       for k in _ints(ev, setting, scope, "a symmetry rotation"))
        elif name == "chunk_partition":
            fields["chunk_partition"] = require_int(ev.eval(_one(setting), scope), "chunk_partition",
                                                    setting.span, least=1)
        elif name == "switch_policy":
            policy = _symbol(ev, _one(setting), scope, "switch_policy")
            if policy not in SWITCH_POLICIES:
                raise DslError(f"switch_policy is one of {', '.join(SWITCH_POLICIES)}, got '{policy}'", setting.span)
            fields["switch_policy"] = policy
        else:  # internode
            pairs: list[tuple[int, int]] = []
            for expr in setting.values:
                value = ev.eval(expr, scope)
                items = value if isinstance(value, tuple) and value and isinstance(value[0], tuple) else (value,)
                for pair in items:
                    if not isinstance(pair, tuple) or len(pair) != 2:
                        raise DslError(f"internode takes pairs of node-local ranks (a, b), got {describe(pair)}",
                                       expr.span)
                    pairs.append((require_int(pair[0], "a node-local rank", expr.span, least=0),
                                  require_int(pair[1], "a node-local rank", expr.span, least=0)))
            fields["internode"] = tuple(pairs)
    try:
        return Sketch(**fields)
    except InputError as exc:
        raise DslError(exc.message, settings[0].span if settings else None) from None


def lower_request(ev: Evaluator, stmt: ast.Synthesize, scope: Scope) -> LoweredRequest:
    topo = eval_topology(ev, stmt.topology, scope, "`synthesize ... on` needs a topology")
    spec = as_spec(ev, ev.eval(stmt.collective, scope), stmt.collective.span)
    solver = stmt.solver or DEFAULT_SOLVER
    fields: dict[str, Any] = {"solver": solver}
    options: dict[str, Any] = {}
    groups: str | None = None
    seen: dict[str, Span] = {}
    for setting in stmt.settings:
        name = setting.name
        key = ("option " if setting.option else "") + name
        if key in seen:
            raise DslError(f"'{name}' is already given at line {seen[key].line}", setting.span)
        seen[key] = setting.span
        if setting.option:
            options[name] = _plain(ev.eval(_one(setting), scope), setting.span)
            continue
        if name not in SETTINGS:
            hint = suggest(name, list(SETTINGS))
            raise DslError(f"unknown setting '{name}'{hint} (settings: {', '.join(SETTINGS)}; a solver-specific "
                           "one is written `option NAME = VALUE`)", setting.span)
        expr = _one(setting)
        if name in ("chunks", "steps", "rounds"):
            fields[name] = require_int(ev.eval(expr, scope), name, expr.span, least=1)
        elif name == "size":
            fields["size"] = size_bytes(ev.eval(expr, scope), expr.span)
        elif name == "time_limit":
            value = ev.eval(expr, scope)
            if not isinstance(value, Quantity) or value.dim != TIME or not value.value > 0:
                raise DslError(f"time_limit is a positive time such as 60 s, got {describe(value)}", expr.span)
            fields["time_limit"] = value.value / 1e6
        elif name == "groups":
            groups = _groups(ev.eval(expr, scope), topo, expr.span)
        else:
            fields["objective"] = _symbol(ev, expr, scope, "objective")
    if spec.chunks is not None:
        if "chunks" in fields:
            raise DslError("chunks is given twice: in the collective and in the request", seen["chunks"])
        fields["chunks"] = spec.chunks
    if spec.size is not None:
        if "size" in fields:
            raise DslError("size is given twice: in the collective and in the request", seen["size"])
        fields["size"] = spec.size
    if stmt.sketch is not None:
        fields["sketch"] = _sketch(ev, stmt.sketch, scope)
    fields["options"] = tuple(sorted(options.items()))
    collective = instantiate(ev, spec, topo.n_ranks, stmt.collective.span)
    try:
        request = Request(**fields)
        problem = Problem(topo, collective, request)
    except InputError as exc:
        raise DslError(exc.message, stmt.span) from None
    if stmt.label is not None:
        name = require_str(ev.eval(stmt.label, scope), "a request name", stmt.label.span)
    else:
        name = f"{spec.label}-{topo.name}-{solver}" + (f"-groups-{groups}" if groups else "")
    if groups is not None and problem.request.size is None:
        raise DslError("a request with groups needs a size (every group calls the collective with it)", stmt.span)
    return LoweredRequest(name, problem, stmt.span, groups)


def _groups(value: Any, topo: Any, span: Span) -> str:
    """``groups "dp"`` (tp, dp, blocks:K, stride:K, "0-3;4-7") or ``groups [[0, 1], [2, 3]]``:
    the spec text, checked against the topology."""
    if isinstance(value, tuple) and all(isinstance(g, tuple) for g in value):
        text = ";".join(",".join(str(require_int(r, "a rank", span, least=0)) for r in g) for g in value)
    elif isinstance(value, str):
        text = value
    else:
        raise DslError(f"groups is tp, dp, blocks:K, stride:K, rank lists such as \"0-3;4-7\", or a list of "
                       f"rank lists, got {describe(value)}", span)
    try:
        return parse_groups(text, topo).spec
    except InputError as exc:
        raise DslError(exc.message, span) from None
