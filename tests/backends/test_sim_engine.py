"""The event loop's two paths agree, and every template's Program runs to completion."""

from __future__ import annotations

import math

import numpy as np
import pytest

import solvers
import topologies as T
from backends.sim import Simulator
from backends.sim.engine import Engine
from ccl import InfeasibleError, InputError, Problem, Request, verify
from ccl.core.collective import ROOTED_KINDS, builtin
from ccl.core.lower import lower

SPECS = ["ring:5", "dgx1", "torus:2x3", "line:4", "amd8", "hypercube:8", "star:5"]


def programs(spec: str):
    topo = T.build(spec)
    n = topo.n_ranks
    for name in solvers.TEMPLATES:
        info = solvers.SOLVERS[name]
        for kind in info.kinds:
            root = n - 1 if kind in ROOTED_KINDS else None
            try:
                alg = solvers.synthesize(Problem(topo, builtin(kind, n, root), Request(name, chunks=2)))
            except (InputError, InfeasibleError):  # hierarchical on one node
                continue
            yield lower(alg)
            yield lower(alg, fuse=False, channels=2)


LOOPS = ("fast", "fluid", "general")


def force(m: pytest.MonkeyPatch, loop: str) -> None:
    """Make ``Engine.run`` take one loop (each is exact: they must agree); ``fluid-ops``: the
    fluid loop following every op instead of the messages the local ops contract to."""
    m.setattr(Engine, "uses_fast_loop", property(lambda self: loop == "fast"))
    m.setattr(Engine, "uses_fluid_loop", lambda self, mode: loop in ("fluid", "fluid-ops"))
    if loop == "fluid-ops":
        m.setattr(Engine, "follow_ops", True)


def agree(program, size: float, loops, monkeypatch, **options) -> None:
    """The loops give the same times, message by message and op by op (fluid flows finish on
    one time grid, ``shares.on_grid``, so exact ties break alike in every loop)."""
    runs = {}
    for loop in loops:
        with monkeypatch.context() as m:
            force(m, loop)
            runs[loop] = Simulator(program).run(size, **options)
    first, *others = loops
    for loop in others:
        for name in ("done", "start", "sent", "issue", "finish"):
            assert np.allclose(getattr(runs[first], name), getattr(runs[loop], name), rtol=1e-9, atol=1e-9), \
                (program.name, options, first, loop, name)


@pytest.mark.parametrize("spec", SPECS)
def test_the_three_loops_agree_without_limits(spec, monkeypatch):
    assert not T.build(spec).flat().limits
    for program in programs(spec):
        agree(program, 3e6 + 1, LOOPS, monkeypatch)
        agree(program, 3e6 + 1, LOOPS, monkeypatch, slices=2, overlap_latency=True)
        agree(program, 3e6 + 1, ("fast", "general"), monkeypatch, mode="step")


def packing_programs(spec: str, kinds=("allgather", "reducescatter", "allreduce", "broadcast")):
    """Packing schedules with staggered, coalesced and sequential shapes: many concurrent flows
    under limits, long chains of local ops."""
    from solvers.packing import Shape, plan, slot_count
    from solvers.packing.schedule import build

    topo = T.build(spec)
    n = topo.n_ranks
    for kind in kinds:
        root = 1 if kind == "broadcast" else None
        problem = Problem(topo, builtin(kind, n, root), Request("packing"))
        packing = plan(topo, kind, root)
        for shape in (Shape(4), Shape(8, 0.95, True, True, kind == "allreduce")):
            yield lower(build(problem, packing, slot_count(packing, 1, n, shape), shape))


@pytest.mark.parametrize("spec,kinds", [pytest.param("dgx-h100:2", ("allreduce",), marks=pytest.mark.slow),
                                        pytest.param("dgx-a100:2,fabric=leafspine", ("allreduce",), marks=pytest.mark.slow),
                                        ("ndv2:2", ("allgather", "reducescatter", "allreduce", "broadcast"))])
