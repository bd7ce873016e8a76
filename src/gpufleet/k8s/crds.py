"""The ``gpufleet.io/v1alpha1`` CustomResourceDefinitions: ``CostBudget`` and ``CostAttribution``.

Both are namespaced: a CR lives in its team's namespace and speaks for that team only (see
:mod:`gpufleet.k8s.crread`). Each has a status subresource (the controller writes status
through ``/status``, people write the spec) and printer columns, so ``kubectl get costbudgets``
shows limit, spend, percent used, state and whether enforcement is on.

The schemas are *structural* (every node typed, no ``additionalProperties: false``, no ``$ref``),
bounded (every string has a ``maxLength`` or an ``enum``, every list a ``maxItems``, every map a
``maxProperties``: the API server estimates the cost of CEL rules from these bounds) and refuse
bad specs at ``kubectl apply``: required fields, types, ranges, enums (enforcement action,
severity, priority class, channel type), patterns (DNS names, team names, label values) and a few
``x-kubernetes-validations`` CEL rules where one field depends on another (a ``throttle`` action
needs a throttle config; one scope selector; distinct thresholds; label keys). What the schema
cannot say (channel lists shared by all alerts, a scope that names another team) the mapping in
:mod:`gpufleet.k8s.costbudget` refuses, naming the field.

PriorityClass, Namespace, ResourceQuota and LimitRange are built-in kinds, not CRDs: see
:mod:`gpufleet.k8s.policies`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Final

from gpufleet.k8s.vocabulary import (
    ANNOTATION_DESCRIPTION,
    CRD_API,
    GPUFLEET_API,
    GPUFLEET_GROUP,
    GPUFLEET_VERSION,
    LABEL_APP_NAME,
    LABEL_PART_OF,
    MANAGER,
)


@dataclass(frozen=True, slots=True)
class CrdNames:
    """The names of one custom resource (``spec.names`` of its CRD)."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...] = ("gpufleet",)

    @property
    def crd_name(self) -> str:
        """``<plural>.<group>``: the CRD's own ``metadata.name``."""
        return f"{self.plural}.{GPUFLEET_GROUP}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


COST_BUDGET: Final = CrdNames("CostBudget", "costbudgets", "costbudget", ("cb",))
COST_ATTRIBUTION: Final = CrdNames("CostAttribution", "costattributions", "costattribution", ("ca",))
CRD_NAMES: Final = (COST_BUDGET, COST_ATTRIBUTION)

# -- patterns (RE2 for the API server; Python's re agrees on these) ----------------------------------
DNS_LABEL: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a namespace (RFC 1123 label)
DNS_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"  # a Secret's name
TEAM_NAME: Final = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"  # gpufleet.wire.NAME
# a label key: an optional DNS-subdomain prefix and '/', then a name of 1..63 characters
LABEL_KEY: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
SECRET_KEY: Final = r"^[-._a-zA-Z0-9]+$"
PRINTABLE: Final = r"^[^\x00-\x1f\x7f]*$"  # free text: no control characters
HTTP_URL: Final = r"^https?://[^\s/$.?#][^\s]*$"

LABEL_KEY_MAX: Final = 63  # gpufleet job labels: keys up to 63 characters (prefix included)
MAX_ALERTS: Final = 16
MAX_CHANNELS: Final = 8
MAX_ALERTS_FIRED: Final = 32  # status.alertsFired keeps the latest ones
MAX_BREAKDOWN: Final = 32

ENFORCEMENT_ACTIONS: Final = ("alert", "throttle", "block")
SEVERITIES: Final = ("info", "warning", "critical")
PRIORITY_CLASSES: Final = ("background", "low", "normal", "high", "urgent")
CHANNEL_TYPES: Final = ("webhook", "slack", "email", "pagerduty")
BUDGET_STATES: Final = ("ok", "warning", "exceeded")

# -- schema builders -----------------------------------------------------------------------------------


