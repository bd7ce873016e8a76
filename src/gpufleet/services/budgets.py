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
   which applies them to each scheduling cycle as capacity limits (:func:`gpufleet.cost.budgets.capacity_limits`);
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

Money. Every figure here — a scope's spend, a job's spend, the anomaly series, the metered part of
the committed spend — comes from :mod:`gpufleet.cost.spend` with the server's pricing rules (the
``rules`` given to :class:`BudgetService` and :func:`check_submission`: the same
:class:`~gpufleet.cost.rules.PricingRules` object ``/v1/usage`` prices with,
``ApiContext.pricing_rules``), so a budget alerts, throttles and blocks on the figure the bill
shows. Estimates of what is still to come price a GPU-hour with
:func:`gpufleet.cost.job_estimate.usd_per_gpu_hour`.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from gpufleet.clock import Clock
from gpufleet.cost.anomaly import Anomaly, AnomalyConfig, KeyFilter, scan_ledger
from gpufleet.cost.budgets.model import OWNED_SCOPE_KINDS, Budget, Scope, make_budget
from gpufleet.cost.budgets.status import budget_status, enforcing
from gpufleet.cost.budgets.throttle import ThrottleRule
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.job_estimate import estimate_job_cost, usd_per_gpu_hour
from gpufleet.cost.periods import DAY_S, Period, history_text, iso, last_complete_day, zone
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import SPEND_BASES, job_costs_usd, scope_spend_usd
from gpufleet.errors import CatalogError, InputError, PermissionDeniedError
from gpufleet.loop.budgets import Evaluation, Overrun, block_refusal, evaluate, overrun
from gpufleet.model.gpu import MILLI
from gpufleet.model.node import CapacityType
from gpufleet.model.share import milli_gpus
from gpufleet.notify.channels import deliver, validate_channels
from gpufleet.notify.outbox import DispatchStats, Outbox, Sender
from gpufleet.store import repo, usage_repo
from gpufleet.store.db import Database
from gpufleet.store.models import BudgetAlertRow, BudgetRow, JobRow
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.wire import BudgetAlertOut, BudgetIn, BudgetStatusOut

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0
# Days of history an anomaly check loads: enough for the 21 days before a day is judged and three
# earlier same weekdays for its day-of-week factor, without loading months of ledger once a day.
ANOMALY_HISTORY_DAYS = 35


# -- what budgets spend -------------------------------------------------------------------------------


def scope_spend(
    s: Session, scope: Scope, start: float, end: float, now: float, *, rules: PricingRules | None = None
) -> float:
    """What jobs in ``scope`` were charged in ``[start, min(end, now))``: the ledger (stored segments
    and running jobs metered to ``now``) through :func:`gpufleet.cost.spend.scope_spend_usd` with
    ``rules``. Idle capacity is not charged to a budget; an owned scope counts its team's jobs only."""
    cut = min(end, now)
    if cut <= start:
        return 0.0
    ledger = repo.load_ledger(s, start, cut, now)
    return scope_spend_usd(ledger, rules, scope, start, cut, as_of=cut)


def job_spend(s: Session, job: JobRow, now: float, *, rules: PricingRules | None = None) -> float:
    """What one job has been charged so far, over all its runs, exactly (before rounding to cents:
    a job budget stops the job when its cost reaches the limit, not when a cent rounds up)."""
    start = job.started_at if job.started_at is not None else job.submitted_at
    if now <= start:
        return 0.0
    ledger = repo.load_ledger(s, start, now, now)
    return job_costs_usd(ledger, rules, start, now, as_of=now, exact=True).get(job.id, 0.0)


