"""``gpufleet budget create|ls|show|check|delete``: budgets through the SDK.

Exit codes as for the job commands (2 bad input, 3 not found, 4 forbidden, 6 conflict...);
``check`` exits 6 when a ``block`` budget would refuse the job, so scripts can gate a submit on it.
"""

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli.common import console, fail, handle_errors
from gpufleet.cli.jobs import JsonOpt, TokenOpt, UrlOpt, parse_duration
from gpufleet.cli.render import (
    EXIT_CONFLICT,
    EXIT_INPUT,
    Col,
    bad_option,
    emit_json,
    make_table,
    money,
    note,
)

if TYPE_CHECKING:
    from gpufleet.wire import BudgetOut, BudgetStatusOut

budget_app = typer.Typer(no_args_is_help=True, help="Budgets: spending limits with alerts, throttles and blocks.")

_SEVERITIES = ("info", "warning", "critical")


def _thresholds(items: list[str]) -> list[dict[str, Any]]:
    """``80`` or ``80:warning`` → ``{"percent": 80, "severity": "warning"}``."""
    out = []
    for item in items:
        pct, _, sev = item.partition(":")
        try:
            value = float(pct.rstrip("%"))
        except ValueError:
            raise bad_option("--threshold", f"'{item}' is not PERCENT[:SEVERITY]") from None
        sev = sev or "warning"
        if sev not in _SEVERITIES:
            raise bad_option("--threshold", f"unknown severity '{sev}' (known: {', '.join(_SEVERITIES)})")
        out.append({"percent": value, "severity": sev})
    return out


def _time(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise bad_option(option, f"'{text}' is not an ISO 8601 time (2026-01-01 or 2026-01-01T00:00+02:00)") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _channels(webhook: list[str], slack: list[str], pagerduty: list[str], raw: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "webhook", "url": u} for u in webhook]
    out += [{"type": "slack", "url": u} for u in slack]
    out += [{"type": "pagerduty", "routing_key": k} for k in pagerduty]
    for item in raw:
        try:
            ch = json.loads(item)
        except json.JSONDecodeError as e:
            raise bad_option("--channel", f"not JSON: {e.msg}") from None
        if not isinstance(ch, dict):
            raise bad_option("--channel", 'a channel is a JSON object, e.g. {"type": "email", ...}')
        out.append(ch)
    return out


