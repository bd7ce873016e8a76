"""Daily cost anomalies: a planted spike is found and its cause named; seasonal noise raises nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cost.anomaly import AnomalyConfig, Breakdown, detect_anomalies, scan_ledger, seasonal_baseline
from gpufleet.cost.ledger import Ledger, NodeInterval, UsageSegment
from gpufleet.model.node import CapacityType

START = date(2026, 1, 5)  # a Monday
PATTERN = np.array([1.1, 1.2, 1.15, 1.1, 1.0, 0.4, 0.35])


@dataclass
class History:
    totals: np.ndarray
    teams: Breakdown
    jobs: Breakdown


def _history(seed: int, days: int = 90, spike: tuple[int, str, str, float] | None = None) -> History:
    """Three teams, each running a few steady jobs with a weekly pattern and 3 % noise; ``spike``
    = (day, team, job, $) adds a job that ran only that day."""
    rng = np.random.default_rng(seed)
    jobs = {
        "a-train": ("alpha", 400.0),
        "a-eval": ("alpha", 100.0),
        "b-train": ("beta", 300.0),
        "c-etl": ("gamma", 200.0),
    }
    names = list(jobs) + ([spike[2]] if spike else [])
    team_of = {k: v[0] for k, v in jobs.items()} | ({spike[2]: spike[1]} if spike else {})
    wd = (START.weekday() + np.arange(days)) % 7
    m = np.zeros((days, len(names)))
    for j, name in enumerate(jobs):
        m[:, j] = jobs[name][1] * PATTERN[wd] * rng.normal(1.0, 0.03, size=days)
    if spike:
        m[spike[0], -1] = spike[3]
    teams = sorted(set(team_of.values()))
    tm = np.zeros((days, len(teams)))
    for j, name in enumerate(names):
        tm[:, teams.index(team_of[name])] += m[:, j]
    return History(m.sum(axis=1), Breakdown("team", teams, tm), Breakdown("job_id", names, m))


def test_planted_spike_is_found_and_named() -> None:
    h = _history(seed=11, spike=(70, "beta", "b-runaway", 900.0))
    found = detect_anomalies(h.totals, [h.teams, h.jobs], START)
    assert [a.day_index for a in found] == [70]
    a = found[0]
    assert a.day == date(2026, 3, 16)
    assert a.increase_usd == pytest.approx(900.0, rel=0.1)
    job = next(c for c in a.causes if c.dimension == "job_id")
    team = next(c for c in a.causes if c.dimension == "team")
    assert (job.key, team.key) == ("b-runaway", "beta")
    assert job.increase_usd == pytest.approx(900.0) and job.baseline_usd == 0
    assert "Stop job b-runaway" in a.action and a.savings_usd_per_day == pytest.approx(900.0)
    assert "b-runaway" in a.message and "beta" in a.message


def test_the_same_history_without_the_spike_raises_nothing() -> None:
    h = _history(seed=11)
    assert detect_anomalies(h.totals, [h.teams, h.jobs], START) == []


@pytest.mark.parametrize(
    ("name", "spike_usd", "config", "expected"),
    [
        ("a big spike", 900.0, AnomalyConfig(), 1),
        ("under 20 %", 120.0, AnomalyConfig(), 0),  # ~12 % of a ~$1,000 day
        ("over 20 % but under the dollar floor", 300.0, AnomalyConfig(min_increase_usd=500.0), 0),
        ("a lower threshold catches the small one", 160.0, AnomalyConfig(threshold=0.1), 1),
    ],
)
def test_scenarios(name: str, spike_usd: float, config: AnomalyConfig, expected: int) -> None:
    h = _history(seed=5, spike=(60, "gamma", "c-big", spike_usd))
    found = detect_anomalies(h.totals, [h.teams, h.jobs], START, config)
    assert len(found) == expected, name
    if expected:
        assert found[0].day_index == 60 and found[0].causes[0].key in ("gamma", "c-big")


def test_a_growing_job_is_capped_not_stopped() -> None:
    h = _history(seed=2)
    h.jobs.matrix[80, 0] += 700.0  # a-train doubles that day
    h.teams.matrix[80, 0] += 700.0
    h.totals[80] += 700.0
    a = detect_anomalies(h.totals, [h.teams, h.jobs], START)
    assert [x.day_index for x in a] == [80]
    assert a[0].action.startswith("Cap job a-train at its baseline")
    assert a[0].causes[0].key == "alpha" and a[0].causes[0].increase_usd == pytest.approx(700.0, rel=0.1)


def test_weekday_factor_keeps_mondays_quiet() -> None:
    h = _history(seed=1)
    roll, factor = seasonal_baseline(h.totals)
    mondays = [t for t in range(28, 90) if (START.weekday() + t) % 7 == 0]
    assert np.all(factor[mondays] > 1.1)  # a Monday is well above its week's mean
    assert np.all(np.abs(h.totals[mondays] / (roll[mondays] * factor[mondays]) - 1) < 0.15)


@settings(max_examples=60, deadline=None)
@given(
    level=st.floats(min_value=20.0, max_value=50_000.0),
    pattern=st.lists(st.floats(min_value=0.3, max_value=1.5), min_size=7, max_size=7),
    noise=st.floats(min_value=0.0, max_value=0.04),
    trend=st.floats(min_value=-0.002, max_value=0.003),
    seed=st.integers(min_value=0, max_value=2**16),
    days=st.integers(min_value=21, max_value=120),
)
def test_flat_or_seasonal_history_raises_nothing(
    level: float, pattern: list[float], noise: float, trend: float, seed: int, days: int
) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(days)
    y = level * (1 + trend * t) * np.array(pattern)[(START.weekday() + t) % 7] * rng.normal(1, noise, days)
    y = np.clip(y, 0, None)
    bd = Breakdown("team", ["only"], y[:, None])
    assert detect_anomalies(y, [bd], START) == []


def _ledger_history(days: int, spike_day: int | None) -> tuple[Ledger, float]:
    """Node n1 (8 GPUs, $16/h) for ``days`` days, team alpha's jobs on 2 GPUs of it; on ``spike_day``
    a second node n2 (4 GPUs, $8/h) comes up for 20 hours for job j-big of team beta (+$160)."""
    t0 = datetime(2026, 1, 5, tzinfo=UTC).timestamp()
    ledger = Ledger()
    ledger.add_node(
        NodeInterval("n1", "p", "A100-80GB", 8, 0, 0, CapacityType.ON_DEMAND, 16.0, t0, t0 + days * 86400.0)
    )

    def seg(job: str, team: str, node: str, price: float, gpus: int, a: float, b: float) -> UsageSegment:
        return UsageSegment(
            job,
            team,
            "",
            "default",
            "",
            {},
            node,
            "p",
            "A100-80GB",
            CapacityType.ON_DEMAND,
            Fraction(gpus),
            0,
            0,
            price,
            a,
            b,
        )

    for d in range(days):
        ds = t0 + d * 86400.0
        ledger.append(seg(f"a-{d}", "alpha", "n1", 16.0, 2, ds, ds + 86400.0))
        if d == spike_day:
            a, b = ds + 3600.0, ds + 21 * 3600.0
            ledger.add_node(NodeInterval("n2", "p", "A100-80GB", 4, 0, 0, CapacityType.ON_DEMAND, 8.0, a, b))
            ledger.append(seg("j-big", "beta", "n2", 8.0, 4, a, b))
    return ledger, t0


def test_scan_ledger_names_the_job_and_team() -> None:
    ledger, t0 = _ledger_history(40, spike_day=33)
    cfg = AnomalyConfig(min_increase_usd=10)
    found = scan_ledger(ledger, first_day_start=t0, days=40, config=cfg)
    assert [a.day for a in found] == [date(2026, 2, 7)]
    a = found[0]
    assert a.spend_usd == pytest.approx(384 + 160) and a.increase_usd == pytest.approx(160)
    assert {(c.dimension, c.key) for c in a.causes} == {("team", "beta"), ("job_id", "j-big")}
    assert "Stop job j-big" in a.action
    # scoped to a team: alpha's spend never moved; beta's first day of spend is new spend
    assert scan_ledger(ledger, first_day_start=t0, days=40, config=cfg, team="alpha") == []
    beta = scan_ledger(ledger, first_day_start=t0, days=40, config=cfg, team="beta")
    assert [(x.day_index, x.causes[-1].key) for x in beta] == [(33, "j-big")]
    assert scan_ledger(*_ledger_history(40, None)[:1], first_day_start=t0, days=40, config=cfg) == []
