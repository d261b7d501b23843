"""MSCCL XML -> Program: what a file makes the GPUs do, as a Program the verifier, the
simulator and the torch executor take.

Semantics (the runtimes' execution model, as this reading takes it):

* A threadblock runs its steps in order. Receives, local copies and reductions block the
  threadblock until they finish; a send hands its data to the connection and the threadblock
  moves on (the connection's buffer absorbs it), so a send does not hold up the steps after it
  unless one of them overwrites what the send reads. Data moves into the receiver's connection
  buffer as soon as it is sent: a plain receive does not wait for the plain receives just before
  it in its threadblock, and the receive of a fused step (into staging) waits for nothing; what
  follows a receive in the threadblock waits for it. (The buffer is taken as deep enough.)
* A step with ``depid``/``deps`` waits until that step of another threadblock has finished; a
  ``nop`` only waits. Each threadblock owns the connections to its ``send`` and ``recv`` peers
  on its channel: the k-th send to a peer on a channel matches the peer's k-th receive from it.
* Step types: ``s`` sends src; ``r`` receives into dst; ``rcs`` receives into dst and sends it
  on; ``rrc`` stores dst = src + received; ``rrs`` sends src + received on without storing it;
  ``rrcs`` does both; ``cpy`` copies src to dst; ``re`` reduces src into dst (dst = dst + src).

Each step becomes one or more ops (a fused receive-reduce receives into a staging chunk of
scratch first), dependencies follow the rules above, and ops are placed at levels (the
Program's steps) so the result is well leveled; a dependency cycle or a send/receive order no
runtime can satisfy is reported as a deadlock naming gpu/tb/step. ``Imported.origin(rank, op)``
names the step an op came from, so verification errors point into the file.

Chunks: a file's chunk c is slot c of the collective cut in the file's chunks per rank
(``nchunksperloop``, divided by the number of gpus for allgather, reducescatter and alltoall).
In place, an input chunk that the runtime overlays on an output chunk is that output chunk (the
memory is the same; ``Collective.in_place_aliases``: an alltoall's input chunk j is its output
chunk j for every j, as RCCL passes one buffer); out of place, nothing is copied for the file:
output chunks start empty. Nothing orders two steps of different threadblocks but the file's
dependencies (and the connections' message order), so an in-place read and write of one chunk
in two threadblocks with no dependency between them is a race the verifier reports.
"""

from __future__ import annotations

import heapq
import re
from collections import defaultdict
from dataclasses import dataclass, replace

from ccl.core import limits
from ccl.core.collective import Collective, builtin
from ccl.core.errors import InputError, VerificationError
from ccl.core.program import COPY, RECV, REDUCE, SEND, Program
from ccl.core.topology import Topology

from .model import BUFFER_NAMES, Algo, Step, Threadblock, where

# coll attribute -> collective kind (both runtimes' spellings)
COLL_KINDS = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter",
              "reduce_scatter": "reducescatter", "alltoall": "alltoall", "broadcast": "broadcast",
              "reduce": "reduce", "gather": "gather", "scatter": "scatter"}
# Kinds whose nchunksperloop counts the chunks of all ranks' blocks together (the runtimes'
# size multiplier is ngpus for these; gather and scatter count one rank's part).
BLOCKED = ("allgather", "reducescatter", "alltoall")


@dataclass(frozen=True)
class Imported:
    """A file read as a Program. ``program``: what the runtime runs for the call the file is
    chosen for (out of place when the file allows it, else in place). ``in_place``: the in-place
    Program when the file claims in-place use (None otherwise). ``origins[r][i]``: (tb, step, line)
    of op i of rank r in ``program``."""

    algo: Algo
    path: str
    program: Program
    in_place: Program | None
    origins: tuple[tuple[tuple[int, int, int], ...], ...]
    in_place_origins: tuple[tuple[tuple[int, int, int], ...], ...] | None

    def origin(self, rank: int, op: int, *, in_place: bool = False) -> str:
        table = self.in_place_origins if in_place else self.origins
        if table is None or not 0 <= rank < len(table) or not 0 <= op < len(table[rank]):
            return ""
        tb, s, line = table[rank][op]
        return f"{self.path}:{line}: {where(rank, tb, s)}" if line else where(rank, tb, s)

    def explain(self, exc: VerificationError, *, in_place: bool = False) -> VerificationError:
        """The error with the file's gpu/tb/step of the op it names added."""
        if exc.rank is None:
            return exc
        m = re.search(r"\bop (\d+)", exc.message)
        if not m:
            return exc
        place = self.origin(exc.rank, int(m.group(1)), in_place=in_place)
        if not place:
            return exc
        return VerificationError(f"{place}: {exc.message}", rank=exc.rank, step=exc.step, buffer=exc.buffer,
                                 index=exc.index, transfer=exc.transfer, expected=exc.expected, found=exc.found)


