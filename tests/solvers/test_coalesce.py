"""Coalescing: scattered pieces one rank sends another in a step become one message through
scratch, and the schedule still implements its collective (Algorithm and Program verified)."""

from __future__ import annotations

import pytest

import solvers
import topologies as T
from ccl import Algorithm, CclError, Problem, Request, Transfer, lower, verify, verify_program
from ccl.core.collective import builtin
from solvers.builders.coalesce import coalesce, scattered_groups


def network_groups(alg: Algorithm) -> dict[tuple[int, int, int], int]:
    out: dict[tuple[int, int, int], int] = {}
    for t in alg.transfers:
        if t.src != t.dst:
            out[(t.step, t.src, t.dst)] = out.get((t.step, t.src, t.dst), 0) + 1
    return out


def test_two_scattered_pieces_go_as_one_transfer() -> None:
    """Rank 0 sends rank 1 its input slots 0 and 2 into output slots 3 and 1 in one step: one
    wire transfer of two slots, packed and unpacked by local copies."""
    topo = T.build("ring:2")
    coll = builtin("allgather", 2, chunks=4)  # 4 slots per rank's part
    moves = [Transfer(0, r, "input", j, 1 - r, "output", 4 * r + j, 1) for r in range(2) for j in range(4)]
    moves += [Transfer(0, r, "input", j, r, "output", 4 * r + j, 1) for r in range(2) for j in range(4)]
    # scatter the order: pieces 0 and 2 first, then 1 and 3 a step later
    moves = [t._replace(step=0 if t.src_index % 2 == 0 else 1) for t in moves]
    alg = Algorithm("scattered", coll, topo, tuple(moves))
    verify(alg)
    assert scattered_groups(alg) == 4  # two steps, two directions
    out = coalesce(alg)
    verify(out)
    verify_program(lower(out))
    assert set(network_groups(out).values()) == {1}  # one wire transfer per (step, pair)
    wires = [t for t in out.transfers if t.src != t.dst]
    assert all(t.count == 2 and t.src_buf == "scratch" and t.dst_buf == "scratch" for t in wires)
    assert lower(out).n_messages == 4 < lower(alg).n_messages == 8


def test_unpacks_keep_the_schedules_op_and_steps_triple() -> None:
    """Reduce pieces are unpacked by local reductions; step s becomes 3s (packs), 3s + 1 (wires
    and the schedule's own local ops), 3s + 2 (unpacks)."""
    topo = T.build("dgx1")
    problem = Problem(topo, builtin("reducescatter", 8), Request("packing"))
    from solvers.packing import Shape, plan
    from solvers.packing.schedule import build
    from solvers.packing.slots import slot_count

    packing = plan(topo, "reducescatter", None)
    shape = Shape(4)
    alg = build(problem, packing, slot_count(packing, 1, 8, shape), shape)
    out = coalesce(alg)
    if out is alg:
        pytest.skip("no scattered group on this packing")
    verify(out)
    verify_program(lower(out))
    unpacks = [t for t in out.transfers if t.src == t.dst and t.step % 3 == 2]
    assert unpacks and all(t.op == "reduce" and t.src_buf == "scratch" for t in unpacks)
    packs = [t for t in out.transfers if t.step % 3 == 0]
    assert all(t.src == t.dst and t.op == "copy" and t.dst_buf == "scratch" for t in packs)
    assert max(t.step for t in out.transfers) <= 3 * max(t.step for t in alg.transfers) + 2


@pytest.mark.parametrize("spec", ["dgx-h100:2", "ndv2:2", "dgx1"])
@pytest.mark.parametrize("name", ["hierarchical", "direct", "ring"])
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
def test_every_template_still_verifies_coalesced(spec: str, name: str, kind: str) -> None:
    topo = T.build(spec)
    try:
        alg = solvers.synthesize(Problem(topo, builtin(kind, topo.n_ranks), Request(name, chunks=2)))
    except CclError as e:  # a template that does not apply here
        pytest.skip(str(e))
    out = coalesce(alg)
    verify(out)
    program = lower(out)
    verify_program(program)
    assert program.n_messages <= lower(alg).n_messages  # never more messages
    assert len(network_groups(out)) == len(network_groups(alg))  # one group per (step, pair) still


def test_schedules_with_rounds_or_nothing_scattered_are_returned_as_they_are() -> None:
    topo = T.build("dgx1")
    smt = solvers.synthesize(Problem(topo, builtin("allgather", 8), Request("smt", steps=2)))
    assert smt.rounds is not None and coalesce(smt) is smt
    ring = solvers.synthesize(Problem(T.build("ring:4"), builtin("allgather", 4), Request("ring")))
    assert scattered_groups(ring) == 0 and coalesce(ring) is ring
