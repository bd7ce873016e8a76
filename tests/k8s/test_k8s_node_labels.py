"""Cloud GPU node labels and MIG profile names, read as the clouds and NVIDIA write them (issue 22, obs. 12).

One scenario row per real label set → what :func:`gpufleet.k8s.adapter.nodes.node_info` must read. Where
the names come from:

- GKE sets ``cloud.google.com/gke-accelerator`` (``nvidia-tesla-a100``, ``nvidia-a100-80gb``,
  ``nvidia-l4``, ``nvidia-h100-80gb``, ``nvidia-tesla-t4``...) and ``gke-accelerator-count`` on GPU nodes;
  GPU sharing as ``gke-gpu-sharing-strategy`` (``time-sharing`` | ``mps``) with
  ``gke-max-shared-clients-per-gpu`` (``nvidia.com/gpu`` allocatable = GPUs x clients), MIG as
  ``gke-gpu-partition-size`` (``nvidia.com/gpu`` allocatable = partitions); spot as ``gke-spot`` /
  ``gke-preemptible`` (cloud.google.com/kubernetes-engine/docs/concepts/timesharing-gpus,
  .../how-to/gpus-multi, the GKE API's GPUSharingConfig).
- AKS labels GPU nodes ``kubernetes.azure.com/accelerator=nvidia`` (learn.microsoft.com/azure/aks/use-labels)
  and its GPU guide taints GPU pools ``sku=gpu:NoSchedule`` (learn.microsoft.com/azure/aks/gpu-cluster);
  the label set of ``aks-gpunp-*`` below is a real ``kubectl describe node`` of a Standard_NC6s_v3 pool.
- EKS: ``eks.amazonaws.com/capacityType`` (managed node groups), ``k8s.amazonaws.com/accelerator``
  (eksctl / cluster-autoscaler's GPU label), Karpenter's ``karpenter.k8s.aws/instance-gpu-name`` /
  ``instance-gpu-memory`` (MiB).
- MIG attributes: go-nvlib's ``MigProfileInfo.String()`` names ``1g.10gb+me`` (also ``+me.all``,
  ``+gfx``, ``-me``); the NVIDIA device plugin replaces ``+`` with ``.`` for the resource
  (``internal/rm/rm.go``: ``nvidia.com/mig-1g.10gb.me``) and GFD's product label
  (``internal/resource/nvml-mig-device.go`` GetName: ``...-MIG-1g.10gb.me``). A ``+me`` instance holds
  the GPU's media engines: one per GPU (NVIDIA MIG user guide, supported profiles).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.k8s.adapter import nodes
from gpufleet.k8s.adapter.nodes import DEFAULT_TOLERATED_TAINTS, cloud_gpu_model, node_info, node_schedulable
from gpufleet.model.gpu import gpu_model, mig_instances_limit, split_mig_attribute
from gpufleet.model.node import CapacityType, SharingMode
from gpufleet.model.share import mig_share, mig_slices_per_gpu
from tests.support.k8s.crdcheck import validate_builtin


@pytest.fixture(scope="module")
def catalog() -> PriceCatalog:
    return PriceCatalog.load()


def node(
    name: str,
    labels: Mapping[str, str],
    allocatable: Mapping[str, str],
    *,
    taints: list[dict[str, str]] | None = None,
    provider_id: str | None = None,
) -> dict[str, Any]:
    """A Ready v1 Node with the cloud's label set and allocatable as the API returns them."""
    alloc = {"cpu": "11", "memory": "80Gi", "pods": "110", **allocatable}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if provider_id:
        spec["providerID"] = provider_id
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}
            | dict(labels),
        },
        "spec": spec,
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


