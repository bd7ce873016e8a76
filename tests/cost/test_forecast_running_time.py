"""Forecasts measured over what actually happened (issue 23, items 3 and 6): a job's rate and its
estimate's run-down over its *running* time (not its waits after a preemption), a pending job's
rest priced at all, and a young scope's period-end spend from the rate it has spent at, with an
interval that is honest about how little history there is and never below what is committed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import pytest

from gpufleet.cost.forecast import (
    ProgressReport,
    forecast_job,
    forecast_period,
    forecast_rate,
    rate_rel_se,
    with_floor,
)

Run = tuple[float, float | None]


@dataclass(frozen=True)
class JobCase:
    reports: tuple[tuple[float, float, float], ...]  # (time, step, total_steps)
    runs: tuple[Run, ...]
    now: float
    estimate_s: float | None
    method: str
    remaining_s: float


# A job that does 0.95 steps/s while it runs; preempted at t=200 and resumed (from its checkpoint)
# at t=900: the wait is not time it progressed at its rate.
JOB_CASES = {
    # reports in both runs: the interval across the wait counts its 100 s of running, not 800 s
    "resumed-reports-in-both-runs": JobCase(
        ((100, 95, 600), (200, 190, 600), (1000, 285, 600)), ((0, 200), (900, None)), 1000, None, "progress", 315 / 0.95
    ),
    # one report after resumption: the rate is steps over running time since the first start
    # (0.95 steps/s), not over wall time (190 / 1000 s = 0.19 steps/s → 579 s instead of ~116 s)
    "one-report-after-resumption": JobCase(
        ((1000, 190, 300),), ((0, 100), (900, None)), 1000, None, "progress", 110 / 0.95
    ),
    # pending after a preemption with 110 steps left: its wait ran none of them (not $0.00 left)
    "pending-with-progress-left": JobCase(
        ((100, 95, 300), (200, 190, 300)), ((0, 200),), 5000, None, "progress", 110 / 0.95
    ),
    # submitted with an estimate, never started: the whole estimate is still to run
    "pending-with-estimate": JobCase((), (), 5000, 300, "estimate", 300),
    # preempted: the next run is a whole run (as a budget's committed spend counts it)
    "preempted-with-estimate": JobCase((), ((0, 120),), 5000, 300, "estimate", 300),
    # running again: the estimate runs down from the current run's start, not the first start
    "resumed-with-estimate": JobCase((), ((0, 120), (900, None)), 1000, 300, "estimate", 200),
}


@pytest.mark.parametrize("case", JOB_CASES.values(), ids=JOB_CASES.keys())
def test_a_jobs_time_is_its_running_time(case: JobCase) -> None:
    f = forecast_job(
        "j",
        [ProgressReport(t, s, n) for t, s, n in case.reports],
        spent_usd=0.1,
        cost_rate_usd_per_hour=7.2,
        now=case.now,
        estimated_runtime_s=case.estimate_s,
        runs=case.runs,
    )
    assert f.method == case.method
    assert f.remaining_s == pytest.approx(case.remaining_s, rel=1e-6)
    assert f.remaining_usd == pytest.approx(case.remaining_s * 7.2 / 3600, rel=1e-6)


def test_without_runs_wall_time_still_counts() -> None:
    """Callers that know no runs (a job that never stopped) keep the wall-time reading."""
    f = forecast_job(
        "j", [ProgressReport(100, 100, 300)], spent_usd=0, cost_rate_usd_per_hour=3600, now=100, started_at=0
    )
    assert f.remaining_s == pytest.approx(200) and f.remaining_usd == pytest.approx(200)


@dataclass(frozen=True)
class RateCase:
    observed_usd: float
    observed_s: float
    remaining_s: float
    rate_per_day: float
    rel_half_width: float  # (high - total) / rest at the 90 % level


Z90 = 1.6448536269514722
RATE_CASES = {
    # the server: 24 minutes old at $29.384/h ($705/day), 18.5 days of the month left
    "24-minutes-old": RateCase(29.384 * 0.4, 1440, 18.5 * 86400, 29.384 * 24, Z90 * 1.0),
    "one-day-old": RateCase(705.216, 86400, 10 * 86400, 705.216, Z90 / 24**0.5),
    "nothing-spent-yet": RateCase(0.0, 600, 86400, 0.0, 0.0),
}


@pytest.mark.parametrize("case", RATE_CASES.values(), ids=RATE_CASES.keys())
def test_a_young_scope_is_forecast_at_its_rate_so_far(case: RateCase) -> None:
    f = forecast_rate(5.0, case.observed_usd, case.observed_s, date(2026, 11, 1), date(2026, 12, 1), case.remaining_s)
    rest = case.rate_per_day / 86400 * case.remaining_s
    assert f.method == "rate" and f.rate_usd_per_day == pytest.approx(case.rate_per_day)
    assert f.forecast_remaining_usd == pytest.approx(rest) and f.total_usd == pytest.approx(5.0 + rest)
    assert f.high_usd - f.total_usd == pytest.approx(case.rel_half_width * rest)
    assert 5.0 <= f.low_usd <= f.total_usd  # never below what is spent
    assert f.history_days == pytest.approx(case.observed_s / 86400)


def test_little_history_widens_a_flat_daily_forecast() -> None:
    """Ten identical days: the residual spread is 0, yet ten days do not make the month certain."""
    f = forecast_period([192.0] * 10, date(2026, 11, 2), date(2026, 11, 1), date(2026, 12, 1), observed_s=10 * 86400)
    assert f.residual_sd_usd == 0 and f.rate_usd_per_day == pytest.approx(192.0)
    assert f.high_usd - f.total_usd == pytest.approx(Z90 * rate_rel_se(10 * 86400) * f.forecast_remaining_usd)
    assert f.history_days == pytest.approx(10)


# spent $10, rest $2 over 4 h of history: 90 % interval ±1.645 × 0.5 × $2 around $12
LOW, HIGH = 10 + 2 - Z90, 12 + Z90
FLOOR_CASES = {
    "floor-below-everything": (10.0, 12.0, LOW, HIGH),
    "floor-inside-interval": (12.5, 12.5, 12.5, HIGH),
    "floor-above-everything": (20.0, 20.0, 20.0, 20.0),
}


@pytest.mark.parametrize(("floor", "total", "low", "high"), FLOOR_CASES.values(), ids=FLOOR_CASES.keys())
def test_a_forecast_is_never_below_spent_plus_committed(floor: float, total: float, low: float, high: float) -> None:
    f = with_floor(forecast_rate(10.0, 2.0, 4 * 3600, date(2026, 11, 1), date(2026, 12, 1), 4 * 3600), floor)
    assert (f.total_usd, f.low_usd, f.high_usd) == (pytest.approx(total), pytest.approx(low), pytest.approx(high))
    assert f.forecast_remaining_usd == pytest.approx(total - 10.0) and f.floor_usd == floor
