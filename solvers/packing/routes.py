"""Gather and scatter over routed paths: single-commodity flows from (or to) the root.

Scatter sends rank r its own piece from the root; gather brings every rank's piece to the
root. The pieces differ, but they all start (scatter) or end (gather) at one vertex, so the
traffic is a single commodity: a flow from the root to a super sink fed by every other rank
with its piece's demand, and any decomposition of that flow into paths says which fraction
of which piece travels which way (the path ends at the rank whose piece it carries).

1. Rate. The least time per byte of a piece is the cut ratio ``max_S |S ∩ ranks| / cap(S)``
   over vertex sets S missing the root (switches included): S's ranks must receive their
   pieces through the links into S (scatter), or send them out of S (gather). Exact: a
   Fraction p/q of integer capacity units (``solvers.bounds.cuts.max_cut_ratio``), and by the
   max-flow min-cut theorem a flow meeting it exists: capacities scaled by p, every rank
   demands q units.
2. Paths (``flow_paths``): the maximum flow, decomposed into root-to-rank paths (cycles
   cancelled), switch vertices dropped: consecutive ranks of a path exchange directly, routed
   as the flattened topology routes the pair. The rate is measured on the physical links as
   routed (``physical_time``), so a route that leaves the flow's switch for another is
   reported as it runs. A second construction, ``direct``, sends every piece straight between
   the root and its rank (fewest messages, for small sizes).
3. Schedule (``build``): every piece is cut into slots, shared among its paths in proportion
   to their weights, and pipelined along them in stages: stage g crosses hop h at step g + h.
   Relays keep what they pass on in scratch (slot ``piece * slots + j``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from ccl.core.algorithm import Algorithm
from ccl.core.errors import CollectiveError, InfeasibleError
from ccl.core.problem import Problem
from ccl.core.topology import Topology

from ..bounds.cuts import max_cut_ratio
from ..builders.common import builder
from .flows import INT32, capacities
from .stages import down_stages, slot_runs, slot_shares, up_stages
from .stitch import busiest_time

KINDS = ("gather", "scatter")


@dataclass(frozen=True)
class Route:
    """``weight`` units of rank ``piece``'s piece travel the ranks ``hops`` in data order
    (scatter: root ... piece; gather: piece ... root)."""

    piece: int
    weight: int
    hops: tuple[int, ...]


@dataclass(frozen=True)
class Routing:
    kind: str
    n_ranks: int
    root: int
    routes: tuple[Route, ...]
    optimal: float  # microseconds per byte of one piece, the cut bound's
    achieved: float  # the routes', on the physical links
    exact: bool
    construction: str  # "flow" or "direct"

    def routes_per_piece(self) -> int:
        return max(Counter(route.piece for route in self.routes).values(), default=1)

    def by_piece(self) -> dict[int, list[Route]]:
        out: dict[int, list[Route]] = {}
        for route in self.routes:
            out.setdefault(route.piece, []).append(route)
        return out

    def details(self) -> dict:
        return {
            "routes": len(self.routes),
            "routes_per_piece": self.routes_per_piece(),
            "max_hops": max((len(r.hops) - 1 for r in self.routes), default=0),
            "optimal_us_per_MB": round(self.optimal * 1e6, 6),
            "achieved_us_per_MB": round(self.achieved * 1e6, 6),
            "meets_bound": self.achieved <= self.optimal * (1 + 1e-9),
            "exact_capacities": self.exact,
            "construction": self.construction,
        }


def plans(topology: Topology, kind: str, root: int) -> list[Routing]:
    """The flow routes (best rate) and the direct ones, best rate first (flow first on a tie)."""
    if kind not in KINDS:
        raise CollectiveError(f"routes implement {', '.join(KINDS)}, not {kind}")
    n = topology.n_ranks
    if n < 2:
        raise CollectiveError("packing needs at least 2 ranks")
    cache = topology._cache.setdefault("packing-routes", {})
    if (kind, root) in cache:
        return cache[(kind, root)]
    gather = kind == "gather"
    caps = capacities(topology, budget=max(2**12, 2**28 // n))
    # the cut graph: S sends its pieces out (gather), or receives them through links into S
    # (scatter: out of S on the reversed graph); flows run the other way, from the root
    cut_caps = caps if gather else caps.reversed()
    per_unit = 1.0 / (caps.unit * 1e3)
    lam, _ = max_cut_ratio(n, topology.n_vertices, cut_caps.caps, [root], [root])
    if not isinstance(lam, Fraction):
        raise InfeasibleError(f"topology {topology.name!r}: some rank cannot "
                              f"{'reach' if gather else 'be reached from'} rank {root}", bound="connectivity")
    optimal = float(lam) * per_unit
    flow_caps = cut_caps.reversed().caps
    paths = flow_paths(n, topology.n_vertices, flow_caps, root, lam.numerator, lam.denominator)
    routes = [Route(piece, w, tuple(reversed(p)) if gather else p) for piece, w, p in paths]
    direct = [Route(r, 1, (r, root) if gather else (root, r)) for r in range(n) if r != root]
    out = [Routing(kind, n, root, tuple(rs), optimal, physical_time(topology, rs), caps.exact, name)
           for name, rs in (("flow", routes), ("direct", direct))]
    out.sort(key=lambda r: r.achieved)  # stable: flow first on a tie
    cache[(kind, root)] = out
    return out


def flow_paths(n: int, V: int, caps: dict[tuple[int, int], int], root: int, p: int,
               q: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """(piece, units, ranks from the root to the piece's rank) paths of a flow that carries
    q units from ``root`` to every other rank over capacities scaled by p; switch vertices
    (>= n) are dropped from the paths. Raises InfeasibleError when no such flow exists."""
    sink = V
    rows = [a for (a, b), c in caps.items() if c > 0 and a != b]
    cols = [b for (a, b), c in caps.items() if c > 0 and a != b]
    data = [c * p for (a, b), c in caps.items() if c > 0 and a != b]
    for r in range(n):
        if r != root:
            rows.append(r)
            cols.append(sink)
            data.append(q)
    graph = csr_matrix((np.minimum(np.array(data, dtype=np.int64), INT32 - 1).astype(np.int32),
                        (np.array(rows), np.array(cols))), shape=(V + 1, V + 1))
    result = maximum_flow(graph, root, sink)
    if int(result.flow_value) < (n - 1) * q:
        raise InfeasibleError("the root's flow falls short of the cut rate", bound="cut")
    flow = result.flow.tocoo()
    out_arcs: dict[int, dict[int, int]] = {}
    for a, b, f in zip(flow.row.tolist(), flow.col.tolist(), flow.data.tolist()):
        if f > 0:
            out_arcs.setdefault(a, {})[b] = out_arcs.get(a, {}).get(b, 0) + int(f)
    paths: list[tuple[int, int, tuple[int, ...]]] = []
    while out_arcs.get(root):
        walk = [root]
        where = {root: 0}
        while walk[-1] != sink and walk[-1] in out_arcs:  # (the root may be left with none
            u = walk[-1]  # after a circulation through it is cancelled)
            v = min(out_arcs[u])  # deterministic: the smallest vertex with flow left
            if v in where:  # a cycle: cancel it and walk on from its start
                cycle = walk[where[v]:] + [v]
                _subtract(out_arcs, cycle, min(out_arcs[a][b] for a, b in zip(cycle, cycle[1:])))
                for w in walk[where[v] + 1:]:
                    del where[w]
                walk = walk[: where[v] + 1]
                continue
            where[v] = len(walk)
            walk.append(v)
        if walk[-1] != sink:
            continue
        amount = min(out_arcs[a][b] for a, b in zip(walk, walk[1:]))
        _subtract(out_arcs, walk, amount)
        ranks = tuple(v for v in walk[:-1] if v < n)
        paths.append((ranks[-1], amount, ranks))
    merged: dict[tuple[int, tuple[int, ...]], int] = {}
    for piece, amount, ranks in paths:
        merged[(piece, ranks)] = merged.get((piece, ranks), 0) + amount
    return sorted(((piece, w, ranks) for (piece, ranks), w in merged.items()), key=lambda x: (x[0], -x[1], x[2]))


def _subtract(out_arcs: dict[int, dict[int, int]], walk: list[int], amount: int) -> None:
    for a, b in zip(walk, walk[1:]):
        left = out_arcs[a][b] - amount
        if left > 0:
            out_arcs[a][b] = left
        else:
            del out_arcs[a][b]
            if not out_arcs[a]:
                del out_arcs[a]


def physical_time(topology: Topology, routes: list[Route]) -> float:
    """Microseconds per byte of one piece on the busiest physical link or shared limit, every
    piece split over its routes by weight, each hop routed as a schedule's transfer is."""
    total: dict[int, int] = {}
    for route in routes:
        total[route.piece] = total.get(route.piece, 0) + route.weight
    return busiest_time(topology, [((a, b), route.weight / total[route.piece])
                                   for route in routes for a, b in zip(route.hops, route.hops[1:])])


def transfers_per_slot(routing: Routing) -> int:
    """Transfers one slot of every piece costs along all its routes (an upper bound)."""
    return sum(len(r.hops) - 1 for r in routing.routes)


def build(problem: Problem, routing: Routing, slots: int, stages: int, taper: float = 1.0) -> Algorithm:
    """Every piece cut into ``slots`` slots, shared among its routes by weight, pipelined along
    them: stage g crosses hop h at logical step g + h (gather's stages grow, the time reverse of
    scatter's shrinking ones)."""
    C = slots
    root = routing.root
    gather = routing.kind == "gather"
    b, _ = builder(problem, C, "packing", "packing")
    shape = up_stages if gather else down_stages

    def loc(rank: int, piece: int, j: int) -> tuple[str, int]:
        if gather:
            if rank == piece:
                return ("input", j)
            return ("output", piece * C + j) if rank == root else ("scratch", piece * C + j)
        if rank == root:
            return ("input", piece * C + j)
        return ("output", j) if rank == piece else ("scratch", piece * C + j)

    longest = max(len(r.hops) - 1 for r in routing.routes)
    for piece, routes in sorted(routing.by_piece().items()):
        offset = 0
        for route, share in zip(routes, slot_shares(routes, C)):  # type: ignore[arg-type]
            offsets = list(range(offset, offset + share))
            offset += share
            if not offsets:
                continue
            for j, count, g in slot_runs(list(zip(offsets, shape(len(offsets), stages, taper)))):
                # scatter: every route ends with the longest (the time reverse of gather's
                # start together), so the root serves the relayed pieces first
                first = g if gather else g + longest - (len(route.hops) - 1)
                for h, (src, dst) in enumerate(zip(route.hops, route.hops[1:])):
                    b.move_run(first + h, src, loc(src, piece, j), dst, loc(dst, piece, j), count, "copy")
    return b.build()
