"""priority: priority class (with aging), then age."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import Job
from gpufleet.scheduling.framework import QUEUE_SORT, PolicyContext, SortContext
from gpufleet.scheduling.ordering.aging import Aging


class PrioritySort:
    name = "priority"

    def __init__(self, aging: Aging) -> None:
        self.aging = aging

    def order(self, jobs: Sequence[Job], ctx: SortContext) -> list[Job]:
        now = ctx.now
        eff = self.aging.effective_priority
        return sorted(jobs, key=lambda j: (-eff(j, now), j.submit_time, j.id))


def aging_from(pctx: PolicyContext) -> Aging:
    p = pctx.params
    return Aging(
        interval_s=float(p.get("aging_interval_s", 3600.0)),  # type: ignore[arg-type]
        boost=int(p.get("aging_boost", 10)),  # type: ignore[call-overload]
    )


@QUEUE_SORT.register("priority")
def _factory(pctx: PolicyContext) -> PrioritySort:
    return PrioritySort(aging_from(pctx))
