"""The result cache: answers to requests already computed, keyed by every input that matters.

A key is the SHA-256 of the request (topology content, collective, options) and of a
fingerprint of the code that computes the answer: the sources of ``ccl``, ``solvers``,
``topologies`` and ``backends.sim`` and the versions of z3, PuLP and HiGHS. Any change to
them gives new keys, so an entry is never stale; old entries are simply not found again.

The folder is ``$CCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ccl``, else ``~/.cache/ccl``
(``ccl.core.private.cache_root``); entries live in its ``sets`` folder, which must be private
(``ccl.core.private``: this user's, mode 0700): otherwise the cache is not used.
``CCL_CACHE_DIR=off`` (or ``--no-cache``) turns the cache off.

An entry is bound to its key: the file (``"format": "ccl-cache-entry"``, named ``KEY.json``)
holds the key and the whole request next to the schedule set, and is served only when both
equal the request being answered and the set is for the requested topology and collective
(and verifies). Anything else, a file for another request placed under the key included, is a
miss: it is recomputed, never served. Entries are read without following symlinks, only when
they are this user's regular files, and written to a new file renamed into place (never
through a symlink). ``clear`` removes only files it recognizes as entries: a ``KEY.json``
name (64 hex digits) and an entry's format (or, for entries of earlier versions, a schedule
set's) at the start of the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ..core import private
from ..core.errors import CclError
from ..core.limits import INPUT_BYTES, parse_json
from ..core.schedule_set import SET_FORMAT, set_from_json, set_to_json, verify_set
from ..core.serialize import collective_to_json, dumps, topology_to_json

_FINGERPRINT: str | None = None
PACKAGES = ("ccl", "solvers", "topologies", os.path.join("backends", "sim"))
ENTRY_FORMAT = "ccl-cache-entry"
ENTRY_VERSION = 1
ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.json")
HEAD = 256  # bytes of an entry read to recognize it (its "format" comes first)


def cache_dir() -> Path | None:
    """The cache folder, or None when the cache is off."""
    return private.cache_root()


def sets_dir() -> Path | None:
    """The folder of the entries when it is private (created when missing), else None."""
    folder = cache_dir()
    return None if folder is None else private.private_folder(folder / "sets")


def fingerprint() -> str:
    """A digest of the code and solver libraries that answers depend on (computed once)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        root = Path(__file__).resolve().parents[2]
        h = hashlib.sha256()
        for package in PACKAGES:
            for path in sorted((root / package).rglob("*")):
                if path.suffix in (".py", ".ccl", ".lark") and path.is_file():
                    h.update(str(path.relative_to(root)).encode())
                    h.update(path.read_bytes())

        for dist in ("z3-solver", "PuLP", "highspy"):
            try:
                h.update(f"{dist}={metadata.version(dist)}".encode())
            except metadata.PackageNotFoundError:
                h.update(f"{dist}=none".encode())
        _FINGERPRINT = h.hexdigest()
    return _FINGERPRINT


@dataclass(frozen=True)
class Key:
    """A request's key: its ``digest`` (the entry's file name) and the ``request`` itself (as
    JSON data), with the topology and collective an entry must be for."""

    digest: str
    request: dict[str, Any] = field(compare=False)
    topology: Any = field(compare=False)
    collective: Any = field(compare=False)

    def __str__(self) -> str:
        return self.digest


def key(kind: str, *, topology: Any, collective: Any, asked: dict[str, Any]) -> Key:
    data = {"kind": kind, "code": fingerprint(), "topology": topology_to_json(topology),
            "collective": collective_to_json(collective), "asked": asked}
    text = json.dumps(data, sort_keys=True, default=str)
    return Key(hashlib.sha256(text.encode()).hexdigest(), json.loads(text), topology, collective)


def _path(key: Key) -> Path | None:
    folder = sets_dir()
    return None if folder is None else folder / f"{key.digest}.json"


def _read(path: Path, limit: int) -> bytes | None:
    """The bytes of an entry file of this user's (no symlink followed), at most ``limit``."""
    fd = private.open_private(path)
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    return data if len(data) <= limit else None


def load_set(key: Key) -> Any:
    """The cached ScheduleSet for ``key``, verified, or None: no entry, an entry for another
    request, topology or collective, or one that does not read or verify."""
    path = _path(key)
    if path is None:
        return None
    data = _read(path, INPUT_BYTES.value)
    if data is None:
        return None
    try:
        entry = parse_json(data.decode("utf-8"), str(path))
        if (not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT
                or entry.get("version") != ENTRY_VERSION or entry.get("key") != key.digest
                or entry.get("request") != key.request):
            return None
        sset = set_from_json(entry["set"])
        if sset.topology != key.topology or sset.collective != key.collective:
            return None
        verify_set(sset)
    except (OSError, ValueError, KeyError, TypeError, CclError):
        return None
    return sset


def store_set(key: Key, sset: Any) -> None:
    """Keep ``sset`` under ``key``, bound to its request; a cache that cannot be written is
    skipped silently (it only saves time)."""
    path = _path(key)
    if path is None:
        return
    try:
        text = dumps({"format": ENTRY_FORMAT, "version": ENTRY_VERSION, "key": key.digest, "request": key.request,
                      "set": set_to_json(sset)}) + "\n"
    except (CclError, TypeError, ValueError):
        return
    private.write_private(path, text.encode("utf-8"))


def _recognized(path: Path) -> bool:
    """An entry of this cache: its name, a regular file of this user's, and an entry's format
    (or an earlier version's schedule set) at its start."""
    if not ENTRY_NAME.fullmatch(path.name) or not private.is_private_file(path):
        return False
    head = _read_head(path)
    return head is not None and re.match(rb'\s*\{\s*"format":\s*"(%s|%s)"' % (ENTRY_FORMAT.encode(),
                                                                         SET_FORMAT.encode()), head) is not None


def _read_head(path: Path) -> bytes | None:
    fd = private.open_private(path)
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            return fh.read(HEAD)
    except OSError:
        return None


def entries() -> list[Path]:
    """The cache's entries, oldest first (empty when the cache is off, empty or not private);
    files it does not recognize as its entries are left out (and left alone)."""
    folder = cache_dir()
    if folder is None:
        return []
    sets = folder / "sets"
    if not sets.is_dir() or private.private_folder(sets) is None:
        return []
    files = [p for p in sets.iterdir() if _recognized(p)]
    return sorted(files, key=lambda p: (p.lstat().st_mtime, p.name))


def clear() -> tuple[int, int]:
    """Remove every entry (``entries``); returns (files, bytes) removed."""
    n = size = 0
    for path in entries():
        try:
            info = path.lstat()
            path.unlink()
            size += info.st_size
            n += 1
        except OSError:
            pass
    return n, size
