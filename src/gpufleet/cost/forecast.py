"""Forecasts: what a running job will still cost, and what a scope will have spent at period end.

Two small, explainable models (numpy only, no wall clock: every function takes ``now`` or works on
given days).

**A job's remaining cost** (:func:`forecast_job`). Progress reports ``(time, step, total_steps)``
come from the SDK (``POST /v1/jobs/{id}/progress``) or from the job's progress file (format in
:func:`parse_progress_file`). The step rate of each interval between consecutive reports is
``Δstep / Δtime``; the point estimate uses the rate over the recent window (the last ``window`` intervals:
total steps / total time, i.e. the time-weighted mean, which a single noisy interval cannot swing; a
single report is measured from the job's start, at step 0), and the interval uses the spread of the
per-interval rates in that window (their ``(1 - level) / 2`` and ``(1 + level) / 2`` empirical
quantiles): a fast rate gives the low end of the remaining time, a slow one the high end. This is
conservative — the rate averaged over the rest of the run varies less than one interval's rate —
which is what a budget check wants. Remaining cost = remaining time × the job's cost rate (its spend
so far per hour held, from the ledger: :func:`job_cost_rate`). Without progress, a runtime estimate
gives ``estimate - elapsed`` with the interval ``[0, max_runtime - elapsed]`` (a job may end any
time and is stopped at its max runtime; without one the high end is the point).

**A scope's period-end spend** (:func:`forecast_period`). Daily totals are modelled as
``y_t = a + b·t + s_{weekday(t)} + e_t``: a Theil–Sen trend (the median of pairwise slopes — a few
spikes do not tilt it) and additive day-of-week offsets (the median residual of each weekday,
centred to sum to zero), fitted by alternating the two twice. The forecast of the rest of the period
is the sum of the fitted values of the days still to come; its interval is
``± z · σ · sqrt(H)`` for H future days, with σ the robust residual scale (1.4826 × MAD) and z the
normal quantile of ``level``. With under two weeks of history there are no weekday offsets; under
three days the model is the mean. History is the scope's ledger: days before the server existed are
not days of zero spend. A young scope (under three complete days) is forecast from the rate observed
since the ledger's start (:func:`forecast_rate`). Either interval is at least ``± z ·
rate_rel_se(observed) · rest`` (:func:`rate_rel_se`): little history is an uncertain future even
when it was flat. The total is never below the floor — spent plus the estimated rest of unfinished
jobs (:func:`with_floor`).

A job's time is its *running* time when its runs are known: a preempted job's wait in the queue is
neither progress at its rate nor time off its estimate, and a pending job's rest is priced at the
price it will likely run at.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.cost.ledger import Ledger
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import daily_spend_reports, job_costs_usd
from gpufleet.errors import InputError

FloatArray = npt.NDArray[np.float64]

PROGRESS_FILE_ENV = "GPUFLEET_PROGRESS_FILE"
# The server ignores a progress-file line longer than this (a report with the API's 32 metrics and
# long names fits several times over): parsing a job's line costs the server no more than this.
MAX_PROGRESS_LINE_BYTES = 16 * 1024


# -- progress -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """One progress report of a job: ``step`` of ``total_steps`` done at ``time`` (seconds), and
    metrics (e.g. ``{"loss": 0.31}``) for plateau checks. Steps may be epochs; only ratios matter."""

    time: float
    step: float | None = None
    total_steps: float | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)


def parse_progress_file(text: str, *, source: str = PROGRESS_FILE_ENV) -> list[ProgressReport]:
    """Parse a progress file (what a job appends to ``$GPUFLEET_PROGRESS_FILE``).

    Format: JSON Lines, one object per report, appended as training goes::

        {"time": 1767225600.0, "step": 1200, "total_steps": 10000, "metrics": {"loss": 0.42}}

    - ``time``: Unix seconds (required; a number);
    - ``step``: steps (or epochs) done so far; ``total_steps``: the planned total (either may be
      omitted, e.g. a metrics-only line);
    - ``metrics``: an object of name → number (optional).

    Blank lines and a final partial line (the job was writing it) are skipped; any other bad line
    raises :class:`InputError` naming the line and field. Reports are returned in time order.
    """
    out: list[ProgressReport] = []
    lines = text.split("\n")
    for i, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        obj = _json(line)
        if obj is _NOT_JSON and i == len(lines):  # an unfinished last line: the writer is mid-write
            break
        out.append(_line_report(obj, source, i))
    out.sort(key=lambda r: r.time)
    return out


def parse_progress_line(text: str, *, source: str = PROGRESS_FILE_ENV, line: int | None = None) -> ProgressReport:
    """One line of a progress file (format: :func:`parse_progress_file`), or :class:`InputError`
    naming the line and field (deep nesting and numbers of too many digits are not JSON here)."""
    return _line_report(_json(text), source, line)


_NOT_JSON = object()


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, an int of too many digits, deep nesting
        return _NOT_JSON


def _line_report(obj: Any, source: str, line: int | None) -> ProgressReport:
    if not isinstance(obj, dict):
        raise InputError("not a JSON object", source=source, line=line)
    return _report(obj, source, line)


def _number(obj: Mapping[str, Any], key: str, source: str, line: int | None, *, required: bool) -> float | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise InputError("required", source=source, line=line, field=key)
        return None
    f = _finite(v)
    if f is None:
        raise InputError(f"not a finite number: {v!r:.40}", source=source, line=line, field=key)
    if f < 0:
        raise InputError(f"must be >= 0, got {f}", source=source, line=line, field=key)
    return f


def _finite(v: Any) -> float | None:
    """``v`` as a finite float, or None (not a number, a bool, or an int too large for a float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _report(obj: Mapping[str, Any], source: str, line: int | None) -> ProgressReport:
    t = _number(obj, "time", source, line, required=True)
    assert t is not None
    metrics_raw = obj.get("metrics") or {}
    if not isinstance(metrics_raw, dict):
        raise InputError("must be an object of name -> number", source=source, line=line, field="metrics")
    metrics: dict[str, float] = {}
    for k, v in metrics_raw.items():
        f = _finite(v)
        if f is None:
            raise InputError(f"not a finite number: {v!r:.40}", source=source, line=line, field=f"metrics.{k}")
        metrics[str(k)] = f
    return ProgressReport(
        t,
        _number(obj, "step", source, line, required=False),
        _number(obj, "total_steps", source, line, required=False),
        metrics,
    )


# -- a job's remaining cost -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobForecast:
    """What a running job will still cost. ``method``: ``progress`` | ``estimate`` | ``none``."""

    job_id: str
    method: str
    spent_usd: float
    cost_rate_usd_per_hour: float
    fraction_done: float | None
    remaining_s: float | None
    remaining_s_low: float | None
    remaining_s_high: float | None
    remaining_usd: float | None
    remaining_usd_low: float | None
    remaining_usd_high: float | None
    level: float
    explanation: str

    @property
    def total_usd(self) -> float | None:
        return None if self.remaining_usd is None else self.spent_usd + self.remaining_usd


def job_cost_rate(
    ledger: Ledger, job_id: str, as_of: float, *, rules: PricingRules | None = None
) -> tuple[float, float]:
    """``(spent_usd, held_s)`` of a job from the ledger as of ``as_of``: what it was charged (with
    ``rules``, the server's pricing rules, as ``/v1/usage`` charges it; exact, not rounded to cents,
    so the rate of a job a few seconds old is its price, not a rounded cent over a few seconds) and
    the wall time it held resources (the union of its segments' spans, so a gang's pods count once). The cost rate is
    ``spent / held_s × 3600``."""
    segs = [s for s in ledger.segments(as_of=as_of) if s.job_id == job_id]
    if not segs:
        return 0.0, 0.0
    start = min(s.start for s in segs)
    spent = job_costs_usd(ledger, rules, start, max(as_of, start), as_of=as_of, exact=True).get(job_id, 0.0)
    spans = sorted((s.start, s.end) for s in segs)
    held, cur_a, cur_b = 0.0, spans[0][0], spans[0][1]
    for a, b in spans[1:]:
        if a > cur_b:
            held += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    held += cur_b - cur_a
    return spent, held


def forecast_job(
    job_id: str,
    reports: Sequence[ProgressReport],
    *,
    spent_usd: float,
    cost_rate_usd_per_hour: float,
    now: float,
    started_at: float | None = None,
    estimated_runtime_s: float | None = None,
    max_runtime_s: float | None = None,
    level: float = 0.9,
    window: int = 20,
    runs: Sequence[tuple[float, float | None]] | None = None,
) -> JobForecast:
    """Remaining cost of a job, with an interval (see the module docstring for the model).

    ``reports`` are the job's progress reports (any order); ``spent_usd`` and
    ``cost_rate_usd_per_hour`` come from the ledger (:func:`job_cost_rate`), or for a job not
    running, the price it will likely run at; ``started_at`` and ``estimated_runtime_s`` are used
    when there is no usable progress. ``runs``: the job's runs ``(started, ended or None while
    open)`` in order — when given, time is *running* time (a preempted job's wait in the queue is
    not time it progressed at its rate, nor time its estimate ran down), and a job with no open run
    is pending: nothing of its rest has run since its last report, and its estimate is whole.
    Without ``runs``, wall time since ``started_at`` (a job that never stopped).
    """
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), got {level}", field="level")
    rate_s = cost_rate_usd_per_hour / 3600.0
    pending = runs is not None and (not runs or runs[-1][1] is not None)
    pts = sorted((r for r in reports if r.step is not None), key=lambda r: r.time)
    total = next((r.total_steps for r in reversed(pts) if r.total_steps), None)
    first_start = runs[0][0] if runs else started_at
    if len(pts) == 1 and first_start is not None and pts[0].time > first_start:
        # one report: the rate since the job first started (step 0 then), over its running time,
        # is the only rate there is
        pts = [ProgressReport(first_start, step=0.0, total_steps=total), *pts]
    if len(pts) >= 2 and total is not None:
        t = np.array([r.time for r in pts], dtype=np.float64)
        s = np.array([r.step for r in pts], dtype=np.float64)
        dt = np.array([_running_s(a, b, runs) for a, b in itertools.pairwise(t)], dtype=np.float64)
        ds = np.diff(s)
        # an interval with no running time measures nothing; one whose step went back (a restart
        # from a checkpoint or from scratch) measures the loss, not the rate
        ok = (dt > 0) & (ds >= 0)
        dt, ds = dt[ok][-window:], ds[ok][-window:]
        if dt.size and ds.sum() > 0:
            rates = ds / dt
            point_rate = float(ds.sum() / dt.sum())
            lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
            r_lo, r_hi = (float(x) for x in np.quantile(rates, [lo_q, hi_q]))
            last_step = float(s[-1])
            remaining_steps = max(0.0, total - last_step)
            # the running time since the last report already ran at about the point rate (a
            # pending job's wait ran nothing)
            since = _running_s(float(t[-1]), now, runs)
            rem = max(0.0, remaining_steps / point_rate - since)
            rem_lo = max(0.0, remaining_steps / r_hi - since) if r_hi > 0 else rem
            rem_hi = max(0.0, remaining_steps / r_lo - since) if r_lo > 0 else math.inf
            rem_lo, rem_hi = min(rem_lo, rem), max(rem_hi, rem)
            return JobForecast(
                job_id,
                "progress",
                spent_usd,
                cost_rate_usd_per_hour,
                min(1.0, last_step / total),
                rem,
                rem_lo,
                rem_hi,
                rem * rate_s,
                rem_lo * rate_s,
                rem_hi * rate_s,
                level,
                f"{remaining_steps:g} of {total:g} steps left at {point_rate:.4g} steps/s "
                f"(interval rates {r_lo:.4g}–{r_hi:.4g} steps/s over the last {dt.size} reports, "
                f"running time only) × ${cost_rate_usd_per_hour:.4g}/h"
                + (" (pending: at the price it will likely run at)" if pending else ""),
            )
    if estimated_runtime_s is not None and (runs is not None or started_at is not None):
        if runs is not None:  # the current run's running time; a pending job's estimate is whole
            elapsed = 0.0 if pending else max(0.0, now - runs[-1][0])
        else:
            elapsed = max(0.0, now - started_at) if started_at is not None else 0.0
        rem = max(0.0, estimated_runtime_s - elapsed)
        high = rem if max_runtime_s is None else max(rem, max_runtime_s - elapsed)
        return JobForecast(
            job_id,
            "estimate",
            spent_usd,
            cost_rate_usd_per_hour,
            min(1.0, elapsed / estimated_runtime_s) if estimated_runtime_s > 0 else None,
            rem,
            0.0,
            high,
            rem * rate_s,
            0.0,
            high * rate_s,
            level,
            f"runtime estimate {estimated_runtime_s:.0f}s − {elapsed:.0f}s elapsed × ${cost_rate_usd_per_hour:.4g}/h"
            + (" (pending: the whole estimate, at the price it will likely run at)" if pending else "")
            + " (no progress reports; low end 0: it may end any time"
            + (f", high end its max runtime {max_runtime_s:.0f}s)" if max_runtime_s is not None else ")"),
        )
    return JobForecast(
        job_id,
        "none",
        spent_usd,
        cost_rate_usd_per_hour,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        level,
        "no progress reports with total_steps and no runtime estimate",
    )


