"""Proposals (issue 14): an agent proposes an action, a person approves it, the action is executed
through the service functions the API uses, and its real effect on cost is measured afterwards.

Scenario table over every action (propose → approve → executed, the effect visible where the
endpoints show it), decisions that change nothing (pending, rejected — the store's tables compared
row for row), who may decide (never the proposer; the permission of the endpoint that does the
action by hand), bad params (422 naming the field), failures at execution (nothing half-done), the
measured effect from the ledger (fixed clock, exact figures), the SDK twins and the CLI.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gpufleet.backends.base import GpuSample
from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli import render
from gpufleet.cli.main import app as cli_app
from gpufleet.cost.roi import HOURS_PER_MONTH
from gpufleet.sdk import Client
from gpufleet.sdk.client import AsyncClient
from gpufleet.sdk.errors import Forbidden
from gpufleet.services import proposals as service
from gpufleet.store import repo
from gpufleet.store.models import (
    Base,
    BudgetRow,
    JobEventRow,
    JobRow,
    ProposalRow,
    QuotaRow,
    RunRow,
    Team,
)
from tests.support.api_support import T0, Api, fields, make_api, problem
from tests.support.budget_support import NODE, add_node, add_spend

WINDOW = 360.0  # the effect window of these tests: 0.1 h, so an $8/h node costs $0.80 in it


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    for a in make_api(tmp_path):
        _setup(a)
        yield a


@pytest.fixture
def api_both(tmp_path: Path, db_url: str) -> Iterator[Api]:
    """On SQLite and on PostgreSQL."""
    for a in make_api(tmp_path, db_url):
        _setup(a)
        yield a


def _setup(api: Api) -> None:
    """Node n1 (8x A100-80GB, $8/h) since T0-10h; an agent token of team alpha (a member). The
    people's tokens (admin, alice, bob, vera) are held by people of those names; the agents' tokens
    have no owner (approval by person: tests/agent/test_proposal_approval.py)."""
    add_node(api.db, T0 - 10 * 3600)
    with api.db.session() as s:
        token, secret = repo.create_token(s, team="alpha", role="member", name="agent", now=T0)
        api.secrets["agent"], api.token_ids["agent"] = secret, token.id
        token, secret = repo.create_token(s, team="ops", role="admin", name="admin-agent", now=T0)
        api.secrets["admin-agent"], api.token_ids["admin-agent"] = secret, token.id


def propose(api: Api, who: str, action: str, target: str, params: dict[str, Any] | None = None, **extra: Any) -> Any:
    body = {"action": action, "target": target, "params": params or {}, **extra}
    r = api.client.post("/v1/proposals", json=body, headers=api.h(who))
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["state"] == "pending" and out["proposed_by"] == api.token_ids[who]
    return out


def approve(api: Api, who: str, pid: str, reason: str = "") -> Any:
    return api.client.post(f"/v1/proposals/{pid}/approve", json={"reason": reason}, headers=api.h(who))


def job(api: Api, job_id: str) -> Any:
    r = api.client.get(f"/v1/jobs/{job_id}", headers=api.h("admin"))
    assert r.status_code == 200, r.text
    return r.json()


def jobs_count(api: Api) -> int:
    with api.db.session(readonly=True) as s:
        return len(list(s.scalars(select(JobRow.id))))


def snapshot(api: Api) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables an action may change, column by column (proposals aside)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with api.db.session(readonly=True) as s:
        for model in (JobRow, JobEventRow, RunRow, Team, QuotaRow, BudgetRow):
            cols = [c for c in model.__table__.columns]
            rows = s.execute(select(*cols).order_by(*model.__table__.primary_key.columns)).all()
            out[model.__tablename__] = [tuple(json.dumps(v, sort_keys=True, default=str) for v in r) for r in rows]
    assert set(out) | {ProposalRow.__tablename__} <= set(Base.metadata.tables)
    return out


def running_job(api: Api, who: str = "alice", *, gpus: int = 1, since: float = T0 - 2 * 3600) -> str:
    """A job of ``who`` running on ``gpus`` GPUs of n1 since ``since`` (a run as the controller opens it)."""
    job_id = str(api.submit(who, gpus=gpus)["id"])
    with api.db.session() as s:
        row = repo.get_job(s, job_id)
        placement = [{"node": NODE, "gpus": list(range(gpus)), "milli": 1000}]
        repo.transition(s, row, "ADMITTED", "placed", since, run=1, placement=placement)
        repo.open_run(
            s,
            job_id=job_id,
            run=1,
            node=NODE,
            placement=placement,
            capacity_type="on-demand",
            node_hourly_usd=8.0,
            now=since,
        )
        repo.mark_run_started(s, job_id, 1, pid=1, started_at=since)
        repo.transition(s, row, "RUNNING", "started", since, started_at=since)
    return job_id


def utilization(api: Api, job_id: str, pct: float, *, at: float = T0 - 60) -> None:
    with api.db.session() as s:
        repo.record_gpu_samples(
            s, [GpuSample(at, NODE, 0, "GPU-0", pct, 1024.0, 81920.0, job_memory_mib={job_id: 1000.0})]
        )


def stop_run(api: Api, job_id: str, at: float, *, gpus: int = 1) -> None:
    """What the controller does when it has stopped a run: end it, meter it, end the job."""
    with api.db.session() as s:
        run = repo.end_run(
            s, job_id, 1, outcome="stopped", exit_code=None, reason="stopped", started_at=None, ended_at=at
        )
        row = repo.get_job(s, job_id)
        node = next(n for n in repo.list_nodes(s) if n.name == NODE)
        assert run.started_at is not None
        repo.append_segment(
            s,
            job=row,
            run=1,
            node=node,
            gpu_share_units=gpus * 7000,
            cpu_milli=0,
            memory_mib=0,
            node_hourly_usd=8.0,
            capacity_type="on-demand",
            start=run.started_at,
            end=at,
        )
        repo.transition(s, row, "CANCELLED", "cancel: cancelled by request", at, placement=[])


def set_quota(api: Api, team: str, quota: dict[str, float]) -> None:
    r = api.client.put(f"/v1/teams/{team}", json={"quota_gpus": quota}, headers=api.h("admin"))
    assert r.status_code == 200, r.text


def make_budget(api: Api, name: str = "alpha-monthly", **body: Any) -> Any:
    body = {"name": name, "scope": "team:alpha", "limit_usd": 1000.0, **body}
    r = api.client.post("/v1/budgets", json=body, headers=api.h("admin"))
    assert r.status_code == 201, r.text
    return r.json()


# -- every action: propose → approve → executed, the effect where the endpoints show it ------------


@dataclass(frozen=True)
class Case:
    action: str
    params: dict[str, Any]
    approver: str
    setup: Callable[[Api], str]  # → the target
    check: Callable[[Api, str, Any], None]  # (api, target, the executed proposal)


def _pending(**fields_: Any) -> Callable[[Api], str]:
    def setup(api: Api) -> str:
        return str(api.submit("alice", **fields_)["id"])

    return setup


def _replaced(expect: dict[str, Any]) -> Callable[[Api, str, Any], None]:
    def check(api: Api, target: str, p: Any) -> None:
        old, new = job(api, target), job(api, p["result_job_id"])
        assert old["state"] == "CANCELLED" and p["id"] in old["reason"] and "replaced" in old["reason"]
        assert new["state"] == "PENDING" and new["team"] == "alpha" and new["command"] == old["command"]
        assert new["name"] == old["name"] and new["priority"] == old["priority"]
        assert {k: new[k] for k in expect} == expect
        assert p["result_job_id"] in p["result"] and target in p["result"]

    return check


def _idle_job(api: Api) -> str:
    job_id = running_job(api)
    utilization(api, job_id, 2.0)
    return job_id


def _cancel_requested(api: Api, target: str, p: Any) -> None:
    j = job(api, target)
    assert j["state"] == "RUNNING" and j["cancel_requested"] is True  # the controller stops it
    assert p["change"]["before"] == {"state": "RUNNING", "mean_utilization_pct": 2.0, "samples": 1}


def _quota_team(api: Api) -> str:
    set_quota(api, "alpha", {"A100-80GB": 4, "*": 1})
    return "alpha"


def _quota_changed(api: Api, target: str, p: Any) -> None:
    team = api.client.get("/v1/teams/alpha", headers=api.h("alice")).json()
    assert team["quota_gpus"] == {"A100-80GB": 2.0, "*": 1.0}  # the model named changed, the other stayed
    assert p["change"]["before"] == {"*": 1.0, "A100-80GB": 4.0}
    assert p["change"]["after"] == {"*": 1.0, "A100-80GB": 2.0}


def _budget(api: Api) -> str:
    return str(make_budget(api)["name"])


def _budget_changed(api: Api, target: str, p: Any) -> None:
    b = api.client.get(f"/v1/budgets/{target}", headers=api.h("admin")).json()
    assert b["limit_usd"] == 500.0 and b["action"] == "block" and b["scope"] == "team:alpha"
    assert p["change"]["before"] == {"limit_usd": 1000.0, "action": "alert"}
    assert p["change"]["after"] == {"limit_usd": 500.0, "action": "block"}


CASES = {
    "resize-gpus": Case("resize", {"gpus": 1}, "alice", _pending(gpus=2), _replaced({"gpus": 1, "gpu_milli": None})),
    "resize-fraction": Case(
        "resize", {"gpu_milli": 500}, "alice", _pending(gpus=1), _replaced({"gpus": 1, "gpu_milli": 500})
    ),
    "change-gpu-type": Case(
        "change_gpu_type",
        {"gpu_types": ["a100-80gb"]},
        "admin",
        _pending(gpus=1),
        _replaced({"gpu_types": ["A100-80GB"]}),
    ),
    "move-to-spot": Case("move_to_spot", {}, "alice", _pending(gpus=1), _replaced({"preemptible": True})),
    "cancel-idle-job": Case("cancel_idle_job", {"max_utilization_pct": 5}, "alice", _idle_job, _cancel_requested),
    "change-quota": Case("change_quota", {"quota_gpus": {"a100-80gb": 2}}, "admin", _quota_team, _quota_changed),
    "change-budget": Case("change_budget", {"limit_usd": 500, "action": "block"}, "admin", _budget, _budget_changed),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_an_approved_proposal_is_executed_with_its_effect_on_the_target(api: Api, case: Case) -> None:
    target = case.setup(api)
    est = {"monthly_savings_usd": 730.5, "confidence": 0.8, "basis": "1 GPU-hour an hour"}
    p = propose(api, "agent", case.action, target, case.params, rationale="idle most of the day", estimate=est)
    assert p["team"] == "alpha" and p["estimate"] == est and p["change"]["proposed"]
    wakes = api.wakes[0]
    r = approve(api, case.approver, p["id"], reason="looks right")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["state"] == "executed", out["result"]
    assert out["decided_by"] == api.token_ids[case.approver] and out["reason"] == "looks right"
    assert out["executed_at"] == out["decided_at"] and out["result"]
    assert out["effect_due_at"] is not None and out["measured"] is None
    case.check(api, target, out)
    assert api.wakes[0] == wakes + 1  # the controller is woken to act on it
    # the GET shows the same; approving again with the same token returns it, another token: 409
    assert api.client.get(f"/v1/proposals/{p['id']}", headers=api.h("agent")).json() == out
    assert approve(api, case.approver, p["id"]).json() == out
    problem(approve(api, "admin" if case.approver != "admin" else "alice", p["id"]), 409, "proposal_not_pending")


def test_the_main_scenario_on_both_stores(api_both: Api) -> None:
    api = api_both
    target = api.submit("alice", gpus=2)["id"]
    p = propose(api, "agent", "resize", target, {"gpus": 1})
    out = approve(api, "alice", p["id"]).json()
    assert out["state"] == "executed" and job(api, out["result_job_id"])["gpus"] == 1
    assert job(api, target)["state"] == "CANCELLED"
    # a failure at execution keeps nothing of the action
    other = api.submit("alice", gpus=2)["id"]
    q = propose(api, "agent", "move_to_spot", other)
    api.client.post(f"/v1/jobs/{other}/cancel", headers=api.h("alice"))
    before = snapshot(api)
    failed = approve(api, "alice", q["id"]).json()
    assert failed["state"] == "failed" and "already ended" in failed["result"]
    assert snapshot(api) == before


# -- nothing happens before a person approves -------------------------------------------------------


def _every_kind_pending(api: Api) -> list[Any]:
    set_quota(api, "alpha", {"A100-80GB": 4})
    make_budget(api)
    pend = api.submit("alice", gpus=2)["id"]
    idle = _idle_job(api)
    return [
        propose(api, "agent", "resize", pend, {"gpus": 1}),
        propose(api, "agent", "change_gpu_type", pend, {"gpu_types": ["A100-80GB"]}),
        propose(api, "agent", "move_to_spot", pend),
        propose(api, "agent", "cancel_idle_job", idle),
        propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"A100-80GB": 1}}),
        propose(api, "agent", "change_budget", "alpha-monthly", {"limit_usd": 10}),
    ]


def test_pending_and_rejected_proposals_change_nothing(api: Api) -> None:
    before = snapshot(api)
    made = _every_kind_pending(api)
    after_setup = snapshot(api)
    assert after_setup != before  # (the set-up itself wrote)
    api.clock.advance(3600)
    assert api.client.get("/v1/proposals", headers=api.h("admin")).status_code == 200  # reading measures nothing
    assert snapshot(api) == after_setup
    deciders = {"change_quota": "admin", "change_budget": "admin"}
    for p in made:
        r = api.client.post(
            f"/v1/proposals/{p['id']}/reject",
            json={"reason": "not now"},
            headers=api.h(deciders.get(p["action"], "alice")),
        )
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["state"] == "rejected" and out["reason"] == "not now" and out["executed_at"] is None
        assert out["result"] == "" and out["result_job_id"] is None
        problem(approve(api, "admin", p["id"]), 409, "proposal_not_pending")
    assert snapshot(api) == after_setup  # byte for byte: every job, event, run, team, quota, budget
    listed = api.client.get("/v1/proposals?state=rejected", headers=api.h("admin")).json()
    assert {p["id"] for p in listed} == {p["id"] for p in made}


def test_the_proposer_may_withdraw_and_a_rejection_needs_a_reason(api: Api) -> None:
    p = propose(api, "agent", "resize", api.submit("alice", gpus=2)["id"], {"gpus": 1})
    doc = problem(
        api.client.post(f"/v1/proposals/{p['id']}/reject", json={}, headers=api.h("agent")), 422, "invalid_input"
    )
    assert fields(doc) == ["body.reason"]
    r = api.client.post(f"/v1/proposals/{p['id']}/reject", json={"reason": "withdrawn"}, headers=api.h("agent"))
    assert r.status_code == 200 and r.json()["state"] == "rejected"


# -- who decides ----------------------------------------------------------------------------------


def test_an_agent_cannot_approve_its_own_proposal(api: Api) -> None:
    p = propose(api, "agent", "resize", api.submit("alice", gpus=2)["id"], {"gpus": 1})
    doc = problem(approve(api, "agent", p["id"]), 403, "self_approval")
    assert "proposed it" in doc["detail"]
    # an admin token proposing is no different: it may not approve its own either
    q = propose(api, "admin-agent", "change_quota", "alpha", {"quota_gpus": {"*": 3}})
    problem(approve(api, "admin-agent", q["id"]), 403, "self_approval")
    for pid in (p["id"], q["id"]):
        assert api.client.get(f"/v1/proposals/{pid}", headers=api.h("admin")).json()["state"] == "pending"
    assert approve(api, "admin", q["id"]).json()["state"] == "executed"


def test_the_approver_needs_the_permission_of_the_action(api: Api) -> None:
    pend = api.submit("alice", gpus=2)["id"]
    on_job = propose(api, "agent", "resize", pend, {"gpus": 1})
    make_budget(api)
    on_quota = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"*": 2}})
    on_budget = propose(api, "agent", "change_budget", "alpha-monthly", {"limit_usd": 5})
    # another team's member does not even see them (as for another team's job)
    for p in (on_job, on_quota, on_budget):
        problem(approve(api, "bob", p["id"]), 404, "not_found")
        problem(api.client.get(f"/v1/proposals/{p['id']}", headers=api.h("bob")), 404, "not_found")
    assert api.client.get("/v1/proposals", headers=api.h("bob")).json() == []
    # a viewer of the team sees but may not approve; a member may not change quotas or budgets
    problem(approve(api, "vera", on_job["id"]), 403, "forbidden")
    problem(approve(api, "alice", on_quota["id"]), 403, "forbidden")
    problem(approve(api, "alice", on_budget["id"]), 403, "forbidden")
    problem(
        api.client.post(f"/v1/proposals/{on_quota['id']}/reject", json={"reason": "x"}, headers=api.h("alice")),
        403,
        "forbidden",
    )
    seen = {p["id"] for p in api.client.get("/v1/proposals", headers=api.h("vera")).json()}
    assert seen == {on_job["id"], on_quota["id"], on_budget["id"]}
    assert approve(api, "alice", on_job["id"]).json()["state"] == "executed"
    assert approve(api, "admin", on_quota["id"]).json()["state"] == "executed"


def test_a_proposal_on_a_cluster_wide_budget_is_for_admins_only(api: Api) -> None:
    make_budget(api, "everything", scope="all")
    problem(
        api.client.post(
            "/v1/proposals",
            json={"action": "change_budget", "target": "everything", "params": {"limit_usd": 1}},
            headers=api.h("agent"),
        ),
        404,
        "not_found",
    )
    p = propose(api, "admin-agent", "change_budget", "everything", {"limit_usd": 2000})
    assert p["team"] is None
    assert api.client.get("/v1/proposals", headers=api.h("alice")).json() == []
    assert approve(api, "admin", p["id"]).json()["state"] == "executed"


# -- bad params, targets and states -----------------------------------------------------------------

BAD = {
    "gpus-zero": ("resize", {"gpus": 0}, ["body.params.gpus"]),
    "no-shape": ("resize", {}, ["body.params.gpus", "body.params.gpu_milli"]),
    "two-shapes": ("resize", {"gpus": 1, "gpu_milli": 500}, ["body.params.gpus", "body.params.gpu_milli"]),
    "gpus-not-int": ("resize", {"gpus": "2"}, ["body.params.gpus"]),
    "unknown-param": ("resize", {"gpus": 1, "cpus": 2}, ["body.params.cpus"]),
    "no-node-holds-it": ("resize", {"gpus": 16}, ["body.params.gpus"]),
    "unknown-gpu-type": ("change_gpu_type", {"gpu_types": ["A100-80GB", "TPU-v9"]}, ["body.params.gpu_types[1]"]),
    "no-gpu-types": ("change_gpu_type", {"gpu_types": []}, ["body.params.gpu_types"]),
    "spot-takes-nothing": ("move_to_spot", {"gpus": 1}, ["body.params.gpus"]),
    "util-over-100": ("cancel_idle_job", {"max_utilization_pct": 101}, ["body.params.max_utilization_pct"]),
    "unknown-model": ("change_quota", {"quota_gpus": {"B999": 1}}, ["body.params.quota_gpus.B999"]),
    "negative-quota": ("change_quota", {"quota_gpus": {"*": -1}}, ["body.params.quota_gpus.*"]),
    "negative-limit": ("change_budget", {"limit_usd": -1}, ["body.params.limit_usd"]),
    "throttle-without-what": ("change_budget", {"action": "throttle"}, ["body.params.throttle"]),
    "bad-budget-action": ("change_budget", {"action": "explode"}, ["body.params.action"]),
    "off-peak-unsupported": (
        "reschedule_off_peak",
        {"start_after": "2026-11-13T02:00:00Z"},
        ["body.action"],
    ),
    "unknown-action": ("defragment", {}, ["body.action"]),
}


@pytest.mark.parametrize(("action", "params", "named"), BAD.values(), ids=BAD.keys())
def test_bad_params_are_a_422_naming_the_field(api: Api, action: str, params: dict[str, Any], named: list[str]) -> None:
    make_budget(api)
    target = {"change_quota": "alpha", "change_budget": "alpha-monthly"}.get(action)
    if target is None:
        target = running_job(api) if action == "cancel_idle_job" else api.submit("alice", gpus=1)["id"]
    before = jobs_count(api)
    r = api.client.post(
        "/v1/proposals", json={"action": action, "target": target, "params": params}, headers=api.h("agent")
    )
    code = "unsupported_action" if action == "reschedule_off_peak" else "invalid_input"
    doc = problem(r, 422, code)
    assert fields(doc) == named
    assert api.client.get("/v1/proposals", headers=api.h("admin")).json() == [] and jobs_count(api) == before


def test_targets_must_be_visible_and_in_a_state_the_action_applies_to(api: Api) -> None:
    bobs = api.submit("bob", gpus=1)["id"]
    for action, target, params in (
        ("resize", bobs, {"gpus": 2}),
        ("resize", "j-nosuchjob", {"gpus": 2}),
        ("change_quota", "beta", {"quota_gpus": {"*": 1}}),
        ("change_budget", "nosuchbudget", {"limit_usd": 1}),
    ):
        body = {"action": action, "target": target, "params": params}
        problem(api.client.post("/v1/proposals", json=body, headers=api.h("agent")), 404, "not_found")
    running = running_job(api)
    doc = problem(
        api.client.post(
            "/v1/proposals", json={"action": "resize", "target": running, "params": {"gpus": 2}}, headers=api.h("agent")
        ),
        409,
        "target_state",
    )
    assert "only a pending job can be resized" in doc["detail"] and "RUNNING" in doc["detail"]
    pend = api.submit("alice", gpus=1)["id"]
    for action, target, params, code, words in (
        ("cancel_idle_job", pend, {}, "target_state", "only a running job"),
        ("cancel_idle_job", running, {}, "target_state", "no GPU utilization sample"),
        ("resize", pend, {"gpus": 1}, "nothing_to_change", "already has this shape"),
        ("change_quota", "alpha", {"quota_gpus": {}}, "invalid_input", ""),
    ):
        body = {"action": action, "target": target, "params": params}
        r = api.client.post("/v1/proposals", json=body, headers=api.h("agent"))
        doc = problem(r, 422 if code == "invalid_input" else 409, code)
        assert words in doc["detail"]
    utilization(api, running, 97.0)
    doc = problem(
        api.client.post("/v1/proposals", json={"action": "cancel_idle_job", "target": running}, headers=api.h("agent")),
        409,
        "target_state",
    )
    assert "is not idle" in doc["detail"] and "97.0%" in doc["detail"]


# -- failures at execution: the proposal is failed, the action left no trace --------------------------


def test_a_job_that_ended_meanwhile_fails_the_execution_and_nothing_is_half_done(api: Api) -> None:
    target = api.submit("alice", gpus=2)["id"]
    p = propose(api, "agent", "resize", target, {"gpus": 1})
    assert api.client.post(f"/v1/jobs/{target}/cancel", headers=api.h("alice")).status_code == 200
    before, n = snapshot(api), jobs_count(api)
    r = approve(api, "alice", p["id"])
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["state"] == "failed" and out["executed_at"] is None and out["result_job_id"] is None
    assert out["result"].startswith("target_state: ") and "already ended (CANCELLED)" in out["result"]
    assert out["decided_by"] == api.token_ids["alice"]
    assert snapshot(api) == before and jobs_count(api) == n


def test_a_replacement_a_budget_blocks_fails_and_the_original_job_stays(api: Api) -> None:
    """The cancel of the original happened before the replacement's submit was refused: both are
    undone (one SAVEPOINT), so the job is still PENDING with its events as they were."""
    target = api.submit("alice", gpus=1, max_runtime_s=3600.0)["id"]  # $1: 1 GPU-hour at $1
    make_budget(api, "alpha-cap", limit_usd=1.5, action="block")
    p = propose(api, "agent", "resize", target, {"gpus": 2})  # $2 > $1.50
    before, n = snapshot(api), jobs_count(api)
    out = approve(api, "alice", p["id"]).json()
    assert out["state"] == "failed" and out["result"].startswith("budget_exceeded: "), out["result"]
    assert snapshot(api) == before and jobs_count(api) == n
    assert job(api, target)["state"] == "PENDING"


def test_a_job_busy_again_is_not_cancelled(api: Api) -> None:
    target = _idle_job(api)
    p = propose(api, "agent", "cancel_idle_job", target, {"window_s": 600})
    api.clock.advance(300)
    utilization(api, target, 100.0, at=T0 + 200)
    utilization(api, target, 100.0, at=T0 + 250)
    before = snapshot(api)
    out = approve(api, "alice", p["id"]).json()
    assert out["state"] == "failed" and "is not idle" in out["result"]
    assert snapshot(api) == before and job(api, target)["cancel_requested"] is False


def test_a_member_may_not_resubmit_a_priority_its_team_is_not_granted(api: Api) -> None:
    """The replacement is submitted with the approver's rights (the same check as POST /v1/jobs):
    an admin's urgent job resized on a member's approval fails, naming why."""
    target = api.submit("admin", team="alpha", gpus=2, priority="urgent")["id"]
    p = propose(api, "agent", "resize", target, {"gpus": 1})
    before = snapshot(api)
    out = approve(api, "alice", p["id"]).json()
    assert out["state"] == "failed" and out["result"].startswith("priority_not_allowed: ")
    assert snapshot(api) == before
    q = propose(api, "agent", "resize", target, {"gpus": 1})
    assert approve(api, "admin", q["id"]).json()["state"] == "executed"


# -- expiry and idempotency -------------------------------------------------------------------------


def test_a_pending_proposal_expires(api: Api) -> None:
    p = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"*": 2}}, expires_in_s=60)
    assert p["expires_at"] == "2026-11-12T12:01:00Z"
    api.clock.advance(61)
    assert api.client.get(f"/v1/proposals/{p['id']}", headers=api.h("alice")).json()["state"] == "expired"
    doc = problem(approve(api, "admin", p["id"]), 409, "proposal_not_pending")
    assert "expired" in doc["detail"]
    assert api.client.get("/v1/teams/alpha", headers=api.h("admin")).json()["quota_gpus"] == {}


def test_a_retried_proposal_is_made_once(api: Api) -> None:
    body = {"action": "change_quota", "target": "alpha", "params": {"quota_gpus": {"*": 2}}}
    h = api.h("agent", **{"Idempotency-Key": "k1"})
    first = api.client.post("/v1/proposals", json=body, headers=h)
    again = api.client.post("/v1/proposals", json=body, headers=h)
    assert (first.status_code, again.status_code) == (201, 200) and first.json() == again.json()
    other = {**body, "params": {"quota_gpus": {"*": 3}}}
    problem(api.client.post("/v1/proposals", json=other, headers=h), 409, "conflict")
    assert len(api.client.get("/v1/proposals", headers=api.h("admin")).json()) == 1


# -- the measured effect ------------------------------------------------------------------------------


def test_the_effect_on_a_teams_cost_is_measured_exactly(api: Api) -> None:
    """alpha held the whole $8/h node for the 0.1 h before the change ($0.80: $8/h) and half of the
    0.1 h after it ($0.40: $4/h): $4/h less, times the hours of a month."""
    add_spend(api.db, "alpha", 0.80, T0)  # [T0-360, T0)
    add_spend(api.db, "beta", 0.40, T0 + WINDOW)  # another team's spend: not alpha's
    add_spend(api.db, "alpha", 0.40, T0 + WINDOW)  # [T0+180, T0+360)
    est = {"monthly_savings_usd": 3000.0, "confidence": 0.6, "basis": "half the node"}
    p = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"*": 4}}, estimate=est, effect_window_s=WINDOW)
    out = approve(api, "admin", p["id"]).json()
    assert out["state"] == "executed" and out["effect_due_at"] == "2026-11-12T12:06:00Z"
    api.clock.advance(WINDOW - 1)  # not yet: the after-window is not over
    assert api.client.get(f"/v1/proposals/{p['id']}", headers=api.h("alice")).json()["measured"] is None
    api.clock.advance(1)
    got = api.client.get(f"/v1/proposals/{p['id']}", headers=api.h("alice")).json()
    m = got["measured"]
    assert m["window_s"] == WINDOW and m["measured_at"] == "2026-11-12T12:06:00Z"
    assert (m["before_start"], m["executed_at"], m["after_end"]) == (
        "2026-11-12T11:54:00Z",
        "2026-11-12T12:00:00Z",
        "2026-11-12T12:06:00Z",
    )
    assert m["before_usd"] == pytest.approx(0.80, abs=1e-9) and m["after_usd"] == pytest.approx(0.40, abs=1e-9)
    assert m["before_usd_per_hour"] == pytest.approx(8.0) and m["after_usd_per_hour"] == pytest.approx(4.0)
    assert m["monthly_savings_usd"] == round(4.0 * HOURS_PER_MONTH, 2) == 2922.0
    assert got["estimate"]["monthly_savings_usd"] == 3000.0 and got["estimate_error_usd"] == -78.0
    # measured once: later spend does not change it
    add_spend(api.db, "alpha", 0.80, T0 + WINDOW)
    api.clock.advance(3600)
    assert api.client.get(f"/v1/proposals/{p['id']}", headers=api.h("alice")).json()["measured"] == m


def test_the_effect_of_cancelling_an_idle_job_is_measured_from_its_runs(api: Api) -> None:
    """The job held 1 GPU ($1/h) until the controller stopped it 90 s after the approval: $0.10
    before, $0.025 after, $0.75/h less."""
    target = _idle_job(api)
    p = propose(api, "agent", "cancel_idle_job", target, {}, effect_window_s=WINDOW)
    assert approve(api, "alice", p["id"]).json()["state"] == "executed"
    stop_run(api, target, T0 + 90)
    assert job(api, target)["state"] == "CANCELLED"
    api.clock.advance(WINDOW)
    assert service.upkeep(api.db, api.clock.now()) == 1  # the controller's duty does the same as a read
    m = api.client.get(f"/v1/proposals/{p['id']}", headers=api.h("alice")).json()["measured"]
    assert m["before_usd"] == pytest.approx(0.10, abs=1e-9) and m["after_usd"] == pytest.approx(0.025, abs=1e-9)
    assert m["before_usd_per_hour"] == pytest.approx(1.0) and m["after_usd_per_hour"] == pytest.approx(0.25)
    assert m["monthly_savings_usd"] == round(0.75 * HOURS_PER_MONTH, 2)
    assert service.upkeep(api.db, api.clock.now()) == 0  # nothing left to do: no write


def test_the_effect_of_a_replaced_job_counts_the_replacement(api: Api) -> None:
    """A resize of a pending job: nothing ran before; its replacement ran 1 GPU for the last 0.05 h."""
    target = api.submit("alice", gpus=2)["id"]
    p = propose(api, "agent", "resize", target, {"gpus": 1}, effect_window_s=WINDOW)
    new = approve(api, "alice", p["id"]).json()["result_job_id"]
    with api.db.session() as s:
        row = repo.get_job(s, new)
        placement = [{"node": NODE, "gpus": [0], "milli": 1000}]
        repo.transition(s, row, "ADMITTED", "placed", T0 + 180, run=1, placement=placement)
        repo.open_run(
            s,
            job_id=new,
            run=1,
            node=NODE,
            placement=placement,
            capacity_type="on-demand",
            node_hourly_usd=8.0,
            now=T0 + 180,
        )
        repo.mark_run_started(s, new, 1, pid=1, started_at=T0 + 180)
        repo.transition(s, row, "RUNNING", "started", T0 + 180, started_at=T0 + 180)
    api.clock.advance(WINDOW)
    m = api.client.get(f"/v1/proposals/{p['id']}", headers=api.h("admin")).json()["measured"]
    assert m["before_usd"] == 0.0 and m["after_usd"] == pytest.approx(0.05, abs=1e-9)
    assert m["monthly_savings_usd"] == round(-0.5 * HOURS_PER_MONTH, 2)  # it costs more: it runs now


def test_the_upkeep_duty_is_a_controller_periodic(api: Api) -> None:
    p = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"*": 2}}, expires_in_s=10)
    duty = service.upkeep_duty(api.db, interval_s=5.0)
    assert (duty.name, duty.interval_s) == ("proposals", 5.0)
    assert duty.run(T0 + 11) == 1
    with api.db.session(readonly=True) as s:
        assert repo.get_proposal(s, p["id"]).state == "expired"


# -- the SDK --------------------------------------------------------------------------------------


class Through(httpx.BaseTransport):
    """The SDK's requests handed to the app's test client (whose own transport this httpx cannot
    use directly: its answers are not httpx's sync streams)."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        r = self.api.client.request(
            request.method, request.url.raw_path.decode("ascii"), headers=headers, content=request.read()
        )
        return httpx.Response(r.status_code, headers=list(r.headers.items()), content=r.content)


