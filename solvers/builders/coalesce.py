"""Coalescing: the pieces one rank sends another in one step travel as one message.

A schedule often sends a peer, in one step, several pieces that lie apart in its buffers: a
relay forwarding what it received from many roots (a node's NVSwitch star after the NIC
rails), or a leaf sending the partial sums of many roots up a reduce tree. The lowering fuses
only pieces that are consecutive on both sides, so each of the others is a message of its own,
and in the alpha-beta model every message holds its lane for the link's latency: on a port
shared by many pairs, many small messages per pair and step cost a large share of the port's
bandwidth.

``coalesce(algorithm)`` sends every such group through scratch instead:

* the sender packs the pieces, by local copies, into a fresh contiguous scratch range (in the
  order of their source slots; one pack serves every peer that gets the same pieces);
* one transfer moves the range into a fresh scratch range of the receiver;
* the receiver unpacks each piece where the schedule put it, with the schedule's op (a copy,
  or a reduce into the destination).

Pieces already consecutive at the source are sent from there (no pack); pieces consecutive
at the destination, in the same order and with one op, are received there (no unpack). Step
``s`` of the schedule becomes steps ``3s`` (packs), ``3s + 1`` (transfers and the schedule's
own local ops) and ``3s + 2`` (unpacks), so every read still sees what it saw before. The
local copies are what a runtime does to send a strided set of pieces as one message; the
simulator charges them only with ``local_bandwidth``. Scratch ranges are not reused (about
one output buffer more per rank on an allgather).
"""

from __future__ import annotations

from operator import itemgetter

from ccl.core.algorithm import Algorithm, Transfer

__all__ = ["coalesce", "coalesce_rows", "scattered_groups"]


# fields of a transfer row, in ``Transfer`` order
STEP, SRC, SBUF, SIDX, DST, DBUF, DIDX, COUNT, OP = range(9)


def _consecutive(ts: list) -> tuple[bool, bool]:
    """(sources consecutive, destinations consecutive in the same order with one op) of pieces
    sorted by source slot."""
    src = dst = True
    for a, b in zip(ts, ts[1:]):
        if src and not (a[SBUF] == b[SBUF] and a[SIDX] + a[COUNT] == b[SIDX]):
            src = False
        if dst and not (a[DBUF] == b[DBUF] and a[DIDX] + a[COUNT] == b[DIDX] and a[OP] == b[OP]):
            dst = False
        if not (src or dst):
            break
    return src, dst


def _groups(rows) -> dict[tuple[int, int, int], list]:
    groups: dict[tuple[int, int, int], list] = {}
    for t in rows:
        if t[SRC] != t[DST]:
            key = (t[STEP], t[SRC], t[DST])
            group = groups.get(key)
            if group is None:
                groups[key] = [t]
            else:
                group.append(t)
    return groups


def _order(ts: list) -> None:
    if len(ts) > 1:
        ts.sort(key=lambda t: (t[SBUF], t[SIDX]))


def scattered_groups(algorithm: Algorithm) -> int:
    """How many (step, sender, receiver) groups would travel as more than one message."""
    count = 0
    for ts in _groups(algorithm.transfers).values():
        if len(ts) > 1:
            _order(ts)
            if _consecutive(ts) != (True, True):
                count += 1
    return count


def coalesce(algorithm: Algorithm) -> Algorithm:
    """The same schedule with every scattered group of pieces sent as one contiguous range
    (see the module docstring); the algorithm itself when no group is scattered or when it
    fixes its rounds per step (SCCL's accounting, which the extra steps would break)."""
    if algorithm.rounds is not None:
        return algorithm
    rows = coalesce_rows(algorithm.transfers, algorithm.collective.n_ranks)
    if rows is None:
        return algorithm
    return Algorithm(algorithm.name, algorithm.collective, algorithm.topology,
                     tuple(map(Transfer.unchecked, rows)), solver=algorithm.solver)


def coalesce_rows(rows, n_ranks: int) -> list[tuple] | None:
    """``coalesce`` on transfer rows (tuples in ``Transfer`` field order) of an algorithm on
    ``n_ranks`` ranks without rounds: the new rows in step order, or None when no group is
    scattered."""
    groups = _groups(rows)
    scattered = False
    for ts in groups.values():
        if len(ts) > 1:
            _order(ts)
            if not scattered and _consecutive(ts) != (True, True):
                scattered = True
    if not scattered:
        return None
    top = [0] * n_ranks  # first free scratch slot per rank
    for t in rows:
        if t[SBUF] == "scratch" and t[SIDX] + t[COUNT] > top[t[SRC]]:
            top[t[SRC]] = t[SIDX] + t[COUNT]
        if t[DBUF] == "scratch" and t[DIDX] + t[COUNT] > top[t[DST]]:
            top[t[DST]] = t[DIDX] + t[COUNT]
    out: list[tuple] = [(3 * t[STEP] + 1, *t[1:]) for t in rows if t[SRC] == t[DST]]
    packs: dict[tuple, int] = {}
    for (step, u, v), ts in groups.items():
        wire = 3 * step + 1
        if len(ts) == 1:
            out.append((wire, *ts[0][1:]))
            continue
        src_ok, dst_ok = _consecutive(ts)
        if src_ok and dst_ok:
            out.extend((wire, *t[1:]) for t in ts)
            continue
        total = sum(t[COUNT] for t in ts)
        first = ts[0]
        if src_ok:
            sbuf, sidx = first[SBUF], first[SIDX]
        else:
            key = (step, u, tuple((t[SBUF], t[SIDX], t[COUNT]) for t in ts))
            sbuf = "scratch"
            sidx = packs.get(key, -1)
            if sidx < 0:
                sidx = packs[key] = top[u]
                top[u] += total
                at = sidx
                for t in ts:
                    out.append((wire - 1, u, t[SBUF], t[SIDX], u, "scratch", at, t[COUNT], "copy"))
                    at += t[COUNT]
        if dst_ok:
            out.append((wire, u, sbuf, sidx, v, first[DBUF], first[DIDX], total, first[OP]))
            continue
        didx = top[v]
        top[v] += total
        out.append((wire, u, sbuf, sidx, v, "scratch", didx, total, "copy"))
        at = didx
        for t in ts:
            out.append((wire + 1, v, "scratch", at, v, t[DBUF], t[DIDX], t[COUNT], t[OP]))
            at += t[COUNT]
    out.sort(key=itemgetter(STEP))  # stable: each step keeps the order it was built in
    return out
