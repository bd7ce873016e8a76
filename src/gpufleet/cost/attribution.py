"""Cost attribution: who pays what over a window, by any dimension, with pricing rules.

:func:`cost_report` is the one entry point for interfaces (API, CLI) and other engines (budgets,
forecasts): it prices the ledger with the rules (:func:`gpufleet.cost.rules.apply_rules`),
allocates it (:func:`gpufleet.cost.ledger.allocate`), and then applies the priority chargeback.

Dimensions (``aggregate``): ``team``, ``project``, ``namespace``, ``experiment``, ``cost_center``
(the job label ``cost-center``), ``job``, ``node``, ``pool``, ``gpu_model``, ``capacity_type``,
``priority`` (the job's priority class) and ``label:<key>`` (a missing label groups as ``""``).

The lines of a report and the rule that ties them, column by column (GPU, CPU, memory, total),
exact to the cent::

    sum(rows) + other − adjustment + idle + reservation_unused == totals

- ``rows``: what each group is *charged* (priority multipliers included);
- ``other``: the charges of the groups that the filters left out (zero without filters);
- ``adjustment``: charged − what the groups held at node prices, i.e. the priority multipliers'
  effect (a chargeback policy: it moves money between teams and the platform, it does not change
  what the nodes cost);
- ``idle``: node capacity no job held (zero, or only what could not be spread, with
  ``spread_idle``);
- ``reservation_unused``: reserved commitment that no node held (a GPU cost, never spread);
- ``totals``: what the capacity cost: the nodes at the rules' prices plus unused commitment.

Rounding. ``allocate`` rounds the held cost of each (group, priority class) to cents with the
largest-remainder method so that those lines and idle add up to the rounded node cost. A group's
charge is then the exact sum of its classes' cents times their multipliers, rounded half up, its
components by largest remainder; the adjustment is the difference of rounded figures, so the rule
above holds to the cent by construction, and (property-tested) the node cost is the exact cost
rounded half up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from zoneinfo import ZoneInfo

from gpufleet.errors import InputError

from .ledger import (
    AGGREGATE_FIELDS,
    DEFAULT_UNIT_PRICES,
    IDLE_KEY,
    Allocation,
    CostLine,
    Ledger,
    UnitPrices,
    allocate,
)
from .rules import PricedLedger, PricingRules, ReservationCost, apply_rules

COST_CENTER_LABEL = "cost-center"
TOTAL_KEY = "__total__"
OTHER_KEY = "__other__"
ADJUSTMENT_KEY = "__adjustment__"
RESERVED_KEY = "__reservation_unused__"

# Dimension names as people write them → the ledger's aggregate field.
DIMENSIONS: dict[str, str] = {
    "team": "team",
    "project": "project",
    "namespace": "namespace",
    "experiment": "experiment",
    "cost_center": f"label:{COST_CENTER_LABEL}",
    "job": "job_id",
    "node": "node",
    "pool": "pool",
    "gpu_model": "gpu_model",
    "capacity_type": "capacity_type",
    "priority": "priority_class",
}


def ledger_field(name: str) -> str:
    """The ledger's aggregate field for a dimension name (``job`` → ``job_id``, ``cost_center`` →
    ``label:cost-center``, ``priority`` → ``priority_class``; ``label:<key>`` as is)."""
    if name in DIMENSIONS:
        return DIMENSIONS[name]
    if name.startswith("label:") and len(name) > len("label:"):
        return name
    if name in AGGREGATE_FIELDS:  # the ledger's own spellings (job_id, priority_class)
        return name
    raise InputError(f"unknown aggregate '{name}' (known: {', '.join(DIMENSIONS)}, label:<key>)", field="aggregate")


@dataclass(frozen=True, slots=True)
class Filters:
    """Which rows to show: a team and/or label values (all must match). Filtering hides rows; the
    idle line and the totals stay the cluster's, and what is hidden is the ``other`` line."""

    team: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.team is None and not self.labels


@dataclass(frozen=True, slots=True)
class ReportLine:
    """One line of a report in USD (cents). ``adjustment_usd`` is the part of ``total_cost_usd``
    due to priority multipliers (charged − held at node prices)."""

    key: tuple[str, ...]
    gpu_cost_usd: Decimal
    cpu_cost_usd: Decimal
    memory_cost_usd: Decimal
    total_cost_usd: Decimal
    gpu_seconds: float = 0.0
    adjustment_usd: Decimal = Decimal("0.00")

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0


@dataclass(frozen=True, slots=True)
class ReservationLine:
    """A commitment over the window: what it cost, what the reserved nodes it covered cost
    (``covered``), and what no node held (``unused``). ``committed = covered + unused``."""

    name: str
    gpu_model: str
    gpus: int
    committed_gpu_hours: float
    committed_usd: Decimal
    covered_usd: Decimal
    unused_usd: Decimal