def _obj(
    properties: dict[str, Any],
    *,
    required: tuple[str, ...] = (),
    description: str = "",
    rules: tuple[tuple[str, str], ...] = (),
) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object"}
    if description:
        node["description"] = description
    node["properties"] = properties
    if required:
        node["required"] = list(required)
    if rules:
        node["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in rules]
    return node


def _str(
    description: str,
    *,
    max_length: int = 255,
    min_length: int = 0,
    pattern: str | None = None,
    enum: tuple[str, ...] | None = None,
    default: str | None = None,
    fmt: str | None = None,
) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string", "description": description}
    if enum is not None:
        node["enum"] = list(enum)
    else:
        node["maxLength"] = max_length
        if min_length:
            node["minLength"] = min_length
        if pattern is not None:
            node["pattern"] = pattern
    if fmt is not None:
        node["format"] = fmt
    if default is not None:
        node["default"] = default
    return node


def _num(
    description: str,
    *,
    minimum: float | None = None,
    exclusive_minimum: bool = False,
    maximum: float | None = None,
    integer: bool = False,
    default: float | None = None,
) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "integer" if integer else "number", "description": description}
    if integer:
        node["format"] = "int64"
    if minimum is not None:
        node["minimum"] = minimum
        if exclusive_minimum:
            node["exclusiveMinimum"] = True
    if maximum is not None:
        node["maximum"] = maximum
    if default is not None:
        node["default"] = default
    return node


def _bool(description: str, default: bool | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "boolean", "description": description}
    if default is not None:
        node["default"] = default
    return node


def _list(items: dict[str, Any], description: str, *, max_items: int, min_items: int = 0) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "array", "description": description, "maxItems": max_items}
    if min_items:
        node["minItems"] = min_items
    node["items"] = items
    return node


def _labels(
    description: str, *, max_properties: int, min_properties: int = 0, min_value_length: int = 0
) -> dict[str, Any]:
    """A map of label key → value: values by pattern, keys by a CEL rule (a structural schema has
    no ``propertyNames``)."""
    value = _str("a label value", max_length=63, min_length=min_value_length, pattern=LABEL_VALUE)
    node: dict[str, Any] = {"type": "object", "description": description, "maxProperties": max_properties}
    if min_properties:
        node["minProperties"] = min_properties
    return node | {
        "additionalProperties": value,
        "x-kubernetes-validations": [
            {
                "rule": f"self.all(k, k.size() <= {LABEL_KEY_MAX} && k.matches('{LABEL_KEY}'))",
                "message": f"a label key is [prefix/]name: a DNS-subdomain prefix, a name of letters, digits, "
                f"'-', '_', '.' starting and ending alphanumeric; {LABEL_KEY_MAX} characters at most",
            }
        ],
    }


def _secret_ref(description: str) -> dict[str, Any]:
    return _obj(
        {
            "name": _str("the Secret, in the CostBudget's namespace", max_length=253, pattern=DNS_SUBDOMAIN),
            "key": _str("the key of the Secret's data", max_length=253, pattern=SECRET_KEY),
        },
        required=("name", "key"),
        description=description,
    )


def _conditions() -> dict[str, Any]:
    """``status.conditions``: standard ``metav1.Condition`` entries, one per type."""
    condition = _obj(
        {
            "type": _str("condition type (Ready, Exceeded)", max_length=316),
            "status": _str("True, False or Unknown", enum=("True", "False", "Unknown")),
            "observedGeneration": _num("the .metadata.generation it was set from", minimum=0, integer=True),
            "lastTransitionTime": _str("when status last changed", max_length=64, fmt="date-time"),
            "reason": _str("CamelCase reason", max_length=1024),
            "message": _str("what it means, for people", max_length=32768),
        },
        required=("type", "status", "lastTransitionTime", "reason", "message"),
    )
    node = _list(condition, "the latest observations of the object's state", max_items=8)
    node["x-kubernetes-list-type"] = "map"
    node["x-kubernetes-list-map-keys"] = ["type"]
    return node


_OBSERVED = _num("the .metadata.generation of the spec this status reflects", minimum=0, integer=True)
_UPDATED = _str("when the controller last wrote this status", max_length=64, fmt="date-time")

# -- CostBudget ----------------------------------------------------------------------------------------

_SCOPE_RULE = (
    "(has(self.namespaces) ? self.namespaces.size() : 0) + (has(self.teams) ? self.teams.size() : 0)"
    " + (has(self.labels) ? self.labels.size() : 0) + (has(self.experimentID) ? 1 : 0) <= 1"
)
_THROTTLE_RULE = (
    "!has(self.action) || self.action != 'throttle' || (has(self.throttle) && (has(self.throttle.priorityClass)"
    " || has(self.throttle.maxGPUs) || (has(self.throttle.spotOnly) && self.throttle.spotOnly)))"
)


