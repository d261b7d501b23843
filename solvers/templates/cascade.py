"""Decomposition templates: ring cascades over the levels of a grid of ranks (``solvers.builders.grids``).

A grid gives every rank coordinates in levels of sizes p_1 x ... x p_k. Allreduce is a ring
reducescatter along the lines of the first level (each rank keeps the sum over its line of
1/p_1 of the data: the blocks whose first coordinate is its own), then along the second level
on that 1/p_1, ..., then ring allgathers in the reverse order; every level's lines run
concurrently over their own rings. Reducescatter is the first half, allgather the second (the
last level first, so the first level, the fastest, carries the most data). Rank r ends with
block r of the sum. Steps: 2 x sum(p_j - 1) for allreduce.

The data is cut into *lanes* that run side by side, each the whole cascade on its own slots:

* rotations: where consecutive levels are equally fast on disjoint links and limits (the
  dimensions of a torus), lane j starts at the level j further along, so every dimension's
  links carry a reducescatter at once instead of idling while another dimension works;
* directions: where a level's reversed rings use other links (a torus; not a switch port),
  half the lanes run every ring backwards.

Pipeline stages (allreduce, ``option pipeline = P``): every lane's data is cut into P stages
that each run the cascade, stage p starting ``offset`` steps after stage p - 1 (``_offset``). A
dependency-driven runtime would run independent stages in lock-step (their first messages are
all ready at once and share every link), so the stages are tied together on purpose: stage p's
rings hand out ownership shifted by p x offset positions, so that in any step all stages in a
phase move the same group, and the slot layout puts the stage index next to the level digits,
so the lowering fuses their pieces into one message. A fused message waits for all its pieces:
stage p's first step rides with stage p - 1's last reducescatter step of the first phase, so
the stages pass the first (NVLink) phase one after the other and each goes on to the next
(NIC) phase while the following stages still use NVLink. Where the stage digit goes (after
which level) is chosen to need the fewest message latencies: right after the first level, the
first phase moves one message per step; lower, the later phases fuse across stages too.

The solvers:

* ``hierarchical-pipelined``: ``hierarchical``'s allreduce (ring reducescatter inside every
  node, ring allreduce along every rail, ring allgather inside every node) in pipeline stages:
  by default 16 across up to 4 nodes, 8 beyond.
* ``torus-2d``: the 2D-torus allreduce (Mikami et al., Sony 2018): a grid of rows x columns,
  reducescatter along rows, allreduce along columns, allgather along rows; rows are the nodes
  and columns the rails of a multi-node machine, else the two-level linked grid with the most
  balanced sides (``torus:4x4``, and ``torus:4x4x4`` as 4 x 16). Allgather and reducescatter
  are its halves.
* ``torus-2d-tree``: the ring/tree hybrid: the column allreduce is a pipelined double binary
  tree (two in-order binary trees over the column's ring, half of the column's data each,
  ``chunks`` slots pipelined), so the inter-row phase has logarithmic depth.
* ``blueconnect``: BlueConnect (Cho et al., 2019): every level of the finest grid: the
  dimensions of a torus, or the finest linked grid of a node's local ranks (NVSwitch nodes
  split 2 x 2 x 2, DGX-2 GPU pairs sharing a NIC) then the rails.

Every solver takes ``option pipeline = P`` for allreduce (default 1 but for
``hierarchical-pipelined``); the templates refuse with CollectiveError where their grid does
not exist.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ccl.core.errors import CollectiveError, InputError
from ccl.core.problem import Problem

from .. import Solution
from ..builders.common import builder, pieces
from ..builders.grids import Grid, linked_grid, node_grid
from ..builders.schedule import ScheduleBuilder, Slot
from .phases import balanced_tree, depths, heights, tree_broadcast, tree_reduce

KINDS = ("allreduce", "allgather", "reducescatter")
PIPELINED = ("hierarchical-pipelined",)  # the solvers whose allreduce is pipelined by default
OPTIONS = ("pipeline",)

# a run of slots: (buffer, first index, count)
Run = tuple[str, int, int]


class Lane(NamedTuple):
    """Parts of the data that run side by side: a level order and a ring direction."""

    order: tuple[int, ...]
    reverse: bool


def synthesize(problem: Problem):
    """The schedule, with the grid, the lanes and the pipeline stages as details."""
    name = problem.request.solver
    stages = _pipeline(problem, name)
    grid = _grid(problem, name)
    if stages == 0:
        stages = _default_stages(grid)
    kind = problem.collective.kind
    tree = name == "torus-2d-tree"
    k = pieces(problem)
    n = problem.topology.n_ranks
    lanes = _lanes(grid)
    if kind == "allreduce":
        b, _ = builder(problem, len(lanes) * stages * n * k, name, name)
        for j, lane in enumerate(lanes):
            _allreduce(b, grid, lane, j, stages, n, k, tree)
        return Solution(b.build(), _details(grid, lanes, stages))
    if stages > 1:
        raise InputError(f"solver {name!r}: option pipeline applies to allreduce only")
    F = len(lanes) * k
    b, _ = builder(problem, F, name, name)
    for q, lane in enumerate(lanes):
        if kind == "allgather":
            def span(r: int, g: int, q: int = q) -> Run:
                return ("output", g * F + q * k, k)
            _allgather(b, grid, lane, span)
        else:
            def span(r: int, g: int, q: int = q) -> Run:
                return ("output", q * k, k) if g == r else ("input", g * F + q * k, k)
            _reducescatter(b, grid, lane, span)
    return Solution(b.build(), _details(grid, lanes, stages))


def _details(grid: Grid, lanes: Sequence[Lane], stages: int) -> dict:
    return {"grid": grid.describe(), "lanes": len(lanes), "pipeline": stages}


def _pipeline(problem: Problem, name: str) -> int:
    options = dict(problem.request.options)
    for key in options:
        if key not in OPTIONS:
            raise InputError(f"solver {name!r} has no option {key!r} (options: {', '.join(OPTIONS)})")
    stages = options.get("pipeline", 0 if name in PIPELINED else 1)  # 0: chosen from the grid
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1 and "pipeline" in options:
        raise InputError(f"solver {name!r}: option pipeline must be a positive integer, got {stages!r}")
    return stages


def _grid(problem: Problem, name: str) -> Grid:
    topo = problem.topology
    if name == "hierarchical-pipelined":
        grid = node_grid(topo)
        if grid is None:
            raise CollectiveError(f"{name} needs a multi-node topology with equally sized nodes; {topo.name!r} has "
                                  f"{topo.n_nodes} node(s)" + ("" if topo.uniform_nodes else " of different sizes"))
        return grid
    if name == "blueconnect":
        grid = node_grid(topo, split=True) or linked_grid(topo)
    else:
        grid = node_grid(topo) or linked_grid(topo, 2)
    if grid is None or sum(1 for level in grid.levels if level.size > 1) < 2:
        what = ("a grid of rows and columns" if name != "blueconnect"
                else "a grid of at least two levels")
        raise CollectiveError(
            f"{name} needs {what}: a multi-node topology with equally sized nodes (nodes x rails), or ranks "
            f"whose row-major coordinates in some factorization of the rank count make every row and column "
            f"a ring of linked ranks (a torus such as torus:4x4); topology {topo.name!r} of {topo.n_ranks} "
            f"ranks has {topo.n_nodes} node(s)" + ("" if topo.uniform_nodes else " of different sizes")
            + " and no such factorization")
    return grid


def _lanes(grid: Grid) -> list[Lane]:
    """Rotations of the level order (within each group of ``grid.groups``) times ring
    directions (both where some level is two-way)."""
    rotations = math.lcm(*(len(g) for g in grid.groups))
    orders = []
    for j in range(rotations):
        order: list[int] = []
        for g in grid.groups:
            s = j % len(g)
            order.extend(g[s:] + g[:s])
        orders.append(tuple(order))
    directions = (False, True) if any(level.two_way for level in grid.levels) else (False,)
    return [Lane(order, reverse) for order in orders for reverse in directions]


def _lines(grid: Grid, level: int, reverse: bool) -> list[tuple[int, ...]]:
    lines = grid.levels[level].lines
    return [tuple(reversed(line)) for line in lines] if reverse else list(lines)


def _ring(b: ScheduleBuilder, order: Sequence[int], value: Sequence[int], spans: Callable[[int, int], list[Run]],
          step: int, op: str) -> int:
    """A ring allgather (``copy``) or reducescatter (``reduce``) along ``order``: position p
    owns (ends with) block group ``value[p]``; ``spans(rank, group)`` lists where the rank keeps
    the group, run by run."""
    m = len(order)
    shift = 1 if op == "reduce" else 0
    for t in range(m - 1):
        for p in range(m):
            x = value[(p - t - shift) % m]
            src, dst = order[p], order[(p + 1) % m]
            for (sb, si, count), (db, di, _) in zip(spans(src, x), spans(dst, x)):
                b.move_run(step + t, src, (sb, si), dst, (db, di), count, op)
    return step + max(m - 1, 0)


def _slope(grid: Grid, lines: Sequence[Sequence[int]], level: int) -> int:
    """+1 or -1 when every ring of ``lines`` visits the level's coordinates in cyclic order one
    way round (then pipeline stages can be aligned), else 0."""
    m = grid.levels[level].size
    slopes = set()
    for line in lines:
        steps = {(grid.coords[line[(i + 1) % m]][level] - grid.coords[line[i]][level]) % m for i in range(m)}
        if len(steps) != 1:
            return 0
        slopes.add(steps.pop())
    if len(slopes) != 1:
        return 0
    slope = slopes.pop()
    return 1 if slope == 1 else -1 if slope == m - 1 else 0


def _allreduce(b: ScheduleBuilder, grid: Grid, lane: Lane, j: int, stages: int, n: int, k: int, tree: bool) -> None:
    """Lane ``j``'s pipeline stages (see the module docstring for the slot layout)."""
    order = lane.order
    P = stages
    sizes = [grid.levels[lv].size for lv in order]
    lines = [_lines(grid, lv, lane.reverse) for lv in order]
    slope = [_slope(grid, lines[t], lv) for t, lv in enumerate(order)]
    offset = _offset(sizes)
    c = _stage_digit(grid, order, P, offset)
    radix = sizes[:c + 1] + [P] + sizes[c + 1:]
    weight = [math.prod(radix[i + 1:]) * k for i in range(len(radix))]
    pos = [t if t <= c else t + 1 for t in range(len(order))]  # each level's digit position
    coords = grid.coords
    lane_base = j * P * n * k
    last = len(order) - 1

    def held(r: int, t: int, p: int) -> int:
        return (coords[r][order[t]] - slope[t] * p * offset) % sizes[t]

    def runs(r: int, t: int, x: int, p: int) -> list[Run]:
        """Where a rank keeps group x of stage ``p``'s phase t: the digits of levels before t
        are the rank's own, level t's is x, the stage digit is p, the others are free."""
        first = lane_base + sum(held(r, s, p) * weight[pos[s]] for s in range(t)) + x * weight[pos[t]]
        first += p * weight[c + 1]
        if t > c:  # every free digit lies below the stage digit: one run
            return [("output", first, weight[pos[t]])]
        out: list[Run] = []
        for free in range(math.prod(sizes[t + 1:c + 1])):  # the free digits above the stage digit
            at = first
            for s in range(c, t, -1):
                at += (free % sizes[s]) * weight[s]
                free //= sizes[s]
            if out and out[-1][1] + out[-1][2] == at:
                out[-1] = ("output", out[-1][1], out[-1][2] + weight[c + 1])
            else:
                out.append(("output", at, weight[c + 1]))
        return out

    middle = last if tree else last + 1
    for p in range(P):
        step = p * offset
        for t in range(middle):
            end = step
            for line in lines[t]:
                value = [held(r, t, p) for r in line]
                end = _ring(b, line, value, lambda r, x, t=t, p=p: runs(r, t, x, p), step, "reduce")
            step = end
        if tree:
            end = step
            for line in lines[last]:
                slots = [i for x in range(sizes[last]) for (_, first, count) in runs(line[0], last, x, p)
                         for i in range(first, first + count)]
                end = max(end, _tree_allreduce(b, line, slots, step))
            step = end
        for t in reversed(range(middle)):
            end = step
            for line in lines[t]:
                value = [held(r, t, p) for r in line]
                end = _ring(b, line, value, lambda r, x, t=t, p=p: runs(r, t, x, p), step, "copy")
            step = end


