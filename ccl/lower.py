"""Lowering: Algorithm (transfers in lock-step steps) -> Program (per-rank ordered ops).

``lower(algorithm)`` chooses everything a runtime needs and nothing it may choose differently:

1. **Size classes.** Slots are pieces of a base slot, and pieces of a tensor whose size is not
   divisible by the chunk factor differ in length by one element (``ccl.program``). Every slot
   must therefore hold pieces of one size class. Input and output slots have theirs; a scratch
   slot the schedule reuses for pieces of different classes is split into one slot per class.
2. **Input preservation.** Slots of the input buffer the schedule writes are moved to scratch
   (with a prologue copy when their starting value is used), so no op writes the input buffer
   and a runtime never clobbers a caller's input.
3. **Fusion.** Moves of one step between the same two places that are consecutive on both sides
   become one multi-slot op: one message instead of many.
4. **Matching.** Messages between an ordered pair of ranks are numbered in (step, slot) order:
   the number is the tag of both the send and the receive, so tag-matching and order-matching
   transports pair them the same way. Messages of one pair and step go round-robin over
   ``channels``.
5. **Order and dependencies.** Per rank and step: receives, then sends, then local ops. A
   receive lands directly in its destination unless that slot is still read in the same step
   (then it lands in a scratch staging range and a local ``copy`` finishes it); a receive-reduce
   always lands in staging and a local ``reduce`` finishes it. Local ops are ordered so that
   every slot is read before it is overwritten within the step; a cycle (a swap) is broken by
   snapshotting a source into staging first. Dependencies come from per-slot hazards (read
   after write, write after read, write after write, with in-place aliases as one slot) and
   leave out what the list order already guarantees. This gives the well-leveled Programs of
   ``ccl.program``'s deadlock-freedom theorem.

Staging ranges are reused from step to step (the local ops of a step finish before the next
step's receives are posted, so reuse costs no waiting).
"""

from __future__ import annotations

from collections.abc import Iterable

from .algorithm import Algorithm
from .collective import Collective
from .errors import CollectiveError
from .program import COPY, PROLOGUE, RECV, REDUCE, SEND, Op, Program

Slot = tuple[str, int]


