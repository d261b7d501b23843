"""An independent checker of MSCCL XML files: the runtimes' parser rules and an execution of the
file, written from the format and the runtimes' semantics with the standard library only (no
module of this project), so the exporter and its own importer are checked against a second
reading.

``check(text, target)`` raises AssertionError naming gpu/tb/step when a file breaks a rule,
deadlocks, or leaves a wrong result, in every mode it claims (``inplace``, ``outofplace``);
it returns the modes it executed.

Rules (the msccl executor's and RCCL's parsers): the ``<algo>`` attributes, ``ngpus`` gpus
with ids 0..n-1, threadblock ids 0..t-1 within the target's count, each channel id below
``nchannels`` (at most 32), step indices 0..s-1 below the target's 64, at most 32 threadblocks
with a send peer and 32 with a receive peer per channel, one threadblock per (peer, channel)
and role, ``cnt`` in 1..71, step types the target runs, sends only in threadblocks with a send
peer and receives with a receive peer, a dependency only on an existing step of another
threadblock, which has ``hasdep="1"``.

Execution (the runtimes' model): every threadblock runs its steps in order; a step with a
``depid`` waits until that threadblock has finished step ``deps``; a receive waits for the
next message of its connection (sender, receiver, channel: messages arrive in the order they
were sent); a send hands its data over and does not wait (the connection's buffer takes it).
Threadblocks are interleaved at random (several seeds): any order the runtime may choose
must finish and give the right result. Data are symbolic: a chunk holds the set of (gpu,
input chunk) it sums, a reduction of two sets that share an element is a double count.

Results (nccl-tests conventions): allreduce, every output chunk c sums every gpu's input
chunk c; allgather, output block g is gpu g's input; reducescatter, gpu g's output sums block
g of every input; alltoall, gpu g's output block h is gpu h's input block g; broadcast,
every output is the root's input; reduce, the root's output sums every input; gather, the
root's output block g is gpu g's input; scatter, gpu g's output is block g of the root's
input. In place (NCCL's layouts): allreduce, broadcast and reduce use one buffer; allgather's
input is output block g; reducescatter's output is input block g. Other collectives have no
runtime convention for in-place calls; a claim of one is reported, not executed.
"""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET

LIMITS = {"msccl": {"tbs": 128, "steps": 64, "channels": 32, "peers": 32, "cnt": 71, "fused": True},
          "rccl": {"tbs": 64, "steps": 64, "channels": 32, "peers": 32, "cnt": 71, "fused": False}}
RECEIVING = {"r", "rcs", "rrs", "rrc", "rrcs"}
SENDING = {"s", "rcs", "rrs", "rrcs"}
PLAIN = {"s", "r", "cpy", "re", "nop"}
IN_PLACE = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter")
SEEDS = (0, 1, 2)


def check(text: str, target: str, seeds=SEEDS) -> list[str]:
    """Every rule and every claimed mode (module docstring); returns the modes executed."""
    root = ET.fromstring(text)
    algo = _rules(root, LIMITS[target])
    done = []
    for mode, claimed in (("outofplace", algo["outofplace"]), ("inplace", algo["inplace"])):
        if not claimed:
            continue
        if mode == "inplace" and algo["coll"] not in IN_PLACE:
            continue
        for seed in seeds:
            _execute(algo, mode == "inplace", random.Random(seed))
        done.append(mode)
    return done


def _int(el, name: str) -> int:
    value = el.get(name)
    assert value is not None, f"<{el.tag}> lacks {name}"
    assert re.fullmatch(r"-?(0|[1-9][0-9]*)", value), f"<{el.tag}> {name}={value!r} is not a decimal integer"
    return int(value)


