"""Usage in the store, read for the cost engines: the recommender's inputs (ledger, GPU telemetry,
job facts and progress reports of a window), jobs' progress reports, and the nodes' prices that
job estimates use.

Like :mod:`gpufleet.store.repo`, every function takes the session and never commits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.cost.forecast import ProgressReport
from gpufleet.cost.recommend import JobFacts, RecommendInputs, UtilSample
from gpufleet.cost.rules import PricingRules
from gpufleet.store import repo
from gpufleet.store.models import GpuSampleRow, JobProgressRow, JobRow, NodeRow


def recommend_inputs(
    session: Session, start: float, now: float, *, rules: PricingRules | None = None
) -> RecommendInputs:
    """Read the ledger, telemetry, progress and job facts of ``[start, now]`` from the store;
    ``rules``: the server's pricing rules, so jobs' costs are what ``/v1/usage`` charges."""
    ledger = repo.load_ledger(session, start, now, now)
    samples = [
        UtilSample(r.time, r.node, r.gpu_index, r.job_id, r.utilization_pct, r.memory_used_mib, r.memory_total_mib)
        for r in session.scalars(
            select(GpuSampleRow).where(
                GpuSampleRow.time >= start, GpuSampleRow.time <= now, GpuSampleRow.job_id.is_not(None)
            )
        )
    ]
    job_ids = {s.job_id for s in ledger.segments(as_of=now)}
    jobs: dict[str, JobFacts] = {}
    progress: dict[str, list[ProgressReport]] = defaultdict(list)
    if job_ids:
        for j in session.scalars(select(JobRow).where(JobRow.id.in_(sorted(job_ids)))):
            jobs[j.id] = JobFacts(
                j.id,
                j.team,
                j.state,
                j.priority_class,
                j.preemptible,
                j.checkpoint_dir is not None,
                j.gpus,
                j.gpu_milli,
                j.mig_profile,
                j.started_at,
                j.estimated_runtime_s,
            )
        for p in session.scalars(
            select(JobProgressRow).where(JobProgressRow.job_id.in_(sorted(job_ids))).order_by(JobProgressRow.time)
        ):
            progress[p.job_id].append(
                ProgressReport(p.time, p.step, p.total_steps, {k: float(v) for k, v in (p.metrics or {}).items()})
            )
    return RecommendInputs(ledger, start, now, samples, progress, jobs, rules)


def job_progress(session: Session, job_id: str) -> list[ProgressReport]:
    """A job's progress reports, oldest first."""
    q = select(JobProgressRow).where(JobProgressRow.job_id == job_id).order_by(JobProgressRow.time)
    return [
        ProgressReport(p.time, p.step, p.total_steps, {k: float(v) for k, v in (p.metrics or {}).items()})
        for p in session.scalars(q)
    ]


def add_progress(
    session: Session,
    job_id: str,
    time: float,
    *,
    step: float | None,
    total_steps: float | None,
    metrics: Mapping[str, Any],
) -> None:
    """Record one progress report of a job."""
    session.add(JobProgressRow(job_id=job_id, time=time, step=step, total_steps=total_steps, metrics=dict(metrics)))


def gpu_node_prices(session: Session) -> list[tuple[str, int, float]]:
    """``(gpu_model, gpu_count, hourly_usd)`` of every node not removed (the input of
    :func:`gpufleet.cost.job_estimate.usd_per_gpu_hour`)."""
    return [
        (n.gpu_model, n.gpu_count, n.hourly_price_usd)
        for n in session.scalars(select(NodeRow).where(NodeRow.state != "removed"))
    ]
