"""Stage 1: the routing MILP. Which links carry each commodity.

A commodity is one slot's data: a source rank and the ranks that need it (every other rank for
allgather and broadcast, one rank for alltoall). Its route is a tree (a path for one
destination) over the links of paths at most one hop longer than the shortest from its source
(``_allowed``): that keeps the model small, as TACCL's shortest-path sets do, while letting a
slot cross the network once and spread inside a node. Where the model would grow past
MAX_ROUTING_BINARIES the shortest paths alone are used. The timing constraints rule out cycles.

Variables: x[c, e] (commodity c uses link e), t[c, v] (when c reaches v without contention), T.
Constraints: every destination receives c exactly once and any other rank at most once; a rank
forwards only what it received; t[c, v] >= t[c, u] + alpha + beta where x[c, (u, v)] (big-M);
T >= t[c, d]; and the relaxed bandwidth: T >= the load of every link (slots x beta / lanes) and
of every shared limit. Objective: T plus a small price on beta to avoid needless hops, plus the
sketch's switch policy: a small price (``fewest``) or reward (``most``) per distinct
rank-to-rank connection used through switch vertices (TACCL's uc-min / uc-max).

Rotational symmetry (the sketch's): only the commodities whose source is below the rotation k
get variables; commodity c rotated a times uses link e rotated a times, which is how loads are
counted. Without a MILP solution in time, shortest-path trees (the heuristic every solve starts
from) are the routes.
"""

from __future__ import annotations

import time

from ccl.core import interrupt
from ccl.core.collector import gc_paused
from ccl.core.errors import InfeasibleError

from .commodities import Commodity, Routes, representatives, rotate
from .logical import LogicalTopology
from .lp import OutOfTime, Solved, new_var, not_solved, progress, solve, tick
from .ordering import list_schedule

EPSILON = 1e-3  # price of link time in the objective, relative to the makespan


def _allowed(logical: LogicalTopology, c: Commodity, dist_from: list[int], dist_to: dict[int, list[int]],
             slack: int = 0) -> list[int]:
    """Links on paths from c's source towards its destinations at most ``slack`` hops longer than
    the shortest (slack 0: the hop-shortest-path DAG; slack 1 also lets a slot cross to a rank
    as far from the source as the sender, e.g. over the network once and then inside the node)."""
    out = []
    single = len(c.dests) == 1
    for x in logical.links:
        if x.dst == c.source or (single and x.src == c.dests[0]):
            continue
        if dist_from[x.src] + 1 > dist_from[x.dst] + slack:
            continue
        if single:
            d = c.dests[0]
            if dist_from[x.src] + 1 + dist_to[d][x.dst] > dist_from[d] + slack:
                continue
        out.append(x.index)
    return out


def allowed_links(logical: LogicalTopology, reps: list[Commodity], budget: int, per_link: int = 1
                  ) -> dict[int, list[int]]:
    """Commodity id -> the links it may use: paths at most one hop longer than the shortest, or
    the shortest only when that would make more than ``budget`` variables (``per_link`` each)."""
    dist_from = {c.source: logical.hops_from(c.source) for c in reps}
    single = {c.dests[0] for c in reps if len(c.dests) == 1}
    dist_to = {d: logical.hops_to(d) for d in single}
    allowed = {c.id: _allowed(logical, c, dist_from[c.source], dist_to, 1) for c in reps}
    if sum(map(len, allowed.values())) * per_link > budget:
        allowed = {c.id: _allowed(logical, c, dist_from[c.source], dist_to, 0) for c in reps}
    return allowed


MAX_ROUTING_BINARIES = 25_000  # above this, slack 0 keeps the routing model small


def _slot_time(logical: LogicalTopology, allowed: list[int]) -> dict[int, float]:
    """Per-slot time of each link including the shared limits it crosses."""
    slow = {e: logical.links[e].beta for e in allowed}
    for limit in logical.limits:
        for e in limit.links:
            if e in slow:
                slow[e] = max(slow[e], limit.beta)
    return slow


def _cheapest(logical: LogicalTopology, links: list[int], sources: dict[int, float], cost) -> dict[int, tuple[float, int]]:
    """Bellman-Ford from ``sources`` (rank -> cost) over ``links``: rank -> (cost, incoming link)."""
    best: dict[int, tuple[float, int]] = {v: (c0, -1) for v, c0 in sources.items()}
    changed = True
    while changed:
        changed = False
        for e in links:
            x = logical.links[e]
            if x.src not in best:
                continue
            total = best[x.src][0] + cost(e)
            if x.dst not in best or total < best[x.dst][0] - 1e-12:
                best[x.dst] = (total, e)
                changed = True
    return best


def _tree_from(logical: LogicalTopology, c: Commodity, best: dict[int, tuple[float, int]]) -> list[int] | None:
    needed: set[int] = set()
    for d in c.dests:
        v = d
        while v != c.source:
            if v not in best or best[v][1] < 0:
                return None
            e = best[v][1]
            if e in needed:
                break
            needed.add(e)
            v = logical.links[e].src
    return sorted(needed)


