"""Issue 14, the MCP part: ``gpufleet mcp`` driven by the ``mcp`` SDK's own client, against a real
``gpufleet up`` (8 declared A100-80GB at $29.38/h, two teams, budgets, finished and running jobs).

- over stdio (``gpufleet mcp`` spawned with a member's token in its environment) and over streamable
  HTTP (``gpufleet mcp --transport http``, each request's ``Authorization: Bearer``);
- the tools' schemas are typed, and every answer is checked against the API's own figures (the cost
  report's total is ``/v1/usage``'s, recommend's dollars are ``/v1/recommendations``', the plan's
  forecast is ``/v1/budgets/check``'s, the what-if replays what ``gpufleet whatif --trace history``
  replays);
- a member sees only their team: another team's job or team is the API's refusal, as a tool error;
- ``propose_action`` files a pending proposal and changes nothing; no tool approves or rejects.

The pure parts (a spike's diagnosis, which needs weeks of history live) use a stand-in client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx
import httpx2
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from gpufleet.agent import tools
from gpufleet.agent.server import bearer_token
from gpufleet.cost.recommend import DENSE_TFLOPS
from gpufleet.wire import AnomalyCauseOut, AnomalyOut, JobOut, RecommendationOut
from tests.support.serverproc import ServerProcess, free_port

NODE_USD = 29.38
TOOLS = {
    "cost_analysis",
    "recommend",
    "forecast_job_cost",
    "check_budget_for_plan",
    "cost_report",
    "compare_configurations",
    "whatif",
    "diagnose_anomaly",
    "propose_action",
}
RESOURCES = {"gpufleet://queue", "gpufleet://budgets", "gpufleet://recommendations"}


@dataclass
class Fleet:
    server: ServerProcess
    alpha: str  # member tokens
    beta: str
    window: str  # an explicit past window holding the finished jobs: the same answer every time
    done_alpha: list[str]  # alpha's finished jobs, the warm-up first
    beta_job: str
    long_job: str  # alpha, running
    big_job: str  # alpha, pending (8 GPUs while the long job holds 2)


def _rfc(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    home = tmp_path_factory.mktemp("mcp") / "home"
    server = ServerProcess(home, gpus="8xA100-80GB", settings={"node_price_usd_per_hour": NODE_USD}).start()
    try:
        with server.client() as c:
            for team in ("alpha", "beta"):
                c.set_team(team)
            c.create_budget(name="alpha-watch", scope="team:alpha", limit_usd=50.0)
            c.create_budget(name="beta-cap", scope="team:beta", limit_usd=5.0, action="block")
            alpha = c.create_token("alpha", "member", "alpha-agent").token
            beta = c.create_token("beta", "member", "beta-agent").token
            warm_up = c.submit(command=["sleep", "0.2"], gpus=1, team="alpha", name="warm-up")
            first = warm_up.submitted_at
            done = []
            for i in range(6):
                team = "alpha" if i % 3 else "beta"
                done.append(
                    c.submit(
                        command=["sleep", "1.5"],
                        gpus=1 + i % 2,
                        team=team,
                        project="training" if i % 2 else "eval",
                        preemptible=i % 2 == 0,
                        estimated_runtime_s=2,
                        name=f"step-{i}",
                    ).id
                )
            for j in [warm_up.id, *done]:
                assert c.wait(j, timeout=60).state == "SUCCEEDED"
            end = datetime.now(UTC)
            long_job = c.submit(
                command=["sleep", "300"], gpus=2, team="alpha", project="training", estimated_runtime_s=300, name="long"
            ).id
            deadline = time.monotonic() + 30
            while c.get(long_job).state != "RUNNING" and time.monotonic() < deadline:
                time.sleep(0.1)
            big = c.submit(command=["sleep", "1"], gpus=8, team="alpha", name="big").id
            jobs = {j: c.get(j) for j in done}
        window = f"{_rfc(first - timedelta(seconds=5))},{_rfc(end)}"
        yield Fleet(
            server,
            alpha,
            beta,
            window,
            [warm_up.id, *(j for j in done if jobs[j].team == "alpha")],
            next(j for j in done if jobs[j].team == "beta"),
            long_job,
            big,
        )
    finally:
        server.stop()
        server.kill_jobs()


# ------------------------------------------------------------------------------------------ helpers


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return dict(result.structured_content)


def _error(result: Any) -> str:
    assert result.is_error, result.structured_content
    return str(result.content[0].text)


def _text(read: Any) -> str:
    return str(read.contents[0].text)


def _money(s: str | None) -> Decimal:
    return Decimal(s or "0")


async def _check_listing(m: McpClient) -> None:
    listed = (await m.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    assert not [t.name for t in listed if "approve" in t.name or "reject" in t.name]
    for t in listed:  # typed both ways: an input schema with properties, an output schema (structured content)
        assert t.input_schema["type"] == "object" and t.input_schema.get("properties"), t.name
        assert t.output_schema and "summary" in t.output_schema["properties"], t.name
        assert t.description
    by_name = {t.name: t for t in listed}
    plan = by_name["check_budget_for_plan"].input_schema
    assert plan["properties"]["gpus"]["type"] == "integer" and set(plan["required"]) == {"gpus", "hours"}
    assert by_name["propose_action"].annotations is not None
    assert by_name["propose_action"].annotations.read_only_hint is False
    assert by_name["cost_report"].annotations is not None and by_name["cost_report"].annotations.read_only_hint
    uris = {str(r.uri) for r in (await m.list_resources()).resources}
    assert uris == RESOURCES


# ------------------------------------------------------------------------------------------------ stdio


@pytest.mark.slow
def test_stdio_tools_answer_with_the_members_token(fleet: Fleet, tmp_path: Path) -> None:
    server = fleet.server
    api = server.client(fleet.alpha)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gpufleet", "mcp"],
        # an empty home: the only token it can use is the member's (never the server's admin.token)
        env={"GPUFLEET_URL": server.url, "GPUFLEET_TOKEN": fleet.alpha, "GPUFLEET_HOME": str(tmp_path)},
    )

    async def session() -> None:
        async with McpClient(params) as m:
            await _check_listing(m)

            # cost_report: the API's report, to the cent
            rep = _data(await m.call_tool("cost_report", {"window": fleet.window, "aggregate": ["project"]}))
            usage = api.usage(fleet.window, aggregate="project")
            assert rep["totals"]["total_cost_usd"] == usage.totals.total_cost_usd
            assert [r["total_cost_usd"] for r in rep["rows"]] == [r.total_cost_usd for r in usage.rows]
            assert rep["filters"] == {"team": "alpha"}
            assert f"${_money(usage.totals.total_cost_usd):,.2f}" in rep["summary"]
            start, end = fleet.window.split(",")
            by_times = _data(await m.call_tool("cost_report", {"start": start, "end": end, "aggregate": ["project"]}))
            assert by_times["totals"] == rep["totals"]

            # cost_analysis: the member's spend is the rows of their report, idle the report's idle line
            ca = _data(await m.call_tool("cost_analysis", {"window": fleet.window}))
            jobs_usage = api.usage(fleet.window, aggregate=["project", "job"])
            assert ca["scope"] == "team:alpha"
            assert Decimal(str(ca["spend_usd"])) == sum((_money(r.total_cost_usd) for r in jobs_usage.rows), Decimal(0))
            assert ca["idle_usd"] == float(_money(jobs_usage.idle.total_cost_usd))
            assert {g["group"] for g in ca["groups"]} == {"training", "eval", ""}  # the warm-up has no project
            assert {j["job_id"] for j in ca["top_jobs"]} <= set(fleet.done_alpha)
            assert all(j["team"] == "alpha" for j in ca["top_jobs"])
            assert "/day" in ca["summary"] and "team alpha" in ca["summary"]

            # recommend: the API's recommendations for this token, dollar for dollar
            rec = _data(await m.call_tool("recommend", {"window": fleet.window}))
            want = api.recommendations(fleet.window)
            assert [(r["id"], r["monthly_savings_usd"]) for r in rec["items"]] == [
                (r.id, r.monthly_savings_usd) for r in want
            ]

            # forecast_job_cost: the API's forecast of the running job (spent grows: between two reads)
            before = api.forecast(fleet.long_job)
            fc = _data(await m.call_tool("forecast_job_cost", {"job": fleet.long_job}))
            after = api.forecast(fleet.long_job)
            assert before.spent_usd <= fc["spent_usd"] <= after.spent_usd
            assert fc["method"] == after.method and fc["state"] == "RUNNING" and fc["team"] == "alpha"
            assert after.remaining_usd is not None and fc["remaining_usd"] is not None
            assert after.remaining_usd - 1e-6 <= fc["remaining_usd"] <= (before.remaining_usd or 0) + 1e-6
            assert "more over about" in fc["summary"]

            # another team's job and team: the API's 404 / 403, as tool errors with no data
            assert "404" in _error(await m.call_tool("forecast_job_cost", {"job": fleet.beta_job}))
            assert "403" in _error(await m.call_tool("cost_analysis", {"team": "beta"}))
            assert "404" in _error(await m.call_tool("recommend", {"job": fleet.beta_job}))
            assert "404" in _error(await m.call_tool("diagnose_anomaly", {"team": "beta"}))

            # check_budget_for_plan: the budget check's own forecast, and options that fit
            # (committed: the long job's estimate and the big job's default hour, ~$30 of alpha-watch's $50)
            plan = _data(await m.call_tool("check_budget_for_plan", {"gpus": 8, "hours": 4}))
            check = api.check_budget(command=["true"], gpus=8, estimated_runtime_s=4 * 3600.0)
            assert plan["forecast_usd"] == check.job_cost_usd == pytest.approx(4 * NODE_USD, abs=0.01)
            assert plan["tightest_budget"] == "alpha-watch" and not plan["fits"]
            line = next(b for b in check.budgets if b.name == "alpha-watch")
            # over by = forecast - what was left, at the tool's own check; the test's check is a moment
            # later, when the running jobs have spent a little more (a cent on a slow machine)
            assert plan["over_by_usd"] == pytest.approx(plan["forecast_usd"] - plan["remaining_usd"], abs=1e-6)
            assert plan["remaining_usd"] == pytest.approx(line.remaining_usd, abs=0.05)
            kinds = {o["kind"]: o for o in plan["options"]}
            assert {"fewer_gpus", "shorter", "cheaper_gpu", "spot"} <= set(kinds)
            assert kinds["fewer_gpus"]["fits"] and kinds["shorter"]["fits"] and not kinds["shorter"]["projection"]
            g = kinds["fewer_gpus"]["gpus"]
            assert (
                kinds["fewer_gpus"]["cost_usd"]
                == api.check_budget(command=["true"], gpus=g, estimated_runtime_s=4 * 3600.0).job_cost_usd
            )
            assert all(o["cost_usd"] < plan["forecast_usd"] for o in plan["options"])
            assert kinds["cheaper_gpu"]["projection"] and kinds["spot"]["projection"]
            assert "exceeds budget 'alpha-watch'" in plan["summary"] and "Options:" in plan["summary"]
            small = _data(await m.call_tool("check_budget_for_plan", {"gpus": 1, "hours": 0.5}))
            assert small["fits"] and small["over_by_usd"] is None and "fits budget 'alpha-watch'" in small["summary"]

            # compare_configurations: scaled from a finished job's measured run time
            job = api.get(fleet.done_alpha[1])
            cmp_ = _data(
                await m.call_tool(
                    "compare_configurations",
                    {
                        "job": job.id,
                        "configs": [
                            {"gpu_type": "A100-80GB", "gpus": job.gpus},
                            {"gpu_type": "L4", "gpus": job.gpus},
                            {"gpu_type": "H100", "gpus": job.gpus, "spot": True},
                        ],
                    },
                )
            )
            assert cmp_["projection"]
            assert cmp_["reference"]["hours"] == pytest.approx((job.run_seconds or 0) / 3600, rel=1e-5)
            est = {(e["gpu_type"], e["spot"]): e for e in cmp_["estimates"]}
            same = est[("A100-80GB", False)]
            assert same["vs_reference_pct"] == 0.0
            assert same["usd_per_gpu_hour"] == pytest.approx(NODE_USD / 8)
            ratio = DENSE_TFLOPS["A100-80GB"] / DENSE_TFLOPS["L4"]
            assert est[("L4", False)]["hours"] == pytest.approx(cmp_["reference"]["hours"] * ratio, rel=1e-5)
            assert any("TFLOPS" in a for a in cmp_["assumptions"])

            # whatif: the member's own jobs, replayed in-process
            wi = _data(await m.call_tool("whatif", {"change": "spot+autoscaling", "window": fleet.window}))
            assert wi["scope"] == "team:alpha" and wi["jobs"] == len(fleet.done_alpha)
            assert wi["baseline"]["completed"] == wi["jobs"] and wi["savings_usd"] >= 0  # over one horizon
            assert "in-process" in wi["method"]

            # diagnose_anomaly: the API's anomalies (none in a few minutes of history)
            diag = _data(await m.call_tool("diagnose_anomaly", {}))
            assert diag["anomalies"] == [] == api.anomalies()
            assert diag["summary"].startswith("No cost anomaly")

            # resources: the API's JSON
            queue = json.loads(_text(await m.read_resource("gpufleet://queue")))
            assert [q["job_id"] for q in queue] == [q.job_id for q in api.queue()] and fleet.big_job in str(queue)
            budgets = json.loads(_text(await m.read_resource("gpufleet://budgets")))
            assert {b["name"] for b in budgets} == {b.name for b in api.budgets()} == {"alpha-watch"}
            assert budgets[0]["status"]["limit_usd"] == 50.0
            recs = json.loads(_text(await m.read_resource("gpufleet://recommendations")))
            assert isinstance(recs, list)

    try:
        asyncio.run(session())
    finally:
        api.close()


# ------------------------------------------------------------------------------------------------- HTTP


@contextlib.contextmanager
def _mcp_http(server: ServerProcess) -> Iterator[str]:
    """``gpufleet mcp --transport http`` with the server's home in its environment (where the admin
    token lies): it must never use it."""
    port = free_port()
    env = {**server.env(), "GPUFLEET_TOKEN": ""}
    log = open(server.home / "mcp-http.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "mcp", "--transport", "http", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (server.home / "mcp-http.log").read_text()
            try:
                httpx.get(url, timeout=1.0)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _http_client(url: str, token: str) -> McpClient:
    return McpClient(
        streamable_http_client(
            url,
            http_client=httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60.0)),
        )
    )


@pytest.mark.slow
def test_http_each_request_acts_with_its_own_bearer_token(fleet: Fleet) -> None:
    server = fleet.server
    admin = server.client()
    with _mcp_http(server) as url:
        # no token: refused before MCP, and the server's admin token is not used instead
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        bare = httpx.post(url, json=init, headers={"Accept": "application/json, text/event-stream"})
        assert bare.status_code == 401 and bare.headers["www-authenticate"].startswith("Bearer")

        async def session() -> None:
            async with _http_client(url, server.token) as m:
                await _check_listing(m)
                rep = _data(await m.call_tool("cost_report", {"window": fleet.window, "aggregate": ["team"]}))
                usage = admin.usage(fleet.window, aggregate="team")
                assert rep["totals"]["total_cost_usd"] == usage.totals.total_cost_usd
                assert {r["key"]["team"] for r in rep["rows"]} == {"alpha", "beta"}
                # recommend: an admin sees the idle capacity too; dollars and confidence are the API's
                rec = _data(await m.call_tool("recommend", {"window": fleet.window}))
                want = admin.recommendations(fleet.window)
                assert want and [(r["kind"], r["monthly_savings_usd"], r["confidence"]) for r in rec["items"]] == [
                    (r.kind, r.monthly_savings_usd, r.confidence) for r in want
                ]
                assert rec["total_monthly_savings_usd"] == pytest.approx(sum(r.monthly_savings_usd for r in want))
                # whatif: all teams' jobs, the same replay as the CLI's history what-if
                wi = _data(await m.call_tool("whatif", {"change": "spot+autoscaling", "window": fleet.window}))
                cli = json.loads(
                    server.cli(
                        "whatif", "--change", "spot+autoscaling", "--trace", f"history:{fleet.window}", "--json"
                    ).stdout
                )
                assert wi["scope"] == "all" and wi["jobs"] == cli["jobs"] == 7
                # (run times: the API's run_seconds against the store's run rows, equal but for rounding)
                for key in ("baseline", "variant"):
                    assert wi[key]["cost_usd"] == pytest.approx(cli[key]["cost_usd"], rel=1e-3)
                    assert wi[key]["completed"] == cli[key]["completed"]
                assert wi["lower_bound_usd"] == pytest.approx(cli["lower_bound_usd"], rel=1e-3)

            # two members at once, each request with its own token: each sees only their team
            async def scope_of(token: str) -> tuple[str, set[str], set[str]]:
                async with _http_client(url, token) as m:
                    ca = _data(await m.call_tool("cost_analysis", {"window": fleet.window}))
                    budgets = json.loads(_text(await m.read_resource("gpufleet://budgets")))
                    return ca["scope"], {j["team"] for j in ca["top_jobs"]}, {b["name"] for b in budgets}

            got = await asyncio.gather(*(scope_of(t) for t in (fleet.alpha, fleet.beta, fleet.alpha, fleet.beta)))
            assert got[0] == got[2] == ("team:alpha", {"alpha"}, {"alpha-watch"})
            assert got[1] == got[3] == ("team:beta", {"beta"}, {"beta-cap"})

            async with _http_client(url, fleet.beta) as m:
                assert "404" in _error(await m.call_tool("forecast_job_cost", {"job": fleet.long_job}))
                assert "404" in _error(
                    await m.call_tool(
                        "propose_action",
                        {
                            "action": "resize",
                            "target": fleet.big_job,
                            "params": {"gpus": 4},
                            "rationale": "not mine",
                        },
                    )
                )

            # propose_action: a pending proposal, nothing changed, nothing approvable from here
            async with _http_client(url, fleet.alpha) as m:
                made = _data(
                    await m.call_tool(
                        "propose_action",
                        {
                            "action": "resize",
                            "target": fleet.big_job,
                            "params": {"gpus": 4},
                            "rationale": "8 GPUs wait behind the long job; 4 start now",
                            "estimate": {
                                "monthly_savings_usd": 0.0,
                                "confidence": 0.6,
                                "basis": "check_budget_for_plan",
                            },
                        },
                    )
                )
                assert made["state"] == "pending" and made["proposal"]["target"] == fleet.big_job
                assert "nothing changes until a person approves it" in made["summary"]
                stored = admin.proposal(made["id"])
                assert stored.state == "pending" and stored.action == "resize" and stored.params == {"gpus": 4}
                assert stored.estimate is not None and stored.estimate.confidence == 0.6
                big = admin.get(fleet.big_job)
                assert big.state == "PENDING" and big.gpus == 8  # unchanged
                bad = _error(
                    await m.call_tool(
                        "propose_action",
                        {
                            "action": "change_budget",
                            "target": "alpha-watch",
                            "params": {},
                            "rationale": "x",
                        },
                    )
                )
                assert "limit_usd" in bad
                assert admin.budget("alpha-watch").limit_usd == 50.0

        asyncio.run(session())
    admin.close()


# ---------------------------------------------------------------------------------------- pure parts


def test_bearer_token_is_read_from_the_header_only() -> None:
    assert bearer_token({"authorization": "Bearer abc.def"}) == "abc.def"
    assert bearer_token({"authorization": "bearer  xyz "}) == "xyz"
    assert bearer_token({"authorization": "Basic dXNlcg=="}) is None
    assert bearer_token({"authorization": "Bearer "}) is None
    assert bearer_token({}) is None and bearer_token(None) is None


class _FakeClient:
    """The SDK calls ``diagnose_anomaly`` makes, answering from fixed data."""

    def __init__(self, anomalies: list[AnomalyOut], jobs: dict[str, JobOut], recs: list[RecommendationOut]) -> None:
        self._anomalies, self._jobs, self._recs = anomalies, jobs, recs

    def team(self, name: str) -> None:
        return None

    def anomalies(self, days: int, threshold: float, min_increase_usd: float, team: str | None = None) -> list[Any]:
        return self._anomalies

    def recommendations(self, window: str = "7d", reserved_discount: float | None = None) -> list[Any]:
        return self._recs

    def get(self, job_id: str) -> JobOut:
        return self._jobs[job_id]


def _job(job_id: str, name: str, state: str) -> JobOut:
    now = datetime(2026, 11, 20, tzinfo=UTC)
    return JobOut(
        id=job_id,
        name=name,
        team="alpha",
        project="",
        namespace="default",
        experiment="",
        labels={},
        priority="normal",
        command=["x"],
        gpus=4,
        gpu_milli=None,
        mig=None,
        gpu_types=[],
        preemptible=False,
        checkpoint_dir=None,
        max_runtime_s=None,
        state=state,
        reason="",
        submitted_at=now,
        started_at=now,
        ended_at=None,
        run=1,
        restarts=0,
        preemptions=0,
        exit_code=None,
        placement=[],
        cancel_requested=False,
    )


def test_diagnose_anomaly_names_the_jobs_behind_a_spike_and_the_action() -> None:
    spike = AnomalyOut(
        key="anomaly:2026-11-19",
        day="2026-11-19",
        scope="all",
        spend_usd=900.0,
        baseline_usd=300.0,
        increase_usd=600.0,
        increase_pct=2.0,
        causes=[
            AnomalyCauseOut(
                dimension="team",
                key="alpha",
                spend_usd=700.0,
                baseline_usd=100.0,
                increase_usd=600.0,
                share_of_increase=1.0,
            ),
            AnomalyCauseOut(
                dimension="job_id",
                key="j-1",
                spend_usd=480.0,
                baseline_usd=0.0,
                increase_usd=480.0,
                share_of_increase=0.8,
            ),
        ],
        action="Stop job j-1 (new; $480.00/day): saves $480.00/day.",
        savings_usd_per_day=480.0,
        message="2026-11-19: spend $900.00 is 200% above its baseline",
    )
    earlier = spike.model_copy(update={"day": "2026-11-02", "key": "anomaly:2026-11-02"})
    idle = RecommendationOut(
        id="rec-1",
        kind="idle",
        target="job:j-1",
        team="alpha",
        action="Stop job j-1: idle",
        monthly_savings_usd=14000.0,
        confidence=0.8,
        evidence={"peak_util_pct": 1.0},
        whatif=None,
    )
    client = _FakeClient([earlier, spike], {"j-1": _job("j-1", "sweep", "RUNNING")}, [idle])
    d = tools.diagnose_anomaly(client, days=30)  # type: ignore[arg-type]
    assert [a.day for a in d.anomalies] == ["2026-11-19", "2026-11-02"]  # most recent first
    top = d.anomalies[0]
    assert [j.job_id for j in top.jobs] == ["j-1"] and top.jobs[0].recommendations[0].id == "rec-1"
    assert top.teams[0].team == "alpha" and top.savings_usd_per_day == 480.0
    assert d.summary.startswith("On 2026-11-19 all teams spent $900.00 against a baseline of $300.00 (+$600.00, +200%)")
    assert "job j-1 (sweep, RUNNING) +$480.00 (80%)" in d.summary
    assert "Stop job j-1" in d.summary and "Still going: j-1." in d.summary and "1 earlier anomaly" in d.summary


def test_a_jobs_gpus_count_fractions_and_mig_slices_as_the_store_does() -> None:
    whole = _job("j-1", "a", "SUCCEEDED").model_copy(update={"gpus": 2, "pods": 2})
    half = _job("j-2", "b", "SUCCEEDED").model_copy(update={"gpus": 1, "gpu_milli": 500})
    mig = _job("j-3", "c", "SUCCEEDED").model_copy(update={"gpus": 1, "mig": "3g.40gb", "gpu_types": ["A100-80GB"]})
    assert [tools._job_gpus(j) for j in (whole, half, mig)] == [4.0, 0.5, 0.429]
    assert [tools._milli(j) for j in (whole, half, mig)] == [1000, 500, 429]


def test_parallel_speedup_and_money_words() -> None:
    assert tools.parallel_speedup(1, 0.9) == 1.0
    assert tools.parallel_speedup(2, 0.9) == pytest.approx(1.8)
    assert tools.parallel_speedup(8, 0.9) == pytest.approx(8 * 0.9**3)
    assert tools.usd(1234.5) == "$1,234.50" and tools.usd(0.0042) == "$0.0042" and tools.usd(-3) == "-$3.00"
    assert tools.duration(3725) == "1h02m" and tools.duration(None) == "?"


def test_the_cli_does_not_import_mcp_at_start_up() -> None:
    code = "import sys; import gpufleet.cli.main; print('mcp' in sys.modules, 'gpufleet.agent' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.split() == ["False", "False"]