def collective_of(algo: Algo, path: str) -> Collective:
    """The collective a file implements, from coll, ngpus and nchunksperloop (and, for rooted
    kinds, the gpu that reads its input (broadcast, scatter) or writes its output (reduce,
    gather))."""
    kind = COLL_KINDS.get(algo.coll.lower())
    if kind is None:
        raise InputError(f"{path}:{algo.line}: coll={algo.coll!r} is not a collective this tool can check "
                         f"(known: {', '.join(sorted(COLL_KINDS))})")
    n, c = algo.ngpus, algo.nchunksperloop
    if n < 1 or c < 1:
        raise InputError(f"{path}:{algo.line}: ngpus={n} and nchunksperloop={c} must be positive")
    if kind in BLOCKED:
        if c % n:
            raise InputError(f"{path}:{algo.line}: a {algo.coll} on {n} gpus needs nchunksperloop divisible by "
                             f"{n}, got {c}")
        k = c // n
    else:
        k = c
    root = None
    if kind in ("broadcast", "scatter", "reduce", "gather"):
        root = _root(algo, kind, path)
    coll = builtin(kind, n, root).chunk_up(k)
    return coll


def _root(algo: Algo, kind: str, path: str) -> int:
    explicit = dict(algo.extra).get("root")
    if explicit is not None:
        try:
            return int(explicit)
        except ValueError:
            raise InputError(f"{path}:{algo.line}: root={explicit!r} is not an integer") from None
    reads_input = kind in ("broadcast", "scatter")
    found = set()
    for g in algo.gpus:
        for tb in g.tbs:
            for s in tb.steps:
                if s.type == "nop":
                    continue
                if reads_input and s.srcbuf == "i" and s.type in ("s", "cpy", "re", "rrc", "rrs", "rrcs"):
                    found.add(g.id)
                if not reads_input and s.dstbuf == "o" and s.type in ("r", "rcs", "rrc", "rrcs", "cpy", "re"):
                    found.add(g.id)
    if len(found) == 1:
        return found.pop()
    what = "reads its input" if reads_input else "writes its output"
    raise InputError(f"{path}:{algo.line}: cannot tell the root of this {kind}: "
                     f"{'no gpu' if not found else 'gpus ' + ', '.join(map(str, sorted(found)))} {what} "
                     "(add a root attribute to <algo>)")


def check_structure(algo: Algo, path: str) -> None:
    """What interpreting needs: gpu ids 0..ngpus-1, tb ids and step indices contiguous from 0,
    peers other gpus, channels in range, one threadblock per connection, dependencies naming
    an existing step. InputError names gpu/tb/step and the line."""
    n = algo.ngpus
    ids = [g.id for g in algo.gpus]
    if sorted(ids) != list(range(n)):
        raise InputError(f"{path}:{algo.line}: ngpus={n} but the <gpu> ids are {sorted(ids)[:12]}"
                         f"{'...' if len(ids) > 12 else ''} (expected 0..{n - 1}, each once)")
    for g in algo.gpus:
        tids = [tb.id for tb in g.tbs]
        for pos, tb in enumerate(g.tbs):
            if tb.id != pos:
                raise InputError(f"{path}:{tb.line}: {where(g.id, tb.id)}: threadblock ids must run 0, 1, 2, ... "
                                 f"in order (found {tb.id} at position {pos})")
        owner: dict[tuple[str, int, int], int] = {}
        for tb in g.tbs:
            ctx = where(g.id, tb.id)
            if not 0 <= tb.chan < algo.nchannels:
                raise InputError(f"{path}:{tb.line}: {ctx}: chan={tb.chan} is not in 0..{algo.nchannels - 1} "
                                 f"(nchannels={algo.nchannels})")
            for role, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer == -1:
                    continue
                if not 0 <= peer < n or peer == g.id:
                    raise InputError(f"{path}:{tb.line}: {ctx}: {role}={peer} is not another gpu in 0..{n - 1}")
                key = (role, peer, tb.chan)
                if key in owner:
                    raise InputError(f"{path}:{tb.line}: {ctx}: threadblocks {owner[key]} and {tb.id} both "
                                     f"{role} {'to' if role == 'send' else 'from'} gpu {peer} on channel "
                                     f"{tb.chan} (one threadblock owns a connection)")
                owner[key] = tb.id
            for pos, s in enumerate(tb.steps):
                sctx = where(g.id, tb.id, s.s)
                if s.s != pos:
                    raise InputError(f"{path}:{s.line}: {sctx}: step indices must run 0, 1, 2, ... in order "
                                     f"(found {s.s} at position {pos})")
                if s.sends and tb.send == -1:
                    raise InputError(f"{path}:{s.line}: {sctx}: a {s.type!r} step sends but the threadblock has "
                                     "no send peer (send=-1)")
                if s.receives and tb.recv == -1:
                    raise InputError(f"{path}:{s.line}: {sctx}: a {s.type!r} step receives but the threadblock "
                                     "has no recv peer (recv=-1)")
                if s.type != "nop" and s.cnt < 1:
                    raise InputError(f"{path}:{s.line}: {sctx}: cnt={s.cnt} (a {s.type!r} step moves at least "
                                     "one chunk)")
                if s.depid == -1 and s.deps == -1:
                    continue
                if not 0 <= s.depid < len(tids) or s.depid == tb.id and s.deps >= pos:
                    if s.depid == tb.id:
                        raise InputError(f"{path}:{s.line}: {sctx}: depends on step {s.deps} of its own "
                                         "threadblock, which runs after it")
                    raise InputError(f"{path}:{s.line}: {sctx}: depid={s.depid} is not a threadblock of gpu "
                                     f"{g.id} (0..{len(tids) - 1})")
                target = g.tbs[s.depid]
                if not 0 <= s.deps < len(target.steps):
                    raise InputError(f"{path}:{s.line}: {sctx}: deps={s.deps} is not a step of tb {s.depid} "
                                     f"(it has {len(target.steps)} steps)")


