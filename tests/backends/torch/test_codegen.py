"""``ccl emit torch`` scripts: standalone, deterministic, and correct under torchrun."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

import ccl
from backends.torch.codegen import emit_script
from backends.torch.plain import to_plain
from ccl import compiler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def schedule(topology: str, kind: str, solver: str, chunks: int = 1, root: int | None = None):
    return ccl.synthesize(ccl.problem(topology, kind, solver=solver, chunks=chunks, root=root)).algorithm


def test_scripts_are_deterministic_standalone_python():
    alg = schedule("ring:3", "allreduce", "ring", chunks=2)
    text = emit_script(compiler.program(alg), source="ar.json")
    assert text == emit_script(compiler.program(alg), source="ar.json")
    assert text == compiler.torch_script(alg, source="ar.json")  # the driver lowers the same way
    compile(text, "prog.py", "exec")
    imported = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert imported <= {"__future__", "argparse", "datetime", "hashlib", "json", "os", "re", "statistics", "sys",
                        "time", "typing", "torch"}
    assert "torchrun --nproc-per-node 3 prog.py --size 16MiB --check --repeat 10" in text
    assert "SCHEDULE = {" in text and "# rank 2:" in text


def test_scripts_run_the_program_they_are_given():
    """The backend never lowers: it takes a Program, and the lowering's options are the
    driver's (``compiler.torch_script(..., fuse=, channels=)``)."""
    alg = schedule("ring:3", "allgather", "direct", chunks=2)
    with pytest.raises(ccl.InputError, match="the torch backend runs a Program"):
        emit_script(alg)
    fused, split = compiler.program(alg), compiler.program(alg, fuse=False, channels=2)
    assert (fused.n_messages, split.n_messages) == (6, 12)
    assert compiler.torch_script(alg, fuse=False, channels=2) == emit_script(split) != emit_script(fused)
    for program in (fused, split):  # the script embeds exactly the Program's plain form
        assert embedded_schedule(emit_script(program)) == plain_rows(to_plain(program))
    assert {op[9] for ops in embedded_schedule(emit_script(split))["ops"] for op in ops} == {0, 1}


def embedded_schedule(text: str) -> dict:
    """The SCHEDULE literal of a generated script."""
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SCHEDULE")
    return plain_rows(ast.literal_eval(node.value))


def plain_rows(value):
    """Tuples as lists (the script writes rows as tuples, the plain form as lists)."""
    if isinstance(value, dict):
        return {k: plain_rows(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_rows(v) for v in value]
    return value


def test_emitting_needs_no_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import ccl\nfrom backends.torch.codegen import emit_script\nfrom ccl.compiler import program, torch_script\n"
            "a = ccl.synthesize(ccl.problem('ring:2', 'allgather', solver='ring')).algorithm\n"
            "print(len(emit_script(program(a))) > 1000, torch_script(a) == emit_script(program(a)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True True"


def torchrun(script: str, n: int, *args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script must stand alone
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=os.path.dirname(script))


def test_generated_script_runs_under_torchrun_and_checks_itself(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(compiler.torch_script(schedule("ring:2", "allreduce", "ring", chunks=3), source="ar.json"))
    out = torchrun(str(script), 2, "--size", "4100B", "--check", "--repeat", "2", "--warmup", "1", "--compare",
                   "--dtype", "int32", "--op", "max", "--in-place")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "check: ok" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if line.split() and line.split()[0] in ("0", "1")]
    assert len(rows) == 2 and all(float(row[1]) > 0 for row in rows)  # time(us), algbw, busbw, torch, ratio
    assert "median" in out.stdout


@pytest.mark.slow
def test_generated_script_on_3_ranks_and_another_world_size(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(emit_script(compiler.program(schedule("ring:3", "reducescatter", "recursive-halving", chunks=2),
                                                   fuse=False)))
    out = torchrun(str(script), 3, "--size", "1000003B", "--check", "--repeat", "1", "--dtype", "bfloat16",
                   "--op", "avg", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["correct"] is True and summary["ranks"] == 3
    script = tmp_path / "prog.py"
    script.write_text(emit_script(compiler.program(schedule("ring:3", "allgather", "ring"))))
    out = torchrun(str(script), 2, "--size", "1KiB", "--check", "--repeat", "1")
    assert out.returncode != 0
    assert "is for 3 ranks but the process group has 2" in out.stderr
