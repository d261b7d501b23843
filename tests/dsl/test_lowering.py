"""Lowering: every construct of the language gives the IR it says."""

from __future__ import annotations

import pytest

import dsl
from ccl.core.algorithm import Transfer
from ccl.core.collective import builtin
from ccl.core.errors import DslError, VerificationError
from ccl.core.problem import Request, Sketch
from ccl.core.topology import Link, SharedLimit, Switch


def load(text: str) -> dsl.Module:
    return dsl.load_string(text, "test.ccl")


def topo(text: str, name: str = "t", *args):
    return load(text).topology(name, *args)


# ---------------------------------------------------------------------- topologies
@pytest.mark.parametrize(("literal", "bandwidth"), [
    ("25 GB/s", 25.0), ("100 Gbps", 12.5), ("500 MB/s", 0.5), ("2 TB/s", 2000.0), ("800 Mbps", 0.1),
    ("1 MB / 46 us", 1e6 / 46.0 / 1e3), ("2 * 12.5 GB/s", 25.0), ("25GB/s", 25.0),
])
def test_bandwidth_units(literal, bandwidth):
    t = topo(f"topology t {{\n ranks 2\n 0 -> 1 : {literal}, 1 us\n}}")
    assert t.link(0, 1).bandwidth == bandwidth


@pytest.mark.parametrize(("literal", "latency"), [
    ("700 ns", 0.7), ("0.7 us", 0.7), ("2 ms", 2000.0), ("1 s", 1e6), ("1.5us", 1.5), ("0.7 us / 2", 0.35),
])
def test_time_units(literal, latency):
    t = topo(f"topology t {{\n ranks 2\n 0 -> 1 : 1 GB/s, {literal}\n}}")
    assert t.link(0, 1).latency == latency


def test_directed_bidirectional_lanes_and_link_classes():
    t = topo("""
    link nvlink = 25 GB/s, 0.7 us x 2
    topology t {
      link pcie = 12 GB/s, 1 us
      ranks 4
      0 <-> 1 : nvlink
      1 -> 2 : nvlink x 3
      2 -> 3 : nvlink, 2 us
      3 -> 0 : 1 us, pcie, 10 GB/s
    }""")
    assert t.link(0, 1) == Link(0, 1, 25.0, 0.7, 2) and t.link(1, 0) == Link(1, 0, 25.0, 0.7, 2)
    assert t.link(1, 2).lanes == 3 and t.link(2, 1) is None
    assert t.link(2, 3) == Link(2, 3, 25.0, 2.0, 2)
    assert t.link(3, 0) == Link(3, 0, 10.0, 1.0, 1)


def test_lists_and_ranges_as_link_ends():
    t = topo('topology t {\n ranks 5\n switch hub\n 0 <-> [1, 2]: 1 GB/s, 1 us\n 3..5 <-> hub : 2 GB/s, 1 us\n}')
    assert {link.pair for link in t.links} == {(0, 1), (1, 0), (0, 2), (2, 0), (3, 5), (5, 3), (4, 5), (5, 4)}
    assert t.switches == (Switch("hub"),)


def test_switches_nics_nodes_limits_and_node_of():
    t = topo("""
    topology t {
      name "two-boxes"
      ranks 4
      node_of [0, 0, 1, 1]
      switch "pcie0" node 0
      nic "nic1" node 1
      for r in 0..2 { r <-> "pcie0" : 16 GB/s, 0.5 us }
      2 <-> 3 : 50 GB/s, 1 us
      3 <-> "nic1" : 12 GB/s, 1 us
      limit "pcie-up" : 16 GB/s over [(0, "pcie0"), (1, "pcie0")]
    }""")
    assert t.name == "two-boxes" and t.node_of == (0, 0, 1, 1)
    assert t.switches == (Switch("pcie0", "switch", 0), Switch("nic1", "nic", 1))
    assert t.limits == (SharedLimit("pcie-up", ((0, 4), (1, 4)), 16.0),)


def test_default_names():
    module = load("topology plain {\n ranks 2\n 0 -> 1 : 1 GB/s, 1 us\n}\n"
                  "topology sized(n, bw = 1 GB/s) {\n ranks n\n 0 -> 1 : bw, 1 us\n}")
    assert module.topology("plain").name == "plain"
    assert module.topology("sized", 3).name == "sized(3, 1 GB/s)"


