"""Problem = Topology + Collective + Request: everything a solver needs, as one frozen value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import limits, validate
from .algorithm import Algorithm
from .collective import Collective
from .errors import CollectiveError, InputError
from .topology import Topology
from .units import MAX_SECONDS, MAX_SIZE
from .verify import VerificationResult

SWITCH_POLICIES = ("fewest", "most")


@dataclass(frozen=True)
class Sketch:
    """A human hint that narrows the search of sketch-guided solvers (TACCL-style MILP).

    * ``relays``: node-local ranks allowed to send or receive across nodes (None: all);
    * ``internode``: (local source, local destination) pairs allowed between nodes, e.g.
      ``((i, i) for i in range(8))`` keeps traffic on rails (None: all pairs);
    * ``switch_policy``: through a switch, prefer the ``fewest`` or the ``most`` distinct
      connections per rank;
    * ``symmetry``: rank rotations (r -> (r + k) mod n for each k) the schedule must be
      invariant under, e.g. the node size for rotational symmetry across nodes;
    * ``chunk_partition``: pieces each rank's part is split into (None: the request's chunks).
    """

    relays: tuple[int, ...] | None = None
    internode: tuple[tuple[int, int], ...] | None = None
    switch_policy: str = "fewest"
    symmetry: tuple[int, ...] = ()
    chunk_partition: int | None = None

    def __post_init__(self) -> None:
        for name in ("relays", "internode"):
            if getattr(self, name) is not None:
                validate.sequence(getattr(self, name), f"sketch {name}")
        symmetry = validate.sequence(self.symmetry, "sketch symmetry")
        if self.internode is not None and any(
                not isinstance(p, (tuple, list)) or len(p) != 2 or any(type(x) is not int for x in p)
                for p in self.internode):
            raise InputError(f"inter-node pairs must be pairs of node-local rank numbers, got "
                             f"{validate.show(self.internode)}")
        object.__setattr__(self, "symmetry", symmetry)
        if self.switch_policy not in SWITCH_POLICIES:
            raise InputError(f"switch policy must be one of {SWITCH_POLICIES}, got {self.switch_policy!r}")
        if self.relays is not None:
            if any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in self.relays):
                raise InputError(f"relay ranks must be node-local rank numbers >= 0, got {self.relays!r}")
            object.__setattr__(self, "relays", tuple(sorted(set(self.relays))))
        if self.internode is not None:
            pairs = tuple(sorted({(int(a), int(b)) for a, b in self.internode}))
            if any(a < 0 or b < 0 for a, b in pairs):
                raise InputError(f"inter-node pairs must be node-local rank numbers >= 0, got {self.internode!r}")
            object.__setattr__(self, "internode", pairs)
        if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.symmetry):
            raise InputError(f"symmetry rotations must be positive integers, got {self.symmetry!r}")
        object.__setattr__(self, "symmetry", tuple(sorted(set(self.symmetry))))
        if self.chunk_partition is not None and (
            isinstance(self.chunk_partition, bool) or not isinstance(self.chunk_partition, int) or self.chunk_partition < 1
        ):
            raise InputError(f"chunk partition must be a positive integer, got {self.chunk_partition!r}")


@dataclass(frozen=True)
class Request:
    """How to synthesize. ``chunks`` is the chunk factor the user asks for (a template may split
    further, e.g. ring allreduce uses n x chunks slots); ``steps``/``rounds`` bound exact
    solvers; ``size`` is the buffer size in bytes cost-aware solvers optimize for;
    ``time_limit`` is in seconds. ``options`` carries solver-specific settings by name."""

    solver: str = "ring"
    chunks: int = 1
    steps: int | None = None
    rounds: int | None = None
    size: int | None = None
    time_limit: float | None = None
    objective: str | None = None
    sketch: Sketch | None = None
    options: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.solver, str) or not self.solver:
            raise InputError(f"solver must be a name, got {self.solver!r}")
        for name in ("chunks", "steps", "rounds"):
            value = getattr(self, name)
            if value is None and name != "chunks":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {validate.show(value)}")
            validate.integer(value, name, least=1)  # and no larger than any real count
            if name != "chunks":
                limits.STEPS.check(value, f"the request's {name}")
        if self.size is not None:
            validate.integer(self.size, "size (bytes)", least=1, most=MAX_SIZE)
        if self.sketch is not None and not isinstance(self.sketch, Sketch):
            raise InputError(f"sketch must be a Sketch, got {type(self.sketch).__name__}")
        if self.time_limit is not None:
            limit = validate.number(self.time_limit, "time limit", positive=True)
            if limit > MAX_SECONDS:
                raise InputError(f"time limit {self.time_limit!r} s is over the limit of {MAX_SECONDS} s")
        if self.objective is not None:
            validate.text(self.objective, "objective")
        options = self.options.items() if isinstance(self.options, Mapping) else validate.sequence(
            self.options, "options (name, value) pairs")
        pairs = []
        for item in options:
            if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
                raise InputError(f"options must be (name, value) pairs, got {validate.show(item)}")
            pairs.append(tuple(item))
        try:
            object.__setattr__(self, "options", tuple(sorted(dict(pairs).items())))
        except TypeError:  # values that do not compare: keep the order given, last one per name
            object.__setattr__(self, "options", tuple(dict(pairs).items()))

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


@dataclass(frozen=True)
class Problem:
    topology: Topology
    collective: Collective
    request: Request = field(default_factory=Request)

    def __post_init__(self) -> None:
        validate.instance(self.topology, Topology, "problem topology")
        validate.instance(self.collective, Collective, "problem collective")
        validate.instance(self.request, Request, "problem request")
        if self.collective.n_ranks != self.topology.n_ranks:
            raise CollectiveError(
                f"collective {self.collective.name!r} has {self.collective.n_ranks} ranks but topology "
                f"{self.topology.name!r} has {self.topology.n_ranks}"
            )
        if self.request.chunks > 1:  # what the solvers will build, before any of them does
            self.collective.check_chunk_up(self.request.chunks)


SYNTHESIS_STATUSES = ("ok", "timeout", "interrupted")


@dataclass(frozen=True)
class SynthesisResult:
    """What synthesis produced: the verified schedule, its status ("ok", "timeout" when a
    time limit stopped the solver with a schedule in hand, or "interrupted" when Ctrl-C did), the solver's wall time, its
    optimality gap (None when it proved optimality or does not search), the verification, and
    the solver's own account (``details``: model sizes, candidates, bounds; JSON-able)."""

    algorithm: Algorithm
    status: str
    seconds: float
    gap: float | None
    verification: VerificationResult
    details: dict[str, Any] = field(default_factory=dict)
    # (channels, fuse, Program): the algorithm as the cost judge lowered it while the solver
    # searched, which the program stage reuses with the same options (not saved)
    lowered: tuple | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        validate.instance(self.algorithm, Algorithm, "synthesis result algorithm")
        validate.number(self.seconds, "synthesis result seconds", least=0)
        if self.gap is not None:
            validate.number(self.gap, "synthesis result gap", least=0)
        validate.instance(self.verification, VerificationResult, "synthesis result verification")
        validate.mapping(self.details, "synthesis result details")
        if self.status not in SYNTHESIS_STATUSES:
            raise InputError(f"synthesis status must be one of {SYNTHESIS_STATUSES}, got {self.status!r}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "synthesis_seconds": round(self.seconds, 6), "gap": self.gap}
        out.update(self.algorithm.summary())
        out["verified"] = True
        if self.details:
            out["details"] = self.details
        return out
