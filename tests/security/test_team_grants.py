"""Owners and grants on a shared server (issue 8), over HTTP on SQLite and PostgreSQL: the Unix
account a team's (or a token's) jobs run as, the priority classes a team is granted, one team on a
server that can only run jobs as itself, and the last admin token — plus the SDK and CLI surface."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.api.app import create_app
from gpufleet.api.context import ApiContext
from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli.main import app as cli_app
from gpufleet.clock import SimClock
from gpufleet.errors import ConflictError
from gpufleet.model.quota import DEFAULT_PRIORITY_GRANT
from gpufleet.sdk import Client
from gpufleet.server import host as server
from gpufleet.services import owners
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.wire import DEFAULT_PRIORITY_CLASSES
from tests.support.api_support import T0, Api, make_api

USER, OTHER_USER = "nobody", "daemon"  # on every Debian machine
MISSING_USER = "gpf-no-such-user"


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url)


@pytest.fixture
def strict_api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    """A server that does not run jobs as itself: every job needs an account."""
    yield from make_api(tmp_path, db_url, run_as_required=True)


def problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    doc: dict[str, Any] = r.json()
    assert doc["code"] == code, doc
    return doc


def put_team(api: Api, name: str, **body: Any) -> httpx.Response:
    return api.client.put(f"/v1/teams/{name}", json=body, headers=api.h("admin"))


def post(api: Api, who: str, **body: Any) -> httpx.Response:
    body.setdefault("command", ["python", "train.py"])
    return api.client.post("/v1/jobs", json=body, headers=api.h(who))


# -- accounts ----------------------------------------------------------------------------------------


def test_team_run_as_is_set_shown_kept_and_cleared(api: Api) -> None:
    r = put_team(api, "alpha", run_as=USER)
    assert r.status_code == 200, r.text
    assert r.json()["run_as"] == USER
    assert api.client.get("/v1/teams/alpha", headers=api.h("alice")).json()["run_as"] == USER
    # a PUT without run_as keeps it (older clients, quota changes)
    r = put_team(api, "alpha", weight=2, quota_gpus={"*": 4})
    assert (r.json()["run_as"], r.json()["weight"]) == (USER, 2)
    # null clears it
    assert put_team(api, "alpha", run_as=None).json()["run_as"] is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (MISSING_USER, ["no Unix account", MISSING_USER]),
        ("root", ["root"]),
        ("Not A User", ["pattern"]),
        ("a" * 33, ["pattern"]),
    ],
    ids=["missing", "root", "pattern", "too-long"],
)
def test_run_as_must_be_an_existing_unprivileged_account(api: Api, value: str, words: list[str]) -> None:
    for r in (
        put_team(api, "alpha", run_as=value),
        api.client.post("/v1/tokens", json={"team": "alpha", "run_as": value}, headers=api.h("admin")),
    ):
        doc = problem(r, 422, "invalid_input")
        assert [e["field"] for e in doc["errors"]] == ["body.run_as"], doc
        text = doc["detail"] + " ".join(e["message"] for e in doc["errors"])
        assert all(w in text for w in words), doc
    # nothing was stored
    assert api.client.get("/v1/teams/alpha", headers=api.h("admin")).json()["run_as"] is None


def test_a_jobs_account_is_the_tokens_else_the_teams(api: Api) -> None:
    # no account anywhere: the server's own (None), on a server that allows it
    assert api.submit("alice")["run_as"] is None
    assert put_team(api, "alpha", run_as=OTHER_USER).status_code == 200
    assert api.submit("alice")["run_as"] == OTHER_USER
    r = api.client.post("/v1/tokens", json={"team": "alpha", "name": "own", "run_as": USER}, headers=api.h("admin"))
    assert r.status_code == 201, r.text
    assert r.json()["run_as"] == USER
    own = {"Authorization": f"Bearer {r.json()['token']}"}
    job = api.client.post("/v1/jobs", json={"command": ["true"]}, headers=own).json()
    assert job["run_as"] == USER  # the token's account wins over the team's
    # stored: shown again on a read and in the token list
    assert api.client.get(f"/v1/jobs/{job['id']}", headers=api.h("admin")).json()["run_as"] == USER
    tokens = api.client.get("/v1/tokens?team=alpha", headers=api.h("admin")).json()
    assert {t["name"]: t["run_as"] for t in tokens}["own"] == USER


def test_a_server_that_does_not_run_jobs_as_itself_needs_an_account(strict_api: Api) -> None:
    api = strict_api
    doc = problem(post(api, "alice"), 409, "no_run_as_account")
    assert "alpha" in doc["detail"] and "gpufleet team set alpha --run-as <user>" in doc["detail"]
    assert api.client.get("/v1/jobs", headers=api.h("admin")).json()["items"] == []  # nothing stored
    problem(post(api, "admin", team="alpha"), 409, "no_run_as_account")  # admins too: no account to use
    assert put_team(api, "alpha", run_as=USER).status_code == 200
    r = post(api, "alice")
    assert r.status_code == 201, r.text
    assert r.json()["run_as"] == USER


# -- priority grants --------------------------------------------------------------------------------


def test_priority_is_granted_not_chosen(api: Api) -> None:
    team = api.client.get("/v1/teams/alpha", headers=api.h("alice")).json()
    assert team["priority_classes"] == ["background", "low", "normal"]  # the default grant
    # the observed bug: a member picked `urgent` (and it preempted another team's job in its quota)
    for cls in ("urgent", "high"):
        doc = problem(post(api, "alice", priority=cls), 403, "priority_not_allowed")
        assert f"'{cls}'" in doc["detail"] and "background, low, normal" in doc["detail"]
    assert post(api, "alice", priority="normal").status_code == 201
    assert post(api, "admin", team="alpha", priority="urgent").status_code == 201  # admins: any class
    problem(post(api, "vera", priority="low"), 403, "forbidden")  # viewers never submit
    # an admin grants high (and takes low away)
    r = put_team(api, "alpha", priority_classes=["high", "normal", "high"])
    assert r.status_code == 200, r.text
    assert r.json()["priority_classes"] == ["normal", "high"]  # each once, lowest first
    assert post(api, "alice", priority="high").status_code == 201
    doc = problem(post(api, "alice", priority="low"), 403, "priority_not_allowed")
    assert "normal, high" in doc["detail"]
    assert post(api, "bob", priority="high").status_code == 403  # another team keeps the default
    # a PUT without the field keeps the grant; null goes back to the default
    assert put_team(api, "alpha", weight=3).json()["priority_classes"] == ["normal", "high"]
    assert put_team(api, "alpha", priority_classes=None).json()["priority_classes"] == ["background", "low", "normal"]


@pytest.mark.parametrize("value", [[], ["bogus"], "high"], ids=["empty", "unknown", "not-a-list"])
def test_a_grant_is_a_list_of_known_classes(api: Api, value: Any) -> None:
    doc = problem(put_team(api, "alpha", priority_classes=value), 422, "invalid_input")
    assert any(e["field"].startswith("body.priority_classes") for e in doc["errors"]), doc


def test_the_scheduler_sees_the_grant(api: Api) -> None:
    put_team(api, "alpha", priority_classes=["normal", "urgent"], quota_gpus={"*": 1})
    with api.db.session(readonly=True) as s:
        quotas = {q.team: q for q in repo.all_quotas(s)}
    assert quotas["alpha"].priority_classes == ("normal", "urgent")
    assert quotas["beta"].priority_classes == DEFAULT_PRIORITY_GRANT
    assert tuple(DEFAULT_PRIORITY_CLASSES) == DEFAULT_PRIORITY_GRANT


# -- the last admin token ----------------------------------------------------------------------------


def test_the_last_admin_token_cannot_be_revoked(api: Api) -> None:
    admin_id = api.token_ids["admin"]
    doc = problem(api.client.delete(f"/v1/tokens/{admin_id}", headers=api.h("admin")), 409, "last_admin_token")
    assert admin_id in doc["detail"]
    assert api.client.get("/v1/whoami", headers=api.h("admin")).status_code == 200  # still works
    # an expired admin token does not count
    r = api.client.post(
        "/v1/tokens", json={"team": "ops", "role": "admin", "expires_in_days": 1}, headers=api.h("admin")
    )
    assert r.status_code == 201
    api.clock.advance_to(T0 + 2 * 86400)
    problem(api.client.delete(f"/v1/tokens/{admin_id}", headers=api.h("admin")), 409, "last_admin_token")
    # with a second live admin token, the first goes; then the second is the last one
    second = api.client.post("/v1/tokens", json={"team": "ops", "role": "admin"}, headers=api.h("admin")).json()
    assert api.client.delete(f"/v1/tokens/{admin_id}", headers=api.h("admin")).status_code == 204
    h2 = {"Authorization": f"Bearer {second['token']}"}
    problem(api.client.delete(f"/v1/tokens/{second['id']}", headers=h2), 409, "last_admin_token")
    # revoking a revoked token stays a no-op; members' tokens go as before
    assert api.client.delete(f"/v1/tokens/{admin_id}", headers=h2).status_code == 204
    assert api.client.delete(f"/v1/tokens/{api.token_ids['alice']}", headers=h2).status_code == 204


def test_two_concurrent_revocations_leave_one_admin(api: Api) -> None:
    with api.db.session() as s:
        second, _ = repo.create_token(s, team="ops", role="admin", now=T0)
    ids = [api.token_ids["admin"], second.id]
    barrier = threading.Barrier(2)
    outcome: dict[str, str] = {}

    def revoke(token_id: str) -> None:
        barrier.wait()
        try:
            with api.db.session() as s:
                owners.revoke_token(s, token_id, T0 + 1)
            outcome[token_id] = "revoked"
        except ConflictError as e:
            outcome[token_id] = e.code

    threads = [threading.Thread(target=revoke, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcome.values()) == ["last_admin_token", "revoked"], outcome
    with api.db.session(readonly=True) as s:
        live = [t.id for t in repo.list_tokens(s, team="ops") if t.role == "admin" and t.revoked_at is None]
    assert len(live) == 1


# -- one team on a server that runs jobs as itself --------------------------------------------------------


def single_team_api(tmp_path: Path, url: str, *, hosted: str | None) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A single-team server: the seeded ``default`` team with the admin token, and ``hosted`` if given."""
    db = Database(url)
    db.upgrade()
    with db.session() as s:
        repo.ensure_team(s, server.DEFAULT_TEAM, T0)
        _, secret = repo.create_token(s, team=server.DEFAULT_TEAM, role="admin", now=T0)
        if hosted:
            repo.ensure_team(s, hosted, T0)
    (tmp_path / "logs").mkdir()
    ctx = ApiContext(database=db, logs_dir=tmp_path / "logs", clock=SimClock(T0), single_team=True)
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        yield client, {"Authorization": f"Bearer {secret}"}
    db.dispose()


