"""Issue 21: adoption submits through the API's own path (:func:`gpufleet.services.jobs.adopt`).

What adoption used to skip and now shares with ``POST /v1/jobs``: a ``block`` budget and a project
another team owns refuse the workload (its pods wait unadopted, and are adopted at a later pass once
the budget lets them in); the pod's cost limit is the job's own budget. What it keeps of its own,
each pinned here: a workload no node could ever hold is adopted (the API refuses it), its pods'
priority class is taken whatever the team was granted (the webhook judges that at the door), and it
runs as its pods say (no ``run_as``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpufleet.cost.budgets.model import make_budget
from gpufleet.errors import InputError, PermissionDeniedError
from gpufleet.k8s.adopt import PodAdopter
from gpufleet.model.job import GpuRequest
from gpufleet.model.node import Node
from gpufleet.model.submission import submission
from gpufleet.services import jobs as jobs_service
from gpufleet.services.owners import PriorityNotAllowedError, submit_owner
from gpufleet.services.submit import check_fits_store
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.wire import Role
from tests.support.k8s.cluster import Cluster

NS = "vision"


def _pod(name: str, gpus: int, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpufleet",
        "restartPolicy": "Never",
        "containers": [
            {"name": "main", "image": "acme/train:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        ],
    }
    if "priority_class" in meta:
        spec["priorityClassName"] = meta.pop("priority_class")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, **meta}, "spec": spec}


@pytest.fixture
def world(k8s_cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Any, Database, PodAdopter]]:
    api = k8s_cluster.api_client()
    core: Any = client.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    k8s_cluster.add_gpu_node("a100", gpu_count=8)
    db = Database(f"sqlite:///{tmp_path / 'store.db'}")
    db.upgrade()
    now = time.time()
    with db.session() as s:
        repo.upsert_team(s, NS, now=now)
        repo.upsert_team(s, "other", now=now)
        # the store knows the node (an estimate prices a GPU-hour at $4, and a fit is judged against it)
        repo.upsert_node(s, Node("a100", "A100-80GB", 8, 64000, 512000), hourly_usd=32.0, now=now)
    yield core, db, PodAdopter(db, api)
    db.dispose()
    api.close()  # type: ignore[no-untyped-call]


def _jobs(db: Database) -> list[JobRow]:
    with db.session(readonly=True) as s:
        return list(s.query(JobRow).all())


def test_a_block_budget_keeps_a_workload_waiting_until_it_lets_it_in(world: tuple[Any, Database, PodAdopter]) -> None:
    """The API's block check: 2 GPUs for an hour (no estimate: one hour) at $4 a GPU-hour is $8, over
    a $5 block budget: the pod is not adopted (nor labelled); once the limit is raised, the next pass
    adopts it."""
    core, db, adopter = world
    with db.session() as s:
        budgets_repo.create_budget(
            s,
            make_budget(id="b1", name="vision-cap", scope=f"team:{NS}", limit_usd=5.0, action="block"),
            created_by=None,
            now=time.time(),
        )
    core.create_namespaced_pod(NS, _pod("big", 2))
    stats = adopter.adopt()
    assert (stats.adopted, stats.labelled, stats.skipped) == (0, 0, 1)
    assert _jobs(db) == []
    with db.session() as s:
        budgets_repo.update_budget(
            s,
            "b1",
            make_budget(id="b1", name="vision-cap", scope=f"team:{NS}", limit_usd=50.0, action="block"),
            time.time(),
        )
    stats = adopter.adopt()
    assert (stats.adopted, stats.labelled) == (1, 1)
    (row,) = _jobs(db)
    assert row.gpus == 2 and row.team == NS


def test_a_project_another_team_owns_is_refused(world: tuple[Any, Database, PodAdopter]) -> None:
    core, db, adopter = world
    with db.session() as s:
        budgets_repo.create_budget(
            s,
            make_budget(id="b2", name="theirs", scope="project:secret", team="other", limit_usd=100.0),
            created_by=None,
            now=time.time(),
        )
    core.create_namespaced_pod(NS, _pod("sneaky", 1, labels={"project": "secret"}))
    assert adopter.adopt().adopted == 0
    assert _jobs(db) == []


def test_the_pods_cost_limit_is_the_jobs_own_budget(world: tuple[Any, Database, PodAdopter]) -> None:
    core, db, adopter = world
    core.create_namespaced_pod(NS, _pod("capped", 1, annotations={"gpufleet.io/cost-limit": "12.5"}))
    assert adopter.adopt().adopted == 1
    (row,) = _jobs(db)
    assert row.budget_usd == 12.5


def test_kept_a_workload_no_node_could_hold_is_adopted(world: tuple[Any, Database, PodAdopter]) -> None:
    """Kept: the API refuses (422) a job no node could ever hold; adoption queues it (the pods exist;
    the queue says why it waits)."""
    core, db, adopter = world
    core.create_namespaced_pod(NS, _pod("huge", 16))
    assert adopter.adopt().adopted == 1
    (row,) = _jobs(db)
    assert row.gpus == 16
    with db.session(readonly=True) as s, pytest.raises(InputError):  # the API's submit: refused
        check_fits_store(s, submission("huge", ["x"], gpu=GpuRequest(16)))


def test_kept_the_pods_priority_class_whatever_the_team_was_granted(world: tuple[Any, Database, PodAdopter]) -> None:
    """Kept: a member's submit with a class its team was not granted is refused (403); an adopted
    pod keeps its class (the webhook judges the grant when the pod is created)."""
    core, db, adopter = world
    with db.session() as s:
        team = repo.find_team(s, NS)
        assert team is not None
        team.priority_classes = ["low", "normal"]
    core.create_namespaced_pod(NS, _pod("vip", 1, priority_class="gpufleet-urgent"))
    assert adopter.adopt().adopted == 1
    (row,) = _jobs(db)
    assert row.priority_class == "urgent"
    with db.session() as s, pytest.raises(PriorityNotAllowedError):
        submit_owner(
            s, team=NS, priority="urgent", token_id=None, role=Role.MEMBER, run_as_required=False, single_team=False
        )


def test_kept_it_runs_as_its_pods_say(world: tuple[Any, Database, PodAdopter]) -> None:
    """Kept: an API submit runs as the team's account (and a server may require one); an adopted
    workload runs as its pods' own spec says: no ``run_as``."""
    core, db, adopter = world
    with db.session() as s:
        team = repo.find_team(s, NS)
        assert team is not None
        team.run_as = "nobody"
    core.create_namespaced_pod(NS, _pod("mine", 1))
    assert adopter.adopt().adopted == 1
    (row,) = _jobs(db)
    assert row.run_as is None


