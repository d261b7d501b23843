"""Argument checks at the public API's boundary: the type and value of one argument, or the
project's error naming the argument and the value.

The IR classes call these in ``__post_init__`` and the public functions on their arguments,
so a wrong type or value raises an ``InputError`` (or the subclass given as ``error``) instead
of a TypeError, AttributeError or OverflowError from deep inside. Each check is O(1) (a
sequence is checked for its type, not element by element, unless the caller walks it), as the
IR values are built in bulk by the solvers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from .errors import InputError

MAX_INT = 2**62  # an integer field beyond this is no count, rank or index of anything real


def show(value: Any) -> str:
    """``repr(value)`` cut to 40 characters, safe for any value (an int too long to print, an
    object whose repr fails)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails (or an int of 5,000 digits) is still named
        if isinstance(value, int):
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def integer(value: Any, what: str, *, least: int | None = None, most: int = MAX_INT,
            error: type[InputError] = InputError) -> int:
    """``value`` as an int (not a bool, not a float) in ``least .. most``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{what} must be an integer, got {type(value).__name__} {show(value)}")
    if least is not None and value < least:
        lowest = "positive" if least == 1 else ("not negative" if least == 0 else f"at least {least}")
        raise error(f"{what} must be {lowest}, got {show(value)}")
    if value > most:
        raise error(f"{what} {show(value)} is over the limit of {most}")
    return int(value)


def number(value: Any, what: str, *, least: float | None = None, positive: bool = False,
           error: type[InputError] = InputError) -> float:
    """``value`` as a finite float (an int or a float, not a bool); ``positive``: > 0;
    ``least``: >= least."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{what} must be a number, got {type(value).__name__} {show(value)}")
    try:
        out = float(value)
    except OverflowError:
        raise error(f"{what} {show(value)} is too large") from None
    if not math.isfinite(out):
        raise error(f"{what} must be a finite number, got {show(value)}")
    if positive and not out > 0:
        raise error(f"{what} must be positive, got {show(value)}")
    if least is not None and out < least:
        raise error(f"{what} must be at least {least:g}, got {show(value)}")
    return out


def text(value: Any, what: str, *, empty: bool = True, error: type[InputError] = InputError) -> str:
    """``value`` as a str (non-empty unless ``empty``)."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__} {show(value)}")
    if not empty and not value:
        raise error(f"{what} must not be empty")
    return value


def name(value: Any, what: str, *, empty: bool = True, error: type[InputError] = InputError) -> str:
    """``value`` as the name of something (a topology, collective, schedule, label, solver):
    ``text``, and one line of printable characters. A name is printed in reports and written
    into files; one holding a newline, an escape sequence or another control character could
    fake lines of output or recolour a terminal, so it is refused (the message shows it escaped)."""
    text(value, what, empty=empty, error=error)
    if not value.isprintable():
        bad = next(ch for ch in value if not ch.isprintable())
        raise error(f"{what} {show(value)} holds the control character {bad!r} (a name is one line of printable "
                    "text)")
    return value


def choice(value: Any, what: str, choices: tuple[str, ...], *, error: type[InputError] = InputError) -> str:
    """``value``, one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise error(f"{what} must be one of {', '.join(map(repr, choices))}, got {show(value)}")
    return value


def flag(value: Any, what: str, *, error: type[InputError] = InputError) -> bool:
    """``value`` as a bool (True or False; not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise error(f"{what} must be True or False, got {type(value).__name__} {show(value)}")
    return value


def instance(value: Any, cls: type | tuple[type, ...], what: str, *, error: type[InputError] = InputError) -> Any:
    """``value``, an instance of ``cls``."""
    if not isinstance(value, cls):
        names = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
        raise error(f"{what} must be {_article(names)} {names}, got {type(value).__name__} {show(value)}")
    return value


def sequence(value: Any, what: str, *, error: type[InputError] = InputError) -> tuple:
    """``value`` (a tuple, a list or another sized iterable that is not text or a mapping) as a
    tuple."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__") or not hasattr(value, "__len__"):
        raise error(f"{what} must be a list or tuple, got {type(value).__name__} {show(value)}")
    return tuple(value)


def mapping(value: Any, what: str, *, error: type[InputError] = InputError) -> Mapping:
    """``value``, a mapping (a dict)."""
    if not isinstance(value, Mapping):
        raise error(f"{what} must be a dict, got {type(value).__name__} {show(value)}")
    return value


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def path(value: Any, what: str = "path", *, error: type[InputError] = InputError) -> Any:
    """``value``, a file name (a non-empty str or an ``os.PathLike``)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
        if not isinstance(value, str):
            raise error(f"{what} must be a file name, got {show(value)}")
    if not isinstance(value, str):
        raise error(f"{what} must be a file name (a str or a pathlib.Path), got {type(value).__name__} {show(value)}")
    if not value:
        raise error(f"{what} must not be empty")
    if "\0" in value:
        raise error(f"{what} {show(value)} contains a NUL character")
    return value


def options(given: Mapping[str, Any], known: Any, where: str, *, error: type[InputError] = InputError) -> None:
    """Refuse an option name ``where`` (e.g. ``"ccl.simulate"``) does not take."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise error(f"{where} has no option {unknown[0]!r} (its options: {', '.join(sorted(known))})")
