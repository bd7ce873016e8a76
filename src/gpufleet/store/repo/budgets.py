"""Persists budgets, their exactly-once alerts and notification outbox, and the rows evaluation reads."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.cost.anomaly import Anomaly
from gpufleet.cost.budgets.model import OWNED_SCOPE_KINDS, Budget, Scope, make_budget
from gpufleet.cost.budgets.status import (
    ANOMALY_PAYLOAD_KIND,
    ANOMALY_THRESHOLD,
    LIMIT_PERCENT,
    alert_message,
    anomaly_dedup_key,
    dedup_key,
)
from gpufleet.cost.periods import Period, iso
from gpufleet.errors import ConflictError, NotFoundError
from gpufleet.store.models import BudgetAlertRow, BudgetRow, JobRow, NotificationRow, RunRow
from gpufleet.store.repo._common import _insert

# Jobs whose cost is still to come: queued (not yet metered at all) or holding resources (metered
# so far by the ledger, the rest estimated).
UNFINISHED_STATES: Final = ("PENDING", "ADMITTED", "RUNNING", "PREEMPTED")
_ID_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz234567"
ANOMALY_KIND: Final = "anomaly"  # BudgetAlertRow.kind of an anomaly alert
ANOMALY_SEVERITY: Final = "warning"


def _new_id() -> str:
    return "b-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


# -- CRUD -----------------------------------------------------------------------------------------------


def scope_of(row: BudgetRow) -> Scope:
    """A stored budget's scope, with its owning team (see :class:`Scope`)."""
    owner = row.team if row.team and row.scope_kind in OWNED_SCOPE_KINDS else ""
    return Scope(row.scope_kind, row.scope_value or "", owner)


def budget_of(row: BudgetRow) -> Budget:
    """The pure :class:`Budget` of a stored row."""
    return make_budget(
        id=row.id,
        name=row.name,
        scope=scope_of(row),
        limit_usd=row.limit_usd,
        period=row.period,
        timezone=row.timezone,
        period_start=row.period_start,
        period_end=row.period_end,
        thresholds=row.thresholds or None,
        action=row.action,
        throttle=row.throttle or None,
        grace_s=row.grace_s,
        channels=row.channels or [],
        enabled=row.enabled,
        anomaly_alerts=row.anomaly_alerts,
        anomaly_threshold_pct=row.anomaly_threshold_pct,
        anomaly_floor_usd=row.anomaly_floor_usd,
    )


def _values(b: Budget) -> dict[str, Any]:
    return {
        "name": b.name,
        "scope_kind": b.scope.kind,
        "scope_value": b.scope.value,
        "team": b.team,
        "period": b.period,
        "period_start": b.period_start,
        "period_end": b.period_end,
        "timezone": b.timezone,
        "limit_usd": b.limit_usd,
        "thresholds": [{"percent": t.percent, "severity": t.severity} for t in b.thresholds],
        "action": b.action,
        "throttle": b.throttle.to_json(),
        "grace_s": b.grace_s,
        "channels": [dict(c) for c in b.channels],
        "enabled": b.enabled,
        "anomaly_alerts": b.anomaly_alerts,
        "anomaly_threshold_pct": b.anomaly_threshold_pct,
        "anomaly_floor_usd": b.anomaly_floor_usd,
    }


def project_owner(s: Session, project: str, *, exclude_id: str | None = None) -> BudgetRow | None:
    """The budget through which a team owns ``project`` (a ``project:<name>`` budget with a team),
    if one does. A project has at most one owning team (:func:`check_project_free`)."""
    if not project:
        return None
    q = select(BudgetRow).where(
        BudgetRow.scope_kind == "project", BudgetRow.scope_value == project, BudgetRow.team.is_not(None)
    )
    if exclude_id is not None:
        q = q.where(BudgetRow.id != exclude_id)
    return s.scalars(q.order_by(BudgetRow.created_at, BudgetRow.id)).first()


