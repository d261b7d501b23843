"""The topology library has one source, its .ccl files: every library entry and Python function is
a call of a definition there; command-line specs, Python arguments and file specs build the same
IR; the library's lowered IR for a set of specs is pinned by a golden file."""

from __future__ import annotations

import hashlib
import inspect

import pytest

import dsl
import topologies as T
from ccl.core.errors import DslError, InputError
from dsl.printer import format_topology
from dsl.values import Quantity

from .conftest import GOLDEN, ROOT, check_golden

LIB = ROOT / "topologies"
FILES = ("basic", "machines")
PYTHON_NAMES = {"n_nodes": "nodes", "n_racks": "racks"}  # a Python parameter spelled apart from its definition's


@pytest.fixture(scope="module")
def modules():
    return {name: dsl.load(str(LIB / f"{name}.ccl")) for name in ("basic", "machines", "hardware", "multinode")}


def definition_of(modules, name):
    found = [modules[file].topologies()[name] for file in FILES if name in modules[file].topologies()]
    assert len(found) == 1, f"{name} is defined {len(found)} times in {FILES}"
    return found[0]


def test_library_files_are_the_shipped_modules():
    assert dsl.library_modules() == ["basic", "hardware", "machines", "multinode"]
    assert dsl.library_dir() == LIB
    assert sorted(p.name for p in LIB.glob("*.py")) == ["__init__.py", "builders.py", "library.py"]  # no twins


def test_every_library_entry_is_a_definition(modules):
    for builder in T.BUILDERS.values():
        definition = definition_of(modules, builder.function.__name__)
        params = [p.name for p in definition.params]
        for name, _, _ in builder.positional:
            assert name in params, (builder.name, name)
        for _, keyword, _ in builder.options:
            assert keyword in params, (builder.name, keyword)
        assert builder.function is getattr(T, builder.function.__name__)


@pytest.mark.parametrize("function", [b.function for b in T.BUILDERS.values()], ids=lambda f: f.__name__)
def test_python_functions_take_the_definitions_parameters(modules, function):
    definition = definition_of(modules, function.__name__)
    python = [PYTHON_NAMES.get(name, name) for name in inspect.signature(function).parameters]
    assert python == [p.name for p in definition.params]
    required = [PYTHON_NAMES.get(p.name, p.name) for p in inspect.signature(function).parameters.values()
                if p.default is inspect.Parameter.empty]
    assert required == [p.name for p in definition.params if p.default is None]


@pytest.mark.parametrize(("name", "args", "kwargs"), [
    ("ring", (8,), {}), ("ring", (5,), {"directed": True}), ("line", (9,), {}), ("fully_connected", (6,), {}),
    ("star", (6,), {}), ("switch", (8,), {}), ("torus", ((2, 3, 4),), {}), ("hypercube", (16,), {}),
    ("dgx1", (), {}), ("amd8", (), {}), ("ndv2", (2,), {}), ("dgx2", (3,), {"fabric": "leafspine"}),
    ("dgx_a100", (5,), {"fabric": "switch"}), ("dgx_h100", (4,), {}),
])
def test_python_functions_build_their_definitions(modules, name, args, kwargs):
    module = modules["basic"] if name in modules["basic"].topologies() else modules["machines"]
    assert getattr(T, name)(*args, **kwargs) == module.topology(name, *args, **kwargs)


@pytest.mark.parametrize(("spec", "file_spec"), [
    ("ring:8", "basic.ccl:ring:8"),
    ("ring:8,bw=50GB/s,lat=500ns", "basic.ccl:ring:8,bandwidth=50GB/s,latency=500ns"),
    ("fully_connected:4", "basic.ccl:fully_connected:4"),
    ("torus:4x4,bw=100Gbps", "basic.ccl:torus:4x4,bandwidth=100Gbps"),
    ("torus:3x3,lat=2us", "basic.ccl:torus([3, 3], latency = 2 us)"),
    ("dgx1:bw=20GB/s", "machines.ccl:dgx1:bandwidth=20GB/s"),
    ("amd8", "machines.ccl:amd8"),
    ("ndv2:2,fabric=leafspine,nic=200Gbps", "machines.ccl:ndv2:2,fabric=leafspine,nic_bandwidth=200Gbps"),
    ("dgx-a100:3,fabric=rail", "machines.ccl:dgx_a100(3, fabric = rail)"),
    ("dgx_h100:2", "machines.ccl:dgx_h100:2"),
    ("dgxh100", "machines.ccl:dgx_h100"),
])
def test_command_line_specs_build_the_file_specs(spec, file_spec):
    assert T.build(spec) == dsl.load_topology(f"{LIB}/{file_spec}")


