"""The CostBudget / CostAttribution reconciler (:mod:`gpufleet.k8s.reconcile`) against the
Kubernetes test substrate (:mod:`tests.support.k8s`: real HTTP, the status subresource, resourceVersions)
and gpufleet's API on a SQLite store (:func:`tests.support.api_support.make_api`), both on one clock.

What is checked: a CostBudget becomes the gpufleet budget ``<namespace>.<name>`` with its scope,
limit, thresholds and action; its status shows the figures ``/v1/budgets/{name}/status`` shows
(spend, percent, projection, ok/warning/exceeded) in the fields ``kubectl get``'s printer columns
read; a generation bump updates the budget; a deleted CR deletes its budget, and only budgets the
reconciler made; an API budget of the same name is not adopted; a bad CR or a missing Secret gets
``Ready`` False without touching the budget; a CostAttribution's costs equal ``/v1/usage`` for
its filters and windows; nothing is written when nothing changed; one failing object or call never
stops the others, and a failed list deletes nothing.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from sqlalchemy import update

from gpufleet.k8s.crds import cost_attribution_crd, cost_budget_crd
from gpufleet.k8s.reconcile import OWNER_PREFIX, CrReconciler, ReconcileStats, merge_patch, owner_mark
from gpufleet.k8s.vocabulary import GPUFLEET_API, GPUFLEET_GROUP, GPUFLEET_VERSION
from gpufleet.store.models import JobRow
from gpufleet.store.repo import budgets as budgets_repo
from tests.k8s.test_k8s_manifests import schema_errors
from tests.support.api_support import T0, Api, make_api
from tests.support.budget_support import add_node, add_spend
from tests.support.k8s.apiserver import NAMESPACES, ResourceType
from tests.support.k8s.cluster import Cluster
from tests.support.serverproc import ServerProcess

DAY = 86400.0
HOUR = 3600.0
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)  # the substrate does not serve Secrets by default
TEAM_OF_NAMESPACE = {"alpha": "alpha", "beta": "beta"}  # namespace "nowhere" belongs to no team
Obj = dict[str, Any]


@dataclass
class World:
    cluster: Cluster
    api: Api
    custom: Any  # client.CustomObjectsApi (untyped)
    core: Any  # client.CoreV1Api
    rec: CrReconciler

    # -- the cluster's side ----------------------------------------------------------------------------

    def create(self, plural: str, namespace: str, name: str, spec: Obj) -> Obj:
        kind = {"costbudgets": "CostBudget", "costattributions": "CostAttribution"}[plural]
        body = {"apiVersion": GPUFLEET_API, "kind": kind, "metadata": {"name": name, "namespace": namespace}}
        obj: Obj = self.custom.create_namespaced_custom_object(
            GPUFLEET_GROUP, GPUFLEET_VERSION, namespace, plural, {**body, "spec": spec}
        )
        return obj

    def get(self, plural: str, namespace: str, name: str) -> Obj:
        obj: Obj = self.custom.get_namespaced_custom_object(GPUFLEET_GROUP, GPUFLEET_VERSION, namespace, plural, name)
        return obj

    def patch_spec(self, plural: str, namespace: str, name: str, spec: Obj) -> Obj:
        obj: Obj = self.custom.patch_namespaced_custom_object(
            GPUFLEET_GROUP,
            GPUFLEET_VERSION,
            namespace,
            plural,
            name,
            {"spec": spec},
            _content_type="application/merge-patch+json",
        )
        return obj

    def delete(self, plural: str, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GPUFLEET_GROUP, GPUFLEET_VERSION, namespace, plural, name)

    def secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        }
        try:
            self.core.read_namespaced_secret(name, namespace, _preload_content=False)
        except client.ApiException:
            self.core.create_namespaced_secret(namespace, body, _preload_content=False)
        else:
            self.core.replace_namespaced_secret(name, namespace, body, _preload_content=False)

    def inject(self, route: str, code: int, times: int | None = None) -> None:
        """Answer ``route`` (kmock's ``"<verb> <path>"``) with ``code``: the next ``times`` requests, or all."""

        first = [0]
        chosen: set[int] = set()

        def next_ones(request: Any) -> bool:
            # kmock's slices count from the first request ever, and it asks a criterion again about
            # past requests: take the first ``times`` matching requests after the injection, by id
            rid: int = request.id
            if rid < first[0]:
                return False
            if times is None or rid in chosen:
                return True
            if len(chosen) < times and rid > max(chosen, default=-1):
                chosen.add(rid)
                return True
            return False

        def react() -> None:
            first[0] = len(list(self.cluster.server))  # the requests so far
            _ = self.cluster.server[route][next_ones] << code

        self.cluster.call(react)

    # -- gpufleet's side -------------------------------------------------------------------------------

    def budget(self, name: str) -> Obj:
        r = self.api.client.get(f"/v1/budgets/{name}", headers=self.api.h("admin"))
        assert r.status_code == 200, r.text
        out: Obj = r.json()
        return out

    def budget_names(self) -> list[str]:
        r = self.api.client.get("/v1/budgets", headers=self.api.h("admin"))
        return [b["name"] for b in r.json()]

    def api_status(self, name: str) -> Obj:
        r = self.api.client.get(f"/v1/budgets/{name}/status", headers=self.api.h("admin"))
        assert r.status_code == 200, r.text
        out: Obj = r.json()
        return out

    def usage(self, window: str, **params: str) -> Decimal:
        r = self.api.client.get(
            "/v1/usage", params={"window": window, "aggregate": "gpu_model", **params}, headers=self.api.h("admin")
        )
        assert r.status_code == 200, r.text
        return sum((Decimal(row["total_cost_usd"]) for row in r.json()["rows"]), Decimal("0.00"))

    def reconcile(self) -> ReconcileStats:
        return self.rec.reconcile()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(tmp_path)


@pytest.fixture
def world(k8s_cluster: Cluster, k8s_api_client: client.ApiClient, api: Api) -> World:
    def setup() -> None:
        k8s_cluster.server.register(SECRETS)
        for ns in ("alpha", "beta", "nowhere"):
            k8s_cluster.server.create_object(NAMESPACES, None, {"metadata": {"name": ns}})

    k8s_cluster.call(setup)
    add_node(api.db, T0 - 60 * DAY)  # $8/h for 8 GPUs: $1 per GPU-hour
    rec = CrReconciler(api.db, k8s_api_client, team_of_namespace=TEAM_OF_NAMESPACE, rules=None, now=api.clock.now)
    return World(k8s_cluster, api, client.CustomObjectsApi(k8s_api_client), client.CoreV1Api(k8s_api_client), rec)


def condition(obj: Obj, type_: str) -> Obj:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def printer_columns(crd: Obj) -> list[Obj]:
    cols: list[Obj] = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    return cols


def column_value(obj: Obj, json_path: str) -> Any:
    value: Any = obj
    for part in json_path.lstrip(".").split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


JSON_TYPES = {"number": (int, float), "string": (str,), "boolean": (bool,), "integer": (int,), "date": (str,)}


def assert_printable(crd: Obj, obj: Obj) -> None:
    """What ``kubectl get`` shows: every ``.status`` printer column has a value of its type; and the
    status passes the CRD's schema."""
    for col in printer_columns(crd):
        if col["jsonPath"].startswith(".status."):
            value = column_value(obj, col["jsonPath"])
            assert isinstance(value, JSON_TYPES[col["type"]]), (col, value)
    assert schema_errors(crd, {k: v for k, v in obj.items() if k != "metadata"} | {"metadata": {}}) == []


TEAM_BUDGET: Obj = {
    "monthlyLimit": 100,
    "scope": {"teams": ["alpha"]},
    "alerts": [{"threshold": 50, "severity": "info"}, {"threshold": 80, "severity": "warning"}],
    "enforcement": {"action": "block"},
}


# -- CostBudget --------------------------------------------------------------------------------------------


def test_a_costbudget_is_a_gpufleet_budget_whose_status_matches_the_api(world: World) -> None:
    world.create("costbudgets", "alpha", "gpu-month", TEAM_BUDGET)
    stats = world.reconcile()
    assert (stats.budgets, stats.created, stats.status_writes, stats.api_errors, stats.errors) == (1, 1, 1, 0, 0)

    b = world.budget("alpha.gpu-month")  # one budget: the API shows it
    assert (b["scope"], b["team"], b["limit_usd"]) == ("team:alpha", "alpha", 100)
    assert (b["action"], b["period"], b["enabled"]) == ("block", "monthly", True)
    assert [(t["percent"], t["severity"]) for t in b["thresholds"]] == [(50, "info"), (80, "warning")]
    with world.api.db.session(readonly=True) as s:
        assert budgets_repo.get_budget(s, "alpha.gpu-month").created_by == owner_mark(
            world.get("costbudgets", "alpha", "gpu-month")["metadata"]["uid"]
        )

    cr = world.get("costbudgets", "alpha", "gpu-month")
    st = cr["status"]
    assert (st["observedGeneration"], st["budgetName"], st["budgetID"]) == (1, "alpha.gpu-month", b["id"])
    assert (st["currentSpend"], st["percentageUsed"], st["budgetStatus"]) == (0.0, 0.0, "ok")
    assert condition(cr, "Ready")["status"] == "True" and condition(cr, "Exceeded")["status"] == "False"

    # spend comes in: the CR shows what /v1/budgets/{name}/status shows, state by state
    end = T0 - 2 * DAY
    for usd, state in ((60.0, "ok"), (25.0, "warning"), (20.0, "exceeded")):
        end += 3 * HOUR
        add_spend(world.api.db, "alpha", usd, end)
        add_spend(world.api.db, "beta", 7.0, end + HOUR)  # another team's spend never counts
        end += HOUR
        assert world.reconcile().status_writes == 1
        cr = world.get("costbudgets", "alpha", "gpu-month")
        st, api = cr["status"], world.api_status("alpha.gpu-month")
        assert st["budgetStatus"] == state
        assert st["currentSpend"] == api["spend_usd"]
        assert st["percentageUsed"] == api["percent"]
        assert st["projectedMonthlySpend"] == api["projected_usd"]
        assert st["remaining"] == api["remaining_usd"]
        assert st["enforcementActive"] == api["enforcing"]
        assert st["periodStart"] == api["period_start"].replace("+00:00", "Z")
        assert_printable(cost_budget_crd(), cr)
    assert (st["currentSpend"], st["percentageUsed"]) == (105.0, 105.0)
    assert condition(cr, "Exceeded")["status"] == "True" and condition(cr, "Exceeded")["reason"] == "OverLimit"


def test_a_generation_bump_updates_the_budget_and_nothing_is_written_when_nothing_changed(world: World) -> None:
    world.create("costbudgets", "alpha", "gpu-month", TEAM_BUDGET)
    world.reconcile()
    with world.api.db.session(readonly=True) as s:
        first = budgets_repo.get_budget(s, "alpha.gpu-month").updated_at
    rv = world.get("costbudgets", "alpha", "gpu-month")["metadata"]["resourceVersion"]

    world.api.clock.advance(60.0)  # time alone moves only lastUpdated: no write
    stats = world.reconcile()
    assert (stats.updated, stats.status_writes, stats.status_unchanged) == (0, 0, 1)
    assert world.get("costbudgets", "alpha", "gpu-month")["metadata"]["resourceVersion"] == rv
    with world.api.db.session(readonly=True) as s:
        assert budgets_repo.get_budget(s, "alpha.gpu-month").updated_at == first

    cr = world.patch_spec(
        "costbudgets", "alpha", "gpu-month", {"monthlyLimit": 250, "enforcement": {"action": "alert"}}
    )
    assert cr["metadata"]["generation"] == 2
    stats = world.reconcile()
    assert (stats.created, stats.updated, stats.status_writes) == (0, 1, 1)
    b = world.budget("alpha.gpu-month")
    assert (b["limit_usd"], b["action"], b["scope"]) == (250, "alert", "team:alpha")
    st = world.get("costbudgets", "alpha", "gpu-month")["status"]
    assert st["observedGeneration"] == 2 and condition({"status": st}, "Ready")["observedGeneration"] == 2

    # a metadata-only change bumps nothing in gpufleet either
    world.custom.patch_namespaced_custom_object(
        GPUFLEET_GROUP, GPUFLEET_VERSION, "alpha", "costbudgets", "gpu-month", {"metadata": {"labels": {"x": "y"}}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    stats = world.reconcile()
    assert (stats.updated, stats.status_writes) == (0, 0)


@pytest.mark.parametrize(
    "spec",
    [
        {"monthlyLimit": 10},  # no scope: the CR's namespace
        {"monthlyLimit": 10, "scope": {"labels": {"app": "resnet"}}, "alerts": []},
        {"monthlyLimit": 10, "scope": {"experimentID": "e1"}, "timeZone": "Europe/Paris"},
        {
            "monthlyLimit": 10,
            "scope": {"namespaces": ["alpha"]},
            "enforcement": {"action": "throttle", "gracePeriodMinutes": 5, "throttle": {"maxGPUs": 2}},
        },
    ],
    ids=["namespace", "label-no-alerts", "experiment", "throttle"],
)
def test_a_second_pass_changes_nothing_whatever_the_spec(world: World, spec: Obj) -> None:
    """The stored budget reads back as what the CR says (no endless updates)."""
    world.create("costbudgets", "alpha", "b", spec)
    assert world.reconcile().created == 1
    stats = world.reconcile()
    assert (stats.updated, stats.created, stats.deleted, stats.status_writes, stats.invalid) == (0, 0, 0, 0, 0)


def test_a_deleted_costbudget_deletes_its_budget_and_only_owned_ones(world: World) -> None:
    r = world.api.client.post(
        "/v1/budgets",
        json={"name": "alpha.manual", "scope": "team:alpha", "limit_usd": 5, "team": "alpha"},
        headers=world.api.h("admin"),
    )
    assert r.status_code == 201, r.text
    world.create("costbudgets", "alpha", "gone", {"monthlyLimit": 10})
    world.create("costbudgets", "beta", "stays", {"monthlyLimit": 20})
    world.reconcile()
    assert world.budget_names() == ["alpha.gone", "alpha.manual", "beta.stays"]

    world.delete("costbudgets", "alpha", "gone")
    stats = world.reconcile()
    assert (stats.deleted, stats.budgets) == (1, 1)
    assert world.budget_names() == ["alpha.manual", "beta.stays"]  # the API budget is not the reconciler's

    # deleted and created again under the same name between two passes: a new budget (a new object)
    old_id = world.budget("beta.stays")["id"]
    world.delete("costbudgets", "beta", "stays")
    world.create("costbudgets", "beta", "stays", {"monthlyLimit": 30})
    stats = world.reconcile()
    assert (stats.deleted, stats.created) == (1, 1)
    new = world.budget("beta.stays")
    assert new["id"] != old_id and new["limit_usd"] == 30


def test_an_api_budget_of_the_same_name_is_not_adopted(world: World) -> None:
    r = world.api.client.post(
        "/v1/budgets",
        json={"name": "alpha.taken", "scope": "team:alpha", "limit_usd": 5, "team": "alpha", "action": "block"},
        headers=world.api.h("admin"),
    )
    assert r.status_code == 201, r.text
    world.create("costbudgets", "alpha", "taken", {"monthlyLimit": 1_000_000})
    stats = world.reconcile()
    assert (stats.conflicts, stats.created, stats.updated, stats.status_writes) == (1, 0, 0, 1)
    ready = condition(world.get("costbudgets", "alpha", "taken"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Conflict")
    assert "gpufleet budget delete alpha.taken" in ready["message"]
    assert (world.budget("alpha.taken")["limit_usd"], world.budget("alpha.taken")["action"]) == (5, "block")

    # the CR goes away: the API budget stays (it was never the reconciler's)
    world.delete("costbudgets", "alpha", "taken")
    world.reconcile()
    assert world.budget("alpha.taken")["limit_usd"] == 5

    # handed over: an admin deletes the API budget, the next pass makes the CR's
    world.create("costbudgets", "alpha", "taken", {"monthlyLimit": 50})
    world.reconcile()
    assert world.api.client.delete("/v1/budgets/alpha.taken", headers=world.api.h("admin")).status_code == 204
    stats = world.reconcile()
    assert stats.created == 1 and world.budget("alpha.taken")["limit_usd"] == 50
    assert condition(world.get("costbudgets", "alpha", "taken"), "Ready")["status"] == "True"


def test_a_bad_costbudget_gets_invalid_spec_and_its_budget_is_untouched(world: World) -> None:
    world.create("costbudgets", "alpha", "gpu-month", TEAM_BUDGET)
    world.create("costbudgets", "beta", "fine", {"monthlyLimit": 20})
    world.reconcile()
    add_spend(world.api.db, "alpha", 30.0, T0 - DAY)
    world.reconcile()
    before = world.budget("alpha.gpu-month")

    # the substrate, like a server without the CRD's schema, stores what the schema would refuse
    world.patch_spec("costbudgets", "alpha", "gpu-month", {"monthlyLimit": -5})
    world.create("costbudgets", "nowhere", "orphan", {"monthlyLimit": 10})  # a namespace of no team
    two_scopes = {"teams": ["beta"], "labels": {"a": "b"}}
    world.create("costbudgets", "beta", "two-scopes", {"monthlyLimit": 10, "scope": two_scopes})
    world.patch_spec("costbudgets", "beta", "fine", {"monthlyLimit": 25})
    stats = world.reconcile()
    assert (stats.invalid, stats.updated, stats.created, stats.deleted, stats.errors) == (3, 1, 0, 0, 0)

    cr = world.get("costbudgets", "alpha", "gpu-month")
    ready = condition(cr, "Ready")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("False", "InvalidSpec", 2)
    assert "spec.monthlyLimit" in ready["message"] and "CostBudget alpha/gpu-month" in ready["message"]
    assert "currentSpend" not in cr["status"]  # the figures of a budget the spec no longer says are dropped
    assert world.budget("alpha.gpu-month") == before  # the last good spec holds
    for ns, name, field in (("nowhere", "orphan", "metadata.namespace"), ("beta", "two-scopes", "spec.scope")):
        ready = condition(world.get("costbudgets", ns, name), "Ready")
        assert (ready["reason"], field in ready["message"]) == ("InvalidSpec", True), ready
    assert world.budget("beta.fine")["limit_usd"] == 25  # the others are reconciled all the same
    assert "nowhere.orphan" not in world.budget_names() and "beta.two-scopes" not in world.budget_names()

    # still bad: the same error status is not written again
    world.api.clock.advance(30.0)
    assert world.reconcile().status_writes == 0

    # fixed: Ready again, with the figures
    world.patch_spec("costbudgets", "alpha", "gpu-month", {"monthlyLimit": 60})
    stats = world.reconcile()
    assert stats.updated == 1
    st = world.get("costbudgets", "alpha", "gpu-month")["status"]
    assert (st["currentSpend"], st["percentageUsed"], st["observedGeneration"]) == (30.0, 50.0, 3)
    assert condition({"status": st}, "Ready")["status"] == "True"


def test_a_missing_secret_is_an_error_status_then_its_value_reaches_the_budget(world: World) -> None:
    pager = {"type": "pagerduty", "routingKeySecretRef": {"name": "pd", "key": "routing-key"}}
    world.create(
        "costbudgets", "alpha", "paged", {"monthlyLimit": 10, "alerts": [{"threshold": 90, "channels": [pager]}]}
    )
    stats = world.reconcile()
    assert (stats.invalid, stats.created, stats.errors) == (1, 0, 0)
    ready = condition(world.get("costbudgets", "alpha", "paged"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.alerts[0].channels[0].routingKeySecretRef" in ready["message"]
    assert "Secret 'pd'" in ready["message"] and "alpha.paged" not in world.budget_names()

    world.secret("beta", "pd", {"routing-key": "another-team"})  # only the CR's namespace counts
    assert world.reconcile().invalid == 1

    world.secret("alpha", "pd", {"other": "x"})  # the Secret, but not the key
    assert world.reconcile().invalid == 1

    world.secret("alpha", "pd", {"routing-key": "R0UTING-KEY-1"})
    stats = world.reconcile()
    assert (stats.created, stats.invalid) == (1, 0)
    assert condition(world.get("costbudgets", "alpha", "paged"), "Ready")["status"] == "True"
    with world.api.db.session(readonly=True) as s:
        channels = budgets_repo.budget_of(budgets_repo.get_budget(s, "alpha.paged")).channels
    assert [c["routing_key"] for c in channels] == ["R0UTING-KEY-1"]

    # a rotated Secret (the CR unchanged, same generation) reaches the budget
    world.secret("alpha", "pd", {"routing-key": "R0UTING-KEY-2"})
    assert world.reconcile().updated == 1
    with world.api.db.session(readonly=True) as s:
        channels = budgets_repo.budget_of(budgets_repo.get_budget(s, "alpha.paged")).channels
    assert [c["routing_key"] for c in channels] == ["R0UTING-KEY-2"]


def test_api_failures_are_counted_and_never_stop_the_rest(world: World) -> None:
    world.create("costbudgets", "alpha", "a", {"monthlyLimit": 10})
    world.create("costbudgets", "beta", "b", {"monthlyLimit": 20})
    world.inject(f"patch /apis/{GPUFLEET_GROUP}/{GPUFLEET_VERSION}/namespaces/alpha/costbudgets/a/status", 500, times=1)
    stats = world.reconcile()
    assert (stats.created, stats.api_errors, stats.status_writes) == (2, 1, 1)
    assert "status" not in world.get("costbudgets", "alpha", "a")
    assert world.get("costbudgets", "beta", "b")["status"]["budgetStatus"] == "ok"
    stats = world.reconcile()  # the next pass writes it
    assert (stats.api_errors, stats.status_writes) == (0, 1)
    assert world.get("costbudgets", "alpha", "a")["status"]["budgetStatus"] == "ok"

    # a failed list deletes nothing (every CR would look gone)
    world.inject(f"get /apis/{GPUFLEET_GROUP}/{GPUFLEET_VERSION}/costbudgets", 500, times=1)
    stats = world.reconcile()
    assert (stats.api_errors, stats.deleted, stats.budgets) == (1, 0, 0)
    assert world.budget_names() == ["alpha.a", "beta.b"]
    # the CRD not installed (404): skipped quietly, nothing deleted either
    world.inject(f"get /apis/{GPUFLEET_GROUP}/{GPUFLEET_VERSION}/costbudgets", 404, times=1)
    stats = world.reconcile()
    assert (stats.api_errors, stats.deleted, stats.budgets) == (0, 0, 0)
    assert world.budget_names() == ["alpha.a", "beta.b"]

    # a Secret that cannot be read (403): an error status that keeps the last figures, no budget change
    pager = {"type": "pagerduty", "routingKeySecretRef": {"name": "pd", "key": "k"}}
    world.patch_spec("costbudgets", "alpha", "a", {"alerts": [{"threshold": 90, "channels": [pager]}]})
    world.inject("get /api/v1/namespaces/alpha/secrets/pd", 403)
    stats = world.reconcile()
    assert (stats.api_errors, stats.updated, stats.invalid) == (1, 0, 0)
    st = world.get("costbudgets", "alpha", "a")["status"]
    assert condition({"status": st}, "Ready")["reason"] == "BackendError"
    assert st["currentSpend"] == 0.0  # the last known figures stay
    assert world.budget("alpha.a")["channels"] == []


# -- CostAttribution ---------------------------------------------------------------------------------------


def test_costattribution_status_equals_the_usage_report_for_its_filters(world: World) -> None:
    db = world.api.db
    cc42 = {"cost-center": "42"}
    add_spend(db, "alpha", 16.0, T0 - 15 * DAY, labels=cc42)  # in the 30 days, before this month
    add_spend(db, "alpha", 8.0, T0 - 3 * DAY, labels=cc42)  # this month, not today
    add_spend(db, "alpha", 6.0, T0 - 5 * HOUR, labels=cc42)  # the last day
    add_spend(db, "alpha", 4.0, T0 - 20 * 60, labels=cc42)  # the last hour
    add_spend(db, "alpha", 5.0, T0 - 2 * DAY, labels={"cost-center": "7"})  # another cost center
    add_spend(db, "beta", 9.0, T0 - 1 * DAY, labels=cc42)  # another team
    world.create("costattributions", "alpha", "cc42", {"costCenter": "42"})
    world.create("costattributions", "alpha", "all", {})
    world.create("costattributions", "beta", "wrong-team", {"team": "alpha"})  # beta's namespace, alpha's costs

    # two running jobs of alpha with the label, one without: active pods and GPUs
    ids = [
        world.api.submit("alice", gpus=2, labels=cc42)["id"],
        world.api.submit("alice", gpu_milli=500, labels=cc42)["id"],
        world.api.submit("alice", gpus=4)["id"],
    ]
    with db.session() as s:
        s.execute(update(JobRow).where(JobRow.id.in_(ids)).values(state="RUNNING"))

    stats = world.reconcile()
    assert (stats.attributions, stats.status_writes, stats.invalid, stats.errors) == (3, 3, 1, 0)
    cr = world.get("costattributions", "alpha", "cc42")
    st = cr["status"]
    usage = {w: world.usage(w, team="alpha", label="cost-center=42") for w in ("30d", "24h", "1h", "month")}
    assert st["totalCost"] == float(usage["30d"]) == 34.0
    assert st["dailyCost"] == float(usage["24h"]) == 10.0
    assert st["hourlyCost"] == float(usage["1h"]) == 4.0
    assert st["monthlyCost"] == float(usage["month"]) == 18.0
    assert (st["team"], st["activePods"], st["activeGPUs"]) == ("alpha", 2, 2.5)
    assert st["gpuHours"] == 34.0 and st["costPerGPUHour"] == 1.0
    assert st["breakdown"]["byGPUModel"] == [{"gpuModel": "A100-80GB", "cost": 34.0, "gpuHours": 34.0}]
    assert condition(cr, "Ready")["status"] == "True"
    assert_printable(cost_attribution_crd(), cr)

    whole = world.get("costattributions", "alpha", "all")["status"]
    assert whole["totalCost"] == float(world.usage("30d", team="alpha")) == 39.0
    assert (whole["activePods"], whole["activeGPUs"]) == (3, 6.5)

    ready = condition(world.get("costattributions", "beta", "wrong-team"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec") and "spec.team" in ready["message"]

    # the clock alone (windowStart, lastUpdated): nothing written; new spend: written
    rvs = {n: world.get("costattributions", "alpha", n)["metadata"]["resourceVersion"] for n in ("cc42", "all")}
    world.api.clock.advance(1.0)
    stats = world.reconcile()
    assert (stats.status_writes, stats.status_unchanged) == (0, 3)
    assert {n: world.get("costattributions", "alpha", n)["metadata"]["resourceVersion"] for n in rvs} == rvs
    add_spend(db, "alpha", 1.0, T0 - 10 * 60, labels={"cost-center": "7"})  # only "all" covers it
    stats = world.reconcile()
    assert stats.status_writes == 1
    assert world.get("costattributions", "alpha", "cc42")["metadata"]["resourceVersion"] == rvs["cc42"]
    assert world.get("costattributions", "alpha", "all")["status"]["totalCost"] == 40.0


def test_costattribution_selects_by_namespace_project_and_labels(world: World) -> None:
    db = world.api.db
    add_spend(db, "alpha", 12.0, T0 - 2 * DAY, project="resnet")
    add_spend(db, "alpha", 3.0, T0 - 1 * DAY, project="bert")
    world.create("costattributions", "alpha", "resnet", {"project": "resnet", "namespace": "default"})
    world.create("costattributions", "alpha", "elsewhere", {"namespace": "alpha"})  # no job ran there
    world.reconcile()
    st = world.get("costattributions", "alpha", "resnet")["status"]
    assert st["totalCost"] == 12.0 and st["monthlyCost"] == 12.0
    assert world.get("costattributions", "alpha", "elsewhere")["status"]["totalCost"] == 0.0


# -- the parts ---------------------------------------------------------------------------------------------


def test_merge_patch_is_the_rfc7386_difference() -> None:
    old = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2], "gone": True}
    new = {"a": 1, "b": {"c": 2, "d": 4, "f": 5}, "e": [1]}
    assert merge_patch(old, new) == {"b": {"d": 4, "f": 5}, "e": [1], "gone": None}
    assert merge_patch(new, new) == {}


def test_owner_mark_fits_the_created_by_column() -> None:
    mark = owner_mark("7b0b5f0e-5b7a-4a5e-9c1e-0d1f2e3a4b5c")
    assert mark.startswith(OWNER_PREFIX) and len(mark) == 32 and "-" not in mark


# -- wired into the server ------------------------------------------------------------------------------


@pytest.mark.slow
def test_gpufleet_up_reconciles_costbudgets_on_the_leader(
    tmp_path: Path, k8s_cluster_factory: Callable[..., Cluster]
) -> None:
    """``gpufleet up --backend kubernetes``: the leader's periodic duty makes the budget and writes the status."""
    cluster = k8s_cluster_factory(kubelet=None)
    api_client = cluster.api_client()
    core: Any = client.CoreV1Api(api_client)
    custom: Any = client.CustomObjectsApi(api_client)
    for ns in ("alpha", "gpufleet-system"):
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "t", "cluster": {"server": cluster.url, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "test"}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
                "current-context": "t",
            }
        )
    )
    server = ServerProcess(
        tmp_path / "server",
        gpus=None,
        settings={
            "backend": "kubernetes",
            "kubernetes": {"kubeconfig": str(kubeconfig), "lease_duration_s": 4.0},
            "budget_interval_s": 0.5,
            "node_price_usd_per_hour": None,
        },
    ).start()
    try:
        with server.client() as sdk:
            sdk.set_team("alpha")
            custom.create_namespaced_custom_object(
                GPUFLEET_GROUP,
                GPUFLEET_VERSION,
                "alpha",
                "costbudgets",
                {
                    "apiVersion": GPUFLEET_API,
                    "kind": "CostBudget",
                    "metadata": {"name": "gpu-month", "namespace": "alpha"},
                    "spec": {"monthlyLimit": 100, "enforcement": {"action": "block"}},
                },
            )
            deadline = time.monotonic() + 30.0
            status: Obj = {}
            while time.monotonic() < deadline and "budgetStatus" not in status:
                time.sleep(0.2)
                cr = custom.get_namespaced_custom_object(
                    GPUFLEET_GROUP, GPUFLEET_VERSION, "alpha", "costbudgets", "gpu-month"
                )
                status = cr.get("status") or {}
            assert status.get("budgetStatus") == "ok", (status, server.server_log()[-3000:])
            b = sdk.budget("alpha.gpu-month")
            assert (b.scope, b.limit_usd, b.action, b.team) == ("namespace:alpha", 100, "block", "alpha")
            assert status["budgetID"] == b.id and status["currentSpend"] == sdk.budget_status(b.id).spend_usd
    finally:
        server.stop()
        api_client.close()  # type: ignore[no-untyped-call]