def check_project_free(s: Session, budget: Budget, *, exclude_id: str | None = None) -> None:
    """A project budget of one team while another team's budget owns the project is a ConflictError."""
    if budget.scope.kind != "project" or budget.team is None:
        return
    other = project_owner(s, budget.scope.value, exclude_id=exclude_id)
    if other is not None and other.team != budget.team:
        raise ConflictError(
            f"project '{budget.scope.value}' belongs to team '{other.team}' (budget '{other.name}'); "
            f"a budget of team '{budget.team}' cannot claim it"
        )


def create_budget(s: Session, budget: Budget, *, created_by: str | None, now: float) -> BudgetRow:
    """Store a new budget (``budget.id`` empty: one is made). A taken name is a ConflictError, as
    is a project another team's budget owns."""
    check_project_free(s, budget)
    row = BudgetRow(id=budget.id or _new_id(), created_by=created_by, created_at=now, updated_at=now, **_values(budget))
    try:
        with s.begin_nested():
            s.add(row)
            s.flush()
    except IntegrityError:
        raise ConflictError(f"a budget named '{budget.name}' already exists") from None
    return row


def get_budget(s: Session, ref: str, *, for_update: bool = False) -> BudgetRow:
    """A budget by id or by name."""
    q = select(BudgetRow).where((BudgetRow.id == ref) | (BudgetRow.name == ref))
    if for_update:
        q = q.with_for_update()
    row = s.scalars(q.execution_options(populate_existing=True)).first()
    if row is None:
        raise NotFoundError(f"budget '{ref}' not found")
    return row


def list_budgets(s: Session, *, enabled_only: bool = False) -> list[BudgetRow]:
    q = select(BudgetRow).order_by(BudgetRow.name)
    if enabled_only:
        q = q.where(BudgetRow.enabled.is_(True))
    return list(s.scalars(q))


def update_budget(s: Session, ref: str, budget: Budget, now: float) -> BudgetRow:
    """Replace a budget. A raised limit ends its over-the-limit stretch (:func:`set_over_since`
    None in every period): the action was judged against the old limit, and the next evaluation
    starts it again (with its grace) only if the spend is over the new one."""
    row = get_budget(s, ref)
    check_project_free(s, budget, exclude_id=row.id)
    raised = budget.limit_usd > row.limit_usd
    for k, v in _values(budget).items():
        setattr(row, k, v)
    row.updated_at = now
    try:
        with s.begin_nested():
            s.flush()
    except IntegrityError:
        raise ConflictError(f"a budget named '{budget.name}' already exists") from None
    if raised:
        for alert in _limit_alerts(s, row.id):
            _set_over_since(alert, None)
        s.flush()
    return row


def delete_budget(s: Session, ref: str) -> None:
    row = get_budget(s, ref)
    s.delete(row)
    s.flush()


def lock_budgets(s: Session, ids: Sequence[str]) -> None:
    """Serialize block checks per budget until this transaction ends (see the module docstring)."""
    if not ids or s.get_bind().dialect.name != "postgresql":
        return
    s.execute(select(BudgetRow.id).where(BudgetRow.id.in_(sorted(ids))).order_by(BudgetRow.id).with_for_update())


# -- alerts and the outbox ------------------------------------------------------------------------------


def alert_payload(
    budget: Budget, period: Period, threshold: float, severity: str, spend: float, now: float
) -> dict[str, Any]:
    """The alert every channel formats from (and what a generic webhook receives as is)."""
    return {
        "kind": "budget_threshold",
        "budget_id": budget.id,
        "budget": budget.name,
        "scope": str(budget.scope),
        "period": budget.period,
        "period_start": iso(period.start),
        "period_end": iso(period.end),
        "threshold": threshold,
        "severity": severity,
        "spend_usd": round(spend, 2),
        "limit_usd": round(budget.limit_usd, 2),
        "percent": round(spend / budget.limit_usd * 100.0, 2),
        "fired_at": iso(now),
        "dedup_key": dedup_key(budget.id, period.start, threshold),
        "message": alert_message(budget, threshold, spend, period),
    }


