"""The simulator's cost model, checked against closed forms (1e-9 relative). Schedules go
through the driver (``ccl.compiler.simulate``: lowered, then the Program simulated, with the
lower bound added); ``fuse=False`` keeps every transfer its own message."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
import topologies as T
from ccl import (
    Algorithm,
    InputError,
    Link,
    Problem,
    Request,
    SharedLimit,
    Topology,
    Transfer,
    verify,
)
from ccl.compiler import simulate as driver_simulate
from ccl.compiler import simulation as driver_simulation
from ccl.core.collective import builtin, custom
from ccl.core.lower import lower

REL = 1e-9


def simulate(*args, **options):
    """The links' physics alone (no runtime's charges): the closed forms below are the links'."""
    return driver_simulate(*args, runtime="physics", **options)


def simulation(*args, **options):
    return driver_simulation(*args, runtime="physics", **options)


def template(topo: Topology, kind: str, solver: str = "ring", chunks: int = 1, root: int | None = None) -> Algorithm:
    alg = solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks, root), Request(solver, chunks=chunks)))
    verify(alg)
    return alg


CASES = [(n, alpha, bw, size) for n in (2, 3, 5, 8, 16) for alpha, bw in ((0.7, 25.0), (2.6, 9.5), (0.0, 300.0))
         for size in (1000, 3 * 2**20 + 5, 2**30)]


@pytest.mark.parametrize(("n", "alpha", "bw", "size"), CASES)
def test_ring_allreduce_closed_form(n, alpha, bw, size):
    alg = template(T.ring(n, bw, alpha), "allreduce")
    want = 2 * (n - 1) * (alpha + size / (n * bw * 1e3))
    for mode in ("dependency", "step"):
        assert simulate(alg, size, mode=mode).time_us == pytest.approx(want, rel=REL)


@pytest.mark.parametrize(("n", "alpha", "bw", "size"), CASES)
def test_ring_allgather_and_reducescatter_closed_form(n, alpha, bw, size):
    want = (n - 1) * (alpha + size / (n * bw * 1e3))
    for kind in ("allgather", "reducescatter"):
        alg = template(T.ring(n, bw, alpha), kind)
        for mode in ("dependency", "step"):
            assert simulate(alg, size, mode=mode).time_us == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("n", [3, 6])
@pytest.mark.parametrize("slices", [1, 2, 7])
def test_pipelined_chain_broadcast(n, slices):
    # a chain 0 -> 1 -> ... -> n-1, each hop one transfer of the whole buffer, cut into m slices:
    # the last slice leaves the root after m slice-times and needs n-2 more hops
    alpha, bw, size = 1.5, 10.0, 6e6
    chain = tuple(Transfer(s, s, "input" if s == 0 else "output", 0, s + 1, "output", 0) for s in range(n - 1))
    alg = Algorithm("chain", builtin("broadcast", n, 0), T.line(n, bw, alpha), chain)
    verify(alg)
    piece = alpha + size / slices / (bw * 1e3)
    assert simulate(alg, size, slices=slices).time_us == pytest.approx((n - 2 + slices) * piece, rel=REL)
    # with overlapping latency the lane is busy for bytes / bandwidth only
    t = size / slices / (bw * 1e3)
    assert simulate(alg, size, slices=slices, overlap_latency=True).time_us == pytest.approx(
        (n - 2 + slices) * t + (n - 1) * alpha, rel=REL)


def two_ranks(lanes: int, limit: float | None = None) -> Topology:
    links = (Link(0, 1, 10.0, 2.0, lanes), Link(1, 0, 10.0, 2.0, lanes))
    limits = () if limit is None else (SharedLimit("port", ((0, 1),), limit),)
    return Topology("pair", 2, links, limits=limits)


def parallel_alltoall(topo: Topology, k: int) -> Algorithm:
    """k slots from rank 0 to rank 1 and back, all in step 0, one transfer each."""
    coll = builtin("alltoall", 2).chunk_up(k)
    transfers = []
    for j in range(k):
        transfers.append(Transfer(0, 0, "input", k + j, 1, "output", j))
        transfers.append(Transfer(0, 1, "input", j, 0, "output", k + j))
    alg = Algorithm("parallel", coll, topo, tuple(transfers))
    verify(alg)
    return alg


