"""What gpufleet puts in a Kubernetes cluster, checked offline (issue 11).

- every built-in object ``gpufleet k8s policies`` renders (PriorityClass, Namespace, ResourceQuota,
  LimitRange) and both CRDs (as ``apiextensions.k8s.io/v1`` objects) pass ``kubernetes-validate``
  in strict mode for Kubernetes 1.29 and 1.33;
- the CRDs' schemas are structural and bounded, their printer columns point at schema fields, and
  their CEL rules compile;
- sample ``CostBudget`` / ``CostAttribution`` objects are checked against the CRD's
  ``openAPIV3Schema`` the way the API server does: defaults applied, the Kubernetes extensions
  mapped onto JSON Schema (``nullable``, ``x-kubernetes-int-or-string``,
  ``x-kubernetes-preserve-unknown-fields``, ``exclusiveMinimum: true``), unknown fields refused
  (``kubectl``'s default strict field validation) and the ``x-kubernetes-validations`` rules
  evaluated with cel-python;
- a table of bad specs, each refused by the schema AND by :func:`budget_in_from_cr` naming the
  field; a fuzzer checks that the mapping never crashes and agrees with the schema;
- the mapping round trip: CR → ``BudgetIn`` → gpufleet's budget model and status → CR status;
- the CLI commands through Typer's CliRunner.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import celpy
import httpx
import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from celpy.adapter import json_to_cel
from celpy.celtypes import BoolType
from celpy.evaluation import CELEvalError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli.k8s import k8s_app
from gpufleet.cost.budgets.model import make_budget
from gpufleet.cost.budgets.status import budget_status, enforcing
from gpufleet.cost.ledger import Ledger, NodeInterval, UsageSegment
from gpufleet.cost.report import ReportLine
from gpufleet.cost.spend import spend_report
from gpufleet.errors import InputError, NotFoundError
from gpufleet.k8s.attribution import AttributionCosts, attribution_filters_from_cr, attribution_status
from gpufleet.k8s.costbudget import budget_in_from_cr, budget_name, budget_state, cr_status_from, secret_refs
from gpufleet.k8s.crds import (
    COST_ATTRIBUTION,
    COST_BUDGET,
    CRD_NAMES,
    cost_attribution_crd,
    cost_budget_crd,
    crds,
)
from gpufleet.k8s.crread import error_status
from gpufleet.k8s.policies import (
    PRIORITY_VALUES,
    ContainerDefaults,
    TeamLayout,
    gpu_quota,
    namespaces_of_teams,
    policies,
    priority_class_name,
    team_of_namespace,
    teams_from_document,
)
from gpufleet.k8s.vocabulary import GPUFLEET_API
from gpufleet.model.job import PRIORITY_CLASSES
from gpufleet.model.node import CapacityType
from gpufleet.sdk import Client
from gpufleet.wire import NAME, BudgetAlertOut, BudgetStatusOut, TeamOut
from tests.cli.test_cli_client import FakeServer
from tests.support.paths import REPO

K8S_VERSIONS = ("1.29", "1.33")
ROOT = REPO
TEAMS = {"ml": "vision", "ml-batch": "vision", "language": "nlp"}  # namespace → team
SECRETS = {"pagerduty": {"routing-key": "R0UT1NGKEY"}, "smtp": {"password": "hunter2"}}
SLACK = {"type": "slack", "url": "https://hooks.slack.example/T000/B000"}
PAGER = {"type": "pagerduty", "routingKeySecretRef": {"name": "pagerduty", "key": "routing-key"}}
NOW = datetime(2026, 3, 21, 12, 0, tzinfo=UTC)


# -- the API server's view of a CR, offline -------------------------------------------------------------


def to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A Kubernetes structural schema as Draft 7 JSON Schema: ``exclusiveMinimum: true`` (OpenAPI
    3.0) → a number, ``nullable``, ``x-kubernetes-int-or-string``, and unknown fields refused
    unless ``x-kubernetes-preserve-unknown-fields`` (kubectl's strict field validation)."""
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "properties":
            out[k] = {name: to_json_schema(sub) for name, sub in v.items()}
        elif k == "items":
            out[k] = to_json_schema(v)
        elif k == "additionalProperties":
            out[k] = to_json_schema(v) if isinstance(v, dict) else v
        elif k in ("allOf", "anyOf", "oneOf"):
            out[k] = [to_json_schema(s) for s in v]
        elif k == "not":
            out[k] = to_json_schema(v)
        elif k.startswith("x-kubernetes-") or k in ("nullable", "exclusiveMinimum", "exclusiveMaximum"):
            continue
        else:
            out[k] = v
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if node.get(flag) is True:
            out[flag] = out.pop(bound)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("type") == "object" and "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """``value`` with the schema's defaults filled in, as the API server does before validating."""
    if isinstance(value, dict) and schema.get("type") == "object":
        value = dict(value)
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = with_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            value = {k: with_defaults(extra, v) for k, v in value.items()}
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [with_defaults(schema["items"], v) for v in value]
    return value


def _typed(schema: dict[str, Any], value: Any) -> Any:
    """JSON as CEL sees it through the schema: a ``number`` field is a double even if written 50."""
    t = schema.get("type")
    if t == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if t == "object" and isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {
            k: _typed(props[k], v) if k in props else _typed(extra, v) if isinstance(extra, dict) else v
            for k, v in value.items()
        }
    if t == "array" and isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_typed(schema["items"], v) for v in value]
    return value


_CEL = celpy.Environment()


@functools.cache
def cel_program(rule: str) -> celpy.Runner:
    return _CEL.program(_CEL.compile(rule))


def cel_failures(schema: dict[str, Any], value: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, message) of each ``x-kubernetes-validations`` rule ``value`` breaks (an evaluation
    error counts as broken, as on the API server)."""
    out: list[tuple[str, str]] = []
    for v in schema.get("x-kubernetes-validations", ()):
        try:
            ok = cel_program(v["rule"]).evaluate({"self": json_to_cel(_typed(schema, value))})
        except CELEvalError:
            ok = BoolType(False)
        if not (isinstance(ok, BoolType) and bool(ok)):
            out.append((path, v["message"]))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for k, sub in value.items():
            child = props.get(k) if k in props else extra if isinstance(extra, dict) else None
            if child is not None:
                out += cel_failures(child, sub, f"{path}.{k}" if path else k)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, sub in enumerate(value):
            out += cel_failures(schema["items"], sub, f"{path}[{i}]")
    return out


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def schema_errors(crd: dict[str, Any], obj: dict[str, Any]) -> list[tuple[str, str]]:
    """What the API server would refuse of ``obj``: (field path, message) pairs."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    obj = with_defaults(schema, obj)
    validator = jsonschema.Draft7Validator(to_json_schema(schema), format_checker=jsonschema.FormatChecker())
    errors = [(_path(e.absolute_path), e.message) for e in validator.iter_errors(obj)]
    if errors:  # CEL rules run on values that passed the schema
        return errors
    return cel_failures(schema, obj)


