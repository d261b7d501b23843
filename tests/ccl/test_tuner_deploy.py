"""The tuner gives the same set on a fast or a loaded machine (a budget of work, a wall-clock
limit only as a stop that marks the set incomplete), chooses only schedules that export for its
target, records protocols; compare lists every solver it left out and why."""

from __future__ import annotations

import json
import re
import time

import pytest

from ccl.cli import main
from ccl.compiler import load_topology
from ccl.compiler.compare import compare
from ccl.compiler.tuner import tune
from ccl.core.errors import InputError, SolverTimeout
from ccl.core.schedule_set import load_set, save_set, set_text


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _tuned_at_clock_speed(monkeypatch, scale: float, **options):
    """The tuner run while the clocks run ``scale`` times faster than real time (a machine that
    many times slower), with nothing else changed."""
    real_pc, real_mono = time.perf_counter, time.monotonic
    monkeypatch.setattr(time, "perf_counter", lambda: real_pc() * scale)
    monkeypatch.setattr(time, "monotonic", lambda: real_mono() * scale)
    try:
        return tune(load_topology("ring:8"), "allreduce", sizes="1KiB..1GiB", cache=False, **options)
    finally:
        monkeypatch.setattr(time, "perf_counter", real_pc)
        monkeypatch.setattr(time, "monotonic", real_mono)


def test_the_same_request_gives_the_same_set_on_a_fast_or_a_slow_machine(monkeypatch):
    monkeypatch.setenv("CCL_QUIET", "1")
    fast = _tuned_at_clock_speed(monkeypatch, 1.0, time_budget=0.6)
    slow = _tuned_at_clock_speed(monkeypatch, 1000.0, time_budget=0.6)
    assert set_text(fast.schedule_set) == set_text(slow.schedule_set)  # byte for byte
    assert fast.schedule_set.complete and slow.schedule_set.complete
    cands = {c["label"]: c for c in fast.schedule_set.candidates}
    assert "error" not in cands["packing@1GiB"] and cands["smt"]["error"].startswith("skipped: the work budget")
    assert all(c["work_us"] >= 0 for c in cands.values())
    stored = re.findall(r'"synthesis_seconds":\s*([^,}\s]+)', set_text(fast.schedule_set))
    assert set(stored) <= {"null"}  # wall-clock times are reported apart, never stored
    assert fast.timings["packing@1GiB"] > 0 and slow.timings["packing@1GiB"] > fast.timings["packing@1GiB"]


def test_a_wall_clock_stop_marks_the_set_incomplete_and_keeps_it_out_of_the_cache(monkeypatch):
    monkeypatch.setenv("CCL_QUIET", "1")
    topo = load_topology("ring:4")
    cut = tune(topo, "allgather", sizes="1KiB,1MiB", deadline=1e-9)
    sset = cut.schedule_set
    assert not sset.complete and sset.entries  # the templates ran, the rest was stopped
    stopped = [c for c in sset.candidates if c.get("cut_by_clock")]
    assert stopped and all(c["error"].startswith("stopped: the wall-clock limit") for c in stopped)
    again = tune(topo, "allgather", sizes="1KiB,1MiB", deadline=1e-9)
    assert not again.cached  # an incomplete set is never stored
    whole = tune(topo, "allgather", sizes="1KiB,1MiB", deadline=3600)
    assert whole.schedule_set.complete and tune(topo, "allgather", sizes="1KiB,1MiB").cached


def test_the_cli_says_a_set_is_incomplete(capsys, tmp_path):
    code, out, err = run(capsys, "synthesize", "-t", "ring:4", "-c", "allgather", "--sizes", "1KiB,1MiB",
                         "--deadline", "1e-9", "--no-cache", "-o", tmp_path / "set.json")
    assert code == 0, err
    assert out.startswith("incomplete:") and "the wall-clock limit stopped or cut" in out
    assert not load_set(tmp_path / "set.json").complete
    code, out, _ = run(capsys, "synthesize", "-t", "ring:4", "-c", "allgather", "--sizes", "1KiB,1MiB",
                       "--deadline", "1e-9", "--no-cache", "--json")
    assert json.loads(out)["status"] == "incomplete" and json.loads(out)["complete"] is False


