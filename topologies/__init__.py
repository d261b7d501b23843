"""The topology library, named on the command line as ``NAME`` or ``NAME:ARGS``.

The library is written once, in the description language: ``basic.ccl`` (the parametric
families), ``machines.ccl`` (named machines and their multi-node clusters), ``hardware.ccl``
(the numbers, with their sources) and ``multinode.ccl`` (the fabrics). The Python functions
here (``ring``, ``torus``, ``dgx_h100``, ...) and ``build`` evaluate those definitions through
``dsl``, imported on first use; ``hardware_numbers()`` reads the numbers.

ARGS are comma-separated: positional values first (``ring:8``, ``torus:4x4``, ``ndv2:2``), then
``key=value`` options with units (``ring:8,bw=50GB/s,lat=1us``, ``dgx-a100:4,fabric=leafspine``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ccl.core.errors import InputError, TopologyError
from ccl.core.topology import Topology
from ccl.core.units import parse_bandwidth, parse_time

from .builders import (
    amd8,
    dgx1,
    dgx2,
    dgx_a100,
    dgx_h100,
    fully_connected,
    gb200_nvl72,
    hgx_b200,
    hgx_h200,
    hypercube,
    line,
    mi300x,
    ndv2,
    ring,
    star,
    switch,
    torus,
)
from .library import LIBRARY

__all__ = [
    "BUILDERS",
    "Builder",
    "amd8",
    "build",
    "dgx1",
    "dgx2",
    "dgx_a100",
    "dgx_h100",
    "fully_connected",
    "gb200_nvl72",
    "hardware_numbers",
    "hgx_b200",
    "hgx_h200",
    "hypercube",
    "line",
    "mi300x",
    "ndv2",
    "ring",
    "star",
    "switch",
    "torus",
]


def hardware_numbers() -> Mapping[str, Any]:
    """The ``let`` values of ``topologies/hardware.ccl`` by name, bandwidths in GB/s and times in
    microseconds, lists as tuples: ``hardware_numbers()["net_lat"] == 2.6``."""
    return LIBRARY.hardware_numbers()


def _convert(text: str, what: str, kind: type, expected: str):
    try:
        return kind(text)
    except ValueError:
        raise InputError(f"{what} must be {expected}, got {text!r}") from None


def _int(text: str, what: str) -> int:
    return _convert(text, what, int, "an integer")


def _number(text: str, what: str) -> float:
    return _convert(text, what, float, "a number")


def _switch(text: str, what: str) -> bool:
    value = text.strip().lower()
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise InputError(f"{what} must be on or off, got {text!r}")


def _dims(text: str) -> tuple[int, ...]:
    return tuple(_int(x, "torus dimension") for x in text.lower().split("x"))


@dataclass(frozen=True)
class Builder:
    """A library entry: how to call it from the CLI and the function that builds it (named as
    its definition in ``basic.ccl`` or ``machines.ccl``, whose parameters the positional names
    and option keywords are)."""

    name: str
    usage: str
    summary: str
    positional: tuple[tuple[str, Callable[[str], object], bool], ...]  # (name, parser, required)
    options: tuple[tuple[str, str, Callable[[str], object]], ...]  # (spelling, keyword, parser)
    function: Callable[..., Topology]
    example: str

    def call(self, args: list[str], kwargs: dict[str, str]) -> Topology:
        if len(args) > len(self.positional):
            raise InputError(f"topology {self.name!r} takes at most {len(self.positional)} value(s): {self.usage}")
        required = sum(1 for _, _, needed in self.positional if needed)
        if len(args) < required:
            raise InputError(f"topology {self.name!r} needs a size: {self.usage}, e.g. {self.example}")
        values = [parse(text) for (_, parse, _), text in zip(self.positional, args)]
        known = {spelling: (keyword, parse) for spelling, keyword, parse in self.options}
        options = {}
        for key, text in kwargs.items():
            if key not in known:
                names = ", ".join(sorted(known)) or "none"
                raise InputError(f"topology {self.name!r} has no option {key!r} (options: {names})")
            keyword, parse = known[key]
            options[keyword] = parse(text)
        return self.function(*values, **options)


_LINK_OPTIONS = (("bw", "bandwidth", parse_bandwidth), ("lat", "latency", parse_time))
_N = (("n", lambda s: _int(s, "number of ranks"), True),)
_NODES = (("nodes", lambda s: _int(s, "number of nodes"), False),)
_CLUSTER_OPTIONS = (("fabric", "fabric", str), ("nic", "nic_bandwidth", parse_bandwidth),
                    ("oversub", "oversubscription", lambda s: _number(s, "oversubscription")),
                    ("per-leaf", "nodes_per_leaf", lambda s: _int(s, "nodes per leaf")))
_SHARP = (("sharp", "sharp", lambda s: _switch(s, "sharp")),)
_GPU_OPTIONS = _CLUSTER_OPTIONS + (("gpus", "gpus", lambda s: _int(s, "GPUs per node")),
                                   ("netlat", "net_latency", parse_time)) + _SHARP
_RACKS = (("racks", lambda s: _int(s, "number of racks"), False),)

BUILDERS: dict[str, Builder] = {
    b.name: b
    for b in (
        Builder("ring", "ring:N[,bw=..,lat=..]", "N ranks in a bidirectional ring", _N, _LINK_OPTIONS, ring, "ring:8"),
        Builder("line", "line:N[,bw=..,lat=..]", "N ranks in a chain", _N, _LINK_OPTIONS, line, "line:8"),
        Builder(
            "fully-connected", "fully-connected:N[,bw=..,lat=..]", "a direct link between every pair",
            _N, _LINK_OPTIONS, fully_connected, "fully-connected:8",
        ),
        Builder("star", "star:N[,bw=..,lat=..]", "rank 0 as hub, linked to every other rank", _N, _LINK_OPTIONS, star, "star:8"),
        Builder(
            "switch", "switch:N[,bw=..,lat=..]", "one NVSwitch-like crossbar vertex, one port per rank",
            _N, _LINK_OPTIONS, switch, "switch:8",
        ),
        Builder(
            "torus", "torus:AxB[xC][,bw=..,lat=..]", "2D/3D torus with wrap-around links",
            (("dims", _dims, True),), _LINK_OPTIONS, torus, "torus:4x4",
        ),
        Builder(
            "hypercube", "hypercube:N[,bw=..,lat=..]", "N = 2^d ranks, r <-> r xor 2^k",
            _N, _LINK_OPTIONS, hypercube, "hypercube:8",
        ),
        Builder("dgx1", "dgx1[:bw=..,lat=..]", "8 x V100, NVLink hybrid cube-mesh", (), _LINK_OPTIONS, dgx1, "dgx1"),
        Builder("amd8", "amd8[:bw=..,lat=..]", "8 AMD GPUs, Infinity Fabric mesh (5/6 lanes)", (), _LINK_OPTIONS, amd8, "amd8"),
        Builder(
            "ndv2", "ndv2[:NODES][,fabric=switch|leafspine|rail,nic=..,oversub=..,per-leaf=..]",
            "Azure NDv2: DGX-1 mesh per node, 1 NIC per node", _NODES, _CLUSTER_OPTIONS, ndv2, "ndv2:2",
        ),
        Builder(
            "dgx2", "dgx2[:NODES][,fabric=..,nic=..,oversub=..,per-leaf=..]", "16 x V100 on NVSwitch, 8 NICs per node",
            _NODES, _CLUSTER_OPTIONS, dgx2, "dgx2:2",
        ),
        Builder(
            "dgx-a100", "dgx-a100[:NODES][,fabric=..,nic=..,oversub=..,per-leaf=..,gpus=..,netlat=..,sharp=on]",
            "8 x A100 on NVSwitch, 8 NICs, rail-optimized", _NODES, _GPU_OPTIONS, dgx_a100, "dgx-a100:2",
        ),
        Builder(
            "dgx-h100", "dgx-h100[:NODES][,fabric=..,nic=..,oversub=..,per-leaf=..,gpus=..,netlat=..,sharp=on]",
            "8 x H100 on NVSwitch (NVLink SHARP), 8 NICs, rail-optimized", _NODES, _GPU_OPTIONS, dgx_h100, "dgx-h100:16",
        ),
        Builder(
            "hgx-h200", "hgx-h200[:NODES][,fabric=..,nic=..,oversub=..,per-leaf=..,gpus=..,netlat=..,sharp=on]",
            "8 x H200 on NVSwitch (NVLink SHARP), 8 NICs, rail-optimized", _NODES, _GPU_OPTIONS, hgx_h200, "hgx-h200:2",
        ),
        Builder(
            "hgx-b200", "hgx-b200[:NODES][,fabric=..,nic=..,oversub=..,per-leaf=..,gpus=..,netlat=..,sharp=on]",
            "8 x B200 on NVLink5 NVSwitch (NVLink SHARP), 8 NICs", _NODES, _GPU_OPTIONS, hgx_b200, "hgx-b200:2",
        ),
        Builder(
            "gb200-nvl72", "gb200-nvl72[:RACKS][,fabric=..,nic=..,oversub=..,per-leaf=..,sharp=on]",
            "72 Blackwell GPUs in one NVLink5 domain per rack, a NIC per GPU", _RACKS, _CLUSTER_OPTIONS + _SHARP,
            gb200_nvl72, "gb200-nvl72:2",
        ),
        Builder(
            "mi300x", "mi300x[:gpus=..]", "8 x AMD MI300X, Infinity Fabric fully connected", (),
            (("gpus", "gpus", lambda s: _int(s, "GPUs")),), mi300x, "mi300x",
        ),
    )
}

_ALIASES = {"fully_connected": "fully-connected", "full": "fully-connected", "dgx_a100": "dgx-a100",
            "dgx_h100": "dgx-h100", "dgxa100": "dgx-a100", "dgxh100": "dgx-h100", "hgx_h200": "hgx-h200",
            "hgx_b200": "hgx-b200", "gb200_nvl72": "gb200-nvl72", "nvl72": "gb200-nvl72"}


def build(spec: str) -> Topology:
    """A topology from ``NAME`` or ``NAME:ARGS`` (see module docstring)."""
    text = spec.strip()
    name, _, rest = text.partition(":")
    name = _ALIASES.get(name.lower(), name.lower())
    if name not in BUILDERS:
        raise InputError(f"unknown topology {spec!r}; known: {', '.join(BUILDERS)} (or a .ccl file)")
    builder = BUILDERS[name]
    args: list[str] = []
    kwargs: dict[str, str] = {}
    for part in [p.strip() for p in rest.split(",")] if rest else []:
        if not part:
            raise InputError(f"topology {spec!r}: empty argument")
        if "=" in part:
            key, _, value = part.partition("=")
            kwargs[key.strip()] = value.strip()
        elif kwargs:
            raise InputError(f"topology {spec!r}: positional value {part!r} after an option")
        else:
            args.append(part)
    try:
        return builder.call(args, kwargs)
    except TopologyError as exc:
        raise InputError(f"topology {spec!r}: {exc.message}") from None
