"""The MCP tools as plain functions over an SDK client: each calls the REST API with the caller's
token (so the API decides what the caller may see), does the arithmetic of its answer and words it.

No MCP import here (:mod:`gpufleet.agent.server` wires these in). Errors are gpufleet errors: the
SDK's :class:`~gpufleet.sdk.ApiError` (the API's own refusal: 403, 404, 422...) or an
:class:`~gpufleet.errors.InputError` for input refused before any call.

Prices: the cluster's own are the API's (``GET /v1/nodes``, ``POST /v1/budgets/check``); a GPU model
or capacity type the cluster does not have is priced from the price catalog — the bundled one that
``gpufleet prices`` shows and the server's recommendations use (the API has no prices endpoint) —
and every such figure is labelled a projection with its basis.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpufleet.agent.models import (
    AnomalyDiagnosis,
    BudgetLine,
    BudgetPlanCheck,
    Configuration,
    ConfigurationComparison,
    ConfigurationEstimate,
    CostAnalysis,
    CostLine,
    CostReport,
    FlaggedJob,
    JobCost,
    JobCostForecast,
    PlanKind,
    PlanOption,
    ProposalAnswer,
    Recommendation,
    Recommendations,
    Reference,
    ReplayFigures,
    Spike,
    SpikeJob,
    SpikeTeam,
    WhatIfAnswer,
    WorkloadCost,
)
from gpufleet.errors import GpufleetError, InputError, NotFoundError
from gpufleet.wire import CostLineOut, JobOut, NodeOut, ProposalEstimate, RecommendationOut, UsageReport

if TYPE_CHECKING:
    from gpufleet.cost.catalog import PriceCatalog
    from gpufleet.sdk import Client

TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")
UTIL_KINDS = ("idle", "underused", "sharing", "batch_size", "gpu_type")  # recommendations backed by telemetry
# as `gpufleet whatif --trace history`: a job with a checkpoint directory checkpoints every 30 min
CHECKPOINT_INTERVAL_S = 1800.0
MAX_BATCH_UTIL_PCT = 90.0  # as the batch_size recommendation: a bigger batch raises utilization up to this


# ------------------------------------------------------------------------------------------- wording


def usd(x: float | Decimal) -> str:
    """``$1,234.56``; sub-cent amounts keep four decimals (``$0.0042``) so they do not read as zero."""
    v = float(x)
    if v != 0 and abs(v) < 0.01:
        return f"-${-v:.4f}" if v < 0 else f"${v:.4f}"
    return f"-${-v:,.2f}" if v < 0 else f"${v:,.2f}"


def duration(seconds: float | None) -> str:
    """``42s``, ``5m09s``, ``2h05m``, ``3d04h``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def hours_text(h: float) -> str:
    return f"{h:.3g} h" if h < 10 else f"{h:,.1f} h"


def gpu_hours_text(gh: float) -> str:
    return f"{gh:.3g}" if gh < 100 else f"{gh:,.0f}"


def _r(x: float, digits: int = 6) -> float:
    """Money and hours rounded off float noise (0.48000000000000004 → 0.48)."""
    return round(x, digits)


def _sig(x: float, digits: int = 6) -> float:
    """Hours to ``digits`` significant digits (a run of seconds is a small number of hours)."""
    return float(f"{x:.{digits}g}")


def _dec(s: str | None) -> Decimal:
    return Decimal(s or "0")


def _days(start: datetime, end: datetime) -> float:
    return max((end - start).total_seconds() / 86400.0, 1e-9)


