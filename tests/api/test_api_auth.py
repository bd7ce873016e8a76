"""Authentication and authorization through HTTP: every route in the OpenAPI document x every
kind of caller, and that another team's job is indistinguishable from a missing one everywhere."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.api.app import create_app
from gpufleet.api.context import ApiContext
from gpufleet.cost.budgets.model import make_budget
from gpufleet.store import repo
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.api_support import T0, Api, make_api

CALLERS = ("admin", "alice", "bob", "vera", "none", "bad")  # alice/vera: alpha (owner); bob: beta
OPEN = {c: 200 for c in CALLERS}


def authed(admin: int, alice: int, bob: int, vera: int) -> dict[str, int]:
    return {"admin": admin, "alice": alice, "bob": bob, "vera": vera, "none": 401, "bad": 401}


# (method, path template) → caller → status. The target job and team belong to alpha.
EXPECTED: dict[tuple[str, str], dict[str, int]] = {
    ("POST", "/v1/jobs"): authed(201, 201, 403, 403),  # body: team alpha
    ("GET", "/v1/jobs"): authed(200, 200, 200, 200),
    ("GET", "/v1/jobs/{job_id}"): authed(200, 200, 404, 200),
    ("POST", "/v1/jobs/{job_id}/cancel"): authed(200, 200, 404, 403),
    ("GET", "/v1/jobs/{job_id}/events"): authed(200, 200, 404, 200),
    ("GET", "/v1/jobs/{job_id}/logs"): authed(200, 200, 404, 200),
    ("GET", "/v1/queue"): authed(200, 200, 200, 200),
    ("GET", "/v1/nodes"): authed(200, 200, 200, 200),
    ("GET", "/v1/teams"): authed(200, 200, 200, 200),
    ("GET", "/v1/teams/{name}"): authed(200, 200, 404, 200),
    ("PUT", "/v1/teams/{name}"): authed(200, 403, 403, 403),
    ("POST", "/v1/tokens"): authed(201, 403, 403, 403),
    ("GET", "/v1/tokens"): authed(200, 403, 403, 403),
    ("DELETE", "/v1/tokens/{token_id}"): authed(204, 403, 403, 403),
    ("GET", "/v1/usage"): authed(200, 200, 200, 200),
    ("GET", "/v1/whoami"): authed(200, 200, 200, 200),
    ("GET", "/healthz"): OPEN,
    ("GET", "/readyz"): OPEN,
    ("GET", "/metrics"): {**OPEN, "bad": 401},  # no token: cluster totals; a wrong one: 401, not the totals
}
# insights (cost management): the target job is alpha's and still PENDING (progress → 409)
EXPECTED.update(
    {
        ("POST", "/v1/jobs/{job_id}/progress"): authed(409, 409, 404, 403),
        ("GET", "/v1/jobs/{job_id}/forecast"): authed(200, 200, 404, 200),
        ("GET", "/v1/forecast"): authed(200, 200, 200, 200),
        ("GET", "/v1/anomalies"): authed(200, 200, 200, 200),
        ("GET", "/v1/recommendations"): authed(200, 200, 200, 200),
        ("GET", "/v1/roi"): authed(200, 200, 200, 200),
        # budgets: admins manage them; others see only their own team's (the target is alpha's)
        ("POST", "/v1/budgets"): authed(201, 403, 403, 403),
        ("GET", "/v1/budgets"): authed(200, 200, 200, 200),
        ("POST", "/v1/budgets/check"): authed(200, 200, 403, 403),
        ("GET", "/v1/budgets/{ref}"): authed(200, 200, 404, 200),
        ("PUT", "/v1/budgets/{ref}"): authed(200, 403, 403, 403),  # admin-only: 403 whether it exists or not
        ("DELETE", "/v1/budgets/{ref}"): authed(204, 403, 403, 403),
        ("GET", "/v1/budgets/{ref}/status"): authed(200, 200, 404, 200),
        # proposals: the target job is alpha's, proposed by another alpha member ("victim"); a viewer
        # may propose (it can see the target) but not decide; another team's caller never sees it
        ("POST", "/v1/proposals"): authed(201, 201, 404, 201),
        ("GET", "/v1/proposals"): authed(200, 200, 200, 200),
        ("GET", "/v1/proposals/{proposal_id}"): authed(200, 200, 404, 200),
        ("POST", "/v1/proposals/{proposal_id}/approve"): authed(200, 200, 404, 403),
        ("POST", "/v1/proposals/{proposal_id}/reject"): authed(200, 200, 404, 403),
        # OpenCost's allocation API: everyone reads it (a member and a viewer see their own team's)
        ("GET", "/allocation/compute"): authed(200, 200, 200, 200),
        ("GET", "/allocation"): authed(200, 200, 200, 200),
        ("GET", "/metrics/dcgm"): {**OPEN, "bad": 401},  # like /metrics
    }
)


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url)  # each caller a person of their own (approving needs an owner)


def headers(api: Api, caller: str) -> dict[str, str]:
    if caller == "none":
        return {}
    if caller == "bad":
        return {"Authorization": "Bearer gpf_not-a-real-token"}
    return api.h(caller)


def request_for(api: Api, method: str, template: str) -> Callable[[str], httpx.Response]:
    """A request on an alpha-owned object, fresh for every call (cancel and revoke change state)."""

    def send(caller: str) -> httpx.Response:
        job = api.submit("alice", labels={"secret": "alpha-only"})["id"]
        (api.logs / f"{job}.log").write_text("alpha's output\n")
        with api.db.session() as s:
            tok, victim = repo.create_token(s, team="alpha", role="member", name="victim", now=T0)
            budget = budgets_repo.create_budget(
                s,
                make_budget(id="", name=f"alpha-{tok.id[4:].lower()}", scope="team:alpha", limit_usd=100.0),
                created_by=None,
                now=T0,
            )
        proposal = ""
        if "{proposal_id}" in template:
            r = api.client.post(
                "/v1/proposals",
                json={"action": "resize", "target": job, "params": {"gpus": 1}, "rationale": "half idle"},
                headers={"Authorization": f"Bearer {victim}"},
            )
            assert r.status_code == 201, r.text
            proposal = r.json()["id"]
        path = template.format(job_id=job, name="alpha", token_id=tok.id, ref=budget.id, proposal_id=proposal)
        body: dict[str, Any] | None = None
        if (method, template) == ("POST", "/v1/jobs"):
            body = {"command": ["x"], "team": "alpha"}
        elif (method, template) == ("PUT", "/v1/teams/{name}"):
            body = {"weight": 1.0}
        elif (method, template) == ("POST", "/v1/tokens"):
            body = {"team": "alpha"}
        elif (method, template) == ("POST", "/v1/jobs/{job_id}/progress"):  # insights
            body = {"step": 1}
        elif template in ("/v1/budgets", "/v1/budgets/{ref}") and method in ("POST", "PUT"):
            body = {"name": f"b-{tok.id[4:].lower()}", "scope": "team:alpha", "limit_usd": 50.0}
        elif template == "/v1/budgets/check":
            body = {"command": ["x"], "gpus": 1, "team": "alpha"}
        if template.startswith("/allocation"):
            path += "?window=1d"
        if (method, template) == ("POST", "/v1/proposals"):
            body = {"action": "resize", "target": job, "params": {"gpus": 1}, "rationale": "half idle"}
        elif template == "/v1/proposals/{proposal_id}/reject":
            body = {"reason": "not now"}
        response: httpx.Response = api.client.request(method, path, json=body, headers=headers(api, caller))
        return response

    return send


def spec_operations(api: Api) -> list[tuple[str, str]]:
    spec = api.client.get("/openapi.json").json()
    return sorted((m.upper(), p) for p, item in spec["paths"].items() for m in item)


def test_matrix_covers_every_route(api: Api) -> None:
    assert set(spec_operations(api)) == set(EXPECTED)


@pytest.mark.parametrize(("method", "template"), sorted(EXPECTED))
def test_authz_matrix(api: Api, method: str, template: str) -> None:
    send = request_for(api, method, template)
    for caller, status in EXPECTED[(method, template)].items():
        r = send(caller)
        assert r.status_code == status, (caller, r.text)
        if status >= 400:
            assert r.headers["content-type"] == "application/problem+json"
        if status == 401:
            assert r.headers["www-authenticate"].startswith("Bearer")


def test_another_teams_job_never_leaks(api: Api) -> None:
    """bob (beta) sees nothing of alpha's job through any endpoint, and its 404s read like a
    missing job's."""
    job = api.submit("alice", name="alpha-secret-job", labels={"secret": "alpha-only"})["id"]
    (api.logs / f"{job}.log").write_text("alpha's output\n")
    with api.db.session() as s:
        repo.heartbeat(s, "r1", is_leader=True, now=T0, queue=[{"job": job, "position": 1, "reason": "r"}])
    h = api.h("bob")
    for url in [
        "/v1/jobs",
        "/v1/jobs?team=alpha",
        "/v1/jobs?label=secret=alpha-only",
        "/v1/queue",
        "/v1/queue?team=alpha",
        "/v1/usage?aggregate=job",
        "/v1/teams",
        "/v1/nodes",
        "/v1/whoami",
    ]:
        r = api.client.get(url, headers=h)
        assert r.status_code == 200, url
        assert job not in r.text and "alpha-secret-job" not in r.text and "alpha-only" not in r.text, url
    for method, suffix in [
        ("GET", ""),
        ("GET", "/events"),
        ("GET", "/logs"),
        ("GET", "/logs?follow=true"),
        ("POST", "/cancel"),
    ]:
        foreign = api.client.request(method, f"/v1/jobs/{job}{suffix}", headers=h)
        missing = api.client.request(method, f"/v1/jobs/j-missing0{suffix}", headers=h)
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json()["detail"].replace(job, "?") == missing.json()["detail"].replace("j-missing0", "?")
        assert "alpha's output" not in foreign.text
    # and the job is untouched
    assert api.client.get(f"/v1/jobs/{job}", headers=api.h("alice")).json()["state"] == "PENDING"


@pytest.mark.parametrize("value", ["", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Token abc", "bearer gpf_wrong"])
def test_malformed_authorization(api: Api, value: str) -> None:
    r = api.client.get("/v1/whoami", headers={"Authorization": value})
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
    assert r.headers["www-authenticate"].startswith("Bearer")


def test_token_cache_bounds_revocation_delay_on_other_replicas(api: Api) -> None:
    """A replica that cached a token keeps accepting it for at most its cache TTL after another
    replica revoked it; the revoking replica stops at once."""
    other = create_app(ApiContext(database=api.db, logs_dir=api.logs, clock=api.clock, auth_cache_s=5.0))
    from fastapi.testclient import TestClient

    with TestClient(other) as c2:
        h = api.h("alice")
        assert c2.get("/v1/whoami", headers=h).status_code == 200  # cached on the other replica
        assert api.client.delete(f"/v1/tokens/{api.token_ids['alice']}", headers=api.h("admin")).status_code == 204
        assert api.client.get("/v1/whoami", headers=h).status_code == 401
        api.clock.advance(1)
        assert c2.get("/v1/whoami", headers=h).status_code == 200
        api.clock.advance(5)
        assert c2.get("/v1/whoami", headers=h).status_code == 401
