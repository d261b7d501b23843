"""``ccl.torch`` scenarios the tests run as ``launch.Call`` jobs inside real gloo process groups.

``subgroups``: data-parallel subgroups of the world (every other rank), each running a schedule
set of two entries through ``ccl.torch`` with ``async_op=True``, several calls in flight, out of
place and in place, checked against ``torch.distributed`` on the same subgroup, and each size
served by the entry for it. ``ddp``: a tiny model trained for a few steps twice, with plain DDP
and with the ``ccl.torch`` hook on many small gradient buckets: the parameters must match.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import ccl
import ccl.torch
from ccl.core.schedule_set import Entry, ScheduleSet

TIMEOUT = 20.0


def two_entry_set(kind: str, n: int, split: int) -> ScheduleSet:
    """The ring below ``split`` bytes, the ring in two chunks per part from there (both verified
    when they are lowered)."""
    small = ccl.synthesize(ccl.problem(f"ring:{n}", kind, solver="ring")).algorithm
    large = ccl.synthesize(ccl.problem(f"ring:{n}", kind, solver="ring", chunks=2)).algorithm
    return ScheduleSet(f"{kind}-{n}", small.topology, small.collective,
                       (Entry(small, 0, split, "ring"), Entry(large, split, None, "large")))


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-5)
    return torch.equal(a, b)


def subgroups(rank: int, n: int) -> dict:
    """Every other rank forms a group (ranks 0, 2, ... and 1, 3, ...)."""
    problems: list[str] = []
    groups = [dist.new_group(list(range(start, n, 2))) for start in (0, 1)]
    group = groups[rank % 2]
    size = n // 2
    me = dist.get_rank(group)
    gen = torch.Generator().manual_seed(100 + rank)

    comm = ccl.torch.executor(two_entry_set("allreduce", size, 256), group, timeout=TIMEOUT)
    # several calls in flight at once, sizes on both sides of the split (bytes: 4 x elements)
    tensors = [torch.randn(count, generator=gen) for count in (1, 13, 64, 1031, 5000)]
    expected = [t.clone() for t in tensors]
    works = [comm.all_reduce(t, async_op=True) for t in tensors]
    busy = torch.randn(200, 200, generator=gen) @ torch.randn(200, 200, generator=gen)  # overlapping compute
    if not torch.isfinite(busy).all():
        problems.append(f"rank {rank}: the computation between the calls went wrong")
    for w in works:
        if w.wait() is not True or not w.is_completed() or not w.is_success() or w.exception() is not None:
            problems.append(f"rank {rank}: a completed Work reports {w!r}")
    for t in expected:
        dist.all_reduce(t, group=group)
    for count, mine, theirs in zip((1, 13, 64, 1031, 5000), tensors, expected):
        if not _close(mine, theirs):
            problems.append(f"rank {rank}: async all_reduce of {count} elements differs from torch")
    served = sorted(comm._executors)
    if served != [0, 1]:
        problems.append(f"rank {rank}: entries run {served}, expected both")
    # the future's value, as torch's Work gives it, and a synchronous call returning None
    x = torch.arange(10, dtype=torch.int64) * (rank + 1)
    fut = comm.all_reduce(x, op=dist.ReduceOp.MAX, async_op=True).get_future()
    value = fut.wait()
    ref = torch.arange(10, dtype=torch.int64) * (rank + 1)
    dist.all_reduce(ref, op=dist.ReduceOp.MAX, group=group)
    if not (isinstance(value, list) and value[0] is x and torch.equal(x, ref)):
        problems.append(f"rank {rank}: future value {value!r} / max differs")
    if comm.all_reduce(torch.ones(3), async_op=False) is not None:
        problems.append(f"rank {rank}: a synchronous call should return None, as torch's does")

    # out of place: allgather into a tensor on the subgroup, through the module-level functions
    ccl.torch.use(two_entry_set("allgather", size, 1024), group, timeout=TIMEOUT)
    inp = torch.randn(7, 3, generator=gen)
    out = torch.empty(7 * size, 3)
    work = ccl.torch.all_gather_into_tensor(out, inp, group=group, async_op=True)
    work.wait(TIMEOUT)
    ref = torch.empty(7 * size, 3)
    dist.all_gather_into_tensor(ref, inp, group=group)
    if not _close(out, ref):
        problems.append(f"rank {rank}: all_gather_into_tensor differs from torch")
    big_in = torch.randn(600, generator=gen)
    big_out = torch.empty(600 * size)
    ccl.torch.all_gather_into_tensor(big_out, big_in, group=group)
    ref = torch.empty(600 * size)
    dist.all_gather_into_tensor(ref, big_in, group=group)
    if not _close(big_out, ref):
        problems.append(f"rank {rank}: synchronous all_gather_into_tensor differs from torch")

    # in place: the input is this rank's part of the output
    out = torch.empty(9 * size)
    out[me * 9:(me + 1) * 9] = torch.randn(9, generator=gen)
    ref = torch.empty(9 * size)
    dist.all_gather_into_tensor(ref, out[me * 9:(me + 1) * 9].clone(), group=group)
    ccl.torch.all_gather_into_tensor(out, out[me * 9:(me + 1) * 9], group=group, async_op=True).wait()
    if not _close(out, ref):
        problems.append(f"rank {rank}: in-place all_gather_into_tensor differs from torch")

    # errors: wrong collective, unregistered kind, a group the executor is not bound to
    errors = {}
    for label, call in (("kind", lambda: comm.broadcast(torch.ones(2))),
                        ("unregistered", lambda: ccl.torch.reduce_scatter_tensor(torch.ones(1), torch.ones(size),
                                                                                 group=group)),
                        ("group", lambda: comm.all_reduce(torch.ones(2), group=groups[1 - rank % 2])),
                        ("wait", lambda: comm.all_reduce(torch.ones(4, 4).t(), async_op=True).wait())):
        try:
            call()
            errors[label] = "no error"
        except ccl.InputError as exc:
            errors[label] = str(exc)
    dist.barrier()
    return {"problems": problems, "group_rank": me, "errors": errors}


def ddp(rank: int, n: int, steps: int = 3) -> dict:
    """Plain DDP and DDP with the ``ccl.torch`` hook, same initial weights and data."""
    from torch.nn.parallel import DistributedDataParallel

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                   torch.nn.ReLU(), torch.nn.Linear(32, 5))

    # small buckets: several hook calls per step, of sizes on both sides of the set's split
    plain = DistributedDataParallel(model(), bucket_cap_mb=0.002)
    ours = DistributedDataParallel(model(), bucket_cap_mb=0.002)
    comm = ccl.torch.register_comm_hook(ours, two_entry_set("allreduce", n, 2048), timeout=TIMEOUT)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (plain, ours)]
    gen = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        x, y = torch.randn(16, 12, generator=gen), torch.randn(16, 5, generator=gen)
        for m, opt in zip((plain, ours), opts):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
    diff = max((a - b).abs().max().item() for a, b in zip(plain.parameters(), ours.parameters()))
    moved = max((a - b).abs().max().item() for a, b in zip(model().parameters(), ours.module.parameters()))
    return {"max_diff": diff, "moved": moved, "entries_run": sorted(comm._executors)}


def native_entries(rank: int, n: int) -> dict:
    """Sets whose upper range is left to NCCL (a native entry, as the tuner writes where NCCL's
    pick wins): calls there run torch.distributed's own collective, calls below the schedule;
    both give torch's result."""
    from backends.torch.dropin import Native

    problems: list[str] = []
    gen = torch.Generator().manual_seed(7 + rank)
    split = 1024  # bytes: float32 tensors of 256 elements and more go to NCCL's entry
    served: dict[str, list[str]] = {}
    for kind in ("allreduce", "allgather", "broadcast"):
        ours = ccl.synthesize(ccl.problem(f"ring:{n}", kind, solver="ring")).algorithm
        sset = ScheduleSet(f"{kind}-{n}-native", ours.topology, ours.collective,
                           (Entry(ours, 0, split, "ring"),
                            Entry(None, split, None, "NCCL Ring/Simple", protocol="Simple", native="Ring")))
        comm = ccl.torch.executor(sset, timeout=TIMEOUT)
        for count in (16, 4096):  # 64 bytes (the ring) and 16 KiB (NCCL's)
            data = torch.randn(count, generator=gen)
            if kind == "allreduce":
                mine, ref = data.clone(), data.clone()
                comm.all_reduce(mine, async_op=True).wait()
                dist.all_reduce(ref)
            elif kind == "allgather":
                mine, ref = torch.empty(count * n), torch.empty(count * n)
                comm.all_gather_into_tensor(mine, data)
                dist.all_gather_into_tensor(ref, data)
            else:
                mine, ref = data.clone(), data.clone()
                comm.broadcast(mine, src=0)
                dist.broadcast(ref, src=0)
            if not _close(mine, ref):
                problems.append(f"rank {rank}: {kind} of {count} elements differs from torch")
        served[kind] = [type(comm._executors[k]).__name__ for k in sorted(comm._executors)]
        if not isinstance(comm.executor_for(4096 * 4), Native):
            problems.append(f"rank {rank}: {kind}: a size of NCCL's entry is not served by torch's collective")
    dist.barrier()
    return {"problems": problems, "served": served}
