"""The Helm chart ``deploy/helm/gpufleet``, rendered by a real ``helm`` (v3.17.1, ``tools/get_helm.py``).

- **Lint and render** — ``helm lint --strict`` and ``helm template`` over a named table of value sets
  (:data:`SCENARIOS`: minimal, external DB, bundled DB, Prometheus Operator on/off with and without
  its API, cert-manager's API, Karpenter, webhook); every rendered built-in object (CRDs included)
  passes ``kubernetes-validate --strict`` for Kubernetes 1.29 to 1.33, CostBudgets the chart's own
  CRD schema (with its CEL rules), the PrometheusRule ``promtool check rules``.
- **Same as the CLI** — ``crds/`` is byte for byte what ``gpufleet k8s crds`` prints; the
  PriorityClasses, Namespaces, ResourceQuotas and LimitRanges equal ``gpufleet k8s policies`` for
  the same teams (cohorts, borrowing, ``*`` quotas, time-slicing, random layouts), and the chart
  refuses the layouts the CLI refuses.
- **values.schema.json** — a bad value fails ``helm template`` naming its path.
- **Security and wiring** — every pod runs non-root with a read-only root filesystem, no privilege
  escalation, no capabilities and the RuntimeDefault seccomp profile; probes hit the app's real
  ``/healthz`` and ``/readyz``; the config file is valid ``gpufleet up`` settings; the database
  URL comes from the right Secret; the webhook port, volume and variables appear only when enabled.
- **Least-privilege RBAC** — every Kubernetes client call in ``src/gpufleet`` is in
  :data:`tests.support.helm.rbac.CALLS` (found in the code, not listed by hand), the rendered ClusterRole and
  Roles grant each in the right place and nothing more, and ``RBAC.md`` says the same.
- **The controller as deployed** — the rendered Deployment's command, environment and config file
  (DB URL and in-cluster credentials substituted) start ``gpufleet up`` against the Kubernetes test
  substrate: it takes the Lease as its pod name, reconciles the chart's CostBudget (status written),
  runs a job, and makes only API requests the rendered RBAC allows.

Without the helm binary these tests fail (``make test`` fetches it), they never skip.
"""

from __future__ import annotations

import base64
import copy
import functools
import importlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kubernetes.client
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.k8s import k8s_app
from gpufleet.k8s.crds import CRD_NAMES, crds
from gpufleet.k8s.policies import ContainerDefaults, policies, teams_from_document
from gpufleet.k8s.vocabulary import GPUFLEET_API, GPUFLEET_GROUP, GPUFLEET_VERSION
from gpufleet.sdk import Client
from gpufleet.server.host import context_settings
from gpufleet.server.settings import load_settings
from tests.k8s.test_k8s_manifests import schema_errors
from tests.support.helm import rbac
from tests.support.helm.chart import (
    CHART,
    NAMESPACE,
    Obj,
    Render,
    fullname,
    helm_binary,
    lint,
    render,
    render_many,
    template,
)
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.jobcontroller import JobController
from tests.support.k8s.kubelet import KubeletConfig
from tests.support.paths import REPO, SRC
from tests.support.serverproc import free_port

PACKAGE_DATA = SRC / "data"


K8S_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33")
FULLNAME = fullname()
PROMETHEUS_API = "monitoring.coreos.com/v1"
CERT_MANAGER_API = "cert-manager.io/v1"
# API groups of Kubernetes itself: their objects must pass kubernetes-validate
BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "policy",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "networking.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "storage.k8s.io",
        "autoscaling",
        "node.k8s.io",
        "certificates.k8s.io",
        "discovery.k8s.io",
    }
)
MY_TEMPLATES = re.compile(r"^(crds/|templates/(?!gpu-stack/|webhook/))")  # this part of the chart (not the others')

TEAMS: dict[str, Any] = {
    "vision": {
        "namespace": "team-vision",
        "weight": 2,
        "quota": {"A100-80GB": 16, "*": 4},
        "cohort": "research",
        "borrowing_limit": 8,
    },
    "nlp": {
        "quota": {"A100-80GB": 8, "H100-80GB": 2.5},
        "cohort": "research",
        "priority_classes": ["normal", "low"],
        "quota_cpu_milli": 1500,
        "quota_memory_mib": 2048,
    },
    "solo": {"quota": {"L4": 3}, "quota_cpu_milli": 64000},
    "idle": {},
}
BUDGET_SPEC: dict[str, Any] = {
    "monthlyLimit": 100,
    "alerts": [{"threshold": 50, "severity": "info"}, {"threshold": 80, "severity": "warning"}],
    "enforcement": {"action": "alert"},
}
EXTERNAL_DB = {"mode": "external", "external": {"existingSecret": "gpufleet-db", "key": "url"}}


@dataclass(frozen=True)
class Scenario:
    values: dict[str, Any]
    api_versions: tuple[str, ...] = ()
    present: frozenset[str] = frozenset()  # kinds that must be rendered
    absent: frozenset[str] = frozenset()  # kinds that must not


def _kinds(*k: str) -> frozenset[str]:
    return frozenset(k)


MONITORING = {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}, "prometheusRule": {"enabled": True}}
SCENARIOS: dict[str, Scenario] = {
    "minimal": Scenario({}, present=_kinds("Deployment", "StatefulSet", "ClusterRole", "PriorityClass")),
    "external-db": Scenario(
        {"database": EXTERNAL_DB}, present=_kinds("Deployment"), absent=_kinds("StatefulSet", "Secret")
    ),
    "bundled-db-teams": Scenario(
        {
            "database": {"mode": "bundled", "bundled": {"persistence": {"size": "20Gi", "storageClassName": "fast"}}},
            "teams": TEAMS,
            "costBudgets": [{"name": "gpu-month", "team": "vision", "spec": BUDGET_SPEC}],
            "policies": {"gpuModels": ["A100-80GB", "H100-80GB", "L4"], "gpuReplicas": 2},
        },
        present=_kinds("StatefulSet", "Secret", "Namespace", "ResourceQuota", "LimitRange", "CostBudget"),
    ),
    "prometheus-operator": Scenario(
        {"database": EXTERNAL_DB, "metrics": MONITORING},
        (PROMETHEUS_API,),
        present=_kinds("ServiceMonitor", "PrometheusRule"),
    ),
    "prometheus-values-no-operator": Scenario(
        {"database": EXTERNAL_DB, "metrics": MONITORING}, absent=_kinds("ServiceMonitor", "PrometheusRule")
    ),
    "prometheus-operator-off": Scenario(
        {"database": EXTERNAL_DB}, (PROMETHEUS_API,), absent=_kinds("ServiceMonitor", "PrometheusRule")
    ),
    "cert-manager": Scenario({"database": EXTERNAL_DB}, (CERT_MANAGER_API,), present=_kinds("Deployment")),
    "cert-manager-webhook-prometheus": Scenario(
        {"database": EXTERNAL_DB, "webhook": {"enabled": True}, "metrics": MONITORING},
        (CERT_MANAGER_API, PROMETHEUS_API),
        present=_kinds("Deployment", "ServiceMonitor", "PrometheusRule"),
    ),
    "webhook-no-cert-manager": Scenario({"database": EXTERNAL_DB, "webhook": {"enabled": True}}),
    "karpenter-secrets-cluster-wide-one-replica": Scenario(
        {
            "kubernetes": {"karpenter": True},
            "rbac": {"secretsClusterWide": True},
            "teams": TEAMS,
            "replicaCount": 1,
            "policies": {"namespaces": False, "priorityClasses": False},
        },
        present=_kinds("ClusterRole", "ResourceQuota"),
        absent=_kinds("PodDisruptionBudget", "Namespace", "PriorityClass"),
    ),
}


