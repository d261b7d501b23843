"""Switch reductions emulated with point-to-point messages, for runtimes without a reducing switch.

torch.distributed (gloo, or NCCL's point-to-point calls) has no NVLink SHARP or InfiniBand SHARP
to push into, so ``emulate_switches(program)`` turns a Program's pushes and pulls into sends,
receives and local ops that deliver exactly what the switch would. Every switch instance
(switch, slot, step s of its pushes; ``ccl.core.program``) gets a *hub*, one of the ranks that
pull it (the lowest that also pushes into it, else the lowest): in step s every other pusher
sends its piece to the hub, which receives it into a scratch slot of its own and sums the pieces
(its own first, then by rank) into an accumulator; in step s + 1 the hub sends the accumulator
to every other puller and copies it into its own destination. An instance nobody pulls is
dropped (the switch's value would vanish unread). The values are the switch's: the same sum of
the same pieces (in a fixed order, so a floating-point sum may round differently from the
hardware's), which ``ccl.verify_program`` confirms on the result.

The result is a well-leveled Program (``ccl.core.program``): the hub's messages of step s go
after the step's other messages on both sides of every pair, in one order (by switch, slot,
sender), so the k-th send still matches the k-th receive; its local ops go first in the step's
local ops; the tags are numbered again. It costs more messages and memory than the switch (a
hub receives every other rank's piece): it is a way to check a schedule's values on any
machine, not a way to make it fast.
"""

from __future__ import annotations

from ccl.core.program import COPY, PULL, PUSH, PUSH_REDUCE, RECV, REDUCE, SEND, Op, Program

Unit = tuple[int, int, int]  # (switch, slot, step of the pushes)


class _New:
    """An op of the emulated Program being built: fields, deps as references (``_New`` ops or
    ("old", op index) of the same rank), and its place (step, section, sort key)."""

    __slots__ = ("fields", "deps", "step", "section", "key", "index")

    def __init__(self, fields: dict, deps: list, step: int, section: int, key: tuple = ()) -> None:
        self.fields = fields
        self.deps = deps
        self.step = step
        self.section = section  # 0 the step's messages, 1 the emulation's messages, 2 its local ops, 3 the rest
        self.key = key
        self.index = -1


def emulate_switches(program: Program) -> Program:
    """The Program with every push and pull replaced by point-to-point messages and local ops
    (see module docstring); a Program without switch ops is returned as it is."""
    if not program.n_switch_ops:
        return program
    return _Emulation(program).build()


