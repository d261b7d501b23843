"""Accelerators a topology can name (``Topology.accelerator``: "H100", "A100", ...) and their
generation, which the cost model reads: the runtimes' constants are per generation (NCCL's
tables are per compute capability), and so are the link speeds kernels reach. A topology
without a name is priced as a generic machine. What stands here are facts of the hardware; the
efficiencies are calibrated (``backends.cost.calibration``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError


@dataclass(frozen=True)
class Generation:
    """One accelerator generation.

    ``compcap``: the compute-capability index NCCL's tables use (70 Volta, 80 Ampere, 90
    Hopper, 100 Blackwell). ``nvlink_lane_GBps``: one NVLink lane's nominal rate per direction;
    ``nccl_lane_GBps``: the rate NCCL's topology code assumes a lane delivers (src/graph/topo.h),
    the prior of the calibrated link efficiency. ``nvls``: the node's switches can reduce and
    multicast (NVLink SHARP, NVSwitch generation 3 and later)."""

    name: str
    compcap: int
    nvlink_lane_GBps: float
    nccl_lane_GBps: float
    nvls: bool


GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation("volta", 70, 25.0, 20.0, False),
        Generation("ampere", 80, 25.0, 20.0, False),
        Generation("hopper", 90, 25.0, 20.6, True),
        Generation("blackwell", 100, 50.0, 40.1, True),
        # AMD Instinct: RCCL's tables follow NCCL's Ampere rows; Infinity Fabric links, no
        # in-switch reduction. Lane rates per link and direction (MI250: 50 GB/s; MI300X: 64).
        Generation("cdna2", 80, 50.0, 40.0, False),
        Generation("cdna3", 80, 64.0, 51.2, False),
    )
}

# Accelerator model -> generation.
ACCELERATORS: dict[str, str] = {
    "V100": "volta",
    "A100": "ampere",
    "H100": "hopper",
    "H200": "hopper",
    "GH200": "hopper",
    "B200": "blackwell",
    "GB200": "blackwell",
    "MI250": "cdna2",
    "MI300X": "cdna3",
    "MI325X": "cdna3",
}

GENERIC = "hopper"  # the generation an unnamed accelerator is costed as


def generation(accelerator: str) -> Generation:
    """The generation of an accelerator model ("" for a generic machine)."""
    if not accelerator:
        return GENERATIONS[GENERIC]
    name = ACCELERATORS.get(accelerator.upper())
    if name is None:
        known = ", ".join(sorted(ACCELERATORS))
        raise InputError(f"unknown accelerator {accelerator!r} (known: {known}; leave it out for a generic machine)")
    return GENERATIONS[name]
