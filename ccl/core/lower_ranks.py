"""Lowering, last stage: every rank's op list from the fused runs (the order, staging and
dependency rules are stated in ``ccl.lower``).

Ops are built as rows with a sort key (rank, step, section, position) and sorted once; the
sections of a rank's step are its receives, its sends and its local ops. Dependencies come from
one sort of every op's slot accesses (read after write, write after read, write after write).
"""

from __future__ import annotations

import numpy as np

from .collective import Collective
from .lower_slots import INPUT, OUTPUT, SCRATCH
from .program import KIND_CODE, OpTable

SEND, RECV, COPY, REDUCE, PUSH, PUSH_REDUCE, PULL = (KIND_CODE[k] for k in ("send", "recv", "copy", "reduce", "push",
                                                                              "push-reduce", "pull"))
PROLOGUE, RECVS, SENDS, LOCAL = 0, 1, 2, 3  # sections of a rank's step, in list order
# op rows: the sort key (rank, step, section, sub) and the op's fields, with their dtypes
_ROW = {"rank": "int32", "step": "int32", "section": "int8", "sub": "int64", "kind": "int8", "buf": "int8",
        "index": "int32", "count": "int32", "peer": "int32", "src_buf": "int8", "src_index": "int32",
        "tag": "int32", "channel": "int32", "slot": "int32"}
_AFTER_RECEIVES = 1 << 61  # staging uses of snapshots come after every receive's


class Runs:
    """Fused moves: one per message or local op, in (step, src, dst, buffers, op, slot) order;
    ``tag`` and ``channel`` are set for messages (-1 and 0 for local runs)."""

    def __init__(self, **columns: np.ndarray) -> None:
        self.step = columns["step"]
        self.src = columns["src"]
        self.src_buf = columns["src_buf"]
        self.src_index = columns["src_index"]
        self.dst = columns["dst"]
        self.dst_buf = columns["dst_buf"]
        self.dst_index = columns["dst_index"]
        self.count = columns["count"]
        self.reduce = columns["reduce"]
        self.tag = np.full(len(self.step), -1, dtype=np.int64)
        self.channel = np.zeros(len(self.step), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.step)


