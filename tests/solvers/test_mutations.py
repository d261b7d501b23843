"""Single-transfer mutations of verified schedules are rejected.

Mutations: drop a transfer, redirect its destination rank, move its destination slot, flip
copy <-> reduce, duplicate a reduce. A mutation is rejected when the schedule no longer builds
(a malformed transfer) or no longer verifies.

Every mutant is also run concretely, on random integers, by an executor written here
independently of the verifier, and the two must agree on every mutant, both ways. Some mutants
are correct schedules, and the verifier rightly accepts them:

* a redirect in a reduction tree: a partial sum sent to a sibling that has not yet reduced
  upward still reaches the root;
* dropping or moving a forwarding copy into scratch when routing sends the same chunk through
  the same relay twice (a rooted chain on a sparse topology): the relay's slot already holds it.

Anything else a template emits is necessary: dropping, moving, flipping or duplicating it must
break the schedule.
"""

from __future__ import annotations

import random

import pytest

import solvers
import topologies as T
from ccl import Algorithm, CollectiveError, Problem, Request, Transfer, VerificationError, verify
from ccl.core.collective import ROOTED_KINDS, builtin

from ..mutation.mutants import Wrong, run_algorithm

SAMPLE = 30  # transfers mutated per schedule (all of them when there are fewer)
MULTINODE = ("hierarchical", "rail-rings", "hierarchical-pipelined")  # multi-node machines only
GRIDS = ("torus-2d", "torus-2d-tree", "blueconnect")  # multi-node machines and linked grids
SWITCHES = ("nvls", "nvls-rails", "nvls-sharp")  # reducing switches: tests/mutation (the reference knows them)


def schedules():
    out = []
    for spec in ("ring:5", "line:4", "dgx1", "switch:4", "star:4", "fully-connected:6"):
        topo = T.build(spec)
        for name in solvers.TEMPLATES:
            info = solvers.SOLVERS[name]
            if name in MULTINODE or name in GRIDS or name in SWITCHES:  # multi-node machines and grids: below
                continue
            for kind in info.kinds:
                for k in (1, 2):
                    root = 1 if kind in ROOTED_KINDS else None
                    out.append((topo, kind, name, k, root))
    topo = T.ndv2(2)
    for name in MULTINODE + GRIDS:
        for kind in solvers.SOLVERS[name].kinds:
            out.append((topo, kind, name, 1, 1 if kind in ROOTED_KINDS else None))
    for spec in ("torus:3x3", "torus:2x2x2"):
        topo = T.build(spec)
        for name in GRIDS:
            for kind in solvers.SOLVERS[name].kinds:
                out.append((topo, kind, name, 2, None))
    return out


CASES = schedules()


def rejected(algorithm: Algorithm, transfers: list[Transfer]) -> bool:
    try:
        mutated = algorithm.with_transfers(transfers)
    except CollectiveError:
        return True
    try:
        verify(mutated)
    except VerificationError:
        return True
    return False


def concretely_correct(algorithm: Algorithm, transfers: list[Transfer]) -> bool:
    """Run the schedule with the mutation tests' reference interpreter (random 62-bit integers,
    exact sums): an undefined read, a reduce into nothing, a colliding copy, a slot out of range or
    a missing link makes it incorrect."""
    try:
        run_algorithm(algorithm.collective, algorithm.topology, transfers)
    except Wrong:
        return False
    return True


def other_slot(algorithm: Algorithm, t: Transfer) -> tuple[str, int]:
    coll = algorithm.collective
    size = {"input": len(coll.inputs[t.dst]), "output": len(coll.outputs[t.dst]),
            "scratch": algorithm.scratch_slots[t.dst] + 1}[t.dst_buf]
    if size > 1:
        return t.dst_buf, (t.dst_index + 1) % size
    return "scratch", algorithm.scratch_slots[t.dst]


@pytest.mark.parametrize(("topo", "kind", "solver", "k", "root"),
                         [pytest.param(*c, marks=pytest.mark.slow)  # 15 s and 8 s: the longest schedules here
                          if c[0].name == "ndv2x2" and c[1:3] in (("allreduce", "hierarchical-pipelined"),
                                                                  ("allreduce", "rail-rings")) else c
                          for c in CASES],
                         ids=[f"{c[0].name}-{c[2]}-{c[1]}-k{c[3]}" for c in CASES])
def test_every_single_transfer_mutation_is_rejected(topo, kind, solver, k, root):
    algorithm = solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks, root), Request(solver, chunks=k)))
    verify(algorithm)
    transfers = list(algorithm.transfers)
    n = topo.n_ranks
    rng = random.Random(f"{topo.name}-{solver}-{kind}-{k}")
    picks = sorted(rng.sample(range(len(transfers)), min(SAMPLE, len(transfers))))
    survivors = []
    for i in picks:
        t = transfers[i]
        mutations = {
            "drop": transfers[:i] + transfers[i + 1:],
            "flip": transfers[:i] + [t._replace(op="reduce" if t.op == "copy" else "copy")] + transfers[i + 1:],
        }
        dst = next(q for q in ((t.dst + d) % n for d in range(1, n)) if q != t.src)
        mutations["redirect"] = transfers[:i] + [t._replace(dst=dst)] + transfers[i + 1:]
        buf, idx = other_slot(algorithm, t)
        mutations["slot"] = transfers[:i] + [t._replace(dst_buf=buf, dst_index=idx)] + transfers[i + 1:]
        if t.op == "reduce":
            mutations["duplicate"] = transfers[:i + 1] + [t] + transfers[i + 1:]
        for what, mutated in mutations.items():
            verdict = rejected(algorithm, mutated)
            truth = concretely_correct(algorithm, mutated)
            assert verdict != truth, f"verifier and concrete run disagree on {what} of {t.describe()}"
            legitimate = what == "redirect" or (what in ("drop", "slot") and t.dst_buf == "scratch")
            if not verdict and not legitimate:
                survivors.append(f"{what} of transfer {i}: {t.describe()}")
    assert not survivors, survivors
