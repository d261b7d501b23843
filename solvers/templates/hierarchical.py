"""Hierarchical templates for multi-node topologies (N nodes of L ranks each).

Rank (a, i) is the i-th rank of node a. The same-index ranks {(a, i) : a} form rail i.

* allreduce: ring reducescatter inside every node (rank (a, i) ends with the node's sum of
  block i), ring allreduce of block i along rail i across nodes, ring allgather inside every
  node. Steps: (L-1) + 2(N-1) + (L-1).
* allgather: ring allgather along every rail, then ring allgather inside every node of the
  N-block groups each rank has collected.
* reducescatter: the mirror: ring reducescatter inside every node over rail groups, then ring
  reducescatter along every rail.
* alltoall: inside every node, rank (a, i) hands rank (a, j) everything bound for node-mates of
  j's rail (node a's part lands directly); then rank (a, j) sends along rail j to (b, j) what
  node a has for (b, j). Two logical steps; inter-node traffic crosses only rail pairs.
"""

from __future__ import annotations

from ccl.core.algorithm import Algorithm
from ccl.core.errors import CollectiveError
from ccl.core.problem import Problem

from ..builders.common import builder, pieces, run
from ..builders.rings import find_ring
from ..builders.schedule import Slot
from .phases import ring_allgather, ring_reducescatter

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")


def synthesize(problem: Problem) -> Algorithm:
    topo = problem.topology
    if topo.n_nodes < 2 or not topo.uniform_nodes:
        raise CollectiveError(
            f"hierarchical needs a multi-node topology with equally sized nodes; {topo.name!r} has "
            f"{topo.n_nodes} node(s)"
        )
    kind = problem.collective.kind
    k = pieces(problem)
    nodes = topo.node_ranks
    N, L = len(nodes), len(nodes[0])

    def rank(a: int, i: int) -> int:
        return nodes[a][i]

    node_rings = [find_ring(topo, nodes[a]) for a in range(N)]
    rails = [find_ring(topo, [rank(a, i) for a in range(N)]) for i in range(L)]
    local = {r: i for a in range(N) for i, r in enumerate(nodes[a])}

    if kind == "allreduce":
        b, _ = builder(problem, N * L * k, "hierarchical", "hierarchical")

        def node_block(r: int, i: int) -> list[Slot]:
            return [s for x in range(N) for s in run(i * N + x, k)]

        step = 0
        for ring in node_rings:
            end = ring_reducescatter(b, ring, [local[r] for r in ring], node_block, step)
        step = end
        for i, ring in enumerate(rails):
            subs = [i * N + x for x in range(N)]
            mid = ring_reducescatter(b, ring, subs, lambda r, g: run(g, k), step)
            end = ring_allgather(b, ring, subs, lambda r, g: run(g, k), mid)
        step = end
        for ring in node_rings:
            ring_allgather(b, ring, [local[r] for r in ring], node_block, step)
    elif kind == "allgather":
        b, _ = builder(problem, k, "hierarchical", "hierarchical")
        step = 0
        for ring in rails:
            end = ring_allgather(b, ring, ring, lambda r, q: run(q, k), step)
        step = end

        def rail_group(r: int, i: int) -> list[Slot]:
            return [s for a in range(N) for s in run(rank(a, i), k)]

        for ring in node_rings:
            ring_allgather(b, ring, [local[r] for r in ring], rail_group, step)
    elif kind == "reducescatter":
        b, _ = builder(problem, k, "hierarchical", "hierarchical")

        def acc(r: int, q: int) -> list[Slot]:
            return run(0, k) if q == r else run(q, k, "input")

        def rail_acc(r: int, i: int) -> list[Slot]:
            return [s for a in range(N) for s in acc(r, rank(a, i))]

        step = 0
        for ring in node_rings:
            end = ring_reducescatter(b, ring, [local[r] for r in ring], rail_acc, step)
        step = end
        for ring in rails:
            ring_reducescatter(b, ring, ring, acc, step)
    elif kind == "alltoall":
        b, _ = builder(problem, k, "hierarchical", "hierarchical")
        for a in range(N):
            for i in range(L):
                src = rank(a, i)
                for j in range(L):
                    if j == i:
                        continue
                    mate = rank(a, j)
                    for x in range(N):
                        dest = rank(x, j)
                        if x == a:
                            b.move(0, src, run(dest, k, "input"), mate, run(src, k), "copy")
                        else:
                            parked = [("scratch", (i * N + x) * k + y) for y in range(k)]
                            b.move(0, src, run(dest, k, "input"), mate, parked, "copy")
        for a in range(N):
            for j in range(L):
                via = rank(a, j)
                for x in range(N):
                    if x == a:
                        continue
                    dest = rank(x, j)
                    for i in range(L):
                        src = rank(a, i)
                        if i == j:
                            held = run(dest, k, "input")
                        else:
                            held = [("scratch", (i * N + x) * k + y) for y in range(k)]
                        b.move(1, via, held, dest, run(src, k), "copy")
    else:  # pragma: no cover - the registry only dispatches KINDS here
        raise AssertionError(kind)
    return b.build()
