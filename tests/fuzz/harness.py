"""The fuzz harness: seed files, a worker process that runs cases under limits, the mode.

Modes (``CCL_FUZZ``): ``quick`` (default: a few derandomized examples per format, the whole
folder in about 30 s) or ``long`` (``CCL_FUZZ_EXAMPLES`` examples per format, default 500,
random, slower commands included). Memory per worker: ``CCL_FUZZ_MEMORY`` bytes (2 GiB).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

LONG = os.environ.get("CCL_FUZZ", "quick") == "long"
EXAMPLES = int(os.environ.get("CCL_FUZZ_EXAMPLES", "500")) if LONG else None
TIMEOUT = float(os.environ.get("CCL_FUZZ_TIMEOUT", "60" if LONG else "10"))  # seconds per case
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("worker.py")

COUNTS: dict[str, Counter] = {}  # format -> outcome counts (printed at the end of the session)
FAILURES: dict[str, list[dict]] = {}  # format -> bad cases


def make_fixtures(folder: Path) -> dict[str, str]:
    """Valid files of every input format, in ``folder``; returns name -> text."""
    from backends.msccl import interpret  # noqa: F401 - the XML backend is importable
    from ccl import Problem, Request, lower, synthesize
    from ccl.compiler.msccl import export_xml
    from ccl.core.collective import builtin
    from ccl.core.schedule_set import Entry, ScheduleSet, set_to_json
    from ccl.core.serialize import algorithm_to_json, dumps, program_to_json, topology_to_json
    from topologies import build

    topo = build("ring:4")
    ag = synthesize(Problem(topo, builtin("allgather", 4), Request("ring"))).algorithm
    ar = [synthesize(Problem(topo, builtin("allreduce", 4), Request(s))).algorithm
          for s in ("ring", "recursive-doubling")]
    sset = ScheduleSet("allreduce-ring4", topo, builtin("allreduce", 4),
                       (Entry(ar[1], 0, 65536, "recursive-doubling"), Entry(ar[0], 65536, None, "ring")))
    texts = {
        "ag.json": dumps(algorithm_to_json(ag)) + "\n",
        "ar.json": dumps(algorithm_to_json(ar[0])) + "\n",
        "prog.json": dumps(program_to_json(lower(ar[0]))) + "\n",
        "set.json": json.dumps(set_to_json(sset), indent=1) + "\n",
        "topo.json": json.dumps({"format": "ccl-topology", "version": 1, "topology": topology_to_json(build("ndv2:2"))},
                                indent=1) + "\n",
        "ag.xml": export_xml(ag, target="msccl")[0],
        "ar.xml": export_xml(ar[0], target="msccl", forward="on")[0],
        "req.ccl": ("topology t(n = 4) {\n ranks n\n for i in 0..n { i <-> (i + 1) % n : 25 GB/s, 0.7 us }\n}\n"
                    "synthesize allgather on t with ring { chunks 2 }\n"
                    "algorithm a(n = 4) implements allgather on t(n) {\n for s in 0..n-1, r in 0..n {\n"
                    "  copy output[(r - s) % n] from r to (r + 1) % n at step s\n }\n}\n"),
    }
    texts["probe.json"] = json.dumps(probe_measurements(), indent=1) + "\n"
    texts["entry.json"] = cache_entry(folder)
    reference = ROOT / "tests" / "data" / "msccl-xml" / "rccl-alltoall-8n-0-9kb.xml"  # RCCL's (MIT, see NOTICE)
    texts["a2a.xml"] = reference.read_text()
    for name, text in texts.items():
        (folder / name).write_text(text)
    return texts


def probe_measurements(n: int = 4) -> dict:
    """What ``ccl probe --measurements`` writes for n ranks at 10 us + bytes / 5 GB/s."""
    sizes = [4096, 262144, 4194304]
    pairs = {f"{a},{b}": {str(s): 10.0 + s / 5e3 for s in sizes} for a in range(n) for b in range(a + 1, n)}
    fan = {str(r): 10.0 + (n - 1) * sizes[-1] / 15e3 for r in range(n)}
    return {"format": "ccl-probe", "n_ranks": n, "sizes": sizes, "repeat": 5, "backend": "gloo", "pairs": pairs,
            "fan_out": fan, "fan_in": dict(fan), "hosts": ["a"] * n,
            "concurrent": [{"first": [0, 1], "second": [2, 3], "first_us": 850.0, "second_us": 850.0}]}


# The request the cache-entry cases are stored under (worker.py answers it from the fuzzed entry).
CACHE_REQUEST = {"topology": "ring:4", "kind": "allreduce", "sizes": "1KiB,1MiB", "solvers": ["ring", "direct"]}


def cache_entry(folder: Path) -> str:
    """The text of the result cache's entry for ``CACHE_REQUEST`` (computed once, in a cache
    folder of its own)."""
    from ccl.compiler import cache, load_topology
    from ccl.compiler.tuner import tune

    old = os.environ.get("CCL_CACHE_DIR")
    os.environ["CCL_CACHE_DIR"] = str(folder.parent / "seed-cache")
    try:
        r = CACHE_REQUEST
        tune(load_topology(r["topology"]), r["kind"], sizes=r["sizes"], solvers=r["solvers"])
        [entry] = cache.entries()
        return entry.read_text()
    finally:
        if old is None:
            os.environ.pop("CCL_CACHE_DIR", None)
        else:
            os.environ["CCL_CACHE_DIR"] = old


class Worker:
    """A ``worker.py`` process; ``run(case)`` answers within the case's time limit (plus slack
    for the worker to report it), else the worker is killed and the case is a hang."""

    def __init__(self, fixtures: Path) -> None:
        self.fixtures = fixtures
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()

    def start(self) -> None:
        env = dict(os.environ, CCL_QUIET="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   CCL_CACHE_DIR=str(self.fixtures.parent / "cache"), PYTHONHASHSEED="0",
                   MPLBACKEND="Agg")
        env.pop("CCL_DEBUG", None)
        self.proc = subprocess.Popen([sys.executable, str(WORKER), str(self.fixtures)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=str(self.fixtures))
        line = self._read(120)
        if line is None or not json.loads(line).get("ready"):
            raise RuntimeError("the fuzz worker did not start")

    def _read(self, timeout: float) -> str | None:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return line.decode() if line else None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
            self.proc = None

    def close(self) -> None:
        self.stop()
        self.log.close()

    def run(self, case: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        case = {"timeout": TIMEOUT, **case}
        start = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(case) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.stop()
            return {"outcome": "bad", "why": "the worker died"}
        line = self._read(case["timeout"] + 15)
        if line is None:
            died = self.proc.poll()
            self.stop()
            if died is not None:
                return {"outcome": "bad", "why": f"the worker died (status {died}, memory limit?)"}
            return {"outcome": "bad", "why": f"hang: no answer in {case['timeout'] + 15:.0f} s "
                                             f"({time.monotonic() - start:.0f} s)"}
        answer = json.loads(line)
        if answer.get("restart"):
            self.stop()
        return answer


def record(fmt: str, case: dict, answer: dict) -> None:
    c = COUNTS.setdefault(fmt, Counter())
    c["cases"] += 1
    c[answer["outcome"]] += 1
    c["seconds"] += answer.get("seconds", 0)
    c["max_mib"] = max(c["max_mib"], answer.get("maxrss_mib", 0))  # the worker's peak so far
    if answer["outcome"] == "bad":
        shown = {k: v for k, v in case.items() if k != "timeout"}
        if "text" in shown and len(shown["text"]) > 600:
            shown["text"] = shown["text"][:300] + f"...<{len(shown['text'])} chars>..." + shown["text"][-200:]
        FAILURES.setdefault(fmt, []).append({"case": shown, **answer})


def report(fmt: str) -> str:
    """The distinct failures of a format (by their reason), one reproducer each."""
    seen: dict[str, dict] = {}
    for f in FAILURES.get(fmt, []):
        key = f.get("why", "")[:120] or f.get("stderr", "")[:120]
        seen.setdefault(key, f)
    parts = []
    for key, f in seen.items():
        tail = (f.get("trace") or f.get("stderr") or "").strip().splitlines()[-3:]
        parts.append(f"- {key}\n  case: {json.dumps(f['case'])[:900]}\n  " + "\n  ".join(tail))
    return f"{len(FAILURES.get(fmt, []))} bad case(s) of {fmt}, {len(seen)} distinct:\n" + "\n".join(parts)


def summary() -> str:
    lines = [f"fuzz ({'long' if LONG else 'quick'} mode): {'format':<10} {'cases':>6} {'ok':>5} {'error':>6} "
             f"{'bad':>4} {'seconds':>8} {'peak MiB':>8}"]
    for fmt, c in COUNTS.items():
        lines.append(f"{'':<19}{fmt:<10} {c['cases']:>6} {c['ok']:>5} {c['error']:>6} {c['bad']:>4} "
                     f"{c['seconds']:>8.1f} {c['max_mib']:>8}")
    return "\n".join(lines)
