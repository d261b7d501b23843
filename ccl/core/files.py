"""Writing files without losing any: every file the project writes goes through ``write_all``
(``write_atomic`` for one file).

* Whole or nothing: each file is written to a temporary file in its target's folder, flushed to
  the disk and renamed into place. A batch is staged completely before the first rename, so a
  failure while writing (a full disk, a missing permission, an interrupt) leaves every target
  as it was.
* An existing file keeps its permission bits, and its owner and group where the process may
  set them; a new file gets the permissions a plain ``open`` would give (0666 less the umask).
* A symlink is written through: the file it names is replaced and the link stays a link.
* Only regular files are replaced: a folder, device (``/dev/full``, ``/dev/null``), pipe or
  socket at a target is refused with InputError, never turned into a regular file.
* Two targets of one batch that are the same file (by name, through a symlink or a hard link)
  are refused before anything is written.
* ``batch()`` makes every write of a block one batch, whichever code does it (a simulator
  writing a trace, then a plot): all renamed into place when the block ends, none on an error.

``identity`` and ``kind`` are the checks the CLI's output guard (``ccl.cli.outputs``) shares.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from .errors import InputError

Writer = Callable[[IO[Any]], None]

_KINDS = ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "folder"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "pipe"), (stat.S_ISSOCK, "socket"))


def kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` names, symlinks followed: "regular file", "folder", "character device",
    "block device", "pipe", "socket", or None when nothing is there (a dangling symlink too)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((name for test, name in _KINDS if test(mode)), "special file")


def identity(path: str | os.PathLike[str]) -> tuple[Any, ...]:
    """A key equal for every name of one file: the device and inode of an existing file
    (symlinks followed, so a symlink and a hard link count as the file), else the absolute
    path with symlinks resolved (``./a.json``, ``a.json`` and ``/dir/a.json`` alike)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        try:
            return ("path", os.path.normcase(os.path.realpath(path)))
        except (OSError, ValueError):  # a NUL byte in the name
            return ("path", os.path.abspath(path))
    return ("inode", st.st_dev, st.st_ino)


def check_target(path: str | os.PathLike[str], label: str | None = None) -> str:
    """The real path a write of ``path`` replaces (symlinks resolved), or InputError when it
    cannot be a regular file: a folder, a device, pipe or socket, or a missing folder.
    ``label`` starts the message (default ``cannot write 'PATH'``)."""
    shown = os.fspath(path)
    head = label or f"cannot write {shown!r}"
    try:
        os.stat(path)
    except ValueError:
        raise InputError(f"{head}: a file name cannot hold a NUL character") from None
    except FileNotFoundError:
        pass  # a new file (or a symlink to one)
    except OSError as exc:  # a name too long, a symlink loop, a file used as a folder
        raise InputError(f"{head}: {exc.strerror or exc}") from None
    what = kind(path)
    if what == "folder":
        raise InputError(f"{head}: it is a folder; give a file name")
    if what not in (None, "regular file"):
        raise InputError(f"{head}: it is a {what}, not a regular file; files are written whole and a {what} is "
                         "never replaced: give a file path")
    real = os.path.realpath(path)
    folder = os.path.dirname(real) or "."
    if not os.path.isdir(folder):
        raise InputError(f"{head}: folder {folder!r} does not exist")
    return real


class _Batch:
    """Files staged by ``write_all`` inside ``batch()``: (temporary path, target, name given)."""

    def __init__(self) -> None:
        self.staged: list[tuple[str, str, str]] = []
        self.keys: dict[tuple[Any, ...], str] = {}

    def commit(self) -> None:
        staged, self.staged = self.staged, []
        try:
            for k, (tmp, real, shown) in enumerate(staged):
                try:
                    os.replace(tmp, real)
                except OSError as exc:
                    done = f"; {k} of {len(staged)} files written before it" if len(staged) > 1 else ""
                    raise InputError(f"cannot write {shown!r}: {exc.strerror or exc}{done}") from None
                staged[k] = ("", real, shown)
        finally:
            _discard(staged)

    def discard(self) -> None:
        staged, self.staged = self.staged, []
        _discard(staged)


def _discard(staged: list[tuple[str, str, str]]) -> None:
    for tmp, _, _ in staged:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass


_current: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar("ccl_files_batch", default=None)


@contextlib.contextmanager
def batch() -> Iterator[None]:
    """Within the block, files written with ``write_all``/``write_atomic`` (by any code: a
    simulator's trace and plot) are staged, and renamed into place together when the block
    ends without an error; an error discards them all. Two writes of one file in a block are
    refused. A nested block joins the outer one."""
    if _current.get() is not None:
        yield
        return
    current = _Batch()
    token = _current.set(current)
    try:
        yield
    except BaseException:
        _current.reset(token)
        current.discard()
        raise
    _current.reset(token)
    current.commit()


def write_all(files: Iterable[tuple[str | os.PathLike[str], Writer]], *, binary: bool = False) -> None:
    """Write every (path, write) pair, ``write`` called on an open temporary file, all or none
    (see the module's notes; inside ``batch()`` they join the batch). Errors become InputError
    naming the file."""
    items = list(files)
    outer = _current.get()
    current = outer if outer is not None else _Batch()
    targets: list[str] = []
    seen = dict(current.keys)
    for path, _ in items:
        real = check_target(path)
        key = identity(real)
        if key in seen:
            raise InputError(f"{seen[key]!r} and {os.fspath(path)!r} are the same file: one would overwrite the "
                             "other; nothing written")
        seen[key] = os.fspath(path)
        targets.append(real)
    staged: list[tuple[str, str, str]] = []
    try:
        for (path, write), real in zip(items, targets):
            try:
                staged.append((_stage(real, write, binary), real, os.fspath(path)))
            except OSError as exc:
                several = len(items) > 1 or bool(current.staged)
                raise InputError(f"cannot write {os.fspath(path)!r}: {exc.strerror or exc}"
                                 + ("; nothing written" if several else "")) from None
    except BaseException:
        _discard(staged)
        raise
    current.staged.extend(staged)
    current.keys = seen
    if outer is None:
        current.commit()


def _stage(real: str, write: Writer, binary: bool) -> str:
    """A finished temporary file beside ``real`` with the permissions ``real`` has (or a new
    file's), its contents on the disk; returns its path."""
    folder, name = os.path.split(real)
    fd, tmp = tempfile.mkstemp(prefix=f".{name[:80]}.", suffix=".tmp", dir=folder or ".")
    try:
        try:
            old = os.stat(real)
        except OSError:
            old = None
        if old is None:
            mask = os.umask(0)
            os.umask(mask)
            os.fchmod(fd, 0o666 & ~mask)
        else:
            _keep_owner(fd, old)
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as fh:
            fd = -1
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return tmp


def _keep_owner(fd: int, old: os.stat_result) -> None:
    """The owner and group of the file being replaced, as far as this process may set them."""
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) == (old.st_uid, old.st_gid):
        return
    for uid in (old.st_uid, -1):
        try:
            os.fchown(fd, uid, old.st_gid)
            return
        except OSError:
            continue


def write_atomic(path: str | os.PathLike[str], write: Writer, *, binary: bool = False) -> None:
    """Call ``write`` on a temporary file in the target's folder, then rename it into place:
    a whole file or nothing, an existing file's permissions kept (see ``write_all``)."""
    write_all([(path, write)], binary=binary)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a whole text file or nothing (see ``write_all``)."""
    write_atomic(path, lambda fh: fh.write(text))
