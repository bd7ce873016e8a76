"""The shape of a cost report: its dimensions, filters, lines and per-day series (types only).

A :class:`CostReport` is what :func:`gpufleet.cost.spend.spend_report` returns — every figure of
money (the usage API, budgets, forecasts, anomalies, ROI) is read from one. Its lines obey, column
by column (GPU, CPU, memory, total), exact to the cent::

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

Dimensions (``aggregate``): ``team``, ``project``, ``namespace``, ``experiment``, ``cost_center``
(the job label ``cost-center``), ``job``, ``node``, ``pool``, ``gpu_model``, ``capacity_type``,
``priority`` (the job's priority class) and ``label:<key>`` (a missing label groups as ``""``);
the ledger's own spellings (``job_id``, ``priority_class``) are accepted too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from fractions import Fraction

from gpufleet.errors import InputError

from .allocation import AGGREGATE_FIELDS

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
    # the charge before rounding to cents (held exact × multiplier); see CostLine.exact_usd
    exact_usd: Fraction = field(default=Fraction(0), compare=False)

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
    # the same, exact (not rounded): what ROI compares against its counterfactual
    node_cost_exact_usd: Fraction = field(default=Fraction(0), repr=False, compare=False)
    filters: Filters = field(default_factory=Filters)
    rules_source: str | None = None

    def row(self, *key: str) -> ReportLine:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)

    def by_key(self) -> dict[tuple[str, ...], ReportLine]:
        return {r.key: r for r in self.rows}


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