@pytest.fixture(scope="module")
def renders() -> dict[str, Render]:
    """Every scenario rendered once, several helm processes at a time."""
    helm_binary()  # fail (not skip) with the way to get it
    got = render_many([(s.values, s.api_versions) for s in SCENARIOS.values()])
    return dict(zip(SCENARIOS, got, strict=True))


def rendered(renders: dict[str, Render], name: str) -> Render:
    r = renders[name]
    assert r.result.ok, f"helm template ({name}) failed:\n{r.error}"
    return r


# -- helm itself ----------------------------------------------------------------------------------------------


def test_helm_is_the_pinned_version() -> None:
    out = subprocess.run([str(helm_binary()), "version", "--short"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("v3.17."), out


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_lint_strict(name: str) -> None:
    result = lint(SCENARIOS[name].values)
    assert result.ok, f"helm lint --strict ({name}):\n{result.stdout}\n{result.stderr}"
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


# -- what each value set renders ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_render(renders: dict[str, Render], name: str) -> None:
    s = SCENARIOS[name]
    r = rendered(renders, name)
    kinds = {o["kind"] for o in r.objects}
    assert s.present <= kinds, f"missing: {s.present - kinds}"
    assert not (s.absent & kinds), f"should not be there: {s.absent & kinds}"
    keys = [(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in r.objects]
    assert len(keys) == len(set(keys)), "an object rendered twice"
    for src, o in r.with_source():
        if MY_TEMPLATES.match(src) and o["kind"] not in (
            "CustomResourceDefinition",
            "PriorityClass",
            "ClusterRole",
            "ClusterRoleBinding",
            "Namespace",
        ):
            assert o["metadata"].get("namespace"), f"{src}: {o['kind']} {o['metadata']['name']} has no namespace"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_builtin_objects_pass_kubernetes_validate(renders: dict[str, Render], name: str) -> None:
    r = rendered(renders, name)
    failures: list[str] = []
    checked = 0
    for src, o in r.with_source():
        group = o["apiVersion"].rpartition("/")[0]
        if group not in BUILTIN_GROUPS:
            assert not MY_TEMPLATES.match(src) or group in ("gpufleet.io", "monitoring.coreos.com"), (src, group)
            continue
        checked += 1
        for v in K8S_VERSIONS:
            if problem := _kubernetes_validate(json.dumps(o, sort_keys=True), v):
                failures.append(f"{src} {o['kind']} {o['metadata']['name']} @ {v}: {problem}")
    assert checked >= 10
    assert not failures, "\n".join(failures)


@functools.cache
def _kubernetes_validate(obj_json: str, version: str) -> str | None:
    """``kubernetes-validate --strict``'s complaint about an object (None: valid), once per distinct
    object and version (scenarios share most objects)."""
    try:
        kubernetes_validate.validate(json.loads(obj_json), version, strict=True)
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
        return str(e)[:400]
    return None


def test_crds_render_as_crds_and_validate(renders: dict[str, Render]) -> None:
    r = rendered(renders, "minimal")
    got = [o for src, o in r.with_source() if src.startswith("crds/")]
    assert got == crds()
    for crd in got:
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        for v in K8S_VERSIONS:
            kubernetes_validate.validate(crd, v, strict=True)


def test_cost_budgets_pass_the_crds_schema(renders: dict[str, Render]) -> None:
    r = rendered(renders, "bundled-db-teams")
    (cb,) = r.kind("CostBudget")
    assert cb["apiVersion"] == GPUFLEET_API and cb["metadata"]["namespace"] == "team-vision"
    assert cb["spec"] == BUDGET_SPEC
    assert schema_errors(crds()[0], cb) == []


def test_crds_folder_is_what_the_cli_prints() -> None:
    out = CliRunner().invoke(k8s_app, ["crds"])
    assert out.exit_code == 0, out.output
    files = sorted((CHART / "crds").glob("*.yaml"))
    assert [f.name for f in files] == ["gpufleet.io.yaml"]
    assert files[0].read_text() == out.stdout, (
        "deploy/helm/gpufleet/crds/gpufleet.io.yaml is not what `gpufleet k8s crds` prints: regenerate it with "
        "`gpufleet k8s crds > deploy/helm/gpufleet/crds/gpufleet.io.yaml`"
    )
    assert [c["metadata"]["name"] for c in crds()] == [n.crd_name for n in CRD_NAMES]


# -- cluster policies: the chart's equal the CLI's -----------------------------------------------------------

POLICY_KINDS = ("PriorityClass", "Namespace", "ResourceQuota", "LimitRange")


def _policy_objects(r: Render, *, kept: bool = False) -> dict[tuple[str, str, str], Obj]:
    """The policy objects by (kind, namespace, name); ``kept``: the chart's, whose Namespaces carry
    Helm's keep annotation (policies.keepNamespaces) besides what the CLI prints: checked, then removed."""
    out: dict[tuple[str, str, str], Obj] = {}
    for o in copy.deepcopy(r.objects):
        if o["kind"] not in POLICY_KINDS:
            continue
        if kept and o["kind"] == "Namespace":
            assert o["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}, o
        out[o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]] = o
    return out


def _cli_policies(tmp: Path, teams: Mapping[str, Any], p: Mapping[str, Any]) -> list[Obj]:
    """``gpufleet k8s policies --teams-file`` for the chart's ``teams`` and ``policies`` values."""
    doc = {"teams": {name: {k: v for k, v in (t or {}).items() if k != "namespace"} for name, t in teams.items()}}
    path = tmp / "teams.yaml"
    path.write_text(yaml.safe_dump(doc))
    args = ["policies", "--teams-file", str(path)]
    for name, t in teams.items():
        if (t or {}).get("namespace"):
            args += ["--namespace", f"{name}={t['namespace']}"]
    for m in p.get("gpuModels", []):
        args += ["--gpu-model", m]
    args += [
        "--gpu-replicas",
        str(p.get("gpuReplicas", 1)),
        "--max-gpus-per-container",
        str(p.get("maxGpusPerContainer", 8)),
    ]
    out = CliRunner().invoke(k8s_app, args)
    assert out.exit_code == 0, out.output
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def _random_layout(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    rnd = random.Random(seed)
    models = ["A100-80GB", "H100-80GB", "L4", "T4"]
    teams: dict[str, Any] = {}
    for i in range(rnd.randint(2, 7)):
        t: dict[str, Any] = {}
        if rnd.random() < 0.8:
            t["quota"] = {
                m: rnd.choice([0, 0.5, 1, 2.25, 3, 8, 16.75]) for m in rnd.sample([*models, "*"], rnd.randint(1, 3))
            }
        if rnd.random() < 0.6:
            t["cohort"] = rnd.choice(["c1", "c2"])
        if rnd.random() < 0.4:
            t["borrowing_limit"] = rnd.choice([0, 0.3, 1, 4.5])
        if rnd.random() < 0.3:
            t["quota_cpu_milli"] = rnd.choice([500, 1000, 2500, 96000])
        if rnd.random() < 0.3:
            t["quota_memory_mib"] = rnd.randint(1, 1 << 20)
        if rnd.random() < 0.3:
            t["namespace"] = f"ns-{i}"
        teams[f"team-{i}.x" if "namespace" in t else f"team-{i}"] = t
    p = {
        "gpuModels": rnd.sample(models, rnd.randint(0, 4)),
        "gpuReplicas": rnd.choice([1, 1, 2, 4]),
        "maxGpusPerContainer": rnd.choice([1, 4, 8]),
    }
    return teams, p


LAYOUTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "cohorts": (TEAMS, {}),
    "exact-models-time-sliced": (
        TEAMS,
        {"gpuModels": ["A100-80GB", "H100-80GB", "L4", "T4"], "gpuReplicas": 3, "maxGpusPerContainer": 4},
    ),
    "fractions": (
        {
            "a": {"quota": {"T4": 0.1}, "cohort": "c"},
            "b": {"quota": {"T4": 0.2}, "cohort": "c", "borrowing_limit": 0.05},
        },
        {},
    ),
    "no-teams": ({}, {}),
    **{f"random-{seed}": _random_layout(seed) for seed in (1, 2, 3, 4)},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_policies_equal_gpufleet_k8s_policies(layout: str, tmp_path: Path) -> None:
    teams, p = LAYOUTS[layout]
    r = render({"teams": teams, "policies": p})
    assert r.result.ok, r.error
    got = _policy_objects(r, kept=True)
    want = _policy_objects(Render(r.result, _cli_policies(tmp_path, teams, p)))
    assert sorted(got) == sorted(want)
    for key, obj in want.items():
        assert got[key] == obj, key
    assert len(r.kind("Namespace")) == len(teams)


def test_policies_container_defaults_equal_the_library() -> None:
    d = {"cpuRequest": "500m", "memoryRequest": "1Gi", "cpuLimit": "2", "memoryLimit": "4Gi"}
    r = render({"teams": TEAMS, "policies": {"containerDefaults": d}})
    assert r.result.ok, r.error
    teams = teams_from_document(
        {"teams": {n: {k: v for k, v in t.items() if k != "namespace"} for n, t in TEAMS.items()}}
    )
    want = policies(teams, {"vision": "team-vision"}, defaults=ContainerDefaults("500m", "1Gi", "2", "4Gi"))
    assert _policy_objects(r, kept=True) == _policy_objects(Render(r.result, want))
    off = render({"teams": TEAMS, "policies": {"keepNamespaces": False}})
    assert all("annotations" not in ns["metadata"] for ns in off.kind("Namespace"))


def test_kubernetes_versions() -> None:
    """Chart.yaml's kubeVersion: 1.29 (the oldest the objects are validated for) and later."""
    for v in K8S_VERSIONS:
        assert template({}, kube_version=f"{v}.0").result.ok, v
    old = template({}, kube_version="1.28.9")
    assert not old.result.ok and "kubeVersion" in old.error, old.error


@pytest.mark.parametrize(
    ("teams", "message"),
    [
        ({"ml_ops": {}}, "teams.ml_ops: 'ml_ops' is not a namespace name"),
        ({"a": {"namespace": "kube-ml"}}, "teams.a.namespace: 'kube-ml' is a Kubernetes system namespace"),
        ({"a": {"namespace": "shared"}, "b": {"namespace": "shared"}}, "teams.b.namespace: 'shared' is team 'a''s"),
    ],
)
def test_policies_refuse_what_the_cli_refuses(teams: dict[str, Any], message: str, tmp_path: Path) -> None:
    r = render({"teams": teams})
    assert not r.result.ok and message in r.error, r.error
    path = tmp_path / "teams.yaml"
    path.write_text(
        yaml.safe_dump({"teams": {n: {k: v for k, v in t.items() if k != "namespace"} for n, t in teams.items()}})
    )
    args = ["policies", "--teams-file", str(path)]
    args += [f"--namespace={n}={t['namespace']}" for n, t in teams.items() if "namespace" in t]
    assert CliRunner().invoke(k8s_app, args).exit_code != 0


# -- values.schema.json ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "path", "message"),
    [
        ({"replicaCount": "two"}, "replicaCount", "Expected: integer"),
        ({"replicaCount": 0}, "replicaCount", "greater than or equal to 1"),
        ({"replicaCas": 2}, "(root)", "Additional property replicaCas is not allowed"),
        ({"database": {"mode": "oracle"}}, "database.mode", "must be one of"),
        ({"database": {"mode": "external"}}, "database.external.existingSecret", "greater than or equal to 1"),
        ({"database": {"bundled": {"persistance": {}}}}, "database.bundled", "Additional property persistance"),
        ({"teams": {"a": {"quota": {"A100-80GB": -1}}}}, "teams.a.quota.A100-80GB", "greater than or equal to 0"),
        ({"teams": {"a": {"quotas": {}}}}, "teams.a", "Additional property quotas"),
        ({"teams": {"a": {"priority_classes": ["vip"]}}}, "teams.a.priority_classes.0", "must be one of"),
        ({"config": {"db": "sqlite:///x"}}, "config", "Property name"),
        ({"kubernetes": {"leaseDurationSeconds": 1}}, "kubernetes.leaseDurationSeconds", "greater than or equal to 3"),
        ({"policies": {"gpuReplicas": 100}}, "policies.gpuReplicas", "less than or equal to 64"),
        ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "metrics.serviceMonitor.interval", "pattern"),
        ({"costBudgets": [{"name": "x"}]}, "costBudgets.0", "spec is required"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_schema_refuses_bad_values(values: dict[str, Any], path: str, message: str) -> None:
    r = template(values)
    assert not r.result.ok, f"{values} rendered"
    lines = [line for line in r.error.splitlines() if line.startswith(f"- {path}:")]
    assert lines and any(message in line for line in lines), r.error


# -- the controller's pod -------------------------------------------------------------------------------------


def _pod_specs(r: Render) -> list[tuple[str, Obj]]:
    return [
        (f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
        for o in r.objects
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")
    ]


def _controller(r: Render) -> Obj:
    pod: Obj = r.one("Deployment", FULLNAME)["spec"]["template"]["spec"]
    return pod


def _container(pod: Obj, name: str = "controller") -> Obj:
    (c,) = [c for c in pod["containers"] if c["name"] == name]
    return dict(c)


def test_every_pod_is_locked_down(renders: dict[str, Render]) -> None:
    for name in ("minimal", "bundled-db-teams", "cert-manager-webhook-prometheus"):
        r = rendered(renders, name)
        for src, o in r.with_source():
            if not MY_TEMPLATES.match(src) or o["kind"] not in ("Deployment", "StatefulSet"):
                continue
            pod = o["spec"]["template"]["spec"]
            where = f"{name}: {o['kind']}/{o['metadata']['name']}"
            assert pod["securityContext"]["runAsNonRoot"] is True, where
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
            for c in [*pod.get("initContainers", []), *pod["containers"]]:
                sc = c["securityContext"]
                assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False, (where, c["name"])
                assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"] == {"drop": ["ALL"]}, (
                    where,
                    c["name"],
                )
                assert sc["seccompProfile"] == {"type": "RuntimeDefault"} and not sc.get("privileged"), (
                    where,
                    c["name"],
                )
                assert c["resources"].get("requests") and c["resources"].get("limits", {}).get("memory"), (
                    where,
                    c["name"],
                )
                if c["name"] != "wait-for-database":  # a socket loop: it writes nothing
                    assert "/tmp" in {m["mountPath"] for m in c.get("volumeMounts", [])}, (where, c["name"])


def test_controller_deployment(renders: dict[str, Render]) -> None:
    r = rendered(renders, "minimal")
    dep = r.one("Deployment", FULLNAME)
    assert dep["spec"]["replicas"] == 2
    pod = _controller(r)
    c = _container(pod)
    assert c["command"] == ["gpufleet"] and c["args"] == ["up", "--config", "/etc/gpufleet/config.yaml"]
    env = {e["name"]: e for e in c["env"]}
    home = env["GPUFLEET_HOME"]["value"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    # GPUFLEET_HOME: writable (an emptyDir) and a folder inside it, so that gpufleet owns it and may
    # chmod it 0700 (the emptyDir's own folder belongs to root in a cluster)
    (outer,) = [m for m in mounts if home.startswith(m + "/")]
    assert "emptyDir" in volumes[mounts[outer]["name"]] and home not in mounts, (home, outer)
    assert env["GPUFLEET_REPLICA"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    cm = mounts["/etc/gpufleet/config.yaml"]
    assert volumes[cm["name"]]["configMap"]["name"] == FULLNAME and cm["subPath"] == "config.yaml"
    assert pod["serviceAccountName"] == FULLNAME and pod["automountServiceAccountToken"] is True
    # the probes hit the app's own routes, on the port the settings listen on
    from gpufleet.api.routes.system import root

    routes = {getattr(route, "path", "") for route in root.routes}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"/healthz", "/readyz", "/metrics"} <= routes
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    settings = yaml.safe_load(r.one("ConfigMap", FULLNAME)["data"]["config.yaml"])
    assert ports == {"http": settings["port"]} and settings["host"] == "0.0.0.0"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["port"] == "http"
    svc = r.one("Service", FULLNAME)
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    pdb = r.one("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


def test_config_is_valid_gpufleet_settings(
    renders: dict[str, Render], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = rendered(renders, "bundled-db-teams")
    path = tmp_path / "config.yaml"
    path.write_text(r.one("ConfigMap", FULLNAME)["data"]["config.yaml"])
    for k in [k for k in os.environ if k.startswith("GPUFLEET_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("GPUFLEET_DB", "postgresql+psycopg://u:p@db/gpufleet")
    s = load_settings(path)
    assert s.backend == "kubernetes" and s.host == "0.0.0.0" and s.kubernetes.kubeconfig is None
    # jobs run in pods: the API asks for no Unix account and hosts every team (control/server.context_settings)
    assert context_settings(s)["run_as_required"] is False and context_settings(s)["single_team"] is False
    role = r.one("Role", f"{FULLNAME}-leader-election")
    assert s.kubernetes.lease_namespace == role["metadata"]["namespace"] == NAMESPACE
    assert [s.kubernetes.lease_name] == role["rules"][1]["resourceNames"]
    assert s.kubernetes.namespaces == {"vision": "team-vision"}
    assert set(s.scheduler.teams) == set(TEAMS)
    vision = s.scheduler.teams["vision"]
    assert (vision.weight, vision.cohort, vision.borrowing_limit) == (2, "research", 8)
    assert s.scheduler.teams["nlp"].priority_classes == ["normal", "low"]


def test_database_from_an_existing_secret(renders: dict[str, Render]) -> None:
    r = rendered(renders, "external-db")
    env = {e["name"]: e for e in _container(_controller(r))["env"]}
    assert env["GPUFLEET_DB"]["valueFrom"] == {"secretKeyRef": {"name": "gpufleet-db", "key": "url"}}
    assert not _controller(r).get("initContainers")
    assert not [o for o in r.objects if "postgresql" in o["metadata"]["name"]]


def test_bundled_database(renders: dict[str, Render]) -> None:
    r = rendered(renders, "bundled-db-teams")
    name = f"{FULLNAME}-postgresql"
    secret = r.one("Secret", name)
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert re.fullmatch(r"[A-Za-z0-9]{32}", data["password"])
    assert data["url"] == f"postgresql+psycopg://gpufleet:{data['password']}@{name}.{NAMESPACE}.svc:5432/gpufleet"
    load_settings(None, db=data["url"])  # a URL gpufleet takes
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    source = (CHART / "templates" / "postgresql.yaml").read_text()
    assert 'lookup "v1" "Secret" .Release.Namespace $name' in source  # the password survives upgrades
    env = {e["name"]: e for e in _container(_controller(r))["env"]}
    assert env["GPUFLEET_DB"]["valueFrom"] == {"secretKeyRef": {"name": name, "key": "url"}}
    sts = r.one("StatefulSet", name)
    pod = sts["spec"]["template"]["spec"]
    pg = _container(pod, "postgresql")
    assert pg["image"] == "postgres:16"
    pg_env = {e["name"]: e for e in pg["env"]}
    assert pg_env["POSTGRES_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": name, "key": "password"}}
    assert pg_env["PGDATA"]["value"].startswith("/var/lib/postgresql/data/")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi" and claim["spec"]["storageClassName"] == "fast"
    svc = r.one("Service", name)
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["selector"] != r.one("Service", FULLNAME)["spec"]["selector"]
    (wait,) = _controller(r)["initContainers"]
    assert wait["command"][-1] == f"{name}.{NAMESPACE}.svc"
    # two renders: a new password each time without a cluster to look the Secret up in
    other = template(SCENARIOS["bundled-db-teams"].values).one("Secret", name)
    assert other["data"]["password"] != secret["data"]["password"]


def test_webhook_wiring(renders: dict[str, Render]) -> None:
    on = _controller(rendered(renders, "webhook-no-cert-manager"))
    off = _controller(rendered(renders, "external-db"))
    c_on, c_off = _container(on), _container(off)
    assert {"name": "webhook", "containerPort": 8443, "protocol": "TCP"} in c_on["ports"]
    assert {p["name"] for p in c_off["ports"]} == {"http"}
    env = {e["name"]: e.get("value") for e in c_on["env"]}
    assert env["GPUFLEET_WEBHOOK__ENABLED"] == "true" and env["GPUFLEET_WEBHOOK__PORT"] == "8443"
    assert env["GPUFLEET_WEBHOOK__CERT_FILE"] == "/etc/gpufleet/webhook-tls/tls.crt"
    assert env["GPUFLEET_WEBHOOK__KEY_FILE"] == "/etc/gpufleet/webhook-tls/tls.key"
    # the registration's failurePolicy and timeout, where the webhook's values give them
    webhook_values = yaml.safe_load((CHART / "values.yaml").read_text())["webhook"]
    if "failurePolicy" in webhook_values:
        assert env["GPUFLEET_WEBHOOK__FAILURE_POLICY"] == webhook_values["failurePolicy"]
    if "timeoutSeconds" in webhook_values:
        assert env["GPUFLEET_WEBHOOK__DEADLINE_S"] == str(max(1, webhook_values["timeoutSeconds"] - 2))
    assert not [e for e in c_off["env"] if e["name"].startswith("GPUFLEET_WEBHOOK")]
    # every Service in front of the controller (the API's, the webhook's) targets a port it has
    names = {p["name"] for p in c_on["ports"]}
    r = rendered(renders, "webhook-no-cert-manager")
    labels = r.one("Deployment", FULLNAME)["spec"]["template"]["metadata"]["labels"]
    fronts = [svc for svc in r.kind("Service") if svc["spec"]["selector"].items() <= labels.items()]
    assert len(fronts) == 2
    for svc in fronts:
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= names, svc["metadata"]["name"]
    mount = next(m for m in c_on["volumeMounts"] if m["name"] == "webhook-tls")
    assert mount == {"name": "webhook-tls", "mountPath": "/etc/gpufleet/webhook-tls", "readOnly": True}
    vol = next(v for v in on["volumes"] if v["name"] == "webhook-tls")
    assert vol == {"name": "webhook-tls", "secret": {"secretName": f"{FULLNAME}-webhook-tls"}}
    assert "webhook-tls" not in {v["name"] for v in off["volumes"]}


# -- Prometheus Operator and Grafana --------------------------------------------------------------------------


def test_service_monitor_scrapes_the_service(renders: dict[str, Render]) -> None:
    r = rendered(renders, "prometheus-operator")
    sm = r.one("ServiceMonitor")
    svc = r.one("Service", FULLNAME)
    assert sm["apiVersion"] == PROMETHEUS_API and sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    ep, dcgm = sm["spec"]["endpoints"]
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]} and ep["path"] == "/metrics"
    assert dcgm["port"] == ep["port"] and dcgm["path"] == "/metrics/dcgm"
    assert ep["honorLabels"] is True and dcgm["honorLabels"] is True  # cost series carry job/namespace/pod


def test_prometheus_rules_pass_promtool(renders: dict[str, Render], tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("GPUFLEET_SKIP_PROMTOOL") == "1":
            pytest.skip("promtool not installed (GPUFLEET_SKIP_PROMTOOL=1)")
        pytest.fail("promtool is not installed: apt-get install prometheus (make test does)", pytrace=False)
    rule = rendered(renders, "prometheus-operator").one("PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    # only metrics the app exports (and Prometheus' own `up`)
    package = SRC / "api" / "metrics"
    source = "".join(p.read_text() for p in sorted(package.glob("*.py")))
    exported = set(re.findall(r'"(gpufleet_\w+)"', source))
    for group in rule["spec"]["groups"]:
        for rl in group["rules"]:
            for metric in re.findall(r"\b(gpufleet_\w+)", rl["expr"]):
                assert any(metric in (m, f"{m}_total", f"{m}_bucket", f"{m}_count", f"{m}_sum") for m in exported), (
                    metric
                )
    assert {rl["alert"] for rl in rule["spec"]["groups"][0]["rules"]} >= {"GpufleetDown", "GpufleetStoreDown"}
    # and the package's own alert rules, group for group
    shipped = yaml.safe_load((PACKAGE_DATA / "prometheus" / "rules" / "gpufleet-alerts.yml").read_text())
    names = {g["name"] for g in shipped["groups"]}
    assert [g for g in rule["spec"]["groups"] if g["name"] in names] == shipped["groups"]


def test_the_chart_ships_the_packages_rules_and_dashboards() -> None:
    """The chart's files/ are the package's rule file and dashboards, byte for byte (a chart cannot
    read outside its folder: these are copies, kept equal here)."""
    rules = PACKAGE_DATA / "prometheus" / "rules" / "gpufleet-alerts.yml"
    assert (CHART / "files" / "rules" / rules.name).read_bytes() == rules.read_bytes()
    dashboards = sorted((PACKAGE_DATA / "grafana" / "dashboards").glob("*.json"))
    assert dashboards
    assert sorted(p.name for p in (CHART / "files" / "dashboards").glob("*.json")) == [p.name for p in dashboards]
    for d in dashboards:
        assert (CHART / "files" / "dashboards" / d.name).read_bytes() == d.read_bytes(), d.name


def test_grafana_dashboards_from_the_files_folder(tmp_path: Path) -> None:
    values = {"grafana": {"dashboards": {"enabled": True, "annotations": {"grafana_folder": "gpufleet"}}}}
    r = render(values)
    assert r.result.ok, r.error
    shipped = sorted((CHART / "files" / "dashboards").glob("*.json"))
    assert len(_dashboards(r)) == len(shipped)
    assert (CHART / "files" / "dashboards" / "README.md").is_file() or shipped
    chart = tmp_path / "gpufleet"
    shutil.copytree(CHART, chart)
    dashboard = {
        "title": "gpufleet: GPUs",
        "panels": [{"type": "timeseries", "targets": [{"expr": "gpufleet_gpus_allocated"}]}],
    }
    (chart / "files" / "dashboards" / "GPU_Overview.json").write_text(json.dumps(dashboard))
    r = template(values, chart=chart)
    assert r.result.ok, r.error
    cm = r.one("ConfigMap", f"{FULLNAME}-dashboard-gpu-overview")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "gpufleet"}
    assert json.loads(cm["data"]["GPU_Overview.json"]) == dashboard
    for v in K8S_VERSIONS:
        kubernetes_validate.validate(cm, v, strict=True)
    assert len(_dashboards(r)) == len(shipped) + 1
    assert not _dashboards(template({}, chart=chart))  # off by default


def _dashboards(r: Render) -> list[Obj]:
    return [o for o in r.kind("ConfigMap") if o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]


# -- RBAC: exactly what the code calls -------------------------------------------------------------------------


def test_every_kubernetes_call_is_in_the_rbac_table() -> None:
    calls, classes = rbac.scan_calls()
    found = {(u.file, u.name) for u in calls}
    new = sorted(found - set(rbac.CALLS))
    assert not new, (
        f"Kubernetes API calls not in tests/support/helm/rbac.py CALLS (and so maybe not granted by the chart): {new}. "
        "Add them there, to deploy/helm/gpufleet/templates/rbac.yaml and to RBAC.md."
    )
    assert not sorted(set(rbac.CALLS) - found), (
        "CALLS lists calls the code no longer makes: remove them (and their RBAC)"
    )
    assert {u.name for u in classes} <= rbac.USED_API_CLASSES, sorted({(u.file, u.name) for u in classes})
    for (file, method), grants in rbac.CALLS.items():
        owners = rbac.client_methods()[method]
        assert owners & rbac.USED_API_CLASSES, (file, method, owners)
        if "CustomObjectsApi" in owners:
            verb, sub = rbac.custom_shape(method)
            assert {g.verb for g in grants} == {verb}, (file, method)
            assert all(("/" in g.resource) == sub for g in grants), (file, method)
            # the groups (the vocabulary's *_GROUP the module names) and plurals are the module's own constants
            module = importlib.import_module("gpufleet." + file.removesuffix(".py").replace("/", "."))
            strings = {v for v in vars(module).values() if isinstance(v, str)} | {n.plural for n in CRD_NAMES}
            for g in grants:
                groups = {v for k, v in vars(module).items() if k.endswith("_GROUP") and isinstance(v, str)}
                assert g.group in groups and g.resource.split("/")[0] in strings, (file, method, g)
        else:
            group, resource, verb = rbac.typed_grant(method)
            watched = {(group, resource, "watch")} if (file, method) in rbac.INFORMED else set()
            assert {g.key() for g in grants} == {(group, resource, verb)} | watched, (file, method)


@pytest.mark.parametrize("karpenter", [False, True])
@pytest.mark.parametrize("cluster_wide_secrets", [False, True])
def test_rendered_rbac_grants_exactly_the_calls(karpenter: bool, cluster_wide_secrets: bool) -> None:
    values = {
        "teams": TEAMS,
        "kubernetes": {"karpenter": karpenter, "leaseName": "lead", "leaseNamespace": "ops"},
        "rbac": {"secretsClusterWide": cluster_wide_secrets},
    }
    r = render(values)
    assert r.result.ok, r.error
    auth = rbac.Authorizer(r.objects, NAMESPACE, FULLNAME)
    team_namespaces = ["team-vision", "nlp", "solo", "idle"]
    needed = rbac.needed(karpenter=karpenter)
    for g in needed:
        if g.scope is rbac.Scope.CLUSTER:
            assert auth.allows(g.group, g.resource, g.verb, "anywhere", "x"), g
        elif g.scope is rbac.Scope.LEASE:
            assert auth.allows(g.group, g.resource, g.verb, "ops", "lead"), g
            assert not auth.allows(g.group, g.resource, g.verb, NAMESPACE, "lead"), g
            if g.verb != "create":
                assert not auth.allows(g.group, g.resource, g.verb, "ops", "another-lease"), g
        else:
            for ns in team_namespaces:
                assert auth.allows(g.group, g.resource, g.verb, ns, "smtp"), (g, ns)
            assert auth.allows(g.group, g.resource, g.verb, "kube-system", "x") is cluster_wide_secrets, g
            assert auth.allows(g.group, g.resource, g.verb, NAMESPACE, "x") is cluster_wide_secrets, g
    extra = auth.triples() - {g.key() for g in needed}
    assert not extra, f"the chart grants what no call needs: {sorted(extra)}"
    if not karpenter:
        assert not [t for t in auth.triples() if t[0] == "karpenter.sh"]
    assert (("", "secrets", "get") in auth.cluster_triples()) is cluster_wide_secrets


def test_rbac_doc_lists_the_calls() -> None:
    rows = rbac.rbac_doc_rows()
    documented: dict[tuple[str, str, str], str] = {}
    for row in rows:
        for group in rbac.doc_cell(row["apigroup"]):
            for resource in rbac.doc_cell(row["resource"]):
                for verb in rbac.doc_cell(row["verbs"]):
                    documented[(group, resource, verb)] = row["source"]
    grants: dict[tuple[str, str, str], set[str]] = {}
    for (file, _), gs in rbac.CALLS.items():
        for g in gs:
            grants.setdefault(g.key(), set()).add(file)
    assert set(documented) == set(grants), f"RBAC.md differs: {sorted(set(documented) ^ set(grants))}"
    for key, files in grants.items():
        assert files == set(rbac.doc_cell(documented[key])), (key, files, documented[key])
    assert all(row["why"] and row["where"] for row in rows)


# -- the controller as the chart deploys it, against the Kubernetes test substrate ---------------------------

CONTROLLER_TOKEN = "chart-serviceaccount-token"
POD_NAME = f"{FULLNAME}-5d8c7b9f4-x2x7q"
LIVE_VALUES: dict[str, Any] = {
    "database": EXTERNAL_DB,
    "teams": {"alpha": {"quota": {"*": 2}}, "beta": {"namespace": "team-beta", "quota": {"*": 2}}},
    "kubernetes": {"leaseDurationSeconds": 4},
    "config": {"budget_interval_s": 0.5, "poll_interval_s": 0.1, "cycle_interval_s": 0.5, "grace_s": 2},
    "costBudgets": [{"name": "gpu-month", "team": "alpha", "spec": BUDGET_SPEC}],
}


class Pod:
    """The controller container of a rendered Deployment, run as a local process: its volumes are
    folders under ``root`` (ConfigMaps written out), its environment resolved as the kubelet would
    (``secrets``: Secret name → data; ``fieldRef``s from ``pod``), and its service-account access
    replaced by ``kubeconfig``."""

    def __init__(self, r: Render, root: Path, secrets: Mapping[str, Mapping[str, str]], kubeconfig: Path) -> None:
        dep = r.one("Deployment", FULLNAME)
        self.spec: Obj = dep["spec"]["template"]["spec"]
        self.container = _container(self.spec)
        configmaps = {o["metadata"]["name"]: o for o in r.kind("ConfigMap")}
        rendered_secrets = {o["metadata"]["name"]: o for o in r.kind("Secret")}
        volumes = {v["name"]: v for v in self.spec["volumes"]}
        self.mounts: list[tuple[str, Path]] = []
        for m in self.container["volumeMounts"]:
            v = volumes[m["name"]]
            base = root / m["name"]
            base.mkdir(parents=True, exist_ok=True)
            if "configMap" in v:
                for key, text in configmaps[v["configMap"]["name"]]["data"].items():
                    (base / key).write_text(text)
            elif "secret" in v:  # a Secret the chart renders (the webhook's certificate)
                for key, b64 in rendered_secrets[v["secret"]["secretName"]]["data"].items():
                    (base / key).write_bytes(base64.b64decode(b64))
            elif "emptyDir" not in v:
                raise AssertionError(f"volume {v} has no local stand-in")
            self.mounts.append((m["mountPath"], base / m["subPath"] if m.get("subPath") else base))
        self.mounts.sort(key=lambda p: -len(p[0]))
        self.argv = [self.local(a) for a in [*self.container["command"], *self.container.get("args", [])]]
        assert self.argv[0] == "gpufleet"
        self.argv[:1] = [sys.executable, "-m", "gpufleet"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "KUBERNETES_"))}
        for e in self.container["env"]:
            if "value" in e:
                env[e["name"]] = self.local(str(e["value"]))
            elif "secretKeyRef" in e["valueFrom"]:
                ref = e["valueFrom"]["secretKeyRef"]
                env[e["name"]] = secrets[ref["name"]][ref["key"]]
            else:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                env[e["name"]] = {"metadata.name": POD_NAME, "metadata.namespace": NAMESPACE}[field]
        # in the cluster: the ServiceAccount's token (no kubeconfig); here: a kubeconfig carrying a token
        env["GPUFLEET_KUBERNETES__KUBECONFIG"] = str(kubeconfig)
        self.port = free_port()
        env["GPUFLEET_PORT"] = str(self.port)  # 8470 may be taken on a shared test machine
        self.webhook_port = free_port()
        if "GPUFLEET_WEBHOOK__PORT" in env:
            env["GPUFLEET_WEBHOOK__PORT"] = str(self.webhook_port)  # likewise 8443
        self.env = env
        self.log = root / "controller.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def local(self, value: str) -> str:
        for mount, path in self.mounts:
            if value == mount or value.startswith(mount + "/"):
                return str(path) + value[len(mount) :]
        return value

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def probe(self, kind: str) -> int:
        get = self.container[kind]["httpGet"]
        port = {p["name"]: p["containerPort"] for p in self.container["ports"]}.get(get["port"], get["port"])
        assert port == 8470
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}{get['path']}", timeout=2.0).status_code
        except httpx.HTTPError:
            return 0

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "in-cluster",
                "clusters": [{"name": "c", "cluster": {"server": url, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "sa", "user": {"token": CONTROLLER_TOKEN}}],
                "contexts": [{"name": "in-cluster", "context": {"cluster": "c", "user": "sa"}}],
            }
        )
    )
    return path


def _wait(what: str, check: Callable[[], Any], timeout: float, pod: Pod) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if pod.proc is not None and pod.proc.poll() is not None:
            raise AssertionError(f"the controller exited ({pod.proc.returncode}) waiting for {what}:\n{pod.output()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{pod.output()}")
        time.sleep(0.1)


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    params: dict[str, str]
    token: str | None


def _requests(cluster: Cluster) -> list[ApiRequest]:
    def collect() -> list[ApiRequest]:
        out = []
        for req in list(cluster.server):
            auth = req.headers.get("Authorization") or req.headers.get("authorization") or ""
            out.append(
                ApiRequest(str(req.method.value), req.url.path, dict(req.params), auth.removeprefix("Bearer ") or None)
            )
        return out

    got: list[ApiRequest] = cluster.call(collect)
    return got


@pytest.fixture
def live_cluster(k8s_cluster_factory: Callable[..., Cluster]) -> Iterator[tuple[Cluster, Any, Any]]:
    c = k8s_cluster_factory(kubelet=KubeletConfig(default_duration_s=1.0, checkpoint_s=0.2))
    client = c.api_client()
    jobs = JobController(client).start()
    c.add_gpu_node("gpu-a")
    yield c, kubernetes.client.CoreV1Api(client), kubernetes.client.CustomObjectsApi(client)
    jobs.stop()
    client.close()  # type: ignore[no-untyped-call]
    assert not jobs.errors, jobs.errors


@pytest.mark.slow
def test_controller_started_from_the_chart_leads_reconciles_and_stays_within_its_rbac(
    tmp_path: Path, live_cluster: tuple[Cluster, Any, Any]
) -> None:
    cluster, core, custom = live_cluster
    r = render(LIVE_VALUES)
    assert r.result.ok, r.error
    # what `helm install` would create first: the namespaces (the chart's own Namespace objects), the CostBudget
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for ns in r.kind("Namespace"):
        core.create_namespace(ns)
    (cb,) = copy.deepcopy(r.kind("CostBudget"))
    ns, name = cb["metadata"]["namespace"], cb["metadata"]["name"]
    custom.create_namespaced_custom_object(GPUFLEET_GROUP, GPUFLEET_VERSION, ns, "costbudgets", cb)

    db = f"sqlite:///{tmp_path / 'store.db'}"
    pod = Pod(r, tmp_path / "pod", {"gpufleet-db": {"url": db}}, _kubeconfig(tmp_path / "kubeconfig", cluster.url))
    assert pod.env["GPUFLEET_DB"] == db and pod.env["GPUFLEET_REPLICA"] == POD_NAME
    pod.start()
    try:
        _wait("/readyz", lambda: pod.probe("readinessProbe") == 200, 60, pod)
        assert pod.probe("livenessProbe") == 200 and pod.probe("startupProbe") == 200
        coordination: Any = kubernetes.client.CoordinationV1Api(core.api_client)

        def holder() -> str | None:
            try:
                lease = coordination.read_namespaced_lease("gpufleet-scheduler", NAMESPACE)
            except kubernetes.client.ApiException:
                return None
            return str(lease.spec.holder_identity) if lease.spec.holder_identity else None

        assert _wait("the Lease", holder, 30, pod) == POD_NAME

        def ready() -> Obj | None:
            obj: Obj = custom.get_namespaced_custom_object(GPUFLEET_GROUP, GPUFLEET_VERSION, ns, "costbudgets", name)
            conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}
            return obj if conds.get("Ready", {}).get("status") == "True" else None

        obj = _wait("the CostBudget's status", ready, 30, pod)
        assert obj["status"]["budgetName"] == f"{ns}.{name}" and obj["status"]["budgetStatus"] == "ok"
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]

        token = (Path(pod.env["GPUFLEET_HOME"]) / "admin.token").read_text().strip()
        with Client(f"http://127.0.0.1:{pod.port}", token, timeout=30.0, retries=8) as sdk:
            job = sdk.submit(command=["python", "train.py"], gpus=1, team="beta", image="acme/train:1", name="j")
            assert sdk.wait(job.id, timeout=60).state == "SUCCEEDED", sdk.get(job.id)
    finally:
        pod.stop()

    # every request the controller made is one the chart's RBAC allows its ServiceAccount
    auth = rbac.Authorizer(r.objects, NAMESPACE, FULLNAME)
    mine = [q for q in _requests(cluster) if q.token == CONTROLLER_TOKEN]
    assert len(mine) > 10
    seen: set[tuple[str, str, str]] = set()
    denied: list[str] = []
    for q in mine:
        group, _, namespace, resource, obj_name, watch = rbac.parse_path(q.path)
        assert resource is not None, q
        verb = rbac.request_verb(q.method, obj_name is not None, watch or q.params.get("watch") in ("true", "1"))
        seen.add((group, resource, verb))
        if not auth.allows(group, resource, verb, namespace, obj_name):
            denied.append(f"{q.method} {q.path} → {verb} {group or 'core'}/{resource} in {namespace} ({obj_name})")
    assert not denied, "requests the chart's RBAC would refuse:\n" + "\n".join(sorted(set(denied)))
    needed = {g.key() for g in rbac.needed(karpenter=False)}
    assert seen <= needed, sorted(seen - needed)
    assert {
        ("coordination.k8s.io", "leases", "create"),
        ("gpufleet.io", "costbudgets/status", "patch"),
        ("batch", "jobs", "create"),
        ("", "pods/binding", "create"),
    } <= seen, sorted(seen)


@pytest.mark.slow
def test_webhook_served_with_the_charts_certificate_mounts(tmp_path: Path, k8s_cluster: Cluster) -> None:
    """webhook.enabled: the controller, started from the rendered Deployment with the rendered
    certificate Secret mounted where the chart mounts it, serves HTTPS that the API server would
    accept: the chain verifies against the registration's caBundle for the Service's DNS name."""
    import socket
    import ssl

    r = render({"database": EXTERNAL_DB, "webhook": {"enabled": True}})
    assert r.result.ok, r.error
    (vwc,) = r.kind("ValidatingWebhookConfiguration")
    client_config = vwc["webhooks"][0]["clientConfig"]
    service = client_config["service"]
    host = f"{service['name']}.{service['namespace']}.svc"
    ca = base64.b64decode(client_config["caBundle"]).decode()
    db = f"sqlite:///{tmp_path / 'store.db'}"
    pod = Pod(r, tmp_path / "pod", {"gpufleet-db": {"url": db}}, _kubeconfig(tmp_path / "kubeconfig", k8s_cluster.url))
    pod.start()
    try:
        _wait("/readyz", lambda: pod.probe("readinessProbe") == 200, 60, pod)
        context = ssl.create_default_context(cadata=ca)

        def healthz() -> bytes | None:
            try:
                with (
                    socket.create_connection(("127.0.0.1", pod.webhook_port), timeout=5) as raw,
                    context.wrap_socket(raw, server_hostname=host) as tls,
                ):
                    tls.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                    return tls.recv(4096) or None
            except ConnectionRefusedError:
                return None

        answer = _wait("the webhook's HTTPS port", healthz, 30, pod)
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        pod.stop()


def test_install_docs_value_sets_render_and_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The value files docs/kubernetes-install.md shows (``# try.yaml``, ``# prod.yaml``) install."""
    doc = (REPO / "docs" / "kubernetes-install.md").read_text()
    blocks = dict((name, text) for text, name in re.findall(r"```yaml\n(# (\w+)\.yaml\n.*?)```", doc, re.DOTALL))
    assert set(blocks) == {"try", "prod"}
    for k in [k for k in os.environ if k.startswith("GPUFLEET_")]:
        monkeypatch.delenv(k)
    for name, text in blocks.items():
        r = render(yaml.safe_load(text), api_versions=(PROMETHEUS_API,))
        assert r.result.ok, f"{name}.yaml: {r.error}"
        path = tmp_path / f"{name}-config.yaml"
        path.write_text(r.one("ConfigMap", FULLNAME)["data"]["config.yaml"])
        load_settings(path, db="postgresql+psycopg://gpufleet@db/gpufleet")


def test_notes(tmp_path: Path) -> None:
    """NOTES.txt (shown by `helm install`, not by `helm template`): rendered here as a ConfigMap of a
    copy of the chart; it warns when Prometheus Operator objects were asked for but cannot be made."""
    chart = tmp_path / "gpufleet"
    shutil.copytree(CHART, chart)
    body = "\n".join("    " + line for line in (chart / "templates" / "NOTES.txt").read_text().splitlines())
    (chart / "templates" / "zz-notes.yaml").write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n{body}\n"
    )
    values = {"metrics": MONITORING, "teams": {"a": {}}}
    without = template(values, chart=chart)
    assert without.result.ok, without.error
    text = without.one("ConfigMap", "notes")["data"]["notes"]
    assert "no ServiceMonitor was created" in text and "no PrometheusRule was created" in text
    assert f"deploy/{FULLNAME} -- cat /var/lib/gpufleet/home/admin.token" in text and "team Namespaces" in text
    with_operator = template(values, chart=chart, api_versions=(PROMETHEUS_API,))
    assert "WARNING" not in with_operator.one("ConfigMap", "notes")["data"]["notes"]