GKE = {
    "cloud.google.com/gke-boot-disk": "pd-balanced",
    "cloud.google.com/gke-container-runtime": "containerd",
    "cloud.google.com/gke-os-distribution": "cos",
    "cloud.google.com/gke-gpu-driver-version": "default",
    "topology.kubernetes.io/region": "us-central1",
    "topology.kubernetes.io/zone": "us-central1-a",
}
GKE_GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
AKS = {  # kubectl describe node aks-gpunp-10282168-vmss000000 (a Standard_NC6s_v3 pool)
    "accelerator": "nvidia",
    "agentpool": "gpunp",
    "kubernetes.azure.com/accelerator": "nvidia",
    "kubernetes.azure.com/agentpool": "gpunp",
    "kubernetes.azure.com/cluster": "MC_rg_aksgpu_eastus",
    "kubernetes.azure.com/mode": "user",
    "kubernetes.azure.com/node-image-version": "AKSUbuntu-2204gen2containerd-202404.09.0",
    "kubernetes.azure.com/os-sku": "Ubuntu",
    "kubernetes.azure.com/role": "agent",
    "topology.kubernetes.io/region": "eastus",
    "topology.kubernetes.io/zone": "0",
}
AKS_SKU_TAINT = [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]
AWS = {"topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": "us-east-1b"}


@dataclass(frozen=True)
class Expect:
    gpu_model: str
    gpu_count: int
    sharing: SharingMode
    replicas: int = 1
    strategy: str | None = None
    mig: tuple[tuple[str, int], ...] = ()
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    priced: bool = True