def scope_anomaly(
    s: Session,
    budget: Budget,
    day: Period,
    now: float,
    *,
    rules: PricingRules | None = None,
    history_days: int = ANOMALY_HISTORY_DAYS,
) -> Anomaly | None:
    """The cost anomaly of ``budget``'s scope on ``day`` (a complete local day), if it had one.

    The scope's charged spend is filtered exactly as :func:`scope_spend` does it (its aggregate and
    key; idle capacity not charged), day by day over the ``history_days`` ending with ``day`` —
    whatever the budget's period, since a baseline needs the days before a period starts too — and
    judged by :func:`~gpufleet.cost.anomaly.scan_ledger` with the budget's threshold and dollar
    floor. Earlier days are 24-hour steps back from ``day``'s local midnight (an hour off across a
    daylight-saving change, which the 7-day mean barely feels); ``day`` itself ends at its real end."""
    first = day.start - DAY_S * (history_days - 1)
    ledger = repo.load_ledger(s, first, day.start + DAY_S, now)
    cfg = AnomalyConfig(threshold=budget.anomaly_threshold_pct / 100.0, min_increase_usd=budget.anomaly_floor_usd)
    local_day = datetime.fromtimestamp(day.start, zone(budget.timezone)).date()
    found = scan_ledger(
        ledger,
        first_day_start=first,
        days=history_days,
        config=cfg,
        as_of=min(now, day.end),
        where=KeyFilter(budget.scope.aggregate, budget.scope.matches_key, budget.scope.owner or None),
        first_day=local_day - timedelta(days=history_days - 1),
        rules=rules,
    )
    return next((a for a in found if a.day_index == history_days - 1), None)


def gpu_hour_price(s: Session, gpu_types: Sequence[str] = ()) -> float:
    """The price of a GPU-hour for estimates (:func:`gpufleet.cost.job_estimate.usd_per_gpu_hour`)
    over the store's nodes: the dearest per-GPU price among those the job may use."""
    return usd_per_gpu_hour(usage_repo.gpu_node_prices(s), gpu_types)


def plan_gpu_hour_price(s: Session, gpu_types: Sequence[str], catalog: Callable[[], PriceCatalog]) -> tuple[float, str]:
    """The $/GPU-hour a plan (``/v1/budgets/check``) is priced at, and its basis: the cluster's own
    price (:func:`gpu_hour_price`) when the job may run on the GPU nodes the store knows; when it
    asks for GPU types no node has, the price catalog's on-demand price for them (the dearest),
    because pricing an H100 plan at the cluster's A100 price would understate it — such a submit
    is refused anyway (:func:`gpufleet.services.submit.check_fits_store` says why), but the plan's
    cost is what it would be once the cluster has that GPU. ``catalog`` is loaded only then."""
    nodes = usage_repo.gpu_node_prices(s)
    missing = bool(gpu_types) and not any(count > 0 and model in gpu_types for model, count, _ in nodes)
    if missing:
        quotes = []
        book = catalog()
        for model in gpu_types:
            try:
                q = book.quote(model, CapacityType.ON_DEMAND)
            except CatalogError:
                continue
            quotes.append((q.usd_per_gpu_hour, f"catalog {q.entry.provider} {q.entry.region} {q.entry.offering}"))
        if quotes:
            price, where = max(quotes)
            return price, f"{where}: the cluster has no {' or '.join(gpu_types)} node"
    return usd_per_gpu_hour(nodes, gpu_types), "cluster"


def job_row_gpus(row: JobRow) -> float:
    """GPU-equivalents a stored job holds (pods x count x milli / 1000)."""
    return milli_gpus(max(1, row.pods or 1) * row.gpus * row.gpu_milli)


@dataclass(frozen=True, slots=True)
class Committed:
    """A scope's committed spend in a period: metered plus the estimated rest of unfinished jobs."""

    spent_usd: float
    estimated_usd: float
    jobs: int  # unfinished jobs counted

    @property
    def total_usd(self) -> float:
        return self.spent_usd + self.estimated_usd


def _covers(scope: Scope, row: JobRow) -> bool:
    return scope.covers(
        team=row.team, project=row.project, namespace=row.namespace, experiment=row.experiment, labels=row.labels
    )


