"""Units: sizes in bytes, time in microseconds, bandwidth in GB/s (10^9 bytes per second).

Text with a unit suffix is converted once, here, by the CLI and the DSL lowering.
"""

from __future__ import annotations

import re

from .errors import InputError

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

TIME_UNITS: dict[str, float] = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}

# Bandwidth in GB/s per unit.
BANDWIDTH_UNITS: dict[str, float] = {
    "GB/s": 1.0,
    "MB/s": 1e-3,
    "KB/s": 1e-6,
    "TB/s": 1e3,
    "Gbps": 1.0 / 8.0,
    "Mbps": 1.0 / 8000.0,
    "Tbps": 1000.0 / 8.0,
}

_NUMBER = re.compile(r"^\s*([-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")


def _split(text: str, what: str) -> tuple[float, str]:
    match = _NUMBER.match(text)
    if not match:
        raise InputError(f"cannot read {what} {text!r}: expected a number with a unit")
    return float(match.group(1)), match.group(2)


def parse_size(text: str | int) -> int:
    """'64MiB' -> 67108864. A bare number is bytes. The result must be a whole number."""
    if isinstance(text, int):
        if text < 0:
            raise InputError(f"size must not be negative, got {text}")
        return text
    value, unit = _split(text, "size")
    unit = unit or "B"
    if unit not in SIZE_UNITS:
        known = ", ".join(SIZE_UNITS)
        raise InputError(f"unknown size unit {unit!r} in {text!r} (known: {known})")
    size = value * SIZE_UNITS[unit]
    if size < 0:
        raise InputError(f"size must not be negative, got {text!r}")
    if size != int(size):
        raise InputError(f"size {text!r} is not a whole number of bytes")
    return int(size)


MAX_SWEEP = 256  # sizes one sweep may ask for


def parse_sizes(text: str | int) -> list[int]:
    """One size, a comma-separated list, or ranges ``A..B`` (A, 2A, 4A, ... up to B, as
    nccl-tests steps with -f 2; ``A..B*F`` multiplies by F instead), in increasing order
    without repeats: ``1KiB..1GiB``, ``4MiB,64MiB``, ``1KiB..1MiB*4,1GiB``. Every size is a
    positive whole number of bytes; at most ``MAX_SWEEP`` sizes."""
    if isinstance(text, int):
        if text < 1:
            raise InputError(f"size must be at least 1 byte, got {text}")
        return [text]
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
        raise InputError(f"{text!r} asks for more than {MAX_SWEEP} sizes")
    return sorted(out)


def parse_time(text: str | float) -> float:
    """'2.6us' -> 2.6; '1ms' -> 1000.0. A bare number is microseconds."""
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "time")
    unit = unit or "us"
    if unit not in TIME_UNITS:
        raise InputError(f"unknown time unit {unit!r} in {text!r} (known: ns, us, ms, s)")
    return value * TIME_UNITS[unit]


def parse_seconds(text: str | float) -> float:
    """A time limit: '60' or '60s' or '2ms' -> seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "time")
    if not unit:
        return value
    return parse_time(text) / 1e6


def parse_bandwidth(text: str | float) -> float:
    """'25GB/s' -> 25.0; '100Gbps' -> 12.5. A bare number is GB/s."""
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "bandwidth")
    unit = unit or "GB/s"
    if unit not in BANDWIDTH_UNITS:
        known = ", ".join(BANDWIDTH_UNITS)
        raise InputError(f"unknown bandwidth unit {unit!r} in {text!r} (known: {known})")
    return value * BANDWIDTH_UNITS[unit]


def format_size(size: int) -> str:
    """67108864 -> '64MiB'; 1000 -> '1000B'. Exact: never rounds."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = SIZE_UNITS[unit]
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
