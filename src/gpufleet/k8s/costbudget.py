"""``CostBudget`` and ``CostAttribution`` custom resources ↔ gpufleet's budgets and cost reports.

Pure mappings (no client, no clock: ``now`` comes in). The controller reads a CR, calls
:func:`budget_in_from_cr`, creates or replaces the gpufleet budget :func:`budget_name` names (a CR
budget and an API budget are one budget: ``gpufleet budget ls`` shows it), and writes
:func:`cr_status_from` through the status subresource. A bad CR is an
:class:`~gpufleet.errors.InputError` naming the object (``CostBudget ml/gpu-month``) and the field
(``spec.monthlyLimit``), never a crash: the controller writes :func:`error_status` (``Ready`` False,
reason ``InvalidSpec``) and goes on.

Decisions:

- **Ownership.** A CR lives in a team's namespace (``team_of_namespace``) and speaks for that team
  only: its budget belongs to that team (a ``namespace``, ``experiment`` or ``label`` scope counts
  only that team's jobs), ``scope.teams`` may only name that team, and ``scope.namespaces`` may not
  name another team's namespace. So nobody with write access to one namespace can block, throttle
  or read the spend of another team. A CR in a namespace of no team is refused
  (``metadata.namespace``). Cluster-wide budgets (scope ``all``) stay API-only.
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
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from gpufleet.cost.report import COST_CENTER_LABEL, CostReport, Filters, ReportLine
from gpufleet.errors import GpufleetError, InputError
from gpufleet.wire import NAME, BudgetAlertOut, BudgetIn, BudgetStatusOut

from .crds import (
    CHANNEL_TYPES,
    COST_ATTRIBUTION,
    COST_BUDGET,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    ENFORCEMENT_ACTIONS,
    HTTP_URL,
    LABEL_KEY,
    LABEL_KEY_MAX,
    LABEL_VALUE,
    MAX_ALERTS,
    MAX_ALERTS_FIRED,
    MAX_BREAKDOWN,
    MAX_CHANNELS,
    PRIORITY_CLASSES,
    SECRET_KEY,
    SEVERITIES,
    TEAM_NAME,
    CrdNames,
)

DEFAULT_THRESHOLD_PERCENTS: Final = (50.0, 80.0, 100.0)  # gpufleet's defaults (budget_model.DEFAULT_THRESHOLDS)
CENT: Final = 0.005  # the tolerance gpufleet's threshold checks use (budget_status.crossed_thresholds)
BREAKDOWN_DIMENSION: Final = "gpu_model"
_NAME_RE: Final = re.compile(NAME)
_PRINTABLE_MAX: Final = 255
_HOUR: Final = 3600.0
_DAY: Final = 86400.0

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


# -- reading a CR: types, ranges, patterns, with the field's path ----------------------------------------


class _Reader:
    """Checks of one CR's fields; every failure names the object and the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> InputError:
        return InputError(message, source=self.source, field=path)

    def obj(self, v: Any, path: str, allowed: Iterable[str], *, required: bool = False) -> Mapping[str, Any]:
        if v is None:
            if required:
                raise self.fail(path, "required")
            return {}
        if not isinstance(v, Mapping):
            raise self.fail(path, f"must be an object, got {_kind(v)}")
        for k in v:
            if not isinstance(k, str):
                raise self.fail(path, f"field names are strings, got {k!r}")
        unknown = sorted(set(v) - set(allowed))
        if unknown:
            raise self.fail(f"{path}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(allowed))})")
        return v

    def string(
        self,
        v: Any,
        path: str,
        *,
        max_length: int = _PRINTABLE_MAX,
        pattern: str | None = None,
        min_length: int = 1,
        what: str = "",
    ) -> str:
        if not isinstance(v, str):
            raise self.fail(path, f"must be a string, got {_kind(v)}")
        if not min_length <= len(v) <= max_length:
            raise self.fail(path, f"must be {min_length}..{max_length} characters, got {len(v)}")
        if pattern is not None and re.fullmatch(pattern, v) is None:
            raise self.fail(path, f"{v!r} is not {what or 'valid'}")
        if pattern is None and any(not ch.isprintable() for ch in v):
            raise self.fail(path, "must be printable text (no control characters)")
        return v

    def enum(self, v: Any, path: str, allowed: Sequence[str]) -> str:
        if not isinstance(v, str) or v not in allowed:
            raise self.fail(path, f"must be one of {', '.join(allowed)}, got {v!r}")
        return v

    def number(
        self, v: Any, path: str, *, low: float, high: float, low_open: bool = False, integer: bool = False
    ) -> float:
        # an integer written 30.0 is one (as the API server's JSON-Schema validation takes it)
        ok_type = isinstance(v, int) or (isinstance(v, float) and (not integer or v.is_integer()))
        if isinstance(v, bool) or not ok_type:
            raise self.fail(path, f"must be {'an integer' if integer else 'a number'}, got {_kind(v)}")
        x = float(v)
        below = x <= low if low_open else x < low
        if not math.isfinite(x) or below or x > high:
            lo = f"> {low:g}" if low_open else f">= {low:g}"
            raise self.fail(path, f"must be {lo} and <= {high:g}, got {v!r}")
        return x

    def boolean(self, v: Any, path: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(path, f"must be true or false, got {_kind(v)}")
        return v

    def array(self, v: Any, path: str, *, max_items: int, min_items: int = 0) -> list[Any]:
        if not isinstance(v, list):
            raise self.fail(path, f"must be a list, got {_kind(v)}")
        if not min_items <= len(v) <= max_items:
            raise self.fail(path, f"must have {min_items}..{max_items} items, got {len(v)}")
        return v

    def labels(self, v: Any, path: str, *, max_properties: int, min_value_length: int = 0) -> dict[str, str]:
        if not isinstance(v, Mapping):
            raise self.fail(path, f"must be a map of label key to value, got {_kind(v)}")
        if len(v) > max_properties:
            raise self.fail(path, f"at most {max_properties} label(s), got {len(v)}")
        out: dict[str, str] = {}
        for k, val in v.items():
            key = self.string(k, path, max_length=LABEL_KEY_MAX, pattern=LABEL_KEY, what="a label key")
            out[key] = self.string(
                val,
                f"{path}.{key}",
                max_length=63,
                min_length=min_value_length,
                pattern=LABEL_VALUE,
                what="a label value (letters, digits, '-', '_', '.'; alphanumeric at both ends)",
            )
        return out


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}.get(
        type(v), "an object" if isinstance(v, Mapping) else type(v).__name__
    )


