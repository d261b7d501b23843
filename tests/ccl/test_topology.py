from __future__ import annotations

import pytest

import topologies as T
from ccl import Link, SharedLimit, Switch, Topology, TopologyError


def test_link_validation():
    with pytest.raises(TopologyError, match="bandwidth must be positive"):
        Link(0, 1, 0.0, 1.0)
    with pytest.raises(TopologyError, match="bandwidth must be positive"):
        Link(0, 1, -3.0, 1.0)
    with pytest.raises(TopologyError, match="latency must be >= 0"):
        Link(0, 1, 1.0, -1.0)
    with pytest.raises(TopologyError, match="lanes must be a positive integer"):
        Link(0, 1, 1.0, 1.0, 0)
    assert Link(0, 1, 25.0, 0.7, 2).capacity == 50.0


def test_topology_validation():
    with pytest.raises(TopologyError, match="connects a vertex to itself"):
        Topology("t", 2, (Link(1, 1, 1.0, 1.0),))
    with pytest.raises(TopologyError, match="names vertex 5"):
        Topology("t", 2, (Link(0, 5, 1.0, 1.0),))
    with pytest.raises(TopologyError, match="defined twice"):
        Topology("t", 2, (Link(0, 1, 1.0, 1.0), Link(0, 1, 2.0, 1.0)))
    with pytest.raises(TopologyError, match="does not exist"):
        Topology("t", 2, (Link(0, 1, 1.0, 1.0),), limits=(SharedLimit("nic", ((1, 0),), 1.0),))
    with pytest.raises(TopologyError, match="node_of has 1 entries"):
        Topology("t", 2, (), node_of=(0,))
    with pytest.raises(TopologyError, match="without gaps"):
        Topology("t", 2, (), node_of=(0, 2))
    with pytest.raises(TopologyError, match="at least 1 rank"):
        Topology("t", 0, ())
    with pytest.raises(TopologyError, match="switch 's' is defined twice"):
        Topology("t", 1, (), switches=(Switch("s"), Switch("s")))


def test_links_are_sorted_so_equality_ignores_order():
    a = Topology("t", 2, (Link(1, 0, 1.0, 1.0), Link(0, 1, 1.0, 1.0)))
    b = Topology("t", 2, (Link(0, 1, 1.0, 1.0), Link(1, 0, 1.0, 1.0)))
    assert a == b


def test_flat_view_of_a_switch():
    t = T.switch(4, bandwidth=100.0, latency=1.0)
    f = t.flat()
    assert f.switches == ()
    assert len(f.links) == 12
    link = f.link(0, 3)
    assert link is not None and link.bandwidth == 100.0 and link.latency == pytest.approx(1.0)
    # every rank's port is shared by its 3 outgoing flattened links, and its in-port by 3 incoming
    assert len(f.limits) == 8
    out0 = next(x for x in f.limits if x.name == "0->switch")
    assert out0.links == ((0, 1), (0, 2), (0, 3)) and out0.bandwidth == 100.0
    assert out0.lanes(f) == 1
    assert t.flat() is f  # cached


def test_flat_view_without_switches_is_itself():
    t = T.ring(4)
    assert t.flat() is t


def test_ndv2_flat_view_routes_through_the_nic_but_never_host_to_host():
    t = T.ndv2(2)
    f = t.flat()
    # 0 and 5 have no NVLink, and a NIC does not forward host to host
    assert f.link(0, 5) is None
    cross = f.link(0, 13)
    assert cross is not None
    assert cross.bandwidth == pytest.approx(1e6 / 105 / 1e3)
    assert cross.latency == pytest.approx(2.6)
    nic = [x for x in f.limits if "nic0" in x.name and "fabric" in x.name]
    assert nic and len(nic[0].links) == 64  # every node-0 to node-1 pair shares the NIC uplink
    assert t.node_of[:8] == (0,) * 8 and t.node_of[8:] == (1,) * 8
    assert t.local_index(13) == 5


def test_declared_limit_on_switch_links_maps_to_flattened_pairs():
    sw = 3
    links = []
    for r in range(3):
        links += [Link(r, sw, 10.0, 0.5), Link(sw, r, 10.0, 0.5)]
    t = Topology("t", 3, tuple(links), (Switch("s"),), (SharedLimit("core", ((0, sw), (1, sw)), 5.0),))
    core = next(x for x in t.flat().limits if x.name == "core")
    assert set(core.links) == {(0, 1), (0, 2), (1, 0), (1, 2)}
    assert core.bandwidth == 5.0


def test_routes_never_pass_through_ranks():
    t = T.line(4)
    assert t.flat_link(0, 2) is None
    assert dict(t.routes_from(1)) == {0: (1, 0), 2: (1, 2)}


def test_vertex_names_and_lookup():
    t = T.dgx_a100(2)
    v = t.vertex("n1.nic3")
    assert t.vertex_name(v) == "n1.nic3"
    assert t.switches[v - t.n_ranks].kind == "nic"
    with pytest.raises(TopologyError):
        t.vertex("nope")


@pytest.mark.parametrize("spec", ["dgx2:2", "dgx-a100:4,fabric=leafspine", "ndv2:3,fabric=rail", "switch:6"])
def test_flat_links_are_the_routes_links(spec):
    # flat() builds the rank-to-rank links without Link's checks: they must equal flat_link's
    topo = T.build(spec)
    flat = topo.flat()
    for link in flat.links:
        assert link == topo.flat_link(link.src, link.dst)
        assert link == Link(link.src, link.dst, link.bandwidth, link.latency, link.lanes)
    for limit in flat.limits:
        assert limit == SharedLimit(limit.name, limit.links, limit.bandwidth)  # sorted, distinct pairs


def test_flat_view_refuses_a_route_whose_latency_overflows():
    topo = Topology("far", 2, (Link(0, 2, 10.0, 1e308), Link(2, 1, 10.0, 1e308), Link(1, 2, 10.0, 1.0),
                               Link(2, 0, 10.0, 1.0)), (Switch("s"),))
    with pytest.raises(TopologyError, match="latency"):
        topo.flat()
