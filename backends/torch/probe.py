"""Measuring the links a job got (Blink class): run on every rank of a live process group.

``measure(group)`` returns the same plain dict on every rank:

* ``pairs``: for each pair of ranks i < j and each size, the one-way time of a message (half a
  ping-pong round trip: i sends ``size`` bytes, j sends them back), in microseconds;
* ``fan_out`` / ``fan_in``: for each rank, the time to send (receive) the largest size to (from)
  every other rank at once, until the last peer acknowledges (has sent);
* ``concurrent``: for pairs of disjoint pairs (i -> j, k -> l), each transfer's time when both
  run at once; a transfer much slower than alone shares a bottleneck with the other
  (a NIC, a PCIe switch);
* ``hosts``: each rank's host name (ranks on one host share a node).

Every time is the least of ``repeat`` runs (after a warm-up): what the links can do, where a
median would also count the moments another process held the CPU or the network.

Only torch and the standard library: every rank runs the same sequence of point-to-point
transfers with barriers between tests, so the ranks not in a test wait for it.
"""

from __future__ import annotations

import itertools
import socket
import time
from typing import Any

import torch
import torch.distributed as dist

FORMAT = "ccl-probe"


def _ping_pong(buf: torch.Tensor, me: int, peer: int, first: bool, group: Any, peers: list[int]) -> float:
    start = time.perf_counter()
    if first:
        dist.send(buf, peers[peer], group=group)
        dist.recv(buf, peers[peer], group=group)
    else:
        dist.recv(buf, peers[peer], group=group)
        dist.send(buf, peers[peer], group=group)
    return time.perf_counter() - start


def _one_way(buf: torch.Tensor, ack: torch.Tensor, src: int, dst: int, me: int, group: Any,
             peers: list[int]) -> float | None:
    """src sends ``buf`` to dst, dst acknowledges with one byte; src's time (None elsewhere)."""
    if me == src:
        start = time.perf_counter()
        dist.send(buf, peers[dst], group=group)
        dist.recv(ack, peers[dst], group=group)
        return time.perf_counter() - start
    if me == dst:
        dist.recv(buf, peers[src], group=group)
        dist.send(ack, peers[src], group=group)
    return None


def measure(group: Any = None, *, sizes: tuple[int, ...] = (4096, 262144, 4194304), repeat: int = 5,
            concurrent: bool = True, max_concurrent_tests: int = 256) -> dict[str, Any]:
    """Every measurement of the module docstring, on every rank of ``group``."""
    n = dist.get_world_size(group)
    me = dist.get_rank(group)
    peers = [q if group is None else dist.get_global_rank(group, q) for q in range(n)]
    largest = max(sizes)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else None
    bufs = {s: torch.zeros(max(1, s), dtype=torch.uint8, device=device) for s in sizes}
    ack = torch.zeros(1, dtype=torch.uint8, device=device)

    pairs: dict[str, dict[str, float]] = {}
    for i, j in itertools.combinations(range(n), 2):
        times: dict[str, float] = {}
        for s in sizes:
            samples = []
            for k in range(repeat + 1):  # the first is a warm-up
                if me in (i, j):
                    t = _ping_pong(bufs[s], me, j if me == i else i, me == i, group, peers)
                    if k:
                        samples.append(t)
            if me == i:
                times[str(s)] = min(samples) / 2 * 1e6
        dist.barrier(group=group)
        if me == i:
            pairs[f"{i},{j}"] = times

    fan_out: dict[str, float] = {}
    fan_in: dict[str, float] = {}
    buf = bufs[largest]
    landing = [torch.empty_like(buf) for _ in range(n)]  # receive buffers, made before any timing
    acks = [torch.empty_like(ack) for _ in range(n)]
    if n > 2:
        for root in range(n):
            for direction, table in (("out", fan_out), ("in", fan_in)):
                samples = []
                for k in range(repeat + 1):
                    dist.barrier(group=group)
                    start = time.perf_counter()
                    if me == root:
                        works = []
                        for q in range(n):
                            if q == root:
                                continue
                            if direction == "out":
                                works.append(dist.isend(buf, peers[q], group=group))
                                works.append(dist.irecv(acks[q], peers[q], group=group))
                            else:
                                works.append(dist.irecv(landing[q], peers[q], group=group))
                        for w in works:
                            w.wait()
                        if k:
                            samples.append(time.perf_counter() - start)
                    elif direction == "out":
                        dist.recv(landing[root], peers[root], group=group)
                        dist.send(ack, peers[root], group=group)
                    else:
                        dist.send(buf, peers[root], group=group)
                if me == root:
                    table[str(root)] = min(samples) * 1e6

    tests: list[tuple[int, int, int, int]] = []
    if concurrent and n >= 4:
        unordered = list(itertools.combinations(range(n), 2))
        for (i, j), (k, m) in itertools.combinations(unordered, 2):
            if len({i, j, k, m}) == 4:
                tests.append((i, j, k, m))
        if len(tests) > max_concurrent_tests:  # evenly over all of them, not the low ranks' first
            step = len(tests) / max_concurrent_tests
            tests = [tests[int(k * step)] for k in range(max_concurrent_tests)]
    together: list[dict[str, Any]] = []
    for i, j, k, m in tests:
        mine: list[float] = []
        for rep in range(repeat + 1):
            dist.barrier(group=group)
            t = None
            if me in (i, j):
                t = _one_way(buf, ack, i, j, me, group, peers)
            elif me in (k, m):
                t = _one_way(buf, ack, k, m, me, group, peers)
            if t is not None and rep:
                mine.append(t)
        if me in (i, k):
            together.append({"test": [i, j, k, m], "rank": me, "us": min(mine) * 1e6})

    gathered: list[Any] = [None] * n
    dist.all_gather_object(gathered, {"pairs": pairs, "fan_out": fan_out, "fan_in": fan_in, "together": together,
                                      "host": socket.gethostname()}, group=group)
    out: dict[str, Any] = {"format": FORMAT, "n_ranks": n, "sizes": list(sizes), "repeat": repeat,
                           "backend": str(dist.get_backend(group)), "pairs": {}, "fan_out": {}, "fan_in": {},
                           "concurrent": [], "hosts": [g["host"] for g in gathered]}
    for g in gathered:
        out["pairs"].update(g["pairs"])
        out["fan_out"].update(g["fan_out"])
        out["fan_in"].update(g["fan_in"])
    by_test: dict[tuple[int, ...], dict[int, float]] = {}
    for g in gathered:
        for row in g["together"]:
            by_test.setdefault(tuple(row["test"]), {})[row["rank"]] = row["us"]
    for test in tests:
        got = by_test.get(test, {})
        out["concurrent"].append({"first": [test[0], test[1]], "second": [test[2], test[3]],
                                  "first_us": got.get(test[0]), "second_us": got.get(test[2])})
    return out


def measure_job(rank: int, n: int, sizes: tuple[int, ...], repeat: int, concurrent: bool) -> dict[str, Any]:
    """``measure`` as a ``launch.Call`` on local processes (``ccl probe --local N``)."""
    return measure(None, sizes=sizes, repeat=repeat, concurrent=concurrent)