def test_a_single_team_server_hosts_one_team(tmp_path: Path, db_url: str) -> None:
    assert owners.DEFAULT_TEAM == server.DEFAULT_TEAM
    for client, h in single_team_api(tmp_path, db_url, hosted="lab"):
        attempts = [
            client.put("/v1/teams/other", json={}, headers=h),
            client.post("/v1/tokens", json={"team": "other"}, headers=h),
            client.post("/v1/jobs", json={"command": ["true"], "team": "other"}, headers=h),
        ]
        for r in attempts:
            doc = problem(r, 409, "single_team")
            assert "non-root" in doc["detail"] and "jobs_as_server" in doc["detail"] and "'lab'" in doc["detail"]
        assert client.get("/v1/teams/other", headers=h).status_code == 404  # not created
        # the hosted team and the seeded default one work as before
        assert client.put("/v1/teams/lab", json={"weight": 2}, headers=h).status_code == 200
        assert client.post("/v1/tokens", json={"team": "lab"}, headers=h).status_code == 201
        assert client.post("/v1/jobs", json={"command": ["true"], "team": "lab"}, headers=h).status_code == 201
        assert client.post("/v1/jobs", json={"command": ["true"]}, headers=h).status_code == 201  # default


def test_a_single_team_server_may_create_its_one_team(tmp_path: Path, db_url: str) -> None:
    for client, h in single_team_api(tmp_path, db_url, hosted=None):
        assert client.put("/v1/teams/lab", json={}, headers=h).status_code == 200  # the first one
        problem(client.put("/v1/teams/other", json={}, headers=h), 409, "single_team")


