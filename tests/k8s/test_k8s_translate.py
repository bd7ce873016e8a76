"""The Kubernetes translation modules: nodes, pods, the objects gpufleet writes, DCGM metrics.

Scenario tables (one id per scenario) of Node and Pod objects as the API returns them, every
builder's output validated offline against Kubernetes' own OpenAPI schemas (``kubernetes-validate``,
strict: unknown fields rejected) for 1.29 and 1.33, NodeClaims against Karpenter's real CRD
(``tests/support/k8s/crds``, mapped to JSON Schema; its CEL rules with ``cel-python`` where installed),
and a realistic DCGM exporter scrape.
"""

from __future__ import annotations

import contextlib
import copy
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar, cast

import jsonschema
import kubernetes_validate
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.errors import InputError
from gpufleet.k8s.adapter.dcgm import parse_dcgm
from gpufleet.k8s.adapter.nodes import (
    NodeInfo,
    gpu_from_product,
    node_from_object,
    node_info,
    node_schedulable,
    parse_quantity,
    quantity_mib,
    quantity_milli,
    spot_notice,
)
from gpufleet.k8s.adapter.objects import (
    batch_job,
    binding,
    dns_label,
    eviction,
    gpu_resources,
    job_name,
    label_value,
    node_claim,
    nodepool_offer,
)
from gpufleet.k8s.adapter.pods import PodFacts, group_gangs, pod_facts
from gpufleet.k8s.adapter.waiting import pod_condition_for
from gpufleet.model.constraints import Taint, TaintEffect
from gpufleet.model.job import GpuRequest
from gpufleet.model.node import CapacityType, GpuSharingFacts, SharingMode
from tests.support.k8s.crdcheck import CRDS, check_cel, validate_builtin, validate_crd

T = TypeVar("T")


@pytest.fixture(scope="module")
def catalog() -> PriceCatalog:
    return PriceCatalog.load()  # the bundled catalog (data/prices/gpu_prices.csv)


# == nodes =========================================================================================


def k8s_node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ready: str = "True",
    unschedulable: bool = False,
    annotations: Mapping[str, str] | None = None,
    provider_id: str | None = None,
) -> dict[str, Any]:
    """A v1 Node as ``ApiClient.sanitize_for_serialization`` returns it."""
    alloc = {"cpu": "31850m", "memory": "127433944Ki", "pods": "110", "ephemeral-storage": "95551679124"}
    alloc.update(allocatable or {})
    spec: dict[str, Any] = {"podCIDR": "10.244.3.0/24"}
    if provider_id:
        spec["providerID"] = provider_id
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": "0b6f7a9e-1111-4c3e-9a77-" + format(abs(hash(name)) % 10**12, "012d"),
            "resourceVersion": "48211",
            "creationTimestamp": "2025-03-02T08:14:55Z",
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                **(labels or {}),
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", **(annotations or {})},
        },
        "spec": spec,
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                    "lastHeartbeatTime": "2025-03-02T09:00:00Z",
                    "lastTransitionTime": "2025-03-02T08:15:30Z",
                },
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.4", "containerRuntimeVersion": "containerd://1.7.24"},
        },
    }


AWS_EAST = {"topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": "us-east-1b"}
GKE_CENTRAL = {"topology.kubernetes.io/region": "us-central1", "topology.kubernetes.io/zone": "us-central1-a"}
GFD_A100_80 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/mig.capable": "true",
}
NO_SCHEDULE_GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodeCase:
    obj: dict[str, Any]
    gpu_model: str
    gpu_count: int
    sharing: SharingMode
    capacity_type: CapacityType
    pool: str
    schedulable: bool = True
    notice: str | None = None  # a substring of spot_notice
    price: float | None = None
    price_source: str = ""  # a substring
    gpu_facts: GpuSharingFacts = field(default_factory=GpuSharingFacts)  # Node.gpu_facts
    taints: tuple[Taint, ...] = ()  # Node.taints: what keeps off the jobs not tolerating it


