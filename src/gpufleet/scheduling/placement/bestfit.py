"""Best fit, as in the FGD paper's simulator (BestFitScore).

Score of a node: ``(1 − Σ_r w_r · (free_r − request_r) / maxSpec_r) · 100`` over CPU and GPU
(weights ½, ½; maxSpec 128 cores and 8 GPUs), truncated to an integer, then kube-scheduler's
min-max NormalizeScore. The least free capacity left after placing wins. GPUs inside the node:
the fitting GPU with the least free share (whole GPUs: the lowest free indices).
"""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.framework import PLACEMENT, PolicyContext
from gpufleet.scheduling.placement.base import (
    MAX_NODE_SCORE,
    MAX_SPEC_CPU_MILLI,
    MAX_SPEC_GPU_MILLI,
    free_gpu_milli,
    normalize_scores,
)
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


def bestfit_raw(snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
    """The un-normalized integer BestFit score of each node (higher: tighter fit)."""
    cpu_left = (snap.cpu_free[nodes] - pod.cpu_milli) / MAX_SPEC_CPU_MILLI
    gpu_left = (free_gpu_milli(snap, nodes) - pod.gpu.total_milli) / MAX_SPEC_GPU_MILLI
    raw = (1.0 - (0.5 * cpu_left + 0.5 * gpu_left)) * MAX_NODE_SCORE
    result: FloatArray = np.trunc(raw)
    return result


class BestFit:
    name = "bestfit"

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        return normalize_scores(bestfit_raw(snap, pod, nodes))

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return None  # the snapshot's default is best fit within the node


@PLACEMENT.register("bestfit")
def make_bestfit(ctx: PolicyContext) -> BestFit:
    return BestFit()
