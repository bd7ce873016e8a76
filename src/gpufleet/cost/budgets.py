"""Budgets: spending limits on a scope per period, and what to do about them (pure: no I/O, no clock).

One module shared by every world — the controller and the API (wall clock, store) and the simulator
(simulated clock, in-memory ledger) — so a what-if replays exactly the enforcement production runs.

A budget limits what jobs in a *scope* spend in each *period*:

- scope: ``all`` | ``team:<name>`` | ``project:<name>`` | ``namespace:<name>`` |
  ``experiment:<name>`` | ``label:<key>=<value>``;
- period: ``monthly`` (from local midnight on the 1st), ``weekly`` (from local midnight on Monday,
  ISO weeks) in a named IANA time zone — so a team in Tokyo gets its month from Tokyo's midnight,
  across daylight-saving changes — or ``custom`` (one fixed ``[start, end)`` window);
- thresholds: percentages of the limit with a severity (default 50/80/100 % →
  info/warning/critical), each alerting once per period;
- action: ``alert`` (notify only); ``throttle`` (lower the scope's priority class, cap the GPUs
  it holds at once, and/or allow it spot capacity only); ``block`` (refuse new submissions whose
  estimated cost would take the committed spend past the limit).

Grace (``grace_s``): enforcement (throttle effects, block refusals) starts ``grace_s`` after the
budget was first found over its limit in the period (``over_since``): a team gets its critical
alert first and a window to react before work is held back. ``grace_s = 0`` enforces at once.

Money is in USD floats rounded to cents at the edges: budgets are limits people set in dollars,
and the ledger (exact to the cent) supplies the spend.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpufleet.errors import ConflictError, InputError
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import PRIORITY_CLASSES, Job
from gpufleet.model.node import CapacityType
from gpufleet.scheduling.cycle import ClusterState, Decisions, Scheduler
from gpufleet.scheduling.framework import Code, Status
from gpufleet.scheduling.snapshot import CAPACITY_CODE

SCOPE_KINDS: Final = ("all", "team", "project", "namespace", "experiment", "label")
# Scopes that a team owns through its budget (``Scope.owner``): only that team's jobs count against
# it. ``team`` scopes are owned by their team by definition; ``all`` is the cluster's.
OWNED_SCOPE_KINDS: Final = ("project", "namespace", "experiment", "label")
PERIODS: Final = ("monthly", "weekly", "custom")
ACTIONS: Final = ("alert", "throttle", "block")
SEVERITIES: Final = ("info", "warning", "critical")
LIMIT_PERCENT: Final = 100.0  # the threshold at which a budget is over (grace counts from it)
# A job with neither a runtime estimate nor a max runtime is assumed to run this long when its
# cost is estimated (the feasibility check and block's committed spend): one hour, the scheduler's
# and the simulator's default too.
DEFAULT_RUNTIME_S: Final = 3600.0
DAY_S: Final = 86400.0
# Anomaly alerts: defaults of a budget's threshold (percent above the baseline) and dollar floor, and
# the ``threshold`` an anomaly alert is stored under — one value, so the store's unique (budget,
# period start, threshold) makes it exactly once per budget per day (period start = the day's start).
DEFAULT_ANOMALY_THRESHOLD_PCT: Final = 20.0
DEFAULT_ANOMALY_FLOOR_USD: Final = 50.0
ANOMALY_THRESHOLD: Final = -1.0
ANOMALY_PAYLOAD_KIND: Final = "budget_anomaly"  # the ``kind`` of an anomaly alert's notification payload


@dataclass(frozen=True, slots=True)
class Threshold:
    percent: float
    severity: str = "warning"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.percent) and 0 < self.percent <= 1000):
            raise InputError(f"a threshold is a percentage in (0, 1000], got {self.percent}", field="thresholds")
        if self.severity not in SEVERITIES:
            raise InputError(f"unknown severity '{self.severity}' (known: {', '.join(SEVERITIES)})", field="thresholds")


DEFAULT_THRESHOLDS: Final = (Threshold(50.0, "info"), Threshold(80.0, "warning"), Threshold(100.0, "critical"))


@dataclass(frozen=True, slots=True)
class Scope:
    """Which jobs a budget covers. ``value`` is ``""`` for ``all`` and ``key=value`` for ``label``.

    ``owner``: the team that owns a project, namespace, experiment or label scope (its budget's
    team); only that team's jobs are in the scope, so another team tagging a job with the same
    project or label never spends (or exhausts) the owner's budget. ``""``: no owner (every team's
    jobs, as budgets stored before owners were recorded)."""

    kind: str
    value: str = ""
    owner: str = ""

    def __post_init__(self) -> None:
        if self.kind not in SCOPE_KINDS:
            raise InputError(f"unknown scope '{self.kind}' (known: {', '.join(SCOPE_KINDS)})", field="scope")
        if self.owner and self.kind not in OWNED_SCOPE_KINDS:
            raise InputError(f"a '{self.kind}' scope has no owning team", field="team")
        if self.kind == "all":
            if self.value:
                raise InputError("scope 'all' takes no value", field="scope")
            return
        if not self.value:
            raise InputError(f"scope '{self.kind}' needs a value ({self.kind}:<name>)", field="scope")
        if self.kind == "label":
            key, sep, _ = self.value.partition("=")
            if not sep or not key:
                raise InputError(f"a label scope is label:key=value, got 'label:{self.value}'", field="scope")

    @classmethod
    def parse(cls, text: str) -> Scope:
        """``all``, ``team:vision``, ``label:cost-center=42`` ..."""
        kind, _, value = text.strip().partition(":")
        return cls(kind.strip(), value.strip())

    def __str__(self) -> str:
        return self.kind if self.kind == "all" else f"{self.kind}:{self.value}"

    @property
    def label(self) -> tuple[str, str]:
        key, _, value = self.value.partition("=")
        return key, value

    def covers(
        self,
        *,
        team: str,
        project: str = "",
        namespace: str = "default",
        experiment: str = "",
        labels: Mapping[str, Any] | None = None,
    ) -> bool:
        kind = self.kind
        if kind == "all":
            return True
        if kind == "team":
            return team == self.value
        if self.owner and team != self.owner:
            return False
        if kind == "project":
            return project == self.value
        if kind == "namespace":
            return namespace == self.value
        if kind == "experiment":
            return experiment == self.value
        key, value = self.label
        labels = labels or {}
        return key in labels and str(labels[key]) == value

    def covers_job(self, job: Job) -> bool:
        s = job.spec
        return self.covers(
            team=s.team, project=s.project, namespace=s.namespace, experiment=s.experiment, labels=s.labels
        )

    @property
    def aggregate(self) -> str:
        """The ledger aggregate that groups usage by this scope (``team``, ``label:<key>``...)."""
        if self.kind == "all":
            return "team"
        if self.kind == "label":
            return f"label:{self.label[0]}"
        return self.kind

    def matches_key(self, key: str) -> bool:
        """Does a ledger row keyed by :attr:`aggregate` belong to this scope (its owner aside)?"""
        if self.kind == "all":
            return True
        if self.kind == "label":
            return key == self.label[1]
        return key == self.value

    @property
    def aggregates(self) -> tuple[str, ...]:
        """The ledger aggregates that find this scope's rows: :attr:`aggregate`, after ``team``
        for an owned scope."""
        return ("team", self.aggregate) if self.owner else (self.aggregate,)

    def matches(self, key: Sequence[str]) -> bool:
        """Does a ledger row keyed by :attr:`aggregates` belong to this scope?"""
        if self.owner:
            return key[0] == self.owner and self.matches_key(key[1])
        return self.matches_key(key[0])

    @property
    def team(self) -> str | None:
        """The team owning the scope (its own team for ``team:X``; None for ``all`` and unowned)."""
        if self.kind == "team":
            return self.value
        return self.owner or None


def owned_scope(scope: Scope, team: str | None) -> Scope:
    """``scope`` owned by ``team``: a ``team:X`` scope must name X (or no team), ``all`` none."""
    if not team:
        return scope
    if scope.kind == "team":
        if team != scope.value:
            raise InputError(f"a budget on scope '{scope}' belongs to team '{scope.value}', not '{team}'", field="team")
        return scope
    if scope.kind == "all":
        raise InputError("a cluster-wide budget (scope 'all') belongs to no team", field="team")
    return Scope(scope.kind, scope.value, team)


@dataclass(frozen=True, slots=True)
class Throttle:
    """What ``throttle`` does to a scope that is over: any combination of the three."""

    priority: str | None = None  # the priority class the scope's jobs drop to (never raised)
    max_gpus: float | None = None  # GPUs the scope may hold at once
    spot_only: bool = False  # new starts only on spot capacity (non-preemptible jobs then wait)

    def __post_init__(self) -> None:
        if self.priority is not None and self.priority not in PRIORITY_CLASSES:
            raise InputError(
                f"unknown priority class '{self.priority}' (known: {', '.join(PRIORITY_CLASSES)})",
                field="throttle.priority",
            )
        if self.max_gpus is not None and not (math.isfinite(self.max_gpus) and self.max_gpus >= 0):
            raise InputError(f"max_gpus must be >= 0, got {self.max_gpus}", field="throttle.max_gpus")

    @property
    def empty(self) -> bool:
        return self.priority is None and self.max_gpus is None and not self.spot_only

    def to_json(self) -> dict[str, Any]:
        return {"priority": self.priority, "max_gpus": self.max_gpus, "spot_only": self.spot_only}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Throttle:
        d = d or {}
        unknown = set(d) - {"priority", "max_gpus", "spot_only"}
        if unknown:
            raise InputError(f"unknown throttle field(s): {', '.join(sorted(unknown))}", field="throttle")
        mg = d.get("max_gpus")
        return cls(d.get("priority"), None if mg is None else float(mg), bool(d.get("spot_only", False)))


@dataclass(frozen=True, slots=True)
class Period:
    start: float
    end: float

    @property
    def length_s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Budget:
    """A validated budget (build it with :func:`make_budget` to get field-named errors)."""

    id: str
    name: str
    scope: Scope
    limit_usd: float
    period: str = "monthly"
    timezone: str = "UTC"
    period_start: float | None = None  # custom periods
    period_end: float | None = None
    thresholds: tuple[Threshold, ...] = DEFAULT_THRESHOLDS
    action: str = "alert"
    throttle: Throttle = field(default_factory=Throttle)
    grace_s: float = 0.0
    channels: tuple[Mapping[str, Any], ...] = ()
    enabled: bool = True
    # Daily cost-anomaly alerts for the scope (opt-in): a complete day whose spend is more than
    # ``anomaly_threshold_pct`` % above its rolling 7-day baseline and more than
    # ``anomaly_floor_usd`` above it in dollars (see :mod:`gpufleet.cost.anomaly`).
    anomaly_alerts: bool = False
    anomaly_threshold_pct: float = DEFAULT_ANOMALY_THRESHOLD_PCT
    anomaly_floor_usd: float = DEFAULT_ANOMALY_FLOOR_USD

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 127:
            raise InputError(f"a budget name is 1..127 characters, got {self.name!r}", field="name")
        if not (math.isfinite(self.limit_usd) and self.limit_usd > 0):
            raise InputError(f"limit_usd must be a positive amount, got {self.limit_usd}", field="limit_usd")
        if self.period not in PERIODS:
            raise InputError(f"unknown period '{self.period}' (known: {', '.join(PERIODS)})", field="period")
        zone(self.timezone)
        if self.period == "custom":
            if self.period_start is None or self.period_end is None:
                raise InputError("a custom period needs period_start and period_end", field="period_start")
            if not self.period_end > self.period_start:
                raise InputError("period_end must be after period_start", field="period_end")
        if self.action not in ACTIONS:
            raise InputError(f"unknown action '{self.action}' (known: {', '.join(ACTIONS)})", field="action")
        if self.action == "throttle" and self.throttle.empty:
            raise InputError(
                "a throttle budget says what to throttle: priority, max_gpus and/or spot_only", field="throttle"
            )
        if not (math.isfinite(self.grace_s) and self.grace_s >= 0):
            raise InputError(f"grace_s must be >= 0, got {self.grace_s}", field="grace_s")
        if not (math.isfinite(self.anomaly_threshold_pct) and self.anomaly_threshold_pct > 0):
            raise InputError(
                f"anomaly_threshold_pct must be a positive percentage, got {self.anomaly_threshold_pct}",
                field="anomaly_threshold_pct",
            )
        if not (math.isfinite(self.anomaly_floor_usd) and self.anomaly_floor_usd >= 0):
            raise InputError(f"anomaly_floor_usd must be >= 0, got {self.anomaly_floor_usd}", field="anomaly_floor_usd")
        percents = [t.percent for t in self.thresholds]
        if len(set(percents)) != len(percents):
            raise InputError("thresholds must be distinct percentages", field="thresholds")
        object.__setattr__(self, "thresholds", tuple(sorted(self.thresholds, key=lambda t: t.percent)))

    def period_at(self, t: float) -> Period:
        return period_at(self.period, t, self.timezone, self.period_start, self.period_end)

    @property
    def team(self) -> str | None:
        """The team the budget belongs to (see :attr:`Scope.team`)."""
        return self.scope.team

    def covers_job(self, job: Job) -> bool:
        return self.scope.covers_job(job)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"unknown time zone '{name}' (an IANA name such as Europe/Paris)", field="timezone") from None


def make_budget(
    *,
    id: str,
    name: str,
    scope: str | Scope,
    limit_usd: float,
    team: str | None = None,
    period: str = "monthly",
    timezone: str = "UTC",
    period_start: float | None = None,
    period_end: float | None = None,
    thresholds: Iterable[Mapping[str, Any] | Threshold] | None = None,
    action: str = "alert",
    throttle: Mapping[str, Any] | Throttle | None = None,
    grace_s: float = 0.0,
    channels: Sequence[Mapping[str, Any]] = (),
    enabled: bool = True,
    anomaly_alerts: bool = False,
    anomaly_threshold_pct: float = DEFAULT_ANOMALY_THRESHOLD_PCT,
    anomaly_floor_usd: float = DEFAULT_ANOMALY_FLOOR_USD,
) -> Budget:
    """A :class:`Budget` from plain values (API bodies, store rows), errors naming the field
    (``thresholds[1].severity``). ``team``: the team owning a project, namespace, experiment or
    label scope (see :class:`Scope`); for ``team:X`` it may only be X."""
    ths: list[Threshold] = []
    for i, t in enumerate(DEFAULT_THRESHOLDS if thresholds is None else thresholds):
        if isinstance(t, Threshold):
            ths.append(t)
            continue
        try:
            ths.append(Threshold(float(t["percent"]), str(t.get("severity", "warning"))))
        except KeyError:
            raise InputError("a threshold needs a percent", field=f"thresholds[{i}].percent") from None
        except InputError as e:
            raise InputError(e.message.split(": ", 1)[-1], field=f"thresholds[{i}]") from None
    sc = owned_scope(scope if isinstance(scope, Scope) else Scope.parse(scope), team)
    th = throttle if isinstance(throttle, Throttle) else Throttle.from_json(throttle)
    return Budget(
        id=id,
        name=name,
        scope=sc,
        limit_usd=float(limit_usd),
        period=period,
        timezone=timezone,
        period_start=period_start,
        period_end=period_end,
        thresholds=tuple(ths),
        action=action,
        throttle=th,
        grace_s=float(grace_s),
        channels=tuple(dict(c) for c in channels),
        enabled=enabled,
        anomaly_alerts=bool(anomaly_alerts),
        anomaly_threshold_pct=float(anomaly_threshold_pct),
        anomaly_floor_usd=float(anomaly_floor_usd),
    )


# -- periods ----------------------------------------------------------------------------------------


def period_at(
    kind: str, t: float, timezone: str = "UTC", custom_start: float | None = None, custom_end: float | None = None
) -> Period:
    """The period containing instant ``t`` (UNIX seconds).

    Months and weeks start at local midnight in ``timezone`` (so their length in seconds varies
    with the month and with daylight-saving changes inside it). ``custom`` is the one window given,
    whatever ``t`` is."""
    if kind == "custom":
        if custom_start is None or custom_end is None:
            raise InputError("a custom period needs period_start and period_end", field="period_start")
        return Period(custom_start, custom_end)
    tz = zone(timezone)
    local = datetime.fromtimestamp(t, tz)
    if kind == "monthly":
        start = datetime(local.year, local.month, 1, tzinfo=tz)
        year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
        end = datetime(year, month, 1, tzinfo=tz)
    elif kind == "weekly":
        day = local.date() - timedelta(days=local.weekday())
        start = datetime(day.year, day.month, day.day, tzinfo=tz)
        nxt = day + timedelta(days=7)
        end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz)
    else:
        raise InputError(f"unknown period '{kind}' (known: {', '.join(PERIODS)})", field="period")
    return Period(start.timestamp(), end.timestamp())


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


# -- status -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """Where a budget stands at ``now`` in ``period``."""

    period: Period
    now: float
    limit_usd: float
    spend_usd: float  # metered so far in the period (the ledger)
    percent: float  # spend / limit x 100
    projected_usd: float  # period-end spend at the period's run rate so far
    days_left: float
    remaining_usd: float  # limit - spend (negative when over)
    crossed: tuple[Threshold, ...]  # thresholds at or below the spend

    @property
    def over(self) -> bool:
        return self.spend_usd >= self.limit_usd


def budget_status(budget: Budget, period: Period, spend_usd: float, now: float) -> BudgetStatus:
    """Spend, percent used, projection and thresholds crossed.

    The projection extrapolates the period's average run rate so far (spend / elapsed) to the whole
    period: simple, explainable, and never below what is already spent. Before the period starts
    (custom periods) it is the spend itself; after it ends, the final spend."""
    elapsed = min(max(now, period.start), period.end) - period.start
    projected = spend_usd if elapsed <= 0 else max(spend_usd, spend_usd / elapsed * period.length_s)
    percent = spend_usd / budget.limit_usd * 100.0
    return BudgetStatus(
        period=period,
        now=now,
        limit_usd=budget.limit_usd,
        spend_usd=spend_usd,
        percent=percent,
        projected_usd=projected,
        days_left=max(0.0, period.end - max(now, period.start)) / DAY_S,
        remaining_usd=budget.limit_usd - spend_usd,
        crossed=crossed_thresholds(budget, spend_usd),
    )


def crossed_thresholds(budget: Budget, spend_usd: float) -> tuple[Threshold, ...]:
    """Thresholds reached by ``spend_usd`` (a cent of tolerance: floats must not miss 100 %)."""
    return tuple(t for t in budget.thresholds if spend_usd + 0.005 >= budget.limit_usd * t.percent / 100.0)


def limit_severity(budget: Budget) -> str:
    """The severity of the limit crossing: the 100 % threshold's, else critical."""
    for t in budget.thresholds:
        if t.percent == LIMIT_PERCENT:
            return t.severity
    return "critical"