def committed_spend(
    s: Session, scope: Scope, period: Period, now: float, *, rules: PricingRules | None = None
) -> Committed:
    """What ``scope`` has spent in ``period`` (priced with ``rules``, :func:`scope_spend`) plus what
    its unfinished jobs are expected to cost: queued and preempted jobs their whole estimate,
    admitted and running ones the estimate less the time their current run has been going. A job
    just inserted by a concurrent submit that committed first counts here at once (it is PENDING),
    which is what keeps ``block`` from being raced past its limit. Runtime: the job's estimate,
    else its max runtime, else one hour."""
    spent = scope_spend(s, scope, period.start, period.end, now, rules=rules)
    rows = [r for r in budgets_repo.unfinished_jobs(s, scope) if _covers(scope, r)]
    started = budgets_repo.current_run_starts(s, [r.id for r in rows if r.state in ("ADMITTED", "RUNNING")])
    nodes = usage_repo.gpu_node_prices(s) if rows else []
    price_cache: dict[tuple[str, ...], float] = {}
    estimated = 0.0
    for r in rows:
        types = tuple(sorted(r.gpu_types or ()))
        if types not in price_cache:
            price_cache[types] = usd_per_gpu_hour(nodes, types)
        t0 = started.get(r.id)
        est = estimate_job_cost(
            job_row_gpus(r),
            price_cache[types],
            estimated_runtime_s=r.estimated_runtime_s,
            max_runtime_s=r.max_runtime_s,
            elapsed_s=0.0 if t0 is None else now - t0,
        )
        estimated += est.cost_usd
    return Committed(spent, estimated, len(rows))


def budgets_covering(
    s: Session,
    *,
    team: str,
    project: str,
    namespace: str,
    experiment: str,
    labels: Mapping[str, Any],
    actions: Sequence[str] | None = None,
) -> list[BudgetRow]:
    """Enabled budgets whose scope covers a job with these attributes (of ``team``: another
    team's project or label budget never covers it)."""
    out = []
    for row in budgets_repo.list_budgets(s, enabled_only=True):
        if actions is not None and row.action not in actions:
            continue
        scope = budgets_repo.scope_of(row)
        if scope.covers(team=team, project=project, namespace=namespace, experiment=experiment, labels=labels):
            out.append(row)
    return out


# -- a budget as the API shows it (shared by /v1/budgets and the CostBudget reconciler) ------------------


def budget_from_in(body: BudgetIn, id: str = "") -> Budget:
    """A pure budget from an API body (errors name the body's fields: ``scope``, ``channels[0].url``)."""
    validate_channels(body.channels)
    scope = Scope.parse(body.scope)
    if scope.kind in OWNED_SCOPE_KINDS and body.team is None:
        raise InputError(
            f"a budget on scope '{scope}' belongs to a team: name it (only its jobs count against the budget)",
            field="team",
        )
    return make_budget(
        id=id,
        name=body.name,
        scope=scope,
        team=body.team,
        limit_usd=body.limit_usd,
        period=body.period,
        timezone=body.timezone,
        period_start=None if body.period_start is None else body.period_start.timestamp(),
        period_end=None if body.period_end is None else body.period_end.timestamp(),
        thresholds=None if body.thresholds is None else [t.model_dump() for t in body.thresholds],
        action=body.action,
        throttle=None if body.throttle is None else body.throttle.model_dump(),
        grace_s=body.grace_s,
        channels=body.channels,
        enabled=body.enabled,
        anomaly_alerts=body.anomaly_alerts,
        anomaly_threshold_pct=body.anomaly_threshold_pct,
        anomaly_floor_usd=body.anomaly_floor_usd,
    )


