"""Synthesis: every solver behind one entry point, ``synthesize(problem) -> Algorithm``.

Solvers register by name with the collective kinds they implement; modules are imported only
when their solver runs, so heavy dependencies (z3, pulp) load on demand. Cost-aware solvers
(``SolverInfo.judged``) time candidate schedules with the cost judge the caller passes
(``ccl.core.judge.CostJudge``; the driver passes the simulator): this package imports no backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from ccl.core.algorithm import Algorithm
from ccl.core.errors import CollectiveError, InputError
from ccl.core.judge import CostJudge
from ccl.core.problem import Problem

__all__ = ["SOLVERS", "TEMPLATES", "SolverInfo", "Solution", "solve", "solvers_for", "synthesize"]

ALL_BUILTIN = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce", "gather", "scatter")


@dataclass(frozen=True)
class SolverInfo:
    name: str
    kinds: tuple[str, ...]
    summary: str
    module: str
    template: bool = True  # instant constructive algorithm (also a baseline)
    judged: bool = False  # needs a cost judge: its module's synthesize(problem, judge)
    compare_up_to: int = 0  # compare runs it unnamed, at one size, on up to this many ranks

    def load(self):
        """The module's ``synthesize(problem)`` (``synthesize(problem, judge)`` when
        ``judged``); modules with several variants read ``problem.request.solver``."""
        return importlib.import_module(self.module).synthesize


SOLVERS: dict[str, SolverInfo] = {
    s.name: s
    for s in (
        SolverInfo("ring", ("allgather", "reducescatter", "allreduce", "broadcast", "reduce"),
                   "ring over the topology's links (pipelined chain for rooted collectives)", "solvers.templates.ring"),
        SolverInfo("multi-ring", ("allgather", "reducescatter", "allreduce", "broadcast", "reduce"),
                   "several rings side by side within the links' lanes and shared limits (NCCL channels)",
                   "solvers.templates.ring"),
        SolverInfo("rail-rings", ("allgather", "reducescatter", "allreduce", "broadcast", "reduce"),
                   "NCCL's multi-node rings: a channel per local index, inter-node hops on one NIC rail",
                   "solvers.templates.ring"),
        SolverInfo("direct", ALL_BUILTIN, "all-pairs: every piece sent straight to where it is needed",
                   "solvers.templates.direct"),
        SolverInfo("recursive-doubling", ("allgather", "allreduce"),
                   "recursive doubling (Bruck's algorithm for non-powers of two)", "solvers.templates.recursive"),
        SolverInfo("recursive-halving", ("reducescatter", "allreduce"),
                   "recursive halving; allreduce as halving reducescatter + doubling allgather", "solvers.templates.recursive"),
        SolverInfo("binomial-tree", ("broadcast", "reduce", "allreduce"),
                   "binomial tree; allreduce as reduce then broadcast", "solvers.templates.trees"),
        SolverInfo("double-binary-tree", ("broadcast", "reduce", "allreduce"),
                   "two complementary pipelined binary trees, half the data on each", "solvers.templates.trees"),
        SolverInfo("hierarchical", ("allreduce", "allgather", "reducescatter", "alltoall"),
                   "multi-node: intra-node phase, inter-node phase across same-index ranks, intra-node phase",
                   "solvers.templates.hierarchical"),
        SolverInfo("hierarchical-pipelined", ("allreduce",),
                   "hierarchical allreduce in pipeline stages (option pipeline; default 16 up to 4 nodes, 8 beyond): the intra-node phases "
                   "of some stages overlap the inter-node phase of others", "solvers.templates.cascade"),
        SolverInfo("torus-2d", ("allreduce", "allgather", "reducescatter"),
                   "2D-torus: reducescatter along rows, allreduce along columns, allgather along rows (nodes x rails, "
                   "or a linked grid such as torus:RxC)", "solvers.templates.cascade"),
        SolverInfo("torus-2d-tree", ("allreduce",),
                   "2D-torus ring/tree hybrid: the column allreduce as a pipelined double binary tree",
                   "solvers.templates.cascade"),
        SolverInfo("blueconnect", ("allreduce", "allgather", "reducescatter"),
                   "BlueConnect: ring reducescatters level by level over every level of the finest grid, allgathers "
                   "back; level order rotated over data parts where the levels' links are disjoint",
                   "solvers.templates.cascade"),
        SolverInfo("nvls", ("allreduce",),
                   "in-switch reduction (NVLink SHARP): shards reduced in each node's NVSwitch and multicast back, "
                   "pipelined in chunks; on several nodes nvls-sharp where the network reduces, else nvls-rails",
                   "solvers.templates.nvls"),
        SolverInfo("nvls-rails", ("allreduce",),
                   "NVLS in every node, ring reducescatter + allgather of the node sums along the rails, NVLS "
                   "multicast back", "solvers.templates.nvls"),
        SolverInfo("nvls-sharp", ("allreduce",),
                   "NVLS in every node, the node sums reduced and multicast by the network switches (InfiniBand "
                   "SHARP, sharp=on), NVLS multicast back", "solvers.templates.nvls"),
        SolverInfo("packing", ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather", "scatter"),
                   "throughput-optimal spanning-tree packing (ForestColl class), pipelined; allreduce as "
                   "reducescatter + allgather over the trees; gather and scatter over max-flow paths",
                   "solvers.packing", template=False, judged=True, compare_up_to=64),
        SolverInfo("smt", ALL_BUILTIN + ("custom",),
                   "exact z3 synthesis (SCCL class): least steps, least rounds, instances (--steps/--rounds); "
                   "`ccl pareto` for frontiers", "solvers.smt", template=False),
        SolverInfo("milp", ("allgather", "alltoall", "reducescatter", "allreduce", "broadcast"),
                   "sketch-guided routing MILP, ordering heuristic, contiguity MILP (PuLP: HiGHS or CBC)",
                   "solvers.milp", template=False, judged=True),
        SolverInfo("teccl", ("allgather", "alltoall", "reducescatter", "allreduce", "broadcast"),
                   "time-expanded routing (MILP with copies; LP for alltoall), then ordering and contiguity",
                   "solvers.milp", template=False, judged=True),
    )
}

# The instant constructive algorithms (baselines, swept by the template tests); the others search.
TEMPLATES: tuple[str, ...] = tuple(name for name, info in SOLVERS.items() if info.template)


@dataclass(frozen=True)
class Solution:
    """A solver's schedule and what it has to say about how it got there (JSON-able details:
    model sizes, gaps, candidates, bounds), reported by ``ccl synthesize --json``."""

    algorithm: Algorithm
    details: dict = field(default_factory=dict)


def solvers_for(kind: str) -> list[str]:
    return [name for name, info in SOLVERS.items() if kind in info.kinds]


def synthesize(problem: Problem, *, judge: CostJudge | None = None) -> Algorithm:
    """Run the solver the problem's request names. Raises the project's errors only."""
    return solve(problem, judge=judge).algorithm


def solve(problem: Problem, *, judge: CostJudge | None = None) -> Solution:
    """``synthesize`` with the solver's details. A solver module's ``synthesize`` returns an
    Algorithm or a Solution. ``judge`` times schedules for cost-aware solvers, which refuse to
    run without one."""
    if not isinstance(problem, Problem):
        raise InputError(f"solve needs a ccl.Problem, got {type(problem).__name__}")
    if judge is not None and not callable(getattr(judge, "time_us", None)):
        raise InputError(f"judge must be a cost judge (with time_us), got {type(judge).__name__}")
    name = problem.request.solver
    info = SOLVERS.get(name)
    if info is None:
        raise InputError(f"unknown solver {name!r}; known: {', '.join(SOLVERS)}")
    kind = problem.collective.kind
    if kind not in info.kinds:
        others = ", ".join(solvers_for(kind)) or "none"
        raise CollectiveError(f"solver {name!r} does not implement {kind}; solvers that do: {others}")
    if info.judged:
        if judge is None:
            raise InputError(f"solver {name!r} judges candidate schedules by their time and needs a cost judge "
                             "(ccl.synthesize passes the simulator)")
        result = info.load()(problem, judge)
    else:
        result = info.load()(problem)
    return result if isinstance(result, Solution) else Solution(result)