# ---------------------------------------------------------------------- expansion
class _Op:
    """An op under construction: fields of ccl.core.program.Op, deps as global ids."""

    __slots__ = ("kind", "buf", "index", "count", "peer", "src_buf", "src_index", "channel", "deps", "origin",
                 "rank", "level", "tag", "pos")

    def __init__(self, rank: int, kind: str, buf: str, index: int, count: int, peer: int, src_buf: str,
                 src_index: int, channel: int, origin: tuple[int, int, int]) -> None:
        self.rank, self.kind, self.buf, self.index, self.count = rank, kind, buf, index, count
        self.peer, self.src_buf, self.src_index, self.channel = peer, src_buf, src_index, channel
        self.deps: set[int] = set()
        self.origin = origin
        self.level = 0
        self.tag = -1
        self.pos = 0

    def reads(self) -> set[tuple[str, int]]:
        if self.kind == SEND:
            return {(self.buf, self.index + j) for j in range(self.count)}
        if self.kind in (COPY, REDUCE):
            return {(self.src_buf, self.src_index + j) for j in range(self.count)}
        return set()

    def writes(self) -> set[tuple[str, int]]:
        if self.kind == SEND:
            return set()
        return {(self.buf, self.index + j) for j in range(self.count)}


class _Builder:
    def __init__(self, algo: Algo, coll: Collective, path: str, in_place: bool) -> None:
        self.algo, self.coll, self.path, self.in_place = algo, coll, path, in_place
        self.ops: list[_Op] = []
        self.scratch = [g.s_chunks for g in sorted(algo.gpus, key=lambda g: g.id)]
        self.alias_of = []  # per rank: input slot -> output slot aliasing it (in place only)
        for r in range(coll.n_ranks):
            table = {}
            if in_place:
                for j, a in enumerate(coll.in_place_aliases[r]):
                    if a is not None:
                        table[a] = j
            self.alias_of.append(table)

    def slot(self, rank: int, letter: str, off: int, cnt: int, step: Step, tb: Threadblock, what: str
             ) -> tuple[str, int]:
        buf = BUFFER_NAMES[letter]
        size = {"input": len(self.coll.inputs[rank]), "output": len(self.coll.outputs[rank]),
                "scratch": self.scratch[rank]}[buf]
        if off < 0 or off + cnt > size:
            raise InputError(f"{self.path}:{step.line}: {where(rank, tb.id, step.s)}: {what} {letter}[{off}"
                             f"{'' if cnt == 1 else '..' + str(off + cnt - 1)}] is outside gpu {rank}'s {size} "
                             f"{buf} chunks ({self.coll.kind} with {self.algo.nchunksperloop} chunks per loop on "
                             f"{self.algo.ngpus} gpus)")
        if buf == "input" and self.alias_of[rank]:
            first = self.alias_of[rank].get(off)
            if first is not None:
                if all(self.alias_of[rank].get(off + j) == first + j for j in range(cnt)):
                    return "output", first
                raise InputError(f"{self.path}:{step.line}: {where(rank, tb.id, step.s)}: in place, {what} "
                                 f"i[{off}..{off + cnt - 1}] covers input chunks that are output chunks and "
                                 "chunks that are not (split the step)")
        return buf, off

    def staging(self, rank: int, cnt: int) -> int:
        at = self.scratch[rank]
        self.scratch[rank] += cnt
        return at

    def new(self, rank: int, kind: str, buf: str, index: int, count: int, *, peer: int = -1, src: tuple = ("", -1),
            channel: int = 0, origin: tuple[int, int, int]) -> int:
        op = _Op(rank, kind, buf, index, count, peer, src[0], src[1], channel, origin)
        self.ops.append(op)
        return len(self.ops) - 1

    def expand(self) -> tuple[list[list[int]], dict]:
        """Ops of every step; returns per-rank tb-ordered op ids and, per (rank, tb, step), the
        step's (first op, last op or None for nop)."""
        per_step: dict[tuple[int, int, int], tuple[list[int], Step]] = {}
        order: list[list[int]] = [[] for _ in range(self.coll.n_ranks)]
        for g in sorted(self.algo.gpus, key=lambda g: g.id):
            r = g.id
            for tb in g.tbs:
                for s in tb.steps:
                    ids = self._step_ops(r, tb, s)
                    per_step[(r, tb.id, s.s)] = (ids, s)
                    order[r].extend(ids)
        return order, per_step

    def _step_ops(self, r: int, tb: Threadblock, s: Step) -> list[int]:
        origin = (tb.id, s.s, s.line)
        chan = tb.chan
        if s.type == "nop":
            return []
        if s.type == "s":
            buf, idx = self.slot(r, s.srcbuf, s.srcoff, s.cnt, s, tb, "sends")
            return [self.new(r, SEND, buf, idx, s.cnt, peer=tb.send, channel=chan, origin=origin)]
        if s.type in ("cpy", "re"):
            sb, si = self.slot(r, s.srcbuf, s.srcoff, s.cnt, s, tb, "reads")
            db, di = self.slot(r, s.dstbuf, s.dstoff, s.cnt, s, tb, "writes")
            if sb == db and abs(si - di) < s.cnt:
                if s.type == "cpy" and si == di:
                    return []  # a copy onto itself (in place) moves nothing
                raise InputError(f"{self.path}:{s.line}: {where(r, tb.id, s.s)}: a {s.type!r} step reads and "
                                 "writes overlapping chunks")
            return [self.new(r, COPY if s.type == "cpy" else REDUCE, db, di, s.cnt, src=(sb, si), origin=origin)]
        ids = []
        if s.type in ("r", "rcs"):
            db, di = self.slot(r, s.dstbuf, s.dstoff, s.cnt, s, tb, "receives into")
            ids.append(self.new(r, RECV, db, di, s.cnt, peer=tb.recv, channel=chan, origin=origin))
            if s.type == "rcs":
                ids.append(self.new(r, SEND, db, di, s.cnt, peer=tb.send, channel=chan, origin=origin))
            return ids
        # rrc, rrs, rrcs: receive into staging, then reduce with src
        sb, si = self.slot(r, s.srcbuf, s.srcoff, s.cnt, s, tb, "reduces with")
        x = self.staging(r, s.cnt)
        ids.append(self.new(r, RECV, "scratch", x, s.cnt, peer=tb.recv, channel=chan, origin=origin))
        if s.type == "rrs":
            ids.append(self.new(r, REDUCE, "scratch", x, s.cnt, src=(sb, si), origin=origin))
            ids.append(self.new(r, SEND, "scratch", x, s.cnt, peer=tb.send, channel=chan, origin=origin))
            return ids
        db, di = self.slot(r, s.dstbuf, s.dstoff, s.cnt, s, tb, "writes")
        if (sb, si) == (db, di):
            ids.append(self.new(r, REDUCE, db, di, s.cnt, src=("scratch", x), origin=origin))
        else:
            ids.append(self.new(r, REDUCE, "scratch", x, s.cnt, src=(sb, si), origin=origin))
            ids.append(self.new(r, COPY, db, di, s.cnt, src=("scratch", x), origin=origin))
        if s.type == "rrcs":
            ids.append(self.new(r, SEND, db, di, s.cnt, peer=tb.send, channel=chan, origin=origin))
        return ids

    # ------------------------------------------------------------------ dependencies
    def link(self, per_step: dict) -> None:
        """Deps: within a step its ops chain; a step waits for the last blocking op before it in
        its threadblock, for sends before it that read what it writes, and for its depid step
        (that step's ops and the sends before it in its threadblock).

        Linear in the steps where the rules allow: what a step waits for is carried as the few
        ops that imply the rest (a nop passes on itself, not everything before it; a step after
        a run of receives waits for them, and the last of them waited for everything carried
        before), the sends and receives a step's completion implies are kept as prefixes of one
        list per threadblock, and the sends a write must wait for are found per chunk. The
        dependencies built are counted against ``ccl.core.limits.XML_DEPS`` as they are."""
        algo = self.algo
        budget = _Budget(self.path)
        done_memo: dict[tuple[int, int, int], frozenset[int]] = {}
        before: dict[tuple[int, int, int], frozenset | None] = {}  # what a step waits for (None: a plain receive)
        # what a step finishing implies beyond its own last op: the sends before it in its
        # threadblock have handed their data over, and the receives of a run of plain receives
        # before it are done (the threadblock ran them first); as (sends, how many, run, how many)
        extra: dict[tuple[int, int, int], tuple[list[int], int, list[int], int]] = {}
        receive_waits: dict[tuple[int, int, int], frozenset] = {}  # r, rcs: what the receive itself waits for

        for g in algo.gpus:
            for tb in g.tbs:
                base: frozenset = frozenset()  # what the next step waits for
                run: list[int] = []  # receives of the current run of plain receive steps
                sent: list[int] = []  # every send of the threadblock so far
                readers: dict[tuple[str, int], list[int]] = {}  # chunk -> sends of the tb that read it
                for s in tb.steps:
                    key = (g.id, tb.id, s.s)
                    ids, _ = per_step[key]
                    # a receive need not wait for the receives just before it (the connection
                    # delivers in order and its buffer fills while they run); anything else does
                    hazards: set[int] = set()
                    written = [(op.buf, op.index, op.count) for op in map(self.ops.__getitem__, ids) if op.kind != SEND]
                    for buf, index, count in written:
                        for x in range(index, index + count):
                            hazards.update(readers.get((buf, x), ()))
                    budget.spend(len(hazards))
                    # after a run of receives the last of them waited for all that was carried
                    carried = base if not run else frozenset()
                    waited = frozenset({("waited", *key)}) if s.depid != -1 else frozenset()
                    if s.type == "r":
                        before[key] = None  # waits for receive_waits only (see below)
                    else:
                        before[key] = carried | frozenset(run) | hazards
                        budget.spend(len(run))
                    if s.type in ("r", "rcs"):
                        receive_waits[key] = base | hazards
                    for i in ids:
                        op = self.ops[i]
                        if op.kind == SEND:
                            sent.append(i)
                            for x in range(op.index, op.index + op.count):
                                readers.setdefault((op.buf, x), []).append(i)
                    extra[key] = (sent, len(sent), run, len(run))
                    if not ids:  # a nop (or a copy onto itself, in place): its completion implies what it waited for
                        base, run = frozenset({("dep", *key)}), []
                    elif s.type in ("r", "rcs"):
                        run.append(ids[0])
                        base = receive_waits[key] | waited  # the next step starts after this one did
                    elif self.ops[ids[-1]].kind == SEND:
                        # the threadblock moved on once the send started: after what it waited for
                        nonsend = [i for i in ids if self.ops[i].kind != SEND]
                        base = (frozenset({nonsend[-1]}) if nonsend else before[key]) | waited
                        run = []
                    else:  # blocking: every later step waits for it, and through it for the sends it waited for
                        base, run = frozenset({ids[-1]}), []
                        for buf, index, count in written:
                            for x in range(index, index + count):
                                readers.pop((buf, x), None)

        def needs(key: tuple[int, int, int]) -> list[tuple[int, int, int]]:
            """The steps whose ``done`` the ``done`` of ``key`` is made of."""
            ids, s = per_step[key]
            if ids:
                return []
            out = []
            for x in before[key] or ():
                if isinstance(x, tuple):
                    what, r, t, k = x
                    step = per_step[(r, t, k)][1]
                    if what == "dep":
                        out.append((r, t, k))
                    elif step.depid != -1:
                        out.append((r, step.depid, step.deps))
            if s.depid != -1:
                out.append((key[0], s.depid, s.deps))
            return out

        def done(key: tuple[int, int, int]) -> frozenset[int]:
            """Ops whose completion means step ``key`` has finished (depth first without
            recursion: a chain of thousands of nops is fine)."""
            if key in done_memo:
                return done_memo[key]
            stack, visiting = [key], set()
            while stack:
                k = stack[-1]
                if k in done_memo:
                    stack.pop()
                    continue
                if k not in visiting:
                    visiting.add(k)
                    todo = [t for t in needs(k) if t not in done_memo]
                    for t in todo:
                        if t in visiting:
                            raise VerificationError(f"{self.path}: {where(*t)}: deadlock: a cycle of dependencies "
                                                    "between threadblocks passes through this step", rank=t[0])
                    if todo:
                        stack.extend(todo)
                        continue
                ids, s = per_step[k]
                if ids:
                    out = {ids[-1]}
                else:
                    out = resolve(before[k] or frozenset())
                    if s.depid != -1:
                        out |= done_memo[(k[0], s.depid, s.deps)]
                sends, n_sent, receives, n_run = extra[k]
                out.update(sends[:n_sent])
                out.update(receives[:n_run])
                budget.spend(len(out))
                done_memo[k] = frozenset(out)
                visiting.discard(k)
                stack.pop()
            return done_memo[key]

        def resolve(items: frozenset) -> set[int]:
            out: set[int] = set()
            for x in items:
                if isinstance(x, tuple):
                    what, r, t, s = x
                    if what == "dep":
                        out |= done((r, t, s))
                    else:  # "waited": what a send step of the threadblock waited for
                        step = per_step[(r, t, s)][1]
                        if step.depid != -1:
                            out |= done((r, step.depid, step.deps))
                else:
                    out.add(x)
            return out

        for key, (ids, s) in per_step.items():
            if not ids:
                continue
            waited_for = done((key[0], s.depid, s.deps)) if s.depid != -1 else frozenset()
            if s.type in ("r", "rcs"):
                # the receive waits for what the threadblock did before, not its receives
                self.ops[ids[0]].deps |= resolve(receive_waits[key]) | waited_for
                if s.type == "rcs":
                    self.ops[ids[1]].deps |= resolve(before[key]) | waited_for
            else:
                # a fused receive lands in its own staging chunks: the connection delivers into
                # its buffer before the threadblock reaches the step, so only the reduction waits
                first = self.ops[ids[1]] if s.type in ("rrc", "rrs", "rrcs") else self.ops[ids[0]]
                first.deps |= resolve(before[key]) | waited_for
            for a, b in zip(ids, ids[1:]):
                self.ops[b].deps.add(a)
            for i in ids:
                self.ops[i].deps.discard(i)
                budget.spend(len(self.ops[i].deps))


