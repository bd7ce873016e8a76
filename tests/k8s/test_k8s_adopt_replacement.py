"""Issue 22, observation 6: a replacement pod of an adopted Job joins its gpufleet job.

A ``batch/v1`` Job people create with ``schedulerName: gpufleet`` is adopted as one gpufleet job
(its uid is the idempotency key, and the adopter submits with no submitter). When its pod is
evicted or deleted, the Job controller (tests/support/k8s/jobcontroller.py, with its job-tracking
finalizers) makes a replacement; the adopter must label that pod with the same job — a NULL
submitter never collides in the store's unique key, so before the store looked the key up first
every replacement became a second job. Checked end to end with the server's controller (the world
loop, the Kubernetes backend, adoption as the leader's periodic duty) on SQLite and PostgreSQL:
exactly one job per owner throughout, the replacement runs as that job, the job ends once. And two
adopter replicas adopting the same Job at the same moment make one job.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from gpufleet.control.controller import Controller, ControllerConfig, Periodic
from gpufleet.control.leader import FileLeadership
from gpufleet.k8s.adapter.backend import KubernetesBackend
from gpufleet.k8s.adopt import PodAdopter
from gpufleet.scheduling.profile import Profile
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.jobcontroller import TRACKING, JobController
from tests.support.k8s.kubelet import KubeletConfig

NS = "vision"
RUN_S = 3  # each pod's container runs this long, then exits 0
# gpufleet.k8s.vocabulary.KEY_JOB_ID and LABEL_ADOPTED_OWNER, spelled out: this test also runs on
# commits older than the vocabulary module (the fails-before check of observation 6)
KEY_JOB_ID = "gpufleet.io/job-id"
LABEL_ADOPTED_OWNER = "gpufleet.io/adopted-owner"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def _job(name: str, *, ignore_disruptions: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "backoffLimit": 3,
        "template": {
            "metadata": {"annotations": {"kwok.gpufleet.io/duration-s": str(RUN_S)}},
            "spec": {
                "schedulerName": "gpufleet",
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {"name": "main", "image": "acme/train:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        },
    }
    if ignore_disruptions:  # what a careful author writes (and the API then implies podReplacementPolicy Failed)
        spec["podFailurePolicy"] = {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS}, "spec": spec}


class World:
    """The substrate (kubelet, Job controller with tracking finalizers) and the server's controller."""

    def __init__(self, cluster: Cluster, db: Database, tmp: Path) -> None:
        self.cluster = cluster
        self.client = cluster.api_client()
        self.core: Any = kubernetes.client.CoreV1Api(self.client)
        self.batch: Any = kubernetes.client.BatchV1Api(self.client)
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        self.db = db
        with db.session() as s:
            repo.upsert_team(s, NS, quotas_milli={"*": 8000}, now=time.time())
        self.jobs = JobController(self.client).start()
        assert self.jobs.tracking_finalizers  # the default, as on a real cluster
        adopter = PodAdopter(db, self.client)
        self.ctl = Controller(
            db,
            KubernetesBackend(self.client),
            Profile(),
            ControllerConfig(
                poll_interval_s=0.1, cycle_interval_s=0.2, telemetry_interval_s=3600, budget_interval_s=3600
            ),
            leadership=FileLeadership(tmp / "leader.lock"),
            periodic=[Periodic("adopt pods", 0.0, lambda now: adopter.adopt())],
        )

    def close(self) -> None:
        self.ctl.stop()
        self.jobs.stop()
        self.client.close()  # type: ignore[no-untyped-call]
        assert not self.jobs.errors, self.jobs.errors

    def pods(self) -> list[dict[str, Any]]:
        return list(json.loads(self.core.list_namespaced_pod(NS, _preload_content=False).data)["items"])

    def job_rows(self) -> list[JobRow]:
        with self.db.session(readonly=True) as s:
            return list(s.query(JobRow).all())

    def drive(self, pred: Callable[[], bool], what: str, timeout: float = 40.0) -> None:
        """Run the controller's loop (adoption included) until ``pred``; at every turn, the owner is
        one gpufleet job at most."""
        end = time.monotonic() + timeout
        while True:
            self.ctl.tick()
            rows = self.job_rows()
            assert len(rows) <= 1, f"one owner, {len(rows)} gpufleet jobs: {[(r.id, r.state) for r in rows]}"
            if pred():
                return
            assert time.monotonic() < end, f"not reached: {what}; jobs {[(r.id, r.state) for r in rows]}"
            time.sleep(0.1)


@pytest.fixture
def world(k8s_cluster_factory: Callable[..., Cluster], db: Database, tmp_path: Path) -> Iterator[World]:
    w = World(k8s_cluster_factory(kubelet=KubeletConfig(default_duration_s=RUN_S)), db, tmp_path)
    yield w
    w.close()


def _running(w: World) -> dict[str, Any] | None:
    return next((p for p in w.pods() if (p.get("status") or {}).get("phase") == "Running"), None)


def _evict(w: World, pod: dict[str, Any]) -> None:
    name = pod["metadata"]["name"]
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
    w.core.create_namespaced_pod_eviction(name, NS, body, _preload_content=False)


