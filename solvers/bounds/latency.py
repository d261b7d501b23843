"""Latency bounds: alpha-weighted shortest paths between the ranks that must exchange data.

Distances run over the flattened rank graph (``Topology.flat()``), whose links through switch
and NIC vertices carry the latency of their whole path; relaying through ranks is allowed. The
hop bound (fewest links) comes out of the same search. ``latency_bound`` returns the worst
needed pair's distance, the pair, and the hop bound; see ``call.lower_bound``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from ccl.core.collective import Collective
from ccl.core.errors import CollectiveError
from ccl.core.topology import Topology


def _flat_matrices(topology: Topology) -> tuple[csr_matrix, csr_matrix]:
    """Latency and hop weights of the flattened rank graph."""
    flat = topology.flat()
    n = topology.n_ranks
    rows = np.array([link.src for link in flat.links], dtype=np.int64)
    cols = np.array([link.dst for link in flat.links], dtype=np.int64)
    lat = np.array([link.latency for link in flat.links], dtype=float)
    return (csr_matrix((lat, (rows, cols)), shape=(n, n)),
            csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)))


def latency_bound(topology: Topology, collective: Collective) -> tuple[float, tuple[int, int] | None, int]:
    """(alpha-weighted distance of the farthest needed pair, that pair, hop bound)."""
    n = topology.n_ranks
    kind = collective.kind
    if n < 2:
        return 0.0, None, 0
    lat_graph, hop_graph = _flat_matrices(topology)
    root = collective.root or 0
    if kind in ("allgather", "reducescatter", "allreduce", "alltoall"):
        worst, pair, hops = -1.0, None, 0
        for lo in range(0, n, 256):
            sources = list(range(lo, min(n, lo + 256)))
            d = dijkstra(lat_graph, indices=sources)
            h = dijkstra(hop_graph, indices=sources, unweighted=True)
            np.fill_diagonal(d[:, lo:lo + len(sources)], -1.0)
            np.fill_diagonal(h[:, lo:lo + len(sources)], -1.0)
            i, j = np.unravel_index(int(np.argmax(d)), d.shape)
            if d[i, j] > worst:
                worst, pair = float(d[i, j]), (sources[i], int(j))
            hops = max(hops, float(h.max()))
        if not math.isfinite(worst) or not math.isfinite(hops):
            raise CollectiveError(f"topology {topology.name!r} is not strongly connected: some rank can never "
                                  f"get the data {kind} needs")
        return worst, pair, int(hops)
    if kind in ("broadcast", "scatter", "reduce", "gather"):
        outward = kind in ("broadcast", "scatter")
        graph_l, graph_h = (lat_graph, hop_graph) if outward else (lat_graph.T.tocsr(), hop_graph.T.tocsr())
        d = dijkstra(graph_l, indices=[root])[0]
        h = dijkstra(graph_h, indices=[root], unweighted=True)[0]
        if not np.all(np.isfinite(d)):
            far = int(np.flatnonzero(~np.isfinite(d))[0])
            raise CollectiveError(f"rank {far} cannot {'receive from' if outward else 'reach'} root {root} "
                                  f"on topology {topology.name!r}")
        j = int(np.argmax(d))
        pair = (root, j) if outward else (j, root)
        return float(d[j]), pair, int(h.max())
    # custom: the needed pairs, nearest origin of every chunk
    origins = collective.origins()
    d = dijkstra(lat_graph)
    h = dijkstra(hop_graph, unweighted=True)
    worst, pair, hops = 0.0, None, 0.0
    for r, slots in enumerate(collective.outputs):
        for need in slots:
            for c in need:
                ranks = {q for q, _ in origins[c]}
                if r in ranks:
                    continue
                best = min(ranks, key=lambda q: d[q, r])
                if not math.isfinite(d[best, r]):
                    raise CollectiveError(f"rank {r} needs {collective.describe_chunk(c)} but topology "
                                          f"{topology.name!r} has no path to it")
                if d[best, r] > worst or pair is None:
                    worst, pair = float(d[best, r]), (best, r)
                hops = max(hops, min(h[q, r] for q in ranks))
    return worst, pair, int(hops)
