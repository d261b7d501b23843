"""Hostile inputs and hostile neighbours: nothing a user's files or another local user can do
runs code, serves a wrong answer, takes memory beyond the limits, prints a traceback or makes
the terminal print what the program did not write.

* The parser's tables are never read from the shared temporary folder; a planted file in the
  cache folder is never loaded unless it is this user's own.
* The result cache serves an entry only for the request it was stored for, never writes through
  a symlink, and ``cache clear`` removes only its own entries.
* Text from inputs (names, labels, file names) is escaped wherever it is printed.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from ccl.cli import main
from ccl.compiler import cache as result_cache
from ccl.compiler import load_topology
from ccl.compiler.tuner import tune
from ccl.core.schedule_set import save_set, set_text

ROOT = Path(__file__).resolve().parents[2]


def child(code: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CCL_")}
    full.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], env=full, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


# ---------------------------------------------------------------------- the parser's tables
class Payload:
    """Unpickling this creates the file it names: the proof that a pickle was loaded."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_the_parser_never_reads_or_writes_the_shared_temp_folder(tmp_path):
    """lark's ``cache=True`` wrote and loaded ``$TMPDIR/.lark_cache_<user>_<hash>_...tmp``:
    the temporary folder must stay as it was (cache on, or off)."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    (shared / "other").write_text("x")
    for cache in (str(tmp_path / "cache"), "off"):
        out = child("from dsl import parser; parser.parse('let x = 1\\n')", {"TMPDIR": str(shared), "CCL_CACHE_DIR": cache})
        assert out.returncode == 0, out.stderr
        assert os.listdir(shared) == ["other"]


@pytest.mark.parametrize("how", ["writable-by-others", "symlink"])
def test_a_planted_parser_cache_file_is_never_loaded(tmp_path, how):
    cache = tmp_path / "cache"
    marker = tmp_path / "ran"
    warm = child("from dsl import parser; parser.lark_parser()", {"CCL_CACHE_DIR": str(cache)})
    assert warm.returncode == 0, warm.stderr
    [table] = list((cache / "parser").iterdir())
    assert oct((cache / "parser").stat().st_mode & 0o777) == "0o700"
    # a planted pickle in lark's cache layout: a hash line, then pickles
    payload = table.read_bytes().split(b"\n", 1)[0] + b"\n" + pickle.dumps(Payload(str(marker)))
    table.unlink()
    if how == "symlink":
        target = tmp_path / "elsewhere.lark"
        target.write_bytes(payload)
        table.symlink_to(target)
    else:
        table.write_bytes(payload)
        table.chmod(0o666)
    out = child("from dsl import parser; parser.parse('let x = 1\\n')", {"CCL_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr
    assert not marker.exists()
    assert not table.is_symlink() and (table.stat().st_mode & 0o022) == 0  # replaced by this user's own
    if how == "symlink":
        assert (tmp_path / "elsewhere.lark").read_bytes() == payload  # never written through


# ---------------------------------------------------------------------- the result cache
@pytest.fixture
def cached(tmp_path, monkeypatch):
    """A result cache holding ring:4 allreduce, and sets of other requests to plant."""
    monkeypatch.setenv("CCL_CACHE_DIR", str(tmp_path / "cache"))
    ring4 = load_topology("ring:4")
    ask = dict(sizes="1KiB,1MiB", solvers=["ring", "direct"])
    first = tune(ring4, "allreduce", **ask)
    assert not first.cached
    [entry] = result_cache.entries()
    others = {
        "allgather": tune(ring4, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"], cache=False),
        "fully-connected": tune(load_topology("fully-connected:4"), "allreduce", **ask, cache=False),
    }
    return ring4, ask, entry, others


@pytest.mark.parametrize("planted", ["allgather", "fully-connected"])
@pytest.mark.parametrize("layout", ["bare-set", "entry-for-the-key"])
def test_a_set_planted_under_a_key_is_not_served(cached, planted, layout, capsys):
    ring4, ask, entry, others = cached
    sset = others[planted].schedule_set
    if layout == "bare-set":
        save_set(sset, entry)
    else:  # the entry's key and request kept, the set swapped
        data = json.loads(entry.read_text())
        data["set"] = json.loads(set_text(sset))
        entry.write_text(json.dumps(data))
    again = tune(ring4, "allreduce", **ask)
    assert not again.cached
    assert again.schedule_set.collective.kind == "allreduce" and again.schedule_set.topology == ring4
    # the API and the command line answer the same: the request's own schedules
    import ccl

    assert ccl.tune("ring:4", "allreduce", **ask).collective.kind == "allreduce"
    assert main(["synthesize", "-t", "ring:4", "-c", "allreduce", "--sizes", "1KiB,1MiB", "--solvers", "ring,direct",
                 "--json", "-o", str(entry.parent.parent / "out.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cached"] is True  # the recomputed entry replaced the planted one
    saved = json.loads((entry.parent.parent / "out.json").read_text())
    assert saved["collective"]["kind"] == "allreduce" and saved["topology"]["name"] == ring4.name


def test_an_entry_for_another_request_is_a_miss(cached):
    ring4, ask, entry, _ = cached
    data = json.loads(entry.read_text())
    data["request"]["asked"]["sizes"] = ["1KiB"]
    entry.write_text(json.dumps(data))
    assert not tune(ring4, "allreduce", **ask).cached


def test_a_symlink_at_an_entry_is_replaced_not_written_through(cached):
    ring4, ask, entry, _ = cached
    victim = entry.parent.parent / "victim.txt"
    victim.write_text("keep me")
    entry.unlink()
    entry.symlink_to(victim)
    assert not tune(ring4, "allreduce", **ask).cached
    assert victim.read_text() == "keep me"
    assert not entry.is_symlink() and json.loads(entry.read_text())["format"] == "ccl-cache-entry"
    assert tune(ring4, "allreduce", **ask).cached


def test_a_sets_folder_that_is_a_symlink_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("CCL_CACHE_DIR", str(tmp_path / "cache"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "sets").symlink_to(elsewhere)
    ring4 = load_topology("ring:4")
    tune(ring4, "allgather", sizes="1KiB", solvers=["ring"])
    assert list(elsewhere.iterdir()) == [] and not tune(ring4, "allgather", sizes="1KiB", solvers=["ring"]).cached


def test_cache_clear_removes_only_its_own_entries(cached, capsys):
    _, _, entry, _ = cached
    folder = entry.parent
    keep = {
        "mine.json": '{"format": "ccl-cache-entry"}',  # the format, not the name
        "0" * 64 + ".json": '{"format": "ccl-algorithm"}',  # the name, not the format
        "notes.txt": "notes",
    }
    for name, text in keep.items():
        (folder / name).write_text(text)
    outside = folder.parent / "outside.json"
    outside.write_text("{}")
    linked = folder / ("1" * 64 + ".json")
    linked.symlink_to(outside)  # a symlink is no entry: neither it nor its target goes
    assert main(["cache", "clear", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 1
    assert not entry.exists()
    assert all((folder / name).read_text() == text for name, text in keep.items())
    assert linked.is_symlink() and outside.read_text() == "{}"
