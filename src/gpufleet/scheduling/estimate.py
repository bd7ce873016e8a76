"""Estimated start times of queued jobs (what ``gpufleet queue`` shows).

A list-scheduling estimate over the cluster's GPU capacity: jobs start in queue order as soon as
enough milli-GPU is free, running jobs free theirs at their estimated end, and each started job
holds its GPUs for its own runtime estimate. It ignores placement detail (fragmentation, types), so
it is a lower bound when the cluster is fragmented; a job whose start depends on a job with no
runtime estimate gets ``None`` (unknown), never a made-up time. O(n log n).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

from gpufleet.model.job import Job
from gpufleet.scheduling.preemption import RunningJob


def estimate_starts(
    order: Sequence[Job], running: Iterable[RunningJob], capacity_milli: int, now: float
) -> dict[str, float | None]:
    releases: list[tuple[float, int]] = []  # (time, milli freed)
    held = 0
    for rj in running:
        milli = sum(a.milli * len(a.gpus) for a in rj.assignments)
        held += milli
        heapq.heappush(releases, (max(rj.est_end, now), milli))
    free = capacity_milli - held
    t = now
    out: dict[str, float | None] = {}
    for job in order:
        need = job.spec.total_gpu_milli
        if need > capacity_milli:
            out[job.id] = None  # can never fit the cluster as it is
            continue
        while free < need and releases:
            when, milli = heapq.heappop(releases)
            t = max(t, when)
            free += milli
        if free < need or math.isinf(t):
            out[job.id] = None
            continue
        out[job.id] = t
        est = job.spec.estimated_runtime_s or job.spec.max_runtime_s
        free -= need
        if need:
            heapq.heappush(releases, (t + est if est else math.inf, need))
    return out
