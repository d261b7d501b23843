"""The MILP and time-expanded solvers: every schedule verified, sketches honoured, time limits
kept, never slower in simulation than the best template whose routes it could read, candidates
judged by the cost judge the caller passes (the driver's: the simulator on the lowered Program)."""

from __future__ import annotations

import json

import pytest

import dsl
import solvers
import topologies as T
from backends.cost.runtime import default_protocol
from ccl import (
    InfeasibleError,
    InputError,
    Problem,
    Request,
    Sketch,
    SolverTimeout,
    compiler,
    verify,
)
from ccl.cli import main
from ccl.core.collective import builtin

KINDS = ("allgather", "alltoall", "reducescatter", "allreduce", "broadcast")
JUDGE = compiler.SimulationJudge(runtime="physics")  # the links alone: properties checked against bounds


def simulate(algorithm, size):
    """The simulator's time of the lowered Program, as the judge sees it (no bound, no baselines)."""
    return compiler.simulate(algorithm, size, bound=False, baselines=False, runtime="physics")


def run(topo, kind, solver="milp", **request):
    root = 1 if kind == "broadcast" else None
    request.setdefault("time_limit", 8)
    problem = Problem(topo, builtin(kind, topo.n_ranks, root), Request(solver, **request))
    try:
        solution = solvers.solve(problem, judge=JUDGE)
        algorithm, details = solution.algorithm, solution.details
    except SolverTimeout as exc:
        assert exc.best is not None, "a time limit with no schedule"
        algorithm, details = exc.best, exc.details
    verify(algorithm)
    verify(algorithm, in_place=True)
    return algorithm, details


RING2X2 = """
from basic import ring
topology ring2x2 {                      # two nodes of two ranks sharing one NIC each
  node ring(2) x 2 { nic [0, 1] : 10 GB/s, 2.6 us, host 20 GB/s }
  fabric switch
}
"""
SMALL = [T.ring(4), T.dgx1(), T.switch(4), dsl.load_string(RING2X2, "ring2x2.ccl").topology("ring2x2")]


@pytest.mark.parametrize("topo", SMALL, ids=lambda t: t.name)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("solver", ["milp", "teccl"])
def test_every_schedule_verifies_on_small_topologies(topo, kind, solver):
    algorithm, details = run(topo, kind, solver, size=64 * 1024)
    assert algorithm.solver == solver
    assert details["solves"], "no model was solved"
    assert details["simulated_us"] >= details["bound_us"] * (1 - 1e-9)


SLOW_MACHINES = (("allreduce", "dgx-a100:2"), ("allreduce", "dgx-h100:2"), ("allgather", "dgx-a100:2"))  # 4 s each


@pytest.mark.parametrize(("kind", "spec"), [pytest.param(k, m, marks=pytest.mark.slow) if (k, m) in SLOW_MACHINES else (k, m)
                                            for k in ("allgather", "alltoall", "allreduce")
                                            for m in ("ndv2:2", "dgx-a100:2", "dgx-h100:2")])
def test_multinode_machines(spec, kind):
    algorithm, details = run(T.build(spec), kind, size=1024, time_limit=6)
    for solve in details["solves"]:
        assert solve["variables"] > 0 and solve["constraints"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["ndv2:2", "dgx2:2", "dgx-h100:2", "ndv2:4"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("solver", ["milp", "teccl"])
def test_multinode_machines_every_kind(spec, kind, solver):
    run(T.build(spec), kind, solver, size=1 << 20, time_limit=10)


def best_template_time(topo, kind, size):
    best = None
    for name, info in solvers.SOLVERS.items():
        if not info.template or kind not in info.kinds:
            continue
        try:
            algorithm = solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks), Request(name)))
        except (InputError, InfeasibleError):  # a template that does not apply to this topology
            continue
        t = simulate(algorithm, size).time_us
        best = t if best is None else min(best, t)
    return best


@pytest.mark.parametrize(("spec", "kind", "size"), [pytest.param("ndv2:2", "allgather", 1 << 20, marks=pytest.mark.slow),
                                                    ("dgx-h100:2", "alltoall", 1024),
                                                    ("dgx-h100:2", "allgather", 1 << 20)])
