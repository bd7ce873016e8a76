"""Issue 22, observation 8: gpufleet asks only what the NVIDIA device plugin can hand out.

On a node whose GPUs are advertised as replicas (time-slicing or MPS, ``nvidia.com/gpu.replicas`` R
> 1) the device plugin spreads a pod's replicas over the GPUs (``distributed`` allocation) and MPS
refuses a request of more than one (``failRequestsGreaterThanOne``, always on for MPS). So:

- a whole-GPU job never lands there (R replicas would be slices of several GPUs);
- a fraction asks exactly one replica and reserves ``max(milli, 1000 // R)`` of one GPU, so no more
  than R pods share a GPU and the kubelet never refuses one; it is metered what it reserved.

The substrate's kubelet runs the device plugin's allocation (:mod:`tests.support.k8s.deviceplugin`);
the first tests check that stand-in itself, the rest gpufleet's controller on it
(:class:`tests.support.k8s.placefleet.PlaceFleet`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import InputError
from gpufleet.k8s.adapter.objects import gpu_resources
from gpufleet.loop.metering import run_shares
from gpufleet.model.job import GpuRequest, Job, JobSpec, PodPlacement
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.deviceplugin import FAIL_REQUESTS_GREATER_THAN_ONE, allocate, gpu_of
from tests.support.k8s.kubelet import KubeletConfig, gpu_node
from tests.support.k8s.placefleet import PlaceFleet

L4: dict[str, Any] = {"product": "NVIDIA-L4", "gpu_memory_mib": 23034, "instance_type": "g6.12xlarge"}


def _pod(gpus: int) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


# -- the substrate's device plugin ----------------------------------------------------------------------


def test_the_device_plugin_spreads_replicas_over_gpus() -> None:
    """``distributed``: each replica from the GPU with the fewest allocated; a GPU's worth of replicas
    (4 of a 4-way GPU) comes from both GPUs, not one."""
    node = gpu_node("ts", gpu_count=2, replicas=4, **L4)
    got = allocate(_pod(4), node, {"nvidia.com/gpu": 4}, used=())
    assert not got.error
    assert sorted(gpu_of(d) for d in got.devices["nvidia.com/gpu"]) == ["GPU-0", "GPU-0", "GPU-1", "GPU-1"]
    # with GPU-0 busier, the next replica comes from GPU-1
    one = allocate(_pod(1), node, {"nvidia.com/gpu": 1}, used=["GPU-0::0", "GPU-0::1"])
    assert [gpu_of(d) for d in one.devices["nvidia.com/gpu"]] == ["GPU-1"]


@pytest.mark.parametrize(
    ("strategy", "annotations", "refused"),
    [
        ("mps", {}, True),
        ("time-slicing", {FAIL_REQUESTS_GREATER_THAN_ONE: "true"}, True),
        ("time-slicing", {}, False),
    ],
    ids=["mps", "time-slicing-fail-requests-greater-than-one", "time-slicing"],
)
def test_the_device_plugin_refuses_more_than_one_replica(
    strategy: str, annotations: dict[str, str], refused: bool
) -> None:
    node = gpu_node("ts", gpu_count=2, replicas=4, sharing_strategy=strategy, annotations=annotations, **L4)
    got = allocate(_pod(2), node, {"nvidia.com/gpu": 2}, used=())
    assert bool(got.error) is refused
    if refused:
        assert "maximum request size for shared resources is 1; found 2" in got.error
    assert not allocate(_pod(1), node, {"nvidia.com/gpu": 1}, used=()).error


def test_the_kubelet_fails_a_refused_pod(k8s_cluster: Cluster, k8s_kubelet: Any) -> None:
    """The kubelet's admission runs the allocation: a refused pod is Failed, UnexpectedAdmissionError."""
    import kubernetes.client

    k8s_cluster.add_gpu_node("mps", gpu_count=1, replicas=4, sharing_strategy="mps", **L4)
    client = k8s_cluster.api_client()
    core: Any = kubernetes.client.CoreV1Api(client)
    for name, replicas in (("two", "2"), ("one", "1")):
        core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "nodeName": "mps",
                    "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": replicas}}}],
                },
            },
        )
    k8s_cluster.wait_for(lambda: core.read_namespaced_pod("two", "default").status.phase == "Failed", timeout=10)
    k8s_cluster.wait_for(lambda: core.read_namespaced_pod("one", "default").status.phase == "Running", timeout=10)
    pod = core.read_namespaced_pod("two", "default")
    assert pod.status.reason == "UnexpectedAdmissionError"
    assert "maximum request size for shared resources is 1" in pod.status.message
    ((ns, name, node, devices),) = k8s_kubelet.allocations
    assert (ns, name, node, len(devices["nvidia.com/gpu"])) == ("default", "one", "mps", 1)
    client.close()  # type: ignore[no-untyped-call]


# -- what gpufleet asks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "replicas", "asked"),
    [(GpuRequest(1, 100), 4, 1), (GpuRequest(1, 600), 4, 1), (GpuRequest(1, 125), 8, 1), (GpuRequest(2), 1, 2)],
    ids=["less-than-a-replica", "more-than-a-replica", "a-replica", "whole-gpus-unshared"],
)
def test_a_pod_asks_what_the_device_plugin_can_give(gpu: GpuRequest, replicas: int, asked: int) -> None:
    assert gpu_resources(gpu, replicas=replicas) == {"nvidia.com/gpu": asked}


