"""Fuzz worker: runs cases read from stdin (one JSON object a line) under a memory limit and a
per-case time limit, and answers one JSON line per case. Started by ``tests/fuzz/harness.py``;
one worker serves many cases (importing the project once).

A case is ``{"format": F, "text": ..., "argv": [...], "timeout": seconds}``; F is one of
``algorithm``, ``program``, ``topology``, ``set`` (JSON files), ``xml`` (MSCCL XML), ``dsl``
(description text), ``probe`` (a measurements file, fitted and written as a description and
read back), ``cache`` (a file placed at, or symlinked from, the result cache's entry of a
request that is then asked: only that request's own set may come back) or ``cli`` (an argument vector for ``ccl``, run in a fresh folder holding
the files of ``fixtures``). The answer is ``{"outcome": "ok" | "error" | "bad", ...}``:
``error`` a project error (CclError; the CLI: exit 2-5 with one ``ccl:`` line on stderr),
``bad`` anything else (another exception, a traceback, an internal error, a memory or time
limit hit, an exit code outside the allowed set, stray stderr lines).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback

MEMORY = int(os.environ.get("CCL_FUZZ_MEMORY", str(2 << 30)))  # bytes of address space
CLI_CODES = {0, 2, 3, 4, 5}
CLI_CODES_BY_COMMAND = {"emit": {6}}  # BackendError: a schedule the target cannot hold


class CaseTimeout(BaseException):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise CaseTimeout()


def _load(fmt: str, path: str, base: str) -> str:
    """Load (and verify) what a user would hand the tool; return a short description."""
    from ccl import Algorithm, Program, verify, verify_program
    from ccl.compiler.loader import read_json_schedule
    from ccl.core.schedule_set import ScheduleSet, verify_set

    if fmt in ("algorithm", "program", "set"):
        value = read_json_schedule(path)
        if isinstance(value, Algorithm):
            verify(value)
        elif isinstance(value, Program):
            verify_program(value)
        elif isinstance(value, ScheduleSet):
            verify_set(value)
        return type(value).__name__
    if fmt == "topology":
        from ccl.compiler.stages import load_topology

        topo = load_topology(path)
        topo.flat()
        return f"{topo.n_ranks} ranks"
    if fmt == "xml":
        from ccl.compiler.loader import load_schedule

        return type(load_schedule(path)).__name__
    if fmt == "probe":  # a measurements file fitted as `ccl probe --from` does, written as a description
        from ccl.compiler.probe import fit, to_ccl
        from ccl.core.limits import read_input_json

        probed = fit(read_input_json(path))
        import dsl

        text = to_ccl(probed)
        dsl.load_string(text, "probed.ccl").topology("probed")  # what it wrote, read back
        return f"{probed.topology.n_ranks} ranks"
    if fmt == "cache":  # the fuzzed file placed as the entry of a request: served only if it is that request's
        return _cache_case(path)
    if fmt == "dsl":
        import dsl

        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        module = dsl.load_string(text, "fuzz.ccl", base=base, max_steps=20_000)
        for name, definition in module.topologies().items():
            if all(p.default is not None for p in definition.params):
                module.topology(name)
        module.requests()
        for item in module.algorithms():
            dsl.verify_algorithm(item)
        return "module"
    raise ValueError(f"unknown format {fmt!r}")


def _cache_case(path: str) -> str:
    """Put the file at the cache entry of ``harness.CACHE_REQUEST`` (sometimes as a symlink to
    it) and ask the request: the answer must be a set for that very request, and no file
    outside the cache may change."""
    request = {"topology": "ring:4", "kind": "allreduce", "sizes": "1KiB,1MiB", "solvers": ["ring", "direct"]}
    saved = os.environ.get("CCL_CACHE_DIR")
    os.environ["CCL_CACHE_DIR"] = os.path.join(os.path.dirname(path), "case-cache")
    try:
        return _cache_request(path, request)
    finally:
        if saved is None:
            os.environ.pop("CCL_CACHE_DIR", None)
        else:
            os.environ["CCL_CACHE_DIR"] = saved


def _cache_request(path: str, request: dict) -> str:
    import random
    import shutil

    from ccl.compiler import cache, load_topology
    from ccl.compiler.tuner import tune

    topo = load_topology(request["topology"])
    first = tune(topo, request["kind"], sizes=request["sizes"], solvers=request["solvers"])
    [entry] = cache.entries()
    outside = os.path.join(os.path.dirname(path), "outside.json")
    shutil.copy(path, outside)
    before = open(outside, "rb").read()
    os.unlink(entry)
    if random.Random(before).random() < 0.3:
        os.symlink(outside, entry)  # a neighbour's symlink: never written through
    else:
        shutil.copy(path, entry)
    answer = tune(topo, request["kind"], sizes=request["sizes"], solvers=request["solvers"])
    sset = answer.schedule_set
    if sset.topology != topo or sset.collective != first.schedule_set.collective:
        raise AssertionError(f"the cache served a set for {sset.collective.kind} on {sset.topology.name}")
    if open(outside, "rb").read() != before:
        raise AssertionError("the cache wrote through a symlink")
    return "served" if answer.cached else "recomputed"


def _excerpt(lines: list[str]) -> bool:
    """The error line and, as description-file errors render, the source line and a caret
    line under it."""
    return len(lines) == 3 and re.fullmatch(r"\s*\^[~^]*\s*", lines[2]) is not None


def _cli(argv: list[str]) -> dict:
    from ccl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse, --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    stderr = err.getvalue()
    lines = [x for x in stderr.splitlines() if x.strip()]
    allowed = CLI_CODES | CLI_CODES_BY_COMMAND.get(argv[0] if argv else "", set())
    why = ""
    if code not in allowed:
        why = f"exit {code}"
    elif "Traceback" in stderr or "internal error" in stderr:
        why = "traceback or internal error"
    elif code != 0 and len(lines) != 1 and not _excerpt(lines):
        why = f"{len(lines)} stderr lines"
    elif code != 0 and not lines[0].startswith("ccl"):
        why = "stderr line not from ccl"
    return {"outcome": "bad" if why else ("ok" if code == 0 else "error"), "code": code,
            "why": why, "stderr": stderr[-2000:]}


def run_case(case: dict, fixtures: str) -> dict:
    work = tempfile.mkdtemp(prefix="ccl-fuzz-")
    old = os.getcwd()
    try:
        for name in os.listdir(fixtures):
            shutil.copy(os.path.join(fixtures, name), work)
        os.chdir(work)
        fmt = case["format"]
        signal.setitimer(signal.ITIMER_REAL, float(case.get("timeout", 20)))
        try:
            if fmt == "cli":
                return _cli(list(case["argv"]))
            suffix = {"xml": ".xml", "dsl": ".ccl"}.get(fmt, ".json")
            path = os.path.join(work, "case" + suffix)
            data = case["text"]
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
                fh.write(data)
            from ccl.core.errors import CclError

            try:
                what = _load(fmt, path, work)
            except CclError as exc:
                return {"outcome": "error", "why": "", "error": f"{type(exc).__name__}: {exc}"[:500]}
            return {"outcome": "ok", "why": "", "value": what}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except CaseTimeout:
        return {"outcome": "bad", "why": f"time limit {case.get('timeout', 20)} s"}
    except MemoryError:
        return {"outcome": "bad", "why": "memory limit", "restart": True}
    except RecursionError:
        return {"outcome": "bad", "why": "RecursionError", "trace": traceback.format_exc()[-1500:], "restart": True}
    except Exception as exc:  # noqa: BLE001 - what the property is about
        return {"outcome": "bad", "why": f"{type(exc).__name__}: {exc}"[:500], "trace": traceback.format_exc()[-1500:]}
    finally:
        os.chdir(old)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    fixtures = sys.argv[1]
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    signal.signal(signal.SIGALRM, _alarm)
    import ccl.cli  # noqa: F401 - import once, before the first case's clock starts
    import dsl  # noqa: F401

    reply = sys.stdout
    sys.stdout = sys.stderr  # stray prints never corrupt the answers
    reply.write(json.dumps({"ready": True}) + "\n")
    reply.flush()
    for line in sys.stdin:
        case = json.loads(line)
        start = time.monotonic()
        answer = run_case(case, fixtures)
        answer["seconds"] = round(time.monotonic() - start, 3)
        answer["maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        reply.write(json.dumps(answer) + "\n")
        reply.flush()
        if answer.get("restart"):
            return


if __name__ == "__main__":
    main()
