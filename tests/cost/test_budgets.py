"""Budgets, the pure part: periods in named time zones, status and projection, thresholds,
enforcement decisions, job cost estimates and throttles (cost/budgets/throttle.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from gpufleet.cost.budgets.model import Budget, Scope, Threshold, Throttle, make_budget
from gpufleet.cost.budgets.status import budget_status, check_block, crossed_thresholds, dedup_key, enforcing
from gpufleet.cost.budgets.throttle import ThrottleRule, capacity_limits
from gpufleet.cost.job_estimate import DEFAULT_RUNTIME_S, estimate_job_cost
from gpufleet.cost.periods import period_at
from gpufleet.errors import InputError
from gpufleet.model.job import GpuRequest, Job, JobSpec
from gpufleet.model.node import CapacityType, Node
from gpufleet.scheduling.decisions import ClusterState
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.profile import load_profile
from gpufleet.scheduling.snapshot import ClusterSnapshot


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0, tz: str = "UTC") -> float:
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(tz)).timestamp()


def budget(**kw: object) -> Budget:
    args: dict[str, object] = {"id": "b1", "name": "b", "scope": "team:alpha", "limit_usd": 100.0}
    args.update(kw)
    return make_budget(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("t", "tz", "start", "end"),
    [
        (ts(2026, 1, 31, 23, 59), "UTC", ts(2026, 1, 1), ts(2026, 2, 1)),
        (ts(2026, 2, 1, 0, 0), "UTC", ts(2026, 2, 1), ts(2026, 3, 1)),
        (ts(2028, 2, 29, 12), "UTC", ts(2028, 2, 1), ts(2028, 3, 1)),  # leap year
        (ts(2026, 12, 31, 23), "UTC", ts(2026, 12, 1), ts(2027, 1, 1)),  # year end
        # 2026-03-31 23:30 in New York is already April 1 in UTC: the month is March, by NY's clock
        (
            ts(2026, 3, 31, 23, 30, tz="America/New_York"),
            "America/New_York",
            ts(2026, 3, 1, tz="America/New_York"),
            ts(2026, 4, 1, tz="America/New_York"),
        ),
        # Tokyo's April starts 9 hours before UTC's
        (ts(2026, 3, 31, 16, 0), "Asia/Tokyo", ts(2026, 4, 1, tz="Asia/Tokyo"), ts(2026, 5, 1, tz="Asia/Tokyo")),
    ],
    ids=["jan-end", "feb-start", "leap-feb", "dec", "new-york-local-month", "tokyo-ahead"],
)
def test_monthly_periods_follow_the_local_calendar(t: float, tz: str, start: float, end: float) -> None:
    p = period_at("monthly", t, tz)
    assert (p.start, p.end) == (start, end)
    assert p.start <= t < p.end


def test_a_month_with_a_dst_change_is_an_hour_short() -> None:
    p = period_at("monthly", ts(2026, 3, 15, tz="Europe/Paris"), "Europe/Paris")
    assert p.length_s == 31 * 86400 - 3600  # clocks went forward on March 29
    q = period_at("monthly", ts(2026, 10, 15, tz="Europe/Paris"), "Europe/Paris")
    assert q.length_s == 31 * 86400 + 3600


def test_weeks_start_on_local_monday_midnight() -> None:
    # Sunday 2026-03-01 22:00 UTC is Monday 2026-03-02 07:00 in Tokyo: a new Tokyo week
    t = ts(2026, 3, 1, 22)
    assert period_at("weekly", t, "UTC").start == ts(2026, 2, 23)
    tokyo = period_at("weekly", t, "Asia/Tokyo")
    assert tokyo.start == ts(2026, 3, 2, tz="Asia/Tokyo") and tokyo.length_s == 7 * 86400


def test_custom_period_is_fixed_and_validated() -> None:
    b = budget(period="custom", period_start=1000.0, period_end=5000.0)
    assert b.period_at(0).start == 1000.0 and b.period_at(9e9).end == 5000.0
    with pytest.raises(InputError, match="period_end"):
        budget(period="custom", period_start=5000.0, period_end=1000.0)
    with pytest.raises(InputError, match="period_start"):
        budget(period="custom")


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"limit_usd": 0}, "limit_usd"),
        ({"scope": "galaxy:x"}, "scope"),
        ({"scope": "label:novalue"}, "scope"),
        ({"scope": "team:"}, "scope"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"action": "explode"}, "action"),
        ({"action": "throttle"}, "throttle"),
        ({"thresholds": [{"percent": 50, "severity": "loud"}]}, "thresholds[0]"),
        ({"thresholds": [{"percent": 50}, {"percent": 50}]}, "thresholds"),
        ({"throttle": {"priority": "vip"}}, "throttle.priority"),
        ({"grace_s": -1}, "grace_s"),
    ],
)
def test_bad_budgets_name_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as e:
        budget(**kw)
    assert e.value.field == field


def test_default_thresholds_and_crossings() -> None:
    b = budget()
    assert [(t.percent, t.severity) for t in b.thresholds] == [(50, "info"), (80, "warning"), (100, "critical")]
    assert crossed_thresholds(b, 49.99) == ()
    assert [t.percent for t in crossed_thresholds(b, 80.0)] == [50, 80]
    assert [t.percent for t in crossed_thresholds(b, 99.999)] == [50, 80, 100]  # a cent of tolerance
    assert [t.percent for t in crossed_thresholds(budget(thresholds=[{"percent": 120}]), 119)] == []


def test_status_projects_the_run_rate_to_period_end() -> None:
    b = budget(limit_usd=3000.0)
    p = period_at("monthly", ts(2026, 4, 10), "UTC")  # April: 30 days
    st = budget_status(b, p, 1000.0, ts(2026, 4, 11))  # 10 days in
    assert st.projected_usd == pytest.approx(3000.0)
    assert st.days_left == pytest.approx(20.0)
    assert st.percent == pytest.approx(100 / 3)
    assert st.remaining_usd == 2000.0 and not st.over
    assert [t.percent for t in st.crossed] == []
    early = budget_status(b, p, 0.0, p.start)
    assert early.projected_usd == 0.0 and early.days_left == 30.0


def test_scope_covers() -> None:
    assert Scope.parse("all").covers(team="x")
    assert Scope.parse("team:a").covers(team="a") and not Scope.parse("team:a").covers(team="b")
    assert Scope.parse("label:cc=42").covers(team="x", labels={"cc": "42"})
    assert not Scope.parse("label:cc=42").covers(team="x", labels={"cc": "43"})
    assert not Scope.parse("label:cc=").covers(team="x", labels={})
    assert Scope.parse("label:cc=").covers(team="x", labels={"cc": ""})
    assert Scope.parse("experiment:e1").covers(team="x", experiment="e1")


def test_enforcement_waits_for_the_grace_period() -> None:
    b = budget(action="block", grace_s=3600)
    assert not enforcing(b, None, 10_000, over=True)
    assert not enforcing(b, 10_000, 10_000 + 3599, over=True)
    assert enforcing(b, 10_000, 10_000 + 3600, over=True)
    assert not enforcing(budget(action="alert"), 0.0, 1e9, over=True)
    assert check_block(b, 90.0, 10.0).fits and not check_block(b, 90.0, 10.02).fits
    assert check_block(b, 200.0, 10.0, in_grace=True).fits


def test_job_cost_estimate_uses_estimate_then_max_runtime_then_default() -> None:
    e = estimate_job_cost(2, 3.0, estimated_runtime_s=1800, max_runtime_s=7200)
    assert (e.cost_usd, e.runtime_source) == (3.0, "estimate")
    e = estimate_job_cost(2, 3.0, max_runtime_s=7200)
    assert (e.cost_usd, e.runtime_source) == (12.0, "max_runtime")
    e = estimate_job_cost(0.5, 4.0)
    assert (e.runtime_s, e.cost_usd, e.runtime_source) == (DEFAULT_RUNTIME_S, 2.0, "default")
    assert estimate_job_cost(1, 4.0, estimated_runtime_s=3600, elapsed_s=5400).cost_usd == 0.0


def test_dedup_key_is_per_crossing() -> None:
    assert dedup_key("b1", 100.0, 80) != dedup_key("b1", 200.0, 80) != dedup_key("b1", 100.0, 100)


def _job(i: str, team: str, gpus: int = 1, prio: str = "normal", preemptible: bool = False, t: float = 0.0) -> Job:
    spec = JobSpec(name=i, team=team, gpu=GpuRequest(gpus), priority_class=prio, preemptible=preemptible)
    return Job(id=i, spec=spec, submit_time=t)


def test_throttles_lower_priority_cap_gpus_and_allow_spot_only() -> None:
    """Throttles in force are capacity limits of the one scheduling cycle (no second pass)."""
    snap = ClusterSnapshot(max_gpus=8, capacity=4)
    snap.add_node(Node("od", "A100-80GB", 8, 0, 0))
    snap.add_node(Node("sp", "A100-80GB", 8, 0, 0, capacity_type=CapacityType.SPOT))
    sched = load_profile({"preemption": False}).build()
    ar = _job("ar", "alpha", 1)
    d = sched.cycle(ClusterState(snap, [ar], {}), 0.0)
    running = {ar.id: RunningJob(ar, d.placements[0].assignments, "A100-80GB")}
    a1, a2, a3 = _job("a1", "alpha", 2, t=1), _job("a2", "alpha", 2, t=2), _job("a3", "alpha", 1, "high", t=3)
    b1 = _job("b1", "beta", 4)
    rule = ThrottleRule("cap", Scope.parse("team:alpha"), Throttle(priority="low", max_gpus=4))
    d = sched.cycle(ClusterState(snap, [a1, a2, a3, b1], running, limits=capacity_limits([rule])), 1.0)
    assert {p.job.id for p in d.placements} == {"a3", "a1", "b1"}  # 1 running + a1 + a3 = 4 GPUs
    assert "4 GPUs" in d.waiting["a2"].reason
    assert a1.priority == 50 and a3.priority == 50 and a2.priority == 50 and b1.priority == 100
    # lifted: priorities come back
    sched.cycle(ClusterState(snap, [a2], running), 2.0)
    assert a2.priority == 100
    spot = ThrottleRule("spot", Scope.parse("team:alpha"), Throttle(spot_only=True))
    p, n, b2 = _job("p", "alpha", preemptible=True), _job("n", "alpha"), _job("b2", "beta")
    d = sched.cycle(ClusterState(snap, [p, n, b2], running, limits=capacity_limits([spot])), 3.0)
    where = {pl.job.id: snap.names[pl.assignments[0].node] for pl in d.placements}
    assert where["p"] == "sp" and "n" not in where and "not preemptible" in d.waiting["n"].reason
    assert "budget" not in d.waiting["b2"].reason  # beta is not throttled: od is just full


def test_threshold_validation() -> None:
    with pytest.raises(InputError):
        Threshold(0)
    assert datetime.fromtimestamp(ts(2026, 1, 1), UTC).day == 1