def _offset(sizes: Sequence[int]) -> int:
    """Steps between pipeline stages: the last level's ring length (nodes - 1 across a
    nodes x rails grid), so a stage's pieces of the inter-node phase follow the previous
    stage's by half that phase. A pair's messages are posted in list order (the execution
    model's rule 3), so the step spacing decides how the stages interleave on every link; the
    ring's length was the fastest spacing tried, against shorter and longer ones."""
    return max(sizes[-1] - 1, 1)


def _default_stages(grid: Grid) -> int:
    """Pipeline stages when the request names none: 16 across up to 4 nodes, 8 beyond (longer
    inter-node rings already spread the stages)."""
    return 16 if grid.levels[-1].size <= 4 else 8


def _stage_digit(grid: Grid, order: Sequence[int], stages: int, offset: int) -> int:
    """After which level's digit the stage digit goes: the position that makes the fewest
    message latencies per phase. A phase at or above it moves, per step, one message per value
    of the free digits between it and the stage digit (the stages it carries fused into them);
    a phase below it one message per stage it carries."""
    if stages == 1:
        return len(order) - 1
    sizes = [grid.levels[lv].size for lv in order]
    best = None
    for c in range(len(order)):
        cost = 0.0
        for t, lv in enumerate(order):
            per_step = math.prod(sizes[t + 1:c + 1]) if t <= c else min(stages, -(-(sizes[t] - 1) // offset))
            cost += 2 * (sizes[t] - 1) * per_step * grid.levels[lv].latency
        if best is None or cost < best[0]:
            best = (cost, c)
    assert best is not None
    return best[1]


def _tree_allreduce(b: ScheduleBuilder, line: Sequence[int], slots: list[int], step: int) -> int:
    """Double binary tree allreduce of ``slots`` (output buffer) over the ranks of ``line``:
    half of the slots up and down each tree, one slot per step behind the other."""
    if len(line) < 2:
        return step
    half = (len(slots) + 1) // 2
    end = step
    members = list(line)
    for share, ranks in ((slots[:half], members), (slots[half:], members[1:] + members[:1])):
        if not share:
            continue
        _, parent = balanced_tree(ranks)

        def loc(r: int, j: int) -> list[Slot]:
            return [("output", j)]

        h = heights(parent)
        up = tree_reduce(b, parent, {c: step + v for c, v in h.items()}, share, loc, 0, True)
        top = max(h.values())
        down = {c: step + top + d - 1 for c, d in depths(parent).items()}
        end = max(end, up, tree_broadcast(b, parent, down, share, loc, 0, True))
    return end


def _groups(grid: Grid, lane: Lane, t: int) -> dict[tuple[int, ...], list[int]]:
    """The ranks (= blocks) by their coordinates in the lane's first t + 1 levels."""
    out: dict[tuple[int, ...], list[int]] = {}
    for g, c in enumerate(grid.coords):
        out.setdefault(tuple(c[j] for j in lane.order[:t + 1]), []).append(g)
    return out


def _cascade_spans(grid: Grid, lane: Lane, t: int, span: Callable[[int, int], Run]) -> Callable[[int, int], list[Run]]:
    groups = _groups(grid, lane, t)
    order = lane.order

    def spans(r: int, x: int) -> list[Run]:
        key = tuple(grid.coords[r][j] for j in order[:t]) + (x,)
        return [span(r, g) for g in groups[key]]

    return spans


def _allgather(b: ScheduleBuilder, grid: Grid, lane: Lane, span: Callable[[int, int], Run]) -> None:
    step = 0
    for t in reversed(range(len(lane.order))):
        spans = _cascade_spans(grid, lane, t, span)
        end = step
        for line in _lines(grid, lane.order[t], lane.reverse):
            end = _ring(b, line, [grid.coords[r][lane.order[t]] for r in line], spans, step, "copy")
        step = end


def _reducescatter(b: ScheduleBuilder, grid: Grid, lane: Lane, span: Callable[[int, int], Run]) -> None:
    step = 0
    for t in range(len(lane.order)):
        spans = _cascade_spans(grid, lane, t, span)
        end = step
        for line in _lines(grid, lane.order[t], lane.reverse):
            end = _ring(b, line, [grid.coords[r][lane.order[t]] for r in line], spans, step, "reduce")
        step = end