@pytest.mark.parametrize(("spec", "ref"), [
    ("basic.ccl:ring:8,bandwidth=50GB/s,latency=500ns", lambda: T.ring(8, 50.0, 0.5)),
    ("basic.ccl:torus:4x4,bandwidth=100Gbps", lambda: T.torus((4, 4), 12.5)),
    ("basic.ccl:torus([3, 3], latency = 2 us)", lambda: T.torus((3, 3), latency=2.0)),
    ("machines.ccl:dgx1:bandwidth=20GB/s", lambda: T.dgx1(20.0)),
    ("machines.ccl:ndv2:2,fabric=leafspine,nic_bandwidth=200Gbps", lambda: T.ndv2(2, fabric="leafspine", nic_bandwidth=25.0)),
    ("machines.ccl:dgx_a100(3, fabric = rail)", lambda: T.dgx_a100(3, fabric="rail")),
])
def test_python_numbers_are_gb_per_s_and_microseconds(spec, ref):
    assert dsl.load_topology(f"{LIB}/{spec}") == ref()


def test_hardware_numbers_are_the_exports_of_hardware_ccl(modules):
    exports = modules["hardware"].exports
    numbers = T.hardware_numbers()
    assert set(numbers) == set(exports)
    assert numbers["ndv2_lane_bw"] == exports["ndv2_lane_bw"].value == 1e6 / 46.0 / 1e3
    assert numbers["nic_ib100_bw"] == 1e6 / 105.0 / 1e3 and numbers["dgx2_port_bw"] == 1e6 / 8.0 / 1e3
    assert numbers["nic_200g_bw"] == 25.0 and numbers["nic_400g_bw"] == 50.0
    assert numbers["dgx1_lanes"] == exports["dgx1_lanes"] and numbers["amd8_lanes"] == exports["amd8_lanes"]


# ---------------------------------------------------------------------- the IR, pinned
SPECS = [
    "ring:2", "ring:5", "line:4", "fully-connected:4", "star:4", "switch:3", "torus:2x3", "torus:2x2x2",
    "torus:3x3", "hypercube:8", "dgx1", "amd8", "ndv2", "ndv2:2", "ndv2:5,fabric=leafspine", "dgx2:2",
    "dgx2:3,fabric=rail", "dgx-a100", "dgx-a100:2,fabric=switch", "dgx-a100:5,fabric=leafspine,nic=100Gbps",
    "dgx-h100:3", "ring:8,bw=50GB/s,lat=1us", "torus:4x4,bw=100Gbps", "dgx1:bw=20GB/s,lat=0.5us",
]
LARGE = ["ring:1024", "torus:8x8x8", "hypercube:256", "dgx-h100:16", "dgx-h100:128", "dgx-a100:9,fabric=leafspine",
         "dgx2:16,fabric=leafspine", "ndv2:64,fabric=rail"]


def test_library_ir_is_pinned():
    """Written from the Python builders' output before the library became one source; the small
    specs in full, the large ones as a digest of the same printout."""
    parts = [f"# {spec}\n" + format_topology(T.build(spec), f"t{k}") for k, spec in enumerate(SPECS)]
    for spec in LARGE:
        topo = T.build(spec)
        digest = hashlib.sha256(format_topology(topo, "t").encode()).hexdigest()
        parts.append(f"# {spec}: {topo.n_ranks} ranks, {len(topo.switches)} switches, {len(topo.links)} links, "
                     f"{len(topo.limits)} limits, sha256 {digest}\n")
    check_golden(GOLDEN / "ir" / "library_specs.ccl", "\n".join(parts))