class _Emulation:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.n = program.n_ranks
        self.ranks = program.ranks
        self.scratch = [list(row) for row in program.scratch]
        self.new: list[list[_New]] = [[] for _ in range(self.n)]
        self.done_by: dict[tuple[int, int], list[_New]] = {}  # old op -> the new ops that do its work
        self.order = 0

    # ------------------------------------------------------------------ the plan
    def build(self) -> Program:
        program = self.program
        pushes: dict[Unit, list[tuple[int, int, int]]] = {}
        pulls: dict[Unit, list[tuple[int, int, int]]] = {}
        for r, ops in enumerate(self.ranks):
            for i, op in enumerate(ops):
                if op.kind == PUSH or op.kind == PUSH_REDUCE:
                    for j in range(op.count):
                        pushes.setdefault((op.peer, op.slot + j, op.step), []).append((r, i, j))
                elif op.kind == PULL:
                    for j in range(op.count):
                        pulls.setdefault((op.peer, op.slot + j, op.step - 1), []).append((r, i, j))
                else:
                    self._keep(r, i, op)
        hub: dict[Unit, int] = {}
        for unit, found in pulls.items():
            pushers = {r for r, _, _ in pushes.get(unit, ())}
            pullers = sorted({r for r, _, _ in found})
            hub[unit] = next((r for r in pullers if r in pushers), pullers[0])
        acc: dict[Unit, int] = {}  # the hub's accumulator slot of each unit, consecutive along slots
        for unit in sorted(hub, key=lambda u: (u[2], u[0], u[1])):
            r, i, j = pushes[unit][0]
            op = self.ranks[r][i]
            acc[unit] = self._slot(hub[unit], program.slot_class(r, op.buf, op.index + j))
        writer: dict[Unit, _New] = {}  # the last op that wrote a unit's accumulator
        first = {unit: min(r for r, _, _ in found) for unit, found in pushes.items()}
        for r, i in sorted({(r, i) for found in pushes.values() for r, i, _ in found},
                           key=lambda x: (self.ranks[x[0]][x[1]].step, x[0], x[1])):
            self._push(r, i, hub, acc, first, writer)
        for r, i in sorted({(r, i) for found in pulls.values() for r, i, _ in found},
                           key=lambda x: (self.ranks[x[0]][x[1]].step, x[0], x[1])):
            self._pull(r, i, hub, acc, writer)
        return self._assemble()

    def _slot(self, rank: int, size_class: int) -> int:
        self.scratch[rank].append(size_class)
        return len(self.scratch[rank]) - 1

    def _add(self, rank: int, op: _New, old: tuple[int, int] | None = None) -> _New:
        self.new[rank].append(op)
        self.order += 1
        if old is not None:
            self.done_by.setdefault(old, []).append(op)
        return op

    def _keep(self, r: int, i: int, op: Op) -> None:
        fields = {name: getattr(op, name) for name in ("kind", "step", "buf", "index", "count", "peer", "src_buf",
                                                       "src_index", "tag", "channel")}
        section = 0 if op.is_network else 3
        self._add(r, _New(fields, [("old", d) for d in op.deps], op.step, section, (len(self.new[r]),)), (r, i))

    def _push(self, r: int, i: int, hub: dict, acc: dict, first: dict, writer: dict) -> None:
        """Push op i of rank r: its pieces for other hubs as messages (the hub receives them into
        scratch and sums them into the accumulator), its pieces for itself summed at once."""
        op = self.ranks[r][i]
        s = op.step
        units = [(op.peer, op.slot + j, s) for j in range(op.count)]
        for j0, j1, h in _runs([hub.get(u) for u in units], [acc.get(u, -1) for u in units]):
            if h is None:
                continue  # nobody pulls these slots: the switch's value would vanish
            deps = [("old", d) for d in op.deps]
            if h == r:
                source = (op.buf, op.index + j0)
                received = None
            else:
                cls = [self.program.slot_class(r, op.buf, op.index + j) for j in range(j0, j1)]
                stage = [self._slot(h, c) for c in cls]
                key = (s, 0, op.peer, op.slot + j0, r)
                self._add(r, _New(_message(SEND, s, op.buf, op.index + j0, j1 - j0, h), deps, s, 1, key), (r, i))
                received = self._add(h, _New(_message(RECV, s, "scratch", stage[0], j1 - j0, r), [], s, 1, key))
                source = ("scratch", stage[0])
                deps = [received]
            # the accumulate: a copy where this push is the unit's first, a reduction after
            for k0, k1, is_first in _flag_runs([first[units[j]] == r for j in range(j0, j1)]):
                mine = [units[j0 + k] for k in range(k0, k1)]
                before = list(dict.fromkeys(writer[u] for u in mine if u in writer))
                local = _New({"kind": COPY if is_first else REDUCE, "step": s, "buf": "scratch",
                              "index": acc[mine[0]], "count": k1 - k0, "peer": -1, "src_buf": source[0],
                              "src_index": source[1] + k0, "tag": -1, "channel": 0}, deps + before, s, 2,
                             (self.order,))
                self._add(h, local, (r, i) if h == r else None)
                for u in mine:
                    writer[u] = local

    def _pull(self, r: int, i: int, hub: dict, acc: dict, writer: dict) -> None:
        """Pull op i of rank r: from its hub as messages of the accumulator, or, on the hub, a
        copy of it."""
        op = self.ranks[r][i]
        s = op.step
        units = [(op.peer, op.slot + j, s - 1) for j in range(op.count)]
        for j0, j1, h in _runs([hub[u] for u in units], [acc[u] for u in units]):
            mine = units[j0:j1]
            ready = list(dict.fromkeys(writer[u] for u in mine))
            deps = [("old", d) for d in op.deps]
            if h == r:
                self._add(r, _New({"kind": COPY, "step": s, "buf": op.buf, "index": op.index + j0, "count": j1 - j0,
                                   "peer": -1, "src_buf": "scratch", "src_index": acc[mine[0]], "tag": -1,
                                   "channel": 0}, deps + ready, s, 2, (self.order,)), (r, i))
                continue
            key = (s, 1, op.peer, op.slot + j0, r)
            self._add(h, _New(_message(SEND, s, "scratch", acc[mine[0]], j1 - j0, r), ready, s, 1, key))
            self._add(r, _New(_message(RECV, s, op.buf, op.index + j0, j1 - j0, h), deps, s, 1, key), (r, i))

    # ------------------------------------------------------------------ the lists
    def _assemble(self) -> Program:
        lists: list[list[_New]] = []
        for r in range(self.n):
            ops = sorted(self.new[r], key=lambda x: (x.step, x.section, x.key))
            for k, op in enumerate(ops):
                op.index = k
            lists.append(ops)
        out: list[list[Op]] = []
        for r, ops in enumerate(lists):
            row = []
            for op in ops:
                deps = sorted(set(self._resolve(r, op.deps)))
                row.append(Op(**op.fields, deps=tuple(deps)))
            out.append(row)
        _retag(out)
        p = self.program
        return Program(p.name, p.collective, p.topology, out, tuple(tuple(x) for x in self.scratch), p.channels,
                       p.solver, p.steps)

    def _resolve(self, r: int, deps: list) -> list[int]:
        out: list[int] = []
        for d in deps:
            if isinstance(d, _New):
                out.append(d.index)
                continue
            done = self.done_by.get((r, d[1]))
            if done:
                out.extend(x.index for x in done)
            else:  # a push nobody pulls: wait for what it waited for
                out.extend(self._resolve(r, [("old", x) for x in self.ranks[r][d[1]].deps]))
        return out


