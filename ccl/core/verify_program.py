"""The Program verifier: executes a Program symbolically under its execution model.

Independent of the lowering: it re-derives everything from the op lists. Checked, in order:

1. **Level order** (the conditions of the deadlock-freedom theorem in ``ccl.core.program``): each
   rank's ops are sorted by step with sends, receives, pushes and pulls before local ops within
   a step, and every one of those depends only on ops of earlier steps.
2. **Links**: every message goes over a link of the flattened topology; every push and pull
   over the links between its rank and its switch (``Topology.switch_path``).
3. **Matching**: per ordered pair of ranks and channel, the k-th send matches the k-th receive:
   same tag, same step, same number of slots of the same size classes (so both sides agree on
   the message's bytes for every tensor size); tags are unique per pair. Per switch instance
   (switch, slot, step of its pushes): every slot a pull of step s reads was pushed in step
   s - 1, a ``push`` (copy) is its instance's only push, and the pushes and pulls of an instance
   move pieces of one size class.
4. **Races**: on every rank, two accesses to one slot (at least one a write; in place, an output
   slot and the input slot an in-place call overlays on it, ``Collective.in_place_aliases``, are
   one slot) are ordered: the later op depends on the earlier one, directly or through other
   deps (see ``ccl.core.program``). Nothing else orders them: not list order, not steps, not
   ops of other ranks, so an in-place read and a later write of one memory are unordered unless
   a dependency chain joins them.
5. **Execution**: the ops run under the model (issued in list order, which every runtime may
   do; non-blocking posts, rendezvous completion; a push lands at once, a pull completes once
   every push of its instances has landed and yields their sum). Ranks left with ops that can never complete are a deadlock, reported with the op
   every rank is blocked on. Values are multisets of input chunks as in ``ccl.verify``: no read
   of an empty slot, no reduce into one, every slot holds pieces of its own size class, and at
   the end every output slot holds exactly its required sum.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from . import validate
from .errors import VerificationError
from .program import PROLOGUE, PULL, PUSH, PUSH_REDUCE, RECV, REDUCE, SEND, Op, Program
from .verify import Chunks, check_outputs

Slot = tuple[str, int]


@dataclass(frozen=True)
class ProgramVerification:
    """What a successful Program verification established."""

    ops: int
    messages: int
    steps: int
    in_place: bool
    writes_input: bool


def verify_program(program: Program, *, in_place: bool = False) -> ProgramVerification:
    """Raise VerificationError naming the rank, op and slot of the first problem, or return
    what was checked. ``in_place=True``: output slots are the memory of the input slots the
    runtimes overlay on them (``Collective.in_place_aliases``: an alltoall's whole buffer)."""
    validate.instance(program, Program, "ccl.verify_program's program")
    validate.flag(in_place, "in_place")
    _check_levels(program)
    _check_links(program)
    _check_matching(program)
    instances = _switch_instances(program)
    for r in range(program.n_ranks):
        _check_races(program, r, in_place)
    writes_input = any(op.kind not in _READS_ONLY and op.buf == "input" for ops in program.ranks for op in ops)
    _Execution(program, in_place, instances).run()
    return ProgramVerification(
        ops=program.n_ops,
        messages=program.n_messages,
        steps=program.steps,
        in_place=in_place,
        writes_input=writes_input,
    )


def _fail(message: str, rank: int, op: Op | None = None, **kw) -> VerificationError:
    step = None if op is None or op.step == PROLOGUE else op.step
    return VerificationError(message, rank=rank, step=step, **kw)


def _check_levels(program: Program) -> None:
    for r, ops in enumerate(program.ranks):
        last = (PROLOGUE - 1, 0)
        for i, op in enumerate(ops):
            key = (op.step, 0 if op.is_network else 1)
            if key < last:
                raise _fail(f"rank {r} op {i} ({op.describe()}) is out of level order: ops must be sorted "
                            "by step, with sends and receives before local ops in a step (the order "
                            "that rules out deadlock)", r, op)
            last = key
            if op.is_network:
                for d in op.deps:
                    if ops[d].step >= op.step:
                        raise _fail(f"rank {r} op {i} ({op.describe()}) depends on op {d} "
                                    f"({ops[d].describe()}) of the same step: a runtime posting the step's "
                                    "messages together would deadlock", r, op)


_READS_ONLY = (SEND, PUSH, PUSH_REDUCE)  # ops that write nothing of their rank's


def _check_links(program: Program) -> None:
    topo = program.topology
    seen: dict[tuple[int, int], bool] = {}
    for r, ops in enumerate(program.ranks):
        for i, op in enumerate(ops):
            if op.kind == SEND:
                pair = (r, op.peer)
            elif op.kind == PULL:
                pair = (op.peer, r)
            elif op.kind in _READS_ONLY:
                pair = (r, op.peer)
            else:
                continue
            ok = seen.get(pair)
            if ok is None:
                ok = seen[pair] = (topo.flat_link(*pair) if op.kind == SEND else topo.switch_path(*pair)) is not None
            if not ok:
                if op.kind == SEND:
                    where = f"from rank {r} to rank {op.peer}"
                else:
                    name = topo.vertex_name(op.peer)
                    where = f"from switch {name!r} to rank {r}" if op.kind == PULL else f"from rank {r} to switch {name!r}"
                raise _fail(f"rank {r} op {i} ({op.describe()}): topology {topo.name!r} has no link {where}", r, op)


def _classes(program: Program, rank: int, op: Op) -> tuple[int, ...]:
    return tuple(program.slot_class(rank, op.buf, op.index + j) for j in range(op.count))


def _check_matching(program: Program) -> None:
    sends: dict[tuple[int, int, int], list[int]] = {}
    recvs: dict[tuple[int, int, int], list[int]] = {}
    for r, ops in enumerate(program.ranks):
        tags: dict[tuple[str, int], int] = {}
        for i, op in enumerate(ops):
            if op.kind == SEND:
                sends.setdefault((r, op.peer, op.channel), []).append(i)
            elif op.kind == RECV:
                recvs.setdefault((op.peer, r, op.channel), []).append(i)
            elif not op.is_switch:
                continue
            key = (op.kind, op.peer, op.tag)
            if key in tags:
                whom = f"switch {op.peer}" if op.is_switch else f"rank {op.peer}"
                raise _fail(f"rank {r} ops {tags[key]} and {i} both {op.kind} tag {op.tag} "
                            f"{'from' if op.kind in (RECV, PULL) else 'to'} {whom}: tags must be unique "
                            "per pair", r, op)
            tags[key] = i
    for key in sorted(set(sends) | set(recvs)):
        a, b, chan = key
        out, into = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(out), len(into))):
            if k >= len(into):
                op = program.ranks[a][out[k]]
                raise _fail(f"rank {a} op {out[k]} ({op.describe()}) has no matching receive on rank {b} "
                            f"(rank {b} receives {len(into)} message(s) from rank {a} on channel {chan}, "
                            f"rank {a} sends {len(out)})", a, op)
            if k >= len(out):
                op = program.ranks[b][into[k]]
                raise _fail(f"rank {b} op {into[k]} ({op.describe()}) has no matching send on rank {a} "
                            f"(rank {a} sends {len(out)} message(s) to rank {b} on channel {chan}, "
                            f"rank {b} receives {len(into)})", b, op)
            s, t = program.ranks[a][out[k]], program.ranks[b][into[k]]
            what = None
            if s.tag != t.tag:
                what = f"tags {s.tag} and {t.tag}"
            elif s.step != t.step:
                what = f"steps {s.step} and {t.step}"
            elif s.count != t.count:
                what = f"{s.count} and {t.count} slots"
            elif _classes(program, a, s) != _classes(program, b, t):
                what = "slots of different piece sizes"
            if what:
                raise _fail(f"message {k} from rank {a} to rank {b} on channel {chan}: the send (rank {a} op "
                            f"{out[k]}: {s.describe()}) and the receive (rank {b} op {into[k]}: {t.describe()}) "
                            f"disagree: {what}", b, t)


