"""Fitting the calibrated parameters (``calibration``) to measured collective calls.

A ``Row`` is one measured call: a collective of some size on a machine, under a runtime (bare
NCCL, RCCL, torch over NCCL), with what the run forced or disabled and, where known, the
algorithm NCCL picked. The model's time for it (``predict``) is NCCL's pick under the
calibration (``nccl.price``) plus the runtime's per-call cost.

``fit`` moves the parameters of ``FITTED`` (each between its bounds) to minimize, with a robust
loss, the log errors of the rows' times, each group of rows (one sweep) weighing the same, and
the misses of the picks the rows report. Two uses:

* the published measurements of ``benchmarks/validate.py``: many machines, every parameter
  constrained by some rows, fitted freely;
* a user's own machine (``ccl probe --nccl-tests``): a sweep or two from one machine leave most
  parameters unconstrained (a one-node sweep says nothing of the network; a sweep NVLS wins at
  large sizes says little of the unicast link efficiency). ``applicable`` keeps the parameters
  that can matter to the rows (the machine's own generation, the network only across nodes),
  and ``prior_weight`` adds a residual per fitted parameter: its relative distance from the
  prior calibration's value, times the weight. A parameter the rows do not move stays at the
  prior's value; one they constrain moves as far as the rows ask, the prior pulling back by
  about the weight squared over the rows' own weight (a small bias for a small weight).

``to_json`` writes a fitted calibration with a source per parameter: the fitted ones name the
rows they were fitted on, the rest keep the prior's source.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from . import nccl
from .calibration import Calibration, shipped
from .machine import Machine

# The fitted parameters, as (name, lower bound, upper bound): the vector the optimizer moves.
# ``group.key`` names an entry of a mapping; ``hop_scale.P`` scales the prior's per-hop latency of
# protocol P on every link class.
FITTED = (
    ("link_efficiency.hopper", 0.4, 1.0), ("link_efficiency.ampere", 0.4, 1.0),
    ("link_efficiency.blackwell", 0.4, 1.0), ("link_efficiency.cdna3", 0.2, 1.0),
    ("nvls_efficiency.hopper", 0.3, 1.0), ("nvls_efficiency.blackwell", 0.3, 1.0),
    ("net_efficiency", 0.3, 1.0),
    ("launch_us.LL", 2.0, 30.0), ("launch_us.LL128", 2.0, 30.0), ("launch_us.Simple", 2.0, 30.0),
    ("hop_scale.LL", 0.25, 4.0), ("hop_scale.LL128", 0.25, 4.0), ("hop_scale.Simple", 0.25, 4.0),
    ("nvls_latency_us", 1.0, 60.0), ("call_us.torch-nccl", 0.0, 200.0), ("call_us.rccl", 0.0, 200.0),
    ("fill_us", 0.0, 500.0), ("fill_bytes", 2.0**20, 2.0**31), ("ll_cap_scale", 0.3, 10.0),
    ("graph_launch_share", 0.0, 1.0),
    ("latency_scale.ampere", 0.3, 5.0), ("latency_scale.blackwell", 0.3, 5.0), ("latency_scale.cdna3", 0.3, 5.0),
    ("fabric_latency_us.aws-efa", 1.0, 200.0), ("fabric_latency_us.gcp-tcpxo", 1.0, 200.0),
)
NAMES = tuple(name for name, _, _ in FITTED)
BOUNDS = {name: (lo, hi) for name, lo, hi in FITTED}
PICK_WEIGHT = 3.0  # a reported pick missed counts as much as a time off by 3x its log ratio


@dataclass(frozen=True)
class Row:
    """One measured call. ``group``: rows of one sweep (each group weighs the same in a fit);
    ``runtime``: "nccl", "rccl" or "torch-nccl" (what prices it and the per-call cost it pays);
    ``forbid``: NCCL algorithms the run disabled; ``only``: the one it forced (NCCL_ALGO);
    ``graph``: calls captured in a CUDA/HIP graph (nccl-tests -G); ``known`` and ``protocol``:
    the algorithm (and protocol) NCCL picked, when the source says; ``fabric``: a network whose
    latency the calibration holds (``fabric_latency_us``), replacing the machine's own."""

    id: str
    group: str
    machine: Machine
    kind: str
    size: float
    measured_us: float
    runtime: str = "nccl"
    forbid: tuple[str, ...] = ()
    only: str | None = None
    graph: bool = False
    known: str | None = None
    protocol: str | None = None
    fabric: str | None = None


