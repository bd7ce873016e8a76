"""Where the money went: ``cost_analysis`` (the groups and jobs that cost most, idle capacity, the
flagged jobs), ``cost_report`` (``GET /v1/usage`` as it is) and ``diagnose_anomaly`` (the days
spend rose, and who is behind them)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from gpufleet.agent.outputs import (
    AnomalyDiagnosis,
    CostAnalysis,
    CostLine,
    CostReport,
    FlaggedJob,
    JobCost,
    Recommendation,
    Spike,
    SpikeJob,
    SpikeTeam,
    WorkloadCost,
)
from gpufleet.agent.tools.common import (
    check_team,
    gpu_hours_text,
    job_gpus,
    recommendation_job,
    rounded,
    scope_of,
    to_decimal,
    to_recommendation,
    usd,
    when,
)
from gpufleet.errors import InputError, NotFoundError
from gpufleet.wire import CostLineOut, RecommendationOut, UsageReport

if TYPE_CHECKING:
    from gpufleet.sdk import Client

UTIL_KINDS = ("idle", "underused", "sharing", "batch_size", "gpu_type")  # recommendations backed by telemetry


# ----------------------------------------------------------------------------------------- cost_analysis


def _days(start: datetime, end: datetime) -> float:
    return max((end - start).total_seconds() / 86400.0, 1e-9)


def _util_of(r: RecommendationOut) -> float | None:
    for k in ("mean_util_pct", "peak_util_pct"):
        v = r.evidence.get(k)
        if isinstance(v, int | float):
            return float(v)
    return None


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
        cost, gh = to_decimal(row.total_cost_usd), row.gpu_hours
        if job in per_job:  # a job in two groups cannot happen for one-valued fields; add up to be safe
            _, c0, h0 = per_job[job]
            cost, gh = cost + c0, gh + h0
        per_job[job] = (g, cost, gh)
        groups[g].append(job)
    spend = sum((c for _, c, _ in per_job.values()), Decimal(0))
    idle = to_decimal(rep.idle.total_cost_usd)
    fleet = to_decimal(rep.totals.total_cost_usd)
    allocated = 100.0 * (1.0 - rep.idle.gpu_hours / rep.totals.gpu_hours) if rep.totals.gpu_hours > 0 else None

    recs = [r for r in client.recommendations(window) if team is None or r.team == team]
    flags: dict[str, RecommendationOut] = {}
    for r in recs:
        job_id = recommendation_job(r)
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
                usd_per_day=rounded(float(cost) / days),
                share_of_spend=rounded(share),
                gpu_hours=rounded(gh),
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
            name, jteam, state, gpus = j.name, j.team, j.state, job_gpus(j)
        except NotFoundError:  # purged since; the usage report still has its cost
            name, jteam, state, gpus = "", team or "", "UNKNOWN", 0.0
        top_jobs.append(
            JobCost(
                job_id=job_id,
                name=name,
                team=jteam,
                state=state,
                group=g,
                gpus=gpus,
                cost_usd=float(cost),
                usd_per_day=rounded(float(cost) / days),
                gpu_hours=rounded(gh),
            )
        )
    flagged_out = [
        FlaggedJob(
            job_id=j, kind=r.kind, mean_util_pct=_util_of(r), monthly_savings_usd=r.monthly_savings_usd, action=r.action
        )
        for j, r in sorted(flags.items(), key=lambda kv: -kv[1].monthly_savings_usd)
    ]

    who = "all teams'" if seen is None else f"team {seen}'s"
    period = f"{when(rep.window_start)} to {when(rep.window_end)} ({days:,.2f} days)"
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
        scope=scope_of(seen),
        group_by=group_by,
        window_start=rep.window_start,
        window_end=rep.window_end,
        days=days,
        spend_usd=float(spend),
        usd_per_day=rounded(float(spend) / days),
        fleet_cost_usd=float(fleet),
        idle_usd=float(idle),
        idle_usd_per_day=rounded(float(idle) / days),
        allocated_pct=rounded(allocated, 2) if allocated is not None else None,
        groups=out_groups,
        top_jobs=top_jobs,
        flagged=flagged_out,
        savings_usd_per_month=rounded(savings),
        notes=notes,
    )


# ------------------------------------------------------------------------------------------- cost_report


def _line(c: CostLineOut) -> CostLine:
    return CostLine(
        key=c.key,
        gpu_hours=c.gpu_hours,
        gpu_cost_usd=c.gpu_cost_usd,
        cpu_cost_usd=c.cpu_cost_usd,
        memory_cost_usd=c.memory_cost_usd,
        total_cost_usd=c.total_cost_usd,
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
    rows = sorted(rep.rows, key=lambda r: -to_decimal(r.total_cost_usd))
    shown = ", ".join(
        f"{'/'.join(v or '–' for v in r.key.values())} {usd(to_decimal(r.total_cost_usd))}" for r in rows[:5]
    )
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    summary = (
        f"{usd(to_decimal(rep.totals.total_cost_usd))} from {when(rep.window_start)} to {when(rep.window_end)}"
        + (f" by {', '.join(rep.aggregate)}: {shown}{more}" if rows else ": no job costs")
        + f"; idle capacity {usd(to_decimal(rep.idle.total_cost_usd))}"
    )
    if rep.other is not None and to_decimal(rep.other.total_cost_usd) > 0:
        summary += f"; outside the filters {usd(to_decimal(rep.other.total_cost_usd))}"
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


# -------------------------------------------------------------------------------------- diagnose_anomaly


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
    check_team(client, team)
    found = client.anomalies(days, threshold, min_increase_usd, team=team)
    found = sorted(found, key=lambda a: a.day, reverse=True)[: max(1, max_anomalies)]
    by_job: dict[str, list[Recommendation]] = defaultdict(list)
    if any(c.dimension == "job_id" for a in found for c in a.causes):
        for r in client.recommendations(f"{days}d"):
            job_id = recommendation_job(r)
            if job_id is not None:
                by_job[job_id].append(to_recommendation(r))
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
                jobs.append(
                    SpikeJob(
                        job_id=c.key,
                        name=name,
                        team=jteam,
                        state=state,
                        spend_usd=c.spend_usd,
                        baseline_usd=c.baseline_usd,
                        increase_usd=c.increase_usd,
                        share_of_increase=c.share_of_increase,
                        recommendations=by_job.get(c.key, []),
                    )
                )
            elif c.dimension == "team":
                teams.append(
                    SpikeTeam(
                        team=c.key,
                        spend_usd=c.spend_usd,
                        baseline_usd=c.baseline_usd,
                        increase_usd=c.increase_usd,
                        share_of_increase=c.share_of_increase,
                    )
                )
        spikes.append(
            Spike(
                day=a.day,
                scope=a.scope,
                spend_usd=a.spend_usd,
                baseline_usd=a.baseline_usd,
                increase_usd=a.increase_usd,
                increase_pct=a.increase_pct if math.isfinite(a.increase_pct) else 1e9,
                action=a.action,
                savings_usd_per_day=a.savings_usd_per_day,
                message=a.message,
                jobs=jobs,
                teams=teams,
            )
        )
    who = "all teams" if team is None else f"team {team}"
    if not spikes:
        summary = (
            f"No cost anomaly for {who} in the last {days} complete days (a day counts when its spend is more than "
            f"{threshold:.0%} and {usd(min_increase_usd)} above its baseline)."
        )
    else:
        s = spikes[0]
        behind = [
            f"job {j.job_id}"
            + (f" ({j.name}, {j.state})" if j.name else f" ({j.state})")
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
        summary=summary,
        scope=scope_of(team),
        days=days,
        threshold=threshold,
        min_increase_usd=min_increase_usd,
        anomalies=spikes,
    )
