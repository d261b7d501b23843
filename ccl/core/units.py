"""Units: sizes in bytes, time in microseconds, bandwidth in GB/s (10^9 bytes per second).

Text with a unit suffix is converted once, here, by the CLI and the DSL lowering.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from .errors import InputError
from .validate import show

SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}

# Exact factors (the parsers compute with these: no float rounding), and the float tables
# derived from them: time in microseconds, bandwidth in GB/s per unit.
_TIME_EXACT = {"ns": Fraction(1, 1000), "us": Fraction(1), "ms": Fraction(1000), "s": Fraction(10**6)}
_SECONDS_EXACT = {unit: factor / 10**6 for unit, factor in _TIME_EXACT.items()}
_BANDWIDTH_EXACT = {"GB/s": Fraction(1), "MB/s": Fraction(1, 1000), "KB/s": Fraction(1, 10**6),
                    "TB/s": Fraction(1000), "Gbps": Fraction(1, 8), "Mbps": Fraction(1, 8000),
                    "Tbps": Fraction(1000, 8)}
TIME_UNITS: dict[str, float] = {unit: float(factor) for unit, factor in _TIME_EXACT.items()}
BANDWIDTH_UNITS: dict[str, float] = {unit: float(factor) for unit, factor in _BANDWIDTH_EXACT.items()}

_NUMBER = re.compile(r"^\s*([-+]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([-+]?[0-9]+))?\s*([A-Za-z/]*)\s*$")

MAX_TEXT = 64  # characters of one number with its unit: longer text is refused before it is read
MAX_EXPONENT = 100  # |e| of 1e100: anything further is out of every range below
MAX_SIZE = 2**50  # bytes (1 PiB = 1024TiB): the largest message size any command or function accepts
MAX_SECONDS = 10**6  # seconds (about 11.6 days): the longest time limit, budget or timeout
MAX_MICROSECONDS = 10**12  # microseconds (about 11.6 days): the longest latency or time
MAX_BANDWIDTH = 10**9  # GB/s (an exabyte per second): the largest bandwidth


def _split(text: str, what: str) -> tuple[Fraction, str]:
    """The number (exact: no float rounding or overflow) and the unit of ``text``."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be a number or text such as {_EXAMPLE.get(what, '1')!r}, "
                         f"got {type(text).__name__} {show(text)}")
    if len(text) > MAX_TEXT:
        raise InputError(f"cannot read {what} {show(text)}: longer than {MAX_TEXT} characters")
    match = _NUMBER.match(text)
    if not match or not (match.group(2) or match.group(3)):
        raise InputError(f"cannot read {what} {text!r}: expected a number with a unit")
    sign, whole, frac, exp, unit = match.groups()
    exponent = int(exp or 0)
    if abs(exponent) > MAX_EXPONENT:
        size = "large" if exponent > 0 else "small"
        raise InputError(f"{what} {text!r} is too {size}: its exponent {exponent} is beyond +-{MAX_EXPONENT}")
    value = Fraction(int((whole or "") + (frac or "") or "0"), 10 ** len(frac or "")) * Fraction(10) ** exponent
    return (-value if sign == "-" else value), unit


_EXAMPLE = {"size": "64MiB", "time": "2us", "time limit": "60s", "bandwidth": "25GB/s"}


