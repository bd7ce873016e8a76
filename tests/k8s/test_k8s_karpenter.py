"""gpufleet beside Karpenter (issue 22, observation 9): one provisioner at a time, NodeClaims that
Karpenter v1 and its AWS provider launch and judge as their own, running pods protected from
consolidation.

Karpenter's decisions are modelled in :mod:`tests.support.k8s.karpenter` (its provisioner's pod
predicate, consolidation's pod check, the AWS provider's launch filter with ``minValues``, drift);
claims are validated against Karpenter's NodeClaim CRD (``tests/support/k8s/crds``), and the
NodePools with ``minValues`` are the AWS provider's own examples (``tests/support/k8s/samples``).
What only a real cluster can confirm: Karpenter launching the claims, and its consolidation leaving
gpufleet's nodes alone while their jobs run.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from gpufleet.backends.base import EventKind
from gpufleet.io.catalog import load_catalog
from gpufleet.k8s.adapter.objects import batch_job, node_claim
from gpufleet.k8s.adapter.provisioner import KarpenterProvisioner
from gpufleet.k8s.adapter.waiting import REASON_GATED, REASON_UNSCHEDULABLE, pod_condition_for
from gpufleet.scheduling.admission import CapacityLimit
from gpufleet.scheduling.decisions import ClusterState
from gpufleet.scheduling.framework import Code, WaitKind
from gpufleet.scheduling.profile import load_profile
from tests.support.builders import cluster, job
from tests.support.k8s import karpenter
from tests.support.k8s.backendworld import World, ended
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.crdcheck import CRDS, check_cel, validate_crd

NODECLAIM_CRD = CRDS / "karpenter.sh_nodeclaims.yaml"
NODEPOOL_CRD = CRDS / "karpenter.sh_nodepools.yaml"
SAMPLES = Path(__file__).resolve().parents[1] / "support" / "k8s" / "samples"
G, V = "karpenter.sh", "v1"
NOW = 1_750_000_000.0


def sample_nodepool(file: str) -> dict[str, Any]:
    """The NodePool of one of the AWS provider's example files (the file also has an EC2NodeClass)."""
    (pool,) = [d for d in yaml.safe_load_all((SAMPLES / file).read_text()) if d and d["kind"] == "NodePool"]
    return dict(pool)


def gpu_nodepool(name: str = "gpu", **meta: Any) -> dict[str, Any]:
    """A GPU NodePool written as the AWS examples write theirs: flexibility asked with ``minValues``."""
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "NodePool",
        "metadata": {"name": name, **meta},
        "spec": {
            "template": {
                "metadata": {"labels": {"workload": "gpu"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                        {
                            "key": "karpenter.k8s.aws/instance-family",
                            "operator": "In",
                            "values": ["p4d", "p5"],
                            "minValues": 2,
                        },
                        {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 2},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["p"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["3"]},
                        {"key": "team", "operator": "In", "values": ["research"]},
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                },
            },
            "limits": {"nvidia.com/gpu": "32"},
        },
    }


def aws_type(name: str, **extra: str) -> dict[str, str]:
    """The labels of an AWS instance type, as the provider's instance-type requirements give them."""
    family, size = name.split(".")
    return {
        "node.kubernetes.io/instance-type": name,
        "karpenter.k8s.aws/instance-family": family,
        "karpenter.k8s.aws/instance-category": family[0],
        "karpenter.k8s.aws/instance-generation": "".join(c for c in family if c.isdigit())[:1],
        "karpenter.k8s.aws/instance-size": size,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        **extra,
    }


# what the AWS provider offers in the region (a small part of it)
INSTANCE_TYPES = {
    n: aws_type(n)
    for n in ("c5.2xlarge", "c6i.2xlarge", "m5.2xlarge", "m6i.2xlarge", "r5.2xlarge", "p4d.24xlarge", "p5.48xlarge")
}
PINNED = {  # NodePool sample → (instance type, capacity type) gpufleet pins on a claim
    "aws_min-values-family.yaml": ("c5.2xlarge", "spot"),
    "aws_min-values-multiple-keys.yaml": ("m5.2xlarge", "spot"),
    "gpu": ("p5.48xlarge", "spot"),
}


def nodepool_named(which: str) -> dict[str, Any]:
    return gpu_nodepool() if which == "gpu" else sample_nodepool(which)


def launched(claim: dict[str, Any], instance_type: str, capacity_type: str, zone: str) -> dict[str, Any]:
    """The claim once Karpenter launched it: the instance type's labels and the offering's merged
    under its own (``PopulateNodeClaimDetails``)."""
    out = copy.deepcopy(claim)
    out["metadata"]["name"] = "c1"
    out["metadata"]["labels"] = {
        **INSTANCE_TYPES[instance_type],
        "karpenter.sh/capacity-type": capacity_type,
        "topology.kubernetes.io/zone": zone,
        **out["metadata"]["labels"],
    }
    return out


# -- the substrate's Karpenter can say no --------------------------------------------------------------


