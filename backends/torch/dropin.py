"""Drop-in collectives for training code: torch.distributed's calling conventions, including
``async_op=True``, over verified schedules, one schedule or a set picked by message size.

    import ccl.torch
    comm = ccl.torch.executor("allreduce-set.json", group=dp_group)  # a schedule or a set
    work = comm.all_reduce(grad, async_op=True)   # returns at once, like torch.distributed
    ...                                           # computation overlaps the transfers
    work.wait()
    ccl.torch.register_comm_hook(ddp_model, "allreduce-set.json")   # DDP's gradient buckets

Calls are run by one worker thread per process, in the order they were made, as a process
group runs its collectives: every rank of the group must make the same calls in the same order,
as with torch.distributed. A synchronous call waits for the calls queued before it. ``Work``
behaves like torch's: ``wait()``, ``is_completed()``, ``is_success()``, ``exception()`` and
``get_future()`` (whose value is ``[output tensor]``); ``wait()`` raises the project's
``InputError`` or ``BackendError`` when the call failed. A transport failure (a peer lost, or
stalled past ``timeout``) leaves the group unusable: the calls queued behind it and every later
call on the group fail at once with the first error (``runtime``), never hang.

A schedule set serves each call with the entry for its size in bytes, counted as
``ccl.core.report`` counts sizes (nccl-tests): the tensor for allreduce, broadcast and reduce, the
output for allgather, the input for reducescatter and alltoall; every rank of a call computes
the same size, so every rank runs the same entry. Each entry's Program is made (lowered by the
driver) and bound to the group on its first use. An entry without a Program (a set's native
entry: NCCL's own pick was faster there) runs torch.distributed's own collective on the group
(``Native``), which is NCCL on GPUs.
"""

from __future__ import annotations

import datetime
import queue
import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from ccl.core.errors import BackendError, CclError, InputError
from ccl.core.program import Program

from .executor import Executor
from .harness import native
from .runtime import ScheduleError, reduce_op_name

__all__ = ["Collectives", "Native", "Work", "allreduce_hook"]

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce")


class Work:
    """The handle of one call, like torch's ``Work``."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._done = threading.Event()
        self._error: CclError | None = None
        self._value: torch.Tensor | None = None
        self._future: torch.futures.Future = torch.futures.Future()

    def _finish(self, value: torch.Tensor | None, error: CclError | None) -> None:
        self._value, self._error = value, error
        self._done.set()
        if error is None:
            self._future.set_result([value])
        else:
            self._future.set_exception(error)

    def wait(self, timeout: float | datetime.timedelta | None = None) -> bool:
        """Block until the call is done (at most ``timeout`` seconds); raise its error."""
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or not seconds >= 0):
            raise InputError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        if not self._done.wait(seconds):
            raise BackendError(f"{self.what}: not complete after {seconds:g} s")
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        return self._done.is_set()

    def is_success(self) -> bool:
        return self._done.is_set() and self._error is None

    def exception(self) -> CclError | None:
        return self._error if self._done.is_set() else None

    def result(self) -> torch.Tensor:
        """The output tensor, once done."""
        self.wait()
        assert self._value is not None
        return self._value

    def get_future(self) -> torch.futures.Future:
        return self._future

    def __repr__(self) -> str:
        state = "pending" if not self._done.is_set() else ("failed" if self._error else "done")
        return f"Work({self.what}: {state})"


class _Worker:
    """The thread that runs this process's calls in order (made again after a fork)."""

    _lock = threading.Lock()
    _current: _Worker | None = None

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="ccl-collectives", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> _Worker:
        with cls._lock:
            if cls._current is None or not cls._current.thread.is_alive():
                cls._current = cls()
            return cls._current

    def submit(self, run: Callable[[], torch.Tensor], what: str) -> Work:
        work = Work(what)
        if threading.current_thread() is self.thread:  # a future's callback calling again
            _complete(work, run)
        else:
            self.queue.put((run, work))
        return work

    def _loop(self) -> None:
        while True:
            run, work = self.queue.get()
            _complete(work, run)