@dataclass(frozen=True, slots=True)
class CrRef:
    """Where a CR is: its kind, namespace, name and generation."""

    kind: str
    namespace: str
    name: str
    generation: int

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def cr_ref(cr: Any, names: CrdNames = COST_BUDGET) -> CrRef:
    """The CR's namespace, name and generation, checked (``metadata.namespace``, ``metadata.name``)."""
    r = _Reader(f"{names.kind} <unnamed>")
    if not isinstance(cr, Mapping):
        raise r.fail("", f"a {names.kind} is an object, got {_kind(cr)}")
    meta = cr.get("metadata")
    if not isinstance(meta, Mapping):
        raise r.fail("metadata", "required: an object with namespace and name")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise r.fail("metadata.name", "required")
    r = _Reader(f"{names.kind} {meta.get('namespace') or '<no namespace>'}/{name}")
    r.string(name, "metadata.name", max_length=253, pattern=DNS_SUBDOMAIN, what="a DNS subdomain name")
    ns = meta.get("namespace")
    if not isinstance(ns, str) or not ns:
        raise r.fail("metadata.namespace", f"required: a {names.kind} is namespaced")
    r.string(ns, "metadata.namespace", max_length=63, pattern=DNS_LABEL, what="a namespace name")
    gen = meta.get("generation", 0)
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
        raise r.fail("metadata.generation", f"must be an integer >= 0, got {gen!r}")
    api = cr.get("apiVersion")
    kind = cr.get("kind")
    if api is not None and api != "gpufleet.io/v1alpha1":
        raise r.fail("apiVersion", f"must be gpufleet.io/v1alpha1, got {api!r}")
    if kind is not None and kind != names.kind:
        raise r.fail("kind", f"must be {names.kind}, got {kind!r}")
    return CrRef(names.kind, ns, name, gen)