def heuristic_tree(logical: LogicalTopology, c: Commodity, allowed: list[int]) -> list[int]:
    """Least-latency tree over the allowed links (a link costs alpha plus the slot time of its
    narrowest part, shared limits included), pruned to what the destinations need."""
    slow = _slot_time(logical, allowed)
    best = _cheapest(logical, allowed, {c.source: 0.0}, lambda e: logical.links[e].alpha + slow[e])
    tree = _tree_from(logical, c, best)
    if tree is None:
        reached = set(best)
        lost = next(d for d in c.dests if d not in reached)
        a, b = (lost, c.source) if logical.reverse else (c.source, lost)
        sketch = logical.sketch
        raise InfeasibleError(f"the sketch leaves no path from rank {a} to rank {b} on {logical.topology.name!r} "
                              f"(relays {list(sketch.relays) if sketch.relays is not None else 'all'}, inter-node pairs "
                              f"{[list(p) for p in sketch.internode] if sketch.internode is not None else 'all'})",
                              bound="sketch connectivity")
    return tree


def hierarchical_tree(logical: LogicalTopology, c: Commodity, allowed: list[int], entry_load: dict[int, int]
                      ) -> list[int] | None:
    """A tree that crosses into every other node once: least-latency inside the source's node, one
    entry link per other node (between the ranks used least so far as senders or receivers of
    crossings, which spreads the traffic over NICs and forwarding ranks), least-latency inside
    that node from its entry rank. None when the allowed links do not permit it."""
    node = logical.topology.node_of
    slow = _slot_time(logical, allowed)
    home = node[c.source]
    inside = [e for e in allowed if node[logical.links[e].src] == node[logical.links[e].dst]]

    def cost(e: int) -> float:
        return logical.links[e].alpha + slow[e]

    best = _cheapest(logical, [e for e in inside if node[logical.links[e].src] == home], {c.source: 0.0}, cost)
    for target in sorted({node[d] for d in c.dests} - {home}):
        entries = [e for e in allowed if logical.links[e].src in best and node[logical.links[e].src] == home
                   and node[logical.links[e].dst] == target]
        if not entries:
            return None
        def load(e: int) -> int:
            return entry_load.get(logical.links[e].src, 0) + entry_load.get(logical.links[e].dst, 0)

        e = min(entries, key=lambda e: (load(e), best[logical.links[e].src][0] + cost(e), e))
        entry_load[logical.links[e].src] = entry_load.get(logical.links[e].src, 0) + 1
        entry_load[logical.links[e].dst] = entry_load.get(logical.links[e].dst, 0) + 1
        x = logical.links[e]
        here = _cheapest(logical, [f for f in inside if node[logical.links[f].src] == target],
                         {x.dst: best[x.src][0] + cost(e)}, cost)
        here[x.dst] = (here[x.dst][0], e)
        for v, val in here.items():
            if v not in best:
                best[v] = val
    return _tree_from(logical, c, best)


def prune(logical: LogicalTopology, c: Commodity, chosen: list[int]) -> list[int]:
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
          *, verbose: bool = True) -> tuple[Routes, Solved | None, list[tuple[str, Routes]]]:
    """Solve the routing MILP (see module docstring) within ``time_limit`` seconds, building it
    included; returns the routes and the solve record (None when the model was trivial). Out of
    time (or on Ctrl-C) the best heuristic's routes."""
    deadline = time.monotonic() + time_limit
    n = logical.n
    reps, rotations, key = representatives(logical, items)
    k = logical.rotation or n
    allowed = allowed_links(logical, reps, MAX_ROUTING_BINARIES)
    def expand(trees: dict[int, list[int]]) -> Routes:
        links: dict[int, list[int]] = {}
        for c in reps:
            for a in range(rotations):
                rc = rotate(c, a, k, n, key) if rotations > 1 else c
                links[rc.id] = sorted(logical.rotate_link(e, a) if rotations > 1 else e for e in trees[c.id])
        return Routes(logical, items, links)

    heuristics = heuristic_candidates(logical, reps, allowed, expand)
    start_name, start_trees, start_routes, start_time = min(heuristics, key=lambda h: h[3])
    extras = [(name, routes) for name, _, routes, _ in heuristics]
    if verbose:
        progress(f"routing heuristics: {start_name} plans best, {start_time:.3f} us")
    t0 = time.perf_counter()
    try:
        with gc_paused():
            return _route_milp(logical, reps, rotations, allowed, start_trees, expand, extras, backend, deadline,
                               verbose)
    except OutOfTime:  # the deadline passed (or Ctrl-C came) while the model was built
        return start_routes, not_solved("routing MILP", time.perf_counter() - t0, verbose=verbose), extras


