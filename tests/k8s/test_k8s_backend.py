"""The Kubernetes backend against the closest substrate this machine allows: kmock 0.8 serving the
Kubernetes API on 127.0.0.1 with the behaviours of a real API server added (``tests/k8s``), a Job
controller stand-in that makes pods from ``batch/v1`` Jobs as kube-controller-manager does, and a
kubelet stand-in (KWOK-style stages) that runs bound pods, records SIGTERM on graceful deletion and
ends them. Every object the backend writes is validated by the substrate against Kubernetes 1.29's
schemas. What only a real cluster can confirm: the real scheduler framework's view of gpufleet's
bindings, the device plugin's GPU assignment, Karpenter's reaction to the pods' conditions."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest

from gpufleet.backends.base import EventKind, RecoveredState
from gpufleet.k8s.adapter.backend import KubernetesBackend
from gpufleet.scheduling.framework import Code, Status, WaitKind
from tests.support.k8s.backendworld import NS, World, ended
from tests.support.k8s.kubelet import taint_disrupted

pytestmark = pytest.mark.slow


def test_inventory_reads_the_gpu_feature_discovery_labels(make_world: Callable[..., World]) -> None:
    w = make_world()
    nodes = {n.name: n for n in w.backend.inventory()}
    assert set(nodes) == {"gpu-a", "gpu-b"}
    assert (nodes["gpu-a"].gpu_model, nodes["gpu-a"].gpu_count) == ("A100-80GB", 8)
    assert str(nodes["gpu-b"].capacity_type) == "spot"


def test_a_run_is_a_job_whose_pod_is_bound_where_the_placement_says(make_world: Callable[..., World]) -> None:
    w = make_world(duration_s=2.0)
    w.backend.inventory()
    w.backend.launch(w.request("j1", "gpu-b"))
    events = w.until(ended("j1", EventKind.SUCCEEDED))
    ev = next(e for e in events if e.job_id == "j1")
    (pod,) = w.pods("j1")
    assert pod["spec"]["nodeName"] == "gpu-b" and pod["spec"]["schedulerName"] == "gpufleet"
    assert pod["metadata"]["labels"]["team"] == NS
    assert pod["spec"]["containers"][0]["image"] == "ghcr.io/acme/train:1.4"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in (1, "1")
    # the ledger meters the container's own run time, as the kubelet recorded it (Kubernetes
    # timestamps have whole seconds: to the second)
    assert ev.started_at is not None and ev.ended_at is not None
    assert ev.ended_at - ev.started_at == pytest.approx(2.0, abs=1.0)


def test_a_gang_is_bound_all_together(make_world: Callable[..., World]) -> None:
    w = make_world()
    w.backend.inventory()
    w.backend.launch(w.request("gang", "gpu-a", "gpu-b"))
    w.until(ended("gang", EventKind.SUCCEEDED))
    placed = sorted(
        (int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]), p["spec"]["nodeName"])
        for p in w.pods("gang")
    )
    assert placed == [(0, "gpu-a"), (1, "gpu-b")]


def test_stop_evicts_with_the_grace_and_no_replacement_pod_starts(make_world: Callable[..., World]) -> None:
    w = make_world(duration_s=None)  # runs until stopped
    w.backend.inventory()
    w.backend.launch(w.request("long", "gpu-a"))
    w.running("long")
    w.backend.stop("long", 1, "preempted by urgent", grace_s=5)
    events = w.until(ended("long", EventKind.STOPPED))
    assert next(e for e in events if e.job_id == "long").reason == "preempted by urgent"
    assert w.cluster.kubelet is not None
    assert [s.signal for s in w.cluster.kubelet.sigterms(NS)][:1] == ["SIGTERM"]  # it could checkpoint
    time.sleep(0.5)
    assert sum(w.jobs.created.values()) == 1  # the Job was deleted: the evicted pod was not replaced


def test_node_changes_and_spot_notices_are_events(make_world: Callable[..., World]) -> None:
    w = make_world()
    w.backend.inventory()
    w.cluster.add_gpu_node("gpu-c", product="NVIDIA-H100-80GB-HBM3")
    w.until(lambda evs: any(e.kind is EventKind.NODE_ADDED and e.node == "gpu-c" for e in evs))
    node = w.backend.node("gpu-c")
    assert node is not None and node.gpu_model == "H100-80GB"
    taint_disrupted(w.core, "gpu-b")
    evs = w.until(lambda evs: any(e.kind is EventKind.NODE_INTERRUPTED and e.node == "gpu-b" for e in evs))
    assert "karpenter" in next(e for e in evs if e.kind is EventKind.NODE_INTERRUPTED).reason
    w.core.delete_node("gpu-b")
    w.until(lambda evs: any(e.kind is EventKind.NODE_REMOVED and e.node == "gpu-b" for e in evs))


def test_a_restarted_backend_adopts_a_running_run(make_world: Callable[..., World]) -> None:
    w = make_world(duration_s=1.5)
    w.backend.inventory()
    w.backend.launch(w.request("adopt", "gpu-a"))
    w.running("adopt")
    fresh = KubernetesBackend(w.client)  # the leader died; another replica takes over
    fresh.inventory()
    got = fresh.recover("adopt", 1)
    assert got.state is RecoveredState.RUNNING
    w.backend = fresh
    w.until(ended("adopt", EventKind.SUCCEEDED))
    assert fresh.recover("nosuch", 1).state is RecoveredState.ABSENT


def test_waiting_pods_say_why_and_only_capacity_waits_ask_an_autoscaler(make_world: Callable[..., World]) -> None:
    """Issue 22, observation 9: a quota wait was written ``Unschedulable``, which Karpenter (it ignores
    ``schedulerName``) provisions for. Only a capacity wait is; gpufleet's own holds are
    ``SchedulingGated`` (k8s/adapter/waiting.py)."""
    w = make_world()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "waits",
            "namespace": NS,
            "labels": {"gpufleet.io/job-id": "jw"},
            "annotations": {"gpufleet.io/job-id": "jw"},
        },
        "spec": {"schedulerName": "gpufleet", "containers": [{"name": "main", "image": "acme/x:1"}]},
    }
    w.core.create_namespaced_pod(NS, pod)
    quota = Status(Code.UNSCHEDULABLE, "quota: team alpha is at its 8 GPUs", WaitKind.QUOTA)
    capacity = Status(Code.UNSCHEDULABLE, "no node has 8 free A100-80GB", WaitKind.CAPACITY)

    def condition() -> tuple[str, str, str]:
        (got,) = w.pods("jw")
        cond = next(c for c in got["status"]["conditions"] if c["type"] == "PodScheduled")
        return (cond["status"], cond["reason"], cond["message"])

    def cached(reason: str) -> bool:
        (p,) = w.backend.pod_cache.by_index("jw")
        c = p.condition("PodScheduled")
        return c is not None and c.reason == reason

    assert w.backend.report_waiting({"jw": quota}) == 1
    assert condition() == ("False", "SchedulingGated", "quota: team alpha is at its 8 GPUs")
    w.cluster.wait_for(lambda: cached("SchedulingGated"), timeout=10, what="the condition in the cache")
    assert w.backend.report_waiting({"jw": quota}) == 0  # unchanged: no write
    assert w.backend.report_waiting({"other": quota}) == 0
    assert w.backend.report_waiting({"jw": capacity}) == 1
    assert condition() == ("False", "Unschedulable", "no node has 8 free A100-80GB")


def test_dcgm_exporter_samples_are_attributed_to_the_jobs_of_the_pods(make_world: Callable[..., World]) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from gpufleet.k8s.adapter.backend import KubernetesOptions

    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("hot", "gpu-a"))
    w.running("hot")
    (pod,) = w.pods("hot")
    text = (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="gpu-a",pod="{pod["metadata"]["name"]}",'
        f'namespace="{NS}",container="main"}} 87\n'
        "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        f'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-1",Hostname="gpu-a",pod="{pod["metadata"]["name"]}",'
        f'namespace="{NS}",container="main"}} 30000\n'
        "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
        f'DCGM_FI_DEV_FB_FREE{{gpu="0",UUID="GPU-1",Hostname="gpu-a",pod="{pod["metadata"]["name"]}",'
        f'namespace="{NS}",container="main"}} 51920\n'
    ).encode()

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        w.backend.options = KubernetesOptions(
            dcgm_urls=(f"http://127.0.0.1:{srv.server_address[1]}/metrics", "http://127.0.0.1:1/metrics")
        )  # the second is down
        # read in the background: the first calls may have nothing yet (never a wait in the step)
        (g,) = w.cluster.wait_for(w.backend.telemetry, timeout=10, interval=0.1, what="a DCGM sample")
        assert (g.node, g.gpu_index, g.utilization_pct) == ("gpu-a", 0, 87.0)
        assert g.job_memory_mib == {"hot": 30000.0} and g.memory_total_mib == pytest.approx(81920.0)
    finally:
        srv.shutdown()
        w.backend.stop("hot", 1, "done", grace_s=1)


def test_gpus_held_by_other_schedulers_pods_are_reported(make_world: Callable[..., World]) -> None:
    w = make_world(duration_s=None)
    w.backend.inventory()
    other = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "someone-elses", "namespace": NS},
        "spec": {
            "nodeName": "gpu-a",
            "containers": [{"name": "main", "image": "acme/x:1", "resources": {"limits": {"nvidia.com/gpu": "6"}}}],
        },
    }
    w.core.create_namespaced_pod(NS, other)
    w.backend.launch(w.request("mine", "gpu-b"))
    w.running("mine")
    assert w.backend.foreign_usage() == {"gpu-a": 6}  # gpufleet's own pods are not "foreign"
    w.backend.stop("mine", 1, "done", grace_s=1)


def test_a_slice_on_a_node_whose_slices_carry_the_media_engine_asks_for_that_resource(
    make_world: Callable[..., World],
) -> None:
    """Issue 22, observation 12: a node advertising ``nvidia.com/mig-1g.10gb.me`` (the device plugin's
    spelling of ``1g.10gb+me``) only; a 1g.10gb slice placed there must ask for that resource (the
    kubelet would reject ``nvidia.com/mig-1g.10gb``, which the node does not have)."""
    from gpufleet.model.job import PodPlacement

    w = make_world(duration_s=None)
    w.cluster.add_gpu_node("mig-me", mig={"1g.10gb.me": 7})
    w.backend.inventory()
    node = w.backend.node("mig-me")
    assert node is not None and ("1g.10gb.me", 7) in node.gpu_facts.mig_profiles
    req = w.request("media", "mig-me")
    req = dataclasses.replace(req, placement=(PodPlacement("mig-me", (0,), 143, 0b1),))
    w.backend.launch(req)
    w.running("media")
    (pod,) = w.pods("media")
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert {k: v for k, v in limits.items() if k.startswith("nvidia.com/")} == {"nvidia.com/mig-1g.10gb.me": "1"}
