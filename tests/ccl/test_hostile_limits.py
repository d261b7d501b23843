"""Hostile inputs against the limits: every count an input controls is checked before memory
is spent (MSCCL XML sizes, group specs, lanes, set entries, the exact solver's model and memory),
malformed probe files and plans are bad input in one line, and Ctrl-C never prints a traceback
and keeps what a comparison finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccl.cli import main
from ccl.compiler import load_topology
from ccl.compiler.group_bound import recognize
from ccl.compiler.tuner import tune
from ccl.core.algorithm import Algorithm
from ccl.core.collective import Collective, builtin
from ccl.core.groups import parse_groups, union
from ccl.core.schedule_set import set_text
from ccl.core.serialize import topology_to_json

from .hostile import one_line, run_capped


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


def _never_signals(text: str) -> str:
    """The file with a nop after gpu 0's copy that waits for a step of another threadblock of
    gpu 0 whose hasdep is 0 (found in the file, whatever the export's layout)."""
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if 'type="cpy"' in line)
    own = next(line for line in reversed(lines[:at]) if "<tb " in line).split('id="')[1].split('"')[0]
    tb = None
    for line in lines[:next(i for i, line in enumerate(lines) if "</gpu>" in line)]:
        if "<tb " in line:
            tb = line.split('id="')[1].split('"')[0]
        elif tb != own and 'hasdep="0"' in line:
            step = line.split('s="')[1].split('"')[0]
            return _with_steps(text, [NOP.replace('depid="-1" deps="-1"', f'depid="{tb}" deps="{step}"')])
    raise AssertionError("no step with hasdep=0 on gpu 0 outside the copy's threadblock")


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
        "never_signals": _never_signals(text),
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
    "never_signals": (["verify", "never_signals.xml"], 4, ["gpu 0 tb", "step 1", "hasdep=0", "never signals"]),
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
    """The ``ccl`` command as installed (the console script runs ``ccl.entry:main``)."""
    import shutil

    script = shutil.which("ccl", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-c", "import sys; from ccl.entry import main; sys.exit(main())"]


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


