"""Local runs: spawn N gloo processes, run a schedule, check it, time it against torch.

``run_jobs(n, jobs)`` runs a batch of jobs in one spawned process group (process start-up is
the expensive part, so tests and benchmarks batch many checks per group); ``run_local`` is the
one-schedule form behind ``ccl run``. Every rank checks its output against torch's own
collective on the same random data (bit for bit for integers, to a tolerance for floats), then
the two are timed in alternation, iteration by iteration, after a barrier each; an iteration's
time is the slowest rank's.

Failures are clean: a job that raises reports the rank and the error; a rank that dies, or a
group that does not finish within its deadline, is stopped and reported as ``BackendError``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from ccl.errors import BackendError, InputError


@dataclass(frozen=True)
class Job:
    """One schedule run: ``unit`` elements per base slot, ``repeat`` timed iterations (0: only
    the check)."""

    spec: dict
    unit: int
    dtype: str = "float32"
    op: str = "sum"
    in_place: bool = False
    repeat: int = 0
    warmup: int = 0
    check: bool = True
    native: bool = True
    seed: int = 0


@dataclass(frozen=True)
class JobResult:
    correct: bool | None
    max_error: float
    ours: tuple[float, ...]  # seconds per timed iteration (slowest rank)
    native: tuple[float, ...]
    wrong_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunReport:
    """What ``ccl run`` reports (times are medians over the timed iterations)."""

    name: str
    collective: str
    ranks: int
    dtype: str
    op: str
    in_place: bool
    elements_per_part: int
    size_bytes: int
    repeat: int
    correct: bool | None
    max_error: float
    ours_seconds: float | None
    native_seconds: float | None
    ours_iterations: tuple[float, ...] = field(default=())
    native_iterations: tuple[float, ...] = field(default=())

    @property
    def ratio(self) -> float | None:
        if not self.ours_seconds or not self.native_seconds:
            return None
        return self.ours_seconds / self.native_seconds

    def bandwidth(self, seconds: float | None) -> tuple[float | None, float | None]:
        """(algbw, busbw) in GB/s, nccl-tests definitions."""
        from .runtime import bus_factor

        if not seconds:
            return None, None
        algbw = self.size_bytes / seconds / 1e9
        return algbw, algbw * bus_factor(self.collective, self.ranks)

    def to_json(self) -> dict[str, Any]:
        algbw, busbw = self.bandwidth(self.ours_seconds)
        nalgbw, nbusbw = self.bandwidth(self.native_seconds)
        return {
            "name": self.name, "collective": self.collective, "ranks": self.ranks, "dtype": self.dtype,
            "op": self.op, "in_place": self.in_place, "elements_per_part": self.elements_per_part,
            "size_bytes": self.size_bytes, "repeat": self.repeat, "correct": self.correct,
            "max_error": self.max_error, "ours_seconds": self.ours_seconds, "native_seconds": self.native_seconds,
            "ratio": self.ratio, "algbw_GBps": algbw, "busbw_GBps": busbw, "native_algbw_GBps": nalgbw,
            "native_busbw_GBps": nbusbw,
            "ours_iterations": list(self.ours_iterations), "native_iterations": list(self.native_iterations),
        }


# ---------------------------------------------------------------------- the worker
def _worker(rank: int, n: int, folder: str, timeout: float) -> int:
    """One rank (a child process): run every job in ``folder/jobs.pkl``; write
    ``folder/rank<r>.pkl`` with ("ok", [per-job results]) or (kind, message)."""
    import pickle

    def report(value: Any) -> None:
        tmp = os.path.join(folder, f".rank{rank}.tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(value, fh)
        os.replace(tmp, os.path.join(folder, f"rank{rank}.pkl"))

    try:
        import datetime

        import torch
        import torch.distributed as dist

        from . import runtime as rt

        with open(os.path.join(folder, "jobs.pkl"), "rb") as fh:
            jobs = pickle.load(fh)
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(folder, 'store')}", rank=rank,
                                world_size=n, timeout=datetime.timedelta(seconds=timeout))
        out = [_run_job(rank, n, job, timeout, rt, torch, dist) for job in jobs]
        gathered: list[Any] = [None] * n
        dist.all_gather_object(gathered, out)
        report(("ok", _combine(gathered, n) if rank == 0 else None))
        dist.destroy_process_group()
        return 0
    except Exception as exc:  # noqa: BLE001 - everything goes back to the parent as text
        kind = getattr(exc, "kind", None) or "backend"
        message = getattr(exc, "message", None) or f"rank {rank}: {type(exc).__name__}: {exc}"
        report((kind, message))
        return 1


def _run_job(rank: int, n: int, job: Job, timeout: float, rt: Any, torch: Any, dist: Any) -> dict:
    spec = job.spec
    dtype = getattr(torch, job.dtype)
    runner = rt.ScheduleRunner(spec, timeout=timeout)
    data, blank = rt.make_tensors(spec, rank, job.unit, dtype, seed=job.seed)

    def fresh() -> tuple[Any, Any]:
        if job.in_place:
            return rt.in_place_tensors(spec, rank, job.unit, data)
        return data.clone(), blank.clone()

    result: dict[str, Any] = {"correct": None, "max_error": 0.0, "ours": [], "native": []}
    if job.check:
        inp, out = fresh()
        original = data.clone()
        runner.run(inp, out, job.op)
        want = torch.full_like(blank, 7) if blank.numel() else blank.clone()
        rt.reference(spec, original.clone(), want, job.op)
        ok, err = rt.compare(out, want, n)
        if not job.in_place and not torch.equal(inp, original):
            ok, err = False, float("inf")  # the caller's input was written
        result["correct"], result["max_error"] = ok, err
    if job.repeat:
        nin, nout = data.clone(), blank.clone()
        native = (lambda: rt.native(spec, nin, nout, job.op)) if spec["collective"] in rt.KINDS_WITH_NATIVE \
            and job.native else None
        for it in range(job.warmup + job.repeat):
            inp, out = fresh()
            t_ours = rt.timed(lambda inp=inp, out=out: runner.run(inp, out, job.op))
            t_native = rt.timed(native) if native is not None else 0.0
            if it >= job.warmup:
                result["ours"].append(t_ours)
                result["native"].append(t_native)
    return result


def _combine(per_rank: list[list[dict]], n: int) -> list[JobResult]:
    out = []
    for j in range(len(per_rank[0])):
        rows = [per_rank[r][j] for r in range(n)]
        checked = [row["correct"] for row in rows]
        correct = None if any(c is None for c in checked) else all(checked)
        ours = tuple(max(row["ours"][i] for row in rows) for i in range(len(rows[0]["ours"])))
        native = tuple(max(row["native"][i] for row in rows) for i in range(len(rows[0]["native"])))
        wrong = tuple(r for r, c in enumerate(checked) if c is False)
        out.append(JobResult(correct, max(row["max_error"] for row in rows), ours, native, wrong))
    return out


# ---------------------------------------------------------------------- the parent
def run_jobs(n: int, jobs: list[Job], *, timeout: float = 60.0, deadline: float | None = None) -> list[JobResult]:
    """Run ``jobs`` on ``n`` local gloo processes (fresh interpreters); ``timeout`` bounds every
    wait inside a rank, ``deadline`` (seconds, default generous) the whole group."""
    import pickle
    import subprocess
    import sys

    if n < 1:
        raise InputError(f"need at least 1 rank, got {n}")
    limit = deadline if deadline is not None else 120.0 + 10.0 * n + sum(
        timeout + 5.0 * (1 + j.repeat + j.warmup) for j in jobs)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="ccl-run-") as folder:
        with open(os.path.join(folder, "jobs.pkl"), "wb") as fh:
            pickle.dump(jobs, fh)
        procs = []
        try:
            for r in range(n):
                log = open(os.path.join(folder, f"rank{r}.log"), "wb")  # noqa: SIM115 - closed below
                procs.append((subprocess.Popen(
                    [sys.executable, "-m", "backends.torch.launch", str(r), str(n), folder, repr(timeout)],
                    stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder), log))
            return _collect(procs, folder, time.monotonic() + limit)
        finally:
            for p, log in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
                log.close()


def _collect(procs: list, folder: str, end: float) -> list[JobResult]:
    import pickle

    n = len(procs)
    reports: dict[int, tuple] = {}
    first_error: float | None = None
    while len(reports) < n:
        for r, (p, _log) in enumerate(procs):
            if r in reports or p.poll() is None:
                continue
            path = os.path.join(folder, f"rank{r}.pkl")
            if os.path.exists(path):
                with open(path, "rb") as fh:
                    reports[r] = pickle.load(fh)
            else:
                reports[r] = ("backend", f"rank {r} exited with code {p.returncode} without a report"
                              + _log_tail(folder, r))
            if reports[r][0] != "ok" and first_error is None:
                first_error = time.monotonic()
        now = time.monotonic()
        if first_error is not None and now > first_error + 3.0:
            break  # the others are stuck waiting for the failed rank: stop them
        if now > end:
            missing = sorted(set(range(n)) - set(reports))
            raise BackendError(f"the local run of {n} ranks did not finish in time; ranks {missing} were "
                               "still running and were stopped")
        if len(reports) < n:
            time.sleep(0.05)
    errors = sorted((r, kind, message) for r, (kind, message) in reports.items() if kind != "ok")
    if errors:
        inputs = [e for e in errors if e[1] == "input"]
        _r, kind, message = (inputs or errors)[0]
        raise InputError(message) if kind == "input" else BackendError(message)
    return reports[0][1]


def _log_tail(folder: str, rank: int) -> str:
    try:
        with open(os.path.join(folder, f"rank{rank}.log"), "rb") as fh:
            lines = fh.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1]}" if lines else ""


def run_local(schedule: Any, *, size: int, ranks: int | None = None, repeat: int = 5, warmup: int = 1,
              dtype: str = "float32", op: str = "sum", in_place: bool = False, timeout: float = 60.0,
              check: bool = True) -> RunReport:
    """Run a schedule (Algorithm, Program or file) on local gloo processes: check it against
    torch's collective on random data and time both. ``size`` is in bytes, counted as
    nccl-tests does (the largest buffer of any rank)."""
    import torch

    from ccl.serialize import load_algorithm

    from .runtime import ScheduleError, base_slots, reduce_op_name, unit_for_size
    from .spec import as_program, to_spec

    if isinstance(schedule, (str, os.PathLike)):
        schedule = load_algorithm(schedule)
    spec = to_spec(as_program(schedule))
    n = spec["n_ranks"]
    if ranks is not None and ranks != n:
        raise InputError(f"the schedule {spec['name']!r} is for {n} ranks, not {ranks}")
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise InputError(f"unknown dtype {dtype!r} (torch dtype names: float32, bfloat16, int64, ...)")
    try:
        op = reduce_op_name(op)
    except ScheduleError as exc:
        raise InputError(exc.message) from None
    if repeat < 0 or warmup < 0:
        raise InputError("repeat and warmup must not be negative")
    unit = unit_for_size(spec, size, torch_dtype)
    [result] = run_jobs(n, [Job(spec, unit, dtype, op, in_place, repeat, warmup, check)], timeout=timeout)
    esize = torch.empty((), dtype=torch_dtype).element_size()
    return RunReport(
        name=spec["name"], collective=spec["collective"], ranks=n, dtype=dtype, op=op, in_place=in_place,
        elements_per_part=unit, size_bytes=unit * base_slots(spec) * esize, repeat=repeat,
        correct=result.correct, max_error=result.max_error,
        ours_seconds=statistics.median(result.ours) if result.ours else None,
        native_seconds=statistics.median(result.native) if result.native and any(result.native) else None,
        ours_iterations=result.ours, native_iterations=result.native,
    )


if __name__ == "__main__":
    import sys

    from backends.torch.launch import _worker as worker  # the importable module, so pickles name it

    _rank, _n, _folder, _timeout = sys.argv[1:5]
    sys.exit(worker(int(_rank), int(_n), _folder, float(_timeout)))