def budget_status_out(s: Session, row: BudgetRow, now: float, rules: PricingRules | None) -> BudgetStatusOut:
    """A budget's status (``/v1/budgets/{ref}/status``). Read-only: alerts are fired by the
    controller's evaluation, not by looking. Spend is priced with ``rules``, the server's pricing
    rules (as ``/v1/usage`` prices it)."""
    b = budgets_repo.budget_of(row)
    period = b.period_at(now)
    spend = scope_spend(s, b.scope, period.start, period.end, now, rules=rules)
    committed = committed_spend(s, b.scope, period, now, rules=rules)
    status = budget_status(b, period, spend, now, committed.total_usd, history_start=repo.ledger_start(s))
    in_force = enforcing(b, budgets_repo.over_since(s, b.id, period.start), now, over=status.over)
    alerts = budgets_repo.alerts_of(s, b.id, period.start, period.end)
    sent: dict[int, Counter[str]] = {}
    for n in budgets_repo.notifications_of(s, (a.id for a in alerts)):
        sent.setdefault(n.alert_id, Counter())[n.status] += 1
    return BudgetStatusOut(
        budget_id=b.id,
        name=b.name,
        scope=str(b.scope),
        action=b.action,
        period_start=datetime.fromtimestamp(period.start, UTC),
        period_end=datetime.fromtimestamp(period.end, UTC),
        limit_usd=b.limit_usd,
        spend_usd=round(status.spend_usd, 2),
        committed_usd=round(committed.total_usd, 2),
        percent=round(status.percent, 2),
        projected_usd=round(status.projected_usd, 2),
        basis="jobs",
        basis_note=SPEND_BASES["jobs"],
        projected_from_s=round(status.projected_from_s, 3),
        projection_note=f"at the rate over {history_text(status.projected_from_s)} of history"
        + (" (since the server's ledger started)" if status.projected_from_s < now - period.start - 1e-6 else "")
        + ", at least what is committed",
        remaining_usd=round(status.remaining_usd, 2),
        days_left=round(status.days_left, 3),
        thresholds_crossed=[t.percent for t in status.crossed],
        enforcing=in_force,
        alerts=[
            BudgetAlertOut(
                threshold=a.threshold,
                severity=a.severity,
                kind=a.kind,
                fired_at=datetime.fromtimestamp(a.fired_at, UTC),
                spend_usd=round(a.spend_usd, 2),
                limit_usd=a.limit_usd,
                notifications=dict(sent.get(a.id, {})),
            )
            for a in alerts
        ],
    )


# -- evaluation and enforcement -----------------------------------------------------------------------


JobOverrun = Overrun  # a job over its own budget: the loop's rule and words (gpufleet.loop.budgets.overrun)


class SqlBook:
    """The server's :class:`~gpufleet.loop.budgets.BudgetBook`: spend priced from the store's ledger
    with the server's pricing rules, alerts as rows (once each, by the store's unique constraint)."""

    def __init__(self, s: Session, rules: PricingRules | None = None) -> None:
        self.s = s
        self.rules = rules

    def spend(self, scope: Scope, period: Period, now: float) -> float:
        return scope_spend(self.s, scope, period.start, period.end, now, rules=self.rules)

    def over_since(self, budget: Budget, period: Period) -> float | None:
        return budgets_repo.over_since(self.s, budget.id, period.start)

    def set_over_since(self, budget: Budget, period: Period, since: float | None) -> None:
        budgets_repo.set_over_since(self.s, budget.id, period.start, since)

    def record(
        self,
        budget: Budget,
        period: Period,
        threshold: float,
        severity: str,
        spend_usd: float,
        now: float,
        *,
        limit_only: bool = False,
    ) -> bool:
        row = budgets_repo.insert_alert(
            self.s,
            budget,
            period,
            threshold=threshold,
            severity=severity,
            spend_usd=spend_usd,
            now=now,
            kind="limit" if limit_only else "threshold",
            notify=not limit_only,
        )
        return row is not None


def evaluate_budget(s: Session, budget: Budget, now: float, *, rules: PricingRules | None = None) -> Evaluation:
    """Spend (priced with ``rules``) and status of one budget, inserting the alerts it newly crossed
    (exactly once): :func:`gpufleet.loop.budgets.evaluate` — the simulator's rules — on the store."""
    return evaluate(SqlBook(s, rules), budget, now)