def _rules(root, lim: dict) -> dict:
    assert root.tag == "algo"
    for name in ("name", "proto", "coll"):
        assert root.get(name), f"<algo> lacks {name}"
    assert root.get("proto") in ("Simple", "LL", "LL128"), root.get("proto")
    n, nch = _int(root, "ngpus"), _int(root, "nchannels")
    algo = {"coll": root.get("coll"), "n": n, "nchunks": _int(root, "nchunksperloop"),
            "inplace": _int(root, "inplace"), "outofplace": _int(root, "outofplace"), "gpus": []}
    _int(root, "minBytes"), _int(root, "maxBytes")
    assert 1 <= nch <= lim["channels"], f"nchannels={nch}"
    gpus = list(root)
    assert [_int(g, "id") for g in gpus] == list(range(n)), "gpu ids are not 0..ngpus-1"
    for g in gpus:
        me = _int(g, "id")
        tbs = list(g)
        assert [_int(t, "id") for t in tbs] == list(range(len(tbs))), f"gpu {me}: tb ids are not 0..t-1"
        assert len(tbs) <= lim["tbs"], f"gpu {me}: {len(tbs)} threadblocks, the target allows {lim['tbs']}"
        roles: set[tuple[str, int, int]] = set()
        per_channel: dict[tuple[str, int], int] = {}
        blocks = []
        for t in tbs:
            tid, send, recv, chan = _int(t, "id"), _int(t, "send"), _int(t, "recv"), _int(t, "chan")
            where = f"gpu {me} tb {tid}"
            assert 0 <= chan < nch, f"{where}: chan={chan}"
            for role, peer in (("send", send), ("recv", recv)):
                if peer == -1:
                    continue
                assert 0 <= peer < n and peer != me, f"{where}: {role}={peer}"
                assert (role, peer, chan) not in roles, f"{where}: a second {role} threadblock for {peer} on {chan}"
                roles.add((role, peer, chan))
                per_channel[(role, chan)] = per_channel.get((role, chan), 0) + 1
                assert per_channel[(role, chan)] <= lim["peers"], f"{where}: too many {role} peers on channel {chan}"
            steps = []
            for k, s in enumerate(t):
                kind = s.get("type")
                w = f"{where} step {k}"
                assert _int(s, "s") == k, f"{w}: step indices are not 0..s-1"
                assert kind in (PLAIN | (RECEIVING | SENDING if lim["fused"] else set())), f"{w}: type {kind!r}"
                step = {"type": kind, "srcbuf": s.get("srcbuf"), "srcoff": _int(s, "srcoff"),
                        "dstbuf": s.get("dstbuf"), "dstoff": _int(s, "dstoff"), "cnt": _int(s, "cnt"),
                        "depid": _int(s, "depid"), "deps": _int(s, "deps"), "hasdep": _int(s, "hasdep")}
                if kind != "nop":
                    assert 1 <= step["cnt"] <= lim["cnt"], f"{w}: cnt={step['cnt']}"
                assert not (kind in SENDING and send == -1), f"{w}: a send without a send peer"
                assert not (kind in RECEIVING and recv == -1), f"{w}: a receive without a receive peer"
                steps.append(step)
            assert len(steps) <= lim["steps"], f"{where}: {len(steps)} steps, the target allows {lim['steps']}"
            blocks.append({"send": send, "recv": recv, "chan": chan, "steps": steps})
        waited = set()
        for tid, b in enumerate(blocks):
            for k, s in enumerate(b["steps"]):
                if s["depid"] == -1:
                    assert s["deps"] == -1, f"gpu {me} tb {tid} step {k}: deps without depid"
                    continue
                d, ds = s["depid"], s["deps"]
                assert 0 <= d < len(blocks) and d != tid and 0 <= ds < len(blocks[d]["steps"]), \
                    f"gpu {me} tb {tid} step {k}: waits for tb {d} step {ds}, which is not another's step"
                waited.add((d, ds))
        for tid, b in enumerate(blocks):
            for k, s in enumerate(b["steps"]):
                assert s["hasdep"] == (1 if (tid, k) in waited else 0), f"gpu {me} tb {tid} step {k}: hasdep"
        algo["gpus"].append({"i": _int(g, "i_chunks"), "o": _int(g, "o_chunks"), "s": _int(g, "s_chunks"),
                             "tbs": blocks})
    return algo


