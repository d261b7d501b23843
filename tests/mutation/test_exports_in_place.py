"""Every exported MSCCL XML file, in every mode it claims, checked by the independent reference
execution (``mutants.run_xml``: threadblocks stepping in random interleavings, reads and
writes as separate events, in place with the runtimes' aliasing written there from the buffer
sizes): the files the verifier accepts, the reference runs right. Among them the case that
raced: a direct alltoall on amd8, whose receive into output block j and send of input block j
are one memory when RCCL runs it in place."""

from __future__ import annotations

from functools import cache

import pytest

import topologies as T
from backends.msccl import interpret, model
from ccl import compiler
from ccl.compiler.loader import verify_imported
from ccl.compiler.msccl import export_xml
from ccl.core.errors import BackendError, VerificationError

from . import mutants as M

ORDERS = 8  # interleavings the reference tries per mode

CASES = [
    ("amd8", "alltoall", "direct", 1),  # the case
    ("ndv2:2", "alltoall", "hierarchical", 1),
    ("line:3", "alltoall", "smt", 1),
    ("ring:4", "alltoall", "milp", 1),
    ("ring:4", "alltoall", "teccl", 1),
    ("ring:4", "allgather", "ring", 2),
    ("dgx1", "reducescatter", "recursive-halving", 1),
    ("dgx1", "allreduce", "ring", 1),
    ("ring:5", "broadcast", "binomial-tree", 2),
]


@cache
def _result(spec: str, kind: str, solver: str, chunks: int):
    return compiler.synthesize(compiler.problem_from_options(spec, kind, solver=solver, chunks=chunks))


def _reference(text: str, spec: str) -> str:
    algo = model.parse(text)
    return M.xml_ok(text, interpret.collective_of(algo, "x.xml"), T.build(spec), orders=ORDERS)


@pytest.mark.parametrize("target", ["msccl", "rccl"])
@pytest.mark.parametrize("spec,kind,solver,chunks", CASES)
def test_exported_files_are_right_in_every_mode_they_claim(spec, kind, solver, chunks, target):
    text, summary = export_xml(_result(spec, kind, solver, chunks), target=target)
    algo = model.parse(text)
    assert (algo.inplace, algo.outofplace) == (1, 1)  # an algorithm can always be lowered for both
    assert summary["in_place"]["claimed"] is True
    assert summary["in_place"]["lowered_in_place"] == (kind == "alltoall")
    imported = interpret.read_program(algo, T.build(spec), path="x.xml")
    assert verify_imported(imported) == {"out_of_place": True, "in_place": True}
    assert _reference(text, spec) == ""


def test_the_race_of_an_out_of_place_alltoall_called_in_place_is_refused_and_real():
    """The file as exported for out-of-place calls, claimed for in-place ones: the verifier
    refuses it naming gpu, tb and step, and the reference sees a wrong result."""
    text, summary = export_xml(_result("amd8", "alltoall", "direct", 1), target="rccl", mode="outofplace")
    assert summary["in_place"] == {"claimed": False, "reason": "--mode outofplace", "lowered_in_place": False}
    assert _reference(text, "amd8") == ""  # right out of place
    claimed = text.replace('inplace="0"', 'inplace="1"', 1)
    assert "wrong" in _reference(claimed, "amd8")
    imported = interpret.read_program(model.parse(claimed, "a.xml"), T.build("amd8"), path="a.xml")
    with pytest.raises(VerificationError, match=r"a\.xml:\d+: gpu \d+ tb \d+ step \d+: .*\(in place, output\[\d+\] "
                                                r"is input\[\d+\]\).*the file claims in-place calls"):
        verify_imported(imported)


def test_a_program_not_correct_in_place_is_exported_out_of_place_only_and_says_why():
    program = compiler.program(_result("amd8", "alltoall", "direct", 1))  # the out-of-place lowering
    text, summary = export_xml(program, target="rccl")
    algo = model.parse(text)
    assert (algo.inplace, algo.outofplace) == (0, 1)
    claim = summary["in_place"]
    assert claim["claimed"] is False and "not correct in place" in claim["reason"] and "output[" in claim["reason"]
    assert _reference(text, "amd8") == ""
    with pytest.raises(BackendError, match="not correct in place"):
        export_xml(program, target="rccl", mode="both")
    # the Program lowered for in-place calls exports for both
    fixed = compiler.program(_result("amd8", "alltoall", "direct", 1), in_place=True)
    text, summary = export_xml(fixed, target="rccl", mode="both")
    assert summary["in_place"]["claimed"] is True and _reference(text, "amd8") == ""


def test_an_in_place_only_file_is_right_in_place():
    text, summary = export_xml(_result("ndv2:2", "alltoall", "hierarchical", 1), target="msccl", mode="inplace")
    algo = model.parse(text)
    assert (algo.inplace, algo.outofplace) == (1, 0)
    assert _reference(text, "ndv2:2") == ""


def test_a_tuned_set_exports_files_right_in_place(tmp_path, capsys):
    """The tuner's set (``ccl synthesize`` with the default solver auto), one file per size
    range: every file claims both modes and runs right in both."""
    from ccl.cli import main

    sset = tmp_path / "set.json"
    # --no-native: on a ring of 4 NCCL's own alltoall wins every size, and this is about our files
    assert main(["synthesize", "-t", "ring:4", "-c", "alltoall", "--no-native", "-o", str(sset)]) == 0
    out = tmp_path / "xml"
    assert main(["emit", "msccl", str(sset), "-o", str(out), "--target", "rccl"]) == 0
    capsys.readouterr()
    files = sorted(out.glob("*.xml"))
    assert files
    for path in files:
        text = path.read_text()
        algo = model.parse(text)
        assert (algo.inplace, algo.outofplace) == (1, 1)
        assert _reference(text, "ring:4") == "", path.name
        assert main(["verify", str(path), "-t", "ring:4"]) == 0
        assert "(out-of-place and in-place)" in capsys.readouterr().out
