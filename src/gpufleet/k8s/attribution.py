"""``CostAttribution`` custom resources → a cost-report query, and the CR's status.

Pure mappings (no client, no clock: ``now`` comes in). The controller reads a CR, calls
:func:`attribution_filters_from_cr` for its :class:`AttributionQuery`, runs
:func:`gpufleet.cost.spend.spend_report` over each of :meth:`AttributionQuery.windows` and writes
:func:`attribution_status` through the status subresource. A bad CR is an
:class:`~gpufleet.errors.InputError` naming the object (``CostAttribution ml/spend``) and the field
(``spec.retentionDays``), never a crash: the controller writes
:func:`~gpufleet.k8s.crread.error_status` (``Ready`` False, reason ``InvalidSpec``) and goes on.
Reading the CR's fields and the ownership checks are :mod:`gpufleet.k8s.crread`'s.

Decisions:

- **Ownership.** A CostAttribution covers the team owning its namespace only
  (:func:`~gpufleet.k8s.crread.cr_owner`): ``spec.team`` may be omitted or be that team, and
  ``spec.namespace`` may not name another team's namespace. A CR in a namespace of no team is
  refused (``metadata.namespace``).
- **Selectors.** Every selector given narrows the query (namespace, project, experimentID,
  costCenter, labels: all must match). What a report filters (the team, labels, the cost center)
  are its ``filters``; what it cannot (namespace, project, experiment) are dimensions of the
  aggregation that :meth:`AttributionQuery.lines` matches. The last dimension is
  :data:`BREAKDOWN_DIMENSION` (``gpu_model``), for the status' breakdown.
- **Windows.** ``totalCost`` covers ``retentionDays`` (default 30), ``dailyCost`` the last 24
  hours, ``monthlyCost`` this calendar month (UTC), ``hourlyCost`` the last hour.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from gpufleet.cost.report import COST_CENTER_LABEL, CostReport, Filters, ReportLine
from gpufleet.errors import InputError

from .crds import COST_ATTRIBUTION, DNS_LABEL, LABEL_VALUE, MAX_BREAKDOWN, TEAM_NAME
from .crread import CrReader, CrRef, check_namespace_selector, cr_owner, cr_ref, money, ready_condition, rfc3339

BREAKDOWN_DIMENSION: Final = "gpu_model"
_HOUR: Final = 3600.0
_DAY: Final = 86400.0

_ATTRIBUTION_FIELDS: Final = ("namespace", "team", "project", "experimentID", "costCenter", "labels", "retentionDays")


@dataclass(frozen=True, slots=True)
class AttributionQuery:
    """What a ``CostAttribution`` asks of :func:`gpufleet.cost.spend.spend_report`.

    Run ``spend_report(ledger, start, end, aggregate=q.aggregate, filters=q.filters)`` for each of
    :meth:`windows` and keep :meth:`lines` of it. ``filters`` carry what a report filters (the
    owning team, labels, the cost center); the selectors a report cannot filter (namespace, project,
    experiment) are dimensions of ``aggregate`` that :meth:`lines` matches against ``match``. The
    last dimension is :data:`BREAKDOWN_DIMENSION` (``gpu_model``), for the status' breakdown."""

    ref: CrRef
    team: str
    aggregate: tuple[str, ...]
    filters: Filters
    match: Mapping[str, str]
    retention_days: int

    def lines(self, report: CostReport | Iterable[ReportLine]) -> list[ReportLine]:
        """The report's rows this attribution covers."""
        rows = report.rows if isinstance(report, CostReport) else report
        want = [(i, self.match[d]) for i, d in enumerate(self.aggregate) if d in self.match]
        return [row for row in rows if all(row.key[i] == v for i, v in want)]

    def cost(self, report: CostReport | Iterable[ReportLine]) -> Decimal:
        """What the covered rows were charged (USD, cents)."""
        return sum((row.total_cost_usd for row in self.lines(report)), Decimal("0.00"))

    def windows(self, now: float) -> dict[str, tuple[float, float]]:
        """``[start, end)`` of each figure: ``total`` (the retention window), ``daily`` (the last 24
        hours), ``monthly`` (this calendar month, UTC) and ``hourly`` (the last hour)."""
        from gpufleet.cost.periods import period_at

        month = period_at("monthly", now, "UTC")
        return {
            "total": (now - self.retention_days * _DAY, now),
            "daily": (now - _DAY, now),
            "monthly": (month.start, now),
            "hourly": (now - _HOUR, now),
        }