def _layout(algo: dict, in_place: bool):
    """Per gpu the initial buffers and a function naming a chunk's memory cell (in place, the
    aliased input and output chunks are one cell), and the expected outputs."""
    coll, n, gpus = algo["coll"], algo["n"], algo["gpus"]
    ins = [g["i"] for g in gpus]
    outs = [g["o"] for g in gpus]
    rooted_in = [r for r in range(n) if ins[r] > 0]
    rooted_out = [r for r in range(n) if outs[r] > 0]
    expect: list[dict[int, frozenset]] = [{} for _ in range(n)]
    if coll == "allreduce":
        for r in range(n):
            expect[r] = {c: frozenset((q, c) for q in range(n)) for c in range(outs[r])}
    elif coll == "allgather":
        k = ins[0]
        for r in range(n):
            expect[r] = {q * k + c: frozenset({(q, c)}) for q in range(n) for c in range(k)}
    elif coll in ("reducescatter", "reduce_scatter"):
        k = outs[0]
        for r in range(n):
            expect[r] = {c: frozenset((q, r * k + c) for q in range(n)) for c in range(k)}
    elif coll == "alltoall":
        k = outs[0] // n
        for r in range(n):
            expect[r] = {q * k + c: frozenset({(q, r * k + c)}) for q in range(n) for c in range(k)}
    elif coll == "broadcast":
        (root,) = rooted_in
        for r in range(n):
            expect[r] = {c: frozenset({(root, c)}) for c in range(outs[r])}
    elif coll == "reduce":
        (root,) = rooted_out
        expect[root] = {c: frozenset((q, c) for q in range(n)) for c in range(outs[root])}
    elif coll == "gather":
        (root,) = rooted_out
        k = ins[0]
        expect[root] = {q * k + c: frozenset({(q, c)}) for q in range(n) for c in range(k)}
    elif coll == "scatter":
        (root,) = rooted_in
        k = outs[0]
        for r in range(n):
            expect[r] = {c: frozenset({(root, r * k + c)}) for c in range(k)}
    else:
        raise AssertionError(f"coll={coll!r} is not a collective this checker knows")

    def cell(r: int, buf: str, off: int) -> tuple[int, str, int]:
        assert buf in ("i", "o", "s"), f"gpu {r}: buffer {buf!r}"
        size = {"i": ins[r], "o": outs[r], "s": gpus[r]["s"]}[buf]
        assert 0 <= off < size, f"gpu {r}: {buf}[{off}] is outside its {size} chunks"
        if not in_place:
            return (r, buf, off)
        if coll in ("allreduce", "broadcast", "reduce") and buf == "i":
            return (r, "o", off)
        if coll == "allgather" and buf == "i":
            return (r, "o", r * ins[r] + off)
        if coll in ("reducescatter", "reduce_scatter") and buf == "o":
            return (r, "i", r * outs[r] + off)
        return (r, buf, off)

    memory: dict[tuple[int, str, int], frozenset | None] = {}
    for r in range(n):
        for c in range(outs[r]):
            memory[cell(r, "o", c)] = None
        for c in range(ins[r]):
            memory[cell(r, "i", c)] = frozenset({(r, c)})
    return memory, cell, expect


