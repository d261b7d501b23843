"""Semantic mutations of schedules in three formats, and reference executions that decide,
independently of the verifiers, whether a mutant still implements its collective.

Formats and mutation kinds:

* ``Algorithm`` (``algorithm_mutants``): drop, duplicate, redirect-src, redirect-dst,
  step-earlier, step-later (move a transfer across steps), swap-buffer (the destination or
  source buffer), flip-op (copy <-> reduce), offby1-src, offby1-dst, offby1-count.
* ``Program`` (``program_mutants``): drop (its dependants inherit its deps), duplicate, peer,
  reorder (swap two adjacent ops of a rank, each keeping its deps), nodep (remove one
  dependency), swap-buffer, flip-op (local copy <-> reduce, push <-> push-reduce),
  offby1-index, offby1-src, offby1-count, offby1-slot (a push's or pull's switch slot),
  step-shift, alias-nodep (``alias_mutants``: a read and a write of one memory that only an
  in-place call aliases left unordered).
* MSCCL XML (``xml_mutants``, on the ElementTree of the text): drop-step, reorder (swap two
  adjacent steps of a threadblock), peer (a threadblock's send or recv peer), offby1-srcoff,
  offby1-dstoff, offby1-cnt, flip-type (r <-> rrc, cpy <-> re, rcs <-> rrcs, s -> r ...),
  swap-buffer (i/o/s of srcbuf or dstbuf), nodep (remove depid/deps). Offsets and buffers are
  mutated only where the step type reads them (a send's dstoff means nothing).

Switch transfers (in-network reduction) run as the IR defines them: a push's value joins its
switch slot (reductions add up, a copy must be alone), pulls of the next step read the sum, and
the slot is empty in every other step; in Programs a pull delivers once every push of its
(switch, slot, step) has landed.

Reference semantics (each a small interpreter written here, sharing nothing with ``ccl.verify``,
``ccl.verify_program`` or ``backends.msccl``): values are random 62-bit integers, sums exact,
so a chunk lost, added or counted twice changes an output. A mutant is *semantic* when some
execution its format allows ends with a wrong output, reads an empty slot, reduces into one,
moves a piece into a slot of another size, uses a missing link, or deadlocks; otherwise it is
*equivalent* (a harmless change) and the verifier may accept it. Programs and XML are run under
several execution orders (random choices among every enabled event, each op split into a read
event and a later write event, so unordered conflicting accesses show up as different results);
a mutant is semantic if any order goes wrong. Random orders can miss a race: such a mutant is
counted equivalent (never a false miss of the verifier).
"""

from __future__ import annotations

import copy
import random
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from ccl import Algorithm, CclError, Program, Transfer
from ccl.core.collective import Collective
from ccl.core.program import Op
from ccl.core.topology import Topology

BUFFERS = ("input", "output", "scratch")
ORDERS = 6  # execution orders tried per Program or XML mutant


class Wrong(Exception):
    """A reference execution went wrong (the message says how)."""


@dataclass(frozen=True)
class Mutant:
    kind: str
    what: str
    value: object  # transfers (Algorithm), per-rank op lists (Program) or XML text


def _values(coll: Collective, seed: int) -> dict[int, int]:
    rng = random.Random(seed)
    return {c: rng.getrandbits(62) for slots in coll.inputs for c in slots}


def _class_of(coll: Collective) -> dict[int, int]:
    k = coll.chunk_factor
    out: dict[int, int] = {}
    for slots in coll.inputs:
        for i, c in enumerate(slots):
            out.setdefault(c, i % k)
    return out


def overlay(coll: Collective) -> list[dict[int, int]]:
    """Per rank, output slot -> the input slot it is in an in-place call, from the runtimes'
    pointer arithmetic (NCCL, RCCL, MSCCL, torch.distributed), written here from the buffer
    sizes alone: one buffer for allreduce, broadcast, reduce and alltoall (the whole of it);
    the input at rank x its size inside the output for allgather (root x for gather); the
    output at rank x its size inside the input for reducescatter (root x for scatter). Custom
    collectives: their declared aliases."""
    out = []
    for r in range(coll.n_ranks):
        n_in, n_out = len(coll.inputs[r]), len(coll.outputs[r])
        if coll.kind in ("allreduce", "broadcast", "reduce", "alltoall"):
            shift = 0
        elif coll.kind == "allgather":
            shift = -r * n_in
        elif coll.kind == "gather":
            shift = -coll.root * n_in
        elif coll.kind == "reducescatter":
            shift = r * n_out
        elif coll.kind == "scatter":
            shift = coll.root * n_out
        else:
            out.append({j: a for j, a in enumerate(coll.aliases[r]) if a is not None})
            continue
        out.append({j: j + shift for j in range(n_out) if n_in and 0 <= j + shift < n_in})
    return out


def _expect(coll: Collective, value: dict[int, int], rank: int, j: int) -> int:
    return sum(value[c] for c in coll.outputs[rank][j])