def _channel() -> dict[str, Any]:
    return _obj(
        {
            "type": _str("where the alert goes", enum=CHANNEL_TYPES),
            "url": _str(
                "webhook and slack: the URL the alert is POSTed to; pagerduty: the Events API v2 endpoint "
                "(default PagerDuty's)",
                max_length=2048,
                pattern=HTTP_URL,
            ),
            "to": _list(_str("an email address", max_length=254, min_length=3), "email: recipients", max_items=16),
            "host": _str("email: the SMTP server", max_length=253, min_length=1),
            "port": _num("email: the SMTP port (default 25)", minimum=1, maximum=65535, integer=True),
            "from": _str("email: the sender address", max_length=254, min_length=3),
            "starttls": _bool("email: STARTTLS before sending"),
            "username": _str("email: SMTP login (after STARTTLS)", max_length=254, min_length=1),
            "passwordSecretRef": _secret_ref("email: the SMTP password, from a Secret"),
            "routingKeySecretRef": _secret_ref("pagerduty: the integration's routing key, from a Secret"),
            "timeoutSeconds": _num("delivery timeout (default 10)", minimum=0, exclusive_minimum=True, maximum=120),
        },
        required=("type",),
        description="an alert channel; secrets (SMTP password, PagerDuty routing key) come from Secrets only",
        rules=(
            ("self.type != 'webhook' && self.type != 'slack' || has(self.url)", "webhook and slack channels need url"),
            (
                "self.type != 'email' || (has(self.to) && self.to.size() > 0 && has(self.host) && has(self.from))",
                "an email channel needs to, host and from",
            ),
            (
                "self.type != 'pagerduty' || has(self.routingKeySecretRef)",
                "a pagerduty channel needs routingKeySecretRef",
            ),
            (
                "self.type == 'email' || (!has(self.to) && !has(self.host) && !has(self.port) && !has(self.from)"
                " && !has(self.starttls) && !has(self.username) && !has(self.passwordSecretRef))",
                "to, host, port, from, starttls, username and passwordSecretRef are for email channels",
            ),
            (
                "self.type == 'pagerduty' || !has(self.routingKeySecretRef)",
                "routingKeySecretRef is for pagerduty channels",
            ),
            ("self.type != 'email' || !has(self.url)", "an email channel has no url"),
            (
                "has(self.username) == has(self.passwordSecretRef)",
                "give both username and passwordSecretRef, or neither",
            ),
        ),
    )


