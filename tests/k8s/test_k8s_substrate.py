# The kubernetes client takes plain dicts as request bodies and types every model field Optional:
# (and kubernetes.watch is untyped):
# mypy: disable-error-code="arg-type,union-attr,index,no-untyped-call"
"""The Kubernetes test substrate (tests/k8s/) checked through the official ``kubernetes`` client.

Every behaviour that KubeApiServer adds to kmock's emulator, and every stage of the kubelet stand-in,
is exercised here over real HTTP on 127.0.0.1: if these pass, a backend test can trust the substrate
to answer like a kube-apiserver (for what it implements; see tests/support/k8s/apiserver.py).
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
from kubernetes import client, watch
from kubernetes.client import ApiClient, ApiException

from tests.support.k8s.apiserver import PODS, KubeApiServer
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.kubelet import (
    CHECKPOINT_ANNOTATION,
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    LOG_EVERY_ANNOTATION,
    SIGTERM_AT_ANNOTATION,
    Kubelet,
    KubeletConfig,
    create_gpu_node,
    gpu_node,
    taint_disrupted,
)

NS = "default"
Obj = dict[str, Any]


# --- helpers ------------------------------------------------------------------------------------


def pod_body(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    restart: str = "Never",
    grace: int | None = None,
    scheduler: str | None = None,
) -> Obj:
    spec: Obj = {"restartPolicy": restart, "containers": [{"name": "main", "image": "registry.local/train:1.0"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    meta: Obj = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def raw(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, Obj]:
    """Call a client method without deserialising: (HTTP status, JSON body), errors included."""
    try:
        response = fn(*args, _preload_content=False, **kwargs)
    except ApiException as e:
        return e.status, json.loads(e.body)
    return response.status, json.loads(response.data)


def as_dict(api: ApiClient, model: Any) -> Obj:
    serialized: Obj = api.sanitize_for_serialization(model)
    return serialized


def bind(core: client.CoreV1Api, name: str, node: str, namespace: str = NS) -> tuple[int, Obj]:
    # The real API server answers a binding with a Status object, which the client cannot
    # deserialise into V1Binding (kubernetes-client/python#825): read it raw, as callers must.
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}}
    return raw(core.create_namespaced_pod_binding, name, namespace, body)


def phase(core: client.CoreV1Api, name: str, namespace: str = NS) -> str | None:
    try:
        pod_phase: str | None = core.read_namespaced_pod(name, namespace).status.phase
        return pod_phase
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def gone(core: client.CoreV1Api, name: str, namespace: str = NS) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def collect(
    fn: Callable[..., Any], *args: Any, until: Callable[[list[tuple[str, Obj]]], bool], timeout: int = 5, **kwargs: Any
) -> list[tuple[str, Obj]]:
    """Watch with the official client until ``until(events)`` holds (the server ends it after ``timeout``)."""
    events: list[tuple[str, Obj]] = []
    w = watch.Watch()
    for event in w.stream(fn, *args, timeout_seconds=timeout, **kwargs):
        events.append((event["type"], event["raw_object"]))
        if until(events):
            w.stop()
    return events


def names(events: list[tuple[str, Obj]]) -> list[tuple[str, str]]:
    return [(kind, obj["metadata"]["name"]) for kind, obj in events]


def http(
    cluster: Cluster, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> tuple[int, Obj]:
    """A request the typed client cannot express (e.g. server-side apply)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        cluster.url + path, data=data, method=method, headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.fixture
def core(k8s_api_client: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(k8s_api_client)


@pytest.fixture
def custom(k8s_api_client: ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s_api_client)


@pytest.fixture
def node(k8s_cluster: Cluster) -> str:
    k8s_cluster.add_gpu_node("gpu-a")
    return "gpu-a"


def running_pod(cluster: Cluster, core: client.CoreV1Api, node: str, name: str, **options: Any) -> None:
    core.create_namespaced_pod(NS, pod_body(name, **options))
    assert bind(core, name, node)[0] == 201
    cluster.wait_for(lambda: phase(core, name) == "Running", what=f"{name} Running")


# --- create, get, errors --------------------------------------------------------------------------


def test_create_answers_201_with_uid_resource_version_and_timestamp(core: client.CoreV1Api) -> None:
    before = datetime.datetime.now(tz=datetime.UTC).replace(microsecond=0)
    status, created = raw(core.create_namespaced_pod, NS, pod_body("p1"))
    assert status == 201
    meta = created["metadata"]
    assert len(meta["uid"]) == 36 and meta["resourceVersion"].isdigit() and meta["generation"] == 1
    assert before <= parse_time(meta["creationTimestamp"]) <= datetime.datetime.now(tz=datetime.UTC)
    assert created["apiVersion"] == "v1" and created["kind"] == "Pod" and meta["namespace"] == NS
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert (
        created["spec"]["schedulerName"] == "default-scheduler"
        and created["spec"]["terminationGracePeriodSeconds"] == 30
    )
    assert raw(core.read_namespaced_pod, "p1", NS) == (200, created)
    kubernetes_validate.validate(created, "1.29", strict=True)


def test_resource_versions_are_monotonic_across_the_cluster(core: client.CoreV1Api, k8s_api_client: ApiClient) -> None:
    leases = client.CoordinationV1Api(k8s_api_client)
    versions = [
        int(core.create_namespaced_pod(NS, pod_body("a")).metadata.resource_version),
        int(core.create_node(gpu_node("n1")).metadata.resource_version),
        int(leases.create_namespaced_lease(NS, {"metadata": {"name": "l"}, "spec": {}}).metadata.resource_version),
        int(core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"x": "1"}}}).metadata.resource_version),
        int(core.create_namespaced_pod("kube-system", pod_body("a")).metadata.resource_version),
    ]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert int(core.list_pod_for_all_namespaces().metadata.resource_version) == versions[-1]


def test_generate_name(core: client.CoreV1Api) -> None:
    body = pod_body("")
    body["metadata"] = {"generateName": "worker-"}
    first, second = (core.create_namespaced_pod(NS, body).metadata.name for _ in range(2))
    assert first != second and first.startswith("worker-") and len(first) == len("worker-") + 5


CREATE_FAILURES = {
    "already exists": (lambda b: b, NS, 409, "AlreadyExists"),
    "namespace missing": (lambda b: b, "nowhere", 404, "NotFound"),
    "uppercase name": (lambda b: {**b, "metadata": {"name": "Bad_Name"}}, NS, 422, "Invalid"),
    "no name": (lambda b: {**b, "metadata": {}}, NS, 422, "Invalid"),
    "unknown field": (lambda b: {**b, "spec": {**b["spec"], "gpuz": 1}}, NS, 400, "BadRequest"),
    "wrong type": (lambda b: {**b, "spec": {**b["spec"], "priority": "high"}}, NS, 422, "Invalid"),
    "wrong kind": (lambda b: {**b, "kind": "Node"}, NS, 400, "BadRequest"),
    "namespace mismatch": (
        lambda b: {**b, "metadata": {"name": "p9", "namespace": "kube-system"}},
        NS,
        400,
        "BadRequest",
    ),
}


@pytest.mark.parametrize(
    ("mutate", "namespace", "code", "reason"), CREATE_FAILURES.values(), ids=CREATE_FAILURES.keys()
)
def test_create_failures_are_status_objects(
    k8s_cluster: Cluster, core: client.CoreV1Api, mutate: Callable[[Obj], Obj], namespace: str, code: int, reason: str
) -> None:
    core.create_namespaced_pod(NS, pod_body("p1"))
    # Raw HTTP: kubernetes>=37 validates typed bodies client-side and would not send the bad ones.
    status, body = http(k8s_cluster, "POST", f"/api/v1/namespaces/{namespace}/pods", mutate(pod_body("p1")))
    assert (status, body["kind"], body["status"], body["code"], body["reason"]) == (
        code,
        "Status",
        "Failure",
        code,
        reason,
    )


@pytest.mark.parametrize("mode", ["Ignore", "Warn"])
def test_lenient_field_validation_drops_unknown_fields(k8s_cluster: Cluster, mode: str) -> None:
    body = pod_body("p1")
    body["spec"]["gpuz"] = 1
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}, "typo": True}
    status, created = http(k8s_cluster, "POST", f"/api/v1/namespaces/default/pods?fieldValidation={mode}", body)
    assert status == 201
    assert "gpuz" not in created["spec"] and created["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": 1
    }
    assert "typo" not in created["spec"]["containers"][0]["resources"]


NOT_FOUND_CALLS: dict[str, Callable[[client.CoreV1Api], Any]] = {
    "get": lambda c: c.read_namespaced_pod("ghost", NS),
    "replace": lambda c: c.replace_namespaced_pod("ghost", NS, pod_body("ghost")),
    "patch": lambda c: c.patch_namespaced_pod("ghost", NS, {"metadata": {"labels": {"a": "b"}}}),
    "delete": lambda c: c.delete_namespaced_pod("ghost", NS),
    "status": lambda c: c.read_namespaced_pod_status("ghost", NS),
    "eviction": lambda c: c.create_namespaced_pod_eviction("ghost", NS, {"metadata": {"name": "ghost"}}),
}


