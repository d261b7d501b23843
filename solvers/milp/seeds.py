"""Routes read off the template algorithms, as more candidates for the MILP pipeline.

A template's schedule, for every slot it moves straight from a slot to the same piece's slot
on another rank, says which link carried which commodity. Those routes go through the same
ordering and contiguity stages and the same judge as the MILP's, so the MILP solver never
settles for a schedule slower than one built on a template's routes. Templates that relay
through scratch slots (where the commodity is not visible in the slot index), that chunk the
collective differently, or that use links the sketch removed, give no routes.
"""

from __future__ import annotations

import solvers
from ccl.core.collective import builtin
from ccl.core.errors import InfeasibleError, InputError
from ccl.core.problem import Problem, Request

from .commodities import Commodity, Routes
from .logical import LogicalTopology

TEMPLATES = {
    "allgather": ("hierarchical", "ring", "recursive-doubling", "direct"),
    "broadcast": ("double-binary-tree", "binomial-tree", "ring", "direct"),
    "alltoall": ("direct",),
}


def template_routes(problem: Problem, logical: LogicalTopology, items: list[Commodity], kind: str, pieces: int,
                    root: int = 0) -> list[tuple[str, Routes]]:
    by_key: dict[tuple, Commodity] = {}
    for c in items:
        by_key[(c.source, c.dests[0] if kind == "alltoall" else None, c.piece)] = c
    out = []
    for name in TEMPLATES.get(kind, ()):
        info = solvers.SOLVERS.get(name)
        if info is None or kind not in info.kinds:
            continue
        request = Request(solver=name, chunks=pieces)
        try:
            algorithm = solvers.synthesize(Problem(problem.topology, _collective(problem, kind, root), request))
        except (InputError, InfeasibleError):
            # The template does not apply: it does not take this topology, collective or chunk
            # count (InputError: CollectiveError, TopologyError), or its routes find no path on
            # this topology (InfeasibleError). No seed from it; any other error is a bug.
            continue
        if algorithm.collective.chunk_factor != pieces:
            continue
        links: dict[int, list[int]] = {c.id: [] for c in items}
        ok = True
        for t in algorithm.transfers:
            if t.src == t.dst:
                continue
            e = logical.index.get((t.src, t.dst))
            if e is None or t.dst_buf != "output" or t.src_buf == "scratch" or t.op != "copy":
                ok = False
                break
            for j in range(t.count):
                c = _commodity(kind, by_key, t.src, t.src_buf, t.src_index + j, t.dst, t.dst_index + j, pieces, root)
                if c is None:
                    ok = False
                    break
                links[c.id].append(e)
            if not ok:
                break
        if ok and all(_is_tree(logical, c, links[c.id]) for c in items):
            out.append((f"{name} template's routes", Routes(logical, items, {k: sorted(v) for k, v in links.items()})))
    return out


def _collective(problem: Problem, kind: str, root: int):
    return builtin(kind, problem.topology.n_ranks, root if kind == "broadcast" else None)


def _commodity(kind: str, by_key: dict, src: int, src_buf: str, src_index: int, dst: int, dst_index: int,
               pieces: int, root: int) -> Commodity | None:
    if kind == "allgather":
        owner, piece = divmod(dst_index, pieces)
        return by_key.get((owner, None, piece))
    if kind == "broadcast":
        return by_key.get((root, None, dst_index))
    # alltoall: input[d * P + p] at the source lands in output[s * P + p] at the destination
    if src_buf != "input":
        return None
    d, piece = divmod(src_index, pieces)
    s, piece2 = divmod(dst_index, pieces)
    if d != dst or s != src or piece != piece2:
        return None
    return by_key.get((src, dst, piece))


def _is_tree(logical: LogicalTopology, c: Commodity, links: list[int]) -> bool:
    into: dict[int, int] = {}
    for e in links:
        v = logical.links[e].dst
        if v in into or v == c.source:
            return False
        into[v] = e
    for d in c.dests:
        v, seen = d, 0
        while v != c.source:
            if v not in into or seen > logical.n:
                return False
            v = logical.links[into[v]].src
            seen += 1
    return len(into) == len({logical.links[e].dst for e in links})