def _delete(w: World, pod: dict[str, Any]) -> None:
    w.core.delete_namespaced_pod(pod["metadata"]["name"], NS, _preload_content=False)


# name: (the pod is disrupted while it runs or while it waits for gpufleet, how, the Job ignores disruptions)
SCENARIOS = {
    "evicted-while-running": ("running", _evict, True),
    "evicted-while-running-no-policy": ("running", _evict, False),
    "deleted-while-waiting": ("waiting", _delete, False),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENARIOS)
def test_a_replacement_pod_joins_its_adopted_job_and_the_job_ends_once(world: World, name: str) -> None:
    when, disrupt, ignore = SCENARIOS[name]
    w = world
    if when == "running":
        w.cluster.add_gpu_node("gpu-a")
    w.batch.create_namespaced_job(NS, _job("train", ignore_disruptions=ignore), _preload_content=False)
    w.drive(lambda: len(w.job_rows()) == 1, "the Job's pod adopted")
    (row,) = w.job_rows()
    first = w.pods()[0]
    assert TRACKING in first["metadata"]["finalizers"]
    if when == "running":
        w.drive(lambda: _running(w) is not None, "the adopted pod bound and running")
        first = _running(w) or first
    else:  # no node yet: the job waits in gpufleet's queue, its pod unbound
        w.drive(lambda: all(p["metadata"].get("labels", {}).get(KEY_JOB_ID) for p in w.pods()), "labelled")
    disrupt(w, first)

    def replaced() -> bool:
        others = [p for p in w.pods() if p["metadata"]["uid"] != first["metadata"]["uid"]]
        return any(p["metadata"].get("labels", {}).get(KEY_JOB_ID) for p in others)

    w.drive(replaced, "a replacement made by the Job controller and labelled by the adopter")
    if when == "waiting":
        w.cluster.add_gpu_node("gpu-a")
    w.drive(lambda: w.job_rows()[0].state in TERMINAL, "the job ended")
    (end,) = w.job_rows()
    assert end.id == row.id and end.state == "SUCCEEDED", (end.state, end.reason)
    pods = w.pods()
    replacement = [p for p in pods if p["metadata"]["uid"] != first["metadata"]["uid"]]
    assert len(replacement) == 1 and replacement[0]["status"]["phase"] == "Succeeded"
    assert replacement[0]["metadata"]["labels"][KEY_JOB_ID] == row.id
    assert w.jobs.created[f"{NS}/train"] == 2
    with w.db.session(readonly=True) as s:
        ends = [e for e in repo.job_events(s, row.id) if e.new in TERMINAL]
    assert len(ends) == 1, [(e.old, e.new, e.reason) for e in ends]
    # the Job completes; its pods' finalizers are gone once counted
    w.drive(lambda: bool(_conditions(w, "train") & {"Complete"}), "the Job complete")
    assert all(TRACKING not in (p["metadata"].get("finalizers") or []) for p in w.pods())


def _conditions(w: World, job: str) -> set[str]:
    got = json.loads(w.batch.read_namespaced_job(job, NS, _preload_content=False).data)
    return {c["type"] for c in (got.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def test_two_adopter_replicas_adopting_one_job_at_once_make_one_job(k8s_cluster: Cluster, db: Database) -> None:
    """Two adopters (a leader handing over, a second replica) see the same waiting pods at the same
    moment: each owner becomes one job, and both label its pods with that job."""
    client = k8s_cluster.api_client()
    core: Any = kubernetes.client.CoreV1Api(client)
    batch: Any = kubernetes.client.BatchV1Api(client)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    with db.session() as s:
        repo.upsert_team(s, NS, now=time.time())
    jobs = JobController(client).start()
    adopters = [PodAdopter(db, client), PodAdopter(db, client)]
    owners = [f"train-{i}" for i in range(4)]
    try:
        for owner in owners:
            batch.create_namespaced_job(NS, _job(owner, ignore_disruptions=True), _preload_content=False)
        k8s_cluster.wait_for(lambda: len(core.list_namespaced_pod(NS).items) == len(owners), timeout=20)
        gate = threading.Barrier(len(adopters))
        failures: list[BaseException] = []

        def adopt(a: PodAdopter) -> None:
            try:
                gate.wait(10)
                a.adopt()
            except BaseException as e:
                failures.append(e)

        threads = [threading.Thread(target=adopt, args=(a,)) for a in adopters]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not failures, failures
        for a in adopters:  # a pass that lost a race is made good by the next
            a.adopt()
        with db.session(readonly=True) as s:
            rows = list(s.query(JobRow).all())
        by_owner: dict[str, list[str]] = {}
        for r in rows:
            by_owner.setdefault(r.labels[LABEL_ADOPTED_OWNER], []).append(r.id)
        assert sorted(len(ids) for ids in by_owner.values()) == [1] * len(owners), by_owner
        pods = json.loads(core.list_namespaced_pod(NS, _preload_content=False).data)["items"]
        labelled = {p["metadata"]["labels"].get(KEY_JOB_ID) for p in pods}
        assert labelled == {ids[0] for ids in by_owner.values()}
    finally:
        jobs.stop()
        client.close()  # type: ignore[no-untyped-call]
    assert not jobs.errors, jobs.errors
