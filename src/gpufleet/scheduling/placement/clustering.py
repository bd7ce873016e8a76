"""GpuClustering, as in the FGD paper's simulator: keep pods of the same GPU "affinity" together.

A pod's affinity is ``share-gpu`` (fractional), ``<k>-gpu`` (k whole GPUs) or none (CPU-only,
score 0). With ``L`` = the node's free milli-GPU and ``b = 25 · (8000 − L) // 8000``:

- the node hosts only pods of the same affinity: ``75 + b``;
- it hosts the same affinity among others: ``50 + b``;
- it hosts no GPU pod: ``25 + b``;
- it hosts only other affinities: ``b``.

The affinity counts per node are plugin state kept through :class:`AllocationObserver` (use
:func:`~gpufleet.scheduling.placement.base.commit`); without it every node looks empty of pods.
GPUs inside the node: best fit.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpufleet.model.gpu import MILLI
from gpufleet.scheduling.framework import PLACEMENT, PolicyContext
from gpufleet.scheduling.placement.base import MAX_NODE_SCORE, MAX_SPEC_GPU_MILLI, MIN_NODE_SCORE, free_gpu_milli
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


def affinity(pod: PodRequest) -> str | None:
    g = pod.gpu
    if g.count == 0:
        return None
    if g.count == 1 and (g.milli < MILLI or g.is_mig):
        return "share-gpu"
    return f"{g.count}-gpu"


class GpuClustering:
    name = "clustering"

    def __init__(self) -> None:
        self._tags: dict[int, Counter[str]] = {}
        self._snap_id = 0

    def _counts(self, snap: ClusterSnapshot) -> dict[int, Counter[str]]:
        if id(snap) != self._snap_id:
            self._tags, self._snap_id = {}, id(snap)
        return self._tags

    def observe(self, snap: ClusterSnapshot, pod: PodRequest, a: Assignment, sign: int) -> None:
        tag = affinity(pod)
        if tag is None:
            return
        c = self._counts(snap).setdefault(a.node, Counter())
        c[tag] += sign
        if c[tag] <= 0:
            del c[tag]

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        tag = affinity(pod)
        if tag is None:
            return np.full(len(nodes), float(MIN_NODE_SCORE))
        q = MAX_NODE_SCORE // 4
        base = q * (MAX_SPEC_GPU_MILLI - free_gpu_milli(snap, nodes)) // MAX_SPEC_GPU_MILLI
        tags = self._counts(snap)
        offset = np.full(len(nodes), q, dtype=np.int64)  # no affinity yet
        for k, node in enumerate(nodes.tolist()):
            c = tags.get(node)
            if not c:
                continue
            if c.get(tag, 0) > 0:
                offset[k] = 3 * q if len(c) == 1 else 2 * q
            else:
                offset[k] = 0
        result: FloatArray = (base + offset).astype(np.float64)
        return result

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return None


@PLACEMENT.register("clustering")
def make_clustering(ctx: PolicyContext) -> GpuClustering:
    return GpuClustering()
