"""Report: the nccl-tests size convention, derived figures, JSON and text."""

from __future__ import annotations

import json
import math

import pytest

from ccl import InputError
from ccl.collective import builtin
from ccl.report import Baseline, LinkUsage, Report, bus_factor, slot_bytes


@pytest.mark.parametrize(("kind", "slots"), [
    ("allreduce", 1), ("allgather", 8), ("reducescatter", 8), ("alltoall", 8),
    ("broadcast", 1), ("reduce", 1), ("gather", 8), ("scatter", 8),
])
def test_slot_bytes_follow_nccl_tests(kind, slots):
    coll = builtin(kind, 8, 0 if kind in ("broadcast", "reduce", "gather", "scatter") else None)
    assert slot_bytes(coll, 2**20) == 2**20 / slots
    assert slot_bytes(coll.chunk_up(4), 2**20) == 2**20 / slots / 4


def test_bus_factors():
    assert bus_factor("allreduce", 8) == pytest.approx(14 / 8)
    for kind in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        assert bus_factor(kind, 8) == pytest.approx(7 / 8)
    for kind in ("broadcast", "reduce", "custom"):
        assert bus_factor(kind, 8) == 1.0


def report(**changes) -> Report:
    fields = dict(algorithm="a", collective="allreduce", n_ranks=8, topology="t", solver="ring", size=8e6,
                  slot_bytes=1e6, mode="dependency", steps=14, transfers=112, time_us=1000.0,
                  bus_factor=14 / 8, bound_us=500.0, latency_bound_us=2.0, bandwidth_bound_us=500.0,
                  bound_binding="bandwidth", links=(LinkUsage(0, 1, 1e6, 1, 40.0, 25.0, 1, 0.04),),
                  baselines=(Baseline("nccl-ring", 1500.0, "model"),))
    fields.update(changes)
    return Report(**fields)


def test_derived_figures_and_json():
    r = report()
    assert r.algbw_GBps == pytest.approx(8e6 / 1000.0 / 1e3)
    assert r.busbw_GBps == pytest.approx(r.algbw_GBps * 14 / 8)
    assert r.bound_ratio == 2.0
    assert r.speedup("nccl-ring") == 1.5 and r.speedup("nccl-tree") is None
    data = json.loads(json.dumps(r.to_json()))
    for key in ("time_us", "algbw_GBps", "busbw_GBps", "bound_us", "bound_ratio", "links", "baselines"):
        assert key in data
    assert data["baselines"][0]["speedup"] == 1.5
    assert data["size_meaning"] == "per-rank buffer"
    assert "links" not in r.to_json(links=False)
    text = r.text()
    assert "schedule / bound = 2.000" in text and "1.50x faster" in text


def test_validation_and_infinities():
    with pytest.raises(InputError):
        report(time_us=-1.0)
    with pytest.raises(InputError):
        report(size=0)
    zero = report(time_us=0.0)
    assert math.isinf(zero.algbw_GBps) and zero.to_json()["algbw_GBps"] is None
