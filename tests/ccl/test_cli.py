from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from ccl.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_synthesize_then_verify_then_delete_any_transfer(tmp_path, capsys):
    path = tmp_path / "a.json"
    code, out, err = run(capsys, "synthesize", "--topology", "ring:8", "--collective", "allgather",
                         "--solver", "ring", "-o", str(path))
    assert code == 0, err
    assert "verified" in out
    code, out, _ = run(capsys, "verify", str(path))
    assert code == 0 and out.startswith("ok:")
    data = json.loads(path.read_text())
    for i in range(len(data["transfers"])):
        mutated = dict(data, transfers=data["transfers"][:i] + data["transfers"][i + 1:])
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(mutated))
        code, out, err = run(capsys, "verify", str(bad))
        assert code == 4, (i, out, err)
        assert err.startswith("ccl: verification failed: ")
        assert len(err.strip().splitlines()) == 1


def test_synthesize_json_fields(capsys, tmp_path):
    code, out, _ = run(capsys, "synthesize", "-t", "dgx1", "-c", "allreduce", "-s", "ring", "-k", "2",
                       "-o", str(tmp_path / "x.json"), "--json")
    assert code == 0
    data = json.loads(out)
    for key in ("status", "solver", "synthesis_seconds", "steps", "chunks", "transfers"):
        assert key in data
    assert data["status"] == "ok" and data["solver"] == "ring" and data["verified"] is True
    assert data["chunks"] == 16  # ring allreduce splits each rank's buffer n x chunks ways


def test_verify_json(capsys, tmp_path):
    path = tmp_path / "a.json"
    assert run(capsys, "synthesize", "-t", "ring:4", "-c", "reducescatter", "-s", "ring", "-o", str(path))[0] == 0
    code, out, _ = run(capsys, "verify", str(path), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True and data["in_place_ok"] is True


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["synthesize", "-t", "nosuch:3", "-c", "allgather"], 2, "unknown topology"),
        (["synthesize", "-t", "ring:x", "-c", "allgather"], 2, "must be an integer"),
        (["synthesize", "-t", "ring:1", "-c", "allgather"], 2, "ranks >= 2"),
        (["synthesize", "-t", "ring:8", "-c", "allshuffle"], 2, "unknown collective"),
        (["synthesize", "-t", "ring:8", "-c", "alltoall", "-s", "ring"], 2, "does not implement alltoall"),
        (["synthesize", "-t", "ring:8", "-c", "allgather", "-s", "magic"], 2, "unknown solver"),
        (["synthesize", "-t", "ring:8", "-c", "broadcast", "--root", "8"], 2, "root must be a rank"),
        (["synthesize", "-t", "ring:8", "-c", "allgather", "--root", "1"], 2, "has no root"),
        (["synthesize", "-t", "dgx1", "-c", "allreduce", "-s", "hierarchical"], 2, "multi-node"),
        (["synthesize", "-t", "hypercube:6", "-c", "allgather"], 2, "power-of-two"),
        (["synthesize", "-t", "ring:4,bw=-1GB/s", "-c", "allgather"], 2, "bandwidth must be positive"),
        (["synthesize", "-t", "ring:4,speed=1", "-c", "allgather"], 2, "no option 'speed'"),
        (["verify", "/nonexistent/a.json"], 2, "no such file"),
        (["topology", "show", "torus:1x4"], 2, "torus dimensions must be integers >= 2"),
        (["topology", "show", "torus:4,8"], 2, "at most 1 value"),
    ],
)
def test_bad_input_exit_codes(capsys, argv, code, needle):
    got, out, err = run(capsys, *argv)
    assert got == code
    assert "Traceback" not in err
    if needle:
        assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_errors_as_json(capsys):
    code, out, _ = run(capsys, "synthesize", "-t", "ring:8", "-c", "alltoall", "-s", "ring", "--json")
    assert code == 2
    data = json.loads(out)
    assert data["status"] == "error" and data["error"] == "CollectiveError"


def test_option_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["synthesize", "-t", "ring:8", "-c", "allgather", "--chunks", "0"])
    assert info.value.code == 2
    assert "bad input" in capsys.readouterr().err


def test_nothing_written_on_failure(tmp_path, capsys):
    path = tmp_path / "out.json"
    code, _, _ = run(capsys, "synthesize", "-t", "ring:8", "-c", "alltoall", "-s", "ring", "-o", str(path))
    assert code == 2 and not path.exists()


def test_topology_list_and_show(capsys):
    code, out, _ = run(capsys, "topology", "list")
    assert code == 0 and "dgx-h100" in out and "torus:AxB" in out
    code, out, _ = run(capsys, "topology", "list", "--json")
    names = [x["name"] for x in json.loads(out)["topologies"]]
    for name in ("ring", "dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "amd8", "torus", "hypercube"):
        assert name in names
    code, out, _ = run(capsys, "topology", "show", "dgx1")
    assert code == 0 and "0 <-> 1: 25 GB/s x2, 0.7 us" in out
    code, out, _ = run(capsys, "topology", "show", "ndv2:2", "--json")
    data = json.loads(out)
    assert data["topology"]["n_ranks"] == 16 and data["n_nodes"] == 2
    code, out, _ = run(capsys, "topology", "show", "ndv2:2", "--flat")
    assert code == 0 and "shared limits:" in out and "n0.nic0->fabric" in out


def test_topology_show_output_is_loadable(capsys, tmp_path):
    code, out, _ = run(capsys, "topology", "show", "dgx-a100:2", "--json")
    path = tmp_path / "t.json"
    path.write_text(out)
    code, out, _ = run(capsys, "synthesize", "-t", str(path), "-c", "allgather", "-s", "hierarchical")
    assert code == 0, out


def test_solvers_listing(capsys):
    code, out, _ = run(capsys, "solvers", "--json")
    rows = {r["name"]: r for r in json.loads(out)["solvers"]}
    assert "alltoall" in rows["direct"]["collectives"]
    assert set(rows) >= {"ring", "direct", "recursive-doubling", "recursive-halving", "binomial-tree",
                         "double-binary-tree", "hierarchical"}


def test_output_is_deterministic(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path in (a, b):
        assert run(capsys, "synthesize", "-t", "torus:3x3", "-c", "allreduce", "-s", "double-binary-tree",
                   "-k", "2", "-o", str(path))[0] == 0
    assert a.read_bytes() == b.read_bytes()


def test_console_script_runs():
    exe = shutil.which("ccl")
    cmd = [exe] if exe else [sys.executable, "-m", "ccl.cli"]
    proc = subprocess.run([*cmd, "synthesize", "-t", "ring:4", "-c", "allgather", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "ok"
