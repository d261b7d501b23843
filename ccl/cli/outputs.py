"""No lost files: the one guard every command that writes runs before it works.

A command names the options that hold the files it reads and writes (``declare``); before the
command runs, ``check_args`` refuses (InputError, exit 2, nothing written) when

* an output is one of the command's inputs (``-o in.json`` beside ``in.json``), or two outputs
  are one file (``--trace t.json --plot t.json``), after normalizing names: ``./a.json``,
  ``a.json``, an absolute path, a symlink to it and a hard link to it are all the same file;
* an output file is not a regular file or a new name in an existing folder: a folder where a
  file is wanted, a device (``/dev/full``, ``/dev/null``), a pipe or a socket;
* an output folder names something that is not a folder.

Outputs known only once the command has read its inputs (one file per request or per size
range in a folder, ``--save-dir`` schedules) are checked with ``guard`` before the first is
written, against the inputs and against each other (two requests named ``a/b`` and ``a_b``
both mapping to ``a_b.json``), and then written all or none (``ccl.core.files.write_all``).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.errors import InputError
from ..core.files import check_target, identity, kind

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Spec:
    """Which options of a command name files: (option dest, label shown) pairs."""

    inputs: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    folders: tuple[tuple[str, str], ...] = ()
    either: tuple[tuple[str, str], ...] = ()  # a file, or an existing folder (the command tells which)


def declare(parser: argparse.ArgumentParser, *, inputs: Iterable[str] = (), files: Iterable[str] = (),
            folders: Iterable[str] = (), either: Iterable[str] = ()) -> None:
    """Record which option dests of ``parser`` hold inputs (files read; a topology spec counts
    when it names a file), output files, output folders, and outputs that are a file or an
    existing folder; ``check_args`` checks them before the command runs."""
    labels = {a.dest: (a.option_strings[0] if a.option_strings else a.dest) for a in parser._actions}
    for dest in (*inputs, *files, *folders, *either):
        if dest not in labels:
            raise ValueError(f"{parser.prog} has no option {dest!r}")  # pragma: no cover - a wiring bug

    def pairs(dests: Iterable[str]) -> tuple[tuple[str, str], ...]:
        return tuple((d, labels[d]) for d in dests)

    parser.set_defaults(_outputs=Spec(pairs(inputs), pairs(files), pairs(folders), pairs(either)))


def spec_of(args: argparse.Namespace) -> Spec | None:
    return getattr(args, "_outputs", None)


def input_paths(value: Any) -> list[str]:
    """The files an input option's value reads: a path, a list of them, or a topology spec
    (``FILE.ccl:NAME:ARGS`` reads FILE.ccl; ``ring:8`` reads no file)."""
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in input_paths(v)]
    text = os.fspath(value)
    match = re.search(r"\.ccl(?=:|$)", text)
    if match is not None:
        return [text[: match.end()]]
    if os.path.exists(text) or os.path.islink(text) or text.endswith(".json") or os.sep in text:
        return [text]
    return []


def inputs_of(args: argparse.Namespace) -> list[str]:
    """Every file the command's declared input options read."""
    spec = spec_of(args)
    return [] if spec is None else [p for dest, _ in spec.inputs for p in input_paths(getattr(args, dest, None))]


def check_args(args: argparse.Namespace) -> None:
    """The guard for a command's declared options (nothing when it declares none)."""
    spec = spec_of(args)
    if spec is None:
        return
    files = [(label, getattr(args, dest, None)) for dest, label in spec.files]
    folders = [(label, getattr(args, dest, None)) for dest, label in spec.folders]
    for dest, label in spec.either:
        value = getattr(args, dest, None)
        (folders if value and kind(value) == "folder" else files).append((label, value))
    guard(inputs_of(args), files=files, folders=folders)


def guard(inputs: Iterable[PathLike | None], files: Iterable[tuple[str, PathLike | None]] = (),
          folders: Iterable[tuple[str, PathLike | None]] = (), *, new_folders: bool = False,
          hint: str = "give another name") -> None:
    """Refuse (InputError) output ``files`` and ``folders`` ((label, path) pairs; None skipped)
    that are not a regular file or a folder, are one of the ``inputs`` or coincide with each
    other. ``new_folders``: the files' folders may not exist yet (the command creates them);
    ``hint`` ends the message of an output that is an input."""
    outs: list[tuple[str, str]] = []
    for label, path in files:
        if path is None or path == "":
            continue
        path = os.fspath(path)
        shown = f"{label} {path!r}"
        if not (new_folders and not os.path.isdir(os.path.dirname(os.path.abspath(path)))):  # else made later
            folder = os.path.dirname(check_target(path, shown)) or "."
            if not os.access(folder, os.W_OK | os.X_OK):
                raise InputError(f"{shown}: cannot write into folder {folder!r} (permission denied)")
        outs.append((label, path))
    for label, path in folders:
        if path is None or path == "":
            continue
        path = os.fspath(path)
        if "\0" in path:
            raise InputError(f"{label} {path!r}: a folder name cannot hold a NUL character")
        what = kind(path)
        if what not in (None, "folder"):
            raise InputError(f"{label} {path!r} is a {what}, not a folder: give a folder (it is created when "
                             "missing)")
        outs.append((label, path))
    read = [(os.fspath(p), identity(p)) for p in inputs if p is not None and p != ""]
    seen: dict[tuple[Any, ...], tuple[str, str]] = {}
    for label, path in outs:
        key = identity(path)
        for source, source_key in read:
            if key == source_key:
                same = ("is the input file" if os.path.abspath(path) == os.path.abspath(source)
                        else "is the same file as the input")
                raise InputError(f"{label} {path!r} {same} {source!r}: writing it would overwrite the input; "
                                 f"{hint}")
        if key in seen:
            other_label, other = seen[key]
            alias = "" if os.path.abspath(path) == os.path.abspath(other) else f" (the same file as {other!r})"
            raise InputError(f"{other_label} and {label} both write {path!r}{alias}: one would overwrite the "
                             "other; give them different names")
        seen[key] = (label, path)


def make_folder(label: str, path: PathLike) -> None:
    """Create an output folder (and its parents) when missing; errors as InputError."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise InputError(f"{label} {os.fspath(path)!r} is a {kind(path) or 'file'}, not a folder") from None
    except OSError as exc:
        raise InputError(f"{label} {os.fspath(path)!r}: cannot create the folder ({exc.strerror or exc})") from None
