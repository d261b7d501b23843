"""The time-expanded formulation (TE-CCL class): routing decided with time in the model.

Time is cut into K epochs of length tau. A link carries at most floor(tau / beta) x lanes slots
per epoch, and what it sends in epoch k is usable at the destination from epoch k + 1 + delta,
delta = ceil(alpha / tau); a shared limit carries at most tau / beta_limit slots per epoch.
tau is at least the largest per-slot time of a link (so every link carries at least one slot an
epoch), and long enough that the shortest-path schedule spans about 16 epochs, which keeps the
model small at every size.

* MILP mode (multicast: allgather, broadcast; copies at ranks): binary F[c, l, k] (commodity c
  on link l in epoch k) and B[c, v, k] (v holds c at the start of epoch k);
  B[c, v, k+1] <= B[c, v, k] + sum of F arriving at v by then; F[c, l, k] <= B[c, src(l), k];
  B nondecreasing; every destination holds c at epoch K.
* LP mode (alltoall: one destination per commodity, no copies needed): continuous flow with
  storage at ranks; flow conservation per rank and epoch; everything at its destination by K.

Both maximize how early data lands (the sum over epochs of delivered commodity-destination
pairs), with a tiny price on sends. K starts at three quarters of the heuristic schedule (and
at least the hop bound) and grows until the model is feasible. The result is a set of routes (each commodity's links, the earliest delivery to every
rank; for LP flows, the path carrying most of the commodity) handed to the same ordering and
contiguity stages as the routing MILP. Variables exist only on the links of the commodity's
hop-shortest-path DAG and in epochs it can reach them, and rotational symmetry keeps only
representative commodities, as in the routing MILP.
"""

from __future__ import annotations

import math
import time

from ccl.core import interrupt
from ccl.core.collector import gc_paused

from .commodities import Commodity, Routes, representatives, rotate
from .logical import LogicalTopology
from .lp import OutOfTime, Solved, long_sum, new_var, not_solved, progress, solve, tick
from .ordering import list_schedule
from .routing import allowed_links, heuristic_tree, prune

MAX_EPOCHS = 40
MAX_VARIABLES = 120_000  # send variables per model; beyond it the shortest paths alone are used


TARGET_EPOCHS = 16  # the heuristic schedule's makespan is cut into about this many epochs


def epoch_length(logical: LogicalTopology, estimate: float) -> float:
    """At least the slowest per-slot time (every link then carries a slot an epoch), and long
    enough that the shortest-path schedule (``estimate`` us) spans about TARGET_EPOCHS epochs."""
    beta = max((x.beta for x in logical.links), default=1.0)
    return max(beta, estimate / TARGET_EPOCHS)


