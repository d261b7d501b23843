"""Cost models: what a runtime charges a schedule beyond the links' physics, and NCCL's own
algorithms as the baselines every "vs NCCL" figure is measured against. One set of calibrated
parameters serves both.

* ``calibration``: the parameters as data (``data/calibration.json``, refitted by
  ``python benchmarks/validate.py --fit``) and NCCL's own constants per version
  (``data/nccl-2.30.json``);
* ``fit``: the parameters fitted to measured calls (the published ones of
  ``benchmarks/validate.py``, or a user's own nccl-tests runs through ``ccl probe --nccl-tests``);
* ``runtime``: what a runtime (MSCCL, RCCL, MSCCL++, NCCL, the torch executor) and protocol
  charge each message and each call, for the simulator (``backends.sim``);
* ``nccl``: NCCL's algorithms (Ring, Tree, NVLS, NVLSTree, CollNet, PAT) as NCCL enables them,
  priced, and its pick; ``machine``: the view of a topology they are priced on.
"""

from .nccl import baselines as nccl_baselines
from .nccl import bus_bandwidth
from .runtime import charges

__all__ = ["bus_bandwidth", "charges", "nccl_baselines"]
