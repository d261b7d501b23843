"""Lowering: every template schedule lowers to a Program the Program verifier accepts (out of
place; in place whenever the schedule is correct in place and the collective's in-place aliasing
is its out-of-place one; and, lowered in place, always in both modes), plus the special cases:
input preservation, size classes of reused scratch, staging, swaps, fusion, determinism, and
random schedules (Hypothesis)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
import topologies as T
from ccl import Algorithm, Problem, Request, Topology, Transfer, VerificationError, verify
from ccl.core.collective import ROOTED_KINDS, allgather, allreduce, builtin, custom, reducescatter
from ccl.core.lower import lower
from ccl.core.verify_program import verify_program


def check(alg: Algorithm, channels: int = 1):
    verify(alg)
    program = lower(alg, channels=channels)
    verify_program(program)
    coll = alg.collective
    try:
        verify(alg, in_place=True)
    except VerificationError:
        pass
    else:
        if coll.in_place_aliases == coll.aliases:  # one memory out of place already (not alltoall)
            verify_program(program, in_place=True)
    # lowered in place: correct both ways, whatever the schedule does to the aliased memory
    fixed = lower(alg, channels=channels, in_place=True)
    verify_program(fixed)
    verify_program(fixed, in_place=True)
    for p in (program, fixed):
        assert not any(op.kind != "send" and op.buf == "input" for ops in p.ranks for op in ops)
    return program


TOPOLOGIES = ["ring:2", "ring:3", "line:4", "fully-connected:5", "ring:6", "star:5", "hypercube:8", "torus:2x3",
              "dgx1", pytest.param("ndv2:2", marks=pytest.mark.slow), pytest.param("dgx-a100:2", marks=pytest.mark.slow)]


@pytest.mark.parametrize("spec", TOPOLOGIES)
def test_every_template_lowers_to_a_verified_program(spec):
    topo = T.build(spec)
    n = topo.n_ranks
    count = 0
    for name in solvers.TEMPLATES:
        info = solvers.SOLVERS[name]
        for kind in info.kinds:
            for k in (1, 3):
                root = n - 1 if kind in ROOTED_KINDS else None
                try:
                    alg = solvers.synthesize(Problem(topo, builtin(kind, n, root), Request(name, chunks=k)))
                except ccl_input_errors():
                    continue  # e.g. hierarchical on a one-node topology
                check(alg, channels=1 + count % 2)
                count += 1
    assert count >= 20


def ccl_input_errors():
    from ccl import InfeasibleError, InputError

    return (InputError, InfeasibleError)


def test_lowering_is_deterministic():
    alg = solvers.synthesize(Problem(T.build("dgx1"), allreduce(8), Request("double-binary-tree", chunks=2)))
    assert lower(alg) == lower(alg)


def test_consecutive_slots_become_one_message():
    alg = solvers.synthesize(Problem(T.fully_connected(4), allgather(4), Request("direct", chunks=4)))
    program = check(alg)
    sends = [op for op in program.ranks[0] if op.kind == "send"]
    assert len(sends) == 3 and all(op.count == 4 for op in sends)


def test_schedules_that_write_their_input_work_on_scratch_copies():
    # Rank 1 accumulates the sum in its input slot, then sends it back into rank 0's output.
    coll = allreduce(2)
    alg = Algorithm("acc", coll, T.ring(2), (
        Transfer(0, 0, "input", 0, 1, "input", 0, 1, "reduce"),
        Transfer(1, 1, "input", 0, 0, "output", 0),
        Transfer(1, 1, "input", 0, 1, "output", 0),
    ))
    program = check(alg)
    first = program.ranks[1][0]
    assert (first.kind, first.step, first.src_buf, first.buf) == ("copy", -1, "input", "scratch")


def test_receives_into_a_slot_still_read_in_the_step_are_staged():
    # A swap of output slots between two ranks in one step: each rank sends output[own] and
    # receives into... the same logical slot on the peer, which the peer is sending.
    coll = custom("swap", 2, pre=[(0, 0), (1, 1)], post=[(1, 0), (0, 1)])
    alg = Algorithm("swap", coll, T.ring(2), (
        Transfer(0, 0, "input", 0, 1, "scratch", 0),
        Transfer(0, 1, "input", 0, 0, "scratch", 0),
        Transfer(1, 0, "scratch", 0, 0, "output", 0),
        Transfer(1, 1, "scratch", 0, 1, "output", 0),
    ))
    check(alg)
    exchange = Algorithm("exchange", coll, T.ring(2), (
        Transfer(0, 0, "input", 0, 0, "scratch", 0),
        Transfer(0, 1, "input", 0, 1, "scratch", 0),
        Transfer(1, 0, "scratch", 0, 1, "scratch", 0),
        Transfer(1, 1, "scratch", 0, 0, "scratch", 0),
        Transfer(2, 0, "scratch", 0, 0, "output", 0),
        Transfer(2, 1, "scratch", 0, 1, "output", 0),
    ))
    program = check(exchange)
    recv = next(op for op in program.ranks[0] if op.kind == "recv")
    assert recv.buf == "scratch" and any(op.kind == "copy" and op.step == 1 for op in program.ranks[0])


def test_a_local_swap_is_broken_with_a_snapshot():
    coll = custom("rotate", 1, pre=[(0, 0), (1, 0)], post=[(1, 0), (0, 0)])
    alg = Algorithm("rotate", coll, Topology("one", 1, ()), (
        Transfer(0, 0, "input", 0, 0, "scratch", 0),
        Transfer(0, 0, "input", 1, 0, "scratch", 1),
        Transfer(1, 0, "scratch", 0, 0, "scratch", 1),
        Transfer(1, 0, "scratch", 1, 0, "scratch", 0),
        Transfer(2, 0, "scratch", 0, 0, "output", 0),
        Transfer(2, 0, "scratch", 1, 0, "output", 1),
    ))
    program = check(alg)
    step1 = [op for op in program.ranks[0] if op.step == 1]
    assert len(step1) == 3  # a snapshot copy, then the two copies of the swap


def test_scratch_reused_for_pieces_of_different_sizes_is_split_by_size_class():
    # Forwarding on a line reuses scratch slots for pieces 0 and 1 of a chunk.
    alg = solvers.synthesize(Problem(T.line(4), allgather(4), Request("direct", chunks=2)))
    program = check(alg)
    assert any(len(set(row)) > 1 for row in program.scratch)


def test_chunks_whose_pieces_cannot_share_a_layout_are_refused():
    from ccl import CollectiveError
    from ccl.core.collective import Collective

    base = allgather(2).chunk_up(2)
    # Output slot 0 (piece 0) asking for chunk 1 (a piece 1) has no consistent memory layout.
    outputs = ((frozenset({1}), frozenset({0}), frozenset({2}), frozenset({3})),) * 2
    odd = Collective("odd", "custom", 2, base.inputs, outputs, ((None,) * 4,) * 2, chunk_factor=2)
    with pytest.raises(CollectiveError, match="holds piece 0 of a base slot but needs chunk 1"):
        lower(Algorithm("odd", odd, T.ring(2), ()))


# ---------------------------------------------------------------------- random schedules
def random_allgather(n: int, k: int, seed: int) -> Algorithm:
    """Every chunk spreads down a random tree, with random slack, sources read from input or
    the aliased output, and random relays through scratch."""
    rng = random.Random(seed)
    coll = allgather(n).chunk_up(k)
    transfers = []
    for q in range(n):
        for j in range(k):
            c = q * k + j
            where = {q: (-1, rng.choice([("input", j), ("output", c)]))}  # rank -> (arrival step, slot)
            for r in rng.sample([x for x in range(n) if x != q], n - 1):
                parent = rng.choice(sorted(where))
                at, slot = where[parent]
                step = at + 1 + rng.randint(0, 1)
                if rng.random() < 0.3:
                    transfers.append(Transfer(step, parent, slot[0], slot[1], r, "scratch", c))
                    transfers.append(Transfer(step + 1, r, "scratch", c, r, "output", c))
                    where[r] = (step, ("scratch", c))
                else:
                    transfers.append(Transfer(step, parent, slot[0], slot[1], r, "output", c))
                    where[r] = (step, ("output", c))
    return Algorithm(f"random-allgather-{seed}", coll, T.fully_connected(n), tuple(transfers))


def random_reducescatter(n: int, k: int, seed: int) -> Algorithm:
    """Every output piece is reduced up a random in-tree; accumulators are the input slot (a
    schedule that writes its input) or a scratch copy."""
    rng = random.Random(seed)
    coll = reducescatter(n).chunk_up(k)
    transfers = []
    for q in range(n):
        for j in range(k):
            slot = q * k + j  # the input slot every rank contributes from
            order = [q] + rng.sample([x for x in range(n) if x != q], n - 1)
            parent = {order[i]: rng.choice(order[:i]) for i in range(1, n)}
            children: dict[int, list[int]] = {}
            for child, p in parent.items():
                children.setdefault(p, []).append(child)
            acc = {}
            for r in order:
                if r == q:
                    acc[r] = ("output", j)
                elif rng.random() < 0.5:
                    acc[r] = ("input", slot)
                else:
                    transfers.append(Transfer(0, r, "input", slot, r, "scratch", slot))
                    acc[r] = ("scratch", slot)

            sends: dict[int, int] = {}
            for r in reversed(order):  # children come after their parent in ``order``
                ready = max([sends[c] + 1 for c in children.get(r, [])], default=1)
                sends[r] = ready + rng.randint(0, 1)
            for child, p in parent.items():
                transfers.append(Transfer(sends[child], child, *acc[child], p, *acc[p], 1, "reduce"))
    return Algorithm(f"random-reducescatter-{seed}", coll, T.fully_connected(n), tuple(transfers))


@settings(max_examples=40)
@given(st.integers(2, 6), st.integers(1, 3), st.integers(0, 10**6), st.integers(1, 2))
def test_random_allgather_schedules_lower_correctly(n, k, seed, channels):
    check(random_allgather(n, k, seed), channels)


@settings(max_examples=40)
@given(st.integers(2, 6), st.integers(1, 3), st.integers(0, 10**6))
def test_random_reducescatter_schedules_lower_correctly(n, k, seed):
    check(random_reducescatter(n, k, seed))


def test_without_fusion_every_transfer_stays_a_message():
    alg = solvers.synthesize(Problem(T.fully_connected(4), allreduce(4), Request("ring", chunks=2)))
    verify(alg)
    fused, separate = lower(alg), lower(alg, fuse=False)
    verify_program(separate)
    verify_program(separate, in_place=True)
    assert separate.n_messages == sum(1 for t in alg.transfers if t.src != t.dst) == 2 * fused.n_messages


@pytest.mark.parametrize(("lanes", "slots", "messages"), [(1, 6, 1), (2, 6, 2), (3, 6, 3), (4, 2, 2), (2, 1, 1)])
def test_fusion_keeps_a_message_per_lane(lanes, slots, messages):
    # `slots` consecutive slots from rank 0 to rank 1 in one step, over a link of `lanes` lanes:
    # a message travels on one lane, so fusion leaves min(lanes, slots) near-equal messages
    from ccl import Link

    topo = Topology("pair", 2, (Link(0, 1, 10.0, 1.0, lanes), Link(1, 0, 10.0, 1.0, lanes)))
    coll = builtin("alltoall", 2).chunk_up(slots)
    transfers = [Transfer(0, 0, "input", slots + j, 1, "output", j) for j in range(slots)]
    transfers += [Transfer(0, 1, "input", j, 0, "output", slots + j) for j in range(slots)]
    program = check(Algorithm("pair", coll, topo, tuple(transfers)))
    sends = [op for op in program.ranks[0] if op.kind == "send"]
    assert len(sends) == messages
    assert max(op.count for op in sends) - min(op.count for op in sends) <= 1
    assert sum(op.count for op in sends) == slots
