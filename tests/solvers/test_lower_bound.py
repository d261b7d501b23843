"""lower_bound: latency and bandwidth bounds for every collective, their exactness claims, and
the alltoall cut/LP machinery against brute force."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
import topologies as T
from ccl import (
    Algorithm,
    CollectiveError,
    Link,
    Problem,
    Request,
    Switch,
    Topology,
    Transfer,
    compiler,
    verify,
)
from ccl.core.collective import builtin, custom
from solvers.bounds import cut_ratio, lower_bound
from solvers.bounds.alltoall import alltoall_cut, concurrent_flow_time
from solvers.builders.symmetry import rank_orbits

M = 3 * 2**26 + 12


@pytest.mark.parametrize("n", [2, 3, 8, 16])
@pytest.mark.parametrize("b", [25.0, 300.0])
def test_switch_allgather_is_n_minus_one_over_n_m_over_b(n, b):
    bound = lower_bound(T.switch(n, bandwidth=b), builtin("allgather", n), M)
    # the cut's capacity starts once a route's latency (0.35 us to the switch and 0.35 on) has passed
    assert bound.bandwidth_us == pytest.approx(0.7 + (n - 1) * M / (n * b * 1e3), rel=1e-12)
    assert bound.exact and bound.binding == "bandwidth"
    rs = lower_bound(T.switch(n, bandwidth=b), builtin("reducescatter", n), M)
    assert rs.bandwidth_us == pytest.approx(bound.bandwidth_us, rel=1e-12)


def test_dgx1_bandwidth_bound_is_seven_chunks_over_six_lanes():
    # every GPU must receive 7 of the 8 parts through its 6 NVLink lanes of 25 GB/s
    bound = lower_bound(T.dgx1(), builtin("allgather", 8), M)
    assert bound.bandwidth_us == pytest.approx(0.7 + Fraction(7, 6) * (M / 8) / 25e3, rel=1e-12)
    # and SCCL's bandwidth-optimal schedules meet it: a schedule in the same physics that
    # reaches it exists; the ring (one lane per GPU) is 6x off
    ring = solvers.synthesize(Problem(T.dgx1(), builtin("allgather", 8), Request("ring")))
    # (the simulator runs the lowered Program; the driver adds this bound to its report)
    report = compiler.simulate(ring, M, baselines=False, runtime="physics")
    assert report.bound_us == pytest.approx(bound.bound_us, rel=1e-12) and report.bound_binding == "bandwidth"
    assert report.bound_ratio == pytest.approx(6.0, rel=0.01)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_allreduce_on_uniform_fabric_is_two_n_minus_one_over_n(n):
    b = 40.0
    bound = lower_bound(T.switch(n, bandwidth=b), builtin("allreduce", n), M)
    assert bound.bandwidth_us == pytest.approx(0.7 + 2 * (n - 1) * M / (n * b * 1e3), rel=1e-12)
    assert not bound.exact


def test_reducescatter_plus_allgather_is_not_a_bound_on_a_star():
    # Hub 0 with k leaves, every link b both ways. Reduce to the hub and broadcast back,
    # pipelined: every leaf link carries M up and M down at once, so about M / b. RS + AG
    # cut bounds would claim 2 k / (k + 1) M / b: more than a schedule achieves. The gossip
    # bound (2 (n-1) M over the total send capacity) stays below it.
    k, b, pieces = 4, 10.0, 64
    n = k + 1
    topo = T.star(n, bandwidth=b, latency=0.0)
    coll = builtin("allreduce", n).chunk_up(pieces)
    transfers = []
    for j in range(pieces):
        for leaf in range(1, n):
            transfers.append(Transfer(j, leaf, "input", j, 0, "output", j, 1, "reduce"))
            transfers.append(Transfer(j + 1, 0, "output", j, leaf, "output", j))
    alg = Algorithm("star-pipeline", coll, topo, tuple(transfers))
    verify(alg)
    time = compiler.simulate(alg, M, bound=False, baselines=False, runtime="physics").time_us
    rs_ag = lower_bound(topo, builtin("reducescatter", n), M).bandwidth_us + \
        lower_bound(topo, builtin("allgather", n), M).bandwidth_us
    bound = lower_bound(topo, builtin("allreduce", n), M)
    assert time < rs_ag  # RS + AG would overstate the bound
    assert bound.bound_us <= time
    assert time == pytest.approx(M / (b * 1e3) * (1 + 1 / pieces), rel=1e-9)


def test_multinode_allreduce_and_alltoall_bounds_are_the_nic():
    topo = T.ndv2(2)
    nic = 1e6 / 105 / 1e3
    ar = lower_bound(topo, builtin("allreduce", 16), M)
    assert ar.bandwidth_us == pytest.approx(2.6 + M / (nic * 1e3), rel=1e-5)  # a NIC's latency first
    a2a = lower_bound(topo, builtin("alltoall", 16), M)
    # 8 x 8 pairs of M/16 bytes cross the NIC each way
    assert a2a.bandwidth_us == pytest.approx(2.6 + 64 * (M / 16) / (nic * 1e3), rel=1e-5)
    assert a2a.exact and "LP" in a2a.method


def test_latency_bound_is_the_alpha_weighted_path():
    topo = T.line(5, bandwidth=10.0, latency=1.5)
    assert lower_bound(topo, builtin("allgather", 5), 1).latency_us == pytest.approx(4 * 1.5)
    assert lower_bound(topo, builtin("broadcast", 5, 2), 1).latency_us == pytest.approx(2 * 1.5)
    b = lower_bound(topo, builtin("gather", 5, 0), 1)
    assert b.latency_us == pytest.approx(6.0) and b.latency_pair == (4, 0) and b.steps == 4
    # a flattened link through a switch pays its path: 2 x half the latency
    assert lower_bound(T.switch(4, latency=3.0), builtin("alltoall", 4), 1).latency_us == pytest.approx(3.0)
    # tiny sizes: latency binds
    tiny = lower_bound(T.dgx1(), builtin("allreduce", 8), 8)
    assert tiny.binding == "latency" and tiny.bound_us == tiny.latency_us == pytest.approx(1.4)


def test_rooted_bounds():
    topo = T.line(4, bandwidth=10.0, latency=0.0)
    # broadcast from an end: every link of the path carries M
    assert lower_bound(topo, builtin("broadcast", 4, 0), M).bandwidth_us == pytest.approx(M / 10e3, rel=1e-12)
    # gather to an end: the last link carries 3 parts of M/4
    assert lower_bound(topo, builtin("gather", 4, 0), M).bandwidth_us == pytest.approx(0.75 * M / 10e3, rel=1e-12)
    assert lower_bound(topo, builtin("scatter", 4, 3), M).bandwidth_us == pytest.approx(0.75 * M / 10e3, rel=1e-12)
    # gather to the middle: two sides
    assert lower_bound(topo, builtin("gather", 4, 1), M).bandwidth_us == pytest.approx(0.5 * M / 10e3, rel=1e-12)


def test_custom_collective_bound():
    topo = T.ring(4, bandwidth=10.0, latency=1.0)
    shift = custom("shift", 4, pre=[(r, r) for r in range(4)], post=[(r, (r + 1) % 4) for r in range(4)])
    b = lower_bound(topo, shift, 4000)
    # one slot (4000 B, the largest buffer has one slot) must leave every rank: 4000 / 20 GB/s
    assert b.bandwidth_us == pytest.approx(1.0 + 4000 / 20e3)
    assert b.latency_us == pytest.approx(1.0) and b.steps == 1


def test_errors():
    split = Topology("split", 4, (Link(0, 1, 1.0, 1.0), Link(1, 0, 1.0, 1.0), Link(2, 3, 1.0, 1.0), Link(3, 2, 1.0, 1.0)))
    with pytest.raises(CollectiveError):
        lower_bound(split, builtin("allgather", 4), 10)
    with pytest.raises(CollectiveError):
        lower_bound(T.ring(4), builtin("allgather", 5), 10)
    with pytest.raises(CollectiveError):
        lower_bound(T.ring(4), builtin("allgather", 4), 0)


def test_bounds_json():
    data = lower_bound(T.dgx1(), builtin("alltoall", 8), 2**20).to_json()
    for key in ("latency_us", "bandwidth_us", "bound_us", "binding", "method", "exact", "steps", "parts"):
        assert key in data
    assert data["bound_us"] == max(data["latency_us"], data["bandwidth_us"])


# ------------------------------------------------------------------ cut machinery vs brute force
def brute_alltoall(topo: Topology) -> float:
    n, V = topo.n_ranks, topo.n_vertices
    best = 0.0
    for size in range(1, V):
        for S in itertools.combinations(range(V), size):
            S = set(S)
            k = sum(1 for v in S if v < n)
            if k in (0, n):
                continue
            cut = sum(x.capacity for x in topo.links if x.src in S and x.dst not in S)
            best = max(best, k * (n - k) / cut if cut else math.inf)
    return best


@st.composite
def small_topologies(draw, max_ranks: int = 4):
    n = draw(st.integers(2, max_ranks))
    s = draw(st.integers(0, 2))
    V = n + s
    order = draw(st.permutations(range(V)))
    pairs = {(order[i], order[(i + 1) % V]) for i in range(V)}
    extra = draw(st.lists(st.tuples(st.integers(0, V - 1), st.integers(0, V - 1)), max_size=V))
    pairs |= {(a, b) for a, b in extra if a != b}
    links = tuple(Link(a, b, draw(st.sampled_from([1.0, 2.0, 5.0])), 0.5, draw(st.integers(1, 3))) for a, b in sorted(pairs))
    return Topology("random", n, links, tuple(Switch(f"s{i}") for i in range(s)))


@settings(max_examples=60)
@given(small_topologies())
def test_alltoall_cut_enumeration_and_lp(topo):
    value, witness, exact = alltoall_cut(topo)
    assert exact and value == pytest.approx(brute_alltoall(topo), rel=1e-12)
    lp = concurrent_flow_time(topo)
    assert lp is not None and lp >= value * (1 - 1e-5)  # the LP is at least every cut


def brute_gather(topo: Topology, root: int, reverse: bool) -> Fraction:
    n, V = topo.n_ranks, topo.n_vertices
    best = Fraction(0)
    for size in range(1, V):
        for S in itertools.combinations([v for v in range(V) if v != root], size):
            S = set(S)
            k = sum(1 for v in S if v < n)
            if not k:
                continue
            cut = sum(x.lanes for x in topo.links
                      if ((x.dst in S and x.src not in S) if reverse else (x.src in S and x.dst not in S)))
            best = max(best, Fraction(k, cut) if cut else Fraction(10**18))
    return best


@settings(max_examples=60)
@given(small_topologies(), st.booleans(), st.integers(0, 3))
def test_cut_ratio_with_sinks_matches_brute_force(topo, reverse, root):
    root %= topo.n_ranks
    got = cut_ratio(topo, "lanes", reverse=reverse, sinks=[root]).ratio
    want = brute_gather(topo, root, reverse)
    assert got == (math.inf if want == Fraction(10**18) else want)


@pytest.mark.parametrize("spec", ["ring:12", "torus:3x4", "hypercube:16", "dgx-a100:2", "dgx2:2", "ndv2:2",
                                  "dgx-h100:2,fabric=leafspine", "star:6", "amd8"])
def test_orbit_pruning_gives_the_exact_answer(spec, monkeypatch):
    topo = T.build(spec)
    fast = cut_ratio(topo, "bandwidth").ratio
    import solvers.builders.symmetry as sym

    monkeypatch.setattr(sym, "rank_orbits", lambda t: [[r] for r in range(t.n_ranks)])
    topo2 = T.build(spec)
    slow = cut_ratio(topo2, "bandwidth").ratio
    assert fast == pytest.approx(slow, rel=1e-12)


def test_orbits_are_automorphism_orbits():
    assert len(rank_orbits(T.ring(16))) == 1
    assert len(rank_orbits(T.torus((4, 4)))) == 1
    assert len(rank_orbits(T.dgx_a100(4))) == 1
    star = rank_orbits(T.star(5))
    assert [0] in star  # the hub is alone
    assert len(rank_orbits(T.line(5))) >= 3  # ends, next, middle are different


# ---------------------------------------------------------------------- latency onsets
def test_onset_time_is_piecewise_linear_in_the_capacity_that_has_started():
    from solvers.bounds import onset_time

    assert onset_time(5.0, ()) == 5.0
    assert onset_time(5.0, ((2.0, 1.0),)) == pytest.approx(7.0)  # one latency: shifted
    # half the capacity from t = 1, the other half from t = 3
    onsets = ((1.0, 0.5), (3.0, 0.5))
    assert onset_time(1.0, onsets) == pytest.approx(3.0)  # 0.5 x 2 by t = 3
    assert onset_time(3.0, onsets) == pytest.approx(5.0)  # 0.5 x 4 + 0.5 x 2
    assert onset_time(0.5, onsets) == pytest.approx(2.0)  # before the second half starts


@pytest.mark.parametrize("alpha", [0.0, 0.5, 3.0])
def test_the_onset_bound_is_met_by_one_message_a_side(alpha):
    """Two ranks, one link each way: each part goes as one message (latency, then the bytes),
    exactly the cut bound shifted by the link's latency."""
    topo = T.line(2, bandwidth=10.0, latency=alpha)
    alg = solvers.synthesize(Problem(topo, builtin("allgather", 2), Request("ring")))
    time = compiler.simulate(alg, M, bound=False, baselines=False, runtime="physics").time_us
    bound = lower_bound(topo, builtin("allgather", 2), M)
    assert bound.bound_us == pytest.approx(alpha + (M / 2) / 10e3, rel=1e-12)
    assert time == pytest.approx(bound.bound_us, rel=1e-9)


