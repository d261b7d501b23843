"""Checking and timing helpers for runs of schedules: random data, torch's own collective (or
the collective's definition) as the reference, comparison, nccl-tests bandwidth figures.

Depends on torch and ``runtime`` only: ``ccl emit torch`` copies it into standalone scripts
after the runtime, and ``launch`` (``ccl run``, the tests, the benchmarks) uses it in-process.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

# --- script imports: generated scripts drop this block (the runtime defines these names)
from .runtime import KINDS_WITH_NATIVE, ScheduleError, make_reducer, piece_sizes

# --- end script imports


def base_slots(spec: dict) -> int:
    """Base slots of the largest buffer of any rank: the buffer nccl-tests counts."""
    k = spec["chunk_factor"]
    return max(max(spec["input_slots"]), max(spec["output_slots"])) // k


def unit_for_size(spec: dict, size_bytes: int, dtype: torch.dtype) -> int:
    """Elements per base slot for a message size in nccl-tests terms (at least 1)."""
    esize = torch.empty((), dtype=dtype).element_size()
    return max(1, size_bytes // (esize * base_slots(spec)))


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests busbw = algbw x factor."""
    if kind == "allreduce":
        return 2 * (n - 1) / n
    if kind in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    return 1.0


def make_tensors(spec: dict, rank: int, unit: int, dtype: torch.dtype, device: Any = "cpu",
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random input (integers in a small range, floats in [-1, 1)) and an output filled with a
    marker, for this rank."""
    k = spec["chunk_factor"]
    n_in = spec["input_slots"][rank] // k * unit
    n_out = spec["output_slots"][rank] // k * unit
    gen = torch.Generator().manual_seed(seed * 1000003 + rank)
    if dtype == torch.bool:
        data = torch.randint(0, 2, (n_in,), generator=gen).bool()
    elif dtype.is_floating_point or dtype.is_complex:
        data = (torch.rand(n_in, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    else:
        data = torch.randint(1, 8, (n_in,), generator=gen).to(dtype)
    out = torch.full((n_out,), 7, dtype=dtype) if dtype != torch.bool else torch.zeros(n_out, dtype=dtype)
    return data.to(device), out.to(device)


def native(spec: dict, input: torch.Tensor, output: torch.Tensor, op: str = "sum", group: Any = None) -> None:
    """torch.distributed's own collective of the schedule's kind, writing ``output``."""
    kind, root = spec["collective"], spec.get("root")
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    peer = root if group is None or root is None else dist.get_global_rank(group, root)
    redop = getattr(dist.ReduceOp, {"prod": "PRODUCT"}.get(op, op.upper()))
    if kind == "allgather":
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        fn(output, input, group=group)
    elif kind == "reducescatter":
        fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        fn(output, input, op=redop, group=group)
    elif kind == "allreduce":
        output.copy_(input)
        dist.all_reduce(output, op=redop, group=group)
    elif kind == "alltoall":
        dist.all_to_all_single(output, input, group=group)
    elif kind == "broadcast":
        if rank == root:
            output.copy_(input)
        dist.broadcast(output, src=peer, group=group)
    elif kind == "reduce":
        buf = input.clone()
        dist.reduce(buf, dst=peer, op=redop, group=group)
        if rank == root:
            output.copy_(buf)
    elif kind == "gather":
        parts = list(output.chunk(n)) if rank == root else None
        dist.gather(input, gather_list=parts, dst=peer, group=group)
    elif kind == "scatter":
        parts = list(input.chunk(n)) if rank == root else None
        dist.scatter(output, scatter_list=parts, src=peer, group=group)
    else:
        raise ScheduleError(f"torch has no collective for a {kind!r} schedule", "input")


def in_place_tensors(spec: dict, rank: int, unit: int, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's (input, output) in the in-place layout, the input holding ``data``: the
    smaller buffer is a view of the larger one where an in-place call overlays their slots
    (``in_place_aliases``: all_gather_single with the input inside the output,
    reduce_scatter_single the other way round, one tensor for all_reduce and all_to_all_single).
    Without such a layout both are the same tensor."""
    k = spec["chunk_factor"]
    n_in = spec["input_slots"][rank] // k * unit
    n_out = spec["output_slots"][rank] // k * unit
    runs = spec.get("in_place_aliases", spec["aliases"])[rank]
    if not n_in or not n_out:
        return data.clone(), torch.empty(n_out, dtype=data.dtype, device=data.device)
    if len(runs) == 1:
        a, j, c = runs[0]
        if c % k == 0 and a % k == 0 and j % k == 0:
            if c // k * unit == n_in:  # the whole input sits inside the output
                out = torch.full((n_out,), 7, dtype=data.dtype, device=data.device)
                inp = out[j // k * unit: j // k * unit + n_in]
                inp.copy_(data)
                return inp, out
            if c // k * unit == n_out:  # the whole output sits inside the input
                inp = data.clone()
                return inp, inp[a // k * unit: a // k * unit + n_out]
    both = data.clone()
    return both, both if n_in == n_out else torch.empty(n_out, dtype=data.dtype, device=data.device)


def reference(spec: dict, input: torch.Tensor, output: torch.Tensor, op: str = "sum", group: Any = None) -> str:
    """What ``output`` must hold: torch's own collective ("torch"), or, where torch has none for
    the kind, dtype or reduction (gloo has no int16 collectives, for one), the collective's
    definition ("definition": ``spec["chunks"]`` says which chunk each input slot starts with
    and which chunks each output slot sums; every rank's input is gathered and each output
    slot reduced locally)."""
    if spec["collective"] in KINDS_WITH_NATIVE:
        try:
            native(spec, input, output, op, group)
            return "torch"
        except (RuntimeError, ValueError, TypeError):  # refused before any data moved, on every rank
            pass
    chunks = spec.get("chunks")
    if chunks is None:
        raise ScheduleError(f"the {spec['collective']!r} schedule does not say what its outputs hold", "input")
    rank, n, k = dist.get_rank(group), dist.get_world_size(group), spec["chunk_factor"]
    unit = None
    for slots, t in ((spec["input_slots"][rank], input), (spec["output_slots"][rank], output)):
        if slots:
            unit = t.numel() // (slots // k)
    width = max(spec["input_slots"]) // k * unit
    mine = torch.zeros(width, dtype=input.dtype, device=input.device)
    mine[:input.numel()] = input
    raw = mine.view(torch.uint8)  # as bytes: transports move every dtype that way
    every_raw = [torch.empty_like(raw) for _ in range(n)]
    dist.all_gather(every_raw, raw, group=group)
    every = [x.view(input.dtype) for x in every_raw]
    sizes = piece_sizes(unit, k)
    pre = [0]
    for x in sizes:
        pre.append(pre[-1] + x)

    def offset(i: int) -> int:
        return (i // k) * unit + pre[i % k]

    where = {}
    for r, ids in enumerate(chunks["inputs"]):
        for i, c in enumerate(ids):
            where.setdefault(c, every[r][offset(i):offset(i + 1)])
    combine = make_reducer(op, input.dtype)
    for j, need in enumerate(chunks["outputs"][rank]):
        dst = output[offset(j):offset(j + 1)]
        dst.copy_(where[need[0]])
        for c in need[1:]:
            combine(dst, where[c])
        if op == "avg" and len(need) > 1:
            dst.div_(len(need))
    return "definition"


def tolerance(dtype: torch.dtype, n: int) -> tuple[float, float]:
    """(rtol, atol) for comparing a reduction of n values in [-1, 1) computed in another order."""
    eps = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 2e-7, torch.complex64: 2e-7}.get(dtype, 3e-16)
    return 8 * n * eps, 8 * n * eps


def compare(ours: torch.Tensor, reference: torch.Tensor, n: int) -> tuple[bool, float]:
    """(equal, max abs difference): bit for bit for integers, to tolerance for floats."""
    if ours.numel() == 0:
        return True, 0.0
    dtype = ours.dtype
    if not (dtype.is_floating_point or dtype.is_complex):
        same = bool(torch.equal(ours, reference))
        diff = 0.0 if same else float((ours.long() - reference.long()).abs().max())
        return same, diff
    rtol, atol = tolerance(dtype, n)
    a, b = ours.to(torch.complex128 if dtype.is_complex else torch.float64), reference.to(
        torch.complex128 if dtype.is_complex else torch.float64)
    diff = float((a - b).abs().max())
    return bool(torch.allclose(a, b, rtol=rtol, atol=atol)), diff


def timed(fn, group: Any = None) -> float:
    """Seconds one call of ``fn`` takes on this rank, after a barrier."""
    dist.barrier(group=group)
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