@budget_app.command("create")
@handle_errors
def create(
    name: Annotated[str, typer.Argument(help="a unique name")],
    scope: Annotated[
        str, typer.Option("--scope", help="all | team:X | project:X | namespace:X | experiment:X | label:k=v")
    ],
    limit: Annotated[float, typer.Option("--limit", help="USD per period")],
    team: Annotated[
        str | None,
        typer.Option("--team", help="the team the budget belongs to (required for project/namespace/experiment/label)"),
    ] = None,
    period: Annotated[str, typer.Option("--period", help="monthly | weekly | custom")] = "monthly",
    timezone: Annotated[str, typer.Option("--timezone", help="IANA zone periods start in")] = "UTC",
    start: Annotated[str | None, typer.Option("--start", help="custom period start (ISO 8601)")] = None,
    end: Annotated[str | None, typer.Option("--end", help="custom period end (ISO 8601)")] = None,
    threshold: Annotated[
        list[str] | None, typer.Option("--threshold", help="PERCENT[:SEVERITY] (repeatable; default 50,80,100)")
    ] = None,
    action: Annotated[str, typer.Option("--action", help="alert | throttle | block")] = "alert",
    throttle_priority: Annotated[
        str | None, typer.Option("--throttle-priority", help="priority class when over")
    ] = None,
    throttle_max_gpus: Annotated[float | None, typer.Option("--throttle-max-gpus", help="GPU cap when over")] = None,
    spot_only: Annotated[bool, typer.Option("--spot-only", help="spot capacity only when over")] = False,
    grace: Annotated[str | None, typer.Option("--grace", help="enforce this long after going over, e.g. 2h")] = None,
    webhook: Annotated[list[str] | None, typer.Option("--webhook", help="webhook URL (repeatable)")] = None,
    slack: Annotated[list[str] | None, typer.Option("--slack", help="Slack webhook URL (repeatable)")] = None,
    pagerduty: Annotated[list[str] | None, typer.Option("--pagerduty", help="routing key (repeatable)")] = None,
    channel: Annotated[list[str] | None, typer.Option("--channel", help="a channel as JSON (repeatable)")] = None,
    anomaly_alerts: Annotated[
        bool, typer.Option("--anomaly-alerts", help="alert on daily cost anomalies of the scope")
    ] = False,
    anomaly_threshold: Annotated[
        float, typer.Option("--anomaly-threshold", help="percent above the 7-day baseline that is an anomaly")
    ] = 20.0,
    anomaly_floor: Annotated[
        float, typer.Option("--anomaly-floor", help="USD above the baseline a day must also be")
    ] = 50.0,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a budget (admin)."""
    from pydantic import ValidationError

    from gpufleet.wire import BudgetIn

    fields: dict[str, Any] = {
        "name": name,
        "scope": scope,
        "team": team,
        "limit_usd": limit,
        "period": period,
        "timezone": timezone,
        "action": action,
        "channels": _channels(webhook or [], slack or [], pagerduty or [], channel or []),
        "anomaly_alerts": anomaly_alerts,
        "anomaly_threshold_pct": anomaly_threshold,
        "anomaly_floor_usd": anomaly_floor,
    }
    if start is not None or end is not None:
        fields["period_start"], fields["period_end"] = _time(start, "--start"), _time(end, "--end")
    if threshold:
        fields["thresholds"] = _thresholds(threshold)
    if throttle_priority is not None or throttle_max_gpus is not None or spot_only:
        fields["throttle"] = {"priority": throttle_priority, "max_gpus": throttle_max_gpus, "spot_only": spot_only}
    if grace is not None:
        fields["grace_s"] = parse_duration(grace, "--grace")
    try:
        body = BudgetIn.model_validate(fields)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise fail(escape(f"{where}: {str(first['msg']).removeprefix('Value error, ')}"), EXIT_INPUT) from None
    with cli_jobs.make_client(url, token) as client:
        out = client.create_budget(body)
    if as_json:
        emit_json(out)
    else:
        note(f"budget {out.name} ({out.id}) created")
        _print_budget(out)


def _print_budget(b: "BudgetOut") -> None:
    ths = ", ".join(f"{t.percent:g}% {t.severity}" for t in b.thresholds)
    console.print(
        f"[bold]{escape(b.name)}[/] ({b.id}) — {escape(b.scope)}, ${b.limit_usd:,.2f} {b.period} ({b.timezone})"
        + (f", team {escape(b.team)}" if b.team and not b.scope.startswith("team:") else "")
    )
    console.print(f"  action: {b.action}" + (f" {b.throttle.model_dump(exclude_defaults=True)}" if b.throttle else ""))
    if b.grace_s:
        console.print(f"  grace: {b.grace_s:g}s")
    if b.anomaly_alerts:
        console.print(
            f"  anomaly alerts: a day > {b.anomaly_threshold_pct:g}% and > ${b.anomaly_floor_usd:,.2f} "
            "above its 7-day baseline"
        )
    console.print(f"  thresholds: {ths}")
    for ch in b.channels:
        console.print(f"  channel: {escape(json.dumps(ch))}")


@budget_app.command("ls")
@handle_errors
def ls(as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """All budgets."""
    with cli_jobs.make_client(url, token) as client:
        items = client.budgets()
    if as_json:
        emit_json(items)
        return
    if not items:
        note("no budgets")
        return
    cols = [
        Col("ID"),
        Col("NAME", cut="middle", min_width=8),
        Col("SCOPE", cut="middle", min_width=10),
        Col("LIMIT", justify="right"),
        Col("PERIOD"),
        Col("ACTION"),
        Col("ENABLED"),
    ]
    rows = [
        [
            escape(b.id),
            escape(b.name),
            escape(b.scope),
            money(b.limit_usd),
            b.period,
            b.action,
            "yes" if b.enabled else "no",
        ]
        for b in items
    ]
    console.print(make_table(cols, rows))


def _print_status(st: "BudgetStatusOut") -> None:
    console.print(
        f"period {st.period_start:%Y-%m-%d %H:%M} → {st.period_end:%Y-%m-%d %H:%M} UTC, {st.days_left:.1f} days left"
    )
    from gpufleet.cost.budgets.status import left_phrase

    counts = st.basis_note or st.basis
    console.print(f"spent ${st.spend_usd:,.2f} of ${st.limit_usd:,.2f} ({st.percent:.1f}%; {counts})")
    console.print(
        f"committed ${st.committed_usd:,.2f} (spent plus the estimated rest of running and queued jobs): "
        f"{left_phrase(st.limit_usd, st.committed_usd)}"
    )
    how = st.projection_note or "run rate so far, at least what is committed"
    console.print(f"projected ${st.projected_usd:,.2f} at period end ({how})")
    if st.enforcing:
        console.print(f"[bold red]{st.action} in force[/]")
    for a in st.alerts:
        sent = ", ".join(f"{k} {v}" for k, v in sorted(a.notifications.items())) or "no channels"
        console.print(
            f"  alert {a.threshold:g}% {a.severity} at {a.fired_at:%Y-%m-%d %H:%M} (${a.spend_usd:,.2f}; {sent})"
        )


@budget_app.command("show")
@handle_errors
def show(
    ref: Annotated[str, typer.Argument(metavar="BUDGET", help="id or name")],
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A budget and where it stands: spend, percent, projection, days left, alerts fired."""
    with cli_jobs.make_client(url, token) as client:
        b = client.budget(ref)
        st = client.budget_status(ref)
    if as_json:
        emit_json({"budget": b, "status": st})
        return
    _print_budget(b)
    _print_status(st)


@budget_app.command("delete")
@handle_errors
def delete(
    ref: Annotated[str, typer.Argument(metavar="BUDGET", help="id or name")],
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Delete a budget (admin)."""
    with cli_jobs.make_client(url, token) as client:
        client.delete_budget(ref)
    note(f"budget {ref} deleted")


@budget_app.command("check", context_settings={"allow_interspersed_args": False})
@handle_errors
def check(
    command: Annotated[list[str], typer.Argument(help="the job's command, after --", show_default=False)],
    gpus: Annotated[int | None, typer.Option("--gpus", help="whole GPUs", show_default=False)] = None,
    gpu_milli: Annotated[int | None, typer.Option("--gpu-milli", show_default=False)] = None,
    gpu_type: Annotated[list[str] | None, typer.Option("--gpu-type", show_default=False)] = None,
    team: Annotated[str | None, typer.Option("--team")] = None,
    project: Annotated[str | None, typer.Option("--project")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", show_default=False)] = None,
    max_runtime: Annotated[str | None, typer.Option("--max-runtime")] = None,
    estimate: Annotated[str | None, typer.Option("--estimate", help="expected runtime, e.g. 6h")] = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Before submitting: the job's estimated cost against what is left in each budget covering it
    (exit 6 when a blocking budget would refuse it)."""
    spec = cli_jobs.build_spec(
        command,
        gpus=gpus,
        gpu_milli=gpu_milli,
        gpu_types=gpu_type,
        team=team,
        project=project,
        labels=label,
        max_runtime=max_runtime,
        estimate=estimate,
    )
    from gpufleet.cost.budgets.status import left_phrase

    with cli_jobs.make_client(url, token) as client:
        out = client.check_budget(spec)
    if as_json:
        emit_json(out)
    else:
        basis = "" if out.price_basis == "cluster" else f", priced from {out.price_basis}"
        console.print(
            f"estimated cost ${out.job_cost_usd:,.2f}: {out.gpus:g} GPU x {out.runtime_s / 3600:.2f} h "
            f"({out.runtime_source}) x ${out.usd_per_gpu_hour:,.4f}/GPU-h{escape(basis)}"
        )
        if out.submit_refused:
            console.print(f"[red]a real submit would be refused:[/] {escape(out.submit_refused)}")
        if not out.budgets:
            note("no budget covers this job")
        for line in out.budgets:
            verdict = "[green]fits[/]" if line.fits else "[red]does not fit[/]"
            console.print(
                f"  {escape(line.name)} ({escape(line.scope)}, {line.action}): limit ${line.limit_usd:,.2f}, "
                f"committed ${line.committed_usd:,.2f}, {left_phrase(line.limit_usd, line.committed_usd)} — {verdict}"
            )
    if out.blocked:
        raise typer.Exit(EXIT_CONFLICT)
