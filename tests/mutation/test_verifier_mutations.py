"""Mutation testing of the three verifiers: Algorithm (``ccl.verify``), Program
(``ccl.verify_program``) and MSCCL XML (``ccl import msccl``: the importer then the Program
verifier).

Every mutant (see ``mutants.py`` for the kinds) is classified by a reference execution written
independently of the verifiers: *semantic* when some allowed execution goes wrong, else
*equivalent*. Then the verifier runs: a semantic mutant it accepts is a *survivor* and fails the
test; an equivalent one it rejects is *strict* (allowed: the verifiers also check rules such as
level order, tags, dependency hygiene and link capacity that no single execution shows).
The table of kill rates (killed / semantic) per format and kind is printed at the end of the
session (``pytest -s`` or the terminal summary).

Programs are also checked called in place (``program-ip``: the Program lowered for in-place
calls, with the runtimes' aliasing: an output slot is the input slot an in-place call overlays
on it, an alltoall's whole buffer), with mutants that leave an aliased read and write unordered
(``alias-nodep``) among the rest.

Default run: a deterministic sample of mutants per schedule and kind. ``-m slow``: every mutant.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

import topologies as T
from ccl import CclError, Problem, Request, lower, synthesize, verify, verify_program
from ccl.core.collective import builtin

from . import mutants as M

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "data" / "msccl-xml"  # RCCL's own files (MIT, see NOTICE there)

# (topology, collective, solver, chunks, root)
SCHEDULES = [
    ("ring:4", "allgather", "ring", 1, None),
    ("ring:4", "reducescatter", "ring", 2, None),
    ("ring:5", "allreduce", "ring", 1, None),
    ("ring:6", "allreduce", "double-binary-tree", 2, None),
    ("hypercube:8", "allreduce", "recursive-doubling", 1, None),
    ("dgx1", "alltoall", "direct", 1, None),
    ("dgx1", "broadcast", "binomial-tree", 2, 1),
    ("ndv2:2", "allgather", "hierarchical", 1, None),
    ("switch:4", "allgather", "packing", 2, None),
    ("ring:5", "broadcast", "packing", 1, 2),
    ("ndv2:2", "alltoall", "hierarchical", 1, None),
    ("line:3", "alltoall", "smt", 1, None),  # in place it clobbers inputs it still sends: snapshots
    ("dgx-h100", "allreduce", "nvls", 2, None),  # switch reductions: pushes, pulls, multicasts
    ("dgx-h100:2,sharp=on", "allreduce", "nvls-sharp", 1, None),
]
XML_FROM = [0, 1, 3, 6, 11]  # exported from these schedules (target msccl, fused receives, both modes)
XML_REFERENCE = ["rccl-alltoall-8n-0-9kb.xml"]
XML_REFERENCE_SLOW = ["rccl-alltoall-8n-9kb-190kb.xml"]
SAMPLE = {"algorithm": 6, "program": 4, "xml": 3}  # default: mutants per schedule and kind

TALLY: dict[tuple[str, str], Counter] = {}


def _name(s) -> str:
    return f"{s[0]}-{s[1]}-{s[2]}-k{s[3]}"


@cache
def _algorithm(i: int):
    spec, kind, solver, k, root = SCHEDULES[i]
    topo = T.build(spec)
    alg = synthesize(Problem(topo, builtin(kind, topo.n_ranks, root), Request(solver, chunks=k))).algorithm
    verify(alg)
    return alg


@cache
def _program(i: int):
    program = lower(_algorithm(i))
    verify_program(program)
    return program


@cache
def _program_ip(i: int):
    """The Program lowered for in-place calls (correct both ways)."""
    program = lower(_algorithm(i), in_place=True)
    verify_program(program)
    verify_program(program, in_place=True)
    return program


@cache
def _xml(name: str):
    """(text, collective, topology) of an exported or a reference file."""
    from backends.msccl import interpret, model
    from ccl.compiler.msccl import export_xml

    if name.endswith(".xml"):
        text = (REFERENCE / name).read_text()
        algo = model.parse(text, name)
        topo = T.build(f"fully-connected:{algo.ngpus}")
        coll = interpret.collective_of(algo, name)
        return text, coll, topo
    program = _program(int(name))
    text, _ = export_xml(_algorithm(int(name)), target="msccl", forward="on")  # in place too, as lowered for it
    coll = program.collective
    algo = model.parse(text)
    k = algo.nchunksperloop // (algo.ngpus if coll.kind in interpret.BLOCKED else 1)
    coll = builtin(coll.kind, coll.n_ranks, coll.root).chunk_up(k)
    return text, coll, program.topology


def _sample(items: list, n: int | None, seed: str) -> list:
    """Up to n mutants of each kind, chosen deterministically (all with n None)."""
    by_kind: dict[str, list] = {}
    for m in items:
        by_kind.setdefault(m.kind, []).append(m)
    out = []
    for kind, ms in by_kind.items():
        if n is not None and len(ms) > n:
            ms = random.Random(f"{seed}-{kind}").sample(ms, n)
        out.extend(ms)
    return out


def _record(fmt: str, kind: str, semantic: bool, rejected: bool) -> str:
    c = TALLY.setdefault((fmt, kind), Counter())
    c["mutants"] += 1
    if semantic:
        c["semantic"] += 1
        c["killed" if rejected else "survived"] += 1
        return "" if rejected else "survived"
    c["strict" if rejected else "equivalent"] += 1
    return ""


def _run_algorithm(i: int, limit: int | None) -> list[str]:
    alg = _algorithm(i)
    survivors = []
    for m in _sample(list(M.algorithm_mutants(alg)), limit, _name(SCHEDULES[i])):
        try:
            M.run_algorithm(alg.collective, alg.topology, m.value)
            semantic = False
        except M.Wrong:
            semantic = True
        try:
            verify(alg.with_transfers(m.value))
            rejected = False
        except CclError:
            rejected = True
        if _record("algorithm", m.kind, semantic, rejected):
            survivors.append(m.what)
    return survivors


def _run_program(i: int, limit: int | None, in_place: bool = False) -> list[str]:
    program = _program_ip(i) if in_place else _program(i)
    fmt = "program-ip" if in_place else "program"
    survivors = []
    for m in _sample(list(M.program_mutants(program)), limit, _name(SCHEDULES[i])):
        semantic = bool(M.program_ok(program, m.value, in_place=in_place))
        try:
            verify_program(M.rebuild(program, m.value), in_place=in_place)
            rejected = False
        except CclError:
            rejected = True
        if _record(fmt, m.kind, semantic, rejected):
            survivors.append(m.what)
    return survivors


def _in_place_agrees(program) -> bool:
    """Whether a Program is correct called in place; the verifier and the reference (with the
    runtimes' aliasing, ``M.overlay``) must agree."""
    wrong = M.program_ok(program, [list(ops) for ops in program.ranks], orders=12, in_place=True)
    try:
        verify_program(program, in_place=True)
    except CclError as exc:
        assert wrong, f"the verifier refuses in place what every tried order gets right: {exc}"
        return False
    assert not wrong, f"the verifier accepts in place what the reference gets wrong: {wrong}"
    return True


def _run_xml(name: str, limit: int | None) -> list[str]:
    text, coll, topo = _xml(name)
    assert M.xml_ok(text, coll, topo) == ""  # the reference agrees the original is correct
    assert not M.xml_rejected(text, topo)
    survivors = []
    for m in _sample(list(M.xml_mutants(text)), limit, name):
        why = M.xml_ok(m.value, coll, topo)
        rejected = M.xml_rejected(m.value, topo)
        if _record("xml", m.kind, bool(why), rejected):
            survivors.append(f"{m.what} ({why})")
    return survivors


ALG_IDS = [_name(s) for s in SCHEDULES]
XML_NAMES = [str(i) for i in XML_FROM] + XML_REFERENCE


@pytest.mark.parametrize("i", range(len(SCHEDULES)), ids=ALG_IDS)
def test_algorithm_verifier_kills_semantic_mutants(i):
    assert _run_algorithm(i, SAMPLE["algorithm"]) == []


@pytest.mark.parametrize("i", range(len(SCHEDULES)), ids=ALG_IDS)
def test_program_verifier_kills_semantic_mutants(i):
    assert _run_program(i, SAMPLE["program"]) == []


@pytest.mark.parametrize("i", range(len(SCHEDULES)), ids=ALG_IDS)
def test_in_place_verdicts_agree_with_the_reference(i):
    """The out-of-place lowering is correct in place except where an in-place call overlays
    memory the schedule still reads (alltoall: the whole buffer); the in-place lowering always
    is. The reference agrees on both."""
    kind = SCHEDULES[i][1]
    assert _in_place_agrees(_program(i)) == (kind != "alltoall")
    assert _in_place_agrees(_program_ip(i))


@pytest.mark.parametrize("i", range(len(SCHEDULES)), ids=ALG_IDS)
def test_program_verifier_in_place_kills_semantic_mutants(i):
    assert _run_program(i, SAMPLE["program"] // 2, in_place=True) == []


@pytest.mark.parametrize("i", range(len(SCHEDULES)), ids=ALG_IDS)
def test_program_verifier_in_place_kills_every_unordered_aliased_pair(i):
    """Every ``alias-nodep`` mutant (an aliased read and write left unordered) of the Program
    lowered in place: the verifier refuses each one the reference finds wrong, naming the rank,
    the op and the slot."""
    program = _program_ip(i)
    survivors = []
    for m in M.alias_mutants(program):
        semantic = bool(M.program_ok(program, m.value, in_place=True))
        try:
            verify_program(M.rebuild(program, m.value), in_place=True)
            rejected = False
        except CclError as exc:
            rejected = True
            assert exc.rank is not None and " op " in exc.message and "[" in exc.message, exc.message
        verify_program(M.rebuild(program, m.value))  # out of place the pair is no conflict
        if _record("program-ip", m.kind, semantic, rejected):
            survivors.append(m.what)
    assert survivors == []


@pytest.mark.parametrize("name", XML_NAMES)
def test_xml_verifier_kills_semantic_mutants(name):
    assert _run_xml(name, SAMPLE["xml"]) == []


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(SCHEDULES)), ids=ALG_IDS)
def test_algorithm_verifier_kills_every_semantic_mutant(i):
    assert _run_algorithm(i, None) == []


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(SCHEDULES)), ids=ALG_IDS)
def test_program_verifier_kills_every_semantic_mutant(i):
    assert _run_program(i, None) == []


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(SCHEDULES)), ids=ALG_IDS)
def test_program_verifier_in_place_kills_every_semantic_mutant(i):
    assert _run_program(i, None, in_place=True) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", XML_NAMES + XML_REFERENCE_SLOW)