@pytest.mark.parametrize("call", NOT_FOUND_CALLS.values(), ids=NOT_FOUND_CALLS.keys())
def test_missing_objects_are_404_status_objects(
    core: client.CoreV1Api, call: Callable[[client.CoreV1Api], Any]
) -> None:
    with pytest.raises(ApiException) as caught:
        call(core)
    body = json.loads(caught.value.body)
    assert caught.value.status == 404
    assert body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 404, "reason": "NotFound",
        "message": 'pods "ghost" not found', "details": {"kind": "pods", "name": "ghost"},
    }  # fmt: skip


def test_unknown_resources_are_404(k8s_cluster: Cluster) -> None:
    assert http(k8s_cluster, "GET", "/apis/gpufleet.io/v1alpha1/namespaces/default/widgets")[0] == 404
    assert http(k8s_cluster, "GET", "/api/v1/namespaces/default/nodes")[0] == 404  # nodes are cluster-scoped


# --- updates, conflicts, patches ------------------------------------------------------------------


def _stale_pod_replace(api: ApiClient, stale: Obj) -> Any:
    return client.CoreV1Api(api).replace_namespaced_pod("p1", NS, stale)


def _stale_pod_patch(api: ApiClient, stale: Obj) -> Any:
    patch = {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"], "labels": {"b": "2"}}}
    return client.CoreV1Api(api).patch_namespaced_pod("p1", NS, patch)


def _stale_pod_status(api: ApiClient, stale: Obj) -> Any:
    return client.CoreV1Api(api).replace_namespaced_pod_status("p1", NS, {**stale, "status": {"phase": "Running"}})


def _stale_delete(api: ApiClient, stale: Obj) -> Any:
    options = {"preconditions": {"resourceVersion": stale["metadata"]["resourceVersion"]}}
    return client.CoreV1Api(api).delete_namespaced_pod("p1", NS, body=options)


STALE_WRITES = {
    "PUT pod": _stale_pod_replace,
    "PATCH pod with resourceVersion": _stale_pod_patch,
    "PUT pod status": _stale_pod_status,
    "DELETE with resourceVersion precondition": _stale_delete,
}


@pytest.mark.parametrize("write", STALE_WRITES.values(), ids=STALE_WRITES.keys())
def test_stale_writes_conflict(
    core: client.CoreV1Api, k8s_api_client: ApiClient, write: Callable[[ApiClient, Obj], Any]
) -> None:
    stale = as_dict(k8s_api_client, core.create_namespaced_pod(NS, pod_body("p1")))
    core.patch_namespaced_pod("p1", NS, {"metadata": {"labels": {"a": "1"}}})  # someone else wrote
    with pytest.raises(ApiException) as caught:
        write(k8s_api_client, stale)
    assert caught.value.status == 409
    body = json.loads(caught.value.body)
    assert body["reason"] == "Conflict" and body["details"] == {"kind": "pods", "name": "p1"}
    assert core.read_namespaced_pod("p1", NS).metadata.labels == {"a": "1"}


def test_unconditional_put_and_noop_writes(core: client.CoreV1Api, k8s_api_client: ApiClient) -> None:
    pod = as_dict(k8s_api_client, core.create_namespaced_pod(NS, pod_body("p1")))
    rv = pod["metadata"]["resourceVersion"]
    assert core.patch_namespaced_pod("p1", NS, {"metadata": {"labels": {}}}).metadata.resource_version == rv  # no-op
    del pod["metadata"]["resourceVersion"]
    pod["metadata"]["labels"] = {"team": "ml"}
    updated = core.replace_namespaced_pod("p1", NS, pod)  # no resourceVersion: last write wins
    assert int(updated.metadata.resource_version) > int(rv) and updated.metadata.labels == {"team": "ml"}


def test_generation_moves_on_spec_changes_only(k8s_api_client: ApiClient) -> None:
    batch = client.BatchV1Api(k8s_api_client)
    job = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}
    assert batch.create_namespaced_job(NS, job).metadata.generation == 1
    assert batch.patch_namespaced_job("j", NS, {"metadata": {"labels": {"a": "b"}}}).metadata.generation == 1
    assert batch.patch_namespaced_job_status("j", NS, {"status": {"active": 1}}).metadata.generation == 1
    assert batch.patch_namespaced_job("j", NS, {"spec": {"suspend": True}}).metadata.generation == 2


def test_pod_spec_is_immutable_except_the_allowed_fields(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body("p1"))
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p1", NS, {"spec": {"nodeName": "gpu-a"}})  # binding is the only way
    assert caught.value.status == 422
    patched = core.patch_namespaced_pod(
        "p1", NS, {"spec": {"containers": [{"name": "main", "image": "registry.local/train:2.0"}]}}
    )
    assert patched.spec.containers[0].image == "registry.local/train:2.0"


def test_merge_patch_on_labels_and_annotations(custom: client.CustomObjectsApi) -> None:
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "CostBudget",
        "metadata": {"name": "b", "labels": {"a": "1", "b": "2"}},
        "spec": {"limitUsd": 100},
    }
    custom.create_namespaced_custom_object("gpufleet.io", "v1alpha1", NS, "costbudgets", body)
    patched = custom.patch_namespaced_custom_object(
        "gpufleet.io", "v1alpha1", NS, "costbudgets", "b",
        {"metadata": {"labels": {"a": None, "c": "3"}, "annotations": {"note": "x"}}, "spec": {"limitUsd": 150}},
    )  # fmt: skip
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert patched["metadata"]["annotations"] == {"note": "x"} and patched["spec"] == {"limitUsd": 150}


def test_strategic_merge_patch_merges_conditions_by_type(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body("p1", labels={"keep": "me"}))
    core.patch_namespaced_pod_status(
        "p1", NS, {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}
    )
    patched = core.patch_namespaced_pod_status(
        "p1",
        NS,
        {
            "status": {
                "conditions": [
                    {"type": "gpufleet.io/Queued", "status": "True"},
                    {"type": "PodScheduled", "status": "True"},
                ]
            }
        },
    )
    conditions = {c.type: (c.status, c.reason) for c in patched.status.conditions}
    assert conditions == {"PodScheduled": ("True", "Unschedulable"), "gpufleet.io/Queued": ("True", None)}
    finalized = core.patch_namespaced_pod("p1", NS, {"metadata": {"finalizers": ["a.io/x"]}})
    finalized = core.patch_namespaced_pod(
        "p1", NS, {"metadata": {"finalizers": ["b.io/y"]}}
    )  # finalizers merge as a set
    assert finalized.metadata.finalizers == ["a.io/x", "b.io/y"] and finalized.metadata.labels == {"keep": "me"}
    removed = core.patch_namespaced_pod(
        "p1", NS, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x", "b.io/y"]}}
    )
    assert removed.metadata.finalizers is None or removed.metadata.finalizers == []


PATCH_CASES: dict[str, tuple[str, str, Any, int]] = {
    "json patch": (
        "/api/v1/namespaces/default/pods/p1",
        "application/json-patch+json",
        [{"op": "add", "path": "/metadata/labels/x", "value": "y"}],
        200,
    ),
    "json patch, failed test op": (
        "/api/v1/namespaces/default/pods/p1",
        "application/json-patch+json",
        [{"op": "test", "path": "/metadata/name", "value": "other"}],
        422,
    ),
    "strategic merge on a custom resource": (
        "/apis/gpufleet.io/v1alpha1/namespaces/default/costbudgets/b",
        "application/strategic-merge-patch+json",
        {"spec": {"limitUsd": 1}},
        415,
    ),
    "server-side apply": (
        "/api/v1/namespaces/default/pods/p1",
        "application/apply-patch+yaml",
        {"metadata": {"labels": {"x": "y"}}},
        415,
    ),
    "unknown media type": ("/api/v1/namespaces/default/pods/p1", "text/plain", {"metadata": {}}, 415),
}


@pytest.mark.parametrize(("path", "content_type", "patch", "code"), PATCH_CASES.values(), ids=PATCH_CASES.keys())
def test_patch_media_types(
    k8s_cluster: Cluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    path: str,
    content_type: str,
    patch: Any,
    code: int,
) -> None:
    core.create_namespaced_pod(NS, pod_body("p1"))
    custom.create_namespaced_custom_object(
        "gpufleet.io", "v1alpha1", NS, "costbudgets", {"metadata": {"name": "b"}, "spec": {"limitUsd": 5}}
    )
    status, body = http(k8s_cluster, "PATCH", path, patch, content_type)
    assert status == code, body


