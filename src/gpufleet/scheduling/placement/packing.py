"""GpuPacking, as in the FGD paper's simulator. Three tiers, best first:

1. the pod fits on partly used GPUs: ``100 − (Σ free % of the GPUs it would use) / 10`` (≥ 50);
2. it needs fully free GPUs of a partly used node: ``50 − fully free GPUs it takes`` (≥ 33);
3. the node is entirely free: ``max(33 − free GPUs, free GPUs)``.

The GPUs it "would use" are taken smallest-free-first, as the reference does. CPU-only pods
score 0 everywhere. GPUs inside the node: best fit."""

from __future__ import annotations

import numpy as np

from gpufleet.model.gpu import MILLI
from gpufleet.scheduling.framework import PLACEMENT, PolicyContext
from gpufleet.scheduling.placement.base import MAX_NODE_SCORE, MIN_NODE_SCORE
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


class GpuPacking:
    name = "packing"

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        g = pod.gpu
        out = np.full(len(nodes), float(MIN_NODE_SCORE))
        if g.count == 0:
            return out
        count = snap.gpu_count[nodes]
        free = snap.gpu_free[nodes]
        g_max = free.shape[1]
        valid = np.arange(g_max)[None, :] < count[:, None]
        fully = ((free == MILLI) & valid).sum(axis=1)
        all_free = fully == count
        # GPUs the pod would use: smallest free first (stable), among those with free >= milli.
        key = np.where(valid & (free >= g.milli), free, MILLI + 1)
        order = np.argsort(key, axis=1, kind="stable")[:, : g.count]
        used = np.take_along_axis(free, order, axis=1)  # [K, count]
        ffree_use = (used == MILLI).sum(axis=1)
        case2 = np.maximum(MAX_NODE_SCORE // 2 - ffree_use, MAX_NODE_SCORE // 3)
        ratio = (used * 100 // MILLI).sum(axis=1)
        case1 = np.maximum(MAX_NODE_SCORE - ratio // 10, MAX_NODE_SCORE // 2)
        case3 = np.maximum(MAX_NODE_SCORE // 3 - fully, fully)
        result: FloatArray = np.where(all_free, case3, np.where(ffree_use > 0, case2, case1)).astype(np.float64)
        return result

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return None


@PLACEMENT.register("packing")
def make_packing(ctx: PolicyContext) -> GpuPacking:
    return GpuPacking()
