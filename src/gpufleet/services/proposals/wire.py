"""A proposal on the wire (:class:`~gpufleet.wire.ProposalOut`): its estimate and its measured
effect side by side."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.store.models import ProposalRow
from gpufleet.wire import ProposalEffectOut, ProposalEstimate, ProposalOut

# -- on the wire ----------------------------------------------------------------------------------


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def proposal_out(row: ProposalRow, now: float | None = None) -> ProposalOut:
    """A proposal on the wire: estimate and measured effect side by side. A pending proposal past
    its expiry reads ``expired`` even before :func:`~gpufleet.services.proposals.effect.upkeep` has
    stored it so."""
    estimate = None
    if row.est_monthly_savings_usd is not None:
        estimate = ProposalEstimate(
            monthly_savings_usd=row.est_monthly_savings_usd,
            confidence=row.est_confidence if row.est_confidence is not None else 0.5,
            basis=row.est_basis,
        )
    measured = None
    w = row.effect_window_s
    if row.measured_at is not None and row.executed_at is not None and row.measured_before_usd is not None:
        after = row.measured_after_usd or 0.0
        measured = ProposalEffectOut(
            window_s=w,
            before_start=_at(row.executed_at - w),
            executed_at=_at(row.executed_at),
            after_end=_at(row.executed_at + w),
            before_usd=row.measured_before_usd,
            after_usd=after,
            before_usd_per_hour=round(row.measured_before_usd * 3600.0 / w, 6),
            after_usd_per_hour=round(after * 3600.0 / w, 6),
            monthly_savings_usd=row.measured_monthly_savings_usd or 0.0,
            measured_at=_at(row.measured_at),
            note=row.measure_note,
        )
    error = None
    if measured is not None and estimate is not None:
        error = round(measured.monthly_savings_usd - estimate.monthly_savings_usd, 2)
    state = row.state
    if state == "pending" and now is not None and row.expires_at <= now:
        state = "expired"
    return ProposalOut(
        id=row.id,
        action=row.action,
        target=row.target,
        team=row.team,
        params=dict(row.params or {}),
        rationale=row.rationale,
        estimate=estimate,
        state=state,
        proposed_by=row.proposed_by,
        created_at=_at(row.created_at),
        expires_at=_at(row.expires_at),
        decided_by=row.decided_by,
        proposed_by_owner=row.proposed_by_owner,
        decided_by_owner=row.decided_by_owner,
        decided_at=_dt(row.decided_at),
        reason=row.reason,
        executed_at=_dt(row.executed_at),
        result=row.result,
        result_job_id=row.result_job_id,
        change=dict(row.change or {}),
        planned_on=dict(row.planned_on or {}),
        effect_window_s=w,
        effect_due_at=None if row.executed_at is None else _at(row.executed_at + w),
        measured=measured,
        estimate_error_usd=error,
    )
