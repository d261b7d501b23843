"""Local process groups: start N rank processes that each run a worker function, collect what
each reports, and stop them all.

``run_group(n, jobs, worker)`` writes ``jobs`` to a private temporary folder (created by this
process, readable by its user only), starts ``n`` ranks that each call
``worker(rank, n, folder, timeout)``, and returns every rank's report. A worker reads the jobs
with ``read_jobs(folder)`` and reports with ``write_report(folder, rank, value)``: ("ok",
result) or (kind, message). Failures are clean: a rank that dies (an exit or a signal without a
report) or stalls (still running ``timeout`` + a grace period after another rank finished, or
the grace period after one failed) is named as the cause in a ``BackendError`` (an ``InputError``
for a rank's bad input), and every rank is stopped (killed) before ``run_group`` returns or
raises: no process outlives it. A rank's output goes to its log in the folder, and it ends when
the launcher ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ccl.core.errors import BackendError, InputError

Worker = Callable[[int, int, str, float], int]  # (rank, world size, folder, timeout) -> exit code


def run_group(n: int, jobs: list, worker: Worker, *, timeout: float, limit: float, grace: float = 3.0,
              preload: Sequence[str] = ()) -> list[Any]:
    """Every rank's reported result (in rank order) after running ``worker`` on ``n`` local
    processes over ``jobs``; ``limit`` bounds the whole group (seconds), ``timeout`` every wait
    inside a rank, ``grace`` how long the others may still report after one failed.

    Ranks are forked from a fork server that imported ``preload`` once (importing torch is most
    of a process's start-up), or spawned where fork servers do not exist."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(preload))
    else:
        ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="ccl-run-") as folder:
        with open(os.path.join(folder, "jobs.pkl"), "wb") as fh:
            pickle.dump(jobs, fh)
        procs = []
        try:
            with main_module_hidden():
                for r in range(n):
                    p = ctx.Process(target=rank_main, args=(r, n, folder, timeout, os.getpid(), worker),
                                    name=f"ccl-rank-{r}", daemon=True)
                    p.start()
                    procs.append(p)
            return collect(procs, folder, time.monotonic() + limit, timeout, grace)
        finally:
            for p in procs:
                if p.exitcode is None:
                    p.kill()
            for p in procs:
                p.join(10)


def read_jobs(folder: str) -> list:
    """The jobs ``run_group`` wrote (a rank reads them from its launcher's private folder)."""
    with open(os.path.join(folder, "jobs.pkl"), "rb") as fh:
        return pickle.load(fh)


