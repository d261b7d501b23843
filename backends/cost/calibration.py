"""The calibrated parameters of the cost model, as data (``data/calibration.json``).

One set of parameters prices every schedule alike, the project's and NCCL's own algorithms:

* ``link_efficiency[generation]``: the share of an NVLink's nominal rate a copy kernel reaches
  (Simple protocol); ``nvls_efficiency[generation]``: the same for traffic the NVSwitch reduces
  or multicasts (NVLink SHARP); ``net_efficiency`` and ``pcie_efficiency`` for NICs and PCIe.
* ``launch_us[protocol]``: what a collective call costs before any byte moves (kernel launch,
  set-up, the first synchronization).
* ``hop_us[link class][protocol]``: what one message costs beyond its bytes on a link of that
  class (the protocol's flag or fence round trip); ``nvls_latency_us`` the same for a pass
  through a reducing switch.
* ``protocol_efficiency[protocol]``: the share of the bandwidth a protocol's wire format keeps
  (LL sends a flag with every 4 bytes of data, LL128 one 8-byte flag per 128-byte line);
  ``ll_cap_scale`` scales NCCL's per-generation cap on LL's bandwidth.
* ``latency_scale[generation]``: launch and hop latencies are Hopper's; other generations scale
  them (their kernels launch and fence at other speeds).
* ``nvls_min_ranks[generation]``: NCCL uses NVLS only from this many ranks per node on (below,
  multicast gains too little over rings).
* ``fill_us`` and ``fill_bytes``: a call's pipeline fill. Measured runs reach their full rate
  only once about ``fill_bytes`` are in flight (the runtimes keep a few chunks per channel and
  peer in a FIFO); the first ``fill_bytes`` of a call cost up to ``fill_us`` more than the
  full rate gives (``fill(size)``), the same for every schedule and runtime.
* ``graph_launch_share``: the share of the launch cost a call captured in a CUDA or HIP graph
  still pays (the graph launches its kernels without the host in between).
* ``call_us[runtime]``: what a runtime adds to every call above the kernels (a framework's
  dispatch: torch's ``all_reduce`` from Python; 0 for a bare NCCL or MSCCL call).
* ``fabric_latency_us[fabric]``: the one-way latency of networks the measurements ran on whose
  latency no source states (a cloud's own RDMA or TCP offload); a topology takes it as its NIC
  latency (``netlat=`` of the library's clusters).

Each parameter carries where its value comes from: fitted by ``python benchmarks/validate.py
--fit`` on the measurements it names, or a prior (a vendor constant, a published figure) where
no measurement constrains it. The file is versioned; code reads it through ``calibration()``,
which takes the file ``CCL_CALIBRATION`` names instead when the variable is set (a calibration
fitted to a user's own machine by ``ccl probe --nccl-tests``, ``backends.cost.fit``); the
shipped one stays at hand as ``shipped()``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ccl.core.errors import InputError

PROTOCOLS = ("LL", "LL128", "Simple")
LINK_CLASSES = ("nvlink", "pcie", "net")
DATA = Path(__file__).with_name("data")
CALIBRATION_FILE = DATA / "calibration.json"
FORMAT = "ccl-cost-calibration"
ENVIRONMENT = "CCL_CALIBRATION"  # names a calibration file every command uses instead of the shipped one
MAX_FILE_BYTES = 1 << 20  # a calibration is a few KiB: a larger file is not one


@dataclass(frozen=True)
class Calibration:
    """The parameters (see module docstring) and their sources."""

    link_efficiency: MappingProxyType  # generation -> share of nominal NVLink rate
    nvls_efficiency: MappingProxyType  # generation -> share of nominal rate through a reducing switch
    net_efficiency: float
    pcie_efficiency: float
    launch_us: MappingProxyType  # protocol -> us
    hop_us: MappingProxyType  # link class -> protocol -> us
    nvls_latency_us: float
    protocol_efficiency: MappingProxyType  # protocol -> share
    ll_cap_scale: float
    latency_scale: MappingProxyType  # generation -> factor on launch and hop latencies
    nvls_min_ranks: MappingProxyType  # generation -> ranks per node NVLS needs
    fill_us: float
    fill_bytes: float
    graph_launch_share: float
    call_us: MappingProxyType  # runtime -> us added to every call
    fabric_latency_us: MappingProxyType  # network -> one-way latency, us
    sources: MappingProxyType  # parameter name -> where its value comes from
    version: int = 1

    def efficiency(self, link_class: str, generation: str, protocol: str = "Simple") -> float:
        """The share of a link's nominal bandwidth a message of ``protocol`` reaches."""
        if link_class == "net":
            base = self.net_efficiency
        elif link_class == "pcie":
            base = self.pcie_efficiency
        else:
            base = self.link_efficiency.get(generation, _mean(self.link_efficiency))
        return base * self.protocol_efficiency[protocol]

    def latency(self, generation: str) -> float:
        """The factor on launch and hop latencies for ``generation``."""
        return self.latency_scale.get(generation, 1.0)

    def fill(self, size: float) -> float:
        """The pipeline fill a call of ``size`` bytes pays (us)."""
        return self.fill_us * min(1.0, size / self.fill_bytes) if self.fill_bytes > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": self.version,
            "parameters": {
                "link_efficiency": dict(sorted(self.link_efficiency.items())),
                "nvls_efficiency": dict(sorted(self.nvls_efficiency.items())),
                "net_efficiency": self.net_efficiency,
                "pcie_efficiency": self.pcie_efficiency,
                "launch_us": dict(self.launch_us),
                "hop_us": {c: dict(p) for c, p in self.hop_us.items()},
                "nvls_latency_us": self.nvls_latency_us,
                "protocol_efficiency": dict(self.protocol_efficiency),
                "ll_cap_scale": self.ll_cap_scale,
                "latency_scale": dict(sorted(self.latency_scale.items())),
                "nvls_min_ranks": dict(sorted(self.nvls_min_ranks.items())),
                "fill_us": self.fill_us,
                "fill_bytes": self.fill_bytes,
                "graph_launch_share": self.graph_launch_share,
                "call_us": dict(sorted(self.call_us.items())),
                "fabric_latency_us": dict(sorted(self.fabric_latency_us.items())),
            },
            "sources": dict(sorted(self.sources.items())),
        }


