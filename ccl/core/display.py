"""Text from inputs made safe to print, and numbers of any size as text.

A name, label or file name read from an input file (or typed on the command line) may hold
anything: ANSI escape sequences that recolour or clear a terminal, a carriage return or a
newline that starts a line of its own (``ccl: ok``), Unicode controls that reorder what
follows. ``shown`` escapes every character that is not printable (``\\x1b``, ``\\n``,
``\\u202e``), so what a report prints from an input always stays inside its own line and
prints as itself; printable text, the usual case, is returned unchanged. Every printer of the
command line passes such text through it (``ccl.core.errors`` does for every error message).

``number`` writes an integer of any size: Python refuses to turn an int of more than 4,300
digits into text (ValueError), and a message naming a hostile count must never fail itself.
"""

from __future__ import annotations

import math
from typing import Any

BIG = 10**30  # integers from here on are written as a power of ten


def shown(text: Any) -> str:
    """``text`` (a str, or anything ``str`` accepts) with every non-printable character
    escaped as Python writes it in a literal: ``\\n``, ``\\t``, ``\\x1b``, ``\\u202e``,
    ``\\udcff`` (an undecodable byte of a file name). One line, printable, unchanged when it
    already was."""
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception:  # noqa: BLE001 - an object whose str fails (or an int too long) is still named
            return f"<{type(text).__name__}>"
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def safe_lines(text: str) -> str:
    """Text made of lines the program wrote (a report): every line kept, every non-printable
    character other than the line breaks escaped (``shown``). A defence for whatever a printer
    did not pass through ``shown`` itself: no escape sequence reaches the terminal."""
    if text.isprintable() or all(line.isprintable() for line in text.split("\n")):
        return text
    return "\n".join(shown(line) for line in text.split("\n"))


def number(value: Any) -> str:
    """An integer as text whatever its size (``12345``; beyond 10^30 ``about 10^4300``, with
    the sign); other values as ``shown(value)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return shown(value)
    if -BIG < value < BIG:
        return str(value)
    digits = int(abs(value).bit_length() * math.log10(2))
    return f"{'-' if value < 0 else ''}about 10^{digits}"
