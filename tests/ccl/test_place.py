"""``ccl place`` (P^2 class): the parallelism matrices of a plan, the groups each axis gets under
them (a partition of the ranks, orthogonal to the other axes'), predictions made by synthesizing
and simulating every axis on its groups at once, and the sanity of the ranking: tensor
parallelism inside the NVLink domain first for a transformer, and the case where it loses."""

from __future__ import annotations

import itertools
import json

import pytest

import topologies as T
from ccl import InputError, verify
from ccl.cli import main
from ccl.compiler.place import (
    Model,
    _sendrecv,
    axis_groups,
    matrices,
    parse_plan,
    parse_traffic,
)
from ccl.core.groups import Groups

SMALL_MODEL = ["--layers", "32", "--hidden", "4096", "--tokens", "4096", "--microbatches", "4"]


def test_matrices_and_groups_partition_the_ranks() -> None:
    axes = parse_plan("tp=8,pp=2,dp=8")
    options = matrices(axes, 8)
    assert ({"tp": 8, "pp": 1, "dp": 1}, {"tp": 1, "pp": 2, "dp": 8}) in options
    assert all(a["tp"] * a["pp"] * a["dp"] == 8 for a, _ in options) and len(options) == 7
    for intra, inter in options:
        by_axis = {a: axis_groups(axes, intra, inter, 8, a) for a in axes}
        for a, groups in by_axis.items():
            assert sorted(r for g in groups for r in g) == list(range(128))
            assert all(len(g) == axes[a] for g in groups)
        for a, b in itertools.combinations(axes, 2):  # orthogonal: a group of a meets a group of b once at most
            for ga in by_axis[a]:
                for gb in by_axis[b]:
                    assert len(set(ga) & set(gb)) <= 1
    tp_inside = axis_groups(axes, {"tp": 8, "pp": 1, "dp": 1}, {"tp": 1, "pp": 2, "dp": 8}, 8, "tp")
    assert tp_inside[0] == tuple(range(8))  # one node's ranks
    dp = axis_groups(axes, {"tp": 8, "pp": 1, "dp": 1}, {"tp": 1, "pp": 2, "dp": 8}, 8, "dp")
    assert dp[0] == tuple(range(0, 128, 16))  # one local index, every other node (pp varies first across)


def test_model_traffic() -> None:
    traffic = Model(32, 4096, 4096, 8).traffic({"tp": 8, "pp": 2, "dp": 8})
    assert traffic["tp"].kind == "allreduce" and traffic["tp"].size == 4096 * 4096 * 2
    assert traffic["tp"].count == 4 * 8 * 32 / 2
    assert traffic["pp"].kind == "sendrecv" and traffic["pp"].count == 16
    assert traffic["dp"].size == 12 * 32 * 4096 ** 2 * 2 // 16


def test_model_sizes() -> None:
    from ccl.compiler.place import model_shape

    assert model_shape("7B") == (32, 4096) and model_shape("70b") == (80, 8192) and model_shape("175e9") == (96, 12288)
    layers, hidden = model_shape("1.3B")
    assert hidden % 128 == 0 and abs(12 * layers * hidden**2 - 1.3e9) / 1.3e9 < 0.35
    for bad in ("seven", "0.5", "1e20"):
        with pytest.raises(InputError):
            model_shape(bad)


def test_sendrecv_is_a_verified_schedule() -> None:
    topo = T.build("dgx-h100:2")
    alg = _sendrecv(topo, Groups("x", ((0, 8), (1, 9, 3))))
    assert verify(alg).transfers == 3


def test_tensor_parallel_inside_the_node_first_for_a_transformer(capsys) -> None:
    # a 1.3B model: TP's many mid-sized allreduces dominate (with SMALL_MODEL's fewer, larger
    # ones the calibrated model finds tp8 in the node and tp4 dp2 within 0.1% of each other)
    assert main(["place", "-t", "dgx-h100:4", "--plan", "tp=8,dp=4", "--model", "1.3B", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    best = data["placements"][0]
    assert best["intra"] == {"tp": 8, "dp": 1}, best["placement"]
    assert [a["nodes_spanned"] for a in best["axes"]] == [1, 4]
    times = [p["total_us"] for p in data["placements"]]
    assert times == sorted(times) and len(times) == 3  # tp8, tp4 x dp2, tp2 x dp4 inside a node
    for p in data["placements"]:  # every prediction is the sum of its axes' calls
        assert p["total_us"] == pytest.approx(sum(a["time_us"] * a["count"] for a in p["axes"]), rel=1e-4)


def test_where_the_intuitive_placement_loses(capsys) -> None:
    """Little tensor-parallel traffic, a large gradient: data-parallel groups with two ranks per
    node reduce inside the node first and send half as much over each NIC; that beats keeping
    tensor parallelism inside the node (the case docs/place.md shows)."""
    assert main(["place", "-t", "dgx-h100:4", "--plan", "tp=8,dp=4", "--comm",
                 "tp=allreduce:16MiB*64,dp=allreduce:512MiB", "--all", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ranked = [p["intra"] for p in data["placements"]]
    assert ranked[0] == {"tp": 4, "dp": 2}
    intuitive = ranked.index({"tp": 8, "dp": 1})
    assert intuitive > 0 and data["placements"][intuitive]["total_us"] > 1.2 * data["placements"][0]["total_us"]


@pytest.mark.slow
def test_dgx_h100_16_tp8_dp16_ranks_tp_inside_a_node_first(capsys) -> None:
    assert main(["place", "-t", "dgx-h100:16", "--plan", "tp=8,dp=16", "--model", "7B", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["placements"][0]["intra"] == {"tp": 8, "dp": 1}


def test_bad_plans_exit_2(capsys) -> None:
    for argv, words in (
        (["--plan", "tp=8,dp=8", "--comm", "tp=allreduce:1MiB"], "has 64 ranks but"),
        (["--plan", "tp=8,dp=4", "--comm", "ep=allreduce:1MiB"], "axis ep is not in the plan"),
        (["--plan", "tp=8,dp=4", "--comm", "tp=gather:1MiB"], "gather is not one of"),
        (["--plan", "tp=8,dp=4"], "no communication given"),
        (["--plan", "tp=8,tp=4", "--comm", "tp=allreduce:1MiB"], "given twice"),
        (["--plan", "tp=3,dp=32", "--comm", "tp=allreduce:1MiB"], "has 96 ranks"),
        (["--plan", "tp=8,dp=4", "--layers", "32"], "needs --layers, --hidden and --tokens"),
        (["--plan", "tp=8,dp=4", "--model", "7B", "--layers", "3"], "not both"),
    ):
        assert main(["place", "-t", "dgx-h100:4", *argv]) == 2, argv
        assert words in capsys.readouterr().err, argv
    with pytest.raises(InputError, match="count must be a positive"):
        parse_traffic("tp=allreduce:1MiB*0", {"tp": 8})
