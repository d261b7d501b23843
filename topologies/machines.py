"""Named machines: DGX-1, NDv2, DGX-2, DGX A100, DGX H100, the AMD 8-GPU mesh; each with N nodes
where the machine is built to scale out (see ``multinode``)."""

from __future__ import annotations

from ccl.errors import TopologyError
from ccl.topology import Link, Switch, Topology

from . import hardware as hw
from .basic import from_lanes
from .multinode import Nic, multinode


def dgx1(bandwidth: float = hw.DGX1_LANE_BW, latency: float = hw.DGX1_LAT) -> Topology:
    """8 V100s in the NVLink hybrid cube-mesh; 6 NVLink lanes per GPU."""
    return from_lanes("dgx1", hw.DGX1_LANES, bandwidth, latency)


def amd8(bandwidth: float = hw.AMD8_LANE_BW, latency: float = hw.AMD8_LAT) -> Topology:
    """8 AMD GPUs, fully connected by Infinity Fabric with 5 or 6 lanes per pair."""
    return from_lanes("amd8", hw.AMD8_LANES, bandwidth, latency)


def _switched_node(name: str, n: int, port_bw: float, latency: float) -> Topology:
    sw = n
    links = []
    for r in range(n):
        links.append(Link(r, sw, port_bw, latency / 2))
        links.append(Link(sw, r, port_bw, latency / 2))
    return Topology(name, n, tuple(links), (Switch("nvswitch"),))


def _nodes(n_nodes: int) -> int:
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or n_nodes < 1:
        raise TopologyError(f"number of nodes must be a positive integer, got {n_nodes!r}")
    return n_nodes


def ndv2(n_nodes: int = 1, *, fabric: str = "switch", nic_bandwidth: float = hw.NIC_IB100_BW) -> Topology:
    """Azure NDv2: DGX-1 NVLink mesh per node (TACCL's profile), one NIC per node on PCIe."""
    node = from_lanes("ndv2", hw.DGX1_LANES, hw.NDV2_LANE_BW, hw.NDV2_LAT)
    nics = [Nic(tuple(range(8)), nic_bandwidth, hw.PCIE3_BW, hw.NIC_IB100_LAT)]
    return multinode(node, _nodes(n_nodes), nics, fabric=fabric, name=f"ndv2x{n_nodes}" if n_nodes > 1 else "ndv2")


def dgx2(n_nodes: int = 1, *, fabric: str = "switch", nic_bandwidth: float = hw.NIC_IB100_BW) -> Topology:
    """16 V100s on NVSwitch (125 GB/s per GPU port); 8 NICs, each shared by a GPU pair."""
    node = _switched_node("dgx2", 16, hw.DGX2_PORT_BW, hw.DGX2_LAT)
    nics = [Nic((2 * k, 2 * k + 1), nic_bandwidth, hw.PCIE3_BW, hw.NIC_IB100_LAT) for k in range(8)]
    return multinode(node, _nodes(n_nodes), nics, fabric=fabric, name=f"dgx2x{n_nodes}" if n_nodes > 1 else "dgx2")


def dgx_a100(n_nodes: int = 1, *, fabric: str = "rail", nic_bandwidth: float = hw.NIC_200G_BW) -> Topology:
    """8 A100s on NVSwitch (300 GB/s per GPU); 8 x 200 Gb/s NICs, one per GPU, rail-optimized."""
    node = _switched_node("dgx-a100", 8, hw.A100_PORT_BW, hw.A100_LAT)
    nics = [Nic((k,), nic_bandwidth, hw.PCIE4_BW, hw.NET_LAT) for k in range(8)]
    return multinode(
        node, _nodes(n_nodes), nics, fabric=fabric, name=f"dgx-a100x{n_nodes}" if n_nodes > 1 else "dgx-a100"
    )


def dgx_h100(n_nodes: int = 1, *, fabric: str = "rail", nic_bandwidth: float = hw.NIC_400G_BW) -> Topology:
    """8 H100s on NVSwitch (450 GB/s per GPU); 8 x 400 Gb/s NICs, one per GPU, rail-optimized."""
    node = _switched_node("dgx-h100", 8, hw.H100_PORT_BW, hw.H100_LAT)
    nics = [Nic((k,), nic_bandwidth, hw.PCIE5_BW, hw.NET_LAT) for k in range(8)]
    return multinode(
        node, _nodes(n_nodes), nics, fabric=fabric, name=f"dgx-h100x{n_nodes}" if n_nodes > 1 else "dgx-h100"
    )
