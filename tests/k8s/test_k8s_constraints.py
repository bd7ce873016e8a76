"""Issue 22, observation 7: placement honours node selectors, required node affinity and taints.

Real GPU pods carry them (Kueue's flavors inject a ``nodeSelector`` and tolerations, GKE's pods select
``cloud.google.com/gke-accelerator``, GPU nodes are tainted). gpufleet binds pods itself, so it must
do the scheduler's part: a pod bound to a node its affinity does not match is rejected by the kubelet
(``NodeAffinity``, a failed run), and one bound past a ``NoSchedule`` taint breaks what the taint was
for (the kubelet only checks ``NoExecute``).

- the node reader: a taint that is not the node's lifecycle speaking (``node.kubernetes.io/*``,
  Karpenter's unregistered, the interruption notices) no longer makes the node unusable: it is a
  ``Node.taints`` entry that keeps off the jobs not tolerating it; the taints gpufleet's own pods
  tolerate (``nvidia.com/gpu``, AKS's ``sku``...) are not kept;
- pods: a pod's ``nodeSelector``, required node affinity and tolerations are its facts' constraints,
  and an adopted job's; gpufleet's own Job writes a job's constraints into its pod template;
- the store keeps both (``jobs.constraints``, ``nodes.taints``, migration 0013);
- on the substrate: adopted pods wait rather than go where their kubelet would refuse them, and run
  where their constraints allow; the kubelet agrees with every placement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import InputError
from gpufleet.k8s.adapter.nodes import DEFAULT_TOLERATED_TAINTS, node_info, unschedulable_reason
from gpufleet.k8s.adapter.objects import batch_job
from gpufleet.k8s.adapter.pods import pod_facts
from gpufleet.model.constraints import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    node_constraints,
)
from gpufleet.model.job import GpuRequest
from gpufleet.model.node import Node
from gpufleet.model.submission import submission
from gpufleet.store import repo
from gpufleet.store.convert import job_spec_from_row, node_from_row
from gpufleet.store.db import Database
from tests.support.k8s.admission import admit
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.kubelet import KubeletConfig, gpu_node
from tests.support.k8s.placefleet import PlaceFleet

NS, NE, PNS = TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE, TaintEffect.PREFER_NO_SCHEDULE
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
ML_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
ML_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
L4_AFFINITY = {
    "nodeAffinity": {
        REQUIRED: {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-l4"]}
                    ]
                }
            ]
        }
    }
}

# -- the node reader: taints ---------------------------------------------------------------------------
TAINTS = [
    # name, the Node's taints, schedulable, Node.taints
    ("untainted", [], True, ()),
    ("the GPU taint every gpufleet pod tolerates", [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], True, ()),
    ("AKS's GPU taint", [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}], True, ()),
    ("a team's taint: kept, not a reason", [ML_TAINT], True, (Taint("dedicated", "ml", NS),)),
    ("NoExecute", [{"key": "maintenance", "effect": "NoExecute"}], True, (Taint("maintenance", "", NE),)),
    (
        "PreferNoSchedule is no constraint",
        [{"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"}],
        True,
        (),
    ),
    ("not ready (lifecycle)", [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}], False, ()),
    ("cordoned (lifecycle)", [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}], False, ()),
    (
        "uninitialized (lifecycle)",
        [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}],
        False,
        (),
    ),
    ("Karpenter has not registered it", [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}], False, ()),
    ("Karpenter is disrupting it", [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}], False, ()),
]


@pytest.mark.parametrize(("name", "taints", "schedulable", "kept"), TAINTS, ids=[t[0] for t in TAINTS])
def test_node_taints(name: str, taints: list[dict[str, str]], schedulable: bool, kept: tuple[Taint, ...]) -> None:
    obj = gpu_node("n", taints=taints)
    info = node_info(obj)
    assert info is not None
    assert info.schedulable is schedulable, unschedulable_reason(obj)
    assert info.node.taints == kept


def test_a_malformed_taint_names_the_field() -> None:
    with pytest.raises(InputError) as e:
        node_info(gpu_node("n", taints=[ML_TAINT, {"key": "x", "effect": "Sometimes"}]))
    assert e.value.field == "spec.taints[1].effect" and e.value.source == "node n"


# -- pods: their constraints, and the ones gpufleet writes ----------------------------------------------


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}], **spec},
    }


def test_a_pods_constraints_are_its_facts() -> None:
    facts = pod_facts(_pod(nodeSelector={"pool": "a"}, affinity=L4_AFFINITY, tolerations=[ML_TOLERATION]))
    c = facts.constraints
    assert c.node_selector == (("pool", "a"),)
    assert c.required_terms == (
        NodeSelectorTerm(
            (NodeSelectorRequirement("cloud.google.com/gke-accelerator", SelectorOperator.IN, ("nvidia-l4",)),)
        ),
    )
    assert c.tolerations == (Toleration("dedicated", TolerationOperator.EQUAL, "ml", NS),)


def test_a_pods_bad_affinity_names_the_pod_and_field() -> None:
    bad = {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]}}
    }
    with pytest.raises(InputError) as e:
        pod_facts(_pod(affinity=bad))
    assert e.value.source == "pod ml/p"
    assert e.value.field == f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].operator"


def test_gpufleets_job_writes_the_constraints_and_the_kubelet_agrees() -> None:
    """The pod template carries the job's selector, affinity and tolerations (after gpufleet's own),
    so the kubelet's NodeAffinity check passes where placement put it and fails elsewhere."""
    c = node_constraints(
        {"pool": "a"},
        [NodeSelectorTerm((NodeSelectorRequirement("zone", SelectorOperator.IN, ("b",)),))],
        [Toleration("maintenance", TolerationOperator.EXISTS, effect=NE)],
    )
    job = batch_job("j-1", 1, namespace="ml", image="x", command=["run"], gpu=GpuRequest(1), constraints=c)
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "a"}
    assert spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    ]
    assert spec["tolerations"][: len(DEFAULT_TOLERATED_TAINTS)] == [
        {"key": k, "operator": "Exists"} for k in sorted(DEFAULT_TOLERATED_TAINTS)
    ]
    assert spec["tolerations"][-1] == {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}
    pod = {"spec": spec}
    good = gpu_node("good", labels={"pool": "a", "zone": "b"}, taints=[{"key": "maintenance", "effect": "NoExecute"}])
    assert admit(pod, good, []).admit
    assert admit(pod, gpu_node("other-zone", labels={"pool": "a", "zone": "c"}), []).reason == "NodeAffinity"
    plain = batch_job("j-2", 1, namespace="ml", image="x", command=["run"], gpu=GpuRequest(1))["spec"]["template"]
    assert "nodeSelector" not in plain["spec"] and "affinity" not in plain["spec"]


