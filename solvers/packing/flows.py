"""Integer capacity graphs and the maximum flows the packing solver asks about.

The vertex view of a topology (ranks, then switch vertices) with integer capacities: each
link's capacity is a whole number of one unit (the greatest common divisor of the
capacities when they are whole multiples of 1e-6 GB/s; otherwise a unit small enough that
rounding every capacity *down* loses little: a packing may never use more than a link has).
A super source ``s`` (the vertex after the last) feeds the roots.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from ccl.core.topology import Topology

from ..bounds.cuts import integer_capacities

INT32 = 2**31 - 1


@dataclass(frozen=True)
class Capacities:
    """Integer capacities of the vertex graph: ``caps[(a, b)]`` units of ``unit`` GB/s.
    ``exact``: every capacity is a whole number of units (nothing was rounded)."""

    n_ranks: int
    n_vertices: int
    caps: dict[tuple[int, int], int]
    unit: float
    exact: bool

    def reversed(self) -> Capacities:
        return Capacities(self.n_ranks, self.n_vertices, {(b, a): c for (a, b), c in self.caps.items()},
                          self.unit, self.exact)


def capacities(topology: Topology, *, budget: int = 2**24) -> Capacities:
    """The topology's capacities in whole units whose sum stays under ``budget`` (so scaled
    capacities and flow values fit the 32-bit max-flow code), rounded down where not exact."""
    caps, unit, exact = integer_capacities(topology, budget, round_up=False)
    return Capacities(topology.n_ranks, topology.n_vertices, caps, unit, exact)


class FlowGraph:
    """A directed graph with integer capacities on vertices 0..V-1, for repeated max-flows with
    a few extra arcs each time."""

    def __init__(self, n_vertices: int, caps: dict[tuple[int, int], int]) -> None:
        self.V = n_vertices
        self.caps = caps
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def set(self, a: int, b: int, value: int) -> None:
        """Set the capacity of arc a -> b (0 removes it)."""
        if value > 0:
            self.caps[(a, b)] = value
        else:
            self.caps.pop((a, b), None)
        self._arrays = None

    def add(self, a: int, b: int, delta: int) -> None:
        self.set(a, b, self.caps.get((a, b), 0) + delta)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._arrays is None:
            pairs = list(self.caps.items())
            rows = np.fromiter((a for (a, _), _ in pairs), dtype=np.int64, count=len(pairs))
            cols = np.fromiter((b for (_, b), _ in pairs), dtype=np.int64, count=len(pairs))
            data = np.fromiter((c for _, c in pairs), dtype=np.int64, count=len(pairs))
            self._arrays = (rows, cols, data)
        return self._arrays

    def max_flow(self, src: int, dst: int, extra: list[tuple[int, int, int]] = ()) -> int:
        """The flow value from ``src`` to ``dst`` with the arcs ``extra`` (a, b, capacity) added
        (capacities add up with existing arcs)."""
        rows, cols, data = self.arrays()
        if extra:
            ea = np.array(extra, dtype=np.int64)
            rows = np.concatenate([rows, ea[:, 0]])
            cols = np.concatenate([cols, ea[:, 1]])
            data = np.concatenate([data, ea[:, 2]])
        keep = (data > 0) & (rows != cols)
        graph = csr_matrix((data[keep], (rows[keep], cols[keep])), shape=(self.V, self.V))  # sums duplicates
        graph.data = np.minimum(graph.data, INT32 - 1).astype(np.int32)
        return int(maximum_flow(graph, src, dst).flow_value)