Instance = tuple[int, int, int]  # (switch, slot, step of its pushes)


def _switch_instances(program: Program) -> dict[Instance, list[tuple[int, int, int]]]:
    """Every switch instance's pushes ((rank, op, offset in the op)), checked against the pulls:
    each slot a pull of step s reads was pushed in step s - 1; a ``push`` (copy) is alone in
    its instance; pushes and pulls of an instance move pieces of one size class."""
    topo = program.topology
    pushes: dict[Instance, list[tuple[int, int, int]]] = {}
    pushed_in: dict[tuple[int, int], set[int]] = {}
    for r, ops in enumerate(program.ranks):
        for i, op in enumerate(ops):
            if op.kind == PUSH or op.kind == PUSH_REDUCE:
                for j in range(op.count):
                    pushes.setdefault((op.peer, op.slot + j, op.step), []).append((r, i, j))
                    pushed_in.setdefault((op.peer, op.slot + j), set()).add(op.step)
    classes: dict[Instance, tuple[int, int, int, int]] = {}  # instance -> (class, rank, op, slot)
    for key, found in pushes.items():
        sw, slot, step = key
        for r, i, j in found:
            op = program.ranks[r][i]
            cls = program.slot_class(r, op.buf, op.index + j)
            if key not in classes:
                classes[key] = (cls, r, i, j)
            elif classes[key][0] != cls:
                c0, r0, i0, _ = classes[key]
                raise _fail(f"rank {r} op {i} ({op.describe()}) pushes a piece of size class {cls} into switch "
                            f"{topo.vertex_name(sw)!r} slot {slot}, where rank {r0} op {i0} "
                            f"({program.ranks[r0][i0].describe()}) pushes one of class {c0} in the same step",
                            r, op, buffer="scratch", index=slot, switch=topo.vertex_name(sw))
        copies = [(r, i) for r, i, _ in found if program.ranks[r][i].kind == PUSH]
        if copies and len(found) > 1:
            r, i = copies[0]
            r2, i2 = next((a, b) for a, b, _ in found if (a, b) != (r, i))
            op = program.ranks[r][i]
            raise _fail(f"rank {r} op {i} ({op.describe()}) sets switch {topo.vertex_name(sw)!r} slot {slot} in step "
                        f"{step}, which rank {r2} op {i2} ({program.ranks[r2][i2].describe()}) also pushes into: a "
                        "push (copy) is its slot's one source, push-reduces add up", r, op, buffer="scratch",
                        index=slot, switch=topo.vertex_name(sw))
    for r, ops in enumerate(program.ranks):
        for i, op in enumerate(ops):
            if op.kind != PULL:
                continue
            for j in range(op.count):
                key = (op.peer, op.slot + j, op.step - 1)
                name = topo.vertex_name(op.peer)
                if key not in pushes:
                    steps = pushed_in.get(key[:2], set())
                    before = max((s for s in steps if s < op.step), default=None)
                    if op.step in steps:
                        why = f"it is pushed in step {op.step}, readable in step {op.step + 1}"
                    elif before is not None:
                        why = f"its last push before is in step {before}, and a switch keeps a value for the next " \
                              "step only"
                    else:
                        why = f"it is pushed only later, in step {min(steps)}" if steps else "nothing is pushed into it"
                    raise _fail(f"rank {r} op {i} ({op.describe()}) pulls switch {name!r} slot {op.slot + j}, which "
                                f"holds nothing in step {op.step}: {why}", r, op, buffer="scratch",
                                index=op.slot + j, expected=f"a push in step {op.step - 1}", found="nothing",
                                switch=name)
                cls = program.slot_class(r, op.buf, op.index + j)
                if classes[key][0] != cls:
                    c0, r0, i0, _ = classes[key]
                    raise _fail(f"rank {r} op {i} ({op.describe()}) pulls switch {name!r} slot {op.slot + j} into "
                                f"{op.buf}[{op.index + j}], of size class {cls}, but rank {r0} op {i0} pushed a piece "
                                f"of class {c0} there", r, op, buffer=op.buf, index=op.index + j, switch=name)
    return pushes


