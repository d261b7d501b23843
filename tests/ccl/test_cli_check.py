"""`ccl check`, `ccl synthesize FILE.ccl` and `--topology FILE.ccl` (in-process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccl.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "dsl" / "examples"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_summary_and_json(capsys):
    code, out, err = run(capsys, "check", EXAMPLES / "ring_allgather.ccl")
    assert code == 0, err
    assert "ring_allgather(8): allgather on ring8, 7 steps, 56 transfers, also in place" in out
    code, out, _ = run(capsys, "check", EXAMPLES / "hierarchical_allreduce.ccl", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert [a["topology"] for a in data["algorithms"]] == ["dgx-a100x4", "dgx-a100x3", "dgx-a100x2"]
    assert all(a["verified"] for a in data["algorithms"])


def test_check_reports_requests_and_unavailable_solvers(capsys):
    code, out, _ = run(capsys, "check", EXAMPLES / "requests.ccl", "--json")
    data = json.loads(out)
    rows = {r["name"]: r for r in data["requests"]}
    assert code == 0 and len(rows) == 8
    assert rows["allgather-dgx1-ring"]["solver_available"] is True
    assert rows["dgx1-allgather-pareto"]["solver"] == "smt"
    code, out, _ = run(capsys, "check", ROOT / "topologies" / "machines.ccl")
    assert code == 0 and "dgx_h100(nodes, fabric, nic_bandwidth, oversubscription, nodes_per_leaf, gpus, sharp, net_latency): dgx-h100, 8 ranks" in out


def test_check_writes_one_hand_written_schedule_for_ccl_verify(capsys, tmp_path):
    out_file = tmp_path / "ag.json"
    code, _, err = run(capsys, "check", EXAMPLES / "ring_allgather.ccl", "--algorithm", "ring_allgather(5)",
                       "-o", out_file)
    assert code == 0, err
    code, out, _ = run(capsys, "verify", out_file, "--json")
    assert code == 0 and json.loads(out)["steps"] == 4
    code, _, err = run(capsys, "check", EXAMPLES / "ring_allgather.ccl", "-o", out_file)
    assert code == 2 and "pick one with --algorithm" in err


def test_check_fails_with_exit_4_on_a_wrong_algorithm(capsys, tmp_path):
    path = tmp_path / "bad.ccl"
    path.write_text("from basic import ring\n"
                    "algorithm bad(n = 4) implements allgather on ring(n) {\n"
                    "  for r in 0..n { copy output[r] from r to (r + 1) % n at step 0 }\n}\n")
    code, out, err = run(capsys, "check", path)
    assert code == 4 and out == ""
    assert err.startswith(f"ccl: verification failed: {path}:2:1: algorithm bad(4): ")
    assert len(err.strip().splitlines()) == 1


def test_dsl_errors_render_with_caret_and_exit_2(capsys, tmp_path):
    path = tmp_path / "t.ccl"
    path.write_text("topology t {\n  ranks 4\n  0 -> 4 : 1 GB/s, 1 us\n}\nsynthesize allgather on t\n")
    code, out, err = run(capsys, "check", path)
    assert code == 2 and "Traceback" not in err
    assert err.splitlines() == [f"ccl: {path}:3:8: rank 4 is out of range: this topology has ranks 0..3",
                                "      0 -> 4 : 1 GB/s, 1 us", "           ^"]
    code, out, _ = run(capsys, "check", path, "--json")
    data = json.loads(out)
    assert code == 2 and data["error"] == "DslError" and (data["line"], data["column"]) == (3, 8)


@pytest.mark.parametrize("emit", ["ast", "problem", "algorithm"])
def test_check_emit(capsys, emit):
    code, out, err = run(capsys, "check", EXAMPLES / "custom_collective.ccl", "--emit", emit)
    assert code == 0, err
    first = {"ast": "File path=", "problem": "# request shift-8-ring8-smt", "algorithm": "# ring_shift(8)"}[emit]
    assert out.startswith(first)
    code, out, _ = run(capsys, "check", EXAMPLES / "custom_collective.ccl", "--emit", emit, "--json")
    key = {"ast": "ast", "problem": "problems", "algorithm": "algorithms"}[emit]
    assert code == 0 and key in json.loads(out)


def test_synthesize_runs_the_requests_of_a_file(capsys, tmp_path):
    code, out, err = run(capsys, "synthesize", EXAMPLES / "requests.ccl", "--request", "allgather-dgx1-ring",
                         "--request", "rs-ring8-k2", "-o", tmp_path, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["request"] for r in data["requests"]] == ["allgather-dgx1-ring", "rs-ring8-k2"]
    assert all(r["verified"] for r in data["requests"])
    for name in ("allgather-dgx1-ring", "rs-ring8-k2"):
        assert run(capsys, "verify", tmp_path / f"{name}.json")[0] == 0


def test_synthesize_file_writes_nothing_when_a_request_fails(capsys, tmp_path):
    source = tmp_path / "two.ccl"
    source.write_text('from basic import ring\n'
                      'synthesize allgather on ring(4) with ring as "good"\n'
                      'synthesize allgather on ring(4) with nosuchsolver as "bad"\n')
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, _, err = run(capsys, "synthesize", source, "-o", out_dir)
    assert code == 2 and "unknown solver 'nosuchsolver'" in err  # the first request ran; the second fails
    assert list(out_dir.iterdir()) == []


def test_synthesize_file_emit_and_option_errors(capsys, tmp_path):
    code, out, _ = run(capsys, "synthesize", EXAMPLES / "requests.ccl", "--request", "allgather-dgx1-ring",
                       "--emit", "algorithm")
    assert code == 0 and out.startswith("# ring-allgather-dgx1") and "step 6 {" in out
    code, out, _ = run(capsys, "synthesize", EXAMPLES / "requests.ccl", "--emit", "problem")
    assert code == 0 and out.count("synthesize ") == 8
    for argv, needle in [
        (["synthesize", EXAMPLES / "requests.ccl", "--request", "nope"], "has no request 'nope'"),
        (["synthesize", EXAMPLES / "requests.ccl", "-t", "dgx1"], "--topology does not combine"),
        (["synthesize", EXAMPLES / "ring_allgather.ccl"], "has no `synthesize` requests"),
        (["synthesize", "-c", "allgather"], "or both --topology and --collective"),
        (["synthesize", EXAMPLES / "requests.ccl", "-o", tmp_path / "x.json"], "-o must be an existing folder"),
    ]:
        code, _, err = run(capsys, *argv)
        assert code == 2 and needle in err, (argv, err)


def test_topology_option_accepts_description_files(capsys):
    code, out, _ = run(capsys, "topology", "show", f"{ROOT}/topologies/machines.ccl:ndv2:2", "--json")
    assert code == 0 and json.loads(out)["topology"]["name"] == "ndv2x2"
    code, out, err = run(capsys, "synthesize", "-t", f"{ROOT}/topologies/basic.ccl:torus(dims = [3, 3])",
                         "-c", "allreduce", "-s", "ring", "--json")
    assert code == 0, err
    assert json.loads(out)["topology"] == "torus3x3"
    code, _, err = run(capsys, "topology", "show", f"{ROOT}/topologies/basic.ccl")
    assert code == 2 and "defines 7 topologies" in err and "pick one" in err


def test_emitted_problems_are_deterministic_across_processes(tmp_path):
    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        proc = subprocess.run([sys.executable, "-m", "ccl.cli", "check", str(EXAMPLES / "requests.ccl"), "--emit",
                               "problem"], capture_output=True, text=True, env=env, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]


def test_check_names_algorithms_it_could_not_instantiate(capsys, tmp_path):
    path = tmp_path / "open.ccl"
    path.write_text("from basic import ring\n"
                    "algorithm ag(n) implements allgather on ring(n) {\n"
                    "  for s in 0..n-1, r in 0..n { copy output[(r - s) % n] from r to (r + 1) % n at step s }\n}\n")
    code, out, _ = run(capsys, "check", path)
    assert code == 0 and "not checked (parameters without defaults; add `verify NAME(args)`): ag" in out
    path.write_text(path.read_text() + "verify ag(3)\n")
    code, out, _ = run(capsys, "check", path, "--json")
    assert code == 0 and json.loads(out)["unchecked_algorithms"] == []
