"""The simulator on switch reductions: pushes and pulls as flows over the links between a rank
and its switch, a pull starting once every push of its slot has landed, the loops agreeing with
and without shared limits, the NVLS charges of a runtime, and one model for NCCL's NVLS and the
project's: the nvls template under NCCL's charges lands within a few percent of NCCL's own NVLS
at 1 GiB."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
import topologies as T
from backends.cost import nccl
from backends.cost.calibration import calibration
from backends.cost.machine import Machine
from backends.cost.runtime import LINK_CLASSES, charges
from backends.sim import Simulator, run
from ccl import Problem, Request, lower, verify, verify_program
from ccl.core.algorithm import Algorithm, Transfer
from ccl.core.collective import builtin
from solvers.bounds import lower_bound

from .test_sim_engine import agree

GIB = 2**30


def program(spec: str, solver: str, chunks: int, **lowering):
    topo = T.build(spec)
    alg = solvers.synthesize(Problem(topo, builtin("allreduce", topo.n_ranks), Request(solver, chunks=chunks)))
    return lower(alg, **lowering)


def test_nvls_under_nccls_charges_is_nccls_own_nvls_at_1_gib():
    topo = T.build("dgx-h100")
    ours = Simulator(program("dgx-h100", "nvls", 128)).run(GIB, runtime=charges("nccl", "Simple", topo)).report
    theirs = nccl.price("allreduce", Machine.of(topo), "NVLS", "Simple", GIB)
    assert ours.time_us == pytest.approx(theirs.time_us, rel=0.03)
    assert nccl.pick("allreduce", topo, GIB).algorithm == "NVLS"


def test_switch_traffic_moves_at_the_links_rate_and_pays_its_latency_once_per_pass():
    """One piece: a push of the whole buffer, a pull of a shard, a push of it, a pull of the
    other 7 shards, in sequence on every rank's 450 GB/s NVSwitch port: 2.125 buffers' time plus
    four switch latencies (a push or pull lands a link latency after its bytes left)."""
    size = 3 * 2**24
    report = Simulator(program("dgx-h100", "nvls", 1)).run(size).report
    port = T.build("dgx-h100").link(0, 8)
    assert report.time_us == pytest.approx(2.125 * size / (port.bandwidth * 1e3) + 4 * port.latency, rel=1e-9)
    assert report.messages == 0 and all(r.bytes_sent == pytest.approx(size * 9 / 8) for r in report.ranks)
    assert all(r.bytes_received == pytest.approx(size) for r in report.ranks)


def test_runtime_charges_price_switch_traffic_at_the_nvls_efficiency():
    cal = calibration()
    topo = T.build("dgx-h100")
    c = charges("nccl", "Simple", topo)
    assert set(LINK_CLASSES) <= set(c.efficiency) and set(LINK_CLASSES) <= set(c.hop_us)
    assert c.efficiency["switch"] == cal.nvls_efficiency["hopper"] != c.efficiency["nvlink"]
    assert c.hop_us["switch"] == pytest.approx(cal.nvls_latency_us / 4)
    assert "switch" not in charges("physics", "Simple", topo).efficiency  # the links alone: charged nothing
    slow = charges("msccl", "LL128", topo)
    assert slow.efficiency["switch"] == pytest.approx(cal.nvls_efficiency["hopper"] * cal.protocol_efficiency["LL128"])
    prog = program("dgx-h100", "nvls", 1)  # four passes in sequence, each paying its link latency (0.35 us)
    physics = Simulator(prog).run(GIB).time_us
    charged = Simulator(prog).run(GIB, runtime=c).time_us
    moving = (physics - 4 * topo.link(0, 8).latency) / cal.nvls_efficiency["hopper"]
    assert charged == pytest.approx(c.call_us(GIB) + moving + 4 * c.hop_us["switch"], rel=1e-9)


def test_a_pull_starts_only_once_every_push_of_its_slots_has_landed():
    sim = run(program("dgx-h100:2,sharp=on", "nvls-sharp", 3), 2**22 + 5, slices=2)
    g, table = sim.graph, sim.program.ops
    rows = g.row[g.msg_send]
    kind, peer, slot, count = (table.kind[rows], table.peer[rows], table.slot[rows], table.count[rows])
    step = g.msg_step
    landed: dict[tuple[int, int, int], float] = {}
    m = sim.slices
    for q in np.flatnonzero((kind == 4) | (kind == 5)):
        for j in range(m):
            for x in range(count[q]):
                key = (int(peer[q]), int(slot[q]) + x, int(step[q]), j)
                landed[key] = max(landed.get(key, 0.0), float(sim.done[q * m + j]))
    pulls = np.flatnonzero(kind == 6)
    assert len(pulls)
    for q in pulls:
        for j in range(m):
            last = max(landed[(int(peer[q]), int(slot[q]) + x, int(step[q]) - 1, j)] for x in range(count[q]))
            assert sim.start[q * m + j] >= last - 1e-9


def mixed() -> Algorithm:
    """On dgx-h100, half the data reduced in the NVSwitch while the other half goes rank to rank
    over the same ports (direct reducescatter and allgather): pushes and messages share every
    port's capacity."""
    n = 8
    coll = builtin("allreduce", n, None, 2 * n)
    t = [Transfer(0, r, "input", 0, n, "scratch", 0, n, "reduce") for r in range(n)]
    t += [Transfer(1, n, "scratch", j, j, "output", j, 1, "copy") for j in range(n)]
    t += [Transfer(2, j, "output", j, n, "scratch", n + j, 1, "copy") for j in range(n)]
    t += [Transfer(3, n, "scratch", n + j, r, "output", j, 1, "copy") for r in range(n) for j in range(n) if j != r]
    t += [Transfer(0, r, "input", n + j, j, "output", n + j, 1, "reduce") for r in range(n) for j in range(n) if j != r]
    t += [Transfer(1, j, "output", n + j, r, "output", n + j, 1, "copy") for r in range(n) for j in range(n) if j != r]
    return Algorithm("mixed", coll, T.build("dgx-h100"), tuple(t))


