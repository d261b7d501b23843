"""A collective on a topology as a family of exact instances (steps S, rounds R, chunks C).

Three formulations, each with its bounds, its encoding and its way back to an Algorithm:

* ``RoutingFormulation`` - non-reducing collectives (allgather, alltoall, broadcast, gather,
  scatter, custom copies, multi-root ones);
* ``DualFormulation`` - reduce, reducescatter and custom sums with one owner each: the routing
  problem of the dual (every sum's owner "broadcasts" to its contributors) on the reversed
  topology, run backwards in time with copies turned into reduces. Partial sums accumulate in
  the contributors' input slots (the input buffer may be written) and in the owner's output slot.
* ``CombiningFormulation`` - any reducing collective (allreduce, custom sums) through the
  direct combining encoding.

``C`` is the factor the problem's collective is split by (``Collective.chunk_up``); rounds per
chunk are R / C in units of the problem's collective slots.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from fractions import Fraction

from ccl.core.algorithm import Algorithm, Transfer
from ccl.core.collective import Collective
from ccl.core.errors import CollectiveError
from ccl.core.topology import Topology

from ..bounds.steps import step_bound
from .base import Encoding
from .bounds import rounds_lower_bound
from .combining import CombiningEncoding
from .lower import combining_algorithm, routing_algorithm, step_rounds
from .problems import Network, RoutingSpec, combining_spec, routing_spec
from .routing import RoutingEncoding


class Formulation(ABC):
    """One way of encoding a collective for z3; subclasses give ``encode`` and ``algorithm``."""

    method = ""

    def __init__(self, topology: Topology, collective: Collective, *, scratch: int | None = None,
                 symmetry: bool = True) -> None:
        self.topology = topology
        self.collective = collective
        self.network = Network.of(topology)
        self.scratch = scratch
        self.symmetry = symmetry
        self._steps = step_bound(topology, collective)
        self._rounds = rounds_lower_bound(topology, collective)

    @property
    def name(self) -> str:
        return f"{self.collective.name} on {self.topology.name}"

    def step_bound(self) -> int:
        return self._steps

    def rounds_bound(self) -> tuple[Fraction, str]:
        """Rounds per chunk every schedule needs, and the bound's name."""
        return self._rounds

    def chunked(self, chunks: int) -> Collective:
        return self.collective.chunk_up(chunks)

    @abstractmethod
    def encode(self, steps: int, chunks: int, max_extra: int | None, seed: int = 0,
               symmetry: bool = True) -> Encoding:
        """The encoding of (S, C); ``symmetry`` is honoured only when the formulation allows it."""

    @abstractmethod
    def algorithm(self, encoding: Encoding, steps: int, chunks: int) -> Algorithm:
        """The schedule a satisfied ``encoding`` describes."""

    def label(self, steps: int, chunks: int) -> str:
        return f"smt-{self.collective.name}-{self.topology.name}-s{steps}-c{chunks}"


class RoutingFormulation(Formulation):
    method = "routing"

    def _spec(self, chunks: int) -> RoutingSpec:
        return routing_spec(self.network, self.chunked(chunks))

    def encode(self, steps: int, chunks: int, max_extra: int | None, seed: int = 0,
               symmetry: bool = True) -> RoutingEncoding:
        return RoutingEncoding(self._spec(chunks), steps, max_extra, scratch=self.scratch,
                               symmetry_breaking=self.symmetry and symmetry, seed=seed)

    def algorithm(self, encoding: Encoding, steps: int, chunks: int) -> Algorithm:
        assert isinstance(encoding, RoutingEncoding)
        sends = encoding.sends()
        rounds = step_rounds(self.network, steps, [(t, u, v) for t, _, u, v in sends])
        return routing_algorithm(self.topology, self.chunked(chunks), sends, rounds, self.label(steps, chunks))


class CombiningFormulation(Formulation):
    method = "combining"

    def encode(self, steps: int, chunks: int, max_extra: int | None, seed: int = 0,
               symmetry: bool = True) -> CombiningEncoding:
        spec = combining_spec(self.network, self.chunked(chunks))
        return CombiningEncoding(spec, steps, max_extra, scratch=self.scratch,
                                 symmetry_breaking=self.symmetry and symmetry, seed=seed)

    def algorithm(self, encoding: Encoding, steps: int, chunks: int) -> Algorithm:
        assert isinstance(encoding, CombiningEncoding)
        moves = encoding.chosen()
        rounds = step_rounds(self.network, steps, [(m.step, m.src, m.dst) for m in moves])
        return combining_algorithm(self.topology, self.chunked(chunks), encoding.places, encoding.raw, moves,
                                   rounds, self.label(steps, chunks))


