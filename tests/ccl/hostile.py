"""What the hostile-input tests share: a child interpreter, the CLI run under a memory cap,
and the one-line error check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child(code: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CCL_")}
    full.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], env=full, cwd=cwd, capture_output=True, text=True,
                          timeout=120)



# ---------------------------------------------------------------------- capped runs of the CLI
CAP = 2 << 30  # bytes of address space for the child: a regression that allocates by a hostile count dies there

DRIVER = r"""
import contextlib, io, json, os, sys, time
from ccl.cli import main
results = []
for argv, env in json.load(sys.stdin):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except BaseException as exc:
            rc, err = repr(exc), io.StringIO(repr(exc))
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    results.append([rc, out.getvalue(), err.getvalue(), time.monotonic() - start])
print(json.dumps(results))
"""


def run_capped(cases: list[tuple[list[str], dict[str, str]]], cwd: Path, cap: int = CAP) -> list[tuple]:
    """``ccl.cli.main(argv)`` for every case in one child under the memory cap: (exit code,
    stdout, stderr, seconds) each."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {k: v for k, v in os.environ.items() if not k.startswith("CCL_MAX_")}
    env.update(CCL_QUIET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(cases), capture_output=True, text=True,
                          cwd=cwd, env=env, preexec_fn=limit, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [tuple(x) for x in json.loads(proc.stdout)]


def one_line(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ccl"), err
    assert "Traceback" not in err and "internal error" not in err
    for word in words:
        assert word in lines[0], (word, lines[0])


