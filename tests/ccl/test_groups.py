"""Group collectives (``ccl.core.groups``, ``ccl synthesize --groups``, DSL ``groups``): group specs,
each group's machine with its shared links at a fair share, the groups' schedules joined into one
schedule of the whole machine that the verifier checks for every group, the simulator timing
all groups at once against a bound that counts the sharing."""

from __future__ import annotations

import json

import pytest

import dsl
import topologies as T
from ccl import InputError, VerificationError, verify
from ccl.cli import main
from ccl.compiler.groups import synthesize_groups
from ccl.core.algorithm import Algorithm
from ccl.core.groups import group_topology, parse_groups, shared_bound, usage

OVERSUBSCRIBED = "dgx-h100:8,fabric=leafspine,per-leaf=2,oversub=4"


def test_group_specs() -> None:
    topo = T.build("dgx-h100:2")
    assert parse_groups("tp", topo).members == (tuple(range(8)), tuple(range(8, 16)))
    assert parse_groups("dp", topo).members == tuple((i, i + 8) for i in range(8))
    assert parse_groups("blocks:4", topo).members == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15))
    assert parse_groups("stride:2", topo).members == (tuple(range(0, 16, 2)), tuple(range(1, 16, 2)))
    assert parse_groups("0-3; 8,9,10,11", topo).members == ((0, 1, 2, 3), (8, 9, 10, 11))
    for bad, words in (("0-3;3-5", "rank 3 is in two groups"), ("0-3;4", "at least 2 ranks"),
                       ("0-16", "rank 16 is not a rank"), ("blocks:5", "does not divide"), ("x", "not a rank"),
                       ("3-1", "is empty")):
        with pytest.raises(InputError, match=words):
            parse_groups(bad, topo)


def test_shared_links_get_a_fair_share() -> None:
    topo = T.build(OVERSUBSCRIBED)
    groups = parse_groups("dp", topo)
    count = usage(topo, groups)
    names = [topo.vertex_name(v) for v in range(topo.n_vertices)]
    uplinks = [hop for hop in count if names[hop[0]].startswith("leaf") and names[hop[1]].startswith("spine")]
    assert uplinks and all(count[hop] == 8 for hop in uplinks)  # every DP group crosses every leaf's uplinks
    sub = group_topology(topo, groups, 0)
    alone = group_topology(topo, groups, 0, shared=False)
    assert sub.n_ranks == 8 and sub.node_of == tuple(range(8))
    ratios = sorted({round(a.bandwidth / b.bandwidth, 6) for a, b in zip(alone.links, sub.links)})
    assert ratios == [1.0, 8.0]  # the NIC links are the group's own, the fabric's shared by 8
    rail = T.build("dgx-h100:2")
    assert set(usage(rail, parse_groups("dp", rail)).values()) == {1}  # rail-optimized: one rail per group
    nvswitch = parse_groups("blocks:4", rail)
    assert set(usage(rail, nvswitch).values()) == {1}  # a GPU's switch port is its own


def test_a_group_that_needs_ranks_outside_it_is_refused() -> None:
    topo = T.build("dgx1")  # NVLink mesh: 0 and 5 are not linked
    with pytest.raises(InputError, match="relaying through ranks outside it"):
        group_topology(topo, parse_groups("0,5;1,4", topo), 0)


