"""What every z3 encoding shares: the solver, per-step rounds, capacity constraints, checks.

The encodings are propositional logic with cardinality and pseudo-boolean constraints, solved by
z3's SAT core (logic QF_FD) with pseudo-boolean conflict analysis (``sat.pb.resolve=rounding``,
``sat.pb.lemma_format=pb``): the capacity constraints make these problems counting problems, and
cutting-plane lemmas prove and find tight schedules far faster than clause learning alone (see
benchmarks/smt_pareto.py). Formulas are written as SMT-LIB text and parsed by z3 in one call per
batch: building them through z3's Python API costs many times more time than the text.

Rounds: step t has ``1 + sum_k extra[t][k]`` rounds, the extra bits ordered
(``extra[t][k+1] -> extra[t][k]``). A link with L lanes carries at most L x rounds chunks in
a step. The total-rounds bound is an *assumption* literal, so one solver answers a whole series
of questions incrementally, and an unsat core tells whether the proof used it (if not, no number
of rounds helps).

Literals are strings: a variable name or ``(not name)``; Python booleans are constants.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import z3

from ccl.core import interrupt, limits
from ccl.core.errors import InputError, Z3Error

SAT, UNSAT, UNKNOWN = "sat", "unsat", "unknown"

# Settings every solver gets besides its seed (see the module docstring). z3's defaults for
# pseudo-boolean constraints are kept on purpose: with z3 5.4 on these encodings,
# ``sat.pb.solver=sorting`` returned models violating weighted constraints, and
# ``sat.pb.resolve=rounding`` with ``sat.pb.lemma_format=pb`` answered unsat on a satisfiable
# instance (DGX-1 allgather S=3 R=7 C=6, seed 2). Every schedule's rounds are recomputed from its
# transfers and checked against the bound, and every schedule is verified.
SOLVER_PARAMS: tuple[tuple[str, object], ...] = ()

# The portfolio (see ``Portfolio``): how many independently seeded solvers an instance may get
# and the conflict budget of the first round of checks (doubled every round).
WORKERS = 3
FIRST_BUDGET = 1000
BASE_SEED = 0  # the seeds are BASE_SEED, BASE_SEED + 1, ... (benchmarks vary it to sample runtimes)

Lit = str | bool


def memory_cap() -> int:
    """The memory z3 may take, in MiB, set as its ``memory_max_size`` before each parse and
    check: ``ccl.core.limits.SMT_MEMORY``, and no more than three quarters of what this process
    may still allocate (``ccl.core.limits.memory_available``), so z3 stops with an error of its
    own before the process runs out (where z3 would crash rather than fail)."""
    cap = limits.SMT_MEMORY.value
    free = limits.memory_available()
    if free is not None:
        cap = min(cap, max(64, (free * 3 // 4) >> 20))
    z3.set_param("memory_max_size", cap)
    return cap


def _out_of_memory(exc: object) -> bool:
    return "memory" in str(exc).lower()


def _memory_error(label: str, cap: int) -> InputError:
    return InputError(f"z3 needs more than {cap} MiB of memory for {label} (the exact-solver memory limit, at most "
                      f"3/4 of the memory free; {limits.SMT_MEMORY.hint()}, or ask for fewer steps or chunks, or "
                      "use another solver)")


def neg(lit: Lit) -> Lit:
    if isinstance(lit, bool):
        return not lit
    return lit[5:-1] if lit.startswith("(not ") else f"(not {lit})"


@dataclass(frozen=True)
class CheckAnswer:
    """The answer of one z3 check: ``status`` sat/unsat/unknown; ``core`` the assumption literals
    an unsat proof used; ``stats`` z3's counters for this check."""

    status: str
    seconds: float
    core: tuple[str, ...] = ()
    stats: dict[str, float] = field(default_factory=dict)