NODE_CASES = [
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-12-7.ec2.internal",
                labels={
                    **AWS_EAST,
                    **GFD_A100_80,
                    "node.kubernetes.io/instance-type": "p4de.24xlarge",
                    "karpenter.sh/capacity-type": "on-demand",
                    "karpenter.sh/nodepool": "gpu-a100",
                    "karpenter.k8s.aws/instance-gpu-name": "a100",
                },
                allocatable={"cpu": "95690m", "memory": "1056454528Ki", "nvidia.com/gpu": "8"},
                taints=[NO_SCHEDULE_GPU],
                provider_id="aws:///us-east-1b/i-0a1b2c3d4e5f60718",
            ),
            "A100-80GB",
            8,
            SharingMode.EXCLUSIVE,
            CapacityType.ON_DEMAND,
            "gpu-a100",
            price=40.96575,
            price_source="offering aws/us-east-1/p4de.24xlarge",
        ),
        id="a100-whole-karpenter-on-demand",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-40-3.ec2.internal",
                labels={
                    **AWS_EAST,
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
                    "nvidia.com/gpu.memory": "81559",
                    "nvidia.com/gpu.count": "8",
                    "nvidia.com/gpu.replicas": "4",
                    "nvidia.com/gpu.sharing-strategy": "time-slicing",
                    "node.kubernetes.io/instance-type": "p5.48xlarge",
                    "eks.amazonaws.com/nodegroup": "h100-shared",
                    "eks.amazonaws.com/capacityType": "ON_DEMAND",
                },
                allocatable={"cpu": "191450m", "memory": "2078137676Ki", "nvidia.com/gpu": "32"},
            ),
            "H100-80GB",
            8,
            SharingMode.SHARED,
            CapacityType.ON_DEMAND,
            "h100-shared",
            price=98.32,
            gpu_facts=GpuSharingFacts(replicas=4, strategy="time-slicing"),
        ),
        id="h100-time-sliced-x4",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-40-4.ec2.internal",
                labels={
                    **AWS_EAST,
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu.count": "8",
                    "nvidia.com/gpu.replicas": "4",
                    "nvidia.com/gpu.sharing-strategy": "mps",
                    "node.kubernetes.io/instance-type": "p5.48xlarge",
                },
                allocatable={"nvidia.com/gpu.shared": "32", "nvidia.com/gpu": "0"},
            ),
            "H100-80GB",
            8,
            SharingMode.SHARED,
            CapacityType.ON_DEMAND,
            "default",
            price=98.32,
            gpu_facts=GpuSharingFacts(resource="nvidia.com/gpu.shared", replicas=4, strategy="mps"),
        ),
        id="h100-mps-rename-by-default",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "gke-ml-mig-pool-5f1c2a7e-x2vq",
                labels={
                    **GKE_CENTRAL,
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                    "nvidia.com/gpu.memory": "40960",
                    "nvidia.com/gpu.count": "2",
                    "nvidia.com/mig.strategy": "mixed",
                    "nvidia.com/mig-1g.5gb.count": "7",
                    "nvidia.com/mig-3g.20gb.count": "2",
                    "cloud.google.com/gke-nodepool": "mig-pool",
                    "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                    "node.kubernetes.io/instance-type": "a2-highgpu-2g",
                },
                allocatable={"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-3g.20gb": "2"},
                provider_id="gce://ml-proj/us-central1-a/gke-ml-mig-pool-5f1c2a7e-x2vq",
            ),
            "A100-40GB",
            2,
            SharingMode.MIG,
            CapacityType.ON_DEMAND,
            "mig-pool",
            price=2 * 23.47126 / 8,
            price_source="per-GPU gcp/us-central1/A100 x8 x 2",
            gpu_facts=GpuSharingFacts(None, mig_strategy="mixed", mig_profiles=(("1g.5gb", 7), ("3g.20gb", 2))),
        ),
        id="a100-mig-mixed-gke",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-12-9.ec2.internal",
                labels={
                    **AWS_EAST,
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                    "nvidia.com/gpu.memory": "4864",
                    "nvidia.com/gpu.count": "56",
                    "nvidia.com/mig.strategy": "single",
                    "node.kubernetes.io/instance-type": "p4d.24xlarge",
                },
                allocatable={"nvidia.com/gpu": "56"},
            ),
            "A100-40GB",
            8,
            SharingMode.MIG,
            CapacityType.ON_DEMAND,
            "default",
            price=32.7726,
            gpu_facts=GpuSharingFacts(mig_strategy="single", mig_profiles=(("1g.5gb", 56),)),
        ),
        id="a100-mig-single",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-77-12.ec2.internal",
                labels={
                    **AWS_EAST,
                    "nvidia.com/gpu.product": "Tesla-T4",
                    "nvidia.com/gpu.memory": "15360",
                    "nvidia.com/gpu.count": "1",
                    "node.kubernetes.io/instance-type": "g4dn.xlarge",
                    "karpenter.sh/capacity-type": "spot",
                    "karpenter.sh/nodepool": "inference-spot",
                },
                allocatable={"cpu": "3920m", "memory": "15147100Ki", "nvidia.com/gpu": "1"},
            ),
            "T4",
            1,
            SharingMode.EXCLUSIVE,
            CapacityType.SPOT,
            "inference-spot",
            price=(0.1845 + 0.2010) / 2,
        ),
        id="t4-spot-by-karpenter-label",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "gke-ml-l4-spot-8d1e33f0-9k2m",
                labels={
                    **GKE_CENTRAL,
                    "nvidia.com/gpu.product": "NVIDIA-L4",
                    "nvidia.com/gpu.count": "1",
                    "cloud.google.com/gke-spot": "true",
                    "cloud.google.com/gke-nodepool": "l4-spot",
                    "cloud.google.com/gke-accelerator": "nvidia-l4",
                    "node.kubernetes.io/instance-type": "g2-standard-8",
                },
                allocatable={"nvidia.com/gpu": "1"},
                taints=[{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}],
                provider_id="gce://ml-proj/us-central1-a/gke-ml-l4-spot-8d1e33f0-9k2m",
            ),
            "L4",
            1,
            SharingMode.EXCLUSIVE,
            CapacityType.SPOT,
            "l4-spot",
            price=0.2231,
        ),
        id="gke-spot-l4",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-90-1.ec2.internal",
                labels={
                    **AWS_EAST,
                    "nvidia.com/gpu.product": "NVIDIA-A10G",
                    "nvidia.com/gpu.count": "1",
                    "node.kubernetes.io/instance-type": "g5.xlarge",
                    "eks.amazonaws.com/capacityType": "SPOT",
                    "eks.amazonaws.com/nodegroup": "ng-a10g-spot",
                },
                allocatable={"nvidia.com/gpu": "1"},
            ),
            "A10G",
            1,
            SharingMode.EXCLUSIVE,
            CapacityType.SPOT,
            "ng-a10g-spot",
            price=(0.3970 + 0.4177) / 2,
        ),
        id="eks-capacity-type-spot",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "aks-t4spot-31415926-vmss000002",
                labels={
                    "topology.kubernetes.io/region": "eastus",
                    "nvidia.com/gpu.product": "Tesla-T4",
                    "kubernetes.azure.com/scalesetpriority": "spot",
                    "kubernetes.azure.com/agentpool": "t4spot",
                    "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3",
                },
                allocatable={"nvidia.com/gpu": "1"},
                taints=[{"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}],
            ),
            "T4",
            1,
            SharingMode.EXCLUSIVE,
            CapacityType.SPOT,
            "t4spot",
            price=0.062699,
        ),
        id="aks-spot-t4",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-3-15.ec2.internal",
                labels={**AWS_EAST, "node.kubernetes.io/instance-type": "m6i.2xlarge"},
                allocatable={"cpu": "7910m", "memory": "31792128Ki"},
            ),
            "",
            0,
            SharingMode.EXCLUSIVE,
            CapacityType.ON_DEMAND,
            "default",
            gpu_facts=GpuSharingFacts(resource=None),
        ),
        id="cpu-only",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-90-2.ec2.internal",
                labels={**AWS_EAST, "node.kubernetes.io/instance-type": "g5.xlarge"},
                allocatable={"nvidia.com/gpu": "1"},
            ),
            "A10G",
            1,
            SharingMode.EXCLUSIVE,
            CapacityType.ON_DEMAND,
            "default",
            price=1.006,
        ),
        id="no-gfd-labels-model-from-catalog",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-12-5.ec2.internal",
                labels={**GFD_A100_80, "node.kubernetes.io/instance-type": "p4de.24xlarge"},
            ),
            "A100-80GB",
            0,
            SharingMode.EXCLUSIVE,
            CapacityType.ON_DEMAND,
            "default",
            price=40.96575,  # the node is paid for, GPUs usable or not
            price_source="offering aws/us-east-1/p4de.24xlarge",
            gpu_facts=GpuSharingFacts(resource=None),
        ),
        id="device-plugin-not-ready-yet",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-12-8.ec2.internal",
                labels={**AWS_EAST, **GFD_A100_80, "node.kubernetes.io/instance-type": "p4de.24xlarge"},
                allocatable={"nvidia.com/gpu": "8"},
                ready="False",
            ),
            "A100-80GB",
            8,
            SharingMode.EXCLUSIVE,
            CapacityType.ON_DEMAND,
            "default",
            schedulable=False,
            price=40.96575,
        ),
        id="not-ready",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-12-10.ec2.internal",
                labels={**AWS_EAST, **GFD_A100_80, "node.kubernetes.io/instance-type": "p4de.24xlarge"},
                allocatable={"nvidia.com/gpu": "8"},
                taints=[NO_SCHEDULE_GPU, {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
            ),
            "A100-80GB",
            8,
            SharingMode.EXCLUSIVE,
            CapacityType.ON_DEMAND,
            "default",
            # issue 22: a taint gpufleet's pods do not tolerate is no reason to leave the node unused:
            # it keeps off the jobs that do not tolerate it (the GPU taint, which all tolerate, is not kept)
            price=40.96575,
            taints=(Taint("dedicated", "infra", TaintEffect.NO_SCHEDULE),),
        ),
        id="tainted-not-tolerated",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-12-11.ec2.internal",
                labels={**AWS_EAST, **GFD_A100_80, "node.kubernetes.io/instance-type": "p4de.24xlarge"},
                allocatable={"nvidia.com/gpu": "8"},
                taints=[{"key": "DeletionCandidateOfClusterAutoscaler", "value": "1741", "effect": "PreferNoSchedule"}],
            ),
            "A100-80GB",
            8,
            SharingMode.EXCLUSIVE,
            CapacityType.ON_DEMAND,
            "default",
            price=40.96575,
        ),
        id="prefer-no-schedule-ignored",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-12-12.ec2.internal",
                labels={**AWS_EAST, **GFD_A100_80, "node.kubernetes.io/instance-type": "p4de.24xlarge"},
                allocatable={"nvidia.com/gpu": "8"},
                unschedulable=True,
                taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
            ),
            "A100-80GB",
            8,
            SharingMode.EXCLUSIVE,
            CapacityType.ON_DEMAND,
            "default",
            schedulable=False,
            price=40.96575,
        ),
        id="cordoned",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-77-13.ec2.internal",
                labels={
                    **AWS_EAST,
                    "nvidia.com/gpu.product": "Tesla-T4",
                    "node.kubernetes.io/instance-type": "g4dn.xlarge",
                    "karpenter.sh/capacity-type": "spot",
                    "karpenter.sh/nodepool": "inference-spot",
                },
                allocatable={"nvidia.com/gpu": "1"},
                taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
            ),
            "T4",
            1,
            SharingMode.EXCLUSIVE,
            CapacityType.SPOT,
            "inference-spot",
            schedulable=False,
            notice="Karpenter is disrupting the node",
            price=(0.1845 + 0.2010) / 2,
        ),
        id="karpenter-disrupted",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "ip-10-0-77-14.ec2.internal",
                labels={
                    **AWS_EAST,
                    "nvidia.com/gpu.product": "Tesla-T4",
                    "node.kubernetes.io/instance-type": "g4dn.xlarge",
                    "eks.amazonaws.com/capacityType": "SPOT",
                },
                allocatable={"nvidia.com/gpu": "1"},
                taints=[
                    {"key": "aws-node-termination-handler/rebalance-recommendation", "effect": "NoSchedule"},
                    {"key": "aws-node-termination-handler/spot-itn", "value": "0f3e", "effect": "NoSchedule"},
                ],
            ),
            "T4",
            1,
            SharingMode.EXCLUSIVE,
            CapacityType.SPOT,
            "default",
            schedulable=False,
            notice="EC2 spot interruption notice",
            price=(0.1845 + 0.2010) / 2,
        ),
        id="spot-interruption-notice",
    ),
    pytest.param(
        NodeCase(
            k8s_node(
                "dgx-07",
                labels={**GFD_A100_80, "gpufleet.io/capacity-type": "reserved", "gpufleet.io/pool": "dgx"},
                allocatable={"nvidia.com/gpu": "8"},
                annotations={"gpufleet.io/hourly-price-usd": "18.40"},
            ),
            "A100-80GB",
            8,
            SharingMode.EXCLUSIVE,
            CapacityType.RESERVED,
            "dgx",
            price=18.40,
            price_source="annotation",
        ),
        id="on-prem-price-annotation",
    ),
]