# --- the status subresource -----------------------------------------------------------------------

STATUS_RESOURCES = {
    # resource: (group, version, plural, namespaced, spec, a status field and value, a valid spec change)
    "pods": (
        "",
        "v1",
        "pods",
        True,
        {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x:1"}]},
        ("message", "hi"),
        {"activeDeadlineSeconds": 60},
    ),
    "jobs": (
        "batch",
        "v1",
        "jobs",
        True,
        {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x:1"}]}}},
        ("active", 3),
        {"suspend": True},
    ),
    "costbudgets": (
        "gpufleet.io",
        "v1alpha1",
        "costbudgets",
        True,
        {"limitUsd": 10},
        ("observedGeneration", 7),
        {"limitUsd": 20},
    ),
    "costattributions": (
        "gpufleet.io",
        "v1alpha1",
        "costattributions",
        True,
        {"team": "ml"},
        ("observedGeneration", 7),
        {"team": "x"},
    ),
    "nodeclaims": (
        "karpenter.sh",
        "v1",
        "nodeclaims",
        False,
        {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}},
        ("nodeName", "n1"),
        {"expireAfter": "720h"},
    ),
    "nodepools": ("karpenter.sh", "v1", "nodepools", False, {"template": {"spec": {}}}, ("nodes", 2), {"weight": 10}),
}


@pytest.mark.parametrize(
    ("group", "version", "plural", "namespaced", "spec", "field", "spec_change"),
    STATUS_RESOURCES.values(),
    ids=STATUS_RESOURCES.keys(),
)
def test_status_subresource_is_separate_from_the_main_resource(
    k8s_cluster: Cluster,
    group: str,
    version: str,
    plural: str,
    namespaced: bool,
    spec: Obj,
    field: tuple[str, Any],
    spec_change: Obj,
) -> None:
    key, value = field
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    collection = f"{base}/namespaces/{NS}/{plural}" if namespaced else f"{base}/{plural}"
    status, created = http(
        k8s_cluster, "POST", collection, {"metadata": {"name": "o1"}, "spec": spec, "status": {key: value}}
    )
    assert status == 201, created
    assert (created.get("status") or {}).get(key) is None  # create ignores .status
    merge = "application/merge-patch+json"
    status, main = http(
        k8s_cluster, "PATCH", f"{collection}/o1", {"metadata": {"labels": {"l": "1"}}, "status": {key: value}}, merge
    )
    assert status == 200 and main["metadata"]["labels"] == {"l": "1"} and (main.get("status") or {}).get(key) is None
    status, sub = http(
        k8s_cluster,
        "PATCH",
        f"{collection}/o1/status",
        {"metadata": {"labels": {"l": "2"}}, "status": {key: value}},
        merge,
    )
    assert status == 200 and sub["status"][key] == value and sub["metadata"]["labels"] == {"l": "1"}
    assert sub["metadata"]["generation"] == main["metadata"]["generation"] == 1  # status writes do not bump generation
    put = {**sub, "spec": {**sub["spec"], **spec_change}, "status": {}}
    status, replaced = http(k8s_cluster, "PUT", f"{collection}/o1/status", put)
    assert status == 200 and replaced["status"] == {} and replaced["spec"] == sub["spec"]
    status, changed = http(
        k8s_cluster, "PUT", f"{collection}/o1", {**replaced, "spec": {**replaced["spec"], **spec_change}}
    )
    assert status == 200 and changed["metadata"]["generation"] == 2 and changed["status"] == {}
    assert http(k8s_cluster, "GET", f"{collection}/o1/status")[1]["spec"] == changed["spec"]


# --- selectors ------------------------------------------------------------------------------------

LABELLED_PODS = {
    "a": {"team": "ml", "tier": "train", "gpu": "a100"},
    "b": {"team": "ml", "tier": "serve"},
    "c": {"team": "infra", "tier": "train", "gpu": "h100"},
    "d": {},
}
LABEL_SELECTORS = {
    "equals": ("team=ml", {"a", "b"}),
    "double equals": ("team==ml", {"a", "b"}),
    "not equals (absent matches)": ("team!=ml", {"c", "d"}),
    "in": ("tier in (train, batch)", {"a", "c"}),
    "notin (absent matches)": ("gpu notin (a100)", {"b", "c", "d"}),
    "exists": ("gpu", {"a", "c"}),
    "does not exist": ("!gpu", {"b", "d"}),
    "conjunction": ("team=ml,!gpu", {"b"}),
    "prefixed key": ("app.kubernetes.io/name", set()),
    "empty selects all": ("", {"a", "b", "c", "d"}),
}


@pytest.mark.parametrize(("selector", "expected"), LABEL_SELECTORS.values(), ids=LABEL_SELECTORS.keys())
def test_label_selectors(core: client.CoreV1Api, selector: str, expected: set[str]) -> None:
    for name, labels in LABELLED_PODS.items():
        core.create_namespaced_pod(NS, pod_body(name, labels=labels))
    core.create_namespaced_pod("kube-system", pod_body("elsewhere", labels={"team": "ml"}))
    assert {p.metadata.name for p in core.list_namespaced_pod(NS, label_selector=selector).items} == expected


FIELD_SELECTORS = {
    "metadata.name": ("metadata.name=a", None, {"a"}),
    "metadata.namespace across namespaces": ("metadata.namespace=kube-system", None, {"sys"}),
    "bound pods": ("spec.nodeName=gpu-a", NS, {"a", "b"}),
    "unbound pods": ("spec.nodeName=", NS, {"c"}),
    "not on a node": ("spec.nodeName!=gpu-a", NS, {"c"}),
    "status.phase": ("status.phase=Pending", NS, {"c"}),
    "running and not b": ("status.phase=Running,metadata.name!=b", NS, {"a"}),
    "spec.schedulerName": ("spec.schedulerName=gpufleet", None, {"b", "c"}),
}


@pytest.mark.parametrize(("selector", "namespace", "expected"), FIELD_SELECTORS.values(), ids=FIELD_SELECTORS.keys())
def test_field_selectors(
    k8s_cluster: Cluster, core: client.CoreV1Api, node: str, selector: str, namespace: str | None, expected: set[str]
) -> None:
    running_pod(k8s_cluster, core, node, "a")
    running_pod(k8s_cluster, core, node, "b", scheduler="gpufleet")
    core.create_namespaced_pod(NS, pod_body("c", scheduler="gpufleet"))
    core.create_namespaced_pod("kube-system", pod_body("sys"))
    listed = (
        core.list_pod_for_all_namespaces(field_selector=selector)
        if namespace is None
        else core.list_namespaced_pod(namespace, field_selector=selector)
    )
    assert {p.metadata.name for p in listed.items} == expected


BAD_SELECTORS = {
    "unsupported field": {"field_selector": "spec.containers=x"},
    "field without operator": {"field_selector": "metadata.name"},
    "label set unterminated": {"label_selector": "tier in (a,b"},
    "label value invalid": {"label_selector": "team=a b"},
    "label empty set": {"label_selector": "tier in ()"},
    "trailing comma": {"label_selector": "team=ml,"},
}


@pytest.mark.parametrize("kwargs", BAD_SELECTORS.values(), ids=BAD_SELECTORS.keys())
def test_bad_selectors_are_400(core: client.CoreV1Api, kwargs: dict[str, str]) -> None:
    status, body = raw(core.list_namespaced_pod, NS, **kwargs)
    assert (status, body["reason"]) == (400, "BadRequest")


def test_list_pagination_with_limit_and_continue(core: client.CoreV1Api) -> None:
    for i in range(5):
        core.create_namespaced_pod(NS, pod_body(f"p{i}"))
    seen: list[str] = []
    token = None
    while True:
        page = core.list_namespaced_pod(NS, limit=2, _continue=token)
        seen += [str(p.metadata.name) for p in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 5 - len(seen)
    assert seen == ["p0", "p1", "p2", "p3", "p4"]


# --- binding, eviction, deletion --------------------------------------------------------------------


def test_binding_assigns_the_node_once(core: client.CoreV1Api, node: str) -> None:
    core.create_namespaced_pod(NS, pod_body("p1"))
    status, body = bind(core, "p1", node)
    assert (status, body["kind"], body["status"]) == (201, "Status", "Success")
    pod = core.read_namespaced_pod("p1", NS)
    assert pod.spec.node_name == node
    assert [(c.type, c.status) for c in pod.status.conditions] == [("PodScheduled", "True")]
    status, body = bind(core, "p1", "gpu-b")
    assert (status, body["reason"]) == (409, "Conflict")
    assert (
        body["message"]
        == f'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "{node}"'
    )
    assert core.read_namespaced_pod("p1", NS).spec.node_name == node


def test_legacy_bindings_collection(core: client.CoreV1Api, node: str) -> None:
    core.create_namespaced_pod(NS, pod_body("p1"))
    body = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": node}}
    assert raw(core.create_namespaced_binding, NS, body)[0] == 201
    assert core.read_namespaced_pod("p1", NS).spec.node_name == node
    assert raw(core.create_namespaced_binding, NS, body)[0] == 409


def test_eviction_deletes_gracefully_and_the_kubelet_terminates(
    k8s_cluster: Cluster, core: client.CoreV1Api, k8s_kubelet: Kubelet, node: str
) -> None:
    running_pod(k8s_cluster, core, node, "p1", grace=20, annotations={CHECKPOINT_ANNOTATION: "0.3"})
    status, body = raw(
        core.create_namespaced_pod_eviction,
        "p1",
        NS,
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p1"}},
    )
    assert (status, body["status"]) == (201, "Success")
    pod = core.read_namespaced_pod("p1", NS)
    assert pod.metadata.deletion_timestamp is not None and pod.metadata.deletion_grace_period_seconds == 20
    assert ("DisruptionTarget", "True", "EvictionByEvictionAPI") in [
        (c.type, c.status, c.reason) for c in pod.status.conditions
    ]
    signal = k8s_cluster.wait_for(lambda: k8s_kubelet.sigterms(NS, "p1"), what="SIGTERM")[0]
    assert (signal.node, signal.grace_period_s, signal.uid) == (node, 20, pod.metadata.uid)
    annotated = k8s_cluster.wait_for(
        lambda: (core.read_namespaced_pod("p1", NS).metadata.annotations or {}).get(SIGTERM_AT_ANNOTATION),
        what="annotation",
    )
    assert abs((parse_time(annotated) - signal.at).total_seconds()) < 0.001
    k8s_cluster.wait_for(lambda: gone(core, "p1"), timeout=3, what="p1 removed")
    assert time.monotonic() and [s.signal for s in k8s_kubelet.signals] == ["SIGTERM"]


# --- pods/log ------------------------------------------------------------------------------------


def test_pod_log_before_start_is_a_400_like_the_real_server(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body("p1"))  # never bound: its container waits
    status, body = raw(core.read_namespaced_pod_log, "p1", NS)
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == 'container "main" in pod "p1" is waiting to start: ContainerCreating'
    assert raw(core.read_namespaced_pod_log, "nope", NS)[0] == 404


def test_pod_log_has_what_the_container_printed(k8s_cluster: Cluster, core: client.CoreV1Api, node: str) -> None:
    running_pod(k8s_cluster, core, node, "p1", annotations={DURATION_ANNOTATION: "0.5", LOG_EVERY_ANNOTATION: "0.1"})
    k8s_cluster.wait_for(lambda: phase(core, "p1") == "Succeeded", what="p1 Succeeded")
    text = core.read_namespaced_pod_log("p1", NS)
    lines = text.splitlines()
    assert lines[0] == f"started on {node}" and lines[-1] == "exit code 0"
    assert lines[1:-1] == [f"step {i}" for i in range(1, len(lines) - 1)] and len(lines) >= 5
    assert core.read_namespaced_pod_log("p1", NS, tail_lines=1) == "exit code 0\n"
    assert core.read_namespaced_pod_log("p1", NS, limit_bytes=7) == "started"
    stamped = core.read_namespaced_pod_log("p1", NS, timestamps=True).splitlines()[0]
    assert parse_time(stamped.split(" ")[0]).tzinfo is not None and stamped.endswith(f"started on {node}")
    status, body = raw(core.read_namespaced_pod_log, "p1", NS, container="sidecar")
    assert (status, body["message"]) == (400, "container sidecar is not valid for pod p1")


def test_pod_log_follow_streams_until_the_container_ends(
    k8s_cluster: Cluster, core: client.CoreV1Api, node: str
) -> None:
    running_pod(
        k8s_cluster, core, node, "p1", grace=5, annotations={LOG_EVERY_ANNOTATION: "0.05", CHECKPOINT_ANNOTATION: "0.1"}
    )
    response = core.read_namespaced_pod_log("p1", NS, follow=True, _preload_content=False)
    received: list[bytes] = []
    t0 = time.monotonic()
    for chunk in response.stream(64):
        received.append(chunk)
        if b"step 3" in b"".join(received) and t0:
            core.delete_namespaced_pod("p1", NS)  # graceful: SIGTERM, checkpoint, exit
            t0 = 0.0
    text = b"".join(received).decode()
    assert text.startswith(f"started on {node}\n")
    assert text.endswith("received SIGTERM: checkpointing\nexit code 143\n")
    k8s_cluster.wait_for(lambda: gone(core, "p1"), timeout=3, what="p1 removed")
    assert raw(core.read_namespaced_pod_log, "p1", NS)[0] == 404  # the logs went with the pod


def test_eviction_respects_pod_disruption_budgets(
    k8s_cluster: Cluster, core: client.CoreV1Api, k8s_api_client: ApiClient, node: str
) -> None:
    for name in ("a", "b"):
        running_pod(k8s_cluster, core, node, name, labels={"app": "train"})
    client.PolicyV1Api(k8s_api_client).create_namespaced_pod_disruption_budget(
        NS, {"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}}}
    )
    assert raw(core.create_namespaced_pod_eviction, "a", NS, {"metadata": {"name": "a"}})[0] == 201
    status, body = raw(core.create_namespaced_pod_eviction, "b", NS, {"metadata": {"name": "b"}})
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert core.read_namespaced_pod("b", NS).metadata.deletion_timestamp is None


DELETIONS = {
    # scenario: (bind?, delete kwargs, annotations, SIGTERM expected, kill expected, exit code)
    "unbound pod goes at once": (False, {}, {}, False, False, None),
    "grace 0 goes at once": (True, {"grace_period_seconds": 0}, {}, False, False, None),
    "checkpoint within grace": (True, {"grace_period_seconds": 5}, {CHECKPOINT_ANNOTATION: "0.1"}, True, False, 143),
    "checkpoint beyond grace is killed": (
        True,
        {"grace_period_seconds": 1},
        {CHECKPOINT_ANNOTATION: "30"},
        True,
        True,
        137,
    ),
}


@pytest.mark.parametrize(
    ("bound", "kwargs", "annotations", "sigterm", "killed", "exit_code"), DELETIONS.values(), ids=DELETIONS.keys()
)
def test_delete_with_grace_period(
    k8s_cluster: Cluster,
    core: client.CoreV1Api,
    k8s_kubelet: Kubelet,
    node: str,
    bound: bool,
    kwargs: dict[str, int],
    annotations: dict[str, str],
    sigterm: bool,
    killed: bool,
    exit_code: int | None,
) -> None:
    if bound:
        running_pod(k8s_cluster, core, node, "p1", annotations=annotations)
    else:
        core.create_namespaced_pod(NS, pod_body("p1", annotations=annotations))
    final_states: list[Obj] = []
    k8s_cluster.call(lambda: _record_last_state(k8s_cluster.server, final_states))
    deleted = core.delete_namespaced_pod("p1", NS, **kwargs)
    assert deleted.metadata.name == "p1"  # pods answer DELETE with the object
    k8s_cluster.wait_for(lambda: gone(core, "p1"), timeout=3, what="p1 removed")
    assert [s.signal for s in k8s_kubelet.signals] == (["SIGTERM"] if sigterm else []) + (["SIGKILL"] if killed else [])
    if exit_code is not None:
        terminated = final_states[-1]["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == exit_code and final_states[-1]["status"]["phase"] == "Failed"


async def _record_last_state(server: KubeApiServer, sink: list[Obj]) -> None:
    """Keep the last state of pod p1 before it is removed (to look at its final status)."""
    import asyncio

    async def follow() -> None:
        async for event in server.events_after(server.resource_version, timeout=10):
            if event.rtype is PODS and event.obj["metadata"]["name"] == "p1":
                sink.append(event.obj)
                if event.type == "DELETED":
                    return

    asyncio.get_running_loop().create_task(follow())


def test_finalizers_hold_deletion_until_removed(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, {**pod_body("p1"), "metadata": {"name": "p1", "finalizers": ["gpufleet.io/ledger"]}})
    core.delete_namespaced_pod("p1", NS)
    held = core.read_namespaced_pod("p1", NS)
    assert held.metadata.deletion_timestamp is not None and held.metadata.deletion_grace_period_seconds == 0
    with pytest.raises(ApiException) as caught:  # no new finalizers once deleting
        core.patch_namespaced_pod("p1", NS, {"metadata": {"finalizers": ["gpufleet.io/ledger", "other.io/x"]}})
    assert caught.value.status == 422
    core.patch_namespaced_pod("p1", NS, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["gpufleet.io/ledger"]}})
    assert gone(core, "p1")


def test_owner_references_are_garbage_collected(core: client.CoreV1Api, k8s_api_client: ApiClient) -> None:
    batch = client.BatchV1Api(k8s_api_client)

    def job_with_pod(name: str) -> None:
        job = batch.create_namespaced_job(
            NS,
            {
                "metadata": {"name": name},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}},
            },
        )
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job.metadata.uid, "controller": True}
        core.create_namespaced_pod(
            NS, {**pod_body(f"{name}-pod"), "metadata": {"name": f"{name}-pod", "ownerReferences": [owner]}}
        )

    job_with_pod("bg")
    job_with_pod("orphan")
    status, body = raw(batch.delete_namespaced_job, "bg", NS, propagation_policy="Background")
    assert (status, body["kind"], body["status"]) == (200, "Status", "Success")  # non-pods answer a Status
    assert gone(core, "bg-pod")  # unbound: deleted at once
    batch.delete_namespaced_job("orphan", NS)  # batch/v1 orphans by default
    assert core.read_namespaced_pod("orphan-pod", NS).metadata.owner_references is None