def predict(row: Row, cal: Calibration) -> tuple[float, str]:
    """The model's time for the row and the (algorithm, protocol) it picks."""
    best = min(candidates(row, cal), key=lambda c: c.time_us)
    return best.time_us + cal.call_us.get(row.runtime, 0.0), best.name


def candidates(row: Row, cal: Calibration) -> list[nccl.Choice]:
    """The priced (algorithm, protocol) pairs the run could have used."""
    machine = row.machine
    if row.fabric is not None:
        machine = replace(machine, net_latency_us=float(cal.fabric_latency_us[row.fabric]))
    runtime = "rccl" if row.runtime == "rccl" else "nccl"
    return [nccl.price(row.kind, machine, a, p, row.size, cal, row.graph)
            for a, p in nccl.enabled(row.kind, machine, cal, runtime)
            if a not in row.forbid and (row.only is None or a == row.only)]


def pick_miss(row: Row, cal: Calibration, margin: float = 0.03) -> float:
    """How much slower (log ratio) the model prices the algorithm the source says NCCL picked
    than the fastest other one, plus ``margin``: 0 when the model picks it by at least the margin
    (a pick that wins by a hair flips with the next refit)."""
    if row.known is None:
        return 0.0
    found = candidates(row, cal)
    mine = [c.time_us for c in found if c.algorithm == row.known and (row.protocol is None or c.protocol == row.protocol)]
    others = [c.time_us for c in found if c.algorithm != row.known]
    if not mine or not others:
        return 0.0
    return max(0.0, math.log(min(mine) / min(others)) + margin)


def applicable(rows: Sequence[Row]) -> tuple[str, ...]:
    """The parameters of ``FITTED`` that can change a row's time: the link, switch and latency
    parameters of the rows' own accelerator generations, the network's only when a row spans
    nodes, a runtime's per-call cost only for its rows, the graph share only for graph runs, a
    fabric's latency only for rows on it. Launch and per-hop latencies (Hopper's, which other
    generations scale) and the pipeline fill apply to every row."""
    gens = {r.machine.generation.name for r in rows}
    nvls = any(r.machine.nvls for r in rows)
    nodes = any(r.machine.n_nodes > 1 for r in rows)
    runtimes = {r.runtime for r in rows}
    fabrics = {r.fabric for r in rows if r.fabric is not None}
    out = []
    for name in NAMES:
        head, _, key = name.partition(".")
        keep = {
            "link_efficiency": key in gens, "nvls_efficiency": key in gens and nvls, "nvls_latency_us": nvls,
            "latency_scale": key in gens, "net_efficiency": nodes, "call_us": key in runtimes,
            "graph_launch_share": any(r.graph for r in rows), "fabric_latency_us": key in fabrics,
        }.get(head, True)
        if keep:
            out.append(name)
    return tuple(out)


def vector(cal: Calibration, names: Sequence[str] = NAMES, prior: Calibration | None = None) -> list[float]:
    """The values of ``names`` in ``cal`` (a hop scale relative to ``prior``, the shipped
    calibration by default)."""
    prior = prior or shipped()
    out = []
    for name in names:
        head, _, key = name.partition(".")
        if head == "hop_scale":
            out.append(cal.hop_us["nvlink"][key] / prior.hop_us["nvlink"][key])
        elif key:
            out.append(getattr(cal, head)[key])
        else:
            out.append(getattr(cal, head))
    return out


