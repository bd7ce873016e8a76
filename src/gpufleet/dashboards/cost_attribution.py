"""The "Cost attribution" dashboard: ``gpufleet-cost-attribution.json``, uid ``gpufleet-cost-attribution``."""

from __future__ import annotations

from gpufleet.dashboards.builder import JSON, USD, Board, Panel, Q, piechart, query_var, stat, table, timeseries
from gpufleet.dashboards.promql import CONTAINER, POD, cost_increase, cost_rate, dedup, pod_cost_rate, sel


def cost_attribution() -> JSON:
    b = Board(
        "gpufleet-cost-attribution",
        "gpufleet / Cost attribution",
        "Who spends: dollars over the time range by namespace, team, project, GPU model and capacity type, "
        "the top jobs and pods, and the OpenCost allocation model's view.",
        ["cost", "attribution"],
        [
            query_var("team", "Team", "gpufleet_cost_usd_total", "team"),
            query_var("namespace", "Namespace", 'gpufleet_cost_usd_total{team=~"$team"}', "namespace"),
            query_var(
                "project", "Project", 'gpufleet_cost_usd_total{team=~"$team", namespace=~"$namespace"}', "project"
            ),
        ],
        time_from="now-7d",
    )
    f = ('team=~"$team"', 'namespace=~"$namespace"', 'project=~"$project"')
    spent = cost_increase("$__range", *f)

    def pie(title: str, label: str, legend: str) -> Panel:
        return piechart(
            title, f"Dollars over the time range by {label}.", [Q(f"sum by ({label}) ({spent})", legend, instant=True)]
        )

    b.row("Spend over the time range")
    b.add(
        pie("By namespace", "namespace", "{{namespace}}"),
        pie("By team", "team", "{{team}}"),
        pie("By project", "project", "{{project}}"),
    )
    b.add(
        pie("By GPU model", "gpu_type", "{{gpu_type}}"),
        pie("By capacity type (spot / on-demand / reserved)", "capacity_type", "{{capacity_type}}"),
        stat(
            "Spend in the time range",
            "Dollars over the time range, selection only.",
            [Q(f"sum({spent})")],
            unit=USD,
            decimals=2,
            w=8,
            h=8,
        ),
    )
    b.row("Burn rate")
    b.add(
        timeseries(
            "Burn rate by namespace ($/h)",
            "Dollars per hour of the running work.",
            [Q(f"sum by (namespace) ({cost_rate(*f)})", "{{namespace}}")],
            unit=USD,
            stack=True,
            w=8,
        ),
        timeseries(
            "Burn rate by project ($/h)",
            "Dollars per hour of the running work.",
            [Q(f"sum by (project) ({cost_rate(*f)})", "{{project}}")],
            unit=USD,
            stack=True,
            w=8,
        ),
        timeseries(
            "Burn rate by GPU model ($/h)",
            "Dollars per hour of the running work.",
            [Q(f"sum by (gpu_type) ({cost_rate(*f)})", "{{gpu_type}}")],
            unit=USD,
            stack=True,
            w=8,
        ),
    )
    b.row("Jobs and pods")
    b.add(
        table(
            "Top jobs by spend",
            "The 20 jobs that cost most over the time range.",
            [
                (Q(f"topk(20, sum by (job, team, namespace, project, gpu_type) ({spent}))"), "Spend", USD, None),
            ],
            sort_by="Spend",
        ),
        table(
            "Pods: cost to date and per hour",
            "gpufleet_pod_cost_usd and pod_hourly_cost_usd.",
            [
                (Q(f"sum by (namespace, pod) ({dedup(POD, sel('gpufleet_pod_cost_usd', f[1]))})"), "Cost", USD, None),
                (Q(pod_cost_rate(f[1])), "$/h", USD, None),
            ],
            sort_by="Cost",
        ),
    )
    b.row("OpenCost allocation model")
    alloc = dedup(CONTAINER, sel("container_gpu_allocation", f[1]))
    cpu = dedup(CONTAINER, sel("container_cpu_allocation", f[1]))
    mem = dedup(CONTAINER, sel("container_memory_allocation_bytes", f[1]))
    b.add(
        timeseries(
            "GPU $/h by namespace (allocation × node GPU price)",
            "OpenCost's model: container_gpu_allocation times node_gpu_hourly_cost of its node.",
            [
                Q(
                    f"sum by (namespace) ({alloc} * on (node) group_left () max by (node) (node_gpu_hourly_cost))",
                    "{{namespace}}",
                )
            ],
            unit=USD,
            stack=True,
        ),
        timeseries(
            "CPU and memory $/h by namespace",
            "container_cpu_allocation × node_cpu_hourly_cost and "
            "container_memory_allocation_bytes (GiB) × node_ram_hourly_cost.",
            [
                Q(
                    f"sum by (namespace) ({cpu} * on (node) group_left () max by (node) (node_cpu_hourly_cost))",
                    "{{namespace}} CPU",
                ),
                Q(
                    f"sum by (namespace) ({mem} / 1073741824 * on (node) group_left () "
                    f"max by (node) (node_ram_hourly_cost))",
                    "{{namespace}} memory",
                ),
            ],
            unit=USD,
            stack=True,
        ),
    )
    return b.build()