def test_namespace_deletion_removes_its_contents(k8s_cluster: Cluster, core: client.CoreV1Api, node: str) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    assert core.read_namespace("team-a").metadata.labels == {"kubernetes.io/metadata.name": "team-a"}
    core.create_namespaced_pod("team-a", pod_body("idle"))
    core.create_namespaced_config_map("team-a", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    running_pod(k8s_cluster, core, node, "busy")  # in default: untouched
    core.delete_namespace("team-a")
    k8s_cluster.wait_for(
        lambda: "team-a" not in {n.metadata.name for n in core.list_namespace().items}, what="team-a gone"
    )
    assert core.list_namespaced_config_map("team-a").items == []
    assert phase(core, "busy") == "Running"


# --- watches --------------------------------------------------------------------------------------


def test_watch_from_a_resource_version_sees_only_later_events(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body("old"))
    since = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod_body("new"))
    core.patch_namespaced_pod("old", NS, {"metadata": {"labels": {"touched": "yes"}}})
    core.delete_namespaced_pod("new", NS)
    core.create_namespaced_pod(NS, pod_body("sentinel"))
    events = collect(
        core.list_namespaced_pod, NS, resource_version=since, until=lambda e: e[-1][1]["metadata"]["name"] == "sentinel"
    )
    assert names(events) == [("ADDED", "new"), ("MODIFIED", "old"), ("DELETED", "new"), ("ADDED", "sentinel")]
    versions = [int(obj["metadata"]["resourceVersion"]) for _, obj in events]
    assert versions == sorted(versions) and versions[0] > int(since)
    assert events[1][1]["metadata"]["labels"] == {"touched": "yes"}


