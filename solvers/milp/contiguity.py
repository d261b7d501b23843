"""Stage 3: the scheduling / contiguity MILP. Exact start times, and which consecutive hops of a
lane travel together as one transfer.

The lanes and their orders come from stage 2. Two consecutive hops of a lane may merge when
their slots are consecutive at both ends (the caller decides, ``mergeable``): the merged
transfer pays the latency once (alpha + k beta for k slots), which is what makes batching pay on
high-latency links, but every hop in it lands when the whole transfer lands, and it starts only
when all its hops' data is present. Variables per hop: start s, lane release e, landing d; a
binary m per mergeable pair. Constraints (M a big constant):

    s_h >= d_pred(h)                      data present
    e_h >= s_h + alpha + beta_h           one hop alone
    not merged:  s_h' >= e_h              the lane is free again
    merged:      s_h' = s_h,  e_h' >= e_h + beta_h',  d_h >= d_h'
    d_h >= e_h,  T >= d_h

minimize T (plus a small price on the sum of landings so every hop lands as early as it can).
Shared limits are not modelled here (stage 2 ordered their traffic); the simulator judges the
result. With no solution in time, stage 2's schedule stands with one hop per transfer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ccl.core import interrupt
from ccl.core.collector import gc_paused

from .emit import Batch
from .logical import LogicalTopology
from .lp import OutOfTime, Solved, new_var, not_solved, solve, tick
from .ordering import Plan


def hop_duration(logical: LogicalTopology, link: int) -> float:
    beta = logical.links[link].beta
    for limit in logical.limits:
        if link in limit.links:
            beta = max(beta, limit.beta)
    return beta


def merge(logical: LogicalTopology, plan: Plan, mergeable: Callable[[int, int], bool], backend: str,
          time_limit: float, *, verbose: bool = True) -> tuple[list[Batch], float, Solved | None]:
    """Batches of hops and their makespan; falls back to one hop per batch (also when the
    ``time_limit`` seconds, building the model included, run out or Ctrl-C comes)."""
    deadline = time.monotonic() + time_limit
    t0 = time.perf_counter()
    try:
        with gc_paused():
            return _merge(logical, plan, mergeable, backend, deadline, verbose=verbose)
    except OutOfTime:
        single = [Batch((h.id,)) for h in plan.hops]
        return single, plan.makespan, not_solved("contiguity MILP", time.perf_counter() - t0, verbose=verbose)


def _merge(logical: LogicalTopology, plan: Plan, mergeable: Callable[[int, int], bool], backend: str,
           deadline: float, *, verbose: bool = True) -> tuple[list[Batch], float, Solved | None]:
    import pulp  # slow to import: loaded when a model is built

    hops = plan.hops
    pairs = []
    for _lane, order in sorted(plan.lanes.items()):
        for a, b in zip(order, order[1:]):
            pairs.append((a, b, mergeable(a, b)))
    single = [Batch((h.id,)) for h in hops]
    if not any(ok for _, _, ok in pairs):
        return single, plan.makespan, None
    model = pulp.LpProblem("contiguity", pulp.LpMinimize)
    T = new_var(model, "T", lowBound=0)
    s = [new_var(model, f"s_{h.id}", lowBound=0) for h in hops]
    e = [new_var(model, f"e_{h.id}", lowBound=0) for h in hops]
    d = [new_var(model, f"d_{h.id}", lowBound=0) for h in hops]
    big = 2.0 * plan.makespan + sum(logical.links[h.link].alpha + hop_duration(logical, h.link) for h in hops)
    for k, h in enumerate(hops):
        if k % 256 == 0:
            tick(deadline)
        link = logical.links[h.link]
        if h.pred >= 0:
            model += s[h.id] >= d[h.pred]
        model += e[h.id] >= s[h.id] + link.alpha + hop_duration(logical, h.link)
        model += d[h.id] >= e[h.id]
        model += T >= d[h.id]
    m = {}
    for k, (a, b, ok) in enumerate(pairs):
        if k % 256 == 0:
            tick(deadline)
        if not ok:
            model += s[b] >= e[a]
            continue
        var = new_var(model, f"m_{a}_{b}", cat="Binary")
        m[(a, b)] = var
        model += s[b] >= e[a] - big * var
        model += s[b] <= s[a] + big * (1 - var)
        model += s[b] >= s[a] - big * (1 - var)
        model += e[b] >= e[a] + hop_duration(logical, hops[b].link) - big * (1 - var)
        model += d[a] >= d[b] - big * (1 - var)
    model += T + 1e-3 * pulp.lpSum(d) / max(1, len(hops))
    tick(deadline)
    solved = solve(model, "contiguity MILP", backend, interrupt.left(deadline), verbose=verbose)
    if not solved.has_solution:
        return single, plan.makespan, solved
    merged_with_next = {a for (a, b), var in m.items() if (var.value() or 0) > 0.5}
    batches: list[Batch] = []
    for _, order in sorted(plan.lanes.items()):
        run = [order[0]]
        for a, b in zip(order, order[1:]):
            if a in merged_with_next:
                run.append(b)
            else:
                batches.append(Batch(tuple(run)))
                run = [b]
        batches.append(Batch(tuple(run)))
    for h in hops:  # the emitter orders batches by these times
        h.start = s[h.id].value() or 0.0
        h.land = d[h.id].value() or 0.0
    return batches, pulp.value(T), solved
