"""From a timed plan to the Algorithm IR.

Every batch of hops (one hop, or consecutive hops stage 3 merged) becomes one transfer of
``count`` consecutive slots. Steps encode the plan's order: a transfer's step is one more than
the step of the transfer that brought its data, and no earlier than the previous transfer on
the same lane, so a dependency-driven runtime (and the simulator) replays the plan's order.

Slots: a ``SlotMap`` says where a commodity's data sits on a rank: fixed places for allgather
and broadcast (the output slot of the piece everywhere, the input slot at the source) and for
alltoall at the source and destination; relays of alltoall keep what they forward in scratch,
allocated here in the order the relay sends it on.

Reducescatter is the time reversal of an allgather on the reversed topology: the hop that
brought block q to rank v becomes v's reduce of its partial sum of block q into its parent,
in reverse step order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ccl.core.algorithm import Transfer

from .commodities import Commodity
from .ordering import Plan


@dataclass(frozen=True)
class Batch:
    """Hops sent together on one lane (consecutive in the lane's order)."""

    hops: tuple[int, ...]


def scratch_slots(plan: Plan, commodities: dict[int, Commodity], link_src: Callable[[int], int],
                  fixed: Callable[[Commodity, int], tuple[str, int] | None]) -> dict[tuple[int, int], tuple[str, int]]:
    """Scratch slots of relays: (commodity, rank) -> slot, numbered per rank lane by lane in the
    order each lane sends (so hops a relay batches on a lane are contiguous at the source)."""
    out: dict[tuple[int, int], tuple[str, int]] = {}
    used: dict[int, int] = {}
    for (link, _), order in sorted(plan.lanes.items()):
        u = link_src(link)
        for h in order:
            c = commodities[plan.hops[h].commodity]
            if fixed(c, u) is None and (c.id, u) not in out:
                out[(c.id, u)] = ("scratch", used.get(u, 0))
                used[u] = used.get(u, 0) + 1
    return out


def emit(plan: Plan, batches: list[Batch], commodities: dict[int, Commodity], ends: Callable[[int], tuple[int, int]],
         slot: Callable[[Commodity, int], tuple[str, int]], op: str = "copy") -> list[Transfer]:
    """Transfers for ``batches`` (see module docstring). ``ends(link)`` is (src, dst)."""
    hops = plan.hops
    batch_of: dict[int, int] = {}
    for i, b in enumerate(batches):
        for h in b.hops:
            batch_of[h] = i
    start = [min(hops[h].start for h in b.hops) for b in batches]
    order = sorted(range(len(batches)), key=lambda i: (start[i], hops[batches[i].hops[0]].link, i))
    step = [0] * len(batches)
    lane_last: dict[tuple[int, int], int] = {}
    for i in order:
        b = batches[i]
        s = 0
        for h in b.hops:
            if hops[h].pred >= 0:
                s = max(s, step[batch_of[hops[h].pred]] + 1)
        lane = (hops[b.hops[0]].link, hops[b.hops[0]].lane)
        if lane in lane_last:
            s = max(s, step[lane_last[lane]])
        lane_last[lane] = i
        step[i] = s
    transfers = []
    for i in sorted(range(len(batches)), key=lambda i: (step[i], start[i], i)):
        b = batches[i]
        first = hops[b.hops[0]]
        u, v = ends(first.link)
        c = commodities[first.commodity]
        sbuf, sidx = slot(c, u)
        dbuf, didx = slot(c, v)
        transfers.append(Transfer(step[i], u, sbuf, sidx, v, dbuf, didx, len(b.hops), op))
    return transfers


def reverse(transfers: list[Transfer], accumulate: Callable[[int, str, int], tuple[str, int]]) -> list[Transfer]:
    """Time reversal of an allgather-like schedule into a reduce-like one: a copy u -> v at step s
    becomes a reduce v -> u at step last - s; ``accumulate(rank, buffer, index)`` maps the
    allgather's slot on a rank to the accumulator slot there."""
    if not transfers:
        return []
    last = max(t.step for t in transfers)
    out = []
    for t in transfers:
        sbuf, sidx = accumulate(t.dst, t.dst_buf, t.dst_index)
        dbuf, didx = accumulate(t.src, t.src_buf, t.src_index)
        out.append(Transfer(last - t.step, t.dst, sbuf, sidx, t.src, dbuf, didx, t.count, "reduce"))
    out.sort(key=lambda t: t.step)
    return out