def lower(algorithm: Algorithm, *, channels: int = 1, fuse: bool = True) -> Program:
    """The Program that runs ``algorithm`` on point-to-point runtimes. The algorithm should
    have passed ``ccl.verify``; the result can be checked with ``ccl.verify_program``.
    ``fuse=False`` keeps every transfer its own message (pieces a schedule moves separately
    so that they can overlap stay separate); by default consecutive slots moved in one step
    between the same places become one message."""
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise CollectiveError(f"channels must be a positive integer, got {channels!r}")
    coll = algorithm.collective
    _check_size_classes(coll)
    renamer = _Renamer(algorithm)
    steps: list[list[tuple]] = []
    for indices in algorithm.by_step:
        steps.append(_coalesce(renamer.step((k, algorithm.transfers[k]) for k in indices), fuse))
    tags = _tag_messages(steps, channels)
    builders = [_RankBuilder(r, coll, renamer.scratch[r]) for r in range(coll.n_ranks)]
    for r, b in enumerate(builders):
        b.prologue(renamer.prologue[r])
    for s, runs in enumerate(steps):
        per_rank: list[list[tuple]] = [[] for _ in builders]
        for run in runs:
            per_rank[run[0]].append(run)
            if run[3] != run[0]:
                per_rank[run[3]].append(run)
        for r, b in enumerate(builders):
            if per_rank[r]:
                b.step(s, per_rank[r], tags)
    ranks, scratch = zip(*(_compact(b.ops, b.scratch) for b in builders)) if builders else ((), ())
    return Program(
        name=algorithm.name,
        collective=coll,
        topology=algorithm.topology,
        ranks=ranks,
        scratch=scratch,
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
    cls: dict[int, int] = {}
    for r, slots in enumerate(coll.inputs):
        for i, c in enumerate(slots):
            if cls.setdefault(c, i % k) != i % k:
                raise CollectiveError(f"collective {coll.name!r}: chunk {c} starts in slots of different "
                                      f"piece sizes (rank {r} input[{i}])")
    for r, slots in enumerate(coll.outputs):
        for j, need in enumerate(slots):
            bad = sorted(c for c in need if cls[c] != j % k)
            if bad:
                raise CollectiveError(f"collective {coll.name!r}: rank {r} output[{j}] holds piece {j % k} "
                                      f"of a base slot but needs chunk {bad[0]}, a piece {cls[bad[0]]}")


class _Renamer:
    """Maps the algorithm's slots to program slots, step by step: input slots the schedule
    writes move to scratch; a scratch slot gets one program slot per size class it holds."""

    def __init__(self, algorithm: Algorithm) -> None:
        coll = algorithm.collective
        self.k = coll.chunk_factor
        n = coll.n_ranks
        self.scratch: list[list[int | None]] = [[None] * algorithm.scratch_slots[r] for r in range(n)]
        self.current: list[dict[int, tuple[int, int]]] = [{} for _ in range(n)]  # alg slot -> (slot, class)
        self.versions: list[dict[tuple[int, int], int]] = [{} for _ in range(n)]  # (alg slot, class) -> slot
        written: list[set[int]] = [set() for _ in range(n)]
        for t in algorithm.transfers:
            if t.dst_buf == "input":
                written[t.dst].update(range(t.dst_index, t.dst_index + t.count))
        self.redirect: list[dict[int, int]] = []
        for r in range(n):
            table = {}
            for i in sorted(written[r]):
                table[i] = len(self.scratch[r])
                self.scratch[r].append(i % self.k)
            self.redirect.append(table)
        self.prologue: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (input slot, scratch slot)
        self._touched: list[set[int]] = [set() for _ in range(n)]

    def _cls(self, rank: int, buf: str, idx: int) -> int:
        if buf == "scratch":
            cur = self.current[rank].get(idx)
            if cur is None:
                raise CollectiveError(f"rank {rank} reads scratch[{idx}] before anything was written "
                                      "there (verify the algorithm first)")
            return cur[1]
        return idx % self.k

    def _read(self, rank: int, buf: str, idx: int) -> Slot:
        if buf == "input":
            y = self.redirect[rank].get(idx)
            return ("input", idx) if y is None else ("scratch", y)
        if buf == "scratch":
            return ("scratch", self._cls_slot(rank, idx))
        return (buf, idx)

    def _cls_slot(self, rank: int, idx: int) -> int:
        cur = self.current[rank].get(idx)
        if cur is None:
            raise CollectiveError(f"rank {rank} reads scratch[{idx}] before anything was written there "
                                  "(verify the algorithm first)")
        return cur[0]

    def step(self, transfers: Iterable) -> list[tuple]:
        """Unit moves of one step, from (index, transfer) pairs, in program slots:
        (src, sbuf, sidx, dst, dbuf, didx, op, transfer index)."""
        moves = []
        writes: list[tuple[int, int, int, str]] = []  # scratch writes: (rank, alg slot, class, op)
        needs_original: set[tuple[int, int]] = set()
        touched_now: set[tuple[int, int]] = set()
        for k, t in transfers:
            for j in range(t.count):
                si, di = t.src_index + j, t.dst_index + j
                cls = self._cls(t.src, t.src_buf, si)
                sbuf, sidx = self._read(t.src, t.src_buf, si)
                if t.src_buf == "input" and si in self.redirect[t.src]:
                    touched_now.add((t.src, si))
                    needs_original.add((t.src, si))
                if t.dst_buf == "input":
                    if di % self.k != cls:
                        raise CollectiveError(
                            f"step {t.step}: rank {t.dst} input[{di}] holds piece {di % self.k} of a base "
                            f"slot but the schedule stores a piece {cls} there ({t.describe()}); runtimes "
                            "need every slot to hold pieces of one size")
                    touched_now.add((t.dst, di))
                    if t.op == REDUCE:
                        needs_original.add((t.dst, di))
                    moves.append((t.src, sbuf, sidx, t.dst, "scratch", self.redirect[t.dst][di], t.op, k))
                elif t.dst_buf == "output":
                    if di % self.k != cls:
                        raise CollectiveError(
                            f"step {t.step}: rank {t.dst} output[{di}] holds piece {di % self.k} of a base "
                            f"slot but the schedule stores a piece {cls} there ({t.describe()}); runtimes "
                            "need every slot to hold pieces of one size")
                    moves.append((t.src, sbuf, sidx, t.dst, "output", di, t.op, k))
                else:
                    writes.append((t.dst, di, cls, t.op))
                    moves.append((t.src, sbuf, sidx, t.dst, "scratch", (t.dst, di, cls), t.op, k))
        # Inputs touched for the first time in this step keep their starting value in scratch
        # when it is read (now or later) or reduced into.
        for key in sorted(touched_now):
            r, i = key
            if i not in self._touched[r]:
                self._touched[r].add(i)
                if key in needs_original:
                    self.prologue[r].append((i, self.redirect[r][i]))
        # Scratch writes land at the end of the step: pick their program slots now.
        target: dict[tuple[int, int, int], int] = {}
        for r, x, cls, op in writes:
            if (r, x, cls) in target:
                continue
            cur = self.current[r].get(x)
            if op == REDUCE:
                if cur is None or cur[1] != cls:
                    raise CollectiveError(f"rank {r} reduces a piece {cls} into scratch[{x}], which holds "
                                          f"{'nothing' if cur is None else f'a piece {cur[1]}'}")
                target[(r, x, cls)] = cur[0]
                continue
            if cur is not None and cur[1] == cls:
                slot = cur[0]
            elif cur is None and self.scratch[r][x] is None:
                slot = x
                self.scratch[r][x] = cls
            else:
                slot = self.versions[r].get((x, cls))
                if slot is None:
                    if self.scratch[r][x] == cls:
                        slot = x
                    else:
                        slot = len(self.scratch[r])
                        self.scratch[r].append(cls)
                    self.versions[r][(x, cls)] = slot
            target[(r, x, cls)] = slot
        for (r, x, cls), slot in target.items():
            self.current[r][x] = (slot, cls)
        out = []
        for src, sbuf, sidx, dst, dbuf, didx, op, k in moves:
            if dbuf == "scratch" and isinstance(didx, tuple):
                didx = target[didx]
            out.append((src, sbuf, sidx, dst, dbuf, didx, op, k))
        return out


def _coalesce(moves: list[tuple], fuse: bool) -> list[tuple]:
    """Merge unit moves into runs (src, sbuf, sidx, dst, dbuf, didx, count, op), sorted; without
    ``fuse`` only moves of one transfer merge."""
    def key(m: tuple) -> tuple:
        return (m[0], m[3], m[1], m[4], m[6], 0 if fuse else m[7], m[2], m[5])

    moves.sort(key=key)
    runs: list[list] = []
    last_group = None
    for m in moves:
        src, sbuf, sidx, dst, dbuf, didx, op, k = m
        group = None if fuse else k
        if runs:
            last = runs[-1]
            if (last[0] == src and last[3] == dst and last[1] == sbuf and last[4] == dbuf and last[7] == op
                    and last_group == group and last[2] + last[6] == sidx and last[5] + last[6] == didx):
                last[6] += 1
                continue
        runs.append([src, sbuf, sidx, dst, dbuf, didx, 1, op])
        last_group = group
    return [tuple(r) for r in runs]


def _tag_messages(steps: list[list[tuple]], channels: int) -> dict[tuple[int, tuple], tuple[int, int]]:
    """(step, run) -> (tag, channel) for every message."""
    next_tag: dict[tuple[int, int], int] = {}
    out: dict[tuple[int, tuple], tuple[int, int]] = {}
    for s, runs in enumerate(steps):
        in_step: dict[tuple[int, int], int] = {}
        for run in runs:
            pair = (run[0], run[3])
            if pair[0] == pair[1]:
                continue
            tag = next_tag.get(pair, 0)
            next_tag[pair] = tag + 1
            j = in_step.get(pair, 0)
            in_step[pair] = j + 1
            out[(s, run)] = (tag, j % channels)
    return out


class _RankBuilder:
    """Builds one rank's op list with hazard-derived dependencies."""

    def __init__(self, rank: int, coll: Collective, scratch: list[int | None]) -> None:
        self.rank = rank
        self.k = coll.chunk_factor
        self.alias = {j: a for j, a in enumerate(coll.aliases[rank]) if a is not None}
        self.scratch = scratch
        self.ops: list[Op] = []
        self.last_writer: dict[Slot, int] = {}
        self.readers: dict[Slot, list[int]] = {}
        self.known: set[int] = set()  # ops known to have completed at the current point
        self.free: dict[tuple[int, ...], list[int]] = {}  # staging ranges free in this step
        self.busy: list[tuple[tuple[int, ...], int]] = []

    # ---------------------------------------------------------------- memory and hazards
    def _mem(self, buf: str, idx: int) -> Slot:
        if buf == "output" and idx in self.alias:
            return ("input", self.alias[idx])
        return (buf, idx)

    def _class(self, buf: str, idx: int) -> int:
        if buf == "scratch":
            cls = self.scratch[idx]
            return 0 if cls is None else cls
        return idx % self.k

    def _add(self, op: Op, reads: list[Slot], writes: list[Slot]) -> int:
        i = len(self.ops)
        need: set[int] = set()
        lw = self.last_writer
        for m in reads:
            w = lw.get(m)
            if w is not None:
                need.add(w)
        for m in writes:
            w = lw.get(m)
            if w is not None:
                need.add(w)
            need.update(self.readers.get(m, ()))
        need.discard(i)
        deps = tuple(sorted(d for d in need if d not in self.known))
        self._learn(deps)
        self.ops.append(op._replace(deps=deps))
        for m in reads:
            self.readers.setdefault(m, []).append(i)
        for m in writes:
            lw[m] = i
            self.readers[m] = []
        if not op.is_network:
            self.known.add(i)
        return i

    def _learn(self, deps: Iterable[int]) -> None:
        """Deps of an issued op have completed, and so have their deps."""
        stack = [d for d in deps if d not in self.known]
        while stack:
            d = stack.pop()
            if d in self.known:
                continue
            self.known.add(d)
            stack.extend(x for x in self.ops[d].deps if x not in self.known)

    def _slots(self, buf: str, idx: int, count: int) -> list[Slot]:
        return [self._mem(buf, idx + j) for j in range(count)]

    def _stage(self, classes: tuple[int, ...]) -> int:
        free = self.free.get(classes)
        if free:
            base = free.pop()
        else:
            base = len(self.scratch)
            self.scratch.extend(classes)
        self.busy.append((classes, base))
        return base

    def _release(self) -> None:
        for classes, base in self.busy:
            self.free.setdefault(classes, []).append(base)
        self.busy = []

    # ---------------------------------------------------------------- sections
    def prologue(self, pairs: list[tuple[int, int]]) -> None:
        for i, y, count in _runs(sorted(pairs)):
            self._add(Op(COPY, PROLOGUE, "scratch", y, count, -1, "input", i),
                      self._slots("input", i, count), self._slots("scratch", y, count))

    def step(self, s: int, runs: list[tuple], tags: dict) -> None:
        r = self.rank
        recvs, sends, local = [], [], []
        for run in runs:
            src, sbuf, sidx, dst, dbuf, didx, count, op = run
            if src == dst:
                local.append(run)
            elif src == r:
                sends.append(run)
            else:
                recvs.append(run)
        read_now: set[Slot] = set()
        for _src, sbuf, sidx, _dst, _dbuf, _didx, count, _op in sends + local:
            read_now.update(self._slots(sbuf, sidx, count))
        applies: list[tuple[str, str, int, str, int, int]] = []  # (op, src buf, src idx, dst buf, dst idx, count)
        # Receives first (posted early), then sends; both in (peer, tag) order.
        keyed_recvs = sorted(((run[0], tags[(s, run)]), run) for run in recvs)
        for (peer, (tag, chan)), run in keyed_recvs:
            _src, _sbuf, _sidx, _dst, dbuf, didx, count, op = run
            dst_slots = self._slots(dbuf, didx, count)
            if op == COPY and not read_now.intersection(dst_slots):
                self._add(Op(RECV, s, dbuf, didx, count, peer, "", -1, tag, chan), [], dst_slots)
                continue
            base = self._stage(tuple(self._class(dbuf, didx + j) for j in range(count)))
            self._add(Op(RECV, s, "scratch", base, count, peer, "", -1, tag, chan), [],
                      self._slots("scratch", base, count))
            applies.append((op, "scratch", base, dbuf, didx, count))
        keyed_sends = sorted(((run[3], tags[(s, run)]), run) for run in sends)
        for (peer, (tag, chan)), run in keyed_sends:
            _src, sbuf, sidx, _dst, _dbuf, _didx, count, _op = run
            self._add(Op(SEND, s, sbuf, sidx, count, peer, "", -1, tag, chan), self._slots(sbuf, sidx, count), [])
        self._local(s, applies, local)
        self._release()

    def _local(self, s: int, applies: list[tuple], local: list[tuple]) -> None:
        """Local ops of a step: every slot read before it is overwritten; cycles broken by
        snapshots of a source into staging."""
        items: list[list] = [[op, sb, si, db, di, c] for op, sb, si, db, di, c in applies]
        items += [[op, sbuf, sidx, dbuf, didx, count] for _s, sbuf, sidx, _d, dbuf, didx, count, op in local]
        if not items:
            return
        writes_of: dict[Slot, list[int]] = {}
        for k, (_op, _sb, _si, db, di, c) in enumerate(items):
            for m in self._slots(db, di, c):
                writes_of.setdefault(m, []).append(k)
        # Edges reader -> writer (the reader must run first).
        after: list[set[int]] = [set() for _ in items]
        indeg = [0] * len(items)
        first_local = len(applies)
        for k in range(first_local, len(items)):
            _op, sb, si, _db, _di, c = items[k]
            for m in self._slots(sb, si, c):
                for w in writes_of.get(m, ()):
                    if w != k and w not in after[k]:
                        after[k].add(w)
                        indeg[w] += 1
        order: list[int] = []
        snapshots: list[tuple[str, int, int, int]] = []  # (src buf, src idx, count, stage base)
        placed = [False] * len(items)
        ready = [k for k in range(len(items)) if indeg[k] == 0]
        while len(order) < len(items):
            if not ready:
                # A cycle: snapshot the first unplaced reader's source; it stops being a reader.
                k = next(k for k in range(first_local, len(items)) if not placed[k] and after[k])
                _op, sb, si, _db, _di, c = items[k]
                base = self._stage(tuple(self._class(sb, si + j) for j in range(c)))
                snapshots.append((sb, si, c, base))
                items[k][1], items[k][2] = "scratch", base
                for w in after[k]:
                    indeg[w] -= 1
                    if indeg[w] == 0:
                        ready.append(w)
                after[k] = set()
                continue
            ready.sort()
            k = ready.pop(0)
            placed[k] = True
            order.append(k)
            for w in after[k]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    ready.append(w)
        for sb, si, c, base in snapshots:
            self._add(Op(COPY, s, "scratch", base, c, -1, sb, si), self._slots(sb, si, c),
                      self._slots("scratch", base, c))
        for k in order:
            op, sb, si, db, di, c = items[k]
            reads = self._slots(sb, si, c)
            writes = self._slots(db, di, c)
            if op == REDUCE:
                reads = reads + writes
            self._add(Op(op, s, db, di, c, -1, sb, si), reads, writes)


def _compact(ops: list[Op], scratch: list[int | None]) -> tuple[tuple[Op, ...], tuple[int, ...]]:
    """Drop scratch slots no op uses (the algorithm's unused indices), keeping the order, so
    multi-slot ranges stay consecutive."""
    used = [False] * len(scratch)
    for op in ops:
        for buf, idx in ((op.buf, op.index), (op.src_buf, op.src_index)):
            if buf == "scratch":
                for j in range(op.count):
                    used[idx + j] = True
    new_index = []
    count = 0
    for u in used:
        new_index.append(count)
        count += u
    if count == len(scratch):
        return tuple(ops), tuple(0 if c is None else c for c in scratch)

    def move(buf: str, idx: int) -> int:
        return new_index[idx] if buf == "scratch" else idx

    out = tuple(op._replace(index=move(op.buf, op.index), src_index=move(op.src_buf, op.src_index)) for op in ops)
    classes = tuple(0 if c is None else c for c, u in zip(scratch, used) if u)
    return out, classes


def _runs(pairs: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(a, b) pairs sorted by a -> runs (a, b, count) where both sides are consecutive."""
    out: list[list[int]] = []
    for a, b in pairs:
        if out and out[-1][0] + out[-1][2] == a and out[-1][1] + out[-1][2] == b:
            out[-1][2] += 1
        else:
            out.append([a, b, 1])
    return [(a, b, c) for a, b, c in out]