def attribution_filters_from_cr(cr: Mapping[str, Any], team_of_namespace: Mapping[str, str]) -> AttributionQuery:
    """The query a ``CostAttribution`` stands for. It always covers the team owning the CR's
    namespace only (``spec.team`` may be omitted or be that team), narrowed by every selector given
    (namespace, project, experimentID, costCenter, labels: all must match). Bad CRs raise
    :class:`InputError` naming the object and the field."""
    ref = cr_ref(cr, COST_ATTRIBUTION)
    r = CrReader(str(ref))
    spec = r.obj(cr.get("spec", {}), "spec", _ATTRIBUTION_FIELDS)
    owner = cr_owner(ref, team_of_namespace, r)
    if "team" in spec:
        team = r.string(spec["team"], "spec.team", max_length=63, pattern=TEAM_NAME, what="a team name")
        if team != owner:
            raise r.fail("spec.team", f"a CostAttribution in namespace '{ref.namespace}' covers team '{owner}' only")
    match: dict[str, str] = {}
    if "namespace" in spec:
        ns = r.string(spec["namespace"], "spec.namespace", max_length=63, pattern=DNS_LABEL, what="a namespace name")
        check_namespace_selector(ns, owner, team_of_namespace, r, "spec.namespace")
        match["namespace"] = ns
    if "project" in spec:
        match["project"] = r.string(spec["project"], "spec.project")
    if "experimentID" in spec:
        match["experiment"] = r.string(spec["experimentID"], "spec.experimentID")
    labels: dict[str, str] = {}
    if "labels" in spec:
        labels = r.labels(spec["labels"], "spec.labels", max_properties=16)
    if "costCenter" in spec:
        cc = r.string(spec["costCenter"], "spec.costCenter", max_length=63, pattern=LABEL_VALUE, what="a label value")
        if labels.get(COST_CENTER_LABEL, cc) != cc:
            raise r.fail("spec.costCenter", f"differs from spec.labels.{COST_CENTER_LABEL}")
        labels[COST_CENTER_LABEL] = cc
    retention = 30
    if "retentionDays" in spec:
        retention = int(r.number(spec["retentionDays"], "spec.retentionDays", low=1, high=3650, integer=True))
    return AttributionQuery(
        ref=ref,
        team=owner,
        aggregate=(*match, BREAKDOWN_DIMENSION),
        filters=Filters(team=owner, labels=labels),
        match=match,
        retention_days=retention,
    )


@dataclass(frozen=True, slots=True)
class AttributionCosts:
    """What the covered rows were charged in each of :meth:`AttributionQuery.windows` (USD)."""

    total: Decimal | float
    daily: Decimal | float
    monthly: Decimal | float
    hourly: Decimal | float


def attribution_status(
    lines: Sequence[ReportLine],
    costs: AttributionCosts,
    *,
    query: AttributionQuery,
    active_pods: int,
    active_gpus: float,
    now: datetime,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``CostAttribution`` status subresource body. ``lines``: the covered rows of the
    retention window's report (:meth:`AttributionQuery.lines`), for the GPU-hours, the cost per
    GPU-hour and the breakdown; ``costs``: the four windows' figures; ``active_pods`` /
    ``active_gpus``: what the team's covered jobs hold now."""
    if active_pods < 0 or not (math.isfinite(active_gpus) and active_gpus >= 0):
        raise InputError(f"active pods and GPUs are >= 0, got {active_pods}, {active_gpus}", source=str(query.ref))
    gpu_hours = sum(row.gpu_hours for row in lines)
    total_lines = sum((row.total_cost_usd for row in lines), Decimal("0.00"))
    gpu_cost = sum((row.gpu_cost_usd for row in lines), Decimal("0.00"))
    models: dict[str, list[float]] = {}
    idx = len(query.aggregate) - 1
    for row in lines:
        m = models.setdefault(row.key[idx], [0.0, 0.0])
        m[0] += float(row.total_cost_usd)
        m[1] += row.gpu_hours
    by_model = [
        {"gpuModel": k, "cost": money(c), "gpuHours": round(h, 3)}
        for k, (c, h) in sorted(models.items(), key=lambda kv: (-kv[1][0], kv[0]))
    ][:MAX_BREAKDOWN]
    window = query.windows(now.timestamp())["total"]
    generation = query.ref.generation
    return {
        "observedGeneration": generation,
        "team": query.team,
        "totalCost": money(costs.total),
        "dailyCost": money(costs.daily),
        "monthlyCost": money(costs.monthly),
        "hourlyCost": money(costs.hourly),
        "activePods": active_pods,
        "activeGPUs": round(active_gpus, 3),
        "costPerGPUHour": money(total_lines / Decimal(repr(gpu_hours))) if gpu_hours > 0 else 0.0,
        "gpuHours": round(gpu_hours, 3),
        "windowStart": rfc3339(datetime.fromtimestamp(window[0], UTC)),
        "breakdown": {
            "gpu": money(gpu_cost),
            "cpu": money(sum((row.cpu_cost_usd for row in lines), Decimal("0.00"))),
            "memory": money(sum((row.memory_cost_usd for row in lines), Decimal("0.00"))),
            "adjustment": money(sum((row.adjustment_usd for row in lines), Decimal("0.00"))),
            "byGPUModel": by_model,
        },
        "lastUpdated": rfc3339(now),
        "conditions": [
            ready_condition(
                "Ready",
                True,
                "Reconciled",
                f"team '{query.team}': ${total_lines:,.2f} over the last {query.retention_days} day(s)",
                generation,
                now,
                previous,
            )
        ],
    }