def _running_s(a: float, b: float, runs: Sequence[tuple[float, float | None]] | None) -> float:
    """Running time within ``[a, b]``: its overlap with ``runs`` (an open run runs on), or the
    wall time without them."""
    if runs is None:
        return max(0.0, b - a)
    return sum(max(0.0, min(b, math.inf if e is None else e) - max(a, s)) for s, e in runs)


# -- a scope's period-end spend -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeriodForecast:
    """Spend of a scope at ``period_end`` (exclusive): what was spent plus the forecast of the rest."""

    period_start: date
    period_end: date
    spent_usd: float  # history days inside the period
    forecast_remaining_usd: float
    total_usd: float
    low_usd: float
    high_usd: float
    level: float
    days_left: int
    trend_usd_per_day: float
    weekday_offsets_usd: tuple[float, ...]  # Monday..Sunday (zeros without weekly seasonality)
    residual_sd_usd: float
    history_days: float  # how long the scope's ledger has existed (days; a young server's are a fraction)
    method: str  # "trend+weekly" | "trend" | "mean" | "rate"
    rate_usd_per_day: float = 0.0  # the spend rate forecast for the rest of the period
    floor_usd: float = 0.0  # spent + unfinished jobs' estimated rest: the total is never below it

    def explain(self) -> str:
        return (
            f"{self.method}: {self.rate_usd_per_day:.2f} $/day, trend {self.trend_usd_per_day:+.2f} $/day, "
            f"residual σ {self.residual_sd_usd:.2f} $/day over {self.history_days:.3g} days; {self.days_left} days left"
        )