# ---------------------------------------------------------------------------- Algorithm
def run_algorithm(coll: Collective, topo: Topology, transfers: list[Transfer]) -> None:
    """Lock-step execution: in each step every transfer reads before any writes; two writes to a
    slot in one step must both be reduces. Raises Wrong."""
    value = _values(coll, 11)
    n = coll.n_ranks
    size = {"input": [len(x) for x in coll.inputs], "output": [len(x) for x in coll.outputs]}
    mem: dict[tuple[int, str, int], int] = {}
    for r, slots in enumerate(coll.inputs):
        for i, c in enumerate(slots):
            mem[(r, "input", i)] = value[c]
        for j, a in enumerate(coll.aliases[r]):
            if a is not None:
                mem[(r, "output", j)] = value[slots[a]]
    steps: dict[int, list[Transfer]] = {}
    for t in transfers:
        if t.step < 0:
            raise Wrong(f"negative step {t.step}")
        steps.setdefault(t.step, []).append(t)
    held: dict[tuple[int, int], int] = {}  # a switch's slots: what the step before pushed, for this step only
    for step in sorted(steps):
        if step - 1 not in steps:
            held = {}
        writes: dict[tuple[int, str, int], list[tuple[str, int]]] = {}
        pushed: dict[tuple[int, int], list[tuple[str, int]]] = {}
        for t in steps[step]:
            if t.src >= n or t.dst >= n:  # a push (rank -> switch) or a pull (switch -> rank)
                _switch_transfer(topo, t, step, mem, held, size, writes, pushed)
                continue
            if not (0 <= t.src < n and 0 <= t.dst < n) or t.count < 1:
                raise Wrong(f"bad transfer {t}")
            if t.src != t.dst and topo.flat_link(t.src, t.dst) is None:
                raise Wrong(f"no link {t.src} -> {t.dst}")
            for j in range(t.count):
                for r, b, i in ((t.src, t.src_buf, t.src_index + j), (t.dst, t.dst_buf, t.dst_index + j)):
                    if b != "scratch" and not 0 <= i < size[b][r]:
                        raise Wrong(f"{b}[{i}] out of range on rank {r}")
                got = mem.get((t.src, t.src_buf, t.src_index + j))
                if got is None:
                    raise Wrong(f"step {step}: empty read {t}")
                writes.setdefault((t.dst, t.dst_buf, t.dst_index + j), []).append((t.op, got))
        for slot, ws in writes.items():
            if any(op == "copy" for op, _ in ws):
                if len(ws) > 1:
                    raise Wrong(f"step {step}: colliding writes to {slot}")
                mem[slot] = ws[0][1]
            else:
                if slot not in mem:
                    raise Wrong(f"step {step}: reduce into empty {slot}")
                mem[slot] += sum(v for _, v in ws)
        held = {}
        for slot, ws in pushed.items():  # a switch sums its reductions; a copy must be alone
            if any(op == "copy" for op, _ in ws) and len(ws) > 1:
                raise Wrong(f"step {step}: colliding pushes into switch slot {slot}")
            held[slot] = sum(v for _, v in ws)
    for r, slots in enumerate(coll.outputs):
        for j in range(len(slots)):
            if mem.get((r, "output", j)) != _expect(coll, value, r, j):
                raise Wrong(f"rank {r} output[{j}] wrong")


def _switch_transfer(topo: Topology, t: Transfer, step: int, mem: dict, held: dict, size: dict, writes: dict,
                     pushed: dict) -> None:
    """A transfer with a switch end, in lock step: a push's values join the switch slot (read
    before the step's writes), a pull reads what the step before pushed and writes like any
    transfer."""
    n = topo.n_ranks
    if t.count < 1 or max(t.src, t.dst) >= topo.n_vertices or min(t.src, t.dst) >= n:
        raise Wrong(f"bad switch transfer {t}")
    rank, sw = (t.src, t.dst) if t.dst >= n else (t.dst, t.src)
    if not topo.switches[sw - n].reduce:
        raise Wrong(f"switch {sw} does not reduce")
    if (t.dst_buf if t.dst >= n else t.src_buf) != "scratch":
        raise Wrong(f"switch slots are scratch: {t}")
    if topo.switch_path(t.src, t.dst) is None:
        raise Wrong(f"no link {t.src} -> {t.dst}")
    for j in range(t.count):
        if t.dst >= n:
            i = t.src_index + j
            if t.src_buf != "scratch" and not 0 <= i < size[t.src_buf][rank]:
                raise Wrong(f"{t.src_buf}[{i}] out of range on rank {rank}")
            got = mem.get((rank, t.src_buf, i))
            if got is None:
                raise Wrong(f"step {step}: empty read {t}")
            pushed.setdefault((sw, t.dst_index + j), []).append((t.op, got))
        else:
            i = t.dst_index + j
            if t.dst_buf != "scratch" and not 0 <= i < size[t.dst_buf][rank]:
                raise Wrong(f"{t.dst_buf}[{i}] out of range on rank {rank}")
            got = held.get((sw, t.src_index + j))
            if got is None:
                raise Wrong(f"step {step}: switch {sw} slot {t.src_index + j} holds nothing")
            writes.setdefault((rank, t.dst_buf, i), []).append((t.op, got))


