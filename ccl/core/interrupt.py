"""Ctrl-C (SIGINT) for long computations, and the deadlines they keep.

The solvers spend most of their time in native code (z3, HiGHS), where Python's own SIGINT
handling cannot reach them: a KeyboardInterrupt is only raised when the main thread runs Python
again. The driver therefore wraps a command in ``handling()``, within which:

* the first Ctrl-C sets the stop flag (``requested()``) and calls every function registered
  with ``on_interrupt`` (z3's ``Context.interrupt``, HiGHS's ``cancelSolve``) at once, from a
  watcher thread woken by the signal's byte on a wakeup pipe (``signal.set_wakeup_fd``), so it
  works while the main thread is blocked in native code. Outside a ``cooperative()`` region
  the main thread also gets KeyboardInterrupt, as without ``handling()``. Inside one, the code
  running promises to poll ``requested()`` (or ``stop_due``) and to stop within about a second,
  raising ``ccl.core.errors.Interrupted`` with the best result it holds, which the driver verifies
  and saves; once it has that result in hand it calls ``acknowledge()``;
* if nothing acknowledged the stop ``GRACE`` seconds after the first Ctrl-C (code that does
  not poll), the process prints ``ccl: interrupted`` and exits with 130;
* a second Ctrl-C exits with 130 at once.

Without ``handling()`` (the Python API) nothing changes: KeyboardInterrupt as usual, and
``requested()`` stays False.

``stop_due(deadline)`` is what a loop with a ``time.monotonic()`` deadline asks: the deadline has
passed or Ctrl-C asked to stop. ``deadline(seconds)`` turns a time limit into one, counted from
the innermost ``clock()`` (the driver opens one around each synthesis, so imports and model
building count against the limit) or from now.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

EXIT_INTERRUPTED = 130
GRACE = 3.0  # seconds a cooperative computation has to stop after the first Ctrl-C (then: exit 130)

_lock = threading.RLock()
_flag = threading.Event()
_hooks: dict[int, Callable[[], object]] = {}
_next_hook = 0
_count = 0  # Ctrl-C presses seen during the current ``handling()``
_first_at: float | None = None
_acknowledged = False
_cooperative = 0
_active = False
_read_fd = -1


_clocks: list[float] = []


@contextmanager
def clock() -> Iterator[None]:
    """Time limits given inside the block count from its start (see ``deadline``)."""
    _clocks.append(time.monotonic())
    try:
        yield
    finally:
        _clocks.pop()


def deadline(seconds: float | None) -> float | None:
    """The ``time.monotonic()`` deadline of a time limit (None: none), counted from the start of
    the innermost ``clock()`` block, or from now outside one."""
    if seconds is None:
        return None
    return (_clocks[-1] if _clocks else time.monotonic()) + seconds


def requested() -> bool:
    """True once Ctrl-C asked the running command to stop."""
    return _flag.is_set()


def stop_due(deadline: float | None) -> bool:
    """True when the ``time.monotonic()`` deadline (None: none) has passed or Ctrl-C asked to
    stop."""
    return _flag.is_set() or (deadline is not None and time.monotonic() >= deadline)


def left(deadline: float | None) -> float:
    """Seconds until a ``time.monotonic()`` deadline (infinite for None, 0 once Ctrl-C asked
    to stop)."""
    if _flag.is_set():
        return 0.0
    return float("inf") if deadline is None else max(0.0, deadline - time.monotonic())


class Abandon(BaseException):  # noqa: N818 - not an error: the signal to give a computation up
    """Raised by ``abandoning()`` into the main thread's Python code once its condition holds (a
    BaseException, so no ``except Exception`` in the abandoned code swallows it)."""


@contextmanager
def abandoning(due: Callable[[], bool], every: float = 0.1) -> Iterator[None]:
    """Within the block, raise ``Abandon`` in the main thread at the first check (every ``every``
    seconds, from SIGALRM) that finds ``due()`` true; at once if it already is. For long Python
    computations (a simulation, a tree packing) whose result is given up at a deadline or on
    Ctrl-C, wherever they are: the caller catches ``Abandon`` and falls back on what it holds.
    Outside the main thread, or when an interval timer already runs (someone else's alarm),
    only the check on entry is made: the caller must also poll between steps."""
    if due():
        raise Abandon
    if (threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)):
        yield
        return
    state = {"open": True}

    def on_alarm(signum: int, frame: object) -> None:
        if state["open"] and due():
            state["open"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise Abandon

    try:
        old = signal.signal(signal.SIGALRM, on_alarm)
    except (ValueError, OSError):  # not the main interpreter
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, every, every)
    try:
        yield
    finally:
        state["open"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def acknowledge() -> None:
    """The computation has stopped and the driver holds its result: disarm the watchdog that
    would otherwise end the process ``GRACE`` seconds after the first Ctrl-C."""
    global _acknowledged
    _acknowledged = True


@contextmanager
def cooperative() -> Iterator[None]:
    """A region whose code polls ``requested()`` and stops by itself, with its best result: Ctrl-C
    raises no KeyboardInterrupt inside it (main thread only; nests)."""
    global _cooperative
    _cooperative += 1
    try:
        yield
    finally:
        _cooperative -= 1


@contextmanager
def on_interrupt(hook: Callable[[], object]) -> Iterator[None]:
    """Call ``hook`` (from another thread) when Ctrl-C arrives while the block runs; at once if
    it already has. For native calls that have their own way to be cancelled."""
    global _next_hook
    with _lock:
        key = _next_hook
        _next_hook += 1
        _hooks[key] = hook
        already = _flag.is_set()
    if already:
        _call(hook)
    try:
        yield
    finally:
        with _lock:
            _hooks.pop(key, None)


def _call(hook: Callable[[], object]) -> None:
    try:
        hook()
    except Exception:  # noqa: BLE001 - a failing cancel must not stop the others
        pass


def _exit_now() -> None:
    try:
        os.write(2, b"ccl: interrupted\n")
    finally:
        os._exit(EXIT_INTERRUPTED)


def _note(signum: int) -> None:
    """One Ctrl-C seen (under the lock)."""
    global _count, _first_at
    if signum != signal.SIGINT:
        return
    _count += 1
    if _count >= 2:
        _exit_now()
    _first_at = time.monotonic()
    _flag.set()
    for hook in list(_hooks.values()):
        _call(hook)


def _drain() -> None:
    """Read the signal bytes waiting on the wakeup pipe and act on each (from the watcher
    thread or the main thread's handler, whichever comes first)."""
    with _lock:
        if _read_fd < 0:
            return
        while True:
            try:
                data = os.read(_read_fd, 64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not data:
                return
            for byte in data:
                _note(byte)


def _handler(signum: int, frame: object) -> None:
    _drain()
    if _cooperative == 0:
        raise KeyboardInterrupt


def _watch(read_fd: int, done: threading.Event) -> None:
    while not done.is_set():
        # the main thread's handler may drain the byte first: poll, so the watchdog still runs
        timeout = 0.25 if _first_at is None else 0.05
        try:
            ready, _, _ = select.select([read_fd], [], [], timeout)
        except (OSError, ValueError):
            return
        if done.is_set():
            return
        if ready:
            _drain()
        if _first_at is not None and not _acknowledged and time.monotonic() - _first_at > GRACE:
            _exit_now()


@contextmanager
def handling() -> Iterator[None]:
    """Handle Ctrl-C as the module docstring says while the block runs (a no-op outside the
    main thread or when already active)."""
    global _active, _read_fd, _count, _first_at, _acknowledged
    if _active or threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    try:
        old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        old_handler = signal.signal(signal.SIGINT, _handler)
    except (ValueError, OSError):  # not the main interpreter / thread
        os.close(read_fd)
        os.close(write_fd)
        yield
        return
    with _lock:
        _active, _read_fd = True, read_fd
        _count, _first_at, _acknowledged = 0, None, False
        _flag.clear()
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(read_fd, done), name="ccl-interrupt", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        try:
            os.write(write_fd, b"\0")  # wake the watcher
        except OSError:
            pass
        watcher.join(1.0)
        signal.signal(signal.SIGINT, old_handler)
        signal.set_wakeup_fd(old_fd)
        with _lock:
            _active, _read_fd = False, -1
            _flag.clear()
            _count, _first_at = 0, None
        os.close(read_fd)
        os.close(write_fd)