def _complete(work: Work, run: Callable[[], torch.Tensor]) -> None:
    try:
        value = run()
    except CclError as exc:
        work._finish(None, exc)
    except Exception as exc:  # noqa: BLE001 - a transport's own error, reported as ours
        work._finish(None, BackendError(f"{work.what}: {type(exc).__name__}: {exc}"))
    else:
        work._finish(value, None)


class Native:
    """torch.distributed's own collective of ``kind`` on ``group``, called as an ``Executor`` is
    (``native(input, output, op=...)``, ``broadcast``, ``reduce``): what serves the sizes a
    schedule set leaves to NCCL. ``root`` is a group rank, as a schedule's."""

    def __init__(self, kind: str, root: int | None, group: Any = None) -> None:
        self.kind, self.root, self.group = kind, root, group
        self.rank = dist.get_rank(group)
        self._spec = {"collective": kind, "root": 0 if root is None and kind in ("broadcast", "reduce") else root}

    def __repr__(self) -> str:
        return f"Native({self.kind}: torch.distributed's own collective)"

    def __call__(self, input: torch.Tensor, output: torch.Tensor, *, op: Any = "sum") -> torch.Tensor:
        try:
            name = reduce_op_name(op)
        except ScheduleError as exc:
            raise InputError(exc.message) from None
        native(self._spec, input, output, name, self.group)
        return output

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        return self(tensor, tensor)

    def reduce(self, tensor: torch.Tensor, op: Any = "sum") -> torch.Tensor:
        return self(tensor, tensor, op=op)


