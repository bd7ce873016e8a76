"""The "Budget alerts" dashboard: ``gpufleet-budgets.json``, uid ``gpufleet-budgets``."""

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
    state_timeline,
    table,
    timeseries,
)
from gpufleet.dashboards.promql import sel


def budgets() -> JSON:
    b = Board(
        "gpufleet-budgets",
        "gpufleet / Budget alerts",
        "Where each budget stands (percent of its limit, spend against limit, throttles and blocks in force) "
        "and the history of its alerts (the Gpufleet Budget* rules of gpufleet-alerts.yml).",
        ["cost", "budgets", "alerts"],
        [query_var("budget", "Budget", "gpufleet_budget_percentage", "budget")],
        time_from="now-7d",
    )
    bs = 'budget=~"$budget"'
    pct = f"max by (budget) ({sel('gpufleet_budget_percentage', bs)})"
    enforcing = f"max by (budget, action) ({sel('gpufleet_budget_enforcing', bs)})"
    alerts = sel("ALERTS", 'alertname=~"GpufleetBudget.*"', bs)
    red_from_one: list[JSON] = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    b.row("Now")
    b.add(
        stat("Budgets", "Budgets selected.", [Q(f"count({pct})")], w=6),
        stat(
            "Past 80 %",
            "Budgets at 80 % of their limit or more.",
            [Q(f"count({pct} >= 80)")],
            no_value="0",
            steps=[{"color": "green", "value": None}, {"color": "orange", "value": 1}],
            w=6,
        ),
        stat(
            "Over the limit",
            "Budgets at 100 % or more.",
            [Q(f"count({pct} >= 100)")],
            no_value="0",
            steps=red_from_one,
            w=6,
        ),
        stat(
            "Throttling or blocking",
            "Budgets whose throttle or block is in force.",
            [Q(f"count({enforcing} == 1)")],
            no_value="0",
            steps=red_from_one,
            w=6,
        ),
    )
    b.add(
        bargauge(
            "Budget utilization",
            "Percent of the limit spent this period: blue past 50 % (info), orange "
            "past 80 % (warning), red past 100 % (critical).",
            [Q(f"sort_desc({pct})", "{{budget}}", instant=True)],
            unit=PCT,
            steps=BUDGET_STEPS,
            max_=120,
        ),
        table(
            "Budgets now",
            "Spend, limit, percent, the budget's enforcement action and whether it is in force.",
            [
                (Q(f"max by (budget) ({sel('gpufleet_budget_spend_usd', bs)})"), "Spend", USD, None),
                (Q(f"max by (budget) ({sel('gpufleet_budget_limit_usd', bs)})"), "Limit", USD, None),
                (Q(pct), "Used", PCT, BUDGET_STEPS),
                (Q(enforcing), "Enforcing", "bool_yes_no", ALERTING_STEPS),
            ],
            sort_by="Used",
        ),
    )
    b.row("History")
    b.add(
        timeseries(
            "Budget utilization history",
            "Percent of the limit; the lines are the 50/80/100 % thresholds.",
            [Q(pct, "{{budget}}")],
            unit=PCT,
            steps=BUDGET_STEPS,
            threshold_style="dashed",
        ),
        timeseries(
            "Spend against limit",
            "Spend this period (solid) and the limit (dashed), per budget.",
            [
                Q(f"max by (budget) ({sel('gpufleet_budget_spend_usd', bs)})", "{{budget}} spend"),
                Q(f"max by (budget) ({sel('gpufleet_budget_limit_usd', bs)})", "{{budget}} limit"),
            ],
            unit=USD,
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": ".* limit$"},
                    "properties": [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}}],
                }
            ],
        ),
    )
    b.add(
        state_timeline(
            "Throttles and blocks in force",
            "1 while the budget's throttle or block applies.",
            [Q(enforcing, "{{budget}} ({{action}})")],
            mappings=[
                {
                    "options": {
                        "0": {"color": "green", "index": 0, "text": "not enforcing"},
                        "1": {"color": "red", "index": 1, "text": "enforcing"},
                    },
                    "type": "value",
                }
            ],
        ),
        state_timeline(
            "Budget alerts history",
            "The budget alerts over time (pending and firing), from "
            "Prometheus' ALERTS series: load gpufleet-alerts.yml in the Prometheus this reads.",
            [Q(f"max by (alertname, budget, alertstate) ({alerts})", "{{budget}} {{alertname}} ({{alertstate}})")],
            mappings=[{"options": {"1": {"color": "orange", "index": 0, "text": "active"}}, "type": "value"}],
            steps=[{"color": "orange", "value": None}],
        ),
    )
    b.add(
        table(
            "Budget alerts now",
            "Budget alerts pending or firing now.",
            [
                (Q(f"max by (alertname, budget, severity, alertstate) ({alerts})"), "Active", "short", None),
            ],
            w=24,
            h=6,
            hide=("Time", "Active"),
        ),
    )
    return b.build()