HOUR_S = 3600.0


def rate_rel_se(observed_s: float) -> float:
    """The relative standard error of a spend rate measured over ``observed_s`` seconds: as if each
    hour observed were an independent draw whose spread equals its mean (a busy hour and an idle
    one differ by about that), ``1 / sqrt(hours)``, and 1 under an hour. It is the least
    uncertainty a forecast from that much history can honestly claim: a constant spend over 24
    minutes says little about the month (±100 % of the rest at one σ), over eight weeks ±2.7 %."""
    return 1.0 / math.sqrt(max(observed_s, HOUR_S) / HOUR_S)


def _z(level: float) -> float:
    return NormalDist().inv_cdf(min((1 + level) / 2, 1 - 1e-12))  # level → 1 rounds (1+level)/2 to 1.0


def with_floor(f: PeriodForecast, floor_usd: float) -> PeriodForecast:
    """``f`` with its total and interval raised to at least ``floor_usd`` (what is spent plus what
    unfinished jobs are expected to cost: a forecast below it is already wrong)."""
    total = max(f.total_usd, floor_usd)
    return replace(
        f,
        forecast_remaining_usd=total - f.spent_usd,
        total_usd=total,
        low_usd=max(f.low_usd, floor_usd),
        high_usd=max(f.high_usd, total),
        floor_usd=floor_usd,
    )