def test_xml_verifier_kills_every_semantic_mutant(name):
    # the larger reference file: 80 mutants per kind (all 1,952 take minutes)
    assert _run_xml(name, 80 if name in XML_REFERENCE_SLOW else None) == []


def test_the_reference_executions_see_what_they_should():
    """The references are not vacuous: each format's reference flags a lost chunk, a doubled
    reduce and a race, and passes the original schedule."""
    alg = _algorithm(2)  # ring allreduce
    M.run_algorithm(alg.collective, alg.topology, list(alg.transfers))
    reduce_at = next(i for i, t in enumerate(alg.transfers) if t.op == "reduce")
    for bad in (list(alg.transfers[1:]), list(alg.transfers) + [alg.transfers[reduce_at]._replace(step=99)]):
        with pytest.raises(M.Wrong):
            M.run_algorithm(alg.collective, alg.topology, bad)
    program = _program(2)
    assert M.program_ok(program, [list(ops) for ops in program.ranks]) == ""
    # a reduce whose dependencies are removed races with what feeds it
    ranks = [list(ops) for ops in program.ranks]
    r, i = next((r, i) for r, ops in enumerate(ranks) for i, op in enumerate(ops) if op.kind == "reduce" and op.deps)
    ranks[r][i] = ranks[r][i]._replace(deps=())
    assert M.program_ok(program, ranks, orders=12) != ""
    # reducing into the input after the end is harmless out of place, wrong in place
    from ccl.core.program import Op

    program = _program(4)  # recursive doubling: output j aliases input j
    ranks = [list(ops) for ops in program.ranks]
    ranks[0].append(Op("reduce", program.steps, "input", 0, 1, -1, "scratch", 0, -1, 0, tuple(range(len(ranks[0])))))
    assert M.program_ok(program, ranks) == "" and M.program_ok(program, ranks, in_place=True) != ""
    text, coll, topo = _xml("0")
    assert M.xml_ok(text, coll, topo) == ""
    assert M.xml_ok(text.replace('type="r"', 'type="rrc"', 1), coll, topo) != ""


