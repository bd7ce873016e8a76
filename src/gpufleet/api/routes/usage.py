"""``/v1/usage``: what GPUs cost over a window, by any grouping (OpenCost's allocation API shape).

Costs come from the ledger through :func:`gpufleet.cost.spend.spend_report` — never from a
stored running total — priced with the server's pricing rules (``ApiContext.pricing_rules``; a
context without rules prices at the recorded prices, with no multipliers). A token other than admin
sees only its own team's rows; the idle line, the other lines and the totals are the cluster's.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpufleet.api.deps import SCOPED, Caller, Ctx
from gpufleet.api.problems import input_at
from gpufleet.api.render import ts
from gpufleet.api.windows import parse_window
from gpufleet.cost.report import DIMENSIONS, Filters, ReportLine, ReservationLine, ledger_field
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import spend_report
from gpufleet.errors import InputError, PermissionDeniedError
from gpufleet.store import repo
from gpufleet.wire import CostLineOut, ReservationOut, UsageReport

router = APIRouter(prefix="/v1", tags=["usage"])

_KNOWN = tuple(DIMENSIONS)


def parse_aggregate(text: str) -> list[str]:
    """``team,label:owner`` → the names as given (``job`` stays ``job``); errors name the item."""
    names = [p.strip() for p in text.split(",")]
    out: list[str] = []
    seen: list[str] = []
    for i, name in enumerate(names):
        try:
            field = ledger_field(name)
        except InputError:
            raise InputError(
                f"unknown aggregate '{name}' (known: {', '.join(_KNOWN)}, label:<key>)", field=f"aggregate[{i}]"
            ) from None
        if field in seen:
            raise InputError(f"aggregate '{name}' is given twice", field=f"aggregate[{i}]")
        seen.append(field)
        out.append(name)
    return out


def parse_labels(items: list[str]) -> dict[str, str]:
    """``["k=v", ...]`` → ``{k: v}``; errors name the item."""
    out: dict[str, str] = {}
    for i, item in enumerate(items):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise InputError(f"'{item}' is not KEY=VALUE", field=f"label[{i}]")
        if key.strip() in out:
            raise InputError(f"label '{key.strip()}' is given twice", field=f"label[{i}]")
        out[key.strip()] = value.strip()
    return out


def _line(names: list[str], line: ReportLine) -> CostLineOut:
    return CostLineOut(
        key=dict(zip(names, line.key, strict=True)),
        gpu_hours=round(line.gpu_seconds / 3600.0, 6),
        gpu_cost_usd=str(line.gpu_cost_usd),
        cpu_cost_usd=str(line.cpu_cost_usd),
        memory_cost_usd=str(line.memory_cost_usd),
        total_cost_usd=str(line.total_cost_usd),
        adjustment_usd=str(line.adjustment_usd),
    )


def _reservation(r: ReservationLine) -> ReservationOut:
    return ReservationOut(
        name=r.name,
        gpu_model=r.gpu_model,
        gpus=r.gpus,
        committed_gpu_hours=round(r.committed_gpu_hours, 6),
        committed_usd=str(r.committed_usd),
        covered_usd=str(r.covered_usd),
        unused_usd=str(r.unused_usd),
    )


@router.get("/usage", response_model=UsageReport, responses=SCOPED, summary="Cost and usage over a window")
def usage(
    ctx: Ctx,
    who: Caller,
    window: Annotated[
        str, Query(max_length=120, description="today, yesterday, week, month, 7d, 24h, 90m, or start,end (RFC 3339)")
    ] = "today",
    aggregate: Annotated[
        str,
        Query(
            max_length=500,
            description="comma-separated: team, project, namespace, experiment, cost_center (the job label "
            "cost-center), job, node, pool, gpu_model, capacity_type, priority, label:<key>",
        ),
    ] = "team",
    spread_idle: Annotated[bool, Query(description="spread idle cost over the rows in proportion to use")] = False,
    team: Annotated[str | None, Query(max_length=63, description="only this team's rows")] = None,
    label: Annotated[
        list[str] | None, Query(max_length=64, description="only rows with this job label, KEY=VALUE (repeatable)")
    ] = None,
) -> UsageReport:
    now = ctx.clock.now()
    with input_at("query"):
        win = parse_window(window, now)
        names = parse_aggregate(aggregate)
        labels = parse_labels(label or [])
    if not who.is_admin:
        if team is not None and team != who.team:
            raise PermissionDeniedError(f"a {who.role} token of team {who.team} sees only its own team's usage")
        team = who.team
    rules: PricingRules | None = ctx.pricing_rules
    with ctx.database.session(readonly=True) as s:
        ledger = repo.load_ledger(s, win.start, win.end, now)
    with input_at("query"):
        rep = spend_report(
            ledger,
            win.start,
            win.end,
            aggregate=names,
            rules=rules,
            spread_idle=spread_idle,
            filters=Filters(team=team, labels=labels),
            as_of=now,
        )
    filters = ({"team": team} if team is not None else {}) | {f"label:{k}": v for k, v in labels.items()}
    return UsageReport(
        window_start=ts(rep.window_start),
        window_end=ts(rep.window_end),
        aggregate=names,
        rows=[_line(names, line) for line in rep.rows],
        idle=_line(names, rep.idle),
        totals=_line(names, rep.totals),
        other=_line(names, rep.other),
        adjustment=_line(names, rep.adjustment),
        reservation_unused=_line(names, rep.reservation_unused),
        reservations=[_reservation(r) for r in rep.reservations],
        node_cost_usd=str(rep.node_cost_usd),
        filters=filters,
        rules=rep.rules_source,
    )
