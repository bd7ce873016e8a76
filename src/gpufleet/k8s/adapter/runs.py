"""A run on the cluster as the Kubernetes backend tracks it, and how its end is read from its pods.

:func:`run_end` is the rule table: a stop that finished (the pods gone or ended: STOPPED, or
SUCCEEDED when every pod exited 0 before the stop reached it, FAILED when one failed by itself),
pods deleted by someone else (LOST), a kubelet's rejection (LOST, with its reason), a failed pod
(FAILED, or STOPPED when a disruption ended it: ``DisruptionTarget``), every pod Succeeded
(SUCCEEDED). Spans are the containers' own start and end as the kubelet recorded them.

Pure: no I/O (:mod:`gpufleet.k8s.adapter.backend` reads the pods and acts on the answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.backends.base import BackendEvent, EventKind
from gpufleet.k8s.adapter.pods import PodFacts


@dataclass(slots=True)
class Run:
    """One run gpufleet launched on the cluster, as the backend tracks it between polls."""

    job_id: str
    run: int
    namespace: str
    job: str  # the batch/v1 Job's name
    nodes: tuple[str, ...]  # placement[i].node for pod i
    started_at: float
    stopping: str | None = None  # why a stop was asked
    bound: bool = False
    ran_from: float | None = None  # the earliest container start seen (pods can vanish as they end)
    # a stop is driven until the pods are gone (each poll, after a failed attempt's back-off)
    grace_s: float = 30.0
    job_deleted: bool = False
    retry_at: float = 0.0  # monotonic: no stop attempt before
    backoff_s: float = 0.0
    blocked: str | None = None  # why the last stop attempt did not get through (a PodDisruptionBudget's 429)
    # pods bound by us whose binding the pod cache has not shown yet: name -> node (the assume cache)
    assumed: dict[str, str] = field(default_factory=dict)
    # an adopted run launched before its owner's replacement pods exist: monotonic time it gives up
    pods_due: float | None = None
    create_body: dict[str, Any] | None = None  # the Job, until the API server has taken it
    no_pods_since: float | None = None  # monotonic: since when its Job has had no pod at all (unbound)
    create_failed: str | None = None  # why the API server refused the Job for good (a retry's answer)
    # a node of it is gone (the node's name): it is stopped, its pods on the other nodes holding their
    # GPUs until they end; then reported LOST
    lost_node: str | None = None
    max_runtime_s: float | None = None  # its Job's activeDeadlineSeconds (None: no deadline)
    deadline_from: float | None = None  # when that deadline started running (the Job's start; else started_at)


def disrupted(pod: PodFacts) -> bool:
    """The pod was ended by a disruption (an eviction, a preemption, a node going away)."""
    c = pod.condition("DisruptionTarget")
    return c is not None and c.status == "True"


def run_end(r: Run, pods: list[PodFacts], now: float) -> BackendEvent | None:
    """How run ``r`` ended, judged from its pods as cached (None: it has not). Records on ``r``
    the earliest container start seen (pods can vanish as they end). Pure: no I/O.

    A run that did not succeed and was not being stopped, ending once its max runtime has passed,
    was ended by its Job's ``activeDeadlineSeconds`` (the Job controller deletes its pods: SIGTERM,
    exit 143, or gone before their end was seen): TIMED_OUT, as the other worlds say. The deadline
    runs from the Job's ``startTime`` (its first sync, whole seconds: up to a second before the
    launch was recorded here)."""
    ev = _pods_end(r, pods, now)
    if (
        ev is not None
        and r.max_runtime_s is not None
        and r.stopping is None
        and ev.kind in (EventKind.FAILED, EventKind.STOPPED, EventKind.LOST)
        and (ev.ended_at or now) >= (r.deadline_from or r.started_at) + r.max_runtime_s - 1.0
    ):
        reason = f"ran past its max runtime of {r.max_runtime_s:g} s (its Job's activeDeadlineSeconds)"
        return replace(ev, kind=EventKind.TIMED_OUT, reason=reason)
    return ev


def _pods_end(r: Run, pods: list[PodFacts], now: float) -> BackendEvent | None:
    starts = [p.started_at for p in pods if p.started_at is not None]
    if starts:
        r.ran_from = min(starts) if r.ran_from is None else min(r.ran_from, *starts)
    started = r.ran_from
    if r.stopping is not None:
        if any(not p.terminal for p in pods):
            return None
        ends = [p.finished_at for p in pods if p.finished_at is not None]
        # a pod failed by itself before the stop reached it (no DisruptionTarget: not evicted): the run failed
        own = [p for p in pods if p.phase == "Failed" and not disrupted(p) and not p.rejected]
        if own:
            p = own[0]
            return BackendEvent(
                EventKind.FAILED,
                now,
                r.job_id,
                r.run,
                exit_code=p.exit_code,
                reason=f"pod {p.key} failed" + (f" (exit {p.exit_code})" if p.exit_code else ""),
                started_at=started,
                ended_at=p.finished_at or now,
            )
        # every pod exited 0 before the stop reached it: the run succeeded (its work is done)
        done = pods and len(pods) >= len(r.nodes) and all(p.phase == "Succeeded" for p in pods)
        return BackendEvent(
            EventKind.SUCCEEDED if done else EventKind.STOPPED,
            now,
            r.job_id,
            r.run,
            exit_code=0 if done else None,
            reason="" if done else r.stopping,
            started_at=started,
            ended_at=max(ends) if ends else now,
        )
    gone = len(r.nodes) - sum(1 for p in pods if p.node is not None)
    if r.bound and gone > 0 and not any(p.phase == "Failed" for p in pods):
        # deleted by someone else (a drain, the pod garbage collector) before their end was seen
        return BackendEvent(
            EventKind.LOST,
            now,
            r.job_id,
            r.run,
            reason=f"{gone} of its pods were deleted",
            started_at=started,
            ended_at=now,
        )
    if not pods:
        return None
    rejected = [p for p in pods if p.rejected]
    if rejected:
        # the kubelet refused the pod (its node's affinity, taints or devices): nothing of the
        # job ran; the run is lost and the job goes back to the queue, with the kubelet's reason
        p = rejected[0]
        return BackendEvent(
            EventKind.LOST,
            now,
            r.job_id,
            r.run,
            reason=f"pod {p.key} was rejected by the kubelet on {p.node}: {p.status_reason}: {p.status_message}".rstrip(
                ": "
            ),
            started_at=started,
            ended_at=p.finished_at or now,
        )
    failed = [p for p in pods if p.phase == "Failed"]
    if failed:
        p = failed[0]
        condition = p.condition("DisruptionTarget")
        kind = EventKind.STOPPED if disrupted(p) else EventKind.FAILED
        reason = f"pod {p.key} failed" + (f" (exit {p.exit_code})" if p.exit_code else "")
        if kind is EventKind.STOPPED:
            reason = f"pod {p.key} disrupted: {condition.reason if condition else ''}".rstrip(": ")
        return BackendEvent(
            kind,
            now,
            r.job_id,
            r.run,
            exit_code=p.exit_code,
            reason=reason,
            started_at=started,
            ended_at=p.finished_at or now,
        )
    if len(pods) >= len(r.nodes) and all(p.phase == "Succeeded" for p in pods):
        ends = [p.finished_at for p in pods if p.finished_at is not None]
        return BackendEvent(
            EventKind.SUCCEEDED,
            now,
            r.job_id,
            r.run,
            exit_code=0,
            started_at=started,
            ended_at=max(ends) if ends else now,
        )
    return None


__all__ = ["Run", "disrupted", "run_end"]
