"""``ccl emit program|torch`` and ``ccl run``, in process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ccl.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def schedule(tmp_path, capsys):
    def make(topology="ring:3", collective="allreduce", solver="ring", chunks=1):
        path = tmp_path / f"{collective}-{solver}-{topology.replace(':', '')}.json"
        code, _, err = run(capsys, "synthesize", "-t", topology, "-c", collective, "-s", solver, "-k", chunks,
                           "-o", path)
        assert code == 0, err
        return path
    return make


def test_emit_program_text_and_json(schedule, capsys):
    path = schedule()
    code, out, _ = run(capsys, "emit", "program", path)
    assert code == 0 and out.startswith("program ring-allreduce-ring3:") and "rank 2:" in out
    code, out, _ = run(capsys, "emit", "program", path, "--json", "--channels", "2")
    data = json.loads(out)
    assert code == 0 and data["format"] == "ccl-program" and data["channels"] == 2
    assert len(data["ops"]) == 3 and data["ops"][0][0][0] == "recv"


def test_emit_torch_writes_the_same_script_twice(schedule, capsys, tmp_path):
    path = schedule(collective="allgather")
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    code, out, _ = run(capsys, "emit", "torch", path, "-o", first)
    assert code == 0 and "torchrun --nproc-per-node 3" in out
    code, out, _ = run(capsys, "emit", "torch", path, "-o", second, "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["output"] == str(second) and data["messages"] > 0
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize(("argv", "code", "needle"), [
    (["emit", "torch", "missing.json"], 2, "no such file"),
    (["emit", "program", "missing.json", "--channels", "0"], 2, "positive integer"),
    (["run", "missing.json", "--size", "1KiB"], 2, "no such file"),
    (["run", "{schedule}", "--size", "1KiB", "--ranks", "5"], 2, "is for 3 ranks, not 5"),
    (["run", "{schedule}", "--size", "lots"], 2, "cannot read size"),
    (["run", "{schedule}", "--size", "1KiB", "--dtype", "float31"], 2, "unknown dtype 'float31'"),
    (["run", "{schedule}", "--size", "1KiB", "--op", "median"], 2, "unknown reduction 'median'"),
    (["emit", "torch", "{schedule}", "-o", "/nonexistent/dir/p.py"], 2, "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(schedule, capsys, argv, code, needle):
    path = schedule()
    got, out, err = run(capsys, *[a.replace("{schedule}", str(path)) for a in argv])
    assert got == code, err
    assert needle in err and len(err.strip().splitlines()) <= 2  # argparse adds a usage line


def test_run_checks_and_times_against_torch(schedule, capsys):
    pytest.importorskip("torch")
    path = schedule(topology="ring:2", collective="allgather", chunks=2)
    code, out, err = run(capsys, "run", path, "--size", "4099B", "--repeat", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["correct"] is True and data["ranks"] == 2
    assert data["ours_seconds"] > 0 and data["native_seconds"] > 0 and data["ratio"] > 0
    assert len(data["ours_iterations"]) == 2
    code, out, err = run(capsys, "run", path, "--size", "1KiB", "--repeat", "0", "--in-place", "--dtype", "int64")
    assert code == 0, err
    assert out.startswith("ok: ") and "matches torch's allgather" in out


def test_run_without_torch_says_how_to_install_it(schedule):
    path = schedule()
    code = ("import sys; sys.modules['torch'] = None\n"
            f"from ccl.cli import main\nsys.exit(main(['run', {str(path)!r}, '--size', '1KiB']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 6
    assert "torch is not installed" in out.stderr and "pip install" in out.stderr