def alert_message(budget: Budget, threshold: float, spend_usd: float, period: Period) -> str:
    return (
        f"budget '{budget.name}' ({budget.scope}) reached {threshold:g}% of its ${budget.limit_usd:,.2f} "
        f"{budget.period} limit: ${spend_usd:,.2f} spent in the period from {iso(period.start)}"
    )


def dedup_key(budget_id: str, period_start: float, threshold: float) -> str:
    """One key per crossing (budget, period, threshold): receivers drop repeats by it."""
    return f"gpufleet/budget/{budget_id}/{int(period_start)}/{threshold:g}"


def anomaly_dedup_key(budget_id: str, day_start: float) -> str:
    """One key per anomaly alert (budget, day): receivers drop repeats by it."""
    return f"gpufleet/budget/{budget_id}/{int(day_start)}/anomaly"


def last_complete_day(t: float, timezone: str = "UTC") -> Period:
    """The last whole local day before instant ``t`` in ``timezone``: ``[yesterday 00:00, today
    00:00)`` local time (23 or 25 hours long across a daylight-saving change). Anomalies are judged
    on complete days only: a day still going would always look low."""
    tz = zone(timezone)
    today = datetime.fromtimestamp(t, tz).date()
    yesterday = today - timedelta(days=1)
    start = datetime(yesterday.year, yesterday.month, yesterday.day, tzinfo=tz)
    end = datetime(today.year, today.month, today.day, tzinfo=tz)
    return Period(start.timestamp(), end.timestamp())


