"""Group collectives: one collective on every group of a cluster at once (``ccl.core.groups``).

``synthesize_groups`` synthesizes each group's collective on the group's own machine, whose
shared links carry a fair share of their bandwidth (the other groups run the same collective at
the same time), joins the schedules into one schedule of the whole machine, verifies it (every
group's result at once) and simulates it with all groups sharing the links. Groups whose
machines are alike (the TP groups of identical nodes, the DP groups of a rail-optimized fabric)
are synthesized once. The report gives each group's time alone, all groups' time together and
a lower bound for them together (``ccl.core.groups.shared_bound``, and each group's own bound).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..core.algorithm import Algorithm
from ..core.collective import builtin
from ..core.errors import InputError
from ..core.groups import Groups, group_topologies, parse_groups, union, usage
from ..core.problem import Problem, Request
from ..core.topology import Topology
from ..core.verify import verify
from .group_bound import groups_bound
from .group_bound import shape as _shape
from .stages import synthesize
from .timing import simulate as timed
from .tuner import tune


@dataclass(frozen=True)
class GroupResult:
    groups: Groups
    kind: str
    size: float
    algorithm: Algorithm  # every group's schedule, on the whole machine
    per_group: tuple[Algorithm, ...]  # on each group's shared machine
    alone_us: tuple[float, ...]  # each group's schedule on its machine at full bandwidth
    together_us: float  # every group at once on the whole machine
    bound_us: float
    bound_why: str
    solvers: tuple[str, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"groups": self.groups.to_json(), "collective": self.kind, "size": self.size,
                "name": self.algorithm.name, "solvers": list(self.solvers),
                "alone_us": [round(x, 3) for x in self.alone_us], "together_us": round(self.together_us, 3),
                "bound_us": round(self.bound_us, 3), "bound": self.bound_why,
                "bound_ratio": round(self.together_us / self.bound_us, 4) if self.bound_us > 0 else None,
                "slowdown_from_sharing": round(self.together_us / max(self.alone_us), 4),
                "transfers": len(self.algorithm.transfers), "synthesis_seconds": round(self.seconds, 3)}


def _one(sub: Topology, kind: str, root: int | None, solver: str, size: float, chunks: int,
         time_budget: float | None, quick: bool = False) -> Algorithm:
    if solver == "auto":
        found = tune(sub, kind, root=root, sizes=[int(size)], chunks=chunks, time_budget=time_budget,
                     cache=False, native=False).schedule_set  # a schedule of ours: the groups are simulated together
        return found.pick(size).algorithm
    request = Request(solver, chunks=chunks, size=None if quick else size)
    return synthesize(Problem(sub, builtin(kind, sub.n_ranks, root), request)).algorithm


def synthesize_groups(topology: Topology, kind: str, groups: Groups | str, *, size: float, solver: str = "auto",
                      chunks: int = 1, root: int | None = None, time_budget: float | None = None,
                      progress: Any = None, quick: bool = False) -> GroupResult:
    """See the module docstring. ``root`` is a group rank (every group's root at that index).
    ``quick``: the solver is not told the size (a size-aware one such as packing then skips
    its judged search of pipeline shapes: ``ccl place`` compares many placements)."""
    def simulate(alg: Algorithm, nbytes: float) -> Any:
        return timed(alg, nbytes, bound=False, baselines=False)

    start = time.perf_counter()
    if isinstance(groups, str):
        groups = parse_groups(groups, topology)
    if not size > 0:
        raise InputError(f"size must be a positive number of bytes, got {size!r}")
    per_group: list[Algorithm] = []
    machines: list[Topology] = []
    done: dict[tuple, Algorithm] = {}
    alone: list[float] = []
    solo_times: dict[tuple, float] = {}
    count = usage(topology, groups) if len(groups) > 1 else {}  # one group shares nothing
    for i, members in enumerate(groups.members):
        sub, full = group_topologies(topology, groups, i, count=count)
        key = _shape(sub)
        if key not in done:
            if progress is not None:
                progress(f"group {i + 1} of {len(groups)}: {kind} on {len(members)} ranks ({solver})")
            alg = _one(sub, kind, root, solver, size, chunks, time_budget, quick)
            done[key] = alg
        alg = done[key]
        if alg.topology is not sub:  # an alike group's schedule: checked with the rest in the joined one
            alg = Algorithm(alg.name, alg.collective, sub, alg.transfers, alg.rounds, alg.solver)
        per_group.append(alg)
        machines.append(full)
        solo_key = (key, _shape(full))
        if solo_key not in solo_times:  # alike groups alone: timed once
            solo = Algorithm(alg.name, alg.collective, full, alg.transfers, alg.rounds, alg.solver)
            solo_times[solo_key] = simulate(solo, size).time_us
        alone.append(solo_times[solo_key])
    # the bound ccl simulate finds for the joined schedule too (ccl.compiler.group_bound)
    gb = groups_bound(topology, groups, kind, [a.collective for a in per_group], size, machines=machines)
    joined = union(topology, groups, per_group)
    verify(joined)  # every group's postcondition, in one schedule of the whole machine
    if len(groups) == 1 and per_group[0].topology is topology:
        together = alone[0]  # the one group is the whole machine: the joined schedule is the one timed alone
    else:
        if progress is not None:
            progress(f"simulating {len(groups)} groups at once")
        together = simulate(joined, size).time_us
    return GroupResult(groups, kind, size, joined, tuple(per_group), tuple(alone), together, gb.bound_us, gb.why,
                       tuple(sorted({a.solver for a in per_group})), time.perf_counter() - start)
