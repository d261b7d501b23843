"""``ccl bounds``, ``ccl simulate`` and ``ccl compare``: output, JSON, errors, files."""

from __future__ import annotations

import json

import jsonschema
import pytest

from backends.sim.trace import TRACE_SCHEMA
from ccl.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def schedule(tmp_path, capsys):
    path = tmp_path / "ag.json"
    code, _, err = run(capsys, "synthesize", "-t", "dgx1", "-c", "allgather", "-s", "ring", "-o", str(path))
    assert code == 0, err
    return path


def test_readme_first_command(schedule, capsys):
    code, out, err = run(capsys, "verify", str(schedule))
    assert code == 0, err
    code, out, err = run(capsys, "simulate", str(schedule), "--size", "64MiB")
    assert code == 0, err
    assert "schedule / bound" in out and "busbw" in out and "NCCL Ring/" in out  # NCCL's pick, named
    assert "MSCCL executor" in out  # the runtime the time is charged for


def test_simulate_json_trace_and_plot(schedule, tmp_path, capsys):
    trace, plot = tmp_path / "t.json", tmp_path / "p.png"
    code, out, err = run(capsys, "simulate", str(schedule), "--size", "1GB", "--trace", str(trace),
                         "--plot", str(plot), "--json")
    assert code == 0, err
    data = json.loads(out)
    for key in ("time_us", "algbw_GBps", "busbw_GBps", "bound_us", "bound_ratio", "links", "baselines"):
        assert key in data
    assert data["size"] == 10**9 and data["verified"] is True
    assert data["bound_ratio"] >= 1
    jsonschema.validate(json.loads(trace.read_text()), TRACE_SCHEMA)
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_simulate_options(schedule, capsys):
    times = {}
    for extra in ([], ["--mode", "step"], ["--slices", "4"], ["--overlap-latency"], ["--in-place"],
                  ["--local-bandwidth", "1500GB/s"]):
        # the links alone: a runtime's per-hop latency would hide the links' own, which overlap
        code, out, err = run(capsys, "simulate", str(schedule), "--size", "1MiB", "--json", "--summary",
                             "--runtime", "physics", *extra)
        assert code == 0, (extra, err)
        data = json.loads(out)
        assert "links" not in data
        times[" ".join(extra)] = data["time_us"]
    assert times["--local-bandwidth 1500GB/s"] > times[""]
    assert times["--overlap-latency"] < times[""]


def test_simulate_is_deterministic(schedule, capsys):
    outs = []
    for _ in range(2):
        code, out, _ = run(capsys, "simulate", str(schedule), "--size", "64MiB", "--json")
        data = json.loads(out)
        data.pop("simulation_seconds")
        outs.append(data)
    assert outs[0] == outs[1]


def test_bounds_command(capsys):
    code, out, err = run(capsys, "bounds", "--topology", "switch:8", "--collective", "allgather", "--size", "8MB",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["bandwidth_us"] == pytest.approx(0.7 + 7 * 8e6 / (8 * 25e3))  # the switch route's latency first
    assert data["bound_us"] == max(data["latency_us"], data["bandwidth_us"])
    code, out, _ = run(capsys, "bounds", "-t", "ndv2:2", "-c", "alltoall", "--size", "64MiB")
    assert code == 0 and "latency" in out and "bandwidth" in out and "binding cut" in out


def test_compare_command(capsys, tmp_path):
    plot = tmp_path / "sizes.png"
    code, out, err = run(capsys, "compare", "-t", "dgx1", "-c", "allreduce", "--size", "1KiB,64MiB", "--json",
                         "--plot", str(plot))
    assert code == 0, err
    data = json.loads(out)
    assert len(data["comparisons"]) == 2
    small, big = data["comparisons"]
    names = {r["name"] for r in big["rows"]}
    assert {"ring", "direct", "recursive-halving", "nccl", "lower bound"} <= names
    hier = next(r for r in big["rows"] if r["name"] == "hierarchical")
    assert hier["error"] and hier["time_us"] is None
    bound = next(r for r in big["rows"] if r["source"] == "bound")["time_us"]
    for row in big["rows"]:
        if row["time_us"] is not None:
            assert row["time_us"] >= bound * (1 - 1e-9)
    assert big["reference"] == "nccl" and plot.read_bytes()[:4] == b"\x89PNG"  # NCCL's pick
    code, out, _ = run(capsys, "compare", "-t", "ring:6", "-c", "allgather", "--size", "1MiB", "--solvers",
                       "ring,direct", "--only")
    assert code == 0 and "ring" in out and "direct" in out and "recursive-doubling" not in out
    code, out, _ = run(capsys, "compare", "-t", "ring:6", "-c", "allgather", "--size", "1MiB", "--solvers", "ring")
    assert code == 0 and "recursive-doubling" in out  # named solvers join the templates


@pytest.mark.parametrize(("argv", "needle"), [
    (["simulate", "MISSING.json", "--size", "1MiB"], "no such file"),
    (["bounds", "-t", "dgx1", "-c", "allshuffle", "--size", "1MiB"], "unknown collective"),
    (["bounds", "-t", "nosuch", "-c", "allgather", "--size", "1MiB"], "unknown topology"),
    (["compare", "-t", "dgx1", "-c", "allgather", "--size", "1MiB", "--solvers", "magic"], "unknown solver"),
])
def test_bad_input(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(("argv", "needle"), [
    (["bounds", "-t", "dgx1", "-c", "allgather", "--size", "12XB"], "unknown size unit"),
    (["bounds", "-t", "dgx1", "-c", "allgather", "--size", "0"], "at least 1 byte"),
    (["compare", "-t", "dgx1", "-c", "allgather", "--size", "1MiB,,2MiB"], "empty size"),
    (["simulate", "x.json", "--size", "1MiB", "--local-bandwidth=-3GB/s"], "bandwidth must be positive"),
])
def test_bad_option_values(capsys, argv, needle):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and needle in err and "Traceback" not in err


def test_unverifiable_schedule_exits_4_and_writes_nothing(schedule, tmp_path, capsys):
    data = json.loads(schedule.read_text())
    data["transfers"] = data["transfers"][1:]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    trace = tmp_path / "t.json"
    code, _, err = run(capsys, "simulate", str(bad), "--size", "1MiB", "--trace", str(trace))
    assert code == 4 and err.startswith("ccl: verification failed") and not trace.exists()


def test_trace_into_missing_folder(schedule, tmp_path, capsys):
    code, _, err = run(capsys, "simulate", str(schedule), "--size", "1MiB", "--trace", str(tmp_path / "x" / "t.json"))
    assert code == 2 and "does not exist" in err