@pytest.mark.parametrize("spec,topology,kind,solver", [
    ("tp", "dgx-h100:2", "allreduce", "ring"),
    ("dp", "dgx-h100:2", "allgather", "packing"),
    ("stride:2", "dgx-h100:2", "reducescatter", "ring"),
    ("blocks:2", "ring:8", "alltoall", "direct"),
    ("0-3;4-7", "dgx1", "allreduce", "auto"),
    ("dp", OVERSUBSCRIBED, "allreduce", "ring"),
])
def test_every_group_is_verified_and_timed_together(spec, topology, kind, solver) -> None:
    topo = T.build(topology)
    result = synthesize_groups(topo, kind, spec, size=1 << 24, solver=solver)
    joined = result.algorithm
    assert joined.topology is topo and verify(joined).transfers == len(joined.transfers)
    assert len(result.per_group) == len(result.groups) == len(result.alone_us)
    assert result.together_us >= max(result.alone_us) * (1 - 1e-9)  # sharing never speeds anything up
    assert result.together_us >= result.bound_us * (1 - 1e-9) > 0
    for g, alg in zip(result.groups.members, result.per_group):  # each group's schedule stays on its ranks
        assert alg.collective.n_ranks == len(g)
    ranks = {r for t in joined.transfers for r in (t.src, t.dst)}
    assert ranks <= {r for g in result.groups.members for r in g}
    # a transfer of the last group removed: the joined schedule is wrong, and says so
    last = set(result.groups.members[-1])
    drop = next(i for i, t in enumerate(joined.transfers) if t.dst in last and t.src != t.dst)
    broken = Algorithm(joined.name, joined.collective, topo, joined.transfers[:drop] + joined.transfers[drop + 1:])
    with pytest.raises(VerificationError):
        verify(broken)


@pytest.mark.slow
def test_sharing_slows_groups_and_the_bound_sees_it() -> None:
    topo = T.build(OVERSUBSCRIBED)
    ring = synthesize_groups(topo, "allreduce", "dp", size=1 << 26, solver="ring")
    assert ring.together_us > 1.5 * max(ring.alone_us)  # 8 rings over a 4:1 oversubscribed spine
    bound, why = shared_bound(topo, ring.groups, "allreduce", 1 << 26)
    assert "uplinks of leaf" in why and bound > max(ring.alone_us) * 0.9  # the shared bound passes any group's
    assert ring.bound_us == pytest.approx(bound)
    tuned = synthesize_groups(topo, "allreduce", "dp", size=1 << 26, solver="auto")
    assert tuned.together_us < ring.together_us  # tuned for its fair share, it beats the rings together
    apart = synthesize_groups(T.build("dgx-h100:2"), "allreduce", "tp", size=1 << 26, solver="ring")
    assert apart.together_us == pytest.approx(max(apart.alone_us))  # TP groups share nothing


def test_cli_groups(tmp_path, capsys) -> None:
    out = tmp_path / "dp.json"
    assert main(["synthesize", "-t", "dgx-h100:2", "-c", "allreduce", "--groups", "dp", "-s", "ring", "--size",
                 "16MiB", "-o", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["groups"]["members"][0] == [0, 8] and data["together_us"] >= data["bound_us"] > 0
    assert main(["verify", str(out)]) == 0 and main(["simulate", str(out), "--size", "16MiB"]) == 0
    capsys.readouterr()
    assert main(["synthesize", "-t", "dgx-h100:2", "-c", "allreduce", "--groups", "dp"]) == 2
    assert "--groups needs --size" in capsys.readouterr().err
    assert main(["synthesize", "-t", "dgx-h100:2", "-c", "allreduce", "--groups", "0-3;3-5", "--size", "1MiB"]) == 2
    assert "rank 3 is in two groups" in capsys.readouterr().err


def test_dsl_groups(tmp_path, capsys) -> None:
    path = tmp_path / "g.ccl"
    path.write_text('from machines import dgx_h100\n'
                    'synthesize allreduce on dgx_h100(2) with ring { groups "tp"; size 64 MiB }\n'
                    'synthesize allgather on dgx_h100(2) with ring as "dp" { groups [[0, 8], [1, 9]]; size 1 MiB }\n')
    requests = dsl.load(str(path)).requests()
    assert [r.groups for r in requests] == ["tp", "0,8;1,9"]
    folder = tmp_path / "out"
    folder.mkdir()
    assert main(["synthesize", str(path), "-o", str(folder)]) == 0
    assert "2 groups at once" in capsys.readouterr().out
    assert main(["verify", str(folder / "dp.json")]) == 0
    bad = tmp_path / "bad.ccl"
    bad.write_text('from machines import dgx_h100\nsynthesize allreduce on dgx_h100(2) with ring { groups "tp" }\n')
    assert main(["check", str(bad)]) == 2
    assert "needs a size" in capsys.readouterr().err