def _execute(algo: dict, in_place: bool, rng: random.Random) -> None:
    memory, cell, expect = _layout(algo, in_place)
    n = algo["n"]
    pc = [[0] * len(g["tbs"]) for g in algo["gpus"]]
    fifo: dict[tuple[int, int, int], list[tuple[frozenset | None, ...]]] = {}

    def read(r: int, buf: str, off: int, cnt: int) -> list:
        return [memory.get(cell(r, buf, off + x)) for x in range(cnt)]

    def write(r: int, buf: str, off: int, values: list) -> None:
        for x, v in enumerate(values):
            memory[cell(r, buf, off + x)] = v

    def add(a, b, where: str):
        assert a is not None and b is not None, f"{where}: reduces a chunk that holds no data yet"
        assert not (a & b), f"{where}: counts {sorted(a & b)[:3]} twice"
        return a | b

    def ready(r: int, t: int) -> bool:
        tb = algo["gpus"][r]["tbs"][t]
        k = pc[r][t]
        if k >= len(tb["steps"]):
            return False
        s = tb["steps"][k]
        if s["depid"] != -1 and pc[r][s["depid"]] <= s["deps"]:
            return False
        if s["type"] in RECEIVING:
            return bool(fifo.get((tb["recv"], r, tb["chan"])))
        return True

    def run(r: int, t: int) -> None:
        tb = algo["gpus"][r]["tbs"][t]
        k = pc[r][t]
        s = tb["steps"][k]
        kind, cnt, where = s["type"], s["cnt"], f"gpu {r} tb {t} step {k}"
        got = None
        if kind in RECEIVING:
            got = list(fifo[(tb["recv"], r, tb["chan"])].pop(0))
            assert len(got) == cnt, f"{where}: receives {cnt} chunk(s), the message has {len(got)}"
        out = None
        if kind == "s":
            out = read(r, s["srcbuf"], s["srcoff"], cnt)
        elif kind in ("r", "rcs"):
            write(r, s["dstbuf"], s["dstoff"], got)
            out = got
        elif kind in ("rrc", "rrcs", "rrs"):
            summed = [add(a, b, where) for a, b in zip(read(r, s["srcbuf"], s["srcoff"], cnt), got)]
            if kind != "rrs":
                write(r, s["dstbuf"], s["dstoff"], summed)
            out = summed
        elif kind == "cpy":
            write(r, s["dstbuf"], s["dstoff"], read(r, s["srcbuf"], s["srcoff"], cnt))
        elif kind == "re":
            src, dst = read(r, s["srcbuf"], s["srcoff"], cnt), read(r, s["dstbuf"], s["dstoff"], cnt)
            write(r, s["dstbuf"], s["dstoff"], [add(d, x, where) for d, x in zip(dst, src)])
        if kind in SENDING:
            assert out is not None and all(v is not None for v in out), f"{where}: sends a chunk with no data"
            fifo.setdefault((r, tb["send"], tb["chan"]), []).append(tuple(out))
        pc[r][t] = k + 1

    # which threadblocks a step's end may let go on: those that wait for the threadblock, and
    # the receiver of the connection it sends on
    waiters = [[set() for _ in g["tbs"]] for g in algo["gpus"]]
    receiver: dict[tuple[int, int, int], int] = {}
    for r, g in enumerate(algo["gpus"]):
        for t, tb in enumerate(g["tbs"]):
            for st in tb["steps"]:
                if st["depid"] != -1:
                    waiters[r][st["depid"]].add(t)
            if tb["recv"] != -1:
                receiver[(tb["recv"], r, tb["chan"])] = t
    pending = sum(len(tb["steps"]) for g in algo["gpus"] for tb in g["tbs"])
    pool: list[tuple[int, int]] = []  # ready threadblocks (the random choice is among them)
    where: dict[tuple[int, int], int] = {}

    def recheck(x: tuple[int, int]) -> None:
        on = ready(*x)
        if on and x not in where:
            where[x] = len(pool)
            pool.append(x)
        elif not on and x in where:
            i = where.pop(x)
            last = pool.pop()
            if last != x:
                pool[i] = last
                where[last] = i

    for r, g in enumerate(algo["gpus"]):
        for t in range(len(g["tbs"])):
            recheck((r, t))
    while pending:
        if not pool:
            stuck = [f"gpu {r} tb {t} step {pc[r][t]}" for r, g in enumerate(algo["gpus"])
                     for t, tb in enumerate(g["tbs"]) if pc[r][t] < len(tb["steps"])]
            raise AssertionError(f"deadlock: no threadblock can go on ({', '.join(stuck[:4])} ...)")
        # the random choice of which threadblock goes next, and for how many of its ready
        # steps, is the interleaving
        r, t = pool[rng.randrange(len(pool))]
        tb = algo["gpus"][r]["tbs"][t]
        for _ in range(rng.randint(1, 4)):
            sends = tb["steps"][pc[r][t]]["type"] in SENDING
            run(r, t)
            pending -= 1
            for u in waiters[r][t]:
                recheck((r, u))
            if sends:
                peer = tb["send"]
                u = receiver.get((r, peer, tb["chan"]))
                assert u is not None, f"gpu {r} tb {t}: gpu {peer} has no threadblock receiving on its channel"
                recheck((peer, u))
            recheck((r, t))
            if (r, t) not in where:
                break
    left = [key for key, queue in fifo.items() if queue]
    assert not left, f"messages never received on (sender, receiver, channel) {left[:3]}"
    for r in range(n):
        for c, want in expect[r].items():
            have = memory.get(cell(r, "o", c))
            assert have == want, (f"gpu {r} output chunk {c}: holds {sorted(have or ())[:4]}, expected "
                                  f"{sorted(want)[:4]} ({'in place' if in_place else 'out of place'})")