def _owner(ref: CrRef, team_of_namespace: Mapping[str, str], r: _Reader) -> str:
    team = team_of_namespace.get(ref.namespace)
    if not team:
        raise r.fail(
            "metadata.namespace",
            f"namespace '{ref.namespace}' belongs to no gpufleet team: a {ref.kind} lives in its team's namespace",
        )
    return team


def _check_namespace_selector(ns: str, owner: str, team_of_namespace: Mapping[str, str], r: _Reader, path: str) -> None:
    other = team_of_namespace.get(ns)
    if other and other != owner:
        raise r.fail(path, f"namespace '{ns}' belongs to team '{other}', not to '{owner}' (the team of this object)")


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


def _scope(spec: Mapping[str, Any], ref: CrRef, owner: str, team_of_namespace: Mapping[str, str], r: _Reader) -> str:
    sc = r.obj(spec.get("scope"), "spec.scope", ("namespaces", "teams", "labels", "experimentID"))
    chosen: list[str] = []
    if "namespaces" in sc:
        items = r.array(sc["namespaces"], "spec.scope.namespaces", max_items=1, min_items=1)
        ns = r.string(items[0], "spec.scope.namespaces[0]", max_length=63, pattern=DNS_LABEL, what="a namespace name")
        _check_namespace_selector(ns, owner, team_of_namespace, r, "spec.scope.namespaces[0]")
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


def _secret(ref: Any, path: str, secrets: Mapping[str, Mapping[str, str]] | None, ns: str, r: _Reader) -> str:
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
    ch: Any, path: str, secrets: Mapping[str, Mapping[str, str]] | None, ns: str, r: _Reader
) -> dict[str, Any]:
    if not isinstance(ch, Mapping):
        raise r.fail(path, f"must be an object, got {_kind(ch)}")
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
    spec: Mapping[str, Any], ns: str, secrets: Mapping[str, Mapping[str, str]] | None, r: _Reader
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


def _enforcement(spec: Mapping[str, Any], r: _Reader) -> tuple[str, dict[str, Any] | None, float]:
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
    r = _Reader(str(ref))
    spec = r.obj(cr.get("spec"), "spec", _SPEC_FIELDS, required=True)
    owner = _owner(ref, team_of_namespace, r)
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


def _check_model(body: BudgetIn, r: _Reader) -> None:
    """gpufleet's budget model accepts it (what the server would check on create)."""
    from gpufleet.cost.budget_model import make_budget

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


# -- gpufleet → status subresources -----------------------------------------------------------------------


