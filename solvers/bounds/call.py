"""The bound of one call: ``lower_bound(topology, collective, size) -> Bounds``.

In the simulator's physics (a transfer pays its link's latency; a link carries at most lanes x
bandwidth; switches forward, and those that reduce also sum and multicast), at the links'
nominal rates: a bound for any runtime on the hardware. ``bound = max(latency,
bandwidth)``:

* latency: the alpha-weighted shortest path (Dijkstra over the flattened rank graph, whose
  links through switches carry their path's latency) between the farthest pair of ranks that
  must exchange data: all pairs for allgather/reducescatter/allreduce/alltoall, root to every
  rank (or back) for the rooted kinds, the needed pairs for custom collectives (``latency``).
* bandwidth, with S = size (nccl-tests convention) and n ranks:

  - allgather, reducescatter: cut_ratio x S / n (reducescatter on the reversed graph). Exact
    in the fluid limit: spanning-tree packings reach it (ForestColl), when transfers may take
    any path through the switches. With fixed routes (the flattened topology's, which the
    simulator follows) the routed delivery bound (``routed.routed_delivery``) may be higher.
  - gather, scatter: the same with S forced to miss the root. Exact (single-commodity flow).
  - broadcast, reduce: S / min over ranks t of maxflow(root -> t) (reversed for reduce).
    Exact in the fluid limit (Edmonds' arborescence packing).
  - allreduce: the largest of (a) S / (least capacity leaving a vertex set that holds a rank
    and misses one: 2(n-1) max-flows), and (b) one-way gossip volume (where no switch sums
    in the network; where one does, S each way per rank, or per node when the network sums;
    see ``_allreduce_parts``): every element must be
    sent at least 2(k-1) times between k parts (the minimum number of one-way calls for k
    parties to all learn everything), and a part sends only through the capacity leaving it,
    so T >= 2(k-1) S / sum of the parts' out- (and in-) capacities, for k = n single ranks and
    k = the nodes of a multi-node topology; with switches (up to ``ROUTED_GOSSIP_RANKS``) also
    over the capacity the fixed routes of all pairs (of different nodes) can carry together
    (``routed.routed_capacity``). On a uniform fabric (every rank b) (b) is
    2(n-1) S / (n b): the reducescatter + allgather bound. RS + AG is *not* used in general:
    on a star (hub linked to k leaves at b) reduce-to-hub-and-broadcast, pipelined, takes
    about S / b while RS + AG claims 2k/(k+1) S / b. Not exact in general.
  - alltoall: m = S / n bytes per ordered pair. The product-demand cut bound
    max_S m |S ∩ R| |R - S| / cap_out(S), every S enumerated when the topology has at most
    16 vertices, otherwise structured candidate sets (valid, maybe loose); and the LP
    relaxation (concurrent multicommodity flow, HiGHS via scipy) when it has at most 120k
    variables: the exact fluid optimum, never below a cut bound (``alltoall``).
  - custom: what every rank must send (chunks only it holds that others need) and receive
    (output slots it cannot fill locally) over its own links.

Each bandwidth bound counts its cut's capacity from the links' latency onsets (``onsets``);
broadcast and reduce are raised by the lane bound (``lanes``). Shared limits declared on links
are not part of cuts or the LP (bounds stay valid, maybe looser); switch and NIC vertices are.
The bounds are affine in the size above the cuts' latencies: their coefficients and onsets
are computed once per (topology, collective kind, root) and cached.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from fractions import Fraction

from ccl.core.collective import Collective
from ccl.core.errors import CollectiveError
from ccl.core.topology import Topology

from .alltoall import alltoall_cut, concurrent_flow_time
from .cuts import cut_ratio, global_min_cut, root_min_cut
from .lanes import RootLanes, lane_bound, root_lanes
from .latency import latency_bound
from .onsets import Onsets, cut_onsets, far_side, first_onset, link_onsets, onset_time
from .routed import routed_capacity, routed_delivery
from .steps import needed_pairs_exist

# Everything below answers: how fast could *any* schedule of this collective run at this size
# on this topology, in the simulator's physics (see backends.sim): a transfer between ranks
# costs at least its link's latency, every link carries at most lanes x bandwidth, and
# switch vertices forward without combining or replicating data. All bounds are linear in
# the size, so the size-independent coefficients are computed once per (topology, collective)
# and cached.

@dataclass(frozen=True)
class Bounds:
    """Lower bounds on the time of one collective call of ``size`` bytes (nccl-tests
    convention, see ``ccl.core.report``), in microseconds.

    ``latency_us``: the alpha-weighted shortest path between the farthest pair of ranks that
    must exchange data (``latency_pair``); ``steps``: the hop bound. ``bandwidth_us``: the
    largest of the bandwidth bounds in ``parts`` (name -> us), computed by ``method``;
    ``exact`` says whether it is the exact fluid optimum (unlimited chunking, no latency).
    ``witness``: the vertex set of the binding cut, when one binds."""

    collective: str
    n_ranks: int
    size: float
    latency_us: float
    bandwidth_us: float
    steps: int
    method: str
    exact: bool
    witness: tuple[int, ...] = ()
    latency_pair: tuple[int, int] | None = None
    parts: tuple[tuple[str, float], ...] = ()

    @property
    def bound_us(self) -> float:
        return max(self.latency_us, self.bandwidth_us)

    @property
    def binding(self) -> str:
        """Which bound binds: "bandwidth" or "latency"."""
        return "bandwidth" if self.bandwidth_us >= self.latency_us and self.bandwidth_us > 0 else "latency"

    def to_json(self) -> dict:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "collective": self.collective,
            "n_ranks": self.n_ranks,
            "size": self.size,
            "latency_us": num(self.latency_us),
            "bandwidth_us": num(self.bandwidth_us),
            "bound_us": num(self.bound_us),
            "binding": self.binding,
            "steps": self.steps,
            "method": self.method,
            "exact": self.exact,
            "witness": list(self.witness),
            "latency_pair": None if self.latency_pair is None else list(self.latency_pair),
            "parts": {name: num(us) for name, us in self.parts},
        }


@dataclass(frozen=True)
class _Model:
    """Size-independent part of a bound: bandwidth parts in us per byte of ``size``."""

    latency_us: float
    latency_pair: tuple[int, int] | None
    steps: int
    per_byte: tuple[tuple[str, float, Onsets], ...]  # (name, us per byte, when the capacity starts)
    method: str
    exact: bool
    witness: tuple[int, ...]
    lanes: RootLanes | None = None  # broadcast and reduce: for ``lane_bound``


_MODELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def lower_bound(topology: Topology, collective: Collective, size: float, *, lane_latency: bool = True) -> Bounds:
    """``max(latency, bandwidth)`` lower bounds for one call of ``size`` bytes (see ``Bounds``).
    ``lane_latency``: a message holds its lane for its latency (the simulator's default; False
    for ``overlap_latency``, where the lane bound does not hold). Raises CollectiveError when
    the topology cannot deliver the collective at all."""
    if collective.n_ranks != topology.n_ranks:
        raise CollectiveError(
            f"collective {collective.name!r} has {collective.n_ranks} ranks but topology "
            f"{topology.name!r} has {topology.n_ranks}"
        )
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
        raise CollectiveError(f"size must be a positive number of bytes, got {size!r}")
    key = (collective.kind, collective.root) if collective.kind != "custom" else collective
    models = _MODELS.setdefault(topology, {})
    model = models.get(key)
    if model is None:
        model = models[key] = _model(topology, collective)
    parts = tuple((name, onset_time(coef * size, onsets)) for name, coef, onsets in model.per_byte)
    bandwidth = max((us for _, us in parts), default=0.0)
    method, exact = model.method, model.exact
    if model.lanes is not None and lane_latency:
        lanes = lane_bound(model.lanes, size, max(bandwidth, model.latency_us))
        if lanes > max(bandwidth, model.latency_us):
            parts += (("lanes", lanes),)
            bandwidth = lanes
            method, exact = method + "; raised by the root's lanes (a latency per message, docs/bounds.md)", False
    return Bounds(
        collective=collective.kind,
        n_ranks=collective.n_ranks,
        size=size,
        latency_us=model.latency_us,
        bandwidth_us=bandwidth,
        steps=model.steps,
        method=method,
        exact=exact,
        witness=model.witness,
        latency_pair=model.latency_pair,
        parts=parts,
    )


def _model(topology: Topology, collective: Collective) -> _Model:
    n = topology.n_ranks
    latency, pair, steps = latency_bound(topology, collective)
    if n < 2 or not needed_pairs_exist(collective):
        return _Model(latency, pair, steps, (), "none: nothing moves", True, ())
    kind = collective.kind
    root = collective.root
    per_byte: list[tuple[str, float, Onsets]] = []
    method, exact, witness = "", False, frozenset()
    lanes: RootLanes | None = None
    # 1 GB/s moves 1e3 bytes per us: x bytes over c GB/s take x / (1e3 c) us. Each part's
    # capacity starts carrying bytes only as the latency of a route over it has passed
    # (``onsets``): the first byte across a NIC lands a NIC's latency after the start.
    if kind in ("allgather", "reducescatter"):
        reverse = kind == "reducescatter"
        cut = cut_ratio(topology, "bandwidth", reverse=reverse)
        per_byte.append(("cut", _per_byte(cut.ratio) / n / 1e3,
                         far_side(topology, cut_onsets(topology, cut.witness, reverse), cut.witness)))
        method, exact, witness = "exact cut bound (max-flow); tight in the fluid limit (ForestColl)", True, cut.witness
        routed = routed_delivery(topology, reverse)
        if routed is not None and routed[0] > _per_byte(cut.ratio) * (1 + 1e-9):
            # the routes the flattened topology fixes carry less than the switches could
            per_byte.append(("routed", routed[0] / n / 1e3, routed[2]))
            method = ("routed delivery bound (an LP over the flattened routes; the cut bound assumes any "
                      "route through the switches)")
            exact, witness = False, routed[1]
    elif kind in ("gather", "scatter"):
        reverse = kind == "scatter"
        cut = cut_ratio(topology, "bandwidth", reverse=reverse, sinks=[root or 0])
        ends = {"origin": root or 0} if reverse else {"sink": root or 0}  # scatter starts at the root
        per_byte.append(("cut", _per_byte(cut.ratio) / n / 1e3, cut_onsets(topology, cut.witness, reverse, **ends)))
        method, exact, witness = "exact cut bound (max-flow to/from the root)", True, cut.witness
    elif kind in ("broadcast", "reduce"):
        reverse = kind == "reduce"
        mincut, witness = root_min_cut(topology, root or 0, reverse=reverse)
        ends = {"sink": root or 0} if reverse else {"origin": root or 0}  # reduce ends at the root
        per_byte.append(("cut", 1.0 / mincut / 1e3 if mincut > 0 else math.inf,
                         far_side(topology, cut_onsets(topology, witness, reverse, **ends), witness)))
        method, exact = "exact cut bound (min over ranks of the root's max-flow; Edmonds)", True
        lanes = root_lanes(topology, root or 0, reverse)
    elif kind == "allreduce":
        per_byte.extend(_allreduce_parts(topology))
        mincut, witness = global_min_cut(topology)
        per_byte.append(("cut", 1.0 / mincut / 1e3 if mincut > 0 else math.inf, cut_onsets(topology, witness, False)))
        method = "max(one-way gossip volume over ranks and nodes, minimum cut); not exact in general"
    elif kind == "alltoall":
        ratio, witness, enumerated = alltoall_cut(topology)
        # m = size / n bytes per ordered pair
        per_byte.append(("cut", ratio / n / 1e3, cut_onsets(topology, witness, False)))
        method = "product-demand cut bound, " + ("every cut enumerated" if enumerated else "candidate cuts")
        lp = concurrent_flow_time(topology)
        if lp is not None:
            per_byte.append(("lp", lp / n / 1e3, first_onset(topology)))
            method, exact = "concurrent-flow LP (HiGHS), exact fluid optimum", True
    if kind == "custom":
        # the built-in kinds' cut bounds above already cover every single rank's volume
        per_byte.extend(_singleton_parts(topology, collective))
    if not method:
        method = "per-rank volume (data a rank must send or receive)"
    if any(onsets and onsets[0][0] > 0 for _, _, onsets in per_byte):
        method += "; each cut's links counted from their routes' latency"
    binding = max(per_byte, key=lambda x: x[1])[0] if per_byte else ""
    if binding == "volume":
        exact = False
        witness = frozenset()
    return _Model(latency, pair, steps, tuple(per_byte), method, exact, tuple(sorted(witness)), lanes)


def _per_byte(ratio: Fraction | float) -> float:
    return float(ratio)


def _vertex_sets_capacity(topology: Topology, groups: list[set[int]]) -> tuple[float, Onsets]:
    """The least of the summed capacities leaving and entering the groups (each group's own),
    and the onsets of the links that carry it."""
    member = {}
    for g, vs in enumerate(groups):
        for x in vs:
            member[x] = g
    leaving = [link for link in topology.links if member.get(link.src) is not None
               and member.get(link.src) != member.get(link.dst)]
    entering = [link for link in topology.links if member.get(link.dst) is not None
                and member.get(link.src) != member.get(link.dst)]
    out = sum(link.capacity for link in leaving)
    inc = sum(link.capacity for link in entering)
    return (out, link_onsets(topology, leaving)) if out <= inc else (inc, link_onsets(topology, entering))


def _allreduce_parts(topology: Topology) -> list[tuple[str, float, Onsets]]:
    """One-way gossip volume: every element must be sent at least 2(k-1) times between k parts
    (the minimum number of one-way calls for everyone to learn everything), and a part can send
    only through the capacity leaving it (and receive through the capacity entering it).
    Parts: every rank alone; and every node (with its switches and NICs) when there are several.

    A switch that reduces (in-network reduction) sums contributions outside the parts, and the
    count fails: there every part sends its whole contribution at least once and receives the
    sum at least once, S each way, the bound that holds for any schedule the hardware can run
    (NVLS, SHARP). Node switches that reduce leave the count between nodes valid; a network
    switch that reduces replaces it too."""
    n = topology.n_ranks
    out: list[tuple[str, float, Onsets]] = []
    reduce_any = any(sw.reduce for sw in topology.switches)
    reduce_net = any(sw.reduce and sw.node is None for sw in topology.switches) and topology.n_nodes > 1
    worst, onsets = _vertex_sets_capacity(topology, [{r} for r in range(n)])
    if reduce_any:
        # a switch that sums what it forwards is outside every single rank: the gossip count no
        # longer holds, but every rank still sends its whole contribution and receives the sum
        out.append(("in-network", n / worst / 1e3 if worst > 0 else math.inf, onsets))
    else:
        out.append(("gossip", 2 * (n - 1) / worst / 1e3 if worst > 0 else math.inf, onsets))
    if topology.n_nodes > 1:
        groups = [set(rs) for rs in topology.node_ranks]
        for w, sw in enumerate(topology.switches):
            if sw.node is not None:
                groups[sw.node].add(n + w)
        worst, onsets = _vertex_sets_capacity(topology, groups)
        k = topology.n_nodes
        if reduce_net:  # the network sums: every node sends its contribution once and receives the sum
            out.append(("in-network-nodes", k / worst / 1e3 if worst > 0 else math.inf, onsets))
        else:  # sums are made inside nodes only: the gossip count holds between nodes
            out.append(("gossip-nodes", 2 * (k - 1) / worst / 1e3 if worst > 0 else math.inf, onsets))
    if topology.switches and n <= ROUTED_GOSSIP_RANKS and not reduce_any:
        # the sends travel the routes the flattened topology fixes: all of them together carry
        # no more than the LP over those routes allows (on dgx2:2 a GPU's PCIe path to its NIC
        # partner is in the links leaving it but in no route)
        node = topology.node_of
        for name, k, between in (("gossip-routed", n, lambda u, v: True),
                                 ("gossip-nodes-routed", topology.n_nodes, lambda u, v: node[u] != node[v])):
            if k < 2:
                continue
            found = routed_capacity(topology, [(u, v) for u in range(n) for v in range(n) if u != v and between(u, v)])
            if found is not None and found[0] > 0:
                out.append((name, 2 * (k - 1) / found[0] / 1e3, ((found[1], 1.0),)))
    return out


ROUTED_GOSSIP_RANKS = 128  # ranks up to which the gossip's routed capacity is an LP (n^2 pairs)


def _singleton_parts(topology: Topology, collective: Collective) -> list[tuple[str, float, Onsets]]:
    """What every rank must send (its chunks that only it holds and others need) and receive
    (one slot for every output slot it cannot fill locally), over its own links."""
    n = topology.n_ranks
    slots = max(collective.max_input_slots, collective.max_output_slots, 1)
    origins = collective.origins()
    held = [set(x) for x in collective.inputs]
    send = [0] * n
    recv = [0] * n
    shipped: set[int] = set()
    for r, outs in enumerate(collective.outputs):
        for need in outs:
            if not need <= held[r]:
                recv[r] += 1
            for c in need:
                ranks = {q for q, _ in origins[c]}
                if r not in ranks and len(ranks) == 1 and c not in shipped:
                    shipped.add(c)
                    send[next(iter(ranks))] += 1
    worst = 0.0
    for r in range(n):
        cap_out = topology.total_out_bandwidth(r)
        cap_in = sum(link.capacity for link in topology.in_links[r])
        for count, cap in ((send[r], cap_out), (recv[r], cap_in)):
            if count:
                worst = max(worst, count / slots / cap / 1e3 if cap > 0 else math.inf)
    return [("volume", worst, first_onset(topology))]