def insert_alert(
    s: Session,
    budget: Budget,
    period: Period,
    *,
    threshold: float,
    severity: str,
    spend_usd: float,
    now: float,
    kind: str = "threshold",
    notify: bool = True,
) -> BudgetAlertRow | None:
    """Record that ``budget`` crossed ``threshold`` % in ``period``; None if it already had. Queues
    one notification per channel when the alert is new and ``notify``."""
    payload = alert_payload(budget, period, threshold, severity, spend_usd, now)
    values = {
        "budget_id": budget.id,
        "period_start": period.start,
        "threshold": threshold,
        "severity": severity,
        "kind": kind,
        "fired_at": now,
        "spend_usd": spend_usd,
        "limit_usd": budget.limit_usd,
        "details": {"dedup_key": payload["dedup_key"], "message": payload["message"]},
    }
    return _insert_once(s, budget, values, payload if notify else None, now)


def _insert_once(
    s: Session, budget: Budget, values: Mapping[str, Any], payload: Mapping[str, Any] | None, now: float
) -> BudgetAlertRow | None:
    """Insert an alert row unless its (budget, period start, threshold) is taken (None then); the
    winner queues ``payload`` to each of the budget's channels in the same transaction."""
    stmt = _insert(s)(BudgetAlertRow).on_conflict_do_nothing(  # type: ignore[attr-defined]
        index_elements=["budget_id", "period_start", "threshold"]
    )
    alert_id = s.execute(stmt.returning(BudgetAlertRow.id), dict(values)).scalar_one_or_none()
    if alert_id is None:
        return None
    if payload is not None and budget.channels:
        s.execute(
            _insert(s)(NotificationRow),
            [
                {
                    "alert_id": alert_id,
                    "channel_index": i,
                    "channel": dict(ch),
                    "payload": dict(payload),
                    "status": "pending",
                    "attempts": 0,
                    "next_attempt_at": now,
                    "last_error": "",
                }
                for i, ch in enumerate(budget.channels)
            ],
        )
    return s.get(BudgetAlertRow, alert_id)


def anomaly_payload(budget: Budget, day: Period, anomaly: Anomaly, now: float) -> dict[str, Any]:
    """An anomaly alert as every channel formats it: ``message`` (the finding's own sentence: the
    day's spend against its baseline, the jobs and teams whose spend rose most, and the change that
    brings it back) is the Slack text, the email subject and body, and the PagerDuty summary."""
    return {
        "kind": ANOMALY_PAYLOAD_KIND,
        "budget_id": budget.id,
        "budget": budget.name,
        "scope": str(budget.scope),
        "period": "daily",
        "day": anomaly.day.isoformat(),
        "period_start": iso(day.start),
        "period_end": iso(day.end),
        "threshold": budget.anomaly_threshold_pct,
        "floor_usd": budget.anomaly_floor_usd,
        "severity": ANOMALY_SEVERITY,
        "spend_usd": round(anomaly.spend_usd, 2),
        "baseline_usd": round(anomaly.baseline_usd, 2),
        "limit_usd": round(anomaly.baseline_usd, 2),  # what the day is compared with
        "increase_usd": round(anomaly.increase_usd, 2),
        "percent": round(anomaly.spend_usd / anomaly.baseline_usd * 100.0, 2) if anomaly.baseline_usd > 0 else None,
        "causes": [
            {
                "dimension": c.dimension,
                "key": c.key,
                "spend_usd": round(c.spend_usd, 2),
                "baseline_usd": round(c.baseline_usd, 2),
                "increase_usd": round(c.increase_usd, 2),
                "share_of_increase": round(c.share_of_increase, 4),
            }
            for c in anomaly.causes
        ],
        "action": anomaly.action,
        "savings_usd_per_day": round(anomaly.savings_usd_per_day, 2),
        "fired_at": iso(now),
        "dedup_key": anomaly_dedup_key(budget.id, day.start),
        "message": f"budget '{budget.name}' ({budget.scope}) cost anomaly: {anomaly.message}",
    }


