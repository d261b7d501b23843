"""Packed trees -> a pipelined schedule.

Each root's part is cut into ``slots`` slots, shared among the root's trees in proportion to
their multiplicities (largest remainders: the finer the slots, the closer the shares follow
the rates). A tree's slots are grouped into ``stages`` consecutive pipeline stages; stage i:

* down a tree (allgather, broadcast): reaches a vertex of depth d at step i + d - 1;
* up a tree (reducescatter, reduce; an out-tree of the reversed graph): a vertex of depth d
  adds its partial sum into its parent at step i + D - d (D: the tree's depth; for reduce the
  deepest of the root's trees, so all of them complete stage i at the root together), so
  children always precede their parent and the root holds the full sum after step i + D - 1;
* allreduce: up the reversed trees, then down the forward trees, each slot starting down the
  step after its sum is complete at its root.

Pieces that share a step and a pair of ranks travel as one message (the lowering fuses them),
so the pipeline depth is the stage count, and the slot count only sets how finely the data
is shared among trees. The pipeline's ``Shape`` also says whether the stages are tapered
(geometric), staggered (each branch of a tree shifts its stage boundaries), coalesced (the
pieces of many roots a rank sends a peer in one step go as one message through scratch,
``solvers.builders.coalesce``) and, for allreduce, whether the allgather half follows the whole
reducescatter (``sequential``) instead of each slot going down as soon as its sum is complete,
and whether the root's leaf children get their pieces in one message (``lead``).
"""

from __future__ import annotations

from typing import NamedTuple

from ccl.core.algorithm import Algorithm
from ccl.core.problem import Problem

from ..builders.common import builder
from .exchange import build as exchange_build
from .phases import Packing, Phase
from .stages import down_stages, slot_runs, slot_shares, up_stages
from .trees import Tree


def _assign(phase: Phase, slots: int, own: float = 1.0,
            node_of: tuple[int, ...] | None = None) -> dict[int, list[tuple[Tree, list[int]]]]:
    """root -> [(tree, the block offsets it carries)]. With ``own`` != 1 (and ``node_of``) the
    trees whose root sends only to other nodes (``remote``) weigh ``own`` times their
    multiplicity."""
    out: dict[int, list[tuple[Tree, list[int]]]] = {}
    for root, trees in sorted(phase.by_root().items()):
        weights = [t.weight * (own if own != 1.0 and node_of and remote(t, node_of) else 1)
                   for t in trees]
        offset = 0
        for tree, share in zip(trees, slot_shares(trees, slots, weights)):
            if share:
                out.setdefault(root, []).append((tree, list(range(offset, offset + share))))
            offset += share
    return out


def remote(tree: Tree, node_of: tuple[int, ...]) -> bool:
    """Whether every child of the tree's root lies in another node (the root's own part of the
    rail constructions, sent down the root's own rail and back: its path is the longest)."""
    children = [v for v, p in tree.parent.items() if p == tree.root]
    return bool(children) and all(node_of[v] != node_of[tree.root] for v in children)


