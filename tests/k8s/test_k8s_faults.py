"""Issue 22: the Kubernetes backend under what a real cluster does to it — node lifecycle events
(cordon, NoSchedule taints, NotReady blips) and the API server's faults (409 storms on binding,
5xx and 429 on stops) — on the substrate that now produces them (tests/support/k8s/faults.py,
nodelifecycle.py). Each test failed on the backend before issue 22's changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.backends.base import BackendEvent, EventKind
from tests.support.k8s.backendworld import NS, World
from tests.support.k8s.nodelifecycle import cordon, set_node_condition

LOSSES = (EventKind.LOST, EventKind.STOPPED, EventKind.FAILED)


def _losses(events: list[BackendEvent], job: str) -> list[BackendEvent]:
    return [e for e in events if e.job_id == job and e.kind in LOSSES]


def _node_removed(events: list[BackendEvent], node: str) -> bool:
    return any(e.kind is EventKind.NODE_REMOVED and e.node == node for e in events)


# what happens to the node, and how it heals (None: it stays so)
NODE_CHANGES: dict[str, tuple[Callable[[World], object], Callable[[World], object] | None]] = {
    "kubectl cordon": (lambda w: cordon(w.core, "gpu-a"), None),
    "disk-pressure NoSchedule taint": (lambda w: set_node_condition(w.core, "gpu-a", "DiskPressure", "True"), None),
    "a NotReady blip (Unknown, then Ready)": (
        lambda w: set_node_condition(w.core, "gpu-a", "Ready", "Unknown", "NodeStatusUnknown"),
        lambda w: set_node_condition(w.core, "gpu-a", "Ready", "True", "KubeletReady"),
    ),
}


@pytest.mark.parametrize("change", list(NODE_CHANGES))
def test_a_node_that_stops_taking_work_keeps_the_work_it_runs(make_world: Callable[..., World], change: str) -> None:
    """Observation 1: each of these SIGTERMed a running pod and restarted its job ("lost: node gpu-a is
    gone"). Kubernetes stops only new placements (and waits 300 s before evicting from a NotReady node)."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("long", "gpu-a"))
    w.running("long")
    start, heal = NODE_CHANGES[change]
    start(w)
    events = w.until(lambda evs: any(e.kind is EventKind.NODE_CORDONED and e.node == "gpu-a" for e in evs))
    if heal is not None:
        heal(w)
        events += w.until(lambda evs: any(e.kind is EventKind.NODE_UNCORDONED and e.node == "gpu-a" for e in evs))
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        events += w.backend.poll()
        time.sleep(0.05)
    assert not _losses(events, "long") and not _node_removed(events, "gpu-a"), events
    assert w.cluster.kubelet is not None and w.cluster.kubelet.sigterms(NS) == []
    assert [p["status"]["phase"] for p in w.pods("long")] == ["Running"]


@pytest.mark.parametrize("change", list(NODE_CHANGES))
def test_a_new_leader_keeps_the_work_of_a_node_that_takes_no_work(
    make_world: Callable[..., World], change: str
) -> None:
    """benchmarks/k8s_chaos.py at full size: runs on a cordoned node (and on a NotReady one) were
    ended "node gpu-02 is gone" at a leader's recovery while their pods ran on (a second run beside
    the first; the node billed as removed). The inventory a new leader starts from left out every
    node not taking work, so recovery took their runs for lost. It holds them now, and the first
    poll says the node takes no work."""
    from gpufleet.backends.base import RecoveredState
    from gpufleet.k8s.adapter.backend import KubernetesBackend

    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("long", "gpu-a"))
    w.running("long")
    NODE_CHANGES[change][0](w)
    w.until(lambda evs: any(e.kind is EventKind.NODE_CORDONED and e.node == "gpu-a" for e in evs))
    successor = KubernetesBackend(w.client)
    try:
        assert "gpu-a" in {n.name for n in successor.inventory()}
        assert successor.recover("long", 1).state is RecoveredState.RUNNING
        events = successor.poll()
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            events += successor.poll()
            time.sleep(0.05)
        assert [e.kind for e in events if e.node == "gpu-a"] == [EventKind.NODE_CORDONED], events
        assert not _losses(events, "long")
    finally:
        successor.close()
    assert [p["status"]["phase"] for p in w.pods("long")] == ["Running"]


