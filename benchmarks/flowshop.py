"""The best a pipelined chain can do: a flow shop of stages with per-message latency.

A piece of s bytes crossing a stage of rate r (bytes/us) and latency a (us, held by the
stage, as the simulator's alpha-beta physics holds a lane) occupies it a + s / r; pieces cross
the stages in order, each stage one piece at a time. For k pieces of free sizes summing to V,
the makespan is the longest path through the (piece, stage) grid; the least makespan is a
linear program (scipy's HiGHS). This is not a lower bound on every schedule (a stage made of
several links can overlap one message's latency with another's data), but it is the best any
schedule achieves that sends each piece through one such chain: it tells how far pipelining
alone can go.

    python benchmarks/flowshop.py --volume 8.65MB --stage 64.3,0.7 --stage 50,2.6 --stage 64.3,0.7

(one rail of a dgx-h100:2 broadcast at 64 MiB: the root's NVLink port feeding the rail, the
rail's NIC pair, the far GPU serving its node) prints the least makespan for each piece count.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import numpy as np
from scipy.optimize import linprog

from ccl.core.units import parse_size


def makespan(volume: float, stages: list[tuple[float, float]], pieces: int) -> tuple[float, list[float]]:
    """Least makespan (us) of ``pieces`` pieces summing to ``volume`` bytes through ``stages``
    ((rate in bytes/us, latency in us) each), and the piece sizes reaching it."""
    k, m = pieces, len(stages)
    rows, rhs = [], []
    # a path: stage j is crossed by pieces i_{j-1} .. i_j (i_0 = 0, i_{m-1}... = k - 1), non-decreasing
    for cuts in itertools.combinations_with_replacement(range(k), m - 1):
        bounds = (0, *cuts, k - 1)
        row, const = np.zeros(k + 1), 0.0
        for j, (rate, lat) in enumerate(stages):
            for i in range(bounds[j], bounds[j + 1] + 1):
                row[i] += 1 / rate
                const += lat
        row[-1] = -1.0
        rows.append(row)
        rhs.append(-const)
    cost = np.zeros(k + 1)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=np.array(rows), b_ub=np.array(rhs), A_eq=[np.r_[np.ones(k), 0.0]], b_eq=[volume],
                  bounds=[(0, None)] * (k + 1), method="highs")
    if not res.success:  # pragma: no cover - the program is always feasible
        raise RuntimeError(res.message)
    return float(res.x[-1]), [float(x) for x in res.x[:-1]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--volume", required=True, help="bytes through the chain (e.g. 8.65MB, 64MiB)")
    ap.add_argument("--stage", action="append", required=True,
                    help="RATE_GBps,LATENCY_us of one stage, in order (repeat)")
    ap.add_argument("--pieces", default="2..16", help="piece counts, A..B")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    volume = float(parse_size(args.volume))
    stages = [(float(r) * 1e3, float(a)) for r, a in (s.split(",") for s in args.stage)]  # GB/s -> bytes/us
    lo, hi = (int(x) for x in args.pieces.split(".."))
    rows = []
    for k in range(lo, hi + 1):
        us, sizes = makespan(volume, stages, k)
        rows.append({"pieces": k, "makespan_us": round(us, 2), "sizes_MB": [round(s / 1e6, 3) for s in sizes]})
    best = min(rows, key=lambda r: r["makespan_us"])
    if args.json:
        json.dump({"volume": volume, "stages": args.stage, "rows": rows, "best": best}, sys.stdout, indent=1)
        print()
        return 0
    data_us = max(volume / r for r, _ in stages)
    print(f"volume {volume / 1e6:.3f} MB; the slowest stage alone moves it in {data_us:.1f} us")
    print("pieces  makespan us  piece sizes (MB)")
    for r in rows:
        print(f"{r['pieces']:6d}  {r['makespan_us']:11.1f}  {' '.join(f'{s:.2f}' for s in r['sizes_MB'])}")
    print(f"best: {best['pieces']} pieces, {best['makespan_us']:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
