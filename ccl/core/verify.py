"""The symbolic verifier: executes a schedule on symbols and checks the collective's postcondition.

Independent of every solver: nothing a solver returns is trusted without passing here.

Each slot holds a multiset of input-chunk ids (the chunks whose sum it holds). A copy moves a
multiset, a reduce adds two. At the end every output slot must equal its required set exactly;
a chunk counted twice is an error. Also checked: every transfer uses an existing link of the
flattened topology, no read or reduce sees a slot before it holds a value, no copy collides with
another write in one step, and (where the schedule gives rounds) every link and shared limit
carries at most lanes x rounds slots per step.

Switches that reduce (in-network reduction, see ``ccl.core.algorithm``): a rank -> switch
transfer (a push) in step t writes the switch's slots: ``reduce`` pushes into one slot add up
(their sum, whatever it held before: nothing), a ``copy`` push sets it and must be the only push
into that slot in the step (the source of a multicast). The slot's value is readable in step
t + 1 only, by any number of switch -> rank transfers (pulls; several are a multicast), and is
gone after: the switch stores nothing. A pull of a slot not written in the step before is an
error naming the rank, the step, the switch and the slot. Values are multisets as on ranks, so a
chunk a switch sums twice is caught at the output it reaches. Pushes read the state before their
step, like every transfer; pulls write like any other transfer (a pull colliding with another
write into a rank's slot is an error).

Multisets are kept as bitmasks: chunks that appear together in some required sum form a group
and get bit positions in it, so a value is (group, mask of chunks, mask of chunks counted more
than once). Values mixing groups can never be a correct output and are kept as explicit counts
only for the error message.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain

from . import validate
from .algorithm import Algorithm
from .collective import Collective
from .collector import gc_paused
from .errors import VerificationError

_Value = tuple  # (group, mask, dup) or (-1, Counter) for a mix of groups


@dataclass(frozen=True)
class VerificationResult:
    """What a successful verification established."""

    steps: int
    transfers: int
    chunk_transfers: int
    in_place: bool


class Chunks:
    """Group and bit of every chunk id, and the required value of every distinct output set."""

    def __init__(self, collective: Collective) -> None:
        seen: dict[int, frozenset[int]] = {}  # large collectives share set objects: visit each once
        for slots in collective.outputs:
            for need in slots:
                if id(need) not in seen:
                    seen[id(need)] = need
        distinct = list(dict.fromkeys(seen.values()))
        covered: set[int] = set()
        total = 0
        for need in distinct:
            covered.update(need)
            total += len(need)
        groups: list[list[int]]
        overlap = total != len(covered)  # some chunk is in two required sums
        if not overlap:  # the usual case: required sums are disjoint, each is a group
            groups = [sorted(need) for need in distinct]
        else:
            groups = _merge_overlapping(distinct)
        loose = sorted(set(chain.from_iterable(collective.inputs)) - covered)
        groups.extend([c] for c in loose)
        groups.sort(key=lambda g: g[0])
        self.single: dict[int, _Value] = {}  # the value of each chunk alone: (group, its bit, 0)
        self.members: list[list[int]] = groups
        bits: list[int] = []
        for g, cs in enumerate(groups):
            while len(bits) < len(cs):
                bits.append(1 << len(bits))
            self.single.update(zip(cs, [(g, bit, 0) for bit in bits[:len(cs)]]))
        self.required: dict[int, _Value] = {}
        single = self.single
        for key, need in seen.items():
            g = single[next(iter(need))][0]
            if not overlap:  # its group is itself: every bit of it
                self.required[key] = (g, (1 << len(need)) - 1, 0)
                continue
            mask = 0
            for c in need:
                mask |= single[c][1]
            self.required[key] = (g, mask, 0)
        self.collective = collective

    def value(self, chunk: int) -> _Value:
        return self.single[chunk]

    def counts(self, value: _Value) -> Counter:
        if value[0] < 0:
            return value[1]
        g, mask, dup = value
        out: Counter = Counter()
        for bit, c in enumerate(self.members[g]):
            if mask >> bit & 1:
                out[c] = 2 if dup >> bit & 1 else 1
        return out

    def add(self, a: _Value, b: _Value) -> _Value:
        if a[0] >= 0 and a[0] == b[0]:
            ga, ma, da = a
            _, mb, db = b
            return (ga, ma | mb, da | db | (ma & mb))
        return (-1, self.counts(a) + self.counts(b))

    def describe(self, value: _Value | None) -> str:
        if value is None:
            return "nothing"
        counts = self.counts(value)
        return _describe_counts(counts)


def _merge_overlapping(sets: list[frozenset[int]]) -> list[list[int]]:
    """Union-find: chunks that appear together in some set end in one group."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for need in sets:
        it = iter(need)
        first = find(next(it))
        for c in it:
            other = find(c)
            if other != first:
                parent[other] = first
    members: dict[int, list[int]] = {}
    for c in sorted(parent):
        members.setdefault(find(c), []).append(c)
    return list(members.values())