@pytest.mark.parametrize("case", NODE_CASES)
def test_node_translation(case: NodeCase, catalog: PriceCatalog) -> None:
    info = node_info(case.obj, catalog)
    assert info is not None
    node = info.node
    assert node.name == case.obj["metadata"]["name"]
    assert (node.gpu_model, node.gpu_count, node.sharing) == (case.gpu_model, case.gpu_count, case.sharing)
    assert (node.capacity_type, node.pool) == (case.capacity_type, case.pool)
    assert info.schedulable is case.schedulable
    assert info.schedulable is node_schedulable(case.obj)
    if case.notice is None:
        assert info.spot_notice is None
    else:
        assert info.spot_notice is not None and case.notice in info.spot_notice
        assert info.spot_notice == spot_notice(case.obj)
    if case.price is None:
        assert node.hourly_price_usd is None
        assert info.notes, "a node without a price says why"
    else:
        assert node.hourly_price_usd == pytest.approx(case.price)
    assert case.price_source in info.price_source
    assert node.gpu_facts == case.gpu_facts
    assert node.taints == case.taints
    # issue 21: the labels are the Node's own; nothing gpufleet reads about the GPUs is added to them
    assert node.labels == case.obj["metadata"].get("labels", {})
    # allocatable CPU and memory, rounded down
    alloc = case.obj["status"]["allocatable"]
    assert node.cpu_milli == quantity_milli(alloc["cpu"], round_up=False)
    assert node.memory_mib == quantity_mib(alloc["memory"], round_up=False)
    # the short form gives the same node
    assert node_from_object(case.obj, catalog) == node


def test_node_allocatable_cpu_and_memory() -> None:
    obj = k8s_node("n", allocatable={"cpu": "63500m", "memory": "515890Mi"})
    node = node_from_object(obj, None)
    assert node is not None
    assert (node.cpu_milli, node.memory_mib, node.hourly_price_usd) == (63500, 515890, None)


def test_time_sliced_replica_is_a_fraction_of_a_gpu() -> None:
    case = _case(NODE_CASES, "h100-time-sliced-x4", NodeCase)
    info = node_info(case.obj, None)
    assert info is not None
    assert (info.node.gpu_facts.replicas, info.node.gpu_facts.replica_milli) == (4, 250)
    # a pod asking for one replica holds a quarter of a GPU on that node
    pod = pod_facts(k8s_pod("ml", "infer-0", containers=[container(limits={"nvidia.com/gpu": "1"})]))
    assert pod.gpu_request(info.node.gpu_facts.replicas) == GpuRequest(1, 250)
    assert pod.gpu_request() == GpuRequest(1)  # the same pod on an unshared GPU


def test_virtual_kubelet_and_windows_nodes_are_not_gpufleets() -> None:
    assert node_from_object(k8s_node("vk", labels={"type": "virtual-kubelet"}), None) is None
    assert node_from_object(k8s_node("win", labels={"kubernetes.io/os": "windows"}), None) is None


def test_catalog_without_the_offering_leaves_no_price(catalog: PriceCatalog) -> None:
    obj = k8s_node("gh", labels={"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}, allocatable={"nvidia.com/gpu": "1"})
    info = node_info(obj, catalog)
    assert info is not None
    assert info.node.gpu_model == "NVIDIA-GH200-480GB" and info.node.gpu_count == 1
    assert info.node.hourly_price_usd is None and info.price_source == "none"
    assert any("unknown GPU product" in n for n in info.notes)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        pytest.param({"status": {"allocatable": {"cpu": "lots"}}}, "status.allocatable.cpu", id="bad-cpu"),
        pytest.param({"status": {"allocatable": {"memory": "12 GiB"}}}, "status.allocatable.memory", id="bad-memory"),
        pytest.param(
            {"status": {"allocatable": {"nvidia.com/gpu": "1.5"}}}, "status.allocatable[nvidia.com/gpu]", id="half-gpu"
        ),
        pytest.param(
            {"metadata": {"labels": {"nvidia.com/gpu.replicas": "four"}}},
            "metadata.labels[nvidia.com/gpu.replicas]",
            id="bad-replicas",
        ),
        pytest.param(
            {"metadata": {"annotations": {"gpufleet.io/hourly-price-usd": "cheap"}}},
            "metadata.annotations[gpufleet.io/hourly-price-usd]",
            id="bad-price-annotation",
        ),
    ],
)
def test_bad_node_names_node_and_field(patch: dict[str, Any], field: str) -> None:
    obj = _merge(k8s_node("gpu-node-3", allocatable={"nvidia.com/gpu": "1"}), patch)
    with pytest.raises(InputError) as err:
        node_info(obj, None)
    assert "node gpu-node-3" in str(err.value) and f"field '{field}'" in str(err.value)


def test_node_without_a_name() -> None:
    obj = k8s_node("x")
    del obj["metadata"]["name"]
    with pytest.raises(InputError, match=r"metadata\.name"):
        node_info(obj)


@pytest.mark.parametrize(
    ("product", "memory", "expected"),
    [
        pytest.param("NVIDIA-A100-SXM4-80GB", None, "A100-80GB", id="a100-80-sxm"),
        pytest.param("NVIDIA-A100-SXM4-40GB", None, "A100-40GB", id="a100-40-sxm"),
        pytest.param("NVIDIA-A100-PCIE-40GB", 40960, "A100-40GB", id="a100-40-pcie"),
        pytest.param("NVIDIA-A100-80GB-PCIe", None, "A100-80GB", id="a100-80-pcie"),
        pytest.param("NVIDIA-H100-80GB-HBM3", 81559, "H100-80GB", id="h100-hbm3"),
        pytest.param("NVIDIA-H100-NVL", 95830, None, id="h100-nvl-unknown"),
        pytest.param("NVIDIA-H200", None, "H200", id="h200"),
        pytest.param("Tesla-T4", 15360, "T4", id="t4"),
        pytest.param("Tesla-T4-SHARED", None, "T4", id="t4-shared"),
        pytest.param("NVIDIA-L40S", None, "L40S", id="l40s"),
        pytest.param("NVIDIA-A10G", None, "A10G", id="a10g"),
        pytest.param("NVIDIA-A10", None, "A10", id="a10"),
        pytest.param("NVIDIA-L4", None, "L4", id="l4"),
        pytest.param("Tesla-V100-SXM2-32GB", None, "V100-32GB", id="v100-32"),
        pytest.param("Tesla-V100-SXM2-16GB", None, "V100-16GB", id="v100-16"),
        pytest.param("A100-SXM4-40GB-MIG-1g.5gb", None, "A100-40GB", id="mig-single-suffix"),
        pytest.param("nvidia-tesla-a100", None, "A100-40GB", id="gke-accelerator"),
        pytest.param("nvidia-a100-80gb", None, "A100-80GB", id="gke-accelerator-80"),
        pytest.param("a10g", None, "A10G", id="karpenter-gpu-name"),
        pytest.param("NVIDIA-GeForce-RTX-4090", None, None, id="unknown"),
    ],
)
def test_gpu_product_names(product: str, memory: int | None, expected: str | None) -> None:
    assert gpu_from_product(product, memory) == expected


# == quantities ====================================================================================


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64", Decimal(64)),
        ("63500m", Decimal("63.5")),
        ("515890Mi", Decimal(515890 * 2**20)),
        ("512Gi", Decimal(512 * 2**30)),
        ("1e3", Decimal(1000)),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("100k", Decimal(100000)),
        ("1E", Decimal(10**18)),
        ("250u", Decimal("0.00025")),
        (8, Decimal(8)),
        (0.5, Decimal("0.5")),
    ],
)
def test_parse_quantity(text: str | int | float, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["", " 5", "5 ", "NaN", "Infinity", "1_000", "1e3Mi", "Mi", "1ki", "1e1.5", "--1", "0x10"]
)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(InputError, match=re.escape("field 'status.allocatable.cpu'")):
        parse_quantity(text, field="status.allocatable.cpu")