def test_whole_gpus_on_a_replica_node_are_refused_with_the_field() -> None:
    with pytest.raises(InputError) as e:
        gpu_resources(GpuRequest(1), replicas=4)
    assert e.value.field == "gpus" and "shared 4 ways" in str(e.value)


@pytest.mark.parametrize(
    ("milli", "replicas", "units"),
    [(100, 4, 1750), (250, 4, 1750), (600, 4, 4200), (100, 1, 700)],
    ids=["a-replica-at-least", "a-replica", "what-it-reserved", "unshared-node-as-asked"],
)
def test_a_fraction_is_metered_what_it_reserved(milli: int, replicas: int, units: int) -> None:
    """A 0.1-GPU job on a 4-way node holds a replica (the scheduler reserved 250 milli): 1/4 GPU."""
    job = Job("j", JobSpec("j", gpu=GpuRequest(1, milli)), 0.0)
    (share,) = run_shares(job, [PodPlacement("ts", (0,), milli)], lambda n: "L4", "ts", lambda n: replicas)
    assert share.gpu_units == units


# -- gpufleet's controller on the substrate ------------------------------------------------------------------


@pytest.fixture
def fleet(k8s_cluster_factory: Callable[..., Cluster], tmp_path: Path) -> Iterator[PlaceFleet]:
    cluster = k8s_cluster_factory(kubelet=KubeletConfig(default_duration_s=None, checkpoint_s=0.1))
    f = PlaceFleet(cluster, tmp_path)
    try:
        yield f
    finally:
        f.close()


def _bound(f: PlaceFleet, job_id: str) -> list[dict[str, Any]]:
    return [p for p in f.pods() if (p["metadata"].get("labels") or {}).get("gpufleet.io/job-id") == job_id]


def _phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase") or "Pending")


def test_a_whole_gpu_job_never_gets_replicas_of_several_gpus(fleet: PlaceFleet, k8s_cluster_factory: Any) -> None:
    """The only GPU node shares its 2 GPUs 4 ways: the job waits (there, its 4 replicas would be
    spread over both GPUs); once an unshared node joins it runs there, on one whole GPU."""
    fleet.cluster.add_gpu_node("ts", gpu_count=2, replicas=4, **L4)
    fleet.start()
    job = fleet.submit("whole", gpus=1)
    fleet.settle(2.0)
    kubelet = fleet.cluster.kubelet
    assert kubelet is not None
    spread = [(n, d) for _, n, _, d in kubelet.allocations if len({gpu_of(x) for x in d["nvidia.com/gpu"]}) > 1]
    assert not spread, f"replicas of several GPUs given as whole GPUs: {spread}"
    assert not any(p["spec"].get("nodeName") == "ts" for p in _bound(fleet, job))
    fleet.cluster.add_gpu_node("a100", gpu_count=1)
    fleet.wait_for(lambda: any(_phase(p) == "Running" for p in _bound(fleet, job)), "the job running on a100")
    (pod,) = _bound(fleet, job)
    assert pod["spec"]["nodeName"] == "a100"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_a_fraction_on_mps_asks_one_replica(fleet: PlaceFleet) -> None:
    """Half a GPU on an MPS node (4 replicas): one replica asked (two would be refused by the device
    plugin: UnexpectedAdmissionError, a failed run), half a GPU reserved."""
    fleet.cluster.add_gpu_node("mps", gpu_count=1, replicas=4, sharing_strategy="mps", **L4)
    fleet.start()
    job = fleet.submit("half", gpu_milli=500)
    fleet.wait_for(lambda: any(_phase(p) in ("Running", "Failed") for p in _bound(fleet, job)), "the pod admitted")
    (pod,) = _bound(fleet, job)
    assert _phase(pod) == "Running", pod.get("status")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert fleet.rows()[job].placement[0]["milli"] == 500


def test_no_more_pods_share_a_gpu_than_it_has_replicas(fleet: PlaceFleet) -> None:
    """Five 0.1-GPU jobs, one GPU shared 4 ways: four run (each one replica), the fifth waits; the
    kubelet refuses none (it would, ``OutOfnvidia.com/gpu``, had a fifth been bound)."""
    fleet.cluster.add_gpu_node("ts", gpu_count=1, replicas=4, **L4)
    fleet.start()
    jobs = [fleet.submit(f"small-{i}", gpu_milli=100) for i in range(5)]

    def running() -> int:
        return sum(1 for j in jobs for p in _bound(fleet, j) if _phase(p) == "Running")

    fleet.wait_for(lambda: running() == 4, "four pods running")
    fleet.settle(2.0)
    kubelet = fleet.cluster.kubelet
    assert kubelet is not None and kubelet.rejected == []
    assert running() == 4
    rows = fleet.rows()
    assert sorted(rows[j].state for j in jobs) == ["PENDING", "RUNNING", "RUNNING", "RUNNING", "RUNNING"]
    assert {gpu_of(d) for _, _, _, devs in kubelet.allocations for d in devs["nvidia.com/gpu"]} == {"GPU-0"}