def _describe_counts(counts: Counter) -> str:
    ids = sorted(counts)
    parts = [f"{c}" + (" (twice or more)" if counts[c] > 1 else "") for c in ids[:8]]
    more = f", ... ({len(ids)} chunks)" if len(ids) > 8 else ""
    if len(ids) == 1 and counts[ids[0]] == 1:
        return f"chunk {ids[0]}"
    return "sum of chunks " + ", ".join(parts) + more


def verify(algorithm: Algorithm, *, in_place: bool = False) -> VerificationResult:
    """Raise VerificationError naming rank, step, slot and what was expected vs found, or
    return what was checked. With ``in_place=True`` each output slot is the same memory as the
    input slot the runtimes overlay on it (``Collective.in_place_aliases``). This is the
    lock-step meaning (a step reads before it writes); whether a runtime, which orders nothing
    but dependencies, gets it right is the lowered Program's question (``verify_program``)."""
    validate.instance(algorithm, Algorithm, "ccl.verify's algorithm")
    validate.flag(in_place, "in_place")
    with gc_paused():  # the state holds millions of tuples
        return _verify(algorithm, in_place)


def _verify(algorithm: Algorithm, in_place: bool, by_range: bool = True) -> VerificationResult:
    """The verification. State: one list of values per (rank, buffer). A step is executed range
    by range (``_range_step``: a transfer's slots read and written as slices; several
    reductions into one slot add up) unless it holds an error to name past its reads (a copy
    and another write into one slot, a reduction into nothing) or the call is in place
    (aliased slots): then slot by slot (``_slot_step``). Both read the state before the step
    and raise the same errors; ``by_range=False`` runs every step slot by slot (the tests
    compare the two)."""
    coll = algorithm.collective
    topo = algorithm.topology
    chunks = Chunks(coll)
    n = coll.n_ranks

    # state[(rank, buffer)][index] = value, None before anything is written there. In place,
    # aliased output slots are their input slots (``alias``, slot by slot).
    state: dict[tuple[int, str], list] = {}
    alias: dict[tuple[int, str, int], tuple[int, str, int]] = {}
    scratch = algorithm.scratch_slots
    for r in range(n):
        inputs = state[(r, "input")] = list(map(chunks.single.__getitem__, coll.inputs[r]))
        outputs = state[(r, "output")] = [None] * len(coll.outputs[r])
        state[(r, "scratch")] = [None] * scratch[r]
        for j, a in enumerate(coll.in_place_aliases[r] if in_place else coll.aliases[r]):
            if a is None:
                continue
            if in_place:
                alias[(r, "output", j)] = (r, "input", a)
            else:
                outputs[j] = inputs[a]

    link_ok: dict[tuple[int, int], bool] = {}
    transfers = algorithm.transfers
    for k, t in enumerate(transfers):
        if t.src != t.dst:
            pair = (t.src, t.dst)
            ok = link_ok.get(pair)
            if ok is None:
                switched = t.src >= n or t.dst >= n
                ok = link_ok[pair] = (topo.switch_path(*pair) if switched else topo.flat_link(*pair)) is not None
            if not ok:
                if t.src >= n or t.dst >= n:
                    raise VerificationError(_no_switch_link(k, t, topo), rank=min(t.src, t.dst), step=t.step,
                                            transfer=k, switch=topo.vertex_name(max(t.src, t.dst)))
                raise VerificationError(
                    f"transfer {k} ({t.describe()}): topology {topo.name!r} has no link from rank "
                    f"{t.src} to rank {t.dst}",
                    rank=t.src,
                    step=t.step,
                    transfer=k,
                )

    if algorithm.rounds is not None:
        _check_capacity(algorithm)

    ranged = by_range and not alias
    switches = _Switches(algorithm, chunks) if algorithm.switch_transfers else None
    for step, indices in algorithm.used_steps:
        if switches is not None:
            indices, pushed = switches.begin(state, alias, step, indices)
        if not (ranged and _range_step(state, chunks, transfers, step, indices)):
            _slot_step(state, alias, chunks, transfers, step, indices)
        if switches is not None:
            switches.end(step, pushed)

    if alias:
        def values_of(r: int, m: int) -> list:
            out = []
            for j in range(m):
                slot = alias.get((r, "output", j), (r, "output", j))
                out.append(state[slot[:2]][slot[2]])
            return out
    else:
        def values_of(r: int, m: int) -> list:
            return state[(r, "output")][:m]
    check_outputs(coll, chunks, values_of, algorithm.n_steps - 1)
    return VerificationResult(
        steps=algorithm.n_steps,
        transfers=len(transfers),
        chunk_transfers=algorithm.n_chunk_transfers,
        in_place=in_place,
    )