def algorithm_mutants(algorithm: Algorithm) -> Iterator[Mutant]:
    ts = list(algorithm.transfers)
    n = algorithm.collective.n_ranks
    last = algorithm.n_steps - 1
    for i, t in enumerate(ts):
        d = t.describe()

        def put(*new: Transfer, i: int = i) -> list[Transfer]:
            return ts[:i] + list(new) + ts[i + 1:]

        yield Mutant("drop", f"drop {d}", put())
        yield Mutant("duplicate", f"duplicate {d}", put(t, t))
        if n > 1:
            yield Mutant("redirect-dst", f"dst+1 of {d}", put(t._replace(dst=(t.dst + 1) % n)))
            yield Mutant("redirect-src", f"src+1 of {d}", put(t._replace(src=(t.src + 1) % n)))
        if t.step > 0:
            yield Mutant("step-earlier", f"step-1 of {d}", put(t._replace(step=t.step - 1)))
        yield Mutant("step-later", f"step+1 of {d}", put(t._replace(step=min(t.step + 1, last + 1))))
        yield Mutant("swap-buffer", f"dst buffer of {d}",
                     put(t._replace(dst_buf=BUFFERS[(BUFFERS.index(t.dst_buf) + 1) % 3])))
        yield Mutant("swap-buffer", f"src buffer of {d}",
                     put(t._replace(src_buf=BUFFERS[(BUFFERS.index(t.src_buf) + 2) % 3])))
        yield Mutant("flip-op", f"flip {d}", put(t._replace(op="reduce" if t.op == "copy" else "copy")))
        for delta in (1, -1):
            if t.src_index + delta >= 0:
                yield Mutant("offby1-src", f"src_index{delta:+d} of {d}", put(t._replace(src_index=t.src_index + delta)))
            if t.dst_index + delta >= 0:
                yield Mutant("offby1-dst", f"dst_index{delta:+d} of {d}", put(t._replace(dst_index=t.dst_index + delta)))
            if t.count + delta >= 1:
                yield Mutant("offby1-count", f"count{delta:+d} of {d}", put(t._replace(count=t.count + delta)))


