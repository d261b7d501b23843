"""The packing of one topology and collective kind: rates, switch removal, trees (cached)."""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable
from fractions import Fraction

from ccl.core.errors import CollectiveError, InfeasibleError
from ccl.core.topology import Topology

from ..bounds.cuts import max_cut_ratio
from ..builders.symmetry import rank_orbits
from . import exchange
from .flows import Capacities, FlowGraph, capacities
from .phases import Packing, Phase
from .split import remove_switches
from .stitch import (
    TWO_HOP,
    busiest_time,
    node_topology,
    physical_time,
    rail_chains,
    second_entry,
    stitch,
)
from .torus import torus_trees
from .torus_rooted import rooted_torus_trees
from .trees import Tree, merge_equal, pack_shallow, pack_trees
from .twohop import two_hop_phase

KINDS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def plan(topology: Topology, kind: str, root: int | None,
         progress: Callable[[str], None] | None = None) -> Packing:
    """The packing with the best rate (``plans()[0]``)."""
    return plans(topology, kind, root, progress)[0]


def plans(topology: Topology, kind: str, root: int | None,
          progress: Callable[[str], None] | None = None, partial: list | None = None) -> list[Packing]:
    """The candidate packings, cached per topology: first, best rate first (stitched first on
    a tie), the stitched trees on identical nodes (``stitch``), for broadcast and reduce the
    rails (chains, and from 4 nodes binary trees) and the whole-graph packing (on one node up to
    ``ROOTED_FLAT_LIMIT`` vertices, on several up to ``FLAT_LIMIT``, or when no rail
    construction meets the bound; otherwise when
    nothing is stitched, or the stitched trees miss the bound on at most ``FLAT_LIMIT``
    vertices), and the two-hop trees of an LP
    (``twohop``: up to 16 ranks, every pair linked) unless the best of those meets the bound
    with trees two hops deep; then, for small messages, the heaviest
    tree per root of each multi-tree construction, the shallowest trees (up to
    ``SHALLOW_UP_TO`` ranks) and, for allreduce on identical nodes, the exchange between
    co-roots (``exchange``). A cost judge picks the one that runs fastest at a size.

    ``partial``: a list the candidates are appended to as they are made, for a caller that may
    abandon the planning (``ccl.core.interrupt.abandoning``) and use those made by then (the cache
    holds complete plans only)."""
    if kind not in KINDS:
        raise CollectiveError(f"packing implements {', '.join(KINDS)}, not {kind}")
    if topology.n_ranks < 2:
        raise CollectiveError("packing needs at least 2 ranks")
    cache = _CACHE.setdefault(topology, {})
    key = (kind, root)
    if key in cache:
        return cache[key]
    rooted = kind in ("broadcast", "reduce")
    r = (root or 0) if rooted else None
    want_up = kind in ("reducescatter", "allreduce", "reduce")
    want_down = kind in ("allgather", "allreduce", "broadcast")
    out: list[Packing] = [] if partial is None else partial
    up = _stitched_phase(topology, True, progress, r) if want_up else None
    down = _stitched_phase(topology, False, progress, r) if want_down else None
    if (up is not None or not want_up) and (down is not None or not want_down):
        out.append(Packing(kind, topology.n_ranks, r, down, up))
    elif not rooted:  # a torus of equal sides: one root's trees translated (``torus``)
        up = _torus_phase(topology, True) if want_up else None
        down = _torus_phase(topology, False) if want_down else None
        if (up is not None or not want_up) and (down is not None or not want_down):
            out.append(Packing(kind, topology.n_ranks, r, down, up))
    if rooted:  # on a torus of equal sides: the images of one shallow tree (``torus_rooted``)
        phase = _rooted_torus_phase(topology, want_up, r)
        if phase is not None:
            out.append(Packing(kind, topology.n_ranks, r, None if want_up else phase, phase if want_up else None))
    if rooted:  # chains along the rails (below ``CHAIN_NODES``); from 4 nodes also binary trees (a shorter pipeline)
        fans = (1,) if topology.n_nodes < 4 else (1, 2) if topology.n_nodes < CHAIN_NODES else (2,)
        for fan in fans:
            for shallow in (False, True):
                phase = _rail_phase(topology, want_up, r, progress, shallow, fan)
                if phase is not None and (not shallow or not out or
                                          phase.achieved <= out[-1].phases()[0].achieved * (1 + 1e-9)):
                    out.append(Packing(kind, topology.n_ranks, r, None if want_up else phase, phase if want_up else None))
        extra = []
        if 4 <= topology.n_nodes <= TWO_HOP_NODES:  # two NIC hops deep, the own part relayed in the root's node
            extra.append(_rail_phase(topology, want_up, r, progress, True, TWO_HOP, relay=True))
        if 2 <= topology.n_nodes <= TURNS_NODES:  # the shallow chains crossing between rails, in turns
            extra.append(_rail_phase(topology, want_up, r, progress, True, 1, RAIL_TURNS))
        for phase in extra:  # kept where their rate is the best so far
            if phase is not None and out and phase.achieved <= min(
                    p.phases()[0].achieved for p in out) * (1 + 1e-9):
                out.append(Packing(kind, topology.n_ranks, r, None if want_up else phase, phase if want_up else None))
    met = any(all(_meets(ph) for ph in p.phases()) for p in out)
    if not out or (rooted and (not met or topology.n_vertices <= (
            ROOTED_FLAT_LIMIT if topology.n_nodes <= 1 else FLAT_LIMIT))) or \
            (topology.n_vertices <= FLAT_LIMIT and not all(_meets(p) for p in out[0].phases())):
        up = _phase(topology, True, r, progress) if want_up else None
        down = _phase(topology, False, r, progress) if want_down else None
        out.append(Packing(kind, topology.n_ranks, r, down, up))
    out.sort(key=lambda p: sum(ph.achieved for ph in p.phases()))  # stable: stitched first on a tie
    best = out[0]
    if not all(_meets(ph) and _depth(ph) <= 2 for ph in best.phases()):
        roots = [r] if rooted else list(range(topology.n_ranks))
        ref = {ph.reverse: ph for ph in best.phases()}
        phases = {rev: two_hop_phase(topology, rev, roots, ref[rev].optimal, ref[rev].exact) for rev in ref}
        if all(ph is not None for ph in phases.values()):
            two = Packing(kind, topology.n_ranks, r, phases.get(False), phases.get(True))
            if _ratio(two) <= TWO_HOP_WITHIN * _ratio(best):  # else it can win at no size
                out.append(two)
                out.sort(key=lambda p: sum(ph.achieved for ph in p.phases()))
    for packing in list(out):  # for small messages: fewer trees, fewer messages
        if packing.trees_per_root() > 1 and packing.phases()[0].construction != "two-hop":
            out.append(Packing(kind, topology.n_ranks, r, *(None if ph is None else _one_tree(topology, ph)
                                                            for ph in (packing.down, packing.up))))
    if topology.n_ranks <= SHALLOW_UP_TO:
        up = _shallow(topology, True, r) if want_up else None
        down = _shallow(topology, False, r) if want_down else None
        if (up is not None or not want_up) and (down is not None or not want_down):
            out.append(Packing(kind, topology.n_ranks, r, down, up))
    if kind == "allreduce":
        swap = _exchange(topology, out[0])
        if swap is not None:
            out.append(swap)
    cache[key] = out
    return out