class Encoding:
    """Base of the routing and combining encodings: owns the solver, the text being built and
    the rounds bits."""

    def __init__(self, steps: int, max_extra: int | None, *, label: str, seed: int = 0) -> None:
        self.steps = steps
        self.seed = seed
        self.max_extra = None if max_extra is None else max(0, max_extra)
        self.label = label
        # A context of its own: z3's state from earlier solvers in the process (interned terms,
        # counters) would otherwise change the search, and the same problem must give the same
        # schedule every time.
        self.ctx = z3.Context()
        self.solver = z3.SolverFor("QF_FD", ctx=self.ctx)
        for key, value in SOLVER_PARAMS + (("sat.random_seed", seed), ("random_seed", seed)):
            self.solver.set(key, value)
        # z3 installs a SIGINT handler of its own during a check when ``ctrl_c`` is on: it would
        # swallow Ctrl-C (cancel one check, the portfolio moves on). Ctrl-C goes to
        # ``ccl.core.interrupt`` instead, which interrupts the context (see ``check``).
        self.solver.set("ctrl_c", False)
        self._lines: list[str] = []
        self._names: set[str] = set()
        self.clauses = 0
        self.extra: list[list[str]] = [[] for _ in range(steps)]
        self._frozen = False
        self._bounds: dict[int, str] = {}
        self._values: dict[str, bool] | None = None
        self._model: z3.ModelRef | None = None
        self._seen: dict[str, float] = {}
        self.build_seconds = 0.0

    # ------------------------------------------------------------------ building blocks
    def var(self, name: str) -> str:
        if name not in self._names:
            self._names.add(name)
            self._lines.append(f"(declare-const {name} Bool)")
        return name

    def _assert(self, text: str) -> None:
        self._lines.append(f"(assert {text})")
        self.clauses += 1

    def clause(self, *lits: Lit) -> None:
        """The disjunction of ``lits`` (constants folded; an empty clause makes the formula false)."""
        out = []
        for x in lits:
            if x is True:
                return
            if x is not False:
                out.append(x)
        if not out:
            self._assert("false")
        elif len(out) == 1:
            self._assert(out[0])
        else:
            self._assert(f"(or {' '.join(out)})")

    def at_most(self, lits: Sequence[Lit], k: int) -> None:
        k -= sum(1 for x in lits if x is True)
        live = [x for x in lits if not isinstance(x, bool)]
        if k < 0:
            self._assert("false")
        elif len(live) > k:
            if k == 0:
                for x in live:
                    self.clause(neg(x))
            else:
                self._assert(f"((_ at-most {k}) {' '.join(live)})")

    def pb(self, terms: Sequence[tuple[Lit, int]], op: str, k: int) -> None:
        """sum of weight x literal ``op`` k, for op in "<=" and ">=" (positive weights)."""
        live = []
        for x, w in terms:
            if x is True:
                k -= w
            elif x is not False and w:
                live.append((x, w))
        if op == "<=":
            if k < 0:
                self._assert("false")
            elif sum(w for _, w in live) > k:
                ws = " ".join(str(w) for _, w in live)
                self._assert(f"((_ pble {k} {ws}) {' '.join(x for x, _ in live)})")
        else:
            if k <= 0:
                return
            if sum(w for _, w in live) < k:
                self._assert("false")
            else:
                ws = " ".join(str(w) for _, w in live)
                self._assert(f"((_ pbge {k} {ws}) {' '.join(x for x, _ in live)})")

    def define_or(self, name: str, lits: Sequence[Lit]) -> Lit:
        """A literal equal to the disjunction of ``lits`` (a fresh variable unless trivial)."""
        live = [x for x in lits if x is not False]
        if any(x is True for x in live):
            return True
        if not live:
            return False
        if len(live) == 1:
            return live[0]
        v = self.var(name)
        self.clause(neg(v), *live)
        for x in live:
            self.clause(v, neg(x))
        return v

    def define_and(self, name: str, lits: Sequence[Lit]) -> Lit:
        return neg(self.define_or(name, [neg(x) for x in lits]))

    def equal(self, a: Lit, b: Lit) -> None:
        self.clause(neg(a), b)
        self.clause(a, neg(b))

    def extra_bits(self, step: int, count: int) -> list[str]:
        """The first ``count`` extra-round bits of a step (fewer if ``max_extra`` caps them),
        created on first use. Every bit must exist before ``freeze``."""
        if self.max_extra is not None:
            count = min(count, self.max_extra)
        row = self.extra[step]
        while len(row) < count:
            if self._frozen:
                raise RuntimeError(f"{self.label}: extra-round bits added after freeze")
            bit = self.var(f"extra_{step}_{len(row)}")
            if row:
                self.clause(neg(bit), row[-1])
            row.append(bit)
        return row[:count]

    def freeze(self) -> None:
        """No more extra-round bits: constraints over whole rows may now be stated."""
        self._frozen = True

    def capacity(self, step: int, terms: Sequence[Lit], lanes: int) -> None:
        """At most ``lanes x rounds(step)`` of ``terms`` are true. Only the extra-round bits that
        can matter enter the constraint: once k extra rounds cover every term, more change
        nothing."""
        live = [x for x in terms if x is not False]
        if len(live) <= lanes:
            return
        row = self.extra_bits(step, -(-len(live) // lanes) - 1)
        self.pb([(x, 1) for x in live] + [(neg(e), lanes) for e in row], "<=", lanes * (1 + len(row)))

    def rounds_literal(self, rounds: int) -> str:
        """A literal that, assumed, bounds the total rounds by ``rounds``."""
        lit = self._bounds.get(rounds)
        if lit is None:
            self.freeze()
            lit = self.var(f"rounds_at_most_{rounds}")
            every = [e for row in self.extra for e in row]
            budget = rounds - self.steps
            if budget < 0:
                self.clause(neg(lit))
            elif budget < len(every):
                terms = [(e, 1) for e in every] + [(lit, len(every) - budget)]
                self.pb(terms, "<=", len(every))  # lit -> at most `budget` extra bits
            self._bounds[rounds] = lit
        return lit

    def flush(self) -> None:
        if not self._lines:
            return
        text = "\n".join(self._lines)
        self._lines = []
        cap = memory_cap()
        try:
            self.solver.from_string(text)
        except z3.Z3Exception as exc:  # a bug in an encoding, or the memory cap reached
            if _out_of_memory(exc):
                raise _memory_error(self.label, cap) from None
            raise Z3Error(f"z3 rejected the {self.label} encoding: {exc}") from None

    # ------------------------------------------------------------------ solving
    def check(self, assumptions: Sequence[str] = (), deadline: float | None = None,
              conflicts: int | None = None) -> CheckAnswer:
        """Check under assumption literals. ``deadline`` is a ``time.monotonic()`` value;
        ``conflicts`` caps the SAT conflicts of this check (unknown when reached)."""
        if interrupt.stop_due(deadline):  # before the parse of the pending text (seconds on large encodings)
            return CheckAnswer(UNKNOWN, 0.0)
        self.flush()
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or interrupt.requested():
                return CheckAnswer(UNKNOWN, 0.0)
            self.solver.set("timeout", max(1, int(left * 1000)))
        self.solver.set("sat.max_conflicts", conflicts if conflicts is not None else 2**32 - 1)
        handles = [_handle(a, self.ctx) for a in assumptions]
        cap = memory_cap()
        start = time.perf_counter()
        try:
            with interrupt.on_interrupt(self.ctx.interrupt):  # Ctrl-C ends the check (unknown)
                result = self.solver.check(*handles)
        except z3.Z3Exception as exc:  # the memory cap reached, or a z3 internal failure
            if interrupt.requested():
                return CheckAnswer(UNKNOWN, time.perf_counter() - start)
            if _out_of_memory(exc):
                raise _memory_error(self.label, cap) from None
            raise Z3Error(f"z3 failed on {self.label}: {exc}") from None
        if result == z3.unknown and _out_of_memory(self.solver.reason_unknown()):
            raise _memory_error(self.label, cap)
        seconds = time.perf_counter() - start
        total = _stats(self.solver)  # z3 counts over the solver's life: keep this check's share
        stats = {k: v - self._seen.get(k, 0) for k, v in total.items()}
        self._seen = total
        self._values = None
        if result == z3.sat:
            self._model = self.solver.model()
            return CheckAnswer(SAT, seconds, (), stats)
        self._model = None
        if result == z3.unsat:
            core = tuple(sorted(str(x) for x in self.solver.unsat_core()))
            return CheckAnswer(UNSAT, seconds, tuple(_lit_of(x) for x in core), stats)
        return CheckAnswer(UNKNOWN, seconds, (), stats)

    def true(self, lit: Lit) -> bool:
        if isinstance(lit, bool):
            return lit
        if self._model is None:
            raise RuntimeError("no model: the last check was not sat")
        if self._values is None:
            m = self._model
            self._values = {d.name(): z3.is_true(m[d]) for d in m.decls() if d.arity() == 0}
        if lit.startswith("(not "):
            return not self.true(lit[5:-1])
        value = self._values.get(lit)
        if value is None:
            value = z3.is_true(self._model.eval(z3.Bool(lit, self.ctx), model_completion=True))
            self._values[lit] = value
        return value


def _handle(lit: str, ctx: z3.Context) -> z3.BoolRef:
    return z3.Not(z3.Bool(lit[5:-1], ctx)) if lit.startswith("(not ") else z3.Bool(lit, ctx)


def _lit_of(text: str) -> str:
    """A core element as printed by z3 (``x`` or ``Not(x)``) back to a literal."""
    return f"(not {text[4:-1]})" if text.startswith("Not(") else text


def _stats(solver: z3.Solver) -> dict[str, float]:
    out: dict[str, float] = {}
    st = solver.statistics()
    for key in st.keys():
        value = st.get_key_value(key)
        if isinstance(value, (int, float)):
            out[key] = value
    return out


def lex_leq(enc: Encoding, xs: Sequence[Lit], ys: Sequence[Lit], tag: str) -> None:
    """Add ``xs <=lex ys`` (False < True) with the usual chain of prefix-equality literals: e_i
    means the first i positions are equal, so position i must not have x > y. e_{i+1} is forced
    only when the prefix is equal and x_i = y_i, so no solution satisfying the order is cut."""
    eq: Lit = True
    for i, (x, y) in enumerate(zip(xs, ys)):
        if x == y:
            continue
        if isinstance(x, bool) and isinstance(y, bool):  # differing constants decide the order
            if x and not y:
                if eq is True:  # a permutation that maps constants inconsistently is no symmetry
                    raise RuntimeError(f"lex constraint {tag}: the permutation is not a symmetry")
                enc.clause(neg(eq))
            return
        nxt = enc.var(f"lex_{tag}_{i}")
        guard = neg(eq)
        enc.clause(guard, neg(x), y)
        enc.clause(guard, neg(x), neg(y), nxt)
        enc.clause(guard, x, y, nxt)
        eq = nxt


class Portfolio:
    """Up to ``WORKERS`` differently seeded copies of one problem, checked in rounds with a
    doubling conflict budget until one answers. Satisfiable instances of these problems are
    heavy-tailed in the seed (one seed can take hundreds of times longer than another); a few
    short independent runs find them fast. ``make(i, seed)`` builds copy i: the searches make
    the odd copies with symmetry breaking and the even ones without, since symmetry breaking
    shortens unsat proofs (far fewer conflicts) but makes satisfiable schedules harder to hit
    (only lex-leaders count). Every copy states
    the same problem, so unsat from any copy is a proof. Conflict budgets, not time: the answer
    and the schedule are the same on every run."""

    def __init__(self, make, workers: int | None = None, budget: int | None = None) -> None:
        self.make = make
        self.workers = WORKERS if workers is None else workers
        self.budget = FIRST_BUDGET if budget is None else budget
        self.base_seed = BASE_SEED
        self.encodings: list[Encoding] = [make(0, self.base_seed)]
        self.winner: Encoding = self.encodings[0]

    @property
    def build_seconds(self) -> float:
        return sum(e.build_seconds for e in self.encodings)

    def take_build_seconds(self) -> float:
        out = self.build_seconds
        for e in self.encodings:
            e.build_seconds = 0.0
        return out

    def check(self, rounds: int | None, deadline: float | None, cap: int | None = None) -> CheckAnswer:
        """Is there a schedule with at most ``rounds`` rounds (None: any)? ``core`` of an unsat
        answer is ("rounds",) when the proof used the rounds bound. ``cap``: the SAT conflicts
        all copies may spend on this question (unknown when spent; None: no cap)."""
        budget = self.budget
        spent = 0.0
        stats: dict[str, float] = {}
        left = cap
        while True:
            for i in range(self.workers):
                if interrupt.stop_due(deadline) or (left is not None and left <= 0):  # no new copy, no check
                    return CheckAnswer(UNKNOWN, spent, (), stats)
                if i == len(self.encodings):
                    self.encodings.append(self.make(i, self.base_seed + i))
                enc = self.encodings[i]
                lits = [] if rounds is None else [enc.rounds_literal(rounds)]
                last = self.workers == 1
                limit = None if last else budget
                if left is not None:
                    limit = left if limit is None else min(limit, left)
                out = enc.check(lits, deadline, limit)
                spent += out.seconds
                for k, v in out.stats.items():
                    if k in ("sat conflicts", "conflicts", "sat decisions"):
                        stats[k] = stats.get(k, 0) + v
                if left is not None:
                    left -= max(1, int(out.stats.get("sat conflicts", out.stats.get("conflicts", 0))))
                if out.status != UNKNOWN:
                    self.winner = enc
                    core = ("rounds",) if lits and lits[0] in out.core else ()
                    return CheckAnswer(out.status, spent, core, stats)
                if interrupt.stop_due(deadline):
                    return CheckAnswer(UNKNOWN, spent, (), stats)
            budget *= 2
