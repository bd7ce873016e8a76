"""drf: weighted Dominant Resource Fairness between teams (Ghodsi et al., NSDI'11).

A team's share is its dominant share (largest of GPU, CPU, memory fraction of the cluster) divided
by its weight; the next job comes from the team with the smallest share (progressive filling).
"""

from __future__ import annotations

from gpufleet.model.job import Job
from gpufleet.scheduling.framework import QUEUE_SORT, PolicyContext, SortContext
from gpufleet.scheduling.ordering.aging import Aging
from gpufleet.scheduling.ordering.fairshare import FairShareSort
from gpufleet.scheduling.ordering.priority import aging_from


def _share(team: str, ctx: SortContext) -> float:
    ds = ctx.usage.dominant_share(team, ctx.gpu_total_milli, ctx.cpu_total_milli, ctx.memory_total_mib)
    return ds / ctx.weight(team)


def _increment(job: Job, ctx: SortContext) -> float:
    s = job.spec
    parts = [
        s.total_gpu_milli / ctx.gpu_total_milli if ctx.gpu_total_milli else 0.0,
        s.cpu_milli * s.gang_size / ctx.cpu_total_milli if ctx.cpu_total_milli else 0.0,
        s.memory_mib * s.gang_size / ctx.memory_total_mib if ctx.memory_total_mib else 0.0,
    ]
    return max(parts)


class DrfSort(FairShareSort):
    name = "drf"

    def __init__(self, aging: Aging) -> None:
        super().__init__(aging, _share, _increment)


@QUEUE_SORT.register("drf")
def _factory(pctx: PolicyContext) -> DrfSort:
    return DrfSort(aging_from(pctx))
