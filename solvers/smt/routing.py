"""The routing encoding: which link carries each chunk to each rank, in which step.

Variables: ``send[c, link, t]`` - chunk c crosses the link in step t (0-based). Only sends that
can be part of a schedule exist: the sender can hold c by step t (hops from c's nearest origin
<= t), the receiver does not start with c, both may hold c, and the receiver can still pass c
to a rank that needs it in the steps left (hops to the nearest such rank <= S-1-t).

Constraints (S steps):

* unique source: a rank receives each chunk at most once (AtMost1 over all its incoming sends of
  the chunk, every link and step), and exactly once when its output asks for the chunk;
* causality: a rank sends a chunk in step t only if it started with it or received it in an
  earlier step;
* capacity: per step, each link carries at most lanes x rounds(t) chunks and each shared limit
  of the flattened topology at most its lanes x rounds(t) (see ``base.py`` for the rounds);
* implied counting constraints (redundant, they speed up the proofs): per rank and step the
  arrivals fit its incoming lanes and the sends its outgoing lanes, and a rank that needs N
  chunks has received at least N - (incoming lanes x rounds of the later steps) of them by the
  end of each step;
* scratch (optional): a rank holds at most K chunks it neither starts with nor outputs;
* symmetry breaking (lex-leader, exact; see ``symmetry.py``) on the arrival vector
  ``arrive[c, v, t]``.

Never sending a chunk to a rank that already has it, and never twice, loses no schedule: any
schedule that does either has a subset of its transfers that does neither, with the same steps
and no more load.
"""

from __future__ import annotations

import time

from . import symmetry
from .base import Encoding, Lit, lex_leq, neg
from .problems import RoutingSpec