def test_the_model_of_the_aws_launch_fails_a_pinned_claim_that_keeps_min_values() -> None:
    """Control: a claim pinned to one instance type that keeps a ``minValues`` fails to launch, as
    Karpenter's ``SatisfiesMinValues`` fails it (what gpufleet's claims did before)."""
    pool = sample_nodepool("aws_min-values-family.yaml")
    claim = {"spec": {"requirements": [*pool["spec"]["template"]["spec"]["requirements"]]}}
    claim["spec"]["requirements"].append(
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.2xlarge"]}
    )
    assert karpenter.launch_error(claim, INSTANCE_TYPES) == (
        "minValues requirement is not met for label(s) ['karpenter.k8s.aws/instance-family']"
    )
    unpinned = {"spec": {"requirements": pool["spec"]["template"]["spec"]["requirements"]}}
    assert karpenter.launch_error(unpinned, INSTANCE_TYPES) is None  # unpinned: five c/m/r families to choose from


# -- claims Karpenter v1 and its AWS provider accept -----------------------------------------------------


@pytest.mark.parametrize("which", sorted(PINNED), ids=sorted(PINNED))
def test_a_claim_keeps_no_min_values_so_the_aws_provider_launches_it(which: str) -> None:
    pool = nodepool_named(which)
    validate_crd(NODEPOOL_CRD, pool)
    itype, ctype = PINNED[which]
    claim = node_claim(pool, instance_type=itype, capacity_type=ctype, name="c1")
    validate_crd(NODECLAIM_CRD, claim)
    assert check_cel(NODECLAIM_CRD, claim) >= 1
    assert [r["key"] for r in claim["spec"]["requirements"] if "minValues" in r] == []
    assert karpenter.launch_error(claim, INSTANCE_TYPES) is None


def test_a_claim_carries_its_nodepools_hash_so_karpenter_sees_it_drift() -> None:
    ann = {"karpenter.sh/nodepool-hash": "6821555240594823858", "karpenter.sh/nodepool-hash-version": "v3"}
    pool = gpu_nodepool(annotations=dict(ann), uid="0d6e4c6a-3c1b-4f0e-9a57-1f1c2b8e7d10")
    claim = node_claim(pool, instance_type="p5.48xlarge", capacity_type="spot", name="c1")
    for k, v in ann.items():
        assert claim["metadata"]["annotations"][k] == v
    node = launched(claim, "p5.48xlarge", "spot", "us-east-1a")
    assert karpenter.is_static_drift_visible(pool, node)
    assert karpenter.drift(pool, node) is None
    changed = copy.deepcopy(pool)  # the operator edits the template; Karpenter's hash controller rehashes
    changed["metadata"]["annotations"]["karpenter.sh/nodepool-hash"] = "1029384756"
    assert karpenter.drift(changed, node) == "NodePoolDrifted"


def test_a_claim_is_labelled_as_karpenters_own_so_it_never_drifts_on_requirements() -> None:
    pool = gpu_nodepool(uid="0d6e4c6a-3c1b-4f0e-9a57-1f1c2b8e7d10")
    claim = node_claim(pool, instance_type="p5.48xlarge", capacity_type="on-demand", name="c1")
    labels = claim["metadata"]["labels"]
    assert labels["karpenter.sh/nodepool"] == "gpu"
    assert labels["karpenter.k8s.aws/ec2nodeclass"] == "gpu"  # NodeClassLabelKey
    assert labels["team"] == "research"  # a custom requirement's value (resolveCustomLabelsFromRequirements)
    assert "karpenter.k8s.aws/instance-family" not in labels  # well-known: the instance type brings it
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("NodePool", "gpu", pool["metadata"]["uid"])
    assert karpenter.drift(pool, launched(claim, "p5.48xlarge", "on-demand", "us-east-1a")) is None


@pytest.fixture
def prov(k8s_cluster: Cluster) -> Iterator[tuple[KarpenterProvisioner, Any]]:
    client = k8s_cluster.api_client()
    custom: Any = kubernetes.client.CustomObjectsApi(client)
    pool = gpu_nodepool(
        annotations={"karpenter.sh/nodepool-hash": "6821555240594823858", "karpenter.sh/nodepool-hash-version": "v3"}
    )
    custom.create_cluster_custom_object(G, V, "nodepools", pool)
    yield KarpenterProvisioner(client, load_catalog()), custom
    client.close()  # type: ignore[no-untyped-call]


@pytest.mark.slow
def test_the_provisioners_claims_launch_and_carry_the_nodepools_hash(
    prov: tuple[KarpenterProvisioner, Any],
) -> None:
    p, custom = prov
    pool = next(x for x in p.pools() if x.name == "gpu_p5.48xlarge_spot")
    (node,) = p.provision(pool.name, 1, NOW)
    claim = json.loads(custom.get_cluster_custom_object(G, V, "nodeclaims", node.name, _preload_content=False).data)
    validate_crd(NODECLAIM_CRD, claim)
    assert check_cel(NODECLAIM_CRD, claim) >= 1
    assert [r["key"] for r in claim["spec"]["requirements"] if "minValues" in r] == []
    assert karpenter.launch_error(claim, INSTANCE_TYPES) is None
    assert claim["metadata"]["annotations"]["karpenter.sh/nodepool-hash"] == "6821555240594823858"
    assert claim["metadata"]["annotations"]["karpenter.sh/nodepool-hash-version"] == "v3"


