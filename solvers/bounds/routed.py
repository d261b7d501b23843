"""Routed delivery: what the routes the flattened topology fixes can deliver.

The cut bound lets data take any path through the switches, but a transfer between two ranks
takes the route the flattened topology fixes for the pair (``Topology.routes_from``). Where a
physical link no route uses would relieve a cut (two DGX-2 GPUs reach each other through
their shared NIC's PCIe switch, but their transfers go through the NVSwitch), the routes
deliver less: in an allgather every rank r of a set R must receive the n - 1 parts it lacks,
each in some transfer into r, so R receives |R| (n - 1) parts at most as fast as the routes
into its ranks can carry together, C_in(R) = max sum of pair rates into R under every
physical link's capacity (an LP; sources anywhere, R's own ranks included). A reducescatter
rank must send its contribution to the n - 1 other parts (it may be summed on the way, but
only after it left the rank): the same out of R. Sets tried: every rank (one per orbit of
the symmetries) and the ranks one switch vertex links to (a NIC's GPUs, a node's).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.sparse import csr_matrix

from ccl.core.topology import Topology

from ..builders import symmetry
from .onsets import Onsets


def routed_delivery(topology: Topology, reverse: bool) -> tuple[float, frozenset[int], Onsets] | None:
    """(parts per GB/s, the set R attaining it, the onset of its routes) of the routed delivery
    bound (see the module docstring), or None without switches (every route is then its own link, which the
    cut bound already counts)."""
    if not topology.switches or topology.n_ranks < 2:
        return None
    n = topology.n_ranks
    candidates: list[frozenset[int]] = [frozenset([orbit[0]]) for orbit in symmetry.rank_orbits(topology)]
    first_node = topology.node_of[0] if topology.node_of else None
    for k, sw in enumerate(topology.switches):
        if first_node is not None and sw.node not in (None, first_node):
            continue  # identical nodes: the first node's switches stand for every node's
        w = n + k
        links = topology.in_links[w] if reverse else topology.out_links[w]
        ranks = frozenset((link.src if reverse else link.dst) for link in links) & frozenset(range(n))
        if len(ranks) >= 2 and ranks not in candidates:
            candidates.append(ranks)
    best: tuple[float, frozenset[int], Onsets] | None = None
    for R in candidates:
        pairs = [(u, v) for v in sorted(R) for u in range(n) if u != v] if not reverse else \
            [(u, v) for u in sorted(R) for v in range(n) if u != v]
        found = routed_capacity(topology, pairs)
        if found is None:
            continue
        capacity, onset = found
        ratio = len(R) * (n - 1) / capacity if capacity > 0 else math.inf
        if best is None or ratio > best[0]:
            best = (ratio, R, ((onset, 1.0),))
    return best


def routed_capacity(topology: Topology, pairs: list[tuple[int, int]]) -> tuple[float, float] | None:
    """The most GB/s the fixed routes of ``pairs`` of ranks can carry together under every
    physical link's capacity (an LP), and the least latency of those routes; None when the LP
    fails or no pair has a route."""
    from scipy.optimize import linprog  # slow to import: loaded when an LP is solved

    hops: dict[tuple[int, int], int] = {}
    rows: list[int] = []
    cols: list[int] = []
    onset = math.inf
    paths = [p for p in (topology.routes_from(u).get(v) for u, v in pairs) if p is not None]  # others relay
    for j, path in enumerate(paths):
        latency = 0.0
        for hop in zip(path, path[1:]):
            rows.append(hops.setdefault(hop, len(hops)))
            cols.append(j)
            latency += topology.link(*hop).latency  # type: ignore[union-attr]
        onset = min(onset, latency)
    if not hops:
        return None
    caps = np.array([topology.link(*hop).capacity for hop in hops], dtype=float)  # type: ignore[union-attr]
    A = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(hops), len(paths)))
    result = linprog(-np.ones(len(paths)), A_ub=A, b_ub=caps, bounds=(0, None), method="highs")
    if result.status != 0:
        return None
    return -float(result.fun) * (1 + 1e-9), onset  # a hair more capacity: the LP's tolerance stays sound
