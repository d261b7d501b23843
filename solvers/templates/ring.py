"""Ring templates: allgather, reducescatter, allreduce (reducescatter then allgather), and
pipelined chains along the ring for broadcast and reduce.

* ``ring``: one ring following the topology's links (see ``rings.find_ring``); hops between
  unlinked neighbours are routed with forwarding transfers.
* ``multi-ring``: NCCL-style channels: several directed Hamiltonian cycles that fit the links'
  lanes and shared limits side by side (``rings.find_disjoint_rings``); the data is split evenly
  over them and they run in the same steps.
* ``rail-rings``: NCCL's rings on a multi-node cluster: one channel per local index c; in node
  a the ring enters at local rank s = (c - a) mod m, visits the node's ranks in increasing
  local order and leaves from local s - 1 to the same local index of node a + 1, so every
  inter-node hop stays on one NIC rail (all of them when the node count is a multiple of m)
  and every NIC sends and receives for exactly one channel.

``chunks`` K splits every rank's part (per ring) into K slots moved as separate transfers, so a
dependency-driven runtime pipelines them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ccl.core.algorithm import Algorithm
from ccl.core.errors import CollectiveError
from ccl.core.problem import Problem
from ccl.core.topology import Topology

from ..builders.common import builder, pieces, run
from ..builders.rings import find_disjoint_rings, find_ring
from ..builders.schedule import Slot
from .phases import ring_allgather, ring_reducescatter, tree_broadcast, tree_reduce

KINDS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
MAX_RINGS = 16


def synthesize(problem: Problem) -> Algorithm:
    if problem.request.solver == "multi-ring":
        rings = find_disjoint_rings(problem.topology, MAX_RINGS)
    elif problem.request.solver == "rail-rings":
        rings = rail_rings(problem.topology)
    else:
        rings = [find_ring(problem.topology)]
    return _rings(problem, rings, problem.request.solver)


def rail_rings(topology: Topology) -> list[list[int]]:
    """One ring per local index (at most ``MAX_RINGS``); see the module docstring."""
    if topology.n_nodes < 2 or not topology.uniform_nodes:
        raise CollectiveError(f"rail-rings needs a multi-node topology with equally many ranks per node; "
                              f"{topology.name!r} has {topology.n_nodes} node(s)")
    nodes = topology.node_ranks
    m = len(nodes[0])
    rings = []
    for c in range(min(m, MAX_RINGS)):
        order = []
        for a, members in enumerate(nodes):
            s = (c - a) % m
            order.extend(members[(s + i) % m] for i in range(m))
        rings.append(order)
    return rings


def _rings(problem: Problem, rings: Sequence[list[int]], solver: str) -> Algorithm:
    kind = problem.collective.kind
    n = problem.topology.n_ranks
    k = pieces(problem)
    R = len(rings)

    def span(block: int, ring: int, buffer: str = "output") -> tuple[Slot, ...]:
        """Ring ``ring``'s K slots of base block ``block`` (R x K slots per block)."""
        first = block * R * k + ring * k
        return tuple((buffer, first + x) for x in range(k))

    if kind in ("allgather", "reducescatter", "broadcast", "reduce"):
        b, coll = builder(problem, R * k, solver, solver)
    else:
        b, coll = builder(problem, n * R * k, solver, solver)
    root = coll.root or 0
    for j, order in enumerate(rings):
        if kind == "allgather":
            ring_allgather(b, order, order, lambda r, q, j=j: span(q, j), 0)
        elif kind == "reducescatter":
            ring_reducescatter(b, order, order,
                               lambda r, q, j=j: span(0, j) if q == r else span(q, j, "input"), 0)
        elif kind == "allreduce":
            # ring j owns blocks j*n .. j*n+n-1 of K slots each
            blocks = [j * n + i for i in range(n)]
            step = ring_reducescatter(b, order, blocks, lambda r, g: run(g, k), 0)
            ring_allgather(b, order, blocks, lambda r, g: run(g, k), step)
        elif kind == "broadcast":
            at = order.index(root)
            chain = order[at:] + order[:at]
            parent = {chain[i + 1]: chain[i] for i in range(n - 1)}
            recv = {chain[i + 1]: i for i in range(n - 1)}
            tree_broadcast(b, parent, recv, list(span(0, j)),
                           lambda r, slot: [("input" if r == root else "output", slot[1])], 0, pipeline=True)
        elif kind == "reduce":
            at = order.index(root)
            chain = order[at + 1:] + order[:at + 1]
            parent = {chain[i]: chain[i + 1] for i in range(n - 1)}
            send = {chain[i]: i for i in range(n - 1)}
            tree_reduce(b, parent, send, list(span(0, j)),
                        lambda r, slot: [("output" if r == root else "input", slot[1])], 0, pipeline=True)
        else:  # pragma: no cover - the registry only dispatches KINDS here
            raise AssertionError(kind)
    return b.build()