def test_watch_without_a_resource_version_starts_with_the_current_state(
    k8s_cluster: Cluster, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod(NS, pod_body("b"))
    core.create_namespaced_pod(NS, pod_body("a"))

    def later() -> None:
        time.sleep(0.1)
        core.create_namespaced_pod(NS, pod_body("c"))

    import threading

    writer = threading.Thread(target=later)
    writer.start()
    events = collect(core.list_namespaced_pod, NS, until=lambda e: len(e) == 3)
    writer.join()
    assert names(events) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def test_watch_honours_namespace_and_selectors(core: client.CoreV1Api) -> None:
    since = core.list_pod_for_all_namespaces().metadata.resource_version
    core.create_namespaced_pod("kube-system", pod_body("sys", labels={"team": "ml"}))
    core.create_namespaced_pod(NS, pod_body("p", labels={"team": "ml"}))
    core.create_namespaced_pod(NS, pod_body("q", labels={"team": "infra"}))
    core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"team": "infra"}}})  # leaves the selector
    core.patch_namespaced_pod("q", NS, {"metadata": {"labels": {"team": "ml"}}})  # enters it
    core.create_namespaced_pod(NS, pod_body("sentinel", labels={"team": "ml"}))
    done: Callable[[list[tuple[str, Obj]]], bool] = lambda e: e[-1][1]["metadata"]["name"] == "sentinel"  # noqa: E731
    in_default = collect(core.list_namespaced_pod, NS, resource_version=since, label_selector="team=ml", until=done)
    assert names(in_default) == [("ADDED", "p"), ("DELETED", "p"), ("ADDED", "q"), ("ADDED", "sentinel")]
    everywhere = collect(
        core.list_pod_for_all_namespaces, resource_version=since, field_selector="metadata.name!=q", until=done
    )
    assert names(everywhere) == [("ADDED", "sys"), ("ADDED", "p"), ("MODIFIED", "p"), ("ADDED", "sentinel")]


def test_watch_of_a_compacted_resource_version_is_410_gone(k8s_cluster_factory: Callable[..., Cluster]) -> None:
    cluster = k8s_cluster_factory(kubelet=None, watch_history=3)
    api = cluster.api_client()
    try:
        core = client.CoreV1Api(api)
        since = core.list_namespaced_pod(NS).metadata.resource_version
        for i in range(5):  # more writes than the history keeps
            core.create_namespaced_pod(NS, pod_body(f"p{i}"))
        with pytest.raises(ApiException) as caught:
            collect(core.list_namespaced_pod, NS, resource_version=since, until=lambda e: True)
        assert caught.value.status == 410 and "too old resource version" in caught.value.reason
        recent = core.list_namespaced_pod(NS).metadata.resource_version  # the informer's recovery: re-list
        cluster.call(lambda: cluster.server.compact())
        core.create_namespaced_pod(NS, pod_body("after"))
        assert names(collect(core.list_namespaced_pod, NS, resource_version=recent, until=lambda e: True)) == [
            ("ADDED", "after")
        ]
    finally:
        api.close()


def test_watch_timeout_and_bookmark(core: client.CoreV1Api) -> None:
    since = core.list_namespaced_pod(NS).metadata.resource_version
    started = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespaced_pod, NS, resource_version=since, timeout_seconds=1, allow_watch_bookmarks=True
        )
    )
    assert 0.9 < time.monotonic() - started < 3
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert events[0]["raw_object"]["metadata"]["resourceVersion"] == since


def test_watch_a_single_object_by_name(k8s_cluster: Cluster, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body("a"))
    core.create_namespaced_pod(NS, pod_body("b"))
    status, first = http(
        k8s_cluster,
        "GET",
        "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Db",
    )
    assert status == 200 and first["object"]["metadata"]["name"] == "b"


# --- the kubelet ----------------------------------------------------------------------------------


def test_bound_pod_runs_then_succeeds_with_timestamps(
    k8s_cluster: Cluster, core: client.CoreV1Api, k8s_api_client: ApiClient, node: str
) -> None:
    core.create_namespaced_pod(NS, pod_body("p1", annotations={DURATION_ANNOTATION: "0.3"}))
    time.sleep(0.1)
    assert phase(core, "p1") == "Pending"  # nothing runs an unbound pod
    bind(core, "p1", node)
    k8s_cluster.wait_for(lambda: phase(core, "p1") == "Running", what="Running")
    running = as_dict(k8s_api_client, core.read_namespaced_pod("p1", NS))
    conditions = {c["type"]: c["status"] for c in running["status"]["conditions"]}
    assert conditions["PodScheduled"] == conditions["Ready"] == conditions["ContainersReady"] == "True"
    container = running["status"]["containerStatuses"][0]
    assert container["ready"] and container["restartCount"] == 0 and "startedAt" in container["state"]["running"]
    assert running["status"]["hostIP"] == gpu_node(node)["status"]["addresses"][0]["address"]
    kubernetes_validate.validate(running, "1.29", strict=True)
    k8s_cluster.wait_for(lambda: phase(core, "p1") == "Succeeded", what="Succeeded")
    done = as_dict(k8s_api_client, core.read_namespaced_pod("p1", NS))
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert terminated["startedAt"] == container["state"]["running"]["startedAt"] <= terminated["finishedAt"]
    assert {c["type"]: c["status"] for c in done["status"]["conditions"]}["Ready"] == "False"
    kubernetes_validate.validate(done, "1.29", strict=True)


EXITS = {
    "Never, exit 3 → Failed": ("Never", "3", "Failed", 0),
    "OnFailure, exit 0 → Succeeded": ("OnFailure", "0", "Succeeded", 0),
    "OnFailure, exit 1 → restarts": ("OnFailure", "1", "Running", 2),
    "Always, exit 0 → restarts": ("Always", "0", "Running", 2),
}