def forecast_rate(
    spent_usd: float,
    observed_usd: float,
    observed_s: float,
    period_start: date,
    period_end: date,
    remaining_s: float,
    *,
    level: float = 0.9,
) -> PeriodForecast:
    """Period-end spend of a young scope (under three complete days of ledger, too few for a daily
    model): the rate observed so far, ``observed_usd`` over the ``observed_s`` seconds since the
    ledger's start (running jobs' spend to now included), for the ``remaining_s`` seconds left in
    the period, with the interval ``± z · rate_rel_se(observed_s) · rest`` (:func:`rate_rel_se`)."""
    if period_end <= period_start:
        raise InputError("period_end must be after period_start", field="period_end")
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), got {level}", field="level")
    rate = observed_usd / observed_s if observed_s > 0 else 0.0
    left = max(0.0, remaining_s)
    rem = rate * left
    half = _z(level) * rate_rel_se(observed_s) * rem
    return PeriodForecast(
        period_start,
        period_end,
        spent_usd,
        rem,
        spent_usd + rem,
        spent_usd + max(0.0, rem - half),
        spent_usd + rem + half,
        level,
        math.ceil(left / 86400.0),
        0.0,
        (0.0,) * 7,
        0.0,
        max(0.0, observed_s) / 86400.0,
        "rate",
        rate * 86400.0,
        spent_usd,
    )


