"""The tuner (``--solver auto``), schedule sets and the result cache."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

import pytest

from ccl.cli import main
from ccl.compiler import load_topology
from ccl.compiler.msccl import msccl_bytes
from ccl.compiler.tuner import anchors, boundaries, plan, tune
from ccl.core.errors import InputError, VerificationError
from ccl.core.schedule_set import (
    ScheduleSet,
    load_set,
    save_set,
    set_from_json,
    set_text,
    verify_set,
)

SIZES = "1KiB..4MiB"


@pytest.fixture(scope="module")
def ring4_allreduce():
    return tune(load_topology("ring:4"), "allreduce", sizes=SIZES, cache=False)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_anchors_every_16x_from_the_largest():
    sweep = [2**k for k in range(10, 31)]
    assert anchors(sweep) == [2**30, 2**26, 2**22, 2**18, 2**14, 2**10]
    assert anchors([4096]) == [4096]
    assert anchors([1024, 2048]) == [2048, 1024]


def test_boundaries_cover_everything_and_meet_at_midpoints():
    sizes = [1024, 2048, 4096, 8192]
    assert boundaries(sizes, [0, 0, 1, 1]) == [(0, 2896, 0), (2896, None, 1)]
    assert boundaries(sizes, [2, 2, 2, 2]) == [(0, None, 2)]
    runs = boundaries(sizes, [0, 1, 0, 1])
    assert [r[2] for r in runs] == [0, 1, 0, 1]
    assert runs[0][0] == 0 and runs[-1][1] is None
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))


def test_plan_orders_templates_then_size_aware_then_named_search():
    order = plan("allreduce", 8, [1024, 2**20, 2**30])
    names = [n for n, _ in order]
    assert names[0] == "ring" and "packing" in names
    assert names.index("packing") > names.index("blueconnect")
    assert [s for n, s in order if n == "packing"] == [2**30, 2**20, 1024]
    assert names[-1] == "smt" and "milp" not in names  # exact synthesis unnamed on small machines
    assert "smt" not in [n for n, _ in plan("allreduce", 16, [1024])]
    named = plan("allgather", 4, [1024], ["ring", "smt"])
    assert named == [("ring", None), ("smt", None)]
    with pytest.raises(InputError, match="unknown solver"):
        plan("allgather", 4, [1024], ["nosuch"])
    with pytest.raises(InputError, match="implements alltoall"):
        plan("alltoall", 4, [1024], ["ring"])


def test_set_is_verified_covers_every_size_and_picks_the_table_winner(ring4_allreduce):
    from backends.cost.runtime import charges
    from backends.sim import simulate
    from ccl.compiler import program

    sset = ring4_allreduce.schedule_set
    assert isinstance(sset, ScheduleSet) and not ring4_allreduce.cached
    verify_set(sset)
    assert sset.entries[0].min_bytes == 0 and sset.entries[-1].max_bytes is None
    assert len(sset.table) == 13
    for row in sset.table:
        entry = sset.pick(row["size"])
        assert entry.label == row["winner"] and sset.entries[row["entry"]] is entry
        # the table's time is the simulator's time of the schedule serving that size, charged for
        # the runtime the set is for (the MSCCL executor) under the entry's protocol
        assert entry.protocol == row["protocol"]
        again = simulate(program(entry.algorithm, check=False), row["size"],
                         runtime=charges("msccl", entry.protocol, sset.topology)).time_us
        assert again == pytest.approx(row["time_us"], abs=2e-3)
        assert row["bound_ratio"] >= 1 - 1e-9
        # no candidate is faster at that size than the winner
        for cand in sset.candidates:
            if "times_us" in cand:
                i = [r["size"] for r in sset.table].index(row["size"])
                assert cand["times_us"][i] >= row["time_us"] - 1e-3


def test_set_file_round_trip_is_byte_identical(ring4_allreduce, tmp_path):
    sset = ring4_allreduce.schedule_set
    path = tmp_path / "set.json"
    save_set(sset, path)
    again = load_set(path)
    assert set_text(again) == path.read_text()
    assert [e.label for e in again.entries] == [e.label for e in sset.entries]


def test_malformed_sets_are_refused(ring4_allreduce):
    data = json.loads(set_text(ring4_allreduce.schedule_set))
    gap = json.loads(json.dumps(data))
    gap["entries"][0]["min_bytes"] = 5
    with pytest.raises(InputError, match="starts at 5 bytes"):
        set_from_json(gap)
    open_end = json.loads(json.dumps(data))
    open_end["entries"][-1]["max_bytes"] = 1 << 40
    with pytest.raises(InputError, match="no upper limit"):
        set_from_json(open_end)
    broken = json.loads(json.dumps(data))
    broken["entries"][-1]["algorithm"]["transfers"].pop()
    with pytest.raises(VerificationError, match=r"entry \d+"):
        verify_set(set_from_json(broken))


def test_cache_answers_an_identical_request_and_misses_a_different_one(tmp_path, monkeypatch):
    monkeypatch.setenv("CCL_CACHE_DIR", str(tmp_path / "cache"))
    topo = load_topology("ring:4")
    first = tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"])
    assert not first.cached
    second = tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"])
    assert second.cached and set_text(second.schedule_set) == set_text(first.schedule_set)
    other = tune(topo, "allgather", sizes="1KiB,2MiB", solvers=["ring", "direct"])
    assert not other.cached
    # a damaged cache entry is ignored and recomputed
    for path in (tmp_path / "cache" / "sets").iterdir():
        path.write_text("{not json")
    again = tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"])
    untimed = functools.partial(re.sub, r'"synthesis_seconds":\s*[0-9.e-]+', "")  # a timing, not a result
    assert not again.cached and untimed(set_text(again.schedule_set)) == untimed(set_text(first.schedule_set))
    monkeypatch.setenv("CCL_CACHE_DIR", "off")
    assert not tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"]).cached


def test_budget_skips_optional_solvers_but_keeps_the_templates_and_the_first_optional_one():
    result = tune(load_topology("ring:4"), "allgather", sizes="1KiB,1GiB", time_budget=1e-9, cache=False)
    cands = {c["label"]: c for c in result.schedule_set.candidates}
    assert "error" not in cands["packing@1GiB"]  # the budget counts from the first optional candidate
    assert cands["packing@1KiB"]["error"].startswith("skipped") and cands["smt"]["error"].startswith("skipped")
    assert "times_us" in cands["ring"]


def test_msccl_bytes_are_inclusive_and_per_rank_for_gather():
    assert msccl_bytes("allreduce", 8, 0, 1000) == (0, 999)
    assert msccl_bytes("allreduce", 8, 1000, None) == (1000, 0)
    assert msccl_bytes("gather", 8, 800, 1600) == (100, 199)


def test_cli_synthesize_auto_verify_and_cache(capsys, tmp_path):
    path = tmp_path / "set.json"
    code, out, err = run(capsys, "synthesize", "-t", "ring:4", "-c", "allgather", "--sizes", "1KiB..1MiB",
                         "-o", path)
    assert code == 0, err
    assert "schedules by size" in out or "schedule by size" in out
    assert "vs nccl " in out and "1MiB" in out
    code, out, err = run(capsys, "verify", path)
    assert code == 0 and "every one verified" in out
    code, out, _ = run(capsys, "synthesize", "-t", "ring:4", "-c", "allgather", "--sizes", "1KiB..1MiB",
                       "-o", path, "--json")
    data = json.loads(out)
    assert code == 0 and data["cached"] is True and data["table"][0]["size"] == 1024
    code, out, _ = run(capsys, "verify", path, "--json")
    assert json.loads(out)["entries"][0]["min_bytes"] == 0


@pytest.mark.parametrize(("argv", "needle"), [
    (["--steps", "2"], "--steps applies to one solver"),
    (["--emit", "program"], "--emit program applies to one solver"),
    (["--size", "1MiB", "--sizes", "1KiB..1MiB"], "not both"),
    (["--time-limit", "5"], "--time-budget"),
    (["--sizes", "1KiB..x"], "cannot read size"),
    (["--solvers", "nosuch"], "unknown solver"),
    (["-s", "ring", "--sizes", "1KiB,1MiB"], "--sizes applies to --solver auto"),
])
def test_cli_auto_refuses_what_does_not_apply(capsys, argv, needle):
    code, _, err = run(capsys, "synthesize", "-t", "ring:4", "-c", "allgather", *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_a_set_is_not_one_schedule_where_one_is_needed(capsys, ring4_allreduce, tmp_path):
    from ccl.compiler.loader import load_schedule

    path = tmp_path / "set.json"
    save_set(ring4_allreduce.schedule_set, path)
    with pytest.raises(InputError, match="schedule set"):
        load_schedule(path)


def test_emit_msccl_writes_one_verified_file_per_range(capsys, ring4_allreduce, tmp_path):
    from ccl.compiler.loader import read_xml, verify_imported

    src, out_dir = tmp_path / "set.json", tmp_path / "xml"
    sset = ring4_allreduce.schedule_set
    save_set(sset, src)
    code, out, err = run(capsys, "emit", "msccl", src, "-o", out_dir, "--json")
    assert code == 0, err
    files = json.loads(out)["files"]
    assert len(files) == len(sset.entries) == len(os.listdir(out_dir))
    expect = 0
    for row, entry in zip(files, sset.entries):
        imported = read_xml(row["file"], "ring:4")
        verify_imported(imported)
        assert imported.algo.min_bytes == expect
        top = imported.algo.max_bytes
        assert top == (0 if entry.max_bytes is None else entry.max_bytes - 1)
        expect = top + 1
    code, _, err = run(capsys, "emit", "msccl", src, "-o", src)
    assert code == 2 and "is the input file" in err
    (tmp_path / "other.json").write_text("{}")
    code, _, err = run(capsys, "emit", "msccl", src, "-o", tmp_path / "other.json")
    assert code == 2 and "is a file" in err
    code, _, err = run(capsys, "emit", "msccl", src)
    assert code == 2 and "-o FOLDER" in err


@pytest.mark.slow
def test_emitted_set_script_runs_the_schedule_serving_the_size(capsys, ring4_allreduce, tmp_path):
    pytest.importorskip("torch")
    src, script = tmp_path / "set.json", tmp_path / "prog.py"
    sset = ring4_allreduce.schedule_set
    save_set(sset, src)
    code, _, err = run(capsys, "emit", "torch", src, "-o", script)
    assert code == 0, err
    for entry in (sset.entries[0], sset.entries[-1]):
        size = max(1024, entry.min_bytes)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4",
                               str(script), "--size", str(size), "--check", "--repeat", "1", "--json"],
                              capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        line = [x for x in proc.stdout.splitlines() if x.startswith("{")][-1]
        data = json.loads(line)
        assert data["correct"] is True and data["name"] == entry.algorithm.name


def test_verify_takes_several_files_and_stops_at_the_first_bad_one(capsys, ring4_allreduce, tmp_path):
    src, out_dir = tmp_path / "set.json", tmp_path / "xml"
    save_set(ring4_allreduce.schedule_set, src)
    assert run(capsys, "emit", "msccl", src, "-o", out_dir)[0] == 0
    files = sorted(out_dir.iterdir())
    code, out, err = run(capsys, "verify", src, *files)
    assert code == 0, err
    assert out.count("\nok: ") + out.startswith("ok: ") == 1 + len(files)
    code, out, _ = run(capsys, "verify", src, *files, "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True and len(data["files"]) == 1 + len(files)
    bad = tmp_path / "bad.xml"
    bad.write_text(files[0].read_text().replace('type="s"', 'type="r"', 1))
    code, out, err = run(capsys, "verify", src, bad)
    assert code in (2, 4) and out == "" and "bad.xml" in err


def test_description_requests_with_auto_write_sets(capsys, tmp_path):
    source = tmp_path / "req.ccl"
    source.write_text("from basic import ring\n"
                      "synthesize allgather on ring(4) with auto as \"ag\" { size 1 MiB }\n"
                      "synthesize allgather on ring(4) with ring as \"plain\"\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, out, err = run(capsys, "synthesize", source, "-o", out_dir)
    assert code == 0, err
    sset = load_set(out_dir / "ag.json")
    verify_set(sset)
    assert [r["size"] for r in sset.table] == [1 << 20]
    assert json.loads((out_dir / "plain.json").read_text())["format"] == "ccl-algorithm"
    code, _, err = run(capsys, "synthesize", source, "--emit", "algorithm")
    assert code == 2 and "uses the tuner" in err


def test_templates_also_run_with_a_piece_per_lane_on_multi_lane_machines():
    from ccl.compiler.tuner import with_lane_variants

    amd8 = load_topology("amd8")  # fully connected, 5 or 6 lanes per pair
    todo = with_lane_variants([("direct", None), ("packing", 1 << 30), ("smt", None)], amd8, 1)
    assert todo == [("direct", None, 1), ("direct", None, 6), ("packing", 1 << 30, 1), ("smt", None, 1)]
    assert with_lane_variants([("direct", None)], load_topology("ring:4"), 1) == [("direct", None, 1)]
    result = tune(amd8, "alltoall", sizes="1GiB", solvers=["direct"], cache=False, native=False)  # ours only
    sset = result.schedule_set
    assert sset.table[0]["winner"] == "direct/k6"  # one piece per pair leaves five lanes of six idle
    times = {c["label"]: c["times_us"][0] for c in sset.candidates if "times_us" in c}
    assert times["direct"] > 2.5 * times["direct/k6"]


def test_cache_info_and_clear(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CCL_CACHE_DIR", str(tmp_path / "cache"))
    tune(load_topology("ring:4"), "allgather", sizes="1KiB", solvers=["ring"])
    code, out, _ = run(capsys, "cache", "info", "--json")
    data = json.loads(out)
    assert code == 0 and data["entries"] == 1 and data["bytes"] > 0 and data["folder"] == str(tmp_path / "cache")
    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and out.startswith("removed 1 cached schedule set")
    assert json.loads(run(capsys, "cache", "info", "--json")[1])["entries"] == 0
    assert not tune(load_topology("ring:4"), "allgather", sizes="1KiB", solvers=["ring"]).cached
    monkeypatch.setenv("CCL_CACHE_DIR", "off")
    code, out, _ = run(capsys, "cache", "info")
    assert code == 0 and "off" in out


def test_a_set_priced_with_another_calibration_is_not_served_from_the_cache(tmp_path, monkeypatch):
    """The cache key holds the calibration in use (CCL_CALIBRATION): a set tuned under one cost
    model is never the answer under another."""
    from backends.cost.calibration import CALIBRATION_FILE

    monkeypatch.setenv("CCL_CACHE_DIR", str(tmp_path / "cache"))
    topo = load_topology("ring:4")
    first = tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"])
    data = json.loads(CALIBRATION_FILE.read_text())
    data["parameters"]["launch_us"]["Simple"] *= 2
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(data))
    monkeypatch.setenv("CCL_CALIBRATION", str(mine))
    other = tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"])
    assert not other.cached and other.schedule_set.options["calibration"] != first.schedule_set.options["calibration"]
    assert tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"]).cached
