"""The "Cluster and queue" dashboard: ``gpufleet-cluster-queue.json``, uid ``gpufleet-cluster-queue``."""

from __future__ import annotations

from gpufleet.dashboards.builder import (
    JSON,
    PCT,
    UNDERUSED_PCT,
    UTIL_STEPS,
    Board,
    Q,
    bargauge,
    gauge,
    heatmap,
    piechart,
    query_var,
    stat,
    timeseries,
)
from gpufleet.dashboards.promql import cost_rate, dedup, sel


def cluster_queue() -> JSON:
    b = Board(
        "gpufleet-cluster-queue",
        "gpufleet / Cluster and queue",
        "The fleet's GPUs (allocation, utilization, memory, temperature, power), spot against on-demand, "
        "and the scheduler (queue, waits, cycle time, admissions, preemptions, spot interruptions, "
        "autoscaler decisions).",
        ["gpu", "scheduler"],
        [
            query_var("node", "Node", "DCGM_FI_DEV_GPU_UTIL", "Hostname"),
            query_var("team", "Team", "gpufleet_jobs", "team"),
        ],
        time_from="now-6h",
    )
    n = 'Hostname=~"$node"'
    t = 'team=~"$team"'
    queue = dedup("team, reason", sel("gpufleet_queue_length", t))
    spot = "max by (node) (kubecost_node_is_spot)"

    def per_gpu(metric: str) -> str:
        return f"max by (Hostname, gpu) ({sel(metric, n)})"

    b.row("Capacity")
    b.add(
        stat(
            "GPUs allocated",
            "GPU-equivalents running jobs hold.",
            [Q("max(gpufleet_gpus_allocated)")],
            decimals=1,
            graph=True,
        ),
        stat("GPU capacity", "GPUs on nodes that are not removed.", [Q("max(gpufleet_gpus_capacity)")]),
        gauge(
            "Allocation",
            "Allocated over capacity.",
            [Q("max(gpufleet_gpus_allocated) / max(gpufleet_gpus_capacity) * 100")],
            steps=[{"color": "red", "value": None}, {"color": "orange", "value": 50}, {"color": "green", "value": 80}],
        ),
        stat("Jobs waiting", "The scheduler's queue now.", [Q(f"sum({queue})")], no_value="0", graph=True),
        stat(
            "Spot share of nodes",
            "Nodes on spot capacity (kubecost_node_is_spot).",
            [Q(f"sum({spot}) / count({spot})")],
            unit="percentunit",
            decimals=0,
        ),
        stat(
            "Store",
            "gpufleet_store_up: whether the database answered the last scrape.",
            [Q("min(gpufleet_store_up)")],
            steps=[{"color": "red", "value": None}, {"color": "green", "value": 1}],
            color_mode="background",
            mappings=[
                {"options": {"0": {"index": 0, "text": "DOWN"}, "1": {"index": 1, "text": "UP"}}, "type": "value"}
            ],
        ),
    )
    b.add(
        timeseries(
            "GPUs allocated and capacity",
            "GPU-equivalents held by jobs against the fleet's GPUs.",
            [
                Q("max(gpufleet_gpus_allocated)", "allocated"),
                Q("max(gpufleet_gpus_capacity)", "capacity"),
            ],
            w=8,
        ),
        piechart(
            "Spot and on-demand nodes",
            "Nodes by capacity type (kubecost_node_is_spot).",
            [
                Q(f"sum({spot})", "spot", instant=True),
                Q(f"sum(1 - {spot})", "on-demand", instant=True),
            ],
            unit="short",
        ),
        piechart(
            "Spot and on-demand spend ($/h)",
            "Burn rate by capacity type.",
            [Q(f"sum by (capacity_type) ({cost_rate(t)})", "{{capacity_type}}", instant=True)],
        ),
    )
    b.row("GPUs")
    b.add(
        timeseries(
            "GPU utilization per GPU",
            f"DCGM_FI_DEV_GPU_UTIL; the red band is under {UNDERUSED_PCT} %.",
            [Q(per_gpu("DCGM_FI_DEV_GPU_UTIL"), "{{Hostname}} GPU {{gpu}}")],
            unit=PCT,
            steps=UTIL_STEPS,
            threshold_style="line+area",
            min_=0,
            max_=100,
            legend_calcs=("mean", "lastNotNull"),
        ),
        timeseries(
            "GPU memory used per GPU",
            "Frame buffer used over total (DCGM_FI_DEV_FB_USED, _FREE).",
            [
                Q(
                    f"{per_gpu('DCGM_FI_DEV_FB_USED')} / ({per_gpu('DCGM_FI_DEV_FB_USED')} + "
                    f"{per_gpu('DCGM_FI_DEV_FB_FREE')}) * 100",
                    "{{Hostname}} GPU {{gpu}}",
                )
            ],
            unit=PCT,
            min_=0,
            max_=100,
            legend_calcs=("mean", "lastNotNull"),
        ),
    )
    b.add(
        heatmap(
            "GPU temperature",
            "How many GPUs are at each temperature over time (DCGM_FI_DEV_GPU_TEMP).",
            [Q(per_gpu("DCGM_FI_DEV_GPU_TEMP"), "{{Hostname}} GPU {{gpu}}")],
            unit="celsius",
        ),
        timeseries(
            "Power draw by node",
            "Sum of the node's GPUs' DCGM_FI_DEV_POWER_USAGE.",
            [Q(f"sum by (Hostname) ({per_gpu('DCGM_FI_DEV_POWER_USAGE')})", "{{Hostname}}")],
            unit="watt",
        ),
    )
    b.row("Queue and scheduler")
    wait = "rate(" + sel("gpufleet_queue_wait_seconds_bucket", t) + "[$__rate_interval])"
    b.add(
        timeseries(
            "Queue length by team",
            "Jobs waiting, by team.",
            [Q(f"sum by (team) ({queue})", "{{team}}")],
            stack=True,
            w=8,
        ),
        bargauge(
            "Why jobs wait",
            "Waiting jobs by the scheduler's reason.",
            [Q(f"sort_desc(sum by (reason) ({queue}))", "{{reason}}", instant=True)],
            w=8,
        ),
        timeseries(
            "Queue wait by team (p50, p95)",
            "How long admitted jobs waited (gpufleet_queue_wait_seconds); "
            "GpufleetQueueWaitHigh fires when p95 stays over 10 minutes.",
            [
                Q(f"histogram_quantile(0.5, max by (team, le) ({wait}))", "{{team}} p50"),
                Q(f"histogram_quantile(0.95, max by (team, le) ({wait}))", "{{team}} p95"),
            ],
            unit="s",
            steps=[{"color": "green", "value": None}, {"color": "red", "value": 600}],
            threshold_style="dashed",
            w=8,
        ),
    )
    cycle = "rate(gpufleet_scheduler_cycle_duration_seconds_bucket[$__rate_interval])"
    b.add(
        timeseries(
            "Scheduling cycle duration (p50, p99)",
            "gpufleet_scheduler_cycle_duration_seconds.",
            [
                Q(f"histogram_quantile(0.5, sum by (le) ({cycle}))", "p50"),
                Q(f"histogram_quantile(0.99, sum by (le) ({cycle}))", "p99"),
            ],
            unit="s",
            w=8,
        ),
        timeseries(
            "Admissions per minute by team",
            "Jobs admitted (started) per minute.",
            [Q(f"max by (team) (rate({sel('gpufleet_admissions_total', t)}[$__rate_interval])) * 60", "{{team}}")],
            unit="short",
            stack=True,
            w=8,
        ),
        timeseries(
            "Preemptions by team and reason",
            "Running jobs stopped to make room, per interval.",
            [
                Q(
                    f"max by (team, reason) (increase({sel('gpufleet_preemptions_total', t)}[$__rate_interval]))",
                    "{{team}}: {{reason}}",
                )
            ],
            stack=True,
            bars=True,
            w=8,
        ),
    )
    b.add(
        timeseries(
            "Spot interruptions by team",
            "Jobs whose spot capacity was reclaimed, per interval "
            "(GpufleetSpotInterruptionStorm: 5 or more in 15 minutes).",
            [
                Q(
                    f"max by (team) (increase({sel('gpufleet_spot_interruptions_total', t)}[$__rate_interval]))",
                    "{{team}}",
                )
            ],
            stack=True,
            bars=True,
            w=8,
        ),
        timeseries(
            "Autoscaler decisions by pool and action",
            "Scale-ups, scale-downs and other decisions, per interval.",
            [
                Q(
                    "max by (pool, action) (increase(gpufleet_autoscaler_decisions_total[$__rate_interval]))",
                    "{{pool}}: {{action}}",
                )
            ],
            stack=True,
            bars=True,
            w=8,
        ),
        timeseries(
            "Jobs by state",
            "gpufleet_jobs by state.",
            [Q(f"sum by (state) ({dedup('state, team', sel('gpufleet_jobs', t))})", "{{state}}")],
            w=8,
        ),
    )
    b.add(
        timeseries(
            "API requests by status",
            "gpufleet_http_requests_total per second.",
            [Q("sum by (status) (rate(gpufleet_http_requests_total[$__rate_interval]))", "{{status}}")],
            unit="reqps",
            w=24,
            h=6,
        ),
    )
    return b.build()
