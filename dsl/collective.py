"""Lowering collectives: built-ins with options, and custom collectives by pre/post conditions.

``allgather``, ``broadcast(root = 3)``, ``allreduce(chunks = 4, size = 64 MiB)`` are built-ins;
a ``collective NAME(params) { ranks n; pre CHUNK at RANK; post [sum] CHUNKS at RANK }`` block is
a custom one (``name "..."`` names it; by default it is named after its definition and
arguments). ``pre c at r``: chunk c (or each chunk of a list) starts in an input slot of rank
r, in order. ``post c at r``: rank r ends with chunk c (or each chunk of a list) in an output
slot of its own; ``post sum cs at r``: one output slot holding the sum of the chunks cs.
"""

from __future__ import annotations

from typing import Any

from ccl.core import limits
from ccl.core.collective import ROOTED_KINDS, Collective, builtin, custom
from ccl.core.errors import CollectiveError, DslError, Span

from . import ast
from .evaluate import Evaluator, Scope, describe, relocate, require_int
from .values import SIZE, BuiltinCollective, CollectiveSpec, Definition, Quantity, show

OPTIONS = ("root", "chunks", "size")


def builtin_spec(kind: str, args: tuple, kwargs: dict[str, tuple[Any, Span]], node: ast.Node) -> CollectiveSpec:
    if args:
        raise DslError(f"{kind} takes keyword options only ({', '.join(OPTIONS)}), e.g. {kind}(chunks = 2)",
                       node.span)
    root = chunks = size = None
    for name, (value, span) in kwargs.items():
        if name == "root":
            if kind not in ROOTED_KINDS:
                raise DslError(f"{kind} has no root (only {', '.join(ROOTED_KINDS)} do)", span)
            root = require_int(value, "the root", span, least=0)
        elif name == "chunks":
            chunks = require_int(value, "chunks", span, least=1)
        elif name == "size":
            size = size_bytes(value, span)
        else:
            raise DslError(f"{kind} has no option '{name}' (options: {', '.join(OPTIONS)})", span)
    label = kind if root is None else f"{kind}-root{root}"
    return CollectiveSpec(kind, None, (), root, chunks, size, label)


def size_bytes(value: Any, span: Span) -> int:
    if not isinstance(value, Quantity) or value.dim != SIZE:
        raise DslError(f"a size is given with a unit such as 64 MiB, got {describe(value)}", span)
    if value.value != int(value.value) or value.value < 1:
        raise DslError(f"a size must be a whole, positive number of bytes, got {show(value)}", span)
    return int(value.value)


def as_spec(ev: Evaluator, value: Any, span: Span) -> CollectiveSpec:
    """A collective value from an expression: a built-in name, a call, or a custom definition
    without arguments."""
    if isinstance(value, BuiltinCollective):
        return CollectiveSpec(value.kind, label=value.kind)
    if isinstance(value, Definition) and value.kind == "collective":
        value = ev.invoke(value, (), {}, span)
    if isinstance(value, CollectiveSpec):
        return value
    raise DslError(f"expected a collective (allgather, allreduce, ... or a custom one), got {describe(value)}",
                   span)


def instantiate(ev: Evaluator, spec: CollectiveSpec, n_ranks: int, span: Span, *, chunks: int = 1) -> Collective:
    """The collective on ``n_ranks`` ranks, split ``chunks`` ways."""
    if spec.kind != "custom":
        per_rank = n_ranks if spec.kind in ("allgather", "alltoall", "reducescatter") else 1
        ev.charge(n_ranks * per_rank * chunks, span)
        try:
            return builtin(spec.kind, n_ranks, spec.root, chunks)
        except CollectiveError as exc:
            raise DslError(exc.message, span) from None
    definition = spec.definition
    assert definition is not None
    scope = Scope(definition.module.scope)
    for param, value in zip(definition.params, spec.args):
        scope.vars[param.name] = value
    builder = CollectiveBuilder(ev, spec.name or definition.name)
    ev.enter(span)
    try:
        ev.run(definition.node.body, builder, scope)
        coll = builder.build(definition.node.span)
    except DslError as exc:
        raise relocate(exc, f"collective {definition.name}", span) from None
    finally:
        ev.leave()
    if coll.n_ranks != n_ranks:
        raise DslError(f"collective {coll.name} has {coll.n_ranks} ranks but the topology has {n_ranks}", span)
    return coll.chunk_up(chunks)