def pytest_terminal_summary_table() -> str:
    lines = [f"{'format':<10} {'kind':<16} {'mutants':>7} {'semantic':>8} {'killed':>6} {'survived':>8} "
             f"{'equiv':>5} {'strict':>6} {'kill rate':>9}"]
    for (fmt, kind), c in sorted(TALLY.items()):
        rate = f"{c['killed'] / c['semantic']:.0%}" if c["semantic"] else "-"
        lines.append(f"{fmt:<10} {kind:<16} {c['mutants']:>7} {c['semantic']:>8} {c['killed']:>6} "
                     f"{c['survived']:>8} {c['equivalent']:>5} {c['strict']:>6} {rate:>9}")
    for fmt in ("algorithm", "program", "program-ip", "xml"):
        cs = [c for (f, _), c in TALLY.items() if f == fmt]
        if cs:
            sem, killed = sum(c["semantic"] for c in cs), sum(c["killed"] for c in cs)
            lines.append(f"{fmt}: {killed}/{sem} semantic mutants killed "
                         f"({sum(c['mutants'] for c in cs)} mutants, {sum(c['equivalent'] for c in cs)} equivalent, "
                         f"{sum(c['strict'] for c in cs)} rejected though equivalent)")
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def _print_table():
    yield
    if TALLY:
        print("\nverifier mutation testing: kill rates\n" + pytest_terminal_summary_table())


def test_ccl_import_msccl_refuses_a_semantic_mutant(tmp_path, capsys):
    """The CLI path the XML mutants stand for: a receive turned into a receive-reduce-copy is
    refused with exit 4 and one line naming the file's gpu, tb and step."""
    from ccl.cli import main

    text, coll, topo = _xml("0")
    mutant = text.replace('type="r"', 'type="rrc"', 1)
    assert M.xml_ok(mutant, coll, topo) != ""
    path = tmp_path / "mutant.xml"
    path.write_text(mutant)
    assert main(["import", "msccl", str(path), "-t", "ring:4", "-o", str(tmp_path / "p.json")]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpu " in err[0] and " tb " in err[0] and " step " in err[0], err
    assert not (tmp_path / "p.json").exists()