_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


@settings(deadline=None)  # the first example pays for imports on a loaded machine
@given(st.integers(0, 10**6), st.sampled_from(sorted(_SUFFIX)))
def test_quantity_scales_by_its_suffix(n: int, suffix: str) -> None:
    assert parse_quantity(f"{n}{suffix}") == n * _SUFFIX[suffix]


@settings(deadline=None)  # the first example pays for imports on a loaded machine
@given(st.integers(0, 10**9))
def test_milli_and_mib_round_trip(n: int) -> None:
    assert quantity_milli(f"{n}m") == n
    assert quantity_mib(f"{n}Mi") == n
    assert quantity_mib(str(n), round_up=False) == n // 2**20
    assert quantity_mib(str(n)) == -(-n // 2**20)


_NUMBER = st.from_regex(r"\A[+-]?([0-9]{1,6}(\.[0-9]{0,4})?|\.[0-9]{1,4})\Z")
_QSUFFIX = st.one_of(
    st.sampled_from(["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]),
    st.builds(lambda e, s: f"{e}{s}", st.sampled_from(["e", "E"]), st.integers(-9, 12)),
)


@settings(deadline=None)  # the first example pays for imports on a loaded machine
@given(_NUMBER, _QSUFFIX)
def test_parse_quantity_agrees_with_the_kubernetes_client(number: str, suffix: str) -> None:
    """On the grammar's strings, the strict parser agrees with ``kubernetes.utils.parse_quantity``."""
    from kubernetes.utils import quantity

    client_parse = cast("Callable[[str], Decimal]", quantity.parse_quantity)
    text = number + suffix
    try:
        ours = parse_quantity(text)
    except InputError as e:
        assume("out of range" not in str(e))
        raise
    assert ours == client_parse(text)


@settings(deadline=None)  # the first example pays for imports on a loaded machine
@given(st.text(max_size=12))
def test_parse_quantity_never_crashes(text: str) -> None:
    with contextlib.suppress(InputError):
        parse_quantity(text)


# == pods ==========================================================================================


def container(
    name: str = "main",
    *,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "ghcr.io/acme/train:2.4", "resources": {}}
    if requests:
        c["resources"]["requests"] = dict(requests)
    if limits:
        c["resources"]["limits"] = dict(limits)
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def k8s_pod(
    namespace: str,
    name: str,
    *,
    containers: list[dict[str, Any]],
    init_containers: list[dict[str, Any]] | None = None,
    owner: dict[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    phase: str = "Pending",
    node: str | None = None,
    status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A v1 Pod as ``ApiClient.sanitize_for_serialization`` returns it."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"5c9e-{name}",
        "creationTimestamp": "2025-03-02T10:00:00Z",
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
    }
    if owner:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {
        "containers": containers,
        "schedulerName": "gpufleet",
        "restartPolicy": "Never",
        "priorityClassName": "gpufleet-normal",
        "priority": 100,
    }
    if init_containers:
        spec["initContainers"] = init_containers
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase, "qosClass": "Burstable", **(status or {})},
    }


def controller(kind: str, name: str, api_version: str = "batch/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": True,
        "blockOwnerDeletion": True,
    }


RUNNING_STATUS = {
    "startTime": "2025-03-02T10:00:05Z",
    "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-03-02T10:00:02Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2025-03-02T10:00:20Z"},
    ],
    "containerStatuses": [
        {
            "name": "main",
            "ready": True,
            "restartCount": 0,
            "image": "ghcr.io/acme/train:2.4",
            "state": {"running": {"startedAt": "2025-03-02T10:00:19Z"}},
        }
    ],
}


def jobset_pod(i: int, *, gang_size: int | None = None) -> dict[str, Any]:
    job = f"llm-pretrain-workers-{i // 2}"
    ann = {"jobset.sigs.k8s.io/jobset-name": "llm-pretrain", "jobset.sigs.k8s.io/replicatedjob-replicas": "2"}
    if gang_size is not None:
        ann["gpufleet.io/gang-size"] = str(gang_size)
    return k8s_pod(
        "research",
        f"{job}-{i % 2}-abcde",
        containers=[container(requests={"cpu": "90", "memory": "900Gi"}, limits={"nvidia.com/gpu": "8"})],
        owner=controller("Job", job),
        labels={
            "jobset.sigs.k8s.io/jobset-name": "llm-pretrain",
            "jobset.sigs.k8s.io/jobset-uid": "uid-llm-pretrain",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": str(i // 2),
            "batch.kubernetes.io/job-completion-index": str(i % 2),
            "team": "research",
        },
        annotations=ann,
    )


@dataclass(frozen=True)
class PodCase:
    obj: dict[str, Any]
    owner: tuple[str, str]  # kind, name
    gpu: GpuRequest
    cpu_milli: int
    memory_mib: int
    extra: Mapping[str, Any] = field(default_factory=dict)  # PodFacts attributes


POD_CASES = [
    pytest.param(
        PodCase(
            k8s_pod(
                "ml",
                "gf-j-7xq2-r2-8m4kd",
                containers=[
                    container(requests={"cpu": "8", "memory": "32Gi"}, limits={"nvidia.com/gpu": "2", "memory": "32Gi"})
                ],
                owner=controller("Job", "gf-j-7xq2-r2"),
                labels={"team": "nlp", "project": "llm", "experiment-id": "exp-42", "cost-center": "cc-7"},
                annotations={"gpufleet.io/job-id": "j-7xq2", "gpufleet.io/run": "2", "gpufleet.io/cost-limit": "250"},
                phase="Running",
                node="ip-10-0-12-7.ec2.internal",
                status=RUNNING_STATUS,
            ),
            ("Job", "gf-j-7xq2-r2"),
            GpuRequest(2),
            8000,
            32768,
            {
                "team": "nlp",
                "project": "llm",
                "experiment": "exp-42",
                "cost_center": "cc-7",
                "cost_limit_usd": 250.0,
                "job_id": "j-7xq2",
                "run": 2,
                "phase": "Running",
                "node": "ip-10-0-12-7.ec2.internal",
                "scheduler": "gpufleet",
                "priority_class": "gpufleet-normal",
                "priority": 100,
                "started_at": 1740909619.0,
            },
        ),
        id="job-owned",
    ),
    pytest.param(
        PodCase(jobset_pod(0), ("JobSet", "llm-pretrain"), GpuRequest(8), 90000, 921600, {"team": "research"}),
        id="jobset-member",
    ),
    pytest.param(
        PodCase(
            k8s_pod("dev", "notebook", containers=[container(requests={"cpu": "500m", "memory": "1000M"})]),
            ("Pod", "notebook"),
            GpuRequest(),
            500,
            954,
            {"gpu_resource": None},
        ),
        id="bare-pod-no-gpu",
    ),
    pytest.param(
        PodCase(
            k8s_pod(
                "ml",
                "infer-7d9f-0",
                containers=[container(limits={"nvidia.com/mig-1g.10gb": "1", "cpu": "2", "memory": "8Gi"})],
                owner=controller("ReplicaSet", "infer-7d9f", "apps/v1"),
            ),
            ("ReplicaSet", "infer-7d9f"),
            GpuRequest(1, 143, "1g.10gb"),
            2000,
            8192,
            {"mig_profile": "1g.10gb", "gpu_resource": "nvidia.com/mig-1g.10gb"},
        ),
        id="mig-request",
    ),
    pytest.param(
        PodCase(
            k8s_pod(
                "ml",
                "ray-worker-0",
                containers=[container(limits={"nvidia.com/gpu.shared": "1"}, requests={"cpu": "1"})],
                owner=controller("RayCluster", "ray-tune", "ray.io/v1"),
            ),
            ("RayCluster", "ray-tune"),
            GpuRequest(1),  # replicas decided by the node: unshared here
            1000,
            0,
            {"gpu_resource": "nvidia.com/gpu.shared", "gpu_count": 1},
        ),
        id="shared-gpu-request",
    ),
    pytest.param(
        PodCase(
            k8s_pod(
                "ml",
                "pt-worker-1",
                containers=[
                    container(requests={"cpu": "4", "memory": "16Gi"}, limits={"nvidia.com/gpu": "4"}),
                    container("log-shipper", requests={"cpu": "100m", "memory": "128Mi"}),
                ],
                init_containers=[
                    container("fetch-data", requests={"cpu": "16", "memory": "4Gi"}),
                    container("proxy", requests={"cpu": "200m", "memory": "64Mi"}, restart_policy="Always"),
                    container("warmup", requests={"cpu": "1", "memory": "20Gi"}, limits={"nvidia.com/gpu": "4"}),
                ],
                owner=controller("PyTorchJob", "bert-ft", "kubeflow.org/v1"),
            ),
            ("PyTorchJob", "bert-ft"),
            GpuRequest(4),
            16000,  # max(init 16 cpu, app 4 + 0.1 + sidecar 0.2)
            20544,  # max(init 4Gi, warmup 20Gi + sidecar 64Mi, app 16Gi + 128Mi + 64Mi)
        ),
        id="init-and-sidecar-rule",
    ),
]


