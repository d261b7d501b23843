"""The simulator's dependency graph against a direct, slot-by-slot reference built here."""

from __future__ import annotations

import random

import numpy as np
import pytest

import solvers
import topologies as T
from backends.sim.graph import DependencyGraph
from ccl import Algorithm, Problem, Request, Transfer
from ccl.collective import builtin

BUFS = ("input", "output", "scratch")


def reference(alg: Algorithm, in_place: bool) -> dict[str, set]:
    """Edges between transfer indices of ``alg.transfers``, by walking steps slot by slot."""
    coll = alg.collective

    def key(rank: int, buf: str, idx: int) -> tuple[int, str, int]:
        if in_place and buf == "output":
            a = coll.aliases[rank][idx]
            if a is not None:
                return (rank, "input", a)
        return (rank, buf, idx)

    def initial(k: tuple[int, str, int]) -> int:
        rank, buf, idx = k
        if not in_place and buf == "output" and coll.aliases[rank][idx] is not None:
            return rank
        return -1

    by_step: dict[int, list[int]] = {}
    for i, t in enumerate(alg.transfers):
        by_step.setdefault(t.step, []).append(i)
    writers: dict = {}
    readers: dict = {}
    edges = {"raw": set(), "waw": set(), "war": set(), "raw_init": set(), "land_init": set()}
    for s in sorted(by_step):
        ids = by_step[s]
        for i in ids:
            t = alg.transfers[i]
            for j in range(t.count):
                x = key(t.src, t.src_buf, t.src_index + j)
                if x in writers:
                    edges["raw"].update((w, i) for w in writers[x])
                elif initial(x) >= 0:
                    edges["raw_init"].add((i, initial(x)))
                readers.setdefault(x, []).append(i)
        for i in ids:
            t = alg.transfers[i]
            for j in range(t.count):
                y = key(t.dst, t.dst_buf, t.dst_index + j)
                if y in writers:
                    edges["waw"].update((w, i) for w in writers[y])
                elif initial(y) >= 0:
                    edges["land_init"].add((i, initial(y)))
                edges["war"].update((r, i) for r in readers.get(y, ()) if r != i)
        fresh: dict = {}
        for i in ids:
            t = alg.transfers[i]
            for j in range(t.count):
                fresh.setdefault(key(t.dst, t.dst_buf, t.dst_index + j), []).append(i)
        for y, ws in fresh.items():
            writers[y] = ws
            readers.pop(y, None)
    return edges


def built(alg: Algorithm, in_place: bool) -> dict[str, set]:
    g = DependencyGraph(alg, in_place=in_place)
    order = g.order.tolist()
    out = {}
    for name in ("raw", "waw", "war"):
        u, v = getattr(g, name)
        out[name] = {(order[a], order[b]) for a, b in zip(u.tolist(), v.tolist())}
    out["raw_init"] = {(order[i], int(r)) for i, r in enumerate(g.raw_init) if r >= 0}
    out["land_init"] = {(order[i], int(r)) for i, r in enumerate(g.land_init) if r >= 0}
    return out


def random_algorithm(rng: random.Random) -> Algorithm:
    n = rng.randint(2, 4)
    kind = rng.choice(["allgather", "alltoall", "allreduce", "reducescatter"])
    coll = builtin(kind, n).chunk_up(rng.randint(1, 3))
    sizes = {"input": [len(x) for x in coll.inputs], "output": [len(x) for x in coll.outputs],
             "scratch": [4] * n}
    transfers = []
    for _ in range(rng.randint(1, 30)):
        src, dst = rng.randrange(n), rng.randrange(n)
        sbuf, dbuf = rng.choice(BUFS), rng.choice(BUFS)
        if not sizes[sbuf][src] or not sizes[dbuf][dst]:
            continue
        count = rng.randint(1, min(sizes[sbuf][src], sizes[dbuf][dst], 3))
        sidx = rng.randint(0, sizes[sbuf][src] - count)
        didx = rng.randint(0, sizes[dbuf][dst] - count)
        if src == dst and sbuf == dbuf and abs(sidx - didx) < count:
            continue
        transfers.append(Transfer(rng.randint(0, 5), src, sbuf, sidx, dst, dbuf, didx, count,
                                  rng.choice(["copy", "reduce"])))
    return Algorithm("random", coll, T.fully_connected(n), tuple(transfers))


@pytest.mark.parametrize("seed", range(60))
def test_random_schedules_match_reference(seed):
    alg = random_algorithm(random.Random(seed))
    for in_place in (False, True):
        assert built(alg, in_place) == reference(alg, in_place)


@pytest.mark.parametrize(("spec", "kind", "solver"), [
    ("ring:6", "allreduce", "ring"), ("line:5", "allgather", "ring"), ("dgx1", "allreduce", "recursive-halving"),
    ("ndv2:2", "alltoall", "hierarchical"), ("star:5", "reduce", "double-binary-tree"),
])
def test_template_schedules_match_reference(spec, kind, solver):
    topo = T.build(spec)
    alg = solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks, 0 if kind == "reduce" else None),
                                     Request(solver, chunks=2)))
    for in_place in (False, True):
        assert built(alg, in_place) == reference(alg, in_place)


def test_slices_and_step_mode_compile():
    topo = T.ring(4)
    alg = solvers.synthesize(Problem(topo, builtin("allgather", 4), Request("ring")))
    g = DependencyGraph(alg)
    one = g.compiled(1)
    three = g.compiled(3)
    assert three.n == 3 * one.n
    # slice j of a transfer depends on slice j of its predecessors only
    for v in range(three.n):
        for k in range(three.raw_ptr[v], three.raw_ptr[v + 1]):
            assert three.raw_idx[k] % 3 == v % 3
    step = g.compiled(1, "step")
    assert sum(step.raw_count) == 0
    assert np.array_equal(np.asarray(step.step_ptr), np.asarray(one.step_ptr))
