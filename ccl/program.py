"""Program: a schedule as per-rank ordered lists of point-to-point and local operations.

``ccl.lower(algorithm)`` turns an ``Algorithm`` (transfers in lock-step steps) into a
``Program``; runtimes (the torch executor, generated scripts) execute Programs without choosing
any order or dependency themselves. ``ccl.verify_program`` checks a Program independently.

Operations (``Op``) of one rank, by ``kind``:

* ``send``: send slots ``buf[index .. index+count)`` to rank ``peer``;
* ``recv``: receive ``count`` slots from rank ``peer`` into ``buf[index ..)``;
* ``copy``: local copy ``src_buf[src_index ..)`` -> ``buf[index ..)``;
* ``reduce``: local reduction ``buf[index ..) op= src_buf[src_index ..)``.

A receive-reduce is a ``recv`` into scratch slots (a staging area) followed by a ``reduce``
from there; a receive whose destination is still being read in the same step is staged the same
way and finished by a ``copy``. Fusion happens where it pays: consecutive slots moved together
become one multi-slot op (one message), and a receive lands directly in its destination
whenever that is safe. ``step`` is the Algorithm step an op comes from (-1: the prologue, local
copies made before anything else). ``deps`` are indices of earlier ops of the same rank that
must have *completed* before this op may start. ``tag`` numbers the messages between an ordered
pair of ranks (the k-th send from a to b has tag k, and so has its receive); ``channel``
spreads the messages of one pair and step over parallel connections.

Memory model. Every rank has an ``input``, an ``output`` and a ``scratch`` buffer, each a
sequence of slots. A base slot of the collective (chunk factor 1) holds U elements; a chunk
factor k splits it into k pieces of ``U // k`` elements, the first ``U % k`` pieces one
element longer (so a user tensor of any size works, down to 1 element: pieces may be empty).
Input and output slot ``i`` is piece ``i % k`` (its *size class*); every scratch slot has the
size class given in ``Program.scratch``. Buffers are packed: a run of consecutive slots is one
contiguous range of memory, so a multi-slot op is one message. Output slots that alias an input
slot start with its value (an out-of-place runtime copies them first; in place they are the same
memory, see ``verify_program(..., in_place=True)``). Programs produced by ``lower`` never write
the input buffer: a schedule that accumulates in its input works on scratch copies, so a
runtime never clobbers a caller's input.

Execution model (what a runtime must do, and all it may assume):

1. Each rank issues its ops in list order. An op is issued only after every op in its ``deps``
   has completed.
2. Sends and receives are non-blocking: issuing posts them. A matched send and receive complete
   some time after both are posted (rendezvous: no buffering is assumed). Local ops complete
   when issued.
3. The k-th send from a to b on a channel matches the k-th receive at b from a on that channel;
   its tag is the same on both sides, so tag-matching transports (gloo) agree with
   order-matching ones (NCCL).
4. A runtime may wait for more than the deps (for example post all the network ops of one step
   as one batch after waiting for the union of their deps), and may post the network ops of one
   step in one group; it keeps the list order of ops between one pair of ranks.

Deadlock freedom. A Program is *well-leveled* when (a) every rank's list is sorted by step, and
within a step its sends and receives come before its local ops; (b) the deps of a send or
receive of step s are ops of steps < s; (c) a send and the receive it matches have the same
step. ``lower`` produces well-leveled Programs and ``verify_program`` checks (a)-(c).

Theorem: under the execution model, every op of a well-leveled Program completes.

Proof, by induction on the step s (the prologue is step -1). Assume every op of every rank with
step < s completes. On each rank the ops before the first op of step s have steps < s, so the
rank reaches step s. Its sends and receives of step s come first (a); their deps are of steps
< s (b) and complete by the hypothesis, so the rank issues all of them; posting never blocks
(2), so it does not matter that a batching runtime waits for the union of their deps (4), or
posts them together. Every rank does the same, so every send of step s is posted and so is the
receive it matches, which has step s (c) and is the same message in FIFO order on its channel
(3): all earlier messages of the pair and channel have steps <= s and were posted before it on
both sides, and those of steps < s completed. Hence all sends and receives of step s complete,
in any interleaving. The local ops of step s then depend only on completed ops or on earlier
local ops, which complete when issued (2). So every op of step s completes; steps are finite.
The base case is the same argument with nothing assumed. QED. Matched pairs (c) and per-pair
counts are checked by the verifier, which also executes the Program under the model and reports
a deadlock with the ops every rank is blocked on, for Programs built by hand.

Race freedom (also checked by the verifier): an op's access to a slot is *ordered* after an
earlier conflicting access on the same rank (at least one a write) when the earlier op is known
to have completed when the later one is issued: it is a dep, a local op earlier in the list, or
completed before an op that is (deps of completed ops have completed). Cross-rank chains are not
used: a send may complete as soon as its data is handed to the transport.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from .algorithm import BUFFERS
from .collective import Collective
from .errors import CollectiveError
from .topology import Topology

SEND, RECV, COPY, REDUCE = "send", "recv", "copy", "reduce"
OP_KINDS = (SEND, RECV, COPY, REDUCE)
NETWORK = (SEND, RECV)
PROLOGUE = -1
OP_FIELDS = ("kind", "step", "buf", "index", "count", "peer", "src_buf", "src_index", "tag", "channel", "deps")


class Op(NamedTuple):
    """One operation of one rank. A NamedTuple: Programs reach millions of ops; ``Program``
    validates every field."""

    kind: str
    step: int
    buf: str  # send: the buffer read; recv, copy, reduce: the buffer written
    index: int
    count: int
    peer: int = -1  # send: destination rank; recv: source rank; -1 for local ops
    src_buf: str = ""  # copy, reduce: the buffer read
    src_index: int = -1
    tag: int = -1  # send, recv: message number between the two ranks
    channel: int = 0
    deps: tuple[int, ...] = ()

    @property
    def is_network(self) -> bool:
        return self.kind == SEND or self.kind == RECV

    def describe(self) -> str:
        """``step 3 recv output[4..5] from rank 2 (tag 7)``."""
        where = f"{self.buf}[{_span(self.index, self.count)}]"
        step = "prologue" if self.step == PROLOGUE else f"step {self.step}"
        if self.kind == SEND:
            return f"{step} send {where} to rank {self.peer} (tag {self.tag})"
        if self.kind == RECV:
            return f"{step} recv {where} from rank {self.peer} (tag {self.tag})"
        return f"{step} {self.kind} {self.src_buf}[{_span(self.src_index, self.count)}] -> {where}"


def _span(index: int, count: int) -> str:
    return str(index) if count == 1 else f"{index}..{index + count - 1}"


def piece_sizes(unit: int, chunk_factor: int) -> tuple[int, ...]:
    """Elements of each size class when a base slot of ``unit`` elements is cut in
    ``chunk_factor`` pieces: ``unit // k`` each, the first ``unit % k`` one longer."""
    q, rem = divmod(unit, chunk_factor)
    return tuple(q + 1 if p < rem else q for p in range(chunk_factor))


