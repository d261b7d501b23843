"""Every shipped description (the library and the examples) parses, lowers and verifies; its
syntax tree and its lowered IR print as the golden files say; printed IR lowers back to itself."""

from __future__ import annotations

from pathlib import Path

import pytest

import dsl
from dsl.printer import dump_ast, format_algorithm, format_problem, format_topology

from .conftest import GOLDEN, ROOT, check_golden, lower_everything

SHIPPED = sorted([*(ROOT / "topologies").glob("*.ccl"), *(ROOT / "dsl" / "examples").glob("*.ccl")])
IDS = [f"{p.parent.name}/{p.name}" for p in SHIPPED]


def _golden_name(path: Path) -> str:
    return f"{path.parent.name}_{path.stem}"


def test_the_required_examples_are_shipped():
    names = {p.stem for p in SHIPPED}
    assert {"ring_allgather", "ring_allreduce", "hierarchical_allreduce"} <= names
    assert {"basic", "machines", "hardware", "multinode"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_parse_lower_verify(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    module = dsl.load(str(path.relative_to(ROOT)))
    lower_everything(module)
    for item in module.algorithms():
        assert dsl.verify_algorithm(item).steps == item.algorithm.n_steps


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_golden_syntax_tree(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    tree = dsl.parse_file(str(path.relative_to(ROOT)))
    check_golden(GOLDEN / "ast" / f"{_golden_name(path)}.txt", dump_ast(tree))


def _printout(module: dsl.Module) -> str:
    parts = []
    for name, definition in module.topologies().items():
        if all(p.default is not None for p in definition.params):
            parts.append(format_topology(module.topology(name)))
    for request in module.requests():
        parts.append(f"# request {request.name}\n" + format_problem(request.problem, request.name))
    for item in module.algorithms():
        parts.append(format_algorithm(item.algorithm))
    return "\n".join(parts)


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_golden_lowered_ir(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    module = dsl.load(str(path.relative_to(ROOT)))
    text = _printout(module)
    check_golden(GOLDEN / "ir" / f"{_golden_name(path)}.ccl", text)


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_printed_ir_lowers_back_to_the_same_ir(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    module = dsl.load(str(path.relative_to(ROOT)))
    for name, definition in module.topologies().items():
        if all(p.default is not None for p in definition.params):
            topo = module.topology(name)
            again = dsl.load_string(format_topology(topo, "t"), "again.ccl").topology("t")
            assert again == topo
    for request in module.requests():
        again = dsl.load_string(format_problem(request.problem, request.name), "again.ccl").requests()
        assert [r.problem for r in again] == [request.problem] and again[0].name == request.name
    for item in module.algorithms():
        (back,) = dsl.load_string(format_algorithm(item.algorithm), "again.ccl").algorithms()
        alg = back.algorithm
        assert alg.topology == item.algorithm.topology and alg.collective == item.algorithm.collective
        assert sorted(alg.transfers) == sorted(item.algorithm.transfers) and alg.rounds == item.algorithm.rounds


def test_a_solver_schedule_prints_as_a_hand_written_algorithm():
    import ccl

    result = ccl.synthesize(ccl.problem("ndv2:2", "allreduce", solver="hierarchical", chunks=2))
    (back,) = dsl.load_string(format_algorithm(result.algorithm), "from_solver.ccl").algorithms()
    assert sorted(back.algorithm.transfers) == sorted(result.algorithm.transfers)
    dsl.verify_algorithm(back)
