"""The project's collectives inside a training job, as torch.distributed calls them. Loaded on
first use (``import ccl`` does not import torch; ``ccl.torch`` or ``import ccl.torch`` does).

    import ccl.torch
    comm = ccl.torch.executor("allreduce-set.json", group=dp_group)  # a schedule or a set
    work = comm.all_reduce(grad, async_op=True)     # returns at once; transfers overlap compute
    work.wait()
    ccl.torch.register_comm_hook(ddp_model, "allreduce-set.json")    # DDP's gradient buckets

or, torch.distributed's module-level style, over schedules registered per group with ``use``:

    ccl.torch.use("allreduce-set.json", group=dp_group)
    ccl.torch.all_reduce(grad, group=dp_group, async_op=True)

A schedule is a file (``ccl synthesize`` JSON, a schedule set, MSCCL XML), an Algorithm, a
SynthesisResult, a Program or a ScheduleSet; a set serves each call with the entry for its size.
Every schedule is verified, lowered and verified again before it runs
(``ccl.compiler.collectives``); see ``backends.torch.dropin`` for the call semantics (one
worker thread per process runs the calls in order; ``Work`` is like torch's). Like the CLI,
this module is a driver: it reaches the backends (DESIGN.md's dependency rule, tests/test_imports.py).
"""

from __future__ import annotations

from typing import Any

from .compiler.runtimes import collectives
from .core import validate
from .core.errors import InputError

# also, loaded with torch on first use: Collectives, Work, allreduce_hook (backends.torch.dropin)
__all__ = ["all_gather_into_tensor", "all_reduce", "all_to_all_single", "broadcast", "executor", "reduce",
           "reduce_scatter_tensor", "register_comm_hook", "registered", "use"]

_REGISTERED: list[tuple[str, Any, Any]] = []  # (kind, group, Collectives)


def executor(schedule: Any, group: Any = None, **options: Any) -> Any:
    """A ``Collectives`` for ``schedule`` on ``group`` (None: the default group). Options:
    ``timeout`` (seconds per wait), ``validate`` ("first", "always", "never"), the lowering's
    ``channels`` and ``fuse``, and ``topology`` for an XML file."""
    validate.options(options, ("channels", "fuse", "timeout", "validate", "topology"), "ccl.torch.executor")
    return collectives(schedule, group, **options)


def use(schedule: Any, group: Any = None, **options: Any) -> Any:
    """Make ``schedule`` the one this module's functions run for its collective on ``group``
    (replacing an earlier one); returns its ``Collectives``."""
    comm = executor(schedule, group, **options)
    _REGISTERED[:] = [(k, g, c) for k, g, c in _REGISTERED if not (k == comm.kind and g is group)]
    _REGISTERED.append((comm.kind, group, comm))
    return comm


def registered(kind: str, group: Any = None) -> Any:
    """The ``Collectives`` ``use`` registered for ``kind`` on ``group``."""
    for k, g, c in _REGISTERED:
        if k == kind and g is group:
            return c

    where = "the default group" if group is None else "this process group"
    raise InputError(f"no {kind} schedule registered for {where}: call ccl.torch.use(schedule, group) first")


def all_reduce(tensor: Any, op: Any = "sum", group: Any = None, async_op: bool = False) -> Any:
    return registered("allreduce", group).all_reduce(tensor, op, async_op=async_op)


def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, group: Any = None, async_op: bool = False) -> Any:
    return registered("allgather", group).all_gather_into_tensor(output_tensor, input_tensor, async_op=async_op)


def reduce_scatter_tensor(output: Any, input: Any, op: Any = "sum", group: Any = None, async_op: bool = False) -> Any:
    return registered("reducescatter", group).reduce_scatter_tensor(output, input, op, async_op=async_op)


def all_to_all_single(output: Any, input: Any, output_split_sizes: Any = None, input_split_sizes: Any = None,
                      group: Any = None, async_op: bool = False) -> Any:
    return registered("alltoall", group).all_to_all_single(output, input, output_split_sizes, input_split_sizes,
                                                           async_op=async_op)


def broadcast(tensor: Any, src: int | None = None, group: Any = None, async_op: bool = False) -> Any:
    return registered("broadcast", group).broadcast(tensor, src, async_op=async_op)


def reduce(tensor: Any, dst: int | None = None, op: Any = "sum", group: Any = None, async_op: bool = False) -> Any:
    return registered("reduce", group).reduce(tensor, dst, op, async_op=async_op)


def register_comm_hook(model: Any, schedule: Any, group: Any = None, **options: Any) -> Any:
    """Run ``model``'s (a ``DistributedDataParallel``) gradient allreduce through ``schedule``
    (an allreduce schedule or set for ``group``, by default the model's process group):
    ``model.register_comm_hook(state, allreduce_hook)``. Returns the ``Collectives``."""
    if not hasattr(model, "register_comm_hook"):
        raise InputError(f"register_comm_hook needs a DistributedDataParallel model, got {type(model).__name__}")
    if group is None:
        group = getattr(model, "process_group", None)
        import torch.distributed as dist

        if group is not None and group is dist.group.WORLD:
            group = None
    from backends.torch.dropin import Collectives, allreduce_hook

    comm = schedule if isinstance(schedule, Collectives) else executor(schedule, group, **options)
    if comm.kind != "allreduce":
        raise InputError(f"a DDP hook needs an allreduce schedule, not {comm.kind}")
    model.register_comm_hook(comm, allreduce_hook)
    return comm


def __getattr__(name: str) -> Any:
    if name in ("Collectives", "Work", "allreduce_hook"):
        from backends.torch import dropin

        return getattr(dropin, name)
    raise AttributeError(f"module 'ccl.torch' has no attribute {name!r}")