class Collectives:
    """One collective on one process group, served by a schedule or by a schedule set's entries
    (``entries``: (min bytes, max bytes or None, label, a function making the entry's verified
    Program, or None where the set leaves the sizes to NCCL: torch's own collective serves
    them), contiguous from 0). ``timeout`` and ``validate`` as for ``Executor``."""

    def __init__(self, name: str, kind: str, n_ranks: int, root: int | None,
                 entries: Sequence[tuple[int, int | None, str, Callable[[], Program] | None]], group: Any = None, *,
                 timeout: float | None = None, validate: str = "first") -> None:
        if kind not in KINDS:
            raise InputError(f"{name}: drop-in calls implement {', '.join(KINDS)}, not {kind}")
        if not dist.is_available() or not dist.is_initialized():
            raise InputError("torch.distributed is not initialized: call torch.distributed.init_process_group first")
        world = dist.get_world_size(group)
        if world != n_ranks:
            raise InputError(f"the schedule {name!r} is for {n_ranks} ranks but the process group has {world}")
        if not entries or entries[0][0] != 0 or entries[-1][1] is not None:
            raise InputError(f"{name}: the entries must cover every size from 0 bytes up")
        self.name, self.kind, self.n_ranks, self.root = name, kind, n_ranks, root
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = world
        self.entries = list(entries)
        self.timeout, self.validate = timeout, validate
        self._starts = [e[0] for e in self.entries]
        self._executors: dict[int, Executor | Native] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"Collectives({self.name!r}: {self.kind} on {self.n_ranks} ranks, "
                f"{len(self.entries)} schedule(s))")

    # ------------------------------------------------------------------ entries
    def entry_for(self, nbytes: int) -> int:
        """The index of the entry serving a call of ``nbytes`` bytes."""
        return max(0, bisect_right(self._starts, nbytes) - 1)

    def executor_for(self, nbytes: int) -> Executor | Native:
        """What runs a call of ``nbytes`` bytes: its entry's Executor, or torch's own collective
        (``Native``) for an entry left to NCCL."""
        index = self.entry_for(nbytes)
        with self._lock:
            ex = self._executors.get(index)
            if ex is None:
                make = self.entries[index][3]
                ex = self._executors[index] = Native(self.kind, self.root, self.group) if make is None else \
                    Executor(make(), self.group, timeout=self.timeout, validate=self.validate)
        return ex

    # ------------------------------------------------------------------ calls
    def _call(self, what: str, nbytes: int, run: Callable[[Executor | Native], torch.Tensor], async_op: bool) -> Any:
        if not isinstance(async_op, bool):
            raise InputError(f"async_op must be True or False, got {async_op!r}")
        work = _Worker.get().submit(lambda: run(self.executor_for(nbytes)), f"rank {self.rank}: {self.name} {what}")
        if async_op:
            return work
        work.wait()
        return None

    def _need(self, kind: str) -> None:
        if self.kind != kind:
            raise InputError(f"{self.name} implements {self.kind}, not {kind}")

    def _root_check(self, given: int | None, word: str) -> None:
        if given is None:
            return
        root = self.root if self.root is not None else 0
        expect = root if self.group is None else dist.get_global_rank(self.group, root)
        if given != expect:
            raise InputError(f"{self.name} has its root at group rank {root} (global rank {expect}); {word}={given} "
                             "needs a schedule synthesized for that root")

    @staticmethod
    def _tensor(t: Any, name: str) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        return t

    def all_reduce(self, tensor: torch.Tensor, op: Any = "sum", group: Any = None, async_op: bool = False) -> Any:
        """In place, like ``torch.distributed.all_reduce``; a ``Work`` with ``async_op``."""
        self._need("allreduce")
        self._same_group(group)
        t = self._tensor(tensor, "tensor")
        return self._call("all_reduce", t.numel() * t.element_size(), lambda ex: ex(t, t, op=op), async_op)

    def all_gather_into_tensor(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None,
                               async_op: bool = False) -> Any:
        self._need("allgather")
        self._same_group(group)
        out, inp = self._tensor(output_tensor, "output_tensor"), self._tensor(input_tensor, "input_tensor")
        return self._call("all_gather", out.numel() * out.element_size(), lambda ex: ex(inp, out), async_op)

    def reduce_scatter_tensor(self, output: torch.Tensor, input: torch.Tensor, op: Any = "sum", group: Any = None,
                              async_op: bool = False) -> Any:
        self._need("reducescatter")
        self._same_group(group)
        out, inp = self._tensor(output, "output"), self._tensor(input, "input")
        return self._call("reduce_scatter", inp.numel() * inp.element_size(), lambda ex: ex(inp, out, op=op),
                          async_op)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: Any = None,
                          input_split_sizes: Any = None, group: Any = None, async_op: bool = False) -> Any:
        self._need("alltoall")
        self._same_group(group)
        if output_split_sizes is not None or input_split_sizes is not None:
            raise InputError("all_to_all_single: a schedule moves equal parts; split sizes are not supported")
        out, inp = self._tensor(output, "output"), self._tensor(input, "input")
        return self._call("all_to_all", inp.numel() * inp.element_size(), lambda ex: ex(inp, out), async_op)

    def broadcast(self, tensor: torch.Tensor, src: int | None = None, group: Any = None,
                  async_op: bool = False) -> Any:
        """The root's ``tensor`` into every rank's (``src``, a global rank as in torch, must be
        the schedule's root; None takes it)."""
        self._need("broadcast")
        self._same_group(group)
        self._root_check(src, "src")
        t = self._tensor(tensor, "tensor")
        return self._call("broadcast", t.numel() * t.element_size(), lambda ex: ex.broadcast(t), async_op)

    def reduce(self, tensor: torch.Tensor, dst: int | None = None, op: Any = "sum", group: Any = None,
               async_op: bool = False) -> Any:
        self._need("reduce")
        self._same_group(group)
        self._root_check(dst, "dst")
        t = self._tensor(tensor, "tensor")
        return self._call("reduce", t.numel() * t.element_size(), lambda ex: ex.reduce(t, op=op), async_op)

    def _same_group(self, group: Any) -> None:
        if group is not None and group is not self.group:
            raise InputError(f"{self.name} is bound to another process group; make one executor per group")


def allreduce_hook(state, bucket):  # noqa: ANN001, ANN201 - DDP refuses other annotations than its own
    """A DDP communication hook (``model.register_comm_hook(state, allreduce_hook)``, ``state`` a
    ``Collectives`` for an allreduce on DDP's group): the gradient bucket averaged over the
    group by the schedule's allreduce, asynchronously, as DDP's default hook does with
    ``torch.distributed.all_reduce``; returns a future of the bucket's tensor."""
    tensor = bucket.buffer()
    tensor.div_(state.world_size)
    work = state.all_reduce(tensor, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
