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

import ccl
from ccl.cli import main
from ccl.compiler import cache as result_cache
from ccl.compiler import load_topology
from ccl.compiler.group_bound import recognize
from ccl.compiler.tuner import tune
from ccl.core.algorithm import Algorithm
from ccl.core.collective import Collective, builtin
from ccl.core.groups import parse_groups, union
from ccl.core.schedule_set import save_set, set_text
from ccl.core.serialize import topology_to_json

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


# ---------------------------------------------------------------------- capped runs of the CLI
CAP = 2 << 30  # bytes of address space for the child: a regression that allocates by a hostile count dies there

DRIVER = r"""
import contextlib, io, json, os, sys, time
from ccl.cli import main
results = []
for argv, env in json.load(sys.stdin):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except BaseException as exc:
            rc, err = repr(exc), io.StringIO(repr(exc))
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    results.append([rc, out.getvalue(), err.getvalue(), time.monotonic() - start])
print(json.dumps(results))
"""


def run_capped(cases: list[tuple[list[str], dict[str, str]]], cwd: Path, cap: int = CAP) -> list[tuple]:
    """``ccl.cli.main(argv)`` for every case in one child under the memory cap: (exit code,
    stdout, stderr, seconds) each."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {k: v for k, v in os.environ.items() if not k.startswith("CCL_MAX_")}
    env.update(CCL_QUIET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(cases), capture_output=True, text=True,
                          cwd=cwd, env=env, preexec_fn=limit, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [tuple(x) for x in json.loads(proc.stdout)]


def one_line(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ccl"), err
    assert "Traceback" not in err and "internal error" not in err
    for word in words:
        assert word in lines[0], (word, lines[0])


# ---------------------------------------------------------------------- MSCCL XML: counts and sizes
def _xml_allgather(path: Path) -> str:
    assert main(["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "ring", "-q", "-o", str(path.with_suffix(".json"))]) == 0
    assert main(["emit", "msccl", str(path.with_suffix(".json")), "-q", "-o", str(path)]) == 0
    return path.read_text()


def _with_steps(text: str, steps: list[str]) -> str:
    """The file with ``steps`` (step elements without their index) added after gpu 0 tb 0's
    first step."""
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if 'type="cpy"' in line) + 1
    new = [f'      <step s="{k}" {body}/>' for k, body in enumerate(steps, start=1)]
    return "\n".join(lines[:at] + new + lines[at:])


NOP = 'type="nop" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="0" depid="-1" deps="-1" hasdep="0"'


@pytest.fixture(scope="module")
def xml_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("xml")
    text = _xml_allgather(d / "ag.xml")
    files = {
        "s_chunks_1e8": text.replace('s_chunks="0"', 's_chunks="100000000"', 1),
        "s_chunks_1e12": text.replace('s_chunks="0"', 's_chunks="1000000000000"', 1),
        "s_chunks_total": text.replace('s_chunks="0"', 's_chunks="5000000"'),  # each gpu within, together over
        "s_chunks_digits": text.replace('s_chunks="0"', 's_chunks="' + "9" * 5000 + '"', 1),
        "ngpus": text.replace('ngpus="4"', 'ngpus="1000000000000"', 1),
        "nchannels": text.replace('nchannels="1"', 'nchannels="1000000000"', 1),
        "nops_10000": _with_steps(text, [NOP] * 10_000),
        "nops_30000": _with_steps(text, [NOP] * 30_000),
        "never_signals": _with_steps(text, [NOP.replace('depid="-1" deps="-1"', 'depid="1" deps="0"')]),
    }
    # a file whose steps alone would take more memory than the child has: refused before parsing
    files["steps_300000"] = _with_steps(text, [NOP] * 300_000)
    for name, body in files.items():
        (d / f"{name}.xml").write_text(body)
    return d


XML_CASES = {
    # name: (argv, exit code, words of the one line; None: exit 0)
    "s_chunks_1e8": (["verify", "s_chunks_1e8.xml"], 2, ["s_chunks", "100000000", "CCL_MAX_SLOTS"]),
    "s_chunks_1e12": (["verify", "s_chunks_1e12.xml"], 2, ["s_chunks", "CCL_MAX_SLOTS"]),
    "s_chunks_total": (["verify", "s_chunks_total.xml"], 2, ["together", "CCL_MAX_SLOTS"]),
    "s_chunks_digits": (["simulate", "s_chunks_digits.xml", "--size", "1MiB"], 2, ["s_chunks", "at most 20"]),
    "ngpus": (["verify", "ngpus.xml"], 2, ["ngpus", "CCL_MAX_RANKS"]),
    "nchannels": (["verify", "nchannels.xml"], 2, ["nchannels", "CCL_MAX_CHANNELS"]),
    "nops_10000": (["verify", "nops_10000.xml"], 0, None),
    "nops_30000": (["simulate", "nops_30000.xml", "--size", "1MiB"], 0, None),
    "steps_300000": (["verify", "steps_300000.xml"], 2, ["300020 steps", "too large to read in memory"]),
    "never_signals": (["verify", "never_signals.xml"], 4, ["gpu 0 tb 0 step 1", "hasdep=0", "never signals"]),
    "never_signals_run": (["simulate", "never_signals.xml", "--size", "1MiB"], 4, ["never signals"]),
}


@pytest.fixture(scope="module")
def xml_results(xml_files):
    names = list(XML_CASES)
    return dict(zip(names, run_capped([(XML_CASES[n][0], {}) for n in names], xml_files)))


@pytest.mark.parametrize("name", list(XML_CASES))
def test_msccl_xml_counts_are_checked_before_memory_is_spent(name, xml_results):
    _, code, words = XML_CASES[name]
    rc, out, err, seconds = xml_results[name]
    assert rc == code, (name, rc, err)
    if words is None:
        assert out.strip() and not err.strip()
        assert seconds < 60  # linear in the steps: no quadratic dependency sets
    else:
        one_line(err, *words)


# ---------------------------------------------------------------------- groups
@pytest.mark.parametrize("spec,words", [
    ("0-1000000000", ["rank 1000000000", "0..7"]),
    ("0-" + "9" * 40, ["not a rank or a range"]),
    ("0-5;3-7", ["a rank is in two groups"]),
    ("0-3;" * 100_000 + "4-7", ["a rank is in two groups"]),
    ("stride:" + "9" * 40, ["not a rank or a range"]),
])
def test_group_specs_are_counted_before_they_are_expanded(spec, words, tmp_path):
    [(rc, _, err, seconds)] = run_capped([(["synthesize", "-t", "ring:8", "-c", "allgather", "-s", "ring", "--groups", spec,
                                            "--size", "1MiB", "-o", "x.json"], {})], tmp_path, cap=1 << 30)
    assert rc == 2 and seconds < 10
    one_line(err, *words)


@pytest.mark.parametrize("topology,kind,spec,solver,extra", [
    ("dgx-h100:2", "allreduce", "dp", "ring", []),
    ("ring:8", "allgather", "0-3;4-7", "ring", []),
    ("dgx1", "broadcast", "3,1,2,0;4-7", "binomial-tree", ["--root", "1"]),
    ("dgx1", "gather", "3,1,2,0;4-7", "direct", ["--root", "2"]),
    ("dgx-h100:2", "alltoall", "tp", "direct", []),
])
def test_simulate_scores_a_groups_schedule_against_the_bound_synthesize_used(tmp_path, capsys, topology, kind, spec,
                                                                            solver, extra):
    out = tmp_path / "g.json"
    assert main(["synthesize", "-t", topology, "-c", kind, "-s", solver, "--groups", spec, "--size", "1MiB", *extra,
                 "-o", str(out), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert main(["simulate", str(out), "--size", "1MiB", "--json"]) == 0
    timed = json.loads(capsys.readouterr().out)
    report = timed.get("report", timed)
    assert report["bound_us"] == pytest.approx(made["bound_us"], abs=1e-3)  # the synthesize report rounds to 3 places
    assert report["time_us"] == pytest.approx(made["together_us"], abs=1e-3)
    assert "group(s) of " + kind in report["bound_method"]


def test_only_collectives_made_of_groups_are_read_as_groups():
    """A custom collective is read as groups only when every set of ranks sharing chunks is
    exactly a built-in collective, all of one kind; its name is never trusted on its own."""
    ring8 = load_topology("ring:8")
    one_way = Collective("x-groups-0-3;4-7", "custom", 8, ((0,),) + ((),) * 7,
                         ((),) * 2 + ((frozenset({0}),),) + ((),) * 5, ((),) * 2 + ((None,),) + ((),) * 5)
    assert recognize(one_way, ring8) is None  # rank 0's chunk to rank 2 only: no built-in collective
    groups = parse_groups("0-3;4-7", ring8)
    parts = [Algorithm("a", builtin("allgather", 4), load_topology("ring:4"), (), None, "x"),
             Algorithm("b", builtin("reducescatter", 4), load_topology("ring:4"), (), None, "x")]
    assert recognize(union(ring8, groups, parts).collective, ring8) is None  # two kinds
    same = union(ring8, groups, [parts[0], parts[0]], name="renamed")
    found = recognize(same.collective, ring8)
    assert found is not None and found.kind == "allgather" and found.groups.members == ((0, 1, 2, 3), (4, 5, 6, 7))


# ---------------------------------------------------------------------- topologies, sets, exact solver
@pytest.fixture(scope="module")
def big_counts(tmp_path_factory):
    d = tmp_path_factory.mktemp("counts")
    topo = {"format": "ccl-topology", "version": 1, "topology": topology_to_json(load_topology("ring:4"))}
    topo["topology"]["links"][0][4] = 10**9
    (d / "lanes.json").write_text(json.dumps(topo))
    sset = tune(load_topology("ring:4"), "allgather", sizes="1KiB,1MiB", solvers=["ring"], cache=False).schedule_set
    data = json.loads(set_text(sset))
    entry = data["entries"][0]
    data["entries"] = [dict(json.loads(json.dumps(entry)), min_bytes=k, max_bytes=None if k == 20_000 else k + 1)
                       for k in range(20_001)]
    (d / "set20001.json").write_text(json.dumps(data))
    return d


COUNT_CASES = {
    "lanes-synthesize": (["synthesize", "-t", "lanes.json", "-c", "allgather", "-s", "milp", "-o", "x.json"], {}, 2,
                         ["1000000000 lanes", "CCL_MAX_LANES"]),
    "lanes-smt": (["synthesize", "-t", "lanes.json", "-c", "allgather", "-s", "smt", "-o", "x.json"], {}, 2,
                  ["CCL_MAX_LANES"]),
    "set-emit": (["emit", "msccl", "set20001.json", "-o", "out"], {}, 2, ["20001 entries", "CCL_MAX_SET_ENTRIES"]),
    "set-verify": (["verify", "set20001.json"], {}, 2, ["20001 entries", "CCL_MAX_SET_ENTRIES"]),
    "smt-memory": (["synthesize", "-t", "ndv2:2", "-c", "alltoall", "-s", "smt", "-o", "x.json"],
                   {"CCL_MAX_SMT_MEMORY": "300"}, 2, ["300 MiB", "CCL_MAX_SMT_MEMORY"]),
    "smt-model": (["synthesize", "-t", "ndv2:2", "-c", "alltoall", "-s", "smt", "-o", "x.json"],
                  {"CCL_MAX_SMT_VARS": "1000"}, 2, ["exact model", "CCL_MAX_SMT_VARS"]),
}


@pytest.fixture(scope="module")
def count_results(big_counts):
    names = list(COUNT_CASES)
    return dict(zip(names, run_capped([(COUNT_CASES[n][0], COUNT_CASES[n][1]) for n in names], big_counts)))


@pytest.mark.parametrize("name", list(COUNT_CASES))
def test_counts_beyond_the_limits_are_refused_before_the_work(name, count_results, big_counts):
    _, _, code, words = COUNT_CASES[name]
    rc, _, err, seconds = count_results[name]
    assert rc == code, (name, rc, err)
    one_line(err, *words)
    assert seconds < 90
    assert not (big_counts / "out").exists() and not (big_counts / "x.json").exists()


# ---------------------------------------------------------------------- probe files and names
def probe_data(n: int = 4) -> dict:
    """Measurements as ``measure`` writes them: every pair at 10 us + bytes / 5 GB/s."""
    sizes = [4096, 262144, 4194304]
    pairs = {f"{a},{b}": {str(s): 10.0 + s / 5e3 for s in sizes} for a in range(n) for b in range(a + 1, n)}
    fan = {str(r): 10.0 + (n - 1) * sizes[-1] / 15e3 for r in range(n)}
    return {"format": "ccl-probe", "n_ranks": n, "sizes": sizes, "repeat": 5, "backend": "gloo", "pairs": pairs,
            "fan_out": fan, "fan_in": dict(fan), "hosts": ["a"] * n,
            "concurrent": [{"first": [0, 1], "second": [2, 3], "first_us": 850.0, "second_us": 850.0}]}


def _set(path: tuple, value):
    def change(d: dict) -> None:
        node = d
        for k in path[:-1]:
            node = node[k]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return change


MALFORMED_PROBES = {
    "no n_ranks": _set(("n_ranks",), KeyError),
    "n_ranks text": _set(("n_ranks",), "4"),
    "n_ranks true": _set(("n_ranks",), True),
    "n_ranks 1": _set(("n_ranks",), 1),
    "n_ranks huge": _set(("n_ranks",), 10**9),
    "n_ranks float": _set(("n_ranks",), 4.5),
    "no sizes": _set(("sizes",), KeyError),
    "sizes empty": _set(("sizes",), []),
    "sizes text": _set(("sizes",), ["4KiB"]),
    "sizes zero": _set(("sizes",), [0, 4096]),
    "no pairs": _set(("pairs",), KeyError),
    "pairs list": _set(("pairs",), [[0, 1]]),
    "pair missing": _set(("pairs", "1,2"), KeyError),
    "pair empty": _set(("pairs", "0,1"), {}),
    "pair list": _set(("pairs", "0,1"), [1, 2]),
    "time zero": _set(("pairs", "0,1", "4096"), 0),
    "time negative": _set(("pairs", "0,1", "4096"), -3.0),
    "time text": _set(("pairs", "0,1", "4096"), "fast"),
    "time null": _set(("pairs", "0,1", "4096"), None),
    "time nan": _set(("pairs", "0,1", "4096"), float("nan")),
    "time inf": _set(("pairs", "0,1", "4096"), float("inf")),
    "size key text": _set(("pairs", "0,1", "abc"), 5.0),
    "size key zero": _set(("pairs", "0,1", "0"), 5.0),
    "fan rank out of range": _set(("fan_out", "9"), 100.0),
    "fan rank text": _set(("fan_out", "x"), 100.0),
    "fan time zero": _set(("fan_in", "0"), 0),
    "fan list": _set(("fan_out",), [1, 2]),
    "concurrent not list": _set(("concurrent",), {"first": [0, 1]}),
    "concurrent row text": _set(("concurrent", 0), "x"),
    "concurrent rank out of range": _set(("concurrent", 0, "first"), [0, 7]),
    "concurrent same rank": _set(("concurrent", 0, "second"), [2, 2]),
    "concurrent one rank": _set(("concurrent", 0, "first"), [0]),
    "concurrent time text": _set(("concurrent", 0, "first_us"), "slow"),
    "concurrent time negative": _set(("concurrent", 0, "second_us"), -1),
    "hosts short": _set(("hosts",), ["a"]),
    "hosts numbers": _set(("hosts",), [1, 2, 3, 4]),
    "format": _set(("format",), "other"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_PROBES))
def test_malformed_probe_files_are_bad_input(case, tmp_path, capsys):
    data = probe_data()
    MALFORMED_PROBES[case](data)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "x.ccl"
    assert main(["probe", "--from", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    one_line(err, "probe measurement")
    assert not out.exists()


@pytest.mark.parametrize("name", ["probed", "p_2", "for", "ranks"])
def test_probe_writes_a_file_check_reads_with_the_name_given(name, tmp_path, capsys):
    path, out = tmp_path / "m.json", tmp_path / "p.ccl"
    path.write_text(json.dumps(probe_data()))
    assert main(["probe", "--from", str(path), "--name", name, "-o", str(out)]) == 0
    assert main(["check", str(out)]) == 0
    assert main(["synthesize", "-t", f"{out}:{name}", "-c", "allgather", "-s", "ring", "-o", str(tmp_path / "a.json"),
                 "-q"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("name", ["a b", "x\n  ranks 99", "1st", "", "a\x1b[2J", "true", "a-b", "a{b}", "x" * 200])
def test_probe_refuses_a_name_a_description_cannot_use(name, tmp_path, capsys):
    path, out = tmp_path / "m.json", tmp_path / "p.ccl"
    path.write_text(json.dumps(probe_data()))
    assert main(["probe", "--from", str(path), "--name", name, "-o", str(out)]) == 2
    one_line(capsys.readouterr().err, "--name")
    assert not out.exists()


def test_a_poor_fit_is_marked_and_warned_about(tmp_path, capsys):
    data = probe_data()
    data["fan_out"]["2"] = 5e6  # one measurement the model cannot explain (a busy machine)
    path, out = tmp_path / "m.json", tmp_path / "p.ccl"
    path.write_text(json.dumps(data))
    assert main(["probe", "--from", str(path), "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    fit = json.loads(captured.out)["fit"]
    assert fit["poor"] is True and fit["max_error"] > 0.9 and "explains the measurements poorly" in fit["warning"]
    assert captured.err.startswith("ccl: warning: the fitted topology explains the measurements poorly")
    assert "# WARNING: the fitted topology" in out.read_text()
    path.write_text(json.dumps(probe_data()))
    assert main(["probe", "--from", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["fit"]["poor"] is False and not captured.err.strip()


def test_text_of_a_probe_file_cannot_inject_lines(tmp_path, capsys):
    data = probe_data()
    data["backend"] = "gloo)\ntopology evil {\n ranks 1\n}\n# ("
    data["repeat"] = "\x1b[2J5"
    path, out = tmp_path / "m.json", tmp_path / "p.ccl"
    path.write_text(json.dumps(data))
    assert main(["probe", "--from", str(path), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and not any(line.startswith("topology evil") for line in printed.splitlines())
    text = out.read_text()
    assert "\x1b" not in text and not any(line.startswith("topology evil") for line in text.splitlines())
    assert main(["check", str(out), "--json"]) == 0
    assert "evil" not in json.dumps(json.loads(capsys.readouterr().out).get("topologies", ""))


# ---------------------------------------------------------------------- place
@pytest.mark.parametrize("argv,words", [
    (["--plan", "tp=1,dp=1,pp=1,ep=16", "--comm", "tp=allreduce:1MiB"], ["nothing crosses ranks", "tp"]),
    (["--plan", "tp=1,dp=1,pp=1,ep=16", "--layers", "2", "--hidden", "128", "--tokens", "64"],
     ["no communication given"]),
    (["--plan", "tp=8,dp=2", "--model", "7B", "-s", "nosuch"], ["no solver named 'nosuch'"]),
    (["--plan", "tp=8,dp=2", "--model", "7B", "-s", "\x1b[2J"], ["no solver named", "\\x1b[2J"]),
])
def test_place_refuses_plans_it_cannot_rank(argv, words, capsys):
    assert main(["place", "-t", "dgx-h100:2", *argv]) == 2
    one_line(capsys.readouterr().err, *words)


def test_place_ranks_an_axis_the_solver_cannot_do_with_a_template_that_can(capsys):
    assert main(["place", "-t", "dgx-h100:2", "--plan", "tp=1,dp=1,pp=1,ep=16", "--comm", "ep=alltoall:1MiB",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {c["solver"] for p in data["placements"] for c in p["axes"]} == {"direct"}  # packing does no alltoall


# ---------------------------------------------------------------------- Ctrl-C
def _entry() -> list[str]:
    """The ``ccl`` command as installed (the console script runs ``ccl_main:main``)."""
    import shutil

    script = shutil.which("ccl", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-c", "import sys; from ccl_main import main; sys.exit(main())"]


@pytest.mark.slow
def test_ctrl_c_while_the_driver_is_imported_ends_with_one_line(tmp_path):
    """From the first instant the program's own code runs: before it, only the interpreter's
    start (a few milliseconds) is out of reach."""
    import signal
    import time

    assert main(["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "ring", "-q", "-o", str(tmp_path / "a.json")]) == 0
    env = {k: v for k, v in os.environ.items() if k != "CCL_DEBUG"}
    for delay in (0.04, 0.06, 0.08, 0.1, 0.13, 0.16, 0.2, 0.3):
        proc = subprocess.Popen([*_entry(), "verify", "a.json"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert b"Traceback" not in err and b"KeyboardInterrupt" not in err, (delay, err[-500:])
        assert proc.returncode in (0, 130), (delay, proc.returncode, err)
        if proc.returncode == 130:
            assert err.decode().strip().splitlines()[-1] == "ccl: interrupted"


@pytest.mark.slow
def test_ctrl_c_on_compare_saves_what_it_finished(tmp_path):
    import signal

    proc = subprocess.Popen([*_entry(), "compare", "-t", "ndv2:2", "-c", "allreduce", "--size", "1KiB,64MiB", "--solvers",
                             "milp", "--time-limit", "120", "--save-dir", "out", "--json"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "CCL_QUIET": "0"})
    assert proc.stderr is not None
    for line in proc.stderr:  # the templates are done once the MILP starts
        if b"with milp" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-800:]
    assert b"Traceback" not in err
    data = json.loads(out)
    assert data["status"] == "interrupted" and data["saved"]
    files = sorted(os.listdir(tmp_path / "out"))
    assert files == sorted(os.path.basename(row["path"]) for row in data["saved"]) and "ring.json" in files
    for name in files:  # each one a whole, verified schedule
        assert main(["verify", str(tmp_path / "out" / name), "-q"]) == 0


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
