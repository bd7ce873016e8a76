"""``/metrics/dcgm``: the DCGM exporter's series of the server's own GPUs (local backend), with the
exporter's label names (served apart from ``/metrics``: see :mod:`gpufleet.api.metrics`)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.api.context import ApiContext
from gpufleet.api.metrics.audience import EVERYTHING, Audience
from gpufleet.k8s.adapter.objects import CONTAINER_NAME
from gpufleet.store.repo import scrape

log = logging.getLogger(__name__)

DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "pod", "namespace", "container")
DCGM_STALE_S = 120.0  # a GPU whose latest sample is older than this is left out
_DCGM_HELP = (
    " Labels: gpu (index), UUID (the GPU's; empty for samples stored before migration 0010), device"
    " (nvidia<gpu>), modelName, Hostname (the node), "
    "pod, namespace, container (the run holding the GPU; empty when idle)."
)


class DcgmCollector(Collector):
    """``/metrics/dcgm``: the DCGM exporter's series for the local backend's GPUs, from the latest
    stored telemetry sample of each GPU (GPUs without a sample in the last :data:`DCGM_STALE_S`
    seconds are left out). Labels as the exporter's: ``gpu`` (index), ``UUID``, ``device``
    (``nvidia<index>``), ``modelName``, ``Hostname`` (the node), and ``pod``/``namespace``/
    ``container`` of the run holding the GPU (empty when idle; one series per pod when pods share a
    GPU, as the exporter does). On a Kubernetes cluster the DCGM exporter publishes these itself.

    Temperature (``DCGM_FI_DEV_GPU_TEMP``) and power (``DCGM_FI_DEV_POWER_USAGE``) are published for
    samples that have them (NVML's sensors; samples stored before migration 0010 have neither, and
    an empty ``UUID``)."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        return self.collect_for(EVERYTHING)

    def collect_for(self, audience: Audience) -> Iterator[Metric]:
        """The series as ``audience`` sees them: a pod it may not see is left out of a GPU's labels
        (the GPU then reads as idle, one series), as are all pods for an anonymous scrape."""
        now = self._ctx.clock.now()
        try:
            with self._ctx.database.session(readonly=True) as s:
                readings = scrape.latest_gpu_samples(s, now - DCGM_STALE_S)
                pods = scrape.open_pods(s)
        except Exception:
            log.warning("metrics: the store did not answer (DCGM series)", exc_info=True)
            return
        holders: dict[tuple[str, int], list[tuple[str, str]]] = defaultdict(list)
        for p in pods:
            if not audience.sees(p.team):
                continue
            for g in p.gpus:
                holders[(p.node, g)].append((p.namespace, p.pod))
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)." + _DCGM_HELP, labels=DCGM_LABELS)
        used = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)." + _DCGM_HELP, labels=DCGM_LABELS
        )
        free = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)." + _DCGM_HELP, labels=DCGM_LABELS
        )
        temp = GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)." + _DCGM_HELP, labels=DCGM_LABELS)
        power = GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)." + _DCGM_HELP, labels=DCGM_LABELS)
        for r in readings:
            for namespace, pod in holders.get((r.node, r.gpu_index)) or [("", "")]:
                labels = [
                    str(r.gpu_index),
                    r.uuid,
                    f"nvidia{r.gpu_index}",
                    r.gpu_model,
                    r.node,
                    pod,
                    namespace,
                    CONTAINER_NAME if pod else "",
                ]
                if r.utilization_pct is not None:
                    util.add_metric(labels, r.utilization_pct)
                used.add_metric(labels, r.memory_used_mib)
                if r.memory_total_mib is not None:
                    free.add_metric(labels, max(0.0, r.memory_total_mib - r.memory_used_mib))
                if r.temperature_c is not None:
                    temp.add_metric(labels, r.temperature_c)
                if r.power_w is not None:
                    power.add_metric(labels, r.power_w)
        for fam in (util, used, free, temp, power):
            if fam.samples:
                yield fam