@dataclass(frozen=True)
class Program:
    """Per-rank op lists (``ranks[r]``), scratch size classes (``scratch[r][x]``), the
    collective and topology they implement, and where they come from."""

    name: str
    collective: Collective
    topology: Topology
    ranks: tuple[tuple[Op, ...], ...]
    scratch: tuple[tuple[int, ...], ...]
    channels: int = 1
    solver: str = ""
    steps: int = 0

    def __post_init__(self) -> None:
        n = self.collective.n_ranks
        where = f"program {self.name!r}"
        if self.topology.n_ranks != n:
            raise CollectiveError(f"{where}: collective has {n} ranks but topology {self.topology.name!r} "
                                  f"has {self.topology.n_ranks}")
        if len(self.ranks) != n or len(self.scratch) != n:
            raise CollectiveError(f"{where}: needs op lists and scratch classes for {n} ranks, got "
                                  f"{len(self.ranks)} and {len(self.scratch)}")
        if isinstance(self.channels, bool) or not isinstance(self.channels, int) or self.channels < 1:
            raise CollectiveError(f"{where}: channels must be a positive integer, got {self.channels!r}")
        k = self.collective.chunk_factor
        ranks = tuple(tuple(op if type(op) is Op else Op(*op) for op in ops) for ops in self.ranks)
        object.__setattr__(self, "ranks", ranks)
        scratch = tuple(tuple(row) for row in self.scratch)
        object.__setattr__(self, "scratch", scratch)
        for r in range(n):
            for x, cls in enumerate(scratch[r]):
                if isinstance(cls, bool) or not isinstance(cls, int) or not 0 <= cls < k:
                    raise CollectiveError(f"{where}: rank {r} scratch slot {x} has size class {cls!r}, "
                                          f"not in 0..{k - 1}")
            sizes = {"input": len(self.collective.inputs[r]), "output": len(self.collective.outputs[r]),
                     "scratch": len(scratch[r])}
            for i, op in enumerate(ranks[r]):
                problem = _op_problem(op, i, r, n, sizes, self.channels)
                if problem:
                    raise CollectiveError(f"{where}: rank {r} op {i} ({op!r}): {problem}")

    # ------------------------------------------------------------------ derived facts
    @property
    def n_ranks(self) -> int:
        return self.collective.n_ranks

    @property
    def chunk_factor(self) -> int:
        return self.collective.chunk_factor

    @cached_property
    def n_ops(self) -> int:
        return sum(len(ops) for ops in self.ranks)

    @cached_property
    def n_messages(self) -> int:
        return sum(1 for ops in self.ranks for op in ops if op.kind == SEND)

    def slot_class(self, rank: int, buf: str, index: int) -> int:
        """Size class of a slot (which piece of a base slot it holds)."""
        if buf == "scratch":
            return self.scratch[rank][index]
        return index % self.collective.chunk_factor

    def buffer_slots(self, rank: int, buf: str) -> int:
        if buf == "input":
            return len(self.collective.inputs[rank])
        if buf == "output":
            return len(self.collective.outputs[rank])
        return len(self.scratch[rank])

    @cached_property
    def alias_runs(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Per rank, runs ``(input slot, output slot, count)`` of output slots that start as a
        copy of (in place: are) input slots."""
        out = []
        for aliases in self.collective.aliases:
            runs: list[list[int]] = []
            for j, a in enumerate(aliases):
                if a is None:
                    continue
                if runs and runs[-1][0] + runs[-1][2] == a and runs[-1][1] + runs[-1][2] == j:
                    runs[-1][2] += 1
                else:
                    runs.append([a, j, 1])
            out.append(tuple((a, j, c) for a, j, c in runs))
        return tuple(out)

    @cached_property
    def reduced_runs(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Per rank, runs ``(output slot, count, terms)`` of output slots holding a sum of
        ``terms`` > 1 chunks (an average divides them by ``terms``)."""
        out = []
        for slots in self.collective.outputs:
            runs: list[list[int]] = []
            for j, need in enumerate(slots):
                terms = len(need)
                if terms < 2:
                    continue
                if runs and runs[-1][0] + runs[-1][1] == j and runs[-1][2] == terms:
                    runs[-1][1] += 1
                else:
                    runs.append([j, 1, terms])
            out.append(tuple((j, c, t) for j, c, t in runs))
        return tuple(out)

    def summary(self) -> dict[str, Any]:
        kinds = Counter(op.kind for ops in self.ranks for op in ops)
        return {
            "name": self.name,
            "collective": self.collective.kind,
            "ranks": self.n_ranks,
            "root": self.collective.root,
            "topology": self.topology.name,
            "solver": self.solver,
            "steps": self.steps,
            "chunks": self.chunk_factor,
            "channels": self.channels,
            "ops": self.n_ops,
            "messages": self.n_messages,
            "sends": kinds[SEND],
            "recvs": kinds[RECV],
            "copies": kinds[COPY],
            "reduces": kinds[REDUCE],
            "scratch_slots": [len(x) for x in self.scratch],
        }

    def to_text(self) -> str:
        """A readable listing: every rank's ops in order with their dependencies."""
        coll = self.collective
        head = (f"program {self.name}: {coll} on topology {self.topology.name}; {self.steps} steps, "
                f"{self.n_ops} ops, {self.n_messages} messages, {self.channels} channel(s)")
        lines = [head]
        for r, ops in enumerate(self.ranks):
            lines.append(f"rank {r}: {len(ops)} ops, {len(self.scratch[r])} scratch slots")
            width = len(str(max(len(ops) - 1, 0)))
            for i, op in enumerate(ops):
                deps = f"  after {', '.join(map(str, op.deps))}" if op.deps else ""
                chan = f" channel {op.channel}" if op.channel else ""
                lines.append(f"  {i:>{width}}  {op.describe()}{chan}{deps}")
        return "\n".join(lines)


def _op_problem(op: Op, i: int, rank: int, n: int, sizes: dict[str, int], channels: int) -> str:
    """Why an op is malformed, in words ("" if it is well formed)."""
    if len(op) != len(OP_FIELDS):
        return f"an op has the {len(OP_FIELDS)} fields {OP_FIELDS}"
    kind, step, buf, index, count, peer, src_buf, src_index, tag, channel, deps = op
    if kind not in OP_KINDS:
        return f"kind {kind!r} is not one of {OP_KINDS}"
    ints = (step, index, count, peer, src_index, tag, channel)
    if any(isinstance(x, bool) or not isinstance(x, int) for x in ints):
        return "step, index, count, peer, src_index, tag and channel must be integers"
    if step < PROLOGUE:
        return f"step {step} is below the prologue ({PROLOGUE})"
    if count < 1:
        return f"count {count} is not positive"
    if buf not in BUFFERS:
        return f"buffer {buf!r} is not one of {BUFFERS}"
    if not 0 <= index or index + count > sizes[buf]:
        return f"{buf}[{index}..{index + count - 1}] is outside the rank's {sizes[buf]} {buf} slots"
    if kind in NETWORK:
        if not 0 <= peer < n or peer == rank:
            return f"peer {peer} is not another rank in 0..{n - 1}"
        if tag < 0:
            return f"tag {tag} is negative"
        if not 0 <= channel < channels:
            return f"channel {channel} is not in 0..{channels - 1}"
        if src_buf or src_index != -1:
            return "a send or receive has no source slots (src_buf '' and src_index -1)"
    else:
        if peer != -1 or tag != -1:
            return "a local op has peer -1 and tag -1"
        if src_buf not in BUFFERS:
            return f"source buffer {src_buf!r} is not one of {BUFFERS}"
        if not 0 <= src_index or src_index + count > sizes[src_buf]:
            return (f"{src_buf}[{src_index}..{src_index + count - 1}] is outside the rank's "
                    f"{sizes[src_buf]} {src_buf} slots")
        if src_buf == buf and abs(src_index - index) < count:
            return "a local op reads and writes overlapping slots"
    if not isinstance(deps, tuple) or any(isinstance(d, bool) or not isinstance(d, int) for d in deps):
        return "deps must be a tuple of op indices"
    for d in deps:
        if not 0 <= d < i:
            return f"dependency {d} is not an earlier op of the rank"
    return ""