def test_links_of_a_cut_with_different_latencies_start_at_their_own():
    """dgx-h100:2: a GPU's ingress (the binding cut) is NVLink (450 GB/s, routes of 0.7 us) and
    its NIC (50 GB/s, routes of 2.6 us): until 2.6 us only the NVLink share carries bytes."""
    topo = T.build("dgx-h100:2")
    bound = lower_bound(topo, builtin("allgather", 16), M)
    t0 = 15 * (M / 16) / 500e3  # 15 parts through 500 GB/s
    # 0.9 of the capacity from 0.7 us, all of it from 2.6 us: 0.9 (T - 0.7) + 0.1 (T - 2.6) = t0
    assert bound.bandwidth_us == pytest.approx(t0 + 0.9 * 0.7 + 0.1 * 2.6, rel=1e-9)


# ---------------------------------------------------------------------- routed delivery
@pytest.mark.slow
def test_routes_a_pair_never_takes_do_not_count():
    """DGX-2: two GPUs share a NIC through a PCIe switch, and the cut bound counts that path
    (a GPU's ingress 125 + 12 GB/s); but the flattened routes send every GPU pair through the
    NVSwitch, so the two GPUs can take in only 2 x 125 GB/s plus the NIC's 9.52 from the fabric:
    62 parts at that rate. The stitched trees come within 0.5% of it (6% over the cut bound)."""
    from solvers.bounds import routed_delivery
    from solvers.packing.plan import _stitched_phase

    topo = T.build("dgx2:2")
    nic = 1e6 / 105 / 1e3  # GB/s through a NIC
    ratio, witness, onsets = routed_delivery(topo, reverse=False)
    assert ratio == pytest.approx(2 * 31 / (2 * 125 + nic), rel=1e-6) and len(witness) == 2
    assert onsets == ((pytest.approx(0.3), 1.0),)  # the least route latency into them
    for kind in ("allgather", "reducescatter"):
        bound = lower_bound(topo, builtin(kind, 32), M)
        assert dict(bound.parts)["routed"] > dict(bound.parts)["cut"] * 1.05 and not bound.exact
        assert bound.bandwidth_us == pytest.approx(0.3 + ratio * (M / 32) / 1e3, rel=1e-6)
        phase = _stitched_phase(topo, kind == "reducescatter", None)
        assert ratio <= phase.achieved * 1e3 < ratio * 1.005  # us per byte of a part
    # where the routes use every link the cut bound counts, nothing changes
    assert routed_delivery(T.build("dgx-h100:2"), False)[0] < cut_ratio(T.build("dgx-h100:2"), "bandwidth").ratio
    assert routed_delivery(T.build("dgx1"), False) is None  # no switches: every route is a link


