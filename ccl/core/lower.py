"""Lowering: Algorithm (transfers in lock-step steps) -> Program (per-rank ordered ops).

``lower(algorithm)`` chooses everything a runtime needs and nothing it may choose differently:

1. **Program slots** (``ccl.core.lower_slots``): input slots the schedule writes move to scratch
   (with a prologue copy when their starting value is used), so no op writes the input buffer;
   a scratch slot reused for pieces of different size classes is split into one slot per class.
2. **Fusion.** Moves of one step between the same two places that are consecutive on both sides
   become one multi-slot op: one message instead of many, one latency instead of many (but a
   fused message waits for all its pieces, so pieces a schedule pipelines within a step move
   as one: ``fuse=False`` keeps every transfer its own message). A link of L > 1 lanes (the two NVLinks of a DGX-1 pair) keeps L messages per step where it
   carries at least L slots: a message travels on one lane, so fusing further would leave lanes
   idle.
3. **Matching.** Messages between an ordered pair of ranks are numbered in (step, slot) order:
   the number is the tag of both the send and the receive, so tag-matching and order-matching
   transports pair them the same way. Messages of one pair and step go round-robin over
   ``channels``.
4. **Order.** Per rank and step: receives, then sends (both by peer, then tag), then local ops.
   A receive lands directly in its destination unless that slot is still read in the same step
   (then it lands in a scratch staging range and a local ``copy`` finishes it); a receive-reduce
   always lands in staging and a local ``reduce`` finishes it. Local ops are ordered so that
   every slot is read before it is overwritten within the step; a cycle (a swap) is broken by
   snapshotting a source into staging first. Staging ranges are reused from step to step: the
   j-th range of a given layout a rank needs in a step is the same memory in every step (the
   local ops of a step finish before the next step's receives are posted, so reuse costs no
   waiting).
5. **Dependencies** come from per-slot hazards, with aliased output and input slots as one slot:
   a read waits for the last write of its slot; a write waits for the reads of the slot since
   the last write (which wait for that write), or for the last write when nothing read it. Every
   op, local ops included, lists every op it must wait for: runtimes may run a rank's ops in any
   order the dependencies allow (``ccl.core.program``). The Programs are well-leveled, so none of
   them can deadlock (the theorem in ``ccl.core.program``).

**In place.** ``in_place=True`` makes a Program that is also correct when called in place, with
the runtimes' aliasing (``Collective.in_place_aliases``: an alltoall's whole buffer, not only
the rank's own block) as one slot in rules 4 and 5: a receive into memory a send of its step
still reads lands in staging, and the copy finishing it waits for that send; a write into an
overlaid input slot waits for every earlier read of it; and an input slot still read in a step
after the output overlaid on it is written is snapshotted first (``ccl.core.lower_slots``). The
same Program is correct out of place too. Without it only ``Collective.aliases`` (the slots
that start out holding their input) are one slot: for every built-in but alltoall the two are
the same and so are the Programs; an out-of-place alltoall Program needs no staging.
6. **Compaction.** Scratch slots no op uses (the algorithm's unused indices) are dropped.
7. **Switches.** A transfer to a reducing switch becomes a ``push`` (``push-reduce`` for a
   reduce) on its rank, one from a switch a ``pull``: they fuse, take tags and order like sends
   and receives (a pull is staged like a receive: when its destination is still read in its
   step, and when it reduces into its destination); a switch's slots keep their numbers (the
   switch stores nothing, so nothing needs renaming).

Every phase works on numpy columns (a ring allreduce on 1,024 ranks, five million ops, lowers in
seconds); only steps whose local ops can conflict with each other are ordered in Python (``ccl.core.lower_ranks``).
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from . import limits, validate
from .algorithm import Algorithm
from .collective import Collective
from .collector import gc_paused
from .errors import CollectiveError
from .lower_ranks import Assembly, Runs
from .lower_slots import Moves, unit_moves
from .program import Program
from .topology import Topology


def lower(algorithm: Algorithm, *, channels: int = 1, fuse: bool = True, in_place: bool = False) -> Program:
    """The Program that runs ``algorithm`` on point-to-point runtimes. The algorithm should
    have passed ``ccl.verify``; the result can be checked with ``ccl.verify_program``.
    ``fuse=False`` keeps every transfer its own message (pieces a schedule moves separately
    so that they can overlap stay separate); by default consecutive slots moved in one step
    between the same places become one message. ``in_place=True``: a Program correct both in
    place and out of place (see the module)."""
    validate.instance(algorithm, Algorithm, "ccl.lower's algorithm", error=CollectiveError)
    validate.integer(channels, "channels", least=1, most=2**31 - 1, error=CollectiveError)
    if channels > limits.CHANNELS.value:  # before the Program is built with them
        raise CollectiveError(limits.CHANNELS.message(channels, "channels"))
    validate.flag(fuse, "fuse", error=CollectiveError)
    validate.flag(in_place, "in_place", error=CollectiveError)
    with gc_paused():  # the schedule may hold millions of objects
        return _lower(algorithm, channels, fuse, in_place)


def _lower(algorithm: Algorithm, channels: int, fuse: bool, in_place: bool) -> Program:
    coll = algorithm.collective
    _check_size_classes(coll)
    aliases = coll.in_place_aliases if in_place else coll.aliases
    moves = unit_moves(algorithm, aliases if in_place else None)
    runs = _fuse(moves, fuse, algorithm.topology)
    scratch, prologue = moves.scratch, moves.prologue
    del moves  # programs reach millions of ops: keep only what the next stage needs
    _tag(runs, algorithm.topology.n_vertices, channels, coll.n_ranks)
    assembly = Assembly(coll, scratch, prologue, runs, aliases, algorithm.topology.n_vertices)
    del runs
    table, scratch = assembly.build()
    return Program(
        name=algorithm.name,
        collective=coll,
        topology=algorithm.topology,
        ops=table,
        scratch=tuple(tuple(row) if None not in row else tuple(0 if c is None else c for c in row)
                      for row in scratch),
        channels=channels,
        solver=algorithm.solver,
        steps=algorithm.n_steps,
    )


def _check_size_classes(coll: Collective) -> None:
    """Every chunk starts in slots of one size class, and every output slot needs chunks of
    its own class: otherwise no memory layout can hold the pieces."""
    k = coll.chunk_factor
    if k == 1:
        return
    lengths = np.array([len(x) for x in coll.inputs], dtype=np.int64)
    chunk = np.fromiter(chain.from_iterable(coll.inputs), dtype=np.int64, count=int(lengths.sum()))
    slot = np.arange(len(chunk), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    cls = np.full(int(chunk.max(initial=-1)) + 1, -1, dtype=np.int64)
    cls[chunk] = slot % k
    bad = np.flatnonzero(cls[chunk] != slot % k)
    if len(bad):
        at = int(bad[0])
        r = int(np.searchsorted(np.cumsum(lengths), at, side="right"))
        raise CollectiveError(f"collective {coll.name!r}: chunk {int(chunk[at])} starts in slots of different "
                              f"piece sizes (rank {r} input[{int(slot[at])}])")
    rows: set[tuple[frozenset[int], ...]] = set()  # ranks often need the same sets: check each row once
    classes: dict[int, frozenset[int]] = {}  # id of a required set -> the classes of its chunks
    for r, slots in enumerate(coll.outputs):
        if slots in rows:
            continue
        rows.add(slots)
        for j, need in enumerate(slots):
            have = classes.get(id(need))
            if have is None:
                have = classes[id(need)] = frozenset(cls[np.fromiter(need, dtype=np.int64, count=len(need))].tolist())
            if have != {j % k}:
                wrong = sorted(c for c in need if cls[c] != j % k)
                raise CollectiveError(f"collective {coll.name!r}: rank {r} output[{j}] holds piece {j % k} "
                                      f"of a base slot but needs chunk {wrong[0]}, a piece {int(cls[wrong[0]])}")


def _fuse(mv: Moves, fuse: bool, topology: Topology) -> Runs:
    """Merge unit moves into runs; without ``fuse`` only moves of one transfer merge. With
    ``fuse``, the moves of one step over a link of L > 1 lanes are cut into L near-equal groups
    (in slot order) that never merge, so the link keeps a message per lane busy."""
    if fuse:
        order = _move_order(mv, topology.n_vertices)
        group = _lane_groups(mv.step[order], mv.src[order], mv.dst[order], topology)
    else:
        order = np.lexsort((mv.dst_index, mv.src_index, mv.transfer, mv.reduce, mv.dst_buf, mv.src_buf, mv.dst,
                            mv.src, mv.step))
        group = mv.transfer[order]
    start = np.ones(len(order), dtype=bool)
    if len(order):  # a run starts where any key changes or a slot does not follow the previous one
        same = np.ones(len(order) - 1, dtype=bool)
        for column, step in ((group, 0), (mv.step, 0), (mv.src, 0), (mv.dst, 0), (mv.src_buf, 0),
                             (mv.dst_buf, 0), (mv.reduce, 0), (mv.src_index, 1), (mv.dst_index, 1)):
            a = column if column is group else column[order]
            same &= (a[1:] - a[:-1] == step) if step else (a[1:] == a[:-1])
            del a
        start[1:] = ~same
    first = np.flatnonzero(start)
    count = np.diff(np.append(first, len(order)))
    at = order[first]
    return Runs(step=mv.step[at], src=mv.src[at], src_buf=mv.src_buf[at], src_index=mv.src_index[at], dst=mv.dst[at],
                dst_buf=mv.dst_buf[at], dst_index=mv.dst_index[at], count=count, reduce=mv.reduce[at])


def _move_order(mv: Moves, n: int) -> np.ndarray:
    """The moves sorted by (step, src, dst, src buffer, dst buffer, op, src slot, dst slot):
    two stable sorts of combined keys where they fit in 63 bits, a lexsort otherwise (``n``:
    the vertices, ranks and switches)."""
    if not len(mv.step):
        return np.zeros(0, dtype=np.int64)
    span = int(max(mv.src_index.max(), mv.dst_index.max())) + 1
    steps = int(mv.step.max()) + 1
    if steps * n * n < 2**62 and 18 * span * span < 2**62:
        low = (((mv.src_buf * 3 + mv.dst_buf) * 2 + mv.reduce) * span + mv.src_index) * span + mv.dst_index
        order = np.argsort(low, kind="stable")
        high = (mv.step[order] * n + mv.src[order]) * n + mv.dst[order]
        return order[np.argsort(high, kind="stable")]
    return np.lexsort((mv.dst_index, mv.src_index, mv.reduce, mv.dst_buf, mv.src_buf, mv.dst, mv.src, mv.step))


def _lane_groups(step: np.ndarray, src: np.ndarray, dst: np.ndarray, topology: Topology) -> np.ndarray:
    """For moves sorted by (step, src, dst, ...): the lane group of each, 0 on single-lane links
    and local moves, position * lanes // moves within its (step, src, dst) on the others."""
    group = np.zeros(len(step), dtype=np.int64)
    remote = src != dst
    if not np.any(remote):
        return group
    n = topology.n_vertices
    pairs = np.unique(src[remote] * n + dst[remote])
    lanes_of = {int(p): _lanes(topology, int(p) // n, int(p) % n) for p in pairs.tolist()}
    multi = [p for p, lanes in lanes_of.items() if lanes > 1]
    if not multi:
        return group
    pair = src * n + dst
    lanes = np.ones(len(step), dtype=np.int64)
    hit = np.isin(pair, np.array(multi, dtype=np.int64)) & remote
    lanes[hit] = [lanes_of[p] for p in pair[hit].tolist()]
    key_change = np.r_[True, (step[1:] != step[:-1]) | (pair[1:] != pair[:-1])]
    start = np.maximum.accumulate(np.where(key_change, np.arange(len(step)), 0))
    which = np.cumsum(key_change) - 1
    size = np.bincount(which)[which]
    group[hit] = ((np.arange(len(step)) - start) * lanes // size)[hit]
    return group


def _lanes(topology: Topology, a: int, b: int) -> int:
    n = topology.n_ranks
    link = topology.flat_link(a, b) if a < n and b < n else topology.switch_link(a, b)
    return 1 if link is None else link.lanes


def _tag(runs: Runs, n: int, channels: int, n_ranks: int) -> None:
    """Tags: messages of a pair numbered in run order (``n``: the vertices; a rank's pushes to
    a switch and its pulls from it are numbered per pair the same way); channels round-robin
    within a step for messages between ranks, channel 0 for switch ops."""
    net = np.flatnonzero(runs.src != runs.dst)
    if not len(net):
        return
    pair = runs.src[net] * n + runs.dst[net]
    order = np.argsort(pair, kind="stable")
    sp = pair[order]
    first = np.r_[True, sp[1:] != sp[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(sp)), 0))
    tag = np.empty(len(net), dtype=np.int64)
    tag[order] = np.arange(len(sp)) - start
    runs.tag[net] = tag
    # messages of one pair and step are consecutive in run order
    key = runs.step[net] * (n * n) + pair
    first = np.r_[True, key[1:] != key[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(key)), 0))
    runs.channel[net] = np.where((runs.src[net] < n_ranks) & (runs.dst[net] < n_ranks),
                                 (np.arange(len(key)) - start) % channels, 0)
