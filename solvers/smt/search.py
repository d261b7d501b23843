"""Exact searches over instances (steps S, rounds R, chunks C): one instance, least rounds, least
steps, and the Pareto frontier of steps (latency) against rounds per chunk (bandwidth).

Exactness: an instance is skipped only when a proof covers it - a lower bound (hop bound on
steps, rounds-per-chunk bound, R >= S), an unsat answer for a weaker instance of the same
(S, C) (rounds are "at most R", so unsat at R covers every R' <= R, and an unsat core without the
rounds literal covers every R), or domination by a frontier point already proven. Nothing rests
on SCCL's monotonic-feasibility assumption.

Incremental solving: one solver per (S, C); the rounds bound is an assumption literal, so the
solver keeps what it learned between bounds.

The Pareto search, for S = step bound, S+1, ...: among candidates (R, C) with C <= max chunks,
R >= max(S, ceil(C x bound)) and R/C below the best ratio found with fewer steps, in increasing
R/C (then C), the first satisfiable one is the frontier point for S (its C is the smallest that
reaches that ratio with S steps). It stops when the ratio reaches the rounds-per-chunk lower
bound, or when no candidate is left (the least R for each C only grows with S).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from ccl.core import interrupt, limits
from ccl.core.algorithm import Algorithm
from ccl.core.errors import InfeasibleError

from .base import SAT, UNKNOWN, UNSAT, Portfolio
from .formulation import Formulation

log = logging.getLogger("solvers.smt")


@dataclass(frozen=True)
class Check:
    """One solver call: the instance, its answer and what it cost."""

    steps: int
    rounds: int | None  # None: any number of rounds
    chunks: int
    status: str
    seconds: float
    build_seconds: float
    conflicts: int = 0

    def to_json(self) -> dict:
        return {"steps": self.steps, "rounds": self.rounds, "chunks": self.chunks, "status": self.status,
                "seconds": round(self.seconds, 4), "build_seconds": round(self.build_seconds, 4),
                "conflicts": self.conflicts}


@dataclass(frozen=True)
class Satisfiable:
    """z3 found a schedule for the instance."""

    algorithm: Algorithm


@dataclass(frozen=True)
class Unsatisfiable:
    """The instance has no schedule (z3's proof, or a lower bound). ``rounds_bound_used`` is
    False when the proof did not use the rounds bound: then no number of rounds helps."""

    rounds_bound_used: bool


# The answer of ``Search.decide``: a schedule, or a proof that there is none.
Decision = Satisfiable | Unsatisfiable


@dataclass(frozen=True)
class Point:
    """A schedule with its (S, R, C) and the seconds spent finding it (for a frontier point:
    every check made at its step count)."""

    steps: int
    rounds: int
    chunks: int
    algorithm: Algorithm
    seconds: float

    @property
    def rounds_per_chunk(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)


@dataclass
class Frontier:
    """Pareto-optimal points in increasing steps (decreasing rounds per chunk), the bounds the
    search started from, whether it reached the bandwidth bound, and every check it made."""

    points: list[Point]
    step_bound: int
    rounds_bound: Fraction
    rounds_bound_name: str
    max_chunks: int
    reached_bound: bool = False
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    complete: bool = True
    interrupted: bool = False  # Ctrl-C stopped the search (``ccl.core.interrupt``); ``complete`` is False

    def add(self, point: Point) -> bool:
        """Append a frontier point; True once it meets the rounds bound (the search is done)."""
        self.points.append(point)
        if point.rounds_per_chunk <= self.rounds_bound:
            self.reached_bound = True
        return self.reached_bound


class OutOfTime(Exception):
    """The deadline passed, or Ctrl-C asked to stop (``ccl.core.interrupt.requested()``), inside a
    search (turned into SolverTimeout or Interrupted by the caller)."""


class Search:
    def __init__(self, formulation: Formulation, *, time_limit: float | None = None,
                 progress: Callable[[str], None] | None = None, max_steps: int | None = None,
                 conflicts: int | None = None) -> None:
        self.f = formulation
        self.start = time.monotonic()
        self.deadline = interrupt.deadline(time_limit)  # from the driver's clock: building counts
        # the SAT conflicts the whole search may spend (None: no cap): a budget of work that
        # stops the search at the same point on every machine, unlike the time limit
        self.conflicts_left = conflicts
        self.out_of_work = False
        self.progress = progress or log.info
        self.checks: list[Check] = []
        self._encodings: dict[tuple[int, int, bool], Portfolio] = {}
        self.max_steps = max_steps if max_steps is not None else self.f.step_bound() + 2 * self.f.network.n_ranks + 2

    # ------------------------------------------------------------------ bounds
    def min_rounds(self, steps: int, chunks: int) -> int:
        bound, _ = self.f.rounds_bound()
        return max(steps, math.ceil(bound * chunks))

    def infeasible_by_bound(self, steps: int, rounds: int | None, chunks: int) -> InfeasibleError | None:
        sb = self.f.step_bound()
        if steps < sb:
            return InfeasibleError(
                f"{self.f.name} needs at least {sb} steps (a chunk crosses one link per step), asked for {steps}",
                bound="hop bound")
        if rounds is not None and rounds < steps:
            return InfeasibleError(f"{rounds} rounds cannot fill {steps} steps (every step takes at least one round)",
                                   bound="rounds >= steps")
        if rounds is not None:
            bound, name = self.f.rounds_bound()
            if Fraction(rounds, chunks) < bound:
                return InfeasibleError(
                    f"{self.f.name} with {chunks} chunk(s) needs at least {math.ceil(bound * chunks)} rounds "
                    f"({bound} rounds per chunk: {name}), asked for {rounds}", bound=f"rounds per chunk ({name})")
        return None

    # ------------------------------------------------------------------ one instance
    def _encoding(self, steps: int, chunks: int, bounded: int | None) -> Portfolio:
        """The (S, C) solvers. ``bounded``: the largest total rounds they will be asked about
        (their extra-round bits stop there); None: capacity never binds (any rounds)."""
        key = (steps, chunks, bounded is None)
        enc = self._encodings.get(key)
        if enc is None:  # the model's size checked before it is built, for every step count tried
            size = self.f.collective.n_chunks * chunks * max(1, len(self.f.network.links)) * steps
            limits.SMT_VARS.check(size, f"an exact model of {self.f.name} with {steps} steps and chunk factor "
                                        f"{chunks} is too large")
        need = None if bounded is None else max(0, bounded - steps)
        if enc is None or (need is not None and enc.encodings[0].max_extra is not None
                           and enc.encodings[0].max_extra < need):
            enc = Portfolio(lambda i, seed: self.f.encode(steps, chunks, need, seed, symmetry=i % 2 == 1))
            self._encodings[key] = enc
        return enc

    def drop(self, steps: int) -> None:
        """Forget the solvers of one step count (the Pareto search moved past it)."""
        for key in [k for k in self._encodings if k[0] == steps]:
            del self._encodings[key]

    def decide(self, steps: int, rounds: int | None, chunks: int, *, budget: int | None = None) -> Decision:
        """Is there a schedule with S steps, at most R rounds (None: any) and C chunks?
        ``Satisfiable`` with one, or ``Unsatisfiable`` when z3 proves there is none. ``budget``:
        the largest R this (S, C) solver will be asked about (None: unbounded). Raises OutOfTime
        at the deadline (or on Ctrl-C), before building a new encoding when it has passed."""
        if interrupt.stop_due(self.deadline) or (self.conflicts_left is not None and self.conflicts_left <= 0):
            self.out_of_work = self.conflicts_left is not None and self.conflicts_left <= 0
            raise OutOfTime(f"S={steps} R={'any' if rounds is None else rounds} C={chunks}")
        enc = self._encoding(steps, chunks, budget)
        answer = enc.check(rounds, self.deadline, self.conflicts_left)
        build = enc.take_build_seconds()  # charged once
        conflicts = int(answer.stats.get("sat conflicts", answer.stats.get("conflicts", 0)))
        if self.conflicts_left is not None:
            self.conflicts_left -= max(1, conflicts)
            self.out_of_work = answer.status == UNKNOWN and self.conflicts_left <= 0
        self.checks.append(Check(steps, rounds, chunks, answer.status, answer.seconds, build, conflicts))
        what = f"S={steps} R={'any' if rounds is None else rounds} C={chunks}"
        self.progress(f"{what}: {answer.status} in {answer.seconds:.2f} s (build {build:.2f} s)")
        if answer.status == UNKNOWN:
            raise OutOfTime(what)
        if answer.status == UNSAT:
            return Unsatisfiable(rounds_bound_used=answer.core == ("rounds",))
        if answer.status != SAT:  # pragma: no cover - CheckAnswer has three statuses
            raise RuntimeError(f"z3 check of {what} answered {answer.status!r}")
        algorithm = self.f.algorithm(enc.winner, steps, chunks)
        total = sum(algorithm.rounds or ())
        if rounds is not None and total > rounds:  # never trust a solver: z3 returned a bad model
            raise RuntimeError(f"z3 returned a schedule with {total} rounds for a bound of {rounds} ({what})")
        return Satisfiable(algorithm)

    # ------------------------------------------------------------------ searches
    def instance(self, steps: int, rounds: int, chunks: int) -> Point:
        """The schedule of one instance, or InfeasibleError (a bound or z3's proof)."""
        err = self.infeasible_by_bound(steps, rounds, chunks)
        if err is not None:
            raise err
        t0 = time.monotonic()
        decision = self.decide(steps, rounds, chunks, budget=rounds)
        if isinstance(decision, Unsatisfiable):
            raise InfeasibleError(
                f"z3 proved that {self.f.name} has no schedule with {steps} steps, at most {rounds} rounds and "
                f"{chunks} chunk(s)", bound="z3 proof (unsat)")
        alg = decision.algorithm
        return Point(steps, alg.total_rounds, chunks, alg, time.monotonic() - t0)

    def least_rounds(self, steps: int, chunks: int, *, best: Point | None = None) -> Point:
        """Fewest rounds with exactly S steps (SAT-UNSAT descent from a first schedule)."""
        err = self.infeasible_by_bound(steps, None, chunks)
        if err is not None:
            raise err
        t0 = time.monotonic()
        floor = self.min_rounds(steps, chunks)
        if best is None:
            decision = self.decide(steps, None, chunks)
            if isinstance(decision, Unsatisfiable):
                raise InfeasibleError(
                    f"z3 proved that {self.f.name} has no schedule with {steps} steps and {chunks} chunk(s), "
                    "with any number of rounds", bound="z3 proof (unsat)")
            best = Point(steps, decision.algorithm.total_rounds, chunks, decision.algorithm, 0.0)
        try:
            while best.rounds > floor:
                decision = self.decide(steps, best.rounds - 1, chunks, budget=best.rounds - 1)
                if isinstance(decision, Unsatisfiable):
                    break
                best = Point(steps, decision.algorithm.total_rounds, chunks, decision.algorithm, 0.0)
        except OutOfTime:
            raise Partial(best) from None
        return Point(best.steps, best.rounds, chunks, best.algorithm, time.monotonic() - t0)

    def least_steps(self, chunks: int, rounds: int | None = None) -> Point:
        """Fewest steps (with at most R rounds when given), then fewest rounds at that step count."""
        t0 = time.monotonic()
        steps = max(1, self.f.step_bound())
        while True:
            if rounds is not None and steps > rounds:
                raise InfeasibleError(
                    f"z3 proved that {self.f.name} has no schedule with at most {rounds} rounds and {chunks} chunk(s) "
                    f"(tried {self.f.step_bound()} to {rounds} steps)", bound="z3 proof (unsat)")
            if steps > self.max_steps:
                raise InfeasibleError(
                    f"{self.f.name} has no schedule with at most {self.max_steps} steps (raise max_steps to look "
                    "further)", bound="z3 proof (unsat)")
            if rounds is None or self.infeasible_by_bound(steps, rounds, chunks) is None:
                decision = self.decide(steps, rounds, chunks, budget=rounds)
                if isinstance(decision, Satisfiable):
                    first = Point(steps, decision.algorithm.total_rounds, chunks, decision.algorithm, 0.0)
                    point = self.least_rounds(steps, chunks, best=first)
                    return Point(point.steps, point.rounds, chunks, point.algorithm, time.monotonic() - t0)
            steps += 1

    def pareto(self, max_chunks: int) -> Frontier:
        t0 = time.monotonic()
        bound, bound_name = self.f.rounds_bound()
        sb = max(1, self.f.step_bound())
        frontier = Frontier([], sb, bound, bound_name, max_chunks, checks=self.checks)
        if self.max_steps < sb:
            raise InfeasibleError(f"{self.f.name} needs at least {sb} steps, more than the limit of {self.max_steps}",
                                  bound="hop bound")
        best: Fraction | None = None
        steps = sb
        try:
            while steps <= self.max_steps:
                if best is not None and not any(Fraction(self.min_rounds(steps, c), c) < best
                                                for c in range(1, max_chunks + 1)):
                    break  # no (R, C) with S or more steps can beat the best: R >= S, R >= C x bound
                if isinstance(self.decide(steps, None, 1), Unsatisfiable):
                    self.progress(f"S={steps}: no schedule with any rounds")
                    self.drop(steps)
                    steps += 1
                    continue
                point = self._best_at(steps, max_chunks, best)
                self.drop(steps)
                if point is not None:
                    best = point.rounds_per_chunk
                    self.progress(f"frontier point: {steps} steps, {point.rounds} rounds, {point.chunks} chunk(s) "
                                  f"({best} rounds per chunk)")
                    if frontier.add(point):
                        break
                steps += 1
        except OutOfTime:
            frontier.complete = False
            frontier.interrupted = interrupt.requested()
        frontier.seconds = time.monotonic() - t0
        return frontier

    def _best_at(self, steps: int, max_chunks: int, best: Fraction | None) -> Point | None:
        """The least R/C (then least C) with S steps below ``best``, or None. Its ``seconds``
        cover every check made at S."""
        t0 = time.monotonic()
        heap = [(Fraction(self.min_rounds(steps, c), c), c, self.min_rounds(steps, c)) for c in range(1, max_chunks + 1)]
        heapq.heapify(heap)
        dead: set[int] = set()
        while heap:
            ratio, c, r = heapq.heappop(heap)
            if best is not None and ratio >= best:
                return None
            if c in dead:
                continue
            ceiling = None if best is None else math.ceil(best * c) - 1
            decision = self.decide(steps, r, c, budget=ceiling)
            if isinstance(decision, Satisfiable):
                return Point(steps, decision.algorithm.total_rounds, c, decision.algorithm, time.monotonic() - t0)
            if not decision.rounds_bound_used:  # no number of rounds helps this C
                dead.add(c)
                continue
            heapq.heappush(heap, (Fraction(r + 1, c), c, r + 1))
        return None


class Partial(OutOfTime):
    """Out of time in a descent, with the best schedule found so far."""

    def __init__(self, best: Point) -> None:
        super().__init__("descent")
        self.best = best