def _mean(values: MappingProxyType) -> float:
    return sum(values.values()) / len(values)


def _frozen(value: dict) -> MappingProxyType:
    return MappingProxyType({k: (_frozen(v) if isinstance(v, dict) else v) for k, v in value.items()})


def from_json(data: Any, where: str = "calibration") -> Calibration:
    """A Calibration from its file form; InputError naming ``where`` when it is malformed."""
    try:
        if data.get("format") != FORMAT:
            raise InputError(f"{where}: not a cost calibration (format {FORMAT!r})")
        p = data["parameters"]
        cal = Calibration(
            link_efficiency=_frozen({k: float(v) for k, v in p["link_efficiency"].items()}),
            nvls_efficiency=_frozen({k: float(v) for k, v in p["nvls_efficiency"].items()}),
            net_efficiency=float(p["net_efficiency"]),
            pcie_efficiency=float(p["pcie_efficiency"]),
            launch_us=_frozen({q: float(p["launch_us"][q]) for q in PROTOCOLS}),
            hop_us=_frozen({c: {q: float(p["hop_us"][c][q]) for q in PROTOCOLS} for c in LINK_CLASSES}),
            nvls_latency_us=float(p["nvls_latency_us"]),
            protocol_efficiency=_frozen({q: float(p["protocol_efficiency"][q]) for q in PROTOCOLS}),
            ll_cap_scale=float(p.get("ll_cap_scale", 1.0)),
            latency_scale=_frozen({str(k): float(v) for k, v in p.get("latency_scale", {}).items()}),
            nvls_min_ranks=_frozen({str(k): int(v) for k, v in p.get("nvls_min_ranks", {}).items()}),
            fill_us=float(p.get("fill_us", 0.0)),
            fill_bytes=float(p.get("fill_bytes", 1.0)),
            graph_launch_share=float(p.get("graph_launch_share", 1.0)),
            call_us=_frozen({str(k): float(v) for k, v in p.get("call_us", {}).items()}),
            fabric_latency_us=_frozen({str(k): float(v) for k, v in p.get("fabric_latency_us", {}).items()}),
            sources=_frozen({str(k): str(v) for k, v in data.get("sources", {}).items()}),
            version=int(data.get("version", 1)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{where}: malformed cost calibration ({type(exc).__name__}: {exc})") from None
    for name, value in [("net_efficiency", cal.net_efficiency), ("pcie_efficiency", cal.pcie_efficiency),
                        *cal.link_efficiency.items(), *cal.nvls_efficiency.items(),
                        *cal.protocol_efficiency.items()]:
        if not 0 < value <= 1:
            raise InputError(f"{where}: efficiency {name} must be in (0, 1], got {value!r}")
    # times, scales and sizes: finite and not negative (a file may come from a user's own fit)
    for name, value in [("nvls_latency_us", cal.nvls_latency_us), ("ll_cap_scale", cal.ll_cap_scale),
                        ("fill_us", cal.fill_us), ("fill_bytes", cal.fill_bytes),
                        ("graph_launch_share", cal.graph_launch_share),
                        *(("launch_us." + k, v) for k, v in cal.launch_us.items()),
                        *(("hop_us." + c + "." + k, v) for c, p in cal.hop_us.items() for k, v in p.items()),
                        *(("latency_scale." + k, v) for k, v in cal.latency_scale.items()),
                        *(("call_us." + k, v) for k, v in cal.call_us.items()),
                        *(("fabric_latency_us." + k, v) for k, v in cal.fabric_latency_us.items())]:
        if not (math.isfinite(value) and value >= 0):
            raise InputError(f"{where}: {name} must be a finite number, not negative, got {value!r}")
    return cal


@lru_cache(maxsize=1)
def shipped() -> Calibration:
    """The shipped calibration (``data/calibration.json``)."""
    with open(CALIBRATION_FILE, encoding="utf-8") as fh:
        return from_json(json.load(fh), str(CALIBRATION_FILE))


def fingerprint() -> str:
    """A digest of the calibration in use (the shipped file's bytes, or those of the file
    ``CCL_CALIBRATION`` names): what a cached result priced with it is keyed on."""
    calibration()  # a bad CCL_CALIBRATION file is refused here, as everywhere
    path = os.environ.get(ENVIRONMENT, "") or str(CALIBRATION_FILE)
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(MAX_FILE_BYTES + 1)).hexdigest()[:16]


def calibration() -> Calibration:
    """The calibration every price uses: the file ``CCL_CALIBRATION`` names when it is set
    (InputError naming the file when it cannot be read or is not a calibration), else the
    shipped one."""
    path = os.environ.get(ENVIRONMENT, "")
    if not path:
        return shipped()
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{ENVIRONMENT}={path}: cannot read the calibration "
                         f"({getattr(exc, 'strerror', None) or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{ENVIRONMENT}={path}: not a regular file (a calibration JSON file is expected)")
    # keyed on the file's identity and modification: a file rewritten between calls is read again
    return _load(path, info.st_ino, info.st_mtime_ns, info.st_size)