def _exchange(topology: Topology, reference: Packing) -> Packing | None:
    """The allreduce by exchange between co-roots (``exchange``) over the node's fewest-hop
    trees, on two or more identical nodes whose trees can be walked both ways; its rates
    measured on the physical links (the first phase with the exchange)."""
    node = node_topology(topology)
    if node is None or node.n_ranks < 2:
        return None
    down = _shallow(node, False, None)
    if down is None or any(node.flat_link(v, p) is None for t in down.trees for v, p in t.parent.items()):
        return None
    trees = exchange.node_trees(topology, {t.root: t for t in down.trees})
    ref = {ph.reverse: ph for ph in reference.phases()}
    phases = [Phase(reverse, tuple(trees), ref[reverse].optimal,
                    busiest_time(topology, exchange.hops(topology, trees, down=not reverse)), ref[reverse].exact,
                    "exchange") for reverse in (False, True)]
    return Packing("allreduce", topology.n_ranks, None, phases[0], phases[1], exchange=True)


def _one_tree(topology: Topology, phase: Phase) -> Phase:
    """The phase with only its heaviest tree per root (its rate measured on the physical links)."""
    keep = [max(trees, key=lambda t: t.weight) for _, trees in sorted(phase.by_root().items())]  # first on a tie
    return Phase(phase.reverse, tuple(keep), phase.optimal, physical_time(topology, keep, phase.reverse),
                 phase.exact, phase.construction + "-1")


