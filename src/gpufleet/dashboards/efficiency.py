"""The "Efficiency" dashboard: ``gpufleet-efficiency.json``, uid ``gpufleet-efficiency``."""

from __future__ import annotations

from gpufleet.dashboards.builder import (
    JSON,
    PCT,
    UNDERUSED_PCT,
    USD,
    UTIL_STEPS,
    Board,
    Q,
    custom_var,
    props_override,
    query_var,
    stat,
    table,
    timeseries,
    xychart,
)
from gpufleet.dashboards.promql import CONTAINER, HELD, cost_rate, dedup, gpu_util, idle_gpu_cost, pod_cost_rate, sel


def efficiency() -> JSON:
    b = Board(
        "gpufleet-efficiency",
        "gpufleet / Efficiency",
        f"GPU utilization against what it costs. Wasteful: a workload costing at least $min_cost per hour "
        f"whose GPUs average under {UNDERUSED_PCT} % utilization.",
        ["gpu", "cost", "efficiency"],
        [
            query_var("namespace", "Namespace", "pod_hourly_cost_usd", "namespace"),
            custom_var("min_cost", "Wasteful from ($/h)", ["0", "1", "5", "10", "25", "50", "100"], "1"),
        ],
        time_from="now-24h",
    )
    ns = 'namespace=~"$namespace"'
    util_pod = f"avg by (namespace, pod) ({gpu_util(ns, HELD)})"
    cost_pod = pod_cost_rate(ns)
    wasted = f"{cost_pod} >= $min_cost and on (namespace, pod) ({util_pod} < {UNDERUSED_PCT})"
    held_gpus = f"max by (Hostname, gpu) ({sel('DCGM_FI_DEV_GPU_UTIL', ns, HELD)})"
    burn = f"sum({cost_rate(ns)})"
    b.row("Waste")
    b.add(
        stat(
            "Wasted spend rate ($/h)",
            f"What the wasteful workloads (≥ $min_cost/h, under {UNDERUSED_PCT} %) cost per hour.",
            [Q(f"sum({wasted})")],
            unit=USD,
            decimals=2,
            no_value="$0",
            steps=[{"color": "green", "value": None}, {"color": "red", "value": 0.01}],
            w=6,
        ),
        stat(
            "Share of spend on underused GPUs",
            f"$/h of pods under {UNDERUSED_PCT} % over all pods' $/h.",
            [Q(f"sum({cost_pod} and on (namespace, pod) ({util_pod} < {UNDERUSED_PCT})) / sum({cost_pod})")],
            unit="percentunit",
            decimals=1,
            no_value="0%",
            steps=[
                {"color": "green", "value": None},
                {"color": "orange", "value": 0.1},
                {"color": "red", "value": 0.3},
            ],
            w=6,
        ),
        stat(
            "Cost per busy GPU-hour",
            "Burn rate over the utilization-weighted GPUs held: what an hour of GPU work really costs.",
            [Q(f"{burn} / (sum({held_gpus}) / 100)")],
            unit=USD,
            decimals=2,
            w=6,
        ),
        stat(
            "Idle capacity cost ($/h)",
            "GPUs allocated to no job times the nodes' GPU price.",
            [Q(idle_gpu_cost())],
            unit=USD,
            decimals=2,
            w=6,
        ),
    )
    b.add(
        xychart(
            "Utilization against cost per hour",
            "One point per pod: its GPUs' mean utilization (x) and "
            "its $/h (y). Bottom-right is efficient; top-left is wasteful.",
            (Q(util_pod), "GPU utilization", PCT),
            (Q(cost_pod), "$/h", USD),
        ),
        table(
            "Wasteful workloads",
            f"Pods costing at least $min_cost/h whose GPUs average under "
            f"{UNDERUSED_PCT} % utilization, most expensive first.",
            [
                (Q(wasted), "$/h", USD, None),
                (
                    Q(f"{util_pod} < {UNDERUSED_PCT} and on (namespace, pod) ({cost_pod} >= $min_cost)"),
                    "GPU utilization",
                    PCT,
                    UTIL_STEPS,
                ),
            ],
            h=10,
            sort_by="$/h",
        ),
    )
    b.row("Over time")
    b.add(
        timeseries(
            "Utilization and burn rate",
            "Mean utilization of held GPUs (left) against the burn rate (right).",
            [
                Q(f"avg({held_gpus})", "GPU utilization"),
                Q(burn, "burn rate ($/h)"),
            ],
            unit=PCT,
            overrides=[
                props_override(
                    "burn rate ($/h)",
                    [
                        {"id": "unit", "value": USD},
                        {"id": "custom.axisPlacement", "value": "right"},
                    ],
                )
            ],
        ),
        timeseries(
            "GPUs allocated and used",
            "GPUs containers are allocated (container_gpu_allocation) "
            "against the utilization-weighted GPUs in use (DCGM).",
            [
                Q(f"sum({dedup(CONTAINER, sel('container_gpu_allocation', ns))})", "allocated"),
                Q(f"sum({held_gpus}) / 100", "used (utilization-weighted)"),
            ],
        ),
    )
    b.add(
        table(
            "Efficiency by namespace",
            "Each namespace: mean utilization of its GPUs (red under "
            f"{UNDERUSED_PCT} %), $/h, GPUs allocated and the cost of a busy GPU-hour.",
            [
                (Q(f"avg by (namespace) ({gpu_util(ns, HELD)})"), "GPU utilization", PCT, UTIL_STEPS),
                (Q(f"sum by (namespace) ({cost_pod})"), "$/h", USD, None),
                (
                    Q(f"sum by (namespace) ({dedup(CONTAINER, sel('container_gpu_allocation', ns))})"),
                    "GPUs allocated",
                    "short",
                    None,
                ),
                (
                    Q(f"sum by (namespace) ({cost_pod}) / (sum by (namespace) ({gpu_util(ns, HELD)}) / 100)"),
                    "$ per busy GPU-hour",
                    USD,
                    None,
                ),
            ],
            w=24,
            sort_by="$/h",
        ),
    )
    return b.build()
