"""In-network reduction templates: allreduce through switches that sum and multicast.

A node's reducing NVSwitch (NVLink SHARP, NCCL's NVLS) does in one pass what a ring needs n - 1
steps for, and a network switch that reduces (InfiniBand SHARP) does the same across nodes.
The schedules use the IR's switch transfers (``ccl.core.algorithm``): a *push* writes a switch
slot (``reduce`` pushes add up, a ``copy`` sets it), and the *pulls* of the next step read it.

With L ranks per node, every rank's data is cut into L shards (rank i of a node owns shard i),
each in ``chunks`` pieces that pipeline through the phases one step apart (the request's
``chunks``: piece q enters the first phase at step q):

* ``nvls`` (one node): every rank push-reduces piece q of every shard into the node's switch,
  rank i pulls shard i's sum, pushes it back as a copy, and every other rank pulls it (the
  multicast). That is NVLS as NVLink SHARP runs it: a reduction comes back to the one rank
  that asks for it (``multimem.ld_reduce``), a multicast goes out from one rank
  (``multimem.st``), so every rank sends and receives (L + 1) / L of the data through the
  switch. Four steps per piece.
* ``nvls-rails`` (several nodes, any network): as ``nvls``, but between the reduction and the
  multicast, rank i of every node (rail i) allreduces the node sums of shard i over the network
  by a ring reducescatter and a ring allgather along the rail (each shard cut in one part per
  node). 2 + 2(N - 1) + 2 steps per piece on N nodes.
* ``nvls-sharp`` (several nodes, a network whose switches reduce: ``sharp = true``): between
  the node reduction and the node multicast, rank i of every node push-reduces its node's sum
  of shard i into the network switch all of rail i's NICs reach, and all of them pull the total
  (InfiniBand SHARP multicasts a reduction to every member). Six steps per piece.
* ``nvls`` on several nodes is ``nvls-sharp`` where the network reduces, ``nvls-rails``
  elsewhere.

Every template refuses (CollectiveError naming why) a machine whose nodes have no reducing
switch every rank of the node is linked with both ways, nodes of different sizes, and
(``nvls-sharp``) a network without one reducing switch per rail that every node's NIC of the
rail reaches (a leaf-spine fabric of several leaves: SHARP would need the spine to reduce what
the leaves reduced, a switch-to-switch transfer the IR does not have).
"""

from __future__ import annotations

from ccl.core.errors import CollectiveError
from ccl.core.problem import Problem
from ccl.core.topology import Topology

from .. import Solution
from ..builders.common import builder, pieces
from ..builders.rings import find_ring
from .phases import ring_allgather, ring_reducescatter

KINDS = ("allreduce",)
VARIANTS = ("nvls", "nvls-rails", "nvls-sharp")


def synthesize(problem: Problem) -> Solution:
    name = problem.request.solver
    topo = problem.topology
    if problem.collective.kind not in KINDS:  # pragma: no cover - the registry dispatches allreduce only
        raise CollectiveError(f"solver {name!r} implements allreduce only")
    nodes = _nodes(topo, name)
    N = len(nodes)
    variant = name
    if name == "nvls":
        variant = "nvls" if N == 1 else ("nvls-sharp" if _rail_switches(topo, nodes, None) else "nvls-rails")
    elif N == 1:
        raise CollectiveError(f"solver {name!r} needs a multi-node topology (several nodes); {topo.name!r} has one "
                              "node: use nvls")
    c = pieces(problem)
    switches = [_node_switch(topo, ranks, name) for ranks in nodes]
    details = {"variant": variant, "nodes": N, "ranks_per_node": len(nodes[0]), "pieces": c,
               "node_switches": [topo.vertex_name(s) for s in switches]}
    if variant == "nvls-sharp":
        fabric = _rail_switches(topo, nodes, name)
        assert fabric is not None
        details["rail_switches"] = [topo.vertex_name(s) for s in fabric]
        return Solution(_sharp(problem, nodes, switches, fabric, c, name), details)
    return Solution(_nvls(problem, nodes, switches, c, name, rails=variant == "nvls-rails"), details)


def _nodes(topo: Topology, name: str) -> tuple[tuple[int, ...], ...]:
    if not topo.uniform_nodes:
        sizes = sorted({len(x) for x in topo.node_ranks})
        raise CollectiveError(f"solver {name!r} needs equally sized nodes; {topo.name!r} has nodes of "
                              f"{', '.join(map(str, sizes))} ranks")
    return topo.node_ranks


def _node_switch(topo: Topology, ranks: tuple[int, ...], name: str) -> int:
    """The reducing switch of a node: linked with each of its ranks both ways (the node's own
    before one outside the nodes, then the lowest vertex)."""
    node = topo.node_of[ranks[0]]
    found = [v for v in topo.reducing_switches
             if all(topo.link(r, v) is not None and topo.link(v, r) is not None for r in ranks)]
    if not found:
        why = ("its switches do not reduce (NVLink SHARP needs NVSwitch generation 3 and later: `switch NAME reduce`)"
               if any(s.kind == "switch" for s in topo.switches) else "it has no switch")
        raise CollectiveError(f"solver {name!r} reduces in the switch of each node, but node {node} of "
                              f"{topo.name!r} has no switch that reduces and is linked with all its ranks: {why}")
    found.sort(key=lambda v: (topo.switches[v - topo.n_ranks].node != node, v))
    return found[0]