SHALLOW_UP_TO = 128  # ranks up to which the shallowest trees are a candidate (latency-bound sizes)


def _shallow(topology: Topology, reverse: bool, root: int | None) -> Phase | None:
    """The shallowest trees: per root, fewest hops over the flattened links (then least
    latency, then smallest ranks), a star where every pair is linked; the least latency a tree
    can have. Their rate is measured on the physical links. None when a rank is unreachable."""
    flat = topology.flat()
    n = topology.n_ranks
    adjacent = flat.in_links if reverse else flat.out_links
    trees = []
    for r in ([root] if root is not None else range(n)):
        best = {r: (0, 0.0)}
        parent: dict[int, int] = {}
        order: list[int] = []
        heap = [(0, 0.0, r, r)]
        while heap:
            hops, lat, v, p = heapq.heappop(heap)
            if v in parent or (v == r and order):
                continue
            if v != r:
                parent[v] = p
            order.append(v)
            for link in adjacent[v]:
                w = link.src if reverse else link.dst
                key = (hops + 1, lat + link.latency)
                if w not in parent and w != r and key < best.get(w, (n + 1, 0.0)):
                    best[w] = key
                    heapq.heappush(heap, (*key, w, v))
        if len(order) < n:
            return None
        trees.append(Tree(r, 1, parent, order))
    caps, _, optimal, _, _ = _rate(topology, reverse, root)
    return Phase(reverse, tuple(trees), optimal, physical_time(topology, trees, reverse), caps.exact, "shallow")


TWO_HOP_WITHIN = 1.25  # two-hop trees kept when their rate is within this of the best construction's


def _ratio(packing: Packing) -> float:
    return max(ph.achieved / ph.optimal for ph in packing.phases())


def _depth(phase: Phase) -> int:
    return max((max(t.depth().values()) for t in phase.trees), default=0)


def _meets(phase: Phase) -> bool:
    return phase.achieved <= phase.optimal * (1 + 1e-9)


