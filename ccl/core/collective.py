"""Collective: what data starts where and what every output slot must hold at the end.

One general form covers every collective. Each rank has an input buffer and an output buffer,
each a sequence of equally sized slots:

* ``inputs[r][i]`` is the id of the input chunk that starts in input slot ``i`` of rank ``r``;
* ``outputs[r][j]`` is the set of input-chunk ids whose sum output slot ``j`` of rank ``r``
  must hold at the end (a set of one for non-reducing collectives);
* ``aliases[r][j]`` is the input slot that output slot ``j`` starts out holding, or None. This
  is the view MSCCL and SCCL use: an allgather rank's own chunk already sits in its output, an
  allreduce output starts as the rank's input. A runtime doing an out-of-place call copies the
  aliased input slots into the output first (one local copy); an in-place call is free.
* ``in_place_aliases[r][j]`` is the input slot that output slot ``j`` *is* in an in-place call
  (the same memory), or None: the runtimes' buffer convention (``runtime_aliases``), which
  covers more than ``aliases`` where an in-place call overlays memory that must still change.
  An in-place alltoall passes one buffer as both send and receive buffer, so input block j is
  output block j for every j, though only the rank's own block keeps its value. Custom
  collectives declare theirs (by default their ``aliases``). ``verify_program(...,
  in_place=True)`` checks that a Program is correct when these slots are one memory.

The built-in collectives below use chunk ids in order of (rank, input slot).
``chunk_up(k)`` splits every slot into k consecutive slots, keeping buffer layouts contiguous.
``custom`` builds a collective from SCCL-style pre/postconditions, and ``multi_root`` /
``replicated_broadcast`` the rooted collectives with several roots as custom collectives.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from . import limits, validate
from .display import number
from .errors import CollectiveError

BUILTIN_KINDS = (
    "allgather",
    "reducescatter",
    "allreduce",
    "alltoall",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
)
ROOTED_KINDS = ("broadcast", "reduce", "gather", "scatter")


@dataclass(frozen=True)
class Collective:
    name: str
    kind: str
    n_ranks: int
    inputs: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[frozenset[int], ...], ...]
    aliases: tuple[tuple[int | None, ...], ...]
    root: int | None = None
    chunk_factor: int = 1
    in_place_aliases: tuple[tuple[int | None, ...], ...] | None = None  # None: the kind's convention
    _chunked: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        validate.name(self.name, "collective name", error=CollectiveError)
        validate.text(self.kind, f"collective {self.name!r}: kind", empty=False, error=CollectiveError)
        n = self.n_ranks
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CollectiveError(f"collective {self.name!r}: needs at least 1 rank, got {validate.show(n)}")
        for what in ("inputs", "outputs", "aliases"):
            table = validate.sequence(getattr(self, what), f"collective {self.name!r}: {what}", error=CollectiveError)
            if len(table) != n:
                raise CollectiveError(f"collective {self.name!r}: {what} has {len(table)} ranks, expected {n}")
            for r, row in enumerate(table):
                if not isinstance(row, (tuple, list)):
                    raise CollectiveError(f"collective {self.name!r}: {what} of rank {r} must be a tuple, got "
                                          f"{type(row).__name__} {validate.show(row)}")
        validate.integer(self.chunk_factor, f"collective {self.name!r}: chunk factor", least=1, error=CollectiveError)
        if self.root is not None:
            validate.integer(self.root, f"collective {self.name!r}: root", error=CollectiveError)
            if not 0 <= self.root < n:
                raise CollectiveError(f"collective {self.name!r}: root {self.root} is not a rank (0..{n - 1})")
        present: set[int] = set()
        for r, slots in enumerate(self.inputs):
            for c in slots:
                if isinstance(c, bool) or not isinstance(c, int) or c < 0:
                    raise CollectiveError(f"collective {self.name!r}: chunk id {c!r} on rank {r} is not an integer >= 0")
            if len(set(slots)) != len(slots):
                raise CollectiveError(f"collective {self.name!r}: rank {r} holds the same input chunk in two slots")
            present.update(slots)
        checked: dict[int, frozenset[int]] = {}  # large collectives share their sets: check each once
        for r, slots in enumerate(self.outputs):
            if len(self.aliases[r]) != len(slots):
                raise CollectiveError(
                    f"collective {self.name!r}: rank {r} has {len(slots)} output slots but "
                    f"{len(self.aliases[r])} alias entries"
                )
            used_inputs: set[int] = set()
            for j, need in enumerate(slots):
                if id(need) not in checked:
                    if not isinstance(need, (frozenset, set)):
                        raise CollectiveError(f"collective {self.name!r}: rank {r} output slot {j} must be a set of "
                                              f"chunk ids, got {type(need).__name__} {validate.show(need)}")
                    if not need:
                        raise CollectiveError(f"collective {self.name!r}: rank {r} output slot {j} requires nothing")
                    missing = sorted(need - present)
                    if missing:
                        raise CollectiveError(
                            f"collective {self.name!r}: rank {r} output slot {j} requires chunk {missing[0]}, "
                            "which no rank holds at the start, so the postcondition can never be met"
                        )
                    checked[id(need)] = need
                alias = self.aliases[r][j]
                if alias is None:
                    continue
                if type(alias) is not int or not 0 <= alias < len(self.inputs[r]):
                    raise CollectiveError(
                        f"collective {self.name!r}: rank {r} output slot {j} aliases input slot {validate.show(alias)}, "
                        f"but the rank has {len(self.inputs[r])} input slots"
                    )
                if self.inputs[r][alias] not in need:
                    raise CollectiveError(
                        f"collective {self.name!r}: rank {r} output slot {j} aliases input slot {alias} "
                        "whose chunk is not part of what the slot must hold"
                    )
                if alias in used_inputs:
                    raise CollectiveError(
                        f"collective {self.name!r}: rank {r} input slot {alias} is aliased by two output slots"
                    )
                used_inputs.add(alias)
        self._check_in_place()

    def _check_in_place(self) -> None:
        """Fill ``in_place_aliases`` with the kind's convention when not given, and check it: an
        input slot per output slot at most, of the same size class, covering ``aliases``."""
        given = self.in_place_aliases
        table = runtime_aliases(self) if given is None else given
        where = f"collective {self.name!r}: in-place aliases"
        table = validate.sequence(table, where, error=CollectiveError)
        if len(table) != self.n_ranks:
            raise CollectiveError(f"{where} have {len(table)} ranks, expected {self.n_ranks}")
        k = self.chunk_factor
        rows = []
        for r, row in enumerate(table):
            if not isinstance(row, (tuple, list)) or len(row) != len(self.outputs[r]):
                raise CollectiveError(f"{where}: rank {r} needs one entry per output slot "
                                      f"({len(self.outputs[r])}), got {validate.show(row)}")
            seen: set[int] = set()
            for j, a in enumerate(row):
                if a is None:
                    if self.aliases[r][j] is not None:
                        raise CollectiveError(f"{where}: rank {r} output slot {j} aliases input slot "
                                              f"{self.aliases[r][j]} but is not that memory in place")
                    continue
                if type(a) is not int or not 0 <= a < len(self.inputs[r]):
                    raise CollectiveError(f"{where}: rank {r} output slot {j} is input slot {validate.show(a)} in "
                                          f"place, but the rank has {len(self.inputs[r])} input slots")
                if a in seen:
                    raise CollectiveError(f"{where}: rank {r} input slot {a} is two output slots in place")
                seen.add(a)
                if self.aliases[r][j] is not None and self.aliases[r][j] != a:
                    raise CollectiveError(f"{where}: rank {r} output slot {j} aliases input slot "
                                          f"{self.aliases[r][j]} but is input slot {a} in place")
                if a % k != j % k:
                    raise CollectiveError(f"{where}: rank {r} output slot {j} (piece {j % k}) cannot be input "
                                          f"slot {a} (piece {a % k}) in place: their sizes differ")
            rows.append(tuple(row))
        object.__setattr__(self, "in_place_aliases", tuple(rows))

    # ------------------------------------------------------------------ derived facts
    @property
    def is_reducing(self) -> bool:
        return any(len(need) > 1 for slots in self.outputs for need in slots)

    @property
    def n_chunks(self) -> int:
        """Number of distinct input chunks."""
        return len({c for slots in self.inputs for c in slots})

    def origins(self) -> dict[int, tuple[tuple[int, int], ...]]:
        """chunk id -> the (rank, input slot) places it starts at."""
        out: dict[int, list[tuple[int, int]]] = {}
        for r, slots in enumerate(self.inputs):
            for i, c in enumerate(slots):
                out.setdefault(c, []).append((r, i))
        return {c: tuple(v) for c, v in out.items()}

    def describe_chunk(self, chunk: int) -> str:
        places = self.origins().get(chunk, ())
        where = ", ".join(f"rank {r} input[{i}]" for r, i in places) or "nowhere"
        return f"chunk {chunk} ({where})"

    @property
    def max_input_slots(self) -> int:
        return max((len(x) for x in self.inputs), default=0)

    @property
    def max_output_slots(self) -> int:
        return max((len(x) for x in self.outputs), default=0)

    def check_chunk_up(self, k: int) -> None:
        """CollectiveError when ``chunk_up(k)`` would exceed ``ccl.core.limits.SLOTS`` (checked
        before building it)."""
        slots = sum(map(len, self.inputs)) + sum(map(len, self.outputs))
        _check_slots(f"{self.name} on {self.n_ranks} ranks with chunk factor {number(self.chunk_factor * k)}",
                     slots * k)

    def chunk_up(self, k: int) -> Collective:
        """Split every slot into ``k`` consecutive slots and every chunk into ``k`` chunks."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise CollectiveError(f"chunk factor must be a positive integer, got {validate.show(k)}")
        if k == 1:
            return self
        self.check_chunk_up(k)  # before the cache too: a limit lowered later still holds
        if k in self._chunked:
            return self._chunked[k]
        inputs = tuple(tuple(c * k + j for c in slots for j in range(k)) for slots in self.inputs)
        # equal sets split once and share their pieces (an allgather's 128 ranks need the same
        # 128 chunks: 128 splits, not 16,384)
        split: dict[frozenset[int], tuple[frozenset[int], ...]] = {}

        def pieces(need: frozenset[int]) -> tuple[frozenset[int], ...]:
            got = split.get(need)
            if got is None:
                got = split[need] = tuple(frozenset(c * k + j for c in need) for j in range(k))
            return got

        outputs = tuple(tuple(p for need in slots for p in pieces(need)) for slots in self.outputs)

        def slots_of(table: tuple[tuple[int | None, ...], ...]) -> tuple[tuple[int | None, ...], ...]:
            return tuple(tuple(None if a is None else a * k + j for a in slots for j in range(k)) for slots in table)

        aliases = slots_of(self.aliases)
        in_place = aliases if self.in_place_aliases == self.aliases else slots_of(self.in_place_aliases)
        # valid by construction (every chunk of a valid collective split into k consecutive ones),
        # so not checked again: the checks cost a second per split at 128 ranks, and a search
        # over pipeline shapes splits once per slot count it tries
        result = _derived(self, inputs, outputs, aliases, in_place, self.chunk_factor * k)
        self._chunked[k] = result
        return result

    def spec(self) -> dict:
        """The compact description a built-in collective is rebuilt from."""
        return {"kind": self.kind, "n_ranks": self.n_ranks, "root": self.root, "chunk_factor": self.chunk_factor}

    def __str__(self) -> str:
        root = f" root {self.root}" if self.root is not None else ""
        return f"{self.name} on {self.n_ranks} ranks{root}, chunk factor {self.chunk_factor}"


