"""Symmetry breaking that keeps the search exact.

A symmetry is a permutation of ranks (an automorphism of the flattened topology: links with
their lanes, shared limits with theirs) together with a permutation of chunks, such that origins,
destinations and the ranks each chunk may visit map onto each other. It maps schedules to
schedules with the same steps and rounds, so restricting the search to one schedule per orbit
changes no answer.

The representative is the lex-leader: with every solver variable of a vector X in one fixed
order, keep only schedules with X <=lex g(X) for the symmetries g used. The lex-smallest
schedule of each orbit satisfies all of them at once (for any subset of the group and for any
prefix of X), so feasibility is unchanged. Two kinds of symmetry are used:

* interchangeable chunks (same origins, destinations and allowed ranks: the C pieces of one
  rank's data after ``chunk_up(C)``) - for chunks a < b this is vec(a) <=lex vec(b), the
  classic ordering of interchangeable rows;
* topology automorphisms under which the collective is invariant (DGX-1 has 4 with its lanes;
  rings, tori and hypercubes many), each compared on a prefix of X.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from itertools import islice

import networkx as nx

from .problems import Network

MAX_AUTOMORPHISMS = 48


def automorphisms(network: Network, limit: int = MAX_AUTOMORPHISMS) -> list[tuple[int, ...]]:
    """Non-identity rank permutations preserving links (with lanes) and shared limits (with
    lanes), at most ``limit`` of them (any subset of the group keeps the search exact)."""
    n = network.n_ranks
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for a, b, lanes in network.links:
        graph.add_edge(a, b, lanes=lanes)
    limits = {(frozenset(network.links[i][:2] for i in idx), lanes) for _, idx, lanes in network.limits}
    matcher = nx.algorithms.isomorphism.DiGraphMatcher(
        graph, graph, edge_match=lambda x, y: x["lanes"] == y["lanes"]
    )
    out: list[tuple[int, ...]] = []
    for mapping in islice(matcher.isomorphisms_iter(), 4 * limit):
        perm = tuple(mapping[r] for r in range(n))
        if perm == tuple(range(n)):
            continue
        if limits:
            image = {(frozenset((perm[a], perm[b]) for a, b in pairs), lanes) for pairs, lanes in limits}
            if image != limits:
                continue
        out.append(perm)
        if len(out) >= limit:
            break
    return sorted(out)


def chunk_permutation(
    perm: Sequence[int], signature: Mapping[int, tuple[Hashable, ...]]
) -> dict[int, int] | None:
    """The chunk map that goes with a rank permutation, or None when the collective is not
    invariant under it. ``signature[c]`` is a tuple of rank sets (origins, destinations, ...);
    chunk c maps to a chunk whose signature is the image of c's. Chunks with equal signatures are
    paired in id order."""
    classes: dict[tuple, list[int]] = {}
    for c in sorted(signature):
        classes.setdefault(signature[c], []).append(c)
    out: dict[int, int] = {}
    for sig, members in classes.items():
        image = tuple(frozenset(perm[r] for r in part) for part in sig)
        targets = classes.get(image)
        if targets is None or len(targets) != len(members):
            return None
        out.update(zip(members, targets))
    return out


def interchangeable(signature: Mapping[int, tuple[Hashable, ...]]) -> list[list[int]]:
    """Classes (of two or more) of chunks with the same signature, in id order."""
    classes: dict[tuple, list[int]] = {}
    for c in sorted(signature):
        classes.setdefault(signature[c], []).append(c)
    return [members for members in classes.values() if len(members) > 1]