def cost_budget_schema() -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``CostBudget`` (a fresh copy each call)."""
    scope = _obj(
        {
            "namespaces": _list(
                _str("a namespace", max_length=63, pattern=DNS_LABEL),
                "the team's jobs in this namespace",
                max_items=1,
                min_items=1,
            ),
            "teams": _list(
                _str("a gpufleet team", max_length=63, pattern=TEAM_NAME),
                "the whole team (it must be the team whose namespace holds this CostBudget)",
                max_items=1,
                min_items=1,
            ),
            "labels": _labels(
                "the team's jobs with this label (key: value)", max_properties=1, min_properties=1, min_value_length=1
            ),
            "experimentID": _str("the team's jobs of this experiment", max_length=255, min_length=1, pattern=PRINTABLE),
        },
        description=(
            "which jobs the budget covers, always of the team that owns the CostBudget's namespace: one "
            "selector (a gpufleet budget has one scope; make one CostBudget per selector). Empty: the jobs in "
            "the CostBudget's own namespace"
        ),
        rules=(
            (
                _SCOPE_RULE,
                "scope selects by one of namespaces, teams, labels or experimentID, with one value: make one "
                "CostBudget per selector",
            ),
        ),
    )
    alert = _obj(
        {
            "threshold": _num("percent of monthlyLimit", minimum=0, exclusive_minimum=True, maximum=100),
            "severity": _str("how loud", enum=SEVERITIES, default="warning"),
            "channels": _list(
                _channel(),
                "where to send it; every alert that lists channels must list the same ones (a gpufleet budget "
                "sends each crossing to all its channels)",
                max_items=MAX_CHANNELS,
            ),
        },
        required=("threshold",),
        description="alert once per month when spend reaches threshold % of the limit",
    )
    throttle = _obj(
        {
            "priorityClass": _str("the scope's jobs drop to this class (never raised)", enum=PRIORITY_CLASSES),
            "maxGPUs": _num("GPUs the scope may hold at once", minimum=0, maximum=1_000_000),
            "spotOnly": _bool("new starts on spot capacity only"),
        },
        description="what throttle does once the budget is over (any combination)",
    )
    enforcement = _obj(
        {
            "action": _str(
                "alert: notify only; throttle: apply the throttle config; block: refuse new jobs that would "
                "take the committed spend past the limit",
                enum=ENFORCEMENT_ACTIONS,
                default="alert",
            ),
            "gracePeriodMinutes": _num(
                "throttle/block start this long after the budget is first over", minimum=0, maximum=527040, integer=True
            ),
            "throttle": throttle,
        },
        description="what happens when spend reaches the limit",
        rules=((_THROTTLE_RULE, "action throttle needs throttle: priorityClass, maxGPUs and/or spotOnly: true"),),
    )
    spec = _obj(
        {
            "monthlyLimit": _num(
                "the limit in USD per calendar month", minimum=0, exclusive_minimum=True, maximum=1e12
            ),
            "timeZone": _str(
                "IANA time zone in which months start (default UTC)",
                max_length=63,
                min_length=1,
                pattern=r"^[A-Za-z0-9_+\-/]+$",
            ),
            "scope": scope,
            "alerts": _list(alert, "alert thresholds (none: 50/80/100 % info/warning/critical)", max_items=MAX_ALERTS),
            "enforcement": enforcement,
            "enabled": _bool("false: tracked, no alerts and no enforcement", default=True),
        },
        required=("monthlyLimit",),
        description="a monthly spending limit for the team's jobs",
    )
    spec["properties"]["alerts"]["x-kubernetes-validations"] = [
        {
            "rule": "self.all(a, self.exists_one(b, b.threshold == a.threshold))",
            "message": "alert thresholds must be distinct",
        }
    ]
    fired = _obj(
        {
            "threshold": _num("percent of the limit", minimum=0),
            "severity": _str("its severity", max_length=16),
            "kind": _str("threshold or anomaly", max_length=16),
            "firedAt": _str("when", max_length=64, fmt="date-time"),
            "spend": _num("spend (USD) when it fired"),
        },
        required=("threshold", "firedAt"),
    )
    status = _obj(
        {
            "observedGeneration": copy.deepcopy(_OBSERVED),
            "budgetName": _str("the gpufleet budget this CostBudget is (gpufleet budget ls)", max_length=63),
            "budgetID": _str("its id", max_length=64),
            "currentSpend": _num("USD spent this month"),
            "percentageUsed": _num("currentSpend / monthlyLimit x 100"),
            "budgetStatus": _str(
                "ok; warning: past the highest threshold below 100 %; exceeded: at or past the limit",
                enum=BUDGET_STATES,
            ),
            "projectedMonthlySpend": _num("month-end spend at this month's rate, at least what is committed"),
            "remaining": _num("limit minus committed spend (negative: over)"),
            "daysRemaining": _num("days left in the month", minimum=0),
            "periodStart": _str("the month's start", max_length=64, fmt="date-time"),
            "periodEnd": _str("the month's end", max_length=64, fmt="date-time"),
            "alertsFired": _list(fired, "this month's alerts, the latest last", max_items=MAX_ALERTS_FIRED),
            "enforcementActive": _bool("throttle/block in force (over the limit for at least the grace period)"),
            "lastUpdated": copy.deepcopy(_UPDATED),
            "conditions": _conditions(),
        },
        description="written by the gpufleet controller through the status subresource",
    )
    return _root("CostBudget: a monthly spending limit with alerts and enforcement", spec, status)


# -- CostAttribution -------------------------------------------------------------------------------------


def cost_attribution_schema() -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``CostAttribution`` (a fresh copy each call)."""
    spec = _obj(
        {
            "namespace": _str("only jobs in this namespace", max_length=63, pattern=DNS_LABEL),
            "team": _str(
                "the team (default and only allowed value: the team owning this namespace)",
                max_length=63,
                pattern=TEAM_NAME,
            ),
            "project": _str("only jobs of this project", max_length=255, min_length=1, pattern=PRINTABLE),
            "experimentID": _str("only jobs of this experiment", max_length=255, min_length=1, pattern=PRINTABLE),
            "costCenter": _str(
                "only jobs labelled cost-center=<this>", max_length=63, min_length=1, pattern=LABEL_VALUE
            ),
            "labels": _labels("only jobs with all these labels", max_properties=16),
            "retentionDays": _num(
                "totalCost covers this many days back", minimum=1, maximum=3650, integer=True, default=30
            ),
        },
        description="whose costs: the owning team's jobs, narrowed by every selector given",
    )
    by_model = _obj(
        {
            "gpuModel": _str("GPU model ('' for CPU-only work)", max_length=63),
            "cost": _num("USD over the retention window"),
            "gpuHours": _num("GPU-hours over the retention window", minimum=0),
        },
        required=("gpuModel", "cost"),
    )
    breakdown = _obj(
        {
            "gpu": _num("USD for GPUs"),
            "cpu": _num("USD for CPU"),
            "memory": _num("USD for memory"),
            "adjustment": _num("part of the total due to priority multipliers"),
            "byGPUModel": _list(by_model, "by GPU model, the costliest first", max_items=MAX_BREAKDOWN),
        },
        description="totalCost by resource and by GPU model",
    )
    status = _obj(
        {
            "observedGeneration": copy.deepcopy(_OBSERVED),
            "team": _str("the team whose costs these are", max_length=63),
            "totalCost": _num("USD over the retention window"),
            "dailyCost": _num("USD over the last 24 hours"),
            "monthlyCost": _num("USD this calendar month (UTC)"),
            "hourlyCost": _num("USD over the last hour"),
            "activePods": _num("running pods", minimum=0, integer=True),
            "activeGPUs": _num("GPUs held now", minimum=0),
            "costPerGPUHour": _num("totalCost / GPU-hours (0 without GPU use)"),
            "gpuHours": _num("GPU-hours over the retention window", minimum=0),
            "windowStart": _str("start of the retention window", max_length=64, fmt="date-time"),
            "breakdown": breakdown,
            "lastUpdated": copy.deepcopy(_UPDATED),
            "conditions": _conditions(),
        },
        description="written by the gpufleet controller through the status subresource",
    )
    return _root("CostAttribution: what a team's jobs cost, kept up to date", spec, status)


