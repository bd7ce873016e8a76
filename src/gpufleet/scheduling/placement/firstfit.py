"""First fit: the feasible node with the lowest index (GPUs: the snapshot's default choice)."""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.framework import PLACEMENT, PolicyContext
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


class FirstFit:
    name = "firstfit"

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        return -nodes.astype(np.float64)

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return None


@PLACEMENT.register("firstfit")
def make_firstfit(ctx: PolicyContext) -> FirstFit:
    return FirstFit()