# ---------------------------------------------------------------------- in place
def runtime_aliases(coll: Collective) -> tuple[tuple[int | None, ...], ...]:
    """Per rank, the input slot each output slot is in an in-place call, as NCCL, RCCL, MSCCL
    and torch.distributed lay the buffers out (offsets in slots; ``I``/``O`` a rank's input
    and output slot counts):

    * allreduce, broadcast, reduce, alltoall: send buffer == receive buffer, so input slot t is
      output slot t (alltoall: the whole buffer, every block, not only the rank's own);
    * allgather: send buffer == receive buffer + rank x I: input slot t is output slot rank x I + t;
    * reducescatter: receive buffer == send buffer + rank x O: output slot t is input slot rank x O + t;
    * gather (the root): send buffer == receive buffer + root x I; scatter (the root): receive
      buffer == send buffer + root x O; the other ranks have one of the two buffers only.

    Any other kind (custom collectives): its ``aliases``, the memory it declares shared."""
    kind, n = coll.kind, coll.n_ranks
    if kind not in BUILTIN_KINDS:
        return coll.aliases
    rows = []
    for r in range(n):
        n_in, n_out = len(coll.inputs[r]), len(coll.outputs[r])
        row: list[int | None] = [None] * n_out
        shift = None  # output slot j is input slot j + shift
        if kind in ("allreduce", "broadcast", "reduce", "alltoall"):
            shift = 0
        elif kind in ("allgather", "gather"):
            shift = -(r if kind == "allgather" else coll.root or 0) * n_in
        elif kind in ("reducescatter", "scatter"):
            shift = (r if kind == "reducescatter" else coll.root or 0) * n_out
        if shift is not None and n_in and n_out:  # (a rank holding one of the two buffers: nothing)
            for j in range(n_out):
                if 0 <= j + shift < n_in:
                    row[j] = j + shift
        rows.append(tuple(row))
    return tuple(rows)


