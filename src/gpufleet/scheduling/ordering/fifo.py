"""fifo: submit order, nothing else."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import Job
from gpufleet.scheduling.framework import QUEUE_SORT, PolicyContext, SortContext


class Fifo:
    name = "fifo"

    def order(self, jobs: Sequence[Job], ctx: SortContext) -> list[Job]:
        return sorted(jobs, key=lambda j: (j.submit_time, j.id))


@QUEUE_SORT.register("fifo")
def _factory(pctx: PolicyContext) -> Fifo:
    return Fifo()
