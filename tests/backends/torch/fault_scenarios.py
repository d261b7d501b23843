"""Fault scenarios the fault tests run as ``launch.Call`` jobs inside real gloo process groups.

Each returns, per rank, what the calls did: the error class, its message and the seconds it
took (``outcome``), so the parent can check that every surviving rank failed with a clear error
within the timeout. Faults are injected where the executor posts a step's transfers
(``torch.distributed.batch_isend_irecv``): a rank exits there (killed mid-collective) or sleeps
there (stalled mid-collective). After a fault every rank destroys the process group and, when
all ranks are still alive, makes a new one and runs a correct collective on it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

import ccl
import ccl.torch


def schedule(n: int, kind: str = "allreduce", solver: str = "ring", chunks: int = 1):
    return ccl.synthesize(ccl.problem(f"ring:{n}", kind, solver=solver, chunks=chunks)).algorithm


def outcome(run: Callable[[], Any]) -> dict:
    """What ``run()`` did: the error's class and message (None: no error) and the seconds."""
    start = time.monotonic()
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - the test checks the class
        return {"error": type(exc).__name__, "message": getattr(exc, "message", str(exc)),
                "seconds": time.monotonic() - start}
    return {"error": None, "message": "", "seconds": time.monotonic() - start}


@contextlib.contextmanager
def fault(rank: int, at_post: int, action: Callable[[], None]) -> Iterator[None]:
    """On ``rank``, run ``action`` when the executor posts its ``at_post``-th batch of transfers
    (counted from 1, inside this block)."""
    real = dist.batch_isend_irecv
    count = [0]

    def posting(ops: list) -> list:
        count[0] += 1
        if dist.get_rank() == rank and count[0] == at_post:
            action()
        return real(ops)

    dist.batch_isend_irecv = posting
    try:
        yield
    finally:
        dist.batch_isend_irecv = real


def renew(rank: int, n: int, store: str) -> dict:
    """Destroy the (broken) default group, make a new one, run a correct allreduce on it."""
    out = {"destroy": outcome(dist.destroy_process_group)}
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=30))
    ex = ccl.executor(schedule(n), timeout=30.0)
    t = torch.full((10,), float(rank))
    out["new_group"] = outcome(lambda: ex(t))
    out["new_group_correct"] = bool(torch.all(t == sum(range(n))))
    return out


def mismatches(rank: int, n: int) -> dict:
    """Ranks that disagree: a different collective, a different schedule of the same one, a
    different size: every rank raises InputError from the check before the schedule, at once,
    and the group stays usable."""
    odd = n - 1
    out = {}
    ex = ccl.executor(schedule(n, "allgather" if rank == odd else "allreduce"), timeout=5.0)
    dist.barrier()  # every rank made its executor: the time measured is the call's
    out["collective"] = outcome(lambda: ex(torch.ones(6)))
    ex = ccl.executor(schedule(n, "allreduce", "recursive-halving" if rank == odd else "ring"), timeout=5.0)
    dist.barrier()
    out["schedule"] = outcome(lambda: ex(torch.ones(6)))
    ex = ccl.executor(schedule(n), timeout=5.0)
    dist.barrier()
    out["size"] = outcome(lambda: ex(torch.ones(7 if rank == odd else 6)))
    t = torch.full((6,), float(rank))
    out["after"] = outcome(lambda: ex(t))
    out["after_correct"] = bool(torch.all(t == sum(range(n))))
    return out


def unchecked_sizes(rank: int, n: int, timeout: float, store: str) -> dict:
    """``validate="never"`` and one rank with another size: the messages do not pair (their
    tags differ), so every rank times out with BackendError (instead of gloo aborting the
    receiver on a message of the wrong size); then a new group works."""
    ex = ccl.executor(schedule(n), timeout=timeout, validate="never")
    out = {"call": outcome(lambda: ex(torch.ones(7 if rank == n - 1 else 6)))}
    out["again"] = outcome(lambda: ex(torch.ones(6)))
    out.update(renew(rank, n, store))
    return out


def size_changed_on_one_rank(rank: int, n: int, timeout: float, store: str) -> dict:
    """After a validated call, one rank changes its size (it checks again, the others do not):
    every rank raises BackendError within the timeout."""
    ex = ccl.executor(schedule(n), timeout=timeout)
    ex(torch.ones(6))
    out = {"call": outcome(lambda: ex(torch.ones(7 if rank == n - 1 else 6)))}
    out.update(renew(rank, n, store))
    return out


def stalled_dropin(rank: int, n: int, timeout: float, store: str) -> dict:
    """The last rank sleeps inside an allreduce (``timeout + 1.5`` s: forever, as far as the
    others can tell: they have given up by then) made through ``ccl.torch`` with ``async_op=True`` while a second call is queued.
    The others: the first ``Work.wait()`` raises BackendError within the timeout, the queued one
    and a later synchronous call fail at once with the first error."""
    stalled = n - 1
    comm = ccl.torch.executor(schedule(n, chunks=2), timeout=timeout)
    comm.all_reduce(torch.ones(64))  # validated: the fault hits the schedule's own transfers
    out = {}
    with fault(stalled, 2, lambda: time.sleep(timeout + 1.5)):
        first = comm.all_reduce(torch.ones(64), async_op=True)
        queued = comm.all_reduce(torch.ones(64), async_op=True)
        out["first"] = outcome(first.wait)
        out["queued"] = outcome(queued.wait)
        out["queued_state"] = [queued.is_completed(), queued.is_success(), type(queued.exception()).__name__]
        out["later"] = outcome(lambda: comm.all_reduce(torch.ones(64)))
    out.update(renew(rank, n, store))
    return out


def stalled_executor(rank: int, n: int, timeout: float, store: str, where: str) -> dict:
    """The last rank stalls with ``ccl.executor``: ``where`` "inside" (in the schedule),
    "between" (before a call, after a validated one) or "first" (before the first call: the
    others wait in the check before the schedule)."""
    stalled = n - 1
    ex = ccl.executor(schedule(n), timeout=timeout)
    if where != "first":
        ex(torch.ones(30))
    out = {}
    if where == "inside":
        with fault(stalled, 2, lambda: time.sleep(timeout + 2)):
            out["call"] = outcome(lambda: ex(torch.ones(30)))
    else:
        if rank == stalled:
            time.sleep(timeout + 2)
        out["call"] = outcome(lambda: ex(torch.ones(30)))
    out["later"] = outcome(lambda: ex(torch.ones(30)))
    out.update(renew(rank, n, store))
    return out


def killed(rank: int, n: int, timeout: float) -> dict:
    """The last rank's process exits inside an allreduce; the others lose it at once. Run as the
    final call (the dead rank never reports)."""
    dying = n - 1
    ex = ccl.executor(schedule(n, chunks=2), timeout=timeout)
    ex(torch.ones(64))
    with fault(dying, 2, lambda: os._exit(3)):
        out = {"call": outcome(lambda: ex(torch.ones(64)))}
    out["later"] = outcome(lambda: ex(torch.ones(64)))
    out["destroy"] = outcome(dist.destroy_process_group)
    return out