def test_arithmetic_comprehensions_and_builtins():
    module = load("""
    let a = 7 % 3 + 2 ** 3 - 10 // 4
    let b = (-7) % 3
    let c = [i * i for i in 0..5 if i % 2 == 0]
    let d = [(i, j) for i in 0..2 for j in 0..2]
    let e = len(c) + sum(c) + max(c) + min([3, 1, 2]) + prod([2, 3]) + log2(64)
    let f = 5 ^ 1 | 8 & 12 << 1
    let g = "n{a}x{len(d)}" + str(1.5)
    let h = 3 if b > 0 else 4
    let i = sum([25 GB/s, 25 GB/s]) / 2
    let j = 1 MiB / (1 GB/s)
    let k = 4 in 0..5 and not (9 in [1, 2])
    let l = sorted([3, 1, 2]) + reversed([1, 2])
    let m = [x for x, y in zip([1, 2], [3, 4]) if y > 3]
    let n = c[1..3]
    let o = round(2.5) + floor(2.7) + ceil(2.1) + int(3.9) + abs(-2)
    """)
    v = module.scope.vars
    assert v["a"] == 7 % 3 + 2 ** 3 - 10 // 4 and v["b"] == 2
    assert v["c"] == (0, 4, 16) and v["d"] == ((0, 0), (0, 1), (1, 0), (1, 1))
    assert v["e"] == 3 + 20 + 16 + 1 + 6 + 6
    assert v["f"] == 5 ^ 1 | 8 & 12 << 1
    assert v["g"] == "n7x41.5" and v["h"] == 3
    assert v["i"].value == 25.0 and v["j"].value == pytest.approx(1048.576) and v["j"].dimension == "time"
    assert v["k"] is True and v["l"] == (1, 2, 3, 2, 1) and v["m"] == (2,) and v["n"] == (4, 16)
    assert v["o"] == 2 + 2 + 3 + 3 + 2


def test_statements_on_one_line_and_lists_over_lines():
    t = topo("topology t { ranks 3; 0 -> 1 : 1 GB/s, 1 us; 1 -> 2 : 1 GB/s,\n 1 us }\n"
             "let m = [\n  [0, 1],\n  [1, 0],\n]\n")
    assert len(t.links) == 2


def test_if_else_chains_and_require():
    text = """
    topology t(n) {
      require n > 1, "n must exceed 1, got {n}"
      ranks n
      if n == 2 { 0 -> 1 : 1 GB/s, 1 us } else if n == 3 { 0 -> 2 : 1 GB/s, 1 us } else { 1 -> 0 : 1 GB/s, 1 us }
    }"""
    module = load(text)
    assert [t.pair for t in module.topology("t", 2).links] == [(0, 1)]
    assert [t.pair for t in module.topology("t", 3).links] == [(0, 2)]
    assert [t.pair for t in module.topology("t", 4).links] == [(1, 0)]
    with pytest.raises(DslError, match="n must exceed 1, got 1"):
        module.topology("t", 1)


def test_topologies_are_memoized_and_usable_as_values():
    module = load("""
    topology pair { ranks 2; 0 <-> 1 : 1 GB/s, 1 us }
    let p = pair
    let q = pair()
    let r = q.ranks * 10 + q.nodes
    """)
    assert module.scope.vars["q"] is module.topology("pair")
    assert module.scope.vars["r"] == 21


def test_a_hand_written_fat_tree_fabric():
    module = load("""
    topology gpu_pair { ranks 2; 0 <-> 1 : 100 GB/s, 0.5 us }
    fabric fat_tree(per_leaf = 2) {
      let leaves = nodes // per_leaf
      switch "core"
      for l in 0..leaves {
        switch "leaf{l}"
        "leaf{l}" <-> "core" : per_leaf * len(nics) * nics[0].bandwidth, 0.5 us
        for a in l * per_leaf .. (l + 1) * per_leaf, k in 0..len(nics) {
          "n{a}.nic{k}" <-> "leaf{l}" : nics[k].bandwidth, nics[k].latency / 2
        }
      }
    }
    topology cluster(nodes) {
      node gpu_pair x nodes { for k in 0..2 { nic k : 25 GB/s, 2 us, host 32 GB/s } }
      fabric fat_tree(per_leaf = 2)
    }""")
    t = module.topology("cluster", 4)
    assert t.n_ranks == 8 and t.node_of == (0, 0, 1, 1, 2, 2, 3, 3)
    names = [s.name for s in t.switches]
    assert names == [f"n{a}.nic{k}" for a in range(4) for k in range(2)] + ["core", "leaf0", "leaf1"]
    assert [s.kind for s in t.switches].count("nic") == 8
    assert t.flat().link(0, 7) is not None  # every pair reaches every other through the tree
    core_up = t.link(t.vertex("leaf0"), t.vertex("core"))
    assert core_up.bandwidth == 100.0


def test_one_node_builds_no_nics_and_ignores_the_fabric():
    t = topo("topology pair { ranks 2; 0 <-> 1 : 1 GB/s, 1 us }\n"
             "topology t { node pair x 1 { nic 0 : 1 GB/s, 1 us, host 2 GB/s }; fabric rail }")
    assert t.switches == () and t.n_ranks == 2


# ---------------------------------------------------------------------- collectives and requests
def test_builtin_collectives_in_requests():
    module = load("""
    from basic import ring
    synthesize broadcast(root = 3, size = 1 MiB) on ring(8) with ring { chunks 2 }
    synthesize allgather(chunks = 4) on ring(8) with ring as "ag4"
    """)
    first, second = module.requests()
    assert first.name == "broadcast-root3-ring8-ring"
    assert first.problem.collective == builtin("broadcast", 8, 3)
    assert first.problem.request == Request(solver="ring", chunks=2, size=1 << 20)
    assert second.name == "ag4" and second.problem.request.chunks == 4