# ---------------------------------------------------------------------------- Program
def run_program(program: Program, ranks: list[list[Op]], seed: int, in_order: bool, in_place: bool = False) -> None:
    """One execution of per-rank op lists under the Program execution model: an op is issued once
    its deps completed (``in_order``: also after the op before it was issued, one in-order queue
    per rank); sends and receives post, the k-th send of a pair and channel meets the k-th receive
    (by list order); the send reads its slots at some point after posting, the message lands at
    some point after both are posted and then both complete; a local op reads at one event and
    writes at a later one. Events are chosen at random among the enabled ones. ``in_place``: an
    output slot is the input slot the runtimes overlay on it (``overlay``); out of place an
    output slot that aliases an input slot starts as its copy. Raises Wrong."""
    coll, topo = program.collective, program.topology
    rng = random.Random(seed)
    value = _values(coll, seed)
    cls = _class_of(coll)
    k = coll.chunk_factor
    n = coll.n_ranks
    size = [{"input": len(coll.inputs[r]), "output": len(coll.outputs[r]), "scratch": len(program.scratch[r])}
            for r in range(n)]

    def slot_class(r: int, buf: str, i: int) -> int:
        if not 0 <= i < size[r].get(buf, 0):
            raise Wrong(f"rank {r} {buf}[{i}] out of range")
        return program.scratch[r][i] if buf == "scratch" else i % k

    mem: list[dict[tuple[str, int], tuple[int, int]]] = []
    for r in range(n):
        m = {("input", i): (cls[c], value[c]) for i, c in enumerate(coll.inputs[r])}
        for j, a in enumerate(coll.aliases[r]):
            if a is not None and not in_place:
                m[("output", j)] = m[("input", a)]
        mem.append(m)
    alias = overlay(coll) if in_place else [{} for _ in range(n)]

    def at(r: int, buf: str, i: int) -> tuple[str, int]:
        if buf == "output" and i in alias[r]:
            return ("input", alias[r][i])
        return (buf, i)

    def read(r: int, buf: str, i: int, count: int) -> list[tuple[int, int]]:
        out = []
        for j in range(count):
            slot_class(r, buf, i + j)
            v = mem[r].get(at(r, buf, i + j))
            if v is None:
                raise Wrong(f"rank {r} reads empty {buf}[{i + j}]")
            out.append(v)
        return out

    def write(r: int, buf: str, i: int, vals: list[tuple[int, int]]) -> None:
        for j, v in enumerate(vals):
            if slot_class(r, buf, i + j) != v[0]:
                raise Wrong(f"rank {r} {buf}[{i + j}]: piece of another size")
            mem[r][at(r, buf, i + j)] = v

    # matching: the k-th send (list order) of (a, b, channel) with the k-th receive
    partner: dict[tuple[int, int], tuple[int, int]] = {}
    sends: dict[tuple, list[int]] = {}
    recvs: dict[tuple, list[int]] = {}
    for r, ops in enumerate(ranks):
        for i, op in enumerate(ops):
            if op.kind == "send":
                if not 0 <= op.peer < n or op.peer == r:
                    raise Wrong(f"rank {r} sends to {op.peer}")
                if topo.flat_link(r, op.peer) is None:
                    raise Wrong(f"no link {r} -> {op.peer}")
                sends.setdefault((r, op.peer, op.channel), []).append(i)
            elif op.kind == "recv":
                recvs.setdefault((op.peer, r, op.channel), []).append(i)
    # switch instances (switch, slot, step of the pushes): how many pushes each will have
    expected: dict[tuple[int, int, int], int] = {}
    copies: set[tuple[int, int, int]] = set()
    for r, ops in enumerate(ranks):
        for i, op in enumerate(ops):
            if op.kind in ("push", "push-reduce", "pull"):
                if not (n <= op.peer < topo.n_vertices and topo.switches[op.peer - n].reduce) or op.slot < 0:
                    raise Wrong(f"rank {r} op {i}: switch {op.peer} slot {op.slot}")
                way = (op.peer, r) if op.kind == "pull" else (r, op.peer)
                if topo.switch_path(*way) is None:
                    raise Wrong(f"no link {way[0]} -> {way[1]}")
            if op.kind in ("push", "push-reduce"):
                for j in range(op.count):
                    inst = (op.peer, op.slot + j, op.step)
                    expected[inst] = expected.get(inst, 0) + 1
                    if op.kind == "push":
                        copies.add(inst)
    for inst in copies:
        if expected[inst] > 1:
            raise Wrong(f"a copy and another push into switch instance {inst}")
    landed: dict[tuple[int, int, int], int] = {}
    sums: dict[tuple[int, int, int], tuple[int, int]] = {}
    waiting: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for key in set(sends) | set(recvs):
        a, b, _ = key
        out, into = sends.get(key, []), recvs.get(key, [])
        if len(out) != len(into):
            raise Wrong(f"{len(out)} sends and {len(into)} receives on {key}")
        for s, t in zip(out, into):
            partner[(a, s)] = (b, t)
            partner[(b, t)] = (a, s)

    status = [[0] * len(ops) for ops in ranks]  # 0 waiting, 1 issued, 2 read/ready, 3 complete
    pending = [[len(set(op.deps)) for op in ops] for ops in ranks]
    dependants: list[dict[int, list[int]]] = [{} for _ in ranks]
    for r, ops in enumerate(ranks):
        for i, op in enumerate(ops):
            for d in set(op.deps):
                if not 0 <= d < len(ops):
                    raise Wrong(f"rank {r} op {i} depends on {d}")
                dependants[r].setdefault(d, []).append(i)
    nxt = [0] * n  # in order: the next op each rank may issue
    held: dict[tuple[int, int], list[tuple[int, int]]] = {}  # a send's values once read
    enabled: list[tuple] = []

    def issuable(r: int, i: int) -> bool:
        return status[r][i] == 0 and pending[r][i] == 0 and (not in_order or nxt[r] == i)

    for r, ops in enumerate(ranks):
        for i in range(len(ops)):
            if issuable(r, i):
                enabled.append(("issue", r, i))
    done = 0
    total = sum(len(ops) for ops in ranks)

    def complete(r: int, i: int) -> None:
        nonlocal done
        status[r][i] = 3
        done += 1
        for x in dependants[r].get(i, ()):
            pending[r][x] -= 1
            if issuable(r, x):
                enabled.append(("issue", r, x))

    def pull_instances(op: Op) -> list[tuple[int, int, int]]:
        return [(op.peer, op.slot + j, op.step - 1) for j in range(op.count)]

    def maybe_pull(r: int, i: int) -> None:
        """A pull issued: once every push of its instances has landed, it may deliver."""
        missing = [inst for inst in pull_instances(ranks[r][i]) if landed.get(inst, 0) < expected.get(inst, 0)]
        if any(not expected.get(inst) for inst in pull_instances(ranks[r][i])):
            raise Wrong(f"rank {r} op {i} pulls a switch slot nobody pushes into in the step before")
        if missing:
            for inst in missing:
                waiting.setdefault(inst, []).append((r, i))
        else:
            enabled.append(("pull", r, i))

    def maybe_deliver(r: int, i: int) -> None:
        p = partner.get((r, i))
        if p is None:
            return
        ops = ranks
        s, t = ((r, i), p) if ops[r][i].kind == "send" else (p, (r, i))
        if status[s[0]][s[1]] == 2 and status[t[0]][t[1]] == 1:
            enabled.append(("deliver", s, t))

    while enabled:
        j = rng.randrange(len(enabled))
        enabled[j], enabled[-1] = enabled[-1], enabled[j]
        ev = enabled.pop()
        if ev[0] == "issue":
            _, r, i = ev
            if status[r][i] != 0:
                continue
            status[r][i] = 1
            if in_order:
                nxt[r] = i + 1
                if i + 1 < len(ranks[r]) and issuable(r, i + 1):
                    enabled.append(("issue", r, i + 1))
            op = ranks[r][i]
            if op.kind == "recv":
                maybe_deliver(r, i)
            elif op.kind == "pull":
                maybe_pull(r, i)
            else:
                enabled.append(("read", r, i))
        elif ev[0] == "read":
            _, r, i = ev
            op = ranks[r][i]
            if op.kind == "send":
                held[(r, i)] = read(r, op.buf, op.index, op.count)
                status[r][i] = 2
                maybe_deliver(r, i)
            elif op.kind in ("push", "push-reduce"):
                held[(r, i)] = read(r, op.buf, op.index, op.count)
                status[r][i] = 2
                enabled.append(("land", r, i))
            else:
                src = read(r, op.src_buf, op.src_index, op.count)
                if op.kind == "reduce":
                    cur = read(r, op.buf, op.index, op.count)
                    src = [(a[0] if a[0] == b[0] else -1, a[1] + b[1]) for a, b in zip(cur, src)]
                held[(r, i)] = src
                status[r][i] = 2
                enabled.append(("write", r, i))
        elif ev[0] == "write":
            _, r, i = ev
            op = ranks[r][i]
            write(r, op.buf, op.index, held.pop((r, i)))
            complete(r, i)
        elif ev[0] == "land":  # a push's values reach the switch, which sums them
            _, r, i = ev
            op = ranks[r][i]
            for j, v in enumerate(held.pop((r, i))):
                inst = (op.peer, op.slot + j, op.step)
                cur = sums.get(inst)
                sums[inst] = v if cur is None else (cur[0] if cur[0] == v[0] else -1, cur[1] + v[1])
                landed[inst] = landed.get(inst, 0) + 1
                if landed[inst] == expected[inst]:
                    for x in waiting.pop(inst, ()):
                        if all(landed.get(u, 0) == expected[u] for u in pull_instances(ranks[x[0]][x[1]])):
                            enabled.append(("pull", *x))
            complete(r, i)
        elif ev[0] == "pull":
            _, r, i = ev
            op = ranks[r][i]
            write(r, op.buf, op.index, [sums[inst] for inst in pull_instances(op)])
            complete(r, i)
        else:
            _, s, t = ev
            vals = held.pop(s)
            op = ranks[t[0]][t[1]]
            if op.count != len(vals):
                raise Wrong(f"message of {len(vals)} slots into a receive of {op.count}")
            write(t[0], op.buf, op.index, vals)
            complete(*s)
            complete(*t)
    if done != total:
        raise Wrong("deadlock")
    for r, slots in enumerate(coll.outputs):
        for j in range(len(slots)):
            got = mem[r].get(at(r, "output", j))
            if got is None or got[1] != _expect(coll, value, r, j):
                raise Wrong(f"rank {r} output[{j}] wrong")


