"""``ccl cache info|clear``: the tuner's result cache (``ccl.compiler.cache``)."""

from __future__ import annotations

import argparse
from typing import Any

from ..compiler import cache
from ..core.display import shown
from .common import Parser, command, emit


def _size(files: list) -> int:
    total = 0
    for p in files:
        try:
            total += p.lstat().st_size
        except OSError:  # removed meanwhile
            pass
    return total


def cmd_info(args: argparse.Namespace) -> int:
    folder = cache.cache_dir()
    private = folder is not None and cache.sets_dir() is not None
    files = cache.entries()
    size = _size(files)
    data = {"folder": None if folder is None else str(folder), "enabled": private,
            "entries": len(files), "bytes": size}
    if folder is None:
        text = "the result cache is off (CCL_CACHE_DIR=off)"
    elif not private:
        text = (f"result cache: {shown(folder)}\n  not used: its sets folder is not private to this user (another "
                "user owns it or may write it, or it is a symlink)")
    else:
        text = (f"result cache: {shown(folder)}\n  {len(files)} schedule set{'s' if len(files) != 1 else ''}, "
                f"{size / 2**20:.1f} MiB (ccl cache clear removes them; CCL_CACHE_DIR moves the folder)")
    emit(args, data, text)
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    n, size = cache.clear()
    folder = cache.cache_dir()
    emit(args, {"removed": n, "bytes": size, "folder": None if folder is None else str(folder)},
         f"removed {n} cached schedule set{'s' if n != 1 else ''} ({size / 2**20:.1f} MiB)"
         + ("" if folder is None else f" from {shown(folder)}"))
    return 0


def register(sub: Any) -> None:
    group = sub.add_parser("cache", help="show or clear the tuner's result cache",
                           description="the tuner's result cache: answers of `ccl synthesize` (auto) kept by "
                                       "their inputs")
    actions = group.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    actions.required = True
    command(actions, "info", "where the cache is and how much it holds", cmd_info)
    command(actions, "clear", "remove every cached answer (only the cache's own entries: other files in its folder "
                              "are left alone)", cmd_clear)