def check_anomaly(
    s: Session, budget: Budget, now: float, *, rules: PricingRules | None = None
) -> BudgetAlertRow | None:
    """Judge the last complete day of ``budget``'s scope (in its time zone) for a cost anomaly and,
    when there is one, insert its alert and queue its notifications — once per budget and day
    however often this runs (None when there is no anomaly, or it was already raised)."""
    day = last_complete_day(now, budget.timezone)
    found = scope_anomaly(s, budget, day, now, rules=rules)
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


def _estimate_usd(s: Session, fields: Mapping[str, Any]) -> float:
    """A job's estimated cost, as the block check charges it (its GPUs at the price of a GPU-hour
    of the models it may run on, for its estimated or maximum runtime)."""
    gpus = milli_gpus(int(fields.get("pods") or 1) * int(fields.get("gpus", 0)) * int(fields.get("gpu_milli", MILLI)))
    price = gpu_hour_price(s, tuple(fields.get("gpu_types") or ()))
    return estimate_job_cost(
        gpus,
        price,
        estimated_runtime_s=fields.get("estimated_runtime_s"),
        max_runtime_s=fields.get("max_runtime_s"),
    ).cost_usd


def check_submission(
    s: Session,
    fields: Mapping[str, Any],
    team: str,
    now: float,
    *,
    submitted_by: str | None = None,
    idempotency_key: str | None = None,
    rules: PricingRules | None = None,
    replaces: Mapping[str, Any] | None = None,
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

    The spend is priced with ``rules`` — pass the server's pricing rules (``ApiContext.pricing_rules``,
    what ``/v1/usage`` prices with), so a block refuses on the figure the bill shows.

    First, a job tagged with a project another team owns through its budget is refused
    (:func:`check_project`).

    ``replaces``: the fields of the job this one replaces (an approved resize, cancelled in the same
    transaction). A replacement estimated at no more than that job is not checked: it lowers the
    committed spend, so the budget it relieves must not refuse it (issue 23, item 10). A dearer one
    is checked like any new job.
    """
    if not budgets_repo.key_used(s, submitted_by, idempotency_key):
        check_project(s, str(fields.get("project", "")), team)
    labels = fields.get("labels") or {}
    rows = budgets_covering(
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
    job_cost = _estimate_usd(s, fields)
    if replaces is not None and job_cost <= _estimate_usd(s, replaces):
        return
    budgets_repo.lock_budgets(s, [r.id for r in rows])
    # the rules the simulator's submit event applies too (grace, the first refusal starting it)
    err = block_refusal(
        SqlBook(s, rules),
        [budgets_repo.budget_of(row) for row in rows],
        job_cost,
        now,
        lambda budget, period: committed_spend(s, budget.scope, period, now, rules=rules).total_usd,
    )
    if err is not None:
        raise err


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
        rules: PricingRules | None = None,
    ) -> None:
        self.db = db
        # the server's pricing rules, the object /v1/usage prices with (ApiContext.pricing_rules)
        self.rules = rules
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
                    out.append(evaluate_budget(s, b, now, rules=self.rules))
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
                row = check_anomaly(s, budget, now, rules=self.rules)
        except Exception:  # like evaluation: a broken check must not stop the controller
            log.exception("anomaly check of budget %s failed", budget.name)
            return
        self._anomaly_checked[budget.id] = key
        if row is not None:
            log.info("budget %s: cost anomaly on the day from %s raised", budget.name, iso(day.start))

    def job_overruns(self, now: float) -> list[JobOverrun]:
        out = []
        with self.db.session(readonly=True) as s:
            for row in budgets_repo.running_jobs_with_budget(s):
                over = overrun(row.id, row.budget_usd, job_spend(s, row, now, rules=self.rules))
                if over is not None:
                    out.append(over)
        return out

    def dispatch(self) -> DispatchStats:
        return self.outbox.dispatch()
