"""The money families of ``/metrics`` that read the ledger: what each job has been charged
(``gpufleet_cost_usd``), what each running pod has cost (``gpufleet_pod_cost_usd``), the budgets, and
the savings of the ROI report (``gpufleet_total_savings_usd``).

Dollars come from the ledger through :func:`gpufleet.cost.spend.spend_report` with the server's
pricing rules, as ``/v1/usage`` computes them. They are expensive: the collector
(:class:`gpufleet.api.metrics.collectors.StoreCollector`) recomputes them at most every
``cache_s`` (:func:`compute_money`) and ``savings_cache_s`` (:func:`compute_savings`) seconds.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpufleet.api.context import ApiContext
from gpufleet.api.metrics.audience import Owners
from gpufleet.cost.budgets.status import budget_status, enforcing
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.roi import roi_report
from gpufleet.cost.rules import apply_rules
from gpufleet.cost.spend import spend_report
from gpufleet.errors import GpufleetError
from gpufleet.io.catalog import load_catalog
from gpufleet.services.budgets import scope_spend
from gpufleet.store import repo
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.store.repo import scrape

log = logging.getLogger(__name__)

COST_LABELS = ("job", "team", "namespace", "project", "gpu_type", "capacity_type")
POD_LABELS = ("namespace", "pod", "gpu_type", "capacity_type")
SAVINGS_WINDOW_S = 30 * 86400.0  # the ROI report's default window (/v1/roi)


@functools.lru_cache(maxsize=1)
def _catalog() -> PriceCatalog:
    return load_catalog()


@dataclass(frozen=True, slots=True)
class Money:
    """The families that read the ledger (cached)."""

    cost: list[tuple[tuple[str, ...], float]]  # COST_LABELS values → dollars
    pod_cost: list[tuple[tuple[str, ...], float]]  # POD_LABELS values → dollars
    budgets: list[tuple[str, str, float, float, float, bool]]  # name, action, spend, limit, percent, enforcing
    pod_teams: dict[str, str]  # pod → team, of pod_cost's pods
    budget_teams: dict[str, str]  # budget name → owning team ("": none)


def money_families(
    money: Money, owners: Owners, high: Callable[[str, Sequence[str], float], float]
) -> Iterator[Metric]:
    """The ledger's families from ``money``; the teams behind its pods and budgets go to ``owners``."""
    for name, team in money.pod_teams.items():
        owners.pods.setdefault(name, team)
    owners.budgets.update(money.budget_teams)
    cost = CounterMetricFamily(
        "gpufleet_cost_usd",
        "Dollars charged to each job since the ledger began (the ledger's all-time report by job, with "
        "the server's pricing rules, as gpufleet cost shows it), by job (id), team, namespace, project, "
        "gpu_type (GPU model of the nodes it ran on) and capacity_type (on-demand, spot, reserved); "
        "ended jobs keep their final value",
        labels=COST_LABELS,
    )
    for labels, usd in money.cost:
        cost.add_metric(list(labels), high("cost", labels, usd))
    yield cost
    pod = GaugeMetricFamily(
        "gpufleet_pod_cost_usd",
        "Dollars each running pod (a run of a job: <job>-r<run> on the server, the Kubernetes Job name on "
        "a cluster) has cost since it started, by namespace, pod, gpu_type and capacity_type",
        labels=POD_LABELS,
    )
    for labels, usd in money.pod_cost:
        pod.add_metric(list(labels), usd)
    yield pod
    pct = GaugeMetricFamily(
        "gpufleet_budget_percentage",
        "Spend of each enabled budget in its current period as a percentage of its limit, by budget (name)",
        labels=("budget",),
    )
    spend = GaugeMetricFamily(
        "gpufleet_budget_spend_usd",
        "Dollars spent in each enabled budget's current period, by budget (name)",
        labels=("budget",),
    )
    limit = GaugeMetricFamily(
        "gpufleet_budget_limit_usd",
        "Each enabled budget's limit per period in dollars, by budget (name)",
        labels=("budget",),
    )
    force = GaugeMetricFamily(
        "gpufleet_budget_enforcing",
        "1 while a budget's action is in force (over its limit past its grace period), else 0, by budget "
        "(name) and action (alert: never in force, throttle, block)",
        labels=("budget", "action"),
    )
    for name, action, spent, lim, percent, in_force in money.budgets:
        pct.add_metric([name], percent)
        spend.add_metric([name], spent)
        limit.add_metric([name], lim)
        force.add_metric([name, action], 1.0 if in_force else 0.0)
    yield from (pct, spend, limit, force)


