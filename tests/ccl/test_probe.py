"""``ccl probe`` (Blink class): the fit recovers a known machine from measurements it would give
(latency, bandwidth, a rank's shared NIC, two transfers behind one switch), the written file
is a topology ``ccl check`` accepts and synthesis uses, and the probe runs on real gloo
processes: local ones and under torchrun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import dsl
from ccl.cli import main
from ccl.compiler.probe import fit, to_ccl

SIZES = [4096, 262144, 4194304]


def synthetic(n: int = 4, latency: float = 10.0, bandwidth: float = 5.0, out_cap: dict | None = None,
              shared: tuple = ()) -> dict:
    """What ``measure`` reports on a machine with every pair at ``latency`` us and ``bandwidth``
    GB/s, rank r's sends capped at ``out_cap[r]`` GB/s, and the transfers in ``shared`` (two
    directed pairs) behind one bottleneck of ``bandwidth`` GB/s."""
    out_cap = out_cap or {}
    big = max(SIZES)

    def t(nbytes: float, gbps: float = bandwidth) -> float:
        return latency + nbytes / (gbps * 1e3)

    pairs = {f"{a},{b}": {str(s): t(s) for s in SIZES} for a in range(n) for b in range(a + 1, n)}
    fan_out = {str(r): latency + (n - 1) * big / (min(out_cap.get(r, 1e9), (n - 1) * bandwidth) * 1e3)
               for r in range(n)}
    fan_in = {str(r): t(0) + (n - 1) * big / ((n - 1) * bandwidth * 1e3) for r in range(n)}
    concurrent = []
    for a, b in [((0, 1), (2, 3)), ((0, 2), (1, 3)), ((0, 3), (1, 2))]:
        slow = {tuple(a), tuple(b)} == set(shared)
        each = t(big, bandwidth / 2 if slow else bandwidth) + latency
        concurrent.append({"first": list(a), "second": list(b), "first_us": each, "second_us": each})
    return {"format": "ccl-probe", "n_ranks": n, "sizes": SIZES, "repeat": 5, "backend": "gloo", "pairs": pairs,
            "fan_out": fan_out, "fan_in": fan_in, "concurrent": concurrent, "hosts": ["a"] * n}


def test_the_fit_recovers_latency_bandwidth_and_bottlenecks() -> None:
    probed = fit(synthetic(out_cap={2: 6.0}, shared=((0, 3), (1, 2))))
    topo = probed.topology
    assert len(probed.pairs) == 6
    for p in probed.pairs:
        assert p.latency_us == pytest.approx(10.0, rel=1e-2) and p.bandwidth_gbps == pytest.approx(5.0, rel=1e-2)
    limits = {lim.name: lim for lim in topo.limits}
    assert set(limits) == {"rank2-out", "shared0"}  # nothing else slowed down
    assert limits["rank2-out"].bandwidth == pytest.approx(6.0, rel=1e-2)
    assert set(limits["rank2-out"].links) == {(2, 0), (2, 1), (2, 3)}
    assert set(limits["shared0"].links) == {(0, 3), (1, 2)} and limits["shared0"].bandwidth == pytest.approx(5.0)
    assert max(probed.errors()) < 0.02  # the model explains every measurement


def test_the_file_is_a_topology_check_accepts_and_synthesis_uses(tmp_path, capsys) -> None:
    probed = fit(synthetic(out_cap={1: 7.0}))
    path = tmp_path / "probed.ccl"
    path.write_text(to_ccl(probed))
    loaded = dsl.load(str(path)).topology("probed")
    assert loaded.links == probed.topology.links and loaded.limits == probed.topology.limits
    assert main(["check", str(path)]) == 0
    out = tmp_path / "ar.json"
    assert main(["synthesize", "-t", str(path), "-c", "allreduce", "-s", "ring", "-o", str(out)]) == 0
    assert main(["verify", str(out)]) == 0
    capsys.readouterr()
    saved = tmp_path / "m.json"
    saved.write_text(json.dumps(synthetic()))
    assert main(["probe", "--from", str(saved), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fit"]["max_error"] < 0.02 and data["limits"] == []


def test_bad_requests_exit_2(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    assert main(["probe", "-o", str(tmp_path / "x.ccl")]) == 2
    assert "run under torchrun" in capsys.readouterr().err
    assert main(["probe", "--local", "4", "--sizes", "4KiB"]) == 2
    assert "at least two sizes" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    assert main(["probe", "--from", str(bad)]) == 2
    assert "not a probe measurement" in capsys.readouterr().err
    assert not (tmp_path / "x.ccl").exists()


@pytest.mark.parametrize("n", [4])
def test_probe_local_gloo_processes(tmp_path, capsys, n: int) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "probed.ccl"
    assert main(["probe", "--local", str(n), "--repeat", "2", "-o", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["pairs"]) == n * (n - 1) // 2
    assert all(p["bandwidth_GBps"] > 0 and p["latency_us"] >= 0 for p in data["pairs"])
    assert data["fit"]["measurements"] == 3 * len(data["pairs"]) + 2 * n + 2 * 3  # pairs, fans, 3 tests x 2
    assert data["measurements"]["hosts"] == [data["measurements"]["hosts"][0]] * n
    assert main(["check", str(out)]) == 0
    assert main(["synthesize", "-t", str(out), "-c", "allgather", "-s", "ring", "-o", str(tmp_path / "ag.json")]) == 0


def test_probe_under_torchrun(tmp_path) -> None:
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found")
    out = tmp_path / "probed.ccl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "ccl.cli", "probe",
                          "--repeat", "2", "-o", str(out)], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("probed 2 ranks") == 1  # rank 0 reports
    assert main(["check", str(out)]) == 0