DEP_BYTES = 160  # memory a dependency takes while interpreting (set entries, the frozensets they pass through)


class _Budget:
    """Dependencies built while interpreting, counted against ``ccl.core.limits.XML_DEPS`` and
    the memory free (``DEP_BYTES`` each): InputError once over, so a file whose steps need more
    is refused before it takes more."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.used = 0
        self.limit = limits.XML_DEPS.value
        free = limits.memory_available()
        if free is not None:
            self.limit = min(self.limit, max(free // 2, 0) // DEP_BYTES)

    def spend(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            what = f"{self.path}: interpreting the file needs too many dependencies between its steps"
            if self.limit < limits.XML_DEPS.value:
                raise InputError(f"{what}: more than {self.limit}, all the memory free allows")
            raise InputError(limits.XML_DEPS.message(self.used, what, self.limit))



# ---------------------------------------------------------------------- levels and matching
def _match(ops: list[_Op], n: int, path: str, origin_text) -> list[tuple[int, int]]:
    """Pairs (send id, recv id): per (src, dst, channel), the k-th send with the k-th receive."""
    sends: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for i, op in enumerate(ops):  # ops of a connection are listed in threadblock order
        if op.kind == SEND:
            sends[(op.rank, op.peer, op.channel)].append(i)
        elif op.kind == RECV:
            recvs[(op.peer, op.rank, op.channel)].append(i)
    pairs = []
    for key in sorted(set(sends) | set(recvs)):
        a, b, c = key
        out, into = sends.get(key, []), recvs.get(key, [])
        for k in range(min(len(out), len(into))):
            s, t = ops[out[k]], ops[into[k]]
            if s.count != t.count:
                raise VerificationError(
                    f"{origin_text(out[k])}: message {k} from gpu {a} to gpu {b} on channel {c} sends {s.count} "
                    f"chunk(s) but {origin_text(into[k])} receives {t.count}", rank=b)
            pairs.append((out[k], into[k]))
        if len(out) != len(into):
            extra = out[len(into)] if len(out) > len(into) else into[len(out)]
            raise VerificationError(
                f"{origin_text(extra)}: gpu {a} sends {len(out)} message(s) to gpu {b} on channel {c} but gpu {b} "
                f"receives {len(into)} from gpu {a} there: this one is never matched", rank=ops[extra].rank)
    return pairs


def _levels(ops: list[_Op], pairs: list[tuple[int, int]], fifo: list[tuple[int, int]], path: str,
            origin_text) -> None:
    """Assign levels: a send or receive one above everything it depends on, a local op at the
    level of its deps, a send and its receive together, a connection's messages in order."""
    n_ops = len(ops)
    parent = list(range(n_ops))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s, t in pairs:
        parent[find(s)] = find(t)
    succ: dict[int, list[tuple[int, int]]] = defaultdict(list)
    indeg = [0] * n_ops
    for i, op in enumerate(ops):
        w = 1 if op.kind in (SEND, RECV) else 0
        for d in op.deps:
            a, b = find(d), find(i)
            if a == b:
                raise VerificationError(f"{origin_text(i)}: deadlock: this step waits for its own message",
                                        rank=op.rank)
            succ[a].append((b, w))
            indeg[b] += 1
    for a, b in fifo:
        x, y = find(a), find(b)
        if x != y:
            succ[x].append((y, 0))
            indeg[y] += 1
    roots = [i for i in range(n_ops) if find(i) == i]
    level = [0] * n_ops
    queue = [i for i in roots if indeg[i] == 0]
    seen = 0
    while queue:
        x = queue.pop()
        seen += 1
        for y, w in succ.get(x, ()):
            if level[x] + w > level[y]:
                level[y] = level[x] + w
            indeg[y] -= 1
            if indeg[y] == 0:
                queue.append(y)
    if seen != len(roots):
        stuck = next(i for i in range(n_ops) if indeg[find(i)] > 0)
        raise VerificationError(
            f"{origin_text(stuck)}: deadlock: the file's dependencies and its per-connection message order "
            "form a cycle through this step (every gpu on it waits for another)", rank=ops[stuck].rank)
    for i, op in enumerate(ops):
        op.level = level[find(i)]


