"""NCCL as NCCL would run: which algorithms it enables where, the picks published runs show, and
its algorithms priced by the same calibrated model the simulator charges the project's schedules."""

from __future__ import annotations

import json

import pytest

import topologies as T
from backends.cost import calibration as C
from backends.cost import nccl
from backends.cost.machine import Machine
from backends.cost.runtime import charges
from backends.sim import simulate
from ccl.compiler import problem_from_options, program, synthesize
from ccl.core.errors import InputError

GiB, MiB, KiB = 2**30, 2**20, 2**10


def algorithms(kind: str, spec: str) -> set[str]:
    return {a for a, _ in nccl.enabled(kind, Machine.of(T.build(spec)))}


def test_enabled_algorithms_follow_ncclss_rules():
    assert algorithms("allreduce", "dgx-h100") == {"Ring", "Tree", "NVLS"}  # an NVSwitch that reduces
    assert algorithms("allreduce", "dgx-a100") == {"Ring", "Tree"}  # NVSwitch generation 2: no NVLS
    assert algorithms("allreduce", "dgx-h100:2") == {"Ring", "Tree", "NVLSTree"}  # NVLS across nodes needs SHARP
    assert algorithms("allreduce", "dgx-h100:2,sharp=on") >= {"NVLS", "NVLSTree", "CollNetDirect", "CollNetChain"}
    assert algorithms("allgather", "dgx-h100") == {"Ring", "NVLS"}
    assert algorithms("allgather", "dgx-h100:2") == {"Ring"}
    assert "PAT" in algorithms("allgather", "dgx-h100:4,gpus=1")  # one rank per node
    assert algorithms("broadcast", "dgx-h100") == {"Ring"}
    assert algorithms("alltoall", "dgx-h100") == {"P2P"}
    assert algorithms("allreduce", "hgx-h200:1,gpus=4") == {"Ring", "Tree"}  # too few GPUs for multicast
    assert nccl.enabled("allreduce", Machine.of(T.build("dgx-h100:1,gpus=1"))) == []


@pytest.mark.parametrize("size, algorithm", [(32 * KiB, "Ring"), (MiB, "Ring"), (2 * MiB, "NVLS"), (16 * GiB, "NVLS")])
def test_the_picks_of_the_published_8x_h200_sweep(size, algorithm):
    # NCCL 2.27 on 8x H200 (stas00/ml-engineering): Ring/LL up to 1 MiB, NVLS/Simple from 2 MiB
    pick = nccl.pick("allreduce", T.build("hgx-h200"), size)
    assert pick.algorithm == algorithm
    assert pick.protocol == ("LL" if algorithm == "Ring" else "Simple")


@pytest.mark.parametrize("spec, gpus, algorithm", [("hgx-h200", 4, "Ring"), ("hgx-h200", 5, "NVLS"),
                                                   ("hgx-b200", 5, "Ring"), ("hgx-b200", 6, "NVLS")])
def test_nvls_takes_over_from_the_gpu_counts_the_published_runs_show(spec, gpus, algorithm):
    assert nccl.pick("allreduce", T.build(f"{spec}:1,gpus={gpus}"), 8 * GiB).algorithm == algorithm


def test_the_pick_is_the_fastest_enabled_and_names_itself():
    topo = T.build("dgx-h100")
    found = nccl.choices("allreduce", topo, GiB)
    assert found == sorted(found, key=lambda c: c.time_us)
    base = nccl.baselines("allreduce", topo, GiB)
    assert base[0].name == "nccl" and "NCCL NVLS/Simple" in base[0].detail
    assert base[0].time_us == found[0].time_us
    assert [b.name for b in base[1:]] == ["nccl-ring", "nccl-tree"]  # the runners-up, each at its best protocol
    assert nccl.pick("custom", topo, GiB) is None