@dataclass(frozen=True)
class CostReport:
    """The cost of a window by ``aggregate`` (see the module docstring for the lines' rule)."""

    aggregate: tuple[str, ...]
    window_start: float
    window_end: float  # effective end (≤ as_of)
    rows: tuple[ReportLine, ...]  # sorted by key
    other: ReportLine
    adjustment: ReportLine
    idle: ReportLine
    reservation_unused: ReportLine
    reservations: tuple[ReservationLine, ...]
    totals: ReportLine
    node_cost_usd: Decimal  # what the nodes cost at the rules' prices (totals − unused commitment)
    filters: Filters = field(default_factory=Filters)
    rules_source: str | None = None

    def row(self, *key: str) -> ReportLine:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)

    def by_key(self) -> dict[tuple[str, ...], ReportLine]:
        return {r.key: r for r in self.rows}


def cost_report(
    ledger: Ledger,
    start: float,
    end: float,
    *,
    aggregate: Sequence[str] = ("team",),
    rules: PricingRules | None = None,
    spread_idle: bool = False,
    filters: Filters | None = None,
    as_of: float | None = None,
    unit_prices: UnitPrices = DEFAULT_UNIT_PRICES,
) -> CostReport:
    """What ``[start, end)`` cost by ``aggregate`` (dimension names, see the module docstring),
    with ``rules`` (None: the ledger's recorded prices, no multipliers), idle optionally spread
    over the rows in proportion to their use, and rows optionally filtered. ``as_of`` ends the
    window early and ends what is still open (as in :func:`allocate`)."""
    priced = apply_rules(ledger, start, end, rules, as_of=as_of) if rules is not None else None
    return _report(ledger, priced, start, end, aggregate, rules, spread_idle, filters or Filters(), as_of, unit_prices)


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

    # Charges per output group: exact cents (held cents × multiplier) per component.
    shown: dict[tuple[str, ...], _Acc] = {}
    hidden: dict[tuple[str, ...], _Acc] = {}
    for line in alloc.rows:
        key = line.key
        visible = (team_at < 0 or key[team_at] == filters.team) and all(
            key[i] == filters.labels[k] for k, i in label_at.items()
        )
        mult = rules.priority_multiplier(key[prio_at]) if rules is not None and prio_at >= 0 else Fraction(1)
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
        filters=filters,
        rules_source=None if rules is None else rules.source,
    )


class _Acc:
    """One output group: held cents and charged exact cents per component, GPU-seconds."""

    __slots__ = ("charged", "gpu_seconds", "held")

    def __init__(self) -> None:
        self.held = [0, 0, 0]
        self.charged = [Fraction(0), Fraction(0), Fraction(0)]
        self.gpu_seconds = 0.0

    def add(self, line: CostLine, mult: Fraction) -> None:
        for i, v in enumerate((line.gpu_cost_usd, line.cpu_cost_usd, line.memory_cost_usd)):
            cents = _cents(v)
            self.held[i] += cents
            self.charged[i] += cents * mult
        self.gpu_seconds += line.gpu_seconds

    def charged_cents(self) -> list[int]:
        return _round_parts(self.charged)

    def line(self, key: tuple[str, ...]) -> ReportLine:
        c = self.charged_cents()
        return ReportLine(
            key, _usd(c[0]), _usd(c[1]), _usd(c[2]), _usd(sum(c)), self.gpu_seconds, _usd(sum(c) - sum(self.held))
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
    )


def _line(key: tuple[str, ...], line: CostLine) -> ReportLine:
    return ReportLine(
        key, line.gpu_cost_usd, line.cpu_cost_usd, line.memory_cost_usd, line.total_cost_usd, line.gpu_seconds
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


# -- per-day series -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DailyCost:
    """One local day of a series: charges per group and the day's other lines (USD, cents)."""

    day: date  # the local calendar day
    start: float  # UNIX seconds of its start (local midnight, or the series' start)
    end: float  # of its end (next local midnight, or the series' end)
    by_key: Mapping[tuple[str, ...], Decimal]  # charged totals per group
    idle_usd: Decimal
    adjustment_usd: Decimal
    reservation_unused_usd: Decimal
    total_usd: Decimal  # what the capacity cost that day (nodes + unused commitment)


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
    :func:`cost_report`'s (rows + other − adjustment + idle + unused = total)."""
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
    "COST_CENTER_LABEL",
    "DIMENSIONS",
    "CostReport",
    "DailyCost",
    "Filters",
    "ReportLine",
    "ReservationLine",
    "cost_report",
    "daily_costs",
    "ledger_field",
]