def test_the_refusals_are_the_apis_and_a_replay_is_not_checked_again(
    world: tuple[Any, Database, PodAdopter],
) -> None:
    """Adoption's refusal for a project another team owns is the API's own (a 403 there); a replay of
    an adopted owner (its idempotency key) is answered with the first job, never checked again —
    not even by a block budget created meanwhile."""
    _, db, _ = world
    now = time.time()
    with db.session() as s:
        budgets_repo.create_budget(
            s,
            make_budget(id="b3", name="theirs", scope="project:secret", team="other", limit_usd=100.0),
            created_by=None,
            now=now,
        )
    with db.session() as s, pytest.raises(PermissionDeniedError):
        jobs_service.adopt(
            s, submission("x", ["x"], project="secret", namespace=NS), team=NS, idempotency_key="k", now=now
        )
    sub = submission("y", ["y"], namespace=NS, gpu=GpuRequest(2))
    with db.session() as s:
        first, created = jobs_service.adopt(s, sub, team=NS, idempotency_key="k8s-owner:1", now=now)
        assert created
    with db.session() as s:
        budgets_repo.create_budget(
            s,
            make_budget(id="b4", name="cap", scope=f"team:{NS}", limit_usd=1.0, action="block"),
            created_by=None,
            now=now,
        )
    with db.session() as s:
        again, created = jobs_service.adopt(s, sub, team=NS, idempotency_key="k8s-owner:1", now=now + 1)
        assert (again.id, created) == (first.id, False)
