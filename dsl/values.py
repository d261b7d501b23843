"""Values of the language: numbers with units, link classes, NICs, definitions, collectives.

Quantities carry a dimension (powers of bytes and of time) so ``1 MB / 46 us`` is a bandwidth
and ``25 GB/s + 1 us`` is an error. Canonical units are the IR's: bytes, microseconds and GB/s.
Literals convert exactly (the digits as a fraction times the unit's factor, rounded once), so
``0.35 us`` is the same float a Python builder gets from ``0.35``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ccl.core.topology import Topology
from ccl.core.units import BANDWIDTH_UNITS, SIZE_UNITS, TIME_UNITS, format_size

SIZE = (1, 0)
TIME = (0, 1)
BANDWIDTH = (1, -1)
DIMENSION_NAMES = {SIZE: "size", TIME: "time", BANDWIDTH: "bandwidth"}
CANONICAL_UNIT = {SIZE: "B", TIME: "us", BANDWIDTH: "GB/s"}

UNITS: dict[str, tuple[Fraction, tuple[int, int]]] = {}
for _table, _dim in ((SIZE_UNITS, SIZE), (TIME_UNITS, TIME), (BANDWIDTH_UNITS, BANDWIDTH)):
    for _unit, _factor in _table.items():
        UNITS[_unit] = (Fraction(repr(_factor)) if isinstance(_factor, float) else Fraction(_factor), _dim)


def _scale(dim: tuple[int, int]) -> int:
    """Base units (bytes, microseconds) per canonical unit: GB/s is 1000 bytes per microsecond."""
    return 1000 if dim == BANDWIDTH else 1


class Quantity:
    """A number with a dimension, in canonical units (bytes, us, GB/s; base units otherwise)."""

    __slots__ = ("value", "dim")

    def __init__(self, value: int | float, dim: tuple[int, int]) -> None:
        self.value = value
        self.dim = dim

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.dim == other.dim and self.value == other.value

    def __hash__(self) -> int:
        return hash((self.value, self.dim))

    def __repr__(self) -> str:
        return f"Quantity({self.value!r}, {self.dim})"

    @property
    def dimension(self) -> str:
        return dimension_name(self.dim)

    def __str__(self) -> str:
        if self.dim == SIZE and isinstance(self.value, int) and self.value > 0:
            text = format_size(self.value)
            return text[: -len(text.lstrip("0123456789"))] + " " + text.lstrip("0123456789")
        return f"{format_number(self.value)} {unit_name(self.dim)}"


def dimension_name(dim: tuple[int, int]) -> str:
    if dim in DIMENSION_NAMES:
        return DIMENSION_NAMES[dim]
    return f"quantity in {unit_name(dim)}"


def unit_name(dim: tuple[int, int]) -> str:
    if dim in CANONICAL_UNIT:
        return CANONICAL_UNIT[dim]
    b, t = dim
    up = [f"B^{b}" if b > 1 else "B"] if b > 0 else []
    up += [f"us^{t}" if t > 1 else "us"] if t > 0 else []
    down = [f"B^{-b}" if b < -1 else "B"] if b < 0 else []
    down += [f"us^{-t}" if t < -1 else "us"] if t < 0 else []
    return ("*".join(up) or "1") + ("/" + "/".join(down) if down else "")


def literal(text: str, unit: str | None) -> int | float | Quantity:
    """A number literal, converted exactly into canonical units."""
    exact = Fraction(text)
    if unit is None:
        if "." in text or "e" in text or "E" in text:
            return float(exact)
        return int(text)
    factor, dim = UNITS[unit]
    value = exact * factor
    return Quantity(int(value) if value.denominator == 1 else float(value), dim)


def _apply(raw: int | float, factor: Fraction) -> int | float:
    if factor == 1:
        return raw
    if factor.denominator == 1:
        return raw * factor.numerator
    if factor.numerator == 1:
        return raw / factor.denominator
    return raw * float(factor)


_RULES: dict[tuple[str, tuple[int, int], tuple[int, int]], tuple[tuple[int, int], Fraction]] = {}


def _rule(op: str, da: tuple[int, int], db: tuple[int, int]) -> tuple[tuple[int, int], Fraction]:
    """The result's dimension and the factor from the raw product or quotient to its canonical unit."""
    key = (op, da, db)
    rule = _RULES.get(key)
    if rule is None:
        if op == "*":
            dim = (da[0] + db[0], da[1] + db[1])
            rule = (dim, Fraction(_scale(da) * _scale(db), _scale(dim)))
        else:
            dim = (da[0] - db[0], da[1] - db[1])
            rule = (dim, Fraction(_scale(da), _scale(db) * _scale(dim)))
        _RULES[key] = rule
    return rule


