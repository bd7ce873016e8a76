"""Aging: a job's effective priority grows while it waits, so nothing starves.

Effective priority = base priority + ``boost`` x (whole ``interval_s`` periods waited). Integer
steps keep jobs grouped in a few priority levels (fair share orders within a level). Preemption
always uses the *base* priority, so aging can never create a preemption cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.job import Job


@dataclass(frozen=True, slots=True)
class Aging:
    interval_s: float = 3600.0
    boost: int = 10  # priority points per interval waited; 0 disables aging

    def effective_priority(self, job: Job, now: float) -> int:
        if self.boost <= 0 or self.interval_s <= 0:
            return job.priority
        waited = max(0.0, now - job.submit_time)
        return job.priority + self.boost * int(waited // self.interval_s)
