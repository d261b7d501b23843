"""Allreduce as reducescatter then allgather, each phase synthesized exactly.

The buffer of every rank is split into n blocks of C pieces (``allreduce.chunk_up(n x C)``).
Phase 1 is a reducescatter schedule (the dual formulation): block b is summed onto rank b.
Phase 2 is an allgather schedule: every rank's summed block is copied to every other rank. Both
work in the output buffer, which starts as a copy of the input (the allreduce's aliases): phase 1
adds partial sums into it, phase 2 overwrites the other blocks with the final ones.

Exact within compositions: a composed schedule with S steps and R rounds exists iff some split
S = S1 + S2 has reducescatter's least rounds at S1 plus allgather's at S2 within R. The bound of
a composition is the sum of the phases' bounds.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

from ccl.core import interrupt
from ccl.core.algorithm import Algorithm, Transfer
from ccl.core.collective import Collective, builtin
from ccl.core.errors import CollectiveError, InfeasibleError
from ccl.core.topology import Topology

from .formulation import formulation
from .search import Frontier, OutOfTime, Point, Search, Unsatisfiable


class ComposedSearch:
    def __init__(self, topology: Topology, collective: Collective, *, time_limit: float | None = None,
                 progress=None, conflicts: int | None = None, **options) -> None:
        if collective.kind != "allreduce" or collective.chunk_factor != 1:
            raise CollectiveError("method compose builds allreduce from reducescatter + allgather; it takes the "
                                  f"built-in allreduce (chunks come from the request), not {collective}")
        n = topology.n_ranks
        self.topology = topology
        self.n = n
        self.rs = Search(formulation(topology, builtin("reducescatter", n), "dual", **options),
                         time_limit=time_limit, progress=progress, conflicts=conflicts)
        self.ag = Search(formulation(topology, builtin("allgather", n), "routing", **options),
                         time_limit=time_limit, progress=progress, conflicts=conflicts)
        self.ag.deadline = self.rs.deadline
        self.checks = self.rs.checks
        self.ag.checks = self.rs.checks  # one log for both phases
        self._least: dict[tuple[str, int, int], Point | Unsatisfiable] = {}
        self.name = f"allreduce (reducescatter + allgather) on {topology.name}"

    def step_bound(self) -> int:
        return self.rs.f.step_bound() + self.ag.f.step_bound()

    def rounds_bound(self) -> tuple[Fraction, str]:
        (a, na), (b, nb) = self.rs.f.rounds_bound(), self.ag.f.rounds_bound()
        return a + b, f"reducescatter ({na}) + allgather ({nb})"

    def _phase(self, which: str, steps: int, chunks: int) -> Point | Unsatisfiable:
        """The fewest-rounds schedule of one phase with S steps, or Unsatisfiable when no number
        of rounds gives one."""
        key = (which, steps, chunks)
        if key not in self._least:
            search = self.rs if which == "rs" else self.ag
            try:
                self._least[key] = search.least_rounds(steps, chunks)
            except InfeasibleError:
                self._least[key] = Unsatisfiable(rounds_bound_used=False)
        return self._least[key]

    def least_rounds(self, steps: int, chunks: int, rounds: int | None = None) -> Point:
        """Fewest rounds with S steps (stopping at the first split within ``rounds`` if given)."""
        best: tuple[int, Point, Point] | None = None
        lo_rs, lo_ag = self.rs.f.step_bound(), self.ag.f.step_bound()
        for s1 in range(max(1, lo_rs), steps - max(1, lo_ag) + 1):
            a = self._phase("rs", s1, chunks)
            if isinstance(a, Unsatisfiable):
                continue
            b = self._phase("ag", steps - s1, chunks)
            if isinstance(b, Unsatisfiable):
                continue
            total = a.rounds + b.rounds
            if best is None or total < best[0]:
                best = (total, a, b)
            if rounds is not None and total <= rounds:
                break
        if best is None or (rounds is not None and best[0] > rounds):
            what = f"at most {rounds} rounds" if rounds is not None else "any number of rounds"
            raise InfeasibleError(f"z3 proved that no reducescatter + allgather composition on {self.topology.name} "
                                  f"has {steps} steps with {what} and {chunks} chunk(s) per block",
                                  bound="z3 proof (unsat)")
        total, a, b = best
        alg = compose(self.topology, a.algorithm, b.algorithm, chunks)
        return Point(steps, total, chunks, alg, a.seconds + b.seconds)

    def least_steps(self, chunks: int, rounds: int | None = None) -> Point:
        if rounds is None:
            a = self.rs.least_steps(chunks)
            b = self.ag.least_steps(chunks)
            return Point(a.steps + b.steps, a.rounds + b.rounds, chunks,
                         compose(self.topology, a.algorithm, b.algorithm, chunks), a.seconds + b.seconds)
        for steps in range(self.step_bound(), rounds + 1):
            try:
                return self.least_rounds(steps, chunks, rounds)
            except InfeasibleError:
                continue
        raise InfeasibleError(f"no reducescatter + allgather composition on {self.topology.name} fits in {rounds} "
                              f"rounds with {chunks} chunk(s) per block", bound="z3 proof (unsat)")

    def instance(self, steps: int, rounds: int, chunks: int) -> Point:
        if steps < self.step_bound():
            raise InfeasibleError(f"a composition needs at least {self.step_bound()} steps (hop bounds of both phases)",
                                  bound="hop bound")
        bound, name = self.rounds_bound()
        if Fraction(rounds, chunks) < bound:
            raise InfeasibleError(f"a composition with {chunks} chunk(s) per block needs at least "
                                  f"{math.ceil(bound * chunks)} rounds ({name})", bound=f"rounds per chunk ({name})")
        return self.least_rounds(steps, chunks, rounds)

    def pareto(self, max_chunks: int) -> Frontier:
        """The frontier of compositions: for each S, the least (R1 + R2) / C over splits and C."""
        start = time.monotonic()
        bound, name = self.rounds_bound()
        frontier = Frontier([], self.step_bound(), bound, name, max_chunks, checks=self.checks)
        best: Fraction | None = None
        steps = self.step_bound()
        limit = self.step_bound() + 2 * self.n + 2
        try:
            while steps <= limit and (best is None or Fraction(steps, max_chunks) < best):
                point = None
                for c in range(1, max_chunks + 1):
                    try:
                        p = self.least_rounds(steps, c)
                    except InfeasibleError:
                        continue
                    if (best is None or p.rounds_per_chunk < best) and (
                            point is None or p.rounds_per_chunk < point.rounds_per_chunk):
                        point = p
                if point is not None:
                    best = point.rounds_per_chunk
                    if frontier.add(point):
                        break
                steps += 1
        except OutOfTime:
            frontier.complete = False
            frontier.interrupted = interrupt.requested()
        frontier.seconds = time.monotonic() - start
        return frontier


def compose(topology: Topology, rs: Algorithm, ag: Algorithm, chunks: int) -> Algorithm:
    """The allreduce of a reducescatter schedule followed by an allgather schedule (both with
    ``chunks`` pieces per block) on the output buffer (see the module docstring)."""
    n = topology.n_ranks
    coll = builtin("allreduce", n).chunk_up(n * chunks)
    out = []
    for t in rs.transfers:
        # reducescatter: input slot i of a rank is its contribution to block i // chunks; the
        # owner's output slot j is piece j of its own block.
        src = t.src_index if t.src_buf == "input" else t.src * chunks + t.src_index
        dst = t.dst_index if t.dst_buf == "input" else t.dst * chunks + t.dst_index
        out.append(Transfer(t.step, t.src, "output", src, t.dst, "output", dst, t.count, t.op))
    shift = rs.n_steps
    for t in ag.transfers:
        # allgather: input slot j of rank r is piece j of block r, output slot k is slot k.
        src = t.src * chunks + t.src_index if t.src_buf == "input" else t.src_index
        dst = t.dst * chunks + t.dst_index if t.dst_buf == "input" else t.dst_index
        out.append(Transfer(t.step + shift, t.src, "output", src, t.dst, "output", dst, t.count, t.op))
    rounds = tuple(rs.rounds or (1,) * rs.n_steps) + tuple(ag.rounds or (1,) * ag.n_steps)
    out.sort()
    return Algorithm(f"smt-allreduce-compose-{topology.name}-c{chunks}", coll, topology, tuple(out), rounds, "smt")
