"""Exports that deploy: threadblocks that keep the Program's order (no cycle the Program does not
have), layouts that fit the targets' limits, unfit ranges named with their limit and need, the
protocol per range, every file passing the independent checker (``independent.py``) in every
mode it claims."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from backends.msccl import assign, export, interpret, limits, model
from ccl import compiler
from ccl.cli import main
from ccl.compiler.loader import verify_imported
from ccl.compiler.msccl import export_xml, protocol_for
from ccl.compiler.tuner import tune
from ccl.core.schedule_set import Entry, ScheduleSet, load_set, save_set, set_to_json

from . import independent


def _result(topo: str, coll: str, solver: str, **request):
    return compiler.synthesize(compiler.problem_from_options(topo, coll, solver=solver, **request))


def _exported(program, tgt) -> str:
    """The file of ``program`` for ``tgt``, read back and verified by the project, and checked
    by the independent checker; returns its text."""
    algo = export.export(program, tgt, in_place=False, out_of_place=True)
    text = model.dumps(algo)
    verify_imported(interpret.read_program(model.parse(text), program.topology))
    independent.check(text, "rccl" if not tgt.fused else "msccl")
    return text


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------- order and layout
@pytest.mark.parametrize("topo,solver,request_size,tbs", [
    ("ndv2:2", "hierarchical", None, 4),  # both multi-node; the list-order layout deadlocked both
    ("ndv2:2", "packing", 65536, 8),
])
def test_shared_threadblocks_keep_the_program_order(topo, solver, request_size, tbs):
    program = compiler.program(_result(topo, "allreduce", solver, size=request_size))
    tgt = replace(limits.TARGETS["rccl"], max_tbs=tbs)  # so few that send and receive must share
    text = _exported(program, tgt)
    algo = model.parse(text)
    assert max(len(g.tbs) for g in algo.gpus) <= tbs
    assert any(tb.send != -1 and tb.recv != -1 for g in algo.gpus for tb in g.tbs)


@dataclass
class _Op:  # what assign.order reads of an op
    kind: str
    step: int
    deps: list[int]


def test_every_threadblock_runs_its_ops_in_the_key_order():
    program = compiler.program(_result("ndv2:2", "allreduce", "hierarchical"))
    kinds = {"send": "s", "recv": "r"}
    for ops in program.ranks:
        mine = [_Op(kinds.get(op.kind, "re"), op.step, list(op.deps)) for op in ops]
        before = {id(x): {id(mine[d]) for d in x.deps} for x in mine}
        ordered = assign.order(mine)
        keys = [(x.step, assign.op_class(x.kind)) for x in ordered]
        assert keys == sorted(keys)  # step, then sends, receives, local ops
        assert all(d < i for i, x in enumerate(ordered) for d in x.deps)  # a topological order
        assert all({id(ordered[d]) for d in x.deps} == before[id(x)] for x in ordered)  # the same deps
    # a receive listed before a send of its step comes after it
    ops = [_Op("r", 0, []), _Op("s", 0, []), _Op("re", 0, [0]), _Op("s", 1, [2])]
    assert [(x.kind, x.deps) for x in assign.order(ops)] == [("s", []), ("r", []), ("re", [1]), ("s", [2])]


def test_connections_spread_only_as_far_as_their_own_messages_need():
    program = compiler.program(_result("ring:40", "allreduce", "ring"))  # 78 messages per connection
    algo = model.parse(export_xml(program, target="rccl")[0])
    assert algo.nchannels == 2 and max(len(g.tbs) for g in algo.gpus) <= 8
    independent.check(model.dumps(algo), "rccl")


def test_more_than_32_peers_spread_over_channels():
    program = compiler.program(_result("fully-connected:40", "allgather", "direct"))
    text, summary = export_xml(program, target="msccl")
    algo = model.parse(text)
    for g in algo.gpus:
        for role in ("send", "recv"):
            per = {}
            for tb in g.tbs:
                if getattr(tb, role) != -1:
                    per[tb.chan] = per.get(tb.chan, 0) + 1
            assert max(per.values()) <= 32
    independent.check(text, "msccl")


def test_the_per_channel_peer_limit_is_checked():
    steps = (model.Step(0, "s", "i", 0, "o", 0, 1),)
    tbs = tuple(model.Threadblock(t, t + 1, -1, 0, steps) for t in range(33))
    gpu = model.Gpu(0, 1, 1, 0, tbs)
    algo = model.Algo("x", "Simple", 1, 1, 34, "allgather", 0, 1, 0, 0, (gpu,))
    found = [v.message for v in limits.check(algo, limits.TARGETS["msccl"])]
    assert any("more than 32 threadblocks with a send peer on channel 0" in m for m in found)


def test_what_cannot_fit_names_the_limit_and_the_need():
    program = compiler.program(_result("fully-connected:72", "allgather", "direct"))
    with pytest.raises(limits.Unfit) as caught:
        export_xml(program, target="rccl")
    exc = caught.value
    assert (exc.target, exc.limit, exc.allowed) == ("rccl", "threadblocks", 64) and exc.need > 64
    assert f"needs {exc.need} threadblocks" in exc.message and "rccl allows 64" in exc.message


@pytest.mark.slow
@pytest.mark.parametrize("target", ["msccl", "rccl"])
def test_the_multi_node_packing_entry_of_the_issue_exports(target):
    # the 64 MiB entry of the 4x8 H100 set: its file deadlocked (msccl) or needed 75 threadblocks (rccl)
    program = compiler.program(_result("dgx-h100:4,fabric=rail", "allreduce", "packing", size=64 << 20))
    text, summary = export_xml(program, target=target)
    assert summary["threadblocks"] <= limits.TARGETS[target].max_tbs
    assert independent.check(text, target) == ["outofplace", "inplace"]


# ---------------------------------------------------------------------- sets: unfit ranges, protocols
@pytest.fixture(scope="module")
def mixed_set(tmp_path_factory):
    """fully-connected:72 allgather: ring for small calls (fits rccl), direct above (71 peers:
    more threadblocks than rccl has)."""
    ring = _result("fully-connected:72", "allgather", "ring").algorithm
    direct = _result("fully-connected:72", "allgather", "direct").algorithm
    sset = ScheduleSet("ag72", ring.topology, ring.collective,
                       (Entry(ring, 0, 1 << 20, "ring", protocol="LL"), Entry(direct, 1 << 20, None, "direct")))
    path = tmp_path_factory.mktemp("sets") / "set.json"
    save_set(sset, path)
    return path


def test_an_unfit_range_is_an_error_naming_it(capsys, mixed_set, tmp_path):
    code, _, err = _cli(capsys, "emit", "msccl", mixed_set, "-o", tmp_path / "out", "--target", "rccl", "-q")
    assert code == 6 and len(err.strip().splitlines()) == 1  # -q: no progress line on a slow machine
    assert "entry 1 (direct, calls of 1048576 bytes and up) does not fit rccl" in err and "rccl allows 64" in err
    assert not (tmp_path / "out").exists()  # nothing written half-way


def test_skip_unfit_writes_the_others_and_names_each_skipped_range(capsys, mixed_set, tmp_path):
    out = tmp_path / "out"
    code, text, err = _cli(capsys, "emit", "msccl", mixed_set, "-o", out, "--target", "rccl", "--skip-unfit", "--json")
    assert code == 0, err
    data = json.loads(text)
    assert [r["label"] for r in data["files"]] == ["ring"] and len(os.listdir(out)) == 1
    (skipped,) = data["skipped"]
    assert skipped["entry"] == 1 and skipped["minBytes"] == 1 << 20 and skipped["maxBytes"] == 0
    assert skipped["limit"] == "threadblocks" and skipped["allowed"] == 64 and skipped["need"] > 64


@pytest.mark.slow
def test_skip_unfit_says_which_ranges_fall_back(capsys, mixed_set, tmp_path):
    code, text, _ = _cli(capsys, "emit", "msccl", mixed_set, "-o", tmp_path / "out", "--target", "rccl",
                         "--skip-unfit")
    assert code == 0 and "not written: entry 1 (direct, calls of 1048576 bytes and up)" in text
    assert "rccl allows 64" in text and "fall back to NCCL" in text


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    """ring:8 allreduce: recursive doubling for small calls (its protocol recorded), ring above
    (none recorded, as in files written before entries carried one)."""
    rd = _result("ring:8", "allreduce", "recursive-doubling").algorithm
    ring = _result("ring:8", "allreduce", "ring").algorithm
    sset = ScheduleSet("ar8", ring.topology, ring.collective,
                       (Entry(rd, 0, 1 << 16, "rd", protocol="LL"), Entry(ring, 1 << 16, None, "ring")))
    path = tmp_path_factory.mktemp("sets") / "set.json"
    save_set(sset, path)
    return path


def test_each_file_carries_its_entrys_protocol_unless_overridden(capsys, small_set, tmp_path):
    code, text, err = _cli(capsys, "emit", "msccl", small_set, "-o", tmp_path / "a", "--json")
    assert code == 0, err
    files = json.loads(text)["files"]
    topo = compiler.load_topology("ring:8")
    assert files[0]["proto"] == "LL"  # recorded in the entry
    assert files[1]["proto"] == protocol_for("allreduce", topo, 1 << 16, None) == "Simple"  # NCCL's rule
    for row in files:
        assert f'proto="{row["proto"]}"' in Path(row["file"]).read_text().splitlines()[0]
    code, text, _ = _cli(capsys, "emit", "msccl", small_set, "-o", tmp_path / "b", "--protocol", "Simple", "--json")
    assert code == 0 and {r["proto"] for r in json.loads(text)["files"]} == {"Simple"}


def test_the_protocol_rule_follows_nccl():
    from backends.cost.nccl import protocol

    h100 = compiler.load_topology("dgx-h100:4,fabric=rail")
    assert protocol("allreduce", h100, 1024) == "LL" and protocol("allreduce", h100, 1 << 30) == "Simple"
    assert protocol("allreduce", h100, 16 << 20) == "LL128"
    ring = compiler.load_topology("ring:8")
    assert protocol("alltoall", ring, 8 * 16384) == "LL" and protocol("alltoall", ring, 8 * 16384 + 8) == "Simple"
    # a range takes the protocol of most of the swept sizes it serves
    sweep = [2**k for k in range(10, 31)]
    assert protocol_for("allreduce", ring, 1 << 20, None, sweep) == "Simple"
    assert protocol_for("allreduce", ring, 0, 8192, sweep) == "LL"


def test_old_set_files_without_protocols_still_load(small_set, tmp_path):
    data = set_to_json(load_set(small_set))
    for e in data["entries"]:
        e.pop("protocol")
    data.pop("target"), data.pop("complete")
    (tmp_path / "old.json").write_text(json.dumps(data, default=list))
    old = load_set(tmp_path / "old.json")
    assert [e.protocol for e in old.entries] == [None, None] and old.target is None and old.complete
    assert [e.label for e in old.entries] == ["rd", "ring"]


def test_an_imported_file_keeps_its_protocol(capsys, tmp_path):
    program = compiler.program(_result("ring:4", "allgather", "ring"))
    xml, program_file, again = tmp_path / "a.xml", tmp_path / "a.json", tmp_path / "b.xml"
    xml.write_text(export_xml(program, target="msccl", protocol="LL128")[0])
    assert _cli(capsys, "import", "msccl", xml, "-o", program_file)[0] == 0
    for source in (xml, program_file):
        code, _, err = _cli(capsys, "emit", "msccl", source, "-o", again)
        assert code == 0, err
        assert model.read(str(again)).proto == "LL128"


# ---------------------------------------------------------------------- the 4x8 H100 set
@pytest.mark.slow
def test_the_4x8_h100_set_exports_whole_for_both_runtimes(capsys, tmp_path):
    result = tune(compiler.load_topology("dgx-h100:4,fabric=rail"), "allreduce", cache=False)
    src = tmp_path / "set.json"
    save_set(result.schedule_set, src)
    for target in ("msccl", "rccl"):
        code, text, err = _cli(capsys, "emit", "msccl", src, "-o", tmp_path / target, "--target", target, "--json")
        assert code == 0, err
        data = json.loads(text)
        # every range of ours has its file; a range the set leaves to NCCL (native) has none
        ours = [e for e in result.schedule_set.entries if not e.is_native]
        assert data["skipped"] == [] and len(data["files"]) == len(ours) and ours
        for row in data["files"]:
            assert independent.check(Path(row["file"]).read_text(), target) == ["outofplace", "inplace"]


def _two_gpu_allgather(receive_first: bool, offset: int = 0) -> str:
    """A 2-gpu allgather in one threadblock per gpu (send and receive peer the other gpu)."""
    def step(s, kind, src, srcoff, dst, dstoff):
        return (f'      <step s="{s}" type="{kind}" srcbuf="{src}" srcoff="{srcoff}" dstbuf="{dst}" '
                f'dstoff="{dstoff}" cnt="1" depid="-1" deps="-1" hasdep="0"/>')
    lines = ['<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0" '
             'outofplace="1" minBytes="0" maxBytes="0">']
    for g in (0, 1):
        other = 1 - g
        send = ("s", "i", offset, "o", g)
        recv = ("r", "i", -1, "o", other)
        lines += [f'  <gpu id="{g}" i_chunks="1" o_chunks="2" s_chunks="0">', f'    <tb id="0" send="{other}" '
                  f'recv="{other}" chan="0">', step(0, "cpy", "i", 0, "o", g)]
        for k, st in enumerate((recv, send) if receive_first else (send, recv)):
            lines.append(step(k + 1, *st))
        lines += ["    </tb>", "  </gpu>"]
    return "\n".join([*lines, "</algo>"]) + "\n"


def test_the_checker_finds_a_deadlock_and_a_wrong_result():
    assert independent.check(_two_gpu_allgather(receive_first=False), "rccl") == ["outofplace"]
    with pytest.raises(AssertionError, match="deadlock"):  # both gpus wait in a receive before their send
        independent.check(_two_gpu_allgather(receive_first=True), "rccl")
    with pytest.raises(AssertionError, match="outside"):
        independent.check(_two_gpu_allgather(receive_first=False, offset=1), "rccl")
    program = compiler.program(_result("ring:4", "allreduce", "ring"))
    text = export_xml(program, target="rccl")[0]
    assert independent.check(text, "rccl") == ["outofplace", "inplace"]
    with pytest.raises(AssertionError):
        independent.check(text.replace('type="re"', 'type="cpy"', 1), "rccl")  # a reduction lost


@pytest.mark.parametrize("target", ["msccl", "rccl"])
@pytest.mark.parametrize("topo,coll,solver,chunks", [
    ("ring:4", "allgather", "ring", 1), ("dgx1", "allgather", "multi-ring", 2),
    ("dgx1", "reducescatter", "recursive-halving", 1), ("dgx1", "allreduce", "ring", 2),
    ("ring:6", "allreduce", "double-binary-tree", 2), ("dgx1", "alltoall", "direct", 1),
    ("ndv2:2", "alltoall", "hierarchical", 1), ("dgx1", "broadcast", "binomial-tree", 2),
    ("amd8", "reduce", "ring", 4), ("ring:4", "gather", "direct", 2), ("ring:4", "scatter", "direct", 2),
    pytest.param("dgx-h100:2", "allreduce", "hierarchical-pipelined", 1, marks=pytest.mark.slow),
])
def test_exported_files_pass_the_independent_checker_in_every_mode_they_claim(topo, coll, solver, chunks, target):
    program = compiler.program(_result(topo, coll, solver, chunks=chunks, root=1 if coll in (
        "broadcast", "reduce", "gather", "scatter") else None))
    for instances in (1, 2):
        text, summary = export_xml(program, target=target, instances=instances)
        modes = independent.check(text, target)
        claimed = [m for m in ("outofplace", "inplace") if summary[m]]
        assert modes == [m for m in claimed if m == "outofplace" or coll in independent.IN_PLACE]
