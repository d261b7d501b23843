"""Local runs: spawn N gloo processes, run a schedule, check it, time it against torch.

``run_jobs(n, jobs)`` runs a batch of jobs in one spawned process group (process start-up is
the expensive part, so tests and benchmarks batch many checks per group); ``run_local`` is the
one-schedule form behind ``ccl run``, ``run_local_sizes`` its sweep (every size in one launch). Every rank checks its output against torch's own
collective on the same random data (bit for bit for integers, to a tolerance for floats), then
the two are timed in alternation, iteration by iteration, after a barrier each; an iteration's
time is the slowest rank's.

Failures are clean: a job that raises reports the rank and the error; the process group
(``processes.run_group``) names a rank that dies or stalls as the cause, and stops every rank
before ``run_jobs`` returns or raises.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ccl.core.errors import InputError
from ccl.core.program import Program
from ccl.core.report import bus_factor

from . import require_torch
from .plain import to_plain
from .processes import read_jobs, run_group, write_report


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
    label: str = ""


@dataclass(frozen=True)
class Call:
    """Run a function on every rank of the group: ``target`` is "module:function" or
    "path/file.py:function", called as ``function(rank, world_size, *args)``; its return
    values (one per rank) are the result. ``final``: the rank stops right after it (use it for
    calls that break the group on purpose, a timeout or a rank that exits)."""

    target: str
    args: tuple = ()
    final: bool = False
    label: str = ""


@dataclass(frozen=True)
class JobResult:
    correct: bool | None
    max_error: float
    ours: tuple[float, ...]  # seconds per timed iteration (slowest rank)
    native: tuple[float, ...]
    wrong_ranks: tuple[int, ...] = ()
    reference: str = "torch"  # or "definition" where torch has no collective for the dtype/op


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
    emulated: str = ""  # what the run emulated (switch ops on point-to-point messages), "" for nothing

    @property
    def ratio(self) -> float | None:
        if not self.ours_seconds or not self.native_seconds:
            return None
        return self.ours_seconds / self.native_seconds

    def bandwidth(self, seconds: float | None) -> tuple[float | None, float | None]:
        """(algbw, busbw) in GB/s, nccl-tests definitions."""
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
            **({"emulated": self.emulated} if self.emulated else {}),
        }


# ---------------------------------------------------------------------- the worker
def worker(rank: int, n: int, folder: str, timeout: float) -> int:
    """One rank (a child process): run every job in ``folder/jobs.pkl``; write
    ``folder/rank<r>.pkl`` with ("ok", [per-job results]) or (kind, message)."""
    def report(value: Any) -> None:
        write_report(folder, rank, value)

    try:
        # torch, and the modules that import it, load in the rank (the launcher never needs them)
        import torch
        import torch.distributed as dist

        from . import harness as rt
        from . import runtime

        jobs = read_jobs(folder)
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(folder, 'store')}", rank=rank,
                                world_size=n, timeout=datetime.timedelta(seconds=timeout))
        out: list[Any] = []
        for i, job in enumerate(jobs):
            try:
                if isinstance(job, Call):
                    out.append(_load(job.target)(rank, n, *job.args))
                    if job.final:
                        report(("ok", out))
                        os._exit(0)  # the group is broken on purpose: do not tear it down
                    continue
                out.append(_run_job(rank, n, job, timeout, rt, torch, dist))
            except runtime.ScheduleError as exc:
                if job.label or len(jobs) > 1:
                    exc.message = f"{job.label or f'job {i}'}: {exc.message}"
                raise
            except Exception as exc:  # noqa: BLE001 - named by its job, reported below
                where = f"{job.label or f'job {i}'}: " if job.label or len(jobs) > 1 else ""
                text = runtime.first_line(exc)
                if runtime.is_timeout(text):  # e.g. in torch's own collective, run for comparison
                    where += f"timed out after {timeout:g} s waiting for a peer (peer lost or stalled): "
                raise runtime.ScheduleError(f"rank {rank}: {where}{type(exc).__name__}: {text}") from exc
        report(("ok", out))
        dist.destroy_process_group()
        return 0
    except Exception as exc:  # noqa: BLE001 - everything goes back to the parent as text
        kind = getattr(exc, "kind", None) or "backend"
        message = getattr(exc, "message", None) or f"rank {rank}: {type(exc).__name__}: {exc}"
        report((kind, message))
        return 1


def _load(target: str) -> Any:
    where, _, name = target.rpartition(":")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _run_job(rank: int, n: int, job: Job, timeout: float, rt: Any, torch: Any, dist: Any) -> dict:
    spec = job.spec
    dtype = getattr(torch, job.dtype)

    from .runtime import ScheduleRunner  # imports torch: loaded in the rank

    runner = ScheduleRunner(spec, timeout=timeout)
    data, blank = rt.make_tensors(spec, rank, job.unit, dtype, seed=job.seed)

    def fresh() -> tuple[Any, Any]:
        if job.in_place:
            return rt.in_place_tensors(spec, rank, job.unit, data)
        return data.clone(), blank.clone()

    result: dict[str, Any] = {"correct": None, "max_error": 0.0, "ours": [], "native": [], "reference": "torch"}
    if job.check:
        inp, out = fresh()
        original = data.clone()
        runner.run(inp, out, job.op)
        want = torch.full_like(blank, 7) if blank.numel() else blank.clone()
        result["reference"] = rt.reference(spec, original.clone(), want, job.op)
        ok, err = rt.compare(out, want, n)
        if not job.in_place and not torch.equal(inp, original):
            ok, err = False, float("inf")  # the caller's input was written
        result["correct"], result["max_error"] = ok, err
    if job.repeat:
        nin, nout = data.clone(), blank.clone()
        native = (lambda: rt.native(spec, nin, nout, job.op)) if spec["collective"] in rt.KINDS_WITH_NATIVE \
            and job.native and result["reference"] == "torch" else None
        for it in range(job.warmup + job.repeat):
            inp, out = fresh()
            t_ours = rt.timed(lambda inp=inp, out=out: runner.run(inp, out, job.op))
            t_native = rt.timed(native) if native is not None else 0.0
            if it >= job.warmup:
                result["ours"].append(t_ours)
                result["native"].append(t_native)
    return result


def _combine(jobs: list, per_rank: list[list[Any]], n: int) -> list[Any]:
    """Per job: a JobResult over all ranks, or for a Call the tuple of its per-rank values."""
    out: list[Any] = []
    for j, job in enumerate(jobs):
        rows = [per_rank[r][j] if j < len(per_rank[r]) else None for r in range(n)]
        if isinstance(job, Call):
            out.append(tuple(rows))
            continue
        checked = [row["correct"] for row in rows]
        correct = None if any(c is None for c in checked) else all(checked)
        ours = tuple(max(row["ours"][i] for row in rows) for i in range(len(rows[0]["ours"])))
        native = tuple(max(row["native"][i] for row in rows) for i in range(len(rows[0]["native"])))
        wrong = tuple(r for r, c in enumerate(checked) if c is False)
        out.append(JobResult(correct, max(row["max_error"] for row in rows), ours, native, wrong,
                             rows[0]["reference"]))
    return out


# ---------------------------------------------------------------------- the parent
def run_jobs(n: int, jobs: list, *, timeout: float = 60.0, deadline: float | None = None,
             grace: float = 3.0) -> list[Any]:
    """Run ``jobs`` (``Job`` or ``Call``) on ``n`` local gloo processes, in order; returns a
    ``JobResult`` per Job and a tuple of per-rank values per Call. ``timeout`` bounds every wait
    inside a rank, ``deadline`` (seconds, default generous) the whole group; ``grace`` is how
    long the other ranks may still report after one failed (then they are stopped). A rank that
    fails, dies or stalls raises ``BackendError`` (``InputError`` for a rank's bad input) naming
    it; every rank is stopped before this returns or raises (``processes.run_group``)."""
    if n < 1:
        raise InputError(f"need at least 1 rank, got {n}")
    limit = deadline if deadline is not None else 120.0 + 10.0 * n + sum(
        timeout + 5.0 * (1 + getattr(j, "repeat", 0) + getattr(j, "warmup", 0)) for j in jobs)
    per_rank = run_group(n, jobs, worker, timeout=timeout, limit=limit, grace=grace,
                         preload=("torch", "torch.distributed", "backends.torch.runtime", "backends.torch.harness",
                                  __name__))
    return _combine(jobs, per_rank, n)


def run_local(program: Program, *, size: int, ranks: int | None = None, repeat: int = 5, warmup: int = 1,
              dtype: str = "float32", op: str = "sum", in_place: bool = False, timeout: float = 60.0,
              check: bool = True) -> RunReport:
    """Run a Program on local gloo processes: check it against torch's collective on random
    data and time both. ``size`` is in bytes, counted as nccl-tests does (the largest buffer of
    any rank)."""
    [report] = run_local_sizes([program], [size], ranks=ranks, repeat=repeat, warmup=warmup, dtype=dtype, op=op,
                               in_place=in_place, timeout=timeout, check=check)
    return report


def run_local_sizes(programs: Sequence[Program], sizes: Sequence[int], *, ranks: int | None = None,
                    repeat: int = 5, warmup: int = 1, dtype: str = "float32", op: str = "sum",
                    in_place: bool = False, timeout: float = 60.0, check: bool = True) -> list[RunReport]:
    """``run_local`` at several sizes in one launch of processes: ``programs[i]`` is checked
    and timed at ``sizes[i]`` (the same Program may serve several sizes), in order; one
    RunReport per size. Every Program must be for the same number of ranks."""
    if len(programs) != len(sizes) or not sizes:
        raise InputError(f"need one program per size, got {len(programs)} programs for {len(sizes)} sizes")
    specs: dict[int, dict] = {}  # one plain spec per distinct Program (jobs share it: pickled once)
    for program in programs:
        if id(program) not in specs:
            specs[id(program)] = to_plain(program)
    first = specs[id(programs[0])]
    n = first["n_ranks"]
    for spec in specs.values():
        if spec["n_ranks"] != n:
            raise InputError(f"the schedules {first['name']!r} and {spec['name']!r} are for {n} and "
                             f"{spec['n_ranks']} ranks: one launch runs one number of ranks")
    if ranks is not None and ranks != n:
        raise InputError(f"the schedule {first['name']!r} is for {n} ranks, not {ranks}")

    require_torch()
    # torch and the modules that import it load only when a run starts (`ccl.torch` and the
    # driver import this module without torch)
    import torch

    from .harness import base_slots, unit_for_size
    from .runtime import ScheduleError, reduce_op_name

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise InputError(f"unknown dtype {dtype!r} (torch dtype names: float32, bfloat16, int64, ...)")
    try:
        op = reduce_op_name(op)
    except ScheduleError as exc:
        raise InputError(exc.message) from None
    if repeat < 0 or warmup < 0:
        raise InputError("repeat and warmup must not be negative")
    jobs = []
    for program, size in zip(programs, sizes):
        spec = specs[id(program)]
        jobs.append(Job(spec, unit_for_size(spec, size, torch_dtype), dtype, op, in_place, repeat, warmup, check,
                        label=f"{spec['name']} at {size} bytes" if len(sizes) > 1 else ""))
    results = run_jobs(n, jobs, timeout=timeout)
    esize = torch.empty((), dtype=torch_dtype).element_size()
    return [RunReport(
        name=job.spec["name"], collective=job.spec["collective"], ranks=n, dtype=dtype, op=op, in_place=in_place,
        elements_per_part=job.unit, size_bytes=job.unit * base_slots(job.spec) * esize, repeat=repeat,
        correct=result.correct, max_error=result.max_error,
        ours_seconds=statistics.median(result.ours) if result.ours else None,
        native_seconds=statistics.median(result.native) if result.native and any(result.native) else None,
        ours_iterations=result.ours, native_iterations=result.native, emulated=_emulated(job.spec),
    ) for job, result in zip(jobs, results)]


def _emulated(spec: dict) -> str:
    """What a run of ``spec`` emulates, in words ("" for nothing)."""
    emulated = spec.get("emulated")
    return "" if not emulated else f"{emulated['switch_ops']} switch ops: {emulated['how']}"