def sdk(api: Api, who: str) -> Client:
    return Client("http://testserver", api.secrets[who], transport=Through(api), retries=0)


def test_the_sdk_proposes_lists_approves_and_rejects(api: Api) -> None:
    target = api.submit("alice", gpus=2)["id"]
    with sdk(api, "agent") as agent:
        p = agent.propose(
            "resize", target, {"gpus": 1}, "idle half the GPUs", {"monthly_savings_usd": 730.5, "confidence": 0.9}
        )
        q = agent.propose("change_quota", "alpha", {"quota_gpus": {"*": 2}}, idempotency_key="once")
        assert agent.propose("change_quota", "alpha", {"quota_gpus": {"*": 2}}, idempotency_key="once").id == q.id
        assert p.state == "pending" and p.estimate is not None and p.estimate.basis == ""
        assert {x.id for x in agent.proposals()} == {p.id, q.id}
        assert [x.id for x in agent.proposals("pending")] == [q.id, p.id]
        assert agent.proposal(p.id).rationale == "idle half the GPUs"
        with pytest.raises(Forbidden, match="self_approval"):
            agent.approve(p.id)
    with sdk(api, "alice") as alice:
        done = alice.approve(p.id, "ok")
        assert done.state == "executed" and done.result_job_id and alice.get(done.result_job_id).gpus == 1
    with sdk(api, "admin") as admin:
        assert admin.reject(q.id, "quota stays").state == "rejected"
        assert [x.id for x in admin.proposals("rejected")] == [q.id]

    async def run_async() -> None:
        asgi = httpx.ASGITransport(app=api.client.app)
        async with AsyncClient("http://testserver", api.secrets["agent"], transport=asgi, retries=0) as agent:
            r = await agent.propose("change_quota", "alpha", {"quota_gpus": {"*": 5}}, "more room")
            assert (await agent.proposal(r.id)).state == "pending"
            assert r.id in {x.id for x in await agent.proposals("pending")}
        async with AsyncClient("http://testserver", api.secrets["admin"], transport=asgi, retries=0) as admin:
            assert (await admin.approve(r.id)).state == "executed"
            t = await admin.propose("change_quota", "alpha", {"quota_gpus": {"*": 6}})
            assert (await admin.reject(t.id, "withdrawn")).state == "rejected"

    asyncio.run(run_async())
    assert api.client.get("/v1/teams/alpha", headers=api.h("admin")).json()["quota_gpus"] == {"*": 5.0}