def test_a_cordoned_node_taking_work_again_is_an_event(make_world: Callable[..., World]) -> None:
    w = make_world(duration_s=None)
    w.backend.inventory()
    cordon(w.core, "gpu-a")
    w.until(lambda evs: any(e.kind is EventKind.NODE_CORDONED and e.node == "gpu-a" for e in evs))
    cordon(w.core, "gpu-a", unschedulable=False)
    w.until(lambda evs: any(e.kind is EventKind.NODE_UNCORDONED and e.node == "gpu-a" for e in evs))
    w.core.delete_node("gpu-a")
    w.until(lambda evs: _node_removed(evs, "gpu-a"))


def test_a_409_on_binding_is_resolved_by_reading_the_pod(make_world: Callable[..., World]) -> None:
    """Observation 5: a 409 on pods/binding was taken as "bound"; 6 injected 409s gave each job 4 runs.
    A 409 whose pod is not bound (a conflict, not our earlier binding) is retried."""
    w = make_world(duration_s=0.5)
    w.backend.inventory()
    w.cluster.server.faults.add(verb="create", resource="pods/binding", status=409, times=6)
    for job in ("b1", "b2"):
        w.backend.launch(w.request(job, "gpu-a"))
    events = w.until(
        lambda evs: all(any(e.job_id == j and e.kind is EventKind.SUCCEEDED for e in evs) for j in ("b1", "b2"))
    )
    assert not _losses(events, "b1") and not _losses(events, "b2"), events
    assert sum(w.jobs.created.values()) == 2  # one pod each: no run was lost and made again
    for job in ("b1", "b2"):
        assert [p["spec"]["nodeName"] for p in w.pods(job)] == ["gpu-a"]


def _foreign_pod_holding_every_gpu(w: World) -> None:
    """Another scheduler's pod bound to gpu-a with all 8 GPUs (gpufleet's view has not seen it yet)."""
    w.core.create_namespaced_pod(
        NS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "someone-elses"},
            "spec": {
                "nodeName": "gpu-a",
                "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            },
        },
    )


# a node the kubelet will not admit gpufleet's pod on, and the kubelet's reason
REJECTIONS: dict[str, tuple[Callable[[World], object], str]] = {
    "an untolerated NoExecute taint": (
        lambda w: w.core.patch_node(
            "gpu-a", {"spec": {"taints": [{"key": "example.com/reserved", "value": "batch", "effect": "NoExecute"}]}}
        ),
        "TaintToleration",
    ),
    "every GPU held by another scheduler's pod": (_foreign_pod_holding_every_gpu, "OutOfnvidia.com/gpu"),
}


