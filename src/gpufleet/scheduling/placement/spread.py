"""Spread (worst fit): the node with the most free capacity left (CPU and GPU, as BestFit's
terms with the opposite sign); inside the node, the fitting GPU with the most free share."""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.framework import PLACEMENT, PolicyContext
from gpufleet.scheduling.placement.base import MAX_SPEC_CPU_MILLI, MAX_SPEC_GPU_MILLI, fractional_choice, free_gpu_milli
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


class Spread:
    name = "spread"

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        cpu_left = (snap.cpu_free[nodes] - pod.cpu_milli) / MAX_SPEC_CPU_MILLI
        gpu_left = (free_gpu_milli(snap, nodes) - pod.gpu.total_milli) / MAX_SPEC_GPU_MILLI
        result: FloatArray = 0.5 * cpu_left + 0.5 * gpu_left
        return result

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return fractional_choice(snap, pod, node, lambda _, free: int(np.argmax(free)))  # the emptiest GPU


@PLACEMENT.register("spread")
def make_spread(ctx: PolicyContext) -> Spread:
    return Spread()
