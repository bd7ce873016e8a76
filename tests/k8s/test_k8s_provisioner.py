"""Scale-ups through Karpenter (issue 11): NodeClaims from the cheapest NodePool that fits, within
its limits; idle nodes' claims deleted. Against the Kubernetes substrate (``tests/k8s``: kmock 0.8
serving ``karpenter.sh/v1`` NodePools and NodeClaims as custom resources, a kubelet stand-in, a Job
controller stand-in). NodePools and NodeClaims are validated against Karpenter's real CRDs
(``tests/support/k8s/crds``: the OpenAPI schema, and the CEL rules where ``cel-python`` is installed).

No Karpenter controller runs here: a test plays its part by creating the Node a claim would become
(named after the claim, as Karpenter's KWOK provider names it), by deleting a claim that could not
launch, or by setting a claim's ``status.nodeName`` (as on AWS, where nodes are named after hosts).
What only a real cluster can confirm: Karpenter launching the claims gpufleet creates, copying their
labels onto the Nodes, and its limits agreeing with the capacity counted here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest

from gpufleet.backends.base import BackendEvent, Capability, EventKind, Provisioner
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.errors import BackendError
from gpufleet.io.catalog import load_catalog
from gpufleet.k8s.adapter.backend import KubernetesBackend, KubernetesOptions
from gpufleet.k8s.adapter.provisioner import INSTANCE_SHAPES, KarpenterProvisioner, allocatable
from gpufleet.k8s.vocabulary import LABEL_POOL, LABEL_PROVISIONED
from gpufleet.loop.state import LaunchSpec, MemoryState
from gpufleet.loop.world import LoopConfig, WorldLoop
from gpufleet.model.constraints import Taint, TaintEffect
from gpufleet.model.job import GpuRequest, Job, JobSpec, PodPlacement
from gpufleet.model.node import CapacityType, Node, SharingMode
from gpufleet.scheduling.profile import load_profile
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.crdcheck import CRDS, check_cel, validate_crd
from tests.support.k8s.informers import settled_poll
from tests.support.k8s.jobcontroller import JobController
from tests.support.k8s.karpenter import registered_node
from tests.support.k8s.kubelet import KubeletConfig, gpu_node

pytestmark = pytest.mark.slow

NODEPOOL_CRD = CRDS / "karpenter.sh_nodepools.yaml"
NODECLAIM_CRD = CRDS / "karpenter.sh_nodeclaims.yaml"
G, V = "karpenter.sh", "v1"


def nodepool(
    name: str,
    instance_types: list[str],
    *,
    capacity_types: list[str] | None = None,
    limits: dict[str, Any] | None = None,
    extra: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A NodePool as an operator writes one for GPU work on EKS."""
    reqs: list[dict[str, Any]] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": instance_types},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
    ]
    if capacity_types is not None:
        reqs.insert(0, {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types})
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {"workload": "gpu"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                "requirements": reqs + (extra or []),
                "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                "expireAfter": "720h",
            },
        },
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1h"},
    }
    if limits is not None:
        spec["limits"] = limits
    return {"apiVersion": f"{G}/{V}", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


# 24 GPUs: three 8-GPU nodes of any of the two types, spot or on-demand
TRAIN = nodepool(
    "gpu-train",
    ["p4d.24xlarge", "p5.48xlarge"],
    capacity_types=["spot", "on-demand"],
    limits={"nvidia.com/gpu": "24", "cpu": "1000"},
)
# no capacity-type requirement (Karpenter's default: on-demand), no limits
INFER = nodepool("inference", ["g5.xlarge", "x9.unknown"])


@pytest.fixture(scope="module")
def catalog() -> PriceCatalog:
    return load_catalog()  # the bundled catalog


class Fleet:
    def __init__(self, cluster: Cluster, catalog: PriceCatalog) -> None:
        self.cluster = cluster
        self.client = cluster.api_client()
        self.custom: Any = kubernetes.client.CustomObjectsApi(self.client)
        self.core: Any = kubernetes.client.CoreV1Api(self.client)
        self.catalog = catalog
        self.clock = [time.time()]
        self.prov = KarpenterProvisioner(self.client, catalog, now=lambda: self.clock[0], cache_ttl_s=30)

    def add_pool(self, obj: dict[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = json.loads(
            self.custom.create_cluster_custom_object(G, V, "nodepools", obj, _preload_content=False).data
        )
        return made

    def claims(self) -> list[dict[str, Any]]:
        resp = self.custom.list_cluster_custom_object(G, V, "nodeclaims", _preload_content=False)
        return list(json.loads(resp.data)["items"])

    def claim(self, name: str) -> dict[str, Any]:
        (c,) = [c for c in self.claims() if c["metadata"]["name"] == name]
        return c

    def price(self, offering: str, capacity: CapacityType) -> float:
        (entry,) = [e for e in self.catalog.entries if e.offering == offering]
        hourly = entry.hourly_usd(capacity, self.catalog.spot_estimate)
        assert hourly is not None
        return hourly

    def join(self, name: str, pool: str, **options: Any) -> None:
        """A Node for claim ``name`` joins, labelled as Karpenter labels it (claim labels copied)."""
        labels = {LABEL_POOL: pool, LABEL_PROVISIONED: "true", **options.pop("labels", {})}
        self.cluster.add_gpu_node(name, nodepool=pool.split("_")[0], labels=labels, **options)

    def close(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def fleet(k8s_cluster: Cluster, catalog: PriceCatalog) -> Iterator[Fleet]:
    f = Fleet(k8s_cluster, catalog)
    f.add_pool(TRAIN)
    f.add_pool(INFER)
    yield f
    f.close()


# -- the objects are what Karpenter accepts ------------------------------------------------------------


def test_the_sample_nodepools_are_valid_for_the_crd() -> None:
    for obj in (TRAIN, INFER):
        validate_crd(NODEPOOL_CRD, obj)
        check_cel(NODEPOOL_CRD, obj)


# -- pools ----------------------------------------------------------------------------------------------


def test_pools_are_the_priced_instance_and_capacity_types_of_each_nodepool(fleet: Fleet) -> None:
    pools = {p.name: p for p in fleet.prov.pools()}
    assert sorted(pools) == [
        "gpu-train_p4d.24xlarge_on-demand",
        "gpu-train_p4d.24xlarge_spot",
        "gpu-train_p5.48xlarge_on-demand",
        "gpu-train_p5.48xlarge_spot",
        "inference_g5.xlarge_on-demand",  # x9.unknown: the catalog does not price it; no spot: not asked for
    ]
    p5 = pools["gpu-train_p5.48xlarge_spot"]
    assert (p5.gpu_model, p5.gpus_per_node, p5.capacity_type) == ("H100-80GB", 8, CapacityType.SPOT)
    assert p5.hourly_price_usd == pytest.approx(fleet.price("p5.48xlarge", CapacityType.SPOT))
    assert pools["gpu-train_p5.48xlarge_on-demand"].hourly_price_usd == pytest.approx(98.32)
    a100 = pools["gpu-train_p4d.24xlarge_on-demand"]
    assert a100.gpu_model == "A100-40GB" and a100.hourly_price_usd == pytest.approx(32.7726)
    # CPU and memory: the instance type's published shape, less what the kubelet keeps
    shape = INSTANCE_SHAPES["p5.48xlarge"]
    assert (p5.cpu_milli, p5.memory_mib) == allocatable(shape.vcpus, shape.memory_gib * 1024)
    assert 180_000 < p5.cpu_milli < 192_000 and 1_800_000 < p5.memory_mib < 2048 * 1024
    # limits: 24 GPUs = three 8-GPU nodes (cpu 1000 allows five p5s)
    for name in pools:
        if name.startswith("gpu-train"):
            assert (pools[name].min_nodes, pools[name].max_nodes) == (0, 3), name
    assert pools["inference_g5.xlarge_on-demand"].max_nodes == fleet.prov.max_nodes_unlimited
    assert all(p.sharing is SharingMode.EXCLUSIVE and p.provisioning_delay_s == 180.0 for p in pools.values())
    assert p5.labels["karpenter.sh/nodepool"] == "gpu-train" and p5.labels["workload"] == "gpu"
    assert p5.labels["topology.kubernetes.io/region"] == "us-east-1"  # from the pool's zones


def test_the_cheapest_fitting_pool_spot_only_for_preemptible_work(fleet: Fleet) -> None:
    """What the autoscaler sees: price per GPU-hour decides, spot is cheaper but preemptible-only."""
    pools = fleet.prov.pools()
    per_gpu = {p.name: (p.hourly_price_usd or 0) / p.gpus_per_node for p in pools if p.gpus_per_node == 8}
    assert min(per_gpu, key=lambda n: per_gpu[n]) == "gpu-train_p4d.24xlarge_spot"
    on_demand = {n: v for n, v in per_gpu.items() if n.endswith("on-demand")}
    assert min(on_demand, key=lambda n: on_demand[n]) == "gpu-train_p4d.24xlarge_on-demand"


def test_pools_are_cached_for_a_short_while(fleet: Fleet) -> None:
    assert len(fleet.prov.pools()) == 5
    fleet.add_pool(nodepool("t4", ["g4dn.xlarge"]))
    assert len(fleet.prov.pools()) == 5  # within the TTL
    fleet.clock[0] += 31
    assert len(fleet.prov.pools()) == 6


def test_one_bad_nodepool_never_breaks_pools(fleet: Fleet, caplog: pytest.LogCaptureFixture) -> None:
    bad = nodepool("broken", ["g5.xlarge"], limits={"nvidia.com/gpu": "lots"})
    with pytest.raises(Exception, match="lots"):
        validate_crd(NODEPOOL_CRD, bad)  # the real API server would refuse it; an old CRD might not
    fleet.add_pool(bad)
    fleet.add_pool({"apiVersion": f"{G}/{V}", "kind": "NodePool", "metadata": {"name": "no-template"}, "spec": {}})
    static = nodepool("static", ["g5.xlarge"])
    static["spec"]["replicas"] = 2
    del static["spec"]["disruption"]
    fleet.add_pool(static)
    with caplog.at_level(logging.INFO, logger="gpufleet.k8s.adapter.provisioner"):
        names = [p.name for p in fleet.prov.pools()]
    assert len(names) == 5 and not any(n.startswith(("broken", "no-template", "static")) for n in names)
    assert "NodePool broken skipped" in caplog.text and "lots" in caplog.text
    assert "NodePool static is static" in caplog.text


def test_requirements_narrow_an_open_nodepool(fleet: Fleet) -> None:
    """A NodePool that names no instance type offers the catalog's types its requirements admit."""
    open_pool = nodepool("h100-or-a100", [], capacity_types=["on-demand"])
    reqs = open_pool["spec"]["template"]["spec"]["requirements"]
    reqs[:] = [r for r in reqs if r["key"] != "node.kubernetes.io/instance-type"] + [
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100", "a100"]},
        {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "Gt", "values": ["50000"]},
        {"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn", "values": ["p5"]},
    ]
    validate_crd(NODEPOOL_CRD, open_pool)
    fleet.add_pool(open_pool)
    fleet.clock[0] += 60
    names = [p.name for p in fleet.prov.pools() if p.name.startswith("h100-or-a100")]
    assert names == ["h100-or-a100_p4de.24xlarge_on-demand"]  # A100-80GB: not p4d (40 GB), not p5


# -- provision ------------------------------------------------------------------------------------------


def test_provision_creates_valid_nodeclaims_and_returns_priced_nodes(fleet: Fleet) -> None:
    pools = {p.name: p for p in fleet.prov.pools()}
    pool = pools["gpu-train_p5.48xlarge_spot"]
    nodes = fleet.prov.provision(pool.name, 2, fleet.clock[0])
    assert len(nodes) == 2 and len({n.name for n in nodes}) == 2
    claims = {c["metadata"]["name"]: c for c in fleet.claims()}
    assert set(claims) == {n.name for n in nodes}  # a node is named after its claim
    for node in nodes:
        claim = claims[node.name]
        validate_crd(NODECLAIM_CRD, claim)
        assert check_cel(NODECLAIM_CRD, claim) >= 1
        assert node.name.startswith("gpu-train-gf-")
        labels = claim["metadata"]["labels"]
        assert labels["karpenter.sh/nodepool"] == "gpu-train"
        assert labels[LABEL_PROVISIONED] == "true" and labels[LABEL_POOL] == pool.name
        assert labels["workload"] == "gpu"  # the template's labels
        reqs = {r["key"]: r for r in claim["spec"]["requirements"]}
        assert reqs["node.kubernetes.io/instance-type"]["values"] == ["p5.48xlarge"]
        assert reqs["karpenter.sh/capacity-type"]["values"] == ["spot"]
        assert reqs["karpenter.sh/nodepool"]["values"] == ["gpu-train"]
        assert claim["spec"]["nodeClassRef"]["kind"] == "EC2NodeClass"
        assert claim["spec"]["taints"] == TRAIN["spec"]["template"]["spec"]["taints"]
        assert claim["metadata"]["ownerReferences"][0]["name"] == "gpu-train"
        # what the loop bills from now
        assert (node.gpu_model, node.gpu_count, node.pool) == ("H100-80GB", 8, pool.name)
        assert node.capacity_type is CapacityType.SPOT
        assert node.hourly_price_usd == pytest.approx(fleet.price("p5.48xlarge", CapacityType.SPOT))
        assert (node.cpu_milli, node.memory_mib) == (pool.cpu_milli, pool.memory_mib)


def test_limits_are_respected_across_the_pools_of_a_nodepool(fleet: Fleet, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        made = fleet.prov.provision("gpu-train_p5.48xlarge_spot", 5, fleet.clock[0])
    assert len(made) == 3 and len(fleet.claims()) == 3  # 24 GPUs = three 8-GPU nodes
    assert "leave room for 3" in caplog.text
    # the other pools of the NodePool share its room: none left
    assert fleet.prov.provision("gpu-train_p4d.24xlarge_on-demand", 1, fleet.clock[0]) == []
    pools = {p.name: p for p in fleet.prov.pools()}
    assert pools["gpu-train_p5.48xlarge_spot"].max_nodes == 3  # its own three (the loop counts them)
    assert pools["gpu-train_p4d.24xlarge_on-demand"].max_nodes == 0
    # a claim given back makes room again
    fleet.prov.release(made[0].name, fleet.clock[0])
    pools = {p.name: p for p in fleet.prov.pools()}
    assert pools["gpu-train_p4d.24xlarge_on-demand"].max_nodes == 1
    assert len(fleet.prov.provision("gpu-train_p4d.24xlarge_on-demand", 2, fleet.clock[0])) == 1


def test_launched_claims_count_their_reported_capacity(fleet: Fleet) -> None:
    """Once Karpenter launched a claim, its ``status.capacity`` is what the limits count."""
    (node,) = fleet.prov.provision("gpu-train_p4d.24xlarge_spot", 1, fleet.clock[0])
    fleet.custom.patch_cluster_custom_object_status(
        G, V, "nodeclaims", node.name, {"status": {"capacity": {"nvidia.com/gpu": "16", "cpu": "96"}}}
    )
    fleet.clock[0] += 60
    pools = {p.name: p for p in fleet.prov.pools()}
    assert pools["gpu-train_p4d.24xlarge_spot"].max_nodes == 1 + 1  # its own + 8 GPUs of room
    assert pools["gpu-train_p5.48xlarge_spot"].max_nodes == 1


def test_provision_of_an_unknown_pool_creates_nothing(fleet: Fleet) -> None:
    assert fleet.prov.provision("gpu-train_p3.2xlarge_spot", 1, fleet.clock[0]) == []
    assert fleet.prov.provision("gpu-train_p5.48xlarge_spot", 0, fleet.clock[0]) == []
    assert fleet.claims() == []


# -- the backend -------------------------------------------------------------------------------------------


@pytest.fixture
def backend(fleet: Fleet) -> Iterator[KubernetesBackend]:
    b = KubernetesBackend(
        fleet.client, fleet.catalog, KubernetesOptions(now=lambda: fleet.clock[0]), provisioner=fleet.prov
    )
    yield b
    b.close()  # its informers


def test_the_backend_with_a_provisioner_can_autoscale(fleet: Fleet, backend: KubernetesBackend) -> None:
    assert Capability.AUTOSCALING in backend.capabilities
    assert Capability.AUTOSCALING not in backend.capabilities.missing
    assert isinstance(backend, Provisioner)
    loop = WorldLoop(MemoryState(), backend, load_profile({"autoscaler": {"enabled": True}}).build(), lambda n: 1.0)
    assert loop.provisioner is backend
    assert {ps.pool.name for ps in loop.cluster.pool_states()} == {p.name for p in fleet.prov.pools()}
    plain = KubernetesBackend(fleet.client, fleet.catalog)
    assert Capability.AUTOSCALING not in plain.capabilities and Capability.AUTOSCALING in plain.capabilities.missing
    assert plain.pools() == []
    with pytest.raises(BackendError, match="no node provisioner"):
        plain.provision("gpu-train_p5.48xlarge_spot", 1, 0.0)


def test_a_node_named_like_its_claim_is_reported_added(fleet: Fleet, backend: KubernetesBackend) -> None:
    fleet.cluster.add_gpu_node("gpu-a")
    assert [e.node for e in settled_poll(backend, fleet.core)] == ["gpu-a"]
    (node,) = backend.provision("gpu-train_p5.48xlarge_spot", 1, fleet.clock[0])
    assert settled_poll(backend, fleet.core) == [] and fleet.prov.claims_ready() == []
    fleet.join(
        node.name,
        node.pool,
        product="NVIDIA-H100-80GB-HBM3",
        instance_type="p5.48xlarge",
        capacity_type="spot",
        ready=False,
    )
    assert settled_poll(backend, fleet.core) == [] and fleet.prov.claims_ready() == []  # not Ready yet
    fleet.core.patch_node_status(node.name, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    events = settled_poll(backend, fleet.core)
    assert [(e.kind, e.node) for e in events] == [(EventKind.NODE_ADDED, node.name)]
    assert fleet.prov.claims_ready() == [node.name]
    seen = backend.node(node.name)
    assert seen is not None and seen.pool == node.pool  # the claim's gpufleet.io/pool label, copied
    assert (seen.gpu_model, seen.gpu_count, seen.capacity_type) == ("H100-80GB", 8, CapacityType.SPOT)
    assert seen.hourly_price_usd == pytest.approx(node.hourly_price_usd)
    assert settled_poll(backend, fleet.core) == []


def test_a_nodepools_taints_are_its_pools_its_claims_and_its_nodes(fleet: Fleet, backend: KubernetesBackend) -> None:
    """Issue 22, item 7: the NodePool template's taints that keep pods off are the taints of the pools
    gpufleet derives from it (the autoscaler grows one only for a job that tolerates them); its claims
    carry the template's taints in ``spec.taints``, Karpenter puts them on the Node, and the Node
    gpufleet reads back carries them."""
    team = {"key": "example.com/team", "value": "research", "effect": "NoSchedule"}
    obj = nodepool("research", ["g5.xlarge"])
    tspec = obj["spec"]["template"]["spec"]
    tspec["taints"] = [*tspec["taints"], team, {"key": "soft", "effect": "PreferNoSchedule"}]
    validate_crd(NODEPOOL_CRD, obj)
    fleet.add_pool(obj)
    fleet.clock[0] += 60
    (pool,) = [p for p in fleet.prov.pools() if p.name.startswith("research")]
    want = (Taint("example.com/team", "research", TaintEffect.NO_SCHEDULE),)
    assert pool.taints == want  # nvidia.com/gpu: gpufleet's pods tolerate it; PreferNoSchedule keeps none off
    assert all(p.taints == () for p in fleet.prov.pools() if not p.name.startswith("research"))
    (made,) = backend.provision(pool.name, 1, fleet.clock[0])
    assert made.taints == want  # the node the loop places on before it joins
    claim = fleet.claim(made.name)
    validate_crd(NODECLAIM_CRD, claim)
    assert claim["spec"]["taints"] == tspec["taints"]
    joined = gpu_node(
        made.name,
        product="NVIDIA-A10G",
        gpu_count=1,
        gpu_memory_mib=23028,
        instance_type="g5.xlarge",
        cpu="4",
        memory="16Gi",
        taints=[{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],  # as the kubelet registers it
    )
    node = registered_node(claim, joined)
    assert sorted(t["key"] for t in node["spec"]["taints"]) == ["example.com/team", "nvidia.com/gpu", "soft"]
    fleet.core.create_node(node)
    events = settled_poll(backend, fleet.core)
    assert [(e.kind, e.node) for e in events] == [(EventKind.NODE_ADDED, made.name)]
    seen = backend.node(made.name)
    assert seen is not None and seen.pool == pool.name and seen.taints == want


def test_a_pool_carries_the_well_known_labels_its_nodes_will_have(fleet: Fleet) -> None:
    """An adopted pod selecting ``kubernetes.io/os: linux`` (or the architecture, the instance
    family) matches every real node: the pools gpufleet derives must carry those labels too, or
    such a job grows no pool (and, with no matching node yet, is refused as never runnable)."""
    from gpufleet.model.constraints import constraints_from_dict
    from gpufleet.model.job import GpuRequest, JobSpec
    from gpufleet.scheduling.admission import Need, fit_problem

    fleet.add_pool(nodepool("general", ["g5.xlarge"]))
    fleet.clock[0] += 60
    (pool,) = [p for p in fleet.prov.pools() if p.name.startswith("general")]
    assert pool.labels["kubernetes.io/os"] == "linux"
    assert pool.labels["kubernetes.io/arch"] == "amd64"
    assert pool.labels["karpenter.k8s.aws/instance-family"] == "g5"
    assert pool.labels["node.kubernetes.io/instance-type"] == "g5.xlarge"
    wants = constraints_from_dict({"nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}})
    need = Need.of_spec(JobSpec("train", gpu=GpuRequest(1)))
    assert fit_problem(need, wants, [], [pool]) is None


def test_a_claim_that_never_launches_is_reported_removed(fleet: Fleet, backend: KubernetesBackend) -> None:
    """Karpenter deletes a claim it cannot launch (no capacity): the provisioned node is gone."""
    (node,) = backend.provision("gpu-train_p5.48xlarge_spot", 1, fleet.clock[0])
    assert settled_poll(backend, fleet.core) == []
    fleet.custom.delete_cluster_custom_object(G, V, "nodeclaims", node.name)
    events = settled_poll(backend, fleet.core)
    assert [(e.kind, e.node) for e in events] == [(EventKind.NODE_REMOVED, node.name)]
    assert "deleted before its node joined" in events[0].reason
    assert settled_poll(backend, fleet.core) == []


def test_a_node_named_after_its_host_replaces_the_claims_placeholder(fleet: Fleet, backend: KubernetesBackend) -> None:
    """On AWS the Node is named after the instance's host name, which the claim records."""
    (node,) = backend.provision("gpu-train_p4d.24xlarge_on-demand", 1, fleet.clock[0])
    host = "ip-10-0-17-4.ec2.internal"
    fleet.custom.patch_cluster_custom_object_status(G, V, "nodeclaims", node.name, {"status": {"nodeName": host}})
    assert settled_poll(backend, fleet.core) == []
    fleet.join(host, node.pool, product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960, instance_type="p4d.24xlarge")
    events = settled_poll(backend, fleet.core)
    assert [(e.kind, e.node) for e in events] == [(EventKind.NODE_ADDED, host), (EventKind.NODE_REMOVED, node.name)]
    assert fleet.prov.claims_ready() == [node.name]
    real = backend.node(host)
    assert real is not None and real.pool == node.pool
    # giving the node back deletes its claim
    backend.release(host, fleet.clock[0])
    assert fleet.claims() == []


# -- release ------------------------------------------------------------------------------------------------


def test_release_deletes_the_claim(fleet: Fleet, backend: KubernetesBackend) -> None:
    a, b = backend.provision("inference_g5.xlarge_on-demand", 2, fleet.clock[0])
    backend.release(a.name, fleet.clock[0])
    assert [c["metadata"]["name"] for c in fleet.claims()] == [b.name]
    backend.release(a.name, fleet.clock[0])  # again: nothing left to do
    assert [c["metadata"]["name"] for c in fleet.claims()] == [b.name]
    assert settled_poll(backend, fleet.core) == []  # a released claim is not reported as lost


def test_a_node_gpufleet_did_not_provision_is_never_released(
    fleet: Fleet, backend: KubernetesBackend, caplog: pytest.LogCaptureFixture
) -> None:
    foreign = {
        "apiVersion": f"{G}/{V}",
        "kind": "NodeClaim",
        "metadata": {"name": "gpu-train-x7k2p", "labels": {"karpenter.sh/nodepool": "gpu-train"}},
        "spec": copy.deepcopy(
            {k: v for k, v in TRAIN["spec"]["template"]["spec"].items() if k in ("nodeClassRef", "requirements")}
        ),
    }
    validate_crd(NODECLAIM_CRD, foreign)
    fleet.custom.create_cluster_custom_object(G, V, "nodeclaims", foreign)
    fleet.cluster.add_gpu_node("gpu-train-x7k2p", nodepool="gpu-train", instance_type="p4d.24xlarge")
    fleet.cluster.add_gpu_node("on-prem-1")
    with caplog.at_level(logging.WARNING):
        backend.release("gpu-train-x7k2p", fleet.clock[0])
        backend.release("on-prem-1", fleet.clock[0])
    assert [c["metadata"]["name"] for c in fleet.claims()] == ["gpu-train-x7k2p"]
    assert "node gpu-train-x7k2p was not provisioned by gpufleet" in caplog.text
    assert "node on-prem-1 was not provisioned by gpufleet" in caplog.text
    # Karpenter's own claims count against the NodePool's limits: two 8-GPU nodes of room left
    assert {p.name: p.max_nodes for p in fleet.prov.pools()}["gpu-train_p5.48xlarge_spot"] == 2


def test_api_errors_are_backend_errors(catalog: PriceCatalog) -> None:
    client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host="http://127.0.0.1:9"))
    try:
        prov = KarpenterProvisioner(client, catalog)
        with pytest.raises(BackendError, match=r"listing nodepools\.karpenter\.sh: Kubernetes API unreachable"):
            prov.pools()
        with pytest.raises(BackendError, match="listing nodeclaims"):
            prov.release("gpu-a", 0.0)
    finally:
        client.close()  # type: ignore[no-untyped-call]


def test_a_forbidden_answer_is_a_backend_error(fleet: Fleet) -> None:
    with pytest.raises(BackendError, match=r"creating a NodeClaim for pool .*: Kubernetes API 4\d\d"):
        fleet.prov._call(  # the API refuses the body (no spec): as Karpenter's CRD would
            "creating a NodeClaim for pool x",
            fleet.custom.create_cluster_custom_object,
            G,
            V,
            "nodeclaims",
            {"apiVersion": f"{G}/{V}", "kind": "NodeClaim", "metadata": {"name": "Bad_Name"}},
        )


# -- the loop end to end ---------------------------------------------------------------------------------------


class CommandState(MemoryState):
    """The simulator's store, with a command for every run (the server's store has the job's)."""

    def bind(
        self,
        job: Job,
        placement: tuple[PodPlacement, ...],
        node: Node | None,
        hourly_usd: float,
        reason: str,
        now: float,
    ) -> LaunchSpec | None:
        spec = super().bind(job, placement, node, hourly_usd, reason, now)
        return None if spec is None else dataclasses.replace(spec, command=("python", "train.py"))


@pytest.mark.parametrize(
    ("preemptible", "capacity"), [(False, "on-demand"), (True, "spot")], ids=["on-demand", "preemptible-spot"]
)
def test_the_loop_scales_up_through_a_claim_runs_the_job_and_gives_the_idle_node_back(
    k8s_cluster_factory: Callable[..., Cluster], catalog: PriceCatalog, preemptible: bool, capacity: str
) -> None:
    """A job no node fits: the autoscaler picks the cheapest pool that fits it (spot only for a
    preemptible job), a NodeClaim is made, billed from then, its node joins, the job runs there and
    ends; idle past the TTL, the node is given back (its claim deleted, its billing closed)."""
    # pod times are whole seconds: a run longer than one keeps its end after its start
    cluster = k8s_cluster_factory(kubelet=KubeletConfig(default_duration_s=2.0))
    f = Fleet(cluster, catalog)
    f.add_pool(TRAIN)
    core: Any = f.core
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    jobs = JobController(f.client).start()
    try:
        backend = KubernetesBackend(f.client, catalog, KubernetesOptions(now=lambda: f.clock[0]), provisioner=f.prov)
        profile = {"autoscaler": {"enabled": True, "wait_threshold_s": 0, "idle_ttl_s": 120}}
        state = CommandState()
        loop = WorldLoop(
            state,
            backend,
            load_profile(profile).build(),
            lambda n: n.hourly_price_usd or 0.0,
            LoopConfig(autoscale_interval_s=0.2, cycle_interval_s=0.2),
        )
        events: list[BackendEvent] = []
        real_poll = backend.poll

        def poll() -> list[BackendEvent]:
            got = real_poll()
            events.extend(got)
            return got

        backend.poll = poll  # type: ignore[method-assign]
        spec = JobSpec(
            "train",
            team="ml",
            gpu=GpuRequest(8),
            gpu_types=frozenset({"A100-40GB"}),
            preemptible=preemptible,
            checkpoint_interval_s=600 if preemptible else None,
        )
        state.submit(Job("j1", spec, submit_time=f.clock[0]))

        offset = [0.0]  # the wall clock (the kubelet's times are real), moved ahead to pass the idle TTL

        def step(jump: float = 0.0) -> None:
            offset[0] += jump
            f.clock[0] = time.time() + offset[0]
            loop.step(f.clock[0])

        step()  # the cycle leaves the job blocked; the autoscaler's tick asks for a p4d node (A100-40GB),
        asked_at = f.clock[0]  # spot if the job may be preempted
        (claim,) = f.claims()
        labels = claim["metadata"]["labels"]
        pool = f"gpu-train_p4d.24xlarge_{capacity}"
        assert labels[LABEL_POOL] == pool
        reqs = {r["key"]: r["values"] for r in claim["spec"]["requirements"]}
        assert reqs["karpenter.sh/capacity-type"] == [capacity]
        name = claim["metadata"]["name"]
        ns = loop.cluster.nodes[name]
        assert ns.ready_at is None and ns.requested_at == asked_at  # billed from now, not ready
        price = f.price("p4d.24xlarge", CapacityType(capacity))
        assert loop.cluster.cost_rate_usd_per_hour() == pytest.approx(price)
        f.join(
            name,
            pool,
            product="NVIDIA-A100-SXM4-40GB",
            gpu_memory_mib=40960,
            instance_type="p4d.24xlarge",
            capacity_type=capacity,
        )

        def until(pred: Callable[[], bool], what: str) -> None:
            deadline = time.monotonic() + 15
            while not pred():
                assert time.monotonic() < deadline, f"not reached: {what}; events {events}"
                time.sleep(0.05)
                step()

        until(lambda: any(e.kind is EventKind.SUCCEEDED for e in events), "the job ran and ended")
        assert (EventKind.NODE_ADDED, name) in [(e.kind, e.node) for e in events]
        pods = json.loads(core.list_namespaced_pod("ml", _preload_content=False).data)["items"]
        assert [p["spec"]["nodeName"] for p in pods] == [name]
        assert f.claims() != []
        time.sleep(0.3)
        step()  # the autoscaler's tick starts the node's idle timer
        assert f.claims() != []
        step(130)  # idle past the TTL
        until(lambda: not f.claims(), "the idle node's claim deleted")
        assert ns.removed_at is not None and loop.cluster.cost_rate_usd_per_hour() == 0
    finally:
        jobs.stop()
        f.close()
