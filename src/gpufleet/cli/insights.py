"""``gpufleet forecast`` and ``gpufleet anomalies``: the advice the API already gives (``/v1/forecast``,
``/v1/jobs/{id}/forecast``, ``/v1/anomalies``), in a terminal.

Thin on purpose: parse, call one SDK method, render. ``--format`` is judged before the server is
asked (as ``roi``'s), so a typo never costs a round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpufleet.cli import jobs
from gpufleet.cli.common import console, handle_errors
from gpufleet.cli.jobs import TokenOpt, UrlOpt
from gpufleet.cli.render import Col, bad_option, emit_json, humanize_duration, make_table, money, note, print_table

if TYPE_CHECKING:
    from rich.table import Table

    from gpufleet.wire import AnomalyOut, JobForecastOut, SpendForecastOut

FORMATS = ("table", "json")
PERIODS = ("month", "week")

FormatOpt = Annotated[str, typer.Option("--format", help="table or json")]
TeamOpt = Annotated[str | None, typer.Option("--team", help="a team's spend (default: all; members: their own)")]


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:  # judged before the server is asked
        raise bad_option("--format", f"{fmt!r} is not one of {', '.join(FORMATS)}")


def _spend_table(f: SpendForecastOut) -> None:
    title = [f"forecast {f.scope}", f"{f.period_start:%Y-%m-%d} → {f.period_end:%Y-%m-%d}", f"method {f.method}"]
    rows = [
        ["spent so far", money(f.spent_usd)],
        ["forecast rest of the period", money(f.forecast_remaining_usd)],
        ["total at period end", f"[bold]{money(f.total_usd)}[/]"],
        [f"interval ({f.level:.0%})", f"{money(f.low_usd)} – {money(f.high_usd)}"],
        ["rate", f"{money(f.rate_usd_per_day)}/day"],
        ["floor (spent + unfinished jobs)", money(f.floor_usd)],
        ["days left", str(f.days_left)],
        ["history", humanize_duration(f.history_days * 86400)],
    ]
    print_table(make_table([Col("WHAT"), Col("USD", justify="right")], rows, title=title))


def _job_table(f: JobForecastOut) -> None:
    def span(low: float | None, high: float | None) -> str:
        if low is None:
            return "–"
        return f"{money(low)} – {'?' if high is None else money(high)}"

    rows = [
        ["spent so far", money(f.spent_usd)],
        ["cost rate", f"{money(f.cost_rate_usd_per_hour)}/h"],
        ["done", "–" if f.fraction_done is None else f"{f.fraction_done:.0%}"],
        ["time left", humanize_duration(f.remaining_s)],
        ["cost left", "–" if f.remaining_usd is None else money(f.remaining_usd)],
        [f"interval ({f.level:.0%})", span(f.remaining_usd_low, f.remaining_usd_high)],
    ]
    print_table(make_table([Col("WHAT"), Col("VALUE", justify="right")], rows, title=[f"job {f.job_id}", f.method]))
    if f.explanation:
        console.print(escape(f.explanation), highlight=False, soft_wrap=True)


@handle_errors
def forecast(
    job: Annotated[
        str | None, typer.Option("--job", help="a job's remaining cost instead of a scope's period-end spend")
    ] = None,
    team: TeamOpt = None,
    period: Annotated[str, typer.Option("--period", help="month or week")] = "month",
    level: Annotated[float, typer.Option("--level", help="the interval's level, e.g. 0.9", min=0.01, max=0.999)] = 0.9,
    fmt: FormatOpt = "table",
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """The spend forecast at the end of the month or week (all, or a team), or a job's remaining cost."""
    _check_format(fmt)
    if period not in PERIODS:
        raise bad_option("--period", f"{period!r} is not one of {', '.join(PERIODS)}")
    if job is not None and team is not None:
        raise bad_option("--job", "give --job or --team, not both")
    with jobs.make_client(url, token) as client:
        if job is not None:
            jf = client.forecast(job)
        else:
            sf = client.forecast_spend(team, period, level)
    if fmt == "json":
        emit_json(jf if job is not None else sf)
    elif job is not None:
        _job_table(jf)
    else:
        _spend_table(sf)


@handle_errors
def anomalies(
    days: Annotated[
        int, typer.Option("--days", help="complete UTC days to judge, ending yesterday", min=1, max=366)
    ] = 30,
    threshold: Annotated[
        float, typer.Option("--threshold", help="a day this fraction over its baseline (0.2: 20 %)", min=0, max=100)
    ] = 0.2,
    min_increase: Annotated[
        float, typer.Option("--min-increase", help="and at least this many USD over it", min=0)
    ] = 50.0,
    team: TeamOpt = None,
    fmt: FormatOpt = "table",
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Days whose spend jumped over their baseline, with the teams and jobs that caused it."""
    _check_format(fmt)
    with jobs.make_client(url, token) as client:
        found = client.anomalies(days, threshold, min_increase, team)
    if fmt == "json":
        emit_json(found)
        return
    if not found:
        note(f"no cost anomalies in the last {days} complete days")
        return
    print_table(_anomalies_table(found))


def _anomalies_table(found: list[AnomalyOut]) -> Table:
    cols = [
        Col("DAY"),
        Col("SCOPE"),
        Col("SPEND", justify="right"),
        Col("BASELINE", justify="right"),
        Col("INCREASE", justify="right"),
        Col("CAUSES", cut="end", min_width=12),
        Col("ACTION", cut="end", min_width=10, hide=1),
    ]
    rows = [
        [
            a.day,
            escape(a.scope),
            money(a.spend_usd),
            money(a.baseline_usd),
            f"{money(a.increase_usd)} (+{a.increase_pct:.0f} %)",
            escape(", ".join(f"{c.dimension} {c.key} {c.share_of_increase:.0%}" for c in a.causes) or "–"),
            escape(a.action),
        ]
        for a in found
    ]
    return make_table(cols, rows)
