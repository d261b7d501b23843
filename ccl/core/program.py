"""Program: a schedule as per-rank ordered lists of point-to-point and local operations.

``ccl.lower(algorithm)`` turns an ``Algorithm`` (transfers in lock-step steps) into a
``Program``; every backend (the simulator, the torch executor and generated scripts) executes
Programs without choosing any dependency itself. ``ccl.verify_program`` checks a Program
independently.

Operations (``Op``) of one rank, by ``kind``:

* ``send``: send slots ``buf[index .. index+count)`` to rank ``peer``;
* ``recv``: receive ``count`` slots from rank ``peer`` into ``buf[index ..)``;
* ``copy``: local copy ``src_buf[src_index ..)`` -> ``buf[index ..)``;
* ``reduce``: local reduction ``buf[index ..) op= src_buf[src_index ..)``;
* ``push``, ``push-reduce``: send slots ``buf[index .. index+count)`` into slots ``slot ..
  slot+count)`` of the reducing switch ``peer`` (a vertex id >= n_ranks): ``push-reduce`` adds
  to what the other pushes of the step put there, ``push`` sets it (the one source of a
  multicast);
* ``pull``: receive ``count`` slots from slots ``slot ..`` of the switch ``peer`` into
  ``buf[index ..)``: the value the pushes of the step before left there (their sum).

A receive-reduce is a ``recv`` into scratch slots (a staging area) followed by a ``reduce``
from there; a receive whose destination is still being read in the same step is staged the same
way and finished by a ``copy``. Fusion happens where it pays: consecutive slots moved together
become one multi-slot op (one message), and a receive lands directly in its destination
whenever that is safe. ``step`` is the Algorithm step an op comes from (-1: the prologue, local
copies made before anything else). ``deps`` are indices of earlier ops of the same rank that
must have *completed* before this op may start: all of them (see the execution model).
``tag`` numbers the messages between an ordered pair of ranks (the k-th send from a to b has
tag k, and so has its receive; a rank's pushes to a switch and its pulls from it are numbered
the same way); ``channel`` spreads the messages of one pair and step over parallel
connections; ``slot`` is the switch slot of a push or pull (-1 for the other ops).

Switch ops (in-network reduction, ``ccl.core.algorithm``). A switch stores nothing: the pushes
of step s into a slot and the pulls of step s + 1 from it are one *switch instance* (switch,
slot, s). A pull may complete only once every push of its instances has landed; a ``push``
(copy) is the only push of its instance; pushes and pulls of an instance move pieces of one
size class.

Memory model. Every rank has an ``input``, an ``output`` and a ``scratch`` buffer, each a
sequence of slots. A base slot of the collective (chunk factor 1) holds U elements; a chunk
factor k splits it into k pieces of ``U // k`` elements, the first ``U % k`` pieces one
element longer (so a user tensor of any size works, down to 1 element: pieces may be empty).
Input and output slot ``i`` is piece ``i % k`` (its *size class*); every scratch slot has the
size class given in ``Program.scratch``. Buffers are packed: a run of consecutive slots is one
contiguous range of memory, so a multi-slot op is one message. Output slots that alias an input
slot (``Collective.aliases``) start with its value (an out-of-place runtime copies them first);
in place, every output slot the runtimes overlay on an input slot (``Collective.in_place_aliases``,
an alltoall's whole buffer) is the same memory, see ``verify_program(..., in_place=True)``. Programs produced by ``lower`` never write
the input buffer: a schedule that accumulates in its input works on scratch copies, so a
runtime never clobbers a caller's input.

Execution model (what a runtime must do, and all it may assume):

1. An op may be issued once every op in its ``deps`` has completed, and not before. ``deps``
   name *every* op an op must wait for (local ops included), so a runtime may issue a rank's ops
   in any order that respects them: in list order (the torch executor), as soon as they are
   ready (dependency-driven runtimes, the simulator), or spread over several in-order queues
   (MSCCL threadblocks) that keep list order within each queue.
2. Sends and receives are non-blocking: issuing posts them. A matched send and receive complete
   some time after both are posted (rendezvous: no buffering is assumed). Local ops complete
   some time after they are issued, without waiting for anything.
3. The k-th send from a to b on a channel matches the k-th receive at b from a on that channel;
   its tag is the same on both sides, so tag-matching transports (gloo) agree with
   order-matching ones (NCCL). A runtime posts the messages of one pair and channel in list
   order.
5. Pushes and pulls are non-blocking too. A push completes some time after it is issued, when
   its data has landed in the switch, without waiting for anything (the switch takes it as it
   comes: NVLink SHARP and InfiniBand SHARP reduce in flight). A pull completes some time after
   it is issued *and* every push of its switch instances has landed. A pull waits for nothing
   on its own rank but its deps: which pushes it reads is fixed by (switch, slot, step). A
   runtime posts a rank's pushes to a switch on a channel in list order, and its pulls from it
   (as rule 3: a connection's queue).
4. A runtime may wait for more than the deps (for example post all the network ops of one step
   as one batch after waiting for the union of their deps, or issue in list order).

Deadlock freedom. A Program is *well-leveled* when (a) every rank's list is sorted by step, and
within a step its sends and receives come before its local ops; (b) the deps of a send or
receive of step s are ops of steps < s; (c) a send and the receive it matches have the same
step; (d) pushes and pulls count as sends and receives in (a) and (b), and a pull of step s
reads only instances pushed in step s - 1. ``lower`` produces well-leveled Programs and
``verify_program`` checks (a)-(d).

Theorem: under the execution model, every op of a well-leveled Program completes, whatever
order (1) and extra waiting (4) the runtime chooses, as long as it issues every op it may and
keeps list order within each of its queues.

Proof, by induction on the step s (the prologue is step -1). Assume every op of every rank with
step < s completes. The sends and receives of step s depend on ops of steps < s only (b), which
complete, so every one of them can be issued; an in-order queue reaches it, because the ops
before it in the queue have steps <= s (a), and those of step s before it are sends and
receives (a), which are issued without waiting on each other (b) and never block (2). A runtime
that batches a step's messages waits only for ops of steps < s (4, b). So every send and
receive of step s is posted, and each matches a receive or send of step s (c) that is the same
message in FIFO order on its channel (3): all earlier messages of the pair and channel have
steps <= s and are posted too. Hence all sends and receives of step s complete. The pushes
of step s are issued the same way (b) and complete unconditionally (5); the pulls of step s
are issued the same way and read instances pushed in step s - 1 (d), whose pushes have
completed by the induction hypothesis, so they complete (5). The local ops
of step s depend on ops of steps <= s that precede them in the list (deps point backwards), so
they complete in list order at the latest. So every op of step s completes; steps are finite.
The base case is the same argument with nothing assumed. QED. Matched pairs (c) and per-pair
counts are checked by the verifier, which also executes the Program under the model and reports
a deadlock with the ops every rank is blocked on, for Programs built by hand.

Storage. Programs reach millions of ops (a ring allreduce on 1,024 ranks has five million), so
a Program keeps them as columns (``OpTable``: one numpy array per field, ranks concatenated,
dependencies in CSR form) and ``Program.ranks`` builds the per-rank tuples of ``Op`` on first
use. Backends that scale (the simulator) read the columns; the rest read ``ranks``.

Race freedom (also checked by the verifier): two accesses of one rank to one slot (at least
one a write; in place, an output slot and the input slot overlaid on it are one slot) are *ordered*
when the later op depends on the earlier one, directly or through other deps. Nothing else
orders them: not list order (runtimes may reorder), and not ops of other ranks (a send may
complete as soon as its data is handed to the transport). So every result is the same in every
execution the model allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from . import limits, validate
from .algorithm import BUFFERS
from .collective import Collective
from .errors import CollectiveError
from .topology import Topology

if TYPE_CHECKING:  # numpy is imported where it is used: `import ccl` (which exports Program) stays cheap
    import numpy as np

SEND, RECV, COPY, REDUCE = "send", "recv", "copy", "reduce"
PUSH, PUSH_REDUCE, PULL = "push", "push-reduce", "pull"
OP_KINDS = (SEND, RECV, COPY, REDUCE, PUSH, PUSH_REDUCE, PULL)  # codes 0..6 in an OpTable
NETWORK = (SEND, RECV)
SWITCH_OPS = (PUSH, PUSH_REDUCE, PULL)  # ops between a rank and a reducing switch
LOCAL = (COPY, REDUCE)
PROLOGUE = -1
OP_FIELDS = ("kind", "step", "buf", "index", "count", "peer", "src_buf", "src_index", "tag", "channel", "deps",
             "slot")
PLAIN_OP_FIELDS = OP_FIELDS[:11]  # an op without a switch slot: the form of Programs without switch ops
KIND_CODE = {k: i for i, k in enumerate(OP_KINDS)}
BUFFER_CODE = {b: i for i, b in enumerate(BUFFERS)}  # "" (no source buffer) is -1


def _runs(table: tuple[tuple[int | None, ...], ...]) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Per rank, an alias table (output slot -> input slot or None) as runs (input slot, output
    slot, count) of consecutive slots."""
    out = []
    for aliases in table:
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


