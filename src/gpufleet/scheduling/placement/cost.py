"""Cost-aware placement: the eligible node with the cheapest $/GPU-hour (``snap.gpu_hour_usd``;
spot nodes are already filtered out for non-preemptible pods by ``feasible``). CPU-only pods use
the same price (the node's $/GPU-hour stands for how dear the node is). Equal prices fall back to
best fit, so cheap capacity is packed before more of it is touched."""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.framework import PLACEMENT, PolicyContext
from gpufleet.scheduling.placement.base import minmax01
from gpufleet.scheduling.placement.bestfit import bestfit_raw
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


class CostAware:
    name = "cost"

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        price = snap.gpu_hour_usd[nodes]
        # Cents are the primary key; best fit (0..1) only orders nodes of the same price.
        cents = np.round(price * 100.0)
        fit = minmax01(bestfit_raw(snap, pod, nodes))
        result: FloatArray = -cents + 0.5 * fit
        return result

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return None


@PLACEMENT.register("cost")
def make_cost(ctx: PolicyContext) -> CostAware:
    return CostAware()
