"""Switch removal by splitting off pairs of arcs (ForestColl's reduction).

The packing condition: with a super source ``s`` feeding every root its demand, every rank v
must receive ``need`` (the total demand) from ``s``: ``maxflow(s, v) >= need``. By Edmonds'
branching theorem that is exactly when the roots' spanning out-trees pack, once no switch
vertex is left (trees may branch at ranks only: switches forward, they do not copy).

Splitting off ``alpha`` at switch w on the pair (u -> w, w -> t) moves ``alpha`` of capacity
from the two arcs to a new arc u -> t (the same traffic, now accounted as rank u sending
through w to t). A vertex set X (the side of a cut that holds v and not s) loses ``alpha`` of
in-capacity exactly when X holds w but neither u nor t, or holds u and t but not w; every other
cut keeps its capacity. So the largest safe ``alpha`` is the least slack of those two families
of cuts, two minimum cuts per rank v with u, t, w forced to their sides. A switch whose in- and
out-capacities are equal can be split off completely (Bang-Jensen, Frank and Jackson's
splitting theorem for rooted connectivity); whatever cannot be split is dropped, and the
caller re-measures the rate the rank graph actually supports.
"""

from __future__ import annotations

from collections.abc import Callable

from .flows import INT32, FlowGraph


def remove_switches(fg: FlowGraph, n: int, source: int, need: int,
                    progress: Callable[[str], None] | None = None) -> dict[tuple[int, int], int]:
    """Split off every switch vertex of ``fg`` (vertices n .. source-1) while keeping
    ``maxflow(source, v) >= need`` for every rank v < n. Returns the rank-to-rank arcs with
    their capacities (source arcs excluded)."""
    switches = [w for w in range(n, fg.V) if w != source]
    big = min(INT32 - 1, sum(fg.caps.values()) + need + 1)
    for i, w in enumerate(switches):
        if progress is not None and i % 8 == 0:
            progress(f"splitting switch vertices {i}/{len(switches)}")
        # two passes: first every pair its proportional share (shallow trees later: a switch
        # becomes a complete graph where it can), then whatever is left, greedily
        for fair in (True, False):
            preds = sorted(a for (a, b) in fg.caps if b == w)
            succs = sorted(b for (a, b) in fg.caps if a == w)
            out_total = sum(fg.caps[(w, t)] for t in succs)
            shares = {}
            if fair:
                for u in preds:
                    rest = out_total - fg.caps.get((w, u), 0)
                    for t in succs:
                        if t != u and rest > 0:
                            shares[(u, t)] = fg.caps[(u, w)] * fg.caps[(w, t)] // rest
            for u in preds:
                for t in succs:
                    if u == t:
                        continue
                    cap_uw = fg.caps.get((u, w), 0)
                    if cap_uw == 0:
                        break
                    alpha = min(cap_uw, fg.caps.get((w, t), 0))
                    if fair:
                        alpha = min(alpha, shares.get((u, t), 0))
                    if alpha <= 0:
                        continue
                    alpha = _safe_amount(fg, n, source, need, big, u, w, t, alpha)
                    if alpha > 0:
                        fg.add(u, w, -alpha)
                        fg.add(w, t, -alpha)
                        fg.add(u, t, alpha)
        for pair in [p for p in fg.caps if w in p]:
            fg.set(pair[0], pair[1], 0)
    return {(a, b): c for (a, b), c in fg.caps.items() if a < n and b < n and a != b}


def _safe_amount(fg: FlowGraph, n: int, source: int, need: int, big: int, u: int, w: int, t: int,
                 alpha: int) -> int:
    """The largest amount <= alpha that can be split off (u -> w, w -> t)."""
    # X holds w and v, not u, t (nor s)
    for v in range(n):
        if v in (u, t):
            continue
        value = fg.max_flow(source, v, [(source, u, big), (source, t, big), (w, v, big)])
        alpha = min(alpha, value - need)
        if alpha <= 0:
            return 0
    # X holds u, t and v, not w (nor s)
    for v in range(n):
        extra = [(source, w, big)] + [(x, v, big) for x in (u, t) if x != v]
        value = fg.max_flow(source, v, extra)
        alpha = min(alpha, value - need)
        if alpha <= 0:
            return 0
    return alpha
