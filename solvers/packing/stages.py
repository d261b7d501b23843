"""Pipeline stages of a share of slots, and the runs and shares the schedules build from.

A tree's (or a route's) share of a part is cut into pipeline stages: ``down_stages`` says which
stage each slot goes in (uniform, tapered or ramped), ``up_stages`` the same up a tree (the
time reverse); ``slot_runs`` groups consecutive slots that start together into one transfer
per arc; ``slot_shares`` shares a part's slots among trees or routes by weight.
"""

from __future__ import annotations

from .trees import Tree


def slot_shares(trees: list[Tree], slots: int, weights: list[float] | None = None) -> list[int]:
    """The slots of a part each of ``trees`` (or routes: anything with a ``weight``) carries, in
    proportion to ``weights`` (default: their weights), largest remainders first."""
    weights = [t.weight for t in trees] if weights is None else weights
    total = sum(weights)
    exact = [w * slots / total for w in weights]
    out = [int(x) for x in exact]
    order = sorted(range(len(trees)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[: slots - sum(out)]:
        out[i] += 1
    return out


RAMPS = ((), (0.25, 0.5), (1 / 3, 0.5, 0.75))  # a ramped pipeline's first (and last) stages, as
# fractions of a full one, by ``Shape.ramp``: 1, steep (each stage twice the one before); 2,
# gentle (1.5 times: where the ranks before and after the bottleneck are only a little faster
# than it, a steep ramp's first stages leave it idle)


def ramp_fits(ramp: int, stages: int) -> bool:
    """Whether ``stages`` stages take the ramp: its stages at each end and a full one between
    (fewer are left uniform)."""
    return stages >= 2 * len(RAMPS[int(ramp)]) + 1


def down_stages(share: int, stages: int, taper: float = 1.0, ramp: int = 0) -> list[int]:
    """The pipeline stage of each of the ``share`` slots a tree carries. With ``taper`` < 1 the
    stages shrink geometrically (each ``taper`` times the one before), so the last piece, whose
    trip down the tree after the bottleneck is the pipeline's tail, is small while the stage
    count (and so the per-message latency paid) stays low. With ``ramp`` (1 or 2, and at least
    twice its stages plus one) the first and the last stages are the fractions ``RAMPS[ramp]``
    of a full one: the first piece, which every relay waits for before it can send, is small,
    and so is the last, which the ranks after the bottleneck pass on after it."""
    s = min(stages, share)
    ramps = RAMPS[int(ramp)]
    ramped = bool(ramps) and ramp_fits(ramp, s)
    if (taper >= 1.0 and not ramped) or s < 2:
        return [i * s // share for i in range(share)]
    weights = [taper**k for k in range(s)]
    if ramped:
        for k, f in enumerate(ramps):
            weights[k] *= f
            weights[s - 1 - k] *= f
    total = sum(weights) if ramped else (1 - taper**s) / (1 - taper)
    out: list[int] = []
    acc = 0.0
    for k in range(s):
        acc += weights[k]
        # the first k + 1 stages take round(share * acc / total) slots, at least one per stage
        end = share if k == s - 1 else max(k + 1, min(share - (s - k - 1), round(share * acc / total)))
        out.extend([k] * (end - len(out)))
    return out


def up_stages(share: int, stages: int, taper: float = 1.0, ramp: int = 0) -> list[int]:
    """Stages up a tree: tapered ones grow instead of shrinking (the time reverse of a
    broadcast's), so the first piece, whose climb to the bottleneck is the pipeline's fill,
    is the small one (a ramp is its own reverse)."""
    down = down_stages(share, stages, taper, ramp)
    if taper >= 1.0:
        return down
    last = down[-1]
    return [last - k for k in reversed(down)]


def slot_runs(starts: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(slot, start step) pairs in slot order -> (first slot, count, start) runs of
    consecutive slots that start together (one transfer per run and tree arc)."""
    out: list[list[int]] = []
    for j, st in starts:
        if out and out[-1][0] + out[-1][1] == j and out[-1][2] == st:
            out[-1][1] += 1
        else:
            out.append([j, 1, st])
    return [(a, b, c) for a, b, c in out]