def program_ok(program: Program, ranks: list[list[Op]], orders: int = ORDERS, in_place: bool = False) -> str:
    """'' if every tried execution order is correct, else how one went wrong."""
    for seed in range(orders):
        try:
            run_program(program, ranks, seed, in_order=seed % 2 == 1, in_place=in_place)
        except Wrong as exc:
            return f"order {seed}: {exc}"
    return ""


def _shift(deps: tuple[int, ...], at: int, by: int) -> tuple[int, ...]:
    return tuple(d + by if d >= at else d for d in deps)


def program_mutants(program: Program) -> Iterator[Mutant]:
    n = program.n_ranks
    for r, ops in enumerate(program.ranks):
        ops = list(ops)
        for i, op in enumerate(ops):
            d = f"rank {r} op {i} ({op.describe()})"

            def put(new: list[Op], rank: int = r) -> list[list[Op]]:
                out = [list(x) for x in program.ranks]
                out[rank] = new
                return out

            # drop: dependants inherit its deps
            new = []
            for x, o in enumerate(ops):
                if x == i:
                    continue
                deps = set()
                for dd in o.deps:
                    if dd == i:
                        deps.update(op.deps)
                    else:
                        deps.add(dd)
                new.append(o._replace(deps=tuple(sorted(_shift(tuple(deps), i + 1, -1)))))
            yield Mutant("drop", f"drop {d}", put(new))
            new = [o._replace(deps=_shift(o.deps, i + 1, 1)) for o in ops]
            new.insert(i + 1, op)
            yield Mutant("duplicate", f"duplicate {d}", put(new))
            if op.kind in ("push", "push-reduce", "pull"):
                for delta in (1, -1):
                    if op.slot + delta >= 0:
                        yield Mutant("offby1-slot", f"slot{delta:+d} of {d}",
                                     put(ops[:i] + [op._replace(slot=op.slot + delta)] + ops[i + 1:]))
                if op.kind != "pull":
                    flip = "push-reduce" if op.kind == "push" else "push"
                    yield Mutant("flip-op", f"flip {d}", put(ops[:i] + [op._replace(kind=flip)] + ops[i + 1:]))
            if op.kind in ("send", "recv") and n > 2:
                peer = (op.peer + 1) % n
                if peer == r:
                    peer = (peer + 1) % n
                yield Mutant("peer", f"peer of {d}", put(ops[:i] + [op._replace(peer=peer)] + ops[i + 1:]))
            if i + 1 < len(ops) and i not in ops[i + 1].deps:
                a, b = ops[i], ops[i + 1]
                perm = {i: i + 1, i + 1: i}
                new = []
                for o in ops[:i] + [b, a] + ops[i + 2:]:
                    new.append(o._replace(deps=tuple(sorted(perm.get(x, x) for x in o.deps))))
                yield Mutant("reorder", f"swap {d} with op {i + 1}", put(new))
            for x in op.deps:
                yield Mutant("nodep", f"drop dep {x} of {d}",
                             put(ops[:i] + [op._replace(deps=tuple(y for y in op.deps if y != x))] + ops[i + 1:]))
            yield Mutant("swap-buffer", f"buffer of {d}",
                         put(ops[:i] + [op._replace(buf=BUFFERS[(BUFFERS.index(op.buf) + 1) % 3])] + ops[i + 1:]))
            if op.kind in ("copy", "reduce"):
                flip = "reduce" if op.kind == "copy" else "copy"
                yield Mutant("flip-op", f"flip {d}", put(ops[:i] + [op._replace(kind=flip)] + ops[i + 1:]))
                yield Mutant("swap-buffer", f"src buffer of {d}",
                             put(ops[:i] + [op._replace(src_buf=BUFFERS[(BUFFERS.index(op.src_buf) + 2) % 3])]
                                 + ops[i + 1:]))
            for delta in (1, -1):
                yield Mutant("offby1-index", f"index{delta:+d} of {d}",
                             put(ops[:i] + [op._replace(index=op.index + delta)] + ops[i + 1:]))
                yield Mutant("offby1-count", f"count{delta:+d} of {d}",
                             put(ops[:i] + [op._replace(count=op.count + delta)] + ops[i + 1:]))
                if op.kind in ("copy", "reduce"):
                    yield Mutant("offby1-src", f"src_index{delta:+d} of {d}",
                                 put(ops[:i] + [op._replace(src_index=op.src_index + delta)] + ops[i + 1:]))
                yield Mutant("step-shift", f"step{delta:+d} of {d}",
                             put(ops[:i] + [op._replace(step=op.step + delta)] + ops[i + 1:]))
    yield from alias_mutants(program)