def test_pushes_and_messages_share_a_port():
    alg = mixed()
    verify(alg)
    prog = lower(alg)
    verify_program(prog)
    sim = Simulator(prog)
    assert sim.run(GIB).engine.fluid  # the ports' caps cover the pushes and the messages alike
    # a port carries rank 0's push of 8 slots and its 7 slots to the other ranks in step 0: 15
    # slots of 1/16 GiB at 450 GB/s at least
    assert sim.run(GIB).time_us >= 15 * GIB / 16 / 450e3


def test_the_loops_agree_on_switch_programs(monkeypatch):
    for prog in (program("dgx-h100", "nvls", 2), program("dgx-h100:2", "nvls-rails", 2, fuse=False, channels=2)):
        agree(prog, 3e6 + 1, ("fast", "general"), monkeypatch)
        agree(prog, 3e6 + 1, ("fast", "general"), monkeypatch, slices=2, overlap_latency=True)
        agree(prog, 3e6 + 1, ("fast", "general"), monkeypatch, mode="step")
    prog = lower(mixed())
    agree(prog, 2**24 + 3, ("fluid", "fluid-ops", "general"), monkeypatch)
    agree(prog, 2**24 + 3, ("fluid", "general"), monkeypatch, slices=2,
          runtime=charges("nccl", "Simple", prog.topology))


@pytest.mark.parametrize("spec,solver", [("dgx-h100", "nvls"), ("dgx-h100:2", "nvls-rails"),
                                         ("dgx-h100:2,sharp=on", "nvls-sharp"), ("gb200-nvl72", "nvls")])
def test_the_bound_is_never_above_a_switch_schedule(spec, solver):
    topo = T.build(spec)
    coll = builtin("allreduce", topo.n_ranks)
    for chunks in (1, 4):
        sim = Simulator(program(spec, solver, chunks))
        for size in (8, 2**20, GIB):
            bound = lower_bound(topo, coll, size)
            assert sim.run(size).time_us >= bound.bound_us * (1 - 1e-9)


def test_traces_and_plots_show_the_switches(tmp_path):
    import jsonschema

    from backends.sim.trace import TRACE_SCHEMA

    sim = run(program("dgx-h100:2,sharp=on", "nvls-sharp", 2), 2**20, slices=2)
    trace = sim.trace()
    jsonschema.validate(trace, TRACE_SCHEMA)
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"-> switch n0.nvswitch", "<- switch n1.nvswitch", "-> switch rail3", "<- switch rail7"} <= tracks
    events = [e for e in trace["traceEvents"] if e.get("cat") == "message"]
    assert any(e["args"]["dst"].startswith("switch rail") for e in events)
    pulled = [e for e in events if e["args"]["src"].startswith("switch n0.nvswitch") and e["args"]["step"] == 1]
    assert pulled and all(e["args"]["chunks"] == 8 for e in pulled)  # a node's 8 ranks summed
    pytest.importorskip("matplotlib")
    sim.plot(str(tmp_path / "plot.png"))
    assert (tmp_path / "plot.png").stat().st_size > 0