def budget_cr(spec: dict[str, Any] | None = None, *, namespace: str = "ml", name: str = "gpu-month") -> dict[str, Any]:
    return {
        "apiVersion": GPUFLEET_API,
        "kind": "CostBudget",
        "metadata": {"name": name, "namespace": namespace, "generation": 3},
        "spec": full_spec() if spec is None else spec,
    }


def full_spec() -> dict[str, Any]:
    """A CostBudget using every field (fresh: tests mutate it)."""
    return copy.deepcopy(
        {
            "monthlyLimit": 5000,
            "timeZone": "Europe/Paris",
            "scope": {"labels": {"app.kubernetes.io/part-of": "resnet"}},
            "alerts": [
                {"threshold": 50, "severity": "info"},
                {"threshold": 80, "severity": "warning", "channels": [SLACK, PAGER]},
                {"threshold": 100, "severity": "critical", "channels": [SLACK, PAGER]},
            ],
            "enforcement": {
                "action": "throttle",
                "gracePeriodMinutes": 30,
                "throttle": {"priorityClass": "low", "maxGPUs": 4, "spotOnly": True},
            },
            "enabled": True,
        }
    )


def attribution_cr(spec: dict[str, Any] | None = None, namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": GPUFLEET_API,
        "kind": "CostAttribution",
        "metadata": {"name": "resnet", "namespace": namespace, "generation": 1},
        "spec": {"namespace": "ml", "costCenter": "42"} if spec is None else spec,
    }


def field_of(e: InputError) -> str:
    assert e.field is not None, e
    return e.field


# -- the CRDs as objects ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_crds_are_valid_customresourcedefinitions(crd: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(crd, version, strict=True)