def test_never_slower_than_the_templates_it_reads(spec, kind, size):
    topo = T.build(spec)
    algorithm, details = run(topo, kind, size=size, time_limit=10)
    assert simulate(algorithm, size).time_us <= best_template_time(topo, kind, size) * (1 + 1e-9)


def test_rails_sketch_keeps_traffic_on_rails():
    topo = T.dgx_a100(2)
    sketch = Sketch(internode=tuple((i, i) for i in range(8)))
    algorithm, details = run(topo, "alltoall", size=1 << 20, sketch=sketch)
    for t in algorithm.transfers:
        if topo.node_of[t.src] != topo.node_of[t.dst]:
            assert topo.local_index(t.src) == topo.local_index(t.dst), t
    assert details["sketch"]["internode"] == [[i, i] for i in range(8)] or details["sketch"]["internode"] == tuple(
        (i, i) for i in range(8))


def test_relays_sketch():
    topo = T.ndv2(2)
    algorithm, _ = run(topo, "allgather", size=1 << 20, sketch=Sketch(relays=(0, 1)))
    for t in algorithm.transfers:
        if topo.node_of[t.src] != topo.node_of[t.dst]:
            assert topo.local_index(t.src) in (0, 1) and topo.local_index(t.dst) in (0, 1)


def test_cbc_backend():
    algorithm, details = run(T.dgx1(), "allgather", size=1 << 20, options=(("backend", "cbc"),))
    assert details["backend"] == "cbc"


def test_unknown_backend_is_bad_input():
    with pytest.raises(InputError, match="unknown MILP backend"):
        run(T.dgx1(), "allgather", options=(("backend", "gurobi"),))


def test_time_limit_returns_the_best_schedule_with_its_gap():
    topo = T.ndv2(2)
    problem = Problem(topo, builtin("allgather", 16), Request("milp", size=1 << 20, time_limit=2))
    with pytest.raises(SolverTimeout) as info:
        solvers.solve(problem, judge=JUDGE)
    exc = info.value
    assert exc.best is not None and exc.gap is not None and exc.gap > 0
    verify(exc.best)
    assert exc.details["solves"][0]["status"] in ("feasible", "none")


def test_chunk_partition_from_the_sketch():
    algorithm, details = run(T.ring(4), "allgather", size=1 << 16, sketch=Sketch(chunk_partition=3))
    assert algorithm.collective.chunk_factor == 3 and details["pieces"] == 3


def test_custom_and_unsupported_collectives_are_refused():
    from ccl import CollectiveError

    with pytest.raises(CollectiveError, match="does not implement gather"):
        solvers.synthesize(Problem(T.ring(4), builtin("gather", 4, 0), Request("milp")))