# -- enforcement ------------------------------------------------------------------------------------


def enforcing(budget: Budget, over_since: float | None, now: float) -> bool:
    """Is ``budget``'s action (throttle, block) in force at ``now``? Only once it has been over its
    limit for ``grace_s`` (``over_since``: when it was first found over in this period)."""
    if budget.action == "alert" or not budget.enabled or over_since is None:
        return False
    return now - over_since >= budget.grace_s


@dataclass(frozen=True, slots=True)
class JobCostEstimate:
    """What a job is expected to cost: GPU-equivalents x hours x price of a GPU-hour."""

    gpus: float
    runtime_s: float
    runtime_source: str  # estimate | max_runtime | default
    usd_per_gpu_hour: float
    cost_usd: float


def job_runtime(estimated_runtime_s: float | None, max_runtime_s: float | None) -> tuple[float, str]:
    """The runtime used for cost estimates: the estimate, else the max runtime, else one hour."""
    if estimated_runtime_s is not None and estimated_runtime_s > 0:
        return float(estimated_runtime_s), "estimate"
    if max_runtime_s is not None and max_runtime_s > 0:
        return float(max_runtime_s), "max_runtime"
    return DEFAULT_RUNTIME_S, "default"


def estimate_job_cost(
    gpus: float,
    usd_per_gpu_hour: float,
    *,
    estimated_runtime_s: float | None = None,
    max_runtime_s: float | None = None,
    elapsed_s: float = 0.0,
) -> JobCostEstimate:
    """Estimated cost of (the rest of) a job: ``gpus`` GPU-equivalents for its runtime less
    ``elapsed_s`` already run (metered by the ledger), at ``usd_per_gpu_hour``. A whole node-price
    per GPU is used (its CPU and memory included), so the estimate errs high: a check against it
    keeps spend under a limit rather than near it."""
    runtime, source = job_runtime(estimated_runtime_s, max_runtime_s)
    left = max(0.0, runtime - max(0.0, elapsed_s))
    cost = gpus * left / 3600.0 * usd_per_gpu_hour
    return JobCostEstimate(gpus, runtime, source, usd_per_gpu_hour, cost)


