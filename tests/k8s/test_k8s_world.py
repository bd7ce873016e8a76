"""``gpufleet up --backend kubernetes`` end to end, on the closest substrate this machine allows:
two real server processes (API + controller, one SQLite store) driving the test API server
(``tests/k8s``: kmock 0.8 with a real API server's behaviours, a Job controller and a kubelet
stand-in) through a kubeconfig, exactly as they would drive a cluster.

- jobs submitted through the SDK become ``batch/v1`` Jobs in their team's namespace, their pods are
  bound by gpufleet to the nodes its placement chose, they run and succeed;
- the ledger meters each pod from its container's start to its end, to the second;
- the replicas elect one leader through a ``coordination.k8s.io/v1`` Lease; SIGKILL the leader and
  the other takes the Lease over, adopts the running pods and finishes their jobs, each run once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes.client
import pytest
import yaml

from tests.support.k8s.cluster import Cluster
from tests.support.k8s.jobcontroller import JobController
from tests.support.k8s.kubelet import KubeletConfig
from tests.support.serverproc import ServerProcess

pytestmark = pytest.mark.slow

TEAMS = ("alpha", "beta")
# the renew deadline is 2/3 of it: on a CI runner's 2 cores shared by two test workers, each with an
# API server and two server processes, a replica can stall for seconds; at 4 s the Lease once moved
# to the standby mid-launch (a legitimate takeover, which then starts the unbound run again)
LEASE_S = 8.0


def _kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": url, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "gpufleet", "user": {"token": "test"}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "gpufleet"}}],
                "current-context": "test",
            }
        )
    )
    return path


@pytest.fixture
def cluster(k8s_cluster_factory: Callable[..., Cluster]) -> Iterator[tuple[Cluster, Any, JobController]]:
    c = k8s_cluster_factory(kubelet=KubeletConfig(default_duration_s=3.0, checkpoint_s=0.2))
    client = c.api_client()
    core: Any = kubernetes.client.CoreV1Api(client)
    for ns in (*TEAMS, "gpufleet-system"):
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    c.add_gpu_node("gpu-a")
    c.add_gpu_node("gpu-b", capacity_type="spot")
    jobs = JobController(client).start()
    yield c, core, jobs
    jobs.stop()
    client.close()  # type: ignore[no-untyped-call]
    assert not jobs.errors, jobs.errors


def _server(tmp: Path, name: str, kubeconfig: Path, db: str) -> ServerProcess:
    return ServerProcess(
        tmp / name,
        gpus=None,
        db=db,
        replica=name,
        settings={
            "backend": "kubernetes",
            "kubernetes": {"kubeconfig": str(kubeconfig), "lease_duration_s": LEASE_S},
            "node_price_usd_per_hour": None,
        },
    )


def _pods(core: Any, ns: str) -> list[dict[str, Any]]:
    resp = core.list_namespaced_pod(ns, label_selector="gpufleet.io/job-id", _preload_content=False)
    return list(json.loads(resp.data)["items"])


def test_jobs_run_as_bound_pods_are_metered_and_survive_a_leader_kill(
    tmp_path: Path, cluster: tuple[Cluster, Any, JobController]
) -> None:
    c, core, jobs = cluster
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", c.url)
    db = f"sqlite:///{tmp_path / 'store.db'}"
    a = _server(tmp_path, "replica-a", kubeconfig, db).start()
    b: ServerProcess | None = None
    try:
        with a.client() as sdk:
            for team in TEAMS:
                sdk.set_team(team)
            ids = [
                sdk.submit(
                    command=["python", "train.py"],
                    gpus=1 + i % 2,
                    team=TEAMS[i % 2],
                    image="acme/train:1",
                    name=f"j{i}",
                ).id
                for i in range(6)
            ]
            for j in ids:
                assert sdk.wait(j, timeout=60).state == "SUCCEEDED", sdk.get(j)
            # bound by gpufleet to the nodes it chose; each pod of each job ran once
            pods = [p for ns in TEAMS for p in _pods(core, ns)]
            assert len(pods) == len(ids)
            assert {p["spec"]["nodeName"] for p in pods} <= {"gpu-a", "gpu-b"}
            assert all(p["spec"]["containers"][0]["image"] == "acme/train:1" for p in pods)
            # the ledger: each job's GPU-seconds are its pod's container run time × its GPUs, to the second
            usage = sdk.usage("1h", aggregate="job")
            by_job = {r.key["job"]: r for r in usage.rows}
            for p in pods:
                job = p["metadata"]["annotations"]["gpufleet.io/job-id"]
                term = p["status"]["containerStatuses"][0]["state"]["terminated"]
                t0 = time.mktime(time.strptime(term["startedAt"], "%Y-%m-%dT%H:%M:%SZ"))
                t1 = time.mktime(time.strptime(term["finishedAt"], "%Y-%m-%dT%H:%M:%SZ"))
                gpus = int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                assert by_job[job].gpu_hours * 3600 == pytest.approx((t1 - t0) * gpus, abs=1.0 * gpus), job

            # a workload created on the cluster directly (an indexed Job of 2 pods asking gpufleet to
            # schedule them) is adopted as one gang job, bound, run and accounted like the others
            batch: Any = kubernetes.client.BatchV1Api(core.api_client)
            batch.create_namespaced_job(
                "beta",
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": "external", "namespace": "beta"},
                    "spec": {
                        "parallelism": 2,
                        "completions": 2,
                        "completionMode": "Indexed",
                        "backoffLimit": 0,
                        "template": {
                            "metadata": {
                                "labels": {"team": "beta", "project": "vision"},
                                "annotations": {"gpufleet.io/gang-size": "2", "gpufleet.io/cost-limit": "50"},
                            },
                            "spec": {
                                "schedulerName": "gpufleet",
                                "restartPolicy": "Never",
                                "priorityClassName": "gpufleet-high",
                                "containers": [
                                    {
                                        "name": "main",
                                        "image": "acme/ray:2",
                                        "resources": {"limits": {"nvidia.com/gpu": "2"}},
                                    }
                                ],
                            },
                        },
                    },
                },
            )
            deadline = time.monotonic() + 60
            while True:
                adopted = [j for j in sdk.list(team="beta", state=None) if j.labels.get("gpufleet.io/adopted-owner")]
                if adopted and adopted[0].state == "SUCCEEDED":
                    break
                assert time.monotonic() < deadline, f"the external Job was not adopted and run: {adopted}"
                time.sleep(0.2)
            (ext,) = adopted
            assert ext.labels["gpufleet.io/adopted-owner"] == "beta/Job/external" and ext.project == "vision"
            assert (ext.pods, ext.gpus, ext.priority, ext.budget_usd) == (2, 2, "high", 50.0)
            bound = [p for p in _pods(core, "beta") if p["metadata"]["labels"].get("gpufleet.io/job-id") == ext.id]
            assert len(bound) == 2 and all(p["spec"].get("nodeName") for p in bound)

            # a second replica stands by; kill the leader while jobs run
            b = _server(tmp_path, "replica-b", kubeconfig, db).start()
            running = [sdk.submit(command=["sleep"], gpus=1, team="alpha", name=f"r{i}").id for i in range(3)]
            deadline = time.monotonic() + 90  # a liveness wait: slow on 2 cores shared with the suite
            while sum(1 for p in _pods(core, "alpha") if p.get("status", {}).get("phase") == "Running") < 3:
                assert time.monotonic() < deadline, "the jobs never ran"
                time.sleep(0.1)
        lease = kubernetes.client.CoordinationV1Api(core.api_client).read_namespaced_lease(
            "gpufleet-scheduler", "gpufleet-system"
        )
        assert lease.spec.holder_identity == "replica-a"
        a.kill()
        with b.client(token=a.token) as sdk:
            for j in running:
                assert sdk.wait(j, timeout=60).state == "SUCCEEDED", sdk.get(j)
            assert all(sdk.get(j).run == 1 for j in running)  # adopted, not started again
        lease = kubernetes.client.CoordinationV1Api(core.api_client).read_namespaced_lease(
            "gpufleet-scheduler", "gpufleet-system"
        )
        assert lease.spec.holder_identity == "replica-b" and lease.spec.lease_transitions >= 1
        assert sum(jobs.created.values()) == len(ids) + len(running) + 2  # no pod made twice
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_logs_follow_streams_the_pods_log_across_a_preemption(
    tmp_path: Path, k8s_cluster_factory: Callable[..., Cluster]
) -> None:
    """``gpufleet logs -f`` on Kubernetes streams the job's pod log as the container writes it; a
    preempted run's pod and the next run's pod follow each other under their headers; an offset past
    the end is a 416."""
    c = k8s_cluster_factory(kubelet=KubeletConfig(default_duration_s=2.0, checkpoint_s=0.2, log_every_s=0.25))
    client = c.api_client()
    core: Any = kubernetes.client.CoreV1Api(client)
    for ns in ("alpha", "gpufleet-system"):
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    c.add_gpu_node("gpu-a", gpu_count=1, instance_type="p4de.24xlarge")
    jobs = JobController(client).start()
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", c.url)
    server = _server(tmp_path, "replica-a", kubeconfig, f"sqlite:///{tmp_path / 'store.db'}").start()
    try:
        with server.client() as sdk:
            sdk.set_team("alpha")
            low = sdk.submit(
                command=["python", "train.py"],
                gpus=1,
                team="alpha",
                name="low",
                priority="low",
                preemptible=True,
                checkpoint_dir="/ckpt",
            )
            deadline = time.monotonic() + 90  # a liveness wait: slow on 2 cores shared with the suite
            lines: list[str] = []
            follow = sdk.logs(low.id, follow=True)
            for line in follow:
                lines.append(line)
                if line == "step 2\n":
                    break
                assert time.monotonic() < deadline, lines
            assert lines[0] == "==> run 1: pod alpha/" + lines[0].split("/")[1] and lines[1] == "started on gpu-a\n"
            # an urgent job takes the only GPU: the low one is evicted (SIGTERM, checkpoint) and waits
            high = sdk.submit(command=["python", "serve.py"], gpus=1, team="alpha", name="high", priority="high")
            for line in follow:  # the same stream goes on: run 1 ends, run 2 follows once it runs
                lines.append(line)
                assert time.monotonic() < deadline + 60, lines
            text = "".join(lines)
            assert "received SIGTERM: checkpointing\nexit code 143\n" in text, text
            assert text.count("==> run ") == 2 and "==> run 2: pod alpha/" in text, text
            assert text.endswith("exit code 0\n"), text
            assert sdk.get(low.id).state == "SUCCEEDED" and sdk.get(low.id).run == 2
            assert sdk.wait(high.id, timeout=30).state == "SUCCEEDED"
            # without follow: what the pods still hold (the evicted run's pod is gone with its log)
            whole = "".join(sdk.logs(high.id))
            assert whole.startswith("==> run 1: pod alpha/") and whole.endswith("exit code 0\n")
            resp = httpx.get(
                f"{server.url}/v1/jobs/{high.id}/logs",
                params={"offset": 10**6},
                headers={"Authorization": f"Bearer {server.token}"},
            )
            assert resp.status_code == 416 and "past the end of the log" in resp.json()["detail"]
            # the CLI streams the same text
            out = server.cli("logs", high.id).stdout
            assert out == whole
    finally:
        server.stop()
        jobs.stop()
        client.close()  # type: ignore[no-untyped-call]
    assert not jobs.errors, jobs.errors
