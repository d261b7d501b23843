"""Lower bounds every solver and report uses, one building block per module.

* ``steps``: the hop bound (``step_bound``) and the pairs data must travel (``needed_pairs``);
* ``cuts``: the cut bound of allgather-like traffic, exact by Dinkelbach's method over minimum
  cuts (``cut_ratio``; SCCL's ``rounds_per_chunk_bound``), and the least max-flow cuts of
  broadcast, reduce and allreduce;
* ``routed``: what the routes the flattened topology fixes can deliver (``routed_delivery``);
* ``onsets``: no byte crosses a link before its route's latency has passed (``onset_time``),
  and the far side's credit;
* ``lanes``: the lane bound of broadcast and reduce (``lane_bound``, ``root_lanes``);
* ``latency``: the alpha-weighted shortest path between the farthest pair that must exchange
  data;
* ``alltoall``: the product-demand cut bound and the concurrent-flow LP;
* ``call``: the bound of one call, ``lower_bound(topology, collective, size) -> Bounds``.
"""

from __future__ import annotations

from .call import Bounds, lower_bound
from .cuts import CutBound, cut_ratio, rounds_per_chunk_bound
from .lanes import RootLanes, lane_bound, root_lanes
from .onsets import onset_time
from .routed import routed_delivery
from .steps import needed_pairs, step_bound

__all__ = [
    "Bounds",
    "CutBound",
    "RootLanes",
    "cut_ratio",
    "lane_bound",
    "lower_bound",
    "needed_pairs",
    "onset_time",
    "root_lanes",
    "rounds_per_chunk_bound",
    "routed_delivery",
    "step_bound",
]
