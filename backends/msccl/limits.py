"""What each runtime accepts: spellings and limits, and the check of an ``Algo`` against them.

``check(algo, target)`` returns every violation as a ``Violation`` naming gpu/tb/step (the
exporter refuses to write a file with any; ``ccl verify FILE.xml`` reports them for the target
a file is meant for). Limits are the runtimes' compile-time constants (the parsers reject a
file beyond them, or the kernels index past their arrays).
"""

from __future__ import annotations

from dataclasses import dataclass

from ccl.core.errors import BackendError, InputError

from .model import PROTOCOLS, Algo, where


@dataclass(frozen=True)
class Target:
    name: str
    max_tbs: int  # threadblocks per gpu
    max_steps: int  # steps per threadblock
    max_channels: int
    max_cnt: int  # chunks one step may move
    max_peers: int  # threadblocks with a send peer on one channel (and, apart, with a receive peer)
    coll: dict[str, str]  # collective kind -> coll attribute
    fused: bool  # runs the fused step types rcs, rrs, rrc, rrcs
    description: str


_COMMON = {"allreduce": "allreduce", "allgather": "allgather", "alltoall": "alltoall", "broadcast": "broadcast",
           "reduce": "reduce", "gather": "gather", "scatter": "scatter"}

# The executor's parser allows 32 threadblocks per channel (1,024 per gpu), but every
# threadblock of the kernel must be resident at once (they spin on each other) and a waited-on
# threadblock's id is kept in 8 bits: 128 is the practical limit. Both build with 64 steps per
# threadblock (the step index ``s``, nops included, must stay below MSCCL_MAX_NUM_STEPS) and
# accept cnt up to 71 (MSCCL_MAX_COUNT 72); both parsers refuse a 33rd threadblock with a send
# peer on one channel, and apart a 33rd with a receive peer (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL).
# RCCL builds with 64 threadblocks per gpu and (since rocm-6.0) runs only s, r, cpy, re and nop.
TARGETS = {
    "msccl": Target("msccl", max_tbs=128, max_steps=64, max_channels=32, max_cnt=71, max_peers=32,
                    coll={**_COMMON, "reducescatter": "reducescatter"}, fused=True,
                    description="the msccl executor in NCCL (Azure/msccl-executor-nccl)"),
    "rccl": Target("rccl", max_tbs=64, max_steps=64, max_channels=32, max_cnt=71, max_peers=32,
                   coll={**_COMMON, "reducescatter": "reducescatter"}, fused=False,
                   description="RCCL's MSCCL support (ROCm/rccl src/misc/msccl)"),
}


class Unfit(BackendError):
    """A schedule the target's limits cannot hold, however its ops are laid out: ``limit``
    names the limit (threadblocks, channels, collective), ``allowed`` the target's value,
    ``need`` what the schedule needs (None when it is not a number) and ``gpu`` where."""

    def __init__(self, message: str, *, target: str, limit: str, allowed: int | None, need: int | None,
                 gpu: int | None = None) -> None:
        super().__init__(message)
        self.target, self.limit, self.allowed, self.need, self.gpu = target, limit, allowed, need, gpu

    def to_json(self) -> dict:
        return {**super().to_json(), "target": self.target, "limit": self.limit, "allowed": self.allowed,
                "need": self.need, "gpu": self.gpu}


@dataclass(frozen=True)
class Violation:
    gpu: int | None
    tb: int | None
    step: int | None
    message: str

    def __str__(self) -> str:
        place = where(self.gpu, self.tb, self.step)
        return f"{place}: {self.message}" if place else self.message


def target(name: str) -> Target:
    if name not in TARGETS:
        raise InputError(f"unknown MSCCL target {name!r} (known: {', '.join(TARGETS)})")
    return TARGETS[name]