ROWS = [
    pytest.param(
        node(
            "gke-ml-a100-pool-3f1e2a7b-k9x2",
            GKE
            | {
                "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                "cloud.google.com/gke-accelerator-count": "1",
                "cloud.google.com/gke-nodepool": "a100-pool",
                "cloud.google.com/machine-family": "a2",
                "node.kubernetes.io/instance-type": "a2-highgpu-1g",
            },
            {"nvidia.com/gpu": "1"},
            taints=GKE_GPU_TAINT,
            provider_id="gce://ml-proj/us-central1-a/gke-ml-a100-pool-3f1e2a7b-k9x2",
        ),
        Expect("A100-40GB", 1, SharingMode.EXCLUSIVE),
        id="gke-a100-accelerator-only",
    ),
    pytest.param(
        node(
            "gke-ml-h100-spot-0c9d1e2f-7hq4",
            GKE
            | {
                "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                "cloud.google.com/gke-accelerator-count": "8",
                "cloud.google.com/gke-spot": "true",
                "cloud.google.com/gke-nodepool": "h100-spot",
                "node.kubernetes.io/instance-type": "a3-highgpu-8g",
            },
            {"nvidia.com/gpu": "8"},
            taints=[*GKE_GPU_TAINT, {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}],
            provider_id="gce://ml-proj/us-central1-a/gke-ml-h100-spot-0c9d1e2f-7hq4",
        ),
        Expect("H100-80GB", 8, SharingMode.EXCLUSIVE, capacity_type=CapacityType.SPOT),
        id="gke-h100-spot",
    ),
    pytest.param(
        node(
            "gke-ml-a100-80-pre-5a6b7c8d-2w3e",
            GKE
            | {
                "cloud.google.com/gke-accelerator": "nvidia-a100-80gb",
                "cloud.google.com/gke-accelerator-count": "1",
                "cloud.google.com/gke-preemptible": "true",
                "node.kubernetes.io/instance-type": "a2-ultragpu-1g",
            },
            {"nvidia.com/gpu": "1"},
        ),
        Expect("A100-80GB", 1, SharingMode.EXCLUSIVE, capacity_type=CapacityType.SPOT),
        id="gke-a100-80gb-preemptible",
    ),
    pytest.param(
        node(
            "gke-ml-l4-shared-9e8d7c6b-p0o9",
            GKE
            | {
                "cloud.google.com/gke-accelerator": "nvidia-l4",
                "cloud.google.com/gke-accelerator-count": "1",
                "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
                "node.kubernetes.io/instance-type": "g2-standard-8",
            },
            {"nvidia.com/gpu": "4"},  # GPUs x clients
            taints=GKE_GPU_TAINT,
        ),
        Expect("L4", 1, SharingMode.SHARED, replicas=4, strategy="time-slicing"),
        id="gke-l4-time-sharing",
    ),
    pytest.param(
        node(
            "gke-ml-t4-mps-1a2b3c4d-5e6f",
            GKE
            | {
                "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                "cloud.google.com/gke-accelerator-count": "2",
                "cloud.google.com/gke-gpu-sharing-strategy": "mps",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "8",
                "node.kubernetes.io/instance-type": "n1-standard-16",
            },
            {"nvidia.com/gpu": "16"},
        ),
        Expect("T4", 2, SharingMode.SHARED, replicas=8, strategy="mps"),
        id="gke-t4-mps",
    ),
    pytest.param(
        node(
            "gke-ml-mig-pool-4d3c2b1a-z8y7",
            GKE
            | {
                "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                "cloud.google.com/gke-accelerator-count": "2",
                "cloud.google.com/gke-gpu-partition-size": "1g.5gb",
                "node.kubernetes.io/instance-type": "a2-highgpu-2g",
            },
            {"nvidia.com/gpu": "14"},  # 7 partitions per GPU
        ),
        Expect("A100-40GB", 2, SharingMode.MIG, mig=(("1g.5gb", 14),)),
        id="gke-a100-mig-partitions",
    ),
    pytest.param(
        node(
            "gke-ml-b200-pool-6f5e4d3c-q1w2",
            GKE | {"cloud.google.com/gke-accelerator": "nvidia-b200", "cloud.google.com/gke-accelerator-count": "8"},
            {"nvidia.com/gpu": "8"},
        ),
        Expect("nvidia-b200", 8, SharingMode.EXCLUSIVE, priced=False),
        id="gke-accelerator-unknown-to-gpufleet",
    ),
    pytest.param(
        node(
            "aks-gpunp-10282168-vmss000000",
            AKS | {"node.kubernetes.io/instance-type": "Standard_NC6s_v3"},
            {"nvidia.com/gpu": "1"},
            taints=AKS_SKU_TAINT,
            provider_id="azure:///subscriptions/0000/resourceGroups/mc_rg/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/aks-gpunp-10282168-vmss/virtualMachines/0",
        ),
        Expect("V100-16GB", 1, SharingMode.EXCLUSIVE),
        id="aks-v100-sku-gpu-taint",
    ),
    pytest.param(
        node(
            "aks-a100spot-20394857-vmss000001",
            AKS
            | {
                "kubernetes.azure.com/agentpool": "a100spot",
                "kubernetes.azure.com/scalesetpriority": "spot",
                "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
            },
            {"nvidia.com/gpu": "1"},
            taints=[
                *AKS_SKU_TAINT,
                {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"},
            ],
        ),
        Expect("A100-80GB", 1, SharingMode.EXCLUSIVE, capacity_type=CapacityType.SPOT),
        id="aks-a100-spot",
    ),
    pytest.param(
        node(
            "ip-10-0-41-7.ec2.internal",
            AWS
            | {
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "eks.amazonaws.com/nodegroup": "ng-p4d",
                "k8s.amazonaws.com/accelerator": "nvidia-tesla-a100",
                "node.kubernetes.io/instance-type": "p4d.24xlarge",
            },
            {"nvidia.com/gpu": "8"},
        ),
        Expect("A100-40GB", 8, SharingMode.EXCLUSIVE),
        id="eks-managed-nodegroup-accelerator-label",
    ),
    pytest.param(
        node(
            "ip-10-0-41-8.ec2.internal",
            AWS
            | {
                "karpenter.sh/capacity-type": "spot",
                "karpenter.sh/nodepool": "gpu",
                "karpenter.k8s.aws/instance-gpu-name": "a100",
                "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                "karpenter.k8s.aws/instance-gpu-count": "8",
                "karpenter.k8s.aws/instance-gpu-memory": "81920",
                "node.kubernetes.io/instance-type": "p4de.24xlarge",
            },
            {"nvidia.com/gpu": "8"},
        ),
        Expect("A100-80GB", 8, SharingMode.EXCLUSIVE, capacity_type=CapacityType.SPOT),
        id="eks-karpenter-gpu-name-and-memory",
    ),
    pytest.param(
        node(
            "ip-10-0-41-9.ec2.internal",
            AWS
            | {
                "eks.amazonaws.com/capacityType": "SPOT",
                "k8s.amazonaws.com/accelerator": "nvidia-tesla-t4",
                "node.kubernetes.io/instance-type": "g4dn.xlarge",
            },
            {"nvidia.com/gpu": "1"},
        ),
        Expect("T4", 1, SharingMode.EXCLUSIVE, capacity_type=CapacityType.SPOT),
        id="eks-spot-t4",
    ),
    pytest.param(
        node(
            "ip-10-0-52-3.ec2.internal",
            AWS
            | {
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me",  # GFD's spelling
                "nvidia.com/gpu.memory": "9856",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/mig.strategy": "single",
            },
            {"nvidia.com/gpu": "8"},  # one 1g.10gb+me per GPU
        ),
        Expect("H100-80GB", 8, SharingMode.MIG, mig=(("1g.10gb.me", 8),)),
        id="mig-single-1g.10gb+me",
    ),
    pytest.param(
        node(
            "ip-10-0-52-4.ec2.internal",
            AWS
            | {
                "node.kubernetes.io/instance-type": "p4de.24xlarge",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/mig.strategy": "mixed",
                "nvidia.com/mig-1g.10gb.me.count": "8",
                "nvidia.com/mig-1g.10gb.count": "48",
            },
            {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb.me": "8", "nvidia.com/mig-1g.10gb": "48"},
        ),
        Expect("A100-80GB", 8, SharingMode.MIG, mig=(("1g.10gb", 48), ("1g.10gb.me", 8))),
        id="mig-mixed-1g.10gb+me",
    ),
    pytest.param(
        node(
            "gh200-node-01",
            {
                "nvidia.com/gpu.product": "NVIDIA-GH200-480GB-MIG-1g.12gb.me",
                "nvidia.com/gpu.count": "4",
                "nvidia.com/mig.strategy": "single",
            },
            {"nvidia.com/gpu": "4"},
        ),
        Expect("NVIDIA-GH200-480GB", 4, SharingMode.MIG, mig=(("1g.12gb.me", 4),), priced=False),
        id="mig-single-profile-gpufleet-does-not-know",
    ),
]


@pytest.mark.parametrize(("obj", "expect"), ROWS)
def test_cloud_label_sets(obj: dict[str, Any], expect: Expect, catalog: PriceCatalog) -> None:
    validate_builtin(obj)  # a Node the API server would store
    info = node_info(obj, catalog)
    assert info is not None
    n = info.node
    got = (n.gpu_model, n.gpu_count, n.sharing, n.gpu_facts.replicas, n.gpu_facts.strategy, n.gpu_facts.mig_profiles)
    assert got == (expect.gpu_model, expect.gpu_count, expect.sharing, expect.replicas, expect.strategy, expect.mig)
    assert n.capacity_type is expect.capacity_type
    assert (n.hourly_price_usd is not None) is expect.priced, info.notes
    assert info.schedulable, "gpufleet's pods tolerate the clouds' GPU and spot taints"


def test_gke_shared_gpu_is_a_fraction_and_resource_stays_nvidia_gpu(catalog: PriceCatalog) -> None:
    obj = ROWS[3].values[0]
    info = node_info(obj, catalog)
    assert info is not None
    assert info.node.gpu_facts.resource == "nvidia.com/gpu"
    assert info.node.gpu_facts.replica_milli == 250


def test_aks_sku_taint_is_one_gpufleets_pods_tolerate() -> None:
    labels = AKS | {"node.kubernetes.io/instance-type": "Standard_NC6s_v3"}
    assert node_schedulable(node("a", labels, {"nvidia.com/gpu": "1"}, taints=AKS_SKU_TAINT))
    assert "sku" in DEFAULT_TOLERATED_TAINTS  # objects.batch_job writes its pods' tolerations from it


def test_unknown_mig_profile_is_noted_and_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodes, "_warned_profiles", set())  # logged once per process: forget earlier tests'
    obj = ROWS[-1].values[0]
    with caplog.at_level(logging.WARNING, logger="gpufleet.k8s.adapter.nodes"):
        info = node_info(obj, None)
    assert info is not None
    assert any("1g.12gb.me is not one gpufleet knows" in note for note in info.notes)
    assert "1g.12gb.me" in caplog.text


def test_gfd_label_wins_over_cloud_labels() -> None:
    labels = GKE | {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100", "nvidia.com/gpu.product": "NVIDIA-L4"}
    info = node_info(node("g", labels, {"nvidia.com/gpu": "1"}), None)
    assert info is not None and info.node.gpu_model == "L4"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, ("H100-80GB", None), id="gke"),
        pytest.param({"cloud.google.com/gke-accelerator": "nvidia-tesla-v100"}, ("V100-16GB", None), id="gke-v100"),
        pytest.param({"cloud.google.com/gke-accelerator": "nvidia-b200"}, (None, "nvidia-b200"), id="gke-unknown"),
        pytest.param({"k8s.amazonaws.com/accelerator": "nvidia-tesla-g5"}, (None, None), id="eks-not-a-gpu-name"),
        pytest.param({"kubernetes.azure.com/accelerator": "nvidia"}, (None, None), id="aks-names-no-model"),
    ],
)
def test_cloud_gpu_model(labels: dict[str, str], expected: tuple[str | None, str | None]) -> None:
    assert cloud_gpu_model(labels) == expected


