"""The result cache: answers to requests already computed, keyed by every input that matters.

A key is the SHA-256 of the request (topology content, collective, options) and of a
fingerprint of the code that computes the answer: the sources of ``ccl``, ``solvers``,
``topologies`` and ``backends.sim`` and the versions of z3, PuLP and HiGHS. Any change to
them gives new keys, so an entry is never stale; old entries are simply not found again.

The folder is ``$CCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ccl``, else ``~/.cache/ccl``.
Entries are whole files written atomically; one that cannot be read or does not parse is
ignored (and recomputed). ``CCL_CACHE_DIR=off`` (or ``--no-cache``) turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from ..core.errors import CclError
from ..core.limits import read_input_json
from ..core.schedule_set import save_set, set_from_json, verify_set
from ..core.serialize import collective_to_json, topology_to_json

_FINGERPRINT: str | None = None
PACKAGES = ("ccl", "solvers", "topologies", os.path.join("backends", "sim"))


def cache_dir() -> Path | None:
    """The cache folder, or None when the cache is off."""
    env = os.environ.get("CCL_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ccl"


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


def key(kind: str, *, topology: Any, collective: Any, asked: dict[str, Any]) -> str:
    data = {"kind": kind, "code": fingerprint(), "topology": topology_to_json(topology),
            "collective": collective_to_json(collective), "asked": asked}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _path(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / "sets" / f"{key}.json"


def load_set(key: str) -> Any:
    """The cached ScheduleSet for ``key``, verified, or None."""
    path = _path(key)
    if path is None or not path.is_file():
        return None
    try:
        sset = set_from_json(read_input_json(path))
        verify_set(sset)
    except (OSError, ValueError, KeyError, TypeError, CclError):
        return None
    return sset


def store_set(key: str, sset: Any) -> None:
    """Keep ``sset`` under ``key``; a cache that cannot be written is skipped silently (it only
    saves time)."""
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_set(sset, path)
    except (OSError, CclError):
        pass


def entries() -> list[Path]:
    """The cached files, oldest first (empty when the cache is off or empty)."""
    folder = cache_dir()
    if folder is None or not (folder / "sets").is_dir():
        return []
    files = [p for p in (folder / "sets").iterdir() if p.is_file() and p.suffix == ".json"]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name))


def clear() -> tuple[int, int]:
    """Remove every cached file; returns (files, bytes) removed."""
    n = size = 0
    for path in entries():
        try:
            size += path.stat().st_size
            path.unlink()
            n += 1
        except OSError:
            pass
    return n, size