class RoutingEncoding(Encoding):
    def __init__(
        self,
        spec: RoutingSpec,
        steps: int,
        max_extra: int | None,
        *,
        scratch: int | None = None,
        symmetry_breaking: bool = True,
        implied: bool = True,
        seed: int = 0,
    ) -> None:
        start = time.perf_counter()
        super().__init__(steps, max_extra, label=f"routing S={steps}", seed=seed)
        self.spec = spec
        net = spec.network
        S = steps
        self.send: dict[tuple[int, int, int], str] = {}  # (chunk, link index, step) -> var
        into: dict[tuple[int, int], list[tuple[int, str]]] = {}  # (chunk, rank) -> [(step, var)]
        on_link: dict[tuple[int, int], list[str]] = {}  # (link index, step) -> vars
        for c in spec.chunks:
            near, far = spec.from_origin[c], spec.to_dest[c]
            origins = spec.origins[c]
            for li, (u, v, _) in enumerate(net.links):
                if v in origins or not (spec.may_visit(c, u) and spec.may_visit(c, v)):
                    continue
                for t in range(S):
                    if near[u] <= t and far[v] <= S - 1 - t:
                        var = self.var(f"s_{c}_{u}_{v}_{t}")
                        self.send[(c, li, t)] = var
                        into.setdefault((c, v), []).append((t, var))
                        on_link.setdefault((li, t), []).append(var)
        self.into = into
        self.feasible = True
        for c in spec.chunks:
            for v in range(net.n_ranks):
                if v in spec.origins[c]:
                    continue
                incoming = [var for _, var in into.get((c, v), ())]
                if v in spec.dests[c]:
                    if not incoming:
                        self.feasible = False  # c cannot reach v within S steps
                    self.clause(*incoming)
                self.at_most(incoming, 1)
        for (c, li, t), var in self.send.items():
            u = net.links[li][0]
            if u not in spec.origins[c]:
                self.clause(neg(var), *[w for t2, w in into.get((c, u), ()) if t2 < t])
        for (li, t), vars_ in sorted(on_link.items()):
            self.capacity(t, vars_, net.links[li][2])
        for _, members, lanes in net.limits:
            for t in range(S):
                self.capacity(t, [x for li in members for x in on_link.get((li, t), ())], lanes)
        if implied:
            self._implied(on_link)
        self.freeze()
        if implied:
            self._cumulative()
        if scratch is not None:
            for r in range(net.n_ranks):
                relayed = [var for c in spec.chunks if r not in spec.origins[c] and r not in spec.dests[c]
                           for _, var in into.get((c, r), ())]
                self.at_most(relayed, scratch)
        if symmetry_breaking and self.feasible:
            self._break_symmetry()
        self.flush()
        self.build_seconds = time.perf_counter() - start

    # ------------------------------------------------------------------ implied constraints
    def _implied(self, on_link: dict[tuple[int, int], list[str]]) -> None:
        net = self.spec.network
        arrivals: dict[tuple[int, int], list[str]] = {}
        departures: dict[tuple[int, int], list[str]] = {}
        for (li, t), vars_ in on_link.items():
            u, v, _ = net.links[li]
            arrivals.setdefault((v, t), []).extend(vars_)
            departures.setdefault((u, t), []).extend(vars_)
        for (v, t), vars_ in sorted(arrivals.items()):
            self.capacity(t, vars_, net.in_lanes[v])
        for (u, t), vars_ in sorted(departures.items()):
            self.capacity(t, vars_, net.out_lanes[u])

    def _cumulative(self) -> None:
        spec, net, S = self.spec, self.spec.network, self.steps
        for v in range(net.n_ranks):
            needed = [c for c in spec.chunks if v in spec.dests[c]]
            lanes = net.in_lanes[v]
            if not needed or lanes == 0:
                continue
            for t in range(S - 1):
                early = [var for c in needed for t2, var in self.into.get((c, v), ()) if t2 <= t]
                later = [e for t2 in range(t + 1, S) for e in self.extra[t2]]
                floor = len(needed) - lanes * (S - 1 - t)
                self.pb([(x, 1) for x in early] + [(e, lanes) for e in later], ">=", floor)

    # ------------------------------------------------------------------ symmetry
    def _arrivals(self) -> dict[tuple[int, int, int], Lit]:
        """arrive[c, v, t]: chunk c reaches rank v in step t."""
        by_key: dict[tuple[int, int, int], list[str]] = {}
        for (c, li, t), var in self.send.items():
            by_key.setdefault((c, self.spec.network.links[li][1], t), []).append(var)
        return {key: self.define_or(f"a_{key[0]}_{key[1]}_{key[2]}", vars_) for key, vars_ in by_key.items()}

    def _break_symmetry(self) -> None:
        spec = self.spec
        net = spec.network
        everyone = frozenset(range(net.n_ranks))
        signature = {
            c: (spec.origins[c], spec.dests[c], everyone if spec.allowed is None else spec.allowed[c])
            for c in spec.chunks
        }
        arrive = self._arrivals()
        order = [(v, t) for t in range(self.steps) for v in range(net.n_ranks)]

        def vec(c: int, perm: tuple[int, ...] | None = None) -> list[Lit]:
            if perm is None:
                return [arrive.get((c, v, t), False) for v, t in order]
            return [arrive.get((c, perm[v], t), False) for v, t in order]

        for members in symmetry.interchangeable(signature):
            for a, b in zip(members, members[1:]):
                lex_leq(self, vec(a), vec(b), f"swap_{a}_{b}")
        # Automorphisms: X <=lex g(X) on the prefix made of the first chunks' blocks, where
        # g(X)[c, v, t] = X[pi(c), sigma(v), t].
        prefix = spec.chunks[: min(len(spec.chunks), 2)]
        for perm in symmetry.automorphisms(net):
            pi = symmetry.chunk_permutation(perm, signature)
            if pi is None:
                continue
            xs: list[Lit] = []
            ys: list[Lit] = []
            for c in prefix:
                xs += vec(c)
                ys += vec(pi[c], perm)
            lex_leq(self, xs, ys, "auto_" + "_".join(map(str, perm)))

    # ------------------------------------------------------------------ decoding
    def sends(self) -> list[tuple[int, int, int, int]]:
        """(step, chunk, src, dst) of every send in the model, sorted."""
        links = self.spec.network.links
        return sorted((t, c, links[li][0], links[li][1]) for (c, li, t), var in self.send.items() if self.true(var))
