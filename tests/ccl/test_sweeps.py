"""Size sweeps (``--size 1KiB..1GiB``) in ``ccl simulate``, ``bounds``, ``compare`` and ``run``:
nccl-tests rows, schedule sets served per size, ``compare --save-dir`` and ``--plot``."""

from __future__ import annotations

import json

import pytest

from ccl.cli import main

SWEEP = "1KiB..1MiB*4"  # 1KiB, 4KiB, ..., 1MiB: 6 sizes
SIZES = [1024 * 4**k for k in range(6)]


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def no_cache(monkeypatch):
    monkeypatch.setenv("CCL_CACHE_DIR", "off")


@pytest.fixture(scope="module")
def schedule(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweeps") / "ar.json"
    assert main(["synthesize", "-t", "ring:4", "-c", "allreduce", "-s", "ring", "-o", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def schedule_set(tmp_path_factory):
    """A tuned set for allreduce on ring:4 over 1KiB..1MiB and its file."""
    from ccl.compiler import load_topology
    from ccl.compiler.tuner import tune
    from ccl.core.schedule_set import save_set

    sset = tune(load_topology("ring:4"), "allreduce", sizes="1KiB..1MiB", cache=False).schedule_set
    path = tmp_path_factory.mktemp("sweeps") / "set.json"
    save_set(sset, path)
    assert len({sset.pick(s).label for s in SIZES}) >= 2, "the set should serve the sweep with several entries"
    return sset, path


@pytest.mark.parametrize(("argv", "needle"), [
    (["bounds", "-t", "ring:4", "-c", "allreduce", "--size", "4KiB..1KiB"], "start <= end"),
    (["bounds", "-t", "ring:4", "-c", "allreduce", "--size", "1KiB..1MiB*1"], "factor must be at least 2"),
    (["bounds", "-t", "ring:4", "-c", "allreduce", "--size", "1KiB..1MiB*x"], "whole number"),
    (["compare", "-t", "ring:4", "-c", "allreduce", "--size", "1KiB,,2KiB"], "empty size"),
    (["compare", "-t", "ring:4", "-c", "allreduce", "--size", "1KiB..lots"], "cannot read size"),
    (["simulate", "{schedule}", "--size", "0..1KiB"], "start <= end"),
    (["simulate", "{schedule}", "--size", "1KiB..1MiB,0"], "at least 1 byte"),
    (["run", "{schedule}", "--size", "1XB..1MiB"], "unknown size unit"),
])
def test_bad_sweeps_exit_2_with_one_line(capsys, schedule, argv, needle):
    code, out, err = run(capsys, *[a.replace("{schedule}", str(schedule)) for a in argv])
    assert code == 2 and needle in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and out == ""


def table_rows(out: str) -> list[str]:
    """The data lines of an nccl-tests table (after the two '#' header lines)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#")) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("  ") or not line.split()[0].isdigit():
            break
        rows.append(line)
    return rows


def test_simulate_sweep_rows_match_single_sizes(capsys, schedule):
    code, out, err = run(capsys, "simulate", schedule, "--size", SWEEP)
    assert code == 0, err
    rows = table_rows(out)
    assert [int(r.split()[0]) for r in rows] == SIZES
    assert [int(r.split()[1]) for r in rows] == [s // 4 for s in SIZES] and all(r.split()[2] == "float" for r in rows)
    assert "nccl" in out and "/bound" in out
    code, out, err = run(capsys, "simulate", schedule, "--size", SWEEP, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["verified"] is True and data["algorithm"] == "ring-allreduce-ring4" and len(data["rows"]) == 6
    for row in data["rows"]:
        for key in ("size", "count", "type", "time_us", "algbw_GBps", "busbw_GBps", "bound_us", "bound_ratio",
                    "baselines"):
            assert key in row
        assert row["bound_ratio"] == pytest.approx(row["time_us"] / row["bound_us"])
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 1.5)
    for k in (0, 5):
        code, out, err = run(capsys, "simulate", schedule, "--size", str(SIZES[k]), "--json")
        single = json.loads(out)
        row = data["rows"][k]
        assert (row["time_us"], row["bound_us"], row["bound_ratio"], row["busbw_GBps"]) == (
            single["time_us"], single["bound_us"], single["bound_ratio"], single["busbw_GBps"])
        assert [b["time_us"] for b in row["baselines"]] == [b["time_us"] for b in single["baselines"]]


def test_simulate_sweep_trace_refused_plot_drawn(capsys, schedule, tmp_path):
    trace = tmp_path / "t.json"
    code, _, err = run(capsys, "simulate", schedule, "--size", "1KiB,1MiB", "--trace", trace)
    assert code == 2 and "one size" in err and len(err.strip().splitlines()) == 1 and not trace.exists()
    plot = tmp_path / "sizes.png"
    code, out, err = run(capsys, "simulate", schedule, "--size", "1KiB,1MiB", "--plot", plot)
    assert code == 0, err
    assert plot.read_bytes()[:4] == b"\x89PNG" and "time-vs-size plot written" in out


def test_bounds_sweep_matches_single_sizes(capsys):
    code, out, err = run(capsys, "bounds", "-t", "ndv2:2", "-c", "allgather", "--size", "1KiB..1GiB*32")
    assert code == 0, err
    assert len(table_rows(out)) == 5  # 1KiB, 32KiB, 1MiB, 32MiB, 1GiB
    code, out, err = run(capsys, "bounds", "-t", "ndv2:2", "-c", "allgather", "--size", "1KiB..1GiB*32", "--json")
    rows = json.loads(out)["rows"]
    assert [r["size"] for r in rows] == [2**k for k in (10, 15, 20, 25, 30)]
    for row in rows[::4]:
        code, out, _ = run(capsys, "bounds", "-t", "ndv2:2", "-c", "allgather", "--size", str(row["size"]), "--json")
        single = json.loads(out)
        assert (row["bound_us"], row["latency_us"], row["bandwidth_us"], row["binding"]) == (
            single["bound_us"], single["latency_us"], single["bandwidth_us"], single["binding"])
        assert row["time_us"] == row["bound_us"] and row["count"] == row["size"] // 4


def test_compare_sweep_rows(capsys):
    code, out, err = run(capsys, "compare", "-t", "ring:4", "-c", "allreduce", "--size", "1KiB,1MiB", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["comparisons"]) == 2 and len(data["rows"]) == 2
    for row, comparison in zip(data["rows"], data["comparisons"]):
        timed = [r for r in comparison["rows"] if r["source"] == "schedule" and r["time_us"] is not None]
        fastest = min(timed, key=lambda r: (r["time_us"], r["name"]))
        assert row["best"] == comparison["best"] == fastest["name"] and row["time_us"] == fastest["time_us"]
        assert row["bound_ratio"] == pytest.approx(fastest["bound_ratio"])
        assert row["size"] == comparison["size"] and row["type"] == "float"
    # the same numbers as the single-size command
    code, out, _ = run(capsys, "compare", "-t", "ring:4", "-c", "allreduce", "--size", "1MiB", "--json")
    single = json.loads(out)
    assert "rows" not in single
    # one size also runs the solvers fast enough on this many ranks (packing): the best of the
    # schedules both ran is the sweep's
    shared = {r["name"] for r in data["comparisons"][1]["rows"]}
    timed = [r for r in single["comparisons"][0]["rows"]
             if r["source"] == "schedule" and r["time_us"] is not None and r["name"] in shared]
    assert min(timed, key=lambda r: (r["time_us"], r["name"]))["name"] == data["rows"][1]["best"]
    def timings(comparison):  # without the synthesis times (the clock's)
        return {r["name"]: {k: v for k, v in r.items() if k != "synthesis_seconds"} for r in comparison["rows"]}

    one, many = timings(single["comparisons"][0]), timings(data["comparisons"][1])
    assert many.keys() <= one.keys() and all(one[name] == many[name] for name in many)
    code, out, err = run(capsys, "compare", "-t", "ring:4", "-c", "allreduce", "--size", "1KiB,1MiB")
    assert code == 0 and len(table_rows(out)) == 2 and "time / bound" in out and "n/a hierarchical" in out


def test_simulate_a_set_serves_each_size_with_its_entry(capsys, schedule_set):
    from ccl import compiler

    sset, path = schedule_set
    code, out, err = run(capsys, "simulate", path, "--size", SWEEP, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["set"]["name"] == sset.name and len(data["rows"]) == len(SIZES)
    for row in data["rows"]:
        entry = sset.pick(row["size"])
        assert row["entry"] == entry.label and row["algorithm"] == entry.algorithm.name
        assert row["time_us"] == compiler.simulate(entry.algorithm, row["size"]).time_us
    code, out, err = run(capsys, "simulate", path, "--size", SWEEP)
    assert code == 0 and [r.split()[-1] for r in table_rows(out)] == [sset.pick(s).label for s in SIZES]
    code, out, err = run(capsys, "simulate", path, "--size", "1MiB", "--json")
    assert code == 0, err
    single = json.loads(out)
    assert single["entry"]["label"] == sset.pick(2**20).label and single["time_us"] == data["rows"][-1]["time_us"]


def test_run_a_set_at_two_sizes_matches_torch(capsys, schedule_set):
    pytest.importorskip("torch")
    sset, path = schedule_set
    sizes = [SIZES[0], SIZES[-1]]
    code, out, err = run(capsys, "run", path, "--size", ",".join(map(str, sizes)), "--repeat", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] is True and data["ranks"] == 4
    assert [r["entry"] for r in data["rows"]] == [sset.pick(s).label for s in sizes]
    assert len({r["entry"] for r in data["rows"]}) == 2
    for row in data["rows"]:
        assert row["correct"] is True and row["time_us"] > 0 and row["native_time_us"] > 0
        assert row["size"] == row["requested_size"] and row["count"] == row["size"] // 4


def test_compare_save_dir_writes_loadable_schedules(capsys, tmp_path):
    from ccl.core.serialize import load_algorithm
    from ccl.core.verify import verify

    folder = tmp_path / "saved"
    code, out, err = run(capsys, "compare", "-t", "ring:4", "-c", "allgather", "--size", "1KiB,1MiB", "--solvers",
                         "packing", "--save-dir", folder, "--json")
    assert code == 0, err
    saved = json.loads(out)["saved"]
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(f"{s['solver']}.json" if s["synthesis_size"] is None else
                           f"{s['solver']}@{ {1024: '1KiB', 2**20: '1MiB'}[s['synthesis_size']] }.json" for s in saved)
    assert {"ring.json", "packing@1KiB.json", "packing@1MiB.json"} <= set(names)
    for name in names:
        alg = load_algorithm(folder / name)
        verify(alg)
        assert alg.collective.kind == "allgather"
    afile = tmp_path / "afile"
    afile.write_text("")
    code, _, err = run(capsys, "compare", "-t", "ring:4", "-c", "allgather", "--size", "1KiB", "--save-dir", afile)
    assert code == 2 and "not a folder" in err


def test_compare_plot_synthesizes_once_at_the_given_size(capsys, tmp_path, monkeypatch):
    import importlib

    driver = importlib.import_module("ccl.compiler.compare")  # the module (ccl.compiler.compare is its function)
    calls = []
    real = driver.synthesize

    def counting(problem, **kw):
        calls.append((problem.request.solver, problem.request.size))
        return real(problem, **kw)

    monkeypatch.setattr(driver, "synthesize", counting)
    plot = tmp_path / "p.png"
    code, out, err = run(capsys, "compare", "-t", "ring:4", "-c", "allgather", "--size", "1MiB", "--solvers",
                         "packing", "--plot", plot, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [c for c in calls if c[0] == "packing"] == [("packing", 2**20)]
    assert len(calls) == len(set(calls))  # every solver once
    assert len(data["comparisons"]) == 1 and data["comparisons"][0]["size"] == 2**20
    assert data["plot_sizes"] == [1024 * 4**k for k in range(11)] and plot.read_bytes()[:4] == b"\x89PNG"
    # a size-specific solver over several sizes: one run per size, announced first
    calls.clear()
    code, out, err = run(capsys, "compare", "-t", "ring:4", "-c", "allgather", "--size", "1KiB,1MiB", "--solvers",
                         "packing", "--only")
    assert code == 0 and calls == [("packing", 1024), ("packing", 2**20)]
    assert "packing synthesizes a schedule per size: 2 runs" in err


def test_plot_styles_ticks_and_winners():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from backends.sim.plots import curve_styles, size_ticks, winners

    styles = curve_styles([f"s{i}" for i in range(40)])
    assert len(set(styles.values())) == 40
    assert len({c for c, _, _ in list(styles.values())[:16]}) == 16
    assert all(c != (0.0, 0.0, 0.0) for c, _, _ in styles.values())
    ax = Figure().add_subplot()
    size_ticks(ax, 1024, 2**30)
    labels = [ax.xaxis.get_major_formatter()(t, 0) for t in ax.get_xticks()]
    assert labels[0] == "1KiB" and labels[-1] == "1GiB" and "1MiB" in labels and len(labels) <= 12
    assert winners({"b": [(1, 2.0), (2, 1.0)], "a": [(1, 2.0), (2, 3.0)]}) == [(1, "a", 2.0), (2, "b", 1.0)]