def _message(kind: str, step: int, buf: str, index: int, count: int, peer: int) -> dict:
    return {"kind": kind, "step": step, "buf": buf, "index": index, "count": count, "peer": peer, "src_buf": "",
            "src_index": -1, "tag": 0, "channel": 0}


def _runs(hubs: list, accs: list) -> list[tuple[int, int, int | None]]:
    """Maximal runs [j0, j1) of one hub whose accumulator slots follow each other."""
    out = []
    j0 = 0
    for j in range(1, len(hubs) + 1):
        if j == len(hubs) or hubs[j] != hubs[j0] or accs[j] != accs[j - 1] + 1:
            out.append((j0, j, hubs[j0]))
            j0 = j
    return out


def _flag_runs(flags: list[bool]) -> list[tuple[int, int, bool]]:
    out = []
    k0 = 0
    for k in range(1, len(flags) + 1):
        if k == len(flags) or flags[k] != flags[k0]:
            out.append((k0, k, flags[k0]))
            k0 = k
    return out


def _retag(ranks: list[list[Op]]) -> None:
    """Tags numbered again: a pair's sends in list order, each receive taking the tag of the
    send it matches (the k-th of its pair and channel)."""
    sent: dict[tuple[int, int, int], list[int]] = {}
    count: dict[tuple[int, int], int] = {}
    for a, ops in enumerate(ranks):
        for k, op in enumerate(ops):
            if op.kind == SEND:
                tag = count.get((a, op.peer), 0)
                count[(a, op.peer)] = tag + 1
                ops[k] = op._replace(tag=tag)
                sent.setdefault((a, op.peer, op.channel), []).append(tag)
    taken: dict[tuple[int, int, int], int] = {}
    for b, ops in enumerate(ranks):
        for k, op in enumerate(ops):
            if op.kind == RECV:
                key = (op.peer, b, op.channel)
                at = taken.get(key, 0)
                taken[key] = at + 1
                tags = sent.get(key, [])
                ops[k] = op._replace(tag=tags[at] if at < len(tags) else op.tag)
