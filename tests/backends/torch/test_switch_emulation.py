"""Switch reductions on torch: gloo has no switch to reduce in, so the backend runs a Program's
pushes and pulls as their point-to-point emulation (``backends.torch.emulate``), verified like any
Program, and real gloo process groups check that the NVLS allreduces (in a node, along the
rails, through SHARP switches) give exactly torch's all_reduce; the run's report says the switch
ops were emulated."""

from __future__ import annotations

import pytest

import solvers
import topologies as T
from backends.torch.emulate import emulate_switches
from backends.torch.launch import Job, run_jobs, run_local
from backends.torch.plain import to_plain
from ccl import Problem, Request, compiler, lower, verify_program
from ccl.core.collective import builtin
from ccl.core.program import Op, Program

MACHINES = [("dgx-h100", "nvls"), ("dgx-h100:2,gpus=4", "nvls-rails"), ("dgx-h100:2,gpus=4,sharp=on", "nvls-sharp"),
            ("dgx-h100:4,gpus=2,sharp=on", "nvls")]


def program(spec: str, solver: str, chunks: int = 1, **lowering) -> Program:
    topo = T.build(spec)
    problem = Problem(topo, builtin("allreduce", topo.n_ranks), Request(solver, chunks=chunks))
    return compiler.program(compiler.synthesize(problem), **lowering)


@pytest.mark.parametrize("spec,solver", MACHINES)
@pytest.mark.parametrize("chunks", [1, 3])
def test_the_emulation_is_a_point_to_point_program_that_verifies(spec, solver, chunks):
    for lowering in ({}, {"fuse": False, "channels": 2}):
        original = program(spec, solver, chunks, **lowering)
        emulated = emulate_switches(original)
        assert original.n_switch_ops and not emulated.n_switch_ops and emulated.n_messages
        assert {op.kind for ops in emulated.ranks for op in ops} <= {"send", "recv", "copy", "reduce"}
        verify_program(emulated)
        verify_program(emulated, in_place=True)


def test_a_program_without_switch_ops_is_its_own_emulation():
    ring = compiler.program(solvers.synthesize(Problem(T.build("ring:4"), builtin("allreduce", 4), Request("ring"))))
    assert emulate_switches(ring) is ring and "emulated" not in to_plain(ring)


def test_a_push_nobody_pulls_is_dropped():
    """Rank 0 also pushes its input into slot 40, which no rank pulls: the switch's value would
    vanish unread, so the emulation sends nothing for it, and what waited for the push waits for
    what the push waited for."""
    base = lower(solvers.synthesize(Problem(T.build("dgx-h100"), builtin("allreduce", 8), Request("nvls"))))
    ranks = [list(ops) for ops in base.ranks]
    ranks[0].insert(1, Op("push", 0, "input", 0, 1, 8, "", -1, 99, 0, (), 40))
    ranks[0] = [ranks[0][0], ranks[0][1]] + [op._replace(deps=tuple(d + 1 if d >= 1 else d for d in op.deps))
                                             for op in ranks[0][2:]]
    extra = Program(base.name, base.collective, base.topology, ranks, base.scratch, base.channels, base.solver,
                    base.steps)
    verify_program(extra)
    emulated = emulate_switches(extra)
    verify_program(emulated)
    assert sum(op.kind == "send" for op in emulated.ranks[0]) == \
        sum(op.kind == "send" for op in emulate_switches(base).ranks[0])


def test_the_spec_says_what_was_emulated():
    spec = to_plain(program("dgx-h100", "nvls", 2))
    assert spec["emulated"]["switch_ops"] > 0 and "emulated with point-to-point messages" in spec["emulated"]["how"]
    assert {op[0] for ops in spec["ops"] for op in ops} <= {"send", "recv", "copy", "reduce"}


def test_nvls_allreduces_on_gloo_give_torchs_all_reduce():
    """Every machine's switch schedule (8 ranks each: one launch), two pipeline depths, sizes of
    1 element, a small prime and a prime above every slot count, in and out of place, and other
    dtypes and reductions."""
    pytest.importorskip("torch")
    labels, jobs = [], []
    for spec, solver in MACHINES:
        for chunks in (1, 3):
            plain = to_plain(program(spec, solver, chunks))
            for unit, in_place in ((1, False), (13, True), (1031, False)):
                labels.append(f"{solver} k={chunks} on {spec}, {unit} elements{' in place' if in_place else ''}")
                jobs.append(Job(plain, unit, in_place=in_place, seed=len(jobs), label=labels[-1]))
            for dtype, op in (("int64", "max"), ("bfloat16", "avg"), ("int32", "sum")):
                labels.append(f"{solver} k={chunks} on {spec}, {dtype} {op}")
                jobs.append(Job(plain, 29, dtype, op, seed=len(jobs), label=labels[-1]))
    results = run_jobs(8, jobs, timeout=120)
    wrong = [f"{label}: ranks {r.wrong_ranks} differ by {r.max_error:.3g}"
             for label, r in zip(labels, results) if r.correct is not True]
    assert not wrong, "\n".join(wrong)
    assert all(r.reference == "torch" for r in results)


def test_ccl_run_reports_the_emulation():
    pytest.importorskip("torch")
    report = run_local(program("dgx-h100", "nvls", 2), size=8 * 1024, repeat=1)
    assert report.correct is True and "switch ops" in report.emulated and "emulated" in report.to_json()