def theil_sen(x: FloatArray, y: FloatArray) -> tuple[float, float]:
    """Robust line ``y = a + b x``: b the median of pairwise slopes, a the median of ``y − b x``."""
    n = x.size
    if n < 2:
        return (float(y[0]) if n else 0.0), 0.0
    i, j = np.triu_indices(n, k=1)
    dx = x[j] - x[i]
    ok = dx != 0
    b = float(np.median((y[j] - y[i])[ok] / dx[ok])) if ok.any() else 0.0
    a = float(np.median(y - b * x))
    return a, b


def fit_daily(values: Sequence[float] | FloatArray, first_day: date) -> tuple[float, float, FloatArray, str]:
    """Fit ``a + b·t + s_weekday`` to daily totals; returns ``(a, b, offsets[7], method)``."""
    y = np.asarray(values, dtype=np.float64)
    n = y.size
    t = np.arange(n, dtype=np.float64)
    offsets = np.zeros(7)
    if n < 3:
        return (float(y.mean()) if n else 0.0), 0.0, offsets, "mean"
    wd = (first_day.weekday() + np.arange(n)) % 7
    seasonal = n >= 14
    a, b = theil_sen(t, y)
    if seasonal:
        for _ in range(2):
            resid = y - a - b * t
            offsets = np.array([np.median(resid[wd == d]) if (wd == d).any() else 0.0 for d in range(7)])
            offsets -= offsets.mean()
            a, b = theil_sen(t, y - offsets[wd])
    return a, b, offsets, "trend+weekly" if seasonal else "trend"


