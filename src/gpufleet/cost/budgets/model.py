"""Budgets, the model: what a budget is — its scope, limit, period kind, thresholds and action.

A budget limits what jobs in a *scope* spend in each *period*:

- scope: ``all`` | ``team:<name>`` | ``project:<name>`` | ``namespace:<name>`` |
  ``experiment:<name>`` | ``label:<key>=<value>``;
- period: ``monthly`` (from local midnight on the 1st), ``weekly`` (from local midnight on Monday,
  ISO weeks) in a named IANA time zone, or ``custom`` (one fixed ``[start, end)`` window), see
  :mod:`gpufleet.cost.periods`;
- thresholds: percentages of the limit with a severity (default 50/80/100 % →
  info/warning/critical), each alerting once per period;
- action: ``alert`` (notify only); ``throttle`` (lower the scope's priority class, cap the GPUs
  it holds at once, and/or allow it spot capacity only); ``block`` (refuse new submissions whose
  estimated cost would take the committed spend past the limit).

Grace (``grace_s``): enforcement (throttle effects, block refusals) starts ``grace_s`` after the
budget was first found over its limit in the period. ``grace_s = 0`` enforces at once.

Money is in USD floats rounded to cents at the edges: budgets are limits people set in dollars,
and :mod:`gpufleet.cost.spend` (exact to the cent) supplies the spend. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpufleet.cost.periods import PERIODS, Period, period_at, zone
from gpufleet.errors import InputError
from gpufleet.model.job import PRIORITY_CLASSES, Job

SCOPE_KINDS: Final = ("all", "team", "project", "namespace", "experiment", "label")
# Scopes that a team owns through its budget (``Scope.owner``): only that team's jobs count against
# it. ``team`` scopes are owned by their team by definition; ``all`` is the cluster's.
OWNED_SCOPE_KINDS: Final = ("project", "namespace", "experiment", "label")
ACTIONS: Final = ("alert", "throttle", "block")
SEVERITIES: Final = ("info", "warning", "critical")
# Anomaly alerts: defaults of a budget's threshold (percent above the baseline) and dollar floor.
DEFAULT_ANOMALY_THRESHOLD_PCT: Final = 20.0
DEFAULT_ANOMALY_FLOOR_USD: Final = 50.0


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