# -- the store ------------------------------------------------------------------------------------------------


def test_constraints_and_taints_round_trip_through_the_store(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'store.db'}")
    db.upgrade()
    c = node_constraints({"pool": "a"}, tolerations=[Toleration("dedicated", TolerationOperator.EQUAL, "ml", NS)])
    node = Node("n1", "L4", 1, labels={"pool": "a"}, taints=(Taint("dedicated", "ml", NS), Taint("x", "", NE)))
    try:
        with db.session() as s:
            row, _ = repo.submit_job(
                s,
                submission("placed", ["run"], gpu=GpuRequest(1), constraints=c).fields(),
                team="t",
                submitted_by=None,
                idempotency_key=None,
                request_sha256=None,
                now=1.0,
            )
            plain, _ = repo.submit_job(
                s, submission("free", ["run"]).fields(), team="t", submitted_by=None, idempotency_key=None,
                request_sha256=None, now=1.0,
            )  # fmt: skip
            ids = (row.id, plain.id)
            repo.upsert_node(s, node, hourly_usd=1.0, now=1.0)
            repo.upsert_node(s, Node("n2", "L4", 1), hourly_usd=1.0, now=1.0)
        with db.session(readonly=True) as s:
            assert job_spec_from_row(repo.get_job(s, ids[0])).constraints == c
            assert not job_spec_from_row(repo.get_job(s, ids[1])).constraints
            assert repo.get_job(s, ids[1]).constraints is None  # NULL: none
            nodes = {r.name: node_from_row(r) for r in repo.list_nodes(s)}
        assert nodes["n1"].taints == node.taints and nodes["n2"].taints == ()
    finally:
        db.dispose()


def test_migration_0013_adds_the_columns_and_goes_back(empty_db_url: str) -> None:
    import sqlalchemy as sa
    from alembic import command

    db = Database(empty_db_url)
    try:
        db.upgrade("0012")
        db.upgrade()
        db.check_schema()
        with db.engine.connect() as conn:
            cols = {c["name"] for c in sa.inspect(conn).get_columns("jobs")}
            assert "constraints" in cols
            assert "taints" in {c["name"] for c in sa.inspect(conn).get_columns("nodes")}
        with db.engine.connect() as conn, conn.begin():
            command.downgrade(db._alembic_config(conn), "0012")
        with db.engine.connect() as conn:
            assert "constraints" not in {c["name"] for c in sa.inspect(conn).get_columns("jobs")}
            assert "taints" not in {c["name"] for c in sa.inspect(conn).get_columns("nodes")}
        db.upgrade()
        db.check_schema()
    finally:
        db.dispose()


# -- on the substrate -------------------------------------------------------------------------------------------


@pytest.fixture
def fleet(k8s_cluster_factory: Callable[..., Cluster], tmp_path: Path) -> Iterator[PlaceFleet]:
    cluster = k8s_cluster_factory(kubelet=KubeletConfig(default_duration_s=None, checkpoint_s=0.1))
    f = PlaceFleet(cluster, tmp_path)
    try:
        yield f
    finally:
        f.close()


def _pod_named(f: PlaceFleet, name: str) -> dict[str, Any]:
    return next(p for p in f.pods() if p["metadata"]["name"] == name)


def _phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase") or "Pending")


L4: dict[str, Any] = {"product": "NVIDIA-L4", "gpu_memory_mib": 23034, "instance_type": "g6.12xlarge", "gpu_count": 1}


