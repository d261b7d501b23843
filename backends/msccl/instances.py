"""Instances: N copies of a Program side by side, each on its own channels and its own share of
every chunk (what msccl-tools calls instances; more threadblocks and channels move the same
bytes in parallel).

With chunk factor k, instance i's copy of piece y of a base slot is piece i*k + y of the
collective cut N times finer (chunk factor k*N): the copy moves exactly what the original moved,
so it is correct for whatever sizes its pieces have. A run of consecutive slots within one base
slot stays consecutive; a run crossing base slots is cut there (on both ends of a message, so a
send and its receive are cut alike). Scratch slot x of instance i is i*S + x (S: the rank's
scratch slots). Channel c of instance i is i*C + c (C: the Program's channels).
"""

from __future__ import annotations

from collections import defaultdict

from ccl.core.errors import BackendError
from ccl.core.program import RECV, SEND, Program


def replicate(program: Program, instances: int) -> Program:
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise BackendError(f"instances must be a positive integer, got {instances!r}")
    if instances == 1:
        return program
    n_inst = instances
    k = program.chunk_factor
    ranks = program.ranks
    size = [len(s) for s in program.scratch]

    def cuts(buf: str, index: int, count: int) -> set[int]:
        """Offsets within [1, count) where a run crosses a base slot (input and output only)."""
        if buf == "scratch":
            return set()
        return {off for off in range(1, count) if (index + off) % k == 0}

    # cut points of every op: its own, its source's, and for messages the partner's
    own: list[list[set[int]]] = []
    for ops in ranks:
        row = []
        for op in ops:
            c = cuts(op.buf, op.index, op.count)
            if op.src_buf:
                c |= cuts(op.src_buf, op.src_index, op.count)
            row.append(c)
        own.append(row)
    sends: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for r, ops in enumerate(ranks):
        for i, op in enumerate(ops):
            if op.kind == SEND:
                sends[(r, op.peer, op.channel)].append(i)
            elif op.kind == RECV:
                recvs[(op.peer, r, op.channel)].append(i)
    for (a, b, _c), out in sends.items():
        for i, j in zip(out, recvs.get((a, b, _c), [])):
            both = own[a][i] | own[b][j]
            own[a][i] = own[b][j] = both
    pieces = max((len(c) + 1 for row in own for c in row), default=1)

    def new_index(buf: str, index: int, inst: int, rank: int) -> int:
        if buf == "scratch":
            return inst * size[rank] + index
        base, y = divmod(index, k)
        return base * k * n_inst + inst * k + y

    rows = []
    for r, ops in enumerate(ranks):
        first: list[int] = []  # old op -> first new op of instance 0
        width: list[int] = []  # old op -> new ops per instance
        row = []
        for i, op in enumerate(ops):
            bounds = [0, *sorted(own[r][i]), op.count]
            first.append(len(row))
            width.append(len(bounds) - 1)
            for inst in range(n_inst):
                deps = tuple(first[d] + inst * width[d] + p for d in op.deps for p in range(width[d]))
                for p, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
                    network = op.kind in (SEND, RECV)
                    row.append((op.kind, op.step, op.buf, new_index(op.buf, op.index + lo, inst, r), hi - lo, op.peer,
                                op.src_buf, new_index(op.src_buf, op.src_index + lo, inst, r) if op.src_buf else -1,
                                (op.tag * n_inst + inst) * pieces + p if network else -1,
                                inst * program.channels + op.channel if network else op.channel, deps))
        rows.append(row)
    scratch = tuple(tuple(inst * k + c for inst in range(n_inst) for c in program.scratch[r])
                    for r in range(program.n_ranks))
    return Program(name=program.name, collective=program.collective.chunk_up(n_inst), topology=program.topology,
                   ops=rows, scratch=scratch, channels=program.channels * n_inst, solver=program.solver,
                   steps=program.steps)