@pytest.mark.parametrize("case", POD_CASES)
def test_pod_facts(case: PodCase) -> None:
    facts = pod_facts(case.obj)
    meta = case.obj["metadata"]
    assert (facts.namespace, facts.name, facts.uid) == (meta["namespace"], meta["name"], meta["uid"])
    assert (facts.owner.kind, facts.owner.name) == case.owner
    assert facts.gpu_request() == case.gpu
    assert (facts.cpu_milli, facts.memory_mib) == (case.cpu_milli, case.memory_mib)
    for attr, value in case.extra.items():
        assert getattr(facts, attr) == value, attr


def test_finished_pod_times_and_exit_code() -> None:
    obj = k8s_pod(
        "ml",
        "p",
        containers=[container()],
        phase="Failed",
        status={
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "gpufleet: preempted by ml/urgent-job",
                    "lastTransitionTime": "2025-03-02T11:00:00Z",
                }
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "Error",
                            "startedAt": "2025-03-02T10:00:19Z",
                            "finishedAt": "2025-03-02T11:00:31.250000Z",
                        }
                    },
                }
            ],
        },
    )
    obj["metadata"]["deletionTimestamp"] = "2025-03-02T11:00:01Z"
    facts = pod_facts(obj)
    assert facts.terminal and facts.exit_code == 137
    assert facts.started_at == 1740909619.0 and facts.finished_at == 1740913231.25
    assert facts.deletion_timestamp == 1740913201.0
    cond = facts.condition("DisruptionTarget")
    assert cond is not None and cond.reason == "PreemptionByScheduler" and cond.status == "True"
    assert facts.containers[0].reason == "Error"


def test_gangs() -> None:
    pods = [pod_facts(jobset_pod(i)) for i in (3, 1, 0, 2)]
    pods.append(pod_facts(_case(POD_CASES, "job-owned", PodCase).obj))
    pods.append(pod_facts(k8s_pod("dev", "notebook", containers=[container()])))
    gangs = group_gangs(pods)
    assert set(gangs) == {"research/JobSet/llm-pretrain", "ml/Job/gf-j-7xq2-r2", "dev/Pod/notebook"}
    gang = gangs["research/JobSet/llm-pretrain"]
    assert gang.size == 4 and gang.complete and gang.owner.uid == "uid-llm-pretrain"
    assert [p.name for p in gang.pods] == [f"llm-pretrain-workers-{i // 2}-{i % 2}-abcde" for i in range(4)]
    assert sum(p.gpu_request().total_milli for p in gang.pods) == 32_000
    assert gangs["dev/Pod/notebook"].size == 1


def test_gang_size_from_annotation() -> None:
    gangs = group_gangs([pod_facts(jobset_pod(i, gang_size=4)) for i in range(3)])
    (gang,) = gangs.values()
    assert gang.size == 4 and len(gang.pods) == 3 and not gang.complete
    mixed = [pod_facts(jobset_pod(0, gang_size=4)), pod_facts(jobset_pod(1, gang_size=8))]
    with pytest.raises(InputError, match="different gang sizes"):
        group_gangs(mixed)


def _bad_pod(mutate: Any) -> dict[str, Any]:
    obj = k8s_pod(
        "ml",
        "train-0",
        containers=[container(requests={"cpu": "4", "memory": "16Gi"}, limits={"nvidia.com/gpu": "1"})],
        owner=controller("Job", "train"),
    )
    mutate(obj)
    return obj


