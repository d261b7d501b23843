"""What both message loops (``engine``'s event loop and ``fluid``'s) share: a link lane as a
``Resource``, max-min fair shares of bandwidth (``FairShare``), the time grid flows finish on,
and when each instance of a loop may start.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

import numpy as np

from .graph import ProgramGraph, as_array

INF = math.inf


GRID = 2.0**-32  # microseconds: a fluid flow finishes on this grid (about 0.23 fs)


def hub_ready(g: ProgramGraph, m: int, rank_start) -> array:
    """The earliest start of every instance of the message loops (``ProgramGraph.message_lists``):
    a message's when both its ranks have started (a push's or pull's: its rank), a hub's when its
    rank has."""
    starts = np.asarray(rank_start, dtype=float)
    return as_array("d", np.concatenate([np.repeat(np.maximum(starts[g.msg_rank_src], starts[g.msg_rank_dst]), m),
                                         np.repeat(starts[g.op_rank[g.hubs()]], m)]))


def on_grid(t: float) -> float:
    """``t`` rounded to ``GRID``. Flows that finish together in exact arithmetic, whose times
    were summed in different orders, then finish at one instant, so ties between the messages
    they make ready break the same way in every loop."""
    return round(t / GRID) * GRID


def on_grid_array(t: np.ndarray) -> np.ndarray:
    """``on_grid`` elementwise (numpy rounds halves to even, as ``round`` does)."""
    return np.round(t / GRID) * GRID


@dataclass(frozen=True)
class Resource:
    """A link: lanes, per-lane rate in bytes/us, latency in us, the shared limits it is under
    (indices into the limit capacities), and whether its latency holds the lane."""

    lanes: int
    rate: float
    latency: float
    limits: tuple[int, ...] = ()
    cut_through: bool = False  # the latency delays the landing without holding the lane (a switch's pass)


class FairShare:
    """Max-min fair rates by progressive filling, vectorized over the active messages (the
    tests compare it with a plain one-message-at-a-time reference). Each round
    raises every unfixed rate to the next level at which a limit saturates or a lane's own rate
    is reached, and fixes the messages that hit it."""

    def __init__(self, resources: list[Resource], caps: list[float]) -> None:
        width = max((len(r.limits) for r in resources), default=0)
        self.rate = np.array([r.rate for r in resources], dtype=float)
        table = np.full((len(resources), max(width, 1)), -1, dtype=np.int64)
        for i, r in enumerate(resources):
            table[i, : len(r.limits)] = r.limits
        self.table = table
        self.caps = np.asarray(caps, dtype=float)

    def __call__(self, res: np.ndarray) -> np.ndarray:
        k = len(res)
        lane = self.rate[res]
        inc = self.table[res]  # (k, width) limits of each message, -1 padded
        rows, cols = np.nonzero(inc >= 0)
        lims = inc[rows, cols]
        n_lim = len(self.caps)
        left = self.caps.copy()
        users = np.bincount(lims, minlength=n_lim).astype(float)
        rate = np.full(k, -1.0)
        unfixed = np.ones(k, dtype=bool)
        tol = 1 + 1e-12
        remaining = k
        while remaining:
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(users > 0, left / np.where(users > 0, users, 1), INF)
            level = float(share.min()) if n_lim else INF
            cap_level = float(lane[unfixed].min())
            if cap_level <= level * tol:
                level = cap_level
                fixed = unfixed & (lane <= cap_level * tol)
            else:
                tight = share <= level * tol
                hit = np.zeros(k, dtype=bool)
                hit[rows[tight[lims]]] = True
                fixed = unfixed & hit
            rate[fixed] = level
            unfixed &= ~fixed
            remaining -= int(fixed.sum())
            gone = fixed[rows]
            if gone.any():
                drop = np.bincount(lims[gone], minlength=n_lim)
                users -= drop
                left = np.maximum(0.0, left - level * drop)
        return rate
