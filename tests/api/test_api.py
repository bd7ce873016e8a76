"""The REST API through HTTP against a real SQLite store: submit, idempotency, listing, cancel,
events, logs, queue, nodes, teams, tokens, usage, health and metrics."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.model.node import CapacityType, Node
from gpufleet.store import repo
from tests.support.api_support import T0, Api, fields, make_api, problem


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url)


# -- submit ---------------------------------------------------------------------------------------

BAD_SUBMITS: list[tuple[str, dict[str, Any], str]] = [
    ("no command", {}, "body.command"),
    ("empty command", {"command": []}, "body.command"),
    ("command not a list", {"command": "python x.py"}, "body.command"),
    ("negative gpus", {"gpus": -1}, "body.gpus"),
    ("too many gpus", {"gpus": 65}, "body.gpus"),
    ("gpus not int", {"gpus": "two"}, "body.gpus"),
    ("milli too big", {"gpu_milli": 1000}, "body.gpu_milli"),
    ("milli zero", {"gpu_milli": 0}, "body.gpu_milli"),
    ("bad mig syntax", {"mig": "big"}, "body.mig"),
    ("unknown mig", {"mig": "5g.99gb"}, "body.mig"),
    ("mig on a gpu without it", {"mig": "1g.10gb", "gpu_types": ["A100-80GB", "L4"]}, "body.gpu_types[1]"),
    ("unknown gpu type", {"gpus": 1, "gpu_types": ["A100", "X9000"]}, "body.gpu_types[1]"),
    ("gpu types without gpus", {"gpu_types": ["A100"]}, "body.gpu_types"),
    ("bad priority", {"priority": "critical"}, "body.priority"),
    ("bad team name", {"team": "Alpha Team"}, "body.team"),
    ("unknown field", {"gpuz": 1}, "body.gpuz"),
    ("bad env name", {"env": {"1X": "y"}}, "body.env.1X"),
    ("negative runtime", {"max_runtime_s": 0}, "body.max_runtime_s"),
    ("memory too small", {"gpus": 1, "gpu_types": ["T4"], "min_gpu_memory_gib": 40}, "body.min_gpu_memory_gib"),
    ("fraction and mig", {"gpu_milli": 500, "mig": "1g.10gb"}, "body.mig"),  # and body.gpu_milli
    ("fraction of two gpus", {"gpu_milli": 500, "gpus": 2}, "body.gpus"),  # and body.gpu_milli
]


@pytest.mark.parametrize(("case", "patch", "field"), BAD_SUBMITS, ids=[c[0] for c in BAD_SUBMITS])
def test_bad_submit_names_the_field(api: Api, case: str, patch: dict[str, Any], field: str) -> None:
    body = {"command": ["python", "train.py"], **patch}
    if case in ("no command",):
        body.pop("command")
    doc = problem(api.client.post("/v1/jobs", json=body, headers=api.h("alice")), 422, "invalid_input")
    assert field in fields(doc), doc
    assert all(e["message"] for e in doc["errors"])


def test_malformed_json_is_a_problem(api: Api) -> None:
    r = api.client.post(
        "/v1/jobs", content=b'{"command": [', headers=api.h("alice", **{"Content-Type": "application/json"})
    )
    doc = problem(r, 400, "malformed_json")
    assert fields(doc) == ["body"]
    assert "character" in doc["errors"][0]["message"]


GOOD_SUBMITS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("cpu only", {}, {"gpus": 0, "gpu_milli": None, "mig": None, "name": "python train.py"}),
    ("whole gpus, alias", {"gpus": 2, "gpu_types": ["a100", "A100-40GB"]}, {"gpus": 2, "gpu_types": ["A100-40GB"]}),
    ("fraction", {"gpu_milli": 250}, {"gpus": 1, "gpu_milli": 250}),
    ("mig picks types", {"mig": "3g.40gb"}, {"gpus": 1, "mig": "3g.40gb", "gpu_types": ["H100-80GB", "A100-80GB"]}),
    ("named", {"name": "resnet", "priority": "low", "labels": {"owner": "ann"}}, {"name": "resnet"}),
    ("path program", {"command": ["/usr/bin/python3", "-m", "x"]}, {"name": "python3 -m x"}),
]


@pytest.mark.parametrize(("case", "patch", "expect"), GOOD_SUBMITS, ids=[c[0] for c in GOOD_SUBMITS])
def test_submit_shapes(api: Api, case: str, patch: dict[str, Any], expect: dict[str, Any]) -> None:
    job = api.submit("alice", **patch)
    assert job["team"] == "alpha" and job["state"] == "PENDING"
    for k, v in expect.items():
        assert job[k] == v, (k, job)
    assert api.client.get(f"/v1/jobs/{job['id']}", headers=api.h("alice")).json() == job
    assert api.wakes[0] >= 1


def test_idempotent_replay_and_conflict(api: Api) -> None:
    body: dict[str, Any] = {"command": ["python", "a.py"], "gpus": 1}
    h = api.h("alice", **{"Idempotency-Key": "k-1"})
    first = api.client.post("/v1/jobs", json=body, headers=h)
    assert first.status_code == 201
    again = api.client.post("/v1/jobs", json={"gpus": 1, "command": ["python", "a.py"]}, headers=h)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    doc = problem(api.client.post("/v1/jobs", json={**body, "gpus": 2}, headers=h), 409, "conflict")
    assert "k-1" in doc["detail"]
    # another token's same key is another job
    other = api.client.post("/v1/jobs", json=body, headers=api.h("admin", **{"Idempotency-Key": "k-1"}))
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    # no key: two jobs
    a = api.submit("alice", **body)
    b = api.submit("alice", **body)
    assert a["id"] != b["id"]


def test_concurrent_same_key_submits_make_one_job(api: Api) -> None:
    app = api.client.app

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            h = api.h("alice", **{"Idempotency-Key": "same"})
            return await asyncio.gather(
                *(c.post("/v1/jobs", json={"command": ["x"], "gpus": 1}, headers=h) for _ in range(16))
            )

    responses = asyncio.run(run())
    assert sorted(r.status_code for r in responses) == [200] * 15 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    page = api.client.get("/v1/jobs", headers=api.h("alice")).json()
    assert len(page["items"]) == 1


def test_submit_team_rules(api: Api) -> None:
    assert api.submit("alice", team="alpha")["team"] == "alpha"
    problem(
        api.client.post("/v1/jobs", json={"command": ["x"], "team": "beta"}, headers=api.h("alice")), 403, "forbidden"
    )
    problem(api.client.post("/v1/jobs", json={"command": ["x"]}, headers=api.h("vera")), 403, "forbidden")
    # admins may submit to any team that exists; a submit never creates one (issue 10, observation 12)
    unknown = api.client.post("/v1/jobs", json={"command": ["x"], "team": "gamma"}, headers=api.h("admin"))
    assert fields(problem(unknown, 422, "invalid_input")) == ["body.team"]
    assert api.client.put("/v1/teams/gamma", json={}, headers=api.h("admin")).status_code == 200  # on purpose
    assert api.submit("admin", team="gamma")["team"] == "gamma"


# -- list -----------------------------------------------------------------------------------------


def _set_state(api: Api, job_id: str, *path: str) -> None:
    with api.db.session() as s:
        for state in path:
            repo.transition(s, repo.get_job(s, job_id), state, f"test → {state}", api.clock.now())


def test_list_filters_and_pagination(api: Api) -> None:
    ids = [api.submit("alice", project="p1" if i % 2 else "p2", labels={"k": str(i % 3)})["id"] for i in range(7)]
    beta = api.submit("bob")["id"]
    _set_state(api, ids[0], "ADMITTED", "RUNNING")
    h = api.h("alice")

    def listed(query: str, who: str = "alice") -> list[str]:
        out: list[str] = []
        url = f"/v1/jobs?{query}"
        while True:
            page = api.client.get(url, headers=api.h(who)).json()
            out += [j["id"] for j in page["items"]]
            if page["next_cursor"] is None:
                return out
            url = f"/v1/jobs?{query}&cursor={page['next_cursor']}"

    newest_first = list(reversed(ids))
    assert listed("limit=3") == newest_first
    assert listed("limit=100") == newest_first
    assert listed("limit=2&project=p1") == [i for n, i in enumerate(ids) if n % 2][::-1]
    assert listed("label=k=0") == [i for n, i in enumerate(ids) if n % 3 == 0][::-1]
    assert listed("label=k=0&project=p2") == [i for n, i in enumerate(ids) if n % 3 == 0 and n % 2 == 0][::-1]
    assert listed("state=RUNNING") == [ids[0]]
    assert listed("state=running&state=PENDING&limit=4") == newest_first
    assert listed("team=beta") == []  # another team's jobs: as if there were none
    assert listed("team=beta", who="admin") == [beta]
    assert set(listed("", who="admin")) == {*ids, beta}
    assert listed("", who="bob") == [beta]
    assert listed("", who="vera") == newest_first
    doc = problem(api.client.get("/v1/jobs?cursor=garbage!", headers=h), 422, "invalid_input")
    assert fields(doc) == ["query.cursor"]
    doc = problem(api.client.get("/v1/jobs?state=DONE", headers=h), 422, "invalid_input")
    assert fields(doc) == ["query.state[0]"]
    doc = problem(api.client.get("/v1/jobs?label=novalue", headers=h), 422, "invalid_input")
    assert fields(doc) == ["query.label[0]"]
    doc = problem(api.client.get("/v1/jobs?limit=0", headers=h), 422, "invalid_input")
    assert fields(doc) == ["query.limit"]


# -- cancel and events ----------------------------------------------------------------------------


def test_cancel_paths(api: Api) -> None:
    pending = api.submit("alice")["id"]
    running = api.submit("alice")["id"]
    done = api.submit("alice")["id"]
    _set_state(api, running, "ADMITTED", "RUNNING")
    _set_state(api, done, "ADMITTED", "RUNNING", "SUCCEEDED")
    h = api.h("alice")

    r = api.client.post(f"/v1/jobs/{pending}/cancel", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED"
    events = api.client.get(f"/v1/jobs/{pending}/events", headers=h).json()
    assert [(e["old"], e["new"]) for e in events] == [(None, "PENDING"), ("PENDING", "CANCELLED")]
    assert events[-1]["reason"] == f"cancelled by {api.token_ids['alice']}"

    r = api.client.post(f"/v1/jobs/{running}/cancel", headers=h)
    assert r.status_code == 202
    assert r.json()["state"] == "RUNNING" and r.json()["cancel_requested"] is True
    assert api.client.post(f"/v1/jobs/{running}/cancel", headers=h).status_code == 202  # asking twice is fine

    problem(api.client.post(f"/v1/jobs/{done}/cancel", headers=h), 409, "conflict")
    problem(api.client.post(f"/v1/jobs/{pending}/cancel", headers=h), 409, "conflict")
    problem(api.client.post("/v1/jobs/j-nope/cancel", headers=h), 404, "not_found")
    problem(api.client.post(f"/v1/jobs/{running}/cancel", headers=api.h("vera")), 403, "forbidden")
    problem(api.client.post(f"/v1/jobs/{running}/cancel", headers=api.h("bob")), 404, "not_found")


def test_events_of_a_missing_and_a_foreign_job_look_the_same(api: Api) -> None:
    job = api.submit("alice")["id"]
    foreign = api.client.get(f"/v1/jobs/{job}/events", headers=api.h("bob"))
    missing = api.client.get("/v1/jobs/j-nope/events", headers=api.h("bob"))
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["detail"].replace(job, "X") == missing.json()["detail"].replace("j-nope", "X")


# -- logs -----------------------------------------------------------------------------------------


def test_logs_offset_and_missing_file(api: Api) -> None:
    job = api.submit("alice")["id"]
    h = api.h("alice")
    r = api.client.get(f"/v1/jobs/{job}/logs", headers=h)
    assert r.status_code == 200 and r.text == ""
    assert r.headers["content-type"].startswith("text/plain")
    (api.logs / f"{job}.log").write_bytes(b"hello\nworld\n" * 10000)
    assert api.client.get(f"/v1/jobs/{job}/logs", headers=h).content == b"hello\nworld\n" * 10000
    assert api.client.get(f"/v1/jobs/{job}/logs?offset=6", headers=h).content.startswith(b"world\nhello")
    assert api.client.get(f"/v1/jobs/{job}/logs?offset=120000", headers=h).content == b""  # the end: nothing more
    problem(api.client.get(f"/v1/jobs/{job}/logs?offset=10000000", headers=h), 416, "offset_out_of_range")
    problem(api.client.get(f"/v1/jobs/{job}/logs?offset=-1", headers=h), 422, "invalid_input")
    problem(api.client.get(f"/v1/jobs/{job}/logs", headers=api.h("bob")), 404, "not_found")
    problem(api.client.get("/v1/jobs/j-nope/logs", headers=h), 404, "not_found")


def test_logs_follow_until_the_job_ends(api: Api) -> None:
    job = api.submit("alice")["id"]
    _set_state(api, job, "ADMITTED", "RUNNING")
    path = api.logs / f"{job}.log"
    path.write_bytes(b"line 0\n")

    def writer() -> None:
        for i in range(1, 5):
            time.sleep(0.05)
            with path.open("ab") as f:
                f.write(f"line {i}\n".encode())
        with path.open("ab") as f:
            f.write(b"last words\n")
        _set_state(api, job, "SUCCEEDED")

    t = threading.Thread(target=writer)
    t.start()
    started = time.monotonic()
    with api.client.stream("GET", f"/v1/jobs/{job}/logs?follow=true&offset=2", headers=api.h("alice")) as r:
        assert r.status_code == 200
        body = b"".join(r.iter_bytes())
    t.join()
    assert body == b"ne 0\nline 1\nline 2\nline 3\nline 4\nlast words\n"
    assert time.monotonic() - started < 10
    # following an ended job returns what there is at once
    assert api.client.get(f"/v1/jobs/{job}/logs?follow=true", headers=api.h("alice")).content.endswith(b"last words\n")


# -- queue, nodes, teams --------------------------------------------------------------------------


def test_queue_from_the_leader_and_without_one(api: Api) -> None:
    a1 = api.submit("alice", name="a1")["id"]
    b1 = api.submit("bob", name="b1")["id"]
    a2 = api.submit("alice", name="a2")["id"]
    # no leader: pending jobs in submit order
    q = api.client.get("/v1/queue", headers=api.h("admin")).json()
    assert [e["job_id"] for e in q] == [a1, b1, a2]
    assert [e["job_id"] for e in api.client.get("/v1/queue", headers=api.h("alice")).json()] == [a1, a2]

    published = [
        {"job": a2, "position": 1, "reason": "next", "estimated_start": T0 + 60},
        {"job": b1, "position": 2, "reason": "quota", "estimated_start": None},
        {"job": a1, "position": 3, "reason": "fits later", "estimated_start": T0 + 3600},
        {"job": "j-gone", "position": 4, "reason": "?", "estimated_start": None},
    ]
    with api.db.session() as s:
        repo.heartbeat(s, "r1", is_leader=True, now=T0, queue=published)
    q = api.client.get("/v1/queue", headers=api.h("admin")).json()
    assert [(e["job_id"], e["position"], e["reason"]) for e in q] == [
        (a2, 1, "next"),
        (b1, 2, "quota"),
        (a1, 3, "fits later"),
    ]
    assert q[0]["estimated_start"] == "2026-11-12T12:01:00Z" and q[1]["estimated_start"] is None
    assert q[1]["name"] == "b1" and q[1]["team"] == "beta"
    mine = api.client.get("/v1/queue", headers=api.h("vera")).json()
    assert [(e["job_id"], e["position"]) for e in mine] == [(a2, 1), (a1, 3)]
    assert api.client.get("/v1/queue?team=beta", headers=api.h("alice")).json() == []
    assert [e["job_id"] for e in api.client.get("/v1/queue?team=beta", headers=api.h("admin")).json()] == [b1]
    _set_state(api, a2, "ADMITTED")  # started since the cycle: gone from the queue
    assert [e["job_id"] for e in api.client.get("/v1/queue", headers=api.h("admin")).json()] == [b1, a1]


def _cluster(api: Api) -> dict[str, str]:
    """Node n1 (4x A100-80GB, $8/h, only GPUs so each GPU is $2/h) since T0-10h; alpha ran 2 GPUs
    T0-4h..T0-1h (a stored segment); beta runs 1 GPU since T0-2h (an open run)."""
    api.clock.advance(0)
    a = api.submit("alice", gpus=2, labels={"owner": "ann"}, project="vision")["id"]
    b = api.submit("bob", gpus=1)["id"]
    with api.db.session() as s:
        node = repo.upsert_node(
            s,
            Node("n1", gpu_model="A100-80GB", gpu_count=4, capacity_type=CapacityType.ON_DEMAND),
            hourly_usd=8.0,
            now=T0 - 10 * 3600,
        )
        job_a = repo.get_job(s, a)
        repo.transition(s, job_a, "ADMITTED", "placed", T0 - 4 * 3600, run=1)
        repo.open_run(
            s,
            job_id=a,
            run=1,
            node="n1",
            placement=[{"node": "n1", "gpus": [0, 1], "milli": 1000}],
            capacity_type="on-demand",
            node_hourly_usd=8.0,
            now=T0 - 4 * 3600,
        )
        repo.transition(s, job_a, "RUNNING", "started", T0 - 4 * 3600)
        repo.end_run(
            s, a, 1, outcome="finished", exit_code=0, reason="ok", started_at=T0 - 4 * 3600, ended_at=T0 - 3600
        )
        repo.append_segment(
            s,
            job=job_a,
            run=1,
            node=node,
            gpu_share_units=2 * 7000,
            cpu_milli=0,
            memory_mib=0,
            node_hourly_usd=8.0,
            capacity_type="on-demand",
            start=T0 - 4 * 3600,
            end=T0 - 3600,
        )
        repo.transition(s, job_a, "SUCCEEDED", "exit 0", T0 - 3600)
        job_b = repo.get_job(s, b)
        repo.transition(
            s,
            job_b,
            "ADMITTED",
            "placed",
            T0 - 2 * 3600,
            run=1,
            placement=[{"node": "n1", "gpus": [2], "milli": 1000, "mig_mask": 0}],
        )
        repo.open_run(
            s,
            job_id=b,
            run=1,
            node="n1",
            placement=[{"node": "n1", "gpus": [2], "milli": 1000}],
            capacity_type="on-demand",
            node_hourly_usd=8.0,
            now=T0 - 2 * 3600,
        )
        repo.mark_run_started(s, b, 1, pid=123, started_at=T0 - 2 * 3600)
        repo.transition(s, job_b, "RUNNING", "started", T0 - 2 * 3600)
    return {"a": a, "b": b}


def test_nodes_and_team_usage(api: Api) -> None:
    ids = _cluster(api)
    nodes = api.client.get("/v1/nodes", headers=api.h("vera")).json()
    assert len(nodes) == 1
    n = nodes[0]
    assert (n["name"], n["gpu_model"], n["gpu_count"], n["hourly_price_usd"]) == ("n1", "A100-80GB", 4, 8.0)
    assert (n["allocated_gpus"], n["running_jobs"]) == (1.0, 1)
    job_b = api.client.get(f"/v1/jobs/{ids['b']}", headers=api.h("bob")).json()
    assert job_b["placement"] == [{"node": "n1", "gpus": [2], "milli": 1000, "mig_mask": 0}]

    r = api.client.put(
        "/v1/teams/beta", json={"weight": 2, "quota_gpus": {"a100-80gb": 2.5, "*": 4}}, headers=api.h("admin")
    )
    assert r.status_code == 200, r.text
    beta = r.json()
    assert beta["quota_gpus"] == {"A100-80GB": 2.5, "*": 4.0} and beta["weight"] == 2.0
    assert beta["used_gpus"] == {"A100-80GB": 1.0}
    assert api.client.get("/v1/teams/beta", headers=api.h("bob")).json() == beta
    assert [t["name"] for t in api.client.get("/v1/teams", headers=api.h("bob")).json()] == ["beta"]
    problem(api.client.get("/v1/teams/beta", headers=api.h("alice")), 404, "not_found")
    problem(api.client.get("/v1/teams/nosuch", headers=api.h("admin")), 404, "not_found")
    problem(api.client.put("/v1/teams/beta", json={}, headers=api.h("bob")), 403, "forbidden")
    doc = problem(
        api.client.put("/v1/teams/beta", json={"quota_gpus": {"X1": 1}}, headers=api.h("admin")), 422, "invalid_input"
    )
    assert fields(doc) == ["body.quota_gpus.X1"]
    doc = problem(api.client.put("/v1/teams/beta", json={"weight": 0}, headers=api.h("admin")), 422, "invalid_input")
    assert fields(doc) == ["body.weight"]
    r = api.client.put(
        "/v1/teams/newteam", json={"cohort": "research", "borrowing_limit_gpus": 1.5}, headers=api.h("admin")
    )
    assert r.json()["borrowing_limit_gpus"] == 1.5 and r.json()["cohort"] == "research"


# -- usage ----------------------------------------------------------------------------------------

WINDOW = "2026-11-12T02:00:00Z,2026-11-12T12:00:00Z"  # T0-10h .. T0: the node costs 10 h x $8 = $80


def test_usage_by_team_hand_computed(api: Api) -> None:
    ids = _cluster(api)
    r = api.client.get(f"/v1/usage?window={WINDOW}&aggregate=team", headers=api.h("admin"))
    assert r.status_code == 200, r.text
    rep = r.json()
    rows = {row["key"]["team"]: row for row in rep["rows"]}
    # alpha: 2 GPUs x 3 h x $2 = $12; beta: 1 GPU x 2 h x $2 = $4; idle: $80 - $16 = $64.
    assert rows["alpha"]["total_cost_usd"] == "12.00" and rows["alpha"]["gpu_hours"] == 6.0
    assert rows["beta"]["total_cost_usd"] == "4.00" and rows["beta"]["gpu_hours"] == 2.0
    assert rep["idle"]["total_cost_usd"] == "64.00" and rep["totals"]["total_cost_usd"] == "80.00"
    assert rep["window_start"] == "2026-11-12T02:00:00Z" and rep["window_end"] == "2026-11-12T12:00:00Z"

    spread = api.client.get(f"/v1/usage?window={WINDOW}&spread_idle=true", headers=api.h("admin")).json()
    srows = {row["key"]["team"]: row["total_cost_usd"] for row in spread["rows"]}
    assert srows == {"alpha": "60.00", "beta": "20.00"} and spread["idle"]["total_cost_usd"] == "0.00"

    by_job = api.client.get(f"/v1/usage?window={WINDOW}&aggregate=job,label:owner", headers=api.h("admin")).json()
    assert by_job["aggregate"] == ["job", "label:owner"]
    keyed = {(row["key"]["job"], row["key"]["label:owner"]): row["total_cost_usd"] for row in by_job["rows"]}
    assert keyed == {(ids["a"], "ann"): "12.00", (ids["b"], ""): "4.00"}

    # a member sees its own team's rows only
    mine = api.client.get(f"/v1/usage?window={WINDOW}&aggregate=job", headers=api.h("bob")).json()
    assert [(row["key"], row["total_cost_usd"]) for row in mine["rows"]] == [({"job": ids["b"]}, "4.00")]
    mine = api.client.get(f"/v1/usage?window={WINDOW}&aggregate=project", headers=api.h("alice")).json()
    assert [(row["key"], row["total_cost_usd"]) for row in mine["rows"]] == [({"project": "vision"}, "12.00")]

    day = api.client.get("/v1/usage?window=today&aggregate=gpu_model,capacity_type", headers=api.h("admin")).json()
    assert day["rows"][0]["key"] == {"gpu_model": "A100-80GB", "capacity_type": "on-demand"}
    assert day["totals"]["total_cost_usd"] == "80.00"  # the node was added at 02:00 today


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("window=fortnight", "query.window"),
        ("window=2026-11-08T00:00:00Z,2026-11-01T00:00:00Z", "query.window"),
        ("aggregate=team,colour", "query.aggregate[1]"),
        ("aggregate=team,team", "query.aggregate[1]"),
        ("aggregate=label:", "query.aggregate[0]"),
        ("spread_idle=perhaps", "query.spread_idle"),
    ],
)
def test_usage_bad_query(api: Api, query: str, field: str) -> None:
    doc = problem(api.client.get(f"/v1/usage?{query}", headers=api.h("admin")), 422, "invalid_input")
    assert fields(doc) == [field]


# -- tokens and whoami ----------------------------------------------------------------------------


def test_tokens_lifecycle(api: Api) -> None:
    r = api.client.post("/v1/tokens", json={"team": "delta", "role": "viewer", "name": "ci"}, headers=api.h("admin"))
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["token"] and created["team"] == "delta" and created["role"] == "viewer"
    who = api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {created['token']}"}).json()
    assert who == {"token_id": created["id"], "team": "delta", "role": "viewer"}
    listed = api.client.get("/v1/tokens?team=delta", headers=api.h("admin")).json()
    assert [t["id"] for t in listed] == [created["id"]] and "token" not in listed[0]
    assert len(api.client.get("/v1/tokens", headers=api.h("admin")).json()) == 5
    assert api.client.delete(f"/v1/tokens/{created['id']}", headers=api.h("admin")).status_code == 204
    problem(
        api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {created['token']}"}), 401, "unauthenticated"
    )
    assert api.client.get("/v1/tokens?team=delta", headers=api.h("admin")).json()[0]["revoked"] is True
    problem(api.client.delete("/v1/tokens/tok_nope", headers=api.h("admin")), 404, "not_found")
    problem(
        api.client.post("/v1/tokens", json={"team": "x", "role": "root"}, headers=api.h("admin")), 422, "invalid_input"
    )
    r = api.client.post("/v1/tokens", json={"team": "x", "expires_in_days": 1}, headers=api.h("admin"))
    secret = r.json()["token"]
    assert api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    api.clock.advance(2 * 86400)
    problem(api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {secret}"}), 401, "unauthenticated")


# -- errors, health, metrics, openapi -------------------------------------------------------------


def test_unknown_route_wrong_method_and_internal_error(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    problem(api.client.get("/v1/nothing", headers=api.h("admin")), 404, "not_found")
    problem(api.client.delete("/v1/whoami", headers=api.h("admin")), 405, "method_not_allowed")

    def boom(*_a: Any, **_k: Any) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(repo, "list_nodes", boom)
    doc = problem(api.client.get("/v1/nodes", headers=api.h("admin")), 500, "internal_error")
    assert "secret internals" not in doc["detail"]


def test_health_and_readiness(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").status_code == 200
    api.ready[0] = False
    problem(api.client.get("/readyz"), 503, "not_ready")


def test_readyz_when_the_store_is_gone(tmp_path: Path) -> None:
    gen = make_api(tmp_path)
    api = next(gen)
    api.db.dispose()
    (tmp_path / "gpufleet.db").unlink()
    (tmp_path / "gpufleet.db").mkdir()  # not a database any more
    problem(api.client.get("/readyz"), 503, "not_ready")


def test_metrics_parse(api: Api) -> None:
    _cluster(api)
    api.submit("alice")
    api.client.get("/v1/jobs/j-nope", headers=api.h("alice"))
    text = api.client.get("/metrics", headers=api.h("admin")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    reqs = {
        (s.labels["method"], s.labels["route"], s.labels["status"]): s.value
        for s in families["gpufleet_http_requests"].samples
        if s.name.endswith("_total")
    }
    assert reqs[("POST", "/v1/jobs", "201")] == 3
    assert reqs[("GET", "/v1/jobs/{job_id}", "404")] == 1
    jobs = {(s.labels["state"], s.labels["team"]): s.value for s in families["gpufleet_jobs"].samples}
    assert jobs == {("SUCCEEDED", "alpha"): 1, ("RUNNING", "beta"): 1, ("PENDING", "alpha"): 1}
    assert families["gpufleet_gpus_capacity"].samples[0].value == 4
    assert families["gpufleet_gpus_allocated"].samples[0].value == 1
    assert families["gpufleet_queue_length"].samples[0].value == 1
    submits = {s.labels["team"]: s.value for s in families["gpufleet_job_submits"].samples if s.name.endswith("_total")}
    assert submits == {"alpha": 2, "beta": 1}
    assert "gpufleet_http_request_duration_seconds" in families


def test_metrics_pass_promtool(api: Api, tmp_path: Path) -> None:
    """The exposition is checked by Prometheus's own linter (``promtool check metrics``), on a server
    with every family present: nodes, running/ended/preempted/spot-interrupted jobs, budgets,
    telemetry, a leader's queue and a scheduling cycle (tests/observability/test_metrics.py's scenario). The DCGM
    series (``/metrics/dcgm``) keep the exporter's camelCase label names (``modelName``, ``UUID``,
    ``Hostname``): that is the only thing promtool may say about them."""
    from tests.observability.test_metrics import DCGM_FAMILIES, FAMILIES, SCENARIOS, build

    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("GPUFLEET_SKIP_PROMTOOL") == "1":
            pytest.skip("promtool not installed (GPUFLEET_SKIP_PROMTOOL=1)")
        pytest.fail("promtool not found: apt-get install prometheus (make test does), or GPUFLEET_SKIP_PROMTOOL=1")
    build(api, SCENARIOS[0])
    api.submit("alice")
    api.client.app.state.metrics.observe_cycle(0.01)  # type: ignore[attr-defined]
    text = api.client.get("/metrics", headers=api.h("admin")).text
    present = {f.name for f in text_string_to_metric_families(text) if f.samples}
    assert set(FAMILIES) | {"gpufleet_scheduler_cycle_duration_seconds"} <= present
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    dcgm = api.client.get("/metrics/dcgm", headers=api.h("admin")).text
    assert {f.name for f in text_string_to_metric_families(dcgm)} == set(DCGM_FAMILIES)
    out = subprocess.run([promtool, "check", "metrics"], input=dcgm, capture_output=True, text=True, timeout=60)
    problems = [p for p in (out.stdout + out.stderr).splitlines() if p.strip()]
    assert problems and all(
        p.startswith("DCGM_FI_DEV_") and p.endswith("label names should be written in 'snake_case' not 'camelCase'")
        for p in problems
    ), problems


def test_openapi_lists_every_route_and_model(api: Api) -> None:
    spec = api.client.get("/openapi.json").json()
    assert spec["info"]["title"] == "gpufleet" and spec["info"]["version"]
    ops = {(p, m.upper()) for p, item in spec["paths"].items() for m in item}
    for route in [
        ("/v1/jobs", "POST"),
        ("/v1/jobs", "GET"),
        ("/v1/jobs/{job_id}", "GET"),
        ("/v1/jobs/{job_id}/cancel", "POST"),
        ("/v1/jobs/{job_id}/events", "GET"),
        ("/v1/jobs/{job_id}/logs", "GET"),
        ("/v1/queue", "GET"),
        ("/v1/nodes", "GET"),
        ("/v1/teams", "GET"),
        ("/v1/teams/{name}", "PUT"),
        ("/v1/teams/{name}", "GET"),
        ("/v1/tokens", "POST"),
        ("/v1/tokens", "GET"),
        ("/v1/tokens/{token_id}", "DELETE"),
        ("/v1/usage", "GET"),
        ("/v1/whoami", "GET"),
        ("/healthz", "GET"),
        ("/readyz", "GET"),
        ("/metrics", "GET"),
    ]:
        assert route in ops, route
    schemas = spec["components"]["schemas"]
    for model in [
        "JobSubmit",
        "JobOut",
        "JobPage",
        "JobEventOut",
        "QueueEntry",
        "NodeOut",
        "TeamIn",
        "TeamOut",
        "TokenCreate",
        "TokenOut",
        "TokenCreated",
        "WhoAmI",
        "CostLineOut",
        "UsageReport",
        "Problem",
    ]:
        assert model in schemas, model
    assert "HTTPValidationError" not in schemas
    err = spec["paths"]["/v1/jobs"]["post"]["responses"]["422"]["content"]
    assert err == {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}


# -- the shared submit preparation (CLI and SDK paths use it without FastAPI) ----------------------


def test_request_hash_is_canonical() -> None:
    from gpufleet.services.submit import request_hash
    from gpufleet.wire import JobSubmit

    a = JobSubmit.model_validate({"command": ["x"], "gpus": 1, "labels": {"a": "1", "b": "2"}})
    b = JobSubmit.model_validate({"labels": {"b": "2", "a": "1"}, "gpus": 1, "command": ["x"], "priority": "normal"})
    c = JobSubmit.model_validate({"command": ["x"], "gpus": 2})
    assert request_hash(a) == request_hash(b) != request_hash(c)


def test_prepare_submit_without_http() -> None:
    from gpufleet.errors import InputError, PermissionDeniedError
    from gpufleet.services.submit import prepare_submit
    from gpufleet.wire import JobSubmit, Role

    p = prepare_submit(JobSubmit(command=["python", "t.py"], gpu_milli=300), caller_team="t", caller_role=Role.MEMBER)
    assert p.team == "t" and p.fields["gpus"] == 1 and p.fields["gpu_milli"] == 300 and p.fields["mig_profile"] is None
    mig = prepare_submit(
        JobSubmit(command=["x"], mig="1g.10gb", gpu_types=["A100-80GB"]), caller_team="t", caller_role=Role.ADMIN
    )
    assert mig.fields["gpu_milli"] == 143 and mig.fields["gpu_types"] == ["A100-80GB"]
    with pytest.raises(PermissionDeniedError):
        prepare_submit(JobSubmit(command=["x"], team="u"), caller_team="t", caller_role=Role.MEMBER)
    with pytest.raises(InputError) as err:
        prepare_submit(
            JobSubmit(command=["x"], gpus=1, gpu_types=["T4", "nope"]), caller_team="t", caller_role=Role.MEMBER
        )
    assert err.value.field == "gpu_types[1]"
