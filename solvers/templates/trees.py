"""Tree templates: binomial tree and double binary tree, for broadcast, reduce and allreduce.

* ``binomial-tree``: relative rank v = (r - root) mod n receives from v - highbit(v) at step
  log2 highbit(v) (broadcast) and sends to v - lowbit(v) at step log2 lowbit(v) (reduce);
  ceil(log2 n) steps each. Allreduce is reduce to rank 0 then broadcast from it.
* ``double-binary-tree``: two in-order balanced binary trees, the second over the members
  shifted by one, so that (for 2^d - 1 members) the leaves of one are the inner vertices of the
  other. Half of the data goes over each tree, pipelined: with ``chunks`` K every half is K
  slots and slot j moves one step behind slot j-1. Allreduce reduces up both trees and
  broadcasts down them; rooted collectives hang both trees under the root.
"""

from __future__ import annotations

from ccl.core.algorithm import Algorithm
from ccl.core.problem import Problem

from ..builders.common import builder, pieces
from ..builders.schedule import ScheduleBuilder, Slot
from .phases import balanced_tree, depths, heights, tree_broadcast, tree_reduce


def synthesize(problem: Problem) -> Algorithm:
    if problem.request.solver == "binomial-tree":
        return _binomial(problem)
    return _double_binary(problem)


def _binomial(problem: Problem) -> Algorithm:
    kind = problem.collective.kind
    n = problem.topology.n_ranks
    k = pieces(problem)
    b, coll = builder(problem, k, "binomial-tree", "binomial-tree")
    root = coll.root or 0
    blocks = list(range(k))

    def absolute(v: int) -> int:
        return (v + root) % n

    down = {absolute(v): absolute(v - _highbit(v)) for v in range(1, n)}
    recv = {absolute(v): _highbit(v).bit_length() - 1 for v in range(1, n)}
    up = {absolute(v): absolute(v - (v & -v)) for v in range(1, n)}
    send = {absolute(v): (v & -v).bit_length() - 1 for v in range(1, n)}
    if kind == "broadcast":
        tree_broadcast(b, down, recv, blocks, lambda r, j: [("input" if r == root else "output", j)], 0, False)
    elif kind == "reduce":
        tree_reduce(b, up, send, blocks, lambda r, j: [("output" if r == root else "input", j)], 0, False)
    else:  # allreduce: accumulate in the output buffer everywhere
        step = tree_reduce(b, up, send, blocks, lambda r, j: [("output", j)], 0, False)
        tree_broadcast(b, down, recv, blocks, lambda r, j: [("output", j)], step, False)
    return b.build()


def _highbit(v: int) -> int:
    return 1 << (v.bit_length() - 1)


def _double_binary(problem: Problem) -> Algorithm:
    kind = problem.collective.kind
    n = problem.topology.n_ranks
    k = pieces(problem)
    b, coll = builder(problem, 2 * k, "double-binary-tree", "double-binary-tree")
    halves = [list(range(k)), list(range(k, 2 * k))]
    if kind == "allreduce":
        members = list(range(n))
        for half, order in zip(halves, (members, members[1:] + members[:1])):
            _, parent = balanced_tree(order)
            _allreduce_tree(b, parent, half)
        return b.build()
    root = coll.root or 0
    others = [(root + i) % n for i in range(1, n)]
    for half, order in zip(halves, (others, others[1:] + others[:1])):
        top, parent = balanced_tree(order)
        if top is not None:
            parent[top] = root
        if kind == "broadcast":
            recv = {c: d - 1 for c, d in depths(parent).items()}
            tree_broadcast(b, parent, recv, half, lambda r, j: [("input" if r == root else "output", j)], 0, True)
        else:
            send = heights(parent)
            tree_reduce(b, parent, send, half, lambda r, j: [("output" if r == root else "input", j)], 0, True)
    return b.build()


def _allreduce_tree(b: ScheduleBuilder, parent: dict[int, int], half: list[int]) -> None:
    if not parent:
        return

    def loc(r: int, j: int) -> list[Slot]:
        return [("output", j)]

    h = heights(parent)
    tree_reduce(b, parent, h, half, loc, 0, True)
    top = max(h.values())
    recv = {c: top + d - 1 for c, d in depths(parent).items()}
    tree_broadcast(b, parent, recv, half, loc, 0, True)