@pytest.mark.parametrize(("restart", "code", "expected", "restarts"), EXITS.values(), ids=EXITS.keys())
def test_exit_codes_and_restart_policies(
    k8s_cluster: Cluster, core: client.CoreV1Api, node: str, restart: str, code: str, expected: str, restarts: int
) -> None:
    annotations = {DURATION_ANNOTATION: "0.1", EXIT_CODE_ANNOTATION: code}
    core.create_namespaced_pod(NS, pod_body("p1", restart=restart, annotations=annotations))
    bind(core, "p1", node)

    def settled() -> Any:
        pod = core.read_namespaced_pod("p1", NS)
        statuses = pod.status.container_statuses or []
        if pod.status.phase == expected and (not restarts or (statuses and statuses[0].restart_count >= restarts)):
            return pod
        return None

    pod = k8s_cluster.wait_for(settled, what=expected)
    container = pod.status.container_statuses[0]
    if restarts:
        assert container.last_state.terminated.exit_code == int(code) and container.state.running is not None
    else:
        assert container.state.terminated.exit_code == int(code)


def test_kubelet_ignores_pods_on_unknown_or_not_ready_nodes(k8s_cluster: Cluster, core: client.CoreV1Api) -> None:
    for name, node in (("p1", "not-yet"), ("p2", "sick")):
        core.create_namespaced_pod(NS, pod_body(name))
        bind(core, name, node)
    k8s_cluster.add_gpu_node("sick", ready=False)
    time.sleep(0.2)
    assert phase(core, "p1") == phase(core, "p2") == "Pending"
    k8s_cluster.add_gpu_node("not-yet")  # the node registers: its kubelet picks the pod up
    k8s_cluster.wait_for(lambda: phase(core, "p1") == "Running", what="p1 Running")
    sick = core.read_node_status("sick")
    ready = [c for c in sick.status.conditions if c.type == "Ready"]
    ready[0].status = "True"
    core.replace_node_status("sick", sick)  # the kubelet recovers
    k8s_cluster.wait_for(lambda: phase(core, "p2") == "Running", what="p2 Running")


def test_kubelet_can_be_limited_to_some_nodes(k8s_cluster_factory: Callable[..., Cluster]) -> None:
    cluster = k8s_cluster_factory(kubelet=KubeletConfig(nodes=frozenset({"mine"})))
    cluster.add_gpu_node("mine")
    cluster.add_gpu_node("theirs")
    api = cluster.api_client()
    try:
        core = client.CoreV1Api(api)
        for name, target in (("p-mine", "mine"), ("p-theirs", "theirs")):
            core.create_namespaced_pod(NS, pod_body(name))
            bind(core, name, target)
        cluster.wait_for(lambda: phase(core, "p-mine") == "Running", what="Running")
        assert phase(core, "p-theirs") == "Pending"
    finally:
        api.close()


# --- leases, jobs, custom resources, nodes -----------------------------------------------------------


def test_lease_compare_and_swap(k8s_api_client: ApiClient) -> None:
    leases = client.CoordinationV1Api(k8s_api_client)
    now = datetime.datetime.now(tz=datetime.UTC)
    spec = {"holderIdentity": "controller-a", "leaseDurationSeconds": 15, "acquireTime": now, "renewTime": now}
    created = leases.create_namespaced_lease("kube-system", {"metadata": {"name": "gpufleet-leader"}, "spec": spec})
    with pytest.raises(ApiException) as caught:
        leases.create_namespaced_lease("kube-system", {"metadata": {"name": "gpufleet-leader"}, "spec": spec})
    assert caught.value.status == 409
    a_view = leases.read_namespaced_lease("gpufleet-leader", "kube-system")
    b_view = leases.read_namespaced_lease("gpufleet-leader", "kube-system")
    a_view.spec.renew_time = datetime.datetime.now(tz=datetime.UTC)
    renewed = leases.replace_namespaced_lease("gpufleet-leader", "kube-system", a_view)
    assert int(renewed.metadata.resource_version) > int(created.metadata.resource_version)
    b_view.spec.holder_identity = "controller-b"
    with pytest.raises(ApiException) as caught:  # B's takeover is based on a stale read
        leases.replace_namespaced_lease("gpufleet-leader", "kube-system", b_view)
    assert caught.value.status == 409
    fresh = leases.read_namespaced_lease("gpufleet-leader", "kube-system")
    assert fresh.spec.holder_identity == "controller-a"
    fresh.spec.holder_identity = "controller-b"
    assert (
        leases.replace_namespaced_lease("gpufleet-leader", "kube-system", fresh).spec.holder_identity == "controller-b"
    )


def test_jobs_are_stored_with_api_defaults(k8s_api_client: ApiClient) -> None:
    batch = client.BatchV1Api(k8s_api_client)
    job = batch.create_namespaced_job(
        NS,
        {
            "metadata": {"name": "train", "labels": {"gpufleet.io/job": "42"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}},
        },
    )
    assert (job.spec.parallelism, job.spec.completions, job.spec.backoff_limit, job.spec.suspend) == (1, 1, 6, False)
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": job.metadata.uid}
    assert job.spec.template.metadata.labels["job-name"] == "train" and job.spec.template.spec.restart_policy == "Never"
    done = batch.patch_namespaced_job_status(
        "train", NS, {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
    )
    assert done.status.succeeded == 1
    assert [j.metadata.name for j in batch.list_namespaced_job(NS, label_selector="gpufleet.io/job=42").items] == [
        "train"
    ]
    assert [j.metadata.name for j in batch.list_job_for_all_namespaces(field_selector="status.successful=1").items] == [
        "train"
    ]


def test_custom_resources_and_discovery(k8s_api_client: ApiClient, custom: client.CustomObjectsApi) -> None:
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"generateName": "gpu-"},
        "spec": {"requirements": []},
    }
    created = custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim)
    name = created["metadata"]["name"]
    assert "namespace" not in created["metadata"] and created["kind"] == "NodeClaim"
    status = {"status": {"conditions": [{"type": "Launched", "status": "True"}], "nodeName": "gpu-a"}}
    assert (
        custom.patch_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", name, status)["status"][
            "nodeName"
        ]
        == "gpu-a"
    )
    assert [
        i["metadata"]["name"] for i in custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
    ] == [name]
    custom.create_namespaced_custom_object(
        "gpufleet.io", "v1alpha1", "kube-system", "costattributions", {"metadata": {"name": "x"}, "spec": {}}
    )
    listed = custom.list_cluster_custom_object("gpufleet.io", "v1alpha1", "costattributions")["items"]
    assert [(i["metadata"]["namespace"], i["kind"]) for i in listed] == [("kube-system", "CostAttribution")]
    resources = client.ApisApi(k8s_api_client).get_api_versions()
    assert {"gpufleet.io", "karpenter.sh", "batch", "coordination.k8s.io", "policy"} <= {
        g.name for g in resources.groups
    }
    karpenter = client.CustomObjectsApi(k8s_api_client).get_api_resources("karpenter.sh", "v1")
    assert {(r.name, r.kind, r.namespaced) for r in karpenter.resources} >= {
        ("nodeclaims", "NodeClaim", False),
        ("nodeclaims/status", "NodeClaim", False),
    }
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name)
    assert custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"] == []


