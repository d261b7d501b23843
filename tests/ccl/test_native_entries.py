"""Schedule-set entries that are NCCL itself: the tuner gives a swept size to NCCL where NCCL's
pick (the table's ``nccl`` baseline) beats every candidate, so a set never loses to NCCL; the
file round-trips; emit, verify, simulate and run leave those sizes to NCCL and say so."""

from __future__ import annotations

import json

import pytest

from backends.cost.nccl import pick
from ccl.cli import main
from ccl.compiler import load_topology
from ccl.compiler.tuner import tune
from ccl.core.errors import InputError
from ccl.core.schedule_set import (
    Entry,
    ScheduleSet,
    load_set,
    save_set,
    set_from_json,
    set_text,
    verify_set,
)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def h100():
    """allreduce on one DGX H100 node: NCCL's pick (NVLS at the largest sizes) beats the ring
    and direct schedules above the small sizes."""
    return tune(load_topology("dgx-h100:1"), "allreduce", sizes="1KiB..1GiB", solvers=["ring", "direct"],
                cache=False).schedule_set


@pytest.fixture(scope="module")
def switch4_allreduce(tmp_path_factory):
    """allreduce on 4 ranks behind one switch: the direct schedule at 1 KiB (one hop where NCCL's
    ring takes six), NCCL's ring (its Simple protocol) at 4 MiB (the direct schedule sends every
    rank's whole buffer through its one link)."""
    sset = tune(load_topology("switch:4"), "allreduce", sizes="1KiB,4MiB", solvers=["direct"], cache=False).schedule_set
    path = tmp_path_factory.mktemp("native") / "set.json"
    save_set(sset, path)
    return sset, path


def test_nccl_gets_the_sizes_where_its_pick_beats_every_candidate(h100):
    topo, sizes = h100.topology, [row["size"] for row in h100.table]
    native = [e for e in h100.entries if e.is_native]
    assert native and native[-1] is h100.entries[-1]
    entry = native[-1]
    assert entry.algorithm is None and entry.native == "NVLS" and entry.protocol == "Simple"
    assert entry.label == "NCCL NVLS/Simple" and entry.served_by == "NCCL NVLS/Simple, native"
    assert h100.pick(1 << 30) is entry and h100.pick(1 << 10).algorithm is not None
    verify_set(h100)  # the schedules of ours verified; NCCL's own skipped
    assert verify_set(h100)[-1] is None
    times = {c["label"]: c["times_us"] for c in h100.candidates if "times_us" in c}
    won = []
    for i, row in enumerate(h100.table):
        served = h100.pick(row["size"])
        assert h100.entries[row["entry"]] is served
        # never slower than NCCL's pick at a swept size
        assert row["time_us"] <= row["nccl_us"]
        best = min(t[i] for t in times.values())
        if row["winner"] == "nccl":
            won.append(row["size"])
            assert served.is_native and row["time_us"] == row["nccl_us"]  # vs nccl exactly 1.0
            assert best > row["nccl_us"]
            choice = pick("allreduce", topo, row["size"])
            assert (choice.algorithm, choice.protocol) == (served.native, served.protocol)
        else:
            assert not served.is_native and served.label == row["winner"] and row["time_us"] == round(best, 3)
    # with only ring and direct to offer, NCCL (its Ring, then NVLS) takes every size from where
    # it first wins: the larger sizes, as one entry per algorithm and protocol
    assert won and won == [s for s in sizes if s >= won[0]] and 1 << 10 not in won


def test_no_native_entries_when_asked_or_for_rccl(h100):
    topo = load_topology("dgx-h100:1")
    ours = tune(topo, "allreduce", sizes="512MiB,1GiB", solvers=["ring", "direct"], cache=False, native=False)
    assert [e.label for e in ours.schedule_set.entries] == ["ring"]
    assert all(row["winner"] == "ring" for row in ours.schedule_set.table)
    rccl = tune(topo, "allreduce", sizes="512MiB,1GiB", solvers=["ring", "direct"], cache=False, target="rccl")
    assert not any(e.is_native for e in rccl.schedule_set.entries)


def test_native_entries_round_trip_and_old_files_load(h100, tmp_path):
    path = tmp_path / "set.json"
    save_set(h100, path)
    again = load_set(path)
    assert set_text(again) == path.read_text()
    assert again.entries[-1] == h100.entries[-1] and again.pick(1 << 30).native == "NVLS"
    data = json.loads(path.read_text())
    assert data["entries"][-1]["native"] == "NVLS" and "algorithm" not in data["entries"][-1]
    # entries with a schedule are written as before (no "native" field): older files load as they did
    assert all("native" not in e for e in data["entries"] if "algorithm" in e)
    old = json.loads(path.read_text())
    old["entries"] = [e for e in old["entries"] if "algorithm" in e]
    old["entries"][-1]["max_bytes"] = None
    for e in old["entries"]:
        del e["protocol"]
    loaded = set_from_json(old)
    assert not any(e.is_native for e in loaded.entries) and loaded.entries[0].protocol is None


def test_malformed_native_entries_are_refused(h100):
    data = json.loads(set_text(h100))
    both = json.loads(json.dumps(data))
    both["entries"][-1]["algorithm"] = data["entries"][0]["algorithm"]
    with pytest.raises(InputError, match="native entry has no algorithm"):
        set_from_json(both)
    bare = json.loads(json.dumps(data))
    bare["entries"][-1]["protocol"] = None
    with pytest.raises(InputError, match="names NCCL's protocol"):
        set_from_json(bare)
    with pytest.raises(InputError, match="algorithm"):
        Entry(None, 0, None, "nothing")