def test_the_fluid_loop_agrees_with_the_general_one_under_limits(spec, kinds, monkeypatch):
    """Lazy flow progress and fair shares per component give the general loop's times (every
    event in order, every fair share recomputed) on machines with NICs and NVSwitch ports."""
    assert T.build(spec).flat().limits
    seen = set()  # whether the message graph had hubs (``ProgramGraph.hubs``)
    for program in packing_programs(spec, kinds):
        hubs = len(Simulator(program).graph.hubs()) > 0
        # the first program with hubs and the first without, also op by op (the loop's other way)
        agree(program, 2**24 + 3, ("fluid", "general") if hubs in seen else ("fluid", "fluid-ops", "general"),
              monkeypatch)
        seen.add(hubs)
    assert seen == {True, False} or spec != "ndv2:2"
    program = next(packing_programs(spec, ("allreduce",)))
    agree(program, 2**24 + 3, ("fluid", "fluid-ops", "general"), monkeypatch, slices=2, overlap_latency=True)
    for name in ("rail-rings", "hierarchical"):
        problem = Problem(T.build(spec), builtin("allreduce", T.build(spec).n_ranks), Request(name, chunks=2))
        agree(lower(solvers.synthesize(problem), fuse=False, channels=2), 3e6 + 1, ("fluid", "general"), monkeypatch)


def test_long_local_chains_keep_hubs_in_the_message_graph(monkeypatch):
    """A coalesced, staggered allreduce on DGX-1 chains many local reductions whose results
    several sends forward: contracting every local op would cost the square of the chains, so
    the message graph keeps those ops (hubs), stays within the Program's dependencies, and the
    fast loop (DGX-1 has no limits), the fluid loop and the general one agree on it."""
    from solvers.packing import Shape, plan, slot_count
    from solvers.packing.schedule import build

    topo = T.build("dgx1")
    packing = plan(topo, "allreduce", None)
    shape = Shape(32, stagger=True, coalesce=True)
    program = lower(build(Problem(topo, builtin("allreduce", 8), Request("packing")), packing,
                          slot_count(packing, 1, 8, shape), shape))
    g = Simulator(program).graph
    assert not g.contraction_is_cheap()
    local = int((g.op_message < 0).sum())
    assert 0 < len(g.hubs()) < local // 10
    _, _, out_idx = g.message_lists(1)
    assert len(out_idx) <= len(g.dep_src)
    calls = []
    real = Engine.uses_fluid_loop
    monkeypatch.setattr(Engine, "uses_fluid_loop", lambda self, mode: calls.append(real(self, mode)) or calls[-1])
    Simulator(program).run(2**24)
    assert calls and not calls[-1]
    monkeypatch.undo()
    agree(program, 2**24, LOOPS + ("fluid-ops",), monkeypatch)
    agree(program, 2**24, ("fast", "fluid", "general"), monkeypatch, slices=2, overlap_latency=True)
    agree(program, 2**24, ("fast", "general"), monkeypatch, mode="step")


def test_op_times_follow_waits_when_ops_are_not_in_step_order():
    """A local op listed after an op of a later step (a Program ``lower`` would not make):
    its time still follows the op it waits for (op numbers are not an order of the waits)."""
    from ccl import Program
    from ccl.core.collective import allgather
    from ccl.core.program import Op

    rank0 = [Op("send", 0, "input", 0, 1, 1, tag=0), Op("recv", 1, "output", 1, 1, 1, tag=1),
             Op("copy", 0, "scratch", 0, 1, src_buf="output", src_index=1, deps=(1,))]
    rank1 = [Op("recv", 0, "output", 0, 1, 0, tag=0), Op("send", 1, "input", 0, 1, 0, tag=1, deps=(0,))]
    program = Program("hand", allgather(2), T.ring(2), (tuple(rank0), tuple(rank1)), ((0,), ()), steps=2)
    sim = Simulator(program).run(1e6)
    g = sim.graph
    assert not np.all(g.dep_src < g.dep_dst)
    copy = int(np.flatnonzero(g.op_message < 0)[0])
    recv = int(g.msg_recv[1])
    assert sim.finish[copy] == sim.finish[recv] > 0