@pytest.mark.parametrize("lanes", [1, 2, 3])
def test_lanes_serve_transfers_at_once(lanes):
    k = 6
    alg = parallel_alltoall(two_ranks(lanes), k)
    size = 12e6  # per-rank buffer of 2k slots: 1e6 bytes per slot
    per = 2.0 + 1e6 / 10e3
    rounds = -(-k // lanes)
    # one message per transfer: the lanes take turns
    assert simulate(alg, size, fuse=False).time_us == pytest.approx(rounds * per, rel=REL)
    # with latency overlapped, only bytes occupy the lane: the last transfer starts after
    # rounds-1 others on its lane and lands alpha after it is sent
    assert simulate(alg, size, fuse=False, overlap_latency=True).time_us == pytest.approx(rounds * 100.0 + 2.0,
                                                                                           rel=REL)
    # fused: one message per lane, k / lanes slots each, one latency
    assert simulate(alg, size).time_us == pytest.approx(2.0 + (k / lanes) * 100.0, rel=REL)
    assert lower(alg).n_messages == 2 * lanes


def test_one_transfer_uses_one_lane():
    coll = builtin("alltoall", 2)
    alg = Algorithm("one", coll, two_ranks(2), (Transfer(0, 0, "input", 1, 1, "output", 0),
                                                   Transfer(0, 1, "input", 0, 0, "output", 1)))
    verify(alg)
    rep = simulate(alg, 2e6)
    assert rep.time_us == pytest.approx(2.0 + 1e6 / 10e3, rel=REL)
    link = next(x for x in rep.links if (x.src, x.dst) == (0, 1))
    assert link.lanes == 2 and link.capacity_GBps == 20.0
    assert link.utilization == pytest.approx(1e6 / (20e3 * rep.time_us), rel=REL)


def test_shared_limit_caps_the_sum():
    # a limit of 10 GB/s over a link whose two lanes could carry 20: both transfers share it
    alg = parallel_alltoall(two_ranks(2, limit=10.0), 2)
    size = 4e6  # 1e6 bytes per slot
    # each gets 5 GB/s for 1e6 bytes: 200 us of data, then the latency
    assert simulate(alg, size).time_us == pytest.approx(200.0 + 2.0, rel=REL)


def test_max_min_fair_sharing():
    # rank 0 sends to 1 and 2 through limit A (12 GB/s); rank 3 sends to 2 through limit B
    # (together with 0 -> 2, 8 GB/s). Max-min: 0->2 and 3->2 get 4 each (B saturates first),
    # 0->1 gets its lane's 10 (A's 12 - 4 = 8 left... capped by A: 8). Then as flows finish,
    # rates are recomputed.
    links = tuple(Link(a, b, 10.0, 0.0) for a, b in ((0, 1), (0, 2), (3, 2), (1, 0), (2, 0), (2, 3)))
    limits = (SharedLimit("A", ((0, 1), (0, 2)), 12.0), SharedLimit("B", ((0, 2), (3, 2)), 8.0))
    topo = Topology("fair", 4, links, limits=limits)
    coll = custom("fair", 4, pre=[(0, 0), (1, 0), (2, 3)], post=[(0, 1), (1, 2), (2, 2)])
    alg = Algorithm("fair", coll, topo, (Transfer(0, 0, "input", 0, 1, "output", 0),
                                         Transfer(0, 0, "input", 1, 2, "output", 0),
                                         Transfer(0, 3, "input", 0, 2, "output", 1)))
    verify(alg)
    slot = 12e3  # bytes per slot (size = 2 slots, the largest buffer)
    sim = simulation(alg, 2 * slot)
    g = sim.graph
    done = {(int(a), int(b)): float(t) for a, b, t in zip(g.msg_src, g.msg_dst, sim.done)}
    # 0->1 at 8 GB/s; 0->2 and 3->2 at 4 GB/s each
    t1 = slot / 8e3  # 0->1 finishes: 1.5 us; the others have moved 6e3 bytes
    assert done[(0, 1)] == pytest.approx(t1, rel=REL)
    # then A has 12 free, B still 8: 0->2 and 3->2 keep 4 each
    assert done[(0, 2)] == pytest.approx(slot / 4e3, rel=REL)
    assert done[(3, 2)] == pytest.approx(slot / 4e3, rel=REL)


def test_local_copies_free_by_default_and_charged_with_local_bandwidth():
    topo = two_ranks(1)
    coll = builtin("alltoall", 2)
    transfers = (Transfer(0, 0, "input", 1, 0, "scratch", 0), Transfer(1, 0, "scratch", 0, 1, "output", 0),
                 Transfer(0, 1, "input", 0, 0, "output", 1))
    alg = Algorithm("local", coll, topo, transfers)
    verify(alg)
    size = 2e6
    link = 2.0 + 1e6 / 10e3
    assert simulate(alg, size).time_us == pytest.approx(link, rel=REL)
    # 1e6 bytes at 100 GB/s: 10 us on rank 0's copy engine, after its own aliased slot (also
    # 1e6 bytes) was copied out of place
    assert simulate(alg, size, local_bandwidth=100.0).time_us == pytest.approx(10.0 + 10.0 + link, rel=REL)
    # in place there is no initial copy (the option on one Program: the out-of-place lowering's)
    assert simulate(lower(alg), size, local_bandwidth=100.0, in_place=True).time_us == \
        pytest.approx(10.0 + link, rel=REL)
    # an in-place call runs the Program lowered for it: rank 1's output[0] is its input[0], so
    # its step-1 receive waits for its step-0 send of that memory
    assert simulate(alg, size, in_place=True).time_us == pytest.approx(2 * link, rel=REL)


def test_dependency_mode_beats_barriers():
    # step 0: a long transfer 0->1 and a short chain start 2->3; step 1: 3->2 continues the chain.
    # With barriers, step 1 waits for the long transfer.
    links = tuple(Link(a, b, 10.0, 1.0) for a, b in ((0, 1), (1, 0), (2, 3), (3, 2)))
    topo = Topology("two-pairs", 4, links)
    coll = custom("mix", 4, pre=[(0, 0), (1, 0), (2, 2)], post=[(0, 1), (1, 1), (2, 3), (2, 2)])
    transfers = (Transfer(0, 0, "input", 0, 1, "output", 0, 2), Transfer(0, 2, "input", 0, 3, "output", 0),
                 Transfer(1, 3, "output", 0, 2, "output", 0))
    # rank 2's output slot 0 must hold chunk 2: it is also its aliased input, so rewrite the post
    alg = Algorithm("mix", coll, topo, transfers)
    verify(alg)
    size = 2e4  # 1e4 bytes per slot
    one = 1.0 + 1e4 / 10e3
    assert simulate(alg, size).time_us == pytest.approx(max(1.0 + 2e4 / 10e3, 2 * one), rel=REL)
    assert simulate(alg, size, mode="step").time_us == pytest.approx((1.0 + 2e4 / 10e3) + one, rel=REL)


def test_swap_in_one_step_does_not_deadlock():
    topo = two_ranks(1)
    coll = custom("swap", 2, pre=[(0, 0), (1, 1)], post=[(1, 0), (0, 1)])
    # each rank overwrites the slot the other reads, in place, in one step
    transfers = (Transfer(0, 0, "input", 0, 1, "input", 0), Transfer(0, 1, "input", 0, 0, "input", 0),
                 Transfer(1, 0, "input", 0, 0, "output", 0, 1, "copy"), Transfer(1, 1, "input", 0, 1, "output", 0))
    alg = Algorithm("swap", coll, topo, transfers)
    verify(alg)
    rep = simulate(alg, 1e4)
    assert rep.time_us == pytest.approx(2.0 + 1e4 / 10e3, rel=REL)


def test_write_after_read_waits_for_the_reader():
    # rank 0 sends input[0] to rank 1 (slow lane), then in step 1 rank 2 overwrites rank 0's
    # input[0]. The Program works on a scratch copy of that input slot, and the receive into it
    # is posted only once the send has read it: the message waits for the reader.
    links = (Link(0, 1, 1.0, 0.0), Link(2, 0, 100.0, 0.0), Link(1, 0, 1.0, 0.0), Link(0, 2, 1.0, 0.0))
    topo = Topology("war", 3, links)
    coll = custom("war", 3, pre=[(0, 0), (1, 2)], post=[(0, 1), (1, 0)])
    transfers = (Transfer(0, 0, "input", 0, 1, "output", 0), Transfer(1, 2, "input", 0, 0, "input", 0),
                 Transfer(2, 0, "input", 0, 0, "output", 0))
    alg = Algorithm("war", coll, topo, transfers)
    verify(alg)
    sim = simulation(alg, 1e3)
    g = sim.graph
    q_read = int(np.flatnonzero((g.msg_src == 0) & (g.msg_dst == 1))[0])
    q_write = int(np.flatnonzero((g.msg_src == 2) & (g.msg_dst == 0))[0])
    assert sim.start[q_write] >= sim.sent[q_read] - 1e-12
    assert sim.start[q_write] == pytest.approx(1e3 / 1e3, rel=REL)  # the read takes 1 us on the slow lane
    assert sim.report.time_us == pytest.approx(1.0 + 1e3 / 100e3, rel=REL)


def test_sccl_rounds_cost_what_the_step_carries():
    # one lane carrying 3 slots in a step declared with rounds 3: as separate messages
    # 3 x (alpha + slot / B), SCCL's accounting; fused, one message pays alpha once
    topo = two_ranks(1)
    coll = builtin("alltoall", 2).chunk_up(3)
    transfers = [Transfer(0, 0, "input", 3 + j, 1, "output", j) for j in range(3)]
    transfers += [Transfer(0, 1, "input", j, 0, "output", 3 + j) for j in range(3)]
    alg = Algorithm("rounds", coll, topo, tuple(transfers), rounds=(3,))
    verify(alg)
    assert simulate(alg, 6e6, mode="step", fuse=False).time_us == pytest.approx(3 * (2.0 + 1e6 / 10e3), rel=REL)
    assert simulate(alg, 6e6, mode="step").time_us == pytest.approx(2.0 + 3 * 1e6 / 10e3, rel=REL)


def test_multi_hop_flattened_link_pays_its_path_latency():
    topo = T.switch(4, bandwidth=20.0, latency=3.0)  # 1.5 us each way through the switch
    alg = template(topo, "allgather", "direct")
    size = 4e6
    # every rank sends its part to 3 peers over 3 distinct flattened links sharing its one port
    # (a shared limit of 20 GB/s): 3e6 bytes through the port, then the 3 us path latency
    rep = simulate(alg, size)
    assert rep.time_us == pytest.approx(3 * 1e6 / 20e3 + 3.0, rel=1e-6)


def test_size_and_bandwidth_conventions():
    alg = template(T.ring(8, 25.0, 0.7), "allreduce")
    rep = simulate(alg, 2**26)
    assert rep.slot_bytes == 2**26 / 8
    assert rep.algbw_GBps == pytest.approx(2**26 / rep.time_us / 1e3, rel=REL)
    assert rep.busbw_GBps == pytest.approx(rep.algbw_GBps * 2 * 7 / 8, rel=REL)
    assert rep.bound_ratio == pytest.approx(rep.time_us / rep.bound_us, rel=REL)
    ag = simulate(template(T.ring(8), "allgather", chunks=2), 2**26)
    assert ag.slot_bytes == 2**26 / 16 and ag.bus_factor == pytest.approx(7 / 8)


def test_bad_options():
    alg = template(T.ring(4), "allgather")
    for kwargs in ({"mode": "async"}, {"slices": 0}, {"local_bandwidth": 0.0}):
        with pytest.raises(InputError):
            simulate(alg, 1e6, **kwargs)
    for size in (0, -5, float("inf")):
        with pytest.raises(InputError):
            simulate(alg, size)


def test_deterministic():
    alg = template(T.ndv2(2), "allreduce", "hierarchical", chunks=2)
    a = simulate(alg, 2**24).to_json()
    b = simulate(alg, 2**24).to_json()
    a.pop("simulation_seconds")
    b.pop("simulation_seconds")
    assert a == b


def test_nic_shared_by_a_node():
    # every rank of node 0 sends one slot to its peer in node 1 at once: the node's one NIC
    # (9.52 GB/s) is shared by the 8 flows, then the 2.6 us network path latency
    topo = T.ndv2(2)
    coll = custom("cross", 16, pre=[(r, r) for r in range(8)], post=[(r, r + 8) for r in range(8)])
    alg = Algorithm("cross", coll, topo, tuple(Transfer(0, r, "input", 0, r + 8, "output", 0) for r in range(8)))
    verify(alg)
    nic = 1e6 / 105 / 1e3
    slot = 1e6
    rep = simulate(alg, slot)
    assert rep.time_us == pytest.approx(8 * slot / (nic * 1e3) + 2.6, rel=1e-9)
    assert rep.bound_us <= rep.time_us
    # two nodes' worth of flows in opposite directions do not share (full duplex)
    both = custom("both", 16, pre=[(r, r) for r in range(16)], post=[(r, (r + 8) % 16) for r in range(16)])
    alg2 = Algorithm("both", both, topo,
                     tuple(Transfer(0, r, "input", 0, (r + 8) % 16, "output", 0) for r in range(16)))
    verify(alg2)
    assert simulate(alg2, slot).time_us == pytest.approx(rep.time_us, rel=1e-9)


@pytest.mark.parametrize("spec", ["ndv2:2", "dgx-a100:2", "dgx2:2,fabric=leafspine"])
def test_multinode_templates_respect_the_bound(spec):
    from solvers.bounds import lower_bound

    topo = T.build(spec)
    n = topo.n_ranks
    for kind in ("allreduce", "allgather", "alltoall"):
        for name in ("hierarchical", "direct", "ring"):
            if kind not in solvers.SOLVERS[name].kinds:
                continue
            alg = template(topo, kind, name)
            bound = lower_bound(topo, builtin(kind, n), 2**24).bound_us
            for mode in ("dependency", "step"):
                assert simulate(alg, 2**24, mode=mode, baselines=False).time_us >= bound * (1 - 1e-9)


@pytest.mark.slow
def test_ring_allreduce_1024_ranks_closed_form():
    # the benchmark's case (about 2.1 million transfers, 5.2 million ops), checked for its closed form
    n, size = 1024, 2**26
    alg = solvers.synthesize(Problem(T.ring(n), builtin("allreduce", n), Request("ring")))
    rep = simulate(alg, size, baselines=False)
    assert rep.time_us == pytest.approx(2 * (n - 1) * (0.7 + size / (n * 25e3)), rel=REL)
