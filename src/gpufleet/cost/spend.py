"""THE one path of money: every figure in dollars comes from :func:`spend_report`.

The usage API, budgets (spend, block checks, anomalies), forecasts, ROI, recommendations and the
simulator all read money through this module, so they all apply the same pricing rules
(:mod:`gpufleet.cost.rules`: time-of-day windows, priority multipliers, reservations, node
prices) and round the same way. :func:`spend_report` prices the ledger with the rules
(:func:`~gpufleet.cost.rules.apply_rules`), allocates it (:func:`gpufleet.cost.allocation.allocate`,
called from nowhere else) and applies the priority chargeback. The helpers below are built on it:

- :func:`scope_spend_usd` — what a budget scope's jobs were charged in a window (float dollars,
  cents);
- :func:`job_costs_usd` — what each job was charged (job id → float dollars, cents);
- :func:`daily_spend_reports` / :func:`daily_costs` — one report per day, the ledger priced once.

The lines of a report and the rule that ties them are in :mod:`gpufleet.cost.report`.

Rounding. ``allocate`` rounds the held cost of each (group, priority class) to cents with the
largest-remainder method so that those lines and idle add up to the rounded node cost. A group's
charge is then the exact sum of its classes' cents times their multipliers, rounded half up, its
components by largest remainder; the adjustment is the difference of rounded figures, so the
report's rule holds to the cent by construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from gpufleet.errors import InputError

from .allocation import IDLE_KEY, Allocation, CostLine, allocate
from .ledger import Ledger
from .pricesplit import DEFAULT_UNIT_PRICES, UnitPrices
from .report import (
    ADJUSTMENT_KEY,
    OTHER_KEY,
    RESERVED_KEY,
    TOTAL_KEY,
    CostReport,
    DailyCost,
    Filters,
    ReportLine,
    ReservationLine,
    ledger_field,
)
from .rules import PricedLedger, PricingRules, ReservationCost, apply_rules

if TYPE_CHECKING:
    from .budgets.model import Scope

DAY_S = 86400.0

# What a spend figure counts — every figure the API shows for a scope's spend says which (``basis``):
# a budget counts what its jobs were charged (idle capacity is no job's), the cluster's forecast
# what the nodes cost (idle included). The difference of the two for the whole cluster is idle.
SPEND_BASES: dict[str, str] = {
    "jobs": "what jobs were charged (their attributed spend; idle capacity not included)",
    "nodes": "what the nodes cost, idle capacity included",
}


def spend_report(
    ledger: Ledger,
    start: float,
    end: float,
    *,
    aggregate: Sequence[str] = ("team",),
    rules: PricingRules | None = None,
    filters: Filters | None = None,
    as_of: float | None = None,
    spread_idle: bool = False,
    unit_prices: UnitPrices = DEFAULT_UNIT_PRICES,
) -> CostReport:
    """What ``[start, end)`` cost by ``aggregate`` (dimension names, see :mod:`gpufleet.cost.report`),
    with ``rules`` (None: the ledger's recorded prices, no multipliers), idle optionally spread
    over the rows in proportion to their use, and rows optionally filtered. ``as_of`` ends the
    window early and ends what is still open."""
    priced = apply_rules(ledger, start, end, rules, as_of=as_of) if rules is not None else None
    return _report(ledger, priced, start, end, aggregate, rules, spread_idle, filters or Filters(), as_of, unit_prices)


def scope_spend_usd(
    ledger: Ledger,
    rules: PricingRules | None,
    scope: Scope,
    start: float,
    end: float,
    *,
    as_of: float | None,
) -> float:
    """What the jobs in a budget ``scope`` were charged in ``[start, end)`` (as of ``as_of``): the
    report's rows of the scope (grouped by :attr:`Scope.aggregates`, so an owned scope counts its
    owning team's jobs only), in dollars rounded to cents. Idle capacity is not charged to a
    scope: a budget limits what its jobs hold."""
    cut = end if as_of is None else min(end, as_of)
    if cut <= start:
        return 0.0
    rep = spend_report(ledger, start, end, aggregate=scope.aggregates, rules=rules, as_of=as_of)
    return _dollars(sum((r.total_cost_usd for r in rep.rows if scope.matches(r.key)), Decimal(0)))


def job_costs_usd(
    ledger: Ledger, rules: PricingRules | None, start: float, end: float, *, as_of: float | None, exact: bool = False
) -> dict[str, float]:
    """What each job was charged in ``[start, end)`` (as of ``as_of``): job id → dollars (cents,
    as billed); with ``exact``, before rounding — what a job's own limit is compared with, so a
    job is stopped when it reaches its budget, not when its first cent rounds up, and what a cost
    rate is computed from (a rounded cent over a few seconds is not a rate)."""
    cut = end if as_of is None else min(end, as_of)
    if cut <= start:
        return {}
    rep = spend_report(ledger, start, end, aggregate=("job",), rules=rules, as_of=as_of)
    if exact:
        return {r.key[0]: float(r.exact_usd) for r in rep.rows}
    return {r.key[0]: _dollars(r.total_cost_usd) for r in rep.rows}


def daily_spend_reports(
    ledger: Ledger,
    first_day_start: float,
    days: int,
    *,
    aggregate: Sequence[str] = ("team",),
    rules: PricingRules | None = None,
    as_of: float | None = None,
) -> list[CostReport]:
    """One :func:`spend_report` per day ``[first_day_start + 86400·d, +86400)`` for ``d`` in
    ``range(days)``, the ledger priced with ``rules`` once for the whole range."""
    if days < 0:
        raise InputError("days must be >= 0", field="days")
    if days == 0:
        return []
    end = first_day_start + DAY_S * days
    priced = apply_rules(ledger, first_day_start, end, rules, as_of=as_of) if rules is not None else None
    out = []
    for d in range(days):
        ws = first_day_start + DAY_S * d
        out.append(
            _report(ledger, priced, ws, ws + DAY_S, aggregate, rules, False, Filters(), as_of, DEFAULT_UNIT_PRICES)
        )
    return out


def _dollars(usd: Decimal) -> float:
    return round(float(usd), 2)


def _report(
    ledger: Ledger,
    priced: PricedLedger | None,
    start: float,
    end: float,
    aggregate: Sequence[str],
    rules: PricingRules | None,
    spread_idle: bool,
    filters: Filters,
    as_of: float | None,
    unit_prices: UnitPrices,
) -> CostReport:
    if isinstance(aggregate, str) or not aggregate:
        raise InputError(f"aggregate must be a non-empty list of names, got {aggregate!r}", field="aggregate")
    names = tuple(aggregate)
    fields = [ledger_field(n) for n in names]
    if len(set(fields)) != len(fields):
        raise InputError(f"an aggregate is given twice: {', '.join(names)}", field="aggregate")
    group = list(fields)
    for extra in (
        *(["team"] if filters.team is not None else []),
        *(f"label:{k}" for k in filters.labels),
        *(["priority_class"] if rules is not None and rules.has_priority_multipliers else []),
    ):
        if extra not in group:
            group.append(extra)
    n = len(fields)
    team_at = group.index("team") if filters.team is not None else -1
    label_at = {k: group.index(f"label:{k}") for k in filters.labels}
    prio_at = group.index("priority_class") if "priority_class" in group else -1

    alloc: Allocation = allocate(
        priced.ledger if priced is not None else ledger,
        start,
        end,
        group,
        as_of=as_of,
        spread_idle=spread_idle,
        unit_prices=unit_prices,
    )

    if group == fields and prio_at < 0 and filters.empty:
        # nothing filtered, no multiplier: each allocation row is a report row, charged as held
        rows = tuple(_line(line.key, line) for line in sorted(alloc.rows, key=lambda ln: ln.key))
        other, adjustment = _sum_lines((OTHER_KEY,) * n, []), _adjustment_line((ADJUSTMENT_KEY,) * n, [])
    else:
        rows, other, adjustment = _charged(alloc, n, team_at, label_at, prio_at, filters, rules)

    idle = _line((IDLE_KEY,) * n, alloc.idle)
    res_costs: list[ReservationCost] = (
        priced.reservation_costs(alloc.window_start, alloc.window_end) if priced is not None else []
    )
    reservations = tuple(_reservation_line(rc) for rc in res_costs)
    unused = sum((r.unused_usd for r in reservations), Decimal("0.00"))
    reservation_unused = ReportLine((RESERVED_KEY,) * n, unused, Decimal("0.00"), Decimal("0.00"), unused)
    t = alloc.totals
    totals = ReportLine(
        (TOTAL_KEY,) * n,
        t.gpu_cost_usd + unused,
        t.cpu_cost_usd,
        t.memory_cost_usd,
        t.total_cost_usd + unused,
        t.gpu_seconds,
    )
    # The rule of the module docstring, column by column (a bug if it fails).
    for col in ("gpu_cost_usd", "cpu_cost_usd", "memory_cost_usd", "total_cost_usd"):
        lhs = (
            sum((getattr(r, col) for r in rows), Decimal(0))
            + getattr(other, col)
            - getattr(adjustment, col)
            + getattr(idle, col)
            + getattr(reservation_unused, col)
        )
        if lhs != getattr(totals, col):
            raise AssertionError(f"cost report conservation broken in {col}: {lhs} != {getattr(totals, col)}")
    return CostReport(
        aggregate=names,
        window_start=alloc.window_start,
        window_end=alloc.window_end,
        rows=rows,
        other=other,
        adjustment=adjustment,
        idle=idle,
        reservation_unused=reservation_unused,
        reservations=reservations,
        totals=totals,
        node_cost_usd=t.total_cost_usd,
        node_cost_exact_usd=alloc.node_cost_exact_usd,
        filters=filters,
        rules_source=None if rules is None else rules.source,
    )


def _charged(
    alloc: Allocation,
    n: int,
    team_at: int,
    label_at: dict[str, int],
    prio_at: int,
    filters: Filters,
    rules: PricingRules | None,
) -> tuple[tuple[ReportLine, ...], ReportLine, ReportLine]:
    """Charges per output group — exact cents (held cents × multiplier) per component — the rows
    shown, the rows filtered away (one "other" line) and the rounding adjustment."""
    shown: dict[tuple[str, ...], _Acc] = {}
    hidden: dict[tuple[str, ...], _Acc] = {}
    for line in alloc.rows:
        key = line.key
        visible = (team_at < 0 or key[team_at] == filters.team) and all(
            key[i] == filters.labels[k] for k, i in label_at.items()
        )
        mult = rules.priority_multiplier(key[prio_at]) if rules is not None and prio_at >= 0 else 1
        out_key = key[:n]
        bucket = shown if visible else hidden
        acc = bucket.get(out_key)
        if acc is None:
            acc = bucket[out_key] = _Acc()
        acc.add(line, mult)

    rows = tuple(shown[k].line(k) for k in sorted(shown))
    hidden_lines = [hidden[k].line(k) for k in sorted(hidden)]
    other = _sum_lines((OTHER_KEY,) * n, hidden_lines)
    adjustment = _adjustment_line((ADJUSTMENT_KEY,) * n, [*shown.values(), *hidden.values()])
    return rows, other, adjustment


class _Acc:
    """One output group: held cents and charged exact cents per component, GPU-seconds. While every
    line added had multiplier 1 the charge is the held cents (integers, no fractions)."""

    __slots__ = ("charged", "exact", "gpu_seconds", "held")

    def __init__(self) -> None:
        self.held = [0, 0, 0]
        self.charged: list[Fraction] | None = None  # None: equal to ``held``
        self.gpu_seconds = 0.0
        self.exact = Fraction(0)  # the charge before any rounding

    def add(self, line: CostLine, mult: Fraction | int) -> None:
        cents = (_cents(line.gpu_cost_usd), _cents(line.cpu_cost_usd), _cents(line.memory_cost_usd))
        if mult != 1 and self.charged is None:
            self.charged = [Fraction(h) for h in self.held]
        held, charged = self.held, self.charged
        for i in range(3):
            held[i] += cents[i]
            if charged is not None:
                charged[i] += cents[i] * mult
        self.gpu_seconds += line.gpu_seconds
        self.exact += line.exact_usd * mult

    def charged_cents(self) -> list[int]:
        return list(self.held) if self.charged is None else _round_parts(self.charged)

    def line(self, key: tuple[str, ...]) -> ReportLine:
        c = self.charged_cents()
        return ReportLine(
            key,
            _usd(c[0]),
            _usd(c[1]),
            _usd(c[2]),
            _usd(sum(c)),
            self.gpu_seconds,
            _usd(sum(c) - sum(self.held)),
            self.exact,
        )


def _adjustment_line(key: tuple[str, ...], accs: list[_Acc]) -> ReportLine:
    cols = [0, 0, 0]
    for acc in accs:
        c = acc.charged_cents()
        for i in range(3):
            cols[i] += c[i] - acc.held[i]
    return ReportLine(key, _usd(cols[0]), _usd(cols[1]), _usd(cols[2]), _usd(sum(cols)), 0.0, _usd(sum(cols)))


def _sum_lines(key: tuple[str, ...], lines: list[ReportLine]) -> ReportLine:
    zero = Decimal("0.00")
    return ReportLine(
        key,
        sum((ln.gpu_cost_usd for ln in lines), zero),
        sum((ln.cpu_cost_usd for ln in lines), zero),
        sum((ln.memory_cost_usd for ln in lines), zero),
        sum((ln.total_cost_usd for ln in lines), zero),
        sum(ln.gpu_seconds for ln in lines),
        sum((ln.adjustment_usd for ln in lines), zero),
        sum((ln.exact_usd for ln in lines), Fraction(0)),
    )


def _line(key: tuple[str, ...], line: CostLine) -> ReportLine:
    return ReportLine(
        key,
        line.gpu_cost_usd,
        line.cpu_cost_usd,
        line.memory_cost_usd,
        line.total_cost_usd,
        line.gpu_seconds,
        exact_usd=line.exact_usd,
    )


def _reservation_line(rc: ReservationCost) -> ReservationLine:
    committed = _round_half_up(rc.committed_usd)
    unused = _round_half_up(rc.unused_usd)
    return ReservationLine(
        rc.name,
        rc.gpu_model,
        rc.gpus,
        float(rc.committed_gpu_hours),
        _usd(committed),
        _usd(committed - unused),
        _usd(unused),
    )


def _round_half_up(x: Fraction) -> int:
    """``x`` dollars in whole cents, half up."""
    return math.floor(x * 100 + Fraction(1, 2))


def _round_parts(parts: Sequence[Fraction]) -> list[int]:
    """Exact cents → whole cents: the sum rounded half up, the parts by largest remainder to it."""
    total = math.floor(sum(parts, Fraction(0)) + Fraction(1, 2))
    floors = [math.floor(p) for p in parts]
    order = sorted(range(len(parts)), key=lambda i: (-(parts[i] - floors[i]), i))
    for i in order[: total - sum(floors)]:
        floors[i] += 1
    return floors


def _cents(d: Decimal) -> int:
    return int(d.scaleb(2))


def _usd(cents: int) -> Decimal:
    return Decimal(cents).scaleb(-2)


# -- per-day series --------------------------------------------------------------------------------


def daily_costs(
    ledger: Ledger,
    start: float,
    end: float,
    *,
    aggregate: Sequence[str] = ("team",),
    tz: str | ZoneInfo = "UTC",
    rules: PricingRules | None = None,
    as_of: float | None = None,
) -> list[DailyCost]:
    """The cost of ``[start, end)`` per local calendar day of ``tz`` (a day is 23 or 25 hours on a
    DST change), oldest first; the first and last days are partial when ``start``/``end`` are not
    midnights. For forecasts: one call, one list, each day's figures obey the same rule as
    :func:`spend_report`'s (rows + other − adjustment + idle + unused = total)."""
    zone = ZoneInfo(tz) if isinstance(tz, str) else tz
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise InputError(f"bad window [{start}, {end}]", field="end")
    cut = end if as_of is None else max(start, min(end, as_of))
    priced = apply_rules(ledger, start, end, rules, as_of=as_of) if rules is not None else None
    out: list[DailyCost] = []
    day = datetime.fromtimestamp(start, zone).date()
    while True:
        d0 = max(start, datetime.combine(day, time(0), tzinfo=zone).timestamp())
        d1 = min(cut, datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone).timestamp())
        if d0 >= cut and out:
            break
        rep = _report(
            ledger,
            priced,
            d0,
            max(d0, d1),
            aggregate,
            rules,
            False,
            Filters(),
            as_of if priced is None else None,
            DEFAULT_UNIT_PRICES,
        )
        unused = rep.reservation_unused.total_cost_usd
        out.append(
            DailyCost(
                day,
                d0,
                max(d0, d1),
                {r.key: r.total_cost_usd for r in rep.rows},
                rep.idle.total_cost_usd,
                rep.adjustment.total_cost_usd,
                unused,
                rep.node_cost_usd + unused,
            )
        )
        day += timedelta(days=1)
        if d1 >= cut:
            break
    return out


__all__ = [
    "DAY_S",
    "daily_costs",
    "daily_spend_reports",
    "job_costs_usd",
    "scope_spend_usd",
    "spend_report",
]
