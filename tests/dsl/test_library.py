"""The topology library as .ccl files lowers to IR equal to the Python builders'."""

from __future__ import annotations

import pytest

import dsl
import topologies as T
from ccl.errors import DslError, InputError
from topologies import hardware as hw
from topologies.multinode import Nic, multinode

from .conftest import ROOT

LIB = ROOT / "topologies"
# library spec name -> (file, definition)
DSL_NAMES = {
    "ring": ("basic", "ring"), "line": ("basic", "line"), "fully-connected": ("basic", "fully_connected"),
    "star": ("basic", "star"), "switch": ("basic", "switch"), "torus": ("basic", "torus"),
    "hypercube": ("basic", "hypercube"), "dgx1": ("machines", "dgx1"), "amd8": ("machines", "amd8"),
    "ndv2": ("machines", "ndv2"), "dgx2": ("machines", "dgx2"), "dgx-a100": ("machines", "dgx_a100"),
    "dgx-h100": ("machines", "dgx_h100"),
}


@pytest.fixture(scope="module")
def modules():
    return {name: dsl.load(str(LIB / f"{name}.ccl")) for name in ("basic", "machines", "hardware", "multinode")}


def test_every_python_builder_has_a_dsl_twin(modules):
    assert set(DSL_NAMES) == set(T.BUILDERS)
    for file, name in DSL_NAMES.values():
        assert name in modules[file].topologies()


def test_library_files_are_the_shipped_modules():
    assert dsl.library_modules() == ["basic", "hardware", "machines", "multinode"]
    assert dsl.library_dir() == LIB


@pytest.mark.parametrize(("name", "args", "kwargs", "ref"), [
    ("ring", (n,), {}, lambda n=n: T.ring(n)) for n in (2, 3, 8, 17)
] + [
    ("ring", (5,), {"directed": True}, lambda: T.ring(5, directed=True)),
    ("ring", (2,), {"directed": True}, lambda: T.ring(2, directed=True)),
    ("line", (2,), {}, lambda: T.line(2)),
    ("line", (9,), {}, lambda: T.line(9)),
    ("fully_connected", (2,), {}, lambda: T.fully_connected(2)),
    ("fully_connected", (8,), {}, lambda: T.fully_connected(8)),
    ("star", (6,), {}, lambda: T.star(6)),
    ("switch", (2,), {}, lambda: T.switch(2)),
    ("switch", (8,), {}, lambda: T.switch(8)),
    ("torus", ((4, 4),), {}, lambda: T.torus((4, 4))),
    ("torus", ((2, 3, 4),), {}, lambda: T.torus((2, 3, 4))),
    ("torus", ((2, 2, 2),), {}, lambda: T.torus((2, 2, 2))),
    ("torus", ((3, 5),), {}, lambda: T.torus((3, 5))),
    ("torus", ((2, 2, 3, 2),), {}, lambda: T.torus((2, 2, 3, 2))),
    ("hypercube", (2,), {}, lambda: T.hypercube(2)),
    ("hypercube", (16,), {}, lambda: T.hypercube(16)),
])
def test_basic_families(modules, name, args, kwargs, ref):
    assert modules["basic"].topology(name, *args, **kwargs) == ref()


@pytest.mark.parametrize(("name", "nodes", "fabric", "ref"), [
    ("dgx1", None, None, T.dgx1), ("amd8", None, None, T.amd8),
] + [
    (name, nodes, fabric, builder)
    for name, builder in (("ndv2", T.ndv2), ("dgx2", T.dgx2), ("dgx_a100", T.dgx_a100), ("dgx_h100", T.dgx_h100))
    for nodes, fabric in ((1, None), (2, None), (3, "switch"), (5, "leafspine"), (9, "leafspine"), (4, "rail"))
])
def test_machines(modules, name, nodes, fabric, ref):
    args = () if nodes is None else (nodes,)
    kwargs = {} if fabric is None else {"fabric": fabric}
    assert modules["machines"].topology(name, *args, **kwargs) == ref(*args, **kwargs)


def test_dgx_h100_at_16_nodes(modules):
    assert modules["machines"].topology("dgx_h100", 16) == T.dgx_h100(16)


