"""Output files of the simulator (traces, plots): written whole or not at all."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ccl.errors import InputError


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[Any]], None], *, binary: bool = False) -> None:
    """Call ``write`` on a temporary file in the target's folder, then rename it into place
    with the permissions a plain ``open`` would give. Errors become InputError."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {str(target)!r}: folder {str(folder)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
        try:
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)
            with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as fh:
                write(fh)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise InputError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
