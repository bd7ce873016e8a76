"""Budgets and their channels are private (issue 8, point 7), over HTTP on SQLite and PostgreSQL:

- alert channels (URLs, URL credentials, headers, addresses, routing keys) are shown to admins
  only; members and viewers see each channel's kind and a masked target;
- ``/v1/budgets/check`` reports the caller's own team's budgets and the cluster-wide ones, never
  another team's;
- a project (label, namespace, experiment) budget belongs to a team: other teams' jobs do not count
  against it, and a member of another team cannot tag a job with a project a team's budget owns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cost.budgets.model import Throttle, make_budget
from gpufleet.cost.budgets.throttle import ThrottleRule, capacity_limits
from gpufleet.model.job import GpuRequest, Job, JobSpec
from gpufleet.model.node import Node
from gpufleet.scheduling.admission import effective_priority
from gpufleet.scheduling.profile import load_profile
from gpufleet.services.budgets import evaluate_budget
from gpufleet.sim.engine import Simulation
from gpufleet.sim.traces.base import Trace, TraceJob
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.api_support import T0, Api, make_api
from tests.support.budget_support import add_node, add_spend

SECRETS = ("s3cr3t-pass", "hook-path-secret", "q-token", "Bearer hdr-token", "R0UTINGKEY1234567890", "alice.smith")
CHANNELS: list[dict[str, Any]] = [
    {
        "type": "webhook",
        "url": "https://ops:s3cr3t-pass@hooks.example.com/services/hook-path-secret?token=q-token",
        "headers": {"Authorization": "Bearer hdr-token"},
    },
    {"type": "slack", "url": "https://hooks.slack.com/services/hook-path-secret"},
    {
        "type": "email",
        "host": "smtp.example.com",
        "from": "gpufleet@example.com",
        "to": ["alice.smith@example.com"],
        "username": "mailer",
        "password": "s3cr3t-pass",
    },
    {"type": "pagerduty", "routing_key": "R0UTINGKEY1234567890"},
]


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url)


def create(api: Api, **body: Any) -> dict[str, Any]:
    body.setdefault("limit_usd", 20.0)
    r = api.client.post("/v1/budgets", json=body, headers=api.h("admin"))
    assert r.status_code == 201, r.text
    return dict(r.json())


def spend(api: Api, team: str, usd: float, *, project: str = "", labels: dict[str, str] | None = None) -> None:
    """A finished job of ``team`` (tagged ``project``/``labels``) that cost ``usd``, ending a minute before T0."""
    add_spend(api.db, team, usd, T0 - 60, project=project, labels=labels)


def check(api: Api, who: str, **body: Any) -> Any:
    body.setdefault("command", ["python", "train.py"])
    return api.client.post("/v1/budgets/check", json=body, headers=api.h(who))


# -- observation 1: channels ------------------------------------------------------------------------------


def test_channels_show_kind_and_a_masked_target_to_non_admins(api: Api) -> None:
    create(api, name="alpha-cap", scope="team:alpha", channels=CHANNELS)
    for who in ("alice", "vera"):  # a member and a viewer of the budget's own team
        one = api.client.get("/v1/budgets/alpha-cap", headers=api.h(who))
        listed = api.client.get("/v1/budgets", headers=api.h(who))
        assert one.status_code == listed.status_code == 200
        for text in (one.text, listed.text):
            for secret in SECRETS:
                assert secret not in text, (who, secret)
            assert "headers" not in text and "mailer" not in text and "smtp.example.com" not in text
        assert one.json()["channels"] == [
            {"type": "webhook", "target": "https://hooks.example.com/…"},
            {"type": "slack", "target": "https://hooks.slack.com/…"},
            {"type": "email", "target": "a***@example.com"},
            {"type": "pagerduty", "target": "routing key ***7890"},
        ]
        assert listed.json()[0]["channels"] == one.json()["channels"]
        assert one.json()["team"] == "alpha"
    # admins still see where alerts go (secret fields masked as before)
    full = api.client.get("/v1/budgets/alpha-cap", headers=api.h("admin")).json()["channels"]
    assert full[0]["url"] == CHANNELS[0]["url"] and full[0]["headers"] == CHANNELS[0]["headers"]
    assert full[2]["to"] == ["alice.smith@example.com"] and full[2]["password"] == "***"
    assert full[3]["routing_key"] == "***"


# -- observation 2: the feasibility check ------------------------------------------------------------------


def test_check_reports_only_the_callers_team_and_cluster_wide_budgets(api: Api) -> None:
    add_node(api.db, T0 - 86400)
    create(api, name="alpha-cap", scope="team:alpha", limit_usd=20.0)
    create(api, name="beta-cap", scope="team:beta", limit_usd=30.0)
    create(api, name="beta-cc", scope="label:cost-center=42", team="beta", limit_usd=40.0)
    create(api, name="beta-ns", scope="namespace:default", team="beta", limit_usd=50.0)
    create(api, name="everyone", scope="all", limit_usd=1000.0)
    spend(api, "beta", 7.0, labels={"cost-center": "42"})
    spend(api, "alpha", 5.0)
    r = check(api, "alice", gpus=1, labels={"cost-center": "42"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert [b["name"] for b in out["budgets"]] == ["alpha-cap", "everyone"]
    for name in ("beta-cap", "beta-cc", "beta-ns"):
        assert name not in r.text
    # a cluster-wide budget shows what a member needs to know whether the job fits
    everyone = next(b for b in out["budgets"] if b["name"] == "everyone")
    assert everyone["limit_usd"] == 1000.0 and everyone["committed_usd"] == 12.0
    assert everyone["remaining_usd"] == 988.0 and everyone["fits"]
    # beta's members see their own
    names = [b["name"] for b in check(api, "bob", gpus=1, labels={"cost-center": "42"}).json()["budgets"]]
    assert sorted(names) == ["beta-cap", "beta-cc", "beta-ns", "everyone"]
    # and the check of a job no one may charge to another team is refused like the submit
    admin = check(api, "admin", team="alpha", gpus=1, labels={"cost-center": "42"}).json()
    assert [b["name"] for b in admin["budgets"]] == ["alpha-cap", "everyone"]


# -- observation 3: project budgets belong to a team ----------------------------------------------------


def test_another_teams_jobs_do_not_consume_a_project_budget(api: Api) -> None:
    add_node(api.db, T0 - 86400)
    b = create(api, name="vision", scope="project:vision", team="beta", limit_usd=10.0, action="block")
    assert b["team"] == "beta"
    spend(api, "alpha", 15.0, project="vision")  # alpha's job tagged with beta's project (before the rule)
    spend(api, "beta", 3.0, project="vision")
    st = api.client.get("/v1/budgets/vision/status", headers=api.h("bob"))
    assert st.status_code == 200, st.text
    assert st.json()["spend_usd"] == 3.0 and st.json()["committed_usd"] == 3.0
    with api.db.session() as s:  # the controller's evaluation (alerts, throttles) counts the same
        ev = evaluate_budget(s, budgets_repo.budget_of(budgets_repo.get_budget(s, "vision")), T0)
    assert ev.status.spend_usd == pytest.approx(3.0) and not ev.status.crossed
    # the block check lets beta in: $3 + $4 fits the $10 limit
    api.submit("bob", project="vision", gpus=4, estimated_runtime_s=3600)
    line = check(api, "bob", project="vision", gpus=2).json()["budgets"]
    assert [(x["name"], x["committed_usd"]) for x in line] == [("vision", 7.0)]
    # the project's budget is beta's: not shown to alpha
    assert api.client.get("/v1/budgets/vision", headers=api.h("alice")).status_code == 404
    assert api.client.get("/v1/budgets", headers=api.h("alice")).json() == []


def test_another_team_cannot_tag_a_project_a_team_owns(api: Api) -> None:
    add_node(api.db, T0 - 86400)
    create(api, name="vision", scope="project:vision", team="beta", limit_usd=10.0)
    r = api.client.post("/v1/jobs", json={"command": ["x"], "gpus": 1, "project": "vision"}, headers=api.h("alice"))
    assert r.status_code == 403, r.text
    p = r.json()
    assert r.headers["content-type"] == "application/problem+json" and p["status"] == 403
    assert "'vision'" in p["detail"] and "'beta'" in p["detail"]
    # the check says the same; the owning team submits; an admin may submit for the owning team only
    assert check(api, "alice", project="vision", gpus=1).status_code == 403
    api.submit("bob", project="vision", gpus=1)
    api.submit("admin", team="beta", project="vision", gpus=1)
    bad = api.client.post(
        "/v1/jobs", json={"command": ["x"], "team": "alpha", "project": "vision"}, headers=api.h("admin")
    )
    assert bad.status_code == 403
    api.submit("alice", project="other", gpus=1)  # a project no budget owns is anyone's


def test_a_project_budget_names_its_team(api: Api) -> None:
    r = api.client.post(
        "/v1/budgets", json={"name": "p", "scope": "project:vision", "limit_usd": 5}, headers=api.h("admin")
    )
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.team"
    mismatch = {"name": "t", "scope": "team:alpha", "team": "beta", "limit_usd": 5}
    assert api.client.post("/v1/budgets", json=mismatch, headers=api.h("admin")).status_code == 422
    create(api, name="vision", scope="project:vision", team="beta")
    taken = {"name": "v2", "scope": "project:vision", "team": "alpha", "limit_usd": 5}
    assert api.client.post("/v1/budgets", json=taken, headers=api.h("admin")).status_code == 409
    assert create(api, name="mine", scope="team:alpha")["team"] == "alpha"  # derived from the scope


def test_the_simulator_counts_only_the_owning_teams_jobs() -> None:
    spec = JobSpec(name="j", gpu=GpuRequest(1), duration_s=3600.0, estimated_runtime_s=3600.0, project="vision")
    jobs = [TraceJob(600.0 * i, replace(spec, name=f"a{i}", team="alpha")) for i in range(10)]
    jobs += [TraceJob(600.0 * i + 1, replace(spec, name=f"b{i}", team="beta")) for i in range(10)]
    cap = make_budget(id="b1", name="vision", scope="project:vision", team="beta", limit_usd=10.0, action="block")
    sim = Simulation(
        Trace("t", jobs),
        load_profile({}).build(),
        lambda n: 2.0 * n.gpu_count,  # $2 per GPU-hour
        nodes=[Node("n1", "A100-80GB", 8, 0, 0)],
        budgets=[cap],
    )
    result = sim.run()
    states = {r.name: r.state for r in result.records}
    assert all(states[f"a{i}"] == "SUCCEEDED" for i in range(10))  # not beta's to pay, not blocked
    assert sum(states[f"b{i}"] == "SUCCEEDED" for i in range(10)) == 5  # $2 each, $10 in all


def test_an_owned_scope_covers_and_throttles_only_its_teams_jobs() -> None:
    b = make_budget(id="b", name="cc", scope="label:cc=42", team="beta", limit_usd=1.0)
    assert b.team == "beta" and str(b.scope) == "label:cc=42"
    assert b.scope.covers(team="beta", labels={"cc": "42"})
    assert not b.scope.covers(team="alpha", labels={"cc": "42"})
    assert b.scope.aggregates == ("team", "label:cc") and b.scope.matches(("beta", "42"))
    assert not b.scope.matches(("alpha", "42"))
    assert make_budget(id="t", name="t", scope="team:alpha", limit_usd=1.0).team == "alpha"
    rule = ThrottleRule("cc", b.scope, Throttle(priority="low"))
    mine = Job("m", JobSpec(name="m", team="beta", labels={"cc": "42"}), 0.0)
    theirs = Job("t", JobSpec(name="t", team="alpha", labels={"cc": "42"}), 0.0)
    limits = capacity_limits([rule])
    assert limits[0].covers(mine) and not limits[0].covers(theirs)
    assert effective_priority(mine, limits) < effective_priority(theirs, limits) == theirs.spec.priority


def test_an_owned_scopes_anomaly_check_sees_only_its_teams_spend() -> None:
    from gpufleet.cost.anomaly import AnomalyConfig, KeyFilter, scan_ledger
    from tests.cost.test_anomaly import _ledger_history

    ledger, t0 = _ledger_history(40, spike_day=33)  # beta's one-day spike on top of alpha's flat spend
    cfg = AnomalyConfig(min_increase_usd=10)
    every = scan_ledger(ledger, first_day_start=t0, days=40, config=cfg, where=KeyFilter("project", lambda k: True))
    assert [a.day_index for a in every] == [33]
    owned = KeyFilter("project", lambda k: True, team="alpha")  # alpha's project budget: beta's spike is not its
    assert scan_ledger(ledger, first_day_start=t0, days=40, config=cfg, where=owned) == []