GPU_NODES = {
    "whole GPUs": ({}, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": "1"}),
    "time-slicing": (
        {"replicas": 4, "gpu_count": 1},
        {"nvidia.com/gpu": "4"},
        {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
    ),
    "MIG (mixed)": (
        {"mig": {"1g.10gb": 7}},
        {"nvidia.com/mig-1g.10gb": "7"},
        {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.count": "7"},
    ),
    "spot H100": (
        {
            "product": "NVIDIA-H100-80GB-HBM3",
            "capacity_type": "spot",
            "instance_type": "p5.48xlarge",
            "region": "us-west-2",
        },
        {"nvidia.com/gpu": "8"},
        {
            "karpenter.sh/capacity-type": "spot",
            "node.kubernetes.io/instance-type": "p5.48xlarge",
            "topology.kubernetes.io/region": "us-west-2",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        },
    ),
}


@pytest.mark.parametrize(("options", "resources", "labels"), GPU_NODES.values(), ids=GPU_NODES.keys())
def test_gpu_nodes_and_the_disruption_taint(
    core: client.CoreV1Api, k8s_api_client: ApiClient, options: Obj, resources: dict[str, str], labels: dict[str, str]
) -> None:
    node = create_gpu_node(core, "n1", **options)
    assert labels.items() <= node.metadata.labels.items()
    assert {
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.memory",
        "topology.kubernetes.io/region",
        "karpenter.sh/capacity-type",
    } <= set(node.metadata.labels)
    assert resources.items() <= node.status.allocatable.items() and resources.items() <= node.status.capacity.items()
    kubernetes_validate.validate(as_dict(k8s_api_client, node), "1.29", strict=True)
    assert [n.metadata.name for n in core.list_node(label_selector="nvidia.com/gpu.present=true").items] == ["n1"]
    tainted = taint_disrupted(core, "n1")
    assert [(t.key, t.effect) for t in tainted.spec.taints] == [("karpenter.sh/disrupted", "NoSchedule")]
    assert len(taint_disrupted(core, "n1").spec.taints) == 1  # idempotent


# --- offline validation, fault injection, asyncio clients --------------------------------------------

VALID_OBJECTS = {
    "Pod": pod_body("p1"),
    "Job": {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x:1"}]}}},
    },
    "Lease": {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2024-01-01T00:00:00.000000Z"},
    },
    "Binding": {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-a"},
    },
    "Eviction": {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p1"},
        "deleteOptions": {"gracePeriodSeconds": 30},
    },
    "GPU node": gpu_node("gpu-a", mig={"1g.10gb": 7}),
}


@pytest.mark.parametrize("obj", VALID_OBJECTS.values(), ids=VALID_OBJECTS.keys())
def test_kubernetes_validate_works_offline(obj: Obj) -> None:
    assert kubernetes_validate.validate(obj, "1.29", strict=True) == "1.29"


INVALID_OBJECTS = {
    "Pod without containers": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
    "Binding without target": {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}},
    "Lease with a typo": {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holder": "a"},
    },
}


@pytest.mark.parametrize("obj", INVALID_OBJECTS.values(), ids=INVALID_OBJECTS.keys())
def test_kubernetes_validate_rejects_invalid_objects(obj: Obj) -> None:
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.29", strict=True)


def test_kmock_reactions_still_inject_faults(k8s_cluster: Cluster, core: client.CoreV1Api) -> None:
    def inject() -> None:
        _ = k8s_cluster.server["post /api/v1/namespaces/default/pods"][:1] << 503  # the next create only

    k8s_cluster.call(inject)
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(NS, pod_body("p1"))
    assert caught.value.status == 503
    assert core.list_namespaced_pod(NS).items == []  # the intercepted request stored nothing
    assert core.create_namespaced_pod(NS, pod_body("p1")).metadata.name == "p1"


@pytest.mark.asyncio
async def test_asyncio_client_lists_and_watches(k8s_cluster: Cluster) -> None:
    aio = pytest.importorskip("kubernetes.aio", reason="kubernetes.aio ships with kubernetes>=37")
    configuration = aio.client.Configuration(host=k8s_cluster.url)
    async with aio.client.ApiClient(configuration) as api:
        core = aio.client.CoreV1Api(api)
        await core.create_namespaced_pod(NS, pod_body("p1"))
        listed = await core.list_namespaced_pod(NS)
        assert [p.metadata.name for p in listed.items] == ["p1"]
        w = aio.watch.Watch()
        seen = []
        async for event in w.stream(core.list_namespaced_pod, NS, timeout_seconds=2):
            seen.append((event["type"], event["object"].metadata.name))
            w.stop()
        await w.close()
        assert seen == [("ADDED", "p1")]


# --- faults a real API server produces (tests/support/k8s/faults.py) -----------------------------


def test_injected_errors_carry_a_status_and_retry_after_and_store_nothing(
    k8s_cluster: Cluster, k8s_api_client: ApiClient
) -> None:
    core = client.CoreV1Api(k8s_api_client)
    plan = k8s_cluster.server.faults
    plan.add(verb="create", resource="pods", status=429, retry_after_s=3, times=1)
    status, body = raw(core.create_namespaced_pod, NS, pod_body("p1"))
    assert status == 429 and body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 3
    with pytest.raises(ApiException) as info:  # the rule is spent after one request; this one fails on its own
        core.read_namespaced_pod("p1", NS)
    assert info.value.status == 404  # the refused create stored nothing
    plan.add(verb="create", resource="pods", status=503, retry_after_s=1, times=1)
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(NS, pod_body("p1"))
    assert info.value.status == 503 and info.value.headers["Retry-After"] == "1"
    assert core.create_namespaced_pod(NS, pod_body("p1")).metadata.name == "p1"
    assert [s.outcome for s in plan.seen(verb="create", resource="pods")] == ["429", "503", "served"]


def test_a_409_storm_on_binding_then_the_real_binding(k8s_cluster: Cluster, k8s_api_client: ApiClient) -> None:
    core = client.CoreV1Api(k8s_api_client)
    create_gpu_node(core, "gpu-a", gpu_count=1)
    core.create_namespaced_pod(NS, pod_body("p1", scheduler="gpufleet"))
    k8s_cluster.server.faults.add(verb="create", resource="pods/binding", status=409, times=3)
    assert [bind(core, "p1", "gpu-a")[0] for _ in range(4)] == [409, 409, 409, 201]
    assert core.read_namespaced_pod("p1", NS).spec.node_name == "gpu-a"


def test_a_silent_server_is_a_client_timeout_and_delays_are_served_late(
    k8s_cluster: Cluster, k8s_api_client: ApiClient
) -> None:
    core = client.CoreV1Api(k8s_api_client)
    plan = k8s_cluster.server.faults
    plan.add(verb="list", resource="nodes", hang=True)
    began = time.monotonic()
    with pytest.raises(Exception) as info:  # urllib3's ReadTimeoutError: the client's own deadline
        core.list_node(_request_timeout=0.5)
    assert 0.4 < time.monotonic() - began < 3.0, info.value
    assert "timed out" in str(info.value).lower() or "timeout" in type(info.value).__name__.lower()
    plan.clear()  # the partition heals
    assert core.list_node(_request_timeout=2).items == []
    plan.add(verb="get", resource="namespaces", delay_s=0.4, times=1)
    began = time.monotonic()
    core.read_namespace(NS)
    assert time.monotonic() - began >= 0.35
    assert plan.seen(verb="get", resource="namespaces")[-1].outcome == "delayed"


def test_a_share_of_calls_fails_with_a_seeded_probability(k8s_cluster: Cluster, k8s_api_client: ApiClient) -> None:
    core = client.CoreV1Api(k8s_api_client)
    k8s_cluster.server.faults.add(verb="list", resource="pods", status=500, probability=0.3)
    codes = [raw(core.list_namespaced_pod, NS)[0] for _ in range(200)]
    assert set(codes) == {200, 500} and 30 <= codes.count(500) <= 90, codes.count(500)


# --- the node lifecycle (tests/support/k8s/nodelifecycle.py) --------------------------------------


def _until(predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def _taints(core: client.CoreV1Api, node: str) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in core.read_node(node).spec.taints or []}


def _running_pod(core: client.CoreV1Api, name: str, node: str, **kwargs: Any) -> None:
    core.create_namespaced_pod(NS, pod_body(name, scheduler="gpufleet", **kwargs))
    assert bind(core, name, node)[0] == 201
    _until(lambda: core.read_namespaced_pod(name, NS).status.phase == "Running")


def test_every_pod_tolerates_not_ready_and_unreachable_for_300_s(k8s_api_client: ApiClient) -> None:
    core = client.CoreV1Api(k8s_api_client)
    pod = core.create_namespaced_pod(NS, pod_body("p1"))
    got = {(t.key, t.effect, t.toleration_seconds) for t in pod.spec.tolerations}
    assert got == {
        ("node.kubernetes.io/not-ready", "NoExecute", 300),
        ("node.kubernetes.io/unreachable", "NoExecute", 300),
    }
    body = pod_body("p2")
    body["spec"]["tolerations"] = [
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    ]
    keys = [t.key for t in core.create_namespaced_pod(NS, body).spec.tolerations]
    assert keys == ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"]  # its own kept as it is


def test_cordon_and_pressure_taint_the_node_and_running_pods_stay(
    k8s_cluster: Cluster, k8s_api_client: ApiClient
) -> None:
    from tests.support.k8s.nodelifecycle import cordon, set_node_condition

    core = client.CoreV1Api(k8s_api_client)
    create_gpu_node(core, "gpu-a", gpu_count=1)
    _running_pod(core, "p1", "gpu-a")
    cordon(core, "gpu-a")
    _until(lambda: ("node.kubernetes.io/unschedulable", "NoSchedule") in _taints(core, "gpu-a"))
    set_node_condition(core, "gpu-a", "DiskPressure", "True", "KubeletHasDiskPressure")
    _until(lambda: ("node.kubernetes.io/disk-pressure", "NoSchedule") in _taints(core, "gpu-a"))
    time.sleep(0.3)
    pod = core.read_namespaced_pod("p1", NS)
    assert pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
    cordon(core, "gpu-a", unschedulable=False)
    set_node_condition(core, "gpu-a", "DiskPressure", "False", "KubeletHasNoDiskPressure")
    _until(lambda: _taints(core, "gpu-a") == set())


def test_a_not_ready_blip_evicts_nothing_a_long_outage_evicts_after_the_toleration(
    k8s_cluster_factory: Callable[..., Cluster],
) -> None:
    from tests.support.k8s.nodelifecycle import NodeLifecycleConfig, set_node_condition

    cluster = k8s_cluster_factory(node_lifecycle=NodeLifecycleConfig(time_scale=0.01))  # 300 s -> 3 s
    core = client.CoreV1Api(cluster.api_client())
    create_gpu_node(core, "gpu-a", gpu_count=2)
    _running_pod(core, "tolerant", "gpu-a")
    intolerant = pod_body("intolerant", scheduler="gpufleet")
    intolerant["spec"]["tolerations"] = [
        {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}
        for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    core.create_namespaced_pod(NS, intolerant)
    assert bind(core, "intolerant", "gpu-a")[0] == 201
    _until(lambda: core.read_namespaced_pod("intolerant", NS).status.phase == "Running")
    # a blip: Unknown for 0.5 s (50 s at this scale; timeAdded has whole seconds), back to Ready
    set_node_condition(core, "gpu-a", "Ready", "Unknown", "NodeStatusUnknown")
    _until(lambda: ("node.kubernetes.io/unreachable", "NoExecute") in _taints(core, "gpu-a"))
    _until(
        lambda: (
            core.read_namespaced_pod("tolerant", NS).status.conditions
            and any(
                c.type == "Ready" and c.status == "False"
                for c in core.read_namespaced_pod("tolerant", NS).status.conditions
            )
        )
    )
    time.sleep(0.5)
    set_node_condition(core, "gpu-a", "Ready", "True", "KubeletReady")
    _until(lambda: ("node.kubernetes.io/unreachable", "NoExecute") not in _taints(core, "gpu-a"))
    time.sleep(3.0)
    assert core.read_namespaced_pod("tolerant", NS).metadata.deletion_timestamp is None
    assert cluster.node_lifecycle is not None
    assert [e[1] for e in cluster.node_lifecycle.evicted] == ["intolerant"]  # no toleration time: at once
    # an outage longer than the toleration: the pod is evicted, with the taint manager's condition
    set_node_condition(core, "gpu-a", "Ready", "False", "KubeletNotReady")
    _until(lambda: "tolerant" in [e[1] for e in cluster.node_lifecycle.evicted], timeout=6)
    assert cluster.node_lifecycle.evicted[-1] == (NS, "tolerant", "node.kubernetes.io/not-ready")


# --- the kubelet's admission (tests/support/k8s/admission.py) -------------------------------------


def _gpu_pod(name: str, gpus: int = 1, resource: str = "nvidia.com/gpu", **spec: Any) -> Obj:
    body = pod_body(name, scheduler="gpufleet")
    body["spec"]["containers"][0]["resources"] = {"limits": {resource: str(gpus)}}
    body["spec"].update(spec)
    return body


def _phase(core: client.CoreV1Api, name: str) -> tuple[str, str | None, str | None]:
    pod = core.read_namespaced_pod(name, NS)
    return pod.status.phase, pod.status.reason, pod.status.message


ADMISSION_CASES = {
    "fits": ({}, {}, ("Running", None)),
    "node selector matches": (
        {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}, {}, ("Running", None),
    ),
    "node selector does not": (
        {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}}, {}, ("Failed", "NodeAffinity"),
    ),
    "required affinity In": (
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]},
        ]}}}},
        {}, ("Failed", "NodeAffinity"),
    ),
    "required affinity, second term matches": (
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}]},
        ]}}}},
        {}, ("Running", None),
    ),
    "NoExecute taint not tolerated": (
        {}, {"taints": [{"key": "sku", "value": "gpu", "effect": "NoExecute"}]}, ("Failed", "TaintToleration"),
    ),
    "NoExecute taint tolerated": (
        {"tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}]},
        {"taints": [{"key": "sku", "value": "gpu", "effect": "NoExecute"}]}, ("Running", None),
    ),
    "NoSchedule taint is the scheduler's business": (
        {}, {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]}, ("Running", None),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ADMISSION_CASES))