class DualFormulation(Formulation):
    """Reducing collectives whose every sum has one owner, whose owner's output slot starts with
    the owner's own contribution, and whose contributors hold one chunk of the sum each."""

    method = "dual"

    def __init__(self, topology: Topology, collective: Collective, **kw) -> None:
        super().__init__(topology, collective, **kw)
        reason = dual_obstacle(collective)
        if reason is not None:
            raise CollectiveError(f"collective {collective.name!r} has no dual routing problem: {reason}")
        self.reversed = self.network.reversed()

    def _dual(self, chunks: int) -> tuple[RoutingSpec, list[tuple[int, int, dict[int, int]]]]:
        """The dual routing problem and, per dual chunk, (owner, output slot, rank -> input slot
        of its contribution)."""
        coll = self.chunked(chunks)
        origins = coll.origins()
        info: list[tuple[int, int, dict[int, int]]] = []
        spec_origins: dict[int, frozenset[int]] = {}
        dests: dict[int, frozenset[int]] = {}
        allowed: dict[int, frozenset[int]] = {}
        for r, slots in enumerate(coll.outputs):
            for j, need in enumerate(slots):
                d = len(info)
                slot_of = {origins[c][0][0]: origins[c][0][1] for c in need}
                info.append((r, j, slot_of))
                spec_origins[d] = frozenset((r,))
                dests[d] = frozenset(slot_of) - {r}
                allowed[d] = frozenset(slot_of) | {r}
        spec = RoutingSpec(self.reversed, tuple(range(len(info))), spec_origins, dests, allowed)
        return spec, info

    def encode(self, steps: int, chunks: int, max_extra: int | None, seed: int = 0,
               symmetry: bool = True) -> RoutingEncoding:
        spec, _ = self._dual(chunks)
        return RoutingEncoding(spec, steps, max_extra, scratch=self.scratch,
                               symmetry_breaking=self.symmetry and symmetry, seed=seed)

    def algorithm(self, encoding: Encoding, steps: int, chunks: int) -> Algorithm:
        assert isinstance(encoding, RoutingEncoding)
        _, info = self._dual(chunks)
        transfers = []
        moves = []
        for t, d, u, v in encoding.sends():
            # Dual: d moves u -> v on the reversed links in step t. Here: v's partial sum is added
            # into u's accumulator in step S-1-t over the original link v -> u.
            owner, j, slot_of = info[d]
            step = steps - 1 - t
            dst = ("output", j) if u == owner else ("input", slot_of[u])
            transfers.append(Transfer(step, v, "input", slot_of[v], u, dst[0], dst[1], 1, "reduce"))
            moves.append((step, v, u))
        rounds = step_rounds(self.network, steps, moves)
        transfers.sort()
        return Algorithm(self.label(steps, chunks), self.chunked(chunks), self.topology, tuple(transfers),
                         rounds, "smt")


def dual_obstacle(collective: Collective) -> str | None:
    """Why the dual formulation does not apply, or None when it does."""
    if not collective.is_reducing:
        return "it does not reduce"
    origins = collective.origins()
    used: set[int] = set()
    for r, slots in enumerate(collective.outputs):
        for j, need in enumerate(slots):
            holders = []
            for c in need:
                if len(origins[c]) != 1:
                    return f"{collective.describe_chunk(c)} starts on several ranks"
                if c in used:
                    return f"{collective.describe_chunk(c)} is part of two sums"
                used.add(c)
                holders.append(origins[c][0][0])
            if len(set(holders)) != len(holders):
                return f"rank {r} output slot {j} adds two chunks that start on one rank"
            alias = collective.aliases[r][j]
            if r not in holders or alias is None or collective.inputs[r][alias] not in need:
                return f"rank {r} output slot {j} does not start with the rank's own contribution"
    return None


def formulation(topology: Topology, collective: Collective, method: str = "auto", **kw) -> Formulation:
    """The formulation for ``method``: auto (routing for copies, dual when it applies, else
    combining), routing, dual or combining."""
    if method == "auto":
        if not collective.is_reducing:
            method = "routing"
        elif dual_obstacle(collective) is None:
            method = "dual"
        else:
            method = "combining"
    classes = {"routing": RoutingFormulation, "dual": DualFormulation, "combining": CombiningFormulation}
    if method not in classes:
        raise CollectiveError(f"unknown smt method {method!r}; known: auto, {', '.join(classes)}, compose")
    if method == "routing" and collective.is_reducing:
        raise CollectiveError(f"collective {collective.name!r} reduces; use method dual, combining or compose")
    return classes[method](topology, collective, **kw)