def test_a_rooted_cut_counts_latency_from_the_root():
    """dgx-h100:2 broadcast from rank 0: the eight NICs of node 0 carry the buffer across, but
    only rank 0 holds it at first: its own NIC starts at 2.6 us, the seven others only after
    the data has reached their GPU through the NVSwitch (0.7 us more). Node 1's eight ranks
    all need every byte: one that lands after T - 0.7 us serves only its own GPU, so each
    NIC's share counts 1/8 from its onset and 7/8 from 0.7 us later."""
    topo = T.build("dgx-h100:2")
    bound = lower_bound(topo, builtin("broadcast", 16, 0), M)
    t0 = M / 400e3  # the buffer through 8 NICs of 50 GB/s
    assert bound.bandwidth_us == pytest.approx(t0 + (2.6 + 7 * 3.3) / 8 + 7 / 8 * 0.7, rel=1e-9)


@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "broadcast", "reduce"])
def test_the_far_side_of_a_cut_counts_its_last_or_first_hop(kind):
    """dgx-h100:16: an allgather's binding NIC cut has 8 ranks on its far side (allgather, broadcast:
    they all need each byte that lands there; reducescatter, reduce: each byte crossing sums
    their contributions), and moving data between two ranks takes at least 0.7 us (the
    NVSwitch route). So the bound ends 7/8 x 0.7 us later than the cut alone would (a
    broadcast's or reduce's cut is node 0's NICs, with 120 ranks beyond: 119/120 x 0.7 us)."""
    from solvers.bounds import call
    from solvers.bounds.onsets import cut_onsets, far_side, onset_time, rank_separation

    topo = T.build("dgx-h100:16")
    assert rank_separation(topo) == pytest.approx(0.7)
    collective = builtin(kind, 128, 0 if kind in ("broadcast", "reduce") else None)
    model = call._model(topo, collective)
    _, coef, _ = model.per_byte[0]
    plain = cut_onsets(topo, frozenset(model.witness), kind in ("reducescatter", "reduce"),
                       **({"origin": 0} if kind == "broadcast" else {"sink": 0} if kind == "reduce" else {}))
    k = 128 - sum(1 for v in model.witness if v < 128)  # ranks on the far side
    assert k == (8 if kind in ("allgather", "reducescatter") else 120)  # a node; all but the root's
    far = lower_bound(topo, collective, M).bandwidth_us
    assert far == pytest.approx(onset_time(coef * M, plain) + (k - 1) / k * 0.7, rel=1e-9)
    # one rank on the far side (two ranks on one link): nothing changes
    two = T.build("ring:2")
    assert far_side(two, ((1.0, 1.0),), frozenset([0])) == ((1.0, 1.0),)


