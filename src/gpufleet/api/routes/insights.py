"""Cost insights: job progress and forecasts, spend forecasts, anomalies, recommendations and ROI.

Every figure is computed on request from the ledger, telemetry, progress and the price catalog
(:mod:`gpufleet.cost.forecast`, ``anomaly``, ``recommend``, ``roi``); money comes from
:mod:`gpufleet.cost.spend` with the server's pricing rules (``ApiContext.pricing_rules``), the same
as ``/v1/usage``. Days are UTC days. A token other
than admin sees its own team's scope only (its spend, its jobs' anomalies and recommendations);
the ROI report is the cluster's, like the usage totals.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from gpufleet.api.auth import require_writer
from gpufleet.api.deps import AUTHED, READ_ONE, WRITE_ONE, Caller, Ctx
from gpufleet.api.problems import input_at
from gpufleet.api.render import ts
from gpufleet.api.routes.jobs import _visible_job
from gpufleet.api.windows import parse_window
from gpufleet.cost.anomaly import AnomalyConfig, scan_ledger
from gpufleet.cost.budgets.model import Scope
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.forecast import (
    JobForecast,
    daily_totals,
    forecast_job,
    forecast_period,
    forecast_rate,
    job_cost_rate,
    with_floor,
)
from gpufleet.cost.periods import Period, history_text
from gpufleet.cost.recommend import RecommendConfig, recommend
from gpufleet.cost.roi import roi_report
from gpufleet.cost.rules import apply_rules
from gpufleet.cost.spend import SPEND_BASES, scope_spend_usd, spend_report
from gpufleet.errors import ConflictError
from gpufleet.io.catalog import load_catalog
from gpufleet.services.budgets import committed_spend, gpu_hour_price, job_row_gpus
from gpufleet.store import repo, usage_repo
from gpufleet.wire import (
    AnomalyCauseOut,
    AnomalyOut,
    JobForecastOut,
    ProgressIn,
    RecommendationOut,
    RoiOut,
    SpendForecastOut,
)

router = APIRouter(prefix="/v1", tags=["insights"])

DAY_S = 86400.0
HISTORY_DAYS = 56  # eight weeks: enough for the weekday offsets of the spend forecast


@functools.lru_cache(maxsize=1)
def _catalog() -> PriceCatalog:
    return load_catalog()


def _day_start(t: float) -> float:
    d = datetime.fromtimestamp(t, UTC).date()
    return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()


def _forecast_out(f: JobForecast) -> JobForecastOut:
    return JobForecastOut(
        job_id=f.job_id,
        method=f.method,
        spent_usd=round(f.spent_usd, 6),
        cost_rate_usd_per_hour=f.cost_rate_usd_per_hour,
        fraction_done=f.fraction_done,
        remaining_s=f.remaining_s,
        remaining_s_low=f.remaining_s_low,
        remaining_s_high=None if f.remaining_s_high == float("inf") else f.remaining_s_high,
        remaining_usd=f.remaining_usd,
        remaining_usd_low=f.remaining_usd_low,
        remaining_usd_high=None if f.remaining_usd_high == float("inf") else f.remaining_usd_high,
        level=f.level,
        explanation=f.explanation,
    )


def _job_forecast(ctx: Ctx, job_id: str, who: Caller, now: float) -> JobForecastOut:
    with ctx.database.session(readonly=True) as s:
        job = _visible_job(s, who, job_id)
        reports = usage_repo.job_progress(s, job_id)
        started = job.started_at
        since = min(job.submitted_at, started if started is not None else job.submitted_at)
        ledger = repo.load_ledger(s, since, now, now) if now > since else None
        estimate, max_rt = job.estimated_runtime_s, job.max_runtime_s
        runs = repo.run_spans(s, job_id)
        # the price it will likely run at: its GPUs at the GPU-hour price of its type (as a
        # budget's committed spend prices it)
        likely = job_row_gpus(job) * gpu_hour_price(s, tuple(sorted(job.gpu_types or ())))
    spent, held = job_cost_rate(ledger, job_id, now, rules=ctx.pricing_rules) if ledger is not None else (0.0, 0.0)
    running = bool(runs) and runs[-1][1] is None
    # a running job costs what the ledger charges it; one waiting (queued or preempted) will cost
    # what its next run will, not $0 nor its last node's price
    rate = spent / (held / 3600.0) if running and held > 0 else likely
    return _forecast_out(
        forecast_job(
            job_id,
            reports,
            spent_usd=spent,
            cost_rate_usd_per_hour=rate,
            now=now,
            started_at=started,
            estimated_runtime_s=estimate,
            max_runtime_s=max_rt,
            runs=runs,
        )
    )


@router.post(
    "/jobs/{job_id}/progress",
    status_code=201,
    response_model=JobForecastOut,
    responses=WRITE_ONE,
    summary="Report a running job's progress; returns its cost forecast",
)
def report_progress(ctx: Ctx, who: Caller, job_id: str, body: ProgressIn) -> JobForecastOut:
    require_writer(who)
    now = ctx.clock.now()
    with ctx.database.session() as s:
        job = _visible_job(s, who, job_id)
        if job.state not in ("RUNNING", "ADMITTED"):
            raise ConflictError(f"job {job_id} is {job.state}; progress is reported while it runs")
        usage_repo.add_progress(s, job_id, now, step=body.step, total_steps=body.total_steps, metrics=body.metrics)
    return _job_forecast(ctx, job_id, who, now)


@router.get(
    "/jobs/{job_id}/forecast", response_model=JobForecastOut, responses=READ_ONE, summary="A job's remaining cost"
)
def job_forecast(ctx: Ctx, who: Caller, job_id: str) -> JobForecastOut:
    return _job_forecast(ctx, job_id, who, ctx.clock.now())


def _period(kind: str, today: date) -> tuple[date, date]:
    if kind == "week":
        start = today - timedelta(days=today.weekday())
        return start, start + timedelta(days=7)
    start = today.replace(day=1)
    nxt = (start + timedelta(days=32)).replace(day=1)
    return start, nxt


@router.get("/forecast", response_model=SpendForecastOut, responses=AUTHED, summary="A scope's period-end spend")
def spend_forecast(
    ctx: Ctx,
    who: Caller,
    team: Annotated[
        str | None, Query(max_length=63, description="a team (default: all; non-admins: their own)")
    ] = None,
    period: Annotated[Literal["month", "week"], Query()] = "month",
    level: Annotated[float, Query(gt=0, le=0.999, description="prediction interval level")] = 0.9,
) -> SpendForecastOut:
    now = ctx.clock.now()
    if not who.is_admin:
        team = who.team
    today_start = _day_start(now)
    today = datetime.fromtimestamp(today_start, UTC).date()
    p_start, p_end = _period(period, today)
    h_start = min(p_start, today - timedelta(days=HISTORY_DAYS))
    first = datetime(h_start.year, h_start.month, h_start.day, tzinfo=UTC).timestamp()
    period_start_ts = datetime(p_start.year, p_start.month, p_start.day, tzinfo=UTC).timestamp()
    period_end_ts = datetime(p_end.year, p_end.month, p_end.day, tzinfo=UTC).timestamp()
    scope = Scope("all", "") if team is None else Scope("team", team)
    with ctx.database.session(readonly=True) as s:
        # history is the ledger's: days before the server existed are not days it spent nothing
        born = repo.ledger_start(s)
        ledger = repo.load_ledger(s, first, now, now)
        # what unfinished jobs are expected to cost (as a budget's committed spend counts it)
        rest = committed_spend(s, scope, Period(period_start_ts, period_end_ts), now, rules=ctx.pricing_rules)
    born = now if born is None else min(born, now)
    observed_s = now - born
    # the first complete day of the ledger (the day it started, if it started at midnight)
    first_full = born if _day_start(born) == born else _day_start(born) + DAY_S
    if first_full > first:
        first = first_full
        h_start = datetime.fromtimestamp(first, UTC).date()
    days = max(0, (today - h_start).days)

    def spend(a: float) -> float:
        # from the one spend path: a team's is what its budget shows (its jobs' charges), the
        # cluster's what its nodes cost
        if team is None:
            return float(spend_report(ledger, a, now, rules=ctx.pricing_rules, as_of=now).totals.total_cost_usd)
        return scope_spend_usd(ledger, ctx.pricing_rules, scope, a, now, as_of=now)

    spent = spend(period_start_ts)  # so far in the period, today included
    # the cluster's figure counts nodes, an `all` budget its jobs: both said, so the gap (idle) shows
    jobs_spent = (
        scope_spend_usd(ledger, ctx.pricing_rules, scope, period_start_ts, now, as_of=now) if team is None else spent
    )
    with input_at("query"):
        if days < 3:  # a young server: the rate it has spent at since its ledger started
            f = forecast_rate(
                spent,
                spend(born) if observed_s > 0 else 0.0,
                observed_s,
                p_start,
                p_end,
                period_end_ts - now,
                level=level,
            )
        else:
            keys, matrix, totals = daily_totals(
                ledger, first, days, aggregate=("team",), as_of=today_start, rules=ctx.pricing_rules
            )
            series = totals if team is None else (matrix[:, keys.index((team,))] if (team,) in keys else totals * 0)
            f = forecast_period(
                series,
                h_start,
                p_start,
                p_end,
                level=level,
                spent_usd=spent,
                day_elapsed=(now - today_start) / 86400.0,
                observed_s=observed_s,
            )
    f = with_floor(f, spent + rest.estimated_usd)
    basis = "nodes" if team is None else "jobs"
    basis_note = SPEND_BASES[basis]
    if team is None:
        basis_note += (
            f": ${jobs_spent:,.2f} of the ${spent:,.2f} was charged to jobs (what an `all` budget counts), "
            f"${max(0.0, spent - jobs_spent):,.2f} idle"
        )
    seen = history_text(observed_s)
    projection_note = (
        f"projected from {seen} of history (the rate since the server's ledger started)"
        if f.method == "rate"
        else f"projected from {seen} of history ({f.method} model of {days} complete days)"
    )
    return SpendForecastOut(
        scope="all" if team is None else f"team:{team}",
        period_start=ts(datetime(p_start.year, p_start.month, p_start.day, tzinfo=UTC).timestamp()),
        period_end=ts(datetime(p_end.year, p_end.month, p_end.day, tzinfo=UTC).timestamp()),
        spent_usd=f.spent_usd,
        forecast_remaining_usd=f.forecast_remaining_usd,
        total_usd=f.total_usd,
        low_usd=f.low_usd,
        high_usd=f.high_usd,
        level=f.level,
        days_left=f.days_left,
        trend_usd_per_day=f.trend_usd_per_day,
        weekday_offsets_usd=list(f.weekday_offsets_usd),
        residual_sd_usd=f.residual_sd_usd,
        history_days=f.history_days,
        history_since=ts(born),
        method=f.method,
        rate_usd_per_day=f.rate_usd_per_day,
        floor_usd=f.floor_usd,
        basis=basis,
        basis_note=basis_note,
        jobs_spent_usd=jobs_spent if team is None else None,
        projection_note=projection_note,
    )


@router.get("/anomalies", response_model=list[AnomalyOut], responses=AUTHED, summary="Daily cost anomalies")
def anomalies(
    ctx: Ctx,
    who: Caller,
    days: Annotated[int, Query(ge=1, le=366, description="complete UTC days to judge, ending yesterday")] = 30,
    threshold: Annotated[float, Query(ge=0, le=100)] = 0.20,
    min_increase_usd: Annotated[float, Query(ge=0)] = 50.0,
    team: Annotated[str | None, Query(max_length=63)] = None,
) -> list[AnomalyOut]:
    now = ctx.clock.now()
    if not who.is_admin:
        team = who.team
    cfg = AnomalyConfig(threshold=threshold, min_increase_usd=min_increase_usd)
    end = _day_start(now)
    span = days + cfg.min_history_days + 7 * cfg.factor_weeks  # history the baseline needs
    first = end - DAY_S * span
    with ctx.database.session(readonly=True) as s:
        ledger = repo.load_ledger(s, first, end, now)
    found = scan_ledger(
        ledger, first_day_start=first, days=span, config=cfg, as_of=end, team=team, rules=ctx.pricing_rules
    )
    judged_from = span - days
    scope = "all" if team is None else f"team:{team}"
    return [
        AnomalyOut(
            key=a.key if team is None else f"{a.key}:{team}",
            day=a.day.isoformat(),
            scope=scope,
            spend_usd=a.spend_usd,
            baseline_usd=a.baseline_usd,
            increase_usd=a.increase_usd,
            increase_pct=a.increase_pct,
            causes=[
                AnomalyCauseOut(
                    dimension=c.dimension,
                    key=c.key,
                    spend_usd=c.spend_usd,
                    baseline_usd=c.baseline_usd,
                    increase_usd=c.increase_usd,
                    share_of_increase=c.share_of_increase,
                )
                for c in a.causes
            ],
            action=a.action,
            savings_usd_per_day=a.savings_usd_per_day,
            message=a.message,
        )
        for a in found
        if a.day_index >= judged_from
    ]


@router.get("/recommendations", response_model=list[RecommendationOut], responses=AUTHED, summary="Ways to spend less")
def recommendations(
    ctx: Ctx,
    who: Caller,
    window: Annotated[str, Query(max_length=120, description="7d, 24h, month, or start,end (RFC 3339)")] = "7d",
    reserved_discount: Annotated[
        float | None, Query(gt=0, lt=1, description="reserved price: 1 − this × on-demand")
    ] = None,
) -> list[RecommendationOut]:
    now = ctx.clock.now()
    with input_at("query"):
        win = parse_window(window, now)
    with ctx.database.session(readonly=True) as s:
        inputs = usage_repo.recommend_inputs(s, win.start, win.end, rules=ctx.pricing_rules)
    with input_at("query"):
        recs = recommend(inputs, _catalog(), RecommendConfig(reserved_discount=reserved_discount))
    return [RecommendationOut(**r.to_dict()) for r in recs if who.is_admin or r.team == who.team]


@router.get("/roi", response_model=RoiOut, responses=AUTHED, summary="Savings against a fixed on-demand cluster")
def roi(
    ctx: Ctx,
    who: Caller,
    window: Annotated[str, Query(max_length=120)] = "30d",
    platform_cost_usd: Annotated[float, Query(ge=0, description="one-time cost of the platform")] = 0.0,
    platform_cost_usd_per_month: Annotated[float, Query(ge=0, description="running cost of the platform")] = 0.0,
) -> RoiOut:
    now = ctx.clock.now()
    with input_at("query"):
        win = parse_window(window, now)
    with ctx.database.session(readonly=True) as s:
        ledger = repo.load_ledger(s, win.start, win.end, now)
    if ctx.pricing_rules is not None:
        # the server's pricing rules (time-of-day windows, node prices) priced into the node
        # intervals, so what off-peak windows saved shows in the off-peak lever
        ledger = apply_rules(ledger, win.start, max(win.end, win.start + 1e-6), ctx.pricing_rules, as_of=now).ledger
    with input_at("query"):
        r = roi_report(
            ledger,
            _catalog(),
            win.start,
            max(win.end, win.start + 1e-6),
            as_of=now,
            platform_cost_usd=platform_cost_usd,
            platform_cost_usd_per_month=platform_cost_usd_per_month,
        )
    d = r.to_dict()
    d["window_start"], d["window_end"] = ts(r.window_start), ts(r.window_end)
    return RoiOut.model_validate(d)