def test_the_sdk_checks_params_before_sending(api: Api) -> None:
    from gpufleet.errors import InputError

    with sdk(api, "agent") as agent:
        with pytest.raises(InputError, match=r"params\.gpus"):
            agent.propose("resize", "j-x", {"gpus": 0})
        with pytest.raises(InputError, match="reason"):
            agent.reject("p-x", "")


# -- the CLI --------------------------------------------------------------------------------------

runner = CliRunner()


@pytest.fixture
def cli(api: Api, monkeypatch: pytest.MonkeyPatch) -> Api:
    def factory(url: str | None, token: str | None) -> Client:
        return Client("http://testserver", token or api.secrets["alice"], transport=Through(api), retries=0)

    monkeypatch.setattr(cli_jobs, "make_client", factory)
    monkeypatch.setattr(render, "_now", lambda: datetime.fromtimestamp(api.clock.now(), UTC))  # "5m ago" on T0
    monkeypatch.setenv("COLUMNS", "80")
    return api


def run(*args: str) -> Any:
    return runner.invoke(cli_app, list(args))


def test_cli_lists_shows_approves_and_rejects(cli: Api) -> None:
    api = cli
    target = api.submit("alice", gpus=2)["id"]
    p = propose(
        api,
        "agent",
        "resize",
        target,
        {"gpus": 1},
        rationale="half its GPUs idle for a week",
        estimate={"monthly_savings_usd": 730.5, "confidence": 0.8, "basis": "1 GPU x 730.5 h"},
    )
    q = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"*": 2}})
    res = run("proposals", "ls")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:3] == ["ID", "STATE", "ACTION"]
    assert all(len(line) <= 80 for line in lines), res.output
    assert p["id"] in res.output and "resize" in res.output and "$730.50/mo" in res.output
    res = run("proposals", "ls", "--state", "pending", "--json")
    assert res.exit_code == 0 and {x["id"] for x in json.loads(res.output)} == {p["id"], q["id"]}
    assert run("proposals", "ls", "--state", "done").exit_code == 2
    res = run("proposals", "show", p["id"])
    assert res.exit_code == 0 and "half its GPUs idle" in res.output and "confidence 80%" in res.output
    # the agent's own token cannot approve: exit 4; alice can
    assert run("proposals", "approve", p["id"], "--token", api.secrets["agent"]).exit_code == 4
    res = run("proposals", "approve", p["id"], "--reason", "fine")
    assert res.exit_code == 0, res.output
    assert "approved by" in res.output and "replaced by job" in res.output and "gpus: 2 → 1" in res.output
    assert run("proposals", "approve", p["id"], "--token", api.secrets["admin"]).exit_code == 6  # decided
    assert run("proposals", "show", "p-nosuchthing").exit_code == 3
    assert run("proposals", "reject", q["id"], "--reason", "x").exit_code == 4  # a member: quotas are admins'
    res = run("proposals", "reject", q["id"], "--reason", "not now", "--token", api.secrets["admin"], "--json")
    assert res.exit_code == 0 and json.loads(res.output)["state"] == "rejected"
    assert run("proposals", "reject", q["id"]).exit_code == 2  # --reason is required


