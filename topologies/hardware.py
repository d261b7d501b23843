"""Hardware numbers the builders use, with where they come from.

Bandwidth is GB/s per direction (per lane where lanes apply), latency is microseconds. Profiles
marked "assumed" are round numbers of the right class where no measured profile is public;
every builder takes ``bandwidth``/``latency`` overrides.
"""

from __future__ import annotations

# Generic link for the parametric families (ring, torus, ...): one V100-class NVLink.
GENERIC_BW = 25.0
GENERIC_LAT = 0.7

# DGX-1: NVLink (V100 generation) about 25 GB/s per direction per lane, latency well under 1 us.
DGX1_LANE_BW = 25.0
DGX1_LAT = 0.7
DGX1_LANES = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)

# NDv2 (Azure, 8 x V100, DGX-1 NVLink mesh, one NIC per node). TACCL's profile with 1 MB chunks:
# alpha 0.3 us; beta 46 us/MB on single-lane (slow) links -> 21.74 GB/s per lane (fast links are
# the double ones, 23 us/MB); inter-node alpha 2.6 us, beta 105 us/MB -> 9.52 GB/s per NIC.
NDV2_LANE_BW = 1e6 / 46.0 / 1e3
NDV2_LAT = 0.3
NIC_IB100_BW = 1e6 / 105.0 / 1e3
NIC_IB100_LAT = 2.6
PCIE3_BW = 12.0  # PCIe gen3 x16, GPU <-> NIC (assumed; above the NIC rate so the NIC binds)

# DGX-2 (16 x V100 on NVSwitch, 8 NICs, one per GPU pair). TACCL: alpha 0.3 us, beta 8 us/MB per
# GPU port -> 125 GB/s; inter-node as NDv2 per NIC.
DGX2_PORT_BW = 1e6 / 8.0 / 1e3
DGX2_LAT = 0.3

# DGX A100: 8 x A100 on NVSwitch, 12 NVLink3 lanes, about 300 GB/s per direction per GPU;
# 8 NICs of 200 Gb/s (25 GB/s), rail-optimized. Latencies assumed (NVLink 0.7 us, network 2.6 us).
A100_PORT_BW = 300.0
A100_LAT = 0.7
NIC_200G_BW = 25.0
PCIE4_BW = 32.0

# DGX H100: 8 x H100 on NVSwitch, 18 NVLink4 lanes, about 450 GB/s per direction per GPU;
# 8 NICs of 400 Gb/s (50 GB/s), rail-optimized. Latencies assumed as for A100.
H100_PORT_BW = 450.0
H100_LAT = 0.7
NIC_400G_BW = 50.0
PCIE5_BW = 64.0

NET_LAT = 2.6  # end-to-end network latency between NICs, split evenly over up- and down-links

# AMD 8-GPU Infinity Fabric mesh: fully connected, 5 or 6 lanes per pair. Per-lane bandwidth and
# latency assumed (10 GB/s, 1 us).
AMD8_LANES = (
    (0, 5, 6, 6, 5, 6, 5, 5),
    (5, 0, 5, 5, 6, 5, 6, 6),
    (6, 5, 0, 6, 5, 6, 5, 5),
    (6, 5, 6, 0, 5, 6, 5, 5),
    (5, 6, 5, 5, 0, 5, 6, 6),
    (6, 5, 6, 6, 5, 0, 5, 5),
    (5, 6, 5, 5, 6, 5, 0, 6),
    (5, 6, 5, 5, 6, 5, 6, 0),
)
AMD8_LANE_BW = 10.0
AMD8_LAT = 1.0
