"""``ccl cache info|clear``: the tuner's result cache (``ccl.compiler.cache``)."""

from __future__ import annotations

import argparse
from typing import Any

from ..compiler import cache
from .common import Parser, command, emit


def cmd_info(args: argparse.Namespace) -> int:
    folder = cache.cache_dir()
    files = cache.entries()
    size = sum(p.stat().st_size for p in files)
    data = {"folder": None if folder is None else str(folder), "enabled": folder is not None,
            "entries": len(files), "bytes": size}
    if folder is None:
        text = "the result cache is off (CCL_CACHE_DIR=off)"
    else:
        text = (f"result cache: {folder}\n  {len(files)} schedule set{'s' if len(files) != 1 else ''}, "
                f"{size / 2**20:.1f} MiB (ccl cache clear removes them; CCL_CACHE_DIR moves the folder)")
    emit(args, data, text)
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    n, size = cache.clear()
    folder = cache.cache_dir()
    emit(args, {"removed": n, "bytes": size, "folder": None if folder is None else str(folder)},
         f"removed {n} cached schedule set{'s' if n != 1 else ''} ({size / 2**20:.1f} MiB)"
         + ("" if folder is None else f" from {folder}"))
    return 0


def register(sub: Any) -> None:
    group = sub.add_parser("cache", help="show or clear the tuner's result cache",
                           description="the tuner's result cache: answers of `ccl synthesize` (auto) kept by "
                                       "their inputs")
    actions = group.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    actions.required = True
    command(actions, "info", "where the cache is and how much it holds", cmd_info)
    command(actions, "clear", "remove every cached answer", cmd_clear)
