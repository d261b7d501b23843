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
        winner = by_label[r["winner"]]
        assert winner["times_us"][k] == r["time_us"]  # the table's time is the winner's
        assert r["solver"] == winner["solver"]
        assert r["winner_synthesis_s"] == winner["synthesis_seconds"]
        # the winner is the fastest candidate at the size
        assert r["time_us"] <= min(c["times_us"][k] for c in case["candidates"] if c.get("times_us"))
        assert r["vs_best_template"] >= 1
        assert r["vs_best_template"] == pytest.approx(r["best_template_us"] / r["time_us"], rel=1e-3)
        for model in ("nccl_ring", "nccl_tree"):  # both apply to allreduce
            assert r[f"vs_{model}"] == pytest.approx(r[f"{model}_us"] / r["time_us"], rel=1e-3)
        assert r["nccl_p2p_us"] is None and r["vs_nccl_p2p"] is None
    h = doc["headline"]
    assert (h["cases"], h["points"], h["failed"]) == (1, 2, [])
    assert sorted(h["sizes"]) == sorted(str(s) for s in SIZES)


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
        assert cells[2] == f"`{r['winner']}`"
        assert cells[4] == f"{r['vs_nccl_ring']:.2f}x" and cells[5] == f"{r['vs_nccl_tree']:.2f}x"
        assert cells[6] == "-"  # no p2p model for allreduce
        assert cells[9] == f"{r['bound_ratio']:.3f}"


def test_headline_counts():
    case = {"machine": "m", "collective": "allreduce", "error": None, "candidates": [
        {"label": "a", "solver": "ring", "times_us": [1.0, 2.0]},
        {"label": "q", "solver": "packing", "error": "skipped: the time budget (1 s) was spent"}], "rows": [
        {"size": 1, "winner": "a", "solver": "ring", "best_template": "a", "bound_ratio": 1.0, "vs_nccl_ring": 2.0,
         "vs_nccl_tree": 0.5, "vs_nccl_p2p": None},
        {"size": 2, "winner": "p", "solver": "packing", "best_template": "a", "bound_ratio": 2.0,
         "vs_nccl_ring": 1.005, "vs_nccl_tree": None, "vs_nccl_p2p": None}]}
    h = suite.headline({"cases": [case], "gloo": [], "smt": []})
    assert h["sizes"]["1"]["nccl-ring"]["faster"] == 1 and h["sizes"]["1"]["nccl-tree"]["faster"] == 0
    assert "nccl-tree" not in h["sizes"]["2"]
    assert (h["sizes"]["2"]["nccl-ring"]["faster"], h["sizes"]["2"]["nccl-ring"]["tied"]) == (0, 1)
    assert h["skipped"] == [["m", "allreduce", ["q"]]]
    assert h["worst_bound"] == [2.0, "m", "allreduce", 2]
    assert h["geomean_bound_all"] == pytest.approx(2 ** 0.5, rel=1e-3)
    assert h["synthesized_wins"] == 1
    text = suite.headline_text(h)
    assert "faster than NCCL's ring model by 1% or more in 1 of 1 cases" in text
    assert "within 1% in 1 more" in text and "m allreduce: q" in text


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
