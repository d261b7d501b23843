"""Folders and files only this user can have written: where the project keeps what it reads
back without checking its contents (the parser's tables, the result cache).

A file in a folder another user can write may have been planted or swapped by that user, and
reading it back (a pickle, a cached answer) would run or serve what they chose. So:

* ``cache_root()``: ``$CCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ccl``, else ``~/.cache/ccl``
  (None when ``CCL_CACHE_DIR`` is ``off``); never the system's shared temporary folder.
* ``private_folder(path)``: the folder, created with mode 0700 when missing, or None unless it
  is a real folder (not a symlink) owned by this user that no one else may write, and every
  folder above it is owned by this user or root and, when others may write it, sticky (as
  ``/tmp``: no one may rename or remove another user's entries in it).
* ``open_private(path)``: a file of such a folder opened for reading without following a
  symlink, and only when it is a regular file owned by this user that no one else may write.
* ``write_private(path, data)``: written whole into its private folder under a new name (never
  through a symlink or over someone else's file) and renamed over ``path``.

On systems without ownership (no ``os.getuid``) nothing is private and every function
answers None or False: callers then do without a cache.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MODE = 0o700


def cache_root() -> Path | None:
    """The folder of the project's caches (module docstring), or None when caching is off."""
    env = os.environ.get("CCL_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ccl"


def _uid() -> int | None:
    getuid = getattr(os, "getuid", None)
    return None if getuid is None else getuid()


def _safe_ancestor(info: os.stat_result, uid: int) -> bool:
    """A folder above a private one: ours or root's, and sticky when others may write it."""
    if info.st_uid not in (uid, 0):
        return False
    return not info.st_mode & 0o022 or bool(info.st_mode & stat.S_ISVTX)


def private_folder(path: str | os.PathLike[str]) -> Path | None:
    """``path`` as a private folder (module docstring), created when missing; None when it is
    not or cannot be one."""
    uid = _uid()
    if uid is None:
        return None
    folder = Path(os.path.abspath(os.fspath(path)))
    try:
        for parent in reversed(folder.parents):  # the folders above, from the root down
            if parent.exists() and not _safe_ancestor(os.stat(parent), uid):
                return None
        missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
        for p in reversed(missing):
            try:
                os.mkdir(p, MODE)
            except FileExistsError:
                pass
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            return None
        if stat.S_IMODE(info.st_mode) & 0o077:  # ours but open to others: close it
            os.chmod(folder, MODE)
            info = os.lstat(folder)
            if stat.S_IMODE(info.st_mode) & 0o077:
                return None
        for parent in folder.parents:  # created just now, or checked above: safe all the way up
            if not _safe_ancestor(os.stat(parent), uid):
                return None
    except (OSError, ValueError):
        return None
    return folder


def owned(info: os.stat_result) -> bool:
    """A regular file of this user that no one else may write."""
    uid = _uid()
    return (uid is not None and stat.S_ISREG(info.st_mode) and info.st_uid == uid
            and not stat.S_IMODE(info.st_mode) & 0o022)


def open_private(path: str | os.PathLike[str]) -> int | None:
    """A file descriptor of ``path`` opened for reading, or None when it is missing, a symlink,
    not a regular file, not this user's or writable by others. The caller closes it."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(os.fspath(path), flags)
    except (OSError, ValueError):
        return None
    try:
        if owned(os.fstat(fd)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def is_private_file(path: str | os.PathLike[str]) -> bool:
    """``path`` is a regular file (not a symlink) of this user that no one else may write."""
    try:
        return owned(os.lstat(path))
    except (OSError, ValueError):
        return False


def write_private(path: str | os.PathLike[str], data: bytes) -> bool:
    """Write ``data`` as ``path`` in its (private) folder: to a new file (O_EXCL, O_NOFOLLOW,
    mode 0600) renamed over ``path``, which replaces a symlink there rather than writing
    through it. False when it could not be written (nothing is left behind)."""
    path = os.fspath(path)
    if private_folder(os.path.dirname(path) or ".") is None:
        return False
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except (OSError, ValueError):
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return True
    except (OSError, ValueError):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