def _when(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _milli(j: JobOut) -> int:
    """Thousandths of a GPU per GPU asked for, as the store keeps it: 1000 for whole GPUs, the fraction,
    or a MIG slice's share (the API shows the slice's profile, not its share)."""
    from gpufleet.model.gpu import GPU_MODELS, MILLI

    if j.gpu_milli is not None:
        return j.gpu_milli
    if j.mig:
        for name in [*j.gpu_types, *GPU_MODELS]:
            model = GPU_MODELS.get(name)
            profile = model.mig_profile(j.mig) if model is not None else None
            if profile is not None:
                return profile.milli
    return MILLI


def _job_gpus(j: JobOut) -> float:
    """GPU-equivalents a job holds: pods × GPUs × share (as the API's budget estimates count them)."""
    return max(1, j.pods) * j.gpus * _milli(j) / 1000.0


def _rec(r: RecommendationOut) -> Recommendation:
    return Recommendation(**r.model_dump())


def _rec_job(r: RecommendationOut) -> str | None:
    return r.target.removeprefix("job:") if r.target.startswith("job:") else None


def _util_of(r: RecommendationOut) -> float | None:
    for k in ("mean_util_pct", "peak_util_pct"):
        v = r.evidence.get(k)
        if isinstance(v, int | float):
            return float(v)
    return None


def _scope(team: str | None) -> str:
    return "all" if team is None else f"team:{team}"


def _check_team(client: Client, team: str | None) -> None:
    """Ask the API for the team: another team's is a 404 for a token other than admin (its own rule)."""
    if team is not None:
        client.team(team)


# ------------------------------------------------------------------------------------------ cost_analysis


def _group_label(group_by: str, g: str) -> str:
    if group_by == "job":
        return f"job {g}"
    if group_by.startswith("label:"):
        key = group_by.removeprefix("label:")
        return f"jobs labelled {key}={g}" if g else f"jobs without a {key} label"
    return f"{group_by} '{g}'" if g else f"jobs with no {group_by}"


def cost_analysis(
    client: Client, window: str = "7d", team: str | None = None, group_by: str = "project", top: int = 5
) -> CostAnalysis:
    """Where the money went: the groups and jobs that cost most, the cluster's allocation and idle
    capacity (waste), and the jobs the recommendations flag as under-using their GPUs.

    From ``GET /v1/usage?aggregate=<group_by>,job`` (one call: each row is one job of one group),
    ``GET /v1/recommendations`` and ``GET /v1/jobs/{id}`` for the top jobs. Per-day figures divide
    by the window's length."""
    aggregate = ["job"] if group_by == "job" else [group_by, "job"]
    rep = client.usage(window, aggregate=aggregate, team=team)
    seen = team if team is not None else rep.filters.get("team")  # a member's report is their team's
    days = _days(rep.window_start, rep.window_end)
    per_job: dict[str, tuple[str, Decimal, float]] = {}
    groups: dict[str, list[str]] = defaultdict(list)
    for row in rep.rows:
        job = row.key.get("job", "")
        g = row.key.get(group_by, "") if group_by != "job" else job
        cost, gh = _dec(row.total_cost_usd), row.gpu_hours
        if job in per_job:  # a job in two groups cannot happen for one-valued fields; add up to be safe
            _, c0, h0 = per_job[job]
            cost, gh = cost + c0, gh + h0
        per_job[job] = (g, cost, gh)
        groups[g].append(job)
    spend = sum((c for _, c, _ in per_job.values()), Decimal(0))
    idle = _dec(rep.idle.total_cost_usd)
    fleet = _dec(rep.totals.total_cost_usd)
    allocated = (
        100.0 * (1.0 - rep.idle.gpu_hours / rep.totals.gpu_hours) if rep.totals.gpu_hours > 0 else None
    )

    recs = [r for r in client.recommendations(window) if team is None or r.team == team]
    flags: dict[str, RecommendationOut] = {}
    for r in recs:
        job_id = _rec_job(r)
        if (
            job_id is not None
            and r.kind in UTIL_KINDS
            and _util_of(r) is not None
            and (job_id not in flags or r.monthly_savings_usd > flags[job_id].monthly_savings_usd)
        ):
            flags[job_id] = r
    savings = sum(r.monthly_savings_usd for r in recs)

    out_groups: list[WorkloadCost] = []
    for g, jobs in groups.items():
        cost = sum((per_job[j][1] for j in jobs), Decimal(0))
        gh = sum(per_job[j][2] for j in jobs)
        flagged = [j for j in jobs if j in flags]
        fh = sum(per_job[j][2] for j in flagged)
        mean_u = (
            sum(per_job[j][2] * (_util_of(flags[j]) or 0.0) for j in flagged) / fh
            if fh > 0
            else (sum(_util_of(flags[j]) or 0.0 for j in flagged) / len(flagged) if flagged else None)
        )
        share = float(cost / spend) if spend > 0 else 0.0
        sentence = (
            f"{_group_label(group_by, g)} cost {usd(float(cost) / days)}/day ({share:.0%} of the spend): "
            f"{gpu_hours_text(gh)} GPU-hours on {len(jobs)} job{'s' if len(jobs) != 1 else ''}"
        )
        if flagged and mean_u is not None:
            sentence += (
                f"; {len(flagged)} of them at {mean_u:.0f} % mean GPU utilization (flagged by the recommendations)"
            )
        out_groups.append(
            WorkloadCost(
                group=g,
                cost_usd=float(cost),
                usd_per_day=_r(float(cost) / days),
                share_of_spend=_r(share),
                gpu_hours=_r(gh),
                jobs=len(jobs),
                flagged_jobs=len(flagged),
                flagged_mean_util_pct=mean_u,
                sentence=sentence,
            )
        )
    out_groups.sort(key=lambda w: (-w.cost_usd, w.group))

    top_ids = sorted(per_job, key=lambda j: (-per_job[j][1], j))[: max(0, top)]
    top_jobs = []
    for job_id in top_ids:
        g, cost, gh = per_job[job_id]
        try:
            j = client.get(job_id)
            name, jteam, state, gpus = j.name, j.team, j.state, _job_gpus(j)
        except NotFoundError:  # purged since; the usage report still has its cost
            name, jteam, state, gpus = "", team or "", "UNKNOWN", 0.0
        top_jobs.append(
            JobCost(
                job_id=job_id, name=name, team=jteam, state=state, group=g, gpus=gpus,
                cost_usd=float(cost), usd_per_day=_r(float(cost) / days), gpu_hours=_r(gh),
            )
        )
    flagged_out = [
        FlaggedJob(job_id=j, kind=r.kind, mean_util_pct=_util_of(r), monthly_savings_usd=r.monthly_savings_usd,
                   action=r.action)
        for j, r in sorted(flags.items(), key=lambda kv: -kv[1].monthly_savings_usd)
    ]

    who = "all teams'" if seen is None else f"team {seen}'s"
    period = f"{_when(rep.window_start)} to {_when(rep.window_end)} ({days:,.2f} days)"
    summary = f"From {period}, {who} jobs cost {usd(spend)} ({usd(float(spend) / days)}/day)."
    if out_groups:
        summary += f" Most expensive: {out_groups[0].sentence}."
    if allocated is not None:
        summary += (
            f" Jobs held {allocated:.0f} % of the cluster's paid GPU-hours; idle capacity (GPUs no job held) cost "
            f"{usd(idle)} ({usd(float(idle) / days)}/day): waste."
        )
    if savings > 0:
        summary += f" The recommendations could save up to {usd(savings)}/month."
    notes = [
        "per-day figures divide by the whole window, including any part of it before the cluster had jobs",
        "allocated_pct is allocation (GPU-hours held by jobs / GPU-hours paid for); the API gives measured GPU "
        "utilization only for the jobs its recommendations flag (flagged_mean_util_pct)",
    ]
    if seen is not None:
        notes.append("idle capacity and allocation are the cluster's, not the team's")
    return CostAnalysis(
        summary=summary,
        scope=_scope(seen),
        group_by=group_by,
        window_start=rep.window_start,
        window_end=rep.window_end,
        days=days,
        spend_usd=float(spend),
        usd_per_day=_r(float(spend) / days),
        fleet_cost_usd=float(fleet),
        idle_usd=float(idle),
        idle_usd_per_day=_r(float(idle) / days),
        allocated_pct=_r(allocated, 2) if allocated is not None else None,
        groups=out_groups,
        top_jobs=top_jobs,
        flagged=flagged_out,
        savings_usd_per_month=_r(savings),
        notes=notes,
    )


# -------------------------------------------------------------------------------------------- recommend


def recommend(client: Client, job: str | None = None, team: str | None = None, window: str = "7d") -> Recommendations:
    """``GET /v1/recommendations``, narrowed to one job or one team. The job (or team) is looked up
    first, so another team's is the API's 404, not an empty list."""
    if job is not None:
        client.get(job)
    _check_team(client, team)
    recs = [
        r
        for r in client.recommendations(window)
        if (job is None or r.target == f"job:{job}") and (team is None or r.team == team)
    ]
    total = sum(r.monthly_savings_usd for r in recs)
    what = f"job {job}" if job else f"team {team}" if team else "what this token sees"
    if recs:
        top = recs[0]
        summary = (
            f"{len(recs)} recommendation{'s' if len(recs) != 1 else ''} for {what} over {window}: up to "
            f"{usd(total)}/month if every one is taken (they may overlap). Largest: {top.action} "
            f"({usd(top.monthly_savings_usd)}/month, {top.confidence:.0%} confidence)."
        )
    else:
        summary = f"Nothing to recommend for {what} over {window}."
    return Recommendations(
        summary=summary, window=window, job=job, team=team, items=[_rec(r) for r in recs],
        total_monthly_savings_usd=total,
    )


# ------------------------------------------------------------------------------------ forecast_job_cost


def forecast_job_cost(client: Client, job: str) -> JobCostForecast:
    """``GET /v1/jobs/{id}/forecast`` with the job's name and state, in a sentence."""
    j = client.get(job)
    f = client.forecast(job)
    label = f"Job {j.id}" + (f" ({j.name})" if j.name else "")
    if j.terminal:
        summary = f"{label} is {j.state}: it cost {usd(f.spent_usd)}; nothing more to spend."
    elif f.remaining_usd is None:
        summary = (
            f"{label} is {j.state} and has spent {usd(f.spent_usd)} at {usd(f.cost_rate_usd_per_hour)}/h; its "
            f"remaining cost is unknown: {f.explanation}"
        )
    else:
        hi = usd(f.remaining_usd_high) if f.remaining_usd_high is not None else "no upper bound"
        lo = usd(f.remaining_usd_low or 0.0)
        summary = (
            f"{label} is {j.state} and has spent {usd(f.spent_usd)} at {usd(f.cost_rate_usd_per_hour)}/h; forecast "
            f"{usd(f.remaining_usd)} more over about {duration(f.remaining_s)} ({f.level:.0%} interval {lo} to "
            f"{hi}), about {usd(f.spent_usd + f.remaining_usd)} in all (method: {f.method})."
        )
    return JobCostForecast(summary=summary, name=j.name, team=j.team, state=j.state, **f.model_dump())


# -------------------------------------------------------------------------------- check_budget_for_plan


def _node_prices(nodes: Iterable[NodeOut], capacity_type: str) -> dict[str, float]:
    """$/GPU-hour per GPU model over the cluster's nodes of one capacity type: the dearest, as the API's
    estimates take it (:func:`gpufleet.cost.job_estimate.usd_per_gpu_hour`)."""
    out: dict[str, float] = {}
    for n in nodes:
        if n.gpu_count > 0 and n.capacity_type == capacity_type:
            out[n.gpu_model] = max(out.get(n.gpu_model, 0.0), n.hourly_price_usd / n.gpu_count)
    return out


def _canon(gpu_type: str, field: str) -> str:
    from gpufleet.model.gpu import GPU_MODELS, canonical_gpu_name

    canon = canonical_gpu_name(gpu_type)
    if canon is None:
        raise InputError(f"unknown GPU model '{gpu_type}' (known: {', '.join(GPU_MODELS)})", field=field)
    return canon


def _catalog_price(catalog: PriceCatalog, model: str, spot: bool = False) -> tuple[float, str] | None:
    from gpufleet.errors import CatalogError
    from gpufleet.model.node import CapacityType

    try:
        q = catalog.quote(model, CapacityType.SPOT if spot else CapacityType.ON_DEMAND)
    except CatalogError:
        return None
    e = q.entry
    return q.usd_per_gpu_hour, f"catalog {e.provider} {e.region} {e.offering}" + (
        f" (priced as {e.gpu})" if q.proxy_for else ""
    )


def _spot_ratio(catalog: PriceCatalog, model: str) -> float | None:
    od, spot = _catalog_price(catalog, model), _catalog_price(catalog, model, spot=True)
    return None if od is None or spot is None or od[0] <= 0 else spot[0] / od[0]


def check_budget_for_plan(
    client: Client,
    catalog: PriceCatalog,
    team: str | None,
    gpus: int,
    hours: float,
    gpu_type: str | None = None,
    spot: bool = False,
    min_gpu_memory_gib: float = 0.0,
) -> BudgetPlanCheck:
    """Would ``gpus`` GPUs for ``hours`` fit the team's budgets, and what would fit?

    The forecast and each budget's remainder are ``POST /v1/budgets/check`` (a job that is not
    submitted). Options: fewer GPUs and a shorter run (when over: the largest that fits, re-checked
    with the endpoint), a cheaper GPU type (runtime scaled by dense FP16 TFLOPS — a compute-bound
    assumption; the cluster's own price when it has that model, the catalog's otherwise) and spot
    (the catalog's spot/on-demand ratio for the model; lost work on interruptions not priced)."""
    from gpufleet.cost.recommend import DENSE_TFLOPS
    from gpufleet.model.gpu import GPU_MODELS

    if gpus < 1 or hours <= 0:
        raise InputError("gpus must be >= 1 and hours > 0", field="gpus" if gpus < 1 else "hours")
    model = _canon(gpu_type, "gpu_type") if gpu_type else None

    def check(g: int, h: float, types: Sequence[str]) -> Any:
        return client.check_budget(
            command=["true"], name="mcp-plan", team=team, gpus=g, gpu_types=list(types),
            estimated_runtime_s=h * 3600.0, preemptible=spot,
        )

    base = check(gpus, hours, [model] if model else [])
    price = base.usd_per_gpu_hour
    nodes = client.nodes()
    od_prices, spot_prices = _node_prices(nodes, "on-demand"), _node_prices(nodes, "spot")
    if model is None:  # the model whose nodes set the API's price (the dearest the job may use)
        model = next((m for m, p in sorted(od_prices.items()) if abs(p - price) < 1e-6), None)
    lines = [
        BudgetLine(name=b.name, scope=b.scope, action=b.action, limit_usd=b.limit_usd, committed_usd=b.committed_usd,
                   remaining_usd=b.remaining_usd, fits=b.fits)
        for b in base.budgets
    ]
    tight = min(base.budgets, key=lambda b: b.remaining_usd - base.job_cost_usd, default=None)
    rem = tight.remaining_usd if tight is not None else None
    forecast = base.job_cost_usd
    over = _r(forecast - rem) if rem is not None and forecast > rem else None
    notes: list[str] = []

    def option(kind: PlanKind, description: str, g: int, m: str | None, h: float, on_spot: bool, cost: float,
               projection: bool, basis: str) -> PlanOption:
        return PlanOption(
            kind=kind, description=description, gpus=g, gpu_type=m, hours=_sig(h), spot=on_spot, cost_usd=_r(cost),
            saving_usd=_r(forecast - cost), fits=None if rem is None else cost <= rem + 1e-9, projection=projection,
            basis=basis,
        )

    options: list[PlanOption] = []
    same_type = [model] if model else []
    if over is not None and rem is not None and price > 0:
        g = min(gpus - 1, math.floor(rem / (price * hours) + 1e-9))
        if g >= 1:
            what = (
                f"{_gpus(g)} instead of {gpus} for the same {hours_text(hours)}: {g}/{gpus} of the work in that time "
                f"(the same work on {_gpus(g)} takes {gpus / g:.2g}× as long and costs the same)"
            )
            cost = check(g, hours, same_type).job_cost_usd
            options.append(option("fewer_gpus", what, g, model, hours, spot, cost, False, "POST /v1/budgets/check"))
        h2 = math.floor(rem / (price * gpus) * 100) / 100
        if 0 < h2 < hours:
            what = (
                f"stop after {hours_text(h2)} instead of {hours_text(hours)} (checkpoint; go on when the budget's "
                f"period renews): {h2 / hours:.0%} of the work"
            )
            cost = check(gpus, h2, same_type).job_cost_usd
            options.append(option("shorter", what, gpus, model, h2, spot, cost, False, "POST /v1/budgets/check"))
    tf_cur = DENSE_TFLOPS.get(model) if model else None
    if model is not None and tf_cur is None:
        notes.append(f"no throughput figure for {model}: cheaper GPU types are not compared")
    cheaper: list[PlanOption] = []
    for other, tf in DENSE_TFLOPS.items():
        if tf_cur is None or other == model or GPU_MODELS[other].memory_gib < min_gpu_memory_gib:
            continue
        h_o = hours * tf_cur / tf
        if other in od_prices:
            cost = check(gpus, h_o, [other]).job_cost_usd
            basis, missing = f"POST /v1/budgets/check on the cluster's {other} nodes", ""
        else:
            quoted = _catalog_price(catalog, other)
            if quoted is None:
                continue
            cost, basis = gpus * h_o * quoted[0], quoted[1]
            missing = f"; the cluster has no {other} node"
        if cost >= forecast - 0.005:
            continue
        what = (
            f"{gpus}× {other} for about {hours_text(h_o)} ({tf:g} vs {tf_cur:g} dense TFLOPS, "
            f"{GPU_MODELS[other].memory_gib:g} GiB each{missing})"
        )
        basis += "; runtime scaled by dense FP16 TFLOPS (compute-bound)"
        cheaper.append(option("cheaper_gpu", what, gpus, other, h_o, spot, cost, True, basis))
    cheaper.sort(key=lambda o: o.cost_usd)
    options.extend(cheaper[:3])
    if min_gpu_memory_gib <= 0 and cheaper:
        notes.append("GPU memory not checked: pass min_gpu_memory_gib to leave out models too small for the job")

    spot_forecast = None
    if model is not None:
        ratio = spot_prices[model] / od_prices[model] if model in spot_prices and od_prices.get(model) else None
        basis = f"the cluster's {model} spot nodes" if ratio is not None else "the catalog's spot/on-demand ratio"
        if ratio is None:
            ratio = _spot_ratio(catalog, model)
        if ratio is not None and not spot:
            where = "" if any(n.capacity_type == "spot" for n in nodes) else "; the cluster has no spot node now"
            what = (
                f"on spot capacity ({ratio:.0%} of on-demand): the job must be preemptible and checkpoint; lost work "
                f"on interruptions is not priced{where}"
            )
            basis = f"forecast × {ratio:.3f} ({basis} for {model})"
            options.append(option("spot", what, gpus, model, hours, True, forecast * ratio, True, basis))
        elif ratio is not None:
            spot_forecast = _r(forecast * ratio)
            notes.append(
                f"on spot it should cost about {usd(spot_forecast)}; budgets judge the on-demand estimate "
                f"{usd(forecast)} at submit"
            )
    options.sort(key=lambda o: o.cost_usd)

    plan = f"{gpus}× {model or 'GPU'} for {hours_text(hours)} at {usd(price)}/GPU-h"
    if tight is None:
        summary = f"Forecast {usd(forecast)} ({plan}); no budget this token can see covers it."
    elif over is not None:
        assert rem is not None
        left = f"{usd(rem)} left of {usd(tight.limit_usd)}" if rem >= 0 else f"already {usd(-rem)} over"
        summary = f"Forecast {usd(forecast)} ({plan}) exceeds budget '{tight.name}' ({left}) by {usd(over)}"
        summary += " — a block budget would refuse the submit." if base.blocked else "."
    else:
        summary = (
            f"Forecast {usd(forecast)} ({plan}) fits budget '{tight.name}': {usd(rem or 0.0)} left, "
            f"{usd((rem or 0.0) - forecast)} after it."
        )
    if options:
        summary += " Options: " + "; ".join(
            f"{_short(o)}: {usd(o.cost_usd)}"
            + (" (fits)" if o.fits else "")
            + (" [projection]" if o.projection else "")
            for o in options
        ) + "."
    return BudgetPlanCheck(
        summary=summary, team=team if team is not None else client.whoami().team, gpus=gpus, gpu_type=model,
        hours=hours, spot=spot, forecast_usd=forecast,
        usd_per_gpu_hour=price, spot_forecast_usd=spot_forecast, fits=base.fits, blocked=base.blocked,
        tightest_budget=tight.name if tight else None, remaining_usd=rem, over_by_usd=over, budgets=lines,
        options=options, notes=notes,
    )


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _short(o: PlanOption) -> str:
    if o.kind == "fewer_gpus":
        return _gpus(o.gpus)
    if o.kind == "shorter":
        return f"stop after {hours_text(o.hours)}"
    if o.kind == "cheaper_gpu":
        return f"{o.gpus}× {o.gpu_type} (~{hours_text(o.hours)})"
    return "spot"


# ------------------------------------------------------------------------------------------- cost_report


def _line(c: CostLineOut) -> CostLine:
    return CostLine(
        key=c.key, gpu_hours=c.gpu_hours, gpu_cost_usd=c.gpu_cost_usd, cpu_cost_usd=c.cpu_cost_usd,
        memory_cost_usd=c.memory_cost_usd, total_cost_usd=c.total_cost_usd,
    )


def _rfc3339(t: datetime) -> str:
    if t.tzinfo is None:
        raise InputError("give a time zone (e.g. 2026-11-01T00:00:00Z)", field="start")
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def cost_report(
    client: Client,
    window: str = "7d",
    aggregate: Sequence[str] = ("team",),
    start: datetime | None = None,
    end: datetime | None = None,
    team: str | None = None,
    labels: Sequence[str] = (),
) -> CostReport:
    """``GET /v1/usage`` as it is (money in the API's exact decimal strings), with a sentence.
    ``start``/``end`` (both) replace ``window``."""
    if (start is None) != (end is None):
        raise InputError("give both start and end, or neither (then window)", field="start" if start is None else "end")
    if start is not None and end is not None:
        window = f"{_rfc3339(start)},{_rfc3339(end)}"
    rep: UsageReport = client.usage(window, aggregate=list(aggregate) or ["team"], team=team, labels=list(labels))
    rows = sorted(rep.rows, key=lambda r: -_dec(r.total_cost_usd))
    shown = ", ".join(
        f"{'/'.join(v or '–' for v in r.key.values())} {usd(_dec(r.total_cost_usd))}" for r in rows[:5]
    )
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    summary = (
        f"{usd(_dec(rep.totals.total_cost_usd))} from {_when(rep.window_start)} to {_when(rep.window_end)}"
        + (f" by {', '.join(rep.aggregate)}: {shown}{more}" if rows else ": no job costs")
        + f"; idle capacity {usd(_dec(rep.idle.total_cost_usd))}"
    )
    if rep.other is not None and _dec(rep.other.total_cost_usd) > 0:
        summary += f"; outside the filters {usd(_dec(rep.other.total_cost_usd))}"
    summary += "."
    return CostReport(
        summary=summary,
        window_start=rep.window_start,
        window_end=rep.window_end,
        aggregate=rep.aggregate,
        filters=rep.filters,
        rows=[_line(r) for r in rep.rows],
        other=_line(rep.other) if rep.other else None,
        idle=_line(rep.idle),
        adjustment=_line(rep.adjustment) if rep.adjustment else None,
        reservation_unused=_line(rep.reservation_unused) if rep.reservation_unused else None,
        totals=_line(rep.totals),
        node_cost_usd=rep.node_cost_usd,
    )


# -------------------------------------------------------------------------------- compare_configurations


def parallel_speedup(gpus: int, efficiency: float) -> float:
    """Data-parallel speed-up on ``gpus`` GPUs over one: ``n × e^log2(n)`` (each doubling keeps a
    fraction ``e`` of the ideal gain)."""
    return gpus * efficiency ** math.log2(gpus) if gpus > 1 else 1.0


def compare_configurations(
    client: Client,
    catalog: PriceCatalog,
    configs: Sequence[Configuration],
    *,
    job: str | None = None,
    runtime_hours: float | None = None,
    throughput_per_s: float | None = None,
    total_work: float | None = None,
    reference_gpu_type: str | None = None,
    reference_gpus: int | None = None,
    reference_batch_size: int | None = None,
    measured_util_pct: float | None = None,
    scaling_efficiency: float = 0.9,
    spot_interruptions_per_hour: float = 0.01,
    checkpoint_interval_h: float = 0.5,
    restart_h: float = 0.1,
    off_peak_multiplier: float | None = None,
) -> ConfigurationComparison:
    """Projected time and cost of a job on each configuration, from one reference run: a job's
    measured run time (``job``) or a stated one (``runtime_hours``, or ``total_work`` at
    ``throughput_per_s``) on ``reference_gpus`` × ``reference_gpu_type``.

    T = T_ref × (TFLOPS_ref / TFLOPS) × (S(n_ref) / S(n)) × (u_ref / u) × spot overhead, with S the
    :func:`parallel_speedup`, u the utilization a batch size gives (only with ``measured_util_pct``)
    and the spot overhead ``1 + λ (checkpoint/2 + restart)``. Cost = n × T × $/GPU-hour (the cluster's
    own price for a model it has, else the catalog's; off-peak × the multiplier)."""
    from gpufleet.cost.recommend import DENSE_TFLOPS

    if not configs:
        raise InputError("give at least one configuration", field="configs")
    if not 0 < scaling_efficiency <= 1:
        raise InputError("must be in (0, 1]", field="scaling_efficiency")
    assumptions: list[str] = []
    nodes = client.nodes()
    od_prices, spot_prices = _node_prices(nodes, "on-demand"), _node_prices(nodes, "spot")

    # -- the reference run
    if job is not None:
        j = client.get(job)
        if j.gpus < 1 or _milli(j) < 1000:
            raise InputError(
                f"job {job} asks for a fraction of a GPU; give the reference as runtime_hours", field="job"
            )
        if j.terminal:
            run_s = j.run_seconds or (
                (j.ended_at - j.started_at).total_seconds() if j.ended_at and j.started_at else None
            )
            source = f"job {job}'s measured run time"
        else:
            f = client.forecast(job)
            elapsed = j.run_seconds or 0.0
            run_s = elapsed + f.remaining_s if f.remaining_s is not None else None
            source = f"job {job}: {duration(elapsed)} run so far + the forecast's {duration(f.remaining_s)} left"
        if not run_s:
            raise InputError(f"job {job} has no run time to start from (not started?)", field="job")
        ref_hours = run_s / 3600.0
        placed = {p.node for p in j.placement}
        node_model = next((n.gpu_model for n in nodes if n.name in placed), None)
        ref_type = reference_gpu_type or node_model or (j.gpu_types[0] if j.gpu_types else None)
        ref_gpus = reference_gpus or j.gpus * max(1, j.pods)
        if ref_type is None:
            raise InputError(f"job {job}'s GPU model is unknown; give reference_gpu_type", field="reference_gpu_type")
    else:
        if runtime_hours is None and (throughput_per_s is None or total_work is None):
            raise InputError("give job, runtime_hours, or total_work with throughput_per_s", field="runtime_hours")
        if reference_gpu_type is None or reference_gpus is None:
            raise InputError("a stated runtime needs reference_gpu_type and reference_gpus", field="reference_gpu_type")
        if runtime_hours is not None:
            ref_hours, source = runtime_hours, f"stated runtime {hours_text(runtime_hours)}"
        else:
            assert throughput_per_s is not None and total_work is not None
            if throughput_per_s <= 0:
                raise InputError("must be > 0", field="throughput_per_s")
            ref_hours = total_work / throughput_per_s / 3600.0
            source = f"stated throughput: {total_work:g} units at {throughput_per_s:g}/s"
        ref_type, ref_gpus = reference_gpu_type, reference_gpus
    if ref_hours <= 0:
        raise InputError("the reference runtime must be > 0", field="runtime_hours")
    ref_type = _canon(ref_type, "reference_gpu_type")
    tf_ref = DENSE_TFLOPS.get(ref_type)
    if tf_ref is None:
        raise InputError(f"no throughput figure for {ref_type}", field="reference_gpu_type")

    # -- prices
    multiplier = off_peak_multiplier
    if multiplier is None and any(c.off_peak for c in configs):
        seen = [r.evidence.get("multiplier") for r in client.recommendations("30d") if r.kind == "off_peak"]
        found = next((float(m) for m in seen if isinstance(m, int | float)), None)
        if found is not None:
            multiplier = found
            assumptions.append(f"off-peak: × {found:g}, the server's pricing rule (from its off_peak recommendations)")
        else:
            multiplier = 1.0
            assumptions.append(
                "off-peak: the API does not publish the pricing rules' off-peak price; priced as on-demand "
                "(pass off_peak_multiplier)"
            )
    elif multiplier is not None:
        assumptions.append(f"off-peak: × {multiplier:g} (given)")

    def price(model: str, spot: bool) -> tuple[float, str]:
        own = (spot_prices if spot else od_prices).get(model)
        if own is not None:
            return own, f"the cluster's {model} {'spot' if spot else 'on-demand'} nodes"
        if spot and model in od_prices:
            ratio = _spot_ratio(catalog, model)
            if ratio is not None:
                return od_prices[model] * ratio, f"the cluster's {model} price × the catalog's spot ratio {ratio:.3f}"
        quoted = _catalog_price(catalog, model, spot)
        if quoted is None:
            raise InputError(f"no {'spot' if spot else 'on-demand'} price for {model} in the catalog", field="gpu_type")
        return quoted

    ref_price, _ = price(ref_type, False)
    ref_cost = ref_gpus * ref_hours * ref_price
    spot_factor = 1.0 + spot_interruptions_per_hour * (checkpoint_interval_h / 2.0 + restart_h)
    estimates: list[ConfigurationEstimate] = []
    for i, c in enumerate(configs):
        model = _canon(c.gpu_type, f"configs[{i}].gpu_type")
        tf = DENSE_TFLOPS.get(model)
        if tf is None:
            raise InputError(f"no throughput figure for {model}", field=f"configs[{i}].gpu_type")
        notes: list[str] = []
        hours = ref_hours * (tf_ref / tf) * (
            parallel_speedup(ref_gpus, scaling_efficiency) / parallel_speedup(c.gpus, scaling_efficiency)
        )
        if c.batch_size is not None and reference_batch_size is not None and measured_util_pct is not None:
            u_new = measured_util_pct * c.batch_size / reference_batch_size
            u_new = min(max(u_new, 1.0), max(MAX_BATCH_UTIL_PCT, measured_util_pct))
            hours *= measured_util_pct / u_new
            notes.append(f"batch {c.batch_size} vs {reference_batch_size}: utilization {measured_util_pct:.0f} → "
                         f"{u_new:.0f} %")
        elif c.batch_size is not None and c.batch_size != reference_batch_size:
            notes.append("batch size not priced: needs reference_batch_size and measured_util_pct")
        if c.spot:
            hours *= spot_factor
        p, src = price(model, c.spot)
        if c.off_peak:
            p *= multiplier if multiplier is not None else 1.0
            src += " × off-peak"
        cost = c.gpus * hours * p
        estimates.append(ConfigurationEstimate(
            gpu_type=model, gpus=c.gpus, batch_size=c.batch_size, spot=c.spot, off_peak=c.off_peak, hours=_sig(hours),
            usd_per_gpu_hour=_r(p), cost_usd=_r(cost), price_source=src,
            vs_reference_pct=_r((cost / ref_cost - 1.0) * 100.0, 2) if ref_cost > 0 else None, notes=notes,
        ))
    estimates.sort(key=lambda e: (e.cost_usd, e.hours))
    assumptions[:0] = [
        "projections, not measurements: every configuration is scaled from one reference run",
        "GPU type: compute-bound, runtime ∝ 1 / dense FP16 TFLOPS (NVIDIA datasheets); memory not checked",
        f"GPU count: data-parallel, speed-up n × {scaling_efficiency:g}^log2(n) (each doubling keeps "
        f"{scaling_efficiency:.0%} of the ideal gain)",
        "batch size: changes runtime only with measured_util_pct (utilization ∝ batch, up to 90 %)",
        f"spot: {spot_interruptions_per_hour:g} interruptions per hour, each losing half a "
        f"{checkpoint_interval_h:g} h checkpoint interval plus a {restart_h:g} h restart (runtime × {spot_factor:.4f})",
        "prices: the cluster's own nodes where it has the model, else the bundled price catalog",
    ]

    def cfg(e: ConfigurationEstimate) -> str:
        return f"{e.gpus}× {e.gpu_type}" + (" spot" if e.spot else "") + (" off-peak" if e.off_peak else "")

    cheapest, fastest = estimates[0], min(estimates, key=lambda e: (e.hours, e.cost_usd))
    pct = f" ({cheapest.vs_reference_pct:+.0f} % vs the reference)" if cheapest.vs_reference_pct is not None else ""
    summary = (
        f"Reference {ref_gpus}× {ref_type}, {hours_text(ref_hours)} ({source}) ≈ {usd(ref_cost)}. Cheapest: "
        f"{cfg(cheapest)}, about {hours_text(cheapest.hours)} and {usd(cheapest.cost_usd)}{pct}; fastest: "
        f"{cfg(fastest)}, about {hours_text(fastest.hours)} and {usd(fastest.cost_usd)}. Projections: see assumptions."
    )
    return ConfigurationComparison(
        summary=summary,
        reference=Reference(gpu_type=ref_type, gpus=ref_gpus, batch_size=reference_batch_size, hours=_sig(ref_hours),
                            source=source, cost_usd=_r(ref_cost)),
        estimates=estimates,
        assumptions=assumptions,
    )


# ------------------------------------------------------------------------------------------------ whatif


def whatif(
    client: Client,
    catalog: PriceCatalog,
    change: str,
    window: str = "7d",
    team: str | None = None,
    limit: int = 2000,
    spot_hazard: float = 0.01,
    seed: int = 1,
) -> WhatIfAnswer:
    """Replay the jobs this token may see that ran in ``window`` twice — on a fixed on-demand cluster
    of the cluster's current on-demand nodes, and with ``change`` — in the what-if engine, in this
    process. The API has no what-if endpoint; the jobs come from ``GET /v1/jobs`` (so a member's
    replay holds only their team's jobs) and the nodes from ``GET /v1/nodes``: the same inputs
    ``gpufleet whatif --trace history:<window>`` reads from the store, through the caller's token."""
    from gpufleet.model.node import CapacityType, Node, SharingMode
    from gpufleet.sim.engine import SimOptions
    from gpufleet.sim.history import HistoryJob, trace_from_history
    from gpufleet.sim.whatif import parse_change, run_whatif

    ch = parse_change(change)
    if limit < 1:
        raise InputError("must be >= 1", field="limit")
    rep = client.usage(window, aggregate="team", team=team)  # the window as the server resolves it
    start, end = rep.window_start, rep.window_end
    seen = team if team is not None else (rep.filters.get("team"))
    picked: list[JobOut] = []
    for j in client.iter_jobs(team=team, state=TERMINAL_STATES, page_size=500):
        if j.submitted_at >= end:
            continue
        if j.submitted_at < start:
            break  # newest first: the rest are older
        if j.run_seconds:
            picked.append(j)
    picked.sort(key=lambda j: j.submitted_at)
    picked = picked[:limit]
    if not picked:
        raise InputError(f"no job this token may see ran in {window}", field="window")
    hist = [
        HistoryJob(
            j.id, j.submitted_at.timestamp(), float(j.run_seconds or 0.0), j.team, j.project, j.priority, j.gpus,
            _milli(j), j.mig, tuple(j.gpu_types), j.cpu_milli, j.memory_mib, max(1, j.pods), j.preemptible,
            CHECKPOINT_INTERVAL_S if j.checkpoint_dir else None, dict(j.labels),
        )
        for j in picked
    ]
    sharing_modes = {m.value for m in SharingMode}
    nodes = [
        Node(
            n.name, n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib, pool=n.pool,
            hourly_price_usd=n.hourly_price_usd,
            sharing=SharingMode(n.sharing) if n.sharing in sharing_modes else SharingMode.SHARED,
        )
        for n in client.nodes()
        if n.capacity_type == CapacityType.ON_DEMAND.value and n.gpu_count
    ]
    result = run_whatif(
        trace_from_history(hist, name=f"history:{window}"),
        ch,
        nodes=nodes or None,
        options=SimOptions(seed=seed, spot_hazard_per_node_hour=spot_hazard),
        catalog=catalog,
    )

    def fig(f: Any) -> ReplayFigures:
        return ReplayFigures(**{k: getattr(f, k) for k in ReplayFigures.model_fields})

    b, v = fig(result.baseline), fig(result.variant)
    who = "all teams" if seen is None else f"team {seen}"
    pct = f" ({result.savings_pct:.1%})" if result.savings_pct is not None else ""
    verb = "saves" if result.savings_usd >= 0 else "costs"
    summary = (
        f"Replaying {len(picked)} jobs of {who} from {_when(start)} to {_when(end)}: the fixed on-demand cluster "
        f"({result.baseline_nodes} node{'s' if result.baseline_nodes != 1 else ''}) costs {usd(b.cost_usd)}; "
        f"with {ch.text} {usd(v.cost_usd)}, which {verb} "
        f"{usd(abs(result.savings_usd))}{pct}; mean wait {duration(b.wait_mean_s)} → {duration(v.wait_mean_s)}, "
        f"jobs done {b.completed} → {v.completed}. No schedule of the variant costs less than "
        f"{usd(result.lower_bound_usd)}."
    )
    method = (
        "in-process replay of the what-if engine (the API has no what-if endpoint) over the jobs GET /v1/jobs "
        "returns to this token and the nodes of GET /v1/nodes"
    )
    extra = [
        "jobs: those that ended, submitted in the window, with their recorded run time; running jobs are left out",
        "nodes: the cluster's on-demand GPU nodes now (GET /v1/nodes), at their own prices",
    ]
    if seen is not None:
        extra.append(f"only team {seen}'s jobs are replayed, on the whole cluster")
    return WhatIfAnswer(
        summary=summary, change=ch.text, scope=_scope(seen), window_start=start, window_end=end, jobs=len(picked),
        baseline_nodes=result.baseline_nodes, baseline=b, variant=v, savings_usd=result.savings_usd,
        savings_pct=result.savings_pct, lower_bound_usd=result.lower_bound_usd, method=method,
        assumptions=[*result.assumptions, *extra],
    )


# ------------------------------------------------------------------------------------- diagnose_anomaly


def diagnose_anomaly(
    client: Client,
    team: str | None = None,
    days: int = 30,
    threshold: float = 0.2,
    min_increase_usd: float = 50.0,
    max_anomalies: int = 5,
) -> AnomalyDiagnosis:
    """``GET /v1/anomalies``: the days whose spend rose above the baseline, the jobs and teams behind
    each (with their state now and the recommendations about them) and the action that would bring
    spend back, as the API states it."""
    _check_team(client, team)
    found = client.anomalies(days, threshold, min_increase_usd, team=team)
    found = sorted(found, key=lambda a: a.day, reverse=True)[: max(1, max_anomalies)]
    by_job: dict[str, list[Recommendation]] = defaultdict(list)
    if any(c.dimension == "job_id" for a in found for c in a.causes):
        for r in client.recommendations(f"{days}d"):
            job_id = _rec_job(r)
            if job_id is not None:
                by_job[job_id].append(_rec(r))
    spikes = []
    for a in found:
        jobs, teams = [], []
        for c in a.causes:
            if c.dimension == "job_id":
                try:
                    j = client.get(c.key)
                    name, jteam, state = j.name, j.team, j.state
                except NotFoundError:
                    name, jteam, state = "", "", "UNKNOWN"
                jobs.append(SpikeJob(
                    job_id=c.key, name=name, team=jteam, state=state, spend_usd=c.spend_usd,
                    baseline_usd=c.baseline_usd, increase_usd=c.increase_usd, share_of_increase=c.share_of_increase,
                    recommendations=by_job.get(c.key, []),
                ))
            elif c.dimension == "team":
                teams.append(SpikeTeam(team=c.key, spend_usd=c.spend_usd, baseline_usd=c.baseline_usd,
                                       increase_usd=c.increase_usd, share_of_increase=c.share_of_increase))
        spikes.append(Spike(
            day=a.day, scope=a.scope, spend_usd=a.spend_usd, baseline_usd=a.baseline_usd, increase_usd=a.increase_usd,
            increase_pct=a.increase_pct if math.isfinite(a.increase_pct) else 1e9, action=a.action,
            savings_usd_per_day=a.savings_usd_per_day, message=a.message, jobs=jobs, teams=teams,
        ))
    who = "all teams" if team is None else f"team {team}"
    if not spikes:
        summary = (
            f"No cost anomaly for {who} in the last {days} complete days (a day counts when its spend is more than "
            f"{threshold:.0%} and {usd(min_increase_usd)} above its baseline)."
        )
    else:
        s = spikes[0]
        behind = [
            f"job {j.job_id}" + (f" ({j.name}, {j.state})" if j.name else f" ({j.state})")
            + f" +{usd(j.increase_usd)} ({j.share_of_increase:.0%})"
            for j in s.jobs
        ] or [f"team {t.team} +{usd(t.increase_usd)} ({t.share_of_increase:.0%})" for t in s.teams]
        pct = f"+{s.increase_pct:.0%}" if s.increase_pct < 1e9 else "from nothing"
        summary = (
            f"On {s.day} {who} spent {usd(s.spend_usd)} against a baseline of {usd(s.baseline_usd)} "
            f"(+{usd(s.increase_usd)}, {pct}). Behind it: {'; '.join(behind) or 'no single job or team'}. "
            f"{s.action}"
        )
        running = [j for j in s.jobs if j.state in ("RUNNING", "PENDING", "ADMITTED")]
        if running:
            summary += f" Still going: {', '.join(j.job_id for j in running)}."
        if len(spikes) > 1:
            summary += f" {len(spikes) - 1} earlier anomal{'ies' if len(spikes) > 2 else 'y'} listed too."
    return AnomalyDiagnosis(
        summary=summary, scope=_scope(team), days=days, threshold=threshold, min_increase_usd=min_increase_usd,
        anomalies=spikes,
    )


# -------------------------------------------------------------------------------------- propose_action


def propose_action(
    client: Client,
    action: str,
    target: str,
    params: dict[str, Any],
    rationale: str,
    estimate: ProposalEstimate | None = None,
) -> ProposalAnswer:
    """``POST /v1/proposals``: file a proposal. It stays pending — nothing changes — until a person
    approves or rejects it through the CLI (``gpufleet proposals approve|reject``) or the API; no
    tool here can approve it. The API checks the params and whether the caller may
    propose on the target."""
    p = client.propose(action, target, params, rationale, estimate)
    saving = f", expected to save {usd(p.estimate.monthly_savings_usd)}/month" if p.estimate else ""
    summary = (
        f"Proposal {p.id} ({action} on {target}{saving}) is {p.state}: nothing changes until a person approves it "
        f"(gpufleet proposals approve {p.id}, or the API); it expires {_when(p.expires_at)}."
    )
    return ProposalAnswer(summary=summary, id=p.id, state=p.state, proposal=p)


# -------------------------------------------------------------------------------------------- resources


def queue_resource(client: Client) -> list[dict[str, Any]]:
    """``GET /v1/queue``: waiting jobs in start order, with why each waits and when it should start."""
    return [q.model_dump(mode="json") for q in client.queue()]


def budgets_resource(client: Client) -> list[dict[str, Any]]:
    """``GET /v1/budgets`` with each one's ``/status`` (spend, committed, projection, days left)."""
    out = []
    for b in client.budgets():
        d = b.model_dump(mode="json")
        try:
            d["status"] = client.budget_status(b.id).model_dump(mode="json")
        except GpufleetError as e:
            d["status"] = {"error": str(e)}
        out.append(d)
    return out


def recommendations_resource(client: Client, window: str = "7d") -> list[dict[str, Any]]:
    """``GET /v1/recommendations`` over the last 7 days, largest $/month first."""
    return [r.model_dump(mode="json") for r in client.recommendations(window)]