class Op(NamedTuple):
    """One operation of one rank (``Program.ranks`` builds them from the columns)."""

    kind: str
    step: int
    buf: str  # send, push: the buffer read; recv, pull, copy, reduce: the buffer written
    index: int
    count: int
    peer: int = -1  # send: destination rank; recv: source rank; push, pull: the switch; -1 for local ops
    src_buf: str = ""  # copy, reduce: the buffer read
    src_index: int = -1
    tag: int = -1  # send, recv: message number between the two ranks (push, pull: the rank and the switch)
    channel: int = 0
    deps: tuple[int, ...] = ()
    slot: int = -1  # push, pull: the first switch slot

    @property
    def is_network(self) -> bool:
        """A send, receive, push or pull: posted, completed by the transport (not a local op)."""
        return self.kind != COPY and self.kind != REDUCE

    @property
    def is_switch(self) -> bool:
        return self.kind in SWITCH_OPS

    def describe(self) -> str:
        """``step 3 recv output[4..5] from rank 2 (tag 7)``."""
        where = f"{self.buf}[{_span(self.index, self.count)}]"
        step = "prologue" if self.step == PROLOGUE else f"step {self.step}"
        if self.kind == SEND:
            return f"{step} send {where} to rank {self.peer} (tag {self.tag})"
        if self.kind == RECV:
            return f"{step} recv {where} from rank {self.peer} (tag {self.tag})"
        if self.kind == PULL:
            return f"{step} pull {where} from switch {self.peer} slot {_span(self.slot, self.count)}"
        if self.kind in SWITCH_OPS:
            return f"{step} {self.kind} {where} into switch {self.peer} slot {_span(self.slot, self.count)}"
        return f"{step} {self.kind} {self.src_buf}[{_span(self.src_index, self.count)}] -> {where}"


