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

import pytest

import ccl
from ccl.cli import main
from ccl.compiler import cache as result_cache
from ccl.compiler import load_topology
from ccl.compiler.tuner import tune
from ccl.core.collective import builtin
from ccl.core.schedule_set import save_set, set_text

from .hostile import child, one_line


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



# ---------------------------------------------------------------------- text from inputs, printed
EVIL = "evil\nFAKE line\x1b[31m\u202e\r"  # a fake line, an escape sequence, a bidi override, a carriage return
EVIL_FILE = "e\x1b[2Jv\nFAKE.json"


@pytest.fixture(scope="module")
def evil_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("evil")
    cwd = os.getcwd()
    os.chdir(d)
    try:
        assert main(["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "ring", "-q", "-o", "ag.json"]) == 0
        assert main(["synthesize", "-t", "ring:4", "-c", "allgather", "--sizes", "1KiB,1MiB", "--solvers", "ring,direct",
                     "-q", "-o", "set.json"]) == 0
        assert main(["emit", "msccl", "ag.json", "-q", "-o", "ag.xml"]) == 0
    finally:
        os.chdir(cwd)
    alg = json.loads((d / "ag.json").read_text())
    for key, value in (("name", EVIL), ("solver", EVIL)):
        (d / f"alg_{key}.json").write_text(json.dumps(dict(alg, **{key: value})))
    (d / "alg_topology.json").write_text(json.dumps(dict(alg, topology=dict(alg["topology"], name=EVIL))))
    sset = json.loads((d / "set.json").read_text())
    (d / "set_name.json").write_text(json.dumps(dict(sset, name=EVIL)))
    sset["entries"][0]["label"] = EVIL
    (d / "set_label.json").write_text(json.dumps(sset))
    (d / "topo.json").write_text(json.dumps({"format": "ccl-topology", "version": 1,
                                             "topology": dict(alg["topology"], name=EVIL)}))
    xml = (d / "ag.xml").read_text()
    (d / "name.xml").write_text(xml.replace('name="ring-allgather-ring4"', 'name="evil&#10;FAKE line&#9;\u202e"'))
    (d / "d.ccl").write_text('topology t(n = 4) {\n name "evil\\nFAKE line"\n ranks n\n'
                             ' for i in 0..n { i <-> (i + 1) % n : 25 GB/s, 0.7 us }\n}\n'
                             "synthesize allgather on t with ring { chunks 1 }\n")
    (d / EVIL_FILE).write_text((d / "ag.json").read_text())
    return d


EVIL_COMMANDS = [
    ["verify", "alg_name.json"], ["verify", "alg_solver.json"], ["verify", "alg_topology.json"],
    ["verify", "set_name.json"], ["verify", "set_label.json"], ["verify", "name.xml"], ["verify", EVIL_FILE],
    ["verify", "ag.json", EVIL_FILE], ["simulate", "alg_name.json", "--size", "1MiB"],
    ["simulate", "set_label.json", "--size", "1KiB,1MiB"], ["simulate", "name.xml", "--size", "1MiB"],
    ["simulate", EVIL_FILE, "--size", "1MiB"], ["emit", "msccl", "set_label.json", "-o", "out"],
    ["emit", "torch", "alg_name.json", "-o", "o.py"], ["emit", "msccl", EVIL_FILE, "-o", EVIL_FILE + ".xml"],
    ["import", "msccl", "name.xml", "-o", "o.json"], ["topology", "show", "topo.json"],
    ["check", "d.ccl"], ["synthesize", "d.ccl", "-o", "o.json"],
    ["synthesize", "-t", "topo.json", "-c", "allgather", "-s", "ring", "-o", "o.json"],
    ["bounds", "-t", "topo.json", "-c", "allgather", "--size", "1MiB"],
    ["verify", "no\x1b[2Jsuch\nFAKE.json"], ["simulate", "ag.json", "--size", "1MiB", "--bogus\x1b[2J\nFAKE"],
    ["synthesize", "-t", "ring:4", "-c", "all\x1bgather\nFAKE"], ["synthesize", "-t", "\x1b[2Jring:4\nFAKE", "-c", "allgather"],
    ["place", "-t", "ring:4", "--plan", "tp=4", "--comm", "tp=\x1b[2Jallreduce:1MiB"],
    ["synthesize", "-t", "ring:8", "-c", "allgather", "-s", "ring", "--groups", "0-3\n;FAKE\x1b", "--size", "1MiB"],
]


@pytest.mark.parametrize("argv", EVIL_COMMANDS, ids=lambda a: " ".join(a)[:60].encode("unicode_escape").decode())
def test_text_from_inputs_is_escaped_wherever_it_is_printed(argv, evil_files, capsys, monkeypatch):
    """No escape sequence, control character or line of its own reaches the terminal from a
    file's names, labels, name or an argument: refused with one escaped line (names), or printed
    escaped (file names)."""
    monkeypatch.chdir(evil_files)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    for line in (out + err).split("\n"):
        assert line.isprintable() and not line.startswith("FAKE"), (argv, line)
    assert code in (0, 2), (code, err)
    lines = err.strip().splitlines()
    if code == 2 and len(lines) == 3 and lines[2].strip().startswith("^"):  # a description's error: line and caret
        lines = lines[:1]
    if code == 2:
        one_line("\n".join(lines))


# ---------------------------------------------------------------------- the Python API and huge numbers
HUGE = (10**10000, -(10**10000), 2**64, 10**30)


def _api_calls(alg):
    calls = {}
    for opt in ("chunks", "steps", "rounds", "root", "size", "time_limit"):
        calls[f"problem {opt}"] = lambda v, opt=opt: ccl.problem("ring:4", "allgather", **{opt: v})
    for opt in ("channels", "slices", "local_bandwidth"):
        calls[f"simulate {opt}"] = lambda v, opt=opt: ccl.simulate(alg, 1024, **{opt: v})
    calls["simulate size"] = lambda v: ccl.simulate(alg, v)
    for opt in ("instances", "min_bytes", "max_bytes", "channels"):
        calls[f"to_msccl {opt}"] = lambda v, opt=opt: ccl.to_msccl(alg, **{opt: v})
    for opt in ("chunks", "time_budget", "channels", "root"):
        calls[f"tune {opt}"] = lambda v, opt=opt: ccl.tune("ring:4", "allgather", cache=False, **{opt: v})
    calls["tune sizes"] = lambda v: ccl.tune("ring:4", "allgather", cache=False, sizes=[v])
    calls["lower channels"] = lambda v: ccl.lower(alg, channels=v)
    calls["chunk_up"] = lambda v: alg.collective.chunk_up(v)
    calls["builtin ranks"] = lambda v: builtin("allgather", v)
    calls["Request chunks"] = lambda v: ccl.Problem(alg.topology, alg.collective, ccl.Request(chunks=v))
    return calls


def test_the_api_refuses_huge_numbers_with_a_project_error():
    alg = ccl.synthesize(ccl.problem("ring:4", "allgather", solver="ring")).algorithm
    failures = []
    for name, call in _api_calls(alg).items():
        for value in HUGE:
            try:
                call(value)
            except ccl.CclError as exc:
                assert exc.render().isprintable() and len(exc.render()) < 400, (name, exc.render())
            except Exception as exc:  # noqa: BLE001 - what the test is about
                failures.append(f"{name}={'-' if value < 0 else ''}10^{len(str(abs(value))) if abs(value) < 10**4000 else 'big'}"
                                f": {type(exc).__name__}: {str(exc)[:80]}")
    assert not failures, failures

