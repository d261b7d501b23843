"""Description files that ask for more than any description needs stop with a located error
(file:line:col, exit 2) before memory is spent: long lines and string literals, huge number
literals, strings doubled in a loop, huge step numbers and rank counts, deep nesting.

All cases run through ``ccl check`` in one child process capped at 2 GiB of address space.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

CAP = 2 << 30

DRIVER = r"""
import contextlib, io, json, sys
from ccl.cli import main
results = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except BaseException as exc:
            rc, err = repr(exc), io.StringIO(repr(exc))
    results.append([rc, err.getvalue()])
print(json.dumps(results))
"""

RING = "from basic import ring\n"
CASES = {
    # name: (text, line:col of the error, words its message holds)
    "step": (RING + "algorithm a(n = 4) implements allgather on ring(n) {\n"
             "  copy output[0] from 0 to 1 at step 10**12\n}\n", "3:38", ["step 1000000000000", "CCL_MAX_STEPS"]),
    "step-block": (RING + "algorithm a(n = 4) implements allgather on ring(n) {\n  step 2**40 {\n"
                   "    copy output[0] from 0 to 1\n  }\n}\n", "3:8", ["CCL_MAX_STEPS"]),
    "long-string": ('let s = "' + "x" * 50_000_000 + '"\n', "1:", ["longer than 1048576 characters"]),
    "digits": ("let x = " + "7" * 100_000 + "\n", "1:9", ["100000 digits"]),
    "exponent": ("let x = 1e999999999\n", "1:9", ["exponent 999999999"]),
    "float": ("let x = 1e400\n", "1:9", ["too large"]),
    "power": ("let x = 2**10**9\n", "1:9", ["too large"]),
    "doubling": ('let s = "ab"\n' + "".join(f"let s{i + 1} = s{i or ''} + s{i or ''}\n".replace("s0", "s")
                                           for i in range(40)), ":", ["strings stop at 1048576 characters"]),
    "join": ('let s = "' + "y" * 1000 + '"\nlet j = join([s for i in 0..2000], "")\n', "2:9",
             ["strings stop at"]),
    "prod": ("let x = prod([10**18 for i in 0..300])\n", "1:9", ["integers stop at 2**63"]),
    "ranks": ("topology t {\n  ranks 10**9\n}\nlet x = t()\n", "2:9", ["CCL_MAX_RANKS"]),
    "links": ("topology t(n = 3000) {\n  ranks n\n  for i in 0..n, j in 0..n if i != j {\n"
              "    i -> j : 1 GB/s, 1 us\n  }\n}\nlet x = t()\n", "4:5", ["links", "CCL_MAX_LINKS"]),
    "nesting": ("let x = " + "[" * 20_000 + "1" + "]" * 20_000 + "\n", "1:1", ["nests too deeply"]),
    "sum": ("let x = " + "+".join(["1"] * 20_000) + "\n", "1:1", ["nests too deeply"]),
}


def test_parentheses_deeply_nested_are_fine(tmp_path):
    """20,000 parentheses around one number is one number (no recursion runs out)."""
    import dsl

    module = dsl.load_string("let x = " + "(" * 20_000 + "1" + ")" * 20_000 + "\n", "p.ccl")
    assert module.exports["x"] == 1


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("dsl-limits")
    for name, (text, _, _) in CASES.items():
        (d / f"{name}.ccl").write_text(text)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    env = {k: v for k, v in os.environ.items() if not k.startswith("CCL_MAX_")}
    env["CCL_MAX_LINKS"] = "100000"  # the default (1 Mi links) takes 5-10 s to reach
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps([["check", f"{n}.ccl"] for n in CASES]),
                          capture_output=True, text=True, cwd=d, env=env, preexec_fn=cap, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(zip(CASES, (tuple(x) for x in json.loads(proc.stdout))))


@pytest.mark.parametrize("name", list(CASES))
def test_a_description_asking_too_much_stops_with_a_located_error(name, results):
    _, where, words = CASES[name]
    rc, err = results[name]
    assert rc == 2, (name, rc, err[:2000])
    assert "Traceback" not in err and "internal error" not in err
    head = err.splitlines()[0]
    assert head.startswith(f"ccl: {name}.ccl:"), head
    assert where in head, (where, head)
    for word in words:
        assert word in head, (word, head)
    assert len(err) < 2000  # a long source line is shown cut, not whole
