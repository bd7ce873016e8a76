"""``fgd-cpu``: FGD that also watches the node resources that strand GPUs.

FGD counts a GPU as a fragment for a typical pod when the node lacks the GPU share *or the CPU*
to host it, and otherwise leaves ties (equal integer scores, common for CPU-only pods, whose
placement rarely changes the fragmentation of the GPUs) to the scheduler's node order. Two
changes, both online (they use only the target workload distribution and the current snapshot):

1. **Memory-aware fit.** A typical pod also needs its (median) memory: a node whose memory is
   exhausted strands its free GPUs exactly as one whose CPU is exhausted, so it counts as
   fragmentation (FGD's Q4 "lack CPU" extended to memory).
2. **CPU-only pods avoid GPU headroom.** Among nodes with the same FGD score, a CPU-only pod goes
   where the fewest free GPUs would be left next to its CPU and memory use (then the least free
   CPU), so CPU pods consume the CPU of GPU-exhausted nodes before that of nodes whose GPUs still
   need CPU to be sold. GPU pods keep FGD's order among ties.

GPU choice inside a node is FGD's. The secondary term is < 1e-3 of a score point, so it only
orders nodes FGD scores the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.scheduling.framework import PLACEMENT, PolicyContext, WorkloadClass
from gpufleet.scheduling.placement.base import MAX_SPEC_CPU_MILLI, MAX_SPEC_GPU_MILLI, free_gpu_milli
from gpufleet.scheduling.placement.fgd import FGD
from gpufleet.scheduling.snapshot import ClusterSnapshot, FloatArray, IntArray, PodRequest

TIE_WEIGHT = 1e-4


class FgdCpu(FGD):
    name = "fgd-cpu"

    def __init__(self, workload: Sequence[WorkloadClass]) -> None:
        super().__init__(workload, use_memory=True)

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        base = super().score(snap, pod, nodes)
        if pod.gpu.count > 0:
            return base
        gpu_left = free_gpu_milli(snap, nodes) / MAX_SPEC_GPU_MILLI
        cpu_left = (snap.cpu_free[nodes] - pod.cpu_milli) / MAX_SPEC_CPU_MILLI
        tie = 1.0 - np.clip(0.9 * gpu_left + 0.1 * cpu_left, 0.0, 1.0)
        result: FloatArray = base + TIE_WEIGHT * tie
        return result


@PLACEMENT.register("fgd-cpu")
def make_fgd_cpu(ctx: PolicyContext) -> FgdCpu:
    return FgdCpu(ctx.workload)
