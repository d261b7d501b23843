"""``ccl emit torch`` scripts: standalone, deterministic, and correct under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import ccl
from backends.torch.codegen import emit_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def schedule(topology: str, kind: str, solver: str, chunks: int = 1, root: int | None = None):
    return ccl.synthesize(ccl.problem(topology, kind, solver=solver, chunks=chunks, root=root)).algorithm


def test_scripts_are_deterministic_standalone_python():
    alg = schedule("ring:3", "allreduce", "ring", chunks=2)
    text = emit_script(alg, source="ar.json")
    assert text == emit_script(alg, source="ar.json")
    compile(text, "prog.py", "exec")
    imported = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert imported <= {"__future__", "argparse", "datetime", "hashlib", "json", "os", "re", "statistics", "sys",
                        "time", "typing", "torch"}
    assert "torchrun --nproc-per-node 3 prog.py --size 16MiB --check --repeat 10" in text
    assert "SCHEDULE = {" in text and "# rank 2:" in text


def test_emitting_needs_no_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import ccl\nfrom backends.torch.codegen import emit_script\n"
            "a = ccl.synthesize(ccl.problem('ring:2', 'allgather', solver='ring')).algorithm\n"
            "print(len(emit_script(a)) > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def torchrun(script: str, n: int, *args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script must stand alone
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=os.path.dirname(script))


def test_generated_script_runs_under_torchrun_and_checks_itself(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(emit_script(schedule("ring:2", "allreduce", "ring", chunks=3), source="ar.json"))
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
    script.write_text(emit_script(schedule("ring:3", "reducescatter", "recursive-halving", chunks=2)))
    out = torchrun(str(script), 3, "--size", "1000003B", "--check", "--repeat", "1", "--dtype", "bfloat16",
                   "--op", "avg", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["correct"] is True and summary["ranks"] == 3
    script = tmp_path / "prog.py"
    script.write_text(emit_script(schedule("ring:3", "allgather", "ring")))
    out = torchrun(str(script), 2, "--size", "1KiB", "--check", "--repeat", "1")
    assert out.returncode != 0
    assert "is for 3 ranks but the process group has 2" in out.stderr
