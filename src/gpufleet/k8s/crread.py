"""Reading ``gpufleet.io/v1alpha1`` custom resources, and the status parts all of them share.

Pure (no client, no clock: ``now`` comes in). Used by :mod:`gpufleet.k8s.costbudget` (``CostBudget``)
and :mod:`gpufleet.k8s.attribution` (``CostAttribution``):

- :class:`CrReader` checks a CR's fields (types, ranges, patterns, unknown fields); every failure
  is an :class:`~gpufleet.errors.InputError` naming the object (``CostBudget ml/gpu-month``) and the
  field (``spec.monthlyLimit``), never a crash;
- :func:`cr_ref` checks and returns where a CR is (:class:`CrRef`: kind, namespace, name,
  generation); :func:`cr_owner` and :func:`check_namespace_selector` apply the ownership rule;
- :func:`rfc3339`, :func:`money` and :func:`ready_condition` build status fields;
  :func:`error_status` is the status of a CR the controller could not reconcile.

Decisions:

- **Ownership.** A CR lives in a team's namespace (``team_of_namespace``) and speaks for that team
  only: a namespace it selects may not be another team's, so nobody with write access to one
  namespace can block, throttle or read the spend of another team. A CR in a namespace of no team
  is refused (``metadata.namespace``).
- **Errors.** A bad CR is refused naming the object and the field: the controller writes
  :func:`error_status` (``Ready`` False, reason ``InvalidSpec``) and goes on. Another error (the
  server unavailable, a conflict) keeps the previous figures, the last known.
- **Conditions** are ``metav1.Condition``s; ``lastTransitionTime`` stays the previous one while the
  status is unchanged. Times are ``metav1.Time`` (UTC, seconds); money is USD rounded to cents.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from gpufleet.errors import GpufleetError, InputError

from .crds import COST_BUDGET, DNS_LABEL, DNS_SUBDOMAIN, LABEL_KEY, LABEL_KEY_MAX, LABEL_VALUE, CrdNames
from .vocabulary import GPUFLEET_API

_PRINTABLE_MAX: Final = 255


# -- reading a CR: types, ranges, patterns, with the field's path ----------------------------------------


class CrReader:
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
            raise self.fail(path, f"must be an object, got {json_kind(v)}")
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
            raise self.fail(path, f"must be a string, got {json_kind(v)}")
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
            raise self.fail(path, f"must be {'an integer' if integer else 'a number'}, got {json_kind(v)}")
        x = float(v)
        below = x <= low if low_open else x < low
        if not math.isfinite(x) or below or x > high:
            lo = f"> {low:g}" if low_open else f">= {low:g}"
            raise self.fail(path, f"must be {lo} and <= {high:g}, got {v!r}")
        return x

    def boolean(self, v: Any, path: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(path, f"must be true or false, got {json_kind(v)}")
        return v

    def array(self, v: Any, path: str, *, max_items: int, min_items: int = 0) -> list[Any]:
        if not isinstance(v, list):
            raise self.fail(path, f"must be a list, got {json_kind(v)}")
        if not min_items <= len(v) <= max_items:
            raise self.fail(path, f"must have {min_items}..{max_items} items, got {len(v)}")
        return v

    def labels(self, v: Any, path: str, *, max_properties: int, min_value_length: int = 0) -> dict[str, str]:
        if not isinstance(v, Mapping):
            raise self.fail(path, f"must be a map of label key to value, got {json_kind(v)}")
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


def json_kind(v: Any) -> str:
    """What a JSON value is, in words (``null``, ``a string``, ``an object``), for error messages."""
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
    r = CrReader(f"{names.kind} <unnamed>")
    if not isinstance(cr, Mapping):
        raise r.fail("", f"a {names.kind} is an object, got {json_kind(cr)}")
    meta = cr.get("metadata")
    if not isinstance(meta, Mapping):
        raise r.fail("metadata", "required: an object with namespace and name")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise r.fail("metadata.name", "required")
    r = CrReader(f"{names.kind} {meta.get('namespace') or '<no namespace>'}/{name}")
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
    if api is not None and api != GPUFLEET_API:
        raise r.fail("apiVersion", f"must be {GPUFLEET_API}, got {api!r}")
    if kind is not None and kind != names.kind:
        raise r.fail("kind", f"must be {names.kind}, got {kind!r}")
    return CrRef(names.kind, ns, name, gen)


def cr_owner(ref: CrRef, team_of_namespace: Mapping[str, str], r: CrReader) -> str:
    """The team owning the CR's namespace; a namespace of no team is refused (``metadata.namespace``)."""
    team = team_of_namespace.get(ref.namespace)
    if not team:
        raise r.fail(
            "metadata.namespace",
            f"namespace '{ref.namespace}' belongs to no gpufleet team: a {ref.kind} lives in its team's namespace",
        )
    return team


def check_namespace_selector(ns: str, owner: str, team_of_namespace: Mapping[str, str], r: CrReader, path: str) -> None:
    """Refuse (at ``path``) a namespace selector naming a namespace of a team other than ``owner``."""
    other = team_of_namespace.get(ns)
    if other and other != owner:
        raise r.fail(path, f"namespace '{ns}' belongs to team '{other}', not to '{owner}' (the team of this object)")


# -- status subresources: the parts every kind shares ---------------------------------------------------


def rfc3339(t: datetime) -> str:
    """``2026-01-31T12:00:00Z`` (UTC, seconds: as ``metav1.Time``); a naive time is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def money(x: float | Decimal) -> float:
    """USD as a status shows it: a float rounded to cents."""
    return round(float(x), 2)


def ready_condition(
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
    previous: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """A ``metav1.Condition`` of ``type_`` (``Ready``, or a kind's own such as ``Exceeded``);
    ``lastTransitionTime`` stays the previous one while status is unchanged."""
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


def error_status(
    error: GpufleetError,
    *,
    generation: int,
    now: datetime,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status of a CR the controller could not reconcile: ``Ready`` False with the error.

    A bad spec (:class:`InputError`, reason ``InvalidSpec``) drops the figures: they would be of a
    budget (or query) the spec no longer says. Another error (the server unavailable, a conflict)
    keeps the previous figures, the last known, with ``lastUpdated`` left as it was."""
    invalid = isinstance(error, InputError)
    out: dict[str, Any] = {}
    if not invalid and isinstance(previous, Mapping):
        out.update({k: v for k, v in previous.items() if k not in ("conditions", "observedGeneration")})
    out["observedGeneration"] = generation
    if invalid or "lastUpdated" not in out:
        out["lastUpdated"] = rfc3339(now)
    reason = "InvalidSpec" if invalid else "".join(p.capitalize() for p in error.code.split("_"))
    out["conditions"] = [ready_condition("Ready", False, reason, error.message, generation, now, previous)]
    return out
