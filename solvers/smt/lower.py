"""From solver models to the Algorithm IR (buffers, slots, copy/reduce transfers, rounds)."""

from __future__ import annotations

from collections.abc import Sequence

from ccl.core.algorithm import Algorithm, Transfer
from ccl.core.collective import Collective
from ccl.core.topology import Topology

from .problems import Network

Place = tuple[str, int]


def step_rounds(network: Network, steps: int, moves: Sequence[tuple[int, int, int]]) -> tuple[int, ...]:
    """Fewest rounds each step needs for the (step, src, dst) link crossings given: the largest
    ceil(load / lanes) over its links and shared limits, and at least 1."""
    index = {(a, b): i for i, (a, b, _) in enumerate(network.links)}
    load: dict[tuple[int, int], int] = {}
    for t, a, b in moves:
        if a != b:
            key = (t, index[(a, b)])
            load[key] = load.get(key, 0) + 1
    rounds = [1] * steps
    for (t, li), k in load.items():
        rounds[t] = max(rounds[t], -(-k // network.links[li][2]))
    for _, members, lanes in network.limits:
        per_step = [0] * steps
        for (t, li), k in load.items():
            if li in members:
                per_step[t] += k
        for t, k in enumerate(per_step):
            rounds[t] = max(rounds[t], -(-k // lanes))
    return tuple(rounds)


def routing_algorithm(
    topology: Topology,
    collective: Collective,
    sends: Sequence[tuple[int, int, int, int]],
    rounds: Sequence[int],
    name: str,
) -> Algorithm:
    """Copies along the sends (step, chunk, src, dst). A chunk lives on a rank in the input slot
    it starts in, else the output slot that asks for it, else a scratch slot (in arrival order).
    Output slots that want a chunk the rank starts with, without aliasing it, get a local copy in
    step 0."""
    inputs = {(r, c): i for r, slots in enumerate(collective.inputs) for i, c in enumerate(slots)}
    outputs = {(r, next(iter(need))): j for r, slots in enumerate(collective.outputs) for j, need in enumerate(slots)}
    scratch = [0] * collective.n_ranks
    place: dict[tuple[int, int], Place] = {}

    def where(r: int, c: int) -> Place:
        key = (r, c)
        if key not in place:
            if key in inputs:
                place[key] = ("input", inputs[key])
            elif key in outputs:
                place[key] = ("output", outputs[key])
            else:
                place[key] = ("scratch", scratch[r])
                scratch[r] += 1
        return place[key]

    transfers = []
    for r, slots in enumerate(collective.outputs):
        for j, need in enumerate(slots):
            c = next(iter(need))
            if (r, c) in inputs and collective.aliases[r][j] is None:
                transfers.append(Transfer(0, r, "input", inputs[(r, c)], r, "output", j))
    for t, c, u, v in sorted(sends):
        dst = where(v, c)
        src = where(u, c)
        transfers.append(Transfer(t, u, src[0], src[1], v, dst[0], dst[1]))
    transfers.sort()
    return Algorithm(name, collective, topology, tuple(transfers), tuple(rounds), "smt")


def combining_algorithm(
    topology: Topology,
    collective: Collective,
    places: Sequence[Sequence[Place | None]],
    raw: Sequence[Sequence[Sequence[tuple[int, int]]]],
    moves: Sequence,
    rounds: Sequence[int],
    name: str,
) -> Algorithm:
    """Transfers of the combining model (see ``combining.py``): accumulators live in the places
    given (None: a scratch slot, allocated per rank in group order); raw sources are input slots."""
    scratch = [0] * collective.n_ranks
    acc: dict[tuple[int, int], Place] = {}
    for g, row in enumerate(places):
        for v, place in enumerate(row):
            if place is None and any(mv.group == g and v in (mv.src, mv.dst) for mv in moves):
                acc[(g, v)] = ("scratch", scratch[v])
                scratch[v] += 1
            elif place is not None:
                acc[(g, v)] = place
    transfers = []
    for mv in moves:
        if mv.src_k is None:
            src = acc[(mv.group, mv.src)]
        else:
            src = ("input", dict(raw[mv.group][mv.src])[mv.src_k])
        dst = acc[(mv.group, mv.dst)]
        transfers.append(Transfer(mv.step, mv.src, src[0], src[1], mv.dst, dst[0], dst[1], 1, mv.op))
    transfers.sort()
    return Algorithm(name, collective, topology, tuple(transfers), tuple(rounds), "smt")
