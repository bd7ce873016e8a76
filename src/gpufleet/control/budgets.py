"""The budget service: evaluates budgets on the controller's timer and enforces them.

Every ``interval_s`` (:meth:`BudgetService.maybe_run`, called from the controller's step):

1. for each enabled budget, the spend of its scope in the current period (the ledger, running jobs
   metered to now) and the thresholds it has reached; each new crossing is an alert row plus one
   outbox row per channel, inserted exactly once per (budget, period, threshold) by the store's
   unique constraint — evaluating twice, or on two replicas, fires nothing twice. A new period
   has no alerts yet, so its thresholds are armed again;
2. the limit crossing (100 %) is recorded for every budget that acts (throttle, block) even when
   no 100 % threshold is configured, because the grace period counts from it;
3. the throttles in force (over the limit for at least ``grace_s``) are handed to the controller,
   which applies them to each scheduling cycle (:func:`gpufleet.cost.budgets.apply_throttles`);
4. for each budget with ``anomaly_alerts``, at most once per local day: the last complete day of its
   scope in its time zone is judged against its rolling 7-day baseline (:func:`check_anomaly`); an
   anomaly is one alert (kind ``anomaly``) per budget per day, by the same unique constraint, whose
   message names the jobs and teams whose spend rose most and the change that brings it back;
5. jobs with their own ``budget_usd`` whose cost has reached it are reported, and the controller
   stops them like any stop: a SIGTERM (the checkpoint signal), then SIGKILL after the grace
   period, ending CANCELLED with the reason "job budget of $X reached";
6. the outbox is dispatched (retries with backoff).

The block check of submissions does not wait for this timer: the API does it atomically with each
insert (:func:`check_submission`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.clock import Clock
from gpufleet.cost.budgets import (
    LIMIT_PERCENT,
    Budget,
    BudgetExceededError,
    BudgetStatus,
    ThrottleRule,
    budget_status,
    check_block,
    enforcing,
    estimate_job_cost,
    iso,
    last_complete_day,
    limit_severity,
)
from gpufleet.errors import PermissionDeniedError
from gpufleet.notify.channels import deliver
from gpufleet.notify.outbox import DispatchStats, Outbox, Sender
from gpufleet.store import budgets_repo
from gpufleet.store.db import Database
from gpufleet.store.models import BudgetAlertRow, JobRow

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0


@dataclass(frozen=True, slots=True)
class JobOverrun:
    job_id: str
    budget_usd: float
    spent_usd: float

    @property
    def reason(self) -> str:
        return f"job budget of ${self.budget_usd:,.2f} reached (${self.spent_usd:,.2f} spent)"


@dataclass(slots=True)
class Evaluation:
    budget: Budget
    status: BudgetStatus
    new_alerts: list[float] = field(default_factory=list)  # thresholds that fired now
    enforcing: bool = False


def evaluate_budget(s: Session, budget: Budget, now: float) -> Evaluation:
    """Spend and status of one budget, inserting the alerts it newly crossed (exactly once)."""
    period = budget.period_at(now)
    spend = budgets_repo.scope_spend(s, budget.scope, period.start, period.end, now)
    status = budget_status(budget, period, spend, now)
    ev = Evaluation(budget, status)
    if now < period.start or now >= period.end:  # a custom period not yet open, or over
        return ev
    for th in status.crossed:
        row = budgets_repo.insert_alert(
            s, budget, period, threshold=th.percent, severity=th.severity, spend_usd=spend, now=now
        )
        if row is not None:
            ev.new_alerts.append(th.percent)
    if status.over and budget.action != "alert" and all(t.percent != LIMIT_PERCENT for t in budget.thresholds):
        # record when it went over (grace counts from it); no one asked to be told at 100 %
        budgets_repo.insert_alert(
            s,
            budget,
            period,
            threshold=LIMIT_PERCENT,
            severity=limit_severity(budget),
            spend_usd=spend,
            now=now,
            kind="limit",
            notify=False,
        )
    ev.enforcing = enforcing(budget, budgets_repo.over_since(s, budget.id, period.start), now)
    return ev


def check_anomaly(s: Session, budget: Budget, now: float) -> BudgetAlertRow | None:
    """Judge the last complete day of ``budget``'s scope (in its time zone) for a cost anomaly and,
    when there is one, insert its alert and queue its notifications — once per budget and day
    however often this runs (None when there is no anomaly, or it was already raised)."""
    day = last_complete_day(now, budget.timezone)
    found = budgets_repo.scope_anomaly(s, budget, day, now)
    if found is None:
        return None
    return budgets_repo.insert_anomaly_alert(s, budget, day, found, now=now)


def check_project(s: Session, project: str, team: str) -> None:
    """Refuse (:class:`PermissionDeniedError`, a 403) a job of ``team`` tagged with a project that
    another team owns through its budget: a team's project budget is that team's to spend."""
    owner = budgets_repo.project_owner(s, project)
    if owner is not None and owner.team != team:
        raise PermissionDeniedError(
            f"project '{project}' belongs to team '{owner.team}': a job of team '{team}' cannot be "
            "charged to it (use a project of your own team, or ask an admin)"
        )


def check_submission(
    s: Session,
    fields: Mapping[str, Any],
    team: str,
    now: float,
    *,
    submitted_by: str | None = None,
    idempotency_key: str | None = None,
) -> None:
    """The block check of one submission, inside the transaction that inserts the job.

    For every enabled ``block`` budget covering the job: lock it (one submitter per budget at a
    time until this transaction commits), compute the committed spend — metered spend in the
    period plus the estimated rest of the scope's unfinished jobs, including those just inserted by
    submits that committed before this one — and refuse with :class:`BudgetExceededError` if the
    job's estimate would take it past the limit. While a budget is in its grace window (over its
    limit for less than ``grace_s``) the job is let in: the team was alerted and gets that long to
    react. The first refusal in a period records the limit crossing, which starts the window.
    A replay of an idempotent submit that already created its job is not checked again.

    First, a job tagged with a project another team owns through its budget is refused
    (:func:`check_project`).
    """
    if not budgets_repo.key_used(s, submitted_by, idempotency_key):
        check_project(s, str(fields.get("project", "")), team)
    labels = fields.get("labels") or {}
    rows = budgets_repo.budgets_covering(
        s,
        team=team,
        project=str(fields.get("project", "")),
        namespace=str(fields.get("namespace", "default")),
        experiment=str(fields.get("experiment", "")),
        labels=labels,
        actions=("block",),
    )
    if not rows or budgets_repo.key_used(s, submitted_by, idempotency_key):
        return
    budgets_repo.lock_budgets(s, [r.id for r in rows])
    gpus = int(fields.get("gpus", 0)) * int(fields.get("gpu_milli", 1000)) / 1000.0
    price = budgets_repo.usd_per_gpu_hour(s, tuple(fields.get("gpu_types") or ()))
    job_cost = estimate_job_cost(
        gpus,
        price,
        estimated_runtime_s=fields.get("estimated_runtime_s"),
        max_runtime_s=fields.get("max_runtime_s"),
    ).cost_usd
    for row in rows:
        budget = budgets_repo.budget_of(row)
        period = budget.period_at(now)
        if not period.start <= now < period.end:
            continue
        committed = budgets_repo.committed_spend(s, budget.scope, period, now)
        since = budgets_repo.over_since(s, budget.id, period.start)
        in_grace = since is not None and budget.grace_s > 0 and now - since < budget.grace_s
        verdict = check_block(budget, committed.total_usd, job_cost, in_grace=in_grace)
        if verdict.fits:
            continue
        if since is None and budget.grace_s > 0:
            budgets_repo.insert_alert(
                s,
                budget,
                period,
                threshold=LIMIT_PERCENT,
                severity=limit_severity(budget),
                spend_usd=committed.spent_usd,
                now=now,
                kind="limit",
                notify=False,
            )
            continue  # the grace window starts now: this job is the first one in it
        raise BudgetExceededError(budget, committed.total_usd, job_cost)


class BudgetService:
    """Budget evaluation, enforcement hand-off and alert dispatch for one controller."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        sender: Sender = deliver,
        outbox: Outbox | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.interval_s = interval_s
        self.outbox = outbox or Outbox(db, clock, sender=sender)
        self.throttles: list[ThrottleRule] = []
        self._last = -math.inf
        # budget id → what its last anomaly check judged (day start and the settings used): the
        # check runs once a day per budget, not on every evaluation; a restart or another replica
        # checking again raises nothing twice (the alert is unique per budget and day)
        self._anomaly_checked: dict[str, tuple[float, str, float, float]] = {}

    def due(self, now: float) -> bool:
        return now - self._last >= self.interval_s

    def maybe_run(self, now: float) -> list[JobOverrun] | None:
        """Run :meth:`run` if ``interval_s`` has passed since the last run (None otherwise)."""
        if not self.due(now):
            return None
        return self.run(now)

    def run(self, now: float) -> list[JobOverrun]:
        """Evaluate every budget, refresh the throttles, dispatch the outbox; the jobs over their own
        budget are returned for the caller to stop."""
        self._last = now
        self.throttles = [
            ThrottleRule(ev.budget.name, ev.budget.scope, ev.budget.throttle)
            for ev in self.evaluate(now)
            if ev.enforcing and ev.budget.action == "throttle"
        ]
        overruns = self.job_overruns(now)
        self.dispatch()
        return overruns

    def evaluate(self, now: float) -> list[Evaluation]:
        out = []
        with self.db.session(readonly=True) as s:
            budgets = [budgets_repo.budget_of(r) for r in budgets_repo.list_budgets(s, enabled_only=True)]
        for b in budgets:
            try:
                with self.db.session() as s:
                    out.append(evaluate_budget(s, b, now))
            except Exception:  # one broken budget must not stop the others (or the controller)
                log.exception("evaluating budget %s failed", b.name)
            if b.anomaly_alerts:
                self._check_anomaly(b, now)
        return out

    def _check_anomaly(self, budget: Budget, now: float) -> None:
        """:func:`check_anomaly` unless this budget's last complete day was already judged with its
        current scope and settings (a failed check is retried at the next evaluation)."""
        day = last_complete_day(now, budget.timezone)
        key = (
            day.start,
            f"{budget.scope}@{budget.scope.owner}",
            budget.anomaly_threshold_pct,
            budget.anomaly_floor_usd,
        )
        if self._anomaly_checked.get(budget.id) == key:
            return
        try:
            with self.db.session() as s:
                row = check_anomaly(s, budget, now)
        except Exception:  # like evaluation: a broken check must not stop the controller
            log.exception("anomaly check of budget %s failed", budget.name)
            return
        self._anomaly_checked[budget.id] = key
        if row is not None:
            log.info("budget %s: cost anomaly on the day from %s raised", budget.name, iso(day.start))

    def job_overruns(self, now: float) -> list[JobOverrun]:
        out = []
        with self.db.session(readonly=True) as s:
            rows = s.scalars(select(JobRow).where(JobRow.state == "RUNNING", JobRow.budget_usd.is_not(None))).all()
            for row in rows:
                assert row.budget_usd is not None
                spent = budgets_repo.job_spend(s, row, now)
                if spent >= row.budget_usd:
                    out.append(JobOverrun(row.id, row.budget_usd, spent))
        return out

    def dispatch(self) -> DispatchStats:
        return self.outbox.dispatch()