def interpret(algo: Algo, topology: Topology, *, path: str = "<xml>", in_place: bool = False) -> tuple[Program, tuple]:
    """The Program of a file in one mode (``in_place``: aliased chunks are one memory), and
    per rank the (tb, step, line) of every op. Raises InputError for malformed files and
    VerificationError for files no runtime can complete (deadlock, unmatched messages)."""
    check_structure(algo, path)
    coll = collective_of(algo, path)
    if coll.n_ranks != topology.n_ranks:
        raise InputError(f"{path}: the file is for {coll.n_ranks} gpus but topology {topology.name!r} has "
                         f"{topology.n_ranks} ranks")
    if not in_place:
        none = tuple(tuple(None for _ in row) for row in coll.aliases)
        coll = replace(coll, aliases=none)
    b = _Builder(algo, coll, path, in_place)
    order, per_step = b.expand()
    b.link(per_step)
    ops = b.ops

    def origin_text(i: int) -> str:
        tb, s, line = ops[i].origin
        return f"{path}:{line}: {where(ops[i].rank, tb, s)}" if line else f"{path}: {where(ops[i].rank, tb, s)}"

    pairs = _match(ops, coll.n_ranks, path, origin_text)
    fifo = []
    by_conn: dict[tuple, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        if op.kind in (SEND, RECV):
            by_conn[(op.rank, op.kind, op.peer, op.channel)].append(i)
    for ids in by_conn.values():
        fifo.extend(zip(ids, ids[1:]))
    fifo_next: dict[int, list[int]] = defaultdict(list)
    for earlier, later in fifo:
        fifo_next[earlier].append(later)
    _levels(ops, pairs, fifo, path, origin_text)
    # tags: per ordered pair, messages numbered by (level, channel, order on the connection)
    per_pair: dict[tuple[int, int], list[tuple[int, int, int, int, int]]] = defaultdict(list)
    for k, (s, t) in enumerate(pairs):
        per_pair[(ops[s].rank, ops[t].rank)].append((ops[s].level, ops[s].channel, k, s, t))
    for items in per_pair.values():
        items.sort()
        for tag, (_l, _c, _k, s, t) in enumerate(items):
            ops[s].tag = ops[t].tag = tag
    # per rank: sort by (level, network first, a topological position that keeps tb order)
    ranks: list[list[int]] = [[] for _ in range(coll.n_ranks)]
    for r in range(coll.n_ranks):
        ids = order[r]
        topo = _topo_order(ops, ids, fifo_next)
        pos = {i: p for p, i in enumerate(topo)}
        ids = sorted(ids, key=lambda i: (ops[i].level, 0 if ops[i].kind in (SEND, RECV) else 1, pos[i]))
        ranks[r] = ids
    scratch = _scratch_classes(ops, ranks, pairs, coll, b.scratch, path, origin_text)
    rows = []
    origins = []
    for ids in ranks:
        local = {g: p for p, g in enumerate(ids)}
        row = []
        for g in ids:
            op = ops[g]
            deps = tuple(sorted(local[d] for d in op.deps))
            row.append((op.kind, op.level, op.buf, op.index, op.count, op.peer, op.src_buf, op.src_index,
                        op.tag, op.channel, deps))
        rows.append(row)
        origins.append(tuple(ops[g].origin for g in ids))
    steps = 1 + max((op.level for op in ops), default=-1)
    program = Program(name=algo.name, collective=coll, topology=topology, ops=rows, scratch=scratch,
                      channels=max(algo.nchannels, 1), solver="msccl-xml", steps=steps)
    return program, tuple(origins)


def _topo_order(ops: list[_Op], ids: list[int], fifo_next: dict[int, list[int]]) -> list[int]:
    """A topological order of one rank's ops over deps and each connection's message order,
    ties in threadblock order."""
    index = {g: p for p, g in enumerate(ids)}
    indeg = {g: 0 for g in ids}
    succ: dict[int, list[int]] = defaultdict(list)
    for g in ids:
        for d in ops[g].deps:
            succ[d].append(g)
            indeg[g] += 1
        for h in fifo_next.get(g, ()):
            succ[g].append(h)
            indeg[h] += 1
    heap = [index[g] for g in ids if indeg[g] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        g = ids[heapq.heappop(heap)]
        out.append(g)
        for h in succ.get(g, ()):
            indeg[h] -= 1
            if indeg[h] == 0:
                heapq.heappush(heap, index[h])
    return out


def _scratch_classes(ops, ranks, pairs, coll, sizes, path, origin_text) -> tuple[tuple[int, ...], ...]:
    """Size class of every scratch chunk: the class of what is first written into it, followed
    through copies and messages in level order (0 for chunks never written)."""
    k = coll.chunk_factor
    classes: list[dict[int, int]] = [{} for _ in range(coll.n_ranks)]
    partner = {t: s for s, t in pairs}

    def cls(rank: int, buf: str, idx: int) -> int | None:
        if buf == "scratch":
            return classes[rank].get(idx)
        return idx % k

    events = sorted((ops[g].level, 0 if ops[g].kind in (SEND, RECV) else 1, r, p, g)
                    for r, ids in enumerate(ranks) for p, g in enumerate(ids))
    for _l, _n, r, _p, g in events:
        op = ops[g]
        if op.buf != "scratch" or op.kind == SEND:
            continue
        if op.kind == RECV:
            s = ops[partner[g]] if g in partner else None
            src = None if s is None else [cls(s.rank, s.buf, s.index + j) for j in range(op.count)]
        else:
            src = [cls(r, op.src_buf, op.src_index + j) for j in range(op.count)]
        for j in range(op.count):
            c = None if src is None else src[j]
            if c is None:
                continue
            have = classes[r].get(op.index + j)
            if have is None:
                classes[r][op.index + j] = c
    return tuple(tuple(classes[r].get(x, 0) for x in range(sizes[r])) for r in range(coll.n_ranks))


def read_program(algo: Algo, topology: Topology, *, path: str = "<xml>") -> Imported:
    """Both Programs a file claims: out of place (if ``outofplace``) and in place (if
    ``inplace``); at least one must be claimed."""
    if not algo.inplace and not algo.outofplace:
        raise InputError(f"{path}:{algo.line}: inplace=0 and outofplace=0: the file claims no way to be called")
    main, origins = interpret(algo, topology, path=path, in_place=not algo.outofplace)
    ip = ip_origins = None
    if algo.inplace:
        if algo.outofplace:
            ip, ip_origins = interpret(algo, topology, path=path, in_place=True)
        else:
            ip, ip_origins = main, origins
    return Imported(algo, path, main, ip, origins, ip_origins)