class Shape(NamedTuple):
    """A pipeline shape. ``stages``: pipeline stages per tree; ``taper`` < 1: geometric stage
    sizes (shrinking down a tree, growing up one); ``stagger``: every branch under a tree's
    root shifts its stage boundaries by a fraction of a stage (``_phase``), so the pairs
    sharing a port do not wait out their message latency together; ``coalesce``: scattered
    pieces sent to one peer in one step travel as one message (``solvers.builders.coalesce``);
    ``sequential`` (allreduce): the allgather half's steps follow every step of the
    reducescatter half, each half pipelined and staggered on its own (a pair's allgather
    messages then queue behind its reducescatter ones), instead of each slot starting down the
    step after its sum is complete; ``lead``: the children of a tree's root that are leaves get
    the whole share in one message, at the first stage down a tree (their data is the root's
    from the start, and nothing waits on it below them), at the last up a tree (their
    contributions are ready from the start and only the root's sum waits on them), so a port
    serving leaves and forwarding pipelined pieces fills the time the forwarded pieces are not
    there yet with the leaves' (a root's own node a leaf star, as on two NVSwitch nodes). Not
    with an allreduce's pieces going down as their sums complete (the leaves' one message
    would wait for the last sum). ``ramp``: the first
    and last stages smaller, 1 steeply (a quarter and a half of a full one), 2 gently (a
    third, a half and three quarters; ``RAMPS``, ``down_stages``). ``own``
    (broadcast, reduce): the share of the trees whose root sends only to other nodes
    (``remote``: the root's own part of the rail constructions, whose path down the root's rail
    and back over the others is the longest) relative to their multiplicity, the rest spread
    over the other trees (a lighter own part lets its longer path end with the others')."""

    stages: int
    taper: float = 1.0
    stagger: bool = False
    coalesce: bool = False
    sequential: bool = False
    lead: bool = False
    ramp: int = 0
    own: float = 1.0

    def describe(self) -> str:
        out = f"{self.stages} stages, taper {self.taper}"
        for flag, text in (("stagger", "staggered"), ("coalesce", "coalesced"), ("sequential", "sequential"),
                           ("lead", "leaves first")):
            if getattr(self, flag):
                out += f", {text}"
        if self.ramp:
            out += ", ramped" if self.ramp == 1 else ", ramped gently"
        if self.own != 1.0:
            out += f", own part {self.own:g}"
        return out


def build(problem: Problem, packing: Packing, slots: int, shape: Shape) -> Algorithm:
    kind = problem.collective.kind
    n = problem.topology.n_ranks
    C = slots
    if packing.exchange:
        assert packing.down is not None
        return exchange_build(problem, list(packing.down.trees), C, down_stages(C, shape.stages, shape.taper, shape.ramp))
    if kind == "allgather":
        b, _ = builder(problem, C, "packing", "packing")
        _down(b, packing.down, C, shape, n, lambda r, q, j: ("output", q * C + j), {})
    elif kind == "reducescatter":
        b, _ = builder(problem, C, "packing", "packing")
        _up(b, packing.up, C, shape, n, lambda r, q, j: ("output", j) if r == q else ("input", q * C + j))
    elif kind == "allreduce":
        b, _ = builder(problem, n * C, "packing", "packing")

        def loc(r: int, q: int, j: int) -> tuple[str, int]:
            return ("output", q * C + j)

        done = _up(b, packing.up, C, shape, n, loc, lead=shape.lead and shape.sequential)
        if shape.sequential:
            _down(b, packing.down, C, shape, n, loc, {}, offset=max(done.values(), default=0) + 1)
        else:
            _down(b, packing.down, C, shape, n, loc, {key: s + 1 for key, s in done.items()})
    elif kind == "broadcast":
        b, _ = builder(problem, C, "packing", "packing")
        root = packing.root
        _down(b, packing.down, C, shape, n, lambda r, q, j: ("input" if r == root else "output", j), {},
              node_of=problem.topology.node_of)
    elif kind == "reduce":
        b, _ = builder(problem, C, "packing", "packing")
        root = packing.root
        _up(b, packing.up, C, shape, n, lambda r, q, j: ("output" if r == root else "input", j),
            node_of=problem.topology.node_of, aligned=True)
    else:  # pragma: no cover - plan() refuses other kinds
        raise AssertionError(kind)
    return b.build(coalesce=shape.coalesce)


