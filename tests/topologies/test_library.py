from __future__ import annotations

import re
import subprocess
import sys

import pytest

import dsl
import topologies as T
from ccl import DslError, InputError, TopologyError

REQUIRED = ["dgx1", "ring:8", "fully-connected:8", "torus:4x4", "hypercube:8", "ndv2:2", "dgx2:2",
            "dgx-a100:2", "dgx-h100:16", "amd8"]


@pytest.mark.parametrize("spec", REQUIRED)
def test_required_specs_build(spec):
    topo = T.build(spec)
    assert topo.n_ranks >= 8
    # every rank can reach every other (possibly relaying through ranks)
    from solvers.builders.schedule import Router

    router = Router(topo)
    for q in range(topo.n_ranks):
        router.path(0, q)


def test_rank_counts():
    assert T.build("dgx-h100:16").n_ranks == 128
    assert T.build("dgx2:2").n_ranks == 32
    assert T.build("ndv2:2").n_nodes == 2
    assert T.build("torus:2x3x4").n_ranks == 24


def test_dgx1_matches_the_published_lane_matrix():
    topo = T.dgx1()
    lanes = T.hardware_numbers()["dgx1_lanes"]
    for a in range(8):
        assert sum(link.lanes for link in topo.out_links[a]) == 6  # 6 NVLinks per GPU
        for b in range(8):
            link = topo.link(a, b)
            assert (link.lanes if link else 0) == lanes[a][b]
            if link:
                assert link.bandwidth == 25.0


def test_ndv2_neighbours_and_profile():
    topo = T.ndv2(2)
    expected = {0: {1, 2, 3, 4}, 1: {0, 2, 3, 5}, 2: {0, 1, 3, 6}, 3: {0, 1, 2, 7},
                4: {0, 5, 6, 7}, 5: {1, 4, 6, 7}, 6: {2, 4, 5, 7}, 7: {3, 4, 5, 6}}
    for a, nbrs in expected.items():
        assert {link.dst for link in topo.out_links[a] if link.dst < 8} == nbrs
        assert {link.dst - 8 for link in topo.out_links[a + 8] if link.dst < 16} == nbrs
    fast = topo.link(0, 1)
    slow = topo.link(0, 2)
    assert fast.capacity == pytest.approx(1e6 / 23 / 1e3, rel=1e-3)  # 23 us/MB
    assert slow.capacity == pytest.approx(1e6 / 46 / 1e3, rel=1e-3)  # 46 us/MB
    assert fast.latency == 0.3
    nics = [s for s in topo.switches if s.kind == "nic"]
    assert len(nics) == 2  # one NIC per node


def test_dgx2_has_16_gpus_on_nvswitch_and_8_nics_per_node():
    topo = T.dgx2(2)
    assert sum(1 for s in topo.switches if s.kind == "nic") == 16
    flat = topo.flat()
    assert flat.link(0, 15).bandwidth == pytest.approx(125.0)
    assert flat.link(0, 16).bandwidth == pytest.approx(1e6 / 105 / 1e3)


@pytest.mark.parametrize(("builder", "port", "nic"), [(T.dgx_a100, 300.0, 25.0), (T.dgx_h100, 450.0, 50.0)])
def test_nvswitch_generations(builder, port, nic):
    topo = builder(2)
    flat = topo.flat()
    assert flat.link(0, 7).bandwidth == port
    assert flat.link(0, 8).bandwidth == nic  # same rail
    assert flat.link(0, 9).bandwidth == nic  # cross rail through the spine
    assert flat.link(0, 8).latency < flat.link(0, 9).latency


def test_amd8_is_fully_connected_with_5_or_6_lanes():
    topo = T.amd8()
    assert len(topo.links) == 56
    assert {link.lanes for link in topo.links} == {5, 6}
    assert all(topo.link(a, b).lanes == topo.link(b, a).lanes for a in range(8) for b in range(8) if a != b)


def test_torus_and_hypercube_degrees():
    t = T.torus((4, 4))
    assert all(len(t.out_links[r]) == 4 for r in range(16))
    t3 = T.torus((2, 2, 2))
    assert all(len(t3.out_links[r]) == 3 for r in range(8))  # size-2 dimensions have one link
    h = T.hypercube(16)
    assert all(len(h.out_links[r]) == 4 for r in range(16))
    with pytest.raises(TopologyError, match="power-of-two"):
        T.hypercube(12)


