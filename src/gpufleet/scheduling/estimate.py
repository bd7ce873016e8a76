"""Estimated start times of queued jobs (what ``gpufleet queue`` shows as EST. START).

**Blocked first.** A job the last scheduling cycle held for something other than room is *blocked*:
it gets no time, only what holds it (:attr:`QueueEstimate.blocked`, shown as ``blocked: <reason>``),
and it takes no capacity in the estimate of the jobs behind it:

- ``quota``: its team's quota (the cycle's ``quota`` admission check);
- ``budget '<name>'``: a budget throttle in force (a cap on the GPUs its scope holds, spot only);
- ``capacity``: the cluster can never hold it (no node or pool fits it — the ``feasibility`` check
  rejected it —, or it needs more GPUs than every schedulable node together), or it waits for room
  and nothing running would ever free any;
- any other admission check's reason, as the check gave it.

**Then a list-scheduling estimate** over the cluster's schedulable GPU capacity (milli-GPU): the
jobs start in queue order (the order of the last cycle; jobs no cycle has seen yet after them, by
submit time) as soon as enough is free; a running job frees its GPUs at its *expected end*; a job
estimated to start holds its GPUs for its own runtime estimate (``estimated_runtime_s``, else
``max_runtime_s``, less the work it checkpointed).

**Stable.** The times are anchored on the running jobs' expected ends, which do not move with the
clock, so consecutive publications with nothing changed give the same estimate:

- a running job's expected end is its start plus its runtime estimate (less checkpointed work),
  and no later than the deadline its max runtime sets (start + max runtime + the stop grace
  period, when the backend stops it);
- a job past its expected end (*overdue*) has not ended, so it is not assumed to end now: it is
  taken to end "soon", :data:`OVERDUE_S` (a minute) from now — the only estimate that moves with
  the clock, and it keeps reading "in 1m" rather than "now" until the job ends;
- a run asked to stop (preemption, cancel, budget) ends within the stop grace period;
- a job the last cycle looked at and could not place (no room, or waiting for preempted jobs to
  stop) starts no earlier than the next expected end: its estimate never reads "now";
- a job no cycle has seen yet (submitted since the last one) may start now if the capacity is free.

An estimate changes only when its inputs do: a job starts, ends or is submitted, the order changes
(fair share moves as usage accrues), or a job ahead of it runs past its expected end. ``None``
without a ``blocked`` reason means unknown: the start depends on a running or queued job with no
runtime estimate, or on a node the autoscaler would add — never on the time alone.

The estimate ignores placement detail (which node, GPU type, fragmentation, CPU and memory) and
backfill: a backfilled job may start earlier than its estimate, a job on a fragmented cluster
later. O((queue + running) log running).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.model.job import Job
from gpufleet.scheduling.framework import Code, Status
from gpufleet.scheduling.preemption import (
    PREEMPT_MIN_RUNTIME_WAIT,
    RECLAIM_MIN_RUNTIME_WAIT,
    WITHIN_TEAM_MIN_RUNTIME_WAIT,
    WITHIN_TEAM_WAIT,
    RunningJob,
)

OVERDUE_S = 60.0  # a running job past its expected end is assumed to end this long from now
CAPACITY = "capacity"  # what ``blocked`` says when the cluster itself cannot hold the job
# The cycle's waits that end when room is freed (scheduling/cycle.py): the job is not blocked, it
# waits for running jobs to end (or to be stopped for it).
ROOM_WAITS = frozenset(
    {
        "no node has room",
        "preempting to make room",
        "waiting for preempted jobs to stop",
        "reclaiming quota lent to the cohort",
        WITHIN_TEAM_WAIT,
        PREEMPT_MIN_RUNTIME_WAIT,  # the same, once the victims have run their minimum runtime
        RECLAIM_MIN_RUNTIME_WAIT,
        WITHIN_TEAM_MIN_RUNTIME_WAIT,
    }
)


@dataclass(frozen=True, slots=True)
class QueueEstimate:
    """One queued job's estimate: when it should start (None: blocked or unknown) and, when it is
    blocked, what holds it in short (``quota``, ``budget 'nlp'``, ``capacity``)."""

    start: float | None = None
    blocked: str | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """Capacity a running job gives back: ``milli`` GPU (on schedulable nodes) at ``time``."""

    time: float
    milli: int


def expected_end(job: Job, now: float, *, grace_s: float = 0.0, stopping: bool = False) -> float:
    """When a running ``job`` should end (see the module docstring): its start plus its runtime
    estimate less checkpointed work, capped by its max-runtime deadline; ``now + OVERDUE_S`` once
    it is past that; within ``grace_s`` when a stop was asked; ``inf`` when it has no estimate."""
    start = job.start_time
    spec = job.spec
    planned = math.inf
    if start is not None:
        est = spec.estimated_runtime_s or spec.max_runtime_s
        if est is not None:
            planned = start + max(0.0, est - job.work_done_s)
        if spec.max_runtime_s is not None:
            planned = min(planned, start + spec.max_runtime_s + grace_s)
    if planned < now:  # overdue: it has not ended, so not "now" — soon
        planned = now + OVERDUE_S
    if stopping:
        planned = min(planned, now + grace_s)
    return planned


def running_release(rj: RunningJob, now: float, *, grace_s: float = 0.0, stopping: bool = False) -> Release:
    """A running job's :class:`Release` (every GPU it holds; see :func:`expected_end`)."""
    milli = sum(a.milli * len(a.gpus) for a in rj.assignments)
    return Release(expected_end(rj.job, now, grace_s=grace_s, stopping=stopping), milli)


