"""Forecasts: a job's remaining cost from its progress, and a scope's period-end spend."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pytest

from gpufleet.cost.forecast import (
    ProgressReport,
    forecast_job,
    forecast_period,
    parse_progress_file,
    theil_sen,
)
from gpufleet.errors import InputError


def _reports(rates: list[float], dt: float = 60.0, total: float = 12_000.0) -> list[ProgressReport]:
    out, step, t = [ProgressReport(0.0, 0.0, total)], 0.0, 0.0
    for r in rates:
        t += dt
        step += r * dt
        out.append(ProgressReport(t, step, total))
    return out


def test_halfway_at_a_steady_rate_costs_as_much_again() -> None:
    reps = _reports([10.0] * 10)  # 6000 of 12000 steps in 600 s
    spent = 600 / 3600 * 7.2  # $7.20/h for 600 s
    f = forecast_job("j1", reps, spent_usd=spent, cost_rate_usd_per_hour=7.2, now=600.0)
    assert f.method == "progress" and f.fraction_done == pytest.approx(0.5)
    assert f.remaining_s == pytest.approx(600.0)
    assert f.remaining_usd == pytest.approx(spent)
    assert f.remaining_usd_low is not None and f.remaining_usd_high is not None
    assert f.remaining_usd_low <= spent <= f.remaining_usd_high


def test_interval_from_noisy_rates_contains_the_truth() -> None:
    rng = np.random.default_rng(7)
    rates = list(10.0 * rng.uniform(0.85, 1.15, size=20))
    reps = _reports(rates, dt=30.0, total=24_000.0)
    done = reps[-1].step
    assert done is not None
    truth_s = (24_000.0 - done) / 10.0  # the true mean rate continues
    f = forecast_job("j1", reps, spent_usd=1.0, cost_rate_usd_per_hour=3.6, now=reps[-1].time)
    assert f.remaining_s_low is not None and f.remaining_s_high is not None
    assert f.remaining_s_low <= truth_s <= f.remaining_s_high
    assert f.remaining_s == pytest.approx(truth_s, rel=0.1)
    assert f.remaining_usd == pytest.approx(f.remaining_s * 3.6 / 3600)  # type: ignore[operator]


def test_time_since_the_last_report_counts_as_progress() -> None:
    f = forecast_job("j", _reports([10.0] * 10), spent_usd=0, cost_rate_usd_per_hour=3600, now=700.0)
    assert f.remaining_s == pytest.approx(500.0) and f.remaining_usd == pytest.approx(500.0)


def test_runtime_estimate_without_progress() -> None:
    f = forecast_job(
        "j",
        [],
        spent_usd=2.0,
        cost_rate_usd_per_hour=3.6,
        now=1000.0,
        started_at=0.0,
        estimated_runtime_s=4000.0,
        max_runtime_s=7000.0,
    )
    assert f.method == "estimate" and f.remaining_s == 3000.0
    assert (f.remaining_s_low, f.remaining_s_high) == (0.0, 6000.0)
    assert f.remaining_usd == pytest.approx(3.0)
    none = forecast_job("j", [], spent_usd=0, cost_rate_usd_per_hour=1, now=5)
    assert none.method == "none" and none.remaining_usd is None


def test_progress_file_format() -> None:
    text = (
        '{"time": 10, "step": 100, "total_steps": 1000, "metrics": {"loss": 0.5}}\n'
        "\n"
        '{"time": 5, "step": 50}\n'
        '{"time": 20, "step": 2'  # the job is writing this line
    )
    reps = parse_progress_file(text)
    assert [(r.time, r.step, r.total_steps) for r in reps] == [(5, 50, None), (10, 100, 1000)]
    assert reps[1].metrics == {"loss": 0.5}


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ('{"step": 1}\n{}\n', 1, "time"),
        ('{"time": 1}\nnot json\n{"time": 2}\n', 2, None),
        ('{"time": 1, "step": -4}\n', 1, "step"),
        ('{"time": 1, "metrics": {"loss": "x"}}\n', 1, "metrics.loss"),
    ],
)
def test_progress_file_errors_name_line_and_field(text: str, line: int, field: str | None) -> None:
    with pytest.raises(InputError) as err:
        parse_progress_file(text, source="progress.jsonl")
    assert err.value.line == line
    if field is not None:
        assert err.value.field == field


def test_theil_sen_ignores_a_spike() -> None:
    x = np.arange(30, dtype=np.float64)
    y = 100 + 2 * x
    y[10] += 1000
    a, b = theil_sen(x, y)
    assert b == pytest.approx(2.0) and a == pytest.approx(100.0)


def test_period_end_spend_with_trend_and_weekly_pattern() -> None:
    rng = np.random.default_rng(3)
    start = date(2026, 8, 3)  # a Monday
    pattern = np.array([1.1, 1.15, 1.1, 1.05, 1.0, 0.45, 0.4])  # weekends are quiet

    def truth(n0: int, n1: int) -> np.ndarray:
        t = np.arange(n0, n1)
        return (1000 + 5 * t) * pattern[(start.weekday() + t) % 7]

    days = 75  # up to Oct 16 inclusive
    hist = truth(0, days) * rng.normal(1, 0.03, size=days)
    p_start, p_end = date(2026, 10, 1), date(2026, 11, 1)
    f = forecast_period(hist, start, p_start, p_end)
    first_period = (p_start - start).days
    real_rest = truth(days, (p_end - start).days).sum()
    real_total = hist[first_period:].sum() + real_rest
    assert f.method == "trend+weekly" and f.days_left == (p_end - (start + timedelta(days=days))).days
    assert f.spent_usd == pytest.approx(hist[first_period:].sum())
    assert f.total_usd == pytest.approx(real_total, rel=0.03)
    assert f.low_usd <= real_total <= f.high_usd
    assert f.weekday_offsets_usd[5] < 0 < f.weekday_offsets_usd[1]


def test_short_histories_fall_back() -> None:
    f = forecast_period([10.0, 12.0], date(2026, 1, 1), date(2026, 1, 1), date(2026, 1, 5))
    assert f.method == "mean" and f.forecast_remaining_usd == pytest.approx(22.0) and f.total_usd == pytest.approx(44)
    f = forecast_period([float(i) for i in range(10)], date(2026, 1, 1), date(2026, 1, 1), date(2026, 1, 12))
    assert f.method == "trend" and f.forecast_remaining_usd == pytest.approx(10.0)
    with pytest.raises(InputError):
        forecast_period([1.0], date(2026, 1, 2), date(2026, 1, 2), date(2026, 1, 1))
