"""``CostBudget`` custom resources ↔ gpufleet budgets (``BudgetIn``) and the CR's status.

Pure mappings (no client, no clock: ``now`` comes in). The controller reads a CR, calls
:func:`budget_in_from_cr`, creates or replaces the gpufleet budget :func:`budget_name` names (a CR
budget and an API budget are one budget: ``gpufleet budget ls`` shows it), and writes
:func:`cr_status_from` through the status subresource. A bad CR is an
:class:`~gpufleet.errors.InputError` naming the object (``CostBudget ml/gpu-month``) and the field
(``spec.monthlyLimit``), never a crash: the controller writes
:func:`~gpufleet.k8s.crread.error_status` (``Ready`` False, reason ``InvalidSpec``) and goes on.
Reading the CR's fields and the ownership checks are :mod:`gpufleet.k8s.crread`'s.

Decisions:

- **Ownership.** A CostBudget speaks for the team owning its namespace only
  (:func:`~gpufleet.k8s.crread.cr_owner`): its budget belongs to that team (a ``namespace``,
  ``experiment`` or ``label`` scope counts only that team's jobs), ``scope.teams`` may only name
  that team, and ``scope.namespaces`` may not name another team's namespace. A CR in a namespace
  of no team is refused (``metadata.namespace``). Cluster-wide budgets (scope ``all``) stay
  API-only.
- **Scope.** One selector per CR, with one value: ``namespaces: [ns]`` → ``namespace:<ns>``,
  ``teams: [t]`` → ``team:<t>``, ``labels: {k: v}`` → ``label:k=v``, ``experimentID: x`` →
  ``experiment:x``; no selector → ``namespace:<the CR's namespace>``. Several selectors are refused
  (``spec.scope``): a gpufleet budget has one scope, and splitting one limit over several budgets
  would multiply it. One CostBudget per selector says what is meant.
- **Name.** The gpufleet budget is ``<namespace>.<name>`` (a namespace has no dots, so the pair is
  recoverable); past the 63 characters of :data:`gpufleet.wire.NAME`, its first 52 characters,
  ``-`` and 10 hex digits of the full name's SHA-256.
- **Alerts.** ``alerts[].threshold`` / ``severity`` → the budget's thresholds (none: gpufleet's
  50/80/100 %). A gpufleet budget sends every crossing to all its channels, so every alert that
  lists channels must list the same ones (else ``spec.alerts[i].channels`` is refused rather than
  paging at 50 %); alerts without channels share them. Secrets (SMTP password, PagerDuty routing
  key) come only from Secrets in the CR's namespace: the controller reads the ones
  :func:`secret_refs` lists and passes them as ``secrets``.
- **Status.** ``budgetStatus``: ``exceeded`` at or past the limit, ``warning`` past the highest
  threshold below 100 %, else ``ok``. The dict is the whole status (replace it, do not merge).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from gpufleet.errors import InputError
from gpufleet.wire import NAME, BudgetAlertOut, BudgetIn, BudgetStatusOut

from .crds import (
    CHANNEL_TYPES,
    COST_BUDGET,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    ENFORCEMENT_ACTIONS,
    HTTP_URL,
    MAX_ALERTS,
    MAX_ALERTS_FIRED,
    MAX_CHANNELS,
    PRIORITY_CLASSES,
    SECRET_KEY,
    SEVERITIES,
    TEAM_NAME,
)
from .crread import (
    CrReader,
    CrRef,
    check_namespace_selector,
    cr_owner,
    cr_ref,
    json_kind,
    money,
    ready_condition,
    rfc3339,
)

DEFAULT_THRESHOLD_PERCENTS: Final = (50.0, 80.0, 100.0)  # cost.budgets.model.DEFAULT_THRESHOLDS
CENT: Final = 0.005  # the tolerance gpufleet's threshold checks use (gpufleet.cost.budgets.status.crossed_thresholds)
_NAME_RE: Final = re.compile(NAME)

# gpufleet's own field (BudgetIn) → the CR's, for errors raised past the CR checks
_BUDGET_FIELDS: Final = {
    "name": "metadata.name",
    "scope": "spec.scope",
    "limit_usd": "spec.monthlyLimit",
    "team": "metadata.namespace",
    "timezone": "spec.timeZone",
    "thresholds": "spec.alerts",
    "action": "spec.enforcement.action",
    "throttle": "spec.enforcement.throttle",
    "grace_s": "spec.enforcement.gracePeriodMinutes",
    "channels": "spec.alerts",
    "enabled": "spec.enabled",
}
_CHANNEL_FIELDS: Final = {
    "webhook": {"type", "url", "timeoutSeconds"},
    "slack": {"type", "url", "timeoutSeconds"},
    "email": {"type", "to", "host", "port", "from", "starttls", "username", "passwordSecretRef", "timeoutSeconds"},
    "pagerduty": {"type", "url", "routingKeySecretRef", "timeoutSeconds"},
}
_CHANNEL_KEYS: Final = {
    "timeout_s": "timeoutSeconds",
    "routing_key": "routingKeySecretRef",
    "password": "passwordSecretRef",
}


def budget_name(namespace: str, name: str) -> str:
    """The gpufleet budget a CostBudget is: ``<namespace>.<name>``, or a hashed short form past 63
    characters (always valid per :data:`gpufleet.wire.NAME`)."""
    full = f"{namespace}.{name}"
    if len(full) <= 63 and _NAME_RE.fullmatch(full):
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    head = full[:52].rstrip("._-") or "cb"
    out = f"{head}-{digest}"
    assert _NAME_RE.fullmatch(out), out
    return out


# -- CostBudget → BudgetIn --------------------------------------------------------------------------------

_SPEC_FIELDS: Final = ("monthlyLimit", "timeZone", "scope", "alerts", "enforcement", "enabled")


def _scope(spec: Mapping[str, Any], ref: CrRef, owner: str, team_of_namespace: Mapping[str, str], r: CrReader) -> str:
    sc = r.obj(spec.get("scope"), "spec.scope", ("namespaces", "teams", "labels", "experimentID"))
    chosen: list[str] = []
    if "namespaces" in sc:
        items = r.array(sc["namespaces"], "spec.scope.namespaces", max_items=1, min_items=1)
        ns = r.string(items[0], "spec.scope.namespaces[0]", max_length=63, pattern=DNS_LABEL, what="a namespace name")
        check_namespace_selector(ns, owner, team_of_namespace, r, "spec.scope.namespaces[0]")
        chosen.append(f"namespace:{ns}")
    if "teams" in sc:
        items = r.array(sc["teams"], "spec.scope.teams", max_items=1, min_items=1)
        team = r.string(items[0], "spec.scope.teams[0]", max_length=63, pattern=TEAM_NAME, what="a team name")
        if team != owner:
            raise r.fail(
                "spec.scope.teams[0]",
                f"a CostBudget in namespace '{ref.namespace}' budgets team '{owner}' only, not '{team}'",
            )
        chosen.append(f"team:{team}")
    if "labels" in sc:
        labels = r.labels(sc["labels"], "spec.scope.labels", max_properties=1, min_value_length=1)
        if not labels:
            raise r.fail("spec.scope.labels", "must hold one label (key: value)")
        ((k, v),) = labels.items()
        chosen.append(f"label:{k}={v}")
    if "experimentID" in sc:
        chosen.append(f"experiment:{r.string(sc['experimentID'], 'spec.scope.experimentID')}")
    if len(chosen) > 1:
        raise r.fail(
            "spec.scope",
            f"selects by {' and '.join(chosen)}: a gpufleet budget has one scope (namespaces, teams, labels or "
            "experimentID, one value); make one CostBudget per selector",
        )
    return chosen[0] if chosen else f"namespace:{ref.namespace}"


def _secret(ref: Any, path: str, secrets: Mapping[str, Mapping[str, str]] | None, ns: str, r: CrReader) -> str:
    ref = r.obj(ref, path, ("name", "key"), required=True)
    if "name" not in ref or "key" not in ref:
        raise r.fail(path, "needs name and key")
    name = r.string(ref["name"], f"{path}.name", max_length=253, pattern=DNS_SUBDOMAIN, what="a Secret name")
    key = r.string(ref["key"], f"{path}.key", max_length=253, pattern=SECRET_KEY, what="a Secret key")
    data = (secrets or {}).get(name)
    if data is None or key not in data:
        raise r.fail(path, f"Secret '{name}' with key '{key}' not found in namespace '{ns}'")
    value = data[key].strip()
    if not value:
        raise r.fail(path, f"Secret '{name}' key '{key}' is empty")
    return value


def _channel(
    ch: Any, path: str, secrets: Mapping[str, Mapping[str, str]] | None, ns: str, r: CrReader
) -> dict[str, Any]:
    if not isinstance(ch, Mapping):
        raise r.fail(path, f"must be an object, got {json_kind(ch)}")
    kind = r.enum(ch.get("type"), f"{path}.type", CHANNEL_TYPES)
    ch = r.obj(ch, path, _CHANNEL_FIELDS[kind])
    out: dict[str, Any] = {"type": kind}
    if "url" in ch or kind in ("webhook", "slack"):
        if "url" not in ch:
            raise r.fail(f"{path}.url", f"required for a {kind} channel")
        out["url"] = r.string(ch["url"], f"{path}.url", max_length=2048, pattern=HTTP_URL, what="an http(s) URL")
    if "timeoutSeconds" in ch:
        out["timeout_s"] = r.number(ch["timeoutSeconds"], f"{path}.timeoutSeconds", low=0, high=120, low_open=True)
    if kind == "email":
        for f in ("to", "host", "from"):
            if f not in ch:
                raise r.fail(f"{path}.{f}", "required for an email channel")
        to = r.array(ch["to"], f"{path}.to", max_items=16, min_items=1)
        out["to"] = [r.string(a, f"{path}.to[{i}]", max_length=254, min_length=3) for i, a in enumerate(to)]
        out["host"] = r.string(ch["host"], f"{path}.host", max_length=253)
        out["from"] = r.string(ch["from"], f"{path}.from", max_length=254, min_length=3)
        if "port" in ch:
            out["port"] = int(r.number(ch["port"], f"{path}.port", low=1, high=65535, integer=True))
        if "starttls" in ch:
            out["starttls"] = r.boolean(ch["starttls"], f"{path}.starttls")
        if "username" in ch:
            out["username"] = r.string(ch["username"], f"{path}.username", max_length=254)
        if "passwordSecretRef" in ch:
            out["password"] = _secret(ch["passwordSecretRef"], f"{path}.passwordSecretRef", secrets, ns, r)
    if kind == "pagerduty":
        if "routingKeySecretRef" not in ch:
            raise r.fail(f"{path}.routingKeySecretRef", "required for a pagerduty channel")
        out["routing_key"] = _secret(ch["routingKeySecretRef"], f"{path}.routingKeySecretRef", secrets, ns, r)
    # gpufleet's own checks (addresses, URL forms), with the CR's field names
    from gpufleet.notify.channels import parse_channel

    try:
        parse_channel(out, where=path)
    except InputError as e:
        field = e.field or path
        for theirs, ours in _CHANNEL_KEYS.items():
            field = field.replace(f".{theirs}", f".{ours}")
        raise r.fail(field, e.message.split(": ", 1)[-1]) from None
    return out


def _alerts(
    spec: Mapping[str, Any], ns: str, secrets: Mapping[str, Mapping[str, str]] | None, r: CrReader
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    if "alerts" not in spec:
        return None, []
    items = r.array(spec["alerts"], "spec.alerts", max_items=MAX_ALERTS)
    thresholds: list[dict[str, Any]] = []
    seen: dict[float, int] = {}
    channels: list[dict[str, Any]] | None = None
    channels_from = -1
    for i, a in enumerate(items):
        path = f"spec.alerts[{i}]"
        a = r.obj(a, path, ("threshold", "severity", "channels"), required=True)
        if "threshold" not in a:
            raise r.fail(f"{path}.threshold", "required")
        pct = r.number(a["threshold"], f"{path}.threshold", low=0, high=100, low_open=True)
        if pct in seen:
            raise r.fail(f"{path}.threshold", f"{pct:g} % is already alert [{seen[pct]}]'s threshold")
        seen[pct] = i
        sev = r.enum(a.get("severity", "warning"), f"{path}.severity", SEVERITIES)
        thresholds.append({"percent": pct, "severity": sev})
        if "channels" not in a:
            continue
        chs = r.array(a["channels"], f"{path}.channels", max_items=MAX_CHANNELS)
        parsed = [_channel(c, f"{path}.channels[{j}]", secrets, ns, r) for j, c in enumerate(chs)]
        if channels is None:
            channels, channels_from = parsed, i
        elif parsed != channels:
            raise r.fail(
                f"{path}.channels",
                f"differ from alerts[{channels_from}].channels: a gpufleet budget sends every threshold crossing "
                "to all its channels, so every alert that lists channels must list the same ones (or none)",
            )
    return thresholds, channels or []


def _enforcement(spec: Mapping[str, Any], r: CrReader) -> tuple[str, dict[str, Any] | None, float]:
    enf = r.obj(spec.get("enforcement"), "spec.enforcement", ("action", "gracePeriodMinutes", "throttle"))
    action = r.enum(enf.get("action", "alert"), "spec.enforcement.action", ENFORCEMENT_ACTIONS)
    grace_min = 0.0
    if "gracePeriodMinutes" in enf:
        grace_min = r.number(
            enf["gracePeriodMinutes"], "spec.enforcement.gracePeriodMinutes", low=0, high=527040, integer=True
        )
    throttle: dict[str, Any] | None = None
    if "throttle" in enf:
        th = r.obj(enf["throttle"], "spec.enforcement.throttle", ("priorityClass", "maxGPUs", "spotOnly"))
        throttle = {}
        if "priorityClass" in th:
            throttle["priority"] = r.enum(
                th["priorityClass"], "spec.enforcement.throttle.priorityClass", PRIORITY_CLASSES
            )
        if "maxGPUs" in th:
            throttle["max_gpus"] = r.number(th["maxGPUs"], "spec.enforcement.throttle.maxGPUs", low=0, high=1e6)
        if "spotOnly" in th:
            throttle["spot_only"] = r.boolean(th["spotOnly"], "spec.enforcement.throttle.spotOnly")
    if action == "throttle" and not (
        throttle and (throttle.get("priority") or "max_gpus" in throttle or throttle.get("spot_only"))
    ):
        raise r.fail(
            "spec.enforcement.throttle",
            "action throttle needs throttle: priorityClass, maxGPUs and/or spotOnly: true",
        )
    return action, throttle, grace_min * 60.0


def secret_refs(cr: Any) -> set[tuple[str, str]]:
    """The (Secret name, key) pairs a CostBudget's channels reference, for the controller to read
    (from the CR's namespace) and pass to :func:`budget_in_from_cr`. Never raises: what it cannot
    read, :func:`budget_in_from_cr` refuses."""
    out: set[tuple[str, str]] = set()
    spec = cr.get("spec") if isinstance(cr, Mapping) else None
    alerts = spec.get("alerts") if isinstance(spec, Mapping) else None
    for a in alerts if isinstance(alerts, list) else ():
        chs = a.get("channels") if isinstance(a, Mapping) else None
        for ch in chs if isinstance(chs, list) else ():
            for f in ("passwordSecretRef", "routingKeySecretRef"):
                ref = ch.get(f) if isinstance(ch, Mapping) else None
                if isinstance(ref, Mapping) and isinstance(ref.get("name"), str) and isinstance(ref.get("key"), str):
                    out.add((ref["name"], ref["key"]))
    return out


def budget_in_from_cr(
    cr: Mapping[str, Any],
    team_of_namespace: Mapping[str, str],
    *,
    secrets: Mapping[str, Mapping[str, str]] | None = None,
) -> BudgetIn:
    """The gpufleet budget a ``CostBudget`` is (see the module docstring for the decisions).

    ``team_of_namespace``: namespace → the team that owns it (the CR's namespace must be one).
    ``secrets``: Secret name → its decoded data, of the CR's namespace (those :func:`secret_refs`
    names). Raises :class:`InputError` naming the object and the field; anything gpufleet's own
    budget model refuses is refused here too, with the CR's field name."""
    ref = cr_ref(cr, COST_BUDGET)
    r = CrReader(str(ref))
    spec = r.obj(cr.get("spec"), "spec", _SPEC_FIELDS, required=True)
    owner = cr_owner(ref, team_of_namespace, r)
    if "monthlyLimit" not in spec:
        raise r.fail("spec.monthlyLimit", "required: the limit in USD per month")
    limit = r.number(spec["monthlyLimit"], "spec.monthlyLimit", low=0, high=1e12, low_open=True)
    tz = "UTC"
    if "timeZone" in spec:
        tz = r.string(
            spec["timeZone"], "spec.timeZone", max_length=63, pattern=r"[A-Za-z0-9_+\-/]+", what="a time zone"
        )
        from gpufleet.cost.periods import zone

        try:
            zone(tz)
        except InputError as e:
            raise r.fail("spec.timeZone", e.message.split(": ", 1)[-1]) from None
    scope = _scope(spec, ref, owner, team_of_namespace, r)
    thresholds, channels = _alerts(spec, ref.namespace, secrets, r)
    action, throttle, grace_s = _enforcement(spec, r)
    enabled = r.boolean(spec.get("enabled", True), "spec.enabled")
    fields: dict[str, Any] = {
        "name": budget_name(ref.namespace, ref.name),
        "scope": scope,
        "limit_usd": limit,
        "team": owner,
        "period": "monthly",
        "timezone": tz,
        "thresholds": thresholds,
        "action": action,
        "throttle": throttle,
        "grace_s": grace_s,
        "channels": channels,
        "enabled": enabled,
    }
    from pydantic import ValidationError

    try:
        body = BudgetIn.model_validate(fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        raise r.fail(_BUDGET_FIELDS.get(loc[0], "spec") if loc else "spec", err["msg"]) from None
    _check_model(body, r)
    return body


def _check_model(body: BudgetIn, r: CrReader) -> None:
    """gpufleet's budget model accepts it (what the server would check on create)."""
    from gpufleet.cost.budgets.model import make_budget

    try:
        make_budget(
            id="costbudget",
            name=body.name,
            scope=body.scope,
            limit_usd=body.limit_usd,
            team=body.team,
            timezone=body.timezone,
            thresholds=None if body.thresholds is None else [t.model_dump() for t in body.thresholds],
            action=body.action,
            throttle=None if body.throttle is None else body.throttle.model_dump(),
            grace_s=body.grace_s,
            channels=body.channels,
            enabled=body.enabled,
        )
    except InputError as e:
        field = (e.field or "").split(".")[0].split("[")[0]
        raise r.fail(_BUDGET_FIELDS.get(field, "spec"), e.message.split(": ", 1)[-1]) from None


# -- gpufleet → the CostBudget status subresource ----------------------------------------------------------


def budget_state(status: BudgetStatusOut, thresholds: Sequence[float] | None = None) -> str:
    """``exceeded`` at or past the limit; ``warning`` past the highest threshold below 100 % of
    ``thresholds`` (the budget's percents; None: gpufleet's 50/80/100); else ``ok``."""
    if status.spend_usd + CENT >= status.limit_usd:
        return "exceeded"
    below = [p for p in (DEFAULT_THRESHOLD_PERCENTS if thresholds is None else thresholds) if p < 100.0]
    if below:
        warn_at = max(below)
        if warn_at in status.thresholds_crossed or status.spend_usd + CENT >= status.limit_usd * warn_at / 100.0:
            return "warning"
    return "ok"


def _fired(alerts: Sequence[BudgetAlertOut]) -> list[dict[str, Any]]:
    shown = sorted((a for a in alerts if a.kind in ("threshold", "anomaly")), key=lambda a: a.fired_at)
    out = []
    for a in shown[-MAX_ALERTS_FIRED:]:
        item: dict[str, Any] = {}
        if a.kind == "threshold":
            item["threshold"] = a.threshold
        item.update(
            {"severity": a.severity, "kind": a.kind, "firedAt": rfc3339(a.fired_at), "spend": money(a.spend_usd)}
        )
        out.append(item)
    return out


def cr_status_from(
    status: BudgetStatusOut,
    thresholds: Sequence[float] | None = None,
    *,
    generation: int,
    now: datetime,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``CostBudget`` status subresource body from the gpufleet budget's status.

    ``thresholds``: the budget's threshold percents (``BudgetOut.thresholds``; None: the defaults),
    for ``warning``. ``generation``: the CR's ``metadata.generation`` the budget was made from.
    ``previous``: the CR's current status (keeps conditions' ``lastTransitionTime``)."""
    state = budget_state(status, thresholds)
    exceeded = state == "exceeded"
    pct = status.percent
    summary = (
        f"budget '{status.name}' ({status.scope}): ${status.spend_usd:,.2f} of ${status.limit_usd:,.2f} "
        f"this month ({pct:.1f}%), {state}"
    )
    return {
        "observedGeneration": generation,
        "budgetName": status.name,
        "budgetID": status.budget_id,
        "currentSpend": money(status.spend_usd),
        "percentageUsed": round(pct, 2),
        "budgetStatus": state,
        "projectedMonthlySpend": money(status.projected_usd),
        "remaining": money(status.remaining_usd),
        "daysRemaining": round(max(0.0, status.days_left), 2),
        "periodStart": rfc3339(status.period_start),
        "periodEnd": rfc3339(status.period_end),
        "alertsFired": _fired(status.alerts),
        "enforcementActive": status.enforcing,
        "lastUpdated": rfc3339(now),
        "conditions": [
            ready_condition("Ready", True, "Reconciled", summary, generation, now, previous),
            ready_condition(
                "Exceeded",
                exceeded,
                "OverLimit" if exceeded else "WithinLimit",
                f"spend ${status.spend_usd:,.2f}, limit ${status.limit_usd:,.2f}"
                + (f"; enforcing {status.action}" if status.enforcing else ""),
                generation,
                now,
                previous,
            ),
        ],
    }
