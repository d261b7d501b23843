"""The in-switch reduction templates (nvls, nvls-rails, nvls-sharp): verified out of place and in
place on the machines whose switches reduce, lowered to Programs that verify, the structure they
claim (switch traffic per rank, steps), and refusals naming why elsewhere."""

from __future__ import annotations

import pytest

import solvers
import topologies as T
from ccl import CollectiveError, Problem, Request, lower, verify, verify_program
from ccl.core.collective import builtin

SWITCH_SOLVERS = ("nvls", "nvls-rails", "nvls-sharp")


def synth(spec: str, solver: str, chunks: int = 1):
    topo = T.build(spec)
    return solvers.solve(Problem(topo, builtin("allreduce", topo.n_ranks), Request(solver, chunks=chunks)))


def check(algorithm) -> None:
    verify(algorithm)
    verify(algorithm, in_place=True)
    for fuse, channels in ((True, 1), (False, 2)):
        program = lower(algorithm, fuse=fuse, channels=channels)
        verify_program(program)
        verify_program(program, in_place=True)


@pytest.mark.parametrize("spec,solver,variant", [
    ("dgx-h100", "nvls", "nvls"),
    ("hgx-h200", "nvls", "nvls"),
    ("hgx-b200", "nvls", "nvls"),
    ("dgx-h100:2", "nvls", "nvls-rails"),
    ("dgx-h100:2", "nvls-rails", "nvls-rails"),
    ("dgx-h100:3,fabric=leafspine,per-leaf=2", "nvls-rails", "nvls-rails"),
    ("dgx-h100:2,sharp=on", "nvls", "nvls-sharp"),
    ("dgx-h100:2,sharp=on", "nvls-rails", "nvls-rails"),
    ("dgx-h100:2,sharp=on", "nvls-sharp", "nvls-sharp"),
    ("dgx-h100:2,fabric=switch,sharp=on", "nvls-sharp", "nvls-sharp"),
    ("dgx-h100:2,fabric=leafspine,sharp=on", "nvls-sharp", "nvls-sharp"),
])
@pytest.mark.parametrize("chunks", [1, 3])
def test_the_switch_templates_verify(spec, solver, variant, chunks):
    solution = synth(spec, solver, chunks)
    assert solution.details["variant"] == variant and solution.details["pieces"] == chunks
    check(solution.algorithm)


def test_a_gb200_rack_reduces_72_ranks_in_one_switch():
    solution = synth("gb200-nvl72", "nvls", 2)
    alg = solution.algorithm
    assert solution.details["node_switches"] == ["nvswitch"] and alg.n_steps == 2 + 3
    verify(alg)
    verify_program(lower(alg))


def test_nvls_moves_what_nvlink_sharp_moves():
    """Every rank sends (L + 1) / L of its data into the switch (its shards to reduce, then its
    shard's sum to multicast) and receives its data once (its shard's sum, the others'
    multicasts), in 4 steps per piece pipelined one step apart; nothing goes rank to rank."""
    alg = synth("dgx-h100", "nvls", 4).algorithm
    n, L = 8, 8
    assert alg.n_steps == 4 + 3
    out = [0] * n
    into = [0] * n
    for t in alg.transfers:
        assert (t.src >= n) != (t.dst >= n)  # every transfer is a push or a pull
        if t.dst >= n:
            out[t.src] += t.count
        else:
            into[t.dst] += t.count
    slots = alg.collective.chunk_factor  # a rank's data
    assert out == [slots + slots // L] * n and into == [slots] * n


def test_nvls_sharp_reduces_each_rail_in_its_switch():
    solution = synth("dgx-h100:2,sharp=on", "nvls-sharp", 2)
    assert solution.details["rail_switches"] == [f"rail{i}" for i in range(8)]
    topo = solution.algorithm.topology
    to_rails = {(t.src, topo.vertex_name(t.dst)) for t in solution.algorithm.transfers
                if t.dst >= topo.n_ranks and topo.vertex_name(t.dst).startswith("rail")}
    assert to_rails == {(r, f"rail{r % 8}") for r in range(16)}
    assert synth("dgx-h100:2,fabric=switch,sharp=on", "nvls-sharp").details["rail_switches"] == ["fabric"] * 8


@pytest.mark.parametrize("spec,solver,why", [
    ("dgx-a100", "nvls", "node 0 of 'dgx-a100' has no switch that reduces .*NVSwitch generation 3"),
    ("dgx1", "nvls", "has no switch that reduces .* it has no switch"),
    ("ring:4", "nvls", "it has no switch"),
    ("dgx-a100:2", "nvls-rails", "no switch that reduces"),
    ("dgx-h100", "nvls-rails", "needs a multi-node topology"),
    ("dgx-h100", "nvls-sharp", "needs a multi-node topology"),
    ("dgx-h100:2", "nvls-sharp", "its network switches do not reduce .*sharp=on"),
    ("dgx-h100:8,fabric=leafspine,sharp=on", "nvls-sharp", "do not each reach every node's NIC of a rail"),
])
def test_the_switch_templates_refuse_machines_without_reducing_switches(spec, solver, why):
    with pytest.raises(CollectiveError, match=why):
        synth(spec, solver)


def test_nvls_falls_back_to_rails_where_the_network_cannot_reduce_a_rail():
    """Several leaves: SHARP would have to reduce from leaf to spine, a switch-to-switch transfer."""
    assert synth("dgx-h100:8,fabric=leafspine,sharp=on", "nvls").details["variant"] == "nvls-rails"


def test_the_switch_templates_are_allreduce_only():
    for name in SWITCH_SOLVERS:
        assert solvers.SOLVERS[name].kinds == ("allreduce",) and name in solvers.TEMPLATES
        with pytest.raises(CollectiveError, match="does not implement allgather"):
            solvers.synthesize(Problem(T.build("dgx-h100"), builtin("allgather", 8), Request(name)))
