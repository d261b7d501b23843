"""Stage 1: the routing MILP. Which links carry each commodity.

A commodity is one slot's data: a source rank and the ranks that need it (every other rank for
allgather and broadcast, one rank for alltoall). Its route is a tree (a path for one
destination) in the hop-shortest-path DAG of the logical topology from its source: the DAG keeps
the model small, as TACCL's shortest-path sets do, and rules out cycles.

Variables: x[c, e] (commodity c uses link e), t[c, v] (when c reaches v without contention), T.
Constraints: every destination receives c exactly once and any other rank at most once; a rank
forwards only what it received; t[c, v] >= t[c, u] + alpha + beta where x[c, (u, v)] (big-M);
T >= t[c, d]; and the relaxed bandwidth: T >= the load of every link (slots x beta / lanes) and
of every shared limit. Objective: T plus a small price on beta to avoid needless hops.

Rotational symmetry (the sketch's): only the commodities whose source is below the rotation k
get variables; commodity c rotated a times uses link e rotated a times, which is how loads are
counted. Without a MILP solution in time, shortest-path trees (the heuristic every solve starts
from) are the routes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .logical import LogicalTopology
from .lp import Solved, solve

EPSILON = 1e-3  # price of link time in the objective, relative to the makespan


@dataclass(frozen=True)
class Commodity:
    id: int
    source: int
    dests: tuple[int, ...]
    piece: int


def commodities(kind: str, n: int, pieces: int, root: int = 0) -> list[Commodity]:
    """Allgather-like (every rank's pieces to every other rank), broadcast (the root's pieces to
    everyone) or alltoall (each (source, destination) pair's pieces)."""
    out: list[Commodity] = []
    if kind == "allgather":
        for q in range(n):
            others = tuple(r for r in range(n) if r != q)
            for p in range(pieces):
                out.append(Commodity(len(out), q, others, p))
    elif kind == "broadcast":
        others = tuple(r for r in range(n) if r != root)
        for p in range(pieces):
            out.append(Commodity(len(out), root, others, p))
    elif kind == "alltoall":
        for s in range(n):
            for d in range(n):
                if d == s:
                    continue
                for p in range(pieces):
                    out.append(Commodity(len(out), s, (d,), p))
    else:
        raise ValueError(kind)
    return out


class Routes:
    """The tree of every commodity: ``links[c]`` are the logical link indices it uses."""

    def __init__(self, logical: LogicalTopology, items: list[Commodity], links: dict[int, list[int]]) -> None:
        self.logical = logical
        self.commodities = items
        self.links = links


def _allowed(logical: LogicalTopology, c: Commodity, dist_from: list[int], dist_to: dict[int, list[int]]) -> list[int]:
    """Links of the hop-shortest-path DAG from c's source towards c's destinations."""
    out = []
    for x in logical.links:
        if dist_from[x.src] + 1 != dist_from[x.dst] or x.dst == c.source:
            continue
        if len(c.dests) == 1:
            d = c.dests[0]
            if dist_from[x.src] + 1 + dist_to[d][x.dst] != dist_from[d]:
                continue
        out.append(x.index)
    return out


def _representatives(logical: LogicalTopology, items: list[Commodity]) -> tuple[list[Commodity], int, dict]:
    """Commodities that get variables, the number of rotations, and the map
    (source, dests, piece) -> commodity for expanding rotated copies."""
    key = {(c.source, c.dests, c.piece): c for c in items}
    k = logical.rotation
    if k is None:
        return items, 1, key
    n = logical.n
    reps = [c for c in items if c.source < k]
    # every commodity must be a rotation of a representative
    for c in items:
        a = c.source // k
        src = c.source % k
        dests = tuple(sorted((d - a * k) % n for d in c.dests))
        if (src, dests, c.piece) not in key:
            return items, 1, key
    return reps, n // k, key


def rotate(c: Commodity, a: int, k: int, n: int, key: dict) -> Commodity:
    dests = tuple(sorted((d + a * k) % n for d in c.dests))
    return key[((c.source + a * k) % n, dests, c.piece)]


def heuristic_tree(logical: LogicalTopology, c: Commodity, allowed: list[int]) -> list[int]:
    """Cheapest tree within the DAG (each rank takes its cheapest incoming DAG link from a rank
    already reached; a link costs alpha plus the slot time of its narrowest part, shared limits
    included, so crossing a NIC once and spreading inside the node wins), pruned to what the
    destinations need."""
    slow = {e: logical.links[e].beta for e in allowed}
    for limit in logical.limits:
        for e in limit.links:
            if e in slow:
                slow[e] = max(slow[e], limit.beta)
    best: dict[int, tuple[float, int]] = {c.source: (0.0, -1)}
    by_layer = sorted(allowed, key=lambda e: (logical.links[e].src != c.source, logical.links[e].dst))
    changed = True
    while changed:
        changed = False
        for e in by_layer:
            x = logical.links[e]
            if x.src not in best:
                continue
            cost = best[x.src][0] + x.alpha + slow[e] * (1.0 + 1e-6 * x.internode)
            if x.dst not in best or cost < best[x.dst][0] - 1e-12:
                best[x.dst] = (cost, e)
                changed = True
    needed: set[int] = set()
    for d in c.dests:
        v = d
        while v != c.source:
            if v not in best:
                raise ValueError(f"rank {d} unreachable from {c.source}")
            e = best[v][1]
            if e in needed:
                break
            needed.add(e)
            v = logical.links[e].src
    return sorted(needed)


def _prune(logical: LogicalTopology, c: Commodity, chosen: list[int]) -> list[int]:
    """The links of ``chosen`` on the way from c's source to its destinations (a rank that
    received but forwards to no destination is dropped)."""
    into = {logical.links[e].dst: e for e in chosen}
    keep: set[int] = set()
    for d in c.dests:
        v = d
        while v != c.source:
            e = into[v]
            if e in keep:
                break
            keep.add(e)
            v = logical.links[e].src
    return sorted(keep)


def route(logical: LogicalTopology, items: list[Commodity], backend: str, time_limit: float,
          *, verbose: bool = True) -> tuple[Routes, Solved | None]:
    """Solve the routing MILP (see module docstring); returns the routes and the solve record
    (None when the model was trivial)."""
    import pulp

    n = logical.n
    reps, rotations, key = _representatives(logical, items)
    k = logical.rotation or n
    dist_from = {c.source: logical.hops_from(c.source) for c in reps}
    dests_all = {d for c in reps for d in c.dests}
    dist_to = {d: logical.hops_to(d) for d in dests_all} if any(len(c.dests) == 1 for c in reps) else {}
    allowed = {c.id: _allowed(logical, c, dist_from[c.source], dist_to) for c in reps}
    heuristic = {c.id: heuristic_tree(logical, c, allowed[c.id]) for c in reps}

    model = pulp.LpProblem("routing", pulp.LpMinimize)
    T = pulp.LpVariable("T", lowBound=0)
    x: dict[tuple[int, int], pulp.LpVariable] = {}
    for c in reps:
        for e in allowed[c.id]:
            x[(c.id, e)] = pulp.LpVariable(f"x_{c.id}_{e}", cat="Binary")
    hop = max((x.alpha + x.beta for x in logical.links), default=1.0)
    depth = max((max(d for d in dist_from[c.source] if d <= n) for c in reps), default=1)
    big_m = (depth + 1) * hop
    load: dict[int, list] = {}
    cost_terms = []
    for c in reps:
        into: dict[int, list] = {}
        for e in allowed[c.id]:
            into.setdefault(logical.links[e].dst, []).append(x[(c.id, e)])
        reached = {v: pulp.lpSum(vs) for v, vs in into.items()}
        t = {c.source: 0.0}
        for v in into:
            t[v] = pulp.LpVariable(f"t_{c.id}_{v}", lowBound=0)
        for v, total in reached.items():
            if v in c.dests:
                model += total == 1
            else:
                model += total <= 1
        for d in c.dests:
            if d not in reached:
                raise ValueError(f"rank {d} cannot be reached from rank {c.source} in the logical topology")
            model += T >= t[d]
        for e in allowed[c.id]:
            link = logical.links[e]
            var = x[(c.id, e)]
            if link.src != c.source:
                model += var <= reached[link.src]
            model += t[link.dst] >= t[link.src] + (link.alpha + link.beta) - big_m * (1 - var)
            cost_terms.append(link.beta * var)
            for a in range(rotations):
                target = logical.rotate_link(e, a) if rotations > 1 else e
                load.setdefault(target, []).append(var)
    for e, vs in load.items():
        link = logical.links[e]
        model += T >= pulp.lpSum(vs) * (link.beta / link.lanes)
    for limit in logical.limits:
        terms = [v for e in limit.links for v in load.get(e, ())]
        if terms:
            model += T >= pulp.lpSum(terms) * limit.beta
    model += T + EPSILON * pulp.lpSum(cost_terms) / max(1, len(reps))
    solved = solve(model, "routing MILP", backend, time_limit, verbose=verbose)
    trees: dict[int, list[int]] = {}
    for c in reps:
        if solved.has_solution:
            chosen = [e for e in allowed[c.id] if (x[(c.id, e)].value() or 0) > 0.5]
            trees[c.id] = _prune(logical, c, chosen)
        else:
            trees[c.id] = heuristic[c.id]
    links: dict[int, list[int]] = {}
    for c in reps:
        for a in range(rotations):
            rc = rotate(c, a, k, n, key) if rotations > 1 else c
            links[rc.id] = sorted(logical.rotate_link(e, a) if rotations > 1 else e for e in trees[c.id])
    return Routes(logical, items, links), solved