def test_adopted_pods_keep_their_constraints(fleet: PlaceFleet) -> None:
    """A Kueue-admitted pod (its flavor's nodeSelector and toleration) selecting L4s by GKE's label
    waits while the only free node is an A100 of another pool (the kubelet would refuse it there:
    NodeAffinity, a failed run); when its L4 node joins, tainted for its team, it runs there. A pod
    with the same selector but no toleration stays off that node."""
    fleet.cluster.add_gpu_node("a100", gpu_count=1, labels={"pool": "general"})
    fleet.start()
    fleet.create_pod(
        "kueue-job",
        {"nvidia.com/gpu": "1"},
        nodeSelector={"pool": "ml"},
        affinity=L4_AFFINITY,
        tolerations=[ML_TOLERATION],
    )
    fleet.create_pod("no-toleration", {"nvidia.com/gpu": "1"}, nodeSelector={"pool": "ml"})
    fleet.wait_for(lambda: len(fleet.rows()) == 2, "both pods adopted")
    fleet.settle(2.0)
    assert all(p["spec"].get("nodeName") is None for p in fleet.pods()), "bound where its constraints do not allow"
    assert {r.state for r in fleet.rows().values()} == {"PENDING"}
    (row,) = [r for r in fleet.rows().values() if "kueue-job" in r.name]
    spec = job_spec_from_row(row)  # the store kept the pod's constraints
    assert spec.constraints.node_selector == (("pool", "ml"),)
    # its own toleration, and the two the API server's DefaultTolerationSeconds added (not-ready, unreachable)
    assert Toleration("dedicated", TolerationOperator.EQUAL, "ml", NS) in spec.constraints.tolerations

    fleet.cluster.add_gpu_node(
        "l4", labels={"pool": "ml", "cloud.google.com/gke-accelerator": "nvidia-l4"}, taints=[ML_TAINT], **L4
    )
    fleet.wait_for(lambda: _phase(_pod_named(fleet, "kueue-job")) == "Running", "the pod running on its L4")
    assert _pod_named(fleet, "kueue-job")["spec"]["nodeName"] == "l4"
    fleet.settle(1.5)
    assert _pod_named(fleet, "no-toleration")["spec"].get("nodeName") is None  # the taint keeps it off
    kubelet = fleet.cluster.kubelet
    assert kubelet is not None and kubelet.rejected == []


def test_a_job_waits_rather_than_fail_where_its_affinity_does_not_match(fleet: PlaceFleet) -> None:
    """Required node affinity alone (no selector): the A100 node does not match, the pod waits."""
    fleet.cluster.add_gpu_node("a100", gpu_count=1)
    fleet.start()
    fleet.create_pod("gke-pod", {"nvidia.com/gpu": "1"}, affinity=L4_AFFINITY)
    fleet.wait_for(lambda: len(fleet.rows()) == 1, "the pod adopted")
    fleet.settle(2.0)
    assert _pod_named(fleet, "gke-pod")["spec"].get("nodeName") is None
    assert [r.state for r in fleet.rows().values()] == ["PENDING"]
    fleet.cluster.add_gpu_node("l4", labels={"cloud.google.com/gke-accelerator": "nvidia-l4"}, **L4)
    fleet.wait_for(lambda: _phase(_pod_named(fleet, "gke-pod")) == "Running", "the pod running on the L4")
    kubelet = fleet.cluster.kubelet
    assert kubelet is not None and kubelet.rejected == []


def test_a_tainted_node_serves_the_jobs_that_tolerate_it(fleet: PlaceFleet) -> None:
    """A node with a team's taint is no longer left unused: a job of gpufleet's own (no toleration)
    does not land there, an adopted pod tolerating the taint does."""
    fleet.cluster.add_gpu_node("reserved", gpu_count=1, taints=[ML_TAINT])
    fleet.start()
    own = fleet.submit("own", gpus=1)
    fleet.create_pod("tolerant", {"nvidia.com/gpu": "1"}, tolerations=[ML_TOLERATION])
    fleet.wait_for(lambda: _phase(_pod_named(fleet, "tolerant")) == "Running", "the tolerant pod running")
    assert _pod_named(fleet, "tolerant")["spec"]["nodeName"] == "reserved"
    assert fleet.rows()[own].state == "PENDING"


def test_an_adopted_pod_gpufleet_binds_is_protected_from_consolidation(fleet: PlaceFleet) -> None:
    """gpufleet's own Jobs carry ``karpenter.sh/do-not-disrupt``; a pod it adopts (made by someone
    else's controller) did not, so Karpenter's consolidation could take the node from under it. The
    adopter marks it when it claims the pod for a run."""
    from tests.support.k8s import karpenter

    fleet.cluster.add_gpu_node("a100", gpu_count=1)
    fleet.start()
    fleet.create_pod("served", {"nvidia.com/gpu": "1"})
    fleet.wait_for(lambda: _phase(_pod_named(fleet, "served")) == "Running", "the adopted pod running")
    pod = _pod_named(fleet, "served")
    assert karpenter.node_disruption_blocked([pod], time.time()) == (
        f'pod {fleet.team}/served has "karpenter.sh/do-not-disrupt" annotation'
    )
