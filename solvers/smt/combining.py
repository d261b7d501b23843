"""The combining encoding: reducing collectives directly (allreduce, custom sums).

The model. For every required sum (a *group*: the chunks it adds up) each rank keeps one
accumulator: the output slot that asks for the sum, else the input slot of the first of the
group's chunks the rank starts with, else a scratch slot. It starts holding that output slot's
aliased chunk, that input chunk, or nothing. Besides, a rank can read the group's chunks it starts
with from their input slots at any time (*raw* sources). In step t a transfer moves an
accumulator or a raw chunk, over a link or locally (no link), into an accumulator, as a copy
(overwrite) or a reduce (add).

State: ``has[g, v, k, t]`` - after t steps, rank v's accumulator of group g includes chunk k.
Constraints per group, rank and step:

* a copy is the only write into the accumulator in its step (the IR's copy-collision rule);
* a reduce needs a non-empty destination, and every sent accumulator is non-empty;
* nothing is counted twice: each chunk is in at most one of {the destination, the reduced
  sources};
* the next state is the copied source, or the old state plus the reduced sources;
* every rank that asks for the sum ends holding all of its chunks;
* capacity per link and shared limit, lanes x rounds(t), over all groups (as in routing);
* symmetry breaking between interchangeable groups (the C pieces of an allreduce buffer).

This model contains every schedule that keeps one partial sum per rank and group, in particular
reduce-then-broadcast trees, reducescatter + allgather compositions and the 2-step DGX-1
allreduce; it does not contain schedules that keep two different partial sums of one group on
one rank at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import symmetry
from .base import Encoding, Lit, lex_leq, neg
from .problems import CombiningSpec

Place = tuple[str, int]


@dataclass(frozen=True)
class Move:
    """A transfer of the model: ``src_k`` is None for an accumulator, else the raw chunk index."""

    step: int
    group: int
    src: int
    src_k: int | None
    dst: int
    op: str


class CombiningEncoding(Encoding):
    def __init__(
        self,
        spec: CombiningSpec,
        steps: int,
        max_extra: int | None,
        *,
        scratch: int | None = None,
        symmetry_breaking: bool = True,
        seed: int = 0,
    ) -> None:
        start = time.perf_counter()
        super().__init__(steps, max_extra, label=f"combining S={steps}", seed=seed)
        self.spec = spec
        net, coll, S = spec.network, spec.collective, steps
        n = net.n_ranks
        dist = net.dist
        self.places: list[list[Place | None]] = []  # [g][v] accumulator place (None: scratch)
        self.raw: list[list[list[tuple[int, int]]]] = []  # [g][v] -> [(k, input slot)]
        self.moves: dict[Move, str] = {}
        self.has: list[list[list[list[Lit]]]] = []  # [g][v][k][t]
        on_link: dict[tuple[int, int], list[str]] = {}
        in_slot = {(r, c): i for r, slots in enumerate(coll.inputs) for i, c in enumerate(slots)}
        self.feasible = True
        scratch_used: dict[int, list[str]] = {}
        for g, group in enumerate(spec.groups):
            m = len(group.chunks)
            places: list[Place | None] = []
            raws: list[list[tuple[int, int]]] = []
            init: list[set[int]] = []
            for v in range(n):
                held = [(k, in_slot[(v, c)]) for k, c in enumerate(group.chunks) if (v, c) in in_slot]
                start_with: set[int] = set()
                if v in group.owners:
                    j = next(j for j, need in enumerate(coll.outputs[v]) if tuple(sorted(need)) == group.chunks)
                    place: Place | None = ("output", j)
                    alias = coll.aliases[v][j]
                    if alias is not None:
                        start_with = {group.chunks.index(coll.inputs[v][alias])}
                elif held:
                    place = ("input", held[0][1])
                    start_with = {held[0][0]}
                    held = held[1:]
                else:
                    place = None
                places.append(place)
                raws.append(held)
                init.append(start_with)
            self.places.append(places)
            self.raw.append(raws)
            # Earliest step each chunk can be in each accumulator.
            reach = [[dist[group.holder[k]][v] for k in range(m)] for v in range(n)]
            to_owner = [min(dist[v][o] for o in group.owners) for v in range(n)]
            has: list[list[list[Lit]]] = []
            for v in range(n):
                row = []
                for k in range(m):
                    col: list[Lit] = [k in init[v]]
                    for t in range(1, S + 1):
                        col.append(self.var(f"h_{g}_{v}_{k}_{t}") if reach[v][k] <= t else False)
                    row.append(col)
                has.append(row)
            self.has.append(has)

            def nonempty(v: int, t: int, has: list = has) -> list[Lit]:
                return [col[t] for col in has[v] if col[t] is not False]

            for t in range(S):
                for v in range(n):
                    if to_owner[v] > S - 1 - t:
                        # Nothing written into v now can reach an owner in time: v only keeps.
                        for k in range(m):
                            self._keep(has[v][k][t], has[v][k][t + 1])
                        continue
                    writes: list[tuple[Move, str]] = []
                    for li, (u, w, _) in enumerate(net.links):
                        if w != v:
                            continue
                        src_live = nonempty(u, t)
                        if src_live and src_live != [False]:
                            for op in ("copy", "reduce"):
                                writes.append(self._move(Move(t, g, u, None, v, op), on_link, (li, t)))
                        for k, _ in raws[u]:
                            for op in ("copy", "reduce"):
                                writes.append(self._move(Move(t, g, u, k, v, op), on_link, (li, t)))
                    for k, _ in raws[v]:
                        for op in ("copy", "reduce"):
                            writes.append(self._move(Move(t, g, v, k, v, op), None, None))
                    self._step(g, group, has, v, t, writes, nonempty)
                    if places[v] is None and writes:
                        scratch_used.setdefault(v, []).extend(var for _, var in writes)
            for v in sorted(group.owners):
                for k in range(m):
                    lit = has[v][k][S]
                    if lit is False:
                        self.feasible = False
                    self.clause(lit)
        for (li, t), vars_ in sorted(on_link.items(), key=lambda kv: kv[0]):
            self.capacity(t, vars_, net.links[li][2])
        for _, members, lanes in net.limits:
            for t in range(S):
                self.capacity(t, [x for li in members for x in on_link.get((li, t), ())], lanes)
        self.freeze()
        if scratch is not None:
            for v in sorted(scratch_used):
                per_group: dict[int, str] = {}
                for move, var in self.moves.items():
                    if move.dst == v and self.places[move.group][v] is None:
                        used = per_group.setdefault(move.group, self.var(f"scratch_{move.group}_{v}"))
                        self.clause(neg(var), used)
                self.at_most(list(per_group.values()), scratch)
        if symmetry_breaking and self.feasible:
            self._break_symmetry()
        self.flush()
        self.build_seconds = time.perf_counter() - start

    # ------------------------------------------------------------------ pieces
    def _move(self, move: Move, on_link, key) -> tuple[Move, str]:
        src = "a" if move.src_k is None else f"r{move.src_k}"
        var = self.var(f"{move.op[0]}_{move.group}_{src}_{move.src}_{move.dst}_{move.step}")
        self.moves[move] = var
        if key is not None:
            on_link.setdefault(key, []).append(var)
        return move, var

    def _keep(self, old: Lit, new: Lit) -> None:
        if new is False or new == old or isinstance(new, bool):
            return
        self.equal(new, old)

    def _step(self, g: int, group, has, v: int, t: int, writes, nonempty) -> None:
        m = len(group.chunks)
        if not writes:
            for k in range(m):
                self._keep(has[v][k][t], has[v][k][t + 1])
            return
        copies = [var for mv, var in writes if mv.op == "copy"]
        every = [var for _, var in writes]
        for q in copies:
            for w in every:
                if w != q and (q < w or w not in copies):
                    self.clause(neg(q), neg(w))
        copying = self.define_or(f"cp_{g}_{v}_{t}", copies)
        dest_live = nonempty(v, t)
        for mv, var in writes:
            if mv.op == "reduce":
                self.clause(neg(var), *dest_live)
            if mv.src_k is None:
                self.clause(neg(var), *nonempty(mv.src, t))
        for k in range(m):
            new = has[v][k][t + 1]
            terms: list[Lit] = []  # ways chunk k gets into the accumulator this step
            counted: list[Lit] = [has[v][k][t]]  # at most one of these may hold k
            for mv, var in writes:
                if mv.src_k is None:
                    src = has[mv.src][k][t]
                    if src is False:
                        continue
                    both = self.define_and(f"y_{var}_{k}", [var, src])
                    terms.append(both)
                    if mv.op == "reduce":
                        counted.append(both)
                elif mv.src_k == k:
                    terms.append(var)
                    if mv.op == "reduce":
                        counted.append(var)
            old = has[v][k][t]
            if old is not False:
                terms.append(self.define_and(f"k_{g}_{v}_{k}_{t}", [old, neg(copying)]))
            self.at_most(counted, 1)
            if new is False:
                for x in terms:
                    self.clause(neg(x))
            else:
                self.equal(new, self.define_or(f"n_{g}_{v}_{k}_{t}", terms))

    def _break_symmetry(self) -> None:
        """Interchangeable groups (same holders and owners): has-vectors in lex order."""
        spec = self.spec
        signature = {g: (tuple(frozenset((h,)) for h in grp.holder), frozenset(grp.owners))
                     for g, grp in enumerate(spec.groups)}
        n, S = spec.network.n_ranks, self.steps
        for members in symmetry.interchangeable(signature):
            for a, b in zip(members, members[1:]):
                m = len(spec.groups[a].chunks)
                xs = [self.has[a][v][k][t] for t in range(1, S + 1) for v in range(n) for k in range(m)]
                ys = [self.has[b][v][k][t] for t in range(1, S + 1) for v in range(n) for k in range(m)]
                lex_leq(self, xs, ys, f"group_{a}_{b}")

    # ------------------------------------------------------------------ decoding
    def chosen(self) -> list[Move]:
        return sorted((mv for mv, var in self.moves.items() if self.true(var)),
                      key=lambda mv: (mv.step, mv.group, mv.dst, mv.src, -1 if mv.src_k is None else mv.src_k, mv.op))