def test_a_server_with_several_teams_is_unaffected(api: Api) -> None:
    assert put_team(api, "gamma").status_code == 200
    assert api.client.post("/v1/tokens", json={"team": "delta"}, headers=api.h("admin")).status_code == 201


# -- SDK and CLI ----------------------------------------------------------------------------------------


def test_sdk_sets_accounts_and_grants(api: Api) -> None:
    with Client("http://testserver", api.secrets["admin"], transport=api.sdk_transport) as admin:
        team = admin.set_team("alpha", run_as=USER, priority_classes=["normal", "high"])
        assert (team.run_as, team.priority_classes) == (USER, ["normal", "high"])
        team = admin.set_team("alpha", weight=2)  # not given: kept
        assert (team.run_as, team.priority_classes, team.weight) == (USER, ["normal", "high"], 2)
        created = admin.create_token("alpha", "member", "ci", run_as=OTHER_USER)
        assert created.run_as == OTHER_USER
        assert {t.id: t.run_as for t in admin.tokens()}[created.id] == OTHER_USER
    with Client("http://testserver", created.token, transport=api.sdk_transport) as ci:
        job = ci.submit(command=["true"], priority="high")
        assert (job.run_as, job.priority) == (OTHER_USER, "high")


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    for api in make_api(tmp_path):

        def factory(url: str | None, token: str | None, api: Api = api) -> Client:
            return Client("http://testserver", token or api.secrets["admin"], transport=api.sdk_transport)

        monkeypatch.setattr(cli_jobs, "make_client", factory)
        yield api