def blocked_by(status: Status | None) -> str | None:
    """What holds a job the last cycle left waiting with ``status``, in short; None when it only
    waits for room (or no cycle has looked at it yet)."""
    if status is None or status.ok:
        return None
    reason = status.reason
    if status.code is Code.UNRESOLVABLE:
        return CAPACITY
    if status.code is Code.UNSCHEDULABLE and reason in ROOM_WAITS:
        return None
    if reason.startswith("quota"):
        return "quota"
    if reason.startswith("budget "):  # CapacityLimit reasons: "budget 'x' throttles ..." / "... allows ..."
        return reason.split(" throttles ", 1)[0].split(" allows ", 1)[0]
    return reason or str(status.code)


def estimate_queue(
    order: Sequence[Job],
    waiting: Mapping[str, Status],
    releases: Iterable[Release],
    capacity_milli: int,
    now: float,
    *,
    can_grow: bool = False,
) -> dict[str, QueueEstimate]:
    """Each queued job's :class:`QueueEstimate` (see the module docstring).

    ``order``: the queue, first to start first; ``waiting``: why the last cycle left each job
    waiting (jobs it did not look at are absent); ``releases``: what the running jobs give back
    and when; ``capacity_milli``: the schedulable GPU capacity; ``can_grow``: an autoscaler may add
    nodes (a job too big for the nodes there now is unknown then, not blocked)."""
    heap: list[tuple[float, int]] = []
    held = 0
    for r in releases:
        held += r.milli
        heap.append((r.time, r.milli))
    heapq.heapify(heap)
    free = capacity_milli - held
    t = now
    waited = False  # a release was taken: t is an expected end, no longer "now"
    out: dict[str, QueueEstimate] = {}
    for job in order:
        status = waiting.get(job.id)
        why = blocked_by(status)
        if why is not None:
            out[job.id] = QueueEstimate(None, why)
            continue
        need = job.spec.total_gpu_milli
        if need > capacity_milli:  # more than every schedulable node together
            out[job.id] = QueueEstimate(None, None if can_grow else CAPACITY)
            continue
        if status is not None and not waited:
            # the last cycle could not place it: room comes no earlier than the next expected end
            if not heap:
                out[job.id] = QueueEstimate(None, None if can_grow else CAPACITY)
                continue
            when, milli = heapq.heappop(heap)
            t, free, waited = max(t, when), free + milli, True
        while free < need and heap:
            when, milli = heapq.heappop(heap)
            t, free, waited = max(t, when), free + milli, True
        if free < need or math.isinf(t):
            out[job.id] = QueueEstimate(None)  # unknown: it waits on a job with no runtime estimate
            continue
        out[job.id] = QueueEstimate(t)
        free -= need
        est = job.remaining_estimate(now)  # a queued job's: its estimate less checkpointed work
        heapq.heappush(heap, (t + est if est is not None else math.inf, need))
    return out


def estimate_starts(
    order: Sequence[Job], running: Iterable[RunningJob], capacity_milli: int, now: float
) -> dict[str, float | None]:
    """Start times only, for a queue no cycle has looked at (see :func:`estimate_queue`)."""
    releases = [running_release(rj, now) for rj in running]
    return {k: e.start for k, e in estimate_queue(order, {}, releases, capacity_milli, now).items()}
