"""The "Savings analysis" dashboard: ``gpufleet-savings.json``, uid ``gpufleet-savings``."""

from __future__ import annotations

import json

from gpufleet.dashboards.builder import JSON, USD, Board, Q, bargauge, piechart, stat, timeseries
from gpufleet.dashboards.promql import COST, cost_rate, dedup, idle_gpu_cost, savings_by_lever


def savings() -> JSON:
    b = Board(
        "gpufleet-savings",
        "gpufleet / Savings analysis",
        "What gpufleet saved against a fixed on-demand cluster sized for the peak (gpufleet_total_savings_usd, "
        "lever by lever: spot, sharing, autoscaling, idle removal, …) and the return on it.",
        ["cost", "savings"],
        [],
        time_from="now-30d",
    )
    total = f"sum({savings_by_lever()})"
    spend = f"sum({dedup(COST, 'gpufleet_cost_usd_total')})"
    b.row("Savings")
    b.add(
        stat(
            "Total savings",
            "All levers.",
            [Q(total)],
            unit=USD,
            decimals=2,
            graph=True,
            steps=[{"color": "red", "value": None}, {"color": "green", "value": 0}],
            w=6,
        ),
        stat(
            "Savings rate",
            "Savings over what the fixed on-demand cluster would have cost "
            "(savings + spend); both counted over the series' whole history.",
            [Q(f"{total} / ({total} + {spend})")],
            unit="percentunit",
            decimals=1,
            w=6,
        ),
        stat(
            "ROI (saved per dollar spent)",
            "Dollars saved for each dollar spent.",
            [Q(f"{total} / {spend}")],
            unit="none",
            decimals=2,
            w=6,
        ),
        stat(
            "Idle GPU cost now ($/h)",
            "GPUs allocated to no job times the nodes' GPU price: what removing idle capacity would still save.",
            [Q(idle_gpu_cost())],
            unit=USD,
            decimals=2,
            w=6,
        ),
    )
    levers = [
        ("spot", "Spot"),
        ("sharing", "Sharing (fractions, MIG)"),
        ("autoscaling", "Autoscaling"),
        ("idle_removal", "Idle removal"),
    ]
    b.add(
        *[
            stat(
                f"{title} savings",
                f'gpufleet_total_savings_usd{{lever="{lever}"}} (0 when the lever is not used).',
                [Q(f"sum({savings_by_lever(f'lever={json.dumps(lever)}')}) or vector(0)")],
                unit=USD,
                decimals=2,
                w=6,
            )
            for lever, title in levers
        ]
    )
    b.row("By lever")
    b.add(
        bargauge(
            "Savings by lever",
            "Each lever's part; negative levers (e.g. headroom) cost money.",
            [Q(f"sort_desc({savings_by_lever()})", "{{lever}}", instant=True)],
            unit=USD,
            min_=None,
        ),
        timeseries(
            "Savings by lever over time",
            "gpufleet_total_savings_usd by lever.",
            [Q(savings_by_lever(), "{{lever}}")],
            unit=USD,
        ),
    )
    b.add(
        timeseries(
            "Spend and savings",
            "Dollars spent (gpufleet_cost_usd_total) and saved, cumulative.",
            [Q(spend, "spend"), Q(total, "savings")],
            unit=USD,
        ),
        piechart(
            "Burn rate by capacity type",
            "Dollars per hour now on spot, on-demand and reserved capacity.",
            [Q(f"sum by (capacity_type) ({cost_rate()})", "{{capacity_type}}", instant=True)],
            w=6,
        ),
        stat(
            "Spot share of node cost",
            "Node $/h on spot nodes over all nodes' $/h (node_total_hourly_cost, kubecost_node_is_spot).",
            [
                Q(
                    "sum(max by (node) (node_total_hourly_cost) * on (node) max by (node) (kubecost_node_is_spot))"
                    " / sum(max by (node) (node_total_hourly_cost))"
                )
            ],
            unit="percentunit",
            decimals=1,
            w=6,
            h=8,
        ),
    )
    return b.build()