def _route_milp(logical, reps, rotations, allowed, start_trees, expand, extras, backend, deadline, verbose):
    """Build and solve the routing MILP by ``deadline``, warm-started from ``start_trees``;
    raises OutOfTime when the deadline passes (or Ctrl-C comes) while it is built."""
    import pulp  # slow to import: loaded when a model is built

    n = logical.n
    model = pulp.LpProblem("routing", pulp.LpMinimize)
    T = new_var(model, "T", lowBound=0)
    x: dict[tuple[int, int], pulp.LpVariable] = {}
    for c in reps:
        for e in allowed[c.id]:
            x[(c.id, e)] = new_var(model, f"x_{c.id}_{e}", cat="Binary")
    hop = max((x.alpha + x.beta for x in logical.links), default=1.0)
    big_m = n * hop  # no path is longer than n - 1 hops
    load: dict[int, list] = {}
    cost_terms = []
    bounds_on_T = []  # right-hand sides of T >= ..., to value the warm start
    start: dict = {}
    for c in reps:
        tick(deadline)
        into: dict[int, list] = {}
        for e in allowed[c.id]:
            into.setdefault(logical.links[e].dst, []).append(x[(c.id, e)])
        reached = {v: pulp.lpSum(vs) for v, vs in into.items()}
        t = {c.source: 0.0}
        for v in into:
            t[v] = new_var(model, f"t_{c.id}_{v}", lowBound=0)
        for v, total in reached.items():
            if v in c.dests:
                model += total == 1
            else:
                model += total <= 1
        for d in c.dests:
            if d not in reached:
                raise ValueError(f"rank {d} cannot be reached from rank {c.source} in the logical topology")
            model += T >= t[d]
            bounds_on_T.append(t[d])
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
        # warm start: the chosen heuristic tree, arrival times along it
        chosen = set(start_trees[c.id])
        arrival = {c.source: 0.0}
        for e in sorted(chosen, key=lambda e: _hops_from_source(logical, chosen, c.source, logical.links[e].src)):
            link = logical.links[e]
            arrival[link.dst] = arrival[link.src] + link.alpha + link.beta
        for e in allowed[c.id]:
            start[x[(c.id, e)]] = 1.0 if e in chosen else 0.0
        for v in into:
            start[t[v]] = arrival.get(v, 0.0)
    for e, vs in load.items():
        link = logical.links[e]
        rhs = pulp.lpSum(vs) * (link.beta / link.lanes)
        model += T >= rhs
        bounds_on_T.append(rhs)
    for limit in logical.limits:
        terms = [v for e in limit.links for v in load.get(e, ())]
        if terms:
            rhs = pulp.lpSum(terms) * limit.beta
            model += T >= rhs
            bounds_on_T.append(rhs)
    # switch policy (TACCL's uc-min / uc-max): fewest or most distinct rank-to-rank connections
    # through switch vertices; y_e = 1 when any commodity uses switched link e
    def through_switch(e: int) -> bool:
        link = logical.links[e]
        a, b = (link.dst, link.src) if logical.reverse else (link.src, link.dst)
        return logical.topology.link(a, b) is None

    switched = [e for e in load if through_switch(e)] if logical.switch_policy else []
    policy_terms = []
    if switched:
        price = EPSILON * min(x.alpha + x.beta for x in logical.links)
        sign = 1.0 if logical.switch_policy == "fewest" else -1.0
        for e in switched:
            y = new_var(model, f"y_{e}", cat="Binary")
            if sign > 0:
                for v in load[e]:
                    model += y >= v
            else:
                model += y <= pulp.lpSum(load[e])
            policy_terms.append(sign * price * y)
            start[y] = 1.0 if any(start.get(v, 0.0) > 0.5 for v in load[e]) else 0.0
    model += T + EPSILON * pulp.lpSum(cost_terms) / max(1, len(reps)) + pulp.lpSum(policy_terms)
    for var, value in start.items():
        var.setInitialValue(value)
    start[T] = max((pulp.value(b) if not isinstance(b, float) else b) for b in bounds_on_T)
    tick(deadline)
    solved = solve(model, "routing MILP", backend, interrupt.left(deadline), verbose=verbose, start=start)
    if not solved.has_solution:
        return expand(start_trees), solved, extras
    trees = {c.id: prune(logical, c, [e for e in allowed[c.id] if (x[(c.id, e)].value() or 0) > 0.5]) for c in reps}
    return expand(trees), solved, extras


def _hops_from_source(logical: LogicalTopology, tree: set[int], source: int, v: int) -> int:
    into = {logical.links[e].dst: e for e in tree}
    d = 0
    while v != source:
        v = logical.links[into[v]].src
        d += 1
    return d


def heuristic_candidates(logical: LogicalTopology, reps: list[Commodity], allowed: dict[int, list[int]], expand):
    """(name, trees, routes, planned makespan) of the heuristics: least-latency trees and, on
    multi-node topologies, trees that cross into each node once."""
    candidates = [("least-latency trees", {c.id: heuristic_tree(logical, c, allowed[c.id]) for c in reps})]
    if logical.topology.n_nodes > 1 and any(len(c.dests) > 1 for c in reps):
        entry_load: dict[int, int] = {}
        spread = {}
        for c in reps:
            tree = hierarchical_tree(logical, c, allowed[c.id], entry_load)
            spread[c.id] = tree if tree is not None else candidates[0][1][c.id]
        candidates.append(("node-crossing trees", spread))
    out = []
    for name, trees in candidates:
        routes = expand(trees)
        out.append((name, trees, routes, list_schedule(routes).makespan))
    return out
