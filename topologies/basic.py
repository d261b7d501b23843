"""Parametric families: ring, line, fully connected, star, switch, torus, hypercube.

Links are bidirectional unless stated; ``bandwidth`` is GB/s per direction, ``latency`` is the
rank-to-rank latency in microseconds (split evenly over the two hops through a switch vertex).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from ccl.errors import TopologyError
from ccl.topology import Link, Switch, Topology, bidirectional

from .hardware import GENERIC_BW, GENERIC_LAT


def _need_ranks(name: str, n: int, least: int = 2) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < least:
        raise TopologyError(f"{name} needs an integer number of ranks >= {least}, got {n!r}")


def ring(n: int, bandwidth: float = GENERIC_BW, latency: float = GENERIC_LAT, *, directed: bool = False) -> Topology:
    """n ranks in a cycle, i <-> i+1 mod n (only i -> i+1 when ``directed``)."""
    _need_ranks("ring", n)
    pairs = {(i, (i + 1) % n) for i in range(n)}
    if directed:
        links = [Link(a, b, bandwidth, latency) for a, b in sorted(pairs)]
    else:
        undirected = sorted({(min(a, b), max(a, b)) for a, b in pairs})
        links = bidirectional(undirected, bandwidth, latency)
    return Topology(f"ring{n}" if not directed else f"uniring{n}", n, tuple(links))


def line(n: int, bandwidth: float = GENERIC_BW, latency: float = GENERIC_LAT) -> Topology:
    """n ranks in a chain, i <-> i+1."""
    _need_ranks("line", n)
    return Topology(f"line{n}", n, tuple(bidirectional([(i, i + 1) for i in range(n - 1)], bandwidth, latency)))


def fully_connected(n: int, bandwidth: float = GENERIC_BW, latency: float = GENERIC_LAT) -> Topology:
    """A direct link between every pair of ranks."""
    _need_ranks("fully-connected", n)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    return Topology(f"fully-connected{n}", n, tuple(bidirectional(pairs, bandwidth, latency)))


def star(n: int, bandwidth: float = GENERIC_BW, latency: float = GENERIC_LAT) -> Topology:
    """Hub and spokes: rank 0 is linked to every other rank; the others only to rank 0."""
    _need_ranks("star", n)
    return Topology(f"star{n}", n, tuple(bidirectional([(0, i) for i in range(1, n)], bandwidth, latency)))


def switch(n: int, bandwidth: float = GENERIC_BW, latency: float = GENERIC_LAT) -> Topology:
    """One crossbar switch vertex (NVSwitch-like): every rank has one port of ``bandwidth``."""
    _need_ranks("switch", n)
    sw = n
    links = []
    for r in range(n):
        links.append(Link(r, sw, bandwidth, latency / 2))
        links.append(Link(sw, r, bandwidth, latency / 2))
    return Topology(f"switch{n}", n, tuple(links), (Switch("switch"),))


def torus(dims: Sequence[int], bandwidth: float = GENERIC_BW, latency: float = GENERIC_LAT) -> Topology:
    """A 2D or 3D (any D) torus with wrap-around links; rank = row-major coordinate index.
    A dimension of size 2 has a single link between the two (the wrap would duplicate it)."""
    dims = tuple(dims)
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 2 for d in dims):
        raise TopologyError(f"torus dimensions must be integers >= 2, got {'x'.join(map(str, dims)) or 'none'}")
    n = prod(dims)
    strides = [prod(dims[k + 1:]) for k in range(len(dims))]
    pairs: set[tuple[int, int]] = set()
    for r in range(n):
        coord = [(r // strides[k]) % dims[k] for k in range(len(dims))]
        for k, d in enumerate(dims):
            nxt = list(coord)
            nxt[k] = (coord[k] + 1) % d
            q = sum(c * s for c, s in zip(nxt, strides))
            pairs.add((min(r, q), max(r, q)))
    name = "torus" + "x".join(map(str, dims))
    return Topology(name, n, tuple(bidirectional(sorted(pairs), bandwidth, latency)))


def hypercube(n: int, bandwidth: float = GENERIC_BW, latency: float = GENERIC_LAT) -> Topology:
    """n = 2^d ranks; r <-> r xor 2^k for every dimension k."""
    _need_ranks("hypercube", n)
    if n & (n - 1):
        raise TopologyError(f"hypercube needs a power-of-two number of ranks, got {n}")
    pairs = [(r, r ^ (1 << k)) for r in range(n) for k in range(n.bit_length() - 1) if r < r ^ (1 << k)]
    return Topology(f"hypercube{n}", n, tuple(bidirectional(pairs, bandwidth, latency)))


def from_lanes(name: str, lanes: Sequence[Sequence[int]], bandwidth: float, latency: float) -> Topology:
    """A single-node topology from a symmetric matrix of lane counts (0 = no link)."""
    n = len(lanes)
    links = []
    for a in range(n):
        if len(lanes[a]) != n:
            raise TopologyError(f"{name}: lane matrix row {a} has {len(lanes[a])} entries, expected {n}")
        for b in range(n):
            k = lanes[a][b]
            if a == b and k:
                raise TopologyError(f"{name}: lane matrix links rank {a} to itself")
            if k:
                links.append(Link(a, b, bandwidth, latency, k))
    return Topology(name, n, tuple(links))