def test_kubernetes_validate_refuses_a_broken_crd() -> None:
    """The validator is live: a field the CRD API does not have and a wrong type are refused."""
    bad = cost_budget_crd()
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["propertyNames"] = {"pattern": "^a"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.29", strict=True)
    bad = cost_budget_crd()
    bad["spec"]["versions"][0]["served"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.33", strict=True)


def test_crd_names_and_shape() -> None:
    cb, ca = crds()
    assert [c["metadata"]["name"] for c in (cb, ca)] == ["costbudgets.gpufleet.io", "costattributions.gpufleet.io"]
    assert [n.crd_name for n in CRD_NAMES] == ["costbudgets.gpufleet.io", "costattributions.gpufleet.io"]
    for crd, names, short in ((cb, COST_BUDGET, "cb"), (ca, COST_ATTRIBUTION, "ca")):
        spec = crd["spec"]
        assert spec["group"] == "gpufleet.io" and spec["scope"] == "Namespaced"
        assert spec["names"]["kind"] == names.kind and spec["names"]["shortNames"] == [short]
        assert spec["names"]["listKind"] == f"{names.kind}List"
        (v,) = spec["versions"]
        assert (v["name"], v["served"], v["storage"]) == ("v1alpha1", True, True)
        assert v["subresources"] == {"status": {}}
    assert crds() == crds() and crds() is not crds()  # fresh, deterministic


def _schema_at(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for part in json_path.strip(".").split("."):
        node = (node or {}).get("properties", {}).get(part)
    return node


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_printer_columns_point_at_schema_fields(crd: dict[str, Any]) -> None:
    v = crd["spec"]["versions"][0]
    schema = v["schema"]["openAPIV3Schema"]
    cols = v["additionalPrinterColumns"]
    for col in cols:
        if col["jsonPath"] == ".metadata.creationTimestamp":
            assert col["type"] == "date"
            continue
        node = _schema_at(schema, col["jsonPath"])
        assert node is not None, col
        assert col["type"] == node["type"], col
    names = [c["name"] for c in cols if not c.get("priority")]
    if crd["spec"]["names"]["kind"] == "CostBudget":
        assert names == ["Limit", "Spend", "Used %", "Status", "Enforcing", "Age"]
    else:
        assert names == ["Team", "Namespace", "Monthly", "Hourly", "GPUs", "Age"]


FORBIDDEN_IN_STRUCTURAL = ("$ref", "definitions", "patternProperties", "dependencies", "additionalItems", "id")


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for k, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{k}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_schemas_are_structural_and_bounded(crd: dict[str, Any]) -> None:
    """What the API server demands of a v1 CRD schema (structural: every node typed, no
    ``additionalProperties: false``, properties and additionalProperties not together, metadata only
    typed) and what keeps CEL cost estimates low (every string, list and map bounded)."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["metadata"] == {"type": "object"}
    for path, node in _walk(schema):
        assert "type" in node, path
        assert node["type"] in ("object", "array", "string", "number", "integer", "boolean"), path
        for key in FORBIDDEN_IN_STRUCTURAL:
            assert key not in node, (path, key)
        assert node.get("uniqueItems") is not True, path
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if path in (".apiVersion", ".kind"):
            continue
        if node["type"] == "string":
            assert "maxLength" in node or "enum" in node or node.get("format") == "date-time", path
        if node["type"] == "array":
            assert "maxItems" in node and isinstance(node["items"], dict), path
        if node["type"] == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, path
        for bound in ("minimum", "maximum"):
            assert bound not in node or node["type"] in ("number", "integer"), path
        if "default" in node:
            assert path.startswith(".spec"), path


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_cel_rules_compile_and_carry_messages(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = [(p, v) for p, node in _walk(schema) for v in node.get("x-kubernetes-validations", ())]
    for path, v in rules:
        assert set(v) == {"rule", "message"} and v["message"], path
        assert "\\" not in v["rule"], (path, "a backslash in a CEL string literal is an escape")
        cel_program(v["rule"])
    if crd["spec"]["names"]["kind"] == "CostBudget":
        assert {p for p, _ in rules} >= {".spec.scope", ".spec.scope.labels", ".spec.alerts", ".spec.enforcement"}


def test_the_schema_harness_maps_the_kubernetes_extensions() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            "maybe": {"type": "string", "nullable": True, "maxLength": 3},
            "port": {"x-kubernetes-int-or-string": True},
            "free": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    }
    v = jsonschema.Draft7Validator(to_json_schema(schema))
    assert v.is_valid({"n": 1, "maybe": None, "port": "http", "free": {"a": "x", "b": 1}})
    assert v.is_valid({"port": 8080})
    assert not v.is_valid({"n": 0})  # exclusive
    assert not v.is_valid({"port": 1.5})
    assert not v.is_valid({"unknown": 1})  # strict field validation


# -- CostBudget: good and bad specs ------------------------------------------------------------------------


GOOD_SPECS: dict[str, dict[str, Any]] = {
    "full": full_spec(),
    "minimal": {"monthlyLimit": 100},
    "fractional limit": {"monthlyLimit": 1234.56},
    "team scope": {"monthlyLimit": 100, "scope": {"teams": ["vision"]}},
    "namespace scope": {"monthlyLimit": 100, "scope": {"namespaces": ["ml-batch"]}},
    "experiment scope": {"monthlyLimit": 100, "scope": {"experimentID": "exp-42 (lr sweep)"}},
    "block": {"monthlyLimit": 100, "enforcement": {"action": "block", "gracePeriodMinutes": 0}},
    "email": {
        "monthlyLimit": 100,
        "alerts": [
            {
                "threshold": 90,
                "channels": [
                    {
                        "type": "email",
                        "to": ["ml-leads@example.com"],
                        "host": "smtp.example.com",
                        "port": 587,
                        "from": "gpufleet@example.com",
                        "starttls": True,
                        "username": "gpufleet",
                        "passwordSecretRef": {"name": "smtp", "key": "password"},
                    }
                ],
            }
        ],
    },
    "disabled": {"monthlyLimit": 100, "enabled": False},
}


@pytest.mark.parametrize("name", GOOD_SPECS)
def test_good_specs_pass_the_schema_and_map(name: str) -> None:
    cr = budget_cr(copy.deepcopy(GOOD_SPECS[name]))
    assert schema_errors(cost_budget_crd(), cr) == []
    body = budget_in_from_cr(cr, TEAMS, secrets=SECRETS)
    assert body.name == "ml.gpu-month" and body.team == "vision" and body.period == "monthly"


def test_the_full_spec_maps_field_by_field() -> None:
    cr = budget_cr()
    assert secret_refs(cr) == {("pagerduty", "routing-key")}
    body = budget_in_from_cr(cr, TEAMS, secrets=SECRETS)
    assert body.scope == "label:app.kubernetes.io/part-of=resnet"
    assert body.limit_usd == 5000 and body.timezone == "Europe/Paris" and body.enabled
    assert [(t.percent, t.severity) for t in body.thresholds or []] == [
        (50, "info"),
        (80, "warning"),
        (100, "critical"),
    ]
    assert body.action == "throttle" and body.grace_s == 1800
    assert body.throttle is not None and body.throttle.model_dump() == {
        "priority": "low",
        "max_gpus": 4,
        "spot_only": True,
    }
    assert body.channels == [
        {"type": "slack", "url": SLACK["url"]},
        {"type": "pagerduty", "routing_key": "R0UT1NGKEY"},
    ]
    minimal = budget_in_from_cr(budget_cr({"monthlyLimit": 100}), TEAMS)
    assert minimal.scope == "namespace:ml"  # no selector: the CR's own namespace
    assert minimal.thresholds is None and minimal.action == "alert" and minimal.channels == []


BAD = "ml/gpu-month"
# name → (a change to the full spec, the field budget_in_from_cr names, what the schema names)
BAD_SPECS: dict[str, tuple[dict[str, Any], str, str]] = {
    "negative limit": ({"monthlyLimit": -5}, "spec.monthlyLimit", "spec.monthlyLimit"),
    "zero limit": ({"monthlyLimit": 0}, "spec.monthlyLimit", "spec.monthlyLimit"),
    "limit as text": ({"monthlyLimit": "5000"}, "spec.monthlyLimit", "spec.monthlyLimit"),
    "limit past 1e12": ({"monthlyLimit": 2e12}, "spec.monthlyLimit", "spec.monthlyLimit"),
    "no limit": ({"monthlyLimit": None}, "spec.monthlyLimit", "spec"),
    "unknown field": ({"monthlylimit": 5}, "spec.monthlylimit", "spec"),
    "unknown enforcement": ({"enforcement": {"action": "pause"}}, "spec.enforcement.action", "spec.enforcement.action"),
    "throttle without config": (
        {"enforcement": {"action": "throttle"}},
        "spec.enforcement.throttle",
        "spec.enforcement",
    ),
    "throttle that does nothing": (
        {"enforcement": {"action": "throttle", "throttle": {"spotOnly": False}}},
        "spec.enforcement.throttle",
        "spec.enforcement",
    ),
    "unknown priority class": (
        {"enforcement": {"action": "throttle", "throttle": {"priorityClass": "vip"}}},
        "spec.enforcement.throttle.priorityClass",
        "spec.enforcement.throttle.priorityClass",
    ),
    "negative maxGPUs": (
        {"enforcement": {"action": "throttle", "throttle": {"maxGPUs": -1}}},
        "spec.enforcement.throttle.maxGPUs",
        "spec.enforcement.throttle.maxGPUs",
    ),
    "negative grace": (
        {"enforcement": {"gracePeriodMinutes": -1}},
        "spec.enforcement.gracePeriodMinutes",
        "spec.enforcement.gracePeriodMinutes",
    ),
    "fractional grace": (
        {"enforcement": {"gracePeriodMinutes": 1.5}},
        "spec.enforcement.gracePeriodMinutes",
        "spec.enforcement.gracePeriodMinutes",
    ),
    "threshold over 100": ({"alerts": [{"threshold": 150}]}, "spec.alerts[0].threshold", "spec.alerts[0].threshold"),
    "threshold zero": ({"alerts": [{"threshold": 0}]}, "spec.alerts[0].threshold", "spec.alerts[0].threshold"),
    "alert without threshold": ({"alerts": [{"severity": "info"}]}, "spec.alerts[0].threshold", "spec.alerts[0]"),
    "duplicate thresholds": (
        {"alerts": [{"threshold": 80}, {"threshold": 80.0, "severity": "critical"}]},
        "spec.alerts[1].threshold",
        "spec.alerts",
    ),
    "unknown severity": (
        {"alerts": [{"threshold": 80, "severity": "fatal"}]},
        "spec.alerts[0].severity",
        "spec.alerts[0].severity",
    ),
    "too many alerts": (
        {"alerts": [{"threshold": float(i + 1)} for i in range(17)]},
        "spec.alerts",
        "spec.alerts",
    ),
    "bad label key": ({"scope": {"labels": {"-team": "x"}}}, "spec.scope.labels", "spec.scope.labels"),
    "label key too long": ({"scope": {"labels": {"k" * 64: "x"}}}, "spec.scope.labels", "spec.scope.labels"),
    "bad label value": ({"scope": {"labels": {"team": "a b"}}}, "spec.scope.labels.team", "spec.scope.labels.team"),
    "two selectors": (
        {"scope": {"namespaces": ["ml"], "teams": ["vision"]}},
        "spec.scope",
        "spec.scope",
    ),
    "two namespaces": ({"scope": {"namespaces": ["ml", "ml-batch"]}}, "spec.scope.namespaces", "spec.scope.namespaces"),
    "bad namespace name": (
        {"scope": {"namespaces": ["ML_Batch"]}},
        "spec.scope.namespaces[0]",
        "spec.scope.namespaces[0]",
    ),
    "control character in experiment": (
        {"scope": {"experimentID": "exp\x07"}},
        "spec.scope.experimentID",
        "spec.scope.experimentID",
    ),
    "enabled as text": ({"enabled": "yes"}, "spec.enabled", "spec.enabled"),
    "webhook without url": (
        {"alerts": [{"threshold": 80, "channels": [{"type": "webhook"}]}]},
        "spec.alerts[0].channels[0].url",
        "spec.alerts[0].channels[0]",
    ),
    "url not http": (
        {"alerts": [{"threshold": 80, "channels": [{"type": "slack", "url": "ftp://hooks"}]}]},
        "spec.alerts[0].channels[0].url",
        "spec.alerts[0].channels[0].url",
    ),
    "pagerduty without a key": (
        {"alerts": [{"threshold": 80, "channels": [{"type": "pagerduty"}]}]},
        "spec.alerts[0].channels[0].routingKeySecretRef",
        "spec.alerts[0].channels[0]",
    ),
    "unknown channel type": (
        {"alerts": [{"threshold": 80, "channels": [{"type": "carrier-pigeon"}]}]},
        "spec.alerts[0].channels[0].type",
        "spec.alerts[0].channels[0].type",
    ),
    "email field on slack": (
        {"alerts": [{"threshold": 80, "channels": [{**SLACK, "host": "smtp.example.com"}]}]},
        "spec.alerts[0].channels[0].host",
        "spec.alerts[0].channels[0]",
    ),
    "inline routing key": (
        {"alerts": [{"threshold": 80, "channels": [{**PAGER, "routing_key": "abc"}]}]},
        "spec.alerts[0].channels[0].routing_key",
        "spec.alerts[0].channels[0]",
    ),
}


def _bad_cr(change: dict[str, Any]) -> dict[str, Any]:
    spec = full_spec()
    for k, v in change.items():
        if v is None:
            spec.pop(k, None)
        else:
            spec[k] = v
    return budget_cr(spec)


@pytest.mark.parametrize("name", BAD_SPECS)
def test_bad_specs_are_refused_by_the_schema_and_the_mapping(name: str) -> None:
    change, mapping_field, schema_field = BAD_SPECS[name]
    cr = _bad_cr(change)
    errors = schema_errors(cost_budget_crd(), cr)
    assert errors, f"the schema accepts {name}"
    assert any(path == schema_field for path, _ in errors), errors
    with pytest.raises(InputError) as e:
        budget_in_from_cr(cr, TEAMS, secrets=SECRETS)
    assert field_of(e.value) == mapping_field
    assert e.value.message.startswith(f"CostBudget {BAD}, field '{mapping_field}': ")


# Refused by the mapping only: what needs the team layout, the Secrets or the time-zone database.
MAPPING_ONLY: dict[str, tuple[dict[str, Any], str, str]] = {
    "another team": ({"scope": {"teams": ["nlp"]}}, "spec.scope.teams[0]", "budgets team 'vision' only"),
    "another team's namespace": (
        {"scope": {"namespaces": ["language"]}},
        "spec.scope.namespaces[0]",
        "belongs to team 'nlp'",
    ),
    "unknown time zone": ({"timeZone": "Mars/Olympus_Mons"}, "spec.timeZone", "unknown time zone"),
    "alerts with different channels": (
        {"alerts": [{"threshold": 50, "channels": [SLACK]}, {"threshold": 100, "channels": [PAGER]}]},
        "spec.alerts[1].channels",
        "must list the same ones",
    ),
    "missing secret": (
        {"alerts": [{"threshold": 80, "channels": [{**PAGER, "routingKeySecretRef": {"name": "nope", "key": "k"}}]}]},
        "spec.alerts[0].channels[0].routingKeySecretRef",
        "Secret 'nope' with key 'k' not found in namespace 'ml'",
    ),
    "not an email address": (
        {
            "alerts": [
                {
                    "threshold": 80,
                    "channels": [{"type": "email", "to": ["nobody"], "host": "smtp", "from": "gpufleet@example.com"}],
                }
            ]
        },
        "spec.alerts[0].channels[0].to[0]",
        "not an email address",
    ),
}


@pytest.mark.parametrize("name", MAPPING_ONLY)
def test_what_only_the_mapping_can_refuse(name: str) -> None:
    change, field, words = MAPPING_ONLY[name]
    cr = _bad_cr(change)
    assert schema_errors(cost_budget_crd(), cr) == []
    with pytest.raises(InputError) as e:
        budget_in_from_cr(cr, TEAMS, secrets=SECRETS)
    assert field_of(e.value) == field and words in e.value.message, e.value.message


@pytest.mark.parametrize(
    ("cr", "field"),
    [
        (None, ""),
        ([], ""),
        ({"spec": {}}, "metadata"),
        ({"metadata": {"namespace": "ml"}, "spec": {}}, "metadata.name"),
        ({"metadata": {"name": "x"}, "spec": {"monthlyLimit": 1}}, "metadata.namespace"),
        ({"metadata": {"name": "Not_A_Name", "namespace": "ml"}, "spec": {}}, "metadata.name"),
        ({"metadata": {"name": "x", "namespace": "ml", "generation": "3"}, "spec": {}}, "metadata.generation"),
        ({"metadata": {"name": "x", "namespace": "ml"}}, "spec"),
        ({"metadata": {"name": "x", "namespace": "ml"}, "spec": [1]}, "spec"),
        ({"metadata": {"name": "x", "namespace": "scratch"}, "spec": {"monthlyLimit": 1}}, "metadata.namespace"),
        ({"kind": "CostAttribution", "metadata": {"name": "x", "namespace": "ml"}, "spec": {}}, "kind"),
        ({"apiVersion": "gpufleet.io/v1", "metadata": {"name": "x", "namespace": "ml"}, "spec": {}}, "apiVersion"),
    ],
)
def test_malformed_objects_are_input_errors(cr: Any, field: str) -> None:
    with pytest.raises(InputError) as e:
        budget_in_from_cr(cr, TEAMS)
    assert (e.value.field or "") == field


# -- the fuzzer: never a crash, and the schema and the mapping agree ---------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**13) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_words = st.sampled_from(
    [
        "alert",
        "throttle",
        "block",
        "info",
        "critical",
        "vision",
        "nlp",
        "ml",
        "language",
        "slack",
        "email",
        "webhook",
        "pagerduty",
        "UTC",
        "https://x.example/h",
    ]
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


# Where the mapping may refuse what the schema accepts (team layout, Secrets, zones, channel lists,
# addresses and printable text beyond RE2's reach).
_MAPPING_ONLY_FIELDS = ("spec.timeZone", "spec.scope.teams[0]", "spec.scope.namespaces[0]")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_specs_never_crash_the_mapping_and_agree_with_the_schema(data: st.DataObject) -> None:
    spec = full_spec()
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(spec)[1:]
        where = data.draw(st.sampled_from(paths))
        parent: Any = spec
        for p in where[:-1]:
            parent = parent[p]
        value = data.draw(st.one_of(_json, _words, st.just(None)))
        if value is None and isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent[where[-1]] = value
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(["extra", "team", "threshold", "url", "spotOnly"]))] = value
    cr = budget_cr(spec)
    try:
        body = budget_in_from_cr(cr, TEAMS, secrets=SECRETS)
    except InputError as e:
        assert e.field is not None and e.message.startswith("CostBudget ml/gpu-month")
        refused: str | None = e.field
        message = e.message
    else:
        refused = None
        assert _name_ok(body.name)
    schema_refusals = schema_errors(cost_budget_crd(), cr)
    if refused is None:
        assert schema_refusals == [], "the schema refuses what gpufleet accepts"
    elif not schema_refusals:
        assert (
            refused in _MAPPING_ONLY_FIELDS or ".channels" in refused or "printable" in message or "Secret" in message
        ), f"the schema accepts what the mapping refuses: {message}"


def _name_ok(name: str) -> bool:
    import re

    return re.fullmatch(NAME, name) is not None


# -- names ---------------------------------------------------------------------------------------------------


def test_budget_names() -> None:
    assert budget_name("ml", "gpu-month") == "ml.gpu-month"
    long_ns = "n" * 63
    names = {budget_name(long_ns, f"budget-{i}.x") for i in range(50)}
    assert len(names) == 50
    for n in names:
        assert _name_ok(n) and len(n) <= 63
    assert budget_name(long_ns, "budget-1.x") == budget_name(long_ns, "budget-1.x")
    assert budget_name("a", "b" * 253) != budget_name("a", "b" * 252)
    assert _name_ok(budget_name("a" * 51 + "-x", "y"))  # a cut before '-' never ends a name with '-'


# -- the round trip: CR → BudgetIn → gpufleet's budget and status → CR status -------------------------------


def _status_out(body: Any, spend: float, now: datetime, *, over_since: float | None = None) -> BudgetStatusOut:
    budget = make_budget(
        id="b-1",
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
    t = now.timestamp()
    period = budget.period_at(t)
    s = budget_status(budget, period, spend, t, committed_usd=spend)
    alerts = [
        BudgetAlertOut(
            threshold=th.percent,
            severity=th.severity,
            kind="threshold",
            fired_at=now - timedelta(hours=10 - i),
            spend_usd=spend,
            limit_usd=budget.limit_usd,
        )
        for i, th in enumerate(s.crossed)
    ]
    alerts.append(
        BudgetAlertOut(threshold=100, severity="critical", kind="limit", fired_at=now, spend_usd=spend, limit_usd=1)
    )
    return BudgetStatusOut(
        budget_id="b-1",
        name=budget.name,
        scope=str(budget.scope),
        action=budget.action,
        period_start=datetime.fromtimestamp(period.start, UTC),
        period_end=datetime.fromtimestamp(period.end, UTC),
        limit_usd=budget.limit_usd,
        spend_usd=s.spend_usd,
        committed_usd=spend,
        percent=s.percent,
        projected_usd=s.projected_usd,
        remaining_usd=s.remaining_usd,
        days_left=s.days_left,
        thresholds_crossed=[th.percent for th in s.crossed],
        enforcing=enforcing(budget, over_since, t, over=s.over),
        alerts=alerts,
    )


def test_round_trip_cr_to_budget_to_status() -> None:
    cr = budget_cr()
    body = budget_in_from_cr(cr, TEAMS, secrets=SECRETS)
    out = _status_out(body, 4250.0, NOW)
    status = cr_status_from(out, [t.percent for t in body.thresholds or []], generation=3, now=NOW)
    assert schema_errors(cost_budget_crd(), {**cr, "status": status}) == []
    assert status["budgetName"] == "ml.gpu-month" and status["observedGeneration"] == 3
    assert status["currentSpend"] == 4250.0 and status["percentageUsed"] == 85.0
    assert status["budgetStatus"] == "warning" and status["enforcementActive"] is False
    assert status["projectedMonthlySpend"] >= 4250.0 and 0 < status["daysRemaining"] <= 31
    assert status["periodStart"] == "2026-02-28T23:00:00Z"  # March in Europe/Paris
    assert [(a["threshold"], a["severity"]) for a in status["alertsFired"]] == [(50, "info"), (80, "warning")]
    assert status["lastUpdated"] == "2026-03-21T12:00:00Z"
    ready, exceeded = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"], ready["observedGeneration"]) == (
        "Ready",
        "True",
        "Reconciled",
        3,
    )
    assert (exceeded["type"], exceeded["status"]) == ("Exceeded", "False")

    # over the limit, past the grace period: exceeded and enforcing; a transition moves its time only
    later = NOW + timedelta(hours=2)
    over = _status_out(body, 5100.0, later, over_since=NOW.timestamp())
    status2 = cr_status_from(over, [50, 80, 100], generation=4, now=later, previous=status)
    assert schema_errors(cost_budget_crd(), {**cr, "status": status2}) == []
    assert status2["budgetStatus"] == "exceeded" and status2["enforcementActive"] is True
    ready2, exceeded2 = status2["conditions"]
    assert ready2["lastTransitionTime"] == ready["lastTransitionTime"]  # still Ready
    assert exceeded2["status"] == "True" and exceeded2["lastTransitionTime"] == "2026-03-21T14:00:00Z"
    assert "enforcing throttle" in exceeded2["message"]


@pytest.mark.parametrize(
    ("spend", "thresholds", "state"),
    [
        (300, None, "ok"),
        (600, None, "ok"),  # past 50 % (info), below 80 %
        (800, None, "warning"),  # the highest threshold below 100 %
        (999.99, None, "warning"),
        (999.996, None, "exceeded"),  # a cent of tolerance, as gpufleet's thresholds
        (1200, None, "exceeded"),
        (550, [50, 100], "warning"),
        (990, [100], "ok"),  # no threshold below the limit: never warning
        (990, [90, 95, 100], "warning"),
    ],
)
def test_budget_state(spend: float, thresholds: list[float] | None, state: str) -> None:
    body = budget_in_from_cr(budget_cr({"monthlyLimit": 1000}), TEAMS)
    assert budget_state(_status_out(body, spend, NOW), thresholds) == state


def test_error_status() -> None:
    cr = budget_cr({"monthlyLimit": -1})
    with pytest.raises(InputError) as e:
        budget_in_from_cr(cr, TEAMS)
    body = budget_in_from_cr(budget_cr(), TEAMS, secrets=SECRETS)
    good = cr_status_from(_status_out(body, 100.0, NOW), generation=3, now=NOW)
    bad = error_status(e.value, generation=4, now=NOW + timedelta(minutes=1), previous=good)
    assert schema_errors(cost_budget_crd(), {**cr, "spec": {"monthlyLimit": 1}, "status": bad}) == []
    assert set(bad) == {"observedGeneration", "lastUpdated", "conditions"}  # figures of another spec dropped
    (cond,) = bad["conditions"]
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == ("False", "InvalidSpec", 4)
    assert "spec.monthlyLimit" in cond["message"] and "CostBudget ml/gpu-month" in cond["message"]
    down = error_status(NotFoundError("budget 'ml.gpu-month' not found"), generation=3, now=NOW, previous=good)
    assert down["currentSpend"] == good["currentSpend"] and down["lastUpdated"] == good["lastUpdated"]
    assert down["conditions"][0]["reason"] == "NotFound"


# -- CostAttribution ---------------------------------------------------------------------------------------


def _ledger(t0: float) -> Ledger:
    """One 8-GPU node at $32/h (all of it GPU: no CPU or memory), two days; jobs of two teams."""
    led = Ledger()
    od = CapacityType.ON_DEMAND
    led.add_node(NodeInterval("n1", "p", "A100-80GB", 8, 0, 0, od, 32.0, t0, t0 + 2 * 86400))

    def seg(job: str, team: str, ns: str, labels: dict[str, str], gpus: int, hours: float, project: str = "") -> None:
        led.append(
            UsageSegment(
                job_id=job,
                team=team,
                project=project,
                namespace=ns,
                experiment="",
                labels=labels,
                node="n1",
                pool="p",
                gpu_model="A100-80GB",
                capacity_type=od,
                node_hourly_usd=32.0,
                gpu_share=Fraction(gpus),
                cpu_milli=0,
                memory_mib=0,
                start=t0,
                end=t0 + hours * 3600,
            )
        )

    seg("a", "vision", "ml", {"cost-center": "42"}, 2, 10, project="resnet")
    seg("b", "vision", "ml", {"cost-center": "7"}, 1, 10)
    seg("c", "vision", "ml-batch", {"cost-center": "42"}, 1, 10)
    seg("d", "nlp", "ml", {"cost-center": "42"}, 4, 10)  # another team in the same namespace
    return led


def test_attribution_from_a_real_cost_report() -> None:
    t0 = datetime(2026, 3, 20, tzinfo=UTC).timestamp()
    now = datetime.fromtimestamp(t0 + 86400, UTC)
    cr = attribution_cr()
    q = attribution_filters_from_cr(cr, TEAMS)
    assert q.team == "vision" and q.aggregate == ("namespace", "gpu_model")
    assert q.filters.team == "vision" and dict(q.filters.labels) == {"cost-center": "42"}
    led = _ledger(t0)
    windows = q.windows(now.timestamp())
    costs = {}
    for key, (start, end) in windows.items():
        costs[key] = q.cost(spend_report(led, start, end, aggregate=q.aggregate, filters=q.filters))
    start, end = windows["total"]
    lines = q.lines(spend_report(led, start, end, aggregate=q.aggregate, filters=q.filters))
    assert [row.key for row in lines] == [("ml", "A100-80GB")]
    assert costs["total"] == Decimal("80.00")  # job a only: 2 GPUs x 10 h x $4
    status = attribution_status(lines, AttributionCosts(**costs), query=q, active_pods=0, active_gpus=0.0, now=now)
    assert schema_errors(cost_attribution_crd(), {**cr, "status": status}) == []
    assert status["team"] == "vision" and status["totalCost"] == 80.0 and status["monthlyCost"] == 80.0
    assert status["hourlyCost"] == 0.0 and status["dailyCost"] == 80.0
    assert status["costPerGPUHour"] == 4.0 and status["gpuHours"] == 20.0
    assert status["breakdown"]["gpu"] == 80.0 and status["breakdown"]["byGPUModel"] == [
        {"gpuModel": "A100-80GB", "cost": 80.0, "gpuHours": 20.0}
    ]
    assert status["windowStart"] == "2026-02-19T00:00:00Z" and status["observedGeneration"] == 1

    # the whole team (no selector): jobs a, b, c — never team nlp's job d in the same namespace
    whole = attribution_filters_from_cr(attribution_cr({}), TEAMS)
    rep = spend_report(led, start, end, aggregate=whole.aggregate, filters=whole.filters)
    assert whole.cost(rep) == Decimal("160.00")


def test_attribution_status_breaks_down_by_gpu_model() -> None:
    q = attribution_filters_from_cr(attribution_cr({"project": "resnet"}), TEAMS)
    assert q.aggregate == ("project", "gpu_model")

    def line(project: str, model: str, usd: str, gpu_h: float) -> ReportLine:
        d = Decimal(usd)
        return ReportLine((project, model), d, Decimal("1.00"), Decimal("0.50"), d + Decimal("1.50"), gpu_h * 3600)

    rows = [line("resnet", "H100", "100.00", 20), line("resnet", "A100", "300.00", 100), line("bert", "A100", "9", 1)]
    lines = q.lines(rows)
    assert len(lines) == 2
    status = attribution_status(
        lines, AttributionCosts(403, 50, 403, Decimal("2.5")), query=q, active_pods=3, active_gpus=2.5, now=NOW
    )
    assert schema_errors(cost_attribution_crd(), {**attribution_cr({"project": "resnet"}), "status": status}) == []
    assert [m["gpuModel"] for m in status["breakdown"]["byGPUModel"]] == ["A100", "H100"]
    assert status["breakdown"]["cpu"] == 2.0 and status["breakdown"]["memory"] == 1.0
    assert status["costPerGPUHour"] == round(403 / 120, 2) and status["activePods"] == 3
    with pytest.raises(InputError):
        attribution_status(lines, AttributionCosts(0, 0, 0, 0), query=q, active_pods=-1, active_gpus=0, now=NOW)


@pytest.mark.parametrize(
    ("spec", "namespace", "field"),
    [
        ({"team": "nlp"}, "ml", "spec.team"),
        ({"namespace": "language"}, "ml", "spec.namespace"),
        ({"namespace": "Bad"}, "ml", "spec.namespace"),
        ({"retentionDays": 0}, "ml", "spec.retentionDays"),
        ({"retentionDays": 4000}, "ml", "spec.retentionDays"),
        ({"labels": {"a b": "c"}}, "ml", "spec.labels"),
        ({"costCenter": "42", "labels": {"cost-center": "7"}}, "ml", "spec.costCenter"),
        ({"owner": "me"}, "ml", "spec.owner"),
        ({}, "scratch", "metadata.namespace"),
    ],
)
def test_bad_attributions(spec: dict[str, Any], namespace: str, field: str) -> None:
    cr = attribution_cr(spec, namespace=namespace)
    with pytest.raises(InputError) as e:
        attribution_filters_from_cr(cr, TEAMS)
    assert field_of(e.value) == field and f"CostAttribution {namespace}/resnet" in e.value.message
    if field not in ("spec.team", "spec.namespace", "metadata.namespace", "spec.costCenter"):
        assert schema_errors(cost_attribution_crd(), cr), "the schema accepts it"


def test_good_attribution_passes_the_schema() -> None:
    cr = attribution_cr(
        {
            "namespace": "ml",
            "team": "vision",
            "project": "resnet",
            "experimentID": "lr-sweep",
            "costCenter": "42",
            "labels": {"app.kubernetes.io/name": "trainer"},
            "retentionDays": 90,
        }
    )
    assert schema_errors(cost_attribution_crd(), cr) == []
    q = attribution_filters_from_cr(cr, TEAMS)
    assert q.aggregate == ("namespace", "project", "experiment", "gpu_model") and q.retention_days == 90
    assert schema_errors(cost_attribution_crd(), attribution_cr({})) == []  # defaults: retentionDays 30


# -- policies --------------------------------------------------------------------------------------------


def team_out(name: str, quota: dict[str, float], cohort: str | None = None, limit: float | None = None) -> TeamOut:
    return TeamOut(name=name, weight=1.0, cohort=cohort, borrowing_limit_gpus=limit, quota_gpus=quota, used_gpus={})


LAYOUT = [
    team_out("vision", {"A100-80GB": 8, "H100": 4}, "research"),
    team_out("nlp", {"*": 4}, "research", 2),
    team_out("solo", {"A100-80GB": 2.5}),
    team_out("idle", {}),
]


def test_priority_classes() -> None:
    pcs = [o for o in policies(LAYOUT) if o["kind"] == "PriorityClass"]
    assert {p["metadata"]["name"]: p["value"] for p in pcs} == {
        "gpufleet-urgent": 1000,
        "gpufleet-high": 500,
        "gpufleet-normal": 100,
        "gpufleet-low": 50,
        "gpufleet-background": 10,
    }
    assert [p["metadata"]["name"] for p in pcs if p["globalDefault"]] == ["gpufleet-normal"]
    assert all(p["preemptionPolicy"] == "Never" and "gpufleet preempts" in p["description"] for p in pcs)
    # gpufleet's classes, in gpufleet's order, and the names the Job builder uses
    assert set(PRIORITY_VALUES) == set(PRIORITY_CLASSES)
    assert sorted(PRIORITY_VALUES, key=PRIORITY_VALUES.__getitem__) == sorted(
        PRIORITY_CLASSES, key=PRIORITY_CLASSES.__getitem__
    )
    assert [priority_class_name(c) for c in PRIORITY_CLASSES] == [f"gpufleet-{c}" for c in PRIORITY_CLASSES]
    with pytest.raises(InputError):
        priority_class_name("vip")


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_policy_object_is_valid(version: str) -> None:
    layout: list[Any] = [*LAYOUT, TeamLayout("cpu-team", {"*": 1}, quota_cpu_milli=64500, quota_memory_mib=262144)]
    objs = policies(
        layout,
        {"vision": "team-vision"},
        max_gpus_per_container=8,
        defaults=ContainerDefaults(cpu_limit="4", memory_limit="16Gi"),
    )
    assert [o["kind"] for o in objs[:5]] == ["PriorityClass"] * 5
    assert [o["kind"] for o in objs[5:]] == ["Namespace", "ResourceQuota", "LimitRange"] * 5
    for o in objs:
        kubernetes_validate.validate(o, version, strict=True)


def test_kubernetes_validate_refuses_a_broken_policy() -> None:
    pc = policies(LAYOUT)[0]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({**pc, "value": "1000"}, "1.29", strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({**pc, "preemptionPolicy": "Never", "priority": 3}, "1.33", strict=True)


def _by(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"].get("namespace", o["metadata"]["name"]): o for o in objs if o["kind"] == kind}


def test_quotas_and_limit_ranges() -> None:
    objs = policies(LAYOUT, {"vision": "team-vision"}, max_gpus_per_container=4)
    ns = _by(objs, "Namespace")
    assert set(ns) == {"team-vision", "nlp", "solo", "idle"}
    assert ns["team-vision"]["metadata"]["labels"]["gpufleet.io/team"] == "vision"
    quotas = {k: v["spec"]["hard"] for k, v in _by(objs, "ResourceQuota").items()}
    # vision: 8 + 4 nominal, may borrow nlp's '*' 4 (one bucket without --gpu-model): 16
    # nlp: '*' 4 nominal, borrows up to 2 per model of the cohort's A100 and H100: 4 + 2 + 2
    assert quotas == {
        "team-vision": {"requests.nvidia.com/gpu": "16"},
        "nlp": {"requests.nvidia.com/gpu": "8"},
        "solo": {"requests.nvidia.com/gpu": "3"},  # 2.5 rounded up
        "idle": {"requests.nvidia.com/gpu": "0"},  # no quota: no GPUs, as gpufleet admits none
    }
    lr = _by(objs, "LimitRange")["solo"]["spec"]["limits"][0]
    assert lr["type"] == "Container" and lr["max"] == {"nvidia.com/gpu": "4"}
    assert lr["default"] == {"nvidia.com/gpu": "0"}  # no CPU/memory limits unless asked
    assert lr["defaultRequest"] == {"cpu": "250m", "memory": "512Mi", "nvidia.com/gpu": "0"}


def test_time_sliced_gpus_multiply_quota_and_limit() -> None:
    """On time-sliced nodes a pod asks for replicas (a whole GPU is ``replicas`` nvidia.com/gpu, as
    the Kubernetes backend's pods do): the quota and the LimitRange count in replicas too."""
    objs = policies([LAYOUT[2]], max_gpus_per_container=8, gpu_replicas=4)
    assert _by(objs, "ResourceQuota")["solo"]["spec"]["hard"] == {"requests.nvidia.com/gpu": "10"}  # 2.5 x 4
    assert _by(objs, "LimitRange")["solo"]["spec"]["limits"][0]["max"] == {"nvidia.com/gpu": "32"}
    assert (
        "4 nvidia.com/gpu per GPU" in _by(objs, "ResourceQuota")["solo"]["metadata"]["annotations"]["gpufleet.io/note"]
    )
    with pytest.raises(InputError) as e:
        policies([LAYOUT[2]], gpu_replicas=0)
    assert e.value.field == "gpu_replicas"


def test_priority_class_names_match_the_kubernetes_backend() -> None:
    objects = pytest.importorskip("gpufleet.k8s.adapter.objects")
    for c in PRIORITY_CLASSES:
        assert objects.priority_class_name(c) == priority_class_name(c)


def test_gpu_quota_with_the_clusters_models() -> None:
    """With the cluster's models, a '*' quota counts for each model without its own entry (as
    gpufleet's quotas do)."""
    models = ["A100-80GB", "H100", "L4"]
    vision, nlp = LAYOUT[0], LAYOUT[1]
    # nlp: 4 of each model nominal; borrows up to 2 more of A100 and H100, none of L4 (nobody else has any)
    assert gpu_quota(nlp, LAYOUT, models) == (12, 16)
    # vision: A100 min(8+inf, 8+4)=12, H100 4+4=8, L4 0+4=4
    assert gpu_quota(vision, LAYOUT, models) == (12, 24)
    assert gpu_quota(LAYOUT[2], LAYOUT, models) == (2.5, 2.5)


def test_cpu_and_memory_quotas_only_when_the_team_has_them() -> None:
    objs = policies([TeamLayout("cpu-team", {}, quota_cpu_milli=64500, quota_memory_mib=1024), LAYOUT[2]])
    quotas = {k: v["spec"]["hard"] for k, v in _by(objs, "ResourceQuota").items()}
    assert quotas["cpu-team"] == {"requests.nvidia.com/gpu": "0", "requests.cpu": "64500m", "requests.memory": "1024Mi"}
    assert set(quotas["solo"]) == {"requests.nvidia.com/gpu"}


@pytest.mark.parametrize(
    ("teams", "mapping", "field"),
    [
        (["ml.vision"], None, "namespace_of_team.ml.vision"),  # a team name that is no namespace name
        (["a", "b"], {"a": "shared", "b": "shared"}, "namespace_of_team.b"),
        (["a"], {"a": "kube-system"}, "namespace_of_team.a"),
        (["a"], {"typo": "x"}, "namespace_of_team.typo"),
        (["a"], {"a": "Not_OK"}, "namespace_of_team.a"),
    ],
)
def test_bad_namespaces(teams: list[str], mapping: dict[str, str] | None, field: str) -> None:
    with pytest.raises(InputError) as e:
        namespaces_of_teams(teams, mapping)
    assert field_of(e.value) == field
    assert namespaces_of_teams(["ml.vision"], {"ml.vision": "vision"}) == {"ml.vision": "vision"}
    assert team_of_namespace({"vision": "ml"}) == {"ml": "vision"}


def test_bad_limit_range_size() -> None:
    with pytest.raises(InputError):
        policies(LAYOUT, max_gpus_per_container=0)


def test_teams_from_documents() -> None:
    as_listed = [t.model_dump(mode="json") for t in LAYOUT]
    assert [t.name for t in teams_from_document(as_listed)] == ["vision", "nlp", "solo", "idle"]
    profile = {"teams": {"vision": {"weight": 2, "quota": {"A100-80GB": 8}, "cohort": "r", "borrowing_limit": 1}}}
    (t,) = teams_from_document(profile)
    assert (t.name, dict(t.quota_gpus), t.cohort, t.borrowing_limit_gpus) == ("vision", {"A100-80GB": 8.0}, "r", 1.0)
    assert teams_from_document({"teams": {"empty": None}})[0].quota_gpus == {}
    for bad, field in [
        ({"x": 1}, "teams"),
        ([{"name": "Bad Name"}], "teams[0].name"),
        ([{"name": "a", "quota_gpus": {"A100": -1}}], "teams[0].quota_gpus.A100"),
        ([{"name": "a", "quotas": {}}], "teams[0].quotas"),
        ([{"name": "a"}, {"name": "a"}], "teams[1].name"),
        ([{"name": "a", "quota_cpu_milli": 1.5}], "teams[0].quota_cpu_milli"),
    ]:
        with pytest.raises(InputError) as e:
            teams_from_document(bad, source="t.yaml")
        assert field_of(e.value) == field and e.value.source == "t.yaml"


# -- the CLI ------------------------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_crds_prints_one_yaml_stream() -> None:
    res = runner.invoke(k8s_app, ["crds"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("---\n") and res.stdout.count("\n---\n") == 1
    assert list(yaml.safe_load_all(res.stdout)) == crds()


def test_cli_policies_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "teams.yaml"
    f.write_text(yaml.safe_dump({"teams": {"vision": {"quota": {"A100-80GB": 8}}, "nlp": {"quota": {"*": 2}}}}))
    res = runner.invoke(
        k8s_app, ["policies", "--teams-file", str(f), "--namespace", "vision=ml", "--max-gpus-per-container", "4"]
    )
    assert res.exit_code == 0, res.output
    objs = list(yaml.safe_load_all(res.stdout))
    assert [o["kind"] for o in objs].count("ResourceQuota") == 2
    assert _by(objs, "ResourceQuota")["ml"]["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    assert _by(objs, "LimitRange")["nlp"]["spec"]["limits"][0]["max"] == {"nvidia.com/gpu": "4"}
    for o in objs:
        kubernetes_validate.validate(o, "1.33", strict=True)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--teams-file", "{missing}"], "cannot read"),
        (["--teams-file", "{bad}"], "is not YAML or JSON"),
        (["--teams-file", "{good}", "--url", "http://x"], "not both"),
        (["--teams-file", "{good}", "--namespace", "vision"], "TEAM=NAMESPACE"),
        (["--teams-file", "{good}", "--namespace", "ghost=x"], "ghost"),
        (["--teams-file", "{dotted}"], "--namespace TEAM=NAMESPACE"),
    ],
)
def test_cli_policies_errors(tmp_path: Path, args: list[str], words: str) -> None:
    files = {"missing": tmp_path / "nope.yaml", "bad": tmp_path / "bad.yaml", "good": tmp_path / "good.yaml"}
    files["bad"].write_text("teams: [unclosed\n")
    files["good"].write_text(json.dumps([{"name": "vision", "quota_gpus": {"*": 1}}]))
    (tmp_path / "dotted.yaml").write_text(json.dumps([{"name": "ml.vision"}]))
    paths = {**{k: str(v) for k, v in files.items()}, "dotted": str(tmp_path / "dotted.yaml")}
    res = runner.invoke(k8s_app, ["policies", *[a.format(**paths) for a in args]])
    assert res.exit_code == 2, res.output
    assert words in " ".join(res.stderr.split()), res.stderr


def test_cli_policies_from_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeServer()
    fake.teams["beta"] = {
        "name": "beta", "weight": 1.0, "cohort": None, "borrowing_limit_gpus": None,
        "quota_gpus": {"*": 2.0}, "used_gpus": {},
    }  # fmt: skip

    def make_client(url: str | None, token: str | None) -> Client:
        return Client("http://fake", token or "t", transport=httpx.MockTransport(fake), retries=0, backoff=0)

    monkeypatch.setattr(cli_jobs, "make_client", make_client)
    res = runner.invoke(k8s_app, ["policies"])
    assert res.exit_code == 0, res.output
    objs = list(yaml.safe_load_all(res.stdout))
    assert {r.url.path for r in fake.requests} == {"/v1/teams", "/v1/nodes"}
    nodes = fake(httpx.Request("GET", "http://fake/v1/nodes")).json()
    largest = max(n["gpu_count"] for n in nodes)
    lr = _by(objs, "LimitRange")
    assert {ns: v["spec"]["limits"][0]["max"] for ns, v in lr.items()} == {
        ns: {"nvidia.com/gpu": str(largest)} for ns in ("alpha", "beta")
    }
    models = sorted({n["gpu_model"] for n in nodes if n["gpu_count"] > 0})
    hard = _by(objs, "ResourceQuota")["beta"]["spec"]["hard"]["requests.nvidia.com/gpu"]
    assert hard == str(2 * len(models))  # '*' counts for each of the cluster's models
    assert "warning" not in res.stderr

    # a node that time-slices its GPUs: a warning unless --gpu-replicas says how many replicas
    real = fake.__call__

    def shared_nodes(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/nodes":
            return httpx.Response(200, json=[{**n, "sharing": "shared"} for n in nodes])
        return real(req)

    monkeypatch.setattr(
        cli_jobs,
        "make_client",
        lambda url, token: Client(
            "http://fake", "t", transport=httpx.MockTransport(shared_nodes), retries=0, backoff=0
        ),
    )
    res = runner.invoke(k8s_app, ["policies"])
    assert res.exit_code == 0 and "--gpu-replicas" in res.stderr
    res = runner.invoke(k8s_app, ["policies", "--gpu-replicas", "4"])
    assert res.exit_code == 0 and "warning" not in res.stderr
    objs = list(yaml.safe_load_all(res.stdout))
    assert _by(objs, "LimitRange")["beta"]["spec"]["limits"][0]["max"] == {"nvidia.com/gpu": str(4 * largest)}


def test_the_cli_module_imports_light() -> None:
    """Importing the command module loads neither PyYAML, the SDK nor gpufleet.k8s (start-up < 0.3 s)."""
    code = (
        "import sys, json\n"
        "import gpufleet.cli.jobs, gpufleet.cli.render\n"
        "before = set(sys.modules)\n"
        "import gpufleet.cli.k8s\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == ["gpufleet.cli.k8s"]
