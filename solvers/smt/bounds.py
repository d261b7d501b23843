"""Lower bounds of the rounds model (SCCL's accounting), for every collective the exact solver takes.

Built on ``solvers/bounds.py`` (the hop bound ``step_bound`` and the cut bound
``rounds_per_chunk_bound``, reused here): this module adds what the rounds model needs beyond
allgather-like cuts - custom, rooted, multi-root and reducing collectives, and the shared limits
of the flattened view (NIC and switch ports), which the cut bound leaves out.
"""

from __future__ import annotations

from fractions import Fraction

from ccl.core.collective import Collective
from ccl.core.topology import Topology

from ..bounds.cuts import rounds_per_chunk_bound


def rank_capacities(topology: Topology) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Chunks per round each rank can receive and send in the flattened view: the lanes of its
    links, or less when one shared limit caps all of them (a switch or NIC port)."""
    flat = topology.flat()
    n = flat.n_ranks
    ins: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    outs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for link in flat.links:
        ins[link.dst].append(link.pair)
        outs[link.src].append(link.pair)
    cap_in = [sum(flat.link(*p).lanes for p in ins[r]) for r in range(n)]  # type: ignore[union-attr]
    cap_out = [sum(flat.link(*p).lanes for p in outs[r]) for r in range(n)]  # type: ignore[union-attr]
    for limit in flat.limits:
        covered = set(limit.links)
        lanes = limit.lanes(flat)
        for r in range(n):
            if ins[r] and covered.issuperset(ins[r]):
                cap_in[r] = min(cap_in[r], lanes)
            if outs[r] and covered.issuperset(outs[r]):
                cap_out[r] = min(cap_out[r], lanes)
    return tuple(cap_in), tuple(cap_out)


def rounds_lower_bound(topology: Topology, collective: Collective) -> tuple[Fraction, str]:
    """A lower bound on rounds per chunk (total rounds R over the chunk factor C the collective
    is split further by) that holds for every schedule of the step model on the flattened view,
    with its name.

    * cut (allgather, reducescatter): ``rounds_per_chunk_bound`` on the flattened links;
    * node cut: the ranks of a node (or all the others) must send the slots only they hold
      through the links leaving them, capped by a shared limit covering all of those links (the
      node's NIC);
    * degree: a rank that must receive N slots it does not start with, through links taking K
      slots per round, needs N/K rounds per chunk; a rank that alone holds N slots others need
      must send them. For sums: a rank needs at least one transfer per sum it does not hold
      alone, and a contributor one per sum another rank owns;
    * gossip (allreduce): every slot of a sum all n ranks contribute to and all n need is one-way
      gossip, which takes at least 2(n-1) transfers (Harary and Schwenk), through at most
      (total lanes) transfers per round. Reduce-scatter + allgather cut sums are *not* lower
      bounds for allreduce in general: on a star the centre rank reduces, and the allreduce
      needs n parts per lane where those sums give 2(n-1).
    """
    flat = topology.flat()
    n = flat.n_ranks
    cap_in, cap_out = rank_capacities(topology)
    best, name = Fraction(0), "none"

    def offer(value: Fraction, label: str) -> None:
        nonlocal best, name
        if value > best:
            best, name = value, label

    origins = collective.origins()
    reducing = collective.is_reducing
    if collective.kind in ("allgather", "reducescatter"):
        cut = rounds_per_chunk_bound(flat, collective.kind)
        if cut is not None:
            offer(cut, "cut bound" + (" (reversed)" if collective.kind == "reducescatter" else ""))
    if not reducing:
        for S in _node_sets(flat):
            slots = {next(iter(s)) for r in range(n) if r not in S for s in collective.outputs[r]}
            only = sum(1 for c in slots if all(q in S for q, _ in origins[c]))
            cap = _cut_lanes(flat, S)
            if only and cap:
                offer(Fraction(only, cap), f"node cut: {only} slots leave ranks {_short_set(S)} through {cap} lane(s)")
        for r, slots in enumerate(collective.outputs):
            need = sum(1 for s in slots if not any(q == r for q, _ in origins[next(iter(s))]))
            if need and cap_in[r]:
                offer(Fraction(need, cap_in[r]), f"rank {r} receives {need} slots through {cap_in[r]} lane(s)")
        sole: dict[int, set[int]] = {}
        for r, slots in enumerate(collective.outputs):
            for s in slots:
                places = origins[next(iter(s))]
                if len(places) == 1 and places[0][0] != r:
                    sole.setdefault(places[0][0], set()).add(next(iter(s)))
        for q, chunks in sole.items():
            if cap_out[q]:
                offer(Fraction(len(chunks), cap_out[q]), f"rank {q} sends {len(chunks)} slots through {cap_out[q]} lane(s)")
        return best, name
    sums = list(dict.fromkeys(s for slots in collective.outputs for s in slots))
    owners = {s: {r for r, slots in enumerate(collective.outputs) if s in slots} for s in sums}
    holders = {s: {q for c in s for q, _ in origins[c]} for s in sums}
    for r, slots in enumerate(collective.outputs):
        need = sum(1 for s in slots if holders[s] - {r})
        if need and cap_in[r]:
            offer(Fraction(need, cap_in[r]), f"rank {r} receives {need} sums through {cap_in[r]} lane(s)")
    for q in range(n):
        out = sum(1 for s in sums if q in holders[s] and owners[s] - {q})
        if out and cap_out[q]:
            offer(Fraction(out, cap_out[q]), f"rank {q} contributes to {out} sums through {cap_out[q]} lane(s)")
    everyone = set(range(n))
    gossip = sum(2 * (n - 1) for s in sums if n > 1 and owners[s] == everyone and holders[s] == everyone)
    lanes = sum(link.lanes for link in flat.links)
    if gossip and lanes:
        offer(Fraction(gossip, lanes), f"gossip bound: {gossip} transfers over {lanes} lanes per round")
    return best, name


def _node_sets(flat: Topology) -> list[frozenset[int]]:
    if flat.n_nodes < 2:
        return []
    everyone = frozenset(range(flat.n_ranks))
    out = []
    for ranks in flat.node_ranks:
        out += [frozenset(ranks), everyone - frozenset(ranks)]
    return out


def _cut_lanes(flat: Topology, S: frozenset[int]) -> int:
    """Slots per round that can leave the rank set S in the flattened view."""
    leaving = [link for link in flat.links if link.src in S and link.dst not in S]
    cap = sum(link.lanes for link in leaving)
    pairs = {link.pair for link in leaving}
    for limit in flat.limits:
        if pairs and pairs.issubset(limit.links):
            cap = min(cap, limit.lanes(flat))
    return cap


def _short_set(S: frozenset[int]) -> str:
    items = sorted(S)
    return "{" + ", ".join(map(str, items[:4])) + (", ...}" if len(items) > 4 else "}")