def test_cli_synthesize_summary_shows_nccls_entry(capsys, tmp_path):
    path = tmp_path / "set.json"
    code, out, err = run(capsys, "synthesize", "-t", "switch:4", "-c", "allreduce", "--sizes", "1KiB,4MiB",
                         "--solvers", "direct", "--no-cache", "-o", path)
    assert code == 0, err
    assert "1 schedule and 1 range left to NCCL by size" in out
    assert "[64KiB, no limit)          NCCL Ring/Simple, native" in out
    [row] = [line for line in out.splitlines() if line.strip().startswith("4MiB")]
    assert "nccl" in row.split() and "1.00x (is NCCL)" in row
    code, out, _ = run(capsys, "synthesize", "-t", "switch:4", "-c", "allreduce", "--sizes", "1KiB,4MiB",
                       "--solvers", "direct", "--no-cache", "--no-native", "--json")
    assert code == 0 and [e["label"] for e in json.loads(out)["entries"]] == ["direct"]


def test_emit_msccl_leaves_the_native_range_to_nccl(capsys, switch4_allreduce, tmp_path):
    from ccl.compiler.loader import read_xml, verify_imported

    sset, src = switch4_allreduce
    assert [e.served_by for e in sset.entries] == ["direct", "NCCL Ring/Simple, native"]
    out_dir = tmp_path / "xml"
    code, out, err = run(capsys, "emit", "msccl", src, "-o", out_dir, "--json")
    assert code == 0, err
    data = json.loads(out)
    [written] = data["files"]
    [left] = data["native"]
    assert written["entry"] == 0 and left["entry"] == 1 and left["native"] == "NCCL Ring/Simple, native"
    assert [p.name for p in out_dir.iterdir()] == [written["file"].rsplit("/", 1)[-1]]
    imported = read_xml(written["file"], "switch:4")
    verify_imported(imported)
    # the file stops where NCCL's range starts: the runtime falls back to NCCL above it
    assert imported.algo.max_bytes + 1 == left["minBytes"] and left["maxBytes"] == 0
    code, out, err = run(capsys, "emit", "msccl", src, "-o", tmp_path / "again")
    assert code == 0, err
    assert "left to NCCL: entry 1 (NCCL Ring/Simple, native, calls of 65536 bytes and up): no file" in out
    only = ScheduleSet("all-nccl", sset.topology, sset.collective,
                       (Entry(None, 0, None, "NCCL Ring/Simple", protocol="Simple", native="Ring"),))
    save_set(only, tmp_path / "only.json")
    code, _, err = run(capsys, "emit", "msccl", tmp_path / "only.json", "-o", tmp_path / "none")
    assert code == 2 and "left to NCCL" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none").exists()


def test_verify_simulate_and_run_say_nccl_serves_the_range(capsys, switch4_allreduce):
    _, src = switch4_allreduce
    code, out, err = run(capsys, "verify", src)
    assert code == 0, err
    assert "1 schedule of allreduce on switch4, every one verified; 1 range left to NCCL" in out
    assert "NCCL Ring/Simple, native: left to NCCL, nothing to verify" in out
    code, out, _ = run(capsys, "verify", src, "--json")
    rows = json.loads(out)["entries"]
    assert rows[1]["native"] == "NCCL Ring/Simple" and rows[1]["verified"] is False
    code, out, err = run(capsys, "simulate", src, "--size", "4MiB")
    assert code == 0, err
    assert "left to NCCL" in out and "4MiB (NCCL Ring/Simple, native, modelled at" in out
    code, out, _ = run(capsys, "simulate", src, "--size", "1KiB,4MiB", "--json")
    data = json.loads(out)
    assert code == 0 and [r["entry"] for r in data["rows"]] == ["direct"]
    assert [r["size"] for r in data["native"]] == [4 << 20] and data["native"][0]["nccl_us"] > 0
    code, out, err = run(capsys, "run", src, "--size", "4MiB")  # nothing of ours to run: no processes start
    assert code == 0, err
    assert "left to NCCL by the set (NCCL Ring/Simple, native" in out and "nothing of ours to run" in out


def test_a_local_run_of_one_size_left_to_nccl_is_refused_by_the_api(switch4_allreduce):
    from ccl.compiler.runtimes import run_local, run_local_sizes

    sset, _ = switch4_allreduce
    with pytest.raises(InputError, match=r"left to NCCL by the set \(entry NCCL Ring/Simple, native"):
        run_local(sset, size="4MiB")
    [only] = run_local_sizes(sset, sizes=["4MiB"])  # every size NCCL's: no process starts
    assert only.report is None and only.entry.native == "Ring"


def test_the_torch_script_of_a_set_leaves_the_native_range_to_nccl(capsys, switch4_allreduce, tmp_path):
    import subprocess
    import sys

    pytest.importorskip("torch")
    _, src = switch4_allreduce
    script = tmp_path / "prog.py"
    code, out, err = run(capsys, "emit", "torch", src, "-o", script, "--json")
    assert code == 0, err
    assert [e.get("native") for e in json.loads(out)["entries"]] == [None, "NCCL Ring/Simple"]
    text = script.read_text()
    assert "(65536, None, 'NCCL Ring/Simple', None)," in text and "left to NCCL" in text
    # a size of NCCL's range: the script says so and runs nothing (no process group needed)
    proc = subprocess.run([sys.executable, str(script), "--size", "4MiB"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "left to NCCL (NCCL Ring/Simple)" in proc.stderr and proc.stdout == ""