def write_report(folder: str, rank: int, value: Any) -> None:
    """A rank's report, written whole (renamed into place) for ``collect`` to read."""
    tmp = os.path.join(folder, f".rank{rank}.tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(value, fh)
    os.replace(tmp, os.path.join(folder, f"rank{rank}.pkl"))


@contextlib.contextmanager
def main_module_hidden():
    """Ranks run only the worker they are given: keep multiprocessing from re-running the caller's
    main script in them (a script without an ``if __name__ == "__main__"`` guard would start
    its own ranks recursively)."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            if "__file__" not in saved:
                main.__dict__.pop("__file__", None)


def rank_main(rank: int, n: int, folder: str, timeout: float, launcher: int | None, worker: Worker) -> None:
    """A rank's process: its output goes to ``rank<r>.log``, not the caller's terminal."""
    fd = os.open(os.path.join(folder, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    die_with_launcher(launcher)
    code = worker(rank, n, folder, timeout)
    os._exit(code)  # skip interpreter teardown (gloo threads)


def die_with_launcher(launcher: int | None) -> None:
    """End this rank when the launcher (process ``launcher``) ends, so a launcher killed outright
    leaves no rank running: a thread checks every half second (a fork server outlives the
    launcher while ranks hold its pipe, so the parent's death is not the launcher's); with
    spawned ranks, the kernel's parent-death signal too (Linux)."""
    parent = os.getppid()
    if parent == launcher:
        try:
            if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) == 0:  # PR_SET_PDEATHSIG
                if os.getppid() != parent:  # ended before the signal was armed
                    os._exit(1)
        except (OSError, AttributeError):
            pass
    if launcher is None:
        return

    def gone() -> bool:
        try:
            os.kill(launcher, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:
            with open(f"/proc/{launcher}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # killed, not yet reaped
        except (OSError, IndexError):
            return False

    def watch() -> None:
        while not gone():
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="ccl-launcher-watch", daemon=True).start()


def collect(procs: list, folder: str, end: float, timeout: float = 60.0, grace: float = 3.0) -> list[list[Any]]:
    """Every rank's list of per-job results, or ``BackendError``/``InputError`` naming the rank
    that failed first.

    Every wait inside a rank is bounded by ``timeout``, so: ``grace`` seconds after the first
    failure the ranks still running are stopped (they wait for the failed one); ranks still
    running ``timeout + grace`` seconds after another rank finished are stalled and stopped. The
    error names the cause: a rank that died (exit or signal without a report) before a rank's
    own bad input, before a stalled rank, before the others' transport errors. The error's
    ``reports`` holds every rank's (kind, value): "ok", "input", "backend", "died" or
    "stalled"."""
    n = len(procs)
    reports: dict[int, tuple] = {}
    when: dict[int, float] = {}
    first_error: float | None = None
    first_report: float | None = None
    while len(reports) < n:
        for r, p in enumerate(procs):
            if r in reports or p.exitcode is None:
                continue
            path = os.path.join(folder, f"rank{r}.pkl")
            if os.path.exists(path):
                with open(path, "rb") as fh:
                    reports[r] = pickle.load(fh)
            else:
                reports[r] = ("died", f"rank {r} died ({_exit_text(p.exitcode)}) without finishing"
                              + _log_tail(folder, r))
            now = when[r] = time.monotonic()
            first_report = first_report or now
            if reports[r][0] != "ok" and first_error is None:
                first_error = now
        now = time.monotonic()
        if first_error is not None and now > first_error + grace:
            break  # the others are stuck waiting for the failed rank: stop them
        if first_report is not None and now > first_report + timeout + grace:
            break  # every wait ends within the timeout: the ranks still running are stalled
        if now > end:
            missing = sorted(set(range(n)) - set(reports))
            raise BackendError(f"the local run of {n} ranks did not finish in time; ranks {missing} were "
                               "still running and were stopped")
        if len(reports) < n:
            time.sleep(0.05)
    stalled = sorted(set(range(n)) - set(reports))
    for r in stalled:
        if first_error is None:
            done = min(when, key=when.get)
            text = (f"rank {r} stalled: it was still running {timeout + grace:g} s after rank {done} finished "
                    f"(every wait is bounded by the {timeout:g} s timeout); stopped it")
        else:
            text = (f"rank {r} stalled: it did not finish or fail within {grace:g} s of the first failure; "
                    "stopped it")
        reports[r] = ("stalled", text)
    if any(kind != "ok" for kind, _ in reports.values()):
        raise _launch_error(reports, when)
    return [reports[r][1] for r in range(n)]


def _lost_failed_peer(message: str, failed: set[int]) -> bool:
    """A rank's error says it lost a peer that failed too (``runtime``: "lost rank q")."""
    return any(int(q) in failed for q in re.findall(r"\blost rank (\d+)", message))


def _is_wait(message: str) -> bool:
    """A rank's error says it timed out waiting for a peer."""
    return any(word in message for word in ("timed out", "Timed out", "imeout", "waited "))


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _launch_error(reports: dict[int, tuple], when: dict[int, float]) -> Exception:
    """The error of a failed launch: the cause first, then what the first other rank saw. The
    cause is a rank that died; else a rank's bad input; else, when the first failure is a
    timeout (waiting for a peer; the ranks that lose it follow), a rank still running (stalled);
    else the first rank to fail."""
    def of(kind: str) -> list[tuple[int, str]]:
        return sorted(((r, v) for r, (k, v) in reports.items() if k == kind), key=lambda x: when.get(x[0], 1e300))

    died, inputs, backend, stalled = of("died"), of("input"), of("backend"), of("stalled")
    failed = {r for r, (k, _) in reports.items() if k in ("backend", "input", "died")}
    # a rank that lost a peer which reported a failure itself (it timed out and closed its
    # connections) only followed, whichever of the two reported first
    first = [x for x in backend if not _lost_failed_peer(x[1], failed)] or backend
    waited = not first or _is_wait(first[0][1])  # the first failure was a wait: others only followed
    if died:
        cause, seen = died[0], inputs + backend
    elif inputs:
        cause, seen = inputs[0], []
    elif stalled and waited:
        r = stalled[0][0]
        cause, seen = stalled[0], [x for x in backend if f"rank {r}" in x[1]] or backend
    else:
        cause, seen = backend[0], backend[1:]
    message = cause[1]
    if seen:
        q, text = seen[0]
        message += f"; {text}" if f"rank {q}" in text else f"; rank {q}: {text}"
        if len(seen) > 1:
            message += f" (and {len(seen) - 1} more rank(s) failed)"
    error: Exception = InputError(message) if cause in inputs else BackendError(message)
    error.reports = dict(sorted(reports.items()))  # type: ignore[attr-defined]
    error.failed_rank = cause[0]  # type: ignore[attr-defined]
    return error


def _log_tail(folder: str, rank: int) -> str:
    try:
        with open(os.path.join(folder, f"rank{rank}.log"), "rb") as fh:
            lines = fh.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1]}" if lines else ""
