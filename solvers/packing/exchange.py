"""Allreduce by exchange across identical nodes: for small messages, one fabric crossing.

Reduce-then-broadcast trees cross the fabric twice (a part's remote contributions go up to its
root, the sum comes back down), and at small sizes every crossing costs a NIC's latency. Here
the part of rank q = (a, i) (local index i) is reduced inside every node b to its co-root
(b, i), down that node's tree of local root i reversed; the co-roots then exchange their
node sums in one step, each sending its own to every other and adding what it receives (all
sends of the step read the sums before it), so every co-root holds the whole sum; it goes back
down the node's tree. At small sizes on two NVSwitch nodes it beats both the trees and
recursive doubling.

Every co-root sends a whole part to each other node, so the fabric carries (nodes - 1) times
what trees do: a candidate for small sizes only, judged like the others (``plans``).
"""

from __future__ import annotations

from ccl.core.algorithm import Algorithm
from ccl.core.problem import Problem
from ccl.core.topology import Topology

from ..builders.common import builder
from .stages import slot_runs
from .trees import Tree


def node_trees(topology: Topology, intra: dict[int, Tree]) -> list[Tree]:
    """Per rank q, the tree of q's local index (``intra``, local ranks) placed on q's node."""
    out = []
    for members in topology.node_ranks:
        for i, q in enumerate(members):
            t = intra[i]
            out.append(Tree(q, 1, {members[v]: members[p] for v, p in t.parent.items()},
                            [members[v] for v in t.order]))
    return out


def _placed(topology: Topology, t: Tree) -> list[dict[int, int]]:
    """Tree ``t`` (on its root's node) placed on every node, local index for local index:
    per node, its rank for each of t's vertices."""
    ranks = topology.node_ranks
    index = {r: i for members in ranks for i, r in enumerate(members)}
    return [{v: members[index[v]] for v in t.order} for members in ranks]


def _co_roots(topology: Topology, q: int) -> list[int]:
    """The ranks of q's local index, one per node."""
    i = next(members.index(q) for members in topology.node_ranks if q in members)
    return [members[i] for members in topology.node_ranks]


def hops(topology: Topology, trees: list[Tree], down: bool) -> list[tuple[tuple[int, int], float]]:
    """Every rank-to-rank move of one byte of every part: up the node trees in every node and
    between every two co-roots, or (``down``) down the node trees."""
    out: list[tuple[tuple[int, int], float]] = []
    for t in trees:
        for local in _placed(topology, t):
            for v, p in t.parent.items():
                out.append(((local[p], local[v]) if down else (local[v], local[p]), 1.0))
        if not down:
            roots = _co_roots(topology, t.root)
            out.extend(((x, y), 1.0) for x in roots for y in roots if x != y)
    return out


def build(problem: Problem, trees: list[Tree], slots: int, stages: list[int]) -> Algorithm:
    """The allreduce: slot j of every part in pipeline stage ``stages[j]`` goes up the node
    trees (leaves first), is exchanged between the co-roots the step after, and goes down.
    Coalesced (``solvers.builders.coalesce``): a co-root serves the parts of every node, whose
    slots are not consecutive, and would otherwise pay a message's latency for each."""
    topology = problem.topology
    n, C = topology.n_ranks, slots
    b, _ = builder(problem, n * C, "packing", "packing")
    runs = slot_runs(list(enumerate(stages)))  # (first slot, count, stage) of consecutive slots
    for t in trees:
        q = t.root
        depth = t.depth()
        D = max(depth.values())
        placed = _placed(topology, t)
        roots = _co_roots(topology, q)
        for j, count, g in runs:
            slot = ("output", q * C + j)
            for local in placed:
                for v in t.order[1:]:
                    b.move_run(g + D - depth[v], local[v], slot, local[t.parent[v]], slot, count, "reduce")
            for x in roots:
                for y in roots:
                    if x != y:
                        b.move_run(g + D, x, slot, y, slot, count, "reduce")
            for local in placed:
                for v in t.order[1:]:
                    b.move_run(g + D + depth[v], local[t.parent[v]], slot, local[v], slot, count, "copy")
    return b.build(coalesce=True)
