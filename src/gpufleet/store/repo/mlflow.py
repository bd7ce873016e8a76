"""Reads of the MLflow sync: ended jobs by event id, the fields that name a run, ledger spans, events recorded."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gpufleet.store.models import JobEventRow, JobRow, UsageSegmentRow


def job_segment_spans(s: Session, job_id: str) -> list[tuple[float, float]]:
    """``(start, end)`` of every usage segment of ``job_id``, in no particular order."""
    q = select(UsageSegmentRow.start, UsageSegmentRow.end).where(UsageSegmentRow.job_id == job_id)
    return [(float(a), float(b)) for a, b in s.execute(q).all()]


def final_state_events(
    s: Session, states: Collection[str], *, since: float, after_id: int | None
) -> list[tuple[int, str]]:
    """``(event id, job id)`` of the events that moved a job into one of ``states`` (an event that
    keeps the job's state, ``old`` = ``new``, is not one): with an id above ``after_id``, or, when
    it is None, recorded at ``since`` or later."""
    q = select(JobEventRow.id, JobEventRow.job_id).where(
        JobEventRow.new.in_(sorted(states)), JobEventRow.old != JobEventRow.new
    )
    q = q.where(JobEventRow.time >= since) if after_id is None else q.where(JobEventRow.id > after_id)
    return [(int(eid), job_id) for eid, job_id in s.execute(q).all()]


def newest_job_event_id(s: Session) -> int:
    """The highest job event id (0: no events)."""
    return int(s.scalar(select(func.max(JobEventRow.id))) or 0)


def run_fields(s: Session, job_ids: Sequence[str]) -> list[tuple[str, Any, Any]]:
    """``(id, labels, env)`` of the jobs among ``job_ids`` (one IN list: the caller bounds its length)."""
    q = select(JobRow.id, JobRow.labels, JobRow.env).where(JobRow.id.in_(job_ids))
    return [(r.id, r.labels, r.env) for r in s.execute(q)]


def jobs_with_event_reason(s: Session, job_ids: Sequence[str], prefixes: Sequence[str]) -> set[str]:
    """Those of ``job_ids`` (one IN list) with an event whose reason starts with one of
    ``prefixes`` (taken literally: ``%`` and ``_`` are escaped)."""
    q = select(JobEventRow.job_id).where(
        JobEventRow.job_id.in_(job_ids),
        or_(*(JobEventRow.reason.startswith(p, autoescape=True) for p in prefixes)),
    )
    return set(s.scalars(q))
