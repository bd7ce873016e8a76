"""Fair-share ordering by progressive filling (shared by ``drf`` and ``decayed``).

Within each effective-priority level (see aging), teams take turns: the team with the smallest
weighted share goes next and its share grows by what its job would add. Within a team, jobs go
by priority then age. The result interleaves teams so a team that has used little gets the
next free GPUs — the fair share is visible in start order.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Sequence

from gpufleet.model.job import Job
from gpufleet.scheduling.framework import SortContext
from gpufleet.scheduling.ordering.aging import Aging

# (team, ctx) → current share (already divided by weight); (job, ctx) → share the job adds
ShareFn = Callable[[str, SortContext], float]
IncrementFn = Callable[[Job, SortContext], float]


def progressive_fill(
    jobs: Sequence[Job], ctx: SortContext, aging: Aging, share: ShareFn, increment: IncrementFn
) -> list[Job]:
    now = ctx.now
    levels: dict[int, dict[str, list[Job]]] = defaultdict(lambda: defaultdict(list))
    for j in jobs:
        levels[aging.effective_priority(j, now)][j.team].append(j)
    out: list[Job] = []
    shares: dict[str, float] = {}
    for level in sorted(levels, reverse=True):
        heap: list[tuple[float, float, str, int]] = []
        queues = levels[level]
        for team, q in queues.items():
            q.sort(key=lambda j: (-j.priority, j.submit_time, j.id))
            if team not in shares:
                shares[team] = share(team, ctx)
            heapq.heappush(heap, (shares[team], q[0].submit_time, team, 0))
        while heap:
            s, _, team, pos = heapq.heappop(heap)
            q = queues[team]
            job = q[pos]
            out.append(job)
            s += increment(job, ctx) / ctx.weight(team)
            shares[team] = s
            if pos + 1 < len(q):
                heapq.heappush(heap, (s, q[pos + 1].submit_time, team, pos + 1))
    return out