# ---------------------------------------------------------------------- built-ins
# Buffer slots (input and output, all ranks) of each built-in collective on n ranks at chunk
# factor 1: what ``check_size`` weighs against ``ccl.core.limits.SLOTS`` before anything is built.
_BASE_SLOTS = {
    "allgather": lambda n: n + n * n,
    "reducescatter": lambda n: n * n + n,
    "allreduce": lambda n: 2 * n,
    "alltoall": lambda n: 2 * n * n,
    "broadcast": lambda n: 1 + n,
    "reduce": lambda n: n + 1,
    "gather": lambda n: 2 * n,
    "scatter": lambda n: 2 * n,
}


def check_size(kind: str, n: int, chunks: int = 1) -> None:
    """CollectiveError unless the built-in ``kind`` on ``n`` ranks at chunk factor ``chunks``
    fits ``ccl.core.limits.RANKS`` and ``ccl.core.limits.SLOTS`` (checked before building it)."""
    kind = _SPELLINGS.get(kind, kind)
    _check_n(kind, n)
    base = _BASE_SLOTS.get(kind)
    if base is not None and type(chunks) is int:
        _check_slots(f"{kind} on {n} ranks" + (f" with chunk factor {number(chunks)}" if chunks != 1 else ""),
                     base(n) * max(chunks, 1))


