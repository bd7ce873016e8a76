"""The node and pod families of ``/metrics``, read at every scrape: OpenCost's node prices
(``node_*_hourly_cost``, ``kubecost_node_is_spot``) and container allocations
(``container_*_allocation``), with OpenCost's label names, and what the running pods cost per hour now
(``gpufleet_hourly_cost_rate_usd``, ``pod_hourly_cost_usd``): their share of their nodes' price split.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from gpufleet.api.metrics.cost import POD_LABELS
from gpufleet.cost.opencost import node_prices, pod_hourly_usd
from gpufleet.k8s.adapter.objects import CONTAINER_NAME
from gpufleet.k8s.vocabulary import LABEL_ARCH, LABEL_INSTANCE_TYPE, LABEL_PROVIDER_ID, LABEL_REGION
from gpufleet.model.share import units_fraction
from gpufleet.store.repo import scrape

RATE_LABELS = ("team", "namespace", "project", "gpu_type", "capacity_type")
NODE_LABELS = ("instance", "node", "instance_type", "region", "provider_id", "arch", "uid")  # OpenCost's
CONTAINER_LABELS = ("namespace", "pod", "container", "instance", "node", "uid")  # OpenCost's
BYTES_PER_MIB = 1024 * 1024

_NODE_HELP = (
    "; instance, node: the node's name; instance_type, region, arch: its node.kubernetes.io/instance-type, "
    "topology.kubernetes.io/region and kubernetes.io/arch labels; provider_id: its gpufleet.io/provider-id label; "
    "uid: empty"
)
_CONTAINER_HELP = (
    "; namespace: the job's; pod: the run (<job>-r<run>, or the Kubernetes Job's name); container: main; "
    "instance, node: the node; uid: empty"
)


def _node_labels(row: Any) -> list[str]:
    labels = row.labels or {}
    return [
        row.name,
        row.name,
        str(labels.get(LABEL_INSTANCE_TYPE, "")),
        str(labels.get(LABEL_REGION, "")),
        str(labels.get(LABEL_PROVIDER_ID, "")),
        str(labels.get(LABEL_ARCH, "")),
        "",
    ]


def node_families(nodes: Sequence[Any]) -> Iterator[Metric]:
    """OpenCost's node price series (labels as OpenCost's cost model publishes them)."""
    gpu = GaugeMetricFamily(
        "node_gpu_hourly_cost",
        "node_gpu_hourly_cost hourly cost for each gpu on this node" + _NODE_HELP,
        labels=NODE_LABELS,
    )
    cpu = GaugeMetricFamily(
        "node_cpu_hourly_cost",
        "node_cpu_hourly_cost hourly cost for each cpu on this node" + _NODE_HELP,
        labels=NODE_LABELS,
    )
    ram = GaugeMetricFamily(
        "node_ram_hourly_cost",
        "node_ram_hourly_cost hourly cost for each gb of ram on this node" + _NODE_HELP,
        labels=NODE_LABELS,
    )
    total = GaugeMetricFamily(
        "node_total_hourly_cost", "node_total_hourly_cost Total node cost per hour" + _NODE_HELP, labels=NODE_LABELS
    )
    spot = GaugeMetricFamily(
        "kubecost_node_is_spot",
        "kubecost_node_is_spot Cloud provider info about node preemptibility (1: spot capacity, 0: on-demand or "
        "reserved)" + _NODE_HELP,
        labels=NODE_LABELS,
    )
    for row in nodes:
        labels = _node_labels(row)
        p = node_prices(
            row.hourly_price_usd,
            gpu_count=row.gpu_count,
            cpu_milli=row.cpu_milli,
            memory_mib=row.memory_mib,
            capacity_type=row.capacity_type,
        )
        gpu.add_metric(labels, p.gpu_usd)
        cpu.add_metric(labels, p.cpu_usd)
        ram.add_metric(labels, p.ram_gib_usd)
        total.add_metric(labels, p.total_usd)
        spot.add_metric(labels, 1.0 if row.capacity_type == "spot" else 0.0)
    yield from (gpu, cpu, ram, total, spot)


def pod_families(pods: Sequence[scrape.OpenPod], multiplier: Callable[[str], Fraction] | None) -> Iterator[Metric]:
    """Running pods: their hourly rates (by pod, and summed by team/namespace/project/GPU/capacity)
    and OpenCost's container allocations."""
    rate = GaugeMetricFamily(
        "gpufleet_hourly_cost_rate_usd",
        "Dollars per hour the running jobs cost now (their share of their nodes' price split, priority "
        "multipliers applied), by team, namespace, project, gpu_type and capacity_type",
        labels=RATE_LABELS,
    )
    pod_rate = GaugeMetricFamily(
        "pod_hourly_cost_usd",
        "Dollars per hour each running pod costs now, by namespace, pod, gpu_type and capacity_type",
        labels=POD_LABELS,
    )
    gpu = GaugeMetricFamily(
        "container_gpu_allocation",
        "container_gpu_allocation GPU used (GPU-equivalents held)" + _CONTAINER_HELP,
        labels=CONTAINER_LABELS,
    )
    cpu = GaugeMetricFamily(
        "container_cpu_allocation",
        "container_cpu_allocation Percent of a single CPU used in a minute (cores requested)" + _CONTAINER_HELP,
        labels=CONTAINER_LABELS,
    )
    mem = GaugeMetricFamily(
        "container_memory_allocation_bytes",
        "container_memory_allocation_bytes Bytes of RAM used (requested)" + _CONTAINER_HELP,
        labels=CONTAINER_LABELS,
    )
    by_group: dict[tuple[str, ...], Fraction] = defaultdict(Fraction)
    by_pod: dict[tuple[str, ...], Fraction] = defaultdict(Fraction)
    for p in pods:
        usd = pod_hourly_usd(
            gpu_share_units=p.gpu_share_units,
            cpu_milli=p.cpu_milli,
            memory_mib=p.memory_mib,
            node_hourly_usd=p.node_hourly_usd,
            node_gpu_count=p.node_gpu_count,
            node_cpu_milli=p.node_cpu_milli,
            node_memory_mib=p.node_memory_mib,
            capacity_type=p.capacity_type,
            multiplier=multiplier(p.priority_class) if multiplier is not None else 1,
        )
        by_group[(p.team, p.namespace, p.project, p.gpu_model, p.capacity_type)] += usd
        by_pod[(p.namespace, p.pod, p.gpu_model, p.capacity_type)] += usd
        labels = [p.namespace, p.pod, CONTAINER_NAME, p.node, p.node, ""]
        gpu.add_metric(labels, float(units_fraction(p.gpu_share_units)))
        cpu.add_metric(labels, p.cpu_milli / 1000.0)
        mem.add_metric(labels, float(p.memory_mib * BYTES_PER_MIB))
    for key, usd in sorted(by_group.items()):
        rate.add_metric(list(key), float(usd))
    for key, usd in sorted(by_pod.items()):
        pod_rate.add_metric(list(key), float(usd))
    yield from (rate, pod_rate, gpu, cpu, mem)
