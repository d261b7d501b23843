"""The library's topologies as Python functions, each a call of its definition in
``topologies/basic.ccl`` or ``topologies/machines.ccl`` (the one source; read them for what
each topology is and where its numbers come from).

Bandwidths are GB/s per direction (per lane where links have lanes), latencies microseconds;
``None`` takes the definition's default, a number of ``hardware.ccl``. Bad arguments raise
``TopologyError``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ccl.core.topology import Topology

from .library import LIBRARY, flag, gbps, integer, integers, microseconds, real, text


def _family(name: str, n: int, bw: float | None, lat: float | None, **more: object) -> Topology:
    arguments = {"n": integer(n, f"{name}: n"), "bandwidth": gbps(bw, f"{name}: bandwidth"),
                 "latency": microseconds(lat, f"{name}: latency"), **more}
    return LIBRARY.call("basic", name, arguments)


def ring(n: int, bandwidth: float | None = None, latency: float | None = None, *, directed: bool = False) -> Topology:
    """n ranks in a cycle, i <-> i+1 mod n (only i -> i+1 when ``directed``)."""
    return _family("ring", n, bandwidth, latency, directed=flag(directed, "ring: directed"))


def line(n: int, bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """n ranks in a chain, i <-> i+1."""
    return _family("line", n, bandwidth, latency)


def fully_connected(n: int, bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """A direct link between every pair of ranks."""
    return _family("fully_connected", n, bandwidth, latency)


def star(n: int, bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """Hub and spokes: rank 0 is linked to every other rank; the others only to rank 0."""
    return _family("star", n, bandwidth, latency)


def switch(n: int, bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """One crossbar switch vertex (NVSwitch-like): every rank has one port of ``bandwidth``;
    ``latency`` rank to rank, split over the two hops."""
    return _family("switch", n, bandwidth, latency)


def hypercube(n: int, bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """n = 2^d ranks; r <-> r xor 2^k for every dimension k."""
    return _family("hypercube", n, bandwidth, latency)


def torus(dims: Sequence[int], bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """A torus of any dimension with wrap-around links; rank = row-major coordinate index.
    A dimension of size 2 has a single link between the two (the wrap would duplicate it)."""
    return LIBRARY.call("basic", "torus", {
        "dims": integers(dims, "torus: dims"), "bandwidth": gbps(bandwidth, "torus: bandwidth"),
        "latency": microseconds(latency, "torus: latency"),
    })


def _single(name: str, bw: float | None, lat: float | None) -> Topology:
    return LIBRARY.call("machines", name, {"bandwidth": gbps(bw, f"{name}: bandwidth"),
                                           "latency": microseconds(lat, f"{name}: latency")})


def dgx1(bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """8 V100s in the NVLink hybrid cube-mesh; 6 NVLink lanes per GPU (``bandwidth`` per lane)."""
    return _single("dgx1", bandwidth, latency)


def amd8(bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """8 AMD GPUs, fully connected by Infinity Fabric with 5 or 6 lanes per pair."""
    return _single("amd8", bandwidth, latency)


def _cluster(name: str, n_nodes: int, fabric: str | None, nic_bandwidth: float | None,
             oversubscription: float | None = None, nodes_per_leaf: int | None = None, *,
             count: str = "nodes", **more: object) -> Topology:
    return LIBRARY.call("machines", name, {
        count: integer(n_nodes, f"{name}: n_{count}"), "fabric": text(fabric, f"{name}: fabric"),
        "nic_bandwidth": gbps(nic_bandwidth, f"{name}: nic_bandwidth"),
        "oversubscription": None if oversubscription is None else real(oversubscription, f"{name}: oversubscription"),
        "nodes_per_leaf": None if nodes_per_leaf is None else integer(nodes_per_leaf, f"{name}: nodes_per_leaf"),
        **{k: v for k, v in more.items() if v is not None},
    })


def _gpu_options(name: str, gpus: int | None, sharp: bool | None, net_latency: float | None = None) -> dict[str, object]:
    return {"gpus": None if gpus is None else integer(gpus, f"{name}: gpus"),
            "sharp": None if sharp is None else flag(sharp, f"{name}: sharp"),
            "net_latency": microseconds(net_latency, f"{name}: net_latency")}


def ndv2(n_nodes: int = 1, *, fabric: str | None = None, nic_bandwidth: float | None = None,
         oversubscription: float | None = None, nodes_per_leaf: int | None = None) -> Topology:
    """Azure NDv2: the DGX-1 NVLink mesh per node (TACCL's profile), one NIC per node on PCIe;
    nodes joined by ``fabric`` (switch, leafspine or rail; default switch)."""
    return _cluster("ndv2", n_nodes, fabric, nic_bandwidth, oversubscription, nodes_per_leaf)


def dgx2(n_nodes: int = 1, *, fabric: str | None = None, nic_bandwidth: float | None = None,
         oversubscription: float | None = None, nodes_per_leaf: int | None = None) -> Topology:
    """16 V100s on NVSwitch (125 GB/s per GPU port); 8 NICs, each shared by a GPU pair
    (default fabric: switch)."""
    return _cluster("dgx2", n_nodes, fabric, nic_bandwidth, oversubscription, nodes_per_leaf)


def dgx_a100(n_nodes: int = 1, *, fabric: str | None = None, nic_bandwidth: float | None = None,
             oversubscription: float | None = None, nodes_per_leaf: int | None = None, gpus: int | None = None,
             sharp: bool | None = None, net_latency: float | None = None) -> Topology:
    """8 A100s on NVSwitch (300 GB/s per GPU); 8 x 200 Gb/s NICs, one per GPU (default fabric:
    rail). ``gpus``: fewer GPUs per node; ``sharp``: the fabric's switches reduce (InfiniBand SHARP)."""
    return _cluster("dgx_a100", n_nodes, fabric, nic_bandwidth, oversubscription, nodes_per_leaf,
                    **_gpu_options("dgx_a100", gpus, sharp, net_latency))


def dgx_h100(n_nodes: int = 1, *, fabric: str | None = None, nic_bandwidth: float | None = None,
             oversubscription: float | None = None, nodes_per_leaf: int | None = None, gpus: int | None = None,
             sharp: bool | None = None, net_latency: float | None = None) -> Topology:
    """8 H100s on NVSwitch (450 GB/s per GPU; the switch reduces: NVLink SHARP); 8 x 400 Gb/s
    NICs, one per GPU (default fabric: rail). ``gpus`` and ``sharp`` as for ``dgx_a100``."""
    return _cluster("dgx_h100", n_nodes, fabric, nic_bandwidth, oversubscription, nodes_per_leaf,
                    **_gpu_options("dgx_h100", gpus, sharp, net_latency))


def hgx_h200(n_nodes: int = 1, *, fabric: str | None = None, nic_bandwidth: float | None = None,
             oversubscription: float | None = None, nodes_per_leaf: int | None = None, gpus: int | None = None,
             sharp: bool | None = None, net_latency: float | None = None) -> Topology:
    """8 H200s on the NVLink4 NVSwitch (450 GB/s per GPU, NVLink SHARP); 8 x 400 Gb/s NICs."""
    return _cluster("hgx_h200", n_nodes, fabric, nic_bandwidth, oversubscription, nodes_per_leaf,
                    **_gpu_options("hgx_h200", gpus, sharp, net_latency))


def hgx_b200(n_nodes: int = 1, *, fabric: str | None = None, nic_bandwidth: float | None = None,
             oversubscription: float | None = None, nodes_per_leaf: int | None = None, gpus: int | None = None,
             sharp: bool | None = None, net_latency: float | None = None) -> Topology:
    """8 B200s on the NVLink5 NVSwitch (900 GB/s per GPU, NVLink SHARP); 8 x 400 Gb/s NICs."""
    return _cluster("hgx_b200", n_nodes, fabric, nic_bandwidth, oversubscription, nodes_per_leaf,
                    **_gpu_options("hgx_b200", gpus, sharp, net_latency))


def gb200_nvl72(n_racks: int = 1, *, fabric: str | None = None, nic_bandwidth: float | None = None,
                oversubscription: float | None = None, nodes_per_leaf: int | None = None,
                sharp: bool | None = None, net_latency: float | None = None) -> Topology:
    """GB200 NVL72 racks: 72 Blackwell GPUs on one NVLink5 domain (900 GB/s per GPU, NVLink
    SHARP), one 400 Gb/s NIC per GPU; racks joined by ``fabric`` as nodes."""
    return _cluster("gb200_nvl72", n_racks, fabric, nic_bandwidth, oversubscription, nodes_per_leaf,
                    count="racks", sharp=None if sharp is None else flag(sharp, "gb200_nvl72: sharp"),
                    net_latency=microseconds(net_latency, "gb200_nvl72: net_latency"))


def mi300x(gpus: int | None = None) -> Topology:
    """An AMD MI300X node: 8 GPUs (or ``gpus``) fully connected by Infinity Fabric."""
    return LIBRARY.call("machines", "mi300x", {"gpus": None if gpus is None else integer(gpus, "mi300x: gpus")})