def test_local_bandwidth_takes_the_general_path_and_only_adds_time():
    alg = solvers.synthesize(Problem(T.ndv2(2), builtin("allreduce", 16), Request("hierarchical", chunks=2)))
    program = lower(alg)
    free = Simulator(program).run(2**24).report.time_us
    charged = Simulator(program).run(2**24, local_bandwidth=500.0)
    assert charged.report.time_us > free
    local = np.array([program.ops.kind[r] >= 2 for r in charged.graph.row.tolist()])
    assert np.all(charged.finish[local] >= charged.issue[local])  # copies and reductions take time


def test_every_message_runs_once_per_slice():
    alg = solvers.synthesize(Problem(T.ndv2(2), builtin("allreduce", 16), Request("hierarchical", chunks=2)))
    program = lower(alg)
    sim = Simulator(program).run(2**24, slices=3)
    assert len(sim.done) == 3 * program.n_messages and len(sim.finish) == 3 * program.n_ops
    assert np.all(np.isfinite(sim.done)) and np.all(sim.done >= sim.sent - 1e-9) and np.all(sim.sent >= sim.start)
    assert np.all(sim.finish >= sim.issue - 1e-9)
    assert sim.report.time_us == pytest.approx(float(sim.finish.max()))
    # a lane never carries two messages at once
    for r in range(len(sim.resource_pairs)):
        for lane in range(sim.resource_lanes[r]):
            sel = np.flatnonzero((sim.resource == r) & (sim.lane == lane))
            order = np.argsort(sim.start[sel], kind="stable")
            s, e = sim.start[sel][order], sim.sent[sel][order]
            assert np.all(s[1:] >= e[:-1] - 1e-9)


def test_a_program_that_cannot_finish_is_a_backend_error():
    from ccl import BackendError, Program
    from ccl.core.collective import allgather
    from ccl.core.program import Op

    # rank 0 waits for a receive that rank 1 never sends to it before it receives itself: the
    # verifier would call this a deadlock; the simulator stops with a stall, not a time
    rank0 = [Op("recv", 0, "output", 1, 1, 1, tag=0), Op("send", 1, "output", 0, 1, 1, tag=0, deps=(0,))]
    rank1 = [Op("recv", 0, "output", 0, 1, 0, tag=0), Op("send", 1, "output", 1, 1, 0, tag=0, deps=(0,))]
    program = Program("stuck", allgather(2), T.ring(2), (tuple(rank0), tuple(rank1)), ((), ()), steps=2)
    with pytest.raises(BackendError, match="stalled"):
        Simulator(program).run(1e6)


@pytest.mark.parametrize("seed", range(30))
def test_vectorized_fair_share_matches_reference(seed: int) -> None:
    """The vectorized progressive filling gives the reference allocation on random instances
    (lanes of mixed rates under overlapping limits, ties included)."""
    import random

    from backends.sim.shares import FairShare, Resource

    rng = random.Random(seed)
    n_limits = rng.randint(0, 6)
    caps = [float(rng.choice([10, 25, 40, 100])) for _ in range(n_limits)]
    resources = [
        Resource(1, float(rng.choice([5, 10, 20, 50])), 0.0,
                 tuple(sorted(rng.sample(range(n_limits), rng.randint(0, n_limits)))) if n_limits else ())
        for _ in range(rng.randint(1, 12))
    ]
    active = {q: [1.0, 0.0] for q in range(rng.randint(1, 40))}
    res = [rng.randrange(len(resources)) for _ in active]
    want = reference_max_min_rates(active, res, resources, caps)
    got = FairShare(resources, caps)(np.array(res, dtype=np.int64))
    assert got.tolist() == pytest.approx([want[q] for q in active], rel=1e-9)
    for lim, cap in enumerate(caps):  # no limit is exceeded
        assert sum(r for r, i in zip(got, res) if lim in resources[i].limits) <= cap * (1 + 1e-9)


