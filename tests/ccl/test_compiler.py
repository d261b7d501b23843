"""The driver owns the pipeline: stages as functions, the cost judge handed to solvers, the
simulator kept to physics with the bound and NCCL's models added here, compare."""

from __future__ import annotations

import pytest

import ccl
import solvers
import topologies as T
from backends.cost.runtime import DEFAULT_RUNTIME, charges, default_protocol
from backends.sim import simulate as physics
from ccl import InputError, Problem, Request
from ccl import compiler as driver
from ccl.core.collective import builtin
from ccl.core.judge import CostJudge


class CountingJudge:
    """A cost judge that counts its calls and times schedules by their number of steps."""

    def __init__(self) -> None:
        self.calls = 0

    def time_us(self, algorithm, size: float) -> float:
        self.calls += 1
        return float(algorithm.n_steps)


def test_a_cost_aware_solver_gets_the_judge_it_is_given():
    judge: CostJudge = CountingJudge()
    problem = Problem(T.ring(4), builtin("allgather", 4), Request("milp", size=2**20, time_limit=20))
    result = driver.synthesize(problem, judge=judge)
    assert judge.calls >= 2  # every candidate, then the templates it guards against
    assert result.algorithm.solver == "milp" and result.verification.steps == result.algorithm.n_steps


def test_a_cost_aware_solver_refuses_to_run_without_a_judge():
    problem = Problem(T.ring(4), builtin("allgather", 4), Request("milp", size=2**20))
    with pytest.raises(InputError, match="needs a cost judge"):
        solvers.synthesize(problem)


def test_the_default_judge_times_the_lowered_program():
    alg = driver.synthesize(ccl.problem("dgx1", "allgather", solver="multi-ring")).algorithm
    judge = driver.SimulationJudge()  # the default runtime's charges, the protocol the size would use
    charged = charges(DEFAULT_RUNTIME, default_protocol(2**26), alg.topology)
    assert judge.time_us(alg, 2**26) == physics(ccl.lower(alg), 2**26, runtime=charged).time_us
    assert driver.SimulationJudge(runtime="physics").time_us(alg, 2**26) == physics(ccl.lower(alg), 2**26).time_us


def test_the_default_judge_says_what_its_last_judgement_cost():
    """``ccl.core.judge.effort_us``: the lowering and the simulation, estimated from counts (the same
    on every run), for a solver budgeting its search; None for a judge that does not say."""
    from ccl.compiler.timing import LOWER_OP_US
    from ccl.core.judge import effort_us

    alg = driver.synthesize(ccl.problem("dgx1", "allgather", solver="multi-ring")).algorithm
    judge = driver.SimulationJudge()
    assert effort_us(judge) is None
    judge.time_us(alg, 2**26)
    first = effort_us(judge)
    program = ccl.lower(alg)
    from backends.sim import run

    assert first == LOWER_OP_US * program.n_ops + run(program, 2**26).effort_us
    judge.time_us(alg, 2**26)
    assert effort_us(judge) == first

    class Plain:
        def time_us(self, algorithm, size):
            return 1.0

    assert effort_us(Plain()) is None


def test_the_simulator_is_physics_and_the_driver_adds_bound_and_baselines():
    result = driver.synthesize(ccl.problem("dgx1", "allreduce", solver="ring", chunks=2))
    program = driver.program(result)
    bare = physics(program, 2**24)
    assert bare.bound_binding == "not computed" and bare.bound_us == 0 and bare.baselines == ()
    assert "lower bound not computed" in bare.text()
    full = driver.simulate(result, 2**24, runtime="physics")
    assert full.time_us == bare.time_us and full.bound_us > 0 and full.bound_ratio >= 1
    charged = driver.simulate(result, 2**24)  # the default runtime: the fastest of its protocols, named
    assert charged.time_us > bare.time_us and charged.runtime.startswith(DEFAULT_RUNTIME + "/")
    assert charged.time_us == min(driver.simulate(result, 2**24, protocol=p).time_us for p in ("LL", "LL128", "Simple"))
    assert full.baselines[0].name == "nccl" and "NCCL Ring/" in full.baselines[0].detail  # NCCL's pick, named
    assert full.synthesis_seconds is not None
    assert (full.messages, full.ops) == (program.n_messages, program.n_ops)


def test_the_program_stage_lowers_verifies_and_passes_programs_through():
    alg = driver.synthesize(ccl.problem("ring:4", "allreduce", solver="ring", chunks=2)).algorithm
    program = driver.program(alg, channels=2, fuse=False)
    assert program.channels == 2 and program.n_messages == sum(1 for t in alg.transfers if t.src != t.dst)
    assert driver.program(program) is program
    with pytest.raises(InputError, match="expected an Algorithm"):
        driver.program("ar.json")


def test_public_functions_go_through_the_driver():
    result = ccl.synthesize(ccl.problem("ring:4", "allgather", solver="ring"))
    assert isinstance(result, ccl.SynthesisResult)
    assert ccl.simulate(result, "1MiB").time_us == driver.simulate(result, 2**20).time_us
    assert ccl.simulate(result, "1MiB", fuse=False).messages == len(result.algorithm.transfers)


def test_compare_rows_are_the_driver_simulations_of_each_program():
    [comparison] = driver.compare(T.ring(6), "allreduce", [2**22])
    rows = {r.name: r for r in comparison.rows}
    assert {"ring", "lower bound", "nccl"} <= set(rows) and comparison.reference.name == "nccl"
    ring = driver.synthesize(Problem(T.ring(6), builtin("allreduce", 6), Request("ring")))
    assert rows["ring"].time_us == pytest.approx(driver.simulate(ring, 2**22).time_us, rel=1e-12)
    assert rows["ring"].messages == driver.program(ring).n_messages
    assert rows["lower bound"].time_us <= min(r.time_us for r in comparison.rows if r.source == "schedule" and r.time_us)
