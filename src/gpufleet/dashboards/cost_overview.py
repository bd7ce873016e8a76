"""The "Cost overview" dashboard: ``gpufleet-cost-overview.json``, uid ``gpufleet-cost-overview``."""

from __future__ import annotations

from gpufleet.dashboards.builder import (
    ALERTING_STEPS,
    BUDGET_STEPS,
    JSON,
    PCT,
    USD,
    Board,
    Q,
    bargauge,
    query_var,
    stat,
    table,
    timeseries,
)
from gpufleet.dashboards.promql import cost_increase, cost_rate, savings_by_lever


def cost_overview() -> JSON:
    b = Board(
        "gpufleet-cost-overview",
        "gpufleet / Cost overview",
        "What the fleet costs: spend over 24 hours, 7 days and the time range, daily and weekly trends, the "
        "burn rate by team, and where each budget stands.",
        ["cost"],
        [query_var("team", "Team", "gpufleet_cost_usd_total", "team")],
        time_from="now-30d",
    )
    t = 'team=~"$team"'
    burn = f"sum({cost_rate(t)})"
    b.row("Spend")
    b.add(
        stat(
            "Spend, last 24 hours",
            "Dollars gpufleet_cost_usd_total grew by in 24 hours.",
            [Q(f"sum({cost_increase('24h', t)})")],
            unit=USD,
            decimals=2,
            w=4,
        ),
        stat(
            "Spend, last 7 days",
            "Dollars over 7 days.",
            [Q(f"sum({cost_increase('7d', t)})")],
            unit=USD,
            decimals=2,
            w=4,
        ),
        stat(
            "Spend in the time range",
            "Dollars over the dashboard's time range.",
            [Q(f"sum({cost_increase('$__range', t)})")],
            unit=USD,
            decimals=2,
            w=4,
        ),
        stat(
            "Burn rate now ($/h)",
            "What running work costs per hour now (gpufleet_hourly_cost_rate_usd).",
            [Q(burn)],
            unit=USD,
            decimals=2,
            graph=True,
            w=4,
        ),
        stat(
            "30-day projection at this rate",
            "The burn rate now, for 720 hours.",
            [Q(f"{burn} * 720")],
            unit=USD,
            decimals=0,
            w=4,
        ),
        stat(
            "Savings to date",
            "gpufleet_total_savings_usd, all levers (see the Savings analysis dashboard).",
            [Q(f"sum({savings_by_lever()})")],
            unit=USD,
            decimals=0,
            steps=[{"color": "red", "value": None}, {"color": "green", "value": 0}],
            w=4,
        ),
    )
    b.row("Trend")
    b.add(
        timeseries(
            "Daily spend by team",
            "Dollars per day (one bar a day), by team.",
            [Q(f"sum by (team) ({cost_increase('$__interval', t)})", "{{team}}", interval="1d")],
            unit=USD,
            stack=True,
            bars=True,
            interval="1d",
            legend_calcs=("sum", "mean"),
        ),
        timeseries(
            "Weekly spend by team",
            "Dollars per week (one bar a week), by team.",
            [Q(f"sum by (team) ({cost_increase('$__interval', t)})", "{{team}}", interval="7d")],
            unit=USD,
            stack=True,
            bars=True,
            interval="7d",
            legend_calcs=("sum", "mean"),
        ),
    )
    b.add(
        timeseries(
            "Burn rate by team ($/h)",
            "Dollars per hour of the work running, by team.",
            [Q(f"sum by (team) ({cost_rate(t)})", "{{team}}")],
            unit=USD,
            stack=True,
            w=24,
        ),
    )
    b.row("Budgets")
    b.add(
        bargauge(
            "Budget status",
            "Spend in the budget's period as a percent of its limit: blue past 50 %, "
            "orange past 80 %, red past 100 % (the alert thresholds).",
            [Q("sort_desc(max by (budget) (gpufleet_budget_percentage))", "{{budget}}", instant=True)],
            unit=PCT,
            steps=BUDGET_STEPS,
            max_=120,
        ),
        table(
            "Budgets",
            "Each budget: spend this period, limit, percent and whether its throttle or block is in force.",
            [
                (Q("max by (budget) (gpufleet_budget_spend_usd)"), "Spend", USD, None),
                (Q("max by (budget) (gpufleet_budget_limit_usd)"), "Limit", USD, None),
                (Q("max by (budget) (gpufleet_budget_percentage)"), "Used", PCT, BUDGET_STEPS),
                (Q("max by (budget, action) (gpufleet_budget_enforcing)"), "Enforcing", "bool_yes_no", ALERTING_STEPS),
            ],
            sort_by="Used",
        ),
    )
    return b.build()
