"""/v1/budgets through HTTP, and the block check of submissions — with 64 concurrent submitters
near a limit, on SQLite and PostgreSQL, committed plus estimated spend never passes it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cost.budgets.model import Scope
from gpufleet.cost.periods import period_at
from gpufleet.services.budgets import committed_spend
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.api_support import T0, Api, make_api
from tests.support.budget_support import add_node, add_spend


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url)


def create(api: Api, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "alpha-cap")
    body.setdefault("scope", "team:alpha")
    body.setdefault("limit_usd", 20.0)
    r = api.client.post("/v1/budgets", json=body, headers=api.h("admin"))
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_crud_and_status(api: Api) -> None:
    add_node(api.db, T0 - 86400)
    b = create(
        api,
        channels=[
            {"type": "email", "host": "smtp", "from": "a@b.c", "to": ["o@b.c"], "username": "u", "password": "pw"}
        ],
    )
    assert b["thresholds"] == [
        {"percent": 50.0, "severity": "info"},
        {"percent": 80.0, "severity": "warning"},
        {"percent": 100.0, "severity": "critical"},
    ]
    assert b["channels"][0]["password"] == "***"
    assert (
        api.client.post(
            "/v1/budgets", json={"name": "x", "scope": "team:a", "limit_usd": 1}, headers=api.h("alice")
        ).status_code
        == 403
    )
    dup = api.client.post(
        "/v1/budgets", json={"name": "alpha-cap", "scope": "all", "limit_usd": 1}, headers=api.h("admin")
    )
    assert dup.status_code == 409
    bad = api.client.post(
        "/v1/budgets",
        json={"name": "y", "scope": "team:a", "limit_usd": 1, "channels": [{"type": "webhook", "url": "nope"}]},
        headers=api.h("admin"),
    )
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "body.channels[0].url"
    # a team's budget is visible to its members, not to other teams
    assert [x["name"] for x in api.client.get("/v1/budgets", headers=api.h("alice")).json()] == ["alpha-cap"]
    assert api.client.get("/v1/budgets", headers=api.h("bob")).json() == []
    assert api.client.get("/v1/budgets/alpha-cap/status", headers=api.h("bob")).status_code == 404
    add_spend(api.db, "alpha", 5.0, T0 - 3600)
    st = api.client.get("/v1/budgets/alpha-cap/status", headers=api.h("alice")).json()
    assert st["spend_usd"] == 5.0 and st["percent"] == 25.0 and st["limit_usd"] == 20.0
    month = period_at("monthly", T0)
    # the rate over the day the ledger has existed (its node was added a day ago), to the month's end
    born = T0 - 86400
    assert st["projected_usd"] == pytest.approx(round(5.0 / 86400 * (month.end - born), 2))
    assert st["days_left"] == pytest.approx((month.end - T0) / 86400, abs=1e-3)
    put = api.client.put(
        f"/v1/budgets/{b['id']}",
        json={"name": "alpha-cap", "scope": "team:alpha", "limit_usd": 50, "action": "block"},
        headers=api.h("admin"),
    )
    assert put.status_code == 200 and put.json()["action"] == "block" and put.json()["limit_usd"] == 50
    assert api.client.delete(f"/v1/budgets/{b['id']}", headers=api.h("admin")).status_code == 204
    assert api.client.get(f"/v1/budgets/{b['id']}", headers=api.h("admin")).status_code == 404


def test_feasibility_check(api: Api) -> None:
    add_node(api.db, T0 - 86400)
    create(api, action="block")
    create(api, name="everyone", scope="all", limit_usd=1000.0)
    add_spend(api.db, "alpha", 15.0, T0 - 60)
    r = api.client.post(
        "/v1/budgets/check", json={"command": ["x"], "gpus": 2, "estimated_runtime_s": 7200}, headers=api.h("alice")
    )
    out = r.json()
    assert r.status_code == 200 and out["job_cost_usd"] == 4.0 and out["runtime_source"] == "estimate"
    lines = {x["name"]: x for x in out["budgets"]}
    assert lines["alpha-cap"]["remaining_usd"] == 5.0 and lines["alpha-cap"]["fits"]
    assert out["fits"] and not out["blocked"]
    big = api.client.post("/v1/budgets/check", json={"command": ["x"], "gpus": 8}, headers=api.h("alice")).json()
    assert big["runtime_source"] == "default" and big["job_cost_usd"] == 8.0 and big["blocked"]
    # another team is not in alpha's scope
    assert [
        x["name"]
        for x in api.client.post("/v1/budgets/check", json={"command": ["x"], "gpus": 8}, headers=api.h("bob")).json()[
            "budgets"
        ]
    ] == ["everyone"]


def test_block_refuses_with_a_402_problem(api: Api) -> None:
    add_node(api.db, T0 - 86400)
    create(api, action="block")
    add_spend(api.db, "alpha", 15.0, T0 - 60)
    api.submit("alice", gpus=4, estimated_runtime_s=3600)  # $4: 19 committed
    r = api.client.post(
        "/v1/jobs",
        json={"command": ["x"], "gpus": 2, "estimated_runtime_s": 3600},
        headers=api.h("alice", **{"Idempotency-Key": "k1"}),
    )
    assert r.status_code == 402 and r.headers["content-type"] == "application/problem+json"
    p = r.json()
    assert p["code"] == "budget_exceeded" and p["status"] == 402
    assert "alpha-cap" in p["detail"] and "$20.00" in p["detail"] and "$19.00" in p["detail"] and "$2.00" in p["detail"]
    api.submit("bob", gpus=8)  # other teams are not blocked
    api.submit("alice", gpus=0)  # a CPU-only job costs no GPU-hours: fits


def test_64_concurrent_submitters_never_pass_the_limit(api: Api) -> None:
    add_node(api.db, T0 - 86400)
    create(api, action="block", limit_usd=20.0)
    add_spend(api.db, "alpha", 7.5, T0 - 60)  # near: 12.5 left, each job costs 1 → 12 fit
    results: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(64)

    def submitter(i: int) -> None:
        start.wait()
        r = api.client.post(
            "/v1/jobs",
            json={"command": ["x"], "gpus": 1, "estimated_runtime_s": 3600, "name": f"j{i}"},
            headers=api.h("alice", **{"Idempotency-Key": f"c{i}"}),
        )
        with lock:
            results.append(r.status_code)

    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(results)) == [201, 402], results
    assert results.count(201) == 12
    with api.db.session() as s:
        b = budgets_repo.budget_of(budgets_repo.get_budget(s, "alpha-cap"))
        committed = committed_spend(s, Scope.parse("team:alpha"), b.period_at(T0), T0)
    assert committed.total_usd <= 20.0 + 1e-9
    assert committed.total_usd == pytest.approx(19.5) and committed.jobs == 12


def test_block_grace_lets_work_in_for_a_while(api: Api) -> None:
    add_node(api.db, T0 - 86400)
    create(api, action="block", grace_s=600)
    add_spend(api.db, "alpha", 19.5, T0 - 60)
    api.submit("alice", gpus=1)  # would pass the limit: the grace window starts now
    api.clock.advance(599)
    api.submit("alice", gpus=1)
    api.clock.advance(1)
    r = api.client.post("/v1/jobs", json={"command": ["x"], "gpus": 1}, headers=api.h("alice"))
    assert r.status_code == 402
    st = api.client.get("/v1/budgets/alpha-cap/status", headers=api.h("admin")).json()
    assert st["enforcing"] and [a["kind"] for a in st["alerts"]] == ["limit"]


def test_cli_through_the_sdk(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    from gpufleet.cli import jobs as cli_jobs
    from gpufleet.cli.main import app
    from gpufleet.sdk.client import Client

    who = ["admin"]

    def make_client(url: str | None, token: str | None) -> Client:
        return Client("http://testserver", api.secrets[who[0]], transport=api.sdk_transport)

    monkeypatch.setattr(cli_jobs, "make_client", make_client)
    runner = CliRunner()
    add_node(api.db, T0 - 86400)
    add_spend(api.db, "alpha", 15.0, T0 - 60)
    res = runner.invoke(
        app,
        [
            "budget",
            "create",
            "alpha-cap",
            "--scope",
            "team:alpha",
            "--limit",
            "20",
            "--action",
            "block",
            "--threshold",
            "90:critical",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["thresholds"] == [{"percent": 90.0, "severity": "critical"}]
    bad = runner.invoke(app, ["budget", "create", "x", "--scope", "team:a", "--limit", "5", "--threshold", "9:loud"])
    assert bad.exit_code == 2 and "--threshold" in bad.stderr
    res = runner.invoke(app, ["budget", "ls"])
    assert res.exit_code == 0 and "alpha-cap" in res.stdout
    res = runner.invoke(app, ["budget", "show", "alpha-cap", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["status"]["spend_usd"] == 15.0
    who[0] = "alice"
    res = runner.invoke(app, ["budget", "check", "--gpus", "2", "--estimate", "1h", "--", "python", "t.py"])
    assert res.exit_code == 0 and "fits" in res.stdout, res.output
    res = runner.invoke(app, ["budget", "check", "--gpus", "8", "--", "python", "t.py"])
    assert res.exit_code == 6 and "does not fit" in res.stdout
    who[0] = "admin"
    assert runner.invoke(app, ["budget", "delete", "alpha-cap"]).exit_code == 0
    assert runner.invoke(app, ["budget", "show", "alpha-cap"]).exit_code == 3
