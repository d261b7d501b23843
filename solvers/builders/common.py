"""Helpers the templates share: the chunked collective a template works on and its slot layout."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from ccl.core.collective import Collective, builtin
from ccl.core.errors import CollectiveError
from ccl.core.problem import Problem

from .schedule import ScheduleBuilder, Slot


def pieces(problem: Problem) -> int:
    """Pieces per base slot the user asked for: the request's chunks times any chunking the
    problem's collective already has."""
    return problem.collective.chunk_factor * problem.request.chunks


def collective_for(problem: Problem, factor: int) -> Collective:
    """The problem's built-in collective split into ``factor`` slots per base slot."""
    coll = problem.collective
    if coll.kind == "custom":
        raise CollectiveError(f"collective {coll.name!r} is custom; templates implement the built-in collectives only")
    out = builtin(coll.kind, coll.n_ranks, coll.root, factor)
    return out if out.name == coll.name else replace(out, name=coll.name)


def builder(problem: Problem, factor: int, solver: str, label: str) -> tuple[ScheduleBuilder, Collective]:
    coll = collective_for(problem, factor)
    name = f"{label}-{coll.kind}-{problem.topology.name}"
    return ScheduleBuilder(problem.topology, coll, name, solver), coll


@lru_cache(maxsize=1 << 16)
def run(block: int, width: int, buffer: str = "output") -> tuple[Slot, ...]:
    """The ``width`` consecutive slots of base block ``block`` in ``buffer``."""
    return tuple((buffer, block * width + j) for j in range(width))
