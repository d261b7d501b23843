"""Building schedules from logical transfers, with routing where ranks are not linked.

Templates describe what moves between which ranks in logical steps, as if every pair of ranks
could talk. ``ScheduleBuilder.build`` maps that onto the topology: a logical transfer between
linked ranks is one transfer; between unlinked ranks it follows a shortest path of links, with
explicit forwarding transfers through scratch slots of the intermediate ranks. A logical step
whose longest route has h hops becomes h physical steps, so the step semantics (read the state
of the previous step, write at the end of this one) still hold for the logical schedule.
A transfer naming a reducing switch (a push or a pull, ``ccl.core.algorithm``) is never routed:
it joins a rank and its switch directly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from ccl.core.algorithm import Algorithm, Transfer
from ccl.core.collective import Collective
from ccl.core.errors import InfeasibleError
from ccl.core.topology import Topology

from .coalesce import coalesce_rows

Slot = tuple[str, int]


class Router:
    """Shortest rank paths (fewest hops, then least latency, then smallest ranks) over the
    flattened topology, computed per source on demand."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._paths: dict[int, dict[int, tuple[int, ...]]] = {}
        self._pair: dict[tuple[int, int], tuple[int, ...]] = {}

    def linked(self, a: int, b: int) -> bool:
        return self.topology.flat_link(a, b) is not None

    def neighbours(self, a: int) -> list[int]:
        return sorted(self.topology.routes_from(a)) if self.topology.switches else sorted(
            link.dst for link in self.topology.out_links[a]
        )

    def path(self, src: int, dst: int) -> tuple[int, ...]:
        """The rank path from ``src`` to ``dst``; a transfer to or from a reducing switch goes
        straight (a push or a pull: the Algorithm checks its links)."""
        pair = (src, dst)
        known = self._pair.get(pair)
        if known is not None:
            return known
        n = self.topology.n_ranks
        if src == dst or src >= n or dst >= n or self.linked(src, dst):
            self._pair[pair] = pair
            return pair
        if src not in self._paths:
            self._paths[src] = self._bfs(src)
        path = self._paths[src].get(dst)
        if path is None:
            raise InfeasibleError(
                f"topology {self.topology.name!r} has no path from rank {src} to rank {dst}",
                bound="connectivity",
            )
        self._pair[pair] = path
        return path

    def _bfs(self, src: int) -> dict[int, tuple[int, ...]]:
        best: dict[int, tuple[int, float, tuple[int, ...]]] = {src: (0, 0.0, (src,))}
        frontier = deque([src])
        while frontier:
            u = frontier.popleft()
            hops, lat, path = best[u]
            for v in self.neighbours(u):
                link = self.topology.flat_link(u, v)
                assert link is not None
                cand = (hops + 1, lat + link.latency, path + (v,))
                old = best.get(v)
                if old is None:
                    best[v] = cand
                    frontier.append(v)
                elif cand[0] == old[0] and cand[1:] < old[1:]:
                    best[v] = cand
        return {v: p for v, (_, _, p) in best.items()}