def reference_max_min_rates(active: dict[int, list[float]], res_list: list[int], resources: list,
                            caps: list[float]) -> dict[int, float]:
    """Max-min fair rates (progressive filling): every active message is capped by its lane's
    rate and shares every limit it is under. Each round raises all unfixed rates to the next
    level at which a limit saturates or a lane's own rate is reached, and fixes those."""
    res_of = dict(zip(active, res_list))
    rate: dict[int, float] = {}
    users: dict[int, set[int]] = {}
    for q in active:
        for lim in resources[res_of[q]].limits:
            users.setdefault(lim, set()).add(q)
    left = {lim: caps[lim] for lim in users}
    by_cap = sorted(active, key=lambda q: (resources[res_of[q]].rate, q))
    at = 0
    remaining = len(by_cap)
    tol = 1 + 1e-12
    while remaining:
        while at < len(by_cap) and by_cap[at] in rate:
            at += 1
        cap_level = resources[res_of[by_cap[at]]].rate
        level, tight = math.inf, []
        for lim, us in users.items():
            if us:
                share = left[lim] / len(us)
                if share < level * tol:
                    if share < level / tol:
                        tight = []
                    level = min(level, share)
                    tight.append(lim)
        if cap_level <= level * tol:
            level = cap_level
            fixed = []
            k = at
            while k < len(by_cap) and resources[res_of[by_cap[k]]].rate <= cap_level * tol:
                if by_cap[k] not in rate:
                    fixed.append(by_cap[k])
                k += 1
        else:
            fixed = sorted({q for lim in tight for q in users[lim]})
        for q in fixed:
            rate[q] = level
            remaining -= 1
            for lim in resources[res_of[q]].limits:
                users[lim].discard(q)
                left[lim] = max(0.0, left[lim] - level)
    return rate


@pytest.mark.parametrize("general", [False, True])
def test_a_pairs_messages_are_posted_in_list_order(general, monkeypatch):
    """Rule 3 of the execution model: rank 1 sends a relayed piece (step 1, its data arrives
    from rank 0 at the end of step 0) and then its own piece (step 2, ready at once) to rank 2.
    The own piece must not overtake: it starts when the relayed one has started."""
    from ccl.core.algorithm import Algorithm, Transfer
    from ccl.core.collective import builtin as make

    topo = T.build("line:3")
    coll = make("gather", 3, 2)
    alg = Algorithm("relay-first", coll, topo, (
        Transfer(0, 0, "input", 0, 1, "scratch", 0, 1, "copy"),
        Transfer(1, 1, "scratch", 0, 2, "output", 0, 1, "copy"),
        Transfer(2, 1, "input", 0, 2, "output", 1, 1, "copy"),
    ), solver="hand")
    verify(alg)
    program = lower(alg)
    force(monkeypatch, "general" if general else "fast")
    sim = Simulator(program).run(3e6)
    starts = {int(program.ops.step[sim.graph.row[int(s)]]): float(sim.start[q])
              for q, s in enumerate(sim.graph.msg_send.tolist())}
    assert starts[0] == 0.0 and starts[2] >= starts[1] > 0.0


def test_a_runs_effort_counts_its_ops_and_the_fair_rates_it_computed() -> None:
    """``Simulation.effort_us`` (what a cost judge reports so a solver can budget its search)
    comes from counts, so one Program gives one figure: ops alone where no limit binds (no
    fair rate is computed), plus every fair rate on a machine whose NIC and NVSwitch ports
    are shared."""
    from backends.sim.simulator import EFFORT_OP_US, EFFORT_RATE_US

    free = next(programs("amd8"))
    sim = Simulator(free).run(1e6)
    assert not T.build("amd8").flat().limits
    assert sim.engine.rate_updates == 0
    assert sim.effort_us == EFFORT_OP_US * sim.graph.n_ops
    shared = next(packing_programs("ndv2:2", ("broadcast",)))
    runs = [Simulator(shared).run(3e6) for _ in range(2)]
    assert runs[0].engine.rate_updates > 0
    assert runs[0].effort_us == runs[1].effort_us == pytest.approx(
        EFFORT_OP_US * runs[0].graph.n_ops + EFFORT_RATE_US * runs[0].engine.rate_updates)
    two = Simulator(shared).run(3e6, slices=2)
    assert two.effort_us > runs[0].effort_us