@pytest.mark.parametrize("flag", [("--target", "rccl"), ("--deadline", "5")])
def test_target_and_deadline_apply_to_the_tuner(capsys, flag):
    code, _, err = run(capsys, "synthesize", "-t", "ring:4", "-c", "allgather", "-s", "ring", *flag)
    assert code == 2 and "applies to --solver auto" in err


def test_a_schedule_that_does_not_export_for_the_target_is_not_chosen(capsys, tmp_path):
    topo = load_topology("fully-connected:72")  # direct: 71 peers, more threadblocks than rccl has
    free = tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"], cache=False)
    assert [e.label for e in free.schedule_set.entries] == ["direct"] and free.schedule_set.target is None
    bound = tune(topo, "allgather", sizes="1KiB,1MiB", solvers=["ring", "direct"], cache=False, target="rccl")
    sset = bound.schedule_set
    assert {e.label for e in sset.entries} == {"ring"} and sset.target == "rccl"  # one entry per protocol
    (direct,) = [c for c in sset.candidates if c["label"] == "direct"]
    assert "needs 72 threadblocks" in direct["unfit"] and "rccl allows 64" in direct["unfit"]
    assert all(row["winner"] == "ring" for row in sset.table)
    save_set(sset, tmp_path / "set.json")
    assert load_set(tmp_path / "set.json").target == "rccl"
    code, out, err = run(capsys, "emit", "msccl", tmp_path / "set.json", "-o", tmp_path / "xml", "--target", "rccl")
    assert code == 0, err


def test_entries_carry_a_protocol(capsys):
    sset = tune(load_topology("ring:8"), "allreduce", sizes="1KiB..1GiB", solvers=["recursive-doubling", "ring"],
                cache=False).schedule_set
    protocols = [e.protocol for e in sset.entries]
    assert protocols[0] == "LL" and protocols[-1] == "Simple"
    assert all(p in ("LL", "LL128", "Simple") for p in protocols)


def test_the_api_refuses_a_bad_target_or_deadline():
    topo = load_topology("ring:4")
    with pytest.raises(InputError, match="target"):
        tune(topo, "allgather", target="nccl")
    with pytest.raises(InputError, match="deadline"):
        tune(topo, "allgather", deadline=-1.0)


def test_smt_stops_at_its_budget_of_conflicts_on_every_machine():
    from ccl import compiler

    problem = compiler.problem_from_options("ring:8", "allreduce", solver="smt", options=(("conflicts", 1),))
    with pytest.raises(SolverTimeout, match="budget of 1 SAT conflicts"):
        compiler.synthesize(problem)
    with pytest.raises(InputError, match="conflicts must be a positive integer"):
        compiler.synthesize(compiler.problem_from_options("ring:4", "allgather", solver="smt",
                                                          options=(("conflicts", 0),)))


def test_compare_lists_every_solver_it_left_out(capsys):
    results = compare(load_topology("ring:4"), "allreduce", [1024, 1 << 20])
    names = {r.name for r in results[0].rows if r.source == "schedule"}
    assert "smt" in names  # the exact solver runs unnamed on small machines, within its conflicts
    left = {x["solver"]: x["reason"] for x in results[0].to_json()["left_out"]}
    assert set(left) == {"packing", "milp", "teccl"}
    assert "per size" in left["packing"] and "--solvers packing" in left["packing"]
    code, out, _ = run(capsys, "compare", "-t", "ring:4", "-c", "allreduce", "--size", "1KiB,1MiB")
    assert code == 0 and "left out packing: synthesizes a schedule per size" in out
    code, out, _ = run(capsys, "compare", "-t", "ring:4", "-c", "allreduce", "--size", "1KiB,1MiB", "--json")
    assert {x["solver"] for x in json.loads(out)["left_out"]} == {"packing", "milp", "teccl"}
    one = compare(load_topology("ring:4"), "allreduce", [1 << 20])[0]
    assert "packing" in {r.name for r in one.rows if r.source == "schedule"}
    assert {x["solver"] for x in one.to_json()["left_out"]} == {"milp", "teccl"}


def test_compare_says_why_a_solver_is_left_out_on_a_large_machine():
    from ccl.compiler.compare import left_out

    reasons = dict(left_out("allreduce", ["ring"], only=False, n_ranks=128, n_sizes=1))
    assert "up to 64 ranks (128 here" in reasons["packing"] and "up to 8 ranks (128 here" in reasons["smt"]
    assert left_out("allreduce", ["ring"], only=True, n_ranks=4, n_sizes=1) == []  # --only: the caller chose