def test_requests_with_every_setting_and_a_sketch_lower_for_unregistered_solvers():
    module = load("""
    from machines import ndv2
    synthesize alltoall on ndv2(2) with teccl {
      chunks 2; steps 3; rounds 4; size 64 KiB; time_limit 1.5 ms; objective makespan
      sketch {
        relays 0, 4
        internode [(i, i) for i in 0..8]
        switch_policy most
        symmetry 8, 16
        chunk_partition 2
      }
      option solver = "cbc"
      option gap = 0.01
      option window = 2 us
    }""")
    (req,) = module.requests()
    r = req.problem.request
    assert r.solver == "teccl" and (r.chunks, r.steps, r.rounds, r.size) == (2, 3, 4, 65536)
    assert r.time_limit == pytest.approx(0.0015) and r.objective == "makespan"
    assert r.sketch == Sketch(relays=(0, 4), internode=tuple((i, i) for i in range(8)), switch_policy="most",
                              symmetry=(8, 16), chunk_partition=2)
    assert dict(r.options) == {"solver": "cbc", "gap": 0.01, "window": 2}


def test_requests_in_loops_and_default_solver():
    module = load("from basic import ring\nfor n in [4, 8] {\n synthesize allgather on ring(n)\n}\n")
    assert [r.name for r in module.requests()] == ["allgather-ring4-ring", "allgather-ring8-ring"]


def test_custom_collectives_by_pre_and_post():
    module = load("""
    from basic import ring
    collective pairs(n) {
      ranks n
      for r in 0..n { pre [2 * r, 2 * r + 1] at r }
      for r in 0..n {
        post 2 * ((r + 1) % n) at r
        post sum [2 * q + 1 for q in 0..n] at r
      }
    }
    synthesize pairs(3) on ring(3) with smt
    """)
    coll = module.requests()[0].problem.collective
    assert coll.kind == "custom" and coll.name == "pairs(3)"
    assert coll.inputs == ((0, 1), (2, 3), (4, 5))
    assert coll.outputs[0] == (frozenset({2}), frozenset({1, 3, 5}))
    assert coll.aliases[0] == (None, 1)  # the sum slot starts with the rank's own odd chunk


# ---------------------------------------------------------------------- algorithms
def test_algorithm_statements():
    module = load("""
    from basic import ring
    algorithm a(n = 3) implements allreduce(chunks = 2) on ring(n) {
      rounds [1, 2]
      step 0 {
        copy input[0..2] of 0 to scratch[4..6] of 1
        step 1 { reduce scratch[4] of 1 to output[0] of 1 }
      }
      copy output[1] from 1 to 2 at step 1
    }""")
    (item,) = module.algorithms()
    alg = item.algorithm
    assert alg.collective == builtin("allreduce", 3, None, 2) and alg.rounds == (1, 2)
    assert alg.transfers == (
        Transfer(0, 0, "input", 0, 1, "scratch", 4, 2, "copy"),
        Transfer(1, 1, "scratch", 4, 1, "output", 0, 1, "reduce"),
        Transfer(1, 1, "output", 1, 2, "output", 1, 1, "copy"),
    )
    assert [s.line for s in item.spans] == [6, 7, 9]
    assert alg.solver == "hand-written" and alg.name == "a(3)"


def test_verification_failure_names_the_transfer_line():
    module = load("""
    from basic import ring
    algorithm broken(n = 3) implements allgather on ring(n) {
      for s in 0..n-1, r in 0..n {
        copy output[(r - s) % n] from r to (r + 1) % n at step s
      }
      reduce output[0] from 0 to 2 at step 0
    }""")
    (item,) = module.algorithms()
    with pytest.raises(VerificationError) as info:
        dsl.verify_algorithm(item)
    assert info.value.message.startswith("test.ccl:7:7: algorithm broken(3): ")


def test_verify_statements_instantiate_algorithms_with_arguments():
    module = load("""
    from basic import ring
    algorithm ag(n) implements allgather on ring(n) {
      for s in 0..n-1, r in 0..n { copy output[(r - s) % n] from r to (r + 1) % n at step s }
    }
    verify ag(3)
    verify ag(4)
    verify ag(3)
    """)
    assert [item.name for item in module.algorithms()] == ["ag(3)", "ag(4)"]


def test_evaluate_expressions_in_a_module_from_python():
    module = dsl.load_string("from basic import ring\nlet bw = 50 GB/s\n", "api.ccl")
    topo = module.evaluate("ring(8, bandwidth = bw, latency = 500 ns)")
    assert topo.link(0, 1) == Link(0, 1, 50.0, 0.5, 1)
    with pytest.raises(DslError) as info:
        module.evaluate("ring(8, bandwith = bw)")
    assert info.value.render().splitlines()[0].startswith("<expression>:1:9: topology ring has no parameter")
