"""``/v1/usage``: what GPUs cost over a window, by any grouping (OpenCost's allocation API shape).

Costs come from the ledger (``cost.ledger.allocate``) — never from a stored running total. A token
other than admin sees only its own team's rows; the idle line and the totals are the cluster's.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Query

from gpufleet.api.deps import AUTHED, Caller, Ctx
from gpufleet.api.problems import input_at
from gpufleet.api.render import ts
from gpufleet.api.windows import parse_window
from gpufleet.cost.ledger import AGGREGATE_FIELDS, CostLine, allocate
from gpufleet.errors import InputError
from gpufleet.store import repo
from gpufleet.wire import CostLineOut, UsageReport

router = APIRouter(prefix="/v1", tags=["usage"])

_ALIASES = {"job": "job_id"}
_KNOWN = ("team", "project", "namespace", "experiment", "job", "node", "pool", "gpu_model", "capacity_type")


def parse_aggregate(text: str) -> list[str]:
    """``team,label:owner`` → the names as given (``job`` stays ``job``); errors name the item."""
    names = [p.strip() for p in text.split(",")]
    out: list[str] = []
    for i, name in enumerate(names):
        field = _ALIASES.get(name, name)
        if not (field in AGGREGATE_FIELDS or (name.startswith("label:") and len(name) > len("label:"))):
            raise InputError(
                f"unknown aggregate '{name}' (known: {', '.join(_KNOWN)}, label:<key>)", field=f"aggregate[{i}]"
            )
        if name in out:
            raise InputError(f"aggregate '{name}' is given twice", field=f"aggregate[{i}]")
        out.append(name)
    return out


def _line(names: list[str], key: tuple[str, ...], line: CostLine) -> CostLineOut:
    return CostLineOut(
        key=dict(zip(names, key, strict=True)),
        gpu_hours=round(line.gpu_seconds / 3600.0, 6),
        gpu_cost_usd=str(line.gpu_cost_usd),
        cpu_cost_usd=str(line.cpu_cost_usd),
        memory_cost_usd=str(line.memory_cost_usd),
        total_cost_usd=str(line.total_cost_usd),
    )


def _merge(lines: list[CostLine], key: tuple[str, ...]) -> CostLine:
    zero = Decimal("0.00")
    return CostLine(
        key,
        sum((ln.gpu_cost_usd for ln in lines), zero),
        sum((ln.cpu_cost_usd for ln in lines), zero),
        sum((ln.memory_cost_usd for ln in lines), zero),
        sum((ln.total_cost_usd for ln in lines), zero),
        sum(ln.gpu_seconds for ln in lines),
    )


@router.get("/usage", response_model=UsageReport, responses=AUTHED, summary="Cost and usage over a window")
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
            description="comma-separated: team, project, namespace, experiment, job, node, "
            "pool, gpu_model, capacity_type, label:<key>",
        ),
    ] = "team",
    spread_idle: Annotated[bool, Query(description="spread idle cost over the rows")] = False,
) -> UsageReport:
    now = ctx.clock.now()
    with input_at("query"):
        win = parse_window(window, now)
        names = parse_aggregate(aggregate)
    fields = [_ALIASES.get(n, n) for n in names]
    restrict = not who.is_admin
    if restrict and "team" not in fields:
        fields = ["team", *fields]  # to keep only the caller's rows, then fold the team away
    with ctx.database.session(readonly=True) as s:
        ledger = repo.load_ledger(s, win.start, win.end, now)
    with input_at("query"):
        alloc = allocate(ledger, win.start, win.end, fields, as_of=now, spread_idle=spread_idle)
    rows: list[CostLineOut]
    if restrict:
        t = fields.index("team")
        groups: dict[tuple[str, ...], list[CostLine]] = {}
        for line in alloc.rows:
            if line.key[t] != who.team:
                continue
            key = line.key if "team" in [_ALIASES.get(n, n) for n in names] else line.key[:t] + line.key[t + 1 :]
            groups.setdefault(key, []).append(line)
        rows = [_line(names, k, _merge(v, k)) for k, v in sorted(groups.items())]
        idle_key = alloc.idle.key[: len(names)]
        total_key = alloc.totals.key[: len(names)]
    else:
        rows = [_line(names, line.key, line) for line in alloc.rows]
        idle_key, total_key = alloc.idle.key, alloc.totals.key
    return UsageReport(
        window_start=ts(alloc.window_start),
        window_end=ts(alloc.window_end),
        aggregate=names,
        rows=rows,
        idle=_line(names, idle_key, alloc.idle),
        totals=_line(names, total_key, alloc.totals),
    )
