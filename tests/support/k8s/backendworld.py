"""A Kubernetes backend on the substrate, driven by hand: a cluster with two GPU nodes (``gpu-a``
on-demand, ``gpu-b`` spot), the Job controller stand-in, and :class:`KubernetesBackend` polled by the
test (``make_world``, a fixture for tests/k8s/conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest

from gpufleet.backends.base import BackendEvent, EventKind, LaunchRequest
from gpufleet.k8s.adapter.backend import KubernetesBackend
from gpufleet.model.job import PodPlacement
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.jobcontroller import JobController
from tests.support.k8s.kubelet import KubeletConfig

NS = "alpha"


class World:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.client = cluster.api_client()
        self.core: Any = kubernetes.client.CoreV1Api(self.client)
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        cluster.add_gpu_node("gpu-a")
        cluster.add_gpu_node("gpu-b", capacity_type="spot")
        self.jobs = JobController(self.client).start()
        self.backend = KubernetesBackend(self.client)
        self.events: list[BackendEvent] = []

    def close(self) -> None:
        self.backend.close()  # its informers' threads
        self.jobs.stop()
        self.client.close()  # type: ignore[no-untyped-call]
        assert not self.jobs.errors, self.jobs.errors

    def request(self, job: str, *nodes: str, run: int = 1) -> LaunchRequest:
        return LaunchRequest(
            job,
            run,
            ["python", "train.py"],
            tuple(PodPlacement(n, (0,)) for n in nodes),
            team=NS,
            grace_s=5,
            image="ghcr.io/acme/train:1.4",
        )

    def until(
        self, pred: Callable[[list[BackendEvent]], bool], timeout: float = 30.0, backend: Any = None
    ) -> list[BackendEvent]:
        """Poll ``backend`` (the world's own by default: another is a successor leader's) until ``pred``
        holds for the events seen so far."""
        polled = backend if backend is not None else self.backend
        seen: list[BackendEvent] = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            seen += polled.poll()
            if pred(seen):
                return seen
            time.sleep(0.05)
        raise AssertionError(f"not reached; events: {seen}")

    def running(self, job: str) -> None:
        """Poll the backend (it binds the pods) until a pod of ``job`` runs."""

        def check() -> bool:
            self.events += self.backend.poll()
            return any(p.get("status", {}).get("phase") == "Running" for p in self.pods(job))

        self.cluster.wait_for(check, timeout=10, interval=0.05, what=f"a pod of {job} running")

    def pods(self, job: str) -> list[dict[str, Any]]:
        import json

        resp = self.core.list_namespaced_pod(NS, label_selector=f"gpufleet.io/job-id={job}", _preload_content=False)
        return list(json.loads(resp.data)["items"])


@pytest.fixture
def make_world(k8s_cluster_factory: Callable[..., Cluster]) -> Iterator[Callable[..., World]]:
    worlds: list[World] = []

    def make(duration_s: float | None = 0.6, log_every_s: float | None = None, checkpoint_s: float = 0.2) -> World:
        kubelet = KubeletConfig(default_duration_s=duration_s, checkpoint_s=checkpoint_s, log_every_s=log_every_s)
        w = World(k8s_cluster_factory(kubelet=kubelet))
        worlds.append(w)
        return w

    yield make
    for w in worlds:
        w.close()


def ended(job: str, kind: EventKind) -> Callable[[list[BackendEvent]], bool]:
    return lambda evs: any(e.job_id == job and e.kind is kind for e in evs)
