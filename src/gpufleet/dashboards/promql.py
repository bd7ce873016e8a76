"""PromQL over gpufleet's ``/metrics``: the label sets that make each series unique, selectors and
the queries several dashboards share.

Series and their labels (gpufleet's ``/metrics``, scraped with ``honor_labels: true`` so that its
``job``, ``namespace`` and ``pod`` labels stay theirs):

- gpufleet's own: ``gpufleet_cost_usd_total{job, team, namespace, project, gpu_type, capacity_type}``
  (dollars, a counter), ``gpufleet_hourly_cost_rate_usd{team, namespace, project, gpu_type,
  capacity_type}``, ``gpufleet_pod_cost_usd`` / ``pod_hourly_cost_usd{namespace, pod,
  gpu_type, capacity_type}``, ``gpufleet_total_savings_usd{lever}``, ``gpufleet_budget_*{budget}``,
  the scheduler's (queue, admissions, preemptions, spot interruptions, autoscaler decisions);
- OpenCost's names (``node_*_hourly_cost``, ``kubecost_node_is_spot``, ``container_*_allocation``);
- the DCGM exporter's names (``DCGM_FI_DEV_*{gpu, UUID, modelName, Hostname, namespace, pod}``).

Several gpufleet replicas (PostgreSQL) each expose the same store-derived series (costs, budgets,
queue, scheduler counters, OpenCost's and DCGM's names): queries collapse them with
``max by (<the metric's own labels>)`` before they add anything up. Only the cycle-duration histogram
and the HTTP counters are per process, and are summed.
"""

from __future__ import annotations

# -- the labels that make a series unique (replicas collapsed with max by these) ---------------------
COST = "job, team, namespace, project, gpu_type, capacity_type"
RATE = "team, namespace, project, gpu_type, capacity_type"
POD = "namespace, pod, gpu_type, capacity_type"
GPU = "Hostname, gpu, UUID, modelName, namespace, pod"
CONTAINER = "namespace, pod, container, node"

HELD = 'pod!=""'  # DCGM series of a GPU a pod holds (the exporter leaves pod empty otherwise)


def sel(metric: str, *matchers: str) -> str:
    """``metric{m1, m2}`` (empty matchers dropped)."""
    ms = [m for m in matchers if m]
    return f"{metric}{{{', '.join(ms)}}}" if ms else metric


def dedup(labels: str, expr: str) -> str:
    """One series per label set, whichever replica exposed it."""
    return f"max by ({labels}) ({expr})"


# -- queries several dashboards share ----------------------------------------------------------------


def gpu_util(*matchers: str) -> str:
    """Per-GPU utilization (one series per GPU and pod), replicas collapsed."""
    return dedup(GPU, sel("DCGM_FI_DEV_GPU_UTIL", *matchers))


def cost_increase(window: str, *matchers: str) -> str:
    return dedup(COST, f"increase({sel('gpufleet_cost_usd_total', *matchers)}[{window}])")


def cost_rate(*matchers: str) -> str:
    return dedup(RATE, sel("gpufleet_hourly_cost_rate_usd", *matchers))


def savings_by_lever(*matchers: str) -> str:
    return dedup("lever", sel("gpufleet_total_savings_usd", *matchers))


def pod_cost_rate(*matchers: str) -> str:
    return f"sum by (namespace, pod) ({dedup(POD, sel('pod_hourly_cost_usd', *matchers))})"


def idle_gpu_cost() -> str:
    return "(max(gpufleet_gpus_capacity) - max(gpufleet_gpus_allocated)) * avg(max by (node) (node_gpu_hourly_cost))"