def rfc3339(t: datetime) -> str:
    """``2026-01-31T12:00:00Z`` (UTC, seconds: as ``metav1.Time``); a naive time is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _money(x: float | Decimal) -> float:
    return round(float(x), 2)


def _condition(
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
    previous: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """A ``metav1.Condition``; ``lastTransitionTime`` stays the previous one while status is unchanged."""
    value = "True" if status else "False"
    since = rfc3339(now)
    prev = previous.get("conditions") if isinstance(previous, Mapping) else None
    for c in prev if isinstance(prev, list) else ():
        if isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == value:
            last = c.get("lastTransitionTime")
            if isinstance(last, str) and last:
                since = last
    return {
        "type": type_,
        "status": value,
        "observedGeneration": generation,
        "lastTransitionTime": since,
        "reason": reason,
        "message": message[:32768],
    }


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
            {"severity": a.severity, "kind": a.kind, "firedAt": rfc3339(a.fired_at), "spend": _money(a.spend_usd)}
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
        "currentSpend": _money(status.spend_usd),
        "percentageUsed": round(pct, 2),
        "budgetStatus": state,
        "projectedMonthlySpend": _money(status.projected_usd),
        "remaining": _money(status.remaining_usd),
        "daysRemaining": round(max(0.0, status.days_left), 2),
        "periodStart": rfc3339(status.period_start),
        "periodEnd": rfc3339(status.period_end),
        "alertsFired": _fired(status.alerts),
        "enforcementActive": status.enforcing,
        "lastUpdated": rfc3339(now),
        "conditions": [
            _condition("Ready", True, "Reconciled", summary, generation, now, previous),
            _condition(
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


def error_status(
    error: GpufleetError,
    *,
    generation: int,
    now: datetime,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status of a CR the controller could not reconcile: ``Ready`` False with the error.

    A bad spec (:class:`InputError`, reason ``InvalidSpec``) drops the figures: they would be of a
    budget the spec no longer says. Another error (the server unavailable, a conflict) keeps the
    previous figures, the last known, with ``lastUpdated`` left as it was."""
    invalid = isinstance(error, InputError)
    out: dict[str, Any] = {}
    if not invalid and isinstance(previous, Mapping):
        out.update({k: v for k, v in previous.items() if k not in ("conditions", "observedGeneration")})
    out["observedGeneration"] = generation
    if invalid or "lastUpdated" not in out:
        out["lastUpdated"] = rfc3339(now)
    reason = "InvalidSpec" if invalid else "".join(p.capitalize() for p in error.code.split("_"))
    out["conditions"] = [_condition("Ready", False, reason, error.message, generation, now, previous)]
    return out


# -- CostAttribution → a cost-report query, and its status ----------------------------------------------

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
    r = _Reader(str(ref))
    spec = r.obj(cr.get("spec", {}), "spec", _ATTRIBUTION_FIELDS)
    owner = _owner(ref, team_of_namespace, r)
    if "team" in spec:
        team = r.string(spec["team"], "spec.team", max_length=63, pattern=TEAM_NAME, what="a team name")
        if team != owner:
            raise r.fail("spec.team", f"a CostAttribution in namespace '{ref.namespace}' covers team '{owner}' only")
    match: dict[str, str] = {}
    if "namespace" in spec:
        ns = r.string(spec["namespace"], "spec.namespace", max_length=63, pattern=DNS_LABEL, what="a namespace name")
        _check_namespace_selector(ns, owner, team_of_namespace, r, "spec.namespace")
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
        {"gpuModel": k, "cost": _money(c), "gpuHours": round(h, 3)}
        for k, (c, h) in sorted(models.items(), key=lambda kv: (-kv[1][0], kv[0]))
    ][:MAX_BREAKDOWN]
    window = query.windows(now.timestamp())["total"]
    generation = query.ref.generation
    return {
        "observedGeneration": generation,
        "team": query.team,
        "totalCost": _money(costs.total),
        "dailyCost": _money(costs.daily),
        "monthlyCost": _money(costs.monthly),
        "hourlyCost": _money(costs.hourly),
        "activePods": active_pods,
        "activeGPUs": round(active_gpus, 3),
        "costPerGPUHour": _money(total_lines / Decimal(repr(gpu_hours))) if gpu_hours > 0 else 0.0,
        "gpuHours": round(gpu_hours, 3),
        "windowStart": rfc3339(datetime.fromtimestamp(window[0], UTC)),
        "breakdown": {
            "gpu": _money(gpu_cost),
            "cpu": _money(sum((row.cpu_cost_usd for row in lines), Decimal("0.00"))),
            "memory": _money(sum((row.memory_cost_usd for row in lines), Decimal("0.00"))),
            "adjustment": _money(sum((row.adjustment_usd for row in lines), Decimal("0.00"))),
            "byGPUModel": by_model,
        },
        "lastUpdated": rfc3339(now),
        "conditions": [
            _condition(
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
