"""`ccl pareto` and the exact-solver options of `ccl synthesize`, run in-process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ccl.cli import main


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # a bad option value: argparse exits 2
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_synthesize_instance_with_steps_rounds_chunks(capsys, tmp_path):
    path = tmp_path / "ag.json"
    code, out, err = run(capsys, "synthesize", "-t", "dgx1", "-c", "allgather", "-s", "smt", "--steps", "2",
                         "--rounds", "3", "--chunks", "2", "-o", str(path), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["steps"], data["rounds"], data["chunks"], data["solver"]) == (2, 3, 2, "smt")
    assert run(capsys, "verify", str(path))[0] == 0


def test_synthesize_with_only_chunks_runs_least_steps(capsys):
    code, out, _ = run(capsys, "synthesize", "-t", "ring:6", "-c", "allgather", "-s", "smt", "-k", "1", "--json")
    assert code == 0
    assert json.loads(out)["steps"] == 3


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--steps", "1"], "needs at least 2 steps"),
        (["--steps", "2", "--rounds", "4", "--chunks", "3"], "z3 proved"),
    ],
)
def test_infeasible_exits_3(capsys, extra, needle):
    code, out, err = run(capsys, "synthesize", "-t", "dgx1", "-c", "allgather", "-s", "smt", *extra)
    assert code == 3
    assert err.startswith("ccl: infeasible: ") and needle in err
    assert len(err.strip().splitlines()) == 1 and out == ""


def test_infeasible_json(capsys):
    code, out, _ = run(capsys, "synthesize", "-t", "dgx1", "-c", "reducescatter", "-s", "smt", "--steps", "1",
                       "--json")
    data = json.loads(out)
    assert code == 3 and data["status"] == "infeasible" and data["bound"] == "hop bound"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--option", "colour=red"], "no option 'colour'"),
        (["--option", "nonsense"], "KEY=VALUE"),
        (["--roots", "0,x"], "comma-separated"),
        (["--roots", "0,9"], "not in 0..7"),
        (["--time-limit", "soon"], "time"),
    ],
)
def test_bad_exact_options_exit_2(capsys, argv, needle):
    code, _, err = run(capsys, "synthesize", "-t", "dgx1", "-c", "broadcast", "-s", "smt", *argv)
    assert code == 2 and needle in err


def test_multi_root_broadcast(capsys):
    code, out, err = run(capsys, "synthesize", "-t", "dgx1", "-c", "broadcast", "-s", "smt", "--roots", "0,7",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["collective"] == "custom" and data["steps"] == 2


def test_pareto_table_and_json(capsys, tmp_path):
    code, out, err = run(capsys, "pareto", "-t", "ring:4", "-c", "allgather", "--max-chunks", "2",
                         "--save-dir", str(tmp_path))
    assert code == 0, err
    assert "steps" in out and "rounds/chunk" in out and "3/2" in out
    code, out, err = run(capsys, "pareto", "-t", "ring:4", "-c", "allgather", "--max-chunks", "2", "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "ok" and data["reached_bound"] is True
    assert data["rounds_per_chunk_bound"] == "3/2"
    point = data["points"][-1]
    for key in ("steps", "rounds", "chunks", "rounds_per_chunk", "solve_seconds"):
        assert key in point
    try:
        import backends.sim  # noqa: F401
    except ImportError:
        assert "time_us" not in point
        assert "simulator" in err and len(err.strip().splitlines()) == 1
    else:  # the simulator is there: both sizes simulated
        assert len(point["time_us"]) == 2
    assert len(list(tmp_path.iterdir())) == len(data["points"])
    for f in tmp_path.iterdir():
        assert run(capsys, "verify", str(f))[0] == 0


def test_pareto_bad_input(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["pareto", "-t", "ring:4", "-c", "allgather", "--max-chunks", "0"])
    assert exc.value.code == 2 and "positive integer" in capsys.readouterr().err
    code, _, err = run(capsys, "pareto", "-t", "ring:4", "-c", "nosuch")
    assert code == 2 and "unknown collective" in err


def test_same_command_same_bytes(tmp_path):
    files = []
    for i in range(2):
        path = tmp_path / f"{i}.json"
        subprocess.run([sys.executable, "-m", "ccl.cli", "synthesize", "-t", "dgx1", "-c", "allgather", "-s", "smt",
                        "--steps", "3", "--rounds", "7", "-k", "6", "-o", str(path)], check=True, capture_output=True)
        files.append(path.read_bytes())
    assert files[0] == files[1]


def test_pareto_infeasible_and_time_limit(capsys):
    code, _, err = run(capsys, "pareto", "-t", "ring:5", "-c", "allgather", "--option", "max_steps=1")
    assert code == 3 and "needs at least 2 steps" in err
    code, out, err = run(capsys, "pareto", "-t", "dgx1", "-c", "allgather", "--time-limit", "1ms", "--json")
    assert code == 5 and json.loads(out)["status"] == "timeout"
    assert err.strip().splitlines()[-1].startswith("ccl: time limit: ")


def test_pareto_of_a_composed_allreduce(capsys):
    code, out, err = run(capsys, "pareto", "-t", "ring:4", "-c", "allreduce", "--max-chunks", "1",
                         "--option", "method=compose", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["points"][0]["steps"] == 4 and data["points"][0]["chunks"] == 1


# ---------------------------------------------------------------------- ccl pareto -s packing
@pytest.mark.parametrize(("spec", "kind", "largest"), [pytest.param("dgx1", "allreduce", "16MiB", marks=pytest.mark.slow),
                                                     ("amd8", "gather", "256MiB"),
                                                     ("ring:6", "broadcast", "256MiB")])
def test_packing_set_lists_the_size_winners_and_where_each_wins(capsys, tmp_path, spec, kind, largest):
    import solvers
    import topologies as T
    from ccl import Problem, Request, compiler, verify
    from ccl.core.collective import builtin
    from ccl.core.serialize import load_algorithm

    sizes = ["1KiB", "64KiB", "4MiB", largest]  # the judged search at 256 MiB on DGX-1 takes 13 s
    code, out, err = run(capsys, "pareto", "-t", spec, "-c", kind, "-s", "packing", "--sizes", ",".join(sizes),
                         "--save-dir", str(tmp_path), "--json")
    assert code == 0, err
    members = json.loads(out)["members"]
    assert members and members[0]["wins_from_bytes"] is None and members[-1]["wins_to_bytes"] is None
    assert [s["size"] for m in members for s in m["sweep"]] == sizes  # every sweep size won by one member
    for a, b in zip(members, members[1:]):  # contiguous ranges, each crossover between the sizes they won
        assert a["wins_to_bytes"] == b["wins_from_bytes"]
        assert a["sweep"][-1]["bytes"] <= a["wins_to_bytes"] <= b["sweep"][0]["bytes"]
    assert members[0]["height"] <= members[-1]["height"] or members[0]["stages"] <= members[-1]["stages"]
    judge = compiler.SimulationJudge()
    topo = T.build(spec)
    for m in members:
        alg = load_algorithm(m["file"])
        verify(alg)
        for point in m["sweep"]:  # the member is the one synthesize picks at that size
            picked = solvers.solve(Problem(topo, builtin(kind, topo.n_ranks, 0 if kind != "allreduce" else None),
                                           Request("packing", size=point["bytes"])), judge=judge)
            assert judge.time_us(picked.algorithm, point["bytes"]) == pytest.approx(point["time_us"], rel=1e-9)
    text = run(capsys, "pareto", "-t", spec, "-c", kind, "-s", "packing", "--sizes", ",".join(sizes))[1]
    assert "wins from" in text and len(text.strip().splitlines()) == 3 + len(members)


def test_packing_set_bad_input(capsys):
    assert run(capsys, "pareto", "-t", "dgx1", "-c", "allreduce", "-s", "packing", "--option", "x=1")[0] == 2
    assert run(capsys, "pareto", "-t", "dgx1", "-c", "allreduce", "-s", "milp")[0] == 2
    assert run(capsys, "pareto", "-t", "dgx1", "-c", "alltoall", "-s", "packing")[0] != 0