def _no_switch_link(k: int, t, topo) -> str:
    n = topo.n_ranks
    rank, switch = (t.src, t.dst) if t.dst >= n else (t.dst, t.src)
    name = topo.vertex_name(switch)
    if not topo.switches[switch - n].reduce:
        return (f"transfer {k} ({t.describe(topo)}): switch {name!r} does not reduce or multicast, so no rank "
                "can send to it or receive from it")
    way = f"from rank {rank} to switch {name!r}" if t.src == rank else f"from switch {name!r} to rank {rank}"
    return f"transfer {k} ({t.describe(topo)}): topology {topo.name!r} has no link {way}"


class _Switches:
    """The switches' slots during the run: ``begin`` takes a step's transfers apart (pushes
    read their values now, from the state before the step; pulls stay with the rank transfers,
    reading the values pushed in the step before, which ``begin`` makes visible and checks);
    ``end`` sums the step's pushes into the values visible in the next step only."""

    def __init__(self, algorithm: Algorithm, chunks: Chunks) -> None:
        self.algorithm = algorithm
        self.topology = algorithm.topology
        self.chunks = chunks
        self.n = algorithm.collective.n_ranks
        self.switched = frozenset(algorithm.switch_transfers)
        self.size: dict[int, int] = {}
        for k in algorithm.switch_transfers:
            t = algorithm.transfers[k]
            sw, idx = (t.dst, t.dst_index) if t.dst >= self.n else (t.src, t.src_index)
            self.size[sw] = max(self.size.get(sw, 0), idx + t.count)
        self.written: dict[int, tuple[int, list]] = {}  # switch -> (step pushed, values)
        self.pushed_in: dict[tuple[int, int], set[int]] = {}  # (switch, slot) -> the steps that push into it
        for k in algorithm.switch_transfers:
            t = algorithm.transfers[k]
            if t.dst >= self.n:
                for j in range(t.count):
                    self.pushed_in.setdefault((t.dst, t.dst_index + j), set()).add(t.step)

    def name(self, sw: int) -> str:
        return self.topology.vertex_name(sw)

    def begin(self, state: dict, alias: dict, step: int, indices) -> tuple[list[int], list]:
        transfers = self.algorithm.transfers
        n = self.n
        for sw, size in self.size.items():  # what each switch holds in this step
            held = self.written.get(sw)
            state[(sw, "scratch")] = held[1] if held is not None and held[0] == step - 1 else [None] * size
        rest: list[int] = []
        pushed: list[tuple[int, list]] = []
        switched = self.switched
        for k in indices:
            if k not in switched:
                rest.append(k)
                continue
            t = transfers[k]
            if t.dst >= n:  # a push reads the state before the step
                values = []
                for j in range(t.count):
                    key = (t.src, t.src_buf, t.src_index + j)
                    if alias:
                        key = alias.get(key, key)
                    value = state[key[:2]][key[2]]
                    if value is None:
                        raise _read_error(transfers, step, k, j, self.topology)
                    values.append(value)
                pushed.append((k, values))
                continue
            held = state[(t.src, "scratch")]
            for j in range(t.count):
                if held[t.src_index + j] is None:
                    raise self._pull_error(step, k, t.src_index + j)
            rest.append(k)
        return rest, pushed

    def _pull_error(self, step: int, k: int, slot: int) -> VerificationError:
        t = self.algorithm.transfers[k]
        name = self.name(t.src)
        steps = self.pushed_in.get((t.src, slot), set())
        before = max((s for s in steps if s < step), default=None)
        if step in steps:
            why = f"it is pushed in step {step}, readable in step {step + 1}"
        elif before is not None:
            why = (f"it was last pushed in step {before}, and a switch keeps a value for the next step only "
                   "(it stores nothing)")
        elif steps:
            why = f"it is pushed only later, in step {min(steps)}"
        else:
            why = "nothing is ever pushed into it"
        return VerificationError(
            f"step {step}: rank {t.dst} reads switch {name!r} slot {slot}, which holds no value in step {step}: "
            f"{why} (transfer {k}: {t.describe(self.topology)})",
            rank=t.dst, step=step, buffer="scratch", index=slot, transfer=k, expected="a value pushed in step "
            f"{step - 1}", found="nothing", switch=name)

    def end(self, step: int, pushed: list) -> None:
        if not pushed:
            return
        transfers = self.algorithm.transfers
        writes: dict[tuple[int, int], list[tuple[str, tuple, int]]] = {}
        for k, values in pushed:
            t = transfers[k]
            for j, value in enumerate(values):
                writes.setdefault((t.dst, t.dst_index + j), []).append((t.op, value, k))
        fresh: dict[int, list] = {}
        add = self.chunks.add
        for (sw, slot), ws in writes.items():
            if len(ws) > 1 and any(op == "copy" for op, _, _ in ws):
                copied = min(k for op, _, k in ws if op == "copy")
                ks = [copied, min(k for _, _, k in ws if k != copied)]
                first, second = transfers[ks[0]], transfers[ks[1]]
                raise VerificationError(
                    f"step {step}: switch {self.name(sw)!r} slot {slot} receives a copy and another write in the same "
                    f"step (transfers {ks[0]} and {ks[1]}: {first.describe(self.topology)}; "
                    f"{second.describe(self.topology)}): a copy into a switch slot is a multicast's one source, "
                    "reductions add up",
                    rank=second.src, step=step, buffer="scratch", index=slot, transfer=ks[1], switch=self.name(sw))
            value = ws[0][1]
            for _, other, _ in ws[1:]:
                value = add(value, other)
            fresh.setdefault(sw, [None] * self.size[sw])[slot] = value
        for sw, values in fresh.items():
            self.written[sw] = (step, values)