def _slots(op: Op) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(reads, writes) of an op, as (buffer, index) under the names the op uses."""
    own = [(op.buf, op.index + j) for j in range(op.count)]
    if op.kind == "send":
        return own, []
    if op.kind == "recv":
        return [], own
    src = [(op.src_buf, op.src_index + j) for j in range(op.count)]
    return (src + own if op.kind == "reduce" else src), own


def alias_mutants(program: Program) -> Iterator[Mutant]:
    """``alias-nodep``: an op loses its dependency on an earlier op it conflicts with only
    because an in-place call overlays an output slot on an input slot (one reads or writes
    ``output[j]``, the other ``input[a]``, the same memory in place, at least one writes), and
    nothing else orders the two any more (the op keeps the earlier op's own dependencies): an
    unordered aliased read/write pair, which a runtime may run either way round."""
    over = overlay(program.collective)
    for r, ops in enumerate(program.ranks):
        alias = over[r]

        def mem(slot: tuple[str, int], alias: dict[int, int] = alias) -> tuple[str, int]:
            return ("input", alias[slot[1]]) if slot[0] == "output" and slot[1] in alias else slot

        access = [_slots(op) for op in ops]
        ancestors: list[int] = []
        for op in ops:
            mine = 0
            for d in op.deps:
                mine |= ancestors[d] | (1 << d)
            ancestors.append(mine)
        for i, op in enumerate(ops):
            for d in op.deps:
                (r1, w1), (r2, w2) = access[d], access[i]
                pairs = [(x, y) for xs, ys in ((w1, r2 + w2), (r1, w2)) for x in xs for y in ys]
                clash = next(((x, y) for x, y in pairs if x != y and mem(x) == mem(y)), None)
                if clash is None:
                    continue
                deps = tuple(sorted((set(op.deps) - {d}) | set(ops[d].deps)))
                reach = 0
                for e in deps:
                    reach |= ancestors[e] | (1 << e)
                if reach >> d & 1:
                    continue  # still ordered through another dependency
                new = [list(x) for x in program.ranks]
                new[r][i] = op._replace(deps=deps)
                (b1, x1), (b2, x2) = clash
                yield Mutant("alias-nodep", f"rank {r} op {i} ({op.describe()}) no longer waits for op {d} "
                             f"({ops[d].describe()}): {b1}[{x1}] and {b2}[{x2}] are one memory in place", new)


def rebuild(program: Program, ranks: list[list[Op]]) -> Program:
    return Program(program.name, program.collective, program.topology, ranks, program.scratch,
                   program.channels, program.solver, program.steps)


# ---------------------------------------------------------------------------- MSCCL XML
def run_xml(text: str, coll: Collective, topo: Topology | None, in_place: bool, seed: int) -> None:
    """One execution of an MSCCL XML file, read with ElementTree: every threadblock runs its steps
    in order, a step waits for the step before it and its ``depid``/``deps`` step to finish;
    a step reads (and a receiving step takes the oldest message of its connection) at its start
    event and writes (and a sending step queues its message) at its end event; connections
    ``(sender, receiver, chan)`` are FIFO and deep enough. File chunk c is slot c of ``coll``; out
    of place output and scratch start empty; in place an output slot is the input slot the
    runtimes overlay on it (``overlay``). Raises Wrong."""
    rng = random.Random(seed)
    value = _values(coll, seed)
    root = ET.fromstring(text)
    n = coll.n_ranks
    if int(root.get("ngpus")) != n:
        raise Wrong("ngpus changed")
    gpus = {int(g.get("id")): g for g in root.iter("gpu")}
    if sorted(gpus) != list(range(n)):
        raise Wrong("gpu ids")
    mem: list[dict[tuple[str, int], int]] = []
    alias = overlay(coll) if in_place else [{} for _ in range(n)]
    size = []
    for r in range(n):
        size.append({"i": len(coll.inputs[r]), "o": len(coll.outputs[r]), "s": int(gpus[r].get("s_chunks", "0"))})
        mem.append({("i", i): value[c] for i, c in enumerate(coll.inputs[r])})

    def key(r: int, b: str, i: int) -> tuple[str, int]:
        if b not in size[r] or not 0 <= i < size[r][b]:
            raise Wrong(f"gpu {r} {b}[{i}] out of range")
        if b == "o" and i in alias[r]:
            return ("i", alias[r][i])
        return (b, i)

    def read(r: int, b: str, off: int, cnt: int) -> list[int]:
        out = []
        for j in range(cnt):
            v = mem[r].get(key(r, b, off + j))
            if v is None:
                raise Wrong(f"gpu {r} reads empty {b}[{off + j}]")
            out.append(v)
        return out

    # threadblocks as (gpu, tb) -> dict(send, recv, chan, steps)
    tbs: dict[tuple[int, int], dict] = {}
    for r, g in gpus.items():
        for t in g.iter("tb"):
            steps = []
            for s in t.iter("step"):
                steps.append({a: (s.get(a) if a in ("type", "srcbuf", "dstbuf") else int(s.get(a)))
                              for a in ("type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps")})
            tbs[(r, int(t.get("id")))] = {"send": int(t.get("send")), "recv": int(t.get("recv")),
                                          "chan": int(t.get("chan")), "steps": steps}
    fifo: dict[tuple[int, int, int], deque] = {}
    pos = {t: 0 for t in tbs}  # next step to start
    busy: dict[tuple[int, int], dict] = {}  # tb -> what its running step will write
    finished: set[tuple[int, int, int]] = set()

    def can_start(t: tuple[int, int]) -> bool:
        if t in busy or pos[t] >= len(tbs[t]["steps"]):
            return False
        s = tbs[t]["steps"][pos[t]]
        if s["depid"] >= 0 and (t[0], s["depid"], s["deps"]) not in finished:
            return False
        if s["type"] in ("r", "rcs", "rrs", "rrc", "rrcs"):
            q = fifo.get((tbs[t]["recv"], t[0], tbs[t]["chan"]))
            return bool(q)
        return True

    by_gpu: dict[int, list[tuple[int, int]]] = {}
    for t in tbs:
        by_gpu.setdefault(t[0], []).append(t)
    startable = {t for t in tbs if can_start(t)}
    while True:
        events = [("start", t) for t in sorted(startable)] + [("end", t) for t in sorted(busy)]
        if not events:
            break
        ev, t = events[rng.randrange(len(events))]
        touched = {t[0]}  # gpus whose threadblocks may start or stop being able to start
        if ev == "end" and tbs[t]["steps"][pos[t]]["type"] in ("s", "rcs", "rrs", "rrcs"):
            touched.add(tbs[t]["send"])
        r = t[0]
        tb = tbs[t]
        s = tb["steps"][pos[t]]
        typ, cnt = s["type"], s["cnt"]
        if ev == "start":
            job: dict = {}
            if typ != "nop" and cnt < 1:
                raise Wrong("cnt < 1")
            got = None
            if typ in ("r", "rcs", "rrs", "rrc", "rrcs"):
                if tb["recv"] < 0:
                    raise Wrong("receive without a peer")
                got = fifo[(tb["recv"], r, tb["chan"])].popleft()
                if len(got) != cnt:
                    raise Wrong(f"message of {len(got)} chunks into a receive of {cnt}")
            if typ == "s":
                job["send"] = read(r, s["srcbuf"], s["srcoff"], cnt)
            elif typ == "r":
                job["write"] = got
            elif typ == "rcs":
                job["write"], job["send"] = got, got
            elif typ in ("rrc", "rrs", "rrcs"):
                v = [a + b for a, b in zip(read(r, s["srcbuf"], s["srcoff"], cnt), got)]
                if typ != "rrs":
                    job["write"] = v
                if typ != "rrc":
                    job["send"] = v
            elif typ == "cpy":
                job["write"] = read(r, s["srcbuf"], s["srcoff"], cnt)
            elif typ == "re":
                cur = read(r, s["dstbuf"], s["dstoff"], cnt)
                job["write"] = [a + b for a, b in zip(cur, read(r, s["srcbuf"], s["srcoff"], cnt))]
            elif typ != "nop":
                raise Wrong(f"type {typ}")
            busy[t] = job
        else:
            job = busy.pop(t)
            if "write" in job:
                for j, v in enumerate(job["write"]):
                    mem[r][key(r, s["dstbuf"], s["dstoff"] + j)] = v
            if "send" in job:
                peer = tb["send"]
                if not 0 <= peer < n or peer == r:
                    raise Wrong("send without a peer")
                if topo is not None and topo.flat_link(r, peer) is None:
                    raise Wrong(f"no link {r} -> {peer}")
                fifo.setdefault((r, peer, tb["chan"]), deque()).append(job["send"])
            finished.add((r, t[1], pos[t]))
            pos[t] += 1
        for g in touched:
            for u in by_gpu.get(g, ()):
                if can_start(u):
                    startable.add(u)
                else:
                    startable.discard(u)
    if any(pos[t] < len(tbs[t]["steps"]) for t in tbs):
        raise Wrong("deadlock")
    if any(fifo.values()):
        raise Wrong("messages never received")
    for r, slots in enumerate(coll.outputs):
        for j in range(len(slots)):
            if mem[r].get(key(r, "o", j)) != _expect(coll, value, r, j):
                raise Wrong(f"gpu {r} output[{j}] wrong")


def xml_ok(text: str, coll: Collective, topo: Topology | None, orders: int = ORDERS) -> str:
    """'' if every claimed call (out of place, in place) is correct in every tried order."""
    try:
        root = ET.fromstring(text)
        modes = [m for m, attr in ((False, "outofplace"), (True, "inplace")) if root.get(attr, "0") == "1"]
        for in_place in modes:
            for seed in range(orders):
                run_xml(text, coll, topo, in_place, seed)
    except Wrong as exc:
        return str(exc)
    except (ValueError, KeyError, TypeError, IndexError) as exc:  # a shape the runtime cannot read
        return f"unreadable: {exc!r}"
    return ""


def _dump(root: ET.Element) -> str:
    return ET.tostring(root, encoding="unicode")


def xml_mutants(text: str) -> Iterator[Mutant]:
    base = ET.fromstring(text)
    n = int(base.get("ngpus"))
    flips = {"r": "rrc", "rrc": "r", "cpy": "re", "re": "cpy", "rcs": "rrcs", "rrcs": "rcs", "s": "r",
             "rrs": "rcs"}
    letters = ("i", "o", "s")
    for gi, g in enumerate(base.findall("gpu")):
        for ti, t in enumerate(g.findall("tb")):
            where = f"gpu {g.get('id')} tb {t.get('id')}"
            for role in ("send", "recv"):
                if int(t.get(role)) >= 0 and n > 2:
                    root = copy.deepcopy(base)
                    tb = root.findall("gpu")[gi].findall("tb")[ti]
                    peer = (int(tb.get(role)) + 1) % n
                    if peer == int(g.get("id")):
                        peer = (peer + 1) % n
                    tb.set(role, str(peer))
                    yield Mutant("peer", f"{where} {role} peer", _dump(root))
            steps = t.findall("step")
            for si, s in enumerate(steps):
                w = f"{where} step {si} ({s.get('type')})"

                def edit(fn, gi: int = gi, ti: int = ti) -> str:
                    root = copy.deepcopy(base)
                    tb = root.findall("gpu")[gi].findall("tb")[ti]
                    fn(root.findall("gpu")[gi], tb, tb.findall("step"))
                    return _dump(root)

                def drop(gpu, tb, sts, si: int = si, ti: int = ti):
                    tb.remove(sts[si])
                    for x in sts[si + 1:]:
                        x.set("s", str(int(x.get("s")) - 1))
                    for other in gpu.iter("step"):  # waits on later steps of this tb follow them
                        if int(other.get("depid")) == ti and int(other.get("deps")) >= si:
                            d = int(other.get("deps"))
                            if d == si:
                                other.set("depid", "-1")
                                other.set("deps", "-1")
                            else:
                                other.set("deps", str(d - 1))

                yield Mutant("drop-step", f"drop {w}", edit(drop))
                if si + 1 < len(steps):
                    def swap(gpu, tb, sts, si: int = si, ti: int = ti):
                        a, b = sts[si], sts[si + 1]
                        tb.remove(a)
                        tb.insert(list(tb).index(b) + 1, a)
                        a.set("s", str(si + 1))
                        b.set("s", str(si))
                        for other in gpu.iter("step"):
                            if int(other.get("depid")) == ti and int(other.get("deps")) in (si, si + 1):
                                other.set("deps", str(2 * si + 1 - int(other.get("deps"))))

                    yield Mutant("reorder", f"swap {w} with the next", edit(swap))
                if s.get("type") == "nop":
                    continue
                typ = s.get("type")
                used = {"srcoff", "srcbuf"} if typ in ("s", "rrc", "rrs", "rrcs", "cpy", "re") else set()
                if typ in ("r", "rcs", "rrc", "rrcs", "cpy", "re"):
                    used |= {"dstoff", "dstbuf"}
                for attr in ("srcoff", "dstoff", "cnt"):
                    if attr != "cnt" and attr not in used:  # a field the step type ignores
                        continue
                    for delta in (1, -1):
                        yield Mutant(f"offby1-{attr}", f"{attr}{delta:+d} of {w}",
                                     edit(lambda gpu, tb, sts, a=attr, d=delta, si=si:
                                          sts[si].set(a, str(int(sts[si].get(a)) + d))))
                if s.get("type") in flips:
                    yield Mutant("flip-type", f"{s.get('type')} -> {flips[s.get('type')]} at {w}",
                                 edit(lambda gpu, tb, sts, si=si: sts[si].set("type", flips[sts[si].get("type")])))
                for attr in sorted(used & {"srcbuf", "dstbuf"}):
                    cur = s.get(attr)
                    new = letters[(letters.index(cur) + 1) % 3] if cur in letters else "i"
                    yield Mutant("swap-buffer", f"{attr} {cur} -> {new} at {w}",
                                 edit(lambda gpu, tb, sts, a=attr, v=new, si=si: sts[si].set(a, v)))
                if int(s.get("depid")) >= 0:
                    def nodep(gpu, tb, sts, si: int = si):
                        sts[si].set("depid", "-1")
                        sts[si].set("deps", "-1")

                    yield Mutant("nodep", f"remove the dependency of {w}", edit(nodep))


def xml_rejected(text: str, topo: Topology) -> bool:
    """What ``ccl import msccl`` does: read, interpret, verify every claimed call."""
    from backends.msccl import interpret, model
    from ccl.compiler.loader import verify_imported

    try:
        verify_imported(interpret.read_program(model.parse(text, "mutant.xml"), topo, path="mutant.xml"))
    except CclError:
        return True
    return False