def _down(b, phase: Phase, C: int, shape: Shape, n: int, loc, ready: dict[tuple[int, int], int],
          offset: int = 0, node_of: tuple[int, ...] | None = None) -> None:
    """Copy every slot down its tree; slot j of root q may leave the root at step
    ``ready[(q, j)]`` (default: ``offset`` + its pipeline stage, shifted per branch when
    staggered; with ``shape.lead`` and no ``ready``, the root's leaf children get every slot at
    ``offset``)."""
    if phase.turns > 1 and not ready:
        for q, group, depths, stream, stage, _ in _turns(phase, C, shape, node_of):
            for tree, depth, mine in zip(group, depths, _taken(stream, stage, len(group))):
                for j, count, start in slot_runs(mine):
                    for v in tree.order[1:]:
                        par = tree.parent[v]
                        b.move_run(offset + start + depth[v] - 1, par, loc(par, q, j), v, loc(v, q, j), count, "copy")
        return
    for q, carried in _assign(phase, C, shape.own, node_of).items():
        for tree, offsets in carried:
            depth = tree.depth()
            base = down_stages(len(offsets), shape.stages, shape.taper, shape.ramp)
            leaves = root_leaves(tree) if shape.lead and not ready else set()
            for top, members in _groups(tree, shape.stagger and not ready):
                if ready:
                    starts = [(j, ready.get((q, j), g)) for j, g in zip(offsets, base)]
                else:
                    starts = list(zip(offsets, _shift(base, _phase(shape, q, top, n))))
                inner = [v for v in members if v not in leaves]
                for j, count, start in slot_runs(starts):
                    for v in inner:
                        par = tree.parent[v]
                        b.move_run(offset + start + depth[v] - 1, par, loc(par, q, j), v, loc(v, q, j), count, "copy")
            for j, count, _ in slot_runs([(j, 0) for j in offsets]) if leaves else ():
                for v in sorted(leaves):
                    b.move_run(offset, tree.root, loc(tree.root, q, j), v, loc(v, q, j), count, "copy")


def _up(b, phase: Phase, C: int, shape: Shape, n: int, loc, lead: bool | None = None,
        node_of: tuple[int, ...] | None = None, aligned: bool = False) -> dict[tuple[int, int], int]:
    """Reduce every slot up its (reversed) tree; returns the step at which each slot's sum is
    complete at its root. With ``lead`` (default ``shape.lead``) the root's leaf children send
    every slot at the last stage's step. Staggered branches shift their boundaries as they do down a tree (the
    first stage of each grows by its phase): every branch then starts its pipeline with a piece
    of its own size, which keeps the pairs a port serves out of step even though their data all
    becomes ready together (shifting the last stages instead, the time reverse, left the pairs
    in step from the second stage on). With ``aligned`` (reduce) every tree of a root counts
    its steps from the deepest one's, so all of them bring stage i to the root at the same
    step: the time reverse of a broadcast, whose trees all leave the root together (trees of
    different depths whose leaves all start at once would bring their stages to the root at
    different steps, slower than the broadcast)."""
    done: dict[tuple[int, int], int] = {}
    lead = shape.lead if lead is None else lead
    if phase.turns > 1:
        for q, group, depths, stream, stage, lag in _turns(phase, C, shape, node_of, up=True):
            D = max(max(d.values()) for d in depths)
            for tree, depth, mine in zip(group, depths, _taken(stream, stage, len(group))):
                for j, count, g in slot_runs(mine):
                    for v in tree.order[1:]:
                        b.move_run(g + D - depth[v] + lag, v, loc(v, q, j), tree.parent[v], loc(tree.parent[v], q, j),
                                   count, "reduce")
                    for k in range(count):
                        done[(q, j + k)] = max(done.get((q, j + k), 0), g + D - 1 + lag)
        return done
    for q, carried in _assign(phase, C, shape.own, node_of).items():
        depths = [tree.depth() for tree, _ in carried]
        deepest = max(max(d.values()) for d in depths)
        for (tree, offsets), depth in zip(carried, depths):
            D = deepest if aligned else max(depth.values())
            base = up_stages(len(offsets), shape.stages, shape.taper, shape.ramp)
            leaves = root_leaves(tree) if lead else set()
            for top, members in _groups(tree, shape.stagger):
                starts = list(zip(offsets, _shift(base, _phase(shape, q, top, n))))
                inner = [v for v in members if v not in leaves]
                for j, count, g in slot_runs(starts):
                    for v in inner:
                        par = tree.parent[v]
                        b.move_run(g + D - depth[v], v, loc(v, q, j), par, loc(par, q, j), count, "reduce")
                    for k in range(count):
                        key = (q, j + k)
                        done[key] = max(done.get(key, 0), g + D - 1)
            last = base[-1] + D - 1 if base else 0
            for j, count, _ in slot_runs([(j, 0) for j in offsets]) if leaves else ():
                for v in sorted(leaves):
                    b.move_run(last, v, loc(v, q, j), tree.root, loc(tree.root, q, j), count, "reduce")
                for k in range(count):
                    done[(q, j + k)] = max(done.get((q, j + k), 0), last)
    return done


