"""Approval of proposals by *another person*, and proposals that went stale (issue 20, finding 9).

- A token carries its ``owner`` (the person holding it). Approval is judged by person, not by token:
  a second token of the proposer's owner is refused (403 ``same_person``, owners compared without
  regard to case); a token without an owner (made before owners existed, or without one) cannot
  approve at all (403 ``owner_required``) — it is its own pseudo-person, so its proposals may be
  approved by anyone else with an owner. Who proposed and who approved, by token and by person, is
  in the proposal.
- A proposal records the values it read when it was planned, per field it sets (``planned_on``).
  Approving it after one of them changed (an admin set the quota meanwhile) is refused with 409
  ``stale`` naming the field, its planned-on and its current value; nothing is changed and the
  proposal stays pending. A change to a field the proposal does not set is not staleness.
- The migration adding the columns applies on SQLite and PostgreSQL, and downgrades.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, select, text, update
from typer.testing import CliRunner

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli.main import app as cli_app
from gpufleet.sdk import Client
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import ProposalRow, Team, Token
from tests.support.api_support import T0, Api, fields, make_api, problem
from tests.support.budget_support import add_node

PREVIOUS = "0010"  # the migration before the one adding owners and planned-on values


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    for a in make_api(tmp_path):
        _setup(a)
        yield a


@pytest.fixture
def api_both(tmp_path: Path, db_url: str) -> Iterator[Api]:
    for a in make_api(tmp_path, db_url):
        _setup(a)
        yield a


def _setup(api: Api) -> None:
    """Node n1 (8x A100-80GB); an agent token of alpha with no owner; tokens of people: alice
    (two tokens), carol (alpha members), ada (two admin tokens)."""
    add_node(api.db, T0 - 10 * 3600)
    with api.db.session() as s:
        token, secret = repo.create_token(s, team="alpha", role="member", name="agent", now=T0)
        api.secrets["agent"], api.token_ids["agent"] = secret, token.id
        for who, team, role in (("old-alice", "alpha", "member"), ("old-admin", "ops", "admin")):  # made before owners
            token, secret = repo.create_token(s, team=team, role=role, name=who, now=T0)
            api.secrets[who], api.token_ids[who] = secret, token.id
    for who, team, role, owner in (
        ("alice-1", "alpha", "member", "alice"),
        ("alice-2", "alpha", "member", "Alice"),  # the same person, however it is spelt
        ("carol", "alpha", "member", "carol"),
        ("ada-1", "ops", "admin", "ada"),
        ("ada-2", "ops", "admin", "ada"),
        ("root", "ops", "admin", "root"),
    ):
        made = create_token(api, team=team, role=role, name=who, owner=owner)
        api.secrets[who], api.token_ids[who] = made["token"], made["id"]


def create_token(api: Api, **body: Any) -> Any:
    r = api.client.post("/v1/tokens", json=body, headers=api.h("admin"))
    assert r.status_code == 201, r.text
    return r.json()


def propose(api: Api, who: str, action: str, target: str, params: dict[str, Any]) -> Any:
    body = {"action": action, "target": target, "params": params}
    r = api.client.post("/v1/proposals", json=body, headers=api.h(who))
    assert r.status_code == 201, r.text
    return r.json()


def approve(api: Api, who: str, pid: str) -> Any:
    return api.client.post(f"/v1/proposals/{pid}/approve", json={}, headers=api.h(who))


def state(api: Api, pid: str) -> str:
    return str(api.client.get(f"/v1/proposals/{pid}", headers=api.h("admin")).json()["state"])


def quotas(api: Api, team: str = "alpha") -> Any:
    return api.client.get(f"/v1/teams/{team}", headers=api.h("admin")).json()["quota_gpus"]


def set_quota(api: Api, quota: dict[str, float], team: str = "alpha") -> None:
    r = api.client.put(f"/v1/teams/{team}", json={"quota_gpus": quota}, headers=api.h("admin"))
    assert r.status_code == 200, r.text


# -- tokens carry their owner ---------------------------------------------------------------------


def test_a_token_carries_its_owner_and_the_listing_shows_it(api: Api) -> None:
    made = create_token(api, team="alpha", role="viewer", name="laptop", owner="bob.smith@example.com")
    assert made["owner"] == "bob.smith@example.com"
    listed = {t["id"]: t for t in api.client.get("/v1/tokens", headers=api.h("admin")).json()}
    assert listed[made["id"]]["owner"] == "bob.smith@example.com"
    assert listed[api.token_ids["alice-2"]]["owner"] == "Alice"
    assert listed[api.token_ids["agent"]]["owner"] is None  # made without one
    for bad in ("", " alice", "alice\n", "a" * 128, "al ice"):
        r = api.client.post("/v1/tokens", json={"team": "alpha", "owner": bad}, headers=api.h("admin"))
        assert fields(problem(r, 422, "invalid_input")) == ["body.owner"], bad


def test_cli_token_create_takes_an_owner(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def factory(url: str | None, token: str | None) -> Client:
        return Client("http://testserver", token or api.secrets["admin"], transport=api.sdk_transport, retries=0)

    monkeypatch.setattr(cli_jobs, "make_client", factory)
    res = CliRunner().invoke(cli_app, ["token", "create", "--team", "nlp", "--role", "member", "--owner", "alice"])
    assert res.exit_code == 0, res.output
    with api.db.session(readonly=True) as s:
        row = s.scalar(select(Token).where(Token.team == "nlp"))
        assert row is not None and row.owner == "alice"


# -- another person approves ------------------------------------------------------------------------


def test_a_second_token_of_the_proposer_cannot_approve(api: Api) -> None:
    target = api.submit("alice", gpus=2)["id"]
    p = propose(api, "alice-1", "resize", target, {"gpus": 1})
    assert p["proposed_by"] == api.token_ids["alice-1"] and p["proposed_by_owner"] == "alice"
    doc = problem(approve(api, "alice-2", p["id"]), 403, "same_person")
    assert "alice" in doc["detail"].lower() and "another person" in doc["detail"]
    assert state(api, p["id"]) == "pending"
    assert api.client.get(f"/v1/jobs/{target}", headers=api.h("admin")).json()["state"] == "PENDING"
    # another person approves it
    r = approve(api, "carol", p["id"])
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["state"] == "executed", out["result"]
    assert (out["proposed_by_owner"], out["decided_by"], out["decided_by_owner"]) == (
        "alice",
        api.token_ids["carol"],
        "carol",
    )


def test_an_admins_second_token_cannot_approve_the_admins_proposal(api: Api) -> None:
    q = propose(api, "ada-1", "change_quota", "alpha", {"quota_gpus": {"*": 3}})
    problem(approve(api, "ada-2", q["id"]), 403, "same_person")
    assert quotas(api) == {}
    out = approve(api, "root", q["id"]).json()
    assert out["state"] == "executed" and out["decided_by_owner"] == "root"
    assert quotas(api) == {"*": 3.0}


def test_a_token_without_an_owner_cannot_approve(api: Api) -> None:
    """An agent's token (no owner) proposes; alice's old token (no owner either) cannot approve:
    nothing says whose it is. Any token with an owner may."""
    target = api.submit("alice", gpus=2)["id"]
    p = propose(api, "agent", "resize", target, {"gpus": 1})
    assert p["proposed_by_owner"] is None
    doc = problem(approve(api, "old-alice", p["id"]), 403, "owner_required")
    assert "owner" in doc["detail"]
    problem(approve(api, "old-admin", p["id"]), 403, "owner_required")
    assert state(api, p["id"]) == "pending"
    out = approve(api, "alice-1", p["id"]).json()
    assert out["state"] == "executed" and out["decided_by_owner"] == "alice"


def test_the_proposer_still_withdraws_and_the_rejection_names_the_person(api: Api) -> None:
    p = propose(api, "alice-1", "resize", api.submit("alice", gpus=2)["id"], {"gpus": 1})
    r = api.client.post(f"/v1/proposals/{p['id']}/reject", json={"reason": "withdrawn"}, headers=api.h("alice-2"))
    assert r.status_code == 200, r.text  # rejecting changes nothing: the proposer's other token may
    assert r.json()["state"] == "rejected" and r.json()["decided_by_owner"] == "Alice"


# -- stale proposals --------------------------------------------------------------------------------


def test_a_stale_quota_proposal_is_refused_naming_the_field(api_both: Api) -> None:
    api = api_both
    set_quota(api, {"A100-80GB": 4})
    p = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"a100-80gb": 8}})
    assert p["planned_on"] == {"quota_gpus.A100-80GB": 4.0}
    set_quota(api, {"A100-80GB": 6})  # an admin changed it meanwhile
    doc = problem(approve(api, "root", p["id"]), 409, "stale")
    detail = doc["detail"]
    assert "quota_gpus.A100-80GB" in detail and "4" in detail and "6" in detail, detail
    assert quotas(api) == {"A100-80GB": 6.0}  # the admin's change stands
    assert state(api, p["id"]) == "pending"
    # back to what it was planned on: no longer stale
    set_quota(api, {"A100-80GB": 4})
    assert approve(api, "root", p["id"]).json()["state"] == "executed"
    assert quotas(api) == {"A100-80GB": 8.0}


def test_a_change_to_a_field_the_proposal_does_not_set_is_not_staleness(api: Api) -> None:
    set_quota(api, {"A100-80GB": 4})
    p = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"A100-80GB": 8}})
    set_quota(api, {"A100-80GB": 4, "*": 2})
    out = approve(api, "root", p["id"]).json()
    assert out["state"] == "executed", out
    assert quotas(api) == {"A100-80GB": 8.0, "*": 2.0}


def test_a_quota_set_where_there_was_none_is_stale_too(api: Api) -> None:
    p = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"*": 3}})
    assert p["planned_on"] == {"quota_gpus.*": None}
    set_quota(api, {"*": 5})
    doc = problem(approve(api, "root", p["id"]), 409, "stale")
    assert "quota_gpus.*" in doc["detail"] and "none" in doc["detail"] and "5" in doc["detail"]


def test_a_stale_budget_proposal_is_refused(api: Api) -> None:
    body = {"name": "alpha-monthly", "scope": "team:alpha", "limit_usd": 1000.0}
    assert api.client.post("/v1/budgets", json=body, headers=api.h("admin")).status_code == 201
    p = propose(api, "agent", "change_budget", "alpha-monthly", {"limit_usd": 500})
    assert p["planned_on"] == {"limit_usd": 1000.0}
    r = api.client.put("/v1/budgets/alpha-monthly", json={**body, "limit_usd": 800.0}, headers=api.h("admin"))
    assert r.status_code == 200, r.text
    doc = problem(approve(api, "root", p["id"]), 409, "stale")
    assert "limit_usd" in doc["detail"] and "1000" in doc["detail"] and "800" in doc["detail"]
    assert api.client.get("/v1/budgets/alpha-monthly", headers=api.h("admin")).json()["limit_usd"] == 800.0


def test_a_proposal_made_before_the_migration_is_checked_from_its_recorded_before(api: Api) -> None:
    """A pending proposal stored without ``planned_on`` (made before this check existed): what it
    read is taken from the ``before`` it recorded."""
    set_quota(api, {"A100-80GB": 4, "*": 1})
    p = propose(api, "agent", "change_quota", "alpha", {"quota_gpus": {"A100-80GB": 8}})
    with api.db.session() as s:
        s.execute(update(ProposalRow).where(ProposalRow.id == p["id"]).values(planned_on=None))
    set_quota(api, {"A100-80GB": 6, "*": 1})
    doc = problem(approve(api, "root", p["id"]), 409, "stale")
    assert "quota_gpus.A100-80GB" in doc["detail"]


# -- the migration ---------------------------------------------------------------------------------


def test_the_migration_applies_and_reverts(empty_db_url: str) -> None:
    from alembic import command

    db = Database(empty_db_url)
    try:
        db.upgrade(PREVIOUS)
        with db.engine.begin() as conn:  # a token and a pending proposal stored before owners existed
            conn.execute(text("INSERT INTO teams (name, weight, created_at) VALUES ('alpha', 1.0, 0)"))
            conn.execute(
                text(
                    "INSERT INTO tokens (id, name, team, role, secret_sha256, created_at) "
                    "VALUES ('tok_old', 'old', 'alpha', 'member', 'x', 0)"
                )
            )
        db.upgrade()
        assert db.current_revision() == db.head_revision() != PREVIOUS
        with db.engine.connect() as conn:
            cols = {c["name"] for c in inspect(conn).get_columns("tokens")}
            assert "owner" in cols
            cols = {c["name"] for c in inspect(conn).get_columns("proposals")}
            assert {"planned_on", "proposed_by_owner", "decided_by_owner"} <= cols
        with db.session(readonly=True) as s:
            old = s.get(Token, "tok_old")
            assert old is not None and old.owner is None
            assert s.get(Team, "alpha") is not None
        with db.engine.connect() as conn, conn.begin():
            command.downgrade(db._alembic_config(conn), PREVIOUS)
        assert db.current_revision() == PREVIOUS
        with db.engine.connect() as conn:
            assert "owner" not in {c["name"] for c in inspect(conn).get_columns("tokens")}
        db.upgrade()
        db.check_schema()
    finally:
        db.dispose()
