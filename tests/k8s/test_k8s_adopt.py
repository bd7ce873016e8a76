"""Adoption of pods people create (:mod:`gpufleet.k8s.adopt`) on the Kubernetes test
substrate: what GPU shape an adopted job gets from its pods' requests and node selectors.

A replica of a time-sliced GPU is ``1/replicas`` of a GPU for placement and cost: a pod that asks for
``nvidia.com/gpu.shared``, or selects shared GPUs with GPU Feature Discovery's labels, becomes a
fraction; a plain ``nvidia.com/gpu: k`` stays ``k`` whole GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpufleet.k8s.adopt import PodAdopter
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow
from tests.support.k8s.cluster import Cluster

NS = "vision"


def _pod(name: str, resources: dict[str, str], selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpufleet",
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "acme/infer:1", "resources": {"limits": resources}}],
    }
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


@pytest.fixture
def world(k8s_cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Any, Database, PodAdopter]]:
    api = k8s_cluster.api_client()
    core: Any = client.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    k8s_cluster.add_gpu_node("a100", gpu_count=8)
    k8s_cluster.add_gpu_node(
        "l4-ts4", product="NVIDIA-L4", gpu_count=4, gpu_memory_mib=23034, replicas=4, instance_type="g6.12xlarge"
    )
    k8s_cluster.add_gpu_node(
        "l4-ts8",
        product="NVIDIA-L4",
        gpu_count=4,
        gpu_memory_mib=23034,
        replicas=8,
        instance_type="g6.12xlarge",
        labels={"pool": "dense"},
    )
    db = Database(f"sqlite:///{tmp_path / 'store.db'}")
    db.upgrade()
    with db.session() as s:
        repo.upsert_team(s, NS, now=time.time())
    adopter = PodAdopter(db, api)
    yield core, db, adopter
    adopter.close()  # its informer
    db.dispose()
    api.close()  # type: ignore[no-untyped-call]


SHAPES = {
    # name: (limits, nodeSelector, (gpus, gpu_milli))
    "whole-gpus": ({"nvidia.com/gpu": "2"}, None, (2, 1000)),
    "replica-by-replicas-label": ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.replicas": "4"}, (1, 250)),
    "two-replicas-of-8": ({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu.replicas": "8"}, (1, 250)),
    # the selector picks both shared nodes: the smallest replica count (the larger share) is held
    "replica-by-strategy-label": (
        {"nvidia.com/gpu": "1"},
        {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
        (1, 250),
    ),
    "replica-by-strategy-on-one-pool": (
        {"nvidia.com/gpu": "1"},
        {"nvidia.com/gpu.sharing-strategy": "time-slicing", "pool": "dense"},
        (1, 125),
    ),
    "renamed-shared-resource": ({"nvidia.com/gpu.shared": "2"}, None, (1, 500)),
    "four-replicas-are-a-gpu": ({"nvidia.com/gpu": "4"}, {"nvidia.com/gpu.replicas": "4"}, (1, 1000)),
}


@pytest.mark.parametrize("name", SHAPES)
def test_adopted_gpu_shape(world: tuple[Any, Database, PodAdopter], name: str) -> None:
    core, db, adopter = world
    limits, selector, want = SHAPES[name]
    core.create_namespaced_pod(NS, _pod(name, limits, selector))
    stats = adopter.adopt()
    assert (stats.adopted, stats.skipped) == (1, 0)
    with db.session(readonly=True) as s:
        (row,) = s.query(JobRow).all()
        assert (row.gpus, row.gpu_milli) == want


def test_the_adopter_watches_rather_than_lists_every_pass(world: tuple[Any, Database, PodAdopter]) -> None:
    """Issue 22, observation 11: every pass (2 s) listed every pod with schedulerName gpufleet — all of
    gpufleet's own among them. Now the pods waiting for adoption are listed once, then watched."""
    core, db, adopter = world
    lists: list[str] = []
    rest = adopter.core.api_client.rest_client
    inner = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "GET" and "/pods" in url and "watch=true" not in url:
            lists.append(url)
        return inner(method, url, *args, **kwargs)

    rest.request = request
    for i in range(5):
        core.create_namespaced_pod(NS, _pod(f"w{i}", {"nvidia.com/gpu": "1"}, None))
        deadline = time.monotonic() + 10
        while adopter.adopt().adopted == 0:
            assert time.monotonic() < deadline, f"pod w{i} was not adopted"
            time.sleep(0.05)
    assert len(lists) == 1  # before: one list per pass
    with db.session(readonly=True) as s:
        assert s.query(JobRow).count() == 5


def test_shared_gpus_no_node_offers_are_not_adopted_yet(world: tuple[Any, Database, PodAdopter]) -> None:
    core, db, adopter = world
    core.create_namespaced_pod(NS, _pod("nowhere", {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.sharing-strategy": "mps"}))
    stats = adopter.adopt()
    assert (stats.adopted, stats.skipped) == (0, 1)
    with db.session(readonly=True) as s:
        assert s.query(JobRow).count() == 0


def test_an_adopted_pods_mlflow_run_goes_with_its_job(world: tuple[Any, Database, PodAdopter]) -> None:
    """A Ray or Kubeflow pod labelled ``mlflow-run-id`` names the run its job's cost is logged to."""
    core, db, adopter = world
    pod = _pod("trainer", {"nvidia.com/gpu": "1"})
    pod["metadata"]["labels"] = {"mlflow-run-id": "0123456789abcdef0123456789abcdef", "project": "vision"}
    core.create_namespaced_pod(NS, pod)
    assert adopter.adopt().adopted == 1
    with db.session(readonly=True) as s:
        (row,) = s.query(JobRow).all()
        assert row.labels["mlflow-run-id"] == "0123456789abcdef0123456789abcdef" and row.project == "vision"