def _check_races(program: Program, rank: int, in_place: bool) -> None:
    """Every conflicting pair of accesses is ordered by the transitive deps. Each op's ancestors
    are a bitset (a Python int): op i's are the union of its deps' ancestors and the deps."""
    ops = program.ranks[rank]
    alias = {j: a for j, a in enumerate(program.collective.in_place_aliases[rank]) if a is not None} \
        if in_place else {}
    ancestors: list[int] = []
    last_writer: dict[Slot, int] = {}
    readers: dict[Slot, list[int]] = {}

    def mem(buf: str, idx: int) -> Slot:
        if buf == "output" and idx in alias:
            return ("input", alias[idx])
        return (buf, idx)

    overlaid = {a: j for j, a in alias.items()}

    def unordered(i: int, j: int, slot: Slot, what: str) -> VerificationError:
        op = ops[i]
        same = ""
        if slot[0] == "input" and slot[1] in overlaid:
            same = f" (in place, output[{overlaid[slot[1]]}] is input[{slot[1]}])"
        return _fail(f"rank {rank} op {i} ({op.describe()}) {what} {slot[0]}[{slot[1]}]{same} while op {j} "
                     f"({ops[j].describe()}) may still be using it: add a dependency on op {j}",
                     rank, op, buffer=slot[0], index=slot[1])

    for i, op in enumerate(ops):
        mine = 0
        for d in op.deps:
            mine |= ancestors[d] | (1 << d)
        ancestors.append(mine)
        if op.kind in _READS_ONLY:
            reads, writes = [mem(op.buf, op.index + j) for j in range(op.count)], []
        elif op.kind == RECV or op.kind == PULL:
            reads, writes = [], [mem(op.buf, op.index + j) for j in range(op.count)]
        else:
            writes = [mem(op.buf, op.index + j) for j in range(op.count)]
            reads = [mem(op.src_buf, op.src_index + j) for j in range(op.count)]
            if op.kind == REDUCE:
                reads = reads + writes
        for m in reads:
            w = last_writer.get(m)
            if w is not None and w != i and not mine >> w & 1:
                raise unordered(i, w, m, "reads")
        for m in writes:
            w = last_writer.get(m)
            if w is not None and w != i and not mine >> w & 1:
                raise unordered(i, w, m, "writes")
            for x in readers.get(m, ()):
                if x != i and not mine >> x & 1:
                    raise unordered(i, x, m, "writes")
        for m in reads:
            readers.setdefault(m, []).append(i)
        for m in writes:
            last_writer[m] = i
            readers[m] = []