def test_cli_approve_exits_6_when_the_action_failed(cli: Api) -> None:
    api = cli
    target = api.submit("alice", gpus=2)["id"]
    p = propose(api, "agent", "resize", target, {"gpus": 1})
    api.client.post(f"/v1/jobs/{target}/cancel", headers=api.h("alice"))
    res = run("proposals", "approve", p["id"])
    assert res.exit_code == 6 and "failed" in res.output and "already ended" in res.output


def test_cli_show_the_measured_effect(cli: Api) -> None:
    api = cli
    add_spend(api.db, "alpha", 0.80, T0)
    p = propose(
        api,
        "agent",
        "change_quota",
        "alpha",
        {"quota_gpus": {"*": 4}},
        estimate={"monthly_savings_usd": 5000.0},
        effect_window_s=WINDOW,
    )
    assert run("proposals", "approve", p["id"], "--token", api.secrets["admin"]).exit_code == 0
    res = run("proposals", "show", p["id"])
    assert "effect: measured in 6m00s" in " ".join(res.output.split())
    api.clock.advance(WINDOW)
    res = run("proposals", "show", p["id"])
    text = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert "$8.00/h over 0.1 h before → $0.00/h over 0.1 h after: $5,844.00/month saved" in text
    assert "(estimated $5,000.00: +$844.00)" in text