class CollectiveBuilder:
    """Collects a custom collective's conditions while its body runs."""

    describe = "a collective"

    def __init__(self, ev: Evaluator, name: str) -> None:
        self.ev = ev
        self.name = name
        self.n_ranks: int | None = None
        self.ranks_span: Span | None = None
        self.pre: list[tuple[int, int, Span]] = []
        self.post: list[tuple[frozenset[int], int, Span]] = []
        self.name_span: Span | None = None
        self.handlers = {ast.Ranks: self.ranks, ast.Pre: self.pre_stmt, ast.Post: self.post_stmt,
                         ast.NameStmt: self.name_stmt}

    def name_stmt(self, stmt: ast.NameStmt, scope: Scope) -> None:
        if self.name_span is not None:
            raise DslError(f"the name is already given at line {self.name_span.line}", stmt.span)
        name = self.ev.eval(stmt.value, scope)
        if not isinstance(name, str) or not name:
            raise DslError(f"a collective name is a non-empty string, got {describe(name)}", stmt.value.span)
        self.name, self.name_span = name, stmt.span

    def ranks(self, stmt: ast.Ranks, scope: Scope) -> None:
        if self.ranks_span is not None:
            raise DslError(f"the ranks are already given at line {self.ranks_span.line}", stmt.span)
        self.n_ranks = require_int(self.ev.eval(stmt.count, scope), "the number of ranks", stmt.count.span, least=1)
        if self.n_ranks > limits.RANKS.value:
            raise DslError(limits.RANKS.message(self.n_ranks, "too many ranks"), stmt.count.span)
        self.ev.charge(self.n_ranks, stmt.count.span)
        self.ranks_span = stmt.span

    def _rank(self, expr: ast.Expr, scope: Scope, stmt: ast.Stmt) -> int:
        if self.n_ranks is None:
            raise DslError("declare `ranks N` before the first pre or post condition", stmt.span)
        rank = require_int(self.ev.eval(expr, scope), "a rank", expr.span)
        if not 0 <= rank < self.n_ranks:
            raise DslError(f"rank {rank} is out of range: this collective has ranks 0..{self.n_ranks - 1}",
                           expr.span)
        return rank

    def _chunks(self, expr: ast.Expr, scope: Scope) -> list[int]:
        value = self.ev.eval(expr, scope)
        items = value if isinstance(value, (tuple, range)) else (value,)
        self.ev.charge(len(items), expr.span)
        out = [require_int(c, "a chunk number", expr.span, least=0) for c in items]
        if not out:
            raise DslError("no chunks given", expr.span)
        return out

    def pre_stmt(self, stmt: ast.Pre, scope: Scope) -> None:
        rank = self._rank(stmt.rank, scope, stmt)
        for c in self._chunks(stmt.chunks, scope):
            self.pre.append((c, rank, stmt.span))

    def post_stmt(self, stmt: ast.Post, scope: Scope) -> None:
        rank = self._rank(stmt.rank, scope, stmt)
        chunks = self._chunks(stmt.chunks, scope)
        if stmt.sum:
            if len(set(chunks)) != len(chunks):
                raise DslError("a sum names each chunk once", stmt.chunks.span)
            self.post.append((frozenset(chunks), rank, stmt.span))
        else:
            for c in chunks:
                self.post.append((frozenset((c,)), rank, stmt.span))

    def build(self, span: Span) -> Collective:
        if self.n_ranks is None:
            raise DslError(f"collective {self.name} declares no ranks: add `ranks N`", span)
        held: dict[tuple[int, int], Span] = {}
        present: set[int] = set()
        for c, r, where in self.pre:
            if (c, r) in held:
                raise DslError(f"chunk {c} already starts on rank {r} (line {held[(c, r)].line})", where)
            held[(c, r)] = where
            present.add(c)
        asked: dict[tuple[frozenset[int], int], Span] = {}
        for need, r, where in self.post:
            missing = sorted(need - present)
            if missing:
                raise DslError(f"rank {r} must end with chunk {missing[0]}, but no `pre` puts chunk {missing[0]} "
                               "anywhere: this postcondition can never be met", where)
            if (need, r) in asked:
                raise DslError(f"rank {r} is already asked for {_chunks_text(need)} at line {asked[(need, r)].line}",
                               where)
            asked[(need, r)] = where
        if not self.post:
            raise DslError(f"collective {self.name} has no `post` condition: nothing to do", span)
        try:
            return custom(self.name, self.n_ranks, [(c, r) for c, r, _ in self.pre],
                          [(sorted(need) if len(need) > 1 else next(iter(need)), r) for need, r, _ in self.post])
        except CollectiveError as exc:
            raise DslError(exc.message, span) from None


def _chunks_text(need: frozenset[int]) -> str:
    return f"chunk {next(iter(need))}" if len(need) == 1 else f"the sum of chunks {sorted(need)}"