def test_star_and_switch_differ():
    star = T.star(5)
    assert star.switches == () and len(star.out_links[0]) == 4 and len(star.out_links[1]) == 1
    sw = T.switch(5)
    assert len(sw.switches) == 1 and sw.flat().link(1, 2) is not None


@pytest.mark.parametrize("fabric", ["switch", "leafspine", "rail"])
def test_fabrics(fabric):
    topo = T.dgx_a100(4, fabric=fabric)
    flat = topo.flat()
    assert len(flat.links) == 32 * 31
    names = {s.name for s in topo.switches}
    if fabric == "switch":
        assert "fabric" in names
    elif fabric == "leafspine":
        assert "leaf0" in names
    else:
        assert {"rail0", "rail7", "spine"} <= names


def test_oversubscribed_fabrics_from_the_command_line_spec():
    """``oversub=`` divides the leaf (or rail) uplinks; ``per-leaf=`` sets the nodes per leaf."""
    from ccl import InputError, TopologyError

    def uplink(topo, leaf="leaf0"):
        spine = topo.vertex("spine")
        return topo.link(topo.vertex(leaf), spine).capacity

    full = T.build("dgx-h100:8,fabric=leafspine,per-leaf=2")
    half = T.build("dgx-h100:8,fabric=leafspine,per-leaf=2,oversub=2")
    assert len([s for s in full.switches if s.name.startswith("leaf")]) == 4
    assert uplink(full) == pytest.approx(2 * 8 * 50.0) and uplink(half) == pytest.approx(uplink(full) / 2)
    assert T.dgx_h100(8, fabric="leafspine", nodes_per_leaf=2, oversubscription=2).links == half.links
    rail = T.build("dgx-a100:4,oversub=4")
    assert uplink(rail, "rail0") == pytest.approx(25.0 * 4 / 4)
    with pytest.raises((InputError, TopologyError), match="non-blocking"):
        T.build("dgx-h100:2,fabric=switch,oversub=2")
    with pytest.raises((InputError, TopologyError), match=">= 1"):
        T.build("dgx-h100:2,oversub=0.5")
    with pytest.raises(InputError, match="must be a number"):
        T.build("dgx-h100:2,oversub=lots")


CLUSTERS = """
from basic import ring, switch
topology switches {
  node switch(2) x 4 { nic [0, 1] : 10 GB/s, 2.6 us, host 20 GB/s }
  fabric leafspine(nodes_per_leaf = 2, oversubscription = 2)
}
topology rings(host = 0, fabric = "switch") {
  node ring(3) x 2 { nic host : 10 GB/s, 2.6 us, host 20 GB/s }
  fabric fabric
}
topology no_nics {
  node ring(3) x 2 {}
  fabric switch
}
"""


@pytest.fixture(scope="module")
def clusters():
    return dsl.load_string(CLUSTERS, "clusters.ccl")


def test_leafspine_oversubscription_binds(clusters):
    topo = clusters.topology("switches")
    # the 16 pairs from leaf 0's nodes to leaf 1's share the uplink: two 10 GB/s NICs at 2:1
    uplink = [x for x in topo.flat().limits if len(x.links) == 16]
    assert uplink and all(x.bandwidth == 10.0 for x in uplink)


def test_multinode_renumbers_and_validates(clusters):
    topo = clusters.topology("rings")
    assert topo.node_of == (0, 0, 0, 1, 1, 1)
    assert topo.link(3, 4) is not None and topo.link(2, 3) is None
    with pytest.raises(DslError, match="serves node-local ranks 0..2, got 5"):
        clusters.topology("rings", host=5)
    with pytest.raises(DslError, match="unknown fabric 'mesh'"):
        clusters.topology("rings", fabric="mesh")
    with pytest.raises(DslError, match="without NICs"):
        clusters.topology("no_nics")


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("nosuch", "unknown topology"),
        ("ring", "needs a size"),
        ("ring:3,4", "at most 1 value"),
        ("ring:3,color=red", "no option 'color'"),
        ("ring:three", "must be an integer"),
        ("ring:1", ">= 2"),
        ("dgx1:2", "at most 0 value"),
        ("ndv2:0", "positive integer"),
        ("ndv2:2,fabric=mesh", "topology 'ndv2:2,fabric=mesh': unknown fabric 'mesh'"),
        ("hypercube:12", "topology 'hypercube:12': hypercube needs a power-of-two number of ranks, got 12"),
        ("torus:1x4", "topology 'torus:1x4': torus dimensions must be integers >= 2, got 1x4"),
        ("ring:4,bw=fast", "cannot read bandwidth"),
        ("ring:4,,bw=1", "empty argument"),
    ],
)
def test_spec_errors(spec, needle):
    with pytest.raises(InputError, match=needle):
        T.build(spec)


