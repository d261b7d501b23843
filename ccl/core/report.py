"""Report: how fast a schedule runs and how far it is from the best possible.

A ``Report`` is what the simulator (``backends.sim``) returns, completed by the driver, and
what every command that judges a schedule prints: simulated time, algorithm and bus bandwidth with the nccl-tests
definitions, per-link bytes and busy time, the lower bound and the ratio to it, the reference
baselines ("x times faster than NCCL ring") and, when the schedule came from a solver, the
synthesis time, status and optimality gap.

Size convention (nccl-tests): ``size`` is the number of bytes the collective is *called with*:

==================  ==============================================  =================
collective          size is                                         busbw factor
==================  ==============================================  =================
allreduce           the per-rank buffer                             2(n-1)/n
allgather           the total output per rank (n parts)             (n-1)/n
reducescatter       the total input per rank (n parts)              (n-1)/n
alltoall            the total buffer per rank (n parts, one a peer) (n-1)/n
gather, scatter     the root's total buffer (n parts)               (n-1)/n
broadcast, reduce   the buffer                                      1
custom              the largest per-rank buffer                     1
==================  ==============================================  =================

Every case is one rule: the largest per-rank buffer of the collective (input or output) holds
``size`` bytes, spread evenly over its slots, so a slot holds ``size / max_slots`` bytes
(``slot_bytes``). Chunking divides slots further: ring allreduce over n x k slots moves
``size / (n k)`` bytes per slot. Sizes that do not divide evenly are kept exact as fractional
bytes (a fluid model), where nccl-tests would round the element count down.

algbw = size / time, busbw = algbw x factor; 1 GB/s = 1e3 bytes per microsecond.
This module is part of the core: it imports nothing heavy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .collective import Collective
from .errors import InputError

NOT_COMPUTED = "not computed"

SIZE_MEANING: dict[str, str] = {
    "allreduce": "per-rank buffer",
    "allgather": "total output per rank",
    "reducescatter": "total input per rank",
    "alltoall": "total buffer per rank",
    "gather": "root's total buffer",
    "scatter": "root's total buffer",
    "broadcast": "buffer",
    "reduce": "buffer",
    "custom": "largest per-rank buffer",
}


def bus_factor(kind: str, n_ranks: int) -> float:
    """The nccl-tests factor from algbw to busbw."""
    n = n_ranks
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    return 1.0


def slot_bytes(collective: Collective, size: float) -> float:
    """Bytes in one slot of ``collective`` when it is called with ``size`` bytes (see module
    docstring): the largest per-rank buffer holds ``size``."""
    check_size(size)
    slots = max(collective.max_input_slots, collective.max_output_slots, 1)
    return size / slots


def check_size(size: float) -> None:
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0 or math.isinf(size):
        raise InputError(f"size must be a positive number of bytes, got {size!r}")


@dataclass(frozen=True)
class LinkUsage:
    """Traffic of one directed rank-to-rank link (of the flattened topology) in one run.

    ``busy_us`` is lane-time divided by lanes (the time the link would be busy if its lanes
    took turns); ``utilization`` is bytes over what the link's full capacity could carry in the
    whole run."""

    src: int
    dst: int
    bytes: float
    messages: int
    busy_us: float
    capacity_GBps: float
    lanes: int
    utilization: float

    def to_json(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "bytes": _num(self.bytes),
            "messages": self.messages,
            "busy_us": _num(self.busy_us),
            "capacity_GBps": _num(self.capacity_GBps),
            "lanes": self.lanes,
            "utilization": _num(self.utilization),
        }


@dataclass(frozen=True)
class RankUsage:
    """What one rank sent and received over links, and when its last op completed."""

    rank: int
    bytes_sent: float
    bytes_received: float
    finish_us: float

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "bytes_sent": _num(self.bytes_sent),
                "bytes_received": _num(self.bytes_received), "finish_us": _num(self.finish_us)}


@dataclass(frozen=True)
class Baseline:
    """A reference time for the same collective and size: a cost model (NCCL's ring and tree)
    or a simulated template schedule."""

    name: str
    time_us: float
    detail: str = ""
    algorithm: str = ""  # for a model of NCCL: the algorithm and protocol it prices ("NVLS", "Simple")
    protocol: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "time_us": _num(self.time_us), "detail": self.detail}


@dataclass(frozen=True)
class Report:
    """The result of simulating one Program at one size (see module docstring for units). The
    simulator fills the physics; the driver adds the lower bound (``with_bound``), the
    reference baselines (``with_baselines``) and the synthesis figures (``with_synthesis``)."""

    algorithm: str
    collective: str
    n_ranks: int
    topology: str
    solver: str
    size: float
    slot_bytes: float
    mode: str
    steps: int
    messages: int
    ops: int
    time_us: float
    bus_factor: float
    bound_us: float = 0.0
    latency_bound_us: float = 0.0
    bandwidth_bound_us: float = 0.0
    bound_binding: str = NOT_COMPUTED
    bound_method: str = ""
    links: tuple[LinkUsage, ...] = ()
    ranks: tuple[RankUsage, ...] = ()
    baselines: tuple[Baseline, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    runtime: str = ""  # what the time was priced for: "runtime/protocol" (e.g. "msccl/LL"), "" for the links alone
    runtime_label: str = ""  # the same in words ("MSCCL executor, LL")
    synthesis_seconds: float | None = None
    solver_status: str | None = None
    gap: float | None = None
    simulation_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("time_us", "bound_us", "latency_bound_us", "bandwidth_bound_us"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0):
                raise InputError(f"report {name} must be a number >= 0, got {value!r}")
        check_size(self.size)
        if not isinstance(self.options, Mapping) or not all(isinstance(k, str) for k in self.options):
            raise InputError(f"report options must be a dict with names as keys, got {self.options!r:.60}")
        object.__setattr__(self, "options", dict(sorted(dict(self.options).items())))

    # ---------------------------------------------------------------- derived figures
    @property
    def algbw_GBps(self) -> float:
        """size / time in GB/s (1 GB/s = 1e3 bytes per microsecond)."""
        return self.size / self.time_us / 1e3 if self.time_us > 0 else math.inf

    @property
    def busbw_GBps(self) -> float:
        """algbw x the nccl-tests factor (0 when the factor is: a single rank moves nothing)."""
        return self.algbw_GBps * self.bus_factor if self.bus_factor else 0.0

    @property
    def bound_ratio(self) -> float:
        """Schedule time over the lower bound (>= 1; 1 means provably optimal)."""
        if self.bound_us > 0:
            return self.time_us / self.bound_us
        return 1.0 if self.time_us == 0 else math.inf

    def baseline(self, name: str) -> Baseline | None:
        for b in self.baselines:
            if b.name == name:
                return b
        return None

    def speedup(self, name: str) -> float | None:
        """How many times faster this schedule is than baseline ``name`` (None if absent)."""
        b = self.baseline(name)
        if b is None or self.time_us <= 0:
            return None
        return b.time_us / self.time_us

    def busiest_links(self, k: int = 5) -> list[LinkUsage]:
        return sorted(self.links, key=lambda x: (-x.utilization, x.src, x.dst))[:k]

    def with_synthesis(self, seconds: float | None, status: str | None, gap: float | None) -> Report:
        return replace(self, synthesis_seconds=seconds, solver_status=status, gap=gap)

    def with_bound(self, bound_us: float, latency_us: float, bandwidth_us: float, binding: str,
                   method: str) -> Report:
        """The report with the lower bound of its collective on its topology at its size
        (infinite parts, where a bound cannot be met at all, are reported as 0)."""
        def finite(x: float) -> float:
            return x if math.isfinite(x) else 0.0

        return replace(self, bound_us=finite(bound_us), latency_bound_us=finite(latency_us),
                       bandwidth_bound_us=finite(bandwidth_us), bound_binding=binding, bound_method=method)

    def with_baselines(self, baselines: tuple[Baseline, ...]) -> Report:
        return replace(self, baselines=tuple(baselines))

    # ---------------------------------------------------------------- output
    def to_json(self, *, links: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "collective": self.collective,
            "n_ranks": self.n_ranks,
            "topology": self.topology,
            "solver": self.solver,
            "size": _num(self.size),
            "size_meaning": SIZE_MEANING.get(self.collective, SIZE_MEANING["custom"]),
            "slot_bytes": _num(self.slot_bytes),
            "mode": self.mode,
            "steps": self.steps,
            "messages": self.messages,
            "ops": self.ops,
            "time_us": _num(self.time_us),
            "algbw_GBps": _num(self.algbw_GBps),
            "busbw_GBps": _num(self.busbw_GBps),
            "bus_factor": _num(self.bus_factor),
            "bound_us": _num(self.bound_us),
            "bound_ratio": _num(self.bound_ratio),
            "latency_bound_us": _num(self.latency_bound_us),
            "bandwidth_bound_us": _num(self.bandwidth_bound_us),
            "bound_binding": self.bound_binding,
            "bound_method": self.bound_method,
            "baselines": [
                {**b.to_json(), "speedup": _num(self.speedup(b.name))} for b in self.baselines
            ],
            "options": dict(self.options),
            "runtime": self.runtime,
            "synthesis_seconds": self.synthesis_seconds,
            "solver_status": self.solver_status,
            "gap": self.gap,
            "simulation_seconds": None if self.simulation_seconds is None else round(self.simulation_seconds, 6),
        }
        if links:
            out["links"] = [x.to_json() for x in self.links]
            out["ranks"] = [x.to_json() for x in self.ranks]
        return out

    def text(self, *, top_links: int = 5) -> str:
        """A readable report."""
        kind = self.collective
        meaning = SIZE_MEANING.get(kind, SIZE_MEANING["custom"])
        lines = [
            f"{self.algorithm}: {kind} on {self.topology} ({self.n_ranks} ranks), solver {self.solver or '-'}, "
            f"{self.steps} steps, {self.messages} messages, {self.ops} ops",
            f"  size        {format_bytes(self.size)} ({meaning}), {format_bytes(self.slot_bytes)} per slot, "
            f"{self.mode} mode" + _options_text(self.options),
            f"  time        {format_us(self.time_us)}   algbw {self.algbw_GBps:.4g} GB/s   "
            f"busbw {self.busbw_GBps:.4g} GB/s" + (f"   ({self.runtime_label})" if self.runtime_label else ""),
        ]
        if self.bound_binding == NOT_COMPUTED:
            lines.append("  lower bound not computed")
        else:
            lines += [
                f"  lower bound {format_us(self.bound_us)}   ({self.bound_binding} binds: latency "
                f"{format_us(self.latency_bound_us)}, bandwidth {format_us(self.bandwidth_bound_us)}"
                + (f", {self.bound_method}" if self.bound_method else "") + ")",
                f"  schedule / bound = {self.bound_ratio:.3f}",
            ]
        for b in self.baselines:
            s = self.speedup(b.name)
            verdict = ""
            if s is not None and math.isfinite(s):
                verdict = f"   {s:.2f}x faster" if s >= 1 else f"   {1 / s:.2f}x slower"
            lines.append(f"  {b.name:<11} {format_us(b.time_us)}{verdict}" + (f"   ({b.detail})" if b.detail else ""))
        if self.synthesis_seconds is not None:
            gap = "" if self.gap is None else f", gap {self.gap:.3g}"
            lines.append(f"  synthesis   {self.synthesis_seconds:.3f} s ({self.solver_status or 'ok'}{gap})")
        busy = [x for x in self.busiest_links(top_links) if x.bytes > 0]
        if busy:
            lines.append("  busiest links:")
            for x in busy:
                lines.append(f"    {x.src} -> {x.dst}: {format_bytes(x.bytes)} in {x.messages} messages, "
                             f"busy {format_us(x.busy_us)}, {100 * x.utilization:.1f}% of {x.capacity_GBps:.4g} GB/s")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def _options_text(options: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in options.items() if v not in (None, False)}
    if not shown:
        return ""
    return ", " + ", ".join(f"{k}={v}" for k, v in shown.items())


def _num(x: float | None) -> float | None:
    """JSON-safe number: infinities become None, floats keep full precision."""
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def format_bytes(n: float) -> str:
    """1536 -> '1.5KiB'; exact powers print without decimals."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            return f"{n / factor:.4g}{unit}"
    return f"{n:.4g}B"


def format_us(us: float) -> str:
    if not math.isfinite(us):
        return "inf"
    if us >= 1e6:
        return f"{us / 1e6:.4g} s"
    if us >= 1e3:
        return f"{us / 1e3:.4g} ms"
    return f"{us:.4g} us"
