"""``ccl probe --nccl-tests``: nccl-tests output of a known (perturbed) machine is fitted back and
the calibration written; ``CCL_CALIBRATION`` with that file changes what ``ccl compare`` prices;
malformed runs, a mismatched machine or collective, an output over an input and a bad
calibration file are one-line errors (exit 2) that write nothing."""

from __future__ import annotations

import json

import pytest

from backends.cost.calibration import ENVIRONMENT, from_json
from ccl.cli import main

from ..backends.test_cost_fit import nccl_tests, truth


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def runs(tmp_path):
    path = tmp_path / "ag.txt"
    path.write_text(nccl_tests("allgather", "dgx-h100:1", truth()))
    return path


def test_fit_prints_before_and_after_and_writes_calibration(runs, tmp_path, capsys):
    out_path = tmp_path / "cal.json"
    code, out, err = run(capsys, "probe", "--nccl-tests", str(runs), "-t", "dgx-h100:1", "-c", "allgather",
                         "-o", str(out_path))
    assert code == 0, err
    assert "fitted the cost model to 28 allgather runs on dgx-h100 (8 ranks, hopper, nccl)" in out
    assert f"{runs}:17" in out and "measured us" in out and "before us" in out and "after us" in out
    summary = next(line for line in out.splitlines() if line.strip().startswith("error:"))
    assert "->" in summary and "link_efficiency.hopper 0.8161 -> 0.70" in out
    cal = from_json(json.loads(out_path.read_text()), str(out_path))
    assert cal.link_efficiency["hopper"] == pytest.approx(0.70, abs=0.02)

    code, out, err = run(capsys, "probe", "--nccl-tests", str(runs), "-t", "dgx-h100:1", "-c", "allgather", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["error"]["after"]["worst"] < report["error"]["before"]["median"] / 3
    assert [r["size_bytes"] for r in report["rows"]] == [2**e for e in range(3, 31)]
    assert set(report["rows"][0]) >= {"file", "line", "measured_us", "before_us", "after_us"}


def _nccl_time(capsys) -> float:
    code, out, err = run(capsys, "compare", "-t", "dgx-h100:1", "-c", "allgather", "--size", "64MiB",
                         "--solvers", "ring", "--only", "--json", "-q")
    assert code == 0, err
    rows = json.loads(out)["comparisons"][0]["rows"]
    return next(r["time_us"] for r in rows if r["name"] == "nccl")


def test_calibration_environment_changes_compare(runs, tmp_path, capsys, monkeypatch):
    out_path = tmp_path / "cal.json"
    assert run(capsys, "probe", "--nccl-tests", str(runs), "-t", "dgx-h100:1", "-c", "allgather",
               "-o", str(out_path))[0] == 0
    shipped_time = _nccl_time(capsys)
    monkeypatch.setenv(ENVIRONMENT, str(out_path))
    mine = _nccl_time(capsys)
    assert mine > 1.1 * shipped_time  # the fitted machine's NVLink is slower: a 64 MiB allgather takes longer
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ccl-cost-calibration", "parameters": {}}')
    monkeypatch.setenv(ENVIRONMENT, str(bad))
    code, out, err = run(capsys, "compare", "-t", "dgx-h100:1", "-c", "allgather", "--size", "64MiB",
                         "--solvers", "ring", "--only")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"{ENVIRONMENT}={bad}" in err and "malformed" in err


@pytest.mark.parametrize("edit, needle", [
    (lambda t: t.replace(" 1048576 ", " 10485x6 ", 1), ":34: size (bytes): expected a whole number"),
    (lambda t: t + "   4096 1024 float sum -1 12.0\n", ": expected an nccl-tests row of 13 columns"),
    (lambda t: t.replace("all_gather_perf", "all_reduce_perf"), ": the run is allreduce, not allgather (-c)"),
    (lambda t: "\n".join(x for x in t.splitlines() if "Rank  7" not in x), ": the run lists 7 devices"),
])
def test_bad_runs_are_one_line_errors(runs, tmp_path, capsys, edit, needle):
    runs.write_text(edit(runs.read_text()))
    out_path = tmp_path / "cal.json"
    code, out, err = run(capsys, "probe", "--nccl-tests", str(runs), "-t", "dgx-h100:1", "-c", "allgather",
                         "-o", str(out_path))
    assert code == 2 and out == "" and not out_path.exists()
    assert len(err.strip().splitlines()) == 1 and str(runs) in err and needle in err, err


def test_output_over_input_and_missing_options_are_refused(runs, capsys):
    text = runs.read_text()
    code, _, err = run(capsys, "probe", "--nccl-tests", str(runs), "-t", "dgx-h100:1", "-c", "allgather",
                       "-o", str(runs))
    assert code == 2 and "overwrite the input" in err and runs.read_text() == text
    code, _, err = run(capsys, "probe", "--nccl-tests", str(runs), "-c", "allgather")
    assert code == 2 and "needs -t TOPOLOGY" in err
    code, _, err = run(capsys, "probe", "-t", "dgx-h100:1", "--from", str(runs))
    assert code == 2 and "give --nccl-tests FILE" in err
    code, _, err = run(capsys, "probe", "--nccl-tests", str(runs), "-t", "dgx-h100:1", "-c", "sendrecv")
    assert code == 2 and "the model prices are" in err