def _read_error(transfers, step: int, k: int, j: int, topology=None) -> VerificationError:
    t = transfers[k]
    return VerificationError(
        f"step {step}: rank {t.src} reads {t.src_buf}[{t.src_index + j}] before anything "
        f"was written there (transfer {k}: {t.describe(topology)})",
        rank=t.src,
        step=step,
        buffer=t.src_buf,
        index=t.src_index + j,
        transfer=k,
        expected="a value",
        found="nothing",
    )


def _range_step(state: dict, chunks: Chunks, transfers, step: int, indices) -> bool:
    """One step, each transfer's slots as one slice: every read first (the state before the
    step), then the writes in transfer order (several reductions into one slot add up in that
    order, as slot by slot). False, with nothing changed, where the step holds an error past
    its reads (a copy and another write into one slot, a reduction into nothing): the step is
    then run slot by slot, which names it."""
    reads = []
    spans = []
    doubtful = False  # a reduction into a slot that holds nothing before the step
    for k in indices:
        _, src, sbuf, sidx, dst, dbuf, didx, count, op = transfers[k]
        values = state[(src, sbuf)][sidx:sidx + count]
        if None in values:
            raise _read_error(transfers, step, k, values.index(None))
        reads.append(values)
        copy = op == "copy"
        spans.append((dst, dbuf, didx, didx + count, copy))
        if not copy and None in state[(dst, dbuf)][didx:didx + count]:
            doubtful = True
    if doubtful:
        return False
    if len(spans) > 1:  # slots written twice: only by reductions
        spans.sort()
        where, end, copied = None, -1, False
        for dst, dbuf, start, stop, copy in spans:
            if (dst, dbuf) != where or start >= end:  # a new run of overlapping spans
                where, end, copied = (dst, dbuf), stop, copy
                continue
            copied = copied or copy
            if copied:
                return False
            if stop > end:
                end = stop
    add = chunks.add
    for k, values in zip(indices, reads):
        _, _, _, _, dst, dbuf, didx, count, op = transfers[k]
        slots = state[(dst, dbuf)]
        if op == "copy":
            slots[didx:didx + count] = values
        else:
            slots[didx:didx + count] = list(map(add, slots[didx:didx + count], values))
    return True