BAD_PODS = [
    pytest.param(
        lambda o: o["spec"]["containers"][0]["resources"]["requests"].update(cpu="four"),
        "spec.containers[0].resources.requests[cpu]",
        "not a Kubernetes quantity",
        id="bad-cpu-quantity",
    ),
    pytest.param(
        lambda o: o["spec"]["containers"][0]["resources"]["requests"].update(memory="16 GB"),
        "spec.containers[0].resources.requests[memory]",
        "not a Kubernetes quantity",
        id="bad-memory-quantity",
    ),
    pytest.param(
        lambda o: o["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "0.5"}),
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
        "whole number",
        id="fractional-gpu-quantity",
    ),
    pytest.param(
        lambda o: o["spec"]["containers"][0]["resources"]["requests"].update({"nvidia.com/gpu": "2"}),
        "spec.containers[0].resources.requests[nvidia.com/gpu]",
        "requests == limits",
        id="gpu-requests-not-limits",
    ),
    pytest.param(
        lambda o: o["metadata"]["annotations"].update({"gpufleet.io/cost-limit": "lots"}),
        "metadata.annotations[gpufleet.io/cost-limit]",
        "not a dollar amount",
        id="bad-cost-limit",
    ),
    pytest.param(
        lambda o: o["metadata"]["annotations"].update({"gpufleet.io/cost-limit": "-20"}),
        "metadata.annotations[gpufleet.io/cost-limit]",
        "not a dollar amount",
        id="negative-cost-limit",
    ),
    pytest.param(
        lambda o: o["metadata"]["annotations"].update({"gpufleet.io/run": "second"}),
        "metadata.annotations[gpufleet.io/run]",
        "whole number",
        id="bad-run",
    ),
    pytest.param(
        lambda o: o["spec"].pop("containers"),
        "spec.containers",
        "at least one container",
        id="no-containers",
    ),
    pytest.param(
        lambda o: o["spec"]["containers"].append(container("side", limits={"nvidia.com/mig-1g.10gb": "1"})),
        "spec.containers[*].resources",
        "one kind of GPU resource",
        id="two-gpu-kinds",
    ),
    pytest.param(
        lambda o: o["status"].update(
            containerStatuses=[{"name": "main", "restartCount": 0, "state": {"running": {"startedAt": "yesterday"}}}]
        ),
        "status.containerStatuses[0].state.running.startedAt",
        "not an RFC 3339 time",
        id="bad-start-time",
    ),
    pytest.param(
        lambda o: o["spec"]["containers"][0].update(resources=["cpu"]),
        "spec.containers[0].resources",
        "expected an object",
        id="resources-not-an-object",
    ),
]


@pytest.mark.parametrize(("mutate", "field", "message"), BAD_PODS)
def test_bad_pod_names_field_and_pod(mutate: Any, field: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        pod_facts(_bad_pod(mutate))
    text = str(err.value)
    assert "pod ml/train-0" in text and f"field '{field}'" in text and message in text


def test_pod_without_a_name() -> None:
    obj = k8s_pod("ml", "x", containers=[container()])
    del obj["metadata"]["name"]
    with pytest.raises(InputError, match=r"metadata\.name"):
        pod_facts(obj)


def test_cost_limit_accepts_a_dollar_sign() -> None:
    facts = pod_facts(_bad_pod(lambda o: o["metadata"]["annotations"].update({"gpufleet.io/cost-limit": "$12.50"})))
    assert facts.cost_limit_usd == 12.5


# == objects: Kubernetes' own schemas ==============================================================


def test_the_validator_rejects_unknown_fields_and_bad_values() -> None:
    job = batch_job("j-1", 1, namespace="ml", image="img", command=["true"])
    bad = copy.deepcopy(job)
    bad["spec"]["template"]["spec"]["containers"][0]["gpus"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_builtin(bad)
    bad = copy.deepcopy(job)
    bad["spec"]["backoffLimit"] = "zero"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_builtin(bad)


JOB_CASES = [
    pytest.param({}, id="minimal"),
    pytest.param(
        {
            "gpu": GpuRequest(8),
            "cpu_milli": 90000,
            "memory_mib": 900 * 1024,
            "team": "research",
            "project": "llm",
            "experiment": "pretrain/7B v2",
            "cost_center": "CC#1234",
            "labels": {"example.com/tier": "gold"},
            "priority_class": "urgent",
            "cost_limit_usd": 5000.0,
            "checkpoint_dir": "/checkpoints",
            "checkpoint_volume": {"persistentVolumeClaim": {"claimName": "ckpt-research"}},
            "checkpoint_sub_path": "research/j-7xq2",
            "max_runtime_s": 86400.0,
            "grace_s": 120.0,
            "gang_size": 16,
            "env": {"NCCL_DEBUG": "INFO"},
            "args": ["--config", "7b.yaml"],
            "working_dir": "/workspace",
            "service_account": "trainer",
            "ttl_after_finished_s": 3600,
        },
        id="gang-with-checkpoints",
    ),
    pytest.param({"gpu": GpuRequest(1, 143, "1g.10gb"), "priority_class": "background"}, id="mig-slice-mixed-strategy"),
    pytest.param(
        {"gpu": GpuRequest(1, 250), "gpu_replicas": 4, "gpu_resource": "nvidia.com/gpu.shared"},
        id="quarter-of-a-time-sliced-gpu",
    ),
    pytest.param(
        {
            "checkpoint_dir": "/ckpt",
            "checkpoint_volume": {"hostPath": {"path": "/data/ckpt", "type": "DirectoryOrCreate"}},
        },
        id="hostpath-checkpoints",
    ),
]


@pytest.mark.parametrize("kwargs", JOB_CASES)
def test_batch_job_is_valid(kwargs: dict[str, Any]) -> None:
    job = batch_job(
        "j-7xq2", 3, namespace="research", image="ghcr.io/acme/train:2.4", command=["python", "-m", "train"], **kwargs
    )
    validate_builtin(job)
    meta, spec = job["metadata"], job["spec"]
    pod = spec["template"]["spec"]
    main = pod["containers"][0]
    assert meta["name"] == "gf-j-7xq2-r3" and meta["namespace"] == "research"
    assert pod["schedulerName"] == "gpufleet" and pod["restartPolicy"] == "Never"
    assert pod["priorityClassName"] == f"gpufleet-{kwargs.get('priority_class', 'normal')}"
    assert pod["terminationGracePeriodSeconds"] == math.ceil(kwargs.get("grace_s", 30.0))
    assert spec["backoffLimit"] == 0
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"]["operator"] == "NotIn"
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["GPUFLEET_JOB_ID"] == "j-7xq2" and env["GPUFLEET_RUN"] == "3"
    for labels in (meta["labels"], spec["template"]["metadata"]["labels"]):
        assert labels["gpufleet.io/job-id"] == "j-7xq2" and labels["gpufleet.io/run"] == "3"
        for value in labels.values():
            assert re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", value) and len(value) <= 63
    gang = kwargs.get("gang_size", 1)
    assert spec["parallelism"] == spec["completions"] == gang
    assert spec.get("completionMode") == ("Indexed" if gang > 1 else None)
    if "max_runtime_s" in kwargs:
        assert spec["activeDeadlineSeconds"] == 86400
    if "checkpoint_dir" in kwargs:
        assert env["GPUFLEET_CHECKPOINT_DIR"] == kwargs["checkpoint_dir"]
        assert main["volumeMounts"][0]["mountPath"] == kwargs["checkpoint_dir"]
    gpu = kwargs.get("gpu")
    if gpu is not None:
        assert main["resources"]["limits"].items() <= main["resources"]["requests"].items()
    # what gpufleet writes, it reads back
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**spec["template"]["metadata"], "name": "x", "namespace": "research"},
        "spec": spec["template"]["spec"],
    }
    facts = pod_facts(pod)
    assert facts.job_id == "j-7xq2" and facts.run == 3
    assert facts.cost_limit_usd == kwargs.get("cost_limit_usd")
    assert facts.cpu_milli == kwargs.get("cpu_milli", 0) and facts.memory_mib == kwargs.get("memory_mib", 0)
    if gpu is not None:
        assert facts.gpu_request(kwargs.get("gpu_replicas", 1)) == gpu
    if gang > 1:
        assert facts.gang_size == gang


def test_batch_job_gang_labels_and_resources() -> None:
    kwargs = _case(JOB_CASES, "gang-with-checkpoints", dict)
    job = batch_job("j-7xq2", 1, namespace="research", image="i", command=["c"], **kwargs)
    labels = job["metadata"]["labels"]
    assert labels["team"] == "research" and labels["example.com/tier"] == "gold"
    assert labels["experiment-id"].startswith("pretrain-7B-v2-") and labels["cost-center"].startswith("CC-1234-")
    res = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res == {
        "requests": {"nvidia.com/gpu": "8", "cpu": "90000m", "memory": "921600Mi"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    assert job["metadata"]["annotations"]["gpufleet.io/cost-limit"] == "5000"
    assert job["spec"]["template"]["spec"]["volumes"] == [
        {"name": "gpufleet-checkpoint", "persistentVolumeClaim": {"claimName": "ckpt-research"}}
    ]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"run": 0}, "run", id="run-zero"),
        pytest.param({"priority_class": "vip"}, "priority", id="unknown-priority"),
        pytest.param({"namespace": "Research"}, "namespace", id="bad-namespace"),
        pytest.param({"checkpoint_volume": {"emptyDir": {}}}, "checkpoint_dir", id="volume-without-dir"),
        pytest.param({"gpu": GpuRequest(1, 500)}, "gpu_milli", id="fraction-on-unshared-gpu"),
        pytest.param({"env": {"1BAD": "x"}}, "env[1BAD]", id="bad-env-name"),
        pytest.param({"labels": {"bad key!": "x"}}, "labels[bad key!]", id="bad-label-key"),
        pytest.param({"cost_limit_usd": -1.0}, "cost_limit_usd", id="negative-cost-limit"),
    ],
)
def test_batch_job_rejects(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"run": 1, "namespace": "ml", "image": "i", "command": ["c"], **kwargs}
    with pytest.raises(InputError, match=re.escape(f"field '{field}'")):
        batch_job("j-1", **args)


@pytest.mark.parametrize(
    ("job_id", "run", "gang"),
    [
        pytest.param("j-abcdefgh23", 1, 1, id="plain"),
        pytest.param("My_Job.With:Odd/Chars", 12, 1, id="odd-characters"),
        pytest.param("x" * 80, 3, 1, id="too-long"),
        pytest.param("y" * 80, 3, 128, id="too-long-indexed"),
    ],
)
def test_job_names_are_dns_labels(job_id: str, run: int, gang: int) -> None:
    name = job_name(job_id, run, gang)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert name.startswith("gf-") and name.endswith(f"-r{run}")
    assert len(name) <= 63 and (gang == 1 or len(f"{name}-{gang - 1}") <= 63)
    assert job_name(job_id.upper() + "x", run, gang) != name  # lossy names keep a hash of the original


@settings(deadline=None)  # the first example pays for imports on a loaded machine
@given(st.text(max_size=100))
def test_label_values_and_dns_labels_are_valid(value: str) -> None:
    lv = label_value(value)
    assert len(lv) <= 63 and re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", lv)
    dl = dns_label(value or "x")
    assert len(dl) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", dl)


@pytest.mark.parametrize(
    ("gpu", "resource", "replicas", "expected"),
    [
        pytest.param(GpuRequest(), None, 1, {}, id="none"),
        pytest.param(GpuRequest(4), None, 1, {"nvidia.com/gpu": 4}, id="whole"),
        pytest.param(GpuRequest(1, 250), None, 4, {"nvidia.com/gpu": 1}, id="one-replica"),
        # issue 22: one replica, whatever share it reserved (MPS refuses more; time-slicing spreads them)
        pytest.param(GpuRequest(1, 300), None, 4, {"nvidia.com/gpu": 1}, id="more-than-a-replica"),
        pytest.param(GpuRequest(1, 500), "nvidia.com/gpu.shared", 4, {"nvidia.com/gpu.shared": 1}, id="renamed"),
        pytest.param(GpuRequest(1, 429, "3g.40gb"), None, 1, {"nvidia.com/mig-3g.40gb": 1}, id="mig-mixed"),
        pytest.param(GpuRequest(1, 143, "1g.5gb"), "nvidia.com/gpu", 1, {"nvidia.com/gpu": 1}, id="mig-single"),
    ],
)
def test_gpu_resources(gpu: GpuRequest, resource: str | None, replicas: int, expected: dict[str, int]) -> None:
    assert gpu_resources(gpu, resource, replicas) == expected