@pytest.mark.parametrize("case", list(REJECTIONS))
def test_a_pod_the_kubelet_rejects_goes_back_to_the_queue_with_the_kubelets_reason(
    make_world: Callable[..., World], case: str
) -> None:
    """Observation 7: a kubelet admission rejection became a permanent FAILED with the reason "pod …
    failed". Nothing of the job ran: the run is lost (the loop requeues the job), and says why."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    change, reason = REJECTIONS[case]
    change(w)
    w.backend.launch(w.request("refused", "gpu-a"))
    events = w.until(lambda evs: any(e.job_id == "refused" for e in evs), timeout=20)
    ev = next(e for e in events if e.job_id == "refused")
    assert ev.kind is EventKind.LOST, ev
    if case == "an untolerated NoExecute taint" and "were deleted" in ev.reason:
        # the taint manager deletes the pod too (it tolerates nothing): on a loaded runner its deletion
        # can reach the cache before the kubelet's rejection does — lost, requeued, never FAILED
        return
    assert reason in ev.reason and "rejected" in ev.reason


def test_gpus_the_device_plugin_advertises_after_the_node_is_ready_are_seen(make_world: Callable[..., World]) -> None:
    """Observation 8: the GPU Operator's usual order is Ready first, GPUs allocatable later; the node
    was added with 0 GPUs and stayed so in the leader until a restart. Now a node whose GPUs are
    labelled but not advertised is still joining; it is added, with its GPUs, once they are."""
    from tests.support.k8s.kubelet import gpu_node

    w = make_world(duration_s=None)
    w.backend.inventory()
    body = gpu_node("gpu-c")
    for part in ("capacity", "allocatable"):
        body["status"][part].pop("nvidia.com/gpu")
    w.core.create_node(body)
    early: list[BackendEvent] = []
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        early += w.backend.poll()
        time.sleep(0.05)
    assert not [e for e in early if e.node == "gpu-c"], early  # before: added at once with 0 GPUs
    w.core.patch_node_status(
        "gpu-c", {"status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}
    )
    events = w.until(lambda evs: any(e.kind is EventKind.NODE_ADDED and e.node == "gpu-c" for e in evs))
    assert [e.kind for e in events if e.node == "gpu-c"] == [EventKind.NODE_ADDED]
    node = w.backend.node("gpu-c")
    assert node is not None and node.gpu_count == 8


def test_a_node_tainted_while_known_is_a_change_the_loop_places_by(make_world: Callable[..., World]) -> None:
    """A taint (or label) put on a node the loop already knows used to reach placement only after a
    restart; now it is a NODE_CHANGED event and the node carries it (what runs there stays)."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("stays", "gpu-b"))
    w.running("stays")
    w.core.patch_node("gpu-b", {"spec": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}})
    events = w.until(lambda evs: any(e.kind is EventKind.NODE_CHANGED and e.node == "gpu-b" for e in evs))
    node = w.backend.node("gpu-b")
    assert node is not None and [(t.key, t.value, t.effect) for t in node.taints] == [
        ("dedicated", "infer", "NoSchedule")
    ]
    assert not _losses(events, "stays") and not _node_removed(events, "gpu-b")


# the API server's answer to a run's first Job creation, and whether the run still runs
CREATE_FAULTS: dict[str, dict[str, object]] = {
    "500 (etcd leader changed)": {"status": 500, "message": "etcdserver: leader changed"},
    "429 with Retry-After": {"status": 429, "retry_after_s": 1},
    "a read timeout": {"delay_s": 3.0},
}


@pytest.mark.parametrize("case", list(CREATE_FAULTS))
def test_a_transient_refusal_of_a_runs_job_is_retried_not_a_failed_job(
    make_world: Callable[..., World], case: str
) -> None:
    """The chaos run (benchmarks/k8s_chaos.py) lost 3 of 40 jobs this way: "could not launch:
    creating Job …: 500 Internal Server Error … etcdserver: leader changed" ended each FAILED. A
    5xx, a 429 or a timeout is tried again (the run waits for its Job); only a refusal for good fails."""
    from gpufleet.k8s.adapter.api import with_deadline

    w = make_world(duration_s=0.3)
    w.backend.inventory()
    with_deadline(w.client, read_s=1.0)
    w.cluster.server.faults.add(verb="create", resource="jobs", times=1, **CREATE_FAULTS[case])  # type: ignore[arg-type]
    w.backend.launch(w.request("retried", "gpu-a"))  # before: BackendError (the loop ended the job FAILED)
    events = w.until(lambda evs: any(e.job_id == "retried" for e in evs), timeout=30)
    assert [e.kind for e in events if e.job_id == "retried"] == [EventKind.SUCCEEDED]