def insert_anomaly_alert(
    s: Session, budget: Budget, day: Period, anomaly: Anomaly, *, now: float
) -> BudgetAlertRow | None:
    """Record an anomaly of ``budget``'s scope on ``day`` (None if that day already has one) and
    queue it to the budget's channels. Stored with ``threshold`` = :data:`ANOMALY_THRESHOLD` and
    ``period_start`` = the day's start, so the unique constraint fires it once per budget per day
    whoever evaluates; ``limit_usd`` holds the baseline the day was judged against."""
    payload = anomaly_payload(budget, day, anomaly, now)
    values = {
        "budget_id": budget.id,
        "period_start": day.start,
        "threshold": ANOMALY_THRESHOLD,
        "severity": ANOMALY_SEVERITY,
        "kind": ANOMALY_KIND,
        "fired_at": now,
        "spend_usd": anomaly.spend_usd,
        "limit_usd": anomaly.baseline_usd,
        "details": {
            "dedup_key": payload["dedup_key"],
            "message": payload["message"],
            "causes": payload["causes"],
            "action": anomaly.action,
            "savings_usd_per_day": payload["savings_usd_per_day"],
        },
    }
    return _insert_once(s, budget, values, payload, now)


def alerts_of(
    s: Session, budget_id: str, period_start: float | None = None, period_end: float | None = None
) -> list[BudgetAlertRow]:
    """A budget's alerts; with ``period_start`` only that period's: its threshold alerts (keyed by
    the period's start) and, with ``period_end``, the anomaly alerts of the days inside it."""
    q = select(BudgetAlertRow).where(BudgetAlertRow.budget_id == budget_id)
    if period_start is not None and period_end is not None:
        q = q.where(BudgetAlertRow.period_start >= period_start, BudgetAlertRow.period_start < period_end)
    elif period_start is not None:
        q = q.where(BudgetAlertRow.period_start == period_start)
    return list(s.scalars(q.order_by(BudgetAlertRow.period_start, BudgetAlertRow.threshold)))


# The limit crossing of a period (its 100 % alert row) fires once; when the budget has been over its
# limit since — which starts and stops — is kept in that row's details under this key (absent: since
# the alert fired; None: not over now), so no migration and no second row is needed.
OVER_SINCE_KEY: Final = "over_since"


def _limit_alerts(s: Session, budget_id: str, period_start: float | None = None) -> list[BudgetAlertRow]:
    q = select(BudgetAlertRow).where(BudgetAlertRow.budget_id == budget_id, BudgetAlertRow.threshold == LIMIT_PERCENT)
    if period_start is not None:
        q = q.where(BudgetAlertRow.period_start == period_start)
    return list(s.scalars(q))


def _set_over_since(alert: BudgetAlertRow, since: float | None) -> None:
    alert.details = {**(alert.details or {}), OVER_SINCE_KEY: since}  # a new dict: JSON columns track assignment


def over_since(s: Session, budget_id: str, period_start: float) -> float | None:
    """Since when the budget has been over its limit in the period, without coming back under it
    (grace counts from it); None when it is not over (or was never found over)."""
    rows = _limit_alerts(s, budget_id, period_start)
    if not rows:
        return None
    details = rows[0].details or {}
    since = details[OVER_SINCE_KEY] if OVER_SINCE_KEY in details else rows[0].fired_at
    return None if since is None else float(since)


def set_over_since(s: Session, budget_id: str, period_start: float, since: float | None) -> None:
    """Start (``since``) or end (None) the budget's over-the-limit stretch in the period, on its limit
    crossing row (nothing when the limit was never crossed in the period: its first crossing is
    the row's insert, :func:`insert_alert`)."""
    for alert in _limit_alerts(s, budget_id, period_start):
        _set_over_since(alert, since)
    s.flush()


