"""What a runtime charges a schedule on top of the links' physics: the calibrated parameters
(``calibration``) for one runtime, one protocol and one machine, in the form the simulator
applies to every message.

Runtimes (``RUNTIMES``): the MSCCL executor over NCCL (``msccl``) and RCCL (``rccl``), which run
XML schedules with NCCL's own protocols; MSCCL++ (``mscclpp``: its packet protocol is priced as
LL, its simple protocol as Simple, until measurements of it are in the calibration); NCCL itself
(``nccl``, for its own algorithms); the project's torch executor over NCCL (``torch-nccl``: each
step of a schedule is one batched point-to-point call from Python) and over gloo
(``torch-gloo``, TCP between processes of one host, priced from ``ccl probe`` where a fit exists).
``physics`` charges nothing: the links alone, as the lower bounds see them.

For a message over a link of class c (``nvlink`` inside a node, ``net`` across nodes): its
latency is the larger of the link's and the protocol's per-hop latency (the runtime's flag or
fence round trip, which includes the wire's), and it moves its bytes at the link's nominal rate
times the calibrated efficiency of c and the protocol's share; a call pays the launch, the
runtime's own per-call cost and its pipeline fill once.

Switch traffic (pushes and pulls, ``ccl.core.program``) has classes of its own: ``switch``, a
node's reducing NVSwitch (NVLink SHARP), moves at the nominal rate times the calibrated NVLS
efficiency (``Calibration.nvls_efficiency``, not the unicast one) and the protocol's share, and
each push and each pull pays a quarter of the calibrated NVLS latency: a push and its pull are
one pass through the switch, and an NVLS allreduce (a reducing pass, then a multicast pass)
pays the whole, as NCCL's own NVLS is priced (``nccl.price``). ``sharp``, a network switch that
reduces (InfiniBand SHARP), has no calibration of its own: it moves at the network's efficiency
and each push or pull pays the network's per-hop latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccl.core.errors import InputError
from ccl.core.hardware import generation
from ccl.core.topology import Topology

from .calibration import PROTOCOLS, Calibration, calibration, nccl_constants

LINK_CLASSES = ("nvlink", "net", "switch", "sharp")  # the classes a message's link falls in (``RuntimeCharges``)
RUNTIMES: dict[str, tuple[str, ...]] = {
    "msccl": PROTOCOLS,
    "rccl": PROTOCOLS,
    "mscclpp": ("LL", "Simple"),
    "nccl": PROTOCOLS,
    "torch-nccl": ("Simple",),
    "torch-gloo": ("Simple",),
    "physics": ("Simple",),
}
DEFAULT_RUNTIME = "msccl"  # what runs the project's schedules on GPUs: exported XML
RUNTIME_NAMES = {
    "msccl": "MSCCL executor", "rccl": "RCCL (MSCCL)", "mscclpp": "MSCCL++", "nccl": "NCCL",
    "torch-nccl": "torch executor over NCCL", "torch-gloo": "torch executor over gloo", "physics": "links only",
}


@dataclass(frozen=True)
class RuntimeCharges:
    """One runtime and protocol priced for one machine: what the simulator charges."""

    runtime: str
    protocol: str
    launch_us: float  # once per call: launch, per-call cost, before the fill
    hop_us: dict  # link class (``LINK_CLASSES``) -> latency a message pays at least (none listed: 0)
    efficiency: dict  # link class -> share of a link's nominal rate a message reaches (none listed: 1)
    per_step_us: float  # the torch executor's per-step call (0 for the GPU runtimes)
    cal: Calibration

    @property
    def label(self) -> str:
        return f"{RUNTIME_NAMES[self.runtime]}, {self.protocol}" if self.runtime != "physics" else "links only"

    @property
    def name(self) -> str:
        return f"{self.runtime}/{self.protocol}"

    def call_us(self, size: float) -> float:
        """What one call of ``size`` bytes costs beyond its messages (launch, fill)."""
        return self.launch_us + (self.cal.fill(size) if self.runtime != "physics" else 0.0)


def protocols(runtime: str) -> tuple[str, ...]:
    if runtime not in RUNTIMES:
        raise InputError(f"unknown runtime {runtime!r} (known: {', '.join(RUNTIMES)})")
    return RUNTIMES[runtime]


def charges(runtime: str, protocol: str, topology: Topology, cal: Calibration | None = None) -> RuntimeCharges:
    """The charges of ``runtime`` running ``protocol`` on ``topology``'s accelerator."""
    offered = protocols(runtime)
    if protocol not in offered:
        raise InputError(f"runtime {runtime!r} runs protocols {', '.join(offered)}, not {protocol!r}")
    cal = cal or calibration()
    if runtime == "physics":  # charges nothing (a class it does not list: latency 0, efficiency 1)
        return RuntimeCharges(runtime, protocol, 0.0, {"nvlink": 0.0, "net": 0.0}, {"nvlink": 1.0, "net": 1.0}, 0.0, cal)
    gen = generation(topology.accelerator)
    scale = cal.latency(gen.name)
    hop = {c: cal.hop_us[c][protocol] * scale for c in ("nvlink", "net")}
    hop["switch"] = cal.nvls_latency_us * scale / 4  # a push and a pull: one pass; an allreduce: two passes
    hop["sharp"] = hop["net"]
    efficiency = {c: cal.efficiency(c, gen.name, protocol) for c in ("nvlink", "net")}
    nvls = cal.nvls_efficiency.get(gen.name, min(cal.nvls_efficiency.values()))
    efficiency["switch"] = nvls * cal.protocol_efficiency[protocol]
    efficiency["sharp"] = efficiency["net"]
    if protocol == "LL":  # LL's per-GPU bandwidth cap (NCCL's llMaxBw), as a share of a rank's links
        cap = cal.ll_cap_scale * nccl_constants()["ll_max_GBps"][str(gen.compcap)][0]
        widest = max((sum(x.capacity for x in topology.out_links[r]) for r in range(topology.n_ranks)), default=0.0)
        if widest > 0:
            efficiency = {c: min(e, cap / widest) for c, e in efficiency.items()}
    launch = cal.launch_us[protocol] * scale + cal.call_us.get(runtime, 0.0)
    per_step = 0.0
    if runtime.startswith("torch-"):
        # each step is a batch_isend_irecv from Python: a call and a launch of its own
        per_step = cal.call_us.get(runtime, 0.0) + cal.launch_us[protocol] * scale
    return RuntimeCharges(runtime, protocol, launch, hop, efficiency, per_step, cal)


def default_protocol(size: float) -> str:
    """A protocol by size where none is chosen: LL for small calls, LL128 in between, Simple
    for large (the regimes NCCL's own picks fall in on NVSwitch machines)."""
    if size <= 64 * 1024:
        return "LL"
    if size <= 4 * 2**20:
        return "LL128"
    return "Simple"