def _number(value: object, what: str) -> Fraction:
    """A number given as a Python value (not text) exactly, refusing bools, nan and inf."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise InputError(f"{what} must be a number or text such as {_EXAMPLE.get(what, '1')!r}, "
                         f"got {type(value).__name__} {show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{what} must be a finite number, got {value!r}")
    return Fraction(value)


def _quantity(text: object, what: str, units: dict[str, Fraction], default: str) -> Fraction:
    """``text`` (a number with an optional unit of ``units``; bare: ``default``) or a Python
    number (already in the default unit) as an exact Fraction of the default unit."""
    if not isinstance(text, str):
        return _number(text, what)
    value, unit = _split(text, what)
    unit = unit or default
    if unit not in units:
        raise InputError(f"unknown {what.split()[0]} unit {unit!r} in {text!r} (known: {', '.join(units)})")
    return value * units[unit]


def parse_size(text: str | int) -> int:
    """'64MiB' -> 67108864. A bare number is bytes. The result must be a whole number of bytes,
    not negative and at most ``MAX_SIZE`` (1 PiB); a float must be whole (1e6, not 1.5)."""
    size = _quantity(text, "size", SIZE_UNITS, "B")
    shown = repr(text) if isinstance(text, str) else show(text)
    if size < 0:
        raise InputError(f"size must not be negative, got {shown}")
    if size.denominator != 1:
        raise InputError(f"size {shown} is not a whole number of bytes")
    if size > MAX_SIZE:
        raise InputError(f"size {shown} is over the limit of 1024TiB ({MAX_SIZE} bytes, 1 PiB)")
    return int(size)


MAX_SWEEP = 256  # sizes one sweep may ask for


def parse_sizes(text: str | int) -> list[int]:
    """One size, a comma-separated list, or ranges ``A..B`` (A, 2A, 4A, ... up to B, as
    nccl-tests steps with -f 2; ``A..B*F`` multiplies by F instead), in increasing order
    without repeats: ``1KiB..1GiB``, ``4MiB,64MiB``, ``1KiB..1MiB*4,1GiB``. Every size is a
    positive whole number of bytes; at most ``MAX_SWEEP`` sizes."""
    if not isinstance(text, str):
        size = parse_size(text)
        if size < 1:
            raise InputError(f"size must be at least 1 byte, got {text!r}")
        return [size]
    out: set[int] = set()
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            raise InputError(f"empty size in {text!r}")
        if ".." not in part:
            size = parse_size(part)
            if size < 1:
                raise InputError(f"size must be at least 1 byte, got {part!r}")
            out.add(size)
            continue
        lo_text, _, hi_text = part.partition("..")
        factor = 2
        if "*" in hi_text:
            hi_text, _, factor_text = hi_text.partition("*")
            try:
                factor = int(factor_text.strip())
            except ValueError:
                raise InputError(f"size range {part!r}: the step factor after '*' must be a whole number") from None
            if factor < 2:
                raise InputError(f"size range {part!r}: the step factor must be at least 2")
        lo, hi = parse_size(lo_text.strip()), parse_size(hi_text.strip())
        if lo < 1 or hi < lo:
            raise InputError(f"size range {part!r}: need 1 byte <= start <= end")
        size = lo
        while size <= hi:
            out.add(size)
            if len(out) > MAX_SWEEP:
                break
            size *= factor
        if len(out) > MAX_SWEEP:
            break
    if len(out) > MAX_SWEEP:
        raise InputError(f"{show(text)} asks for more than {MAX_SWEEP} sizes")
    return sorted(out)


def parse_time(text: str | float) -> float:
    """'2.6us' -> 2.6; '1ms' -> 1000.0. A bare number is microseconds; not negative, at most
    ``MAX_MICROSECONDS``."""
    us = _quantity(text, "time", _TIME_EXACT, "us")
    return float(_in_range(us, text, "time", 0, MAX_MICROSECONDS, "us"))


def parse_seconds(text: str | float) -> float:
    """A time limit, budget or timeout: '60' or '60s' or '2ms' -> seconds; not negative, at
    most ``MAX_SECONDS``."""
    seconds = _quantity(text, "time limit", _SECONDS_EXACT, "s")
    return float(_in_range(seconds, text, "time limit", 0, MAX_SECONDS, "s"))


def parse_bandwidth(text: str | float) -> float:
    """'25GB/s' -> 25.0; '100Gbps' -> 12.5. A bare number is GB/s; not negative, at most
    ``MAX_BANDWIDTH``."""
    gbps = _quantity(text, "bandwidth", _BANDWIDTH_EXACT, "GB/s")
    return float(_in_range(gbps, text, "bandwidth", 0, MAX_BANDWIDTH, "GB/s"))




def _in_range(value: Fraction, text: object, what: str, least: int, most: int, unit: str) -> Fraction:
    shown = repr(text) if isinstance(text, str) else show(text)
    if value < least:
        rule = "be positive" if what == "bandwidth" else "not be negative"
        raise InputError(f"{what} must {rule}, got {shown}")
    if value > most:
        raise InputError(f"{what} {shown} is over the limit of {most:g} {unit}")
    return value


def format_size(size: int) -> str:
    """67108864 -> '64MiB'; 1000 -> '1000B'. Exact: never rounds."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = SIZE_UNITS[unit]
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
