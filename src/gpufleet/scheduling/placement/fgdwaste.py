"""``fgd-waste``: FGD whose ties between sharing placements go to the least *expected final waste*.

FGD scores a placement by the fragmentation it removes, squashed to an integer 0..100
(:func:`~gpufleet.scheduling.placement.fgd.sigmoid_score`: one point is about 40 milli-GPU of
fragmentation). Many nodes and GPUs therefore tie, and a tie goes to the scheduler's node order.
That coarse, order-driven choice is a large part of why FGD packs well (a float version of FGD
that breaks every tie by tiny differences leaves twice as many GPUs unallocated on openb), so this
policy keeps FGD's integer score as the primary key and only re-orders placements FGD scores the same.

Secondary key for a GPU-sharing pod (``count == 1``, ``milli < 1000``): the drop in the expected
final waste of the GPU it lands on, ``W(free) − W(free − milli)``. ``W(s)`` is the milli-GPU a GPU
with ``s`` free is expected to still have idle when the cluster saturates, from the target workload
alone (the typical sharing pods ``m`` with popularity ``p_m``)::

    W(0) = 0,  W(1000) = 0                       (a whole GPU is wanted by whole-GPU pods)
    P(s) = Σ_{m ≤ s} p_m                         (typical sharing pods that fit in s)
    W(s) = s                                     if P(s) = 0
         = (1 − φ) · s + φ · Σ_{m ≤ s} p_m/P(s) · W(s − m),   φ = 1 − exp(−λ · P(s))

so a leftover that only rare pods fit (e.g. 190 milli next to an 810 pod) counts as almost all
waste, while one a popular pod fits exactly (530 next to a 470) counts as the waste that pod would
leave (60). FGD's fragmentation measure instead charges a leftover by the share of typical pods
that cannot use it *now*, whatever they would leave behind. The secondary term is below 1e-3 of a
score point, so it never overrides FGD's score; it picks the node and the GPU among FGD's ties.

Everything else is ``fgd-cpu`` (memory-aware fit; CPU-only pods fill GPU-exhausted nodes first).
Online: it uses the target workload distribution and the current snapshot only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpufleet.model.gpu import MILLI
from gpufleet.scheduling.framework import PLACEMENT, PolicyContext, WorkloadClass
from gpufleet.scheduling.placement.fgd import _Stats, sigmoid_score
from gpufleet.scheduling.placement.fgdcpu import FgdCpu
from gpufleet.scheduling.snapshot import ClusterSnapshot, FloatArray, IntArray, PodRequest

FILL_RATE = 10.0  # λ: how fast a leftover's fill probability grows with the popularity of what fits
WASTE_TIE_WEIGHT = 1e-3  # per 1000 milli-GPU of expected waste removed (< one FGD score point)


def expected_waste(workload: Sequence[WorkloadClass], fill_rate: float = FILL_RATE) -> FloatArray:
    """``W[s]`` for ``s`` = 0..1000 free milli-GPU on one GPU (see the module docstring)."""
    sizes: dict[int, float] = {}
    for w in workload:
        if w.gpu_count == 1 and 0 < w.gpu_milli < MILLI and w.weight > 0:
            sizes[w.gpu_milli] = sizes.get(w.gpu_milli, 0.0) + w.weight
    shares = sorted(sizes.items())
    waste = np.zeros(MILLI + 1, dtype=np.float64)
    for s in range(1, MILLI):
        fit = [(m, p) for m, p in shares if m <= s]
        total = sum(p for _, p in fit)
        if total == 0:
            waste[s] = s
            continue
        phi = 1.0 - math.exp(-fill_rate * total)
        filled = sum(p * waste[s - m] for m, p in fit) / total
        waste[s] = (1.0 - phi) * s + phi * filled
    return waste


class FgdWaste(FgdCpu):
    name = "fgd-waste"

    def __init__(self, workload: Sequence[WorkloadClass], *, fill_rate: float = FILL_RATE) -> None:
        super().__init__(workload)
        self.waste = expected_waste(workload, fill_rate)

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        if not pod.gpu.is_fractional:
            return super().score(snap, pod, nodes)
        c, model, m = self._cache, self.model, pod.gpu.milli
        c.sync(snap, model)
        access = model.access(snap)
        free = snap.gpu_free[nodes]  # [K, G]
        g_max = free.shape[1]
        # GPUs of a node with the same free share are the same choice: keep the lowest index.
        dup = (free[:, :, None] == free[:, None, :]) & np.tri(g_max, g_max, -1, dtype=np.bool_)[None, :, :]
        pk, pg = np.nonzero((free >= m) & ~dup.any(axis=2))
        f = free[pk, pg]
        rows = nodes[pk]
        lv = model.levels[None, :]
        f_, a_ = f[:, None], (f - m)[:, None]
        st = _Stats(
            c.cnt[rows] - (f_ >= lv) + (a_ >= lv),
            c.small[rows] - np.where(f_ < lv, f_, 0) + np.where(a_ < lv, a_, 0),
            c.total[rows] - m,
            snap.cpu_free[rows] - pod.cpu_milli,
            snap.gpu_type[rows],
            snap.mem_free[rows] - pod.memory_mib,
        )
        frag_removed = c.frag[rows] - model.frag(st, access)
        waste_removed = self.waste[f] - self.waste[f - m]
        key = sigmoid_score(frag_removed) + WASTE_TIE_WEIGHT * waste_removed / MILLI
        # best pair per node; equal keys → lowest GPU index
        order = np.lexsort((pg, -key, pk))
        first = order[np.r_[True, pk[order][1:] != pk[order][:-1]]]
        out = np.full(len(nodes), -np.inf)
        gpus = np.full(len(nodes), -1, dtype=np.int64)
        out[pk[first]] = key[first]
        gpus[pk[first]] = pg[first]
        self._last = (pod, nodes, gpus)
        return out


@PLACEMENT.register("fgd-waste")
def make_fgd_waste(ctx: PolicyContext) -> FgdWaste:
    return FgdWaste(ctx.workload)
