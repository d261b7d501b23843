"""Recursive doubling and halving, for any number of ranks.

* ``recursive-doubling``
  - allgather: for a power of two, rank r exchanges everything it has with r xor 2^k at step
    k; otherwise Bruck's algorithm (at step k rank r sends the min(2^k, n - 2^k) blocks
    r, r+1, ... it holds to r - 2^k), ceil(log2 n) steps either way;
  - allreduce: full-buffer exchange-and-reduce with r xor 2^k. For n not a power of two the
    n - p ranks above the largest power of two p first fold their data into a partner and get
    the result back at the end (two extra steps).
* ``recursive-halving``
  - reducescatter: rank r sends the half of its blocks that belongs to the other half of its
    group to r xor d for d = p/2, p/4, ..., 1, reducing; extra ranks fold in first and receive
    their block at the end;
  - allreduce (Rabenseifner): halving reducescatter then doubling allgather over p blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ccl.core.algorithm import Algorithm
from ccl.core.problem import Problem

from ..builders.common import builder, pieces, run
from ..builders.schedule import ScheduleBuilder, Slot


def _pow2_below(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def synthesize(problem: Problem) -> Algorithm:
    variant = problem.request.solver
    kind = problem.collective.kind
    n = problem.topology.n_ranks
    k = pieces(problem)
    if variant == "recursive-doubling" and kind == "allgather":
        b, _ = builder(problem, k, variant, variant)
        _allgather(b, n, k)
    elif variant == "recursive-doubling" and kind == "allreduce":
        b, _ = builder(problem, k, variant, variant)
        _allreduce_doubling(b, n, k)
    elif variant == "recursive-halving" and kind == "reducescatter":
        b, _ = builder(problem, k, variant, variant)
        _reducescatter(b, n, k)
    elif variant == "recursive-halving" and kind == "allreduce":
        p = _pow2_below(n)
        b, _ = builder(problem, p * k, variant, variant)
        _allreduce_rabenseifner(b, n, k)
    else:  # pragma: no cover - the registry only dispatches supported pairs
        raise AssertionError((variant, kind))
    return b.build()


def _allgather(b: ScheduleBuilder, n: int, k: int) -> None:
    if n & (n - 1) == 0:
        _doubling(b, n, lambda r, q: run(q, k), 0)
        return
    d, step = 1, 0
    while d < n:
        count = min(d, n - d)
        for r in range(n):
            dst = (r - d) % n
            for i in range(count):
                q = (r + i) % n
                b.move(step, r, run(q, k), dst, run(q, k), "copy")
        d *= 2
        step += 1


def _fold_in(b: ScheduleBuilder, n: int, p: int, slots: Callable[[int], Sequence[Slot]], step: int) -> int:
    """Ranks p..n-1 reduce their whole buffer into rank r - p."""
    if n == p:
        return step
    for e in range(p, n):
        b.move(step, e, slots(e), e - p, slots(e - p), "reduce")
    return step + 1


def _fold_out(b: ScheduleBuilder, n: int, p: int, src: Callable[[int], Sequence[Slot]],
              dst: Callable[[int], Sequence[Slot]], step: int) -> int:
    if n == p:
        return step
    for e in range(p, n):
        b.move(step, e - p, src(e), e, dst(e), "copy")
    return step + 1


def _allreduce_doubling(b: ScheduleBuilder, n: int, k: int) -> None:
    p = _pow2_below(n)
    whole = run(0, k)
    step = _fold_in(b, n, p, lambda r: whole, 0)
    d = 1
    while d < p:
        for r in range(p):
            b.move(step, r, whole, r ^ d, whole, "reduce")
        d *= 2
        step += 1
    _fold_out(b, n, p, lambda e: whole, lambda e: whole, step)


def _halving(b: ScheduleBuilder, p: int, owner_blocks: Callable[[int], Sequence[int]],
             loc: Callable[[int, int], Sequence[Slot]], step: int) -> int:
    """Recursive halving among ranks 0..p-1 (p a power of two); ``owner_blocks(i)`` are the
    blocks whose sum rank i must end with."""
    d = p // 2
    while d >= 1:
        for r in range(p):
            partner = r ^ d
            lo = r & ~(2 * d - 1)
            theirs = range(lo + d, lo + 2 * d) if r & d == 0 else range(lo, lo + d)
            for i in theirs:
                for q in owner_blocks(i):
                    b.move(step, r, loc(r, q), partner, loc(partner, q), "reduce")
        d //= 2
        step += 1
    return step


def _doubling(b: ScheduleBuilder, p: int, loc: Callable[[int, int], Sequence[Slot]], step: int) -> int:
    """Recursive doubling among ranks 0..p-1 where rank i starts owning block i."""
    d = 1
    while d < p:
        for r in range(p):
            group = r & ~(d - 1)
            for q in range(group, group + d):
                b.move(step, r, loc(r, q), r ^ d, loc(r ^ d, q), "copy")
        d *= 2
        step += 1
    return step


def _reducescatter(b: ScheduleBuilder, n: int, k: int) -> None:
    p = _pow2_below(n)

    def loc(rank: int, q: int) -> list[Slot]:
        return run(0, k) if q == rank else run(q, k, "input")

    step = 0
    if n > p:
        for e in range(p, n):
            for q in range(n):
                b.move(step, e, loc(e, q), e - p, loc(e - p, q), "reduce")
        step += 1
    step = _halving(b, p, lambda i: [i] + ([i + p] if i + p < n else []), loc, step)
    _fold_out(b, n, p, lambda e: loc(e - p, e), lambda e: run(0, k), step)


def _allreduce_rabenseifner(b: ScheduleBuilder, n: int, k: int) -> None:
    p = _pow2_below(n)
    whole = [s for q in range(p) for s in run(q, k)]

    def loc(rank: int, q: int) -> list[Slot]:
        return run(q, k)

    step = _fold_in(b, n, p, lambda r: whole, 0)
    step = _halving(b, p, lambda i: [i], loc, step)
    step = _doubling(b, p, loc, step)
    _fold_out(b, n, p, lambda e: whole, lambda e: whole, step)
