"""Alerts through real receivers: a local HTTP server (generic webhook, Slack and PagerDuty formats)
and a local SMTP server — exactly once per threshold per period, including when the evaluation runs
twice and when a delivery first fails and is retried; a new period re-arms the thresholds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.clock import SimClock
from gpufleet.cost.budgets.model import make_budget
from gpufleet.errors import InputError
from gpufleet.notify.channels import DeliveryError, deliver, parse_channel, validate_channels
from gpufleet.services.budgets import BudgetService
from gpufleet.store.db import Database
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.budget_support import add_node, add_spend, http_receiver, smtp_server

T0 = datetime(2026, 5, 20, 12, tzinfo=UTC).timestamp()
MAY = datetime(2026, 5, 1, tzinfo=UTC).timestamp()


def make(db: Database, channels: list[dict[str, Any]], **kw: Any) -> str:
    b = make_budget(id="", name="alpha-monthly", scope="team:alpha", limit_usd=100.0, channels=channels, **kw)
    with db.session() as s:
        return budgets_repo.create_budget(s, b, created_by=None, now=MAY).id


def service(db: Database, clock: SimClock) -> BudgetService:
    svc = BudgetService(db, clock, interval_s=0.0)
    svc.outbox.base_backoff_s = 5.0
    return svc


def test_each_threshold_alerts_once_through_every_channel(db: Database) -> None:
    clock = SimClock(T0)
    add_node(db, MAY)
    with http_receiver() as hook, http_receiver() as slack, http_receiver() as pd, smtp_server() as mail:
        channels: list[dict[str, Any]] = [
            {"type": "webhook", "url": hook.url},
            {"type": "slack", "url": slack.url},
            {"type": "pagerduty", "routing_key": "R0UT1NG", "url": pd.url},
            {
                "type": "email",
                "host": mail.host,
                "port": mail.port,
                "from": "gpufleet@lab.test",
                "to": ["ops@lab.test"],
            },
        ]
        bid = make(db, channels)
        svc = service(db, clock)
        add_spend(db, "alpha", 55.0, T0 - 3600)
        add_spend(db, "beta", 500.0, T0 - 3600)  # another team's spend is not alpha's
        svc.run(clock.now())
        svc.run(clock.now())  # evaluating again fires nothing again
        assert [p["threshold"] for p in hook.posts] == [50.0]
        add_spend(db, "alpha", 50.0, T0 - 60)  # 105: crosses 80 and 100 at once
        for _ in range(2):
            svc.run(clock.now())
        assert sorted(p["threshold"] for p in hook.posts) == [50.0, 80.0, 100.0]
        assert len(slack.posts) == len(pd.posts) == len(mail.messages) == 3
        # formats
        first = hook.posts[0]
        assert first["budget"] == "alpha-monthly" and first["severity"] == "info" and first["spend_usd"] == 55.0
        assert hook.headers[0]["X-Gpufleet-Dedup-Key"] == first["dedup_key"]
        assert set(slack.posts[0]) == {"text", "blocks"} and "alpha-monthly" in slack.posts[0]["text"]
        assert slack.posts[0]["blocks"][0]["type"] == "section"
        crit = next(p for p in pd.posts if p["payload"]["severity"] == "critical")
        assert crit["routing_key"] == "R0UT1NG" and crit["event_action"] == "trigger"
        assert crit["dedup_key"].endswith(f"/{bid}/{int(MAY)}/100")
        assert {m["To"] for m in mail.messages} == {"ops@lab.test"}
        assert any("100%" in m["Subject"] for m in mail.messages)
    with db.session() as s:
        alerts = budgets_repo.alerts_of(s, bid)
        assert [a.threshold for a in alerts] == [50.0, 80.0, 100.0]
        sent = budgets_repo.notifications_of(s, [a.id for a in alerts])
        assert len(sent) == 12 and {n.status for n in sent} == {"sent"} and {n.attempts for n in sent} == {1}


def test_a_failed_delivery_is_retried_with_backoff_and_sent_once(db: Database) -> None:
    clock = SimClock(T0)
    add_node(db, MAY)
    with http_receiver(fail_first=2) as hook:
        make(db, [{"type": "webhook", "url": hook.url}], thresholds=[{"percent": 50, "severity": "warning"}])
        svc = service(db, clock)
        add_spend(db, "alpha", 60.0, T0 - 10)
        svc.run(clock.now())
        assert hook.failures == 1 and hook.posts == []
        svc.run(clock.now())  # not due yet: backoff 5 s
        assert hook.failures == 1
        clock.advance(5.0)
        svc.run(clock.now())  # second failure: backoff 10 s
        assert hook.failures == 2 and hook.posts == []
        clock.advance(9.0)
        svc.run(clock.now())
        assert hook.posts == []
        clock.advance(1.0)
        svc.run(clock.now())
        clock.advance(100.0)
        svc.run(clock.now())
        assert len(hook.posts) == 1
    with db.session() as s:
        (n,) = budgets_repo.notifications_of(
            s, [a.id for a in budgets_repo.alerts_of(s, budgets_repo.list_budgets(s)[0].id)]
        )
        assert n.status == "sent" and n.attempts == 3


def test_a_new_period_rearms_the_thresholds(db: Database) -> None:
    clock = SimClock(T0)
    add_node(db, MAY)
    with http_receiver() as hook:
        make(db, [{"type": "webhook", "url": hook.url}], thresholds=[{"percent": 50, "severity": "info"}])
        svc = service(db, clock)
        add_spend(db, "alpha", 60.0, T0)
        svc.run(clock.now())
        june = datetime(2026, 6, 10, tzinfo=UTC).timestamp()
        clock.advance_to(june)
        svc.run(clock.now())  # June: nothing spent yet
        assert len(hook.posts) == 1
        add_spend(db, "alpha", 51.0, june - 1)
        svc.run(clock.now())
        svc.run(clock.now())
        assert [p["period_start"][:10] for p in hook.posts] == ["2026-05-01", "2026-06-01"]
        assert hook.posts[0]["dedup_key"] != hook.posts[1]["dedup_key"]


def test_concurrent_evaluations_fire_once(db: Database) -> None:
    import threading

    clock = SimClock(T0)
    add_node(db, MAY)
    with http_receiver() as hook:
        make(db, [{"type": "webhook", "url": hook.url}])
        add_spend(db, "alpha", 101.0, T0)
        services = [service(db, clock) for _ in range(4)]
        threads = [threading.Thread(target=svc.run, args=(clock.now(),)) for svc in services]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for svc in services:
            svc.run(clock.now())
        assert sorted(p["threshold"] for p in hook.posts) == [50.0, 80.0, 100.0]


@pytest.mark.parametrize(
    ("channel", "field"),
    [
        ({"type": "sms"}, "channels[0].type"),
        ({"type": "webhook"}, "channels[0].url"),
        ({"type": "webhook", "url": "ftp://x"}, "channels[0].url"),
        ({"type": "slack", "url": "https://h", "token": "x"}, "channels[0]"),
        ({"type": "email", "host": "smtp", "from": "a@b", "to": []}, "channels[0].to"),
        ({"type": "email", "host": "smtp", "from": "nobody", "to": ["a@b"]}, "channels[0].from"),
        ({"type": "email", "host": "smtp", "from": "a@b", "to": ["a@b"], "port": 0}, "channels[0].port"),
        ({"type": "email", "host": "smtp", "from": "a@b", "to": ["a@b"], "username": "u"}, "channels[0].username"),
        ({"type": "pagerduty"}, "channels[0].routing_key"),
        ({"type": "webhook", "url": "http://h", "timeout_s": 0}, "channels[0].timeout_s"),
    ],
)
def test_channels_are_validated_with_field_errors(channel: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as e:
        validate_channels([channel])
    assert e.value.field == field


def test_delivery_errors_are_clear() -> None:
    ch = parse_channel({"type": "webhook", "url": "http://127.0.0.1:9/hook", "timeout_s": 1})
    alert = {"dedup_key": "k", "message": "m"}
    with pytest.raises(DeliveryError, match=r"POST http://127\.0\.0\.1:9/hook"):
        deliver(ch, alert)
    mail = parse_channel({"type": "email", "host": "127.0.0.1", "port": 9, "from": "a@b", "to": "c@d", "timeout_s": 1})
    with pytest.raises(DeliveryError, match=r"SMTP 127\.0\.0\.1:9"):
        deliver(
            mail,
            {
                **alert,
                "severity": "info",
                "budget": "b",
                "threshold": 50.0,
                "spend_usd": 1.0,
                "limit_usd": 2.0,
                "percent": 50.0,
                "period_start": "x",
            },
        )