def job_gpus(job: Job) -> float:
    return job.spec.total_gpu_milli / MILLI


def estimate_for(job: Job, usd_per_gpu_hour: float, now: float) -> JobCostEstimate:
    """:func:`estimate_job_cost` for a scheduler :class:`Job` (its current run's elapsed time)."""
    elapsed = now - job.start_time if job.start_time is not None else 0.0
    return estimate_job_cost(
        job_gpus(job),
        usd_per_gpu_hour,
        estimated_runtime_s=job.spec.estimated_runtime_s,
        max_runtime_s=job.spec.max_runtime_s,
        elapsed_s=elapsed,
    )


class BudgetExceededError(ConflictError):
    """A submission ``block`` refuses: its estimated cost does not fit in what is left. The API
    answers 402 Payment Required with code ``budget_exceeded``."""

    code = "budget_exceeded"

    def __init__(self, budget: Budget, committed_usd: float, job_cost_usd: float) -> None:
        self.budget = budget
        self.committed_usd = committed_usd
        self.job_cost_usd = job_cost_usd
        left = max(0.0, budget.limit_usd - committed_usd)
        super().__init__(
            f"budget '{budget.name}' ({budget.scope}, {budget.period}) blocks this job: limit "
            f"${budget.limit_usd:,.2f}, committed ${committed_usd:,.2f} (spent plus the estimated rest of "
            f"running and queued jobs), ${left:,.2f} left; this job would cost about ${job_cost_usd:,.2f}"
        )