def _slot_step(state: dict, alias: dict, chunks: Chunks, transfers, step: int, indices) -> None:
    """One step slot by slot: every read first (the state before the step), then the writes;
    several reductions into one slot add up, a copy and another write into one slot is an
    error."""
    def get(slot: tuple[int, str, int]):
        return state[slot[:2]][slot[2]]

    first: dict[tuple[int, str, int], tuple[str, _Value, int]] = {}
    more: dict[tuple[int, str, int], list[tuple[str, _Value, int]]] = {}
    for k in indices:
        src, sbuf, sidx, dst, dbuf, didx, count, op = transfers[k][1:]
        for j in range(count):
            skey = (src, sbuf, sidx + j)
            if alias:
                skey = alias.get(skey, skey)
            value = get(skey)
            if value is None:
                raise _read_error(transfers, step, k, j)
            dkey = (dst, dbuf, didx + j)
            if alias:
                dkey = alias.get(dkey, dkey)
            if dkey in first:
                more.setdefault(dkey, [first[dkey]]).append((op, value, k))
            else:
                first[dkey] = (op, value, k)
    for dkey, (op, value, k) in first.items():
        if dkey in more:
            continue
        if op == "copy":
            state[dkey[:2]][dkey[2]] = value
            continue
        current = get(dkey)
        if current is None:
            _reduce_into_nothing(transfers, step, dkey, k)
        state[dkey[:2]][dkey[2]] = chunks.add(current, value)
    for dkey, ws in more.items():
        rank = dkey[0]
        if any(op == "copy" for op, _, _ in ws):
            ks = sorted(k for _, _, k in ws)
            raise VerificationError(
                f"step {step}: rank {rank} {dkey[1]}[{dkey[2]}] receives a copy and another write "
                f"in the same step (transfers {ks[0]} and {ks[1]}: {transfers[ks[0]].describe()}; "
                f"{transfers[ks[1]].describe()})",
                rank=rank,
                step=step,
                buffer=dkey[1],
                index=dkey[2],
                transfer=ks[1],
            )
        current = get(dkey)
        if current is None:
            _reduce_into_nothing(transfers, step, dkey, ws[0][2])
        for _, value, _ in ws:
            current = chunks.add(current, value)
        state[dkey[:2]][dkey[2]] = current


