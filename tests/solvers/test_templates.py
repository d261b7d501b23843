"""Every template on every topology where it applies, n = 2..16, chunk factors 1..4: verified,
out of place and in place; the multi-node and grid templates where they apply (and refusing
elsewhere)."""

from __future__ import annotations

import math

import pytest

import dsl
import solvers
import topologies as T
from ccl import CollectiveError, Problem, Request, VerificationError, verify
from ccl.core.collective import ROOTED_KINDS, builtin
from ccl.core.topology import Topology

MULTINODE_SOLVERS = ["hierarchical", "rail-rings", "hierarchical-pipelined"]
GRID_SOLVERS = ["torus-2d", "torus-2d-tree", "blueconnect"]  # multi-node machines and linked grids
SWITCH_SOLVERS = ["nvls", "nvls-rails", "nvls-sharp"]  # machines whose switches reduce: tests/solvers/test_nvls.py
FLAT_SOLVERS = [name for name in solvers.TEMPLATES if name not in MULTINODE_SOLVERS + GRID_SOLVERS + SWITCH_SOLVERS]


def families(n: int) -> list[Topology]:
    out = [T.ring(n), T.line(n), T.fully_connected(n), T.star(n), T.switch(n), T.ring(n, directed=True)]
    if n & (n - 1) == 0:
        out.append(T.hypercube(n))
    for a in range(2, math.isqrt(n) + 1):
        if n % a == 0:
            out.append(T.torus((a, n // a)))
    return out


CASES = [(n, topo) for n in range(2, 17) for topo in families(n)]


def roots(kind: str, n: int) -> list[int | None]:
    return sorted({0, n // 2, n - 1}) if kind in ROOTED_KINDS else [None]


def check_all(topo: Topology, solver_names, chunk_factors) -> int:
    n = topo.n_ranks
    count = 0
    for name in solver_names:
        for kind in solvers.SOLVERS[name].kinds:
            for root in roots(kind, n):
                for k in chunk_factors:
                    problem = Problem(topo, builtin(kind, n, root), Request(name, chunks=k))
                    algorithm = solvers.synthesize(problem)
                    assert algorithm.collective.kind == kind and algorithm.solver == name
                    try:
                        verify(algorithm)
                        verify(algorithm, in_place=True)
                    except VerificationError as exc:  # pragma: no cover - message for the failure report
                        raise AssertionError(f"{name} {kind} root={root} k={k} on {topo.name}: {exc}") from exc
                    count += 1
    return count


@pytest.mark.parametrize(("n", "topo"), CASES, ids=[f"{t.name}" for _, t in CASES])
def test_every_flat_template_verifies(n, topo):
    assert check_all(topo, FLAT_SOLVERS, (1, 2, 3, 4)) > 0


MACHINES = ["dgx1", "amd8", "ndv2:2", "dgx2", "dgx-a100:2", "dgx-h100:2", "torus:2x2x2"]


@pytest.mark.parametrize("spec", MACHINES)
def test_every_flat_template_verifies_on_machines(spec):
    assert check_all(T.build(spec), FLAT_SOLVERS, (1, 3)) > 0


CLUSTERS = """
from basic import line, ring, switch
topology rings(local, nodes) {          # one NIC per node, on local rank 0
  name "ring{local}x{nodes}"
  node ring(local) x nodes { nic 0 : 10 GB/s, 2.6 us, host 20 GB/s }
  fabric switch
}
topology switches(local, nodes) {       # a NIC per rank, rail-optimized
  name "switch{local}x{nodes}-rail"
  node switch(local) x nodes { for k in 0..local { nic k : 10 GB/s, 2.6 us, host 20 GB/s } }
  fabric rail
}
topology lines {                        # the NIC on a middle rank, leaves of two nodes
  name "line3x3"
  node line(3) x 3 { nic 1 : 10 GB/s, 2.6 us, host 20 GB/s }
  fabric leafspine(nodes_per_leaf = 2)
}
"""


def multinode_cases() -> list[Topology]:
    clusters = dsl.load_string(CLUSTERS, "clusters.ccl")
    out = []
    for L in range(2, 9):
        for N in range(2, 17 // L + 1):
            if N * L > 16:
                continue
            out.append(clusters.topology("rings", L, N))
            out.append(clusters.topology("switches", L, N))
    out.append(clusters.topology("lines"))
    for spec in ("ndv2:2", "ndv2:3", "dgx2:2", "dgx-a100:2", "dgx-a100:3,fabric=leafspine", "dgx-h100:2",
                 "dgx-h100:2,fabric=switch"):
        out.append(T.build(spec))
    return out


SLOW_MULTINODE = ("dgx2x2", "ring8x2", "ndv2x3", "ring7x2")  # 3.6-5.5 s each; their kinds stay in the default run


@pytest.mark.parametrize("topo", [pytest.param(t, marks=pytest.mark.slow) if t.name in SLOW_MULTINODE else t
                                  for t in multinode_cases()], ids=lambda t: t.name)
def test_hierarchical_verifies_on_multinode(topo):
    names = MULTINODE_SOLVERS + GRID_SOLVERS
    assert check_all(topo, names, (1, 2, 3, 4) if topo.n_ranks <= 16 else (1, 2)) > 0


@pytest.mark.parametrize("name", MULTINODE_SOLVERS)
def test_hierarchical_refuses_single_node(name):
    with pytest.raises(CollectiveError, match="multi-node"):
        solvers.synthesize(Problem(T.dgx1(), builtin("allreduce", 8), Request(name)))


def has_grid(topo: Topology) -> bool:
    """Whether the family has a factorization whose rows and columns are linked rings."""
    n = topo.n_ranks
    composite = any(n % a == 0 for a in range(2, math.isqrt(n) + 1))
    return composite and topo.name.startswith(("torus", "hypercube", "fully-connected", "switch"))


@pytest.mark.parametrize(("n", "topo"), CASES, ids=[f"{t.name}" for _, t in CASES])
def test_grid_templates_verify_where_a_grid_exists_and_refuse_elsewhere(n, topo):
    if has_grid(topo):
        assert check_all(topo, GRID_SOLVERS, (1, 2, 3, 4)) > 0
        return
    for name in GRID_SOLVERS:
        with pytest.raises(CollectiveError, match="grid"):
            solvers.synthesize(Problem(topo, builtin("allreduce", n), Request(name)))


@pytest.mark.parametrize("spec", ["dgx1", "amd8", "dgx2", "torus:2x2x2", pytest.param("torus:4x4x4", marks=pytest.mark.slow),
                                  "torus:3x3x2"])
def test_grid_templates_verify_on_machines_and_tori(spec):
    topo = T.build(spec)
    assert check_all(topo, GRID_SOLVERS, (1, 2) if topo.n_ranks > 16 else (1, 2, 3, 4)) > 0


@pytest.mark.parametrize("spec", ["ndv2:2", "dgx-h100:2", "torus:4x4", "torus:2x2x2", "hypercube:8"])
@pytest.mark.parametrize("stages", [2, 3, 5])
def test_pipeline_stages_verify(spec, stages):
    topo = T.build(spec)
    n = topo.n_ranks
    for name in ["hierarchical-pipelined"] + GRID_SOLVERS:
        for k in (1, 2):
            try:
                algorithm = solvers.synthesize(Problem(topo, builtin("allreduce", n),
                                                       Request(name, chunks=k, options=(("pipeline", stages),))))
            except CollectiveError:
                assert name == "hierarchical-pipelined" and topo.n_nodes == 1
                continue
            verify(algorithm)
            verify(algorithm, in_place=True)


def test_grid_templates_refuse_bad_options_and_uneven_nodes():
    from ccl import InputError
    from ccl.core.topology import Link

    topo = T.build("torus:4x4")
    with pytest.raises(InputError, match="no option 'stages'"):
        solvers.synthesize(Problem(topo, builtin("allreduce", 16), Request("torus-2d", options=(("stages", 2),))))
    with pytest.raises(InputError, match="positive integer"):
        solvers.synthesize(Problem(topo, builtin("allreduce", 16), Request("blueconnect", options=(("pipeline", 0),))))
    with pytest.raises(InputError, match="allreduce only"):
        solvers.synthesize(Problem(topo, builtin("allgather", 16), Request("torus-2d", options=(("pipeline", 2),))))
    links = tuple(Link(a, b, 10.0, 1.0) for a in range(6) for b in range(6) if a != b)
    uneven = Topology("uneven", 6, links, node_of=(0, 0, 0, 0, 1, 1))
    with pytest.raises(CollectiveError, match="equally sized nodes; 'uneven' has 2 node"):
        solvers.synthesize(Problem(uneven, builtin("allreduce", 6), Request("hierarchical-pipelined")))
    # no equal nodes, but the six fully connected ranks are a linked 2 x 3 grid
    verify(solvers.synthesize(Problem(uneven, builtin("allreduce", 6), Request("torus-2d"))))


def test_grids_are_found_from_the_links():
    from solvers.builders.grids import linked_grid, node_grid
    from solvers.templates.cascade import _lanes

    assert linked_grid(T.build("torus:4x4x4")).dims == (4, 4, 4)
    assert sorted(linked_grid(T.build("torus:4x4x4"), 2).dims) == [4, 16]  # 16: rings through 4x4 planes
    assert sorted(linked_grid(T.build("torus:3x5"), 2).dims) == [3, 5]
    assert linked_grid(T.build("dgx1")).dims == (2, 2, 2)
    assert linked_grid(T.build("ring:8")) is None and linked_grid(T.build("line:9"), 2) is None
    grid = linked_grid(T.build("torus:4x4x4"))
    assert len(_lanes(grid)) == 6  # every level first once, both ways round
    multi = node_grid(T.build("dgx-h100:2"))
    assert multi.dims == (8, 2) and multi.groups == ((0,), (1,))
    assert node_grid(T.build("dgx2:2"), split=True).dims == (2, 2, 2, 2, 2)
    assert len(_lanes(multi)) == 1  # NVSwitch ports and NICs: one lane


def simulated_us(spec: str, solver: str, size: int) -> tuple[float, float]:
    from ccl.compiler import simulate

    topo = T.build(spec)
    algorithm = solvers.synthesize(Problem(topo, builtin("allreduce", topo.n_ranks), Request(solver)))
    report = simulate(algorithm, size, runtime="physics")
    return report.time_us, report.bound_ratio


def test_pipelining_overlaps_the_nvlink_and_nic_phases():
    # dgx-a100 (no NVLS): dgx-h100's NVSwitches reduce, and its bound counts that
    flat, _ = simulated_us("dgx-a100:2", "hierarchical", 256 << 20)
    piped, ratio = simulated_us("dgx-a100:2", "hierarchical-pipelined", 256 << 20)
    assert piped < 0.7 * flat and ratio < 1.2  # 1.18x the bound, hierarchical 1.89x


@pytest.mark.parametrize(("spec", "solver"), [("torus:4x4", "torus-2d"), ("torus:4x4x4", "blueconnect")])
def test_torus_decompositions_reach_the_bound_at_large_sizes(spec, solver):
    _, ratio = simulated_us(spec, solver, 1 << 30)
    assert ratio < 1.01


@pytest.mark.parametrize("nodes", [2, 3, 8])
def test_rail_rings_keep_inter_node_hops_on_one_rail(nodes):
    from solvers.templates.ring import rail_rings

    topo = T.build(f"dgx-h100:{nodes}")
    rings = rail_rings(topo)
    assert len(rings) == 8
    nic_out: dict[int, int] = {}
    for ring in rings:
        assert sorted(ring) == list(range(topo.n_ranks))
        hops = list(zip(ring, ring[1:] + ring[:1]))
        inter = [(a, b) for a, b in hops if topo.node_of[a] != topo.node_of[b]]
        assert len(inter) == nodes
        same_rail = [topo.local_index(a) == topo.local_index(b) for a, b in inter]
        assert all(same_rail[:-1]) and same_rail[-1] == (nodes % 8 == 0)  # only the closing hop may cross
        for a, _ in inter:
            nic_out[a] = nic_out.get(a, 0) + 1
    assert max(nic_out.values()) == 1  # every NIC sends for at most one channel


def steps(spec: str, kind: str, solver: str, k: int = 1) -> int:
    topo = T.build(spec)
    root = 0 if kind in ROOTED_KINDS else None
    return solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks, root), Request(solver, chunks=k))).n_steps


def test_step_counts_match_the_textbook():
    assert steps("ring:8", "allgather", "ring") == 7
    assert steps("ring:8", "allreduce", "ring") == 14
    assert steps("dgx1", "allgather", "ring") == 7  # dgx1 has a Hamiltonian ring
    assert steps("fully-connected:8", "alltoall", "direct") == 1
    assert steps("ring:8", "alltoall", "direct") == 4  # routed up to 4 hops
    assert steps("hypercube:16", "allgather", "recursive-doubling") == 4
    assert steps("fully-connected:7", "allgather", "recursive-doubling") == 3  # Bruck
    assert steps("fully-connected:7", "allreduce", "recursive-doubling") == 4  # 2 folded + 2
    assert steps("hypercube:8", "reducescatter", "recursive-halving") == 3
    assert steps("hypercube:8", "allreduce", "recursive-halving") == 6
    assert steps("fully-connected:8", "broadcast", "binomial-tree") == 3
    assert steps("ring:8", "broadcast", "ring", k=4) == 7 + 3  # pipelined chain
    assert steps("ndv2:2", "allreduce", "hierarchical") == 7 + 2 + 7
    assert steps("torus:4x4", "allreduce", "torus-2d") == 3 + 3 + 3 + 3
    assert steps("torus:4x4x4", "allreduce", "blueconnect") == 2 * (3 + 3 + 3)
    assert steps("hypercube:16", "allreduce", "blueconnect") == 8  # 2x2x2x2: recursive halving's steps
    assert steps("dgx-h100:2", "allreduce", "hierarchical-pipelined") == 15 * 1 + 7 + 2 + 7  # 16 stages, 1 apart


def test_multi_ring_uses_every_lane_of_a_dgx1():
    from solvers.builders.rings import find_disjoint_rings

    rings = find_disjoint_rings(T.dgx1(), 16)
    assert len(rings) == 6  # 6 NVLink lanes per GPU, one ring each
    used: dict[tuple[int, int], int] = {}
    for order in rings:
        for i in range(8):
            pair = (order[i], order[(i + 1) % 8])
            used[pair] = used.get(pair, 0) + 1
    topo = T.dgx1()
    assert all(topo.link(a, b).lanes >= k for (a, b), k in used.items())
    algorithm = solvers.synthesize(Problem(topo, builtin("allgather", 8), Request("multi-ring")))
    assert algorithm.n_steps == 7 and algorithm.collective.chunk_factor == 6


def test_multi_ring_respects_shared_limits():
    from solvers.builders.rings import find_disjoint_rings

    assert len(find_disjoint_rings(T.switch(8), 16)) == 1  # one port per rank
    assert len(find_disjoint_rings(T.ring(8), 16)) == 2  # both directions


def test_line_ring_has_dilation_two():
    from solvers.builders.rings import find_ring

    order = find_ring(T.line(7))
    assert sorted(order) == list(range(7))
    dist = [abs(order[i] - order[(i + 1) % 7]) for i in range(7)]
    assert max(dist) == 2
    # each logical ring step costs at most two physical steps
    assert steps("line:7", "allgather", "ring") == 2 * 6


def test_rings_follow_links_where_a_hamiltonian_cycle_exists():
    from solvers.builders.rings import find_ring, is_linked_ring

    for spec in ("dgx1", "torus:4x4", "torus:3x5", "hypercube:16", "ndv2:2", "amd8", "dgx2:2", "torus:2x2x2"):
        topo = T.build(spec)
        order = find_ring(topo)
        assert sorted(order) == list(range(topo.n_ranks))
        assert is_linked_ring(topo, order), spec


def test_large_ring_allreduce_is_fast_enough():
    topo = T.ring(256)
    algorithm = solvers.synthesize(Problem(topo, builtin("allreduce", 256), Request("ring")))
    assert len(algorithm.transfers) == 2 * 255 * 256
    verify(algorithm)
