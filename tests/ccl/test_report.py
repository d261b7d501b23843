"""Report: the nccl-tests size convention, derived figures, the bound and baselines the driver
adds (``with_bound``, ``with_baselines``), JSON and text."""

from __future__ import annotations

import json
import math

import pytest

from ccl import InputError
from ccl.core.collective import builtin
from ccl.core.report import NOT_COMPUTED, Baseline, LinkUsage, Report, bus_factor, slot_bytes


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


def physics(**changes) -> Report:
    """A report as the simulator makes it: physics only, no bound, no baselines."""
    fields = dict(algorithm="a", collective="allreduce", n_ranks=8, topology="t", solver="ring", size=8e6,
                  slot_bytes=1e6, mode="dependency", steps=14, messages=112, ops=168, time_us=1000.0,
                  bus_factor=14 / 8, links=(LinkUsage(0, 1, 1e6, 3, 40.0, 25.0, 1, 0.04),))
    fields.update(changes)
    return Report(**fields)


def report(**changes) -> Report:
    """A report as the driver completes it: the lower bound and an NCCL baseline added."""
    return physics(**changes).with_bound(500.0, 2.0, 500.0, "bandwidth", "cut").with_baselines(
        (Baseline("nccl-ring", 1500.0, "model"),))


def test_derived_figures_and_json():
    r = report()
    assert r.algbw_GBps == pytest.approx(8e6 / 1000.0 / 1e3)
    assert r.busbw_GBps == pytest.approx(r.algbw_GBps * 14 / 8)
    assert r.bound_ratio == 2.0
    assert r.speedup("nccl-ring") == 1.5 and r.speedup("nccl-tree") is None
    data = json.loads(json.dumps(r.to_json()))
    for key in ("time_us", "algbw_GBps", "busbw_GBps", "bound_us", "bound_ratio", "links", "baselines"):
        assert key in data
    assert data["messages"] == 112 and data["ops"] == 168 and "transfers" not in data
    assert data["links"][0]["messages"] == 3 and "transfers" not in data["links"][0]
    assert data["baselines"][0]["speedup"] == 1.5
    assert data["size_meaning"] == "per-rank buffer"
    assert "links" not in r.to_json(links=False)
    text = r.text()
    assert "schedule / bound = 2.000" in text and "1.50x faster" in text
    assert "14 steps, 112 messages, 168 ops" in text and "in 3 messages" in text


def test_the_simulators_report_has_no_bound_until_the_driver_adds_it():
    bare = physics()
    assert bare.bound_binding == NOT_COMPUTED == "not computed"
    assert bare.bound_us == bare.latency_bound_us == bare.bandwidth_bound_us == 0.0 and bare.bound_method == ""
    assert bare.baselines == () and bare.speedup("nccl-ring") is None
    text = bare.text()
    assert "lower bound not computed" in text and "schedule / bound" not in text
    assert bare.to_json()["bound_binding"] == "not computed" and bare.to_json()["baselines"] == []
    done = bare.with_bound(500.0, 2.0, 500.0, "bandwidth", "cut")
    assert (done.bound_us, done.latency_bound_us, done.bandwidth_bound_us) == (500.0, 2.0, 500.0)
    assert done.bound_binding == "bandwidth" and done.bound_method == "cut" and done.bound_ratio == 2.0
    assert "lower bound 500 us   (bandwidth binds: latency 2 us, bandwidth 500 us, cut)" in done.text()
    assert bare.bound_binding == NOT_COMPUTED  # reports are values: with_bound returns a new one
    assert done.with_baselines([Baseline("nccl-tree", 500.0)]).speedup("nccl-tree") == 0.5
    # a bound part that cannot be met at all (infinite) is reported as 0, never as an infinity
    odd = bare.with_bound(math.inf, 2.0, math.inf, "bandwidth", "cut")
    assert odd.bound_us == odd.bandwidth_bound_us == 0.0 and odd.latency_bound_us == 2.0
    assert json.loads(json.dumps(odd.to_json()))["bound_us"] == 0.0


def test_validation_and_infinities():
    with pytest.raises(InputError):
        report(time_us=-1.0)
    with pytest.raises(InputError):
        report(size=0)
    with pytest.raises(InputError):
        physics().with_bound(-1.0, 0.0, 0.0, "latency", "")
    zero = report(time_us=0.0)
    assert math.isinf(zero.algbw_GBps) and zero.to_json()["algbw_GBps"] is None