def test_binding_eviction_and_status_patch_are_valid() -> None:
    b = binding("ml", "gf-j-7xq2-r2-8m4kd", "ip-10-0-12-7.ec2.internal")
    validate_builtin(b)
    assert b["target"] == {"apiVersion": "v1", "kind": "Node", "name": "ip-10-0-12-7.ec2.internal"}
    e = eviction("ml", "gf-j-7xq2-r2-8m4kd", 29.5)
    validate_builtin(e)
    assert e["deleteOptions"] == {"gracePeriodSeconds": 30}
    validate_builtin(eviction("ml", "p"))
    cond = pod_condition_for("capacity", "waiting for 8 x A100-80GB: no node has room", False, at=1740909600)
    patch = {"status": {"conditions": [cond]}}  # what report_waiting sends: a Pod's status, validated as one
    validate_builtin({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, **patch})
    assert cond == {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "waiting for 8 x A100-80GB: no node has room",
        "lastTransitionTime": "2025-03-02T10:00:00Z",
    }


# == objects: Karpenter's CRDs =====================================================================


# crd_schema, check_cel and validate_crd: tests/support/k8s/crdcheck.py (the CRD's openAPIV3Schema as JSON
# Schema, its CEL rules that need no old object, ObjectMeta as the API server checks it)


NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "gpu-train", "uid": "d1c8a0a4-1f2b-4d8e-9c41-7a2b6c3d9e10"},
    "spec": {
        "template": {
            "metadata": {"labels": {"gpufleet.io/pool": "gpu-train", "workload": "training"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["p4de.24xlarge", "p5.48xlarge"],
                        "minValues": 2,
                    },
                    {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a100", "h100"]},
                    {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "In", "values": ["81920"]},
                    {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["3"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1e"]},
                ],
                "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "nvidia.com/gpu-driver-not-ready", "effect": "NoSchedule"}],
                "expireAfter": "720h",
                "terminationGracePeriod": "48h",
            },
        },
        "limits": {"cpu": "1000", "memory": "8000Gi", "nvidia.com/gpu": "64"},
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1h"},
        "weight": 10,
    },
}


def test_the_sample_nodepool_is_valid() -> None:
    validate_crd(CRDS / "karpenter.sh_nodepools.yaml", NODEPOOL)


@pytest.mark.parametrize(
    "choice",
    [
        pytest.param({}, id="pool-template-only"),
        pytest.param({"instance_type": "p5.48xlarge", "capacity_type": "spot"}, id="instance-and-capacity"),
        pytest.param(
            {
                "instance_type": "p4de.24xlarge",
                "capacity_type": "on-demand",
                "zone": "us-east-1b",
                "name": "gpu-train-gf-7xq2",
                "requests": {"nvidia.com/gpu": 8, "cpu": "90"},
                "annotations": {"gpufleet.io/job-id": "j-7xq2"},
            },
            id="everything",
        ),
    ],
)
def test_node_claim_is_valid_for_the_crd(choice: dict[str, Any]) -> None:
    claim = node_claim(NODEPOOL, **choice)
    path = CRDS / "karpenter.sh_nodeclaims.yaml"
    validate_crd(path, claim)
    assert claim["apiVersion"] == "karpenter.sh/v1" and claim["kind"] == "NodeClaim"
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-train"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == NODEPOOL["metadata"]["uid"]
    reqs = {r["key"]: r for r in claim["spec"]["requirements"]}
    assert reqs["karpenter.sh/nodepool"]["values"] == ["gpu-train"]
    for key, arg in (
        ("node.kubernetes.io/instance-type", "instance_type"),
        ("karpenter.sh/capacity-type", "capacity_type"),
        ("topology.kubernetes.io/zone", "zone"),
    ):
        if arg in choice:
            assert reqs[key] == {"key": key, "operator": "In", "values": [choice[arg]]}
    assert claim["spec"]["nodeClassRef"] == NODEPOOL["spec"]["template"]["spec"]["nodeClassRef"]
    assert claim["spec"]["taints"] == NODEPOOL["spec"]["template"]["spec"]["taints"]
    assert check_cel(path, claim) >= 5


def test_the_crd_schema_rejects_what_karpenter_would() -> None:
    path = CRDS / "karpenter.sh_nodeclaims.yaml"
    claim = node_claim(NODEPOOL, instance_type="p5.48xlarge")
    bad = copy.deepcopy(claim)
    bad["spec"]["gpus"] = 8
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(path, bad)
    bad = copy.deepcopy(claim)
    bad["spec"]["requirements"][0]["operator"] = "Near"
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(path, bad)
    bad = copy.deepcopy(claim)
    bad["spec"]["requirements"].append({"key": "karpenter.sh/secret", "operator": "Exists"})
    with pytest.raises(AssertionError, match="restricted"):
        check_cel(path, bad)


@pytest.mark.parametrize(
    ("choice", "key"),
    [
        pytest.param({"instance_type": "g5.xlarge"}, "node.kubernetes.io/instance-type", id="instance-type"),
        pytest.param({"capacity_type": "reserved"}, "karpenter.sh/capacity-type", id="capacity-type"),
        pytest.param({"zone": "us-east-1e"}, "topology.kubernetes.io/zone", id="excluded-zone"),
    ],
)
def test_node_claim_refuses_what_the_pool_does_not_offer(choice: dict[str, Any], key: str) -> None:
    with pytest.raises(InputError, match=re.escape(key)):
        node_claim(NODEPOOL, **choice)


def test_node_claim_defaults_to_on_demand_when_the_pool_says_nothing() -> None:
    pool = copy.deepcopy(NODEPOOL)
    reqs = pool["spec"]["template"]["spec"]["requirements"]
    pool["spec"]["template"]["spec"]["requirements"] = [r for r in reqs if r["key"] != "karpenter.sh/capacity-type"]
    assert node_claim(pool, capacity_type="on-demand")
    with pytest.raises(InputError, match="not offered"):
        node_claim(pool, capacity_type="spot")


def test_nodepool_offer() -> None:
    offer = nodepool_offer(NODEPOOL)
    assert offer["name"] == "gpu-train" and offer["weight"] == 10
    assert offer["capacity_types"] == ["on-demand", "spot"]
    assert offer["instance_types"] == ["p4de.24xlarge", "p5.48xlarge"]
    assert offer["gpu_models"] == ["A100-80GB", "H100-80GB"] and offer["unknown_gpu_names"] == []
    assert (offer["min_gpus"], offer["max_gpus"], offer["gpu_counts"]) == (4, None, None)
    assert offer["zones"] is None
    assert offer["limits"] == {"gpus": 64, "cpu_milli": 1_000_000, "memory_mib": 8000 * 1024, "nodes": None}
    assert offer["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert offer["node_class"]["kind"] == "EC2NodeClass"


def test_nodepool_offer_of_an_open_pool() -> None:
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "any"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["on-demand"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["p3.2xlarge"]},
                    ],
                }
            }
        },
    }
    validate_crd(CRDS / "karpenter.sh_nodepools.yaml", pool)
    offer = nodepool_offer(pool)
    assert offer["capacity_types"] == ["spot"]
    assert offer["instance_types"] is None and offer["excluded_instance_types"] == ["p3.2xlarge"]
    assert offer["gpu_models"] is None and offer["limits"]["gpus"] is None


# == DCGM ==========================================================================================

