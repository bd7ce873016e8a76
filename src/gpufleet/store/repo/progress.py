"""Persists the progress reports the controller reads from running jobs' progress files."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.cost.forecast import ProgressReport
from gpufleet.store.models import JobProgressRow


def latest_progress_time(s: Session, job_id: str) -> float | None:
    """The time of ``job_id``'s newest stored progress report (None: it has none)."""
    return s.scalar(select(func.max(JobProgressRow.time)).where(JobProgressRow.job_id == job_id))


def add_progress_reports(s: Session, reports: Iterable[tuple[str, ProgressReport]]) -> None:
    """Record ``(job id, report)`` pairs, in order (the API's single report: ``usage_repo.add_progress``)."""
    s.add_all(
        JobProgressRow(job_id=job_id, time=r.time, step=r.step, total_steps=r.total_steps, metrics=dict(r.metrics))
        for job_id, r in reports
    )