@dataclass(frozen=True, slots=True)
class BlockVerdict:
    budget: Budget
    committed_usd: float
    job_cost_usd: float
    fits: bool

    @property
    def remaining_usd(self) -> float:
        return self.budget.limit_usd - self.committed_usd


def check_block(budget: Budget, committed_usd: float, job_cost_usd: float, *, in_grace: bool = False) -> BlockVerdict:
    """Would ``block`` let a job costing ``job_cost_usd`` in? Only if committed + job <= limit (a
    cent of tolerance for float sums), or while the budget is in its grace window."""
    fits = committed_usd + job_cost_usd <= budget.limit_usd + 0.005 or in_grace
    return BlockVerdict(budget, committed_usd, job_cost_usd, fits)


# -- throttles --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThrottleRule:
    """A throttle in force: the budget it comes from, its scope and what it does."""

    budget: str
    scope: Scope
    throttle: Throttle


@dataclass(slots=True)
class ThrottleOutcome:
    pending: list[Job]  # may be placed anywhere the job may normally go
    spot_only: list[Job]  # may be placed on spot capacity only
    held: dict[str, str]  # job id → why a throttle holds it back this cycle


def apply_throttles(rules: Sequence[ThrottleRule], pending: Sequence[Job], running: Iterable[Job]) -> ThrottleOutcome:
    """Apply the throttles in force to one scheduling cycle's queue.

    - ``priority``: every job in scope (queued and running) has its effective priority lowered to
      the class's value (never raised); jobs no rule covers get their spec's priority back. This is
      the one effect with state: it writes ``Job.priority``, which the queue order and preemption
      read, so a throttled scope queues behind and may be preempted by others.
    - ``max_gpus``: the scope's jobs may hold at most this many GPUs at once; queued jobs in scope
      are let in by priority then age while they fit under the cap with what already runs, the
      rest are held this cycle.
    - ``spot_only``: queued preemptible jobs in scope are placed on spot nodes only; non-preemptible
      ones wait (they may not run on capacity that can be taken back).
    """
    running = list(running)
    lowered: dict[str, int] = {}
    for job in (*pending, *running):
        prio = job.spec.priority
        for r in rules:
            if r.throttle.priority is not None and r.scope.covers_job(job):
                prio = min(prio, PRIORITY_CLASSES[r.throttle.priority])
        lowered[job.id] = prio
        job.priority = prio
    held: dict[str, str] = {}
    spot: set[str] = set()
    for r in rules:
        th = r.throttle
        if th.max_gpus is not None:
            used = sum(job_gpus(j) for j in running if r.scope.covers_job(j))
            room = th.max_gpus - used
            mine = sorted(
                (j for j in pending if j.id not in held and r.scope.covers_job(j)),
                key=lambda j: (-j.priority, j.submit_time, j.id),
            )
            for j in mine:
                need = job_gpus(j)
                if need <= room + 1e-9:
                    room -= need
                else:
                    held[j.id] = (
                        f"budget '{r.budget}' throttles {r.scope} to {th.max_gpus:g} GPUs at once "
                        f"({used:g} held by its running jobs)"
                    )
        if th.spot_only:
            for j in pending:
                if j.id in held or not r.scope.covers_job(j):
                    continue
                if j.spec.preemptible and not j.on_demand_only:
                    spot.add(j.id)
                else:
                    held[j.id] = f"budget '{r.budget}' allows {r.scope} spot capacity only; this job is not preemptible"
    out = ThrottleOutcome([], [], held)
    for j in pending:
        if j.id in held:
            continue
        (out.spot_only if j.id in spot else out.pending).append(j)
    return out