def test_a_job_the_api_server_refuses_for_good_fails_at_once(make_world: Callable[..., World]) -> None:
    from gpufleet.errors import BackendError

    w = make_world(duration_s=0.3)
    w.backend.inventory()
    w.cluster.server.faults.add(verb="create", resource="jobs", status=403, times=1, message="forbidden by policy")
    with pytest.raises(BackendError, match="403"):
        w.backend.launch(w.request("refused", "gpu-a"))


def test_a_run_whose_job_loses_its_pods_before_they_are_bound_is_lost_not_kept_running(
    make_world: Callable[..., World], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos run ended with a job RUNNING for ever in the loop, with no pod in the cluster (the
    loop's GPU view 2 GPUs off on its node): a run that was never bound and whose pods are all gone
    (here: someone deleted its Job) was never judged. Now it is lost (requeued) once it has had no
    pod for a while."""
    import kubernetes.client

    from gpufleet.k8s.adapter import backend as backend_module

    monkeypatch.setattr(backend_module, "RUN_WITHOUT_PODS_S", 1.0)
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.cluster.server.faults.add(verb="create", resource="pods/binding", status=500)  # never bound
    w.backend.launch(w.request("vanished", "gpu-a"))
    w.cluster.wait_for(lambda: bool(w.pods("vanished")), timeout=10, what="its pod")
    batch = kubernetes.client.BatchV1Api(w.client)
    batch.delete_namespaced_job("gf-vanished-r1", NS, propagation_policy="Background")  # kubectl delete job
    w.cluster.wait_for(lambda: not w.pods("vanished"), timeout=10, what="its pod gone")
    events = w.until(lambda evs: any(e.job_id == "vanished" for e in evs), timeout=20)
    (ev,) = [e for e in events if e.job_id == "vanished"]
    assert ev.kind is EventKind.LOST and "no pod" in ev.reason


def test_a_run_recovered_before_its_pods_were_bound_goes_back_to_the_queue(make_world: Callable[..., World]) -> None:
    """The chaos run ended with 11 jobs RUNNING for ever: the new leader recovered runs whose pods
    were not bound yet and bound them to "" (422 Unprocessable Entity, 70 times each). The target
    nodes are not known to the new leader: the run is given up — its Job and pods deleted — and
    reported STOPPED (the job requeued, nothing metered) once they are gone.

    The full-size chaos run then found two jobs with two runs at once: a run given up at once
    (ABSENT) freed its GPUs while a binding the old leader had sent landed late (a delayed request
    runs after its client gave up) and its pod ran 29 s beside the next run. The run is held until
    its pods are gone."""
    import kubernetes.client

    from gpufleet.backends.base import RecoveredState
    from gpufleet.k8s.adapter.backend import GIVEN_UP, KubernetesBackend

    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("orphaned", "gpu-a"))
    w.cluster.wait_for(lambda: bool(w.pods("orphaned")), timeout=10, what="its pod")  # never polled: unbound
    successor = KubernetesBackend(w.client)
    try:
        successor.inventory()
        got = successor.recover("orphaned", 1)
        assert got.state is RecoveredState.RUNNING  # held (before: RUNNING bound to "", then ABSENT at once)
        # the old leader's delayed binding lands now
        (pod,) = w.pods("orphaned")
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod["metadata"]["name"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-a"}}  # fmt: skip
        w.core.create_namespaced_pod_binding(pod["metadata"]["name"], NS, body, _preload_content=False)
        events = w.until(lambda evs: any(e.job_id == "orphaned" for e in evs), backend=successor)
        (ev,) = [e for e in events if e.job_id == "orphaned"]
        assert ev.kind is EventKind.STOPPED and ev.reason == GIVEN_UP
        assert w.pods("orphaned") == []  # reported only once its pods are gone
        batch = kubernetes.client.BatchV1Api(w.client)
        assert not batch.list_namespaced_job(NS).items
    finally:
        successor.close()


def test_a_run_stopped_before_its_pods_were_bound_meters_nothing(make_world: Callable[..., World]) -> None:
    """Its containers cannot have run: its end carries a zero-length span (the ledger meters the
    containers' time, and there was none), not the time since its launch."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("early", "gpu-a"))
    w.cluster.wait_for(lambda: bool(w.pods("early")), timeout=10, what="its pod")  # never polled: unbound
    time.sleep(0.5)
    w.backend.stop("early", 1, "cancelled")
    events = w.until(lambda evs: any(e.job_id == "early" for e in evs), timeout=20)
    (ev,) = [e for e in events if e.job_id == "early"]
    assert ev.kind is EventKind.STOPPED
    assert ev.started_at is not None and ev.started_at == ev.ended_at


def test_a_bound_run_whose_start_was_never_seen_is_metered_from_its_launch(
    make_world: Callable[..., World],
) -> None:
    """benchmarks' 200-job run: spot pods evicted and collected between two polls, after their
    containers had run 1-2 s, were metered as zero-length spans (the GPUs were held and used). A run
    bound before it ended may have run: its end leaves the start unknown (the loop meters from the
    launch), never a span shorter than what ran."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("quick", "gpu-a"))
    w.cluster.wait_for(lambda: bool(w.pods("quick")), timeout=10, what="its pod")
    # polled until it is bound; the next poll comes after its container ran and its node went
    w.cluster.wait_for(
        lambda: not w.backend.poll() and all(p["spec"].get("nodeName") for p in w.pods("quick")),
        timeout=10,
        what="its pod bound",
    )
    w.cluster.wait_for(
        lambda: any(p.get("status", {}).get("phase") == "Running" for p in w.pods("quick")),
        timeout=10,
        what="its container running",
    )
    time.sleep(1.0)
    uids = set()
    for p in w.pods("quick"):  # a drain's eviction: SIGTERM, exit, the pod deleted
        name, uids = p["metadata"]["name"], uids | {p["metadata"]["uid"]}
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
        w.core.create_namespaced_pod_eviction(name, NS, body, _preload_content=False)
    w.cluster.wait_for(
        lambda: not uids & {p["metadata"]["uid"] for p in w.pods("quick")}, timeout=10, what="its pod gone"
    )
    events = w.until(lambda evs: any(e.job_id == "quick" for e in evs), timeout=20)
    (ev,) = [e for e in events if e.job_id == "quick"]
    # gone before it was seen ended (LOST), or seen evicted first by a cache that lagged behind the
    # deletion on a loaded runner (STOPPED, disrupted): requeued either way; what matters is the span
    assert ev.kind in (EventKind.LOST, EventKind.STOPPED), events
    assert ev.started_at is None or (ev.ended_at is not None and ev.started_at < ev.ended_at - 0.9), ev


def test_a_new_leader_whose_pod_watch_lags_does_not_give_up_a_running_run(make_world: Callable[..., World]) -> None:
    """benchmarks/k8s_chaos.py (200 jobs, 10 min): one job ran two runs at once. The new leader's
    pod cache, its watch slow after the partition, still showed the run's pod unbound; recovery
    gave the run up (its Job deleted) and the job started again while the pod ran on. What the
    cache shows absent or unbound is read again from the API server before a run is given up."""
    from gpufleet.backends.base import RecoveredState
    from gpufleet.k8s.adapter.backend import KubernetesBackend

    w = make_world(duration_s=None)
    w.backend.inventory()
    successor = KubernetesBackend(w.client)
    try:
        successor.inventory()
        successor.poll()  # its informers list and watch
        w.backend.launch(w.request("kept", "gpu-a"))
        w.cluster.wait_for(
            lambda: bool(successor.pod_cache.by_index("kept")), timeout=10, what="the unbound pod in its cache"
        )
        plan = w.cluster.server.faults
        plan.add(verb="watch", resource="pods", delay_s=8.0)  # its watch goes silent from here
        w.cluster.call(w.cluster.server.end_watches)
        w.running("kept")  # bound and running, as the API server has it
        assert all(p.node is None for p in successor.pod_cache.by_index("kept"))  # what its cache still says
        got = successor.recover("kept", 1)
        assert got.state is RecoveredState.RUNNING
        # its next polls, the cache still stale: the run is not taken for lost, its pod not deleted
        events = successor.poll() + successor.poll()
        plan.clear()
        assert [e for e in events if e.job_id == "kept"] == []
        assert [p for p in w.pods("kept") if not p["metadata"].get("deletionTimestamp")] != []
    finally:
        successor.close()


def test_a_run_whose_node_is_deleted_is_not_a_failed_job(make_world: Callable[..., World]) -> None:
    """benchmarks/k8s_chaos.py: a Node deleted under running jobs failed 1 to 4 of them for good
    ("pod … failed (exit 137)"). The pod garbage collector marks an orphaned pod Failed with
    DisruptionTarget (DeletionByPodGC) before it force-deletes it (pkg/controller/podgc), so the
    end reads as a disruption — the job goes back to the queue — whatever the kubelet writes next."""
    from tests.support.k8s.fleetrun import Recorder

    w = make_world(duration_s=None)
    recorder = Recorder(w.cluster)
    recorder.start()
    w.backend.inventory()
    w.backend.launch(w.request("orphan", "gpu-a"))
    w.running("orphan")
    # the node watch lags (as under load): the pod's end reaches gpufleet before the node's removal
    w.cluster.server.faults.add(verb="watch", resource="nodes", delay_s=4.0)
    w.cluster.call(w.cluster.server.end_watches)
    w.core.delete_node("gpu-a")
    events = w.until(lambda evs: any(e.job_id == "orphan" for e in evs), timeout=20)
    w.cluster.server.faults.clear()
    (ev,) = [e for e in events if e.job_id == "orphan"]
    assert ev.kind is not EventKind.FAILED, ev
    assert recorder.orphans and not recorder.errors


def test_the_pod_garbage_collector_marks_an_orphan_failed_and_disrupted(make_world: Callable[..., World]) -> None:
    """The substrate as pkg/controller/podgc: an orphaned pod (its Node deleted) is marked Failed with
    DisruptionTarget / DeletionByPodGC before its force deletion (the stand-in force-deleted it bare,
    and the kubelet's "exit 137" then read as the job's own failure)."""
    from tests.support.k8s.fleetrun import Recorder

    w = make_world(duration_s=None)
    Recorder(w.cluster).start()
    w.backend.inventory()
    w.backend.launch(w.request("held", "gpu-a"))
    w.running("held")
    (pod,) = w.pods("held")
    name = pod["metadata"]["name"]
    w.core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": ["example.com/hold"]}})  # kept visible
    w.core.delete_node("gpu-a")
    w.cluster.wait_for(
        lambda: any(p["metadata"].get("deletionTimestamp") for p in w.pods("held")), timeout=10, what="force deletion"
    )
    (gone,) = [p for p in w.pods("held") if p["metadata"]["name"] == name]
    conditions = {c["type"]: c for c in gone["status"].get("conditions") or []}
    assert gone["status"]["phase"] == "Failed"
    assert conditions["DisruptionTarget"]["status"] == "True"
    assert conditions["DisruptionTarget"]["reason"] == "DeletionByPodGC"
    w.core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": None}})


def test_a_run_that_loses_one_of_its_nodes_ends_when_its_other_pods_have(make_world: Callable[..., World]) -> None:
    """benchmarks/k8s_chaos.py at full size: 3-5 GPU over-commits and jobs with two runs at once. A
    node of a two-node run was deleted; the backend dropped the run and the loop, told only that the
    node was gone, freed the GPUs the run's pod on the other node still held while it ran through its
    grace period — the next run was bound beside it. Now the backend stops the run (its Job and the
    surviving pod go) and reports it LOST, naming the node, only once that pod has ended; the end is
    when it ended."""
    w = make_world(duration_s=None, checkpoint_s=1.5)  # a container takes 1.5 s to exit after SIGTERM
    w.backend.inventory()
    w.backend.launch(w.request("pair", "gpu-a", "gpu-b"))
    w.running("pair")
    w.cluster.wait_for(
        lambda: sum(p.get("status", {}).get("phase") == "Running" for p in w.pods("pair")) == 2,
        timeout=10,
        what="both pods running",
    )
    deleted_at = w.backend.options.now()
    w.core.delete_node("gpu-a")
    events = w.until(
        lambda evs: any(e.kind is EventKind.NODE_REMOVED for e in evs) or any(e.job_id == "pair" for e in evs),
        timeout=20,
    )
    assert [e for e in events if e.job_id == "pair"] == [], "the run ended while its pod on gpu-b still ran"

    def survivor() -> dict[str, Any] | None:
        return next((p for p in w.pods("pair") if p["spec"].get("nodeName") == "gpu-b"), None)

    assert (p := survivor()) is not None and p["status"].get("phase") == "Running"
    events = w.until(lambda evs: any(e.job_id == "pair" for e in evs), timeout=20)
    (ev,) = [e for e in events if e.job_id == "pair"]
    assert ev.kind is EventKind.LOST and ev.node == "gpu-a" and "gpu-a" in ev.reason, ev
    left = survivor()
    assert left is None or left["status"].get("phase") in ("Succeeded", "Failed"), "reported before its pod ended"
    assert ev.ended_at is not None and ev.ended_at >= deleted_at + 1.0  # its pod's SIGTERM took 1.5 s


def test_a_run_past_its_max_runtime_is_timed_out_not_failed_or_lost(make_world: Callable[..., World]) -> None:
    """A job's max runtime is its run's Job's ``activeDeadlineSeconds``: past it, the Job controller
    deletes the pods (SIGTERM; the container exits 143) and fails the Job (DeadlineExceeded). The
    substrate's Job controller did not model the deadline, and the backend read that end as the
    job's own failure (retried) or as pods deleted by someone (requeued): a job with a max runtime
    ran again and again. It ends TIMED_OUT."""
    import dataclasses

    import kubernetes.client

    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(dataclasses.replace(w.request("bounded", "gpu-a"), max_runtime_s=2.0))
    w.running("bounded")
    events = w.until(lambda evs: any(e.job_id == "bounded" for e in evs), timeout=30)
    (ev,) = [e for e in events if e.job_id == "bounded"]
    assert ev.kind is EventKind.TIMED_OUT, ev
    assert "max runtime" in ev.reason
    (job,) = kubernetes.client.BatchV1Api(w.client).list_namespaced_job(NS).items
    reasons = {c.type: c.reason for c in job.status.conditions or []}
    assert reasons.get("FailureTarget") == "DeadlineExceeded"
    assert w.cluster.kubelet is not None and [s.signal for s in w.cluster.kubelet.sigterms(NS)] == ["SIGTERM"]


def test_a_recovered_run_past_its_max_runtime_is_timed_out(make_world: Callable[..., World]) -> None:
    """The same for a run a new leader recovered from its pods: it did not know the run's deadline
    (the Job's, not the pods'), so the Job controller's deletion at the deadline read as pods
    deleted by someone (LOST, requeued). The pods carry the deadline now."""
    import dataclasses

    from gpufleet.backends.base import RecoveredState
    from gpufleet.k8s.adapter.backend import KubernetesBackend

    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(dataclasses.replace(w.request("bounded", "gpu-a"), max_runtime_s=3.0))
    w.running("bounded")
    successor = KubernetesBackend(w.client)
    try:
        successor.inventory()
        assert successor.recover("bounded", 1).state is RecoveredState.RUNNING
        events = w.until(lambda evs: any(e.job_id == "bounded" for e in evs), backend=successor)
        (ev,) = [e for e in events if e.job_id == "bounded"]
        assert ev.kind is EventKind.TIMED_OUT, ev
    finally:
        successor.close()