def test_cli_team_set_and_token_create(cli: Api) -> None:
    runner = CliRunner()
    res = runner.invoke(cli_app, ["team", "set", "alpha", "--run-as", USER, "--priority-classes", "normal,high"])
    assert res.exit_code == 0, res.output
    assert USER in res.stdout and "normal,high" in res.stdout
    res = runner.invoke(cli_app, ["team", "set", "alpha", "--quota", "*=2", "--json"])  # other options keep them
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["run_as"] == USER
    with cli.db.session(readonly=True) as s:
        team = repo.get_team(s, "alpha")
        assert (team.run_as, team.priority_classes) == (USER, ["normal", "high"])
    res = runner.invoke(cli_app, ["team", "set", "alpha", "--run-as", "none", "--priority-classes", "default"])
    assert res.exit_code == 0, res.output
    with cli.db.session(readonly=True) as s:
        team = repo.get_team(s, "alpha")
        assert (team.run_as, team.priority_classes) == (None, None)
    res = runner.invoke(cli_app, ["team", "set", "alpha", "--priority-classes", "normal,supreme"])
    assert res.exit_code == 2 and "--priority-classes" in res.output
    res = runner.invoke(cli_app, ["team", "set", "alpha", "--run-as", MISSING_USER])
    assert res.exit_code != 0 and "run_as" in res.output
    res = runner.invoke(cli_app, ["token", "create", "--team", "alpha", "--run-as", OTHER_USER, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["run_as"] == OTHER_USER