def test_printed_library_ir_lowers_back():
    for spec in SPECS:
        topo = T.build(spec)
        module = dsl.load_string(format_topology(topo, "t"), "printed.ccl")
        assert module.topology("t") == topo, spec


# ---------------------------------------------------------------------- composition and fabrics
POD = """
from machines import dgx_a100_node
topology pod(nodes) {{
  name "pod"
  node dgx_a100_node x nodes {{
    for k in 0..8 {{ nic k : 200 Gbps, 2.6 us, host 32 GB/s }}
  }}
  fabric {fabric}{options}
}}
"""


@pytest.mark.parametrize(("fabric", "options", "nodes", "expected"), [
    # leaves of nodes_per_leaf nodes; each leaf's uplink carries its NICs' 25 GB/s over the oversubscription
    ("leafspine", "(nodes_per_leaf = 2, oversubscription = 2)", 5, {"leaf0": 200.0, "leaf1": 200.0, "leaf2": 100.0}),
    ("leafspine", "(nodes_per_leaf = 3)", 7, {"leaf0": 600.0, "leaf1": 600.0, "leaf2": 200.0}),
    ("leafspine", "", 4, {"leaf0": None}),  # one leaf: no spine
    ("rail", "(oversubscription = 4)", 2, {f"rail{k}": 12.5 for k in range(8)}),
    ("rail", "", 3, {f"rail{k}": 75.0 for k in range(8)}),
    ("switch", "", 2, {"fabric": None}),
])
def test_fabric_options(fabric, options, nodes, expected):
    topo = dsl.load_string(POD.format(fabric=fabric, options=options), "pod.ccl").topology("pod", nodes)
    names = [s.name for s in topo.switches]
    nics = [f"n{a}.nic{k}" for a in range(nodes) for k in range(8)]
    assert names[:len(nics) + nodes] == [v for a in range(nodes) for v in (f"n{a}.nvswitch", *nics[8 * a: 8 * a + 8])]
    spine = any(up is not None for up in expected.values())
    assert set(names[len(nics) + nodes:]) == set(expected) | ({"spine"} if spine else set())
    ids = {s.name: topo.n_ranks + i for i, s in enumerate(topo.switches)}
    for switch, uplink in expected.items():
        if uplink is not None:
            assert topo.link(ids[switch], ids["spine"]).bandwidth == uplink
            assert topo.link(ids[switch], ids["spine"]).latency == 0.25
    nic = topo.link(ids["n0.nic0"], next(v for k, v in ids.items() if k in expected))
    assert (nic.bandwidth, nic.latency) == (25.0, 1.3)  # the NIC's latency split over up- and down-link


def test_multinode_of_a_ring_with_a_shared_nic():
    text = """
    from basic import ring
    topology rings(nodes) {
      name "rings"
      node ring(3) x nodes { nic 0 : 10 GB/s, 2.6 us, host 20 GB/s }
      fabric switch
    }
    """
    topo = dsl.load_string(text, "rings.ccl").topology("rings", 2)
    assert [(s.name, s.kind, s.node) for s in topo.switches] == [
        ("n0.nic0", "nic", 0), ("n1.nic0", "nic", 1), ("fabric", "switch", None)]
    assert topo.node_of == (0, 0, 0, 1, 1, 1)
    assert (topo.link(0, 6).bandwidth, topo.link(0, 6).latency) == (20.0, 0.0)  # host link, PCIe side
    assert topo.link(3, 7) is not None and topo.link(1, 6) is None
    assert (topo.link(6, 8).bandwidth, topo.link(8, 7).latency) == (10.0, 1.3)
    assert topo.flat().link(0, 3).bandwidth == 10.0 and topo.flat().link(0, 3).latency == 2.6


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


def test_literals_of_dead_expressions_are_not_reused():
    """Expressions parsed at run time (spec arguments, Module.evaluate) die after use; a literal
    cache once keyed by id(node) handed a later one a dead node's value (``3`` for ``2 us``)."""
    module = dsl.load(f"{LIB}/basic.ccl")
    for k in range(300):
        value = module.evaluate(f"[{k}, {k + 0.5} us, {k} GB/s]")
        assert value == (k, Quantity(k + 0.5, (0, 1)), Quantity(k, (1, -1)))
