"""The benchmark suite (``python -m benchmarks``) on a tiny configuration, in-process: the md
and JSON it writes, their rows and the consistency of their ratios."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks import suite  # noqa: E402

SIZES = (1024, 1 << 20)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    config = suite.Config(machines=("ring:4",), collectives=("allreduce",), sizes=SIZES, time_budget=5.0,
                          command="python -m benchmarks --machines ring:4 --collectives allreduce --sizes 1KiB,1MiB")
    doc = suite.run_suite(config, str(out), gloo=False, smt=False)
    return out, doc


def test_files_written(run):
    out, doc = run
    assert json.loads((out / "results" / "suite.json").read_text()) == doc
    assert (out / "results" / "plots" / "ring_4-allreduce.png").stat().st_size > 0
    assert not (out / "RESULTS-quick.md").exists()


def test_json_rows_consistent(run):
    _, doc = run
    assert doc["format"] == "ccl-benchmark-suite"
    assert doc["gloo"] == [] and doc["smt"] == []
    [case] = doc["cases"]
    assert (case["machine"], case["collective"], case["ranks"], case["error"]) == ("ring:4", "allreduce", 4, None)
    assert case["tuner_s"] > 0 and case["peak_MiB"] > 0
    assert [r["size"] for r in case["rows"]] == list(SIZES)
    by_label = {c["label"]: c for c in case["candidates"]}
    for k, r in enumerate(case["rows"]):
        assert r["bound_ratio"] >= 1
        assert r["bound_ratio"] == pytest.approx(r["time_us"] / r["bound_us"], rel=1e-3)
        # NCCL's pick is named and the ratio to it is its time over ours, never below 1: the set
        # is NCCL itself where NCCL's pick beats every candidate
        assert r["nccl_pick"].split("/")[1] in ("LL", "LL128", "Simple")
        assert r["vs_nccl"] == pytest.approx(r["nccl_us"] / r["time_us"], rel=1e-3) and r["vs_nccl"] >= 1
        assert r["vs_nccl_ring"] == pytest.approx(r["nccl_ring_us"] / r["time_us"], rel=1e-3)  # Ring applies
        assert r["vs_best_template"] == pytest.approx(r["best_template_us"] / r["time_us"], rel=1e-3)
        if r["native"]:
            assert (r["winner"], r["solver"], r["vs_nccl"]) == ("nccl", None, 1.0)
            assert r["time_us"] == r["nccl_us"] <= min(c["times_us"][k] for c in case["candidates"]
                                                      if c.get("times_us"))
            continue
        winner = by_label[r["winner"]]
        assert winner["times_us"][k] == r["time_us"]  # the table's time is the winner's
        assert r["solver"] == winner["solver"]
        assert r["winner_synthesis_s"] == winner["synthesis_seconds"]
        # the winner is the fastest candidate at the size
        assert r["time_us"] <= min(c["times_us"][k] for c in case["candidates"] if c.get("times_us"))
        assert r["vs_best_template"] >= 1
    h = doc["headline"]
    assert (h["cases"], h["points"], h["failed"]) == (1, 2, [])
    assert sorted(h["sizes"]) == sorted(str(s) for s in SIZES)
    v = h["vs_nccl"]
    assert v["points"] == 2 and v["faster"] + v["tied"] + v["slower"] == 2 and v["slower"] == 0
    assert v["native"] == sum(1 for r in case["rows"] if r["native"])


def test_markdown(run):
    out, doc = run
    md = (out / "RESULTS.md").read_text()
    assert md.startswith("# Benchmark suite\n")
    assert "Regenerate with `python -m benchmarks --machines ring:4" in md
    assert "cores" in md and doc["meta"]["date"] in md
    assert suite.headline_text(doc["headline"]) in md
    assert "## Headline" in md and "### ring:4 (4 ranks)" in md
    assert "results/plots/ring_4-allreduce.png" in md
    assert "## Executed on gloo" not in md and "## Exact synthesis" not in md
    rows = [line for line in md.splitlines() if line.startswith("| allreduce |")]
    assert len(rows) == len(SIZES)
    for line, r in zip(rows, doc["cases"][0]["rows"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == {1024: "1KiB", 1 << 20: "1MiB"}[r["size"]]
        assert cells[2] == ("nccl (native)" if r["native"] else f"`{r['winner']}`")
        assert cells[3] == r["protocol"]
        assert cells[5] == r["nccl_pick"] and cells[7] == f"{r['vs_nccl']:.2f}x"
        assert cells[8] == f"{r['vs_nccl_ring']:.2f}x"
        assert cells[11] == f"{r['bound_ratio']:.3f}"


def test_headline_counts():
    case = {"machine": "m", "collective": "allreduce", "error": None, "candidates": [
        {"label": "a", "solver": "ring", "times_us": [1.0, 2.0, 3.0]},
        {"label": "q", "solver": "packing", "error": "skipped: the time budget (1 s) was spent"}], "rows": [
        {"size": 1, "winner": "p", "native": False, "solver": "packing", "best_template": "a", "bound_ratio": 1.0,
         "nccl_pick": "Ring/LL", "vs_nccl": 2.0, "vs_nccl_ring": 2.0},
        {"size": 2, "winner": "a", "native": False, "solver": "ring", "best_template": "a", "bound_ratio": 2.0,
         "nccl_pick": "Ring/LL", "vs_nccl": 1.005, "vs_nccl_ring": 1.005},
        {"size": 4, "winner": "nccl", "native": True, "solver": None, "best_template": "a", "bound_ratio": 0.5,
         "nccl_pick": "NVLS/Simple", "vs_nccl": 1.0, "vs_nccl_ring": 1.5}]}
    model = {"rows": 10, "median_error": 0.104, "worst_error": 1.0756, "worst_row": "x-4KiB"}
    h = suite.headline({"cases": [case], "gloo": [], "smt": [], "model": model})
    v = h["vs_nccl"]
    assert (v["points"], v["faster"], v["tied"], v["native"], v["slower"]) == (3, 1, 2, 1, 0)
    assert v["geomean"] == pytest.approx((2.0 * 1.005) ** (1 / 3), rel=1e-3)
    assert v["worst"] == [1.0, "m", "allreduce", 4] and v["best"] == [2.0, "m", "allreduce", 1]
    assert h["sizes"]["4"]["vs_nccl"]["native"] == 1 and h["sizes"]["1"]["vs_nccl"]["faster"] == 1
    assert [p["size"] for p in h["not_faster"][0]["points"]] == [2, 4]
    assert h["below_bound"] == [["m", "allreduce", 4, 0.5]]
    assert h["skipped"] == [["m", "allreduce", ["q"]]]
    assert h["worst_bound"] == [2.0, "m", "allreduce", 2]
    assert h["synthesized_wins"] == 1
    text = suite.headline_text(h)
    assert "faster by 1% or more at 1 of 3 points and ties at 2 (1 where the set's entry is NCCL itself" in text
    assert "slower at none" in text and "worst 1.00x (m allreduce, 4B); best 2.00x (m allreduce, 1B)" in text
    assert "m allreduce at 2B (1.005x vs Ring/LL); 4B (native NVLS/Simple)" in text
    assert "median error is 10.4% and its worst 107.6% (x-4KiB)" in text
    assert "m allreduce: q" in text


def test_options_parse(tmp_path, monkeypatch):
    seen = {}

    def fake(config, out, *, gloo, smt):
        seen.update(config=config, out=out, gloo=gloo, smt=smt)
        return {"headline": {"failed": [], "gloo": {"failed": 0, "correct": 0, "runs": 0}}, "smt": []}

    monkeypatch.setattr(suite, "run_suite", fake)
    assert suite.main(["--quick", "--machines", "ring:4,dgx1", "--sizes", "1KiB..4KiB", "--time-budget", "3",
                       "--no-gloo", "--out", str(tmp_path)]) == 0
    c = seen["config"]
    assert c.quick and c.machines == ("ring:4", "dgx1") and c.sizes == (1024, 2048, 4096)
    assert c.time_budget == 3 and c.collectives == suite.QUICK.collectives
    assert (seen["gloo"], seen["smt"], seen["out"]) == (False, True, str(tmp_path))
    assert c.command.startswith("python -m benchmarks --quick --machines ring:4,dgx1")
    paths = suite.Paths.under(str(tmp_path), quick=True)
    assert paths.md.endswith("RESULTS-quick.md") and paths.json.endswith("suite-quick.json")


def test_the_flow_shop_model_meets_its_closed_forms(capsys):
    """``benchmarks/flowshop.py``: one stage takes k latencies plus the volume at its rate;
    two equal stages with equal pieces (k + 1) a + V / r + V / (k r) (Johnson's rule: equal
    machines gain nothing from unequal pieces); the table prints the best count."""
    from benchmarks import flowshop

    us, sizes = flowshop.makespan(1e6, [(1e3, 2.0)], 4)
    assert us == pytest.approx(4 * 2.0 + 1e3) and sum(sizes) == pytest.approx(1e6)
    for k in (3, 8):
        us, _ = flowshop.makespan(1e6, [(1e3, 1.0), (1e3, 1.0)], k)
        assert us == pytest.approx((k + 1) * 1.0 + 1e3 + 1e3 / k, rel=1e-6)
    assert flowshop.main(["--volume", "1MB", "--stage", "1,1", "--stage", "1,1", "--pieces", "20..40"]) == 0
    assert "best: 32 pieces, 1064.2 us" in capsys.readouterr().out  # about sqrt(1000 us / 1 us) pieces
