"""Persists runs: each attempt of a job on its node(s), from admission to its end."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.errors import NotFoundError
from gpufleet.store.models import JobRow, RunRow


def open_run(
    s: Session,
    *,
    job_id: str,
    run: int,
    node: str,
    placement: list[dict[str, Any]],
    capacity_type: str,
    node_hourly_usd: float,
    now: float,
) -> RunRow:
    """Record attempt ``run`` of a job as admitted to ``node`` (idempotent: an existing run is
    returned unchanged, so a controller replaying its last binding after a crash is harmless)."""
    existing = s.get(RunRow, (job_id, run))
    if existing is not None:
        return existing
    row = RunRow(
        job_id=job_id,
        run=run,
        node=node,
        placement=list(placement),
        capacity_type=str(capacity_type),
        node_hourly_usd=node_hourly_usd,
        admitted_at=now,
        reason="",
    )
    s.add(row)
    s.flush()
    return row


def get_run(s: Session, job_id: str, run: int) -> RunRow | None:
    return s.get(RunRow, (job_id, run), populate_existing=True)


def _run_or_404(s: Session, job_id: str, run: int) -> RunRow:
    row = get_run(s, job_id, run)
    if row is None:
        raise NotFoundError(f"run {run} of job '{job_id}' not found")
    return row


def mark_run_started(s: Session, job_id: str, run: int, *, pid: int, started_at: float) -> RunRow:
    """The backend started the run's process (``started_at`` as the backend measured it)."""
    row = _run_or_404(s, job_id, run)
    if row.ended_at is None:
        row.pid, row.started_at = pid, started_at
        s.flush()
    return row


def end_run(
    s: Session,
    job_id: str,
    run: int,
    *,
    outcome: str,
    exit_code: int | None,
    reason: str,
    started_at: float | None,
    ended_at: float,
) -> RunRow:
    """The run ended. Idempotent: ending an ended run returns it unchanged. ``started_at`` fills
    in a start the store never saw (the process started while the controller was down)."""
    row = _run_or_404(s, job_id, run)
    if row.ended_at is not None:
        return row
    if row.started_at is None and started_at is not None:
        row.started_at = started_at
    row.outcome, row.exit_code, row.reason, row.ended_at = str(outcome), exit_code, reason, ended_at
    s.flush()
    return row


def request_stop(s: Session, job_id: str, run: int, reason: str) -> RunRow:
    """Ask for a run to be stopped (the first reason given is kept)."""
    row = _run_or_404(s, job_id, run)
    if row.stop_requested is None and row.ended_at is None:
        row.stop_requested = reason
        s.flush()
    return row


def open_runs(s: Session) -> list[RunRow]:
    return list(s.scalars(select(RunRow).where(RunRow.ended_at.is_(None)).order_by(RunRow.job_id, RunRow.run)))


def run_history(s: Session, start: float, end: float) -> list[tuple[JobRow, float, int]]:
    """Jobs submitted in ``[start, end)`` that ran, as ``(job, run time, pods)``: the seconds its
    ended runs lasted in all, and the most pods one of them held (the workload a what-if replays)."""
    rows = list(s.scalars(select(JobRow).where(JobRow.submitted_at >= start, JobRow.submitted_at < end)))
    if not rows:
        return []
    run_time: dict[str, float] = {}
    pods: dict[str, int] = {}
    for r in s.scalars(select(RunRow).where(RunRow.job_id.in_([j.id for j in rows]))):
        if r.started_at is not None and r.ended_at is not None:
            run_time[r.job_id] = run_time.get(r.job_id, 0.0) + max(0.0, r.ended_at - r.started_at)
            pods[r.job_id] = max(pods.get(r.job_id, 1), len(r.placement or []) or 1)
    return [(j, run_time[j.id], pods.get(j.id, 1)) for j in rows if j.id in run_time]


def last_run_end(s: Session, job_ids: Collection[str]) -> float | None:
    """When the last ended run of ``job_ids`` ended (None: none ended): where the span a what-if
    replays of these jobs ends, to price what the ledger billed over it."""
    if not job_ids:
        return None
    q = select(func.max(RunRow.ended_at)).where(RunRow.job_id.in_(list(job_ids)), RunRow.started_at.is_not(None))
    end = s.scalar(q)
    return None if end is None else float(end)


def run_seconds(s: Session, job_ids: Collection[str], now: float) -> dict[str, float]:
    """Seconds each of ``job_ids`` has spent running, over all its runs (one query): a run counts
    from its start to its end — one still going up to ``now``, or to its job's end if the job ended
    while the run was never closed — and a run that never started counts nothing. Time spent
    admitted or waiting (before a run, or between a preemption and the next run) is not running
    time. Jobs that never ran are absent (0)."""
    out: dict[str, float] = {}
    if not job_ids:
        return out
    q = (
        select(RunRow.job_id, RunRow.started_at, RunRow.ended_at, JobRow.ended_at)
        .join(JobRow, JobRow.id == RunRow.job_id)
        .where(RunRow.job_id.in_(list(job_ids)), RunRow.started_at.is_not(None))
    )
    for job_id, started, ended, job_ended in s.execute(q):
        if started is None:  # filtered out above; for the type checker
            continue
        end = ended if ended is not None else job_ended if job_ended is not None else now
        out[job_id] = out.get(job_id, 0.0) + max(0.0, end - started)
    return out


def run_spans(s: Session, job_id: str) -> list[tuple[float, float | None]]:
    """The started runs of a job in order, as ``(started, ended or None while open)``: the time it
    actually ran (a forecast measures a job's rate and its estimate's run-down over these, not over
    its waits between a preemption and the next run)."""
    q = (
        select(RunRow.started_at, RunRow.ended_at)
        .where(RunRow.job_id == job_id, RunRow.started_at.is_not(None))
        .order_by(RunRow.run)
    )
    return [(float(a), None if b is None else float(b)) for a, b in s.execute(q) if a is not None]


def open_run_placements(s: Session) -> list[list[dict[str, Any]]]:
    """The placement JSON of every run that has not ended (``[{node, gpus, milli, mig_mask}]``)."""
    return [list(p or []) for p in s.scalars(select(RunRow.placement).where(RunRow.ended_at.is_(None)))]


def open_runs_by_team(s: Session, teams: Sequence[str] | None = None) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """``(team, node, placement)`` of every run that has not ended, of ``teams`` (None: all)."""
    q = select(JobRow.team, RunRow.node, RunRow.placement).join(JobRow, JobRow.id == RunRow.job_id)
    q = q.where(RunRow.ended_at.is_(None))
    if teams is not None:
        q = q.where(JobRow.team.in_(list(teams)))
    return [(str(team), str(node), list(placement or [])) for team, node, placement in s.execute(q)]
