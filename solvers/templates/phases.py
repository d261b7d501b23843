"""Communication phases the templates are assembled from.

A phase works on *blocks*: a block is a list of slots, and ``loc(rank, block)`` says where a
rank keeps that block (ranks may keep it in different buffers: an accumulator in the input
buffer on one rank, in the output buffer on the block's owner). Every phase takes the first
logical step it may use and returns the first step after it, so phases chain.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from ..builders.schedule import ScheduleBuilder, Slot

Loc = Callable[[int, Hashable], Sequence[Slot]]


def ring_allgather(b: ScheduleBuilder, order: Sequence[int], blocks: Sequence[Hashable], loc: Loc, step: int) -> int:
    """Position p of the ring owns ``blocks[p]``; afterwards every position holds every block."""
    m = len(order)
    for t in range(m - 1):
        for p in range(m):
            blk = blocks[(p - t) % m]
            src, dst = order[p], order[(p + 1) % m]
            b.move(step + t, src, loc(src, blk), dst, loc(dst, blk), "copy")
    return step + max(m - 1, 0)


def ring_reducescatter(b: ScheduleBuilder, order: Sequence[int], blocks: Sequence[Hashable], loc: Loc, step: int) -> int:
    """Every position holds a contribution to every block; afterwards position p holds the full
    sum of ``blocks[p]``."""
    m = len(order)
    for t in range(m - 1):
        for p in range(m):
            blk = blocks[(p - t - 1) % m]
            src, dst = order[p], order[(p + 1) % m]
            b.move(step + t, src, loc(src, blk), dst, loc(dst, blk), "reduce")
    return step + max(m - 1, 0)


def tree_broadcast(
    b: ScheduleBuilder,
    parent: Mapping[int, int],
    recv_step: Mapping[int, int],
    blocks: Sequence[Hashable],
    loc: Loc,
    step: int,
    pipeline: bool,
) -> int:
    """Each child receives every block from its parent: block j at ``step + recv_step[child]``
    (+ j when pipelined). The root (not a key of ``parent``) holds the blocks; a child must
    receive after its parent does."""
    last = step - 1
    for child in sorted(parent, key=lambda c: (recv_step[c], c)):
        par = parent[child]
        for j, blk in enumerate(blocks):
            s = step + recv_step[child] + (j if pipeline else 0)
            b.move(s, par, loc(par, blk), child, loc(child, blk), "copy")
            last = max(last, s)
    return last + 1


def tree_reduce(
    b: ScheduleBuilder,
    parent: Mapping[int, int],
    send_step: Mapping[int, int],
    blocks: Sequence[Hashable],
    loc: Loc,
    step: int,
    pipeline: bool,
) -> int:
    """Each child reduces every block into its parent: block j at ``step + send_step[child]``
    (+ j when pipelined). A rank must send after all its children have."""
    last = step - 1
    for child in sorted(parent, key=lambda c: (send_step[c], c)):
        par = parent[child]
        for j, blk in enumerate(blocks):
            s = step + send_step[child] + (j if pipeline else 0)
            b.move(s, child, loc(child, blk), par, loc(par, blk), "reduce")
            last = max(last, s)
    return last + 1


def depths(parent: Mapping[int, int]) -> dict[int, int]:
    """Depth of every child (the root's children have depth 1)."""
    out: dict[int, int] = {}
    for v in parent:
        chain = []
        while v in parent and v not in out:
            chain.append(v)
            v = parent[v]
        d = out.get(v, 0)
        for u in reversed(chain):
            d += 1
            out[u] = d
    return out


def heights(parent: Mapping[int, int]) -> dict[int, int]:
    """Height of every vertex (leaves 0), for reductions up the tree."""
    out = {v: 0 for v in set(parent) | set(parent.values())}
    by_depth = depths(parent)
    for v in sorted(parent, key=lambda c: -by_depth[c]):
        p = parent[v]
        out[p] = max(out[p], out[v] + 1)
    return out


def balanced_tree(members: Sequence[int]) -> tuple[int | None, dict[int, int]]:
    """In-order balanced binary tree over ``members``: (root, parent map). With members in order
    m0..mk, the leaves are the members at even positions when k+1 = 2^d - 1."""
    parent: dict[int, int] = {}

    def build(lo: int, hi: int, par: int | None) -> int | None:
        if lo >= hi:
            return None
        mid = (lo + hi) // 2
        v = members[mid]
        if par is not None:
            parent[v] = par
        build(lo, mid, v)
        build(mid + 1, hi, v)
        return v

    root = build(0, len(members), None)
    return root, parent