def _turns(phase: Phase, C: int, shape: Shape, node_of, up: bool = False):
    """For a phase whose parts have several trees taken in turn (``Phase.turns``): per root and
    per part (the trees whose root sends to the same ranks; the root's own part, sent only to
    other nodes, is one part), (root, the part's trees, their depths, the slots they carry
    together in order, each slot's stage): ``shape.stages`` stages per tree, so the part's
    stream has as many times more, and stage s goes down (up) tree s mod t, so consecutive
    pieces of a part leave a rank for different peers. Last, the steps the part starts late:
    ``OWN_LAG`` cycles of turns for the root's own part going up, else 0."""
    for q, carried in _assign(phase, C, shape.own, node_of).items():
        parts: dict[object, list[tuple[Tree, list[int]]]] = {}
        for tree, offsets in carried:
            key = "own" if node_of and remote(tree, node_of) else tuple(sorted(
                v for v, p in tree.parent.items() if p == tree.root))
            parts.setdefault(key, []).append((tree, offsets))
        for key, group in parts.items():
            stream = sorted(j for _, offsets in group for j in offsets)
            count = shape.stages * len(group)
            stage = (up_stages if up else down_stages)(len(stream), count, shape.taper, shape.ramp)
            trees = [t for t, _ in group]
            lag = OWN_LAG * len(group) if up and key == "own" else 0
            yield q, trees, [t.depth() for t in trees], stream, stage, lag


OWN_LAG = 1  # cycles of turns a reduce's own part goes up behind the other parts (``_turns``): on
# the far node its ranks wait for the root's node-mates' pieces, which cross the rails' idle
# direction all at once (a NIC fair-shared by L - 1 senders), and a pair's messages go in list
# order, so a piece of it placed with the other parts' would hold theirs up behind it on the far
# node's pairs


def _taken(stream: list[int], stage: list[int], t: int) -> list[list[tuple[int, int]]]:
    """(slot, stage) pairs of each of ``t`` trees taking a stream's stages in turn."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(t)]
    for j, g in zip(stream, stage):
        out[g % t].append((j, g))
    return out


def root_leaves(tree: Tree) -> set[int]:
    """The children of the root that have no children."""
    inner = set(tree.parent.values())
    return {v for v, p in tree.parent.items() if p == tree.root and v not in inner}


def _groups(tree: Tree, by_branch: bool) -> list[tuple[int, list[int]]]:
    """The vertices below the root in the order they joined, as one group (keyed by the root),
    or ``by_branch``: per child of the root, its subtree (the child first, parents before
    children)."""
    if not by_branch:
        return [(tree.root, tree.order[1:])]
    top: dict[int, int] = {}
    out: dict[int, list[int]] = {}
    for v in tree.order[1:]:
        par = tree.parent[v]
        t = v if par == tree.root else top[par]
        top[v] = t
        out.setdefault(t, []).append(v)
    return list(out.items())


def _phase(shape: Shape, q: int, top: int, n: int) -> float:
    """How far (a fraction of a stage) the branch under ``top`` shifts its stage boundaries when
    the shape staggers: spread by the pair's distance so that neither a sender's branches nor a
    receiver's senders cross stage boundaries together (a link that waits out every branch's
    latency at once sits idle)."""
    return ((top - q) % n) / n if shape.stagger else 0.0


def _shift(stage_of: list[int], phi: float) -> list[int]:
    """``stage_of`` (non-decreasing, 0-based) with every boundary between stages moved
    ``phi`` of the way into the next stage, so the first stage grows and the last shrinks."""
    if phi <= 0.0 or not stage_of:
        return stage_of
    share = len(stage_of)
    starts = [j for j in range(1, share) if stage_of[j] != stage_of[j - 1]]
    bounds = [0, *starts, share]
    moved = [bounds[k] + int(phi * (bounds[k + 1] - bounds[k])) for k in range(1, len(bounds) - 1)]
    out = []
    k = 0
    for j in range(share):
        while k < len(moved) and moved[k] <= j:
            k += 1
        out.append(stage_of[0] + k)
    return out
