"""The program stage printed with ``--emit program`` (``ccl verify``, ``ccl check``, ``ccl simulate``,
``ccl run``), ``ccl emit torch`` and ``ccl run``, in process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ccl import compiler
from ccl.cli import main
from ccl.core.serialize import load_algorithm, program_to_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "dsl", "examples")


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


def test_verify_emit_program_text_and_json(schedule, capsys):
    path = schedule()
    code, out, _ = run(capsys, "verify", path, "--emit", "program")
    assert code == 0 and out.startswith("program ring-allreduce-ring3:") and "rank 2:" in out
    assert "step 0 recv scratch[0] from rank 2 (tag 0)" in out and "reduce scratch[0] -> output[1]  after 0" in out
    code, out, _ = run(capsys, "verify", path, "--emit", "program", "--json", "--channels", "2")
    data = json.loads(out)
    assert code == 0 and list(data) == ["programs"] and len(data["programs"]) == 1
    program = data["programs"][0]
    assert program["format"] == "ccl-program" and program["channels"] == 2 and program["name"] == "ring-allreduce-ring3"
    assert len(program["ops"]) == 3 and program["ops"][0][0][0] == "recv"
    assert program["op_fields"][-1] == "deps" and program["ops"][0][2][-1] == [0]  # the reduce waits for its recv
    # the one lowering path: what the driver's program stage makes, verified
    assert program == json.loads(json.dumps(program_to_json(compiler.program(load_algorithm(path), channels=2))))


def test_lowering_options_change_the_program(schedule, capsys):
    path = schedule(collective="allgather", solver="direct", chunks=2)  # 2 pieces per pair and step

    def program(*options):
        code, out, err = run(capsys, "verify", path, "--emit", "program", "--json", *options)
        assert code == 0, err
        data = json.loads(out)["programs"][0]
        return data, sorted({op[9] for ops in data["ops"] for op in ops if op[0] in ("send", "recv")})

    fused, channels = program()
    assert fused["messages"] == 6 and fused["channels"] == 1 and channels == [0]
    split, channels = program("--no-fuse", "--channels", "2")
    assert split["messages"] == 12 and split["channels"] == 2 and channels == [0, 1]
    code, out, _ = run(capsys, "verify", path, "--emit", "program", "--no-fuse")
    assert code == 0 and "12 messages, 1 channel(s)" in out.splitlines()[0]


def test_every_command_prints_the_same_program(schedule, capsys):
    path = schedule(topology="ring:4", collective="allgather", solver="direct", chunks=2)
    outputs = []
    for argv in (["verify", path], ["simulate", path, "--size", "1MiB"], ["run", path, "--size", "1KiB"]):
        code, out, err = run(capsys, *argv, "--emit", "program", "--no-fuse", "--channels", "2", "--json")
        assert code == 0, err
        outputs.append(json.loads(out))
    assert outputs[0] == outputs[1] == outputs[2]
    program = outputs[0]["programs"][0]
    assert program["channels"] == 2 and program == json.loads(json.dumps(program_to_json(
        compiler.program(load_algorithm(path), channels=2, fuse=False))))


def test_check_emit_program_prints_every_hand_written_algorithm(capsys):
    ccl_file = os.path.join(EXAMPLES, "ring_allgather.ccl")
    code, out, _ = run(capsys, "check", ccl_file, "--emit", "program")
    assert code == 0 and out.startswith("program ring_allgather(2): allgather on 2 ranks")
    assert "program ring_allgather(5):" in out and "program ring_allgather(8):" in out
    assert "  0  step 0 recv output[1] from rank 1 (tag 0)" in out
    code, out, _ = run(capsys, "check", ccl_file, "--emit", "program", "--json", "--channels", "3")
    programs = json.loads(out)["programs"]
    assert [p["name"] for p in programs] == ["ring_allgather(2)", "ring_allgather(5)", "ring_allgather(8)"]
    assert all(p["format"] == "ccl-program" and p["channels"] == 3 and p["solver"] == "hand-written"
               for p in programs)
    assert [len(p["ops"]) for p in programs] == [2, 5, 8] and programs[2]["messages"] == 56


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
    (["verify", "missing.json", "--emit", "program"], 2, "no such file"),
    (["verify", "{schedule}", "--emit", "program", "--channels", "0"], 2, "positive integer"),
    (["emit", "program", "{schedule}"], 2, "invalid choice: 'program'"),  # a stage now: --emit program
    (["check", os.path.join(EXAMPLES, "requests.ccl"), "--emit", "program"], 2, "has no hand-written algorithms"),
    (["run", "{schedule}", "--size", "1KiB", "--emit", "program", "--channels", "-1"], 2, "positive integer"),
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
    code, out, err = run(capsys, "run", path, "--size", "4099B", "--round", "--repeat", "2", "--json")
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
