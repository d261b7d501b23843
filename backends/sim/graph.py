"""The dependencies between a schedule's transfers, as a dependency-driven runtime honours them.

The schedule's step semantics (transfers of step s read the state left by step s-1, their
writes land at the end of step s) become three kinds of edges between transfers, per slot:

* RAW (start): a transfer reading a slot waits until every write of the latest earlier step
  that wrote the slot has *landed*. Only then is its source data present.
* WAW (landing): a write to a slot lands after every write of the latest earlier step that
  wrote it has landed; for a reduce that is also the value it adds into.
* WAR (landing): a write to a slot lands after every read of the slot since its last write
  (in earlier steps or in the same step) has been *sent*, so no reader sees a value from the
  future. Being a landing condition rather than a start condition, a swap of two slots in one
  step does not deadlock: both transfers move, each lands once the other has read.

Several reduces into one slot in one step are independent of each other (they add).
Local transfers (src == dst) take part like any other. Out of place, an output slot that
aliases an input slot starts with a copy of it: reads of such a slot before anything was
written there wait for that rank's initial copy (``raw_init``), and the first write to it lands
after the copy (``land_init``). In place (``in_place=True``) the two slots are one memory.

Edges only depend on the schedule, never on the size, so one ``DependencyGraph`` serves every
size; ``compiled(slices)`` expands it for slicing (slice j of a transfer depends on slice j of
its predecessors) and converts it to the flat lists the event loop reads fastest.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from ccl.algorithm import Algorithm

_BUF = {"input": 0, "output": 1, "scratch": 2}


@dataclass
class CompiledGraph:
    """CSR lists (Python lists: the event loop indexes them one element at a time)."""

    n: int
    raw_ptr: list[int]
    raw_idx: list[int]
    raw_count: list[int]
    waw_ptr: list[int]
    waw_idx: list[int]
    war_ptr: list[int]
    war_idx: list[int]
    land_count: list[int]
    raw_init: list[int]
    land_init: list[int]
    step_ptr: list[int]  # internal ids of step s: step_ptr[s] .. step_ptr[s+1]-1


class DependencyGraph:
    """Transfers in execution order (by step, then position in the schedule) and their edges."""

    def __init__(self, algorithm: Algorithm, *, in_place: bool = False) -> None:
        coll = algorithm.collective
        transfers = algorithm.transfers
        n = len(transfers)
        n_ranks = coll.n_ranks
        self.n = n
        self.n_steps = algorithm.n_steps
        self.in_place = in_place
        def column(k: int, dtype: type = np.int64, convert=None) -> np.ndarray:
            values = map(itemgetter(k), transfers)
            return np.fromiter(values if convert is None else map(convert, values), dtype=dtype, count=n)

        step = column(0)
        order = np.argsort(step, kind="stable")
        if n and np.all(order[1:] > order[:-1]):
            order = np.arange(n)
        self.order = order  # internal id -> index in algorithm.transfers
        self.step = step[order]
        src = column(1)[order]
        sbuf = column(2, convert=_BUF.__getitem__)[order]
        sidx = column(3)[order]
        dst = column(4)[order]
        dbuf = column(5, convert=_BUF.__getitem__)[order]
        didx = column(6)[order]
        count = column(7)[order]
        reduce = column(8, bool, "reduce".__eq__)[order]
        self.src, self.dst, self.count, self.reduce = src, dst, count, reduce
        self.src_buf, self.src_index, self.dst_buf, self.dst_index = sbuf, sidx, dbuf, didx

        # Slot ids: base[rank * 3 + buffer] + index.
        sizes = np.zeros((n_ranks, 3), dtype=np.int64)
        sizes[:, 0] = [len(x) for x in coll.inputs]
        sizes[:, 1] = [len(x) for x in coll.outputs]
        scratch = np.zeros(n_ranks, dtype=np.int64)
        for rank, buf, idx in ((src, sbuf, sidx), (dst, dbuf, didx)):
            use = buf == _BUF["scratch"]
            if np.any(use):
                np.maximum.at(scratch, rank[use], idx[use] + count[use])
        sizes[:, 2] = scratch
        base = np.zeros(n_ranks * 3 + 1, dtype=np.int64)
        np.cumsum(sizes.ravel(), out=base[1:])
        n_slots = int(base[-1])
        canon = np.arange(n_slots, dtype=np.int64)
        init_rank = np.full(n_slots, -1, dtype=np.int64)
        self.aliased = [0] * n_ranks  # aliased output slots per rank (the out-of-place copy)
        for r in range(n_ranks):
            for j, a in enumerate(coll.aliases[r]):
                if a is None:
                    continue
                out_slot = base[r * 3 + 1] + j
                if in_place:
                    canon[out_slot] = base[r * 3] + a
                else:
                    init_rank[out_slot] = r
                    self.aliased[r] += 1
        bounds = np.searchsorted(self.step, np.arange(self.n_steps + 1), side="left")
        self.step_ptr = bounds.tolist()
        self._build(canon, init_rank, base[src * 3 + sbuf] + sidx, base[dst * 3 + dbuf] + didx)
        self._compiled: dict[tuple[int, str], CompiledGraph] = {}

    def _build(self, canon: np.ndarray, init_rank: np.ndarray, src_first: np.ndarray, dst_first: np.ndarray) -> None:
        """Edges by sorting slot accesses by (slot, step) and binary search: for every read the
        group of writes of the latest earlier step (RAW); for every write the same (WAW) and
        the reads since then up to its own step (WAR)."""
        n = self.n
        count = self.count
        i64 = np.int64
        tid = np.repeat(np.arange(n, dtype=i64), count)
        offs = np.arange(len(tid), dtype=i64) - np.repeat(np.cumsum(count) - count, count)
        rslot = canon[np.repeat(src_first, count) + offs]
        wslot = canon[np.repeat(dst_first, count) + offs]
        step = self.step[tid]
        S = self.n_steps + 1
        wkey = wslot * S + step
        worder = np.argsort(wkey, kind="stable")
        wkey_s, wtid_s = wkey[worder], tid[worder]
        rkey = rslot * S + step
        rorder = np.argsort(rkey, kind="stable")
        rkey_s, rtid_s = rkey[rorder], tid[rorder]
        del wkey, rkey, worder, rorder

        def last_writes(key: np.ndarray, slot: np.ndarray):
            """For each access: has an earlier write (bool), the range of the writes of the
            latest earlier step in the sorted writes, and that step."""
            pos = np.searchsorted(wkey_s, key, side="left") - 1
            ok = pos >= 0
            ok[ok] = wkey_s[pos[ok]] // S == slot[ok]
            group = wkey_s[pos[ok]]
            lo = np.searchsorted(wkey_s, group, side="left")
            return ok, lo, pos[ok] + 1, group % S

        def expand(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """Concatenated ranges lo[i]..hi[i]-1, and which i each element came from."""
            lengths = hi - lo
            total = int(lengths.sum())
            which = np.repeat(np.arange(len(lo), dtype=i64), lengths)
            start = np.cumsum(lengths) - lengths
            return np.repeat(lo, lengths) + np.arange(total, dtype=i64) - np.repeat(start, lengths), which

        # Queries run in sorted order (binary searches with increasing keys stay in cache).
        # RAW: reads wait for the latest earlier writes
        rslot_s = rkey_s // S
        ok, lo, hi, _ = last_writes(rkey_s, rslot_s)
        at, which = expand(lo, hi)
        raw = (wtid_s[at], rtid_s[ok][which])
        raw_init = np.full(n, -1, dtype=i64)
        fresh = ~ok & (init_rank[rslot_s] >= 0)
        raw_init[rtid_s[fresh]] = init_rank[rslot_s[fresh]]
        # WAW: writes land after the latest earlier writes
        wslot_s = wkey_s // S
        ok, lo, hi, prev_step = last_writes(wkey_s, wslot_s)
        at, which = expand(lo, hi)
        waw = (wtid_s[at], wtid_s[ok][which])
        land_init = np.full(n, -1, dtype=i64)
        fresh = ~ok & (init_rank[wslot_s] >= 0)
        land_init[wtid_s[fresh]] = init_rank[wslot_s[fresh]]
        # WAR: writes land after the reads since the previous write, up to their own step
        first = np.zeros(len(tid), dtype=i64)
        first[ok] = prev_step + 1
        lo = np.searchsorted(rkey_s, wslot_s * S + first, side="left")
        hi = np.searchsorted(rkey_s, wkey_s, side="right")
        at, which = expand(lo, hi)
        war_u, war_v = rtid_s[at], wtid_s[which]
        keep = war_u != war_v
        war = (war_u[keep], war_v[keep])
        if len(tid) != n:  # a transfer of several slots meets the same neighbour more than once
            raw, waw, war = (_unique(e, n) for e in (raw, waw, war))
        self.raw, self.waw, self.war = raw, waw, war
        self.raw_init, self.land_init = raw_init, land_init

    @property
    def n_edges(self) -> int:
        return len(self.raw[0]) + len(self.waw[0]) + len(self.war[0])

    def compiled(self, slices: int = 1, mode: str = "dependency") -> CompiledGraph:
        """The graph for ``slices`` slices per transfer (internal id v * slices + j) in
        ``mode`` "dependency" (all edges) or "step" (a barrier between steps makes every
        cross-step edge moot; only same-step WAR landing edges remain)."""
        key = (slices, mode)
        if key not in self._compiled:
            self._compiled[key] = self._compile(slices, mode)
        return self._compiled[key]

    def _compile(self, m: int, mode: str) -> CompiledGraph:
        n = self.n * m
        step = self.step
        raw, waw, war = self.raw, self.waw, self.war
        raw_init, land_init = self.raw_init, self.land_init
        if mode == "step":
            empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            same = step[war[0]] == step[war[1]] if len(war[0]) else np.zeros(0, dtype=bool)
            raw, waw = empty, empty
            war = (war[0][same], war[1][same])
            raw_init = np.full(self.n, -1, dtype=np.int64)
            land_init = np.full(self.n, -1, dtype=np.int64)

        def expand(edges: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
            u, v = edges
            if m == 1:
                return u, v
            j = np.arange(m, dtype=np.int64)
            return (u[:, None] * m + j).ravel(), (v[:, None] * m + j).ravel()

        def csr(edges: tuple[np.ndarray, np.ndarray]) -> tuple[list[int], list[int]]:
            u, v = expand(edges)
            ptr = np.zeros(n + 1, dtype=np.int64)
            if len(u):
                np.cumsum(np.bincount(u, minlength=n), out=ptr[1:])
                idx = v[np.argsort(u, kind="stable")]
            else:
                idx = v
            return ptr.tolist(), idx.tolist()

        raw_ptr, raw_idx = csr(raw)
        waw_ptr, waw_idx = csr(waw)
        war_ptr, war_idx = csr(war)
        raw_count = np.bincount(expand(raw)[1], minlength=n).tolist() if n else []
        land_count = (np.bincount(expand(waw)[1], minlength=n)
                      + np.bincount(expand(war)[1], minlength=n)).tolist() if n else []
        step_ptr = [p * m for p in self.step_ptr]
        return CompiledGraph(
            n=n,
            raw_ptr=raw_ptr, raw_idx=raw_idx, raw_count=raw_count,
            waw_ptr=waw_ptr, waw_idx=waw_idx, war_ptr=war_ptr, war_idx=war_idx,
            land_count=land_count,
            raw_init=np.repeat(raw_init, m).tolist(), land_init=np.repeat(land_init, m).tolist(),
            step_ptr=step_ptr,
        )


def _unique(edges: tuple[np.ndarray, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    u, v = edges
    if not len(u):
        return edges
    key = np.unique(u * max(n, 1) + v)
    return key // max(n, 1), key % max(n, 1)