def _rail_switches(topo: Topology, nodes, name: str | None) -> list[int] | None:
    """For each local index i, the network switch that reduces and that rank i of every node
    reaches (through its NIC) both ways, the one of least latency; None (or, given the
    solver's ``name``, CollectiveError) when a rail has none."""
    n = topo.n_ranks
    out = []
    for i in range(len(nodes[0])):
        rail = [ranks[i] for ranks in nodes]
        best = None
        for v in topo.reducing_switches:
            if topo.switches[v - n].node is not None:
                continue
            paths = [(topo.switch_link(r, v), topo.switch_link(v, r)) for r in rail]
            if any(a is None or b is None for a, b in paths):
                continue
            latency = sum(a.latency + b.latency for a, b in paths)  # type: ignore[union-attr]
            if best is None or latency < best[0]:
                best = (latency, v)
        if best is None:
            if name is None:
                return None
            reducing = [s.name for s in topo.switches if s.reduce and s.node is None]
            why = (f"its network switches that reduce ({', '.join(reducing)}) do not each reach every node's NIC of "
                   "a rail (SHARP across several switches would reduce from switch to switch)" if reducing else
                   "its network switches do not reduce (a fabric takes `sharp = true`, a machine `sharp=on`)")
            raise CollectiveError(f"solver {name!r} reduces across nodes in a network switch, but no switch of "
                                  f"{topo.name!r} that reduces is reached by rank {rail[0]} and its rail-mates "
                                  f"{', '.join(map(str, rail[1:]))}: {why}")
        out.append(best[1])
    return out


def _nvls(problem: Problem, nodes, switches: list[int], c: int, name: str, rails: bool):
    """``nvls`` and ``nvls-rails``: shards of N parts (one per node; N = 1 on one node), slot
    (q, i, x) = (q L + i) N + x; the node's switch slots: the reduction of piece q at q L N ..,
    the multicast at c L N + q L N ..."""
    N, L = len(nodes), len(nodes[0])
    width = L * N  # slots of one piece
    b, _ = builder(problem, c * width, name, name)
    ring_steps = 2 * (N - 1) if rails else 0
    for q in range(c):
        base = q * width
        for a, ranks in enumerate(nodes):
            sw = switches[a]
            for r in ranks:  # every rank's piece q, all shards, summed in the switch
                b.move_run(q, r, ("input", base), sw, ("scratch", base), width, "reduce")
            for i, r in enumerate(ranks):  # rank i asks for shard i's sum
                b.move_run(q + 1, sw, ("scratch", base + i * N), r, ("output", base + i * N), N, "copy")
        if rails:
            for i in range(L):
                ring = find_ring(problem.topology, [ranks[i] for ranks in nodes])

                def part(r: int, x: int, at: int = base + i * N) -> list[tuple[str, int]]:
                    return [("output", at + x)]

                mid = ring_reducescatter(b, ring, list(range(N)), part, q + 2)
                ring_allgather(b, ring, list(range(N)), part, mid)
        step = q + 2 + ring_steps
        for a, ranks in enumerate(nodes):
            sw = switches[a]
            cast = c * width + base
            for i, r in enumerate(ranks):  # rank i multicasts shard i
                b.move_run(step, r, ("output", base + i * N), sw, ("scratch", cast + i * N), N, "copy")
            for j, r in enumerate(ranks):  # everyone else takes it (two runs: below and above its own shard)
                if j:
                    b.move_run(step + 1, sw, ("scratch", cast), r, ("output", base), j * N, "copy")
                if j < L - 1:
                    b.move_run(step + 1, sw, ("scratch", cast + (j + 1) * N), r, ("output", base + (j + 1) * N),
                               (L - 1 - j) * N, "copy")
    return b.build()


def _sharp(problem: Problem, nodes, switches: list[int], fabric: list[int], c: int, name: str):
    """``nvls-sharp``: slot (q, i) = q L + i; the node switches' slots: the reduction of piece
    q at q L .., the multicast at c L + q L ..; the rail switches': q L + i."""
    L = len(nodes[0])
    b, _ = builder(problem, c * L, name, name)
    for q in range(c):
        base = q * L
        for a, ranks in enumerate(nodes):
            sw = switches[a]
            for r in ranks:
                b.move_run(q, r, ("input", base), sw, ("scratch", base), L, "reduce")
            for i, r in enumerate(ranks):
                b.move_run(q + 1, sw, ("scratch", base + i), r, ("output", base + i), 1, "copy")
                # the node's sum of shard i into rail i's network switch; every node takes the total
                b.move_run(q + 2, r, ("output", base + i), fabric[i], ("scratch", base + i), 1, "reduce")
                b.move_run(q + 3, fabric[i], ("scratch", base + i), r, ("output", base + i), 1, "copy")
                b.move_run(q + 4, r, ("output", base + i), sw, ("scratch", c * L + base + i), 1, "copy")
            for j, r in enumerate(ranks):
                if j:
                    b.move_run(q + 5, sw, ("scratch", c * L + base), r, ("output", base), j, "copy")
                if j < L - 1:
                    b.move_run(q + 5, sw, ("scratch", c * L + base + j + 1), r, ("output", base + j + 1), L - 1 - j,
                               "copy")
    return b.build()