def _expand(count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items of ``count`` slots each: the item of every unit and its offset in the item."""
    which = np.repeat(np.arange(len(count), dtype=np.int64), count)
    off = np.arange(len(which), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return which, off


class Assembly:
    """Builds the op table from the runs: ``build()`` returns the table and the scratch size
    classes (staging appended, unused slots dropped). It holds the runs until every op is a row,
    then lets them go: the caller should keep no other reference."""

    def __init__(self, coll: Collective, scratch: list[list[int | None]], prologue: np.ndarray, runs: Runs,
                 aliases: tuple[tuple[int | None, ...], ...] | None = None, n_vertices: int | None = None) -> None:
        self.coll = coll
        # output slot -> the input slot that is the same memory (for hazards and staging):
        # ``coll.aliases`` out of place, ``coll.in_place_aliases`` for a Program correct in place
        self.alias_table = coll.aliases if aliases is None else aliases
        self.n = coll.n_ranks
        self.V = n_vertices or self.n  # ranks, then switches: a switch's runs have it as src (pull) or dst (push)
        self.k = coll.chunk_factor
        self.scratch = scratch
        self.prologue = prologue
        self.runs = runs
        self.rows: dict[str, list[np.ndarray]] = {name: [] for name in _ROW}
        # aliased output slots: (rank, output slot, input slot)
        parts = []
        for r, row in enumerate(self.alias_table):
            a = np.array(row, dtype=float)
            js = np.flatnonzero(~np.isnan(a))
            if len(js):
                parts.append(np.stack([np.full(len(js), r), js, a[js].astype(np.int64)], axis=1))
        self.aliases = np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)

    # ------------------------------------------------------------------ slots
    def _layout(self) -> tuple[np.ndarray, np.ndarray]:
        """(base id of every (rank, buffer), canonical id of every slot): per rank the input,
        output and scratch slots; an output slot aliasing an input slot is that slot (one
        memory in place, and the runtime's copy of it out of place)."""
        sizes = np.zeros((self.n, 3), dtype=np.int64)
        sizes[:, 0] = [len(x) for x in self.coll.inputs]
        sizes[:, 1] = [len(x) for x in self.coll.outputs]
        sizes[:, 2] = [len(x) for x in self.scratch]
        base = np.zeros(self.n * 3 + 1, dtype=np.int64)
        np.cumsum(sizes.ravel(), out=base[1:])
        canon = np.arange(base[-1], dtype=np.int64)
        r, j, a = self.aliases.T
        canon[base[r * 3 + OUTPUT] + j] = base[r * 3 + INPUT] + a
        return base, canon

    def _classes(self, rank: np.ndarray, buf: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Size class of each slot (rank, buf, index)."""
        out = index % self.k
        sc = np.flatnonzero(buf == SCRATCH)
        if len(sc):
            flat = np.array([-1 if c is None else c for row in self.scratch for c in row], dtype=np.int64)
            offs = np.cumsum([0] + [len(row) for row in self.scratch])
            out = out.copy()
            out[sc] = flat[offs[rank[sc]] + index[sc]]
        return out

    # ------------------------------------------------------------------ build
    def build(self) -> tuple[OpTable, list[list[int | None]]]:
        runs = self.runs
        net = runs.src != runs.dst
        big = int(runs.tag.max(initial=0)) + 1
        staged = self._staged(net)
        # staging uses: the rank's staged receives in receive order, then its local snapshots
        uses = np.flatnonzero(staged)
        use = {"rank": runs.dst[uses], "step": runs.step[uses], "pos": runs.src[uses] * big + runs.tag[uses],
               "buf": runs.dst_buf[uses], "index": runs.dst_index[uses], "count": runs.count[uses]}
        groups = self._local_groups(np.flatnonzero(~net), uses)
        if groups.snapshots:
            snap = np.array(groups.snapshots, dtype=np.int64)  # rank, step, j, buf, index, count
            for key, col in (("rank", 0), ("step", 1), ("buf", 3), ("index", 4), ("count", 5)):
                use[key] = np.concatenate([use[key], snap[:, col]])
            use["pos"] = np.concatenate([use["pos"], snap[:, 2] + _AFTER_RECEIVES])
        base = self._allocate(use)
        stage_of = np.full(len(runs), -1, dtype=np.int64)
        stage_of[uses] = base[:len(uses)]
        self._emit_prologue()
        self._emit_messages(np.flatnonzero(net), stage_of, big)
        self._emit_applies(uses, stage_of, big, groups.keys)
        self._emit_groups(groups, stage_of, base[len(uses):])
        self._emit_free(groups.free, big)
        del use, uses, staged, stage_of, base, net, runs
        self.runs = None  # every op is a row now
        return self._finish()

    def _staged(self, net: np.ndarray) -> np.ndarray:
        """Receives (and pulls) that land in staging: receive-reduces, and receives into a slot
        the rank still reads in the same step (by a send, a push or a local op)."""
        runs = self.runs
        into_rank = runs.dst < self.n  # a push's reduce is the switch's, not a staging one
        staged = net & runs.reduce & into_rank
        check = np.flatnonzero(net & ~runs.reduce & into_rank)
        if not len(check):
            return staged
        base, canon = self._layout()
        total = int(base[-1])

        def keys(ids: np.ndarray, rank: np.ndarray, buf: np.ndarray, index: np.ndarray) -> tuple:
            which, off = _expand(runs.count[ids])
            at = ids[which]
            slot = canon[base[rank[at] * 3 + buf[at]] + index[at] + off]
            return runs.step[at] * total + slot, which

        readers = np.flatnonzero(runs.src < self.n)  # every run but a pull reads on its source rank
        read_keys, _ = keys(readers, runs.src, runs.src_buf, runs.src_index)
        recv_keys, which = keys(check, runs.dst, runs.dst_buf, runs.dst_index)
        read_keys.sort()
        at = np.minimum(np.searchsorted(read_keys, recv_keys), len(read_keys) - 1)
        hit = read_keys[at] == recv_keys
        staged[check[which[hit]]] = True
        return staged

    def _local_groups(self, local: np.ndarray, uses: np.ndarray) -> _Groups:
        """Steps of a rank whose local runs read a slot another of its ops writes in that step
        are ordered in Python (reads before overwrites, snapshots for cycles); in every other
        step the local runs follow the staged receives' applies in run order (``free``), which
        is the order the Python one gives when nothing conflicts."""

        runs = self.runs
        groups = _Groups()
        if not len(local):
            return groups
        clash = self._conflicting(local, uses)
        groups.free = local[~clash]
        local = local[clash]
        members: dict[tuple[int, int], list[int]] = {}
        for i in local.tolist():
            members.setdefault((int(runs.src[i]), int(runs.step[i])), []).append(i)
        applies: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for i in uses.tolist():
            key = (int(runs.dst[i]), int(runs.step[i]))
            if key in members:
                applies.setdefault(key, []).append((int(runs.src[i]), int(runs.tag[i]), i))
        for key in sorted(members):
            ordered, snapshots = _order_locals([i for _, _, i in sorted(applies.get(key, []))], members[key],
                                               runs, self.alias_table[key[0]])
            groups.keys.add(key)
            groups.orders[key] = (ordered, len(groups.snapshots), len(snapshots))
            for j, (buf, index, count) in enumerate(snapshots):
                groups.snapshots.append((key[0], key[1], j, buf, index, count))
        return groups

    def _conflicting(self, local: np.ndarray, uses: np.ndarray) -> np.ndarray:
        """Per local run: whether its (rank, step) has a local run reading a slot that another
        local run or staged receive's apply of that rank writes in the same step (aliased
        output slots count as their input slots)."""
        runs = self.runs
        base, canon = self._layout()
        total = int(base[-1]) + 1
        steps = int(runs.step.max(initial=0)) + 2
        group = runs.src[local].astype(np.int64) * steps + runs.step[local] + 1  # (rank, step) of each
        apply_group = runs.dst[uses].astype(np.int64) * steps + runs.step[uses] + 1

        def slots(ids: np.ndarray, rank: np.ndarray, buf: np.ndarray, index: np.ndarray, grp: np.ndarray):
            which, off = _expand(runs.count[ids].astype(np.int64))
            at = ids[which]
            slot = canon[base[rank[at] * 3 + buf[at]] + index[at] + off]
            return grp[which] * total + slot, at

        r_key, r_op = slots(local, runs.src, runs.src_buf, runs.src_index, group)
        w_keys = [slots(local, runs.dst, runs.dst_buf, runs.dst_index, group)]
        if len(uses):
            w_keys.append(slots(uses, runs.dst, runs.dst_buf, runs.dst_index, apply_group))
        w_key = np.concatenate([k for k, _ in w_keys])
        w_op = np.concatenate([o for _, o in w_keys])
        order = np.argsort(w_key, kind="stable")
        w_key, w_op = w_key[order], w_op[order]
        lo = np.searchsorted(w_key, r_key, side="left")
        hi = np.searchsorted(w_key, r_key, side="right")
        # a read clashes when its slot has a writer other than its own run
        many = hi - lo >= 2
        one = (hi - lo == 1)
        other = np.zeros(len(r_key), dtype=bool)
        other[one] = w_op[lo[one]] != r_op[one]
        bad_groups = np.unique(group[np.searchsorted(local, r_op[many | other])])
        return np.isin(group, bad_groups)

    def _allocate(self, use: dict[str, np.ndarray]) -> np.ndarray:
        """Staging bases: the j-th use of a layout (the size classes of the range) in a rank's
        step gets that layout's j-th range, allocated after the program's scratch slots when
        first needed."""
        rank, step, pos, count = use["rank"], use["step"], use["pos"], use["count"]
        if not len(rank):
            return np.zeros(0, dtype=np.int64)
        first_cls = self._classes(rank, use["buf"], use["index"])
        classes_of: dict[int, tuple[int, ...]] = {}  # layout id -> size classes (ranges of several slots)
        if np.all(count == 1):
            layout = first_cls
        else:
            which, off = _expand(count)
            cls = self._classes(rank[which], use["buf"][which], use["index"][which] + off).tolist()
            ends = np.cumsum(count).tolist()
            ids: dict[tuple[int, ...], int] = {}
            start = 0
            layout = np.empty(len(rank), dtype=np.int64)
            for u, end in enumerate(ends):
                layout[u] = ids.setdefault(tuple(cls[start:end]), len(ids))
                start = end
            classes_of = {v: key for key, v in ids.items()}
        order = np.lexsort((pos, layout, step, rank))
        r, s, lay = rank[order], step[order], layout[order]
        first = np.r_[True, (r[1:] != r[:-1]) | (s[1:] != s[:-1]) | (lay[1:] != lay[:-1])]
        start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
        j = np.empty(len(order), dtype=np.int64)
        j[order] = np.arange(len(order)) - start
        span, n_lay = int(j.max()) + 1, int(layout.max()) + 1
        pool = (rank * n_lay + layout) * span + j
        when = np.lexsort((pos, step, rank))  # order of need
        pools, first_use = np.unique(pool[when], return_index=True)
        alloc = np.argsort(first_use, kind="stable")  # pools in order of first need
        owner = pools[alloc] // span // n_lay
        lay_of = (pools[alloc] // span) % n_lay
        base_of = np.empty(len(pools), dtype=np.int64)
        if np.all(count == 1):  # one slot per range: vectorized
            by_rank = np.argsort(owner, kind="stable")
            o = owner[by_rank]
            first = np.searchsorted(o, np.arange(self.n))
            sizes = np.array([len(row) for row in self.scratch], dtype=np.int64)
            base_of[alloc[by_rank]] = sizes[o] + np.arange(len(o)) - first[o]
            classes = lay_of[by_rank].tolist()
            bounds = np.append(first, len(o)).tolist()
            for r in range(self.n):
                self.scratch[r].extend(classes[bounds[r]:bounds[r + 1]])
        else:
            for at, r0, lay in zip(alloc.tolist(), owner.tolist(), lay_of.tolist()):
                base_of[at] = len(self.scratch[r0])
                self.scratch[r0].extend(classes_of[lay])
        return base_of[np.searchsorted(pools, pool)]

    # ------------------------------------------------------------------ rows
    def _add(self, n_rows: int, **cols) -> None:
        if not n_rows:
            return
        cols.setdefault("slot", -1)
        for name, dtype in _ROW.items():
            value = np.asarray(cols[name])
            if value.ndim == 0:
                value = np.full(n_rows, value, dtype=dtype)
            self.rows[name].append(value.astype(dtype, copy=False))

    def _emit_prologue(self) -> None:
        p = self.prologue
        if not len(p):
            return
        start = np.r_[True, (p[1:, 0] != p[:-1, 0]) | (p[1:, 1] != p[:-1, 1] + 1) | (p[1:, 2] != p[:-1, 2] + 1)]
        first = np.flatnonzero(start)
        count = np.diff(np.append(first, len(p)))
        self._add(len(first), rank=p[first, 0], step=-1, section=PROLOGUE, sub=first, kind=COPY, buf=SCRATCH,
                  index=p[first, 2], count=count, peer=-1, src_buf=INPUT, src_index=p[first, 1], tag=-1,
                  channel=0)

    def _emit_messages(self, net: np.ndarray, stage_of: np.ndarray, big: int) -> None:
        runs = self.runs
        n = self.n
        push = net[runs.dst[net] >= n]
        pull = net[runs.src[net] >= n]
        net = net[(runs.src[net] < n) & (runs.dst[net] < n)]
        if len(push):  # a rank's pushes go with its sends, its pulls with its receives
            self._add(len(push), rank=runs.src[push], step=runs.step[push], section=SENDS,
                      sub=runs.dst[push] * big + runs.tag[push], kind=np.where(runs.reduce[push], PUSH_REDUCE, PUSH),
                      buf=runs.src_buf[push], index=runs.src_index[push], count=runs.count[push], peer=runs.dst[push],
                      src_buf=-1, src_index=-1, tag=runs.tag[push], channel=runs.channel[push],
                      slot=runs.dst_index[push])
        if len(pull):
            st = stage_of[pull]
            staged = st >= 0
            self._add(len(pull), rank=runs.dst[pull], step=runs.step[pull], section=RECVS,
                      sub=runs.src[pull] * big + runs.tag[pull], kind=PULL,
                      buf=np.where(staged, SCRATCH, runs.dst_buf[pull]),
                      index=np.where(staged, st, runs.dst_index[pull]), count=runs.count[pull], peer=runs.src[pull],
                      src_buf=-1, src_index=-1, tag=runs.tag[pull], channel=runs.channel[pull],
                      slot=runs.src_index[pull])
        st = stage_of[net]
        staged = st >= 0
        common = {"step": runs.step[net], "count": runs.count[net], "tag": runs.tag[net],
                  "channel": runs.channel[net], "src_buf": -1, "src_index": -1}
        self._add(len(net), rank=runs.dst[net], section=RECVS, sub=runs.src[net] * big + runs.tag[net], kind=RECV,
                  buf=np.where(staged, SCRATCH, runs.dst_buf[net]), index=np.where(staged, st, runs.dst_index[net]),
                  peer=runs.src[net], **common)
        self._add(len(net), rank=runs.src[net], section=SENDS, sub=runs.dst[net] * big + runs.tag[net], kind=SEND,
                  buf=runs.src_buf[net], index=runs.src_index[net], peer=runs.dst[net], **common)

    def _emit_applies(self, uses: np.ndarray, stage_of: np.ndarray, big: int, python: set) -> None:
        """The local op finishing each staged receive, in receive order (steps ordered in
        Python emit their own)."""
        runs = self.runs
        if python:
            mine = np.array([(int(r), int(s)) not in python for r, s in zip(runs.dst[uses], runs.step[uses])],
                            dtype=bool)
            uses = uses[mine] if len(uses) else uses
        self._add(len(uses), rank=runs.dst[uses], step=runs.step[uses], section=LOCAL,
                  sub=runs.src[uses] * big + runs.tag[uses], kind=np.where(runs.reduce[uses], REDUCE, COPY),
                  buf=runs.dst_buf[uses], index=runs.dst_index[uses], count=runs.count[uses], peer=-1,
                  src_buf=SCRATCH, src_index=stage_of[uses], tag=-1, channel=0)

    def _emit_free(self, free: np.ndarray | None, big: int) -> None:
        """The local runs of steps that need no ordering, after the step's applies, in run order."""
        if free is None or not len(free):
            return
        runs = self.runs
        self._add(len(free), rank=runs.src[free], step=runs.step[free], section=LOCAL, sub=self.V * big + free,
                  kind=np.where(runs.reduce[free], REDUCE, COPY), buf=runs.dst_buf[free],
                  index=runs.dst_index[free], count=runs.count[free], peer=-1, src_buf=runs.src_buf[free],
                  src_index=runs.src_index[free], tag=-1, channel=0)

    def _emit_groups(self, groups: _Groups, stage_of: np.ndarray, snap_base: np.ndarray) -> None:
        runs = self.runs
        rows = []
        for (rank, step), (ordered, first_snap, n_snap) in groups.orders.items():
            for j in range(n_snap):
                _, _, _, buf, index, count = groups.snapshots[first_snap + j]
                rows.append((rank, step, j, COPY, SCRATCH, int(snap_base[first_snap + j]), count, buf, index))
            for pos, (i, snap) in enumerate(ordered):
                kind = REDUCE if runs.reduce[i] else COPY
                if runs.src[i] != runs.dst[i]:  # a staged receive's apply
                    src_buf, src_index = SCRATCH, int(stage_of[i])
                elif snap >= 0:
                    src_buf, src_index = SCRATCH, int(snap_base[first_snap + snap])
                else:
                    src_buf, src_index = int(runs.src_buf[i]), int(runs.src_index[i])
                rows.append((rank, step, n_snap + pos, kind, int(runs.dst_buf[i]), int(runs.dst_index[i]),
                             int(runs.count[i]), src_buf, src_index))
        if rows:
            a = np.array(rows, dtype=np.int64)
            self._add(len(a), rank=a[:, 0], step=a[:, 1], section=LOCAL, sub=a[:, 2], kind=a[:, 3], buf=a[:, 4],
                      index=a[:, 5], count=a[:, 6], peer=-1, src_buf=a[:, 7], src_index=a[:, 8], tag=-1,
                      channel=0)

    # ------------------------------------------------------------------ finish
    def _finish(self) -> tuple[OpTable, list[list[int | None]]]:
        cols = {name: (np.concatenate(parts) if parts else np.zeros(0, dtype=dtype))
                for (name, parts), dtype in zip(self.rows.items(), _ROW.values())}
        self.rows = {}
        order = _sort_rows(cols)
        for name in _ROW:
            cols[name] = cols[name][order]
        del order
        rank_ptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(cols["rank"], minlength=self.n), out=rank_ptr[1:])
        dep_ptr, dep_idx = self._dependencies(cols, rank_ptr)
        scratch = self._compact(cols)
        table = OpTable(rank_ptr, dep_ptr, dep_idx, kind=cols["kind"], step=cols["step"], buf=cols["buf"],
                        index=cols["index"], count=cols["count"], peer=cols["peer"], src_buf=cols["src_buf"],
                        src_index=cols["src_index"], tag=cols["tag"], channel=cols["channel"], slot=cols["slot"])
        return table, scratch

    def _dependencies(self, cols: dict[str, np.ndarray], rank_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-slot hazards (see module): a read waits for the last write of its slot; a write
        waits for the reads since that write, or for the write itself when nothing read it (the
        reads wait for it already)."""
        kind, rank = cols["kind"], cols["rank"].astype(np.int64)
        n_ops = len(kind)
        if not n_ops:
            return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        base, canon = self._layout()
        keys = []  # per access: (slot * n_ops + op) * 2 + is_write, so one sort orders them
        local = (kind == COPY) | (kind == REDUCE)
        pushes = (kind == PUSH) | (kind == PUSH_REDUCE)
        for ids, buf, index, write in ((np.flatnonzero((kind == SEND) | pushes), "buf", "index", 0),
                                       (np.flatnonzero(local), "src_buf", "src_index", 0),
                                       (np.flatnonzero(kind == REDUCE), "buf", "index", 0),
                                       (np.flatnonzero((kind != SEND) & ~pushes), "buf", "index", 1)):
            counts = cols["count"][ids]
            if np.all(counts == 1):
                at, off = ids, 0
            else:
                which, off = _expand(counts.astype(np.int64))
                at = ids[which]
            where = rank[at] * 3
            where += cols[buf][at]
            slot = base[where]
            slot += cols[index][at]
            slot += off
            key = canon[slot]
            del where, slot
            key *= n_ops
            key += at
            key *= 2
            key += write
            keys.append(key)
        key = np.concatenate(keys)
        del keys
        key.sort()
        write = (key & 1).astype(bool)
        key >>= 1
        slot, op = np.divmod(key, n_ops)
        del key
        op = op.astype(np.int32)
        m = len(slot)
        # position of the first access of each access's slot, and of the last write before it
        first = np.empty(m, dtype=bool)
        if m:
            first[0] = True
            np.not_equal(slot[1:], slot[:-1], out=first[1:])
        del slot
        slot_start = np.where(first, np.arange(m, dtype=np.int32), np.int32(0))
        np.maximum.accumulate(slot_start, out=slot_start)
        del first
        last_write = np.full(m, -1, dtype=np.int32)
        if m > 1:
            marks = np.where(write, np.arange(m, dtype=np.int32), np.int32(-1))
            np.maximum.accumulate(marks, out=marks)
            last_write[1:] = marks[:-1]
            del marks
        last_write[last_write < slot_start] = -1
        # a read waits for the last write of its slot
        reads = np.flatnonzero(~write & (last_write >= 0))
        edges_u, edges_v = [op[last_write[reads]]], [op[reads]]
        # a write waits for the other ops' reads since the last write ...
        w = np.flatnonzero(write)
        lo = np.where(last_write[w] >= 0, last_write[w] + 1, slot_start[w])
        which, off = _expand(w - lo)
        reader = lo[which] + off
        other = op[reader] != op[w][which]
        edges_u.append(op[reader][other])
        edges_v.append(op[w][which][other])
        # ... or, when no other op read it, for the last write itself
        read_by_others = np.zeros(len(w), dtype=bool)
        read_by_others[which[other]] = True
        alone = (last_write[w] >= 0) & ~read_by_others
        edges_u.append(op[last_write[w[alone]]])
        edges_v.append(op[w[alone]])
        del last_write, slot_start, op, write
        u, v = np.concatenate(edges_u).astype(np.int64), np.concatenate(edges_v).astype(np.int64)
        del edges_u, edges_v
        keep = u != v
        edge = v[keep]
        edge *= n_ops
        edge += u[keep]
        del u, v, keep
        edge.sort()  # by op, then dependency; duplicates adjacent
        edge = edge[np.r_[True, edge[1:] != edge[:-1]]] if len(edge) else edge
        v, u = np.divmod(edge, n_ops)
        dep_ptr = np.zeros(n_ops + 1, dtype=np.int64)
        np.cumsum(np.bincount(v, minlength=n_ops), out=dep_ptr[1:])
        return dep_ptr, u - rank_ptr[rank[u]]

    def _compact(self, cols: dict[str, np.ndarray]) -> list[list[int | None]]:
        """Drop scratch slots no op uses, keeping the order (multi-slot ranges stay consecutive)."""
        offs = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum([len(row) for row in self.scratch], out=offs[1:])
        used = np.zeros(int(offs[-1]), dtype=bool)
        rank = cols["rank"]
        for buf, index in (("buf", "index"), ("src_buf", "src_index")):
            ids = np.flatnonzero(cols[buf] == SCRATCH)
            which, off = _expand(cols["count"][ids])
            used[offs[rank[ids[which]]] + cols[index][ids[which]] + off] = True
        if np.all(used):
            return self.scratch
        before = np.concatenate([[0], np.cumsum(used)])  # used slots before each flat position
        for buf, index in (("buf", "index"), ("src_buf", "src_index")):
            ids = np.flatnonzero(cols[buf] == SCRATCH)
            start = offs[rank[ids]]
            cols[index][ids] = before[start + cols[index][ids]] - before[start]
        return [[c for c, u in zip(row, used[offs[r]:offs[r + 1]].tolist()) if u]
                for r, row in enumerate(self.scratch)]


def _sort_rows(cols: dict[str, np.ndarray]) -> np.ndarray:
    """The order of the rows by (rank, step, section, sub): one argsort of a combined key when
    it fits in 63 bits, a lexsort otherwise."""
    rank, step, section, sub = (cols[k] for k in ("rank", "step", "section", "sub"))
    if not len(rank):
        return np.zeros(0, dtype=np.int64)
    n_steps = int(step.max()) + 2
    n_sub = int(sub.max()) + 1
    if (int(rank.max()) + 1) * n_steps * 4 * n_sub < 2**62:  # the keys are distinct: any sort will do
        key = rank.astype(np.int64)
        key *= n_steps
        key += step
        key += 1
        key *= 4
        key += section
        key *= n_sub
        key += sub
        return np.argsort(key)
    return np.lexsort((sub, section, step, rank))


class _Groups:
    """Local ordering of the steps done in Python: per (rank, step) the ordered items
    ((run, snapshot number or -1)), where its snapshots start, and how many it has."""

    def __init__(self) -> None:
        self.keys: set[tuple[int, int]] = set()
        self.orders: dict[tuple[int, int], tuple[list[tuple[int, int]], int, int]] = {}
        self.snapshots: list[tuple[int, int, int, int, int, int]] = []  # rank, step, j, buf, index, count
        self.free = None  # local runs of the steps that need no ordering (a numpy array)


def _order_locals(applies: list[int], local: list[int], runs: Runs,
                  aliases: tuple[int | None, ...]) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """The local ops of one rank's step in an order where every slot is read before it is
    overwritten (Kahn's algorithm, lowest index first); a cycle is broken by snapshotting the
    source of its first reader into staging. Items are the staged receives' applies (which read
    staging, so they only ever wait), then the local runs. Returns the items as (run, snapshot
    number or -1) in order, and the snapshots' (buffer, index, count)."""

    def mem(buf: int, idx: int) -> tuple[int, int]:
        if buf == OUTPUT and aliases[idx] is not None:
            return (INPUT, aliases[idx])
        return (buf, idx)

    items = applies + local
    field = [(int(runs.src_buf[i]), int(runs.src_index[i]), int(runs.dst_buf[i]), int(runs.dst_index[i]),
              int(runs.count[i])) for i in items]
    writes_of: dict[tuple[int, int], list[int]] = {}
    for k, (_sb, _si, db, di, c) in enumerate(field):
        for j in range(c):
            writes_of.setdefault(mem(db, di + j), []).append(k)
    after: list[set[int]] = [set() for _ in items]  # reader -> writers that must wait for it
    indeg = [0] * len(items)
    first_local = len(applies)
    for k in range(first_local, len(items)):
        sb, si, _db, _di, c = field[k]
        for j in range(c):
            for w in writes_of.get(mem(sb, si + j), ()):
                if w != k and w not in after[k]:
                    after[k].add(w)
                    indeg[w] += 1
    order: list[int] = []
    snapshot_of = [-1] * len(items)
    snapshots: list[tuple[int, int, int]] = []
    placed = [False] * len(items)
    ready = [k for k in range(len(items)) if indeg[k] == 0]
    while len(order) < len(items):
        if not ready:
            k = next(k for k in range(first_local, len(items)) if not placed[k] and after[k])
            sb, si, _db, _di, c = field[k]
            snapshot_of[k] = len(snapshots)
            snapshots.append((sb, si, c))
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
    return [(items[k], snapshot_of[k]) for k in order], snapshots