@pytest.mark.slow
def test_cli_options(tmp_path, capsys):
    sketch = tmp_path / "rails.json"
    sketch.write_text(json.dumps({"internode": [[i, i] for i in range(8)]}))
    out = tmp_path / "s.json"
    code = main(["synthesize", "-t", "dgx-h100:2", "-c", "allgather", "-s", "milp", "--size", "1MiB",
                 "--time-limit", "20", "--sketch", str(sketch), "-o", str(out), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["status"] in ("ok", "timeout") and out.exists()
    assert data["details"]["bound_us"] > 0 and data["details"]["simulated_us"] >= data["details"]["bound_us"]


@pytest.mark.parametrize(("content", "needle"), [
    ("[1, 2]", "a sketch is a JSON object"),
    ('{"relay": [0]}', "unknown sketch field 'relay'"),
    ('{"switch_policy": "all"}', "switch policy must be one of"),
    ('{"chunk_partition": 0}', "chunk partition must be a positive integer"),
])
def test_bad_sketch_files(tmp_path, capsys, content, needle):
    sketch = tmp_path / "bad.json"
    sketch.write_text(content)
    code = main(["synthesize", "-t", "dgx1", "-c", "allgather", "-s", "milp", "--sketch", str(sketch)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_switch_policy_changes_how_many_connections_are_used():
    topo = T.switch(4, bandwidth=100.0)
    counts = {}
    for policy in ("fewest", "most"):
        algorithm, _ = run(topo, "allgather", size=1 << 20, sketch=Sketch(switch_policy=policy), time_limit=10)
        counts[policy] = len({(t.src, t.dst) for t in algorithm.transfers})
    assert counts["fewest"] <= counts["most"]


@pytest.mark.parametrize(("request_fields", "message"), [
    ({"options": (("solver", "highs"),)}, "has no option 'solver'; options: backend"),
    ({"options": (("backend", "gurobi"),)}, "unknown MILP backend 'gurobi'"),
    ({"objective": "rounds"}, "minimises the simulated time"),
    ({"steps": 3}, "steps and rounds bound the exact solver"),
])
def test_settings_it_cannot_honour_are_refused(request_fields, message):
    problem = Problem(T.ring(4), builtin("allgather", 4), Request("milp", **request_fields))
    with pytest.raises(InputError, match=message):
        solvers.synthesize(problem, judge=JUDGE)


def test_a_template_that_simulates_faster_is_returned_whole():
    """On a bidirectional ring the multi-ring template splits every part in two and pipelines
    both directions; the pipeline (one piece per part) cannot, so its schedule is returned."""
    topo = T.ring(4)
    solution = solvers.solve(Problem(topo, builtin("allgather", 4), Request("milp", size=1 << 20)), judge=JUDGE)
    verify(solution.algorithm)
    multi = solvers.synthesize(Problem(topo, builtin("allgather", 4), Request("multi-ring")))
    assert solution.details["schedule"] == "multi-ring template"
    assert solution.details["simulated_us"] == pytest.approx(simulate(multi, 1 << 20).time_us)
    assert solution.algorithm.solver == "milp"
    # with a sketch the user's constraints rule: no template is returned
    sketched = solvers.solve(Problem(topo, builtin("allgather", 4), Request("milp", size=1 << 20, sketch=Sketch())),
                             judge=JUDGE)
    assert sketched.details["schedule"] == "MILP pipeline"


def test_sketches_that_name_missing_ranks_or_cut_the_machine_are_refused():
    from ccl import InfeasibleError

    topo = T.build("ndv2:2")
    with pytest.raises(InputError, match=r"sketch relay 99 names a node-local rank.*ranks 0\.\.7"):
        run(topo, "allgather", sketch=Sketch(relays=(0, 99)))
    with pytest.raises(InputError, match=r"sketch inter-node pair \(0, 8\)"):
        run(topo, "alltoall", sketch=Sketch(internode=((0, 8),)))
    cut = Sketch(relays=(0,), internode=((1, 1),))  # no inter-node link survives
    for kind in ("allgather", "reducescatter", "broadcast"):
        for solver in ("milp", "teccl"):
            with pytest.raises(InfeasibleError, match="the sketch leaves no path from rank"):
                run(topo, kind, solver, sketch=cut)


@pytest.mark.parametrize("solver", ["milp", "teccl"])
def test_cost_aware_solvers_need_a_judge(solver):
    assert solvers.SOLVERS[solver].judged and not solvers.SOLVERS["ring"].judged
    problem = Problem(T.ring(4), builtin("allgather", 4), Request(solver, size=1 << 16, time_limit=8))
    for call in (solvers.solve, solvers.synthesize):
        with pytest.raises(InputError, match=f"solver '{solver}' judges candidate schedules by their time and needs "
                                             "a cost judge"):
            call(problem)
    # the driver passes the simulator: ccl.compiler.synthesize needs no judge from its caller
    result = compiler.synthesize(problem)
    assert result.algorithm.solver == solver and result.status in ("ok", "timeout")
    # the driver's judge charges the default runtime under the protocol a call of the size would use
    judged = compiler.simulate(result.algorithm, 1 << 16, bound=False, baselines=False, protocol=default_protocol(1 << 16))
    assert result.details["simulated_us"] == pytest.approx(judged.time_us)


class CountingJudge:
    """The driver's judge, recording what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float]] = []

    def time_us(self, algorithm, size):
        self.asked.append((algorithm.solver, size))
        return JUDGE.time_us(algorithm, size)


def test_candidates_are_judged_by_the_judge_passed_at_the_target_size():
    judge = CountingJudge()
    problem = Problem(T.ring(4), builtin("allgather", 4), Request("milp", size=12345, time_limit=8))
    solution = solvers.solve(problem, judge=judge)
    assert len(judge.asked) >= 2 and {size for _, size in judge.asked} == {12345}
    assert "multi-ring" in {name for name, _ in judge.asked}  # templates are judged by the same judge
    assert solution.details["simulated_us"] == pytest.approx(JUDGE.time_us(solution.algorithm, 12345))
