"""Resource limits: how much work an input may ask for, checked before memory is spent.

Every count that input controls (the bytes of a file read, ranks, buffer slots, steps,
simulated slices) has one limit here, with an environment variable that raises it for a
user who really needs more. A limit is read from the environment each time it is checked, so a
caller (or a test) may change it at run time. Exceeding one raises ``InputError`` (exit 2)
with one line naming the value, the limit and the variable.

Files are read through ``read_input_bytes`` / ``read_input_text`` / ``read_input_json``:
regular files only (a device or FIFO such as ``/dev/zero`` is refused before reading), at
most the size limit (at most limit + 1 bytes are ever read), JSON nesting too deep for the
parser is an ``InputError``.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from typing import Any

from .display import number, shown
from .errors import InputError


@dataclass(frozen=True)
class Limit:
    """One limit: ``what`` it bounds (plural noun: "bytes", "slots"), its default and the
    environment variable that overrides it."""

    name: str
    env: str
    default: int
    unit: str

    @property
    def value(self) -> int:
        """The limit in force: the environment variable if set (a positive integer), else the
        default."""
        text = os.environ.get(self.env)
        if text is None or not text.strip():
            return self.default
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            value = 0
        if value < 1:
            raise InputError(f"{self.env}={shown(repr(text[:40]))}: expected a positive integer (the {self.name} "
                             f"limit, default {self.default})")
        return value

    def hint(self) -> str:
        return f"set {self.env} to raise it"

    def check(self, amount: int, what: str) -> int:
        """``amount`` if within the limit, else InputError: '<what> is/needs <amount> <unit>,
        over the limit of N <unit> (set ENV to raise it)'."""
        limit = self.value
        if amount > limit:
            raise InputError(self.message(amount, what, limit))
        return amount

    def message(self, amount: int, what: str, limit: int | None = None) -> str:
        """The one line; ``amount`` may be an integer of any size (``ccl.core.display.number``)."""
        limit = self.value if limit is None else limit
        return f"{what}: {number(amount)} {self.unit}, over the limit of {limit} {self.unit} ({self.hint()})"


MiB = 1 << 20

INPUT_BYTES = Limit("input file size", "CCL_MAX_INPUT_BYTES", 256 * MiB, "bytes")
RANKS = Limit("ranks", "CCL_MAX_RANKS", 1 << 20, "ranks")
LINKS = Limit("links", "CCL_MAX_LINKS", 1 << 20, "links")
SLOTS = Limit("buffer slots", "CCL_MAX_SLOTS", 1 << 23, "slots")
STEPS = Limit("steps", "CCL_MAX_STEPS", 1 << 20, "steps")
LANES = Limit("lanes of a link", "CCL_MAX_LANES", 1024, "lanes")
SMT_VARS = Limit("exact-solver model size", "CCL_MAX_SMT_VARS", 1 << 21, "variables")
SMT_MEMORY = Limit("exact-solver memory", "CCL_MAX_SMT_MEMORY", 2048, "MiB")
LOCAL_PROCESSES = Limit("local processes", "CCL_MAX_LOCAL_PROCESSES", 256, "processes")
DSL_WORK = Limit("description work", "CCL_MAX_DSL_WORK", 20_000_000, "steps of work")
SIM_OPS = Limit("simulated op instances", "CCL_MAX_SIM_OPS", 1 << 24, "op instances")
CHANNELS = Limit("channels", "CCL_MAX_CHANNELS", 1024, "channels")
SET_ENTRIES = Limit("schedule set entries", "CCL_MAX_SET_ENTRIES", 1024, "entries")
XML_MOVES = Limit("MSCCL XML chunk moves", "CCL_MAX_XML_MOVES", 1 << 23, "chunk moves")
XML_DEPS = Limit("MSCCL XML dependencies", "CCL_MAX_XML_DEPS", 1 << 22, "dependencies")

ALL = (INPUT_BYTES, RANKS, LINKS, LANES, SLOTS, STEPS, CHANNELS, SIM_OPS, SMT_VARS, SMT_MEMORY, DSL_WORK,
       LOCAL_PROCESSES, SET_ENTRIES, XML_MOVES, XML_DEPS)


