"""Algorithm: a schedule of transfers between buffer slots, in steps.

Every solver and every hand-written schedule produces this one IR.

Buffers are ``input``, ``output`` and ``scratch`` per rank, as in MSCCL, so export is direct.
Slots are the collective's slots (after chunking); a transfer moves ``count`` consecutive slots.

Semantics: the transfers of step s read the state left by step s-1 and their writes land at the
end of step s. ``copy`` overwrites the destination; ``reduce`` adds into it (the destination
must already hold a value). Several reduce-writes to one slot in one step all add; a
copy-write colliding with any other write to the same slot in one step is an error. A transfer
whose source and destination rank are equal is a local copy or reduce and uses no link. The
input buffer may be written (MSCCL algorithms work in place); backends protect a caller's input
when a schedule does so.

Switch transfers (in-network reduction: NVLink SHARP, InfiniBand SHARP). A transfer may name a
switch that reduces (``Switch.reduce``; vertex id >= n_ranks) as its source or its destination,
never both ends: on the switch's side the buffer is ``scratch`` and the index names one of the
switch's *ephemeral* slots. A rank -> switch transfer (a *push*) writes switch slots in step t:
``reduce`` writes add up (several ranks reducing into one slot leave it their sum), a ``copy``
write sets it (and must then be the only write to that slot in the step: the source of a
multicast). In step t + 1 any number of switch -> rank transfers (*pulls*) read it (several: a
multicast); after that the value is gone: the switch stores nothing, so reading a switch slot in
any other step, or one never written, is an error (``ccl.verify``). The rank and the switch must
be joined by links in the transfer's direction (``Topology.switch_path``: a direct link, or
through the rank's NIC for a network switch).

``rounds`` (optional, one per step, and then it fixes the number of steps) is SCCL's bandwidth accounting: in step s a link with L
lanes carries at most L x rounds[s] slots, and the simulator charges the rounds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter
from typing import NamedTuple

from . import limits, validate
from .collective import Collective
from .errors import CollectiveError
from .topology import Topology

BUFFERS = ("input", "output", "scratch")
OPS = ("copy", "reduce")  # tuples: membership by ==, so an unhashable value is refused, not a TypeError


class _TransferFields(NamedTuple):
    step: int
    src: int
    src_buf: str
    src_index: int
    dst: int
    dst_buf: str
    dst_index: int
    count: int = 1
    op: str = "copy"


class Transfer(_TransferFields):
    """One move of ``count`` consecutive slots. A NamedTuple rather than a dataclass because
    schedules reach millions of transfers. Built, it checks what it can alone (integers, not
    negative, a known buffer and op; CollectiveError otherwise), cheaply; ``Algorithm`` checks
    the ranks and indices against the collective."""

    __slots__ = ()

    def __new__(cls, step: int, src: int, src_buf: str, src_index: int, dst: int, dst_buf: str, dst_index: int,
                count: int = 1, op: str = "copy") -> Transfer:
        if (type(step) is not int or type(src) is not int or type(src_index) is not int or type(dst) is not int
                or type(dst_index) is not int or type(count) is not int or step < 0 or src < 0 or dst < 0
                or src_index < 0 or dst_index < 0 or count < 1 or src_buf not in BUFFERS
                or dst_buf not in BUFFERS or op not in OPS):
            fields = (step, src, src_buf, src_index, dst, dst_buf, dst_index, count, op)
            raise CollectiveError(f"transfer {_show(fields)}: {_field_problem(fields)}")
        return tuple.__new__(cls, (step, src, src_buf, src_index, dst, dst_buf, dst_index, count, op))

    @classmethod
    def _make(cls, iterable: Iterable) -> Transfer:  # _replace and unpickling check too
        return cls(*iterable)

    @classmethod
    def unchecked(cls, fields: tuple) -> Transfer:
        """A transfer from fields a solver computed itself (integers it counted, buffer and op
        names it wrote): ``__new__``'s type checks skipped, which matters at millions of
        transfers; ``Algorithm`` still checks every rank, index and count."""
        return tuple.__new__(cls, fields)

    def describe(self, topology: Topology | None = None) -> str:
        """``step 3: copy rank 0 input[2] -> rank 1 output[2]``; given the topology, a switch
        end is named (``switch 'nvswitch' scratch[0]``)."""
        span = "" if self.count == 1 else f"..+{self.count}"
        return (
            f"step {self.step}: {self.op} {_vertex(self.src, topology)} {self.src_buf}[{self.src_index}{span}]"
            f" -> {_vertex(self.dst, topology)} {self.dst_buf}[{self.dst_index}{span}]"
        )


def _vertex(v: int, topology: Topology | None) -> str:
    if topology is None or v < topology.n_ranks or v >= topology.n_vertices:
        return f"rank {v}"
    return f"switch {topology.switches[v - topology.n_ranks].name!r}"


@dataclass(frozen=True)
class Algorithm:
    name: str
    collective: Collective
    topology: Topology
    transfers: tuple[Transfer, ...]
    rounds: tuple[int, ...] | None = None
    solver: str = ""

    def __post_init__(self) -> None:
        validate.name(self.name, "algorithm name", error=CollectiveError)
        validate.instance(self.collective, Collective, f"algorithm {self.name!r}: collective", error=CollectiveError)
        validate.instance(self.topology, Topology, f"algorithm {self.name!r}: topology", error=CollectiveError)
        validate.name(self.solver, f"algorithm {self.name!r}: solver", error=CollectiveError)
        if self.collective.n_ranks != self.topology.n_ranks:
            raise CollectiveError(
                f"algorithm {self.name!r}: collective has {self.collective.n_ranks} ranks but "
                f"topology {self.topology.name!r} has {self.topology.n_ranks}"
            )
        given = validate.sequence(self.transfers, f"algorithm {self.name!r}: transfers", error=CollectiveError)
        transfers = tuple(t if type(t) is Transfer else _transfer(self.name, k, t) for k, t in enumerate(given))
        object.__setattr__(self, "transfers", transfers)
        n = self.collective.n_ranks
        sizes = {
            "input": [len(x) for x in self.collective.inputs],
            "output": [len(x) for x in self.collective.outputs],
            "scratch": [limits.SLOTS.value] * n,  # as many as used, up to the limit
        }
        last = -1
        max_step = limits.STEPS.value
        switched: list[int] = []  # transfers to or from a switch (checked on the slow path)
        for k, t in enumerate(transfers):
            step, src, sbuf, sidx, dst, dbuf, didx, count, _ = t
            # a Transfer has checked its own fields (integers, not negative, known buffer and op)
            ok = (
                step < max_step and src < n and dst < n
                and sidx + count <= sizes[sbuf][src] and didx + count <= sizes[dbuf][dst]
                and not (src == dst and sbuf == dbuf and abs(sidx - didx) < count)
            )
            if not ok:
                vertices = self.topology.n_vertices
                to_switch = (src >= n or dst >= n) and src < vertices and dst < vertices
                problem = _switch_problem(t, self.topology, sizes) if step < max_step and to_switch \
                    else _problem(t, n, sizes)
                if problem:
                    raise CollectiveError(f"algorithm {self.name!r}: transfer {k} ({t!r}): {problem}")
                switched.append(k)
            if step > last:
                last = step
        self.__dict__["switch_transfers"] = tuple(switched)  # the cached property, known now
        if self.rounds is not None:
            rounds = validate.sequence(self.rounds, f"algorithm {self.name!r}: rounds", error=CollectiveError)
            if len(rounds) > max_step:
                raise CollectiveError(limits.STEPS.message(len(rounds), f"algorithm {self.name!r}: rounds has "
                                                                       "too many entries (one per step)"))
            if len(rounds) < last + 1:
                raise CollectiveError(
                    f"algorithm {self.name!r}: rounds has {len(rounds)} entries but transfers use {last + 1} steps"
                )
            if any(type(r) is not int or not 1 <= r <= validate.MAX_INT for r in rounds):
                raise CollectiveError(f"algorithm {self.name!r}: rounds must be positive integers, got {rounds}")
            object.__setattr__(self, "rounds", rounds)

    @cached_property
    def n_steps(self) -> int:
        """Steps of the schedule: one past the last used step, or the length of ``rounds``."""
        used = 1 + max(map(itemgetter(0), self.transfers), default=-1)
        return max(used, len(self.rounds)) if self.rounds is not None else used

    @property
    def total_rounds(self) -> int:
        return sum(self.rounds) if self.rounds is not None else self.n_steps

    @cached_property
    def used_steps(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """(step, indices of its transfers) for every step that has transfers, in step order
        (memory by transfer, not by step number: a lone late step costs nothing)."""
        out: dict[int, list[int]] = {}
        for k, t in enumerate(self.transfers):
            out.setdefault(t.step, []).append(k)
        return tuple((s, tuple(out[s])) for s in sorted(out))

    @cached_property
    def switch_transfers(self) -> tuple[int, ...]:
        """Indices of the transfers to or from a switch (``__post_init__`` finds them)."""
        n = self.collective.n_ranks
        return tuple(k for k, t in enumerate(self.transfers) if t.src >= n or t.dst >= n)

    @cached_property
    def scratch_slots(self) -> tuple[int, ...]:
        """Scratch slots each rank needs (one past the highest index used; a switch's
        ephemeral slots are not a rank's)."""
        n = self.collective.n_ranks
        out = [0] * n
        plain = not self.switch_transfers
        for t in self.transfers:
            if t.src_buf == "scratch" and (plain or t.src < n):
                out[t.src] = max(out[t.src], t.src_index + t.count)
            if t.dst_buf == "scratch" and (plain or t.dst < n):
                out[t.dst] = max(out[t.dst], t.dst_index + t.count)
        return tuple(out)

    @property
    def n_chunk_transfers(self) -> int:
        """Slots moved over links (local copies excluded)."""
        return sum(t.count for t in self.transfers if t.src != t.dst)

    def with_transfers(self, transfers: Iterable[Transfer], rounds: tuple[int, ...] | None = None) -> Algorithm:
        return Algorithm(self.name, self.collective, self.topology, tuple(transfers), rounds, self.solver)

    def summary(self) -> dict:
        return {
            "name": self.name,
            "collective": self.collective.kind,
            "ranks": self.collective.n_ranks,
            "root": self.collective.root,
            "topology": self.topology.name,
            "solver": self.solver,
            "steps": self.n_steps,
            "rounds": self.total_rounds,
            "chunks": self.collective.chunk_factor,
            "transfers": len(self.transfers),
        }


def _transfer(name: str, k: int, fields: object) -> Transfer:
    """Transfer k of algorithm ``name`` from a tuple of its fields."""
    try:
        return Transfer(*fields)  # type: ignore[misc]
    except CollectiveError as exc:
        raise CollectiveError(f"algorithm {name!r}: transfer {k} {exc.message.removeprefix('transfer ')}") from None
    except TypeError:  # not iterable, or too few or too many fields
        raise CollectiveError(f"algorithm {name!r}: transfer {k} ({_show(fields)}) is not "
                              f"{len(_TransferFields._fields)} fields {_TransferFields._fields}") from None


def _show(value: object) -> str:
    return validate.show(value) if not isinstance(value, tuple) else "(" + ", ".join(map(validate.show, value)) + ")"


def _field_problem(fields: tuple) -> str:
    """Why a transfer's fields are malformed on their own, in words."""
    step, src, sbuf, sidx, dst, dbuf, didx, count, op = fields
    names = ("step", "src", "src_index", "dst", "dst_index", "count")
    for name, value in zip(names, (step, src, sidx, dst, didx, count)):
        if type(value) is not int:
            return f"{name} must be an integer, got {type(value).__name__} {validate.show(value)}"
    for name, value in zip(names, (step, src, sidx, dst, didx)):
        if value < 0:
            return f"{name} {value} is negative"
    if count < 1:
        return f"count {count} is not positive"
    for name, buf in (("src_buf", sbuf), ("dst_buf", dbuf)):
        if buf not in BUFFERS:
            return f"buffer {validate.show(buf)} ({name}) is not one of {BUFFERS}"
    return f"op {validate.show(op)} is not one of {OPS}"


def _switch_problem(t: Transfer, topology: Topology, sizes: dict[str, list[int]]) -> str:
    """Why a transfer with a switch end is not a valid push or pull, in words ("" if it is)."""
    step, src, sbuf, sidx, dst, dbuf, didx, count, _ = t
    n = topology.n_ranks
    if src >= n and dst >= n:
        return (f"moves from switch {topology.vertex_name(src)!r} to switch {topology.vertex_name(dst)!r}: a switch "
                "transfer joins a rank and a switch")
    rank, switch, rbuf, ridx, sw_buf, sw_idx = (src, dst, sbuf, sidx, dbuf, didx) if dst >= n else \
        (dst, src, dbuf, didx, sbuf, sidx)
    name = topology.vertex_name(switch)
    if not topology.switches[switch - n].reduce:
        return (f"switch {name!r} does not reduce or multicast: ranks send through it to each other, never to "
                "it (a switch that does is declared `switch NAME reduce`)")
    if sw_buf != "scratch":
        return f"a switch has scratch slots only, not {sw_buf}[{sw_idx}] (switch {name!r})"
    if sw_idx + count > limits.SLOTS.value:
        return limits.SLOTS.message(sw_idx + count, f"switch {name!r} slot {sw_idx + count - 1} is too many slots")
    verb = "reads" if rank == src else "writes"
    if ridx + count > sizes[rbuf][rank]:
        if rbuf == "scratch":
            return limits.SLOTS.message(ridx + count, f"{verb} scratch[{ridx}..{ridx + count - 1}] of rank {rank}, "
                                                      "too many scratch slots for one rank")
        return f"{verb} {rbuf}[{ridx}..{ridx + count - 1}] of rank {rank}, which has {sizes[rbuf][rank]} {rbuf} slots"
    if topology.switch_path(src, dst) is None:
        way = f"from rank {rank} to switch {name!r}" if rank == src else f"from switch {name!r} to rank {rank}"
        return f"topology {topology.name!r} has no link {way}"
    return ""


def _problem(t: Transfer, n: int, sizes: dict[str, list[int]]) -> str:
    """Why a transfer does not fit the algorithm, in words (its own fields were checked when
    it was built)."""
    step, src, sbuf, sidx, dst, dbuf, didx, count, _ = t
    if step >= limits.STEPS.value:
        return limits.STEPS.message(step + 1, f"step {step} makes too many steps")
    for rank in (src, dst):
        if not rank < n:
            return f"rank {rank} is not in 0..{n - 1}"
    for verb, rank, buf, idx in (("reads", src, sbuf, sidx), ("writes", dst, dbuf, didx)):
        if buf == "scratch" and idx + count > sizes[buf][rank]:
            return limits.SLOTS.message(idx + count, f"{verb} scratch[{idx}..{idx + count - 1}] of rank {rank}, "
                                                     "too many scratch slots for one rank")
        if idx + count > sizes[buf][rank]:
            return (f"{verb} {buf}[{idx}..{idx + count - 1}] of rank {rank}, which has "
                    f"{sizes[buf][rank]} {buf} slots")
    return "is a local transfer onto the slots it reads"