# -- running pods protected from consolidation ---------------------------------------------------------


def test_the_pods_gpufleet_runs_carry_do_not_disrupt() -> None:
    body = batch_job("j1", 1, namespace="team-a", image="acme/train:1", command=["python", "train.py"])
    assert body["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


@pytest.mark.slow
def test_karpenter_would_not_consolidate_a_node_while_a_gpufleet_job_runs_on_it(
    make_world: Callable[..., World],
) -> None:
    w = make_world(duration_s=None)  # runs until stopped
    w.backend.launch(w.request("long", "gpu-a"))
    w.running("long")
    pods = w.pods("long")
    key = f"{pods[0]['metadata']['namespace']}/{pods[0]['metadata']['name']}"
    assert karpenter.node_disruption_blocked(pods, time.time()) == (
        f'pod {key} has "karpenter.sh/do-not-disrupt" annotation'
    )
    # control: the same pod without the annotation (or once it ended) would not hold the node
    bare = copy.deepcopy(pods)
    bare[0]["metadata"]["annotations"].pop("karpenter.sh/do-not-disrupt")
    assert karpenter.node_disruption_blocked(bare, time.time()) is None
    done = copy.deepcopy(pods)
    done[0]["status"]["phase"] = "Succeeded"
    assert karpenter.node_disruption_blocked(done, time.time()) is None
    w.backend.stop("long", 1, "test over", grace_s=1)
    w.until(ended("long", EventKind.STOPPED))


# -- one provisioner at a time ----------------------------------------------------------------------------

CONDITIONS = [
    # id, wait kind, gpufleet provisions?, reason written, Karpenter provisions for it?
    (
        "capacity, no provisioner: the cluster's autoscaler may add a node",
        WaitKind.CAPACITY,
        False,
        REASON_UNSCHEDULABLE,
        True,
    ),
    ("capacity, gpufleet provisions: Karpenter must not too", WaitKind.CAPACITY, True, REASON_GATED, False),
    ("quota: a node would not end the wait", WaitKind.QUOTA, False, REASON_GATED, False),
    ("budget", WaitKind.BUDGET, False, REASON_GATED, False),
    ("preemption under way", WaitKind.PREEMPTION, False, REASON_GATED, False),
    ("quota while provisioning", WaitKind.QUOTA, True, REASON_GATED, False),
    ("a kind gpufleet does not know is not capacity", "spaceship", False, REASON_GATED, False),
]


@pytest.mark.parametrize(
    ("kind", "provisioning", "reason", "karpenter_launches"),
    [c[1:] for c in CONDITIONS],
    ids=[c[0] for c in CONDITIONS],
)
def test_only_a_capacity_wait_without_gpufleets_provisioner_asks_karpenter_for_a_node(
    kind: WaitKind | str, provisioning: bool, reason: str, karpenter_launches: bool
) -> None:
    cond = pod_condition_for(kind, "why it waits", provisioning, at=NOW)
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodScheduled",
        "False",
        reason,
        "why it waits",
    )
    assert cond["lastTransitionTime"] == "2025-06-15T15:06:40Z"
    pod = {
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"schedulerName": "gpufleet"},
        "status": {"conditions": [cond]},
    }
    assert karpenter.is_provisionable(pod) is karpenter_launches


def test_the_cycle_says_why_a_job_waits_as_a_kind_not_as_text() -> None:
    """Each wait the cycle reports carries its kind: capacity for no room or no node that could
    ever fit, quota, budget — what the backend's pod condition is chosen from."""
    snap = cluster().add("n1", gpus=2).snapshot()
    sched = load_profile({"teams": {"q": {"quota": {"*": 1}}}}).build()
    jobs = [
        job("fits").gpus(2).team("free").at(0).build(),
        job("full").gpus(1).team("free").at(1).build(),  # no room left after "fits"
        job("huge").gpus(8).team("free").at(2).build(),  # no node could ever hold it
        job("quota").gpus(2).team("q").at(3).build(),  # beyond its team's quota: never admitted (issue 23)
        job("budget").gpus(1).team("b").at(4).build(),
    ]
    limits = [CapacityLimit("budget 'b'", lambda j: j.team == "b", scope="team:b", max_gpus=0)]
    d = sched.cycle(ClusterState(snap, jobs, {}, limits=limits), 10.0)
    assert [p.job.id for p in d.placements] == ["fits"]
    kinds = {j: (d.waiting[j].code, d.waiting[j].kind) for j in ("full", "huge", "quota", "budget")}
    assert kinds == {
        "full": (Code.UNSCHEDULABLE, WaitKind.CAPACITY),
        "huge": (Code.UNRESOLVABLE, WaitKind.CAPACITY),
        "quota": (Code.UNRESOLVABLE, WaitKind.QUOTA),
        "budget": (Code.UNSCHEDULABLE, WaitKind.BUDGET),
    }