def _rate(topology: Topology, reverse: bool, root: int | None):
    """Integer capacities, the optimal time per byte and the integer rate (p, demand): every
    root's demand in units of capacity scaled by p."""
    n, V = topology.n_ranks, topology.n_vertices
    caps = capacities(topology, budget=max(2**12, 2**28 // n))
    if reverse:
        caps = caps.reversed()
    per_unit = 1.0 / (caps.unit * 1e3)  # us per byte through one capacity unit
    if root is None:
        targets = [orbit[0] for orbit in rank_orbits(topology)]
        lam, _ = max_cut_ratio(n, V, caps.caps, targets, list(range(n)))
        _check_finite(lam, topology)
        lam = Fraction(lam)
        p, q = lam.numerator, lam.denominator
        return caps, per_unit, float(lam) * per_unit, p, {r: q for r in range(n)}
    q = _rooted_rate(caps, root, V)
    if q == 0:
        raise InfeasibleError(f"topology {topology.name!r}: some rank is unreachable from rank {root}",
                              bound="connectivity")
    return caps, per_unit, per_unit / q, 1, {root: q}


def _phase(topology: Topology, reverse: bool, root: int | None,
           progress: Callable[[str], None] | None) -> Phase:
    """Trees of the whole graph: switches split off, then packed."""
    n, V = topology.n_ranks, topology.n_vertices
    caps, per_unit, optimal, p, demand = _rate(topology, reverse, root)
    scaled = {e: c * p for e, c in caps.caps.items()}
    need = sum(demand.values())
    if topology.switches:
        source = V
        fg = FlowGraph(V + 1, dict(scaled))
        for r, d in demand.items():
            fg.add(source, r, d)
        ranks_only = remove_switches(fg, n, source, need, progress)
    else:
        ranks_only = {e: c for e, c in scaled.items() if e[0] != e[1]}
    achieved = optimal
    if not _packable(n, ranks_only, demand):
        # the switches could not be split off completely: take the rate the rank graph has
        if root is None:
            lam2, _ = max_cut_ratio(n, n, ranks_only, list(range(n)), list(range(n)))
            _check_finite(lam2, topology)
            lam2 = Fraction(lam2)
            achieved = float(lam2 * p) * per_unit
            ranks_only = {e: c * lam2.numerator for e, c in ranks_only.items()}
            demand = {r: lam2.denominator for r in range(n)}
        else:
            q2 = _rooted_rate(Capacities(n, n, ranks_only, caps.unit, caps.exact), root, n)
            achieved = per_unit / q2 if q2 else float("inf")
            demand = {root: q2}
    trees = pack_trees(n, ranks_only, demand, progress)
    if not topology.switches and n <= LEVELS_RANKS:
        # a small rank graph packs in milliseconds: grown level by level too, the shallower
        # packing kept (the same rate; a pipeline's fill is its deepest tree's)
        levels = pack_trees(n, ranks_only, demand, progress, by_levels=True)
        if _depth_key(levels) < _depth_key(trees):
            trees = levels
        if root is not None:
            trees = _shallowest(n, ranks_only, root, demand[root], trees)
    if topology.switches:
        # An arc of the split graph is a path through switches, but a schedule's transfer
        # travels the route the flattened topology gives the pair (least latency), which may
        # load other links: the rate the schedule meets is the one on the physical links.
        achieved = max(achieved, physical_time(topology, trees, reverse))
    return Phase(reverse, tuple(trees), optimal, achieved, caps.exact)


LEVELS_RANKS = 64


SHALLOW_SIZE = 6000  # trees x arcs x levels up to which the depth-bounded MILP is tried (on small
# tori it finds trees about half as deep as the greedy packing's, which pipelines pay for; much
# larger models, amd8's many lanes among them, do not end in reasonable time)


def _shallowest(n: int, caps: dict[tuple[int, int], int], root: int, q: int, trees: list[Tree]) -> list[Tree]:
    """A rooted packing of ``q`` unit trees no deeper than needed: the depth-bounded MILP
    (``pack_shallow``) at each depth below the greedy packing's, least first from the root's
    eccentricity (no tree is shallower: the size limit goes to depths that can be met), on small
    graphs; ``trees`` when no shallower packing is found."""
    arcs = sum(1 for (a, b), c in caps.items() if c > 0 and a != b)
    deepest = _depth_key(trees)[0]
    for depth in range(max(2, _eccentricity(n, caps, root)), deepest):
        if q * arcs * depth > SHALLOW_SIZE:
            break
        found = pack_shallow(n, caps, root, q, depth)
        if found is not None:
            return found if _depth_key(found) < _depth_key(trees) else trees
    return trees


def _eccentricity(n: int, caps: dict[tuple[int, int], int], root: int) -> int:
    """Hops from ``root`` to the farthest rank over the arcs with capacity."""
    heads: dict[int, list[int]] = {}
    for (a, b), c in caps.items():
        if c > 0 and a != b:
            heads.setdefault(a, []).append(b)
    dist = {root: 0}
    frontier = [root]
    while frontier:
        nxt = []
        for a in frontier:
            for b in heads.get(a, ()):
                if b not in dist:
                    dist[b] = dist[a] + 1
                    nxt.append(b)
        frontier = nxt
    return max(dist.values())


def _depth_key(trees: list[Tree]) -> tuple[int, Fraction]:
    """Deepest tree, then the weighted mean depth."""
    depths = [(max(t.depth().values()), t.weight) for t in trees]
    return max(d for d, _ in depths), Fraction(sum(d * w for d, w in depths), sum(w for _, w in depths))


ROOTED_FLAT_LIMIT = 80  # vertices up to which broadcast and reduce on one node pack the whole graph
# (it wins there: no rails); on several nodes up to ``FLAT_LIMIT`` vertices, or when no rail
# construction meets the bound. Above that the rails were as fast at every size, and the
# whole-graph trees took most of the planning time (and were slower on the largest nodes); below
# it they can win by a little
RAIL_TURNS = 6  # crossing trees per part of the turned rail chains (``stitch.rail_chains``, at most
# one per local index): of 4, 6 and 8 turns, 6 was the fastest or close to it for broadcast and
# reduce on the multi-node machines tried, all faster than the plain rails
TURNS_NODES = 4  # nodes up to which they are planned: each turn adds trees, and judging them at
# large sizes costs several times the search's time without them
CHAIN_NODES = 8  # nodes from which the rails' plain chains (as many NIC hops as nodes) are not
# planned: the binary rail trees carry the same load log2 deep, and judging the chains took the
# search's budget while they were slower than the trees
TWO_HOP_NODES = 16  # nodes up to which the rail trees two NIC hops deep are planned (from 4: on
# fewer they are the chain): every relay NIC sends a stage to each other node, a message each,
# and there are a part's node count of trees to judge; up to it they beat the binary rail trees
# and the turns
FLAT_LIMIT = 48  # vertices up to which the whole graph is packed too when stitching misses the bound
# (dgx-h100:2 has 43; dgx2:2 has 51, takes far longer to pack per phase, and its packed trees,
# routed as the flattened topology routes them, are slower than the stitched ones)


def _stitched_phase(topology: Topology, reverse: bool, progress: Callable[[str], None] | None,
                    root: int | None = None) -> Phase | None:
    """Trees stitched from one node's packing and rail stars (``stitch``), or None when the
    nodes differ or a node's ranks are not connected inside it. With a ``root`` (broadcast,
    reduce): its trees alone, from the node's packing for its local index (one NIC message per
    other node: few messages, for small sizes)."""
    node = node_topology(topology)
    if node is None:
        return None
    intra = None
    if node.n_ranks > 1:
        if root is None:
            kind, local = ("reducescatter" if reverse else "allgather"), None
        else:
            kind, local = ("reduce" if reverse else "broadcast"), topology.local_index(root)
        try:
            inside = plan(node, kind, local, progress).phases()[0]
        except InfeasibleError:
            return None
        intra = list(inside.trees)
    caps, _, optimal, _, _ = _rate(topology, reverse, root)
    best = None
    for grouped in (False, True):  # rail stars; stars of stars by leaf (an oversubscribed spine)
        trees = stitch(topology, intra, grouped, root)
        if trees is not None:
            achieved = physical_time(topology, trees, reverse)
            if best is None or achieved < best[0] * (1 - 1e-9):
                best = (achieved, trees)
    if best is None:
        return None
    if root is None and best[0] > optimal * (1 + 1e-9) and node.n_ranks > 2:
        best = _second_entries(topology, best, reverse)
    return Phase(reverse, tuple(best[1]), optimal, best[0], caps.exact, "stitched")


SECOND_SCALE = 64  # the share of a part entering a node twice, in 64ths


def _second_entries(topology: Topology, best: tuple[float, list[Tree]], reverse: bool) -> tuple[float, list[Tree]]:
    """The stitched trees with the share of every part that enters each other node a second
    time (``stitch.second_entry``) that runs fastest on the physical links, for the partner
    offsets 1 and half a node; ``best`` unless that is ``SECOND_GAIN`` faster (twice the trees
    cost more to judge and pipeline: a small gain in rate can run slower). The busiest link's time
    is convex in the share (a maximum of linear loads), so a ternary search over 64ths finds it."""
    m = len(topology.node_ranks[0])
    plain, start = best[1], best[0]
    for offset in sorted({1, m // 2}):
        def time_at(share: int, offset=offset) -> tuple[float, list[Tree]] | None:
            trees = second_entry(topology, plain, offset, share, SECOND_SCALE)
            return None if trees is None else (physical_time(topology, trees, reverse), trees)

        lo, hi = 0, SECOND_SCALE
        if time_at(1) is None:
            continue
        while hi - lo > 2:
            m1, m2 = lo + (hi - lo) // 3, hi - (hi - lo) // 3
            if time_at(m1)[0] <= time_at(m2)[0]:  # type: ignore[index]
                hi = m2
            else:
                lo = m1
        for share in range(max(lo, 1), min(hi, SECOND_SCALE - 1) + 1):
            found = time_at(share)
            if found is not None and found[0] < best[0] * (1 - 1e-9):
                best = (found[0], merge_equal(found[1]))
    return best if best[0] * (1 + SECOND_GAIN) <= start else (start, plain)


SECOND_GAIN = 0.01


def _torus_phase(topology: Topology, reverse: bool) -> Phase | None:
    """Every root's 2k translated trees on a k-dimensional torus of equal sides (``torus``), or
    None when the ranks are no such torus."""
    trees = torus_trees(topology)
    if trees is None:
        return None
    if reverse and any(topology.flat_link(v, p) is None for t in trees for v, p in t.parent.items()):
        return None
    caps, _, optimal, _, _ = _rate(topology, reverse, None)
    return Phase(reverse, tuple(trees), optimal, physical_time(topology, trees, reverse), caps.exact, "torus")


def _rooted_torus_phase(topology: Topology, reverse: bool, root: int) -> Phase | None:
    """The root's 2k trees on a k-dimensional torus of equal sides (``torus_rooted``), or None
    when the ranks are no such torus (or too many to search)."""
    trees = rooted_torus_trees(topology, root, reverse)
    if trees is None:
        return None
    caps, _, optimal, _, _ = _rate(topology, reverse, root)
    return Phase(reverse, tuple(trees), optimal, physical_time(topology, trees, reverse), caps.exact, "torus")


def _rail_phase(topology: Topology, reverse: bool, root: int, progress: Callable[[str], None] | None,
                shallow: bool = False, fan: int = 1, turns: int = 1, relay: bool = False) -> Phase | None:
    """Rooted trees over every rail (``stitch.rail_chains``): part i of the data along rail i,
    inside each node down the node's own trees of local root i: its packing (rate-optimal for
    one root: a chain on a switch), or with ``shallow`` its fewest-hop tree (a star on a switch:
    all rails together load a rank's port no more, and the pipeline is short; the caller keeps
    it when its rate is as good); then the root's own part goes round its rail and comes back
    to its node-mates over theirs (``rail_chains(around=True)``: the root's port feeds only the
    other local roots). Along each rail a chain of the nodes, or with ``fan`` 2 two binary
    trees, or with ``fan`` ``TWO_HOP`` trees two NIC hops deep (``stitch.rail_trees``); with
    ``relay`` (and ``shallow``) the root's own part reaches its node-mates through each of them
    in turn instead of round its rail (``rail_chains(relay=True)``). None unless the nodes are
    identical (and connected inside)."""
    node = node_topology(topology)
    if node is None or (shallow and node.n_ranks == 1):
        return None
    intra: dict[int, list[Tree]] = {}
    if node.n_ranks > 1:
        kind = "reduce" if reverse else "broadcast"
        try:
            for i in range(node.n_ranks):
                found = _shallow(node, reverse, i) if shallow else plan(node, kind, i, progress).phases()[0]
                if found is None:
                    return None
                intra[i] = list(found.trees)
        except InfeasibleError:
            return None
    turns = min(turns, node.n_ranks)  # one per local index a part can cross to
    trees = rail_chains(topology, intra, root, around=shallow and not relay, fan=fan, turns=turns, relay=relay)
    if trees is None:
        return None
    caps, _, optimal, _, _ = _rate(topology, reverse, root)
    name = ("rails-relay" if relay else "rails-shallow" if shallow else "rails") + (
        "-two-hop" if fan == TWO_HOP else "-trees" if fan > 1 else "") + ("-turns" if turns > 1 else "")
    return Phase(reverse, tuple(trees), optimal, physical_time(topology, trees, reverse), caps.exact, name, turns)


def _check_finite(lam, topology: Topology) -> None:
    if not isinstance(lam, Fraction) and lam == float("inf"):
        raise InfeasibleError(f"topology {topology.name!r} is not strongly connected between its ranks",
                              bound="connectivity")


def _rooted_rate(caps: Capacities, root: int, V: int) -> int:
    fg = FlowGraph(V, dict(caps.caps))
    return min(fg.max_flow(root, t) for t in range(caps.n_ranks) if t != root)


def _packable(n: int, caps: dict[tuple[int, int], int], demand: dict[int, int]) -> bool:
    fg = FlowGraph(n + 1, dict(caps))
    for r, d in demand.items():
        fg.add(n, r, d)
    need = sum(demand.values())
    return all(fg.max_flow(n, v) >= need for v in range(n))