def _root(description: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {"type": "string", "description": GPUFLEET_API},
            "kind": {"type": "string", "description": "the kind"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "required": ["spec"],
    }


# -- the CRDs ------------------------------------------------------------------------------------------


def _column(name: str, json_path: str, type_: str, description: str, priority: int = 0) -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": type_, "jsonPath": json_path, "description": description}
    if priority:
        col["priority"] = priority
    return col


def _age() -> dict[str, Any]:
    return _column("Age", ".metadata.creationTimestamp", "date", "time since creation")


def _crd(names: CrdNames, schema: dict[str, Any], columns: list[dict[str, Any]], description: str) -> dict[str, Any]:
    return {
        "apiVersion": CRD_API,
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": names.crd_name,
            "labels": {LABEL_APP_NAME: MANAGER, LABEL_PART_OF: MANAGER},
            "annotations": {ANNOTATION_DESCRIPTION: description},
        },
        "spec": {
            "group": GPUFLEET_GROUP,
            "names": {
                "kind": names.kind,
                "listKind": names.list_kind,
                "plural": names.plural,
                "singular": names.singular,
                "shortNames": list(names.short_names),
                "categories": list(names.categories),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": GPUFLEET_VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def cost_budget_crd() -> dict[str, Any]:
    return _crd(
        COST_BUDGET,
        cost_budget_schema(),
        [
            _column("Limit", ".spec.monthlyLimit", "number", "monthly limit (USD)"),
            _column("Spend", ".status.currentSpend", "number", "spent this month (USD)"),
            _column("Used %", ".status.percentageUsed", "number", "percent of the limit spent"),
            _column("Status", ".status.budgetStatus", "string", "ok, warning or exceeded"),
            _column("Enforcing", ".status.enforcementActive", "boolean", "throttle/block in force"),
            _column("Projected", ".status.projectedMonthlySpend", "number", "month-end projection (USD)", priority=1),
            _column("Action", ".spec.enforcement.action", "string", "alert, throttle or block", priority=1),
            _age(),
        ],
        "A gpufleet budget: a monthly spending limit on a team's jobs, with alerts and enforcement.",
    )


def cost_attribution_crd() -> dict[str, Any]:
    return _crd(
        COST_ATTRIBUTION,
        cost_attribution_schema(),
        [
            _column("Team", ".status.team", "string", "whose costs"),
            _column("Namespace", ".spec.namespace", "string", "only this namespace (empty: all the team's)"),
            _column("Monthly", ".status.monthlyCost", "number", "this month (USD)"),
            _column("Hourly", ".status.hourlyCost", "number", "the last hour (USD)"),
            _column("GPUs", ".status.activeGPUs", "number", "GPUs held now"),
            _column("Total", ".status.totalCost", "number", "over the retention window (USD)", priority=1),
            _column("$/GPU-h", ".status.costPerGPUHour", "number", "cost per GPU-hour", priority=1),
            _age(),
        ],
        "What a team's jobs cost (by namespace, project, experiment, cost center or labels), kept up to date.",
    )


def crds() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions gpufleet installs, ``CostBudget`` first (fresh dicts)."""
    return [cost_budget_crd(), cost_attribution_crd()]
