"""The lower bound of collectives run on groups at once, and the groups read back from a schedule.

``ccl synthesize --groups`` writes one schedule of the whole machine whose collective is the
union of every group's (``ccl.core.groups.union``: a custom collective). Its bound is not the
custom collective's per-rank volume, which knows nothing of the groups' own machines: it is the
largest of each group's own bound (its collective on its ranks with the links to itself) and
of what the groups crossing a node's boundary must move over its links
(``ccl.core.groups.shared_bound``). ``groups_bound`` computes it; ``synthesize_groups`` and
``ccl simulate`` (through ``ccl.compiler.timing``) both use it, so a schedule is scored against
the same bound whichever command scores it.

``recognize(collective, topology)`` finds the groups in a custom collective: the ranks
connected by the chunks they share, each set of them exactly a built-in collective (its chunks
renumbered from 0), all of one kind; None when the collective is not made so. Each group's
ranks are taken in the order its name gives (``union`` names the collective
``KIND-groups-SPEC``) when that order makes it the built-in collective exactly, so the bound is
computed on the very machines ``synthesize --groups`` used; otherwise in the order of their
first chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solvers.bounds import lower_bound

from ..core.collective import BUILTIN_KINDS, Collective, builtin
from ..core.errors import CclError
from ..core.groups import Groups, group_topologies, parse_groups, shared_bound, usage
from ..core.topology import Topology

ROOTED = {"broadcast": "inputs", "scatter": "inputs", "reduce": "outputs", "gather": "outputs"}
PER_RANK_PARTS = {"reducescatter", "alltoall", "scatter"}  # a rank's input holds a part per rank


@dataclass(frozen=True)
class GroupBound:
    """The bound of all groups at once: ``bound_us`` = max(``latency_us``, ``bandwidth_us``),
    ``binding`` "latency" or "bandwidth", and ``why`` names what gives it."""

    bound_us: float
    latency_us: float
    bandwidth_us: float
    binding: str
    why: str


@dataclass(frozen=True)
class Recognized:
    """A custom collective read as groups: their ranks (in each group's rank order), the
    built-in kind every group runs, the group rank of the root (rooted kinds) and each group's
    collective."""

    groups: Groups
    kind: str
    root: int | None
    collectives: tuple[Collective, ...]


def shape(topo: Topology) -> tuple:
    """What synthesis and the bounds see of a machine, names aside (alike groups once)."""
    return (topo.n_ranks, tuple((x.src, x.dst, x.bandwidth, x.latency, x.lanes) for x in topo.links),
            tuple((lim.links, lim.bandwidth) for lim in topo.limits), tuple(s.kind for s in topo.switches),
            tuple(topo.node_of))


def groups_bound(topology: Topology, groups: Groups, kind: str, collectives: list[Collective] | tuple, size: float,
                 *, machines: list[Topology] | None = None, lane_latency: bool = True) -> GroupBound:
    """The bound (module docstring). ``collectives[i]``: group i's collective; ``machines[i]``:
    group i's machine with the links to itself, when the caller has built them."""
    shared, cut = shared_bound(topology, groups, kind, size)
    best = GroupBound(shared, 0.0, shared, "bandwidth", f"what the groups must move over {cut}") if shared > 0 else None
    seen: dict[tuple, Any] = {}
    count = None if machines is not None else usage(topology, groups) if len(groups) > 1 else {}
    for i, coll in enumerate(collectives):
        full = machines[i] if machines is not None else group_topologies(topology, groups, i, count=count)[1]
        key = (shape(full), coll.inputs, coll.outputs)
        if key not in seen:
            seen[key] = lower_bound(full, coll, size, lane_latency=lane_latency)
        own = seen[key]
        if best is None or own.bound_us > best.bound_us:
            best = GroupBound(own.bound_us, own.latency_us, own.bandwidth_us, own.binding,
                              f"group {i}'s own bound: {own.method}")
    if best is None:
        return GroupBound(0.0, 0.0, 0.0, "latency", "no group")
    return best


def recognize(collective: Collective, topology: Topology | None = None) -> Recognized | None:
    """The groups a custom collective is made of (module docstring), or None."""
    if collective.kind != "custom":
        return None
    named = _named_order(collective, topology)
    n = collective.n_ranks
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    holder: dict[int, int] = {}  # chunk -> a rank that has it in its input or output
    for r in range(n):
        for c in (*collective.inputs[r], *(c for need in collective.outputs[r] for c in need)):
            other = holder.setdefault(c, r)
            a, b = find(other), find(r)
            if a != b:
                parent[a] = b
    components: dict[int, list[int]] = {}
    for r in range(n):
        if collective.inputs[r] or collective.outputs[r]:
            components.setdefault(find(r), []).append(r)
    members, kinds, roots, colls = [], set(), set(), []
    for ranks in sorted(components.values()):
        found = _builtin_of(collective, ranks, named.get(min(ranks)))
        if found is None:
            return None
        order, kind, root, coll = found
        members.append(order)
        kinds.add(kind)
        roots.add(root)
        colls.append(coll)
    if not members or len(kinds) != 1 or len(roots) != 1 or any(len(g) < 2 for g in members):
        return None
    spec = ";".join(",".join(map(str, g)) for g in members)
    return Recognized(Groups(spec, tuple(members)), kinds.pop(), roots.pop(), tuple(colls))


def _named_order(collective: Collective, topology: Topology | None) -> dict[int, tuple[int, ...]]:
    """Group rank orders from the collective's name (``KIND-groups-SPEC``), by their lowest
    rank; empty when the name gives none."""
    _, mark, spec = collective.name.partition("-groups-")
    if not mark or topology is None:
        return {}
    try:
        groups = parse_groups(spec, topology)
    except CclError:
        return {}
    return {min(g): g for g in groups.members}


def _builtin_of(collective: Collective, ranks: list[int], named: tuple[int, ...] | None = None
                ) -> tuple[tuple[int, ...], str, int | None, Collective] | None:
    """(rank order, kind, root, the group's collective) when the ranks' part of ``collective``
    is exactly a built-in collective, else None; in the ``named`` order when it makes one."""
    if named is not None and sorted(named) == sorted(ranks):
        found = _builtin_in_order(collective, named)
        if found is not None:
            return found
    inf = float("inf")

    def first(r: int) -> tuple:
        outs = [c for need in collective.outputs[r] for c in need]
        return (min(collective.inputs[r], default=inf), min(outs, default=inf), r)

    return _builtin_in_order(collective, tuple(sorted(ranks, key=first)))


def _builtin_in_order(collective: Collective, order: tuple[int, ...]
                      ) -> tuple[tuple[int, ...], str, int | None, Collective] | None:
    chunks = [c for r in order for c in collective.inputs[r]]
    if not chunks:
        return None
    offset = min(chunks)
    inputs = tuple(tuple(c - offset for c in collective.inputs[r]) for r in order)
    outputs = tuple(tuple(frozenset(c - offset for c in need) for need in collective.outputs[r]) for r in order)
    aliases = tuple(tuple(collective.aliases[r]) for r in order)
    m = len(order)
    for kind in BUILTIN_KINDS:
        root = None
        if kind in ROOTED:
            side = inputs if ROOTED[kind] == "inputs" else outputs
            having = [i for i in range(m) if side[i]]
            if len(having) != 1:
                continue
            root = having[0]
        given = next(len(x) for x in inputs if x)
        per = m if kind in PER_RANK_PARTS else 1
        if given % per:
            continue
        k = given // per
        try:
            candidate = builtin(kind, m, root).chunk_up(k)
        except CclError:
            continue
        if (candidate.inputs, candidate.outputs, candidate.aliases) == (inputs, outputs, aliases):
            return order, kind, root, candidate
    return None
