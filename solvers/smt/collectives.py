"""Multi-root collectives, as custom collectives (pre/postconditions) any exact solver takes.

With roots R = (r_0, ..., r_{k-1}):

* ``broadcast``: root r_i holds buffer i; every rank ends with all k buffers (output slot i).
  A broadcast of one buffer that several roots already hold is ``replicated_broadcast``.
* ``gather``: every rank's buffer ends on every root (output slot q of a root = rank q's buffer).
* ``scatter``: root r_i holds n pieces; rank q ends with piece q of every root (output slot i).
* ``reduce``: every root ends with the sum of all ranks' buffers.

Chunk ids: broadcast and gather number buffers by root / rank; scatter piece q of root i is
i x n + q; reduce's chunk q is rank q's buffer. ``chunks`` splits every slot further.
"""

from __future__ import annotations

from collections.abc import Sequence

from ccl.collective import Collective, custom
from ccl.errors import CollectiveError

MULTI_ROOT_KINDS = ("broadcast", "gather", "scatter", "reduce")


def multi_root(kind: str, n_ranks: int, roots: Sequence[int], chunks: int = 1) -> Collective:
    roots = tuple(roots)
    if kind not in MULTI_ROOT_KINDS:
        raise CollectiveError(f"multi-root {kind!r} is not defined; multi-root kinds: {', '.join(MULTI_ROOT_KINDS)}")
    if not roots:
        raise CollectiveError(f"multi-root {kind} needs at least one root")
    for r in roots:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n_ranks:
            raise CollectiveError(f"root {r!r} is not a rank in 0..{n_ranks - 1}")
    if len(set(roots)) != len(roots):
        raise CollectiveError(f"roots {list(roots)} name a rank twice")
    name = f"{kind}-roots-{'-'.join(map(str, roots))}"
    ranks = range(n_ranks)
    if kind == "broadcast":
        pre = [(i, r) for i, r in enumerate(roots)]
        post = [(i, q) for q in ranks for i in range(len(roots))]
    elif kind == "gather":
        pre = [(q, q) for q in ranks]
        post = [(q, r) for r in roots for q in ranks]
    elif kind == "scatter":
        pre = [(i * n_ranks + q, r) for i, r in enumerate(roots) for q in ranks]
        post = [(i * n_ranks + q, q) for q in ranks for i in range(len(roots))]
    else:
        pre = [(q, q) for q in ranks]
        post = [(frozenset(ranks), r) for r in roots]
    return custom(name, n_ranks, pre, post).chunk_up(chunks)


def replicated_broadcast(n_ranks: int, roots: Sequence[int], chunks: int = 1) -> Collective:
    """One buffer that every root already holds, to every rank (any root may serve any rank)."""
    roots = tuple(roots)
    for r in roots:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n_ranks:
            raise CollectiveError(f"root {r!r} is not a rank in 0..{n_ranks - 1}")
    if not roots or len(set(roots)) != len(roots):
        raise CollectiveError(f"roots {list(roots)} must be distinct ranks, at least one")
    name = f"broadcast-replicated-{'-'.join(map(str, roots))}"
    return custom(name, n_ranks, [(0, r) for r in roots], [(0, q) for q in range(n_ranks)]).chunk_up(chunks)