class ScheduleBuilder:
    """Collects logical transfers; ``build`` routes them and returns a verified-shape Algorithm."""

    def __init__(self, topology: Topology, collective: Collective, name: str, solver: str,
                 router: Router | None = None) -> None:
        self.topology = topology
        self.collective = collective
        self.name = name
        self.solver = solver
        self.router = router or Router(topology)
        self._logical: list[tuple[int, int, str, int, int, str, int, str, int]] = []

    def move(self, step: int, src: int, src_slots: Sequence[Slot], dst: int, dst_slots: Sequence[Slot], op: str) -> None:
        """One logical transfer per slot of two equally long slot lists."""
        if len(src_slots) != len(dst_slots):
            raise ValueError("slot lists of different length")
        for a, b in zip(src_slots, dst_slots):
            self._logical.append((step, src, a[0], a[1], dst, b[0], b[1], op, 1))

    def move_run(self, step: int, src: int, src_slot: Slot, dst: int, dst_slot: Slot, count: int, op: str) -> None:
        """``count`` consecutive slots from ``src_slot`` on to ``dst_slot`` on: one transfer
        when the ranks are linked, one per slot when the route relays through ranks."""
        if count == 1 or len(self.router.path(src, dst)) != 2:
            self.move(step, src, [(src_slot[0], src_slot[1] + j) for j in range(count)],
                      dst, [(dst_slot[0], dst_slot[1] + j) for j in range(count)], op)
        else:
            self._logical.append((step, src, src_slot[0], src_slot[1], dst, dst_slot[0], dst_slot[1], op, count))

    def build(self, coalesce: bool = False) -> Algorithm:
        """The Algorithm; ``coalesce``: scattered pieces one rank sends another in a step go as
        one message through scratch (``solvers.builders.coalesce``)."""
        path = self.router.path
        by_step: dict[int, list[tuple[tuple[int, ...], tuple]]] = {}
        longest: dict[int, int] = {}
        for t in self._logical:
            p = path(t[1], t[4])
            by_step.setdefault(t[0], []).append((p, t))
            if len(p) - 1 > longest.get(t[0], 0):
                longest[t[0]] = len(p) - 1
        steps = sorted(by_step)
        # Physical base step of each logical step.
        base: dict[int, int] = {}
        physical = 0
        for s in steps:
            base[s] = physical
            physical += longest[s]
        out: list[Transfer] = []
        if all(h == 1 for h in longest.values()):
            rows = [(base[s], src, sbuf, sidx, dst, dbuf, didx, count, op)
                    for s in steps for _, (_, src, sbuf, sidx, dst, dbuf, didx, op, count) in by_step[s]]
            if coalesce:
                rows = coalesce_rows(rows, self.topology.n_ranks) or rows
            return Algorithm(self.name, self.collective, self.topology, tuple(map(Transfer.unchecked, rows)),
                             solver=self.solver)
        # Forwarding slots go above the scratch the template itself uses, in two banks (even and
        # odd physical steps) so a slot is never rewritten in the step that forwards it.
        used = [0] * self.topology.n_ranks
        for t in self._logical:
            if t[2] == "scratch":
                used[t[1]] = max(used[t[1]], t[3] + t[8])
            if t[5] == "scratch":
                used[t[4]] = max(used[t[4]], t[6] + t[8])
        demand: dict[tuple[int, int], int] = {}
        for s in steps:
            for p, _ in by_step[s]:
                for i in range(1, len(p) - 1):
                    key = (p[i], base[s] + i - 1)
                    demand[key] = demand.get(key, 0) + 1
        bank = [0] * self.topology.n_ranks
        for (rank, _), k in demand.items():
            bank[rank] = max(bank[rank], k)
        taken: dict[tuple[int, int], int] = {}
        for s in steps:
            b0 = base[s]
            for p, (_, src, sbuf, sidx, dst, dbuf, didx, op, count) in by_step[s]:
                if len(p) == 2:
                    out.append(Transfer(b0, src, sbuf, sidx, dst, dbuf, didx, count, op))
                    continue
                prev: tuple[int, str, int] = (src, sbuf, sidx)
                for i in range(1, len(p) - 1):
                    m = p[i]
                    t_recv = b0 + i - 1
                    k = taken.get((m, t_recv), 0)
                    taken[(m, t_recv)] = k + 1
                    slot = used[m] + (t_recv % 2) * bank[m] + k
                    out.append(Transfer(t_recv, prev[0], prev[1], prev[2], m, "scratch", slot, 1, "copy"))
                    prev = (m, "scratch", slot)
                out.append(Transfer(b0 + len(p) - 2, prev[0], prev[1], prev[2], dst, dbuf, didx, 1, op))
        if coalesce:
            out = [Transfer.unchecked(t) for t in coalesce_rows(out, self.topology.n_ranks) or out]
        return Algorithm(self.name, self.collective, self.topology, tuple(out), solver=self.solver)
