"""Built-in functions of the language: len, min, max, sum, prod, join, abs, range, log2, int,
float, str, round, floor, ceil, sorted, reversed, zip, enumerate, all, any. Each takes evaluated arguments
and raises ``BuiltinError`` (turned into a located ``DslError`` by the caller)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ccl.core.collective import BUILTIN_KINDS

from .values import Builtin, BuiltinCollective, Quantity, show, type_name


class BuiltinError(Exception):
    """A built-in rejected its arguments; the message names the offending value."""


def _items(name: str, value: Any) -> tuple:
    if isinstance(value, (tuple, range)):
        return tuple(value)
    raise BuiltinError(f"{name}() needs a list or a range, got {type_name(value)} ({show(value)})")


def _int(name: str, value: Any, what: str = "argument") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BuiltinError(f"{name}() {what} must be an integer, got {type_name(value)} ({show(value)})")
    return value


def _number(name: str, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BuiltinError(f"{name}() needs a number, got {type_name(value)} ({show(value)})")
    return value


def _arity(name: str, args: tuple, least: int, most: int) -> None:
    if not least <= len(args) <= most:
        want = str(least) if least == most else f"{least} to {most}"
        raise BuiltinError(f"{name}() takes {want} argument{'s' if most != 1 else ''}, got {len(args)}")


def _comparable(name: str, values: tuple) -> None:
    if not values:
        raise BuiltinError(f"{name}() of an empty list")
    first = values[0]
    for v in values:
        if isinstance(v, Quantity) and isinstance(first, Quantity) and v.dim == first.dim:
            continue
        if not isinstance(v, (bool, Quantity)) and isinstance(v, (int, float)) and \
                not isinstance(first, (bool, Quantity)) and isinstance(first, (int, float)):
            continue
        if isinstance(v, str) and isinstance(first, str):
            continue
        raise BuiltinError(f"{name}() cannot compare {type_name(first)} ({show(first)}) with "
                           f"{type_name(v)} ({show(v)})")


def _key(v: Any) -> Any:
    return v.value if isinstance(v, Quantity) else v


def b_len(*args: Any) -> int:
    _arity("len", args, 1, 1)
    value = args[0]
    if isinstance(value, (tuple, range, str)):
        return len(value)
    raise BuiltinError(f"len() needs a list, a range or a string, got {type_name(value)} ({show(value)})")


def _extreme(name: str, pick: Callable, args: tuple) -> Any:
    values = _items(name, args[0]) if len(args) == 1 else tuple(args)
    _comparable(name, values)
    return pick(values, key=_key)


def b_min(*args: Any) -> Any:
    if not args:
        raise BuiltinError("min() takes a list or several values")
    return _extreme("min", min, args)


def b_max(*args: Any) -> Any:
    if not args:
        raise BuiltinError("max() takes a list or several values")
    return _extreme("max", max, args)


def b_sum(*args: Any) -> Any:
    _arity("sum", args, 1, 1)
    values = _items("sum", args[0])
    if not values:
        return 0
    _comparable("sum", values)
    if isinstance(values[0], str):
        raise BuiltinError("sum() adds numbers or quantities, not strings")
    if isinstance(values[0], Quantity):
        total = values[0].value
        for v in values[1:]:
            total = total + v.value
        return Quantity(total, values[0].dim)
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total


def b_prod(*args: Any) -> Any:
    _arity("prod", args, 1, 1)
    total: Any = 1
    for v in _items("prod", args[0]):
        total = total * _number("prod", v)
    return total


def b_join(*args: Any) -> str:
    _arity("join", args, 2, 2)
    values = _items("join", args[0])
    sep = args[1]
    if not isinstance(sep, str):
        raise BuiltinError(f"join() separator must be a string, got {type_name(sep)} ({show(sep)})")
    return sep.join(show(v) for v in values)


def b_abs(*args: Any) -> Any:
    _arity("abs", args, 1, 1)
    v = args[0]
    if isinstance(v, Quantity):
        return Quantity(abs(v.value), v.dim)
    return abs(_number("abs", v))


def b_range(*args: Any) -> range:
    _arity("range", args, 1, 3)
    ints = [_int("range", a) for a in args]
    if len(ints) == 3 and ints[2] == 0:
        raise BuiltinError("range() step must not be 0")
    return range(*ints)


def b_log2(*args: Any) -> int | float:
    _arity("log2", args, 1, 1)
    v = _number("log2", args[0])
    if v <= 0:
        raise BuiltinError(f"log2() needs a positive number, got {show(v)}")
    if isinstance(v, int) and v & (v - 1) == 0:
        return v.bit_length() - 1
    return math.log2(v)


def b_int(*args: Any) -> int:
    _arity("int", args, 1, 1)
    v = args[0]
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            raise BuiltinError(f"int() cannot read {v!r} as an integer") from None
    v = _number("int", v)
    if isinstance(v, float) and not math.isfinite(v):
        raise BuiltinError(f"int() of {show(v)}")
    return int(v)


def b_float(*args: Any) -> float:
    _arity("float", args, 1, 1)
    return float(_number("float", args[0]))


def b_str(*args: Any) -> str:
    _arity("str", args, 1, 1)
    return show(args[0])


def _rounding(name: str, fn: Callable) -> Callable:
    def run(*args: Any) -> int:
        _arity(name, args, 1, 1)
        v = _number(name, args[0])
        if isinstance(v, float) and not math.isfinite(v):
            raise BuiltinError(f"{name}() of {show(v)}")
        return int(fn(v))

    return run


def b_sorted(*args: Any) -> tuple:
    _arity("sorted", args, 1, 1)
    values = _items("sorted", args[0])
    if values:
        _comparable("sorted", values)
    return tuple(sorted(values, key=_key))


def b_reversed(*args: Any) -> tuple:
    _arity("reversed", args, 1, 1)
    return tuple(reversed(_items("reversed", args[0])))


def b_zip(*args: Any) -> tuple:
    if not args:
        raise BuiltinError("zip() takes at least one list")
    lists = [_items("zip", a) for a in args]
    return tuple(zip(*lists))


def b_enumerate(*args: Any) -> tuple:
    _arity("enumerate", args, 1, 1)
    return tuple(enumerate(_items("enumerate", args[0])))


def _truth(name: str, fn: Callable) -> Callable:
    def run(*args: Any) -> bool:
        _arity(name, args, 1, 1)
        values = _items(name, args[0])
        for v in values:
            if not isinstance(v, bool):
                raise BuiltinError(f"{name}() needs a list of true/false values, got {type_name(v)} ({show(v)})")
        return fn(values)

    return run


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": b_len,
    "min": b_min,
    "max": b_max,
    "sum": b_sum,
    "prod": b_prod,
    "join": b_join,
    "abs": b_abs,
    "range": b_range,
    "log2": b_log2,
    "int": b_int,
    "float": b_float,
    "str": b_str,
    "round": _rounding("round", round),
    "floor": _rounding("floor", math.floor),
    "ceil": _rounding("ceil", math.ceil),
    "sorted": b_sorted,
    "reversed": b_reversed,
    "zip": b_zip,
    "enumerate": b_enumerate,
    "all": _truth("all", all),
    "any": _truth("any", any),
}


def builtin_names() -> dict[str, Any]:
    """The names every file sees: the functions above and the built-in collectives."""
    out: dict[str, Any] = {name: Builtin(name, fn) for name, fn in FUNCTIONS.items()}
    for kind in BUILTIN_KINDS:
        out[kind] = BuiltinCollective(kind)
    return out
