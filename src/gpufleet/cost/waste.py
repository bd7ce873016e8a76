"""Preemption waste: the GPU-hours of work a stopped run did after its last checkpoint.

A run that is stopped and requeued resumes from its last checkpoint (or from the start when it never
checkpoints): what it did since then is done again, and paid for twice. Issue 23 asks every report
— ``gpufleet simulate``, what-if and ``/metrics`` — to state that figure, by cause, so a scheduler
that stops work nobody allowed to be stopped, or stops the same job over and over, shows up as
money. This module is the one home of the rule; reporters pass it what they know of each run.

Causes (the same words as the ``reason`` label of ``gpufleet_preemptions_total``):

- ``priority``: stopped for a higher-priority job (of another team, or of its own within its quota);
- ``quota_reclaim``: its team's borrowed quota was taken back by the team that lent it;
- ``spot_interruption``: its spot node was taken back;
- ``lost``: its node was removed, or the run vanished.

A run that failed and is retried is not a preemption (the job's own fault): no cause, no waste here.
Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

PRIORITY = "priority"
QUOTA_RECLAIM = "quota_reclaim"
SPOT_INTERRUPTION = "spot_interruption"
LOST = "lost"
WASTE_CAUSES: tuple[str, ...] = (PRIORITY, QUOTA_RECLAIM, SPOT_INTERRUPTION, LOST)

# how the loop spells a preemption in the run's stop text (``StopReason.text``): "preempt: <detail>",
# and a quota reclaim's detail starts "quota reclaimed" (gpufleet.scheduling.preemption.reclaim_reason)
_PREEMPT_PREFIX = "preempt:"
_RECLAIM_PREFIX = "preempt: quota"


def waste_cause(outcome: str, stop_text: str | None, capacity_type: str = "") -> str | None:
    """Why a requeued run was stopped (one of :data:`WASTE_CAUSES`), or None when it was not
    preempted (it succeeded, failed and is retried, was cancelled...).

    ``outcome``: the backend's event kind (``"stopped"``, ``"failed"``, ``"lost"``...);
    ``stop_text``: what the loop asked of the run (``runs.stop_requested``); ``capacity_type``: of
    the node it ran on. Mirrors the ``GROUP BY`` of
    :func:`gpufleet.store.repo.scrape.requeues_by_team`: a run lost on spot capacity is a spot
    interruption; a run asked to stop for a preemption that then stopped, failed or vanished is a
    preemption (a reclaim when the stop says so); any other lost run is ``lost``."""
    text = stop_text or ""
    if outcome == "lost" and capacity_type == "spot":
        return SPOT_INTERRUPTION
    if text.startswith(_PREEMPT_PREFIX) and outcome in ("stopped", "failed", "lost"):
        return QUOTA_RECLAIM if text.startswith(_RECLAIM_PREFIX) else PRIORITY
    if outcome == "lost":
        return LOST
    return None


def redone_work_s(ran_s: float, checkpoint_interval_s: float | None, checkpointed_at_s: float | None = None) -> float:
    """Seconds of a stopped run's work that must be done again: what it did after its last
    checkpoint, or all of it when it never checkpoints.

    ``ran_s``: how long the run ran; ``checkpoint_interval_s``: the job's (None or <= 0: it never
    checkpoints); ``checkpointed_at_s``: seconds into the run at which it also checkpointed on
    request (a spot interruption notice), if it did. The same arithmetic as
    :meth:`gpufleet.model.job.Job.checkpointed_progress_at`: checkpoints at whole multiples of the
    interval from the run's start. Bad figures (negative, not finite) count as no work."""
    ran = ran_s if ran_s == ran_s and ran_s > 0 else 0.0  # NaN and negatives: nothing ran
    if ran == float("inf"):
        return 0.0
    if not checkpoint_interval_s or checkpoint_interval_s <= 0:
        return ran
    saved = (ran // checkpoint_interval_s) * checkpoint_interval_s
    if checkpointed_at_s is not None and 0 < checkpointed_at_s <= ran:
        saved = max(saved, checkpointed_at_s)
    return max(0.0, ran - saved)


def waste_gpu_hours(
    gpus: float, ran_s: float, checkpoint_interval_s: float | None, checkpointed_at_s: float | None = None
) -> float:
    """GPU-hours redone because a run holding ``gpus`` GPU-equivalents was stopped (see
    :func:`redone_work_s`)."""
    if not gpus or gpus <= 0:
        return 0.0
    return gpus * redone_work_s(ran_s, checkpoint_interval_s, checkpointed_at_s) / 3600.0


@dataclass(frozen=True, slots=True)
class WastedRun:
    """One stopped run's waste: whose, why, and how many GPU-hours."""

    job_id: str
    team: str
    cause: str  # one of WASTE_CAUSES
    gpu_hours: float


@dataclass(frozen=True, slots=True)
class WasteSummary:
    """Waste over a set of runs: in total, by cause and by (team, cause), with its share of the
    GPU-hours allocated (wasted ones included: they were allocated too)."""

    gpu_hours: float
    allocated_gpu_hours: float  # the share's denominator
    by_cause: dict[str, float] = field(default_factory=dict)  # every cause of WASTE_CAUSES, 0 if none
    by_team_cause: dict[tuple[str, str], float] = field(default_factory=dict)
    max_stops_per_job: int = 0  # stopped runs (any cause) of the job stopped most often

    @property
    def share(self) -> float | None:
        """Of the GPU-hours allocated; None when nothing was."""
        return self.gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours > 0 else None

    def flat(self) -> dict[str, float | int | None]:
        """As flat summary keys (a simulation's summary, a what-if's figures): ``waste_gpu_hours``,
        ``waste_share``, ``waste_<cause>_gpu_hours`` and ``waste_<cause>_share`` for each cause,
        ``max_stops_per_job``."""
        out: dict[str, float | int | None] = {"waste_gpu_hours": self.gpu_hours, "waste_share": self.share}
        for cause in WASTE_CAUSES:
            hours = self.by_cause.get(cause, 0.0)
            out[f"waste_{cause}_gpu_hours"] = hours
            out[f"waste_{cause}_share"] = hours / self.allocated_gpu_hours if self.allocated_gpu_hours > 0 else None
        out["max_stops_per_job"] = self.max_stops_per_job
        return out


def summarize_waste(runs: Iterable[WastedRun], total_gpu_hours: float) -> WasteSummary:
    """Add up stopped runs' waste. ``total_gpu_hours``: what was allocated to jobs over the same
    span (the share's denominator). Runs with an unknown cause count under ``lost``."""
    by_cause = dict.fromkeys(WASTE_CAUSES, 0.0)
    by_team_cause: dict[tuple[str, str], float] = {}
    stops: dict[str, int] = {}
    for r in runs:
        cause = r.cause if r.cause in by_cause else LOST
        hours = max(0.0, r.gpu_hours)
        by_cause[cause] += hours
        by_team_cause[(r.team, cause)] = by_team_cause.get((r.team, cause), 0.0) + hours
        stops[r.job_id] = stops.get(r.job_id, 0) + 1
    allocated = total_gpu_hours if total_gpu_hours > 0 else 0.0
    return WasteSummary(sum(by_cause.values()), allocated, by_cause, by_team_cause, max(stops.values(), default=0))