class _Execution:
    """Runs the Program under the execution model on symbolic values."""

    def __init__(self, program: Program, in_place: bool, instances: dict | None = None) -> None:
        self.program = program
        # switch instances: pushes not landed yet, the value so far, the pulls waiting for it
        self.unlanded = {key: len(found) for key, found in (instances or {}).items()}
        self.held: dict[Instance, tuple] = {}
        self.pulling: dict[Instance, list[tuple[int, int]]] = {}
        self.pull_left: dict[tuple[int, int], int] = {}
        coll = program.collective
        self.chunks = Chunks(coll)
        self.alias = [
            {j: a for j, a in enumerate(coll.in_place_aliases[r]) if a is not None} if in_place else {}
            for r in range(coll.n_ranks)
        ]
        chunk_class: dict[int, int] = {}
        k = coll.chunk_factor
        for slots in coll.inputs:
            for i, c in enumerate(slots):
                chunk_class.setdefault(c, i % k)
        self.group_class = [chunk_class[cs[0]] for cs in self.chunks.members]
        self.chunk_class = chunk_class
        self.state: list[dict[Slot, tuple]] = []
        for r in range(coll.n_ranks):
            st: dict[Slot, tuple] = {}
            for i, c in enumerate(coll.inputs[r]):
                st[("input", i)] = self.chunks.value(c)
            if not in_place:
                for j, a in enumerate(coll.aliases[r]):
                    if a is not None:
                        st[("output", j)] = st[("input", a)]
            self.state.append(st)

    def mem(self, rank: int, buf: str, idx: int) -> Slot:
        if buf == "output":
            a = self.alias[rank].get(idx)
            if a is not None:
                return ("input", a)
        return (buf, idx)

    def value_class(self, value: tuple) -> int:
        if value[0] >= 0:
            return self.group_class[value[0]]
        return self.chunk_class[min(value[1])]

    def read(self, rank: int, i: int, op: Op, buf: str, idx: int) -> list:
        out = []
        st = self.state[rank]
        for j in range(op.count):
            v = st.get(self.mem(rank, buf, idx + j))
            if v is None:
                raise _fail(f"rank {rank} op {i} ({op.describe()}) reads {buf}[{idx + j}] before anything "
                            "was written there", rank, op, buffer=buf, index=idx + j, expected="a value",
                            found="nothing")
            out.append(v)
        return out

    def write(self, rank: int, i: int, op: Op, values: list, reduce: bool) -> None:
        st = self.state[rank]
        for j, v in enumerate(values):
            idx = op.index + j
            key = self.mem(rank, op.buf, idx)
            if reduce:
                cur = st.get(key)
                if cur is None:
                    raise _fail(f"rank {rank} op {i} ({op.describe()}) reduces into {op.buf}[{idx}], which "
                                "holds no value yet", rank, op, buffer=op.buf, index=idx,
                                expected="a value to reduce into", found="nothing")
                v = self.chunks.add(cur, v)
            want = self.program.slot_class(rank, op.buf, idx)
            got = self.value_class(v)
            if got != want:
                raise _fail(f"rank {rank} op {i} ({op.describe()}) puts a piece of size class {got} "
                            f"({self.chunks.describe(v)}) into {op.buf}[{idx}], whose size class is {want}",
                            rank, op, buffer=op.buf, index=idx)
            st[key] = v

    def run(self) -> None:
        program = self.program
        n = program.n_ranks
        ranks = program.ranks
        done = [[False] * len(ops) for ops in ranks]
        ptr = [0] * n
        waiting: dict[tuple[int, int], list[int]] = {}  # (rank, op) -> ranks blocked on it
        sendq: dict[tuple[int, int, int], deque] = {}
        recvq: dict[tuple[int, int, int], deque] = {}
        runnable = deque(range(n))
        queued = [True] * n

        def complete(r: int, i: int) -> None:
            done[r][i] = True
            for q in waiting.pop((r, i), ()):
                if not queued[q]:
                    queued[q] = True
                    runnable.append(q)

        while runnable:
            r = runnable.popleft()
            queued[r] = False
            ops = ranks[r]
            while ptr[r] < len(ops):
                i = ptr[r]
                op = ops[i]
                blocker = next((d for d in op.deps if not done[r][d]), None)
                if blocker is not None:
                    waiting.setdefault((r, blocker), []).append(r)
                    break
                ptr[r] += 1
                if op.kind == SEND:
                    key = (r, op.peer, op.channel)
                    sendq.setdefault(key, deque()).append((i, self.read(r, i, op, op.buf, op.index)))
                    self._match(key, sendq, recvq, complete)
                elif op.kind == RECV:
                    key = (op.peer, r, op.channel)
                    recvq.setdefault(key, deque()).append(i)
                    self._match(key, sendq, recvq, complete)
                elif op.kind == PUSH or op.kind == PUSH_REDUCE:
                    self._push(r, i, op, complete)
                elif op.kind == PULL:
                    self._pull(r, i, op, complete)
                else:
                    values = self.read(r, i, op, op.src_buf, op.src_index)
                    self.write(r, i, op, values, op.kind == REDUCE)
                    done[r][i] = True
        stuck = [(r, next(i for i, ok in enumerate(done[r]) if not ok)) for r in range(n) if not all(done[r])]
        if stuck:
            parts = []
            for r, i in stuck[:4]:
                at = ptr[r] if ptr[r] < len(ranks[r]) else None
                if at is not None and any(not done[r][d] for d in ranks[r][at].deps):
                    parts.append(f"rank {r} cannot issue op {at} ({ranks[r][at].describe()})")
                else:
                    parts.append(f"rank {r} op {i} ({ranks[r][i].describe()}) never completes")
            more = f" (and {len(stuck) - 4} more ranks)" if len(stuck) > 4 else ""
            r, i = stuck[0]
            raise _fail("deadlock: " + "; ".join(parts) + more, r, ranks[r][i])
        coll = program.collective
        check_outputs(coll, self.chunks, lambda r, m: [self.state[r].get(self.mem(r, "output", j)) for j in range(m)],
                       max(program.steps - 1, 0))

    def _push(self, r: int, i: int, op: Op, complete) -> None:
        """A push lands at once: its values join their instances; pulls waiting for the last
        push of an instance may complete."""
        values = self.read(r, i, op, op.buf, op.index)
        complete(r, i)
        for j, v in enumerate(values):
            key = (op.peer, op.slot + j, op.step)
            held = self.held.get(key)
            self.held[key] = v if held is None else self.chunks.add(held, v)
            self.unlanded[key] -= 1
            if not self.unlanded[key]:
                for b, k in self.pulling.pop(key, ()):
                    self.pull_left[(b, k)] -= 1
                    if not self.pull_left[(b, k)]:
                        self._land(b, k, complete)

    def _pull(self, r: int, i: int, op: Op, complete) -> None:
        """A pull completes once every push of its instances has landed."""
        left = 0
        for j in range(op.count):
            key = (op.peer, op.slot + j, op.step - 1)
            if self.unlanded[key]:
                self.pulling.setdefault(key, []).append((r, i))
                left += 1
        self.pull_left[(r, i)] = left
        if not left:
            self._land(r, i, complete)

    def _land(self, r: int, i: int, complete) -> None:
        op = self.program.ranks[r][i]
        values = [self.held[(op.peer, op.slot + j, op.step - 1)] for j in range(op.count)]
        self.write(r, i, op, values, False)
        complete(r, i)

    def _match(self, key, sendq, recvq, complete) -> None:
        out, into = sendq.get(key), recvq.get(key)
        while out and into:
            i, values = out.popleft()
            j = into.popleft()
            a, b, _ = key
            self.write(b, j, self.program.ranks[b][j], values, False)
            complete(a, i)
            complete(b, j)


__all__ = ["ProgramVerification", "verify_program"]
