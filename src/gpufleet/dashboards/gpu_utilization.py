"""The "GPU utilization by workload" dashboard: ``gpufleet-gpu-utilization.json``, uid ``gpufleet-gpu-utilization``."""

from __future__ import annotations

from gpufleet.dashboards.builder import (
    JSON,
    PCT,
    UNDERUSED_PCT,
    USD,
    UTIL_STEPS,
    Board,
    Q,
    bargauge,
    gauge,
    query_var,
    stat,
    table,
    timeseries,
)
from gpufleet.dashboards.promql import GPU, dedup, gpu_util, pod_cost_rate, sel


def gpu_utilization() -> JSON:
    b = Board(
        "gpufleet-gpu-utilization",
        "gpufleet / GPU utilization by workload",
        "How hard each workload (pod), namespace and GPU model uses its GPUs (DCGM_FI_DEV_GPU_UTIL). "
        f"Under {UNDERUSED_PCT} % is underused and shown red.",
        ["gpu", "utilization"],
        [
            query_var("node", "Node", "DCGM_FI_DEV_GPU_UTIL", "Hostname"),
            query_var("model", "GPU model", "DCGM_FI_DEV_GPU_UTIL", "modelName"),
            query_var("namespace", "Namespace", "DCGM_FI_DEV_GPU_UTIL", "namespace"),
        ],
        time_from="now-6h",
    )
    m = ('Hostname=~"$node"', 'modelName=~"$model"', 'namespace=~"$namespace"')
    held = (*m, 'pod!=""')
    by_pod = f"avg by (namespace, pod) ({gpu_util(*held)})"
    b.row("Fleet")
    b.add(
        stat(
            "Average GPU utilization",
            "Mean utilization of the selected GPUs now, held or not.",
            [Q(f"avg(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_GPU_UTIL', *m)}))")],
            unit=PCT,
            steps=UTIL_STEPS,
            decimals=0,
            graph=True,
            w=5,
        ),
        stat(
            "GPUs held by a workload",
            "GPUs a pod holds now.",
            [Q(f"count(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_GPU_UTIL', *held)}))")],
            no_value="0",
            w=5,
        ),
        stat(
            f"Underused workloads (< {UNDERUSED_PCT} %)",
            f"Pods whose GPUs average under {UNDERUSED_PCT} % utilization now.",
            [Q(f"count({by_pod} < {UNDERUSED_PCT})")],
            no_value="0",
            steps=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
            w=5,
        ),
        stat(
            "Idle held GPUs (< 5 %)",
            "GPUs a pod holds that are under 5 % utilization now "
            "(GpufleetGpuIdleWhileAllocated fires after 30 minutes of this).",
            [Q(f"count(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_GPU_UTIL', *held)}) < 5)")],
            no_value="0",
            steps=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
            w=5,
        ),
        gauge(
            "GPU memory in use",
            "Frame buffer used over total, selected GPUs.",
            [
                Q(
                    f"sum(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_FB_USED', *m)})) / "
                    f"(sum(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_FB_USED', *m)})) + "
                    f"sum(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_FB_FREE', *m)}))) * 100"
                )
            ],
            steps=[{"color": "green", "value": None}, {"color": "orange", "value": 90}],
            w=4,
        ),
    )
    b.row("By workload (pod)")
    b.add(
        timeseries(
            "GPU utilization by pod",
            f"Mean utilization of each pod's GPUs; the red band is under {UNDERUSED_PCT} % (underused).",
            [Q(by_pod, "{{namespace}}/{{pod}}")],
            unit=PCT,
            steps=UTIL_STEPS,
            threshold_style="line+area",
            min_=0,
            max_=100,
            w=14,
            h=9,
        ),
        bargauge(
            "Utilization by pod now",
            f"Red: under {UNDERUSED_PCT} %.",
            [Q(f"sort({by_pod})", "{{namespace}}/{{pod}}", instant=True)],
            unit=PCT,
            steps=UTIL_STEPS,
            max_=100,
            w=10,
            h=9,
        ),
    )
    b.add(
        table(
            "Workloads now",
            f"Each pod: its GPUs' mean utilization (red under {UNDERUSED_PCT} %), GPUs, "
            "frame buffer used and what it costs per hour.",
            [
                (Q(by_pod), "GPU utilization", PCT, UTIL_STEPS),
                (Q(f"count by (namespace, pod) ({gpu_util(*held)})"), "GPUs", "short", None),
                (
                    Q(f"sum by (namespace, pod) ({dedup(GPU, sel('DCGM_FI_DEV_FB_USED', *held))})"),
                    "GPU memory used",
                    "decmbytes",
                    None,
                ),
                (Q(pod_cost_rate('namespace=~"$namespace"')), "$/h", USD, None),
            ],
            w=14,
            h=9,
            sort_by="$/h",
        ),
        timeseries(
            "GPU memory used by pod",
            "Frame buffer the pod's GPUs use (DCGM_FI_DEV_FB_USED, MiB).",
            [Q(f"sum by (namespace, pod) ({dedup(GPU, sel('DCGM_FI_DEV_FB_USED', *held))})", "{{namespace}}/{{pod}}")],
            unit="decmbytes",
            w=10,
            h=9,
        ),
    )
    b.row("By namespace and GPU model")
    b.add(
        timeseries(
            "GPU utilization by namespace",
            "Mean utilization of the GPUs each namespace's pods hold.",
            [Q(f"avg by (namespace) ({gpu_util(*held)})", "{{namespace}}")],
            unit=PCT,
            steps=UTIL_STEPS,
            threshold_style="line+area",
            min_=0,
            max_=100,
        ),
        timeseries(
            "GPU utilization by GPU model",
            "Mean utilization of each GPU model, held or not.",
            [
                Q(
                    f"avg by (modelName) (max by (Hostname, gpu, modelName) ({sel('DCGM_FI_DEV_GPU_UTIL', *m)}))",
                    "{{modelName}}",
                )
            ],
            unit=PCT,
            steps=UTIL_STEPS,
            threshold_style="line+area",
            min_=0,
            max_=100,
        ),
    )
    b.add(
        bargauge(
            "Utilization by namespace now",
            f"Red: under {UNDERUSED_PCT} %.",
            [Q(f"sort(avg by (namespace) ({gpu_util(*held)}))", "{{namespace}}", instant=True)],
            unit=PCT,
            steps=UTIL_STEPS,
            max_=100,
        ),
        bargauge(
            "Utilization by GPU model now",
            f"Red: under {UNDERUSED_PCT} %.",
            [
                Q(
                    f"sort(avg by (modelName) (max by (Hostname, gpu, modelName) ({sel('DCGM_FI_DEV_GPU_UTIL', *m)})))",
                    "{{modelName}}",
                    instant=True,
                )
            ],
            unit=PCT,
            steps=UTIL_STEPS,
            max_=100,
        ),
    )
    return b.build()
