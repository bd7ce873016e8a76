"""Anomaly alerts of budgets, through a real local HTTP receiver: a team's steady spend with a weekly
pattern and one job that spikes the last complete day raises exactly one alert naming that job and
team and the change that brings it back — once, however often the evaluation runs; the same history
without the spike, or a budget that did not opt in, raises nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from gpufleet.clock import SimClock
from gpufleet.cost.budgets.model import make_budget
from gpufleet.cost.budgets.status import ANOMALY_THRESHOLD
from gpufleet.cost.periods import DAY_S, last_complete_day
from gpufleet.errors import InputError
from gpufleet.notify.channels import EmailChannel, email_message, pagerduty_payload
from gpufleet.services.budgets import BudgetService
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.api_support import Api, make_api
from tests.support.budget_support import NODE, NODE_GPUS, NODE_USD_PER_HOUR, add_node, add_spend, http_receiver

TODAY = datetime(2026, 5, 20, tzinfo=UTC).timestamp()  # a Wednesday; the last complete day is Tuesday
NOW = TODAY + 3600.0  # 01:00: yesterday is complete
HISTORY_DAYS = 40
WEEKDAY_USD, WEEKEND_USD, SPIKE_USD = 100.0, 40.0, 80.0


def daily_job(db: Database, team: str, node: str, usd_of_day: Callable[[float], float], end_hour: float) -> None:
    """One long-lived job of ``team`` that held the whole ``node`` each day of the history for as
    long as it takes to cost that day's amount (a run a day, ending at ``end_hour``): steady spend
    by one job, as a service or a nightly training job has."""
    first = TODAY - HISTORY_DAYS * DAY_S
    with db.session() as s:
        fields = {"name": "steady", "command": ["true"], "gpus": NODE_GPUS}
        job, _ = repo.submit_job(
            s, fields, team=team, submitted_by=None, idempotency_key=None, request_sha256=None, now=first
        )
        node_row = next(n for n in repo.list_nodes(s) if n.name == node)
        for d in range(HISTORY_DAYS):
            day = first + d * DAY_S
            end = day + end_hour * 3600.0
            repo.append_segment(
                s,
                job=job,
                run=d + 1,
                node=node_row,
                gpu_share_units=NODE_GPUS * 7000,
                cpu_milli=0,
                memory_mib=0,
                node_hourly_usd=NODE_USD_PER_HOUR,
                capacity_type="on-demand",
                start=end - usd_of_day(day) * 3600.0 / NODE_USD_PER_HOUR,
                end=end,
            )
        s.execute(update(JobRow).where(JobRow.id == job.id).values(state="SUCCEEDED", ended_at=TODAY))


def weekly(day: float) -> float:
    return WEEKEND_USD if datetime.fromtimestamp(day, UTC).weekday() >= 5 else WEEKDAY_USD


def history(db: Database, *, spike: bool) -> str | None:
    """40 days of team alpha's spend by one job ($100 weekdays, $40 weekends, on node n1), beta's
    ($30 a day, on n2), and with ``spike`` a new alpha job of $80 on n2 on the last complete day
    (its id is returned)."""
    first = TODAY - HISTORY_DAYS * DAY_S
    add_node(db, first - DAY_S)
    add_node(db, first - DAY_S, name="n2")
    daily_job(db, "alpha", NODE, weekly, end_hour=20)
    daily_job(db, "beta", "n2", lambda _: 30.0, end_hour=6)
    if not spike:
        return None
    return add_spend(db, "alpha", SPIKE_USD, TODAY - 3600, node="n2")


def budget(db: Database, name: str, channels: list[dict[str, Any]], **kw: Any) -> str:
    # a limit far above the spend: only anomaly alerts can fire
    b = make_budget(id="", name=name, scope="team:alpha", limit_usd=1e6, channels=channels, **kw)
    with db.session() as s:
        return budgets_repo.create_budget(s, b, created_by=None, now=TODAY - 60 * DAY_S).id


def service(db: Database) -> BudgetService:
    return BudgetService(db, SimClock(NOW), interval_s=0.0)


def test_a_spike_alerts_once_naming_the_job_and_team(db: Database) -> None:
    spike_job = history(db, spike=True)
    assert spike_job is not None
    with http_receiver() as hook, http_receiver() as slack, http_receiver() as quiet:
        bid = budget(
            db,
            "alpha-anomalies",
            [{"type": "webhook", "url": hook.url}, {"type": "slack", "url": slack.url}],
            anomaly_alerts=True,
        )
        budget(db, "alpha-plain", [{"type": "webhook", "url": quiet.url}])  # no anomaly_alerts
        svc = service(db)
        svc.run(NOW)
        svc.run(NOW + 600)  # later the same day: not judged again
        service(db).run(NOW + 1200)  # another replica / a restart: the store keeps it once
        assert len(hook.posts) == len(slack.posts) == 1
        assert quiet.posts == []
        alert = hook.posts[0]
        assert alert["kind"] == "budget_anomaly" and alert["severity"] == "warning"
        assert alert["day"] == "2026-05-19" and alert["spend_usd"] == pytest.approx(180.0)
        assert alert["baseline_usd"] == pytest.approx(100.0, abs=0.01)
        msg = alert["message"]
        assert f"job {spike_job}" in msg and "team alpha" in msg and "beta" not in msg
        assert f"Stop job {spike_job}" in alert["action"] and alert["action"] in msg
        assert alert["savings_usd_per_day"] == pytest.approx(SPIKE_USD, abs=0.01)
        assert {(c["dimension"], c["key"]) for c in alert["causes"]} == {("team", "alpha"), ("job_id", spike_job)}
        assert hook.headers[0]["X-Gpufleet-Dedup-Key"] == f"gpufleet/budget/{bid}/{int(TODAY - DAY_S)}/anomaly"
        mail = email_message(alert, EmailChannel("smtp", "g@lab.test", ("ops@lab.test",)))
        assert msg in " ".join(str(mail["Subject"]).split()) and msg in mail.get_content()
        pd = pagerduty_payload(alert, "KEY")
        assert pd["payload"]["summary"] == msg and pd["payload"]["custom_details"]["action"] == alert["action"]
        assert (
            msg in slack.posts[0]["text"] and "baseline $100.00" in slack.posts[0]["blocks"][1]["elements"][0]["text"]
        )
    with db.session() as s:
        (row,) = budgets_repo.alerts_of(s, bid)
        assert (row.kind, row.threshold, row.period_start) == ("anomaly", ANOMALY_THRESHOLD, TODAY - DAY_S)
        assert row.spend_usd == pytest.approx(180.0) and row.limit_usd == pytest.approx(100.0, abs=0.01)
        assert row.details["message"] == msg and row.details["savings_usd_per_day"] == pytest.approx(SPIKE_USD)
        assert {n.status for n in budgets_repo.notifications_of(s, [row.id])} == {"sent"}
        # a period's alerts (what `budget show` lists) include the anomaly days inside it
        assert [a.id for a in budgets_repo.alerts_of(s, bid, TODAY - 7 * DAY_S, TODAY)] == [row.id]
        assert budgets_repo.alerts_of(s, bid, TODAY, TODAY + DAY_S) == []


def test_steady_spend_raises_nothing(db: Database) -> None:
    history(db, spike=False)
    with http_receiver() as hook:
        bid = budget(db, "alpha-anomalies", [{"type": "webhook", "url": hook.url}], anomaly_alerts=True)
        service(db).run(NOW)
        assert hook.posts == []
    with db.session() as s:
        assert budgets_repo.alerts_of(s, bid) == []


def test_the_budget_threshold_and_floor_decide(db: Database) -> None:
    """The $80 spike is 80 % over a $100 baseline: a 100 % threshold or a $100 floor lets it pass."""
    history(db, spike=True)
    with http_receiver() as hook:
        budget(
            db, "high-threshold", [{"type": "webhook", "url": hook.url}], anomaly_alerts=True, anomaly_threshold_pct=100
        )
        budget(db, "high-floor", [{"type": "webhook", "url": hook.url}], anomaly_alerts=True, anomaly_floor_usd=100)
        service(db).run(NOW)
        assert hook.posts == []


def test_settings_are_validated_and_the_last_day_is_local() -> None:
    with pytest.raises(InputError) as e:
        make_budget(id="", name="x", scope="all", limit_usd=1.0, anomaly_threshold_pct=0)
    assert e.value.field == "anomaly_threshold_pct"
    with pytest.raises(InputError):
        make_budget(id="", name="x", scope="all", limit_usd=1.0, anomaly_floor_usd=-1)
    tokyo = last_complete_day(datetime(2026, 5, 20, 1, tzinfo=UTC).timestamp(), "Asia/Tokyo")  # 10:00 in Tokyo
    assert datetime.fromtimestamp(tokyo.start, UTC) == datetime(2026, 5, 18, 15, tzinfo=UTC)
    assert tokyo.end - tokyo.start == DAY_S
    paris = last_complete_day(datetime(2026, 3, 30, 12, tzinfo=UTC).timestamp(), "Europe/Paris")
    assert paris.end - paris.start == DAY_S - 3600  # the spring-forward day is 23 hours


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url)


def test_settings_through_the_api_and_the_cli(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli import jobs as cli_jobs
    from gpufleet.cli.main import app
    from gpufleet.sdk.client import Client

    body = {"name": "a", "scope": "team:alpha", "limit_usd": 10.0}
    r = api.client.post("/v1/budgets", json=body, headers=api.h("admin"))
    assert r.status_code == 201 and r.json()["anomaly_alerts"] is False
    assert (r.json()["anomaly_threshold_pct"], r.json()["anomaly_floor_usd"]) == (20.0, 50.0)
    put = {**body, "anomaly_alerts": True, "anomaly_threshold_pct": 35, "anomaly_floor_usd": 5}
    r = api.client.put("/v1/budgets/a", json=put, headers=api.h("admin"))
    assert r.status_code == 200 and (r.json()["anomaly_alerts"], r.json()["anomaly_floor_usd"]) == (True, 5.0)
    with api.db.session() as s:
        stored = budgets_repo.budget_of(budgets_repo.get_budget(s, "a"))
    assert (stored.anomaly_alerts, stored.anomaly_threshold_pct, stored.anomaly_floor_usd) == (True, 35.0, 5.0)
    bad = api.client.post("/v1/budgets", json={**body, "name": "b", "anomaly_threshold_pct": 0}, headers=api.h("admin"))
    assert bad.status_code == 422

    def make_client(url: str | None, token: str | None) -> Client:
        return Client("http://testserver", api.secrets["admin"], transport=api.sdk_transport)

    monkeypatch.setattr(cli_jobs, "make_client", make_client)
    args = ["budget", "create", "c", "--scope", "team:alpha", "--limit", "10", "--anomaly-alerts"]
    res = CliRunner().invoke(app, [*args, "--anomaly-threshold", "30", "--anomaly-floor", "75", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["anomaly_alerts"], out["anomaly_threshold_pct"], out["anomaly_floor_usd"]) == (True, 30.0, 75.0)