def throttled_cycle(
    scheduler: Scheduler,
    state: ClusterState,
    rules: Sequence[ThrottleRule],
    now: float,
    *,
    restore: bool = False,
) -> Decisions:
    """One scheduling cycle with the throttles in force — the same in the controller and the
    simulator. Held jobs wait with the throttle's reason; spot-only jobs get a second pass of the
    same scheduler in which only spot nodes are schedulable (the cycle's own way of narrowing the
    nodes, as its backfill reservation does). ``restore``: no rule is in force any more but one was,
    so give every job its spec's priority back."""
    if not rules and not restore:
        return scheduler.cycle(state, now)
    outcome = apply_throttles(rules, state.pending, (rj.job for rj in state.running.values()))
    main = dataclasses.replace(state, pending=outcome.pending)
    decisions = scheduler.cycle(main, now)
    if outcome.spot_only:
        snap = state.snapshot
        n = snap.n
        saved = snap.schedulable[:n].copy()
        snap.schedulable[:n] &= snap.capacity_type[:n] == CAPACITY_CODE[CapacityType.SPOT]
        try:
            extra = scheduler.cycle(dataclasses.replace(state, pending=outcome.spot_only), now)
        finally:
            snap.schedulable[:n] = saved
        decisions.placements += extra.placements
        decisions.preemptions += extra.preemptions
        decisions.waiting.update(extra.waiting)
        decisions.order += extra.order
    for job in state.pending:
        why = outcome.held.get(job.id)
        if why is not None:
            decisions.waiting[job.id] = Status(Code.UNSCHEDULABLE, why)
            decisions.order.append(job)
    return decisions
