"""DotProd (Tetris' alignment heuristic), as in the FGD paper's simulator with ``dimExtMethod:
merge, normMethod: max``: node vector = (free CPU, total free GPU), pod vector = (CPU, total GPU),
both divided by the largest node spec (128 cores, 8 GPUs); score = ``int(100 · (1 − dot / 2))`` —
the node whose free resources align least with the request keeps the most balanced remainder.
GPUs inside the node: best fit."""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.framework import PLACEMENT, PolicyContext
from gpufleet.scheduling.placement.base import (
    MAX_NODE_SCORE,
    MAX_SPEC_CPU_MILLI,
    MAX_SPEC_GPU_MILLI,
    free_gpu_milli,
)
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


class DotProduct:
    name = "dotprod"

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        cpu = (snap.cpu_free[nodes] / MAX_SPEC_CPU_MILLI) * (pod.cpu_milli / MAX_SPEC_CPU_MILLI)
        gpu = (free_gpu_milli(snap, nodes) / MAX_SPEC_GPU_MILLI) * (pod.gpu.total_milli / MAX_SPEC_GPU_MILLI)
        result: FloatArray = np.trunc(MAX_NODE_SCORE * (1.0 - (cpu + gpu) / 2.0))
        return result

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return None


@PLACEMENT.register("dotprod")
def make_dotprod(ctx: PolicyContext) -> DotProduct:
    return DotProduct()