def test_the_kubelet_admits_or_rejects_a_bound_pod(k8s_cluster_factory: Callable[..., Cluster], case: str) -> None:
    spec, node_options, (phase, reason) = ADMISSION_CASES[case]
    # the kubelet alone: with the node lifecycle running, an untolerated NoExecute taint also evicts the pod
    core = client.CoreV1Api(k8s_cluster_factory(node_lifecycle=None).api_client())
    create_gpu_node(core, "gpu-a", gpu_count=1, **node_options)
    core.create_namespaced_pod(NS, _gpu_pod("p1", **spec))
    assert bind(core, "p1", "gpu-a")[0] == 201  # binding is the API server's: it never checks these
    got = _until(lambda: _phase(core, "p1") if _phase(core, "p1")[0] in ("Running", "Failed") else None)
    assert (got[0], got[1]) == (phase, reason)
    if phase == "Failed":
        assert got[2] == f"Pod was rejected: Predicate {reason} failed"


def test_more_gpus_than_allocatable_is_out_of_the_resource(k8s_cluster: Cluster, k8s_api_client: ApiClient) -> None:
    core = client.CoreV1Api(k8s_api_client)
    create_gpu_node(core, "gpu-a", gpu_count=1)
    core.create_namespaced_pod(NS, _gpu_pod("p1"))
    core.create_namespaced_pod(NS, _gpu_pod("p2"))
    assert bind(core, "p1", "gpu-a")[0] == 201
    _until(lambda: _phase(core, "p1")[0] == "Running")
    assert bind(core, "p2", "gpu-a")[0] == 201
    got = _until(lambda: _phase(core, "p2") if _phase(core, "p2")[0] == "Failed" else None)
    assert got == (
        "Failed",
        "OutOfnvidia.com/gpu",
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 1, capacity: 1",
    )
    assert k8s_cluster.kubelet is not None and k8s_cluster.kubelet.rejected == [(NS, "p2", "OutOfnvidia.com/gpu")]


def test_a_resource_the_node_does_not_list_yet_is_ignored_and_the_pod_starts_without_it(
    k8s_cluster: Cluster, k8s_api_client: ApiClient
) -> None:
    """Before the device plugin registers, the node has no nvidia.com/gpu at all: the kubelet drops the
    request (removeMissingExtendedResources) and the containers start without a GPU."""
    core = client.CoreV1Api(k8s_api_client)
    create_gpu_node(core, "gpu-a", gpu_count=1)
    core.create_namespaced_pod(NS, _gpu_pod("p1", resource="nvidia.com/mig-1g.10gb"))
    assert bind(core, "p1", "gpu-a")[0] == 201
    _until(lambda: _phase(core, "p1")[0] == "Running")
    assert k8s_cluster.kubelet is not None
    assert k8s_cluster.kubelet.without == [(NS, "p1", ("nvidia.com/mig-1g.10gb",))]


# --- the Job controller's tracking finalizers (tests/support/k8s/jobcontroller.py) -----------------


def test_job_tracking_finalizers_keep_a_deleted_pod_until_it_is_counted(
    k8s_cluster: Cluster, k8s_api_client: ApiClient
) -> None:
    from tests.support.k8s.jobcontroller import TRACKING, JobController

    core, batch = client.CoreV1Api(k8s_api_client), client.BatchV1Api(k8s_api_client)
    create_gpu_node(core, "gpu-a", gpu_count=1)
    template = {"spec": {"restartPolicy": "Never", "schedulerName": "gpufleet",
                         "containers": [{"name": "main", "image": "registry.local/train:1.0"}]}}  # fmt: skip
    batch.create_namespaced_job(
        NS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j1"},
             "spec": {"template": template, "backoffLimit": 3}},
    )  # fmt: skip
    jobs = JobController(k8s_api_client, tracking_finalizers=True).start()
    try:
        first = _until(lambda: core.list_namespaced_pod(NS).items)[0]
        assert first.metadata.finalizers == [TRACKING]
        assert bind(core, first.metadata.name, "gpu-a")[0] == 201
        _until(lambda: core.read_namespaced_pod(first.metadata.name, NS).status.phase == "Running")
        jobs.stop()  # the controller is down while the pod is deleted
        core.delete_namespaced_pod(first.metadata.name, NS)
        _until(lambda: core.read_namespaced_pod(first.metadata.name, NS).status.phase == "Failed")
        time.sleep(0.3)  # the kubelet has let go; only the finalizer holds the pod now
        held = core.read_namespaced_pod(first.metadata.name, NS)
        assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == [TRACKING]
        jobs = JobController(k8s_api_client, tracking_finalizers=True).start()
        gone = _until(lambda: first.metadata.name not in {p.metadata.name for p in core.list_namespaced_pod(NS).items})
        assert gone
        _until(lambda: (batch.read_namespaced_job("j1", NS).status.failed or 0) == 1)
        second = _until(
            lambda: [p for p in core.list_namespaced_pod(NS).items if p.metadata.name != first.metadata.name]
        )
        assert second[0].metadata.finalizers == [TRACKING]
        # an unbound pod of a deleted Job loses its finalizer and goes with the Job
        batch.delete_namespaced_job("j1", NS, propagation_policy="Background")
        _until(lambda: core.list_namespaced_pod(NS).items == [])
    finally:
        jobs.stop()
    assert not jobs.errors, jobs.errors