# One scrape of dcgm-exporter 3.3 (gpu-operator: Hostname is the node name, pod mapping on), trimmed
# to a few fields: node-a has two whole A100s (GPU 0 held by a pod), node-b one MIG A100 with two
# slices, node-c one T4 time-sliced between two pods.
_A = 'UUID="GPU-2f5e0c1a-9b7d-4c55-8a3e-1d2c3b4a5f60",pci_bus_id="00000000:10:1C.0",device="nvidia0"'
_A1 = 'UUID="GPU-7a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",pci_bus_id="00000000:10:1D.0",device="nvidia1"'
_B = 'UUID="GPU-0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f",pci_bus_id="00000000:00:04.0",device="nvidia0"'
_C = 'UUID="GPU-11112222-3333-4444-5555-666677778888",pci_bus_id="00000000:00:1E.0",device="nvidia0"'
_MA = 'modelName="NVIDIA A100-SXM4-80GB",Hostname="node-a",DCGM_FI_DRIVER_VERSION="550.90.07"'
_MB = 'modelName="NVIDIA A100-SXM4-80GB",Hostname="node-b",DCGM_FI_DRIVER_VERSION="550.90.07"'
_MC = 'modelName="Tesla T4",Hostname="node-c",DCGM_FI_DRIVER_VERSION="535.183.01"'
_POD0 = 'container="main",namespace="research",pod="gf-j-7xq2-r2-0-x8k2p"'
_MIG1 = 'GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",container="main",namespace="ml",pod="infer-7d9f-0"'
_MIG2 = 'GPU_I_PROFILE="1g.10gb",GPU_I_ID="9",container="nb",namespace="dev",pod="notebook"'
_TS1 = 'container="main",namespace="ml",pod="embed-0"'
_TS2 = 'container="main",namespace="ml",pod="embed-1"'
DCGM_TEXT = f"""\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{gpu="0",{_A},{_MA},{_POD0}}} 1410
DCGM_FI_DEV_SM_CLOCK{{gpu="1",{_A1},{_MA}}} 210
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",{_A},{_MA},{_POD0}}} 87
DCGM_FI_DEV_GPU_UTIL{{gpu="1",{_A1},{_MA}}} 0
DCGM_FI_DEV_GPU_UTIL{{gpu="0",{_C},{_MC},{_TS1}}} 64
DCGM_FI_DEV_GPU_UTIL{{gpu="0",{_C},{_MC},{_TS2}}} 64
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{{gpu="0",{_A},{_MA},{_POD0}}} 19034
DCGM_FI_DEV_FB_FREE{{gpu="1",{_A1},{_MA}}} 80990
DCGM_FI_DEV_FB_FREE{{gpu="0",{_B},{_MB},{_MIG1}}} 20120
DCGM_FI_DEV_FB_FREE{{gpu="0",{_B},{_MB},{_MIG2}}} 4871
DCGM_FI_DEV_FB_FREE{{gpu="0",{_C},{_MC},{_TS1}}} 3000
DCGM_FI_DEV_FB_FREE{{gpu="0",{_C},{_MC},{_TS2}}} 3000
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",{_A},{_MA},{_POD0}}} 61956
DCGM_FI_DEV_FB_USED{{gpu="1",{_A1},{_MA}}} 0
DCGM_FI_DEV_FB_USED{{gpu="0",{_B},{_MB},{_MIG1}}} 20000
DCGM_FI_DEV_FB_USED{{gpu="0",{_B},{_MB},{_MIG2}}} 5000
DCGM_FI_DEV_FB_USED{{gpu="0",{_C},{_MC},{_TS1}}} 12000
DCGM_FI_DEV_FB_USED{{gpu="0",{_C},{_MC},{_TS2}}} 12000
# HELP DCGM_FI_DEV_FB_RESERVED Framebuffer memory reserved (in MiB).
# TYPE DCGM_FI_DEV_FB_RESERVED gauge
DCGM_FI_DEV_FB_RESERVED{{gpu="0",{_A},{_MA},{_POD0}}} 570
DCGM_FI_DEV_FB_RESERVED{{gpu="1",{_A1},{_MA}}} 570
DCGM_FI_DEV_FB_RESERVED{{gpu="0",{_C},{_MC},{_TS1}}} 360
DCGM_FI_DEV_FB_RESERVED{{gpu="0",{_C},{_MC},{_TS2}}} 360
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{gpu="0",{_A},{_MA},{_POD0}}} 63
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{gpu="0",{_A},{_MA},{_POD0}}} 312.25
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",{_B},{_MB},{_MIG1}}} 0.500000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",{_B},{_MB},{_MIG2}}} 0.700000
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",{_A},{_MA},{_POD0}}} 8754310291
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{gpu="0",{_A},{_MA},{_POD0},err_code="0",err_msg="No Error"}} 0
"""


def test_dcgm_scrape() -> None:
    samples = parse_dcgm(DCGM_TEXT, now=1740909600.0)
    by = {(s.node, s.gpu_index): s for s in samples}
    assert list(by) == [("node-a", 0), ("node-a", 1), ("node-b", 0), ("node-c", 0)]
    a0 = by["node-a", 0]
    assert a0.uuid == "GPU-2f5e0c1a-9b7d-4c55-8a3e-1d2c3b4a5f60" and a0.time == 1740909600.0
    assert (a0.utilization_pct, a0.memory_used_mib, a0.memory_total_mib) == (87, 61956, 61956 + 19034 + 570)
    assert a0.job_memory_mib == {"research/gf-j-7xq2-r2-0-x8k2p": 61956}
    assert (a0.temperature_c, a0.power_w) == (63, 312.25)
    a1 = by["node-a", 1]
    assert (a1.utilization_pct, a1.memory_used_mib, a1.job_memory_mib) == (0, 0, {})
    assert (a1.temperature_c, a1.power_w) == (None, None)  # the exporter did not publish them
    b0 = by["node-b", 0]  # MIG: sums over the slices, utilization weighted by their share
    assert b0.memory_used_mib == 25000 and b0.memory_total_mib == 25000 + 20120 + 4871
    assert b0.utilization_pct == pytest.approx(100 * (0.5 * 3 + 0.7 * 1) / 7)
    assert b0.job_memory_mib == {"ml/infer-7d9f-0": 20000, "dev/notebook": 5000}
    c0 = by["node-c", 0]  # time-sliced: the reading repeats per pod; memory split between them
    assert (c0.utilization_pct, c0.memory_used_mib, c0.memory_total_mib) == (64, 12000, 15360)
    assert c0.job_memory_mib == {"ml/embed-0": 6000, "ml/embed-1": 6000}


def test_dcgm_timestamps_and_node_fallback() -> None:
    text = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-x"} 42 1740909612345\nDCGM_FI_DEV_FB_USED{gpu="3",UUID="GPU-x"} 100\n'
    )
    (s,) = parse_dcgm(text, now=0.0, node="gpu-node-9")
    assert (s.node, s.gpu_index, s.utilization_pct) == ("gpu-node-9", 3, 42)
    assert s.time == pytest.approx(1740909612.345)
    with pytest.raises(InputError, match="Hostname"):
        parse_dcgm(text, now=0.0)
    # the node the caller scraped wins over the exporter's Hostname (its pod's name without hostNetwork)
    pod_named = text.replace('UUID="GPU-x"', 'UUID="GPU-x",Hostname="nvidia-dcgm-exporter-x7k2p"')
    assert {s.node for s in parse_dcgm(pod_named, now=0.0, node="gpu-node-9")} == {"gpu-node-9"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n" 5', "not Prometheus text", id="unclosed-labels"),
        pytest.param('DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n"} lots', "not Prometheus text", id="bad-value"),
        pytest.param('DCGM_FI_DEV_FB_USED{gpu=0,Hostname="n"} 5', "not Prometheus text", id="unquoted-label"),
        pytest.param("# TYPE DCGM_FI_DEV_FB_USED", "not Prometheus text", id="short-type-line"),
        pytest.param('DCGM_FI_DEV_FB_USED{gpu="first",Hostname="n"} 5', "GPU index", id="bad-gpu-label"),
        pytest.param('DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n"} NaN', "finite", id="nan"),
    ],
)
def test_dcgm_malformed_line(line: str, message: str) -> None:
    text = DCGM_TEXT.splitlines()
    text.insert(5, line)
    with pytest.raises(InputError) as err:
        parse_dcgm("\n".join(text), now=0.0)
    assert "dcgm-exporter:6" in str(err.value) and message in str(err.value)


# -- helpers ---------------------------------------------------------------------------------------


def _case(params: list[Any], case_id: str, kind: type[T]) -> T:
    """The value of the ``pytest.param`` with id ``case_id`` in a scenario table."""
    (value,) = [p.values[0] for p in params if p.id == case_id]
    assert isinstance(value, kind)
    return value


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def test_helpers_are_sound() -> None:
    # NodeInfo and PodFacts are frozen: a translation cannot be edited after the fact
    info = node_info(k8s_node("n"), None)
    assert isinstance(info, NodeInfo)
    with pytest.raises(AttributeError):
        info.schedulable = False  # type: ignore[misc]
    facts = pod_facts(k8s_pod("ml", "p", containers=[container()]))
    assert isinstance(facts, PodFacts)
