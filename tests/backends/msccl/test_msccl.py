"""The MSCCL XML backend: export every collective for both runtimes within their limits, read
the files back with the same semantics, read the runtimes' own published files, refute broken
files naming gpu/tb/step, and the CLI around it."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from backends.msccl import interpret, limits, model
from ccl import compiler
from ccl.cli import main
from ccl.compiler.loader import read_xml, verify_imported
from ccl.compiler.msccl import export_xml
from ccl.core.errors import BackendError, InputError, VerificationError

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = ROOT / "tests" / "data" / "msccl-xml"  # RCCL's own files (MIT, see NOTICE there)
SHIPPED = sorted(REFERENCE.glob("*.xml"))

CASES = [
    ("ring:4", "allgather", "ring", 1), ("dgx1", "allgather", "multi-ring", 2),
    ("ring:4", "reducescatter", "ring", 1), ("dgx1", "reducescatter", "recursive-halving", 1),
    ("dgx1", "allreduce", "ring", 2), ("hypercube:8", "allreduce", "recursive-doubling", 1),
    ("ring:6", "allreduce", "double-binary-tree", 2), ("dgx1", "alltoall", "direct", 1),
    ("ndv2:2", "alltoall", "hierarchical", 1), ("dgx1", "broadcast", "binomial-tree", 2),
    ("amd8", "reduce", "ring", 4), ("dgx-h100:2", "allreduce", "hierarchical-pipelined", 1),
]


def _program(topo: str, coll: str, solver: str, chunks: int, channels: int = 1):
    result = compiler.synthesize(compiler.problem_from_options(topo, coll, solver=solver, chunks=chunks))
    return compiler.program(result, channels=channels)


@pytest.mark.parametrize("target", ["msccl", "rccl"])
@pytest.mark.parametrize("topo,coll,solver,chunks", CASES)
def test_export_round_trip(topo, coll, solver, chunks, target):
    program = _program(topo, coll, solver, chunks)
    text, summary = export_xml(program, target=target, protocol="LL128" if chunks > 1 else "Simple")
    algo = model.parse(text, "x.xml")
    assert model.dumps(algo) == text  # deterministic, lossless
    tgt = limits.TARGETS[target]
    assert limits.check(algo, tgt) == []
    assert algo.ngpus == program.n_ranks and algo.coll == tgt.coll[coll] and algo.missing == ()
    if not tgt.fused:
        assert {s.type for g in algo.gpus for tb in g.tbs for s in tb.steps} <= {"s", "r", "cpy", "re", "nop"}
    imported = interpret.read_program(algo, program.topology, path="x.xml")
    checked = verify_imported(imported)  # the file's own semantics implement the same collective
    assert checked["out_of_place"] and imported.program.collective.kind == coll
    assert imported.program.collective.chunk_factor == program.collective.chunk_factor
    assert summary["threadblocks"] <= tgt.max_tbs and summary["max_steps"] <= tgt.max_steps


def test_fused_receive_reduce_only_where_the_runtime_runs_it():
    program = _program("dgx1", "allreduce", "ring", 1)
    steps = {t: [s.type for g in model.parse(export_xml(program, target=t)[0]).gpus for tb in g.tbs for s in tb.steps]
             for t in ("msccl", "rccl")}
    assert {"rrc", "rrcs"} & set(steps["msccl"]) and "re" in steps["rccl"]
    assert not {"rrc", "rrcs", "rcs", "rrs"} & set(steps["rccl"])


@pytest.mark.parametrize("topo,coll,solver,chunks", [
    ("ring:4", "allgather", "ring", 1), ("dgx1", "allreduce", "ring", 1), ("ring:5", "reducescatter", "ring", 1),
    ("amd8", "reduce", "ring", 2), ("dgx1", "allgather", "multi-ring", 2), ("ring:8", "broadcast", "ring", 4)])
def test_forwards_fuse_into_rcs_and_keep_message_order(topo, coll, solver, chunks):
    program = _program(topo, coll, solver, chunks)
    text, summary = export_xml(program, target="msccl", forward="on")
    algo = model.parse(text)
    types = [s.type for g in algo.gpus for tb in g.tbs for s in tb.steps]
    assert {"rcs", "rrcs"} & set(types)
    for g in algo.gpus:  # a forwarding threadblock owns both connections
        for tb in g.tbs:
            if any(s.type in ("rcs", "rrcs") for s in tb.steps):
                assert tb.send != -1 and tb.recv != -1
    verify_imported(interpret.read_program(algo, program.topology))
    _independent_check(text, "msccl")
    auto = export_xml(program, target="msccl")[1]["forward"]
    assert auto is None or auto["forwards_fused_us"] > 0 and auto["separate_us"] > 0


def test_long_schedules_spread_over_channels_to_fit_64_steps():
    program = _program("ring:40", "allreduce", "ring", 1)  # 78 messages per connection
    text, summary = export_xml(program, target="rccl")
    algo = model.parse(text)
    assert algo.nchannels > 1 and summary["max_steps"] <= 64
    verify_imported(interpret.read_program(algo, program.topology))


def test_a_schedule_that_cannot_fit_is_refused_with_the_limit():
    program = _program("fully-connected:72", "allgather", "direct", 1)  # 71 peers: > 64 threadblocks even merged
    with pytest.raises(BackendError, match="threadblocks"):
        export_xml(program, target="rccl")


@pytest.mark.parametrize("coll,root", [("gather", 2), ("scatter", 1), ("broadcast", 3), ("reduce", 1)])
def test_rooted_collectives_keep_their_root(coll, root):
    result = compiler.synthesize(compiler.problem_from_options("ring:4", coll, solver="direct", root=root, chunks=2))
    program = compiler.program(result)
    text, summary = export_xml(program, target="rccl")
    algo = model.parse(text)
    assert algo.coll == coll and algo.nchunksperloop == 2  # gather/scatter: one rank's part, as the runtimes count
    imported = interpret.read_program(algo, program.topology)
    assert imported.program.collective.root == root
    verify_imported(imported)


def test_old_msccl_spelling_is_read_and_flagged():
    program = _program("ring:4", "reducescatter", "ring", 1)
    text = export_xml(program, target="msccl")[0].replace('coll="reducescatter"', 'coll="reduce_scatter"')
    algo = model.parse(text)
    verify_imported(interpret.read_program(algo, program.topology))
    assert any("reduce_scatter" in str(v) for v in limits.check(algo, limits.TARGETS["rccl"]))


def test_the_reference_files_ship_with_the_tests():
    """The published files the tests read are in the repository, with their origin and licence
    (a clone runs every test without anything beside it)."""
    assert [p.name for p in SHIPPED] == ["rccl-allreduce-allpairs-8n-simple.xml", "rccl-alltoall-8n-0-9kb.xml",
                                         "rccl-alltoall-8n-9kb-190kb.xml"]
    notice = (REFERENCE / "NOTICE").read_text()
    assert "MIT License" in notice and "ROCm/rccl" in notice
    assert all(p.name in notice for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_rccl_files_import_verify_and_simulate(path):
    imported = read_xml(path, "amd8")
    checked = verify_imported(imported)
    assert checked == ({"out_of_place": True} if imported.algo.outofplace else {"in_place": True})
    for name, tgt in limits.TARGETS.items():
        assert limits.check(imported.algo, tgt) == [], name
    report = compiler.simulate(imported.program, 1 << 20)
    assert report.time_us > report.bound_us > 0


@pytest.mark.parametrize("name,in_place", [("rccl-alltoall-8n-9kb-190kb.xml", False),
                                           ("rccl-allreduce-allpairs-8n-simple.xml", True)])
def test_shipped_files_run_on_gloo_like_torch(name, in_place):
    pytest.importorskip("torch")
    path = REFERENCE / name
    report = compiler.run_local(str(path), size=64 * 1024, repeat=0, in_place=in_place)
    assert report.correct is True


# ---------------------------------------------------------------------- broken files
@pytest.fixture(scope="module")
def ring_xml() -> str:
    return export_xml(_program("ring:4", "allreduce", "ring", 1), target="rccl")[0]


def _refute(text: str):
    algo = model.parse(text, "bad.xml")
    imported = interpret.read_program(algo, compiler.load_topology("ring:4"), path="bad.xml")
    verify_imported(imported)


def test_a_wrong_offset_is_refuted_naming_the_step(ring_xml):
    lines = ring_xml.splitlines()
    k = next(i for i, line in enumerate(lines) if 'type="r"' in line and 'dstbuf="o"' in line)
    lines[k] = re.sub(r'dstoff="(\d+)"', lambda m: f'dstoff="{(int(m.group(1)) + 1) % 4}"', lines[k])
    with pytest.raises(VerificationError, match=r"gpu \d+ tb \d+ step \d+"):
        _refute("\n".join(lines))


def test_a_missing_step_is_refuted_naming_the_unmatched_one(ring_xml):
    lines = ring_xml.splitlines()
    k = max(i for i, line in enumerate(lines) if 'type="s"' in line)  # the last step of a send threadblock
    del lines[k]
    with pytest.raises(VerificationError, match=r"gpu \d+ tb \d+ step \d+.*never matched"):
        _refute("\n".join(lines))


def test_a_swapped_peer_is_refuted(ring_xml):
    m = re.search(r'<gpu id="0".*?<tb id="(\d+)" send="(\d+)" recv="-1"', ring_xml, re.S)
    peer = int(m.group(2))
    text = ring_xml[:m.start(2)] + str(3 if peer == 1 else 1) + ring_xml[m.end(2):]
    assert text != ring_xml
    with pytest.raises((VerificationError, InputError), match=r"gpu \d+"):
        _refute(text)


def test_a_dependency_cycle_is_a_deadlock_naming_the_step(ring_xml):
    algo = model.parse(ring_xml)
    g = algo.gpus[0]
    a, b = g.tbs[0], g.tbs[1]
    wait_b = model.Step(0, "nop", "i", -1, "o", -1, 0, b.id, 0, 1)
    wait_a = model.Step(0, "nop", "i", -1, "o", -1, 0, a.id, 0, 1)
    renumber = lambda steps: tuple(replace(s, s=i) for i, s in enumerate(steps))  # noqa: E731
    tbs = (model.Threadblock(a.id, a.send, a.recv, a.chan, renumber((wait_b, *a.steps))),
           model.Threadblock(b.id, b.send, b.recv, b.chan, renumber((wait_a, *b.steps))), *g.tbs[2:])
    broken = replace(algo, gpus=(replace(g, tbs=tbs), *algo.gpus[1:]))
    with pytest.raises(VerificationError, match="deadlock"):
        _refute(model.dumps(broken))


@pytest.mark.parametrize("text,match", [
    ("<algo", r"bad\.xml:1:\d+: not well-formed"),
    ('<algo name="x" proto="Simple" nchannels="1" ngpus="2" coll="allreduce"></algo>', "nchunksperloop"),
    ('<algo nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce"><gpu id="0" i_chunks="2" o_chunks="0" '
     's_chunks="0"><tb id="0" send="1" recv="-1" chan="0"><step s="0" type="zz" srcbuf="i" srcoff="0" dstbuf="o" '
     'dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu></algo>', "gpu 0 tb 0 step 0: step type 'zz'"),
])
def test_malformed_files_name_the_line(text, match):
    with pytest.raises(InputError, match=match):
        model.parse(text, "bad.xml")


# ---------------------------------------------------------------------- CLI
def _cli(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_emit_verify_import_simulate(tmp_path, capsys):
    sched = tmp_path / "ar.json"
    assert _cli(capsys, "synthesize", "-t", "dgx1", "-c", "allreduce", "-s", "ring", "-o", sched)[0] == 0
    xml = tmp_path / "ar.xml"
    code, out, _ = _cli(capsys, "emit", "msccl", sched, "--target", "rccl", "--max-bytes", "64MiB", "-o", xml, "--json")
    data = json.loads(out)
    assert code == 0 and data["maxBytes"] == 64 << 20 and data["inplace"] == 1 and data["outofplace"] == 1
    assert 'minBytes="0" maxBytes="67108864"' in xml.read_text()
    code, out, _ = _cli(capsys, "verify", xml, "-t", "dgx1", "--json")
    data = json.loads(out)
    assert code == 0 and data["targets"]["rccl"]["ok"] and data["verified"] == {"out_of_place": True, "in_place": True}
    prog = tmp_path / "ar-program.json"
    assert _cli(capsys, "import", "msccl", xml, "-t", "dgx1", "-o", prog)[0] == 0
    code, out, _ = _cli(capsys, "simulate", prog, "--size", "64MiB", "--json")
    assert code == 0 and json.loads(out)["time_us"] > 0
    code, out, _ = _cli(capsys, "verify", prog)
    assert code == 0 and "program" in out
    before = (tmp_path / "again.xml")
    assert _cli(capsys, "emit", "msccl", prog, "--target", "rccl", "--max-bytes", "64MiB", "-o", before)[0] == 0
    assert before.read_text() == xml.read_text()  # a program file exports to the same bytes


def test_cli_refutes_a_broken_file_with_exit_4(tmp_path, capsys, ring_xml):
    lines = ring_xml.splitlines()
    del lines[max(i for i, line in enumerate(lines) if 'type="s"' in line)]
    bad = tmp_path / "bad.xml"
    bad.write_text("\n".join(lines))
    code, _, err = _cli(capsys, "verify", bad)
    assert code == 4 and "tb" in err and "step" in err and "Traceback" not in err
    code, _, err = _cli(capsys, "verify", tmp_path / "missing.xml")
    assert code == 2 and "no such file" in err


# ---------------------------------------------------------------------- an independent reading
def _independent_check(text: str, target: str) -> None:
    """The runtimes' rules, read with ElementTree (not this package's reader): the parsers'
    syntax (no declaration, one element per line, double quotes, decimal integers without
    leading zeros), every required attribute, contiguous ids and step indices, one dependency
    per nop and the step after nops with its own, hasdep on every waited-for step, one
    threadblock per connection, cnt in range, and both ends of every connection agreeing on
    the number and sizes of messages."""
    import xml.etree.ElementTree as ET

    assert not text.startswith("<?xml") and "\t" not in text and "'" not in text
    for line in text.splitlines():
        assert line.strip().startswith("<") and line.strip().endswith(">") and line.count("<") == 1
    for value in re.findall(r'="([^"]*)"', text):
        assert not re.fullmatch(r"-?0\d+", value), value
    root = ET.fromstring(text)
    required = {"algo": "name proto nchannels nchunksperloop ngpus coll inplace outofplace minBytes maxBytes",
                "gpu": "id i_chunks o_chunks s_chunks", "tb": "id send recv chan",
                "step": "s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep"}
    for el in root.iter():
        assert set(required[el.tag].split()) <= set(el.attrib), el.tag
    tgt = limits.TARGETS[target]
    types = {"s", "r", "cpy", "re", "nop"} | ({"rcs", "rrs", "rrc", "rrcs"} if tgt.fused else set())
    n = int(root.get("ngpus"))
    assert [int(g.get("id")) for g in root] == list(range(n))
    messages: dict[tuple[int, int, int], list[list[int]]] = {}
    for g in root:
        me = int(g.get("id"))
        tbs = list(g)
        assert [int(t.get("id")) for t in tbs] == list(range(len(tbs))) and len(tbs) <= tgt.max_tbs
        waited = set()
        conns = set()
        for t in tbs:
            send, recv, chan = int(t.get("send")), int(t.get("recv")), int(t.get("chan"))
            assert 0 <= chan < int(root.get("nchannels"))
            for role, peer in (("s", send), ("r", recv)):
                if peer != -1:
                    assert (role, peer, chan) not in conns and peer != me
                    conns.add((role, peer, chan))
            steps = list(t)
            assert [int(s.get("s")) for s in steps] == list(range(len(steps))) and len(steps) <= tgt.max_steps
            after_nop = False
            for s in steps:
                kind, depid, deps = s.get("type"), int(s.get("depid")), int(s.get("deps"))
                assert kind in types
                if kind == "nop":
                    assert depid >= 0 and deps >= 0
                elif after_nop:
                    assert depid >= 0  # the step after a run of nops carries its own wait
                after_nop = kind == "nop"
                if depid >= 0:
                    assert depid != int(t.get("id"))
                    waited.add((depid, deps))
                cnt = int(s.get("cnt"))
                if kind != "nop":
                    assert 1 <= cnt <= tgt.max_cnt
                if kind in ("s", "rcs", "rrs", "rrcs"):
                    messages.setdefault((me, send, chan), [[], []])[0].append(cnt)
                if kind in ("r", "rcs", "rrs", "rrc", "rrcs"):
                    messages.setdefault((recv, me, chan), [[], []])[1].append(cnt)
        for t in tbs:
            for s in t:
                assert (int(s.get("hasdep")) == 1) == ((int(t.get("id")), int(s.get("s"))) in waited)
    for key, (out, into) in messages.items():
        assert out == into, key


@pytest.mark.parametrize("target", ["msccl", "rccl"])
@pytest.mark.parametrize("topo,coll,solver,chunks", CASES[::2])
def test_exported_files_pass_an_independent_reading(topo, coll, solver, chunks, target):
    text, _ = export_xml(_program(topo, coll, solver, chunks), target=target)
    _independent_check(text, target)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("topo,coll,solver,chunks", CASES[:8])
def test_instances_replicate_on_their_own_channels(topo, coll, solver, chunks, n):
    program = _program(topo, coll, solver, chunks)
    text, summary = export_xml(program, target="msccl", instances=n)
    algo = model.parse(text)
    assert summary["instances"] == n and algo.nchannels >= n * program.channels
    assert algo.nchunksperloop == n * export_xml(program, target="msccl")[1]["nchunksperloop"]
    imported = interpret.read_program(algo, program.topology)
    verify_imported(imported)
    _independent_check(text, "msccl")


def _every_template():
    import solvers

    out = []
    for name, info in solvers.SOLVERS.items():
        if not info.template or name.startswith("nvls"):  # switch reductions have no XML: refused, below
            continue
        for kind in info.kinds:
            if kind in ("gather", "scatter"):
                continue
            topo = "ndv2:2" if name in ("hierarchical", "hierarchical-pipelined", "rail-rings", "torus-2d",
                                        "torus-2d-tree", "blueconnect") else "dgx1"
            heavy = kind == "allreduce" and name in ("hierarchical-pipelined", "rail-rings")  # 10-20 s each
            out.append(pytest.param(name, kind, topo, marks=pytest.mark.slow) if heavy else (name, kind, topo))
    return out


@pytest.mark.parametrize("solver,kind,topo", _every_template())
def test_every_template_round_trips_through_xml(solver, kind, topo):
    program = _program(topo, kind, solver, 1)
    for target in ("msccl", "rccl"):
        text, _ = export_xml(program, target=target, forward="on")
        verify_imported(interpret.read_program(model.parse(text), program.topology))


@pytest.mark.parametrize("topo,kind", [("dgx-h100:2", "allgather"), ("dgx1", "broadcast")])
def test_packing_schedules_round_trip(topo, kind):
    result = compiler.synthesize(compiler.problem_from_options(topo, kind, solver="packing", size=64 << 20))
    program = compiler.program(result)
    text, summary = export_xml(program, target="msccl")
    verify_imported(interpret.read_program(model.parse(text), program.topology))
    assert summary["max_steps"] <= 64


@pytest.mark.parametrize("coalesce", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_packing_allreduce_shapes_round_trip(coalesce):
    """A pipelined packing allreduce, plain or coalesced (pieces packed into scratch by local
    copies, sent as one message, unpacked by local reductions), exported and read back."""
    from ccl import Problem, Request
    from ccl.core.collective import builtin
    from solvers.packing import Shape, plan, slot_count
    from solvers.packing.schedule import build
    from topologies import build as topology

    topo = topology("dgx1")
    packing = plan(topo, "allreduce", None)
    shape = Shape(4, coalesce=coalesce)
    alg = build(Problem(topo, builtin("allreduce", 8), Request("packing")), packing,
                slot_count(packing, 1, 8, shape), shape)
    program = compiler.program(alg)
    text, summary = export_xml(program, target="msccl")
    verify_imported(interpret.read_program(model.parse(text), program.topology))
    assert summary["max_steps"] <= 64


def test_python_api(tmp_path):
    import ccl

    result = ccl.synthesize(ccl.problem("ring:4", "allgather", solver="ring"))
    text = ccl.to_msccl(result, target="rccl", max_bytes=1 << 20)
    path = tmp_path / "ag.xml"
    path.write_text(text)
    program = ccl.from_msccl(str(path), "ring:4")
    assert program.collective.kind == "allgather" and program.topology.name.startswith("ring")
    assert ccl.from_msccl(str(path), in_place=True).collective.aliases != program.collective.aliases


@pytest.mark.parametrize("topo,coll,solver,options", [
    ("dgx1", "allgather", "smt", {"steps": 2}), ("ring:4", "reducescatter", "smt", {"chunks": 2}),
    ("ring:4", "allreduce", "milp", {"size": 1 << 20}), ("ring:4", "allgather", "teccl", {"size": 1 << 20}),
])
def test_searching_solvers_round_trip(topo, coll, solver, options):
    result = compiler.synthesize(compiler.problem_from_options(topo, coll, solver=solver, **options))
    program = compiler.program(result)
    for target in ("msccl", "rccl"):
        text, _ = export_xml(program, target=target)
        verify_imported(interpret.read_program(model.parse(text), program.topology))


@pytest.mark.parametrize("topo,coll,solver,chunks,in_place", [
    ("ring:4", "allreduce", "ring", 1, False), ("ring:4", "allreduce", "ring", 1, True),
    ("ring:4", "allgather", "recursive-doubling", 2, False), ("ring:4", "alltoall", "direct", 1, False),
    ("ring:4", "reducescatter", "ring", 1, True),
])
def test_exported_files_run_on_gloo_like_torch(tmp_path, topo, coll, solver, chunks, in_place):
    pytest.importorskip("torch")
    program = _program(topo, coll, solver, chunks)
    path = tmp_path / "x.xml"
    path.write_text(export_xml(program, target="msccl", forward="on")[0])
    report = compiler.run_local(str(path), size=4096, repeat=0, in_place=in_place, topology=topo)
    assert report.correct is True


# ---------------------------------------------------------------------- in place, leniency
def test_elements_the_runtimes_skip_are_skipped_and_reported(tmp_path, capsys, ring_xml):
    """Both runtimes' parsers read only the elements they have a handler for (<gpu> in <algo>,
    <tb> in <gpu>, <step> in <tb>) and skip the rest with what is inside: a <copy> inside
    <gpu> as in published TE-CCL files. The reader does the same and ``ccl verify`` says so."""
    lines = ring_xml.splitlines()
    gpu = next(i for i, line in enumerate(lines) if line.strip().startswith('<gpu id="1"'))
    tb = next(i for i, line in enumerate(lines) if line.strip().startswith("<tb ") and i > gpu)
    lines.insert(tb + 1, '      <note text="runtimes ignore this"/>')
    lines.insert(gpu + 1, '    <copy src="i" srcoff="0" dst="o" dstoff="0" cnt="1"><chunk id="0"/></copy>')
    lines.insert(1, "  <comment>written by hand</comment>")
    text = "\n".join(lines)
    algo = model.parse(text, "x.xml")
    assert [(tag, inside) for _line, tag, inside in algo.skipped] == [
        ("comment", "<algo>"), ("copy", "gpu 1"), ("note", "gpu 1 tb 0")]
    assert model.dumps(algo) == ring_xml  # nothing else changed
    path = tmp_path / "x.xml"
    path.write_text(text)
    code, out, _ = _cli(capsys, "verify", path, "-t", "ring:4")
    assert code == 0 and "skipped, as both runtimes' parsers skip them: <comment> (line 2, in <algo>), <copy> " \
                          "(line" in out
    code, out, _ = _cli(capsys, "verify", path, "-t", "ring:4", "--json")
    assert [s["element"] for s in json.loads(out)["skipped"]] == ["comment", "copy", "note"]


def test_a_misspelled_step_is_skipped_as_the_runtimes_do_and_named_when_it_breaks(tmp_path, capsys, ring_xml):
    lines = ring_xml.splitlines()
    k = next(i for i, line in enumerate(lines) if 'type="r"' in line)
    lines[k] = lines[k].replace("<step ", "<stpe ", 1)
    path = tmp_path / "x.xml"
    path.write_text("\n".join(lines))
    code, _, err = _cli(capsys, "verify", path, "-t", "ring:4")
    assert code == 2 and "step indices must run 0, 1, 2" in err  # the runtimes would run the steps renumbered
    assert f"the runtimes skip <stpe> (line {k + 1}" in err and len(err.strip().splitlines()) == 1


def test_shipped_alltoall_files_are_out_of_place_only_and_racy_in_place():
    """RCCL's own alltoall files claim out of place only: in place (one buffer for all blocks)
    their receive into block j and send of block j would race, and the verifier says so."""
    path = REFERENCE / "rccl-alltoall-8n-0-9kb.xml"
    text = path.read_text()
    assert 'inplace="0"' in text
    algo = model.parse(text.replace('inplace="0"', 'inplace="1"', 1), "a.xml")
    with pytest.raises(VerificationError, match="in place, output"):
        verify_imported(interpret.read_program(algo, compiler.load_topology("amd8"), path="a.xml"))


@pytest.mark.parametrize("target", ["msccl", "rccl"])
def test_the_amd8_direct_alltoall_exports_for_both_and_runs_in_place_on_gloo(tmp_path, target):
    """The issue's case end to end: synthesize, export (each target), verify in both modes; and
    the msccl file's in-place Program run by torch with one buffer for input and output."""
    result = compiler.synthesize(compiler.problem_from_options("amd8", "alltoall", solver="direct"))
    text, summary = export_xml(result, target=target)
    algo = model.parse(text)
    assert (algo.inplace, algo.outofplace) == (1, 1) and summary["in_place"]["lowered_in_place"]
    imported = interpret.read_program(algo, compiler.load_topology("amd8"), path="x.xml")
    assert verify_imported(imported) == {"out_of_place": True, "in_place": True}
    if target == "msccl":
        pytest.importorskip("torch")
        path = tmp_path / "a.xml"
        path.write_text(text)
        report = compiler.run_local(str(path), size=8 * 1024, repeat=0, in_place=True, topology="amd8")
        assert report.correct is True


