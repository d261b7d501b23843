"""Lowering, first stage: the algorithm's transfers as unit moves between *program* slots.

``unit_moves(algorithm)`` expands every transfer into one move per slot and renames slots so
that every runtime can lay the buffers out in memory (see ``ccl.lower`` for the whole story):

* **Input preservation.** Input slots the schedule writes move to scratch slots of their own
  (after the algorithm's scratch slots), with a prologue copy when their starting value is read
  or reduced into in the step that first touches them.
* **In place** (``in_place_aliases`` given: output slot j is input slot a in an in-place call).
  An input slot the schedule still reads in a step after one that writes the output slot
  overlaid on it would read the new value in place: such input slots move to scratch the same
  way (a prologue copy snapshots them before anything writes the memory; every read of them
  reads the snapshot). Reads and writes of one memory in the same step are left to the
  assembly, which stages the receive or orders the local ops (``ccl.core.lower_ranks``).
* **Size classes.** A value's size class is the piece of a base slot it is (``ccl.core.program``);
  input and output slot i hold class ``i % k``. A scratch slot the schedule reuses for values of
  different classes is split: the class it first holds keeps the slot, every other class gets a
  slot of its own (a *version*), appended in order of first use.

Everything is computed on numpy columns: a value's class follows the chain of scratch writes it
came through, resolved by pointer jumping, so the cost is linear in the moves (times the log of
the longest chain through scratch).
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from .algorithm import Algorithm
from .errors import CollectiveError

INPUT, OUTPUT, SCRATCH = 0, 1, 2
_BUFFER = {"input": INPUT, "output": OUTPUT, "scratch": SCRATCH}
_NAMES = ("input", "output", "scratch")


@dataclass(frozen=True)
class Moves:
    """Unit moves in program slots, in (step, transfer, slot) order, and what renaming added.

    ``scratch[r]`` lists the size class of every scratch slot of rank r so far (None: never
    written); ``prologue`` holds (rank, input slot, scratch slot) copies made before step 0."""

    step: np.ndarray
    src: np.ndarray
    src_buf: np.ndarray
    src_index: np.ndarray
    dst: np.ndarray
    dst_buf: np.ndarray
    dst_index: np.ndarray
    reduce: np.ndarray  # bool
    transfer: np.ndarray  # index of the transfer in algorithm.transfers
    value_class: np.ndarray  # size class of the value moved
    scratch: list[list[int | None]]
    prologue: np.ndarray  # (m, 3) rows (rank, input slot, scratch slot), sorted


def transfer_columns(algorithm: Algorithm) -> dict[str, np.ndarray]:
    """The transfers as numpy columns (buffers as codes 0 input, 1 output, 2 scratch)."""
    ts = algorithm.transfers
    n = len(ts)

    def ints(k: int) -> np.ndarray:
        return np.fromiter(map(itemgetter(k), ts), dtype=np.int64, count=n)

    def codes(k: int) -> np.ndarray:
        return np.fromiter(map(_BUFFER.__getitem__, map(itemgetter(k), ts)), dtype=np.int64, count=n)

    return {
        "step": ints(0), "src": ints(1), "src_buf": codes(2), "src_index": ints(3), "dst": ints(4),
        "dst_buf": codes(5), "dst_index": ints(6), "count": ints(7),
        "reduce": np.fromiter(map("reduce".__eq__, map(itemgetter(8), ts)), dtype=bool, count=n),
    }


def unit_moves(algorithm: Algorithm, in_place_aliases: tuple[tuple[int | None, ...], ...] | None = None) -> Moves:
    coll = algorithm.collective
    n = coll.n_ranks
    k = coll.chunk_factor
    c = transfer_columns(algorithm)
    count = c["count"]
    if np.all(count == 1) and not np.any(c["step"][1:] < c["step"][:-1]):  # one move per transfer, in order
        tid = np.arange(len(count), dtype=np.int64)
        step, src, sbuf, sidx = c["step"], c["src"], c["src_buf"], c["src_index"]
        dst, dbuf, didx, reduce = c["dst"], c["dst_buf"], c["dst_index"], c["reduce"]
    else:
        tid = np.repeat(np.arange(len(count), dtype=np.int64), count)
        off = np.arange(len(tid), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        order = np.argsort(c["step"][tid], kind="stable")  # (step, transfer, slot) order
        tid, off = tid[order], off[order]
        step = c["step"][tid]
        src, sbuf, sidx = c["src"][tid], c["src_buf"][tid], c["src_index"][tid] + off
        dst, dbuf, didx = c["dst"][tid], c["dst_buf"][tid], c["dst_index"][tid] + off
        reduce = c["reduce"][tid]

    # Scratch slots of the algorithm, per rank (a switch's slots are its own, and ephemeral).
    alg_scratch = np.zeros(n, dtype=np.int64)
    for rank, buf, idx in ((src, sbuf, sidx), (dst, dbuf, didx)):
        use = (buf == SCRATCH) & (rank < n)
        if np.any(use):
            np.maximum.at(alg_scratch, rank[use], idx[use] + 1)
    scratch: list[list[int | None]] = [[None] * int(x) for x in alg_scratch]

    # Size classes of the values moved (in the algorithm's own slots).
    reads, writes = sbuf == SCRATCH, dbuf == SCRATCH
    if k == 1:
        vcls = np.zeros(len(tid), dtype=np.int64)
    else:
        vcls = np.where(reads, -1, sidx % k)
        _resolve_scratch_classes(vcls, step, src, sidx, dst, didx, reads, writes)
        bad = ~writes & (didx % k != vcls)
        if np.any(bad):
            pos = int(np.argmax(bad))
            t = algorithm.transfers[int(tid[pos])]
            di = int(didx[pos])
            raise CollectiveError(
                f"step {t.step}: rank {t.dst} {t.dst_buf}[{di}] holds piece {di % k} of a base slot but the "
                f"schedule stores a piece {int(vcls[pos])} there ({t.describe()}); runtimes need every slot to "
                "hold pieces of one size")
        _check_switch_classes(algorithm, vcls, tid, step, src, sidx, dst, didx, n)
    # Input slots the schedule writes get scratch slots of their own (in input order), and so
    # do, in place, input slots read after the output slot overlaid on them is written.
    wrote_input = dbuf == INPUT
    prologue = np.zeros((0, 3), dtype=np.int64)
    stride = max(max((len(x) for x in coll.inputs), default=0), 1)
    snapshot = np.zeros(0, dtype=np.int64)
    if in_place_aliases is not None:
        snapshot = clobbered_inputs(in_place_aliases, stride, step, src, sbuf, sidx, dst, dbuf, didx)
    if np.any(wrote_input) or len(snapshot):
        keys = np.unique(np.concatenate([dst[wrote_input] * stride + didx[wrote_input], snapshot]))
        red_rank = keys // stride
        bounds = np.searchsorted(red_rank, np.arange(n + 1))  # rank r's keys: bounds[r]..bounds[r+1]-1
        red_scratch = np.array([len(scratch[r]) for r in range(n)], dtype=np.int64)[red_rank] + \
            np.arange(len(keys)) - bounds[red_rank]
        classes = keys % stride % k
        for r in np.flatnonzero(np.diff(bounds)).tolist():  # per rank, in input order
            scratch[r].extend(classes[bounds[r]:bounds[r + 1]].tolist())
        rkey, wkey = src * stride + sidx, dst * stride + didx
        rpos = np.minimum(np.searchsorted(keys, rkey), len(keys) - 1)
        src_redirected = (sbuf == INPUT) & (keys[rpos] == rkey)
        prologue = _prologue(keys, red_scratch, stride, step, rkey, src_redirected, wkey, wrote_input, reduce)
    # Versions of scratch slots come after the redirected inputs (a rank's: a switch slot holds
    # one step's pieces only, which are of one class).
    new_sidx, new_didx = _versions(scratch, vcls, step, src, sidx, reads & (src < n), dst, didx, writes & (dst < n),
                                   reduce)
    if np.any(wrote_input) or len(snapshot):
        new_sidx = np.where(src_redirected, red_scratch[rpos], new_sidx)
        sbuf = np.where(src_redirected, SCRATCH, sbuf)
        wpos = np.minimum(np.searchsorted(keys, wkey), len(keys) - 1)
        new_didx = np.where(wrote_input, red_scratch[wpos], new_didx)
        dbuf = np.where(wrote_input, SCRATCH, dbuf)
    return Moves(step, src, sbuf, new_sidx, dst, dbuf, new_didx, reduce, tid, vcls, scratch, prologue)


def clobbered_inputs(in_place_aliases, stride: int, step, src, sbuf, sidx, dst, dbuf, didx) -> np.ndarray:
    """Keys (rank x ``stride`` + input slot) of the input slots an in-place call would clobber
    before the schedule is done reading them: the output slot overlaid on the slot is written in
    a step before the last step that reads the slot."""
    pairs = [(r, j, a) for r, row in enumerate(in_place_aliases) for j, a in enumerate(row) if a is not None]
    if not pairs:
        return np.zeros(0, dtype=np.int64)
    rank, out_slot, in_slot = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    width = max(int(out_slot.max()) + 1, int(didx.max(initial=0)) + 1)
    big = np.iinfo(np.int64).max
    w = dbuf == OUTPUT  # the first step writing each output slot
    w_key = dst[w] * width + didx[w]
    order = np.lexsort((step[w], w_key))
    w_key, w_step = w_key[order], step[w][order]
    at = np.searchsorted(w_key, rank * width + out_slot)
    hit = at < len(w_key)
    hit[hit] = w_key[at[hit]] == (rank * width + out_slot)[hit]
    first_write = np.full(len(pairs), big, dtype=np.int64)
    first_write[hit] = w_step[at[hit]]
    rd = sbuf == INPUT  # the last step reading each input slot
    r_key = src[rd] * stride + sidx[rd]
    order = np.lexsort((-step[rd], r_key))
    r_key, r_step = r_key[order], step[rd][order]
    want = rank * stride + in_slot
    at = np.searchsorted(r_key, want)
    hit = at < len(r_key)
    hit[hit] = r_key[at[hit]] == want[hit]
    last_read = np.full(len(pairs), -1, dtype=np.int64)
    last_read[hit] = r_step[at[hit]]
    return np.unique(want[first_write < last_read])


def _check_switch_classes(algorithm: Algorithm, vcls, tid, step, src, sidx, dst, didx, n: int) -> None:
    """The pushes into one switch slot in one step move pieces of one size class (a pull's
    class is its pushes', and its destination's is checked like any write)."""
    push = np.flatnonzero(dst >= n)
    if not len(push):
        return
    key = np.stack([step[push], dst[push], didx[push]], axis=1)
    _, first, which = np.unique(key, axis=0, return_index=True, return_inverse=True)
    which = which.ravel()
    bad = vcls[push] != vcls[push[first]][which]
    if np.any(bad):
        pos = int(push[np.argmax(bad)])
        t = algorithm.transfers[int(tid[pos])]
        other = algorithm.transfers[int(tid[push[first[which[np.argmax(bad)]]]])]
        raise CollectiveError(
            f"step {t.step}: switch {algorithm.topology.vertex_name(t.dst)!r} slot {int(didx[pos])} sums a piece "
            f"{int(vcls[pos])} ({t.describe(algorithm.topology)}) with a piece "
            f"{int(vcls[push[first[which[np.argmax(bad)]]]])} ({other.describe(algorithm.topology)}); runtimes "
            "need every slot to hold pieces of one size")


def _prologue(keys, red_scratch, stride, step, rkey, src_redirected, wkey, wrote_input, reduce):
    """Prologue copies: a redirected input slot whose first touching step reads it or reduces
    into it keeps its starting value."""
    touch_key = np.concatenate([rkey[src_redirected], wkey[wrote_input]])
    touch_step = np.concatenate([step[src_redirected], step[wrote_input]])
    needs = np.concatenate([np.ones(int(src_redirected.sum()), dtype=bool), reduce[wrote_input]])
    which = np.searchsorted(keys, touch_key)
    first = np.full(len(keys), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, which, touch_step)
    need = np.zeros(len(keys), dtype=bool)
    need[which[(touch_step == first[which]) & needs]] = True
    return np.stack([keys[need] // stride, keys[need] % stride, red_scratch[need]], axis=1)


def _resolve_scratch_classes(vcls, step, src, sidx, dst, didx, reads, writes) -> None:
    """Fill the classes of values read from scratch: each read takes the class of the latest
    write to its slot in an earlier step (a chain through scratch, resolved by pointer jumping)."""
    if not np.any(reads):
        return
    span = int(max(sidx[reads].max(initial=0), didx[writes].max(initial=0))) + 1
    S = int(step.max(initial=0)) + 2
    w_ids = np.flatnonzero(writes)
    w_key = (dst[w_ids] * span + didx[w_ids]) * S + step[w_ids]
    order = np.argsort(w_key, kind="stable")
    w_key, w_ids = w_key[order], w_ids[order]
    r_ids = np.flatnonzero(reads)
    slot = src[r_ids] * span + sidx[r_ids]
    at = np.searchsorted(w_key, slot * S + step[r_ids], side="left") - 1
    ok = (at >= 0) & (w_key[np.maximum(at, 0)] // S == slot)
    if not np.all(ok):
        bad = int(r_ids[np.argmin(ok)])
        raise CollectiveError(f"rank {int(src[bad])} reads scratch[{int(sidx[bad])}] before anything was "
                              "written there (verify the algorithm first)")
    pred = np.full(len(vcls), -1, dtype=np.int64)
    pred[r_ids] = w_ids[at]
    todo = r_ids[vcls[r_ids] < 0]
    while len(todo):
        p = pred[todo]
        known = vcls[p] >= 0
        vcls[todo[known]] = vcls[p[known]]
        rest = todo[~known]
        pred[rest] = pred[pred[rest]]
        todo = rest


def _versions(scratch, vcls, step, src, sidx, reads, dst, didx, writes, reduce):
    """Program slots of the algorithm's scratch slots: the first class a slot holds keeps it,
    other classes get version slots (appended per rank in order of first write)."""
    if not np.any(writes):
        return sidx, didx
    span = int(max(sidx[reads].max(initial=0), didx[writes].max(initial=0))) + 1
    w_ids = np.flatnonzero(writes)  # in (step, transfer, slot) order
    w_slot = dst[w_ids] * span + didx[w_ids]
    uniq, first = np.unique(w_slot, return_index=True)
    first_cls = vcls[w_ids[first]]
    w_rank, w_index = np.divmod(uniq, span)
    bounds = np.searchsorted(w_rank, np.arange(len(scratch) + 1))  # rank r's slots: bounds[r]..bounds[r+1]-1
    for r in np.flatnonzero(np.diff(bounds)).tolist():
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        at, classes = w_index[lo:hi].tolist(), first_cls[lo:hi].tolist()
        if at[-1] - at[0] + 1 == len(at):  # a run of slots (sorted, distinct): one slice
            scratch[r][at[0]:at[-1] + 1] = classes
        else:
            row = scratch[r]
            for i, cls in zip(at, classes):
                row[i] = cls
    _check_reduces(vcls, step, dst, didx, w_ids, w_slot, reduce)
    w_moved = vcls[w_ids] != first_cls[np.searchsorted(uniq, w_slot)]
    if not np.any(w_moved):
        return sidx, didx
    version_of: dict[tuple[int, int, int], int] = {}
    new_didx = didx.copy()
    for pos in w_ids[w_moved].tolist():
        key = (int(dst[pos]), int(didx[pos]), int(vcls[pos]))
        slot = version_of.get(key)
        if slot is None:
            slot = version_of[key] = len(scratch[key[0]])
            scratch[key[0]].append(key[2])
        new_didx[pos] = slot
    new_sidx = sidx.copy()
    r_ids = np.flatnonzero(reads)
    at = np.minimum(np.searchsorted(uniq, src[r_ids] * span + sidx[r_ids]), len(uniq) - 1)
    for pos in r_ids[vcls[r_ids] != first_cls[at]].tolist():
        new_sidx[pos] = version_of[(int(src[pos]), int(sidx[pos]), int(vcls[pos]))]
    return new_sidx, new_didx


def _check_reduces(vcls, step, dst, didx, w_ids, w_slot, reduce) -> None:
    """A reduce into scratch adds to a value of its own class written in an earlier step."""
    red = reduce[w_ids]
    if not np.any(red):
        return
    S = int(step.max(initial=0)) + 2
    key = w_slot * S + step[w_ids]
    order = np.argsort(key, kind="stable")
    skey = key[order]
    r_pos = np.flatnonzero(red)
    at = np.searchsorted(skey, w_slot[r_pos] * S + step[w_ids[r_pos]], side="left") - 1
    ok = (at >= 0) & (skey[np.maximum(at, 0)] // S == w_slot[r_pos])
    prev_cls = np.where(ok, vcls[w_ids[order[np.maximum(at, 0)]]], -1)
    bad = prev_cls != vcls[w_ids[r_pos]]
    if np.any(bad):
        i = int(np.argmax(bad))
        pos = int(w_ids[r_pos[i]])
        held = "nothing" if prev_cls[i] < 0 else f"a piece {int(prev_cls[i])}"
        raise CollectiveError(f"rank {int(dst[pos])} reduces a piece {int(vcls[pos])} into scratch["
                              f"{int(didx[pos])}], which holds {held}")
