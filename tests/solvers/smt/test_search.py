"""The machinery under the searches: lex-leader constraints, symmetries, time limits,
determinism, options, and the guard against bad models."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

import solvers
import topologies as T
from ccl import InputError, Problem, Request, SolverTimeout, Z3Error, verify
from ccl.compiler import synthesize
from ccl.core.collective import builtin
from solvers.smt import base, searcher, symmetry
from solvers.smt.problems import Network
from solvers.smt.search import OutOfTime


def test_import_is_cheap():
    code = "import sys, solvers.smt; print([m for m in ('z3', 'networkx') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("length", [1, 2, 3, 4])
def test_lex_leq_keeps_exactly_the_ordered_pairs(length):
    enc = base.Encoding(1, 0, label="lex")
    xs = [enc.var(f"x{i}") for i in range(length)]
    ys = [enc.var(f"y{i}") for i in range(length)]
    base.lex_leq(enc, xs, ys, "t")
    for bits in itertools.product([False, True], repeat=2 * length):
        fixed = [x if b else base.neg(x) for x, b in zip(xs + ys, bits)]
        expected = list(bits[:length]) <= list(bits[length:])
        assert (enc.check(fixed).status == "sat") == expected, bits


def test_z3_rejecting_an_encoding_is_a_z3_error():
    enc = base.Encoding(1, 0, label="broken")
    enc.clause("undeclared")  # a literal never declared: z3's parser rejects the text
    with pytest.raises(Z3Error, match="z3 rejected the broken encoding") as err:
        enc.check()
    assert err.value.exit_code == 1  # an internal error, not the user's input


def test_dgx1_automorphisms_respect_lanes():
    auts = symmetry.automorphisms(Network.of(T.dgx1()))
    assert len(auts) == 3  # with the identity, a group of 4
    lanes = {(a, b): k for a, b, k in Network.of(T.dgx1()).links}
    for perm in auts:
        assert all(lanes.get((perm[a], perm[b])) == k for (a, b), k in lanes.items())


def test_chunk_permutation_follows_the_collective():
    sig = {0: (frozenset({0}), frozenset({1, 2})), 1: (frozenset({1}), frozenset({0, 2})),
           2: (frozenset({2}), frozenset({0, 1}))}
    assert symmetry.chunk_permutation((1, 2, 0), sig) == {0: 1, 1: 2, 2: 0}
    skewed = dict(sig)
    skewed[0] = (frozenset({0}), frozenset({1}))
    assert symmetry.chunk_permutation((1, 2, 0), skewed) is None


def test_same_input_same_schedule():
    problem = Problem(T.dgx1(), builtin("allgather", 8), Request("smt", steps=3, rounds=7, chunks=6))
    a = solvers.synthesize(problem)
    b = solvers.synthesize(problem)
    assert a.transfers == b.transfers and a.rounds == b.rounds


def test_time_limit_without_a_schedule_is_a_timeout(monkeypatch):
    def out_of_time(self, *args, **kwargs):
        raise OutOfTime("S=2")

    monkeypatch.setattr("solvers.smt.search.Search.decide", out_of_time)
    problem = Problem(T.dgx1(), builtin("allgather", 8), Request("smt", time_limit=5))
    with pytest.raises(SolverTimeout) as err:
        synthesize(problem)
    assert err.value.best is None


def test_time_limit_during_the_rounds_descent_returns_the_best_schedule(monkeypatch):
    from solvers.smt.search import Search

    real = Search.decide
    calls = []

    def decide(self, steps, rounds, chunks, **kw):
        calls.append(rounds)
        if len(calls) > 1:
            raise OutOfTime("descent")
        return real(self, steps, rounds, chunks, **kw)

    monkeypatch.setattr(Search, "decide", decide)
    problem = Problem(T.dgx1(), builtin("allgather", 8), Request("smt", steps=2, chunks=2, time_limit=5))
    result = synthesize(problem)
    assert result.status == "timeout" and result.verification is not None
    verify(result.algorithm)


def test_a_real_time_limit_is_honoured():
    import time

    search = searcher(T.dgx1(), builtin("allgather", 8), time_limit=0.05)
    start = time.monotonic()
    frontier = search.pareto(6)
    assert time.monotonic() - start < 5
    assert not frontier.complete or frontier.reached_bound


def test_a_model_breaking_its_rounds_bound_is_caught(monkeypatch):
    search = searcher(T.ring(4), builtin("allgather", 4))
    real = search.f.algorithm

    def cheat(enc, steps, chunks):
        alg = real(enc, steps, chunks)
        return alg.with_transfers(alg.transfers, tuple(r + 5 for r in alg.rounds))

    monkeypatch.setattr(search.f, "algorithm", cheat)
    with pytest.raises(RuntimeError, match="z3 returned a schedule"):
        search.decide(2, 2, 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ((("colour", "red"),), "no option 'colour'"),
        ((("method", "magic"),), "method must be one of"),
        ((("scratch", -1),), "scratch must be"),
        ((("symmetry", "yes"),), "symmetry must be"),
        ((("max_steps", 0),), "max_steps must be"),
    ],
)
def test_bad_options_are_input_errors(options, message):
    with pytest.raises(InputError, match=message):
        solvers.synthesize(Problem(T.ring(4), builtin("allgather", 4), Request("smt", options=options)))


def test_max_steps_gives_up_with_a_clear_error():
    problem = Problem(T.ring(8, directed=True), builtin("allgather", 8), Request("smt", options=(("max_steps", 5),)))
    from ccl import InfeasibleError

    with pytest.raises(InfeasibleError, match="at most 5 steps"):
        solvers.synthesize(problem)