def test_auto_falls_back_to_out_of_place_when_the_in_place_program_does_not_fit(monkeypatch):
    """The Program lowered for in-place calls has more ops than the out-of-place one; where
    only it overflows the target, auto writes the file for out-of-place calls and says why
    (both and inplace refuse)."""
    from ccl.compiler import msccl as driver

    real = driver.export.export

    def tight(program, tgt, **kw):
        if kw["in_place"]:
            raise BackendError(f"the schedule does not fit {tgt.name}'s limits (as if)")
        return real(program, tgt, **kw)

    monkeypatch.setattr(driver.export, "export", tight)
    result = compiler.synthesize(compiler.problem_from_options("ring:4", "alltoall", solver="direct"))
    text, summary = export_xml(result, target="rccl")
    assert 'inplace="0" outofplace="1"' in text
    assert summary["in_place"]["claimed"] is False and summary["in_place"]["lowered_in_place"] is True
    assert "lowered for in-place calls does not fit rccl" in summary["in_place"]["reason"]
    with pytest.raises(BackendError, match="as if"):
        export_xml(result, target="rccl", mode="both")


def test_a_schedule_that_reduces_in_a_switch_is_refused_with_one_line(tmp_path, capsys):
    """The XML runtimes (MSCCL, RCCL, MSCCL++) have no in-switch reduction step: exporting an
    NVLS schedule exits 2 with one line saying so, and writes nothing."""
    sched = tmp_path / "nvls.json"
    assert _cli(capsys, "synthesize", "-t", "dgx-h100", "-c", "allreduce", "-s", "nvls", "-k", "2", "-o", sched)[0] == 0
    out_file = tmp_path / "nvls.xml"
    for target in limits.TARGETS:
        code, out, err = _cli(capsys, "emit", "msccl", sched, "--target", target, "-o", out_file)
        assert code == 2 and not out and not out_file.exists()
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "reduces in a switch" in lines[0] and "Traceback" not in err, err
    with pytest.raises(InputError, match="has no in-switch reduction step"):
        export_xml(str(sched), target="msccl")
