"""Cost models: what a runtime charges a schedule beyond the links' physics, and NCCL's own
algorithms as the baselines every "vs NCCL" figure is measured against.

``nccl``: NCCL's cost model (its tuning tables), the reference baselines. The simulator
(``backends.sim``) times Programs on the links; the driver adds these baselines to its Report.
"""

from .nccl import baselines as nccl_baselines
from .nccl import bus_bandwidth

__all__ = ["bus_bandwidth", "nccl_baselines"]
