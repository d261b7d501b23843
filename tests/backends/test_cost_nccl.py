"""NCCL's cost model as a baseline: hand-computed values and the bus bandwidth it assumes."""

from __future__ import annotations

import pytest

import topologies as T
from backends.cost.nccl import baselines, bus_bandwidth, p2p_model, predict


def test_bus_bandwidth_of_machines():
    assert bus_bandwidth(T.dgx1()) == pytest.approx(150.0)  # six NVLink lanes per GPU
    assert bus_bandwidth(T.switch(8, bandwidth=40.0)) == pytest.approx(40.0)
    assert bus_bandwidth(T.ring(8, bandwidth=25.0)) == pytest.approx(50.0)  # both directions
    assert bus_bandwidth(T.ndv2(2)) == pytest.approx(1e6 / 105 / 1e3)  # the node's one NIC
    assert bus_bandwidth(T.dgx_a100(2)) == pytest.approx(200.0)  # eight 25 GB/s NICs per node


def test_ring_allreduce_prediction_single_node():
    n, size, bw = 8, 2**26, 150.0
    pred = predict("allreduce", n, 1, size, bw, "ring")
    # Simple wins at 64MiB: 8.4 + 14 x 3.4 us, algbw = bw x n / (2 (n - 1))
    algbw = bw * n / (2 * (n - 1))
    assert pred.protocol == "Simple"
    assert pred.latency_us == pytest.approx(8.4 + 14 * 3.4)
    assert pred.time_us == pytest.approx(8.4 + 14 * 3.4 + size / (1000 * algbw))
    small = predict("allreduce", n, 1, 1024, bw, "ring")
    assert small.protocol == "LL" and small.latency_us == pytest.approx(6.6 + 14 * 0.6)


def test_multi_node_latencies_and_tree():
    pred = predict("allgather", 16, 2, 2**30, 10.0, "ring")
    assert pred.latency_us == pytest.approx(8.4 + 14 * 3.4 + 1 * 14.0)
    tree = predict("allreduce", 16, 2, 2**30, 10.0, "tree")
    assert tree.latency_us == pytest.approx(8.4 + 2 * (7 * 4.0 + 1 * 14.0))
    assert tree.algbw_GBps == pytest.approx(10.0 * 0.9 * 0.5)
    assert predict("allgather", 16, 2, 2**20, 10.0, "tree") is None
    assert predict("alltoall", 16, 2, 2**20, 10.0, "ring") is None


def test_p2p_model_and_floor():
    p = p2p_model("alltoall", 8, 1, 8e6, 100.0)
    assert p.time_us == pytest.approx(8.4 + 3.4 + 7e6 / 100e3)
    capped = baselines("alltoall", T.dgx1(), 8e6, floor_us=1e6)
    assert capped[0].time_us == 1e6 and "below the lower bound" in capped[0].detail
    assert predict("allreduce", 1, 1, 10, 1.0, "ring") is None