def combine(op: str, a: Any, b: Any) -> int | float | Quantity:
    """``a * b`` or ``a / b`` where at least one side is a Quantity (the caller checks types)."""
    if isinstance(a, Quantity):
        da, va = a.dim, a.value
    else:
        da, va = (0, 0), a
    if isinstance(b, Quantity):
        db, vb = b.dim, b.value
    else:
        db, vb = (0, 0), b
    dim, factor = _rule(op, da, db)
    raw = va * vb if op == "*" else va / vb
    value = raw if factor == 1 else _apply(raw, factor)
    return value if dim == (0, 0) else Quantity(value, dim)


def format_number(x: int | float) -> str:
    """Shortest text that reads back as the same number."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if x == int(x) and abs(x) < 1e16:
        return str(int(x))
    return repr(x)


# ---------------------------------------------------------------------- runtime values
@dataclass(frozen=True)
class LinkClass:
    """``link nvlink = 25 GB/s, 0.7 us x 2``: defaults for links that name it."""

    name: str
    bandwidth: Quantity | None
    latency: Quantity | None
    lanes: int | None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class NicSpec:
    """A NIC of a node block: the node-local ranks it serves and its bandwidths and latency.
    ``latency`` is end to end through the network; fabrics split it over up- and down-links."""

    hosts: tuple[int, ...]
    bandwidth: Quantity
    latency: Quantity
    host_bandwidth: Quantity

    def __str__(self) -> str:
        return f"NIC serving {list(self.hosts)}"


@dataclass(eq=False)
class Definition:
    """A topology, collective, algorithm or fabric definition, bound to its module's scope."""

    kind: str  # "topology", "collective", "algorithm", "fabric"
    node: Any  # the ast definition
    module: Any  # the defining Module (its scope resolves the body's free names)
    cache: dict = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def params(self):
        return self.node.params

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class BuiltinCollective:
    """A bare built-in collective name (``allgather``); call it for options: ``broadcast(root = 3)``."""

    kind: str

    def __str__(self) -> str:
        return self.kind


@dataclass(frozen=True)
class CollectiveSpec:
    """A collective with its options, made concrete for a rank count by ``dsl.collective``."""

    kind: str  # a built-in kind, or "custom"
    definition: Definition | None = None
    args: tuple = ()
    root: int | None = None
    chunks: int | None = None
    size: int | None = None
    label: str = ""  # names requests: "allgather", "broadcast-root3", "shift-8"
    name: str = ""  # names the collective: "shift(8)"

    def __str__(self) -> str:
        return self.name or self.kind


@dataclass(frozen=True)
class Builtin:
    """A built-in function (len, min, max, range, ...)."""

    name: str
    function: Any

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class ModuleValue:
    """An imported file, reached by ``import NAME``: its definitions as attributes."""

    module: Any

    def __str__(self) -> str:
        return self.module.name


def type_name(value: Any) -> str:
    """How a message names the kind of a value: 'an integer', 'a bandwidth', 'a topology'."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a real number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, tuple):
        return "a list"
    if isinstance(value, range):
        return "a range"
    if isinstance(value, Quantity):
        name = value.dimension
        return f"a {name}" if not name.startswith("quantity") else f"a {name}"
    if isinstance(value, Topology):
        return "a topology"
    if isinstance(value, Definition):
        return f"a {value.kind} definition"
    if isinstance(value, (BuiltinCollective, CollectiveSpec)):
        return "a collective"
    if isinstance(value, LinkClass):
        return "a link class"
    if isinstance(value, NicSpec):
        return "a NIC"
    if isinstance(value, Builtin):
        return "a function"
    if isinstance(value, ModuleValue):
        return "a module"
    return getattr(value, "type_label", type(value).__name__)


def show(value: Any) -> str:
    """A value as text (messages and string interpolation)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return format_number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return "[" + ", ".join(show_item(v) for v in value) + "]"
    if isinstance(value, range):
        if value.step == 1:
            return f"{value.start}..{value.stop}"
        return f"range({value.start}, {value.stop}, {value.step})"
    if isinstance(value, Topology):
        return f"topology {value.name}"
    return str(value)


def show_item(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else show(value)
