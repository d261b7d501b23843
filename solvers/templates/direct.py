"""Direct (all-pairs) templates: every piece goes straight from where it starts to where it is
needed, in one logical step. Reductions land on the destination's accumulator, several
reductions into one slot in one step all add. Pairs without a link are routed through
intermediate ranks (so on a ring the one logical step takes up to n/2 physical steps).
"""

from __future__ import annotations

from ccl.core.algorithm import Algorithm
from ccl.core.problem import Problem

from ..builders.common import builder, pieces, run

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce", "gather", "scatter")


def synthesize(problem: Problem) -> Algorithm:
    kind = problem.collective.kind
    n = problem.topology.n_ranks
    k = pieces(problem)
    b, coll = builder(problem, k, "direct", "direct")
    root = coll.root
    others = [(r, q) for r in range(n) for q in range(n) if r != q]
    own = run(0, k, "input")
    for r, q in others:
        if kind == "allgather":
            b.move(0, r, own, q, run(r, k), "copy")
        elif kind == "alltoall":
            b.move(0, r, run(q, k, "input"), q, run(r, k), "copy")
        elif kind == "reducescatter":
            b.move(0, r, run(q, k, "input"), q, run(0, k), "reduce")
        elif kind == "allreduce":
            b.move(0, r, own, q, run(0, k), "reduce")
        elif kind == "broadcast" and r == root:
            b.move(0, r, own, q, run(0, k), "copy")
        elif kind == "reduce" and q == root:
            b.move(0, r, own, q, run(0, k), "reduce")
        elif kind == "gather" and q == root:
            b.move(0, r, own, q, run(r, k), "copy")
        elif kind == "scatter" and r == root:
            b.move(0, r, run(q, k, "input"), q, run(0, k), "copy")
    return b.build()