def test_the_measured_dgx_h100_allreduce_within_the_models_error():
    # NVIDIA/dgxc-benchmarking nccl/README.md, 8x H100: 8 B 13.67 us, 1 GiB 4029.4 us (NVLS)
    topo = T.build("dgx-h100")
    assert nccl.pick("allreduce", topo, GiB).time_us == pytest.approx(4029.4, rel=0.10)
    assert nccl.pick("allreduce", topo, 8).time_us == pytest.approx(13.67, rel=0.40)


def test_ncclss_ring_and_the_ring_template_are_priced_alike():
    """One model: NCCL's Ring/Simple priced analytically and the project's ring allreduce
    simulated under the NCCL runtime's Simple protocol agree at a size where the bytes dominate."""
    topo = T.build("dgx-h100")
    ring = nccl.price("allreduce", Machine.of(topo), "Ring", "Simple", GiB)
    schedule = program(synthesize(problem_from_options(topo, "allreduce", solver="ring")))
    simulated = simulate(schedule, GiB, runtime=charges("nccl", "Simple", topo)).time_us
    assert simulated == pytest.approx(ring.time_us, rel=0.02)


def test_multi_node_rings_use_every_nic():
    # NCCL runs a channel per NIC: a ring across nodes has a node's whole network rate
    machine = Machine.of(T.build("dgx-h100:2"))
    assert machine.net_GBps == pytest.approx(8 * 50.0) and machine.n_nodes == 2 and machine.ppn == 8
    ring = nccl.price("allgather", machine, "Ring", "Simple", 8 * GiB)
    cal = C.calibration()
    rate = min(450 * cal.efficiency("nvlink", "hopper"), 400 * cal.efficiency("net", "hopper"))
    assert ring.time_us == pytest.approx(ring.latency_us + 8 * GiB * 15 / 16 / rate / 1e3 + cal.fill(8 * GiB))


def test_calibration_file_names_a_source_for_every_parameter():
    cal = C.calibration()
    params = cal.to_json()["parameters"]
    missing = [k for k in params if k not in cal.sources and k not in ("protocol_efficiency",) or not cal.sources.get(k)]
    assert not [k for k in missing if k != "protocol_efficiency"]
    assert 0 < cal.efficiency("nvlink", "hopper", "LL") < cal.efficiency("nvlink", "hopper", "Simple") <= 1
    with pytest.raises(InputError, match="malformed cost calibration"):
        C.from_json({"format": C.FORMAT, "parameters": {}})
    bad = json.loads(json.dumps(cal.to_json()))
    bad["parameters"]["net_efficiency"] = 1.5
    with pytest.raises(InputError, match="net_efficiency"):
        C.from_json(bad)


def test_nccl_constants_are_pinned_per_version():
    consts = C.nccl_constants("2.30")
    assert consts["source"]["repo"] == "NVIDIA/nccl" and len(consts["source"]["commit"]) == 40
    assert list(consts["base_latency_us"]["Ring"]) == [6.6, 14.0, 8.4]
    with pytest.raises(InputError, match="no NCCL constants for version"):
        C.nccl_constants("1.0")


def test_runtime_charges():
    topo = T.build("dgx-h100")
    physics = charges("physics", "Simple", topo)
    assert physics.call_us(GiB) == 0.0 and physics.efficiency == {"nvlink": 1.0, "net": 1.0}
    ll, simple = charges("msccl", "LL", topo), charges("msccl", "Simple", topo)
    assert ll.hop_us["nvlink"] < simple.hop_us["nvlink"] or ll.launch_us < simple.launch_us
    assert ll.efficiency["nvlink"] < simple.efficiency["nvlink"]
    torch_step = charges("torch-nccl", "Simple", topo)
    assert torch_step.per_step_us > 0 and "torch executor" in torch_step.label
    with pytest.raises(InputError, match="runs protocols"):
        charges("mscclpp", "LL128", topo)
    with pytest.raises(InputError, match="unknown runtime"):
        charges("nosuch", "LL", topo)
