"""A small gpufleet on the substrate, for placement tests: the server's controller in-process (SQLite
store, :class:`~gpufleet.k8s.adapter.backend.KubernetesBackend`, the pod adopter as a leader's
periodic duty), the Job controller stand-in, and helpers to submit jobs, create pods to adopt and read
what happened (:class:`PlaceFleet`). Nodes are the test's (``cluster.add_gpu_node``), added before or
while the controller runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import kubernetes.client

from gpufleet.control.controller import Controller, ControllerConfig, Periodic
from gpufleet.control.leader import FileLeadership
from gpufleet.io.catalog import load_catalog
from gpufleet.k8s.adapter.backend import KubernetesBackend, KubernetesOptions
from gpufleet.k8s.adopt import PodAdopter
from gpufleet.scheduling.profile import Profile
from gpufleet.services import jobs as control_jobs
from gpufleet.services.submit import prepare_submit
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow
from gpufleet.wire import JobSubmit, Role
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.jobcontroller import JobController

__all__ = ["PlaceFleet"]


class PlaceFleet:
    def __init__(self, cluster: Cluster, tmp: Path, team: str = "alpha") -> None:
        self.cluster = cluster
        self.team = team
        self.client = cluster.api_client()
        self.core: Any = cast(Any, kubernetes.client.CoreV1Api(self.client))
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}})
        self.jobs = JobController(self.client, interval_s=0.2).start()
        self.db = Database(f"sqlite:///{tmp / 'store.db'}")
        self.db.upgrade()
        with self.db.session() as s:
            repo.ensure_team(s, "default", time.time())
            repo.upsert_team(s, team, now=time.time())
        catalog = load_catalog()
        self.backend = KubernetesBackend(self.client, catalog, KubernetesOptions())
        adopter = PodAdopter(self.db, self.client)
        self.ctl = Controller(
            self.db,
            self.backend,
            Profile(),
            ControllerConfig(
                poll_interval_s=0.2,
                cycle_interval_s=0.3,
                grace_s=5.0,
                telemetry_interval_s=3600,
                budget_interval_s=3600,
                replica="placement-test",
            ),
            leadership=FileLeadership(tmp / "leader.lock"),
            catalog=catalog,
            periodic=[Periodic("adopt pods", 0.3, lambda now: adopter.adopt())],
        )
        self._started = False

    def start(self) -> PlaceFleet:
        self.ctl.start()
        self._started = True
        return self

    def submit(self, name: str, **body: Any) -> str:
        """Submit a job through the API's path (``JobSubmit`` fields: gpus, gpu_milli, ...)."""
        sub = JobSubmit(command=["python", "serve.py"], name=name, team=self.team, image="acme/serve:1", **body)
        prepared = prepare_submit(sub, caller_team="default", caller_role=Role.ADMIN)
        with self.db.session() as s:
            row, _ = control_jobs.submit(
                s,
                prepared,
                priority="normal",
                token_id=None,
                role=Role.ADMIN,
                run_as_required=False,
                single_team=False,
                idempotency_key=None,
                now=time.time(),
            )
            job_id = row.id
        self.ctl.wake()
        return job_id

    def create_pod(self, name: str, limits: Mapping[str, str], **spec: Any) -> None:
        """A bare pod for gpufleet to adopt (``schedulerName: gpufleet``), with ``spec`` fields added."""
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.team},
            "spec": {
                "schedulerName": "gpufleet",
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "acme/serve:1", "resources": {"limits": dict(limits)}}],
                **spec,
            },
        }
        self.core.create_namespaced_pod(self.team, body)

    def pods(self) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_pod(self.team, _preload_content=False)
        return list(json.loads(resp.data)["items"])

    def rows(self) -> dict[str, JobRow]:
        with self.db.session(readonly=True) as s:
            rows = list(s.query(JobRow).all())
            s.expunge_all()
        return {r.id: r for r in rows}

    def waiting(self) -> Mapping[str, str]:
        """Why each queued job waits (the loop's words)."""
        return dict(self.ctl.loop.waiting)

    def wait_for(self, cond: Callable[[], object], what: str, timeout: float = 30.0) -> None:
        self.cluster.wait_for(cond, timeout=timeout, interval=0.1, what=what)

    def settle(self, seconds: float = 1.5) -> None:
        """Let the controller run a few cycles (for asserting that something does *not* happen)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.ctl.wake()
            time.sleep(0.1)

    def close(self) -> None:
        if self._started:
            self.ctl.stop()
        self.jobs.stop()
        self.db.dispose()
        self.client.close()  # type: ignore[no-untyped-call]
        assert not self.jobs.errors, self.jobs.errors