@pytest.mark.parametrize(("spec", "ref"), [
    ("basic.ccl:ring:8,bandwidth=50GB/s,latency=500ns", lambda: T.ring(8, 50.0, 0.5)),
    ("basic.ccl:torus:4x4,bandwidth=100Gbps", lambda: T.torus((4, 4), 12.5)),
    ("basic.ccl:torus([3, 3], latency = 2 us)", lambda: T.torus((3, 3), latency=2.0)),
    ("machines.ccl:dgx1:bandwidth=20GB/s", lambda: T.dgx1(20.0)),
    ("machines.ccl:ndv2:2,fabric=leafspine,nic_bandwidth=200Gbps", lambda: T.ndv2(2, fabric="leafspine", nic_bandwidth=25.0)),
    ("machines.ccl:dgx_a100(3, fabric = rail)", lambda: T.dgx_a100(3, fabric="rail")),
])
def test_overrides_through_command_line_specs(spec, ref):
    assert dsl.load_topology(str(LIB / spec.split(":", 1)[0]) + ":" + spec.split(":", 1)[1]) == ref()


def test_the_numbers_match_hardware_py(modules):
    exports = modules["hardware"].exports
    assert exports["ndv2_lane_bw"].value == hw.NDV2_LANE_BW
    assert exports["nic_ib100_bw"].value == hw.NIC_IB100_BW
    assert exports["dgx2_port_bw"].value == hw.DGX2_PORT_BW
    assert exports["nic_200g_bw"].value == hw.NIC_200G_BW
    assert exports["nic_400g_bw"].value == hw.NIC_400G_BW
    assert exports["dgx1_lanes"] == hw.DGX1_LANES and exports["amd8_lanes"] == hw.AMD8_LANES


@pytest.mark.parametrize(("fabric", "options", "python"), [
    ("leafspine", "(nodes_per_leaf = 2, oversubscription = 2)", {"nodes_per_leaf": 2, "oversubscription": 2.0}),
    ("leafspine", "(nodes_per_leaf = 3)", {"nodes_per_leaf": 3}),
    ("rail", "(oversubscription = 4)", {"oversubscription": 4.0}),
    ("switch", "", {}),
])
def test_fabric_options_match_multinode(fabric, options, python):
    text = f"""
    from machines import dgx_a100_node
    topology pod(nodes) {{
      name "pod"
      node dgx_a100_node x nodes {{
        for k in 0..8 {{ nic k : 200 Gbps, 2.6 us, host 32 GB/s }}
      }}
      fabric {fabric}{options}
    }}
    """
    module = dsl.load_string(text, "pod.ccl")
    nics = [Nic((k,), 25.0, 32.0, 2.6) for k in range(8)]
    node = T.dgx_a100(1)
    node = type(node)("dgx-a100", node.n_ranks, node.links, tuple(type(s)(s.name, s.kind) for s in node.switches))
    for nodes in (2, 5, 7):
        ref = multinode(node, nodes, nics, fabric=fabric, name="pod", **python)
        assert module.topology("pod", nodes) == ref


def test_multinode_of_a_ring_with_a_shared_nic():
    text = """
    from basic import ring
    topology rings(nodes) {
      name "rings"
      node ring(3) x nodes { nic 0 : 10 GB/s, 2.6 us, host 20 GB/s }
      fabric switch
    }
    """
    module = dsl.load_string(text, "rings.ccl")
    assert module.topology("rings", 2) == multinode(T.ring(3), 2, [Nic((0,), 10.0, 20.0)], name="rings")


@pytest.mark.parametrize(("spec", "needle"), [
    ("basic.ccl:ring:1", "ring needs an integer number of ranks >= 2, got 1"),
    ("basic.ccl:hypercube:12", "power-of-two"),
    ("basic.ccl:torus:1x4", "torus dimensions must be integers >= 2, got 1x4"),
    ("machines.ccl:ndv2:0", "number of nodes must be a positive integer, got 0"),
    ("machines.ccl:ndv2:2,fabric=mesh", "unknown fabric 'mesh'"),
    ("machines.ccl:dgx1:2", "2 has no unit: write a bandwidth such as 2 GB/s"),
    ("machines.ccl:dgx1:1GB/s,1us,3", "takes 2 arguments, got 3"),
])
def test_library_errors_name_the_bad_value(spec, needle):
    with pytest.raises((DslError, InputError), match=needle):
        dsl.load_topology(str(LIB / spec.split(":", 1)[0]) + ":" + spec.split(":", 1)[1])