def forecast_period(
    daily_usd: Sequence[float] | FloatArray,
    history_start: date,
    period_start: date,
    period_end: date,
    *,
    level: float = 0.9,
    spent_usd: float | None = None,
    day_elapsed: float = 0.0,
    observed_s: float | None = None,
) -> PeriodForecast:
    """Period-end spend of a scope from its complete days ``daily_usd`` (day 0 = ``history_start``).

    History days in ``[period_start, …]`` count as spent; the days from the day after the history
    to ``period_end`` (exclusive) are forecast. History before the period trains the model.
    ``spent_usd``: what the scope has spent in the period so far, today included — the figure a
    budget shows, from the one spend path — instead of the history days' sum; ``day_elapsed``: the
    fraction of the first forecast day (today) already past and counted in it, so only the rest of
    today is forecast. ``observed_s``: how long the scope's ledger has existed (default: the history
    days); the interval is at least ``± z · rate_rel_se(observed_s) · rest`` (:func:`rate_rel_se`:
    a flat history is not a certain future).
    """
    if period_end <= period_start:
        raise InputError("period_end must be after period_start", field="period_end")
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), got {level}", field="level")
    y = np.asarray(daily_usd, dtype=np.float64)
    n = y.size
    a, b, offsets, method = fit_daily(y, history_start)
    t = np.arange(n, dtype=np.float64)
    wd = (history_start.weekday() + np.arange(n)) % 7
    fitted = a + b * t + offsets[wd]
    resid = y - fitted
    if n >= 3:
        mad = float(np.median(np.abs(resid - np.median(resid))))
        sigma = 1.4826 * mad
    else:
        sigma = float(y.std()) if n else 0.0
    first_future = history_start + timedelta(days=n)
    start_idx = max(0, (period_start - history_start).days)
    spent = float(y[start_idx:].sum()) if start_idx < n else 0.0
    if spent_usd is not None:
        spent = spent_usd
    f0 = max(first_future, period_start)
    h = max(0, (period_end - f0).days)
    tf = np.arange((f0 - history_start).days, (f0 - history_start).days + h, dtype=np.float64)
    wf = (history_start.weekday() + tf.astype(np.int64)) % 7
    future = np.clip(a + b * tf + offsets[wf], 0.0, None)
    per_day = float(future.mean()) if h else 0.0
    if h and f0 == first_future:
        future[0] *= 1.0 - min(1.0, max(0.0, day_elapsed))  # today's past part is in ``spent``
    rem = float(future.sum())
    z = _z(level)
    observed = n * 86400.0 if observed_s is None else observed_s
    half = max(z * sigma * math.sqrt(h), z * rate_rel_se(observed) * rem)
    return PeriodForecast(
        period_start,
        period_end,
        spent,
        rem,
        spent + rem,
        spent + max(0.0, rem - half),
        spent + rem + half,
        level,
        h,
        b,
        tuple(float(o) for o in offsets),
        sigma,
        observed / 86400.0,
        method,
        per_day,
        spent,
    )


def daily_totals(
    ledger: Ledger,
    first_day_start: float,
    days: int,
    *,
    aggregate: Sequence[str] = ("team",),
    as_of: float | None = None,
    rules: PricingRules | None = None,
) -> tuple[list[tuple[str, ...]], FloatArray, FloatArray]:
    """Per-day cost from the ledger: ``(keys, matrix[days, keys], totals[days])``.

    Day ``d`` is ``[first_day_start + 86400·d, +86400)`` (pass the start of a day in the wanted time
    zone). Totals are the nodes' cost (idle included); the matrix holds the attributed rows (idle is
    the key ``("__idle__", …)``). One :func:`~gpufleet.cost.spend.spend_report` per day, priced with
    ``rules`` (the server's pricing rules, as ``/v1/usage`` prices).
    """
    if days < 0:
        raise InputError("days must be >= 0", field="days")
    rows: list[dict[tuple[str, ...], float]] = []
    totals = np.zeros(days)
    for d, rep in enumerate(
        daily_spend_reports(ledger, first_day_start, days, aggregate=aggregate, rules=rules, as_of=as_of)
    ):
        day = {r.key: float(r.total_cost_usd) for r in rep.rows}
        if rep.idle.total_cost_usd:
            day[rep.idle.key] = float(rep.idle.total_cost_usd)
        rows.append(day)
        totals[d] = float(rep.totals.total_cost_usd)
    keys = sorted({k for r in rows for k in r})
    index = {k: i for i, k in enumerate(keys)}
    matrix = np.zeros((days, len(keys)))
    for d, r in enumerate(rows):
        for k, v in r.items():
            matrix[d, index[k]] = v
    return keys, matrix, totals
