"""Store rows → wire models (UNIX seconds become RFC 3339 times in UTC)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpufleet.model.gpu import MILLI
from gpufleet.store.models import JobEventRow, JobRow, Token
from gpufleet.wire import JobEventOut, JobOut, Placement, Role, TokenOut


def ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def ts_or_none(t: float | None) -> datetime | None:
    return None if t is None else ts(t)


def placement(items: list[Any] | None) -> list[Placement]:
    return [
        Placement(
            node=str(p.get("node", "")),
            gpus=[int(g) for g in p.get("gpus") or ()],
            milli=int(p.get("milli", MILLI)),
            mig_mask=int(p.get("mig_mask", 0)),
        )
        for p in items or ()
    ]


def job_out(row: JobRow) -> JobOut:
    fractional = row.mig_profile is None and row.gpu_milli < MILLI
    return JobOut(
        id=row.id,
        name=row.name,
        team=row.team,
        project=row.project,
        namespace=row.namespace,
        experiment=row.experiment,
        labels={str(k): str(v) for k, v in (row.labels or {}).items()},
        priority=row.priority_class,
        command=[str(c) for c in row.command or ()],
        gpus=row.gpus,
        gpu_milli=row.gpu_milli if fractional else None,
        mig=row.mig_profile,
        gpu_types=[str(t) for t in row.gpu_types or ()],
        preemptible=row.preemptible,
        checkpoint_dir=row.checkpoint_dir,
        max_runtime_s=row.max_runtime_s,
        state=row.state,
        reason=row.reason,
        submitted_at=ts(row.submitted_at),
        started_at=ts_or_none(row.started_at),
        ended_at=ts_or_none(row.ended_at),
        run=row.run,
        restarts=row.restarts,
        preemptions=row.preemptions,
        exit_code=row.exit_code,
        placement=placement(row.placement),
        cancel_requested=bool(row.cancel_requested),
        run_as=row.run_as,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        min_gpu_memory_gib=row.min_gpu_memory_gib,
        estimated_runtime_s=row.estimated_runtime_s,
        checkpoint_interval_s=row.checkpoint_interval_s,
        image=row.image,
        pods=row.pods,
        budget_usd=row.budget_usd,
    )


def event_out(row: JobEventRow) -> JobEventOut:
    return JobEventOut(time=ts(row.time), old=row.old, new=row.new, reason=row.reason)


def token_out(row: Token) -> TokenOut:
    return TokenOut(
        id=row.id,
        name=row.name,
        team=row.team,
        role=Role(row.role),
        created_at=ts(row.created_at),
        expires_at=ts_or_none(row.expires_at),
        revoked=row.revoked_at is not None,
        run_as=row.run_as,
        owner=row.owner,
    )
