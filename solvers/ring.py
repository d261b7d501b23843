"""Ring templates: allgather, reducescatter, allreduce (reducescatter then allgather), and
pipelined chains along the ring for broadcast and reduce.

The ring follows the topology's links (see ``rings.find_ring``); hops between unlinked
neighbours are routed with forwarding transfers. ``chunks`` K splits every rank's part into K
slots moved as separate transfers, so a dependency-driven runtime pipelines them.
"""

from __future__ import annotations

from ccl.algorithm import Algorithm
from ccl.problem import Problem

from .common import builder, pieces, run
from .phases import ring_allgather, ring_reducescatter, tree_broadcast, tree_reduce
from .rings import find_ring

KINDS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


def synthesize(problem: Problem) -> Algorithm:
    kind = problem.collective.kind
    n = problem.topology.n_ranks
    k = pieces(problem)
    order = find_ring(problem.topology)
    if kind == "allgather":
        b, _ = builder(problem, k, "ring", "ring")
        ring_allgather(b, order, order, lambda r, q: run(q, k), 0)
    elif kind == "reducescatter":
        b, _ = builder(problem, k, "ring", "ring")
        ring_reducescatter(b, order, order, lambda r, q: run(0, k) if q == r else run(q, k, "input"), 0)
    elif kind == "allreduce":
        b, _ = builder(problem, n * k, "ring", "ring")
        blocks = list(range(n))
        step = ring_reducescatter(b, order, blocks, lambda r, q: run(q, k), 0)
        ring_allgather(b, order, blocks, lambda r, q: run(q, k), step)
    elif kind == "broadcast":
        b, coll = builder(problem, k, "ring", "ring")
        root = coll.root or 0
        at = order.index(root)
        chain = order[at:] + order[:at]
        parent = {chain[i + 1]: chain[i] for i in range(n - 1)}
        recv = {chain[i + 1]: i for i in range(n - 1)}
        tree_broadcast(b, parent, recv, list(range(k)),
                       lambda r, j: [("input" if r == root else "output", j)], 0, pipeline=True)
    elif kind == "reduce":
        b, coll = builder(problem, k, "ring", "ring")
        root = coll.root or 0
        at = order.index(root)
        chain = order[at + 1:] + order[:at + 1]
        parent = {chain[i]: chain[i + 1] for i in range(n - 1)}
        send = {chain[i]: i for i in range(n - 1)}
        tree_reduce(b, parent, send, list(range(k)),
                    lambda r, j: [("output" if r == root else "input", j)], 0, pipeline=True)
    else:  # pragma: no cover - the registry only dispatches KINDS here
        raise AssertionError(kind)
    return b.build()