def test_spec_options_with_units():
    topo = T.build("ring:4,bw=100Gbps,lat=500ns")
    link = topo.link(0, 1)
    assert link.bandwidth == 12.5 and link.latency == pytest.approx(0.5)
    assert T.build("ndv2:2,nic=200Gbps").flat().link(0, 8).bandwidth == 12.0  # PCIe binds now


def test_every_builder_has_an_example_that_builds():
    for builder in T.BUILDERS.values():
        assert T.build(builder.example).n_ranks >= 2


@pytest.mark.parametrize(("call", "needle"), [
    (lambda: T.ring(1), "ring needs an integer number of ranks >= 2, got 1"),
    (lambda: T.ring(8.0), "ring: n must be an integer, got 8.0"),
    (lambda: T.ring(True), "ring: n must be an integer, got True"),
    (lambda: T.ring(4, bandwidth="fast"), "ring: bandwidth must be a finite number of GB/s, got 'fast'"),
    (lambda: T.ring(4, latency=float("nan")), "ring: latency must be a finite number of microseconds, got nan"),
    (lambda: T.ring(4, bandwidth=-1.0), "bandwidth must be positive, got -1 GB/s"),
    (lambda: T.ring(4, directed="yes"), "ring: directed must be True or False"),
    (lambda: T.torus(()), "torus: dims must be a non-empty list of integers"),
    (lambda: T.torus((1, 4)), "torus dimensions must be integers >= 2, got 1x4"),
    (lambda: T.ndv2(0), "number of nodes must be a positive integer, got 0"),
    (lambda: T.dgx2(1.5), "dgx2: n_nodes must be an integer, got 1.5"),
    (lambda: T.ndv2(2, fabric="mesh"), "unknown fabric 'mesh'"),
    (lambda: T.dgx_h100(2, fabric=3), "dgx_h100: fabric must be a string, got 3"),
])
def test_python_arguments_are_checked(call, needle):
    with pytest.raises(TopologyError, match=re.escape(needle)):
        call()


def test_python_arguments_in_gb_per_s_and_microseconds():
    link = T.ring(4, 50, 0.5).link(0, 1)
    assert (link.bandwidth, link.latency) == (50.0, 0.5)
    assert T.ring(4) == T.ring(4, bandwidth=25.0, latency=0.7)  # the hardware.ccl defaults
    assert T.switch(4, latency=1.0).link(0, 4).latency == 0.5  # split over the two hops
    assert T.dgx_a100(2, nic_bandwidth=10.0).flat().link(0, 8).bandwidth == 10.0
    assert T.ndv2(2, fabric="rail") == T.build("ndv2:2,fabric=rail")
    assert T.torus([2, 3]) == T.torus(range(2, 4)) == T.build("torus:2x3")


def test_hardware_numbers_come_from_hardware_ccl():
    numbers = T.hardware_numbers()
    assert numbers["net_lat"] == 2.6 and numbers["generic_bw"] == 25
    assert numbers["ndv2_lane_bw"] == pytest.approx(1e6 / 46 / 1e3)
    assert numbers["nic_400g_bw"] == 50.0 and numbers["amd8_lanes"][0] == (0, 5, 6, 6, 5, 6, 5, 5)
    with pytest.raises(TypeError):
        numbers["net_lat"] = 1.0  # read-only


def test_repeated_builds_reuse_the_loaded_library():
    assert T.build("dgx-h100:4") is T.build("dgx-h100:4")


def test_import_topologies_does_not_load_the_language():
    code = "import sys, topologies; print([m for m in ('dsl', 'lark') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
