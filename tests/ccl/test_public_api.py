from __future__ import annotations

import subprocess
import sys

import pytest

import ccl


def test_public_names_are_pinned():
    assert sorted(ccl.__all__) == sorted([
        "BUFFERS", "OPS", "Algorithm", "BackendError", "CclError", "Collective", "CollectiveError",
        "DslError", "InfeasibleError", "InputError", "Interrupted", "Link", "Problem", "Report", "Request", "SharedLimit", "Sketch",
        "SolverTimeout", "Span", "Switch", "Topology", "TopologyError", "Transfer", "VerificationError",
        "VerificationResult", "Z3Error", "collectives", "load", "problem", "save", "simulate", "synthesize", "topology", "verify",
        "Op", "Program", "ProgramVerification", "lower", "verify_program", "SynthesisResult", "executor",
        "to_msccl", "from_msccl", "tune", "ScheduleSet", "load_set",
    ])
    for name in ccl.__all__:
        assert hasattr(ccl, name), name


def test_import_ccl_is_cheap():
    code = ("import sys, ccl; heavy = [m for m in ('z3', 'pulp', 'torch', 'lark', 'numpy', 'solvers', 'topologies', "
            "'dsl', 'backends', 'ccl.compiler') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_error_hierarchy_and_exit_codes():
    assert issubclass(ccl.DslError, ccl.InputError)
    assert issubclass(ccl.TopologyError, ccl.CclError)
    codes = {cls: cls.exit_code for cls in (ccl.InputError, ccl.DslError, ccl.TopologyError, ccl.CollectiveError,
                                            ccl.InfeasibleError, ccl.VerificationError, ccl.SolverTimeout,
                                            ccl.BackendError)}
    assert codes[ccl.InputError] == 2 and codes[ccl.DslError] == 2
    assert codes[ccl.InfeasibleError] == 3 and codes[ccl.VerificationError] == 4
    assert codes[ccl.SolverTimeout] == 5 and codes[ccl.BackendError] == 6
    assert issubclass(ccl.Z3Error, ccl.CclError) and ccl.Z3Error.exit_code == 1  # internal, not the user's input


def test_dsl_error_renders_file_line_column_and_caret():
    src = "topology t {\n  ranks 0\n}\n"
    err = ccl.DslError("needs at least one rank", ccl.Span("t.ccl", 2, 9, 2, 10), src)
    assert err.render() == "t.ccl:2:9: needs at least one rank\n      ranks 0\n            ^"


def test_python_api_quick_start(tmp_path):
    problem = ccl.problem("dgx1", "allgather", solver="ring", chunks=2)
    result = ccl.synthesize(problem)
    assert isinstance(result, ccl.SynthesisResult) and isinstance(result.algorithm, ccl.Algorithm)
    assert result.status == "ok" and result.verification is not None
    ccl.save(result.algorithm, tmp_path / "ag.json")
    assert ccl.verify(ccl.load(tmp_path / "ag.json")).steps == result.algorithm.n_steps


def test_python_api_simulate():
    result = ccl.synthesize(ccl.problem("dgx1", "allgather", solver="ring", chunks=2))
    report = ccl.simulate(result, "64MiB")
    assert isinstance(report, ccl.Report) and report.size == 64 * 2**20
    assert report.time_us >= report.bound_us > 0 and report.synthesis_seconds is not None
    assert ccl.simulate(result.algorithm, 2**20, mode="step").synthesis_seconds is None
    # a Program is simulated as it is; an Algorithm is lowered with the options given
    program = ccl.lower(result.algorithm)
    assert ccl.simulate(program, 2**20).time_us == ccl.simulate(result.algorithm, 2**20).time_us
    direct = ccl.synthesize(ccl.problem("ring:3", "allgather", solver="direct", chunks=2)).algorithm
    assert (ccl.simulate(direct, 2**20).messages, ccl.simulate(direct, 2**20, fuse=False).messages) == (6, 12)


def test_python_api_executor_lowers_what_it_is_given(tmp_path):
    """``ccl.executor`` takes a schedule file, an Algorithm, a SynthesisResult or a Program and
    hands the torch backend a verified Program (tests/backends/torch run it on process groups);
    anything else is refused before a process group is touched."""
    pytest.importorskip("torch")
    with pytest.raises(ccl.InputError, match="expected an Algorithm, a SynthesisResult or a Program, got int"):
        ccl.executor(42)
    with pytest.raises(ccl.InputError, match="no such file"):
        ccl.executor(str(tmp_path / "missing.json"))