def test_the_gossip_counts_the_routes_sends_take():
    """Allreduce's one-way gossip volume (2(n-1) sends of every element) goes over the routes
    the flattened topology fixes: on dgx-h100:2 a GPU's PCIe link to its NIC (64 GB/s) only
    feeds the NIC's 50 GB/s, so all sends together move at most 16 x (450 + 50) GB/s, not
    16 x (450 + 64). (Its NVSwitches sum, where the gossip count does not hold: the same
    machine without NVLS.)"""
    from dataclasses import replace

    nvls = T.build("dgx-h100:2")
    topo = replace(nvls, switches=tuple(replace(s, reduce=False) for s in nvls.switches))
    bound = lower_bound(topo, builtin("allreduce", 16), M)
    parts = dict(bound.parts)
    assert parts["gossip-routed"] == pytest.approx(0.7 + 2 * 15 * M / (16 * 500e3), rel=1e-6)
    assert parts["gossip"] < parts["gossip-routed"] == bound.bandwidth_us


def test_a_switch_that_reduces_lowers_the_allreduce_bound_to_what_the_hardware_allows():
    """NVLink SHARP: a DGX H100 measured 4029.4 us for 1 GiB (NVIDIA/dgxc-benchmarking), below
    the gossip bound 2(n-1)/n S / 450 GB/s; with the switch summing, every rank still sends its
    whole contribution and receives the sum: S / 450 GB/s."""
    from dataclasses import replace

    from ccl.core.collective import builtin
    from solvers.bounds import lower_bound

    h100 = T.dgx_h100()
    bound = lower_bound(h100, builtin("allreduce", 8), 2**30)
    assert bound.bound_us <= 4029.4
    assert bound.bandwidth_us == pytest.approx(2**30 / 450e3, abs=1.0)  # plus the links' latency onset
    plain = replace(h100, switches=tuple(replace(s, reduce=False) for s in h100.switches))
    gossip = lower_bound(plain, builtin("allreduce", 8), 2**30)
    assert gossip.bandwidth_us == pytest.approx(2 * 7 / 8 * 2**30 / 450e3, abs=1.0)
    # between nodes the gossip count holds unless the network sums too (SHARP)
    four = lower_bound(T.build("dgx-h100:4"), builtin("allreduce", 32), 2**30).bandwidth_us
    sharp = lower_bound(T.build("dgx-h100:4,sharp=on"), builtin("allreduce", 32), 2**30).bandwidth_us
    assert sharp < four