@lru_cache(maxsize=4)
def _load(path: str, inode: int, mtime_ns: int, size: int) -> Calibration:
    where = f"{ENVIRONMENT}={path}"
    if size > MAX_FILE_BYTES:
        raise InputError(f"{where}: {size} bytes is too large for a cost calibration (at most {MAX_FILE_BYTES})")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_FILE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read the calibration ({getattr(exc, 'strerror', None) or exc})") from None
    if len(text) > MAX_FILE_BYTES:
        raise InputError(f"{where}: too large for a cost calibration (at most {MAX_FILE_BYTES} bytes)")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        line = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InputError(f"{where}{line}: invalid JSON ({str(exc).split(':')[0]})") from None
    return from_json(data, where)


@lru_cache(maxsize=4)
def nccl_constants(version: str = "2.30") -> MappingProxyType:
    """NCCL's own tuning constants for ``version`` (``data/nccl-<version>.json``, read from
    NVIDIA/nccl's src/graph/tuning.cc at the commit the file names)."""
    path = DATA / f"nccl-{version}.json"
    if not path.exists():
        known = sorted(p.stem.removeprefix("nccl-") for p in DATA.glob("nccl-*.json"))
        raise InputError(f"no NCCL constants for version {version!r} (known: {', '.join(known)})")
    with open(path, encoding="utf-8") as fh:
        return _frozen(json.load(fh))