def with_vector(base: Calibration, x: Sequence[float], names: Sequence[str] = NAMES,
                prior: Calibration | None = None) -> Calibration:
    """``base`` with the parameters ``names`` set from ``x`` (hop latencies scale ``prior``'s,
    the shipped calibration's by default)."""
    prior = prior or shipped()
    fields: dict = {}
    maps: dict[str, dict] = {}
    for name, value in zip(names, x):
        head, _, key = name.partition(".")
        if head == "hop_scale":
            for cls in prior.hop_us:
                maps.setdefault("hop_us", {c: dict(p) for c, p in base.hop_us.items()})[cls][key] = \
                    prior.hop_us[cls][key] * value
        elif key:
            maps.setdefault(head, dict(getattr(base, head)))[key] = value
        else:
            fields[head] = value
    for head, value in maps.items():
        fields[head] = MappingProxyType({k: (MappingProxyType(v) if isinstance(v, dict) else v)
                                         for k, v in value.items()})
    return replace(base, **fields)


def fit(rows: Sequence[Row], base: Calibration, picks: Sequence[Row] | None = None, *,
        names: Sequence[str] = NAMES, prior_weight: float = 0.0) -> Calibration:
    """``base`` with ``names`` fitted to the rows' times and to the picks ``picks`` report (the
    rows' own by default); ``prior_weight`` > 0 pulls each fitted parameter toward its value in
    ``base`` (module docstring)."""
    import numpy as np
    from scipy.optimize import least_squares  # the fit only: importing the rest stays light

    groups: dict[str, int] = {}
    for r in rows:
        groups[r.group] = groups.get(r.group, 0) + 1
    weight = np.array([1.0 / math.sqrt(groups[r.group]) for r in rows])  # squared: each group weighs the same
    target = np.log([r.measured_us for r in rows])
    picked = [r for r in (rows if picks is None else picks) if r.known is not None]
    names = tuple(names)
    lo = [BOUNDS[n][0] for n in names]
    hi = [BOUNDS[n][1] for n in names]
    start = np.clip(vector(base, names, base), lo, hi)
    # a prior residual is relative to the parameter's value, or to a tenth of its range when
    # that value is near zero (a per-call cost of 0)
    scale = np.maximum(np.abs(start), 0.1 * (np.array(hi) - np.array(lo)))

    def residuals(x: np.ndarray) -> np.ndarray:
        cal = with_vector(base, list(x), names, base)
        times = weight * (np.log([predict(r, cal)[0] for r in rows]) - target)
        # the picks the sources report count as much as the times: a model that times well but
        # picks an algorithm NCCL does not would compare schedules with the wrong baseline
        missed = PICK_WEIGHT * np.array([pick_miss(r, cal) for r in picked])
        parts = [times, missed]
        if prior_weight > 0:
            parts.append(prior_weight * (x - start) / scale)
        return np.concatenate(parts)

    # a robust loss: a few runs far off any model (a first-call outlier) must not drag the rest
    result = least_squares(residuals, start, bounds=(lo, hi), x_scale="jac", loss="soft_l1", f_scale=0.1)
    return with_vector(base, list(result.x), names, base)


# ---------------------------------------------------------------------- the file
ROUNDED = 4  # decimals written: far below what any measurement resolves, and the file stays stable


def to_json(cal: Calibration, names: Sequence[str], fitted_on: str) -> dict[str, Any]:
    """The calibration file of ``cal``: the parameter groups of ``names`` get ``fitted_on`` as
    their source, the others keep theirs; values rounded to ``ROUNDED`` decimals."""
    sources = dict(cal.sources)
    for name in names:
        head = name.partition(".")[0]
        sources["hop_us" if head == "hop_scale" else head] = fitted_on
    data = replace(cal, sources=MappingProxyType(sources)).to_json()
    params = data["parameters"]
    for group in ("link_efficiency", "nvls_efficiency", "launch_us", "call_us", "fabric_latency_us", "latency_scale"):
        params[group] = {k: round(v, ROUNDED) for k, v in params[group].items()}
    params["hop_us"] = {c: {k: round(v, ROUNDED) for k, v in p.items()} for c, p in params["hop_us"].items()}
    for key in ("net_efficiency", "nvls_latency_us", "fill_us", "fill_bytes", "ll_cap_scale", "graph_launch_share"):
        params[key] = round(params[key], ROUNDED)
    return data