def check_outputs(coll: Collective, chunks: Chunks, values_of, last: int) -> None:
    """Every output slot holds exactly its required sum; ``values_of(rank, m)`` reads the final
    state of the rank's output slots 0..m-1 (a list). Shared by the Algorithm and Program
    verifiers. A rank's slots are compared as one list first (in C: 1.5 million slots at 128
    ranks), slot by slot only to name the first wrong one."""
    n = coll.n_ranks
    required = chunks.required
    for r in range(n):
        outs = coll.outputs[r]
        values = values_of(r, len(outs))
        if values == [required[id(need)] for need in outs]:
            continue
        for j, need in enumerate(outs):
            want = required[id(need)]
            got = values[j]
            if got == want:
                continue
            expected = chunks.describe(want)
            found = chunks.describe(got)
            detail = ""
            if got is not None:
                have = chunks.counts(got)
                wanted = set(need)
                missing = sorted(wanted - set(have))
                extra = sorted(set(have) - wanted)
                twice = sorted(c for c, m in have.items() if m > 1)
                bits = []
                if missing:
                    bits.append(f"missing {_short(missing)}")
                if extra:
                    bits.append(f"extra {_short(extra)}")
                if twice:
                    bits.append(f"counted more than once: {_short(twice)}")
                detail = " (" + "; ".join(bits) + ")" if bits else ""
            raise VerificationError(
                f"after the last step ({last}): rank {r} output[{j}] should hold {expected} but holds "
                f"{found}{detail}",
                rank=r,
                step=last,
                buffer="output",
                index=j,
                expected=expected,
                found=found,
            )


def _reduce_into_nothing(transfers, step: int, dkey: tuple[int, str, int], k: int) -> None:
    rank, buf, idx = dkey
    raise VerificationError(
        f"step {step}: rank {rank} reduces into {buf}[{idx}], which holds no value yet "
        f"(transfer {k}: {transfers[k].describe()})",
        rank=rank,
        step=step,
        buffer=buf,
        index=idx,
        transfer=k,
        expected="a value to reduce into",
        found="nothing",
    )


def _short(ids: list[int]) -> str:
    text = ", ".join(str(c) for c in ids[:6])
    return f"chunks {text}" + (f", ... ({len(ids)} in all)" if len(ids) > 6 else "")


def _check_capacity(algorithm: Algorithm) -> None:
    """Per-step load of each link and shared limit against lanes x rounds."""
    assert algorithm.rounds is not None
    flat = algorithm.topology.flat()
    limit_of: dict[tuple[int, int], list[int]] = {}
    for i, limit in enumerate(flat.limits):
        for pair in limit.links:
            limit_of.setdefault(pair, []).append(i)
    limit_lanes = [limit.lanes(flat) for limit in flat.limits]
    for step, indices in algorithm.used_steps:
        rounds = algorithm.rounds[step]
        load: Counter = Counter()
        limit_load: Counter = Counter()
        for k in indices:
            t = algorithm.transfers[k]
            if t.src == t.dst:
                continue
            load[(t.src, t.dst)] += t.count
            for i in limit_of.get((t.src, t.dst), ()):
                limit_load[i] += t.count
        for (a, b), used in sorted(load.items()):
            n = flat.n_ranks
            link = flat.link(a, b) if a < n and b < n else algorithm.topology.switch_link(a, b)
            assert link is not None
            if used > link.lanes * rounds:
                raise VerificationError(
                    f"step {step}: link {a} -> {b} carries {used} slots but has {link.lanes} lane(s) x "
                    f"{rounds} round(s)",
                    rank=a,
                    step=step,
                    expected=f"at most {link.lanes * rounds} slots",
                    found=f"{used} slots",
                )
        for i, used in sorted(limit_load.items()):
            cap = limit_lanes[i] * rounds
            if used > cap:
                limit = flat.limits[i]
                raise VerificationError(
                    f"step {step}: shared limit {limit.name!r} carries {used} slots but allows "
                    f"{limit_lanes[i]} x {rounds} round(s)",
                    step=step,
                    expected=f"at most {cap} slots",
                    found=f"{used} slots",
                )