def _check_slots(what: str, slots: int) -> None:
    if slots > limits.SLOTS.value:
        raise CollectiveError(limits.SLOTS.message(slots, f"{what} has too many buffer slots (inputs and "
                                                          "outputs of all ranks)"))


def _check_n(kind: str, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise CollectiveError(f"{kind} needs a positive number of ranks, got {validate.show(n)}")
    if n > limits.RANKS.value:
        raise CollectiveError(limits.RANKS.message(n, f"{kind} on too many ranks"))
    base = _BASE_SLOTS.get(kind)
    if base is not None:
        _check_slots(f"{kind} on {n} ranks", base(n))


def _check_root(kind: str, n: int, root: int) -> None:
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < n:
        raise CollectiveError(f"{kind} root must be a rank in 0..{n - 1}, got {root!r}")


def _cached(fn: Any) -> Any:
    """``lru_cache(64)`` for the builders, used only for the arguments callers pass (ints and
    None): anything else (a list, a float) goes to the builder itself, whose checks refuse it
    with a CollectiveError instead of the cache's TypeError."""
    cached = lru_cache(maxsize=64)(fn)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise CollectiveError(f"{fn.__name__}: {exc}") from None
            bound.apply_defaults()
            args = bound.args
        if all(a is None or type(a) is int for a in args):
            return cached(*args)
        return fn(*args)

    call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return call


@_cached
def allgather(n: int) -> Collective:
    _check_n("allgather", n)
    inputs = tuple((r,) for r in range(n))
    outputs = tuple(tuple(frozenset((q,)) for q in range(n)) for _ in range(n))
    aliases = tuple(tuple(0 if q == r else None for q in range(n)) for r in range(n))
    return Collective("allgather", "allgather", n, inputs, outputs, aliases)


@_cached
def reducescatter(n: int) -> Collective:
    _check_n("reducescatter", n)
    inputs = tuple(tuple(r * n + j for j in range(n)) for r in range(n))
    outputs = tuple((frozenset(q * n + r for q in range(n)),) for r in range(n))
    aliases = tuple((r,) for r in range(n))
    return Collective("reducescatter", "reducescatter", n, inputs, outputs, aliases)


@_cached
def allreduce(n: int) -> Collective:
    _check_n("allreduce", n)
    everything = frozenset(range(n))
    inputs = tuple((r,) for r in range(n))
    outputs = tuple((everything,) for _ in range(n))
    aliases = tuple((0,) for _ in range(n))
    return Collective("allreduce", "allreduce", n, inputs, outputs, aliases)


@_cached
def alltoall(n: int) -> Collective:
    _check_n("alltoall", n)
    inputs = tuple(tuple(r * n + j for j in range(n)) for r in range(n))
    outputs = tuple(tuple(frozenset((q * n + r,)) for q in range(n)) for r in range(n))
    aliases = tuple(tuple(q if q == r else None for q in range(n)) for r in range(n))
    return Collective("alltoall", "alltoall", n, inputs, outputs, aliases)


@_cached
def broadcast(n: int, root: int = 0) -> Collective:
    _check_n("broadcast", n)
    _check_root("broadcast", n, root)
    inputs = tuple((0,) if r == root else () for r in range(n))
    outputs = tuple((frozenset((0,)),) for _ in range(n))
    aliases = tuple((0 if r == root else None,) for r in range(n))
    return Collective("broadcast", "broadcast", n, inputs, outputs, aliases, root)


@_cached
def reduce(n: int, root: int = 0) -> Collective:
    _check_n("reduce", n)
    _check_root("reduce", n, root)
    inputs = tuple((r,) for r in range(n))
    outputs = tuple((frozenset(range(n)),) if r == root else () for r in range(n))
    aliases = tuple((0,) if r == root else () for r in range(n))
    return Collective("reduce", "reduce", n, inputs, outputs, aliases, root)


@_cached
def gather(n: int, root: int = 0) -> Collective:
    _check_n("gather", n)
    _check_root("gather", n, root)
    inputs = tuple((r,) for r in range(n))
    outputs = tuple(
        tuple(frozenset((q,)) for q in range(n)) if r == root else () for r in range(n)
    )
    aliases = tuple(
        tuple(0 if q == r else None for q in range(n)) if r == root else () for r in range(n)
    )
    return Collective("gather", "gather", n, inputs, outputs, aliases, root)


@_cached
def scatter(n: int, root: int = 0) -> Collective:
    _check_n("scatter", n)
    _check_root("scatter", n, root)
    inputs = tuple(tuple(range(n)) if r == root else () for r in range(n))
    outputs = tuple((frozenset((r,)),) for r in range(n))
    aliases = tuple((root,) if r == root else (None,) for r in range(n))
    return Collective("scatter", "scatter", n, inputs, outputs, aliases, root)


_BUILDERS = {
    "allgather": allgather,
    "reducescatter": reducescatter,
    "allreduce": allreduce,
    "alltoall": alltoall,
    "broadcast": broadcast,
    "reduce": reduce,
    "gather": gather,
    "scatter": scatter,
}

_SPELLINGS = {"reduce_scatter": "reducescatter", "reduce-scatter": "reducescatter", "all_gather": "allgather",
              "all-gather": "allgather", "all_reduce": "allreduce", "all-reduce": "allreduce",
              "all_to_all": "alltoall", "all-to-all": "alltoall"}


def _derived(base: Collective, inputs, outputs, aliases, in_place, chunk_factor: int) -> Collective:
    """A Collective with ``base``'s name, kind, ranks and root and these tables, built without
    ``__post_init__``'s checks: for tables derived from a checked collective by a transformation
    that keeps them valid (``Collective.chunk_up``)."""
    out = object.__new__(Collective)
    for name, value in (("name", base.name), ("kind", base.kind), ("n_ranks", base.n_ranks), ("inputs", inputs),
                        ("outputs", outputs), ("aliases", aliases), ("root", base.root),
                        ("chunk_factor", chunk_factor), ("in_place_aliases", in_place), ("_chunked", {})):
        object.__setattr__(out, name, value)
    return out


def builtin(kind: str, n: int, root: int | None = None, chunks: int = 1) -> Collective:
    """A built-in collective by name; rooted kinds take ``root`` (default 0). The last few are
    kept: solvers that try many pipeline shapes ask for the same ones again."""
    validate.text(kind, "collective", error=CollectiveError)
    kind = _SPELLINGS.get(kind, kind)
    if kind not in _BUILDERS:
        raise CollectiveError(f"unknown collective {kind!r}; known: {', '.join(BUILTIN_KINDS)}")
    if kind in ROOTED_KINDS:
        root = 0 if root is None else root
    elif root is not None:
        raise CollectiveError(f"{kind} has no root (only {', '.join(ROOTED_KINDS)} do)")
    check_size(kind, n, chunks)
    if all(type(x) is int for x in (n, root, chunks) if x is not None):  # hashable, and what callers pass
        return _recent(kind, n, root, chunks)
    return _build(kind, n, root).chunk_up(chunks)


@lru_cache(maxsize=8)
def _recent(kind: str, n: int, root: int | None, chunks: int) -> Collective:
    return _build(kind, n, root).chunk_up(chunks)


def _build(kind: str, n: int, root: int | None) -> Collective:
    return _BUILDERS[kind](n, root) if kind in ROOTED_KINDS else _BUILDERS[kind](n)


def custom(
    name: str,
    n_ranks: int,
    pre: Iterable[tuple[int, int]],
    post: Iterable[tuple[int | Iterable[int], int]],
) -> Collective:
    """A collective from SCCL-style conditions.

    ``pre``: (chunk, rank) pairs, the chunk starts on the rank (input slots in the order given).
    ``post``: (chunks, rank) pairs, the rank must end with the sum of ``chunks`` (one id or a
    set) in an output slot (output slots in the order given). An output slot aliases an input
    slot of the same rank holding one of its chunks, so a chunk that stays put costs nothing.
    """
    _check_n(name, n_ranks)
    inputs: list[list[int]] = [[] for _ in range(n_ranks)]
    for c, r in pre:
        if not 0 <= r < n_ranks:
            raise CollectiveError(f"collective {name!r}: precondition puts chunk {c} on rank {r}, not in 0..{n_ranks - 1}")
        if c in inputs[r]:
            raise CollectiveError(f"collective {name!r}: precondition puts chunk {c} on rank {r} twice")
        inputs[r].append(c)
    outputs: list[list[frozenset[int]]] = [[] for _ in range(n_ranks)]
    for chunks, r in post:
        if not 0 <= r < n_ranks:
            raise CollectiveError(f"collective {name!r}: postcondition names rank {r}, not in 0..{n_ranks - 1}")
        need = frozenset((chunks,)) if isinstance(chunks, int) else frozenset(chunks)
        if need in outputs[r]:
            raise CollectiveError(f"collective {name!r}: postcondition asks rank {r} for {sorted(need)} twice")
        outputs[r].append(need)
    aliases: list[tuple[int | None, ...]] = []
    for r in range(n_ranks):
        used: set[int] = set()
        row: list[int | None] = []
        for need in outputs[r]:
            pick = None
            for i, c in enumerate(inputs[r]):
                if c in need and i not in used:
                    pick = i
                    break
            if pick is not None:
                used.add(pick)
            row.append(pick)
        aliases.append(tuple(row))
    return Collective(
        name,
        "custom",
        n_ranks,
        tuple(tuple(x) for x in inputs),
        tuple(tuple(x) for x in outputs),
        tuple(aliases),
    )



# ---------------------------------------------------------------------- multi-root
# Rooted collectives with several roots R = (r_0, ..., r_{k-1}), as custom collectives any exact
# solver takes:
#
# * broadcast: root r_i holds buffer i; every rank ends with all k buffers (output slot i). A
#   broadcast of one buffer that several roots already hold is ``replicated_broadcast``.
# * gather: every rank's buffer ends on every root (output slot q of a root = rank q's buffer).
# * scatter: root r_i holds n pieces; rank q ends with piece q of every root (output slot i).
# * reduce: every root ends with the sum of all ranks' buffers.
#
# Chunk ids: broadcast and gather number buffers by root / rank; scatter piece q of root i is
# i x n + q; reduce's chunk q is rank q's buffer. ``chunks`` splits every slot further.
MULTI_ROOT_KINDS = ("broadcast", "gather", "scatter", "reduce")


def _check_roots(n_ranks: int, roots: tuple[int, ...]) -> None:
    for r in roots:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n_ranks:
            raise CollectiveError(f"root {r!r} is not a rank in 0..{n_ranks - 1}")


def multi_root(kind: str, n_ranks: int, roots: Sequence[int], chunks: int = 1) -> Collective:
    """The ``kind`` collective (one of MULTI_ROOT_KINDS) with several roots, as a custom
    collective named ``KIND-roots-R0-R1-...`` (see the comment above for its chunks)."""
    roots = validate.sequence(roots, f"multi-root {kind!r}: roots", error=CollectiveError)
    validate.text(kind, "collective", error=CollectiveError)
    if kind not in MULTI_ROOT_KINDS:
        raise CollectiveError(f"multi-root {kind!r} is not defined; multi-root kinds: {', '.join(MULTI_ROOT_KINDS)}")
    if not roots:
        raise CollectiveError(f"multi-root {kind} needs at least one root")
    _check_n(f"multi-root {kind}", n_ranks)
    _check_roots(n_ranks, roots)
    if len(set(roots)) != len(roots):
        raise CollectiveError(f"roots {list(roots)} name a rank twice")
    n_roots = len(roots)
    slots = {"broadcast": n_roots * (1 + n_ranks), "gather": n_ranks * (1 + n_roots),
             "scatter": 2 * n_roots * n_ranks, "reduce": n_ranks + n_roots}[kind]
    if type(chunks) is int:
        _check_slots(f"multi-root {kind} on {n_ranks} ranks with {n_roots} roots"
                     + (f" and chunk factor {chunks}" if chunks != 1 else ""), slots * max(chunks, 1))
    name = f"{kind}-roots-{'-'.join(map(str, roots))}"
    ranks = range(n_ranks)
    pre: list[tuple[int, int]]
    post: list[tuple[int | frozenset[int], int]]
    if kind == "broadcast":
        pre = [(i, r) for i, r in enumerate(roots)]
        post = [(i, q) for q in ranks for i in range(len(roots))]
    elif kind == "gather":
        pre = [(q, q) for q in ranks]
        post = [(q, r) for r in roots for q in ranks]
    elif kind == "scatter":
        pre = [(i * n_ranks + q, r) for i, r in enumerate(roots) for q in ranks]
        post = [(i * n_ranks + q, q) for q in ranks for i in range(len(roots))]
    else:
        pre = [(q, q) for q in ranks]
        post = [(frozenset(ranks), r) for r in roots]
    return custom(name, n_ranks, pre, post).chunk_up(chunks)


def replicated_broadcast(n_ranks: int, roots: Sequence[int], chunks: int = 1) -> Collective:
    """One buffer that every root already holds, to every rank (any root may serve any rank)."""
    roots = validate.sequence(roots, "replicated broadcast: roots", error=CollectiveError)
    _check_n("replicated broadcast", n_ranks)
    _check_roots(n_ranks, roots)
    if not roots or len(set(roots)) != len(roots):
        raise CollectiveError(f"roots {list(roots)} must be distinct ranks, at least one")
    name = f"broadcast-replicated-{'-'.join(map(str, roots))}"
    return custom(name, n_ranks, [(0, r) for r in roots], [(0, q) for q in range(n_ranks)]).chunk_up(chunks)
