"""Random: a uniformly random feasible node; a fractional pod takes a uniformly random fitting
GPU (the FGD simulator's RandomScore with ``gpuSelMethod: random``). Seeded by ``ctx.seed``."""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.framework import PLACEMENT, PolicyContext
from gpufleet.scheduling.placement.base import random_gpu_assignment
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


class RandomFit:
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        return self.rng.random(len(nodes))

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return random_gpu_assignment(snap, pod, node, self.rng)


@PLACEMENT.register("random")
def make_random(ctx: PolicyContext) -> RandomFit:
    return RandomFit(ctx.seed)
