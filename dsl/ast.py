"""The syntax tree of the description language. Every node carries the ``Span`` it came from.

Nodes are frozen dataclasses; tuples hold children. Expressions and statements are separate
families (``Expr`` and ``Stmt``); which statements a block may hold is decided at lowering.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccl.core.errors import Span


@dataclass(frozen=True, slots=True)
class Node:
    span: Span


# ---------------------------------------------------------------------- expressions
@dataclass(frozen=True, slots=True)
class Expr(Node):
    pass


@dataclass(frozen=True, slots=True)
class Number(Expr):
    """A number with an optional unit: ``8``, ``0.7``, ``25 GB/s``. ``text`` keeps the digits so
    units convert exactly."""

    text: str
    unit: str | None = None


@dataclass(frozen=True, slots=True)
class String(Expr):
    """A string; ``parts`` are literal text and embedded ``{expr}`` interpolations in order."""

    parts: tuple[str | Expr, ...]


@dataclass(frozen=True, slots=True)
class Name(Expr):
    id: str


@dataclass(frozen=True, slots=True)
class Bool(Expr):
    value: bool


@dataclass(frozen=True, slots=True)
class ListExpr(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class TupleExpr(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class ForClause(Node):
    """``for a, b in iterable`` in a loop or a comprehension."""

    names: tuple[str, ...]
    iterable: Expr


@dataclass(frozen=True, slots=True)
class Comprehension(Expr):
    element: Expr
    clauses: tuple[ForClause, ...]
    condition: Expr | None = None


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: str  # "-", "+", "~", "not"
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: str  # + - * / // % ** | ^ & << >> and or
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Compare(Expr):
    op: str  # == != < <= > >= in "not in"
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Range(Expr):
    """``lo .. hi``: the integers lo, lo+1, ..., hi-1."""

    lo: Expr
    hi: Expr


@dataclass(frozen=True, slots=True)
class Ternary(Expr):
    condition: Expr
    then: Expr
    otherwise: Expr


@dataclass(frozen=True, slots=True)
class Keyword(Node):
    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Call(Expr):
    func: Expr
    args: tuple[Expr, ...]
    kwargs: tuple[Keyword, ...]


@dataclass(frozen=True, slots=True)
class Index(Expr):
    target: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class Attr(Expr):
    target: Expr
    name: str


# ---------------------------------------------------------------------- statements
@dataclass(frozen=True, slots=True)
class Stmt(Node):
    pass


@dataclass(frozen=True, slots=True)
class Param(Node):
    name: str
    default: Expr | None = None


@dataclass(frozen=True, slots=True)
class Import(Stmt):
    """``import NAME [as ALIAS]``, ``import "path.ccl" [as ALIAS]``, ``from M import a, b`` and
    ``from M import *``. ``names`` is None for a plain import, () for ``*``."""

    module: str
    is_path: bool
    alias: str | None = None
    names: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class TopologyDef(Stmt):
    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class CollectiveDef(Stmt):
    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class AlgorithmDef(Stmt):
    name: str
    params: tuple[Param, ...]
    collective: Expr
    topology: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class FabricDef(Stmt):
    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class FabricUse(Stmt):
    """``fabric EXPR``: join the topology's nodes through a fabric."""

    fabric: Expr


@dataclass(frozen=True, slots=True)
class Prop(Node):
    """One item of a link's properties: a bandwidth, a latency or a link class; ``host`` marks
    a NIC's host-side (PCIe) bandwidth."""

    value: Expr
    host: bool = False


@dataclass(frozen=True, slots=True)
class Props(Node):
    items: tuple[Prop, ...]
    lanes: Expr | None = None


@dataclass(frozen=True, slots=True)
class LinkClass(Stmt):
    name: str
    props: Props


@dataclass(frozen=True, slots=True)
class Let(Stmt):
    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class For(Stmt):
    clauses: tuple[ForClause, ...]
    condition: Expr | None
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class If(Stmt):
    condition: Expr
    then: tuple[Stmt, ...]
    otherwise: tuple[Stmt, ...] | None = None


@dataclass(frozen=True, slots=True)
class Require(Stmt):
    condition: Expr
    message: Expr


@dataclass(frozen=True, slots=True)
class Setting(Node):
    """``NAME value[, value...]`` in a request or sketch block; ``option`` marks a
    solver-specific ``option NAME = value``."""

    name: str
    values: tuple[Expr, ...]
    option: bool = False


@dataclass(frozen=True, slots=True)
class Synthesize(Stmt):
    collective: Expr
    topology: Expr
    solver: str | None
    label: Expr | None
    settings: tuple[Setting, ...]
    sketch: tuple[Setting, ...] | None
    solver_span: Span | None = None
    sketch_span: Span | None = None


@dataclass(frozen=True, slots=True)
class Verify(Stmt):
    algorithm: Expr


@dataclass(frozen=True, slots=True)
class Ranks(Stmt):
    count: Expr


@dataclass(frozen=True, slots=True)
class NameStmt(Stmt):
    value: Expr


@dataclass(frozen=True, slots=True)
class Accelerator(Stmt):
    """``accelerator "H100"``: the accelerator model the cost model prices the topology as."""

    value: Expr


@dataclass(frozen=True, slots=True)
class NodeOf(Stmt):
    value: Expr


@dataclass(frozen=True, slots=True)
class Vertex(Stmt):
    """``switch NAME [node N] [reduce [COND]]`` or ``nic NAME [node N]``: a non-rank vertex. A
    bare identifier as NAME also names a variable bound to the vertex. ``reduce``: the switch
    sums and multicasts (in-network reduction), when COND (default true) holds."""

    kind: str  # "switch" or "nic"
    name: Expr
    node: Expr | None = None
    reduce: Expr | bool = False  # True for a bare `reduce`


@dataclass(frozen=True, slots=True)
class NicPort(Stmt):
    """``nic HOSTS : props`` in a node block: a NIC serving the node-local ranks HOSTS."""

    hosts: Expr
    props: Props


@dataclass(frozen=True, slots=True)
class NodeStmt(Stmt):
    """``node TOPOLOGY x COUNT { nic ... }``: COUNT copies of a one-node topology."""

    topology: Expr
    count: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Limit(Stmt):
    name: Expr
    bandwidth: Expr
    links: Expr


@dataclass(frozen=True, slots=True)
class LinkStmt(Stmt):
    src: Expr
    dst: Expr
    both: bool
    props: Props


@dataclass(frozen=True, slots=True)
class Pre(Stmt):
    chunks: Expr
    rank: Expr


@dataclass(frozen=True, slots=True)
class Post(Stmt):
    chunks: Expr
    rank: Expr
    sum: bool = False


@dataclass(frozen=True, slots=True)
class Slot(Node):
    buffer: str
    index: Expr


@dataclass(frozen=True, slots=True)
class TransferStmt(Stmt):
    """``copy SLOT of R to SLOT of Q [at step S]`` or ``copy SLOT from R to Q [at step S]``
    (then ``dst_slot`` is None: the same slot on both ranks)."""

    op: str
    src_slot: Slot
    src: Expr
    dst_slot: Slot | None
    dst: Expr
    step: Expr | None = None


@dataclass(frozen=True, slots=True)
class StepBlock(Stmt):
    step: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Rounds(Stmt):
    value: Expr


@dataclass(frozen=True, slots=True)
class File(Node):
    path: str
    body: tuple[Stmt, ...]
