"""The program stage, printed through the one ``--emit`` path: golden files of the verified
Programs (``tests/ccl/golden/program``; ``CCL_UPDATE_GOLDEN=1`` rewrites them after a deliberate
change of the lowering)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ccl.cli import main

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
GOLDEN = HERE / "golden" / "program"
EXAMPLES = ROOT / "dsl" / "examples"
UPDATE = bool(os.environ.get("CCL_UPDATE_GOLDEN"))


def check_golden(path: Path, text: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"golden file {path} is missing; run with CCL_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(encoding="utf-8"), f"output differs from {path} (CCL_UPDATE_GOLDEN=1 rewrites it)"


def run(capsys, *argv: str) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


WITH_ALGORITHMS = ["custom_collective", "hierarchical_allreduce", "ring_allgather", "ring_allreduce"]


@pytest.mark.parametrize("name", WITH_ALGORITHMS)
def test_check_emit_program_matches_golden(capsys, name):
    out = run(capsys, "check", EXAMPLES / f"{name}.ccl", "--emit", "program")
    check_golden(GOLDEN / f"{name}.txt", out)
    assert out.startswith("program ")


SYNTHESIZED = {
    "ring4_allreduce_ring": ["-t", "ring:4", "-c", "allreduce", "-s", "ring"],
    "dgx1_allgather_multi_ring": ["-t", "dgx1", "-c", "allgather", "-s", "multi-ring"],  # two-lane links
    "ring3_allreduce_unfused_2_channels": ["-t", "ring:3", "-c", "allreduce", "-s", "ring", "-k", "2",
                                           "--no-fuse", "--channels", "2"],
    "line4_allgather_direct_scratch": ["-t", "line:4", "-c", "allgather", "-s", "direct", "-k", "2"],
}


@pytest.mark.parametrize("name", sorted(SYNTHESIZED))
def test_synthesize_emit_program_matches_golden(capsys, name):
    out = run(capsys, "synthesize", *SYNTHESIZED[name], "--emit", "program")
    check_golden(GOLDEN / f"{name}.txt", out)


def test_the_same_program_from_every_command_that_reaches_the_stage(capsys, tmp_path):
    path = tmp_path / "ar.json"
    run(capsys, "synthesize", "-t", "ring:4", "-c", "allreduce", "-s", "ring", "-o", path)
    expected = (GOLDEN / "ring4_allreduce_ring.txt").read_text(encoding="utf-8")
    for command in ("verify", "simulate", "run"):
        assert run(capsys, command, path, "--emit", "program") == expected, command
    code = main(["simulate", str(path)])
    assert code == 2 and "--size is required" in capsys.readouterr().err


def test_program_json_is_the_program(capsys):
    data = json.loads(run(capsys, "check", EXAMPLES / "ring_allreduce.ccl", "--emit", "program", "--json"))
    text = run(capsys, "check", EXAMPLES / "ring_allreduce.ccl", "--emit", "program")
    assert len(data["programs"]) == text.count("\nprogram ") + 1 >= 2
    for program in data["programs"]:
        assert program["format"] == "ccl-program" and program["version"] == 1
        assert program["op_fields"][-1] == "deps"
        assert len(program["ops"]) == program["ranks"]
        assert sum(len(ops) for ops in program["ops"]) == program["n_ops"]
        assert sum(len(ops) for ops in program["ops"]) == program["sends"] + program["recvs"] + program["copies"] \
            + program["reduces"]
        assert program["sends"] == program["recvs"] == program["messages"]


def test_emit_program_of_a_file_without_algorithms_says_where_to_look(capsys):
    code = main(["check", str(EXAMPLES / "requests.ccl"), "--emit", "program"])
    _, err = capsys.readouterr()
    assert code == 2 and "ccl synthesize" in err and "--emit program" in err


def test_emit_ast_needs_a_description_file(capsys):
    code = main(["synthesize", "-t", "ring:4", "-c", "allgather", "--emit", "ast"])
    _, err = capsys.readouterr()
    assert code == 2 and "description FILE.ccl" in err


def test_the_program_stage_reuses_the_judged_lowering():
    """A searching solver returns the schedule the cost judge found fastest; the program stage
    takes the judge's Program for it (the same lowering options) instead of lowering again, and
    that Program is the one ``lower`` makes. Other options lower anew."""
    import numpy as np

    import topologies as T
    from ccl import Problem, Request, lower, synthesize
    from ccl.compiler import program
    from ccl.core.collective import builtin

    topo = T.build("dgx-h100:2")
    result = synthesize(Problem(topo, builtin("allgather", topo.n_ranks), Request("packing", size=2**26)))
    assert result.lowered is not None and result.lowered[:2] == (1, True)
    judged = program(result, check=False)
    assert judged is result.lowered[2]
    fresh = lower(result.algorithm)
    for name in ("kind", "step", "buf", "index", "count", "peer", "dep_ptr", "dep_idx", "rank_ptr"):
        assert np.array_equal(getattr(judged.ops, name), getattr(fresh.ops, name)), name
    assert program(result, channels=2, check=False) is not judged
    unjudged = synthesize(Problem(topo, builtin("allgather", topo.n_ranks), Request("ring")))
    assert unjudged.lowered is None
