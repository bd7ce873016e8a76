"""decayed: fair share by decayed historical GPU usage (Slurm's classic fair-share).

A team's usage is its GPU-seconds decayed with a half-life (``UsageTracker.half_life_s``), divided
by its weight; the team that used least recently goes next. A job's increment is its GPUs times
one half-life (the usage it would add if it ran that long), normalised like the usage.
"""

from __future__ import annotations

from gpufleet.model.job import Job
from gpufleet.model.share import milli_gpus
from gpufleet.scheduling.framework import QUEUE_SORT, PolicyContext, SortContext
from gpufleet.scheduling.ordering.aging import Aging
from gpufleet.scheduling.ordering.fairshare import FairShareSort
from gpufleet.scheduling.ordering.priority import aging_from


def _share(team: str, ctx: SortContext) -> float:
    return ctx.usage.decayed(team, ctx.now) / ctx.weight(team)


def _increment(job: Job, ctx: SortContext) -> float:
    gpus = milli_gpus(job.spec.total_gpu_milli)
    est = job.spec.estimated_runtime_s or ctx.usage.half_life_s
    return gpus * min(est, ctx.usage.half_life_s)


class DecayedSort(FairShareSort):
    name = "decayed"

    def __init__(self, aging: Aging) -> None:
        super().__init__(aging, _share, _increment)


@QUEUE_SORT.register("decayed")
def _factory(pctx: PolicyContext) -> DecayedSort:
    return DecayedSort(aging_from(pctx))