# ---------------------------------------------------------------------- files
def read_input_bytes(path: str | os.PathLike[str], what: str = "file", display: str | None = None) -> bytes:
    """The bytes of a regular file of at most ``INPUT_BYTES`` (InputError otherwise: missing,
    a folder, a device or FIFO, too large, unreadable). Reads at most limit + 1 bytes.
    Messages name the file as ``display`` (default: the path)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise InputError(f"expected a file path (str or os.PathLike), got {type(path).__name__}")
    name = display if display is not None else os.fsdecode(path)
    if "\x00" in os.fsdecode(path):
        raise InputError(f"{name!r}: a file name cannot contain a NUL character")
    limit = INPUT_BYTES.value
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{name}: is a folder, not a {what}") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{name}: is a folder, not a {what}")
        if not stat.S_ISREG(info.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                    else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a regular file")
            raise InputError(f"{name}: is {kind}, not a regular {what} (only regular files are read)")
        if info.st_size > limit:
            raise InputError(INPUT_BYTES.message(info.st_size, f"{name} is too large", limit))
        chunks = []
        left = limit + 1
        while left > 0:
            piece = os.read(fd, min(left, 1 << 20))
            if not piece:
                break
            chunks.append(piece)
            left -= len(piece)
        data = b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while read
        raise InputError(INPUT_BYTES.message(len(data), f"{name} is too large", limit))
    return data


def read_input_text(path: str | os.PathLike[str], what: str = "file", display: str | None = None) -> str:
    """``read_input_bytes`` decoded as UTF-8 (InputError naming the file when it is not)."""
    data = read_input_bytes(path, what, display)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        name = display if display is not None else os.fsdecode(path)
        raise InputError(f"{name}: cannot read: not UTF-8 text (byte {exc.start})") from None


# Memory a parsed JSON value takes per array, object or element (a ',' '[' or '{' of its
# text): about 37 bytes for a real schedule, up to ~72 for hostile text such as "[[],[],...]"
# (an empty list per 3 bytes). A text shorter than the budget / JSON_BYTES_PER_CHAR is parsed
# without counting.
JSON_BYTES_PER_ITEM = 64
JSON_BYTES_PER_CHAR = 1 + JSON_BYTES_PER_ITEM * 2 // 3 + 1  # the most the estimate gives per byte ("[],")
JSON_MEMORY_FACTOR = 16  # a parse may take 16 bytes per byte of INPUT_BYTES (4 GiB by default)
JSON_MEMORY_FLOOR = 64 * MiB  # ... and at least this much (when free), however low INPUT_BYTES is


def memory_available() -> int | None:
    """Bytes this process may still allocate, as far as cheaply known: the address-space limit
    (``ulimit -v``) less what is mapped, and the memory the system reports available; None
    when neither is known."""
    budgets = []
    try:
        import resource  # POSIX only: elsewhere the address-space limit is unknown

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as fh:
                mapped = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            budgets.append(soft - mapped)
    except (ImportError, OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    budgets.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    return min(budgets) if budgets else None


def _too_large_to_parse(name: str, needed: int | None = None, budget: int | None = None) -> InputError:
    about = "" if needed is None else f" (needs about {needed >> 20} MiB, {max(budget or 0, 0) >> 20} MiB allowed)"
    return InputError(f"{name}: too large to parse in memory{about}: parsing may take the memory free or "
                      f"{JSON_MEMORY_FACTOR} bytes per byte of the input file limit ({INPUT_BYTES.value} bytes, "
                      f"{INPUT_BYTES.env}), whichever is less")


def parse_memory_budget() -> int:
    """Bytes parsing one JSON file may take: ``JSON_MEMORY_FACTOR`` x ``INPUT_BYTES`` (at least
    ``JSON_MEMORY_FLOOR``), and no more than ``memory_available``."""
    budget = max(JSON_MEMORY_FACTOR * INPUT_BYTES.value, JSON_MEMORY_FLOOR)
    available = memory_available()
    return budget if available is None else min(budget, available)


def check_parse_memory(text: str | bytes, name: str) -> None:
    """InputError when parsing JSON ``text`` would take more than ``parse_memory_budget``: its
    arrays, objects and elements counted (only for a text large enough to matter)."""
    if len(text) * JSON_BYTES_PER_CHAR <= JSON_MEMORY_FLOOR:  # small: no need to look further
        return
    budget = parse_memory_budget()
    if len(text) * JSON_BYTES_PER_CHAR <= budget:
        return
    items = (text.count(b"[") + text.count(b"{") + text.count(b",")) if isinstance(text, bytes) else (
        text.count("[") + text.count("{") + text.count(","))
    needed = len(text) + items * JSON_BYTES_PER_ITEM
    if needed > budget:
        raise _too_large_to_parse(name, needed, budget)


def check_memory(name: str, needed: int, what: str = "read") -> None:
    """InputError when ``needed`` bytes (an estimate made before the work) exceed what one
    input may take (``parse_memory_budget``)."""
    budget = parse_memory_budget()
    if needed > budget:
        raise InputError(f"{name}: too large to {what} in memory (needs about {needed >> 20} MiB, "
                         f"{max(budget, 0) >> 20} MiB allowed): an input may take the memory free or "
                         f"{JSON_MEMORY_FACTOR} bytes per byte of the input file limit ({INPUT_BYTES.value} bytes, "
                         f"{INPUT_BYTES.env}), whichever is less")


def parse_json(text: str, name: str) -> Any:
    """JSON text -> value; InputError located at the line and column when malformed or nested
    too deeply for the parser, or when it would not fit in memory."""
    check_parse_memory(text, name)
    try:
        return json.loads(text)
    except MemoryError:
        raise _too_large_to_parse(name) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{name}: JSON nested too deeply to read (arrays or objects nested "
                         "thousands of levels deep)") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4300)
        raise InputError(f"{name}: invalid JSON: {str(exc).split(';')[0]}") from None


def read_input_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file read through ``read_input_text`` and ``parse_json``."""
    return parse_json(read_input_text(path, "JSON file"), os.fsdecode(path))