def _span(index: int, count: int) -> str:
    return str(index) if count == 1 else f"{index}..{index + count - 1}"


def piece_sizes(unit: int, chunk_factor: int) -> tuple[int, ...]:
    """Elements of each size class when a base slot of ``unit`` elements is cut in
    ``chunk_factor`` pieces: ``unit // k`` each, the first ``unit % k`` one longer."""
    q, rem = divmod(unit, chunk_factor)
    return tuple(q + 1 if p < rem else q for p in range(chunk_factor))


# Column names and dtypes of an OpTable (kinds and buffers as codes, see OP_KINDS and BUFFERS).
COLUMNS = (("kind", "int8"), ("step", "int32"), ("buf", "int8"), ("index", "int32"), ("count", "int32"),
           ("peer", "int32"), ("src_buf", "int8"), ("src_index", "int32"), ("tag", "int32"), ("channel", "int32"),
           ("slot", "int32"))
_INT32_MAX = 2**31 - 1


class OpTable:
    """Every rank's ops as columns: rank r's ops are rows ``rank_ptr[r] .. rank_ptr[r+1]-1``;
    op row i depends on the ops ``dep_idx[dep_ptr[i]:dep_ptr[i+1]]`` (indices within its rank's
    list, ascending). Arrays are read-only; build one with ``from_ops`` or from columns."""

    __slots__ = ("rank_ptr", "dep_ptr", "dep_idx", *(name for name, _ in COLUMNS))

    def __init__(self, rank_ptr: np.ndarray, dep_ptr: np.ndarray, dep_idx: np.ndarray, **columns: np.ndarray) -> None:
        import numpy as np

        names = [name for name, _ in COLUMNS]
        if "slot" not in columns and "kind" in columns:  # a table without switch ops may leave it out
            columns["slot"] = np.full(len(columns["kind"]), -1, dtype=np.int32)
        if sorted(columns) != sorted(names):
            raise CollectiveError(f"an op table has the columns {names}, got {sorted(columns)}")
        n_ops = len(columns["kind"])
        for name, dtype in COLUMNS:
            value = np.asarray(columns[name])
            if value.shape != (n_ops,):
                raise CollectiveError(f"op table column {name!r} has shape {value.shape}, expected ({n_ops},)")
            if len(value) and (value.min() < -_INT32_MAX or value.max() > _INT32_MAX):
                raise CollectiveError(f"op table column {name!r} holds values beyond 32 bits")
            object.__setattr__(self, name, _frozen(value.astype(dtype, copy=False)))
        for name, value, length in (("rank_ptr", rank_ptr, None), ("dep_ptr", dep_ptr, n_ops + 1),
                                    ("dep_idx", dep_idx, None)):
            value = _frozen(np.asarray(value, dtype=np.int64))
            if value.ndim != 1 or (length is not None and len(value) != length):
                raise CollectiveError(f"op table {name} has shape {value.shape}")
            object.__setattr__(self, name, value)
        if len(self.rank_ptr) < 1 or self.rank_ptr[0] != 0 or self.rank_ptr[-1] != n_ops or \
                np.any(np.diff(self.rank_ptr) < 0):
            raise CollectiveError("op table rank_ptr must rise from 0 to the number of ops")
        if self.dep_ptr[0] != 0 or self.dep_ptr[-1] != len(self.dep_idx) or np.any(np.diff(self.dep_ptr) < 0):
            raise CollectiveError("op table dep_ptr must rise from 0 to the number of dependencies")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("an OpTable is immutable")

    @classmethod
    def from_ops(cls, ranks: Sequence[Sequence[Op | tuple]]) -> OpTable:
        """Columns from per-rank lists of ``Op`` (or tuples in ``OP_FIELDS`` order; ``slot`` may
        be left out: -1)."""
        import numpy as np

        rows: list[tuple] = []
        rank_ptr = [0]
        for r, ops in enumerate(ranks):
            for i, op in enumerate(ops):
                if len(op) == len(PLAIN_OP_FIELDS):
                    op = (*op, -1)
                elif len(op) != len(OP_FIELDS):
                    raise CollectiveError(f"rank {r} op {i} ({op!r}): an op has the {len(OP_FIELDS)} fields "
                                          f"{OP_FIELDS} (slot may be left out)")
                rows.append(tuple(op))
            rank_ptr.append(len(rows))
        columns: dict[str, list] = {name: [] for name, _ in COLUMNS}
        dep_ptr, dep_idx = [0], []
        r = 0
        for g, op in enumerate(rows):
            while g >= rank_ptr[r + 1]:
                r += 1
            problem = _field_problem(op)
            if problem:
                raise CollectiveError(f"rank {r} op {g - rank_ptr[r]} ({op!r}): {problem}")
            kind, step, buf, index, count, peer, src_buf, src_index, tag, channel, deps, slot = op
            for name, value in zip(("kind", "step", "buf", "index", "count", "peer", "src_buf", "src_index",
                                    "tag", "channel", "slot"),
                                   (KIND_CODE[kind], step, BUFFER_CODE[buf], index, count, peer,
                                    BUFFER_CODE.get(src_buf, -1), src_index, tag, channel, slot)):
                columns[name].append(value)
            dep_idx.extend(deps)
            dep_ptr.append(len(dep_idx))
        return cls(np.array(rank_ptr), np.array(dep_ptr), np.array(dep_idx, dtype=np.int64),
                   **{name: np.array(values, dtype=dtype) for (name, dtype), values in
                      zip(COLUMNS, columns.values())})

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def n_ranks(self) -> int:
        return len(self.rank_ptr) - 1

    def rank_of(self) -> np.ndarray:
        """The rank of every op row."""
        import numpy as np

        return np.repeat(np.arange(self.n_ranks, dtype=np.int64), np.diff(self.rank_ptr))

    def rank_ops(self, rank: int) -> tuple[Op, ...]:
        """Rank ``rank``'s ops as ``Op`` values."""
        lo, hi = int(self.rank_ptr[rank]), int(self.rank_ptr[rank + 1])
        kinds = [OP_KINDS[k] for k in self.kind[lo:hi].tolist()]
        bufs = [BUFFERS[b] for b in self.buf[lo:hi].tolist()]
        srcs = [BUFFERS[b] if b >= 0 else "" for b in self.src_buf[lo:hi].tolist()]
        ptr = self.dep_ptr[lo:hi + 1].tolist()
        idx = self.dep_idx[ptr[0]:ptr[-1]].tolist()
        base = ptr[0]
        deps = [tuple(idx[a - base:b - base]) for a, b in zip(ptr, ptr[1:])]
        new = tuple.__new__
        return tuple(new(Op, row) for row in zip(
            kinds, self.step[lo:hi].tolist(), bufs, self.index[lo:hi].tolist(), self.count[lo:hi].tolist(),
            self.peer[lo:hi].tolist(), srcs, self.src_index[lo:hi].tolist(), self.tag[lo:hi].tolist(),
            self.channel[lo:hi].tolist(), deps, self.slot[lo:hi].tolist()))

    def __eq__(self, other: object) -> bool:
        import numpy as np

        if not isinstance(other, OpTable):
            return NotImplemented
        return all(np.array_equal(getattr(self, name), getattr(other, name)) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OpTable({len(self)} ops on {self.n_ranks} ranks, {len(self.dep_idx)} dependencies)"


def _frozen(array: np.ndarray) -> np.ndarray:
    if array.flags.writeable:
        array = array.copy() if array.base is not None else array
        array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class Program:
    """Per-rank op lists (``ops``: an ``OpTable``, or per-rank sequences of ``Op`` that are
    converted to one), scratch size classes (``scratch[r][x]``), the collective and topology they
    implement, and where they come from. ``ranks[r]`` is rank r's ops as ``Op`` values."""

    name: str
    collective: Collective
    topology: Topology
    ops: OpTable
    scratch: tuple[tuple[int, ...], ...]
    channels: int = 1
    solver: str = ""
    steps: int = 0

    def __post_init__(self) -> None:
        validate.name(self.name, "program name", error=CollectiveError)
        where = f"program {self.name!r}"
        validate.instance(self.collective, Collective, f"{where}: collective", error=CollectiveError)
        validate.instance(self.topology, Topology, f"{where}: topology", error=CollectiveError)
        validate.name(self.solver, f"{where}: solver", error=CollectiveError)
        validate.integer(self.steps, f"{where}: steps", least=0, error=CollectiveError)
        if not isinstance(self.ops, OpTable):
            for r, ops in enumerate(validate.sequence(self.ops, f"{where}: ops", error=CollectiveError)):
                validate.sequence(ops, f"{where}: ops of rank {r}", error=CollectiveError)
        for r, row in enumerate(validate.sequence(self.scratch, f"{where}: scratch", error=CollectiveError)):
            validate.sequence(row, f"{where}: scratch of rank {r}", error=CollectiveError)
        n = self.collective.n_ranks
        if self.topology.n_ranks != n:
            raise CollectiveError(f"{where}: collective has {n} ranks but topology {self.topology.name!r} "
                                  f"has {self.topology.n_ranks}")
        table = self.ops if isinstance(self.ops, OpTable) else OpTable.from_ops(self.ops)
        object.__setattr__(self, "ops", table)
        scratch = tuple(tuple(row) for row in self.scratch)
        object.__setattr__(self, "scratch", scratch)
        if table.n_ranks != n or len(scratch) != n:
            raise CollectiveError(f"{where}: needs op lists and scratch classes for {n} ranks, got "
                                  f"{table.n_ranks} and {len(scratch)}")
        validate.integer(self.channels, f"{where}: channels", least=1, error=CollectiveError)
        if self.channels > limits.CHANNELS.value:
            raise CollectiveError(limits.CHANNELS.message(self.channels, f"{where}: channels"))
        k = self.collective.chunk_factor
        flat = [c for row in scratch for c in row]
        if set(map(type, flat)) - {int} or (flat and not 0 <= min(flat) <= max(flat) < k):
            r, x = next((r, x) for r, row in enumerate(scratch) for x, c in enumerate(row)
                        if type(c) is not int or not 0 <= c < k)
            raise CollectiveError(f"{where}: rank {r} scratch slot {x} has size class {scratch[r][x]!r}, "
                                  f"not in 0..{k - 1}")
        bad = _first_bad_op(self)
        if bad is not None:
            r, i = bad
            op = table.rank_ops(r)[i]
            sizes = {"input": len(self.collective.inputs[r]), "output": len(self.collective.outputs[r]),
                     "scratch": len(scratch[r])}
            problem = _op_problem(op, i, r, self.topology, sizes, self.channels) or "malformed"
            raise CollectiveError(f"{where}: rank {r} op {i} ({op!r}): {problem}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        return (self.name, self.collective, self.topology, self.scratch, self.channels, self.solver, self.steps) == \
            (other.name, other.collective, other.topology, other.scratch, other.channels, other.solver,
             other.steps) and self.ops == other.ops

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ derived facts
    @cached_property
    def ranks(self) -> tuple[tuple[Op, ...], ...]:
        """Every rank's ops as ``Op`` values (built from the columns on first use)."""
        return tuple(self.ops.rank_ops(r) for r in range(self.n_ranks))

    @property
    def n_ranks(self) -> int:
        return self.collective.n_ranks

    @property
    def chunk_factor(self) -> int:
        return self.collective.chunk_factor

    @property
    def n_ops(self) -> int:
        return len(self.ops)

    @cached_property
    def kind_counts(self) -> dict[str, int]:
        import numpy as np

        counts = np.bincount(self.ops.kind, minlength=len(OP_KINDS)).tolist() if len(self.ops) else \
            [0] * len(OP_KINDS)
        return dict(zip(OP_KINDS, counts))

    @property
    def n_switch_ops(self) -> int:
        """Pushes and pulls (ops between a rank and a reducing switch)."""
        kinds = self.kind_counts
        return kinds[PUSH] + kinds[PUSH_REDUCE] + kinds[PULL]

    @property
    def n_messages(self) -> int:
        return self.kind_counts[SEND]

    def slot_class(self, rank: int, buf: str, index: int) -> int:
        """Size class of a slot (which piece of a base slot it holds)."""
        if buf == "scratch":
            return self.scratch[rank][index]
        return index % self.collective.chunk_factor

    @cached_property
    def alias_runs(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Per rank, runs ``(input slot, output slot, count)`` of output slots that start as a
        copy of (in place: are) input slots (``Collective.aliases``)."""
        return _runs(self.collective.aliases)

    @cached_property
    def in_place_runs(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Per rank, runs ``(input slot, output slot, count)`` of output slots that are input
        slots in an in-place call (``Collective.in_place_aliases``: an alltoall's whole buffer)."""
        return _runs(self.collective.in_place_aliases)

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
        kinds = self.kind_counts
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
            **({"pushes": kinds[PUSH] + kinds[PUSH_REDUCE], "pulls": kinds[PULL]} if self.n_switch_ops else {}),
            "scratch_slots": [len(x) for x in self.scratch],
        }

    def to_text(self) -> str:
        """A readable listing: every rank's ops in order with their dependencies."""
        coll = self.collective
        switch = f", {self.n_switch_ops} switch ops" if self.n_switch_ops else ""
        head = (f"program {self.name}: {coll} on topology {self.topology.name}; {self.steps} steps, "
                f"{self.n_ops} ops, {self.n_messages} messages{switch}, {self.channels} channel(s)")
        lines = [head]
        for r in range(self.n_ranks):
            ops = self.ops.rank_ops(r)
            lines.append(f"rank {r}: {len(ops)} ops, {len(self.scratch[r])} scratch slots")
            width = len(str(max(len(ops) - 1, 0)))
            for i, op in enumerate(ops):
                deps = f"  after {', '.join(map(str, op.deps))}" if op.deps else ""
                chan = f" channel {op.channel}" if op.channel else ""
                lines.append(f"  {i:>{width}}  {op.describe()}{chan}{deps}")
        return "\n".join(lines)


def _first_bad_op(program: Program) -> tuple[int, int] | None:
    """(rank, op index) of the first malformed op (vectorized over the columns), or None."""
    import numpy as np

    t = program.ops
    if not len(t):
        return None
    coll = program.collective
    n = coll.n_ranks
    rank = t.rank_of()
    sizes = np.zeros((n, 3), dtype=np.int64)
    sizes[:, 0] = [len(x) for x in coll.inputs]
    sizes[:, 1] = [len(x) for x in coll.outputs]
    sizes[:, 2] = [len(x) for x in program.scratch]
    kind, buf, src_buf = t.kind.astype(np.int64), t.buf.astype(np.int64), t.src_buf.astype(np.int64)
    index, count, src_index = t.index.astype(np.int64), t.count.astype(np.int64), t.src_index.astype(np.int64)
    bad = (kind < 0) | (kind >= len(OP_KINDS)) | (t.step < PROLOGUE) | (count < 1) | (buf < 0) | (buf > 2)
    ok_buf = np.clip(buf, 0, 2)
    bad |= (index < 0) | (index + count > sizes[rank, ok_buf])
    local = (kind == KIND_CODE[COPY]) | (kind == KIND_CODE[REDUCE])
    network = kind <= 1
    switch = ~local & ~network
    peer = t.peer.astype(np.int64)
    slot = t.slot.astype(np.int64)
    posted = network | switch
    bad |= posted & ((t.tag < 0) | (t.channel < 0) | (t.channel >= program.channels) | (src_buf != -1) |
                     (src_index != -1))
    bad |= network & ((peer < 0) | (peer >= n) | (peer == rank))
    bad |= ~switch & (slot != -1)
    if np.any(switch):
        reduces = np.zeros(program.topology.n_vertices + 1, dtype=bool)
        reduces[list(program.topology.reducing_switches)] = True
        ok_peer = np.clip(peer, 0, len(reduces) - 1)
        ok_peer[(peer < 0) | (peer >= len(reduces) - 1)] = len(reduces) - 1  # the sentinel: False
        bad |= switch & (~reduces[ok_peer] | (slot < 0) | (slot + count > limits.SLOTS.value))
    ok_src = np.clip(src_buf, 0, 2)
    bad |= local & ((peer != -1) | (t.tag != -1) | (src_buf < 0) | (src_buf > 2) | (src_index < 0) |
                    (src_index + count > sizes[rank, ok_src]) |
                    ((src_buf == buf) & (np.abs(src_index - index) < count)))
    if len(t.dep_idx):
        owner = np.repeat(np.arange(len(t), dtype=np.int64), np.diff(t.dep_ptr))
        position = owner - t.rank_ptr[rank[owner]]
        wrong = (t.dep_idx < 0) | (t.dep_idx >= position)
        if np.any(wrong):
            bad[owner[wrong]] = True
    if not np.any(bad):
        return None
    g = int(np.argmax(bad))
    r = int(rank[g])
    return r, g - int(t.rank_ptr[r])


def _field_problem(op: tuple) -> str:
    """Why an op's fields cannot be stored (types and names), in words ("" if they can)."""
    kind, step, buf, index, count, peer, src_buf, src_index, tag, channel, deps, slot = op
    if kind not in OP_KINDS:
        return f"kind {kind!r} is not one of {OP_KINDS}"
    if buf not in BUFFERS:
        return f"buffer {buf!r} is not one of {BUFFERS}"
    if src_buf not in BUFFERS and src_buf != "":
        return f"source buffer {src_buf!r} is not one of {BUFFERS}"
    ints = (step, index, count, peer, src_index, tag, channel, slot)
    if any(isinstance(x, bool) or not isinstance(x, int) for x in ints):
        return "step, index, count, peer, src_index, tag, channel and slot must be integers"
    if any(abs(x) > _INT32_MAX for x in ints):
        return "step, index, count, peer, src_index, tag, channel and slot must fit in 32 bits"
    if not isinstance(deps, tuple) or any(isinstance(d, bool) or not isinstance(d, int) for d in deps):
        return "deps must be a tuple of op indices"
    return ""


def _op_problem(op: Op, i: int, rank: int, topology: Topology, sizes: dict[str, int], channels: int) -> str:
    """Why an op is malformed, in words ("" if it is well formed)."""
    kind, step, buf, index, count, peer, src_buf, src_index, tag, channel, deps, slot = op
    n = topology.n_ranks
    if step < PROLOGUE:
        return f"step {step} is below the prologue ({PROLOGUE})"
    if count < 1:
        return f"count {count} is not positive"
    if not 0 <= index or index + count > sizes[buf]:
        return f"{buf}[{index}..{index + count - 1}] is outside the rank's {sizes[buf]} {buf} slots"
    if kind not in SWITCH_OPS and slot != -1:
        return f"slot {slot} belongs to a push or pull only (-1 for a {kind})"
    if kind in NETWORK or kind in SWITCH_OPS:
        if kind in NETWORK and (not 0 <= peer < n or peer == rank):
            return f"peer {peer} is not another rank in 0..{n - 1}"
        if kind in SWITCH_OPS:
            if peer not in topology.reducing_switches:
                return f"peer {peer} is not a switch that reduces (topology {topology.name!r}: " \
                       f"{list(topology.reducing_switches) or 'none'})"
            if slot < 0 or slot + count > limits.SLOTS.value:
                return limits.SLOTS.message(slot + count, f"switch slots {slot}..{slot + count - 1} are out of range")
        if tag < 0:
            return f"tag {tag} is negative"
        if not 0 <= channel < channels:
            return f"channel {channel} is not in 0..{channels - 1}"
        if src_buf or src_index != -1:
            return f"a {kind} has no source slots (src_buf '' and src_index -1)"
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
    for d in deps:
        if not 0 <= d < i:
            return f"dependency {d} is not an earlier op of the rank"
    return ""