def compute_money(ctx: ApiContext) -> Money:
    """The ledger's figures now: each job's charge, each open pod's cost, each enabled budget."""
    now = ctx.clock.now()
    rules = ctx.pricing_rules
    cost: list[tuple[tuple[str, ...], float]] = []
    pod_cost: list[tuple[tuple[str, ...], float]] = []
    budgets: list[tuple[str, str, float, float, float, bool]] = []
    budget_teams: dict[str, str] = {}
    with ctx.database.session(readonly=True) as s:
        start = scrape.ledger_start(s)
        if start is not None and now > start:
            ledger = repo.load_ledger(s, start, now, now)
            rep = spend_report(
                ledger,
                start,
                now,
                aggregate=("job", "team", "namespace", "project", "gpu_model", "capacity_type"),
                rules=rules,
                as_of=now,
            )
            cost = [(tuple(r.key), float(r.total_cost_usd)) for r in rep.rows]
        pods = scrape.open_pods(s)
        pod_teams = {p.pod: p.team for p in pods}
        first = min((p.started_at for p in pods), default=None)
        if first is not None and now > first:
            pod_ledger = repo.load_ledger(s, first, now, now, by_pod=True, open_only=True)
            rep = spend_report(
                pod_ledger,
                first,
                now,
                aggregate=("namespace", "job_id", "gpu_model", "capacity_type"),
                rules=rules,
                as_of=now,
            )
            names = {p.pod for p in pods}
            pod_cost = [(tuple(r.key), float(r.total_cost_usd)) for r in rep.rows if r.key[1] in names]
        for row in budgets_repo.list_budgets(s, enabled_only=True):
            b = budgets_repo.budget_of(row)
            budget_teams[b.name] = budgets_repo.scope_of(row).team or ""
            period = b.period_at(now)
            spent = scope_spend(s, b.scope, period.start, period.end, now, rules=rules)
            status = budget_status(b, period, spent, now)
            in_force = enforcing(b, budgets_repo.over_since(s, b.id, period.start), now, over=status.over)
            budgets.append((b.name, b.action, status.spend_usd, b.limit_usd, status.percent, in_force))
    return Money(cost, pod_cost, budgets, pod_teams, budget_teams)


def savings_family(levers: dict[str, float]) -> Iterator[Metric]:
    """``gpufleet_total_savings_usd`` from the ROI report's levers (:func:`compute_savings`)."""
    fam = GaugeMetricFamily(
        "gpufleet_total_savings_usd",
        "Dollars saved against a fixed on-demand cluster sized for the peak over the last 30 days (clipped "
        "to the observed history), by lever: sharing, headroom, autoscaling, right_sizing, spot, off_peak, "
        "other (the ROI report's waterfall; the levers add up to the total savings)",
        labels=("lever",),
    )
    for lever, usd in levers.items():
        fam.add_metric([lever], usd)
    yield fam


def compute_savings(ctx: ApiContext) -> dict[str, float]:
    """The ROI report's levers over the last :data:`SAVINGS_WINDOW_S` (none without a ledger)."""
    now = ctx.clock.now()
    start = now - SAVINGS_WINDOW_S
    with ctx.database.session(readonly=True) as s:
        if scrape.ledger_start(s) is None:
            return {}
        ledger = repo.load_ledger(s, start, now, now)
    end = max(now, start + 1e-6)
    if ctx.pricing_rules is not None:
        ledger = apply_rules(ledger, start, end, ctx.pricing_rules, as_of=now).ledger
    try:
        report = roi_report(ledger, _catalog(), start, end, as_of=now)
    except GpufleetError as e:
        log.info("metrics: no savings figures: %s", e)
        return {}
    return {k: round(float(v), 4) + 0.0 for k, v in report.levers_usd.items()}  # float noise off; no -0.0