def check(algo: Algo, tgt: Target) -> list[Violation]:
    """Every way ``algo`` breaks ``tgt``'s rules: attributes, limits, ids, peers, dependencies."""
    out: list[Violation] = []

    def bad(message: str, gpu: int | None = None, tb: int | None = None, step: int | None = None) -> None:
        out.append(Violation(gpu, tb, step, message))

    if algo.proto not in PROTOCOLS:
        bad(f"proto={algo.proto!r} is not one of {', '.join(PROTOCOLS)}")
    if algo.coll not in tgt.coll.values():
        bad(f"coll={algo.coll!r}: {tgt.name} knows {', '.join(sorted(set(tgt.coll.values())))}")
    if not 1 <= algo.nchannels <= tgt.max_channels:
        bad(f"nchannels={algo.nchannels} is not in 1..{tgt.max_channels}")
    if algo.min_bytes < 0 or algo.max_bytes < 0 or (algo.max_bytes and algo.max_bytes < algo.min_bytes):
        bad(f"minBytes={algo.min_bytes} maxBytes={algo.max_bytes}: need 0 <= minBytes <= maxBytes "
            "(maxBytes 0: no upper limit)")
    if not (algo.inplace or algo.outofplace):
        bad("inplace=0 and outofplace=0: the runtime would never pick the algorithm")
    if tgt.name == "rccl":  # its parser also checks the buffer sizes against nchunksperloop
        for g in algo.gpus:
            for what, have, times in (("i_chunks", g.i_chunks, algo.ngpus if algo.coll == "allgather" else 1),
                                      ("o_chunks", g.o_chunks, algo.ngpus if algo.coll == "reducescatter" else 1)):
                if have > 0 and have * times != algo.nchunksperloop and algo.coll not in ("gather", "scatter"):
                    bad(f"{what}={have}: rccl requires {what} x {times} = nchunksperloop ({algo.nchunksperloop}) "
                        "or 0", g.id)
    if algo.missing:
        bad(f"attribute(s) {', '.join(algo.missing)} missing from <algo>: {tgt.name} refuses the file or never "
            "picks the algorithm")
    if sorted(g.id for g in algo.gpus) != list(range(algo.ngpus)):
        bad(f"ngpus={algo.ngpus} but the gpu ids are not 0..{algo.ngpus - 1}, each once")
    for g in algo.gpus:
        if len(g.tbs) > tgt.max_tbs:
            bad(f"{len(g.tbs)} threadblocks, {tgt.name} allows {tgt.max_tbs}", g.id)
        per_channel: dict[tuple[str, int], int] = {}
        conns: dict[tuple[str, int, int], int] = {}
        for pos, tb in enumerate(g.tbs):
            if tb.id != pos:
                bad(f"threadblock ids must be 0, 1, 2, ... in order (found {tb.id} at position {pos})", g.id, tb.id)
            if not 0 <= tb.chan < algo.nchannels:
                bad(f"chan={tb.chan} is not in 0..{algo.nchannels - 1}", g.id, tb.id)
            for role, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer == -1:
                    continue
                per_channel[(role, tb.chan)] = per_channel.get((role, tb.chan), 0) + 1
                if per_channel[(role, tb.chan)] == tgt.max_peers + 1:
                    bad(f"more than {tgt.max_peers} threadblocks with a {role} peer on channel {tb.chan}: {tgt.name} "
                        f"allows {tgt.max_peers} per channel", g.id, tb.id)
                if not 0 <= peer < algo.ngpus or peer == g.id:
                    bad(f"{role}={peer} is not another gpu", g.id, tb.id)
                key = (role, peer, tb.chan)
                if key in conns:
                    bad(f"tb {conns[key]} already has the {role} connection with gpu {peer} on channel {tb.chan}",
                        g.id, tb.id)
                conns[key] = tb.id
            if len(tb.steps) > tgt.max_steps:
                bad(f"{len(tb.steps)} steps, {tgt.name} allows {tgt.max_steps} per threadblock", g.id, tb.id)
            for k, s in enumerate(tb.steps):
                if s.s != k:
                    bad(f"step indices must be 0, 1, 2, ... in order (found {s.s} at position {k})", g.id, tb.id, s.s)
                if s.type in ("rcs", "rrs", "rrc", "rrcs") and not tgt.fused:
                    bad(f"step type {s.type!r}: {tgt.name} runs only s, r, cpy, re and nop", g.id, tb.id, s.s)
                if s.type != "nop" and not 1 <= s.cnt <= tgt.max_cnt:
                    bad(f"cnt={s.cnt} is not in 1..{tgt.max_cnt}", g.id, tb.id, s.s)
                if s.sends and tb.send == -1:
                    bad(f"a {s.type!r} step in a threadblock with send=-1", g.id, tb.id, s.s)
                if s.receives and tb.recv == -1:
                    bad(f"a {s.type!r} step in a threadblock with recv=-1", g.id, tb.id, s.s)
                if (s.depid == -1) != (s.deps == -1):
                    bad(f"depid={s.depid} deps={s.deps}: both -1 or both set", g.id, tb.id, s.s)
                elif s.depid != -1:
                    if not 0 <= s.depid < len(g.tbs):
                        bad(f"depid={s.depid} is not a threadblock of the gpu", g.id, tb.id, s.s)
                    elif not 0 <= s.deps < len(g.tbs[s.depid].steps):
                        bad(f"deps={s.deps} is not a step of tb {s.depid}", g.id, tb.id, s.s)
                    elif s.depid == tb.id:
                        bad("depends on its own threadblock (steps of a threadblock already run in order)",
                            g.id, tb.id, s.s)
                    elif not g.tbs[s.depid].steps[s.deps].hasdep:
                        bad(f"waits for tb {s.depid} step {s.deps}, which has hasdep=0 (it would never signal)",
                            g.id, tb.id, s.s)
                if s.hasdep not in (0, 1):
                    bad(f"hasdep={s.hasdep} is not 0 or 1", g.id, tb.id, s.s)
    return out


def never_signalled(algo: Algo) -> list[tuple[int, int, int, int]]:
    """Steps that wait for a step which never signals: ``depid``/``deps`` name a step of another
    threadblock whose ``hasdep`` is 0. Both runtimes signal a step's completion only when its
    hasdep is set, so such a step waits forever (a deadlock whatever the data). Returns (gpu,
    tb, step, line) of each."""
    out = []
    for g in algo.gpus:
        for tb in g.tbs:
            for s in tb.steps:
                if s.depid == -1 or s.depid == tb.id or not 0 <= s.depid < len(g.tbs):
                    continue
                target = g.tbs[s.depid].steps
                if 0 <= s.deps < len(target) and target[s.deps].hasdep == 0:
                    out.append((g.id, tb.id, s.s, s.line))
    return out
