"""Where a job's pods may run: node selectors, required node affinity, taints and tolerations.

Kubernetes semantics, exactly (``k8s.io/component-helpers/scheduling/corev1``: ``nodeaffinity`` and
``helpers.go``; ``k8s.io/api/core/v1`` ``Toleration.ToleratesTaint``), because a pod gpufleet binds
is re-checked by the kubelet, and a placement the kubelet rejects is a failed run:

- ``node_selector``: every pair must be a label of the node, with that value;
- ``required_terms`` (``requiredDuringSchedulingIgnoredDuringExecution``): the terms are ORed, the
  requirements of a term ANDed; a term with no requirement matches no node; ``()`` is no
  requirement at all (the API refuses an empty list of terms, so nothing else can mean that);
- label requirements: ``In`` / ``NotIn`` (a missing label is "not in"), ``Exists`` /
  ``DoesNotExist``, ``Gt`` / ``Lt`` (the label and the value read as 64-bit integers, as Go's
  ``strconv.ParseInt``; a label that is missing or not an integer does not match);
- field requirements (``matchFields``): ``metadata.name`` only, ``In`` / ``NotIn`` one value;
- tolerations: only ``NoSchedule`` and ``NoExecute`` taints keep a pod off a node
  (``PreferNoSchedule`` is a preference); a toleration with an effect matches only that effect, one
  with a key only that key, ``Exists`` any value, ``Equal`` (the default) the same value; an empty
  key with ``Exists`` tolerates every taint.

The one codec between these and their JSON is :func:`constraints_from_dict` /
:func:`constraints_to_dict` (the PodSpec's own shape: ``nodeSelector``, ``affinity.nodeAffinity``,
``tolerations``; the Kubernetes adapter reads and writes pods with it, the store keeps it), and
:func:`taint_from_dict` / :func:`taint_to_dict` for a Node's ``spec.taints``. Bad input raises
:class:`~gpufleet.errors.InputError` naming the field.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from gpufleet.errors import InputError

NODE_NAME_FIELD = "metadata.name"  # the one node field a matchFields requirement may name
_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


# The effects that keep a pod off a node (the scheduler's TaintToleration filter).
KEEPS_OFF: frozenset[TaintEffect] = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})


class TolerationOperator(StrEnum):
    EQUAL = "Equal"
    EXISTS = "Exists"


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


def parse_int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it; None where that fails (spaces,
    underscores, out of range: Python's ``int`` would take the first two)."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    def __post_init__(self) -> None:
        if not self.key:
            raise InputError("a taint needs a key", field="key")
        object.__setattr__(self, "effect", _enum(TaintEffect, self.effect, "effect"))

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # "" with Exists: every key
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None  # None: every effect
    toleration_seconds: int | None = None  # NoExecute: how long the pod stays once tainted; None: forever

    def __post_init__(self) -> None:
        op = _enum(TolerationOperator, self.operator, "operator")
        object.__setattr__(self, "operator", op)
        if self.effect is not None:
            object.__setattr__(self, "effect", _enum(TaintEffect, self.effect, "effect"))
        problem = _toleration_problem(self.key, op, self.value)
        if problem is not None:
            raise InputError(problem[1], field=problem[0])

    def tolerates(self, taint: Taint) -> bool:
        """``Toleration.ToleratesTaint``."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator is TolerationOperator.EXISTS or self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        op = _enum(SelectorOperator, self.operator, "operator")
        object.__setattr__(self, "operator", op)
        object.__setattr__(self, "values", tuple(self.values))
        problem = _requirement_problem(self.key, op, self.values)
        if problem is not None:
            raise InputError(problem[1], field=problem[0])

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Does a node with ``labels`` meet this requirement (``labels.Requirement.Matches``)?"""
        op = self.operator
        value = labels.get(self.key)
        if op is SelectorOperator.IN:
            return value is not None and value in self.values
        if op is SelectorOperator.NOT_IN:
            return value is None or value not in self.values
        if op is SelectorOperator.EXISTS:
            return value is not None
        if op is SelectorOperator.DOES_NOT_EXIST:
            return value is None
        if value is None:
            return False
        left, right = parse_int64(value), parse_int64(self.values[0])
        if left is None or right is None:
            return False
        return left > right if op is SelectorOperator.GT else left < right


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements ANDed: on the node's labels (``matchExpressions``) and on its name
    (``matchFields``). A term with neither matches no node."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def __post_init__(self) -> None:
        for i, r in enumerate(self.match_fields):
            problem = _field_problem(r)
            if problem is not None:
                raise InputError(problem[1], field=f"matchFields[{i}].{problem[0]}")

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        fields = {NODE_NAME_FIELD: node_name}
        return all(r.matches(labels) for r in self.match_expressions) and all(
            r.matches(fields) for r in self.match_fields
        )


def _toleration_problem(key: str, op: TolerationOperator, value: str) -> tuple[str, str] | None:
    """(field, why) a toleration is invalid (the API's validation), else None."""
    if not key and op is not TolerationOperator.EXISTS:
        return "operator", "a toleration without a key must have operator Exists"
    if op is TolerationOperator.EXISTS and value:
        return "value", f"a toleration with operator Exists has no value, got {value!r}"
    return None


def _requirement_problem(key: str, op: SelectorOperator, values: Sequence[str]) -> tuple[str, str] | None:
    """(field, why) a node selector requirement is invalid (``labels.NewRequirement``), else None."""
    if not key:
        return "key", "missing"
    n = len(values)
    if op in (SelectorOperator.IN, SelectorOperator.NOT_IN) and n == 0:
        return "values", f"operator {op} needs at least one value"
    if op in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and n:
        return "values", f"operator {op} takes no values, got {list(values)}"
    if op in (SelectorOperator.GT, SelectorOperator.LT) and (n != 1 or parse_int64(values[0]) is None):
        return "values", f"operator {op} needs one integer value, got {list(values)}"
    return None


def _field_problem(r: NodeSelectorRequirement) -> tuple[str, str] | None:
    """(field, why) a ``matchFields`` requirement is invalid, else None."""
    if r.key != NODE_NAME_FIELD:
        return "key", f"not a node field: {r.key!r} (only {NODE_NAME_FIELD})"
    if r.operator not in (SelectorOperator.IN, SelectorOperator.NOT_IN) or len(r.values) != 1:
        return "operator", f"a node field requirement is In or NotIn with one value, got {r.operator} {list(r.values)}"
    return None


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    """Where a job's pods may run (see the module docstring). Hashable: the snapshot caches the
    nodes that meet each distinct set. Build one from a mapping with :func:`node_constraints`."""

    node_selector: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs
    required_terms: tuple[NodeSelectorTerm, ...] = ()  # ORed; () = no required node affinity
    tolerations: tuple[Toleration, ...] = ()

    def __bool__(self) -> bool:
        """False for no constraint at all (a job that tolerates no taint and may run anywhere else)."""
        return bool(self.node_selector or self.required_terms or self.tolerations)

    @property
    def selects(self) -> bool:
        """Does it narrow nodes by their labels or names (a selector or required affinity)?"""
        return bool(self.node_selector or self.required_terms)


NO_CONSTRAINTS = NodeConstraints()


def node_constraints(
    node_selector: Mapping[str, str] | None = None,
    required_terms: Iterable[NodeSelectorTerm] = (),
    tolerations: Iterable[Toleration] = (),
) -> NodeConstraints:
    """A :class:`NodeConstraints` from a selector mapping (kept sorted: equal sets compare equal)."""
    return NodeConstraints(
        tuple(sorted((str(k), str(v)) for k, v in (node_selector or {}).items())),
        tuple(required_terms),
        tuple(tolerations),
    )


def matches(constraints: NodeConstraints, node_labels: Mapping[str, str], node_name: str) -> bool:
    """Does a node (its labels and name) meet ``constraints``' selector and required affinity?
    (``PodMatchesNodeSelectorAndAffinityTerms``; taints are :func:`tolerates_all`'s.)"""
    for key, value in constraints.node_selector:
        if node_labels.get(key) != value:
            return False
    if not constraints.required_terms:
        return True
    return any(term.matches(node_labels, node_name) for term in constraints.required_terms)


def untolerated(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> Taint | None:
    """The first ``NoSchedule``/``NoExecute`` taint none of ``tolerations`` tolerates, else None
    (``FindMatchingUntoleratedTaint`` with the scheduler's filter)."""
    for taint in taints:
        if taint.effect in KEEPS_OFF and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def tolerates_all(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> bool:
    """Do ``tolerations`` tolerate every taint that keeps pods off (``PreferNoSchedule`` never does)?"""
    return untolerated(tolerations, taints) is None


# -- the PodSpec's JSON ------------------------------------------------------------------------------

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def constraints_from_dict(
    spec: Mapping[str, Any] | None, *, source: str | None = None, at: str = "spec"
) -> NodeConstraints:
    """The constraints of a PodSpec (or of what :func:`constraints_to_dict` wrote): its
    ``nodeSelector``, ``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` and
    ``tolerations``; the rest of the spec is ignored. ``at`` is the spec's path in ``source``, for
    the field an :class:`InputError` names."""
    spec = _obj(spec, at, source)
    if not (spec.get("nodeSelector") or spec.get("affinity") or spec.get("tolerations")):
        return NO_CONSTRAINTS  # the common case (every stored job without constraints): no work
    selector: dict[str, str] = {}
    for k, v in _obj(spec.get("nodeSelector"), f"{at}.nodeSelector", source).items():
        if not isinstance(v, str):
            raise InputError(f"expected a string, got {v!r}", source=source, field=f"{at}.nodeSelector[{k}]")
        selector[str(k)] = v
    affinity = _obj(spec.get("affinity"), f"{at}.affinity", source)
    node_affinity = _obj(affinity.get("nodeAffinity"), f"{at}.affinity.nodeAffinity", source)
    terms: list[NodeSelectorTerm] = []
    path = f"{at}.affinity.nodeAffinity.{_REQUIRED}"
    required = node_affinity.get(_REQUIRED)
    if required is not None:
        raw_terms = _list(_obj(required, path, source).get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms", source)
        if not raw_terms:
            raise InputError("needs at least one term", source=source, field=f"{path}.nodeSelectorTerms")
        terms = [_term(t, f"{path}.nodeSelectorTerms[{i}]", source) for i, t in enumerate(raw_terms)]
    tolerations = [
        _toleration(t, f"{at}.tolerations[{i}]", source)
        for i, t in enumerate(_list(spec.get("tolerations"), f"{at}.tolerations", source))
    ]
    return node_constraints(selector, terms, tolerations)


def constraints_to_dict(c: NodeConstraints) -> dict[str, Any]:
    """The PodSpec fields for ``c`` (only those it sets): what :func:`constraints_from_dict` reads."""
    out: dict[str, Any] = {}
    if c.node_selector:
        out["nodeSelector"] = dict(c.node_selector)
    if c.required_terms:
        terms = [_term_dict(t) for t in c.required_terms]
        out["affinity"] = {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": terms}}}
    if c.tolerations:
        out["tolerations"] = [toleration_to_dict(t) for t in c.tolerations]
    return out


def toleration_to_dict(t: Toleration) -> dict[str, Any]:
    """A toleration as a PodSpec lists it (only the fields it sets, operator always)."""
    out: dict[str, Any] = {}
    if t.key:
        out["key"] = t.key
    out["operator"] = str(t.operator)
    if t.value:
        out["value"] = t.value
    if t.effect is not None:
        out["effect"] = str(t.effect)
    if t.toleration_seconds is not None:
        out["tolerationSeconds"] = t.toleration_seconds
    return out


def taint_from_dict(raw: Any, *, source: str | None = None, at: str = "taint") -> Taint:
    """A Node's taint (``spec.taints[i]``: key, value, effect)."""
    d = _obj(raw, at, source)
    key, value, effect = d.get("key"), d.get("value") or "", d.get("effect")
    if not isinstance(key, str) or not key:
        raise InputError("missing", source=source, field=f"{at}.key")
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {value!r}", source=source, field=f"{at}.value")
    return Taint(key, value, _enum(TaintEffect, effect, f"{at}.effect", source))


def taint_to_dict(t: Taint) -> dict[str, str]:
    out = {"key": t.key}
    if t.value:
        out["value"] = t.value
    out["effect"] = str(t.effect)
    return out


# -- helpers ---------------------------------------------------------------------------------------

E = TypeVar("E", bound=StrEnum)


def _enum(cls: type[E], value: object, fld: str, source: str | None = None) -> E:
    if isinstance(value, cls):
        return value
    if isinstance(value, str) and value in cls._value2member_map_:
        return cls(value)
    raise InputError(f"not one of {', '.join(cls)}: {value!r}", source=source, field=fld)


def _obj(value: Any, fld: str, source: str | None) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"expected an object, got {type(value).__name__}", source=source, field=fld)
    return value


def _list(value: Any, fld: str, source: str | None) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"expected a list, got {type(value).__name__}", source=source, field=fld)
    return value


def _str(value: Any, fld: str, source: str | None) -> str:
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {value!r}", source=source, field=fld)
    return value


def _requirement(raw: Any, at: str, source: str | None) -> NodeSelectorRequirement:
    d = _obj(raw, at, source)
    key = _str(d.get("key") or "", f"{at}.key", source)
    op = _enum(SelectorOperator, d.get("operator"), f"{at}.operator", source)
    values = tuple(
        _str(v, f"{at}.values[{j}]", source) for j, v in enumerate(_list(d.get("values"), f"{at}.values", source))
    )
    problem = _requirement_problem(key, op, values)
    if problem is not None:
        raise InputError(problem[1], source=source, field=f"{at}.{problem[0]}")
    return NodeSelectorRequirement(key, op, values)


def _term(raw: Any, at: str, source: str | None) -> NodeSelectorTerm:
    d = _obj(raw, at, source)
    exprs = tuple(
        _requirement(r, f"{at}.matchExpressions[{i}]", source)
        for i, r in enumerate(_list(d.get("matchExpressions"), f"{at}.matchExpressions", source))
    )
    fields = tuple(
        _requirement(r, f"{at}.matchFields[{i}]", source)
        for i, r in enumerate(_list(d.get("matchFields"), f"{at}.matchFields", source))
    )
    for i, r in enumerate(fields):
        problem = _field_problem(r)
        if problem is not None:
            raise InputError(problem[1], source=source, field=f"{at}.matchFields[{i}].{problem[0]}")
    return NodeSelectorTerm(exprs, fields)


def _term_dict(t: NodeSelectorTerm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.match_expressions:
        out["matchExpressions"] = [_requirement_dict(r) for r in t.match_expressions]
    if t.match_fields:
        out["matchFields"] = [_requirement_dict(r) for r in t.match_fields]
    return out


def _requirement_dict(r: NodeSelectorRequirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": r.key, "operator": str(r.operator)}
    if r.values:
        out["values"] = list(r.values)
    return out


def _toleration(raw: Any, at: str, source: str | None) -> Toleration:
    d = _obj(raw, at, source)
    key = _str(d.get("key") or "", f"{at}.key", source)
    op = _enum(TolerationOperator, d.get("operator") or TolerationOperator.EQUAL, f"{at}.operator", source)
    value = _str(d.get("value") or "", f"{at}.value", source)
    effect = _enum(TaintEffect, d["effect"], f"{at}.effect", source) if d.get("effect") else None
    seconds = d.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        raise InputError(f"not an integer: {seconds!r}", source=source, field=f"{at}.tolerationSeconds")
    problem = _toleration_problem(key, op, value)
    if problem is not None:
        raise InputError(problem[1], source=source, field=f"{at}.{problem[0]}")
    return Toleration(key, op, value, effect, seconds)