def due_notifications(s: Session, now: float, limit: int = 50) -> list[NotificationRow]:
    q = (
        select(NotificationRow)
        .where(NotificationRow.status == "pending", NotificationRow.next_attempt_at <= now)
        .order_by(NotificationRow.next_attempt_at, NotificationRow.id)
        .limit(limit)
    )
    return list(s.scalars(q))


def claim_notification(s: Session, row_id: int, attempts: int, now: float, lease_s: float) -> bool:
    """Take the delivery of ``row_id`` for one attempt (True) unless another dispatcher did: the
    row must still be pending at ``attempts``; its next attempt moves ``lease_s`` ahead so a
    dispatcher that dies mid-delivery is retried later, not at once."""
    result = s.execute(
        update(NotificationRow)
        .where(
            NotificationRow.id == row_id,
            NotificationRow.status == "pending",
            NotificationRow.attempts == attempts,
            NotificationRow.next_attempt_at <= now,
        )
        .values(attempts=attempts + 1, next_attempt_at=now + lease_s)
        .execution_options(synchronize_session=False)
    )
    return int(cast(CursorResult[Any], result).rowcount) == 1


def finish_notification(
    s: Session, row_id: int, *, ok: bool, now: float, error: str = "", retry_at: float | None = None
) -> None:
    """Record an attempt's outcome: sent; or failed and retried at ``retry_at`` (None: given up)."""
    values: dict[str, Any]
    if ok:
        values = {"status": "sent", "sent_at": now, "last_error": ""}
    elif retry_at is None:
        values = {"status": "failed", "last_error": error[:2000]}
    else:
        values = {"status": "pending", "next_attempt_at": retry_at, "last_error": error[:2000]}
    s.execute(
        update(NotificationRow)
        .where(NotificationRow.id == row_id, NotificationRow.status == "pending")
        .values(**values)
        .execution_options(synchronize_session=False)
    )


def notifications_of(s: Session, alert_ids: Iterable[int]) -> list[NotificationRow]:
    ids = list(alert_ids)
    if not ids:
        return []
    q = select(NotificationRow).where(NotificationRow.alert_id.in_(ids)).order_by(NotificationRow.id)
    return list(s.scalars(q))


# -- what budgets read ------------------------------------------------------------------------------------


def unfinished_jobs(s: Session, scope: Scope) -> list[JobRow]:
    """Jobs whose cost is still to come (:data:`UNFINISHED_STATES`), narrowed by SQL to what could be
    in ``scope`` (the caller decides coverage with :meth:`Scope.covers`)."""
    col = {"team": JobRow.team, "project": JobRow.project, "namespace": JobRow.namespace}.get(scope.kind)
    if scope.kind == "experiment":
        col = JobRow.experiment
    where = [] if col is None else [col == scope.value]
    if scope.owner:
        where.append(JobRow.team == scope.owner)
    return list(s.scalars(select(JobRow).where(JobRow.state.in_(UNFINISHED_STATES), *where)))


def current_run_starts(s: Session, job_ids: Sequence[str]) -> dict[str, float]:
    """When the current (open) run of each of ``job_ids`` started, for those that have one."""
    if not job_ids:
        return {}
    q = select(RunRow.job_id, RunRow.started_at).where(RunRow.job_id.in_(list(job_ids)), RunRow.ended_at.is_(None))
    return {job_id: t for job_id, t in s.execute(q) if t is not None}


def running_jobs_with_budget(s: Session) -> list[JobRow]:
    """Running jobs that have their own ``budget_usd``."""
    return list(s.scalars(select(JobRow).where(JobRow.state == "RUNNING", JobRow.budget_usd.is_not(None))))


def key_used(s: Session, submitted_by: str | None, key: str | None) -> bool:
    """Has this submitter used this idempotency key? (A replay is answered, never re-checked.)"""
    if key is None:
        return False
    who = JobRow.submitted_by.is_(None) if submitted_by is None else JobRow.submitted_by == submitted_by
    return s.scalar(select(JobRow.id).where(who, JobRow.idempotency_key == key)) is not None