def route_time_expanded(logical: LogicalTopology, items: list[Commodity], backend: str, time_limit: float,
                        *, lp: bool, verbose: bool = True) -> tuple[Routes, Solved | None, list[tuple[str, Routes]]]:
    deadline = time.monotonic() + time_limit  # everything below, the model building included
    n = logical.n
    reps, rotations, key = representatives(logical, items)
    k_rot = logical.rotation or n
    allowed = allowed_links(logical, reps, MAX_VARIABLES, per_link=TARGET_EPOCHS)
    heuristic = {c.id: heuristic_tree(logical, c, allowed[c.id]) for c in reps}
    estimate = _estimate(logical, items, reps, rotations, k_rot, key, heuristic)
    tau = epoch_length(logical, estimate)
    delta = {x.index: math.ceil(x.alpha / tau - 1e-9) for x in logical.links}
    cap = {x.index: max(1, int(tau / x.beta + 1e-9)) * x.lanes for x in logical.links}
    per_epoch = {i: tau / lim.beta for i, lim in enumerate(logical.limits)}
    # earliest epoch a commodity can be at a rank: hops so far, each at least 1 + delta epochs
    earliest = {}
    for c in reps:
        reach = {c.source: 0}
        changed = True
        while changed:
            changed = False
            for e in allowed[c.id]:
                x = logical.links[e]
                if x.src in reach:
                    t = reach[x.src] + 1 + delta[e]
                    if t < reach.get(x.dst, t + 1):
                        reach[x.dst] = t
                        changed = True
        earliest[c.id] = reach
    k_min = max(max(earliest[c.id][d] for d in c.dests) for c in reps)
    last: Solved | None = None
    K = max(k_min, math.ceil(0.75 * estimate / tau))
    while K <= MAX_EPOCHS and not interrupt.stop_due(deadline):
        if sum(map(len, allowed.values())) * K > MAX_VARIABLES:
            if verbose:
                progress(f"time-expanded model: {K} epochs would exceed {MAX_VARIABLES} send variables")
            break
        t0 = time.perf_counter()
        try:
            with gc_paused():
                result = _solve(logical, reps, rotations, allowed, earliest, delta, cap, per_epoch, K, backend,
                                deadline, lp, verbose)
        except OutOfTime:  # the deadline passed (or Ctrl-C came) while the model was built
            last = not_solved(f"time-expanded {'LP' if lp else 'MILP'} (K={K})", time.perf_counter() - t0,
                              verbose=verbose)
            break
        last, flows = result
        if last.has_solution:
            trees = {c.id: _trees(logical, c, allowed[c.id], flows, lp) for c in reps}
            break
        if last.status != "infeasible":
            break
        K += max(1, K // 4)
    else:
        trees = None
    if last is None or not last.has_solution:
        if verbose:
            progress("time-expanded model: no solution in time; shortest-path trees instead")
        trees = heuristic
    elif verbose:
        progress(f"time-expanded model: {K} epochs of {tau:.4g} us")
    extras = [("least-latency trees", _expand(logical, items, reps, rotations, k_rot, key, heuristic))]
    return _expand(logical, items, reps, rotations, k_rot, key, trees), last, extras


def _expand(logical, items, reps, rotations, k_rot, key, trees) -> Routes:
    n = logical.n
    links = {}
    for c in reps:
        for a in range(rotations):
            rc = rotate(c, a, k_rot, n, key) if rotations > 1 else c
            links[rc.id] = sorted(logical.rotate_link(e, a) if rotations > 1 else e for e in trees[c.id])
    return Routes(logical, items, links)


def _estimate(logical, items, reps, rotations, k_rot, key, trees) -> float:
    return list_schedule(_expand(logical, items, reps, rotations, k_rot, key, trees)).makespan


def _solve(logical, reps, rotations, allowed, earliest, delta, cap, per_epoch, K, backend, deadline, lp, verbose):
    """Build and solve the model with K epochs by ``deadline`` (``time.monotonic()``); raises
    OutOfTime when it passes (or Ctrl-C comes) while the model is built."""
    import pulp  # slow to import: loaded when a model is built

    model = pulp.LpProblem("time_expanded", pulp.LpMaximize)
    cat = "Continuous" if lp else "Binary"
    F: dict[tuple[int, int, int], pulp.LpVariable] = {}
    load: dict[tuple[int, int], list] = {}
    value = []
    sends = []
    for c in reps:
        tick(deadline)
        reach = earliest[c.id]
        arrive: dict[tuple[int, int], list] = {}
        for e in allowed[c.id]:
            x = logical.links[e]
            if x.src not in reach:
                continue
            for k in range(reach[x.src], K):
                t = k + 1 + delta[e]
                if t > K:
                    continue
                var = new_var(model, f"F_{c.id}_{e}_{k}", lowBound=0, upBound=1, cat=cat)
                F[(c.id, e, k)] = var
                arrive.setdefault((x.dst, t), []).append(var)
                sends.append(var)
                for a in range(rotations):
                    target = logical.rotate_link(e, a) if rotations > 1 else e
                    load.setdefault((target, k), []).append(var)
        ranks = {logical.links[e].src for e in allowed[c.id]} | {logical.links[e].dst for e in allowed[c.id]}
        if lp:  # flow with storage: S[v, k] = amount of c at v at the start of epoch k
            S = {}
            for v in ranks:
                for k in range(K + 1):
                    S[(v, k)] = 1.0 if (v == c.source and k == 0) else (0.0 if k == 0 else
                                                                        new_var(model, f"S_{c.id}_{v}_{k}", lowBound=0))
            for v in ranks:
                tick(deadline)
                for k in range(K):
                    out = [F[(c.id, e, k)] for e in allowed[c.id] if logical.links[e].src == v and (c.id, e, k) in F]
                    model += S[(v, k + 1)] == S[(v, k)] - pulp.lpSum(out) + pulp.lpSum(arrive.get((v, k + 1), []))
                    if out:
                        model += pulp.lpSum(out) <= S[(v, k)]
            for d in c.dests:
                model += S[(d, K)] == 1
                value.extend(S[(d, k)] for k in range(1, K + 1))
        else:  # multicast with copies: B[v, k] = v holds c at the start of epoch k
            B = {}
            for v in ranks:
                for k in range(K + 1):
                    if v == c.source:
                        B[(v, k)] = 1
                    elif k == 0 or k < earliest[c.id].get(v, K + 1):
                        B[(v, k)] = 0
                    else:
                        B[(v, k)] = new_var(model, f"B_{c.id}_{v}_{k}", cat="Binary")
            for v in ranks:
                if v == c.source:
                    continue
                tick(deadline)
                for k in range(K):
                    if isinstance(B[(v, k + 1)], int):
                        continue
                    model += B[(v, k + 1)] <= B[(v, k)] + pulp.lpSum(
                        var for t in range(k + 2) for var in arrive.get((v, t), []) if t <= k + 1)
                    model += B[(v, k + 1)] >= B[(v, k)]
            for (cid, e, k), var in F.items():
                if cid == c.id:
                    model += var <= B[(logical.links[e].src, k)]
            for d in c.dests:
                model += B[(d, K)] == 1  # K >= every destination's earliest epoch: a variable
                value.extend(B[(d, k)] for k in range(1, K + 1) if not isinstance(B[(d, k)], int))
    tick(deadline)
    for (e, _k), vs in load.items():
        model += pulp.lpSum(vs) <= cap[e]
    for i, limit in enumerate(logical.limits):
        for k in range(K):
            vs = [v for e in limit.links for v in load.get((e, k), ())]
            if vs:
                model += pulp.lpSum(vs) <= per_epoch[i]
    model += long_sum(value, deadline) - 1e-3 * long_sum(sends, deadline)
    tick(deadline)
    time_limit = interrupt.left(deadline)  # what building the model left
    solved = solve(model, f"time-expanded {'LP' if lp else 'MILP'} (K={K})", backend, time_limit, verbose=verbose)
    flows = {key: (var.value() or 0.0) for key, var in F.items()} if solved.has_solution else {}
    return solved, flows


def _trees(logical, c, allowed, flows, lp):
    """Routes from a solution: for multicast, the earliest delivery of c to every rank; for
    flows, the path carrying the most of c (greedy by flow from the source)."""
    if not lp:
        first: dict[int, tuple[int, int]] = {}
        for (cid, e, k), v in flows.items():
            if cid != c.id or v < 0.5:
                continue
            dst = logical.links[e].dst
            if dst not in first or (k, e) < first[dst]:
                first[dst] = (k, e)
        chosen = [e for _, e in first.values()]
        try:
            return prune(logical, c, chosen)
        except KeyError:
            return heuristic_tree(logical, c, allowed)
    used: dict[int, float] = {}
    for (cid, e, _k), v in flows.items():
        if cid == c.id and v > 1e-9:
            used[e] = used.get(e, 0.0) + v
    path = []
    v = c.source
    target = c.dests[0]
    while v != target:
        options = [e for e in allowed if logical.links[e].src == v]
        if not options:
            return heuristic_tree(logical, c, allowed)
        e = max(options, key=lambda e: (used.get(e, 0.0), -e))
        path.append(e)
        v = logical.links[e].dst
    return sorted(path)
