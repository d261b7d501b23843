"""Progress of long commands on stderr, one facility for every command.

``Progress.update(message, fraction=None)`` says what runs and, when known, how much of the
work is done (0..1). On a terminal one line is redrawn in place: a bar, the percentage and the
time left (from the fraction and the time so far), or the time so far when no fraction is
known; the line is erased when the command ends. In a pipe or a file the same news comes as
plain ``ccl: message`` lines, at most one a second and none in the first second, so quick
commands stay silent. Nothing at all with ``--quiet`` / ``-q`` or ``CCL_QUIET=1``. Never on
stdout: ``--json`` output stays one clean object. No colour.

While a line is drawn, other writes to ``sys.stderr`` (the solvers' own progress lines) erase
it first and redraw it after, and writes to ``sys.stdout`` on the same terminal (the report)
erase it, so neither lands in the middle of the bar.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from ..core.display import shown

QUIET_ENV = "CCL_QUIET"
BAR_WIDTH = 20
TTY_INTERVAL = 0.1  # seconds between redraws on a terminal
PIPE_INTERVAL = 1.0  # seconds between lines in a pipe (and before the first one)

_drawn: list[Progress] = []  # progress lines drawn on a terminal and not closed (see ``erase_all``)


def quiet_from_env(environ: Any = None) -> bool:
    """True when ``CCL_QUIET`` is set to anything but empty or 0 (the solvers read it the same way)."""
    value = (os.environ if environ is None else environ).get(QUIET_ENV, "")
    return value not in ("", "0")


def format_duration(seconds: float) -> str:
    """``7`` -> ``0:07``, ``65`` -> ``1:05``, ``3723`` -> ``1:02:03``."""
    total = max(0, int(round(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_seconds(fraction: float, elapsed: float) -> float | None:
    """Time left if the rest goes as fast as the part done so far; None while it is too early
    to tell (nothing done yet, or less than a second in)."""
    if fraction <= 0 or elapsed < 1.0:
        return None
    return elapsed * (1 - min(fraction, 1.0)) / min(fraction, 1.0)


def bar_text(fraction: float, elapsed: float, width: int = BAR_WIDTH) -> str:
    """``[#########-----------]  45% ETA 0:13``."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = int(fraction * width)
    eta = eta_seconds(fraction, elapsed)
    return (f"[{'#' * filled}{'-' * (width - filled)}] {int(fraction * 100):3d}% "
            f"ETA {format_duration(eta) if eta is not None else '-:--'}")


class Progress:
    """Progress lines of one command; ``update`` as often as convenient (see module docstring).

    A ``Progress`` is also a callable ``(message, fraction=None)`` and a context manager that
    erases its line on exit; the ``ccl`` command erases any line left when a command ends."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, prefix: str = "ccl: ") -> None:
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet_from_env() if quiet is None else quiet
        self.clock = clock
        self.prefix = prefix
        self.start = clock()
        self.tty = _isatty(self.stream)
        self.last = self.start if not self.tty else None  # time of the last line written
        self.text = ""  # the line now drawn on a terminal
        self.message = ""
        self.fraction: float | None = None
        self.closed = False
        self._proxies: list[_Interleaved] = []

    def __call__(self, message: str, fraction: float | None = None) -> None:
        self.update(message, fraction)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, message: str, fraction: float | None = None) -> None:
        """Say what runs now; ``fraction`` (0..1) of the work is done, if known."""
        if self.quiet:
            return
        self.message, self.fraction, self.closed = shown(message), fraction, False  # names in it come from inputs
        now = self.clock()
        if self.last is not None and now - self.last < (TTY_INTERVAL if self.tty else PIPE_INTERVAL):
            return
        self.last = now
        if self.tty:
            self._draw(now)
        else:
            self.stream.write(self.prefix + self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        """The plain line for the latest update: ``message (45%, ETA 0:13)``."""
        elapsed = (self.clock() if now is None else now) - self.start
        if self.fraction is None:
            return self.message
        eta = eta_seconds(self.fraction, elapsed)
        left = f", ETA {format_duration(eta)}" if eta is not None else ""
        return f"{self.message} ({int(min(max(self.fraction, 0.0), 1.0) * 100)}%{left})"

    def close(self) -> None:
        """Erase the line from the terminal (a no-op in a pipe)."""
        self.closed = True
        self._erase()
        if self in _drawn:
            _drawn.remove(self)
        for proxy in reversed(self._proxies):
            if getattr(sys, proxy.name) is proxy:
                setattr(sys, proxy.name, proxy.stream)
        self._proxies = []

    # ------------------------------------------------------------------ terminal drawing
    def _draw(self, now: float) -> None:
        elapsed = now - self.start
        status = bar_text(self.fraction, elapsed) if self.fraction is not None else f"[{format_duration(elapsed)}]"
        text = f"{self.prefix}{status}  {self.message}"
        width = _columns(self.stream) - 1
        if len(text) > width:
            text = text[:max(width - 3, 0)] + "..."
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self.text = text
        if self not in _drawn:
            _drawn.append(self)
        if not self._proxies and self.stream is sys.stderr:
            self._proxies.append(_Interleaved("stderr", self, redraw=True))
            if _isatty(sys.stdout):
                self._proxies.append(_Interleaved("stdout", self, redraw=False))
            for proxy in self._proxies:
                setattr(sys, proxy.name, proxy)

    def _erase(self) -> None:
        if self.text:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.text = ""

    def _redraw(self) -> None:
        if not self.closed and not self.text and self.message:
            self._draw(self.clock())


def erase_all() -> None:
    """Close every progress line still drawn (the ``ccl`` command calls this when a command
    ends, before it prints an error, so no bar is left under the output)."""
    for progress in list(_drawn):
        progress.close()


class _Interleaved:
    """``sys.stderr`` (or ``sys.stdout``) while a progress line is drawn: a write erases the
    line first; on stderr a finished line redraws it after."""

    def __init__(self, name: str, progress: Progress, *, redraw: bool) -> None:
        self.name = name
        self.stream = getattr(sys, name)
        self.progress = progress
        self.redraw = redraw

    def write(self, text: str) -> int:
        if text:
            self.progress._erase()
        n = self.stream.write(text)
        if self.redraw and text.endswith("\n"):
            self.stream.flush()
            self.progress._redraw()
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _columns(stream: Any) -> int:
    """The terminal's width: COLUMNS, else the terminal's own, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0")) or os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns if columns >= 20 else 80