@pytest.mark.parametrize(
    ("name", "size", "attribute", "limit"),
    [
        pytest.param("1g.10gb", "1g.10gb", "", None, id="plain"),
        pytest.param("1g.10gb+me", "1g.10gb", "+me", 1, id="nvidia-spelling"),
        pytest.param("1g.10gb.me", "1g.10gb", "+me", 1, id="device-plugin-spelling"),
        pytest.param("1g.24gb.me.all", "1g.24gb", "+me.all", 1, id="me-all"),
        pytest.param("1g.24gb-me", "1g.24gb", "-me", None, id="no-media-engine"),
        pytest.param("2g.48gb.gfx", "2g.48gb", "+gfx", None, id="graphics"),
    ],
)
def test_mig_attributes(name: str, size: str, attribute: str, limit: int | None) -> None:
    assert split_mig_attribute(name) == (size, attribute)
    assert mig_instances_limit(name) == limit


@pytest.mark.parametrize(
    ("model", "profile", "base", "per_gpu"),
    [
        pytest.param("H100-80GB", "1g.10gb+me", "1g.10gb", 1, id="h100-me"),
        pytest.param("H100-80GB", "1g.10gb.me", "1g.10gb", 1, id="h100-me-resource-spelling"),
        pytest.param("A100-40GB", "1g.5gb.me", "1g.5gb", 1, id="a100-40-me"),
        pytest.param("H200", "1g.18gb+me", "1g.18gb", 1, id="h200-me"),
        pytest.param("H100-80GB", "1g.20gb+me", None, None, id="me-only-on-the-one-slice-profile"),
        pytest.param("H100-80GB", "1g.12gb+me", None, None, id="size-the-model-lacks"),
        pytest.param("H100-80GB", "1g.10gb-me", None, None, id="blackwell-attribute"),
    ],
)
def test_media_extension_profiles(model: str, profile: str, base: str | None, per_gpu: int | None) -> None:
    p = gpu_model(model).mig_profile(profile)
    if base is None:
        assert p is None
        return
    b = gpu_model(model).mig_profile(base)
    assert p is not None and b is not None
    assert (p.compute_slices, p.memory_slices, p.memory_gib, p.starts) == (
        b.compute_slices,
        b.memory_slices,
        b.memory_gib,
        b.starts,
    )
    assert p.name.endswith("+me") and p.per_gpu == per_gpu
    assert mig_slices_per_gpu(profile, model) == per_gpu
    assert mig_share(profile, model) == b.share


def test_unknown_media_extension_profile_is_one_per_gpu_by_name() -> None:
    assert mig_slices_per_gpu("1g.12gb.me", "NVIDIA-GH200-480GB") == 1
    assert mig_slices_per_gpu("1g.12gb", "NVIDIA-GH200-480GB") == 7
