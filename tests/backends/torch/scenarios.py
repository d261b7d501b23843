"""Executor scenarios the tests run as ``launch.Call`` jobs inside real gloo process groups.

``api``: torch's calling conventions against torch's own collectives, on executors made every
way there is (``ccl.executor`` from a schedule file, an Algorithm, a SynthesisResult or a
Program; ``backends.torch.Executor`` from a Program the driver lowered). ``mismatches``: a
schedule for another world size, ranks disagreeing on dtype, size or schedule (the group stays
usable). ``absent``: a peer that never calls (the others time out; gloo closes the connections,
so it ends the group). ``dies``: a peer process that exits (ends the group).
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

import ccl
from backends.torch import Executor
from ccl import BackendError, InputError, compiler

TIMEOUT = 3.0


def schedule(topology: str, kind: str, solver: str, chunks: int = 1, root: int | None = None):
    return ccl.synthesize(ccl.problem(topology, kind, solver=solver, chunks=chunks, root=root)).algorithm


def api(rank: int, n: int, folder: str) -> list[str]:
    """The torch calling conventions, compared with torch.distributed on the same data."""
    problems: list[str] = []

    def expect(what: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        if ours.dtype.is_floating_point:
            ok = torch.allclose(ours.double(), theirs.double(), rtol=1e-4, atol=1e-4)
        else:
            ok = torch.equal(ours, theirs)
        if not ok or ours.shape != theirs.shape:
            problems.append(f"rank {rank}: {what}: {ours.tolist()} != {theirs.tolist()}")

    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(2, 5, generator=gen)  # 10 elements, 2-D

    ar = ccl.synthesize(ccl.problem(f"ring:{n}", "allreduce", solver="ring")).algorithm
    path = os.path.join(folder, "allreduce.json")
    if rank == 0:
        ccl.save(ar, path)
    dist.barrier()
    allreduce = ccl.executor(path, timeout=TIMEOUT)
    mine, theirs = x.clone(), x.clone()
    allreduce.all_reduce(mine)
    dist.all_reduce(theirs)
    expect("all_reduce in place", mine, theirs)
    for op, red in (("max", dist.ReduceOp.MAX), (dist.ReduceOp.MIN, dist.ReduceOp.MIN), ("avg", dist.ReduceOp.AVG)):
        mine, theirs = x.clone(), x.clone()
        allreduce(mine, op=op)
        dist.all_reduce(theirs, op=red)
        expect(f"allreduce {op}", mine, theirs)
    ints = torch.arange(7, dtype=torch.int64) * (rank + 1)
    out = torch.empty_like(ints)
    allreduce(ints, out, op="bxor")
    theirs = ints.clone()
    dist.all_reduce(theirs, op=dist.ReduceOp.BXOR)
    expect("allreduce bxor out of place", out, theirs)
    expect("allreduce leaves its input alone", ints, torch.arange(7, dtype=torch.int64) * (rank + 1))

    ag = ccl.executor(schedule(f"ring:{n}", "allgather", "recursive-doubling"), timeout=TIMEOUT)
    gathered = ag(x)  # output allocated: (n * 2, 5)
    theirs = torch.empty(2 * n, 5)
    dist.all_gather_single(theirs, x)
    expect("allgather with an allocated output", gathered, theirs)
    buf = torch.zeros(n * 10)
    buf[rank * 10:(rank + 1) * 10] = x.view(-1)
    ag.all_gather_single(buf, buf[rank * 10:(rank + 1) * 10])  # in place
    expect("all_gather_single in place", buf, theirs.view(-1))

    # the backend's own entry: a Program the driver lowered (pieces as separate messages on 2 channels)
    rs_program = compiler.program(schedule(f"ring:{n}", "reducescatter", "ring", chunks=2), fuse=False, channels=2)
    rs = Executor(rs_program, timeout=TIMEOUT)
    if rs.program is not rs_program:
        problems.append("the Executor does not run the Program it was given")
    big = torch.randn(n * 3, generator=gen)
    part, theirs = torch.empty(3), torch.empty(3)
    rs.reduce_scatter_single(part, big)
    dist.reduce_scatter_single(theirs, big.clone())
    expect("reduce_scatter_single", part, theirs)

    a2a = ccl.executor(ccl.synthesize(ccl.problem(f"ring:{n}", "alltoall", solver="direct")), timeout=TIMEOUT)
    src = torch.arange(n * 2, dtype=torch.int32) + 100 * rank
    mine, theirs = torch.empty_like(src), torch.empty_like(src)
    a2a.all_to_all_single(mine, src)
    dist.all_to_all_single(theirs, src)
    expect("all_to_all_single", mine, theirs)
    same = src.clone()
    a2a.all_to_all_single(same, same)  # one tensor for both: runs on a private copy
    expect("all_to_all_single on one tensor", same, theirs)

    root = n - 1
    bc = ccl.executor(ccl.lower(schedule(f"ring:{n}", "broadcast", "binomial-tree", root=root)), timeout=TIMEOUT)
    mine = x.clone() if rank == root else torch.zeros(2, 5)
    theirs = mine.clone()
    bc.broadcast(mine)
    dist.broadcast(theirs, src=root)
    expect("broadcast", mine, theirs)

    rd = ccl.executor(schedule(f"ring:{n}", "reduce", "ring", root=root), timeout=TIMEOUT)
    mine, theirs = x.clone(), x.clone()
    rd.reduce(mine, op="max")
    dist.reduce(theirs, dst=root, op=dist.ReduceOp.MAX)
    expect("reduce", mine if rank == root else mine, theirs if rank == root else x)

    ga = ccl.executor(schedule(f"ring:{n}", "gather", "direct", root=root), timeout=TIMEOUT)
    parts = [torch.empty(2, 5) for _ in range(n)] if rank == root else None
    ga.gather(x, parts)
    theirs_parts = [torch.empty(2, 5) for _ in range(n)] if rank == root else None
    dist.gather(x, theirs_parts, dst=root)
    if rank == root:
        expect("gather", torch.stack(parts), torch.stack(theirs_parts))

    sc = ccl.executor(schedule(f"ring:{n}", "scatter", "direct", root=root), timeout=TIMEOUT)
    pieces = [torch.full((3,), float(10 * i)) for i in range(n)] if rank == root else None
    mine, theirs = torch.empty(3), torch.empty(3)
    sc.scatter(mine, pieces)
    dist.scatter(theirs, [p.clone() for p in pieces] if pieces else None, src=root)
    expect("scatter", mine, theirs)

    # A subgroup: ranks are group ranks, messages go to the right global ranks.
    members = list(range(1, n))
    sub = dist.new_group(members)
    if rank in members:
        part = ccl.executor(schedule(f"ring:{len(members)}", "allreduce", "ring", chunks=2), sub, timeout=TIMEOUT)
        mine, theirs = x.clone(), x.clone()
        part.all_reduce(mine)
        dist.all_reduce(theirs, group=sub)
        expect("all_reduce on a subgroup", mine, theirs)

    try:
        allreduce.all_gather_single(x, x)
        problems.append("calling an allreduce schedule as allgather was accepted")
    except InputError:
        pass
    try:
        Executor(ar, timeout=TIMEOUT)  # the backend never lowers: an Algorithm is refused
        problems.append("the Executor accepted an Algorithm")
    except InputError as exc:
        if "runs a Program" not in exc.message:
            problems.append(f"the Executor refused an Algorithm with {exc.message!r}")
    return problems


def expect_error(run, cls) -> dict:
    start = time.monotonic()
    try:
        run()
    except cls as exc:
        return {"error": type(exc).__name__, "message": exc.message, "seconds": time.monotonic() - start}
    except Exception as exc:  # noqa: BLE001 - reported to the test as a wrong outcome
        return {"error": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - start}
    return {"error": None, "message": "", "seconds": time.monotonic() - start}


def mismatches(rank: int, n: int) -> dict[str, dict]:
    faulty = n - 1
    out = {"world": expect_error(lambda: ccl.executor(schedule("ring:4" if n != 4 else "ring:3", "allgather", "ring")),
                                 InputError)}
    ar = ccl.executor(schedule(f"ring:{n}", "allreduce", "ring"), timeout=TIMEOUT)
    t = torch.ones(12, dtype=torch.float64 if rank == faulty else torch.float32)
    out["dtype"] = expect_error(lambda: ar(t), InputError)
    t = torch.ones(13 if rank == faulty else 12)
    out["size"] = expect_error(lambda: ar(t), InputError)
    other = ccl.executor(schedule(f"ring:{n}", "allreduce", "recursive-halving" if rank == faulty else "ring"),
                         timeout=TIMEOUT)
    out["schedule"] = expect_error(lambda: other(torch.ones(12)), InputError)
    # The group is still usable: a correct call works.
    t = torch.full((12,), float(rank))
    ar(t)
    out["after"] = {"ok": bool(torch.all(t == sum(range(n))))}
    return out


def absent(rank: int, n: int) -> dict:
    """The last rank never calls; the others time out naming the op and the peer."""
    quiet = ccl.executor(schedule(f"ring:{n}", "allgather", "ring"), timeout=TIMEOUT, validate="never")
    if rank == n - 1:
        time.sleep(TIMEOUT + 2)
        return {"error": None, "message": "stayed away", "seconds": 0.0}
    return expect_error(lambda: quiet(torch.ones(4)), BackendError)


def dies(rank: int, n: int) -> dict:
    """The last rank's process exits (right after this returns); the others lose it."""
    dying = ccl.executor(schedule(f"ring:{n}", "allgather", "direct"), timeout=20.0, validate="never")
    dist.barrier()
    if rank == n - 1:
        return {"error": None, "message": "exiting", "seconds": 0.0}
    time.sleep(1.0)
    return expect_error(lambda: dying(torch.ones(4)), BackendError)
