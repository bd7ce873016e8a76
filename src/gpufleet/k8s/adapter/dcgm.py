"""NVIDIA DCGM exporter metrics (Prometheus text) → :class:`~gpufleet.backends.base.GpuSample`.

Pure parsing: the text of one scrape of ``/metrics`` in, one sample per (node, GPU) out. Read:

- ``DCGM_FI_DEV_GPU_UTIL`` (%) — utilization; on MIG GPUs (where DCGM does not report it) the
  slices' ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (0..1) weighted by their share of the GPU;
- ``DCGM_FI_DEV_FB_USED``, ``DCGM_FI_DEV_FB_FREE``, ``DCGM_FI_DEV_FB_RESERVED`` (MiB) — memory
  used, and the total as used + free + reserved; a MIG GPU's are the sums over its slices;
- labels ``gpu`` (index), ``UUID``, ``Hostname`` or ``hostname`` (the node, unless the caller names it),
  ``modelName``, ``GPU_I_ID`` /
  ``GPU_I_PROFILE`` (MIG slice), and ``pod`` / ``namespace`` / ``container`` where the exporter maps
  GPUs to pods (also ``pod_name``/``pod_namespace`` of old exporters and ``exported_*`` as
  Prometheus relabels them).

``job_memory_mib`` is keyed ``namespace/pod``: a MIG slice's memory belongs to its pod; a whole GPU's
to the pod holding it; a GPU that several pods share (time-slicing) has its memory split evenly
among the pods the exporter names — an estimate, as DCGM does not see per-process memory. The
exporter names one pod per time-sliced GPU unless it runs with ``--kubernetes-virtual-gpus``:
:func:`split_time_sliced_memory` re-splits such GPUs among the pods that hold their replicas, by share.

DCGM's blank sentinels (:func:`is_blank`) are missing readings, not values. Every line is checked
by ``prometheus_client``'s parser; a malformed one (or a metric of ours with
a bad ``gpu`` label or a value that is not finite) raises :class:`~gpufleet.errors.InputError`
naming the line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from gpufleet.backends.base import GpuSample
from gpufleet.errors import InputError
from gpufleet.model.share import mig_share

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
METRICS = frozenset({GPU_UTIL, FB_USED, FB_FREE, FB_RESERVED, GR_ENGINE_ACTIVE, GPU_TEMP, POWER_USAGE})

_HOST_LABELS = ("Hostname", "hostname")  # dcgm-exporter 3.x, and its main branch since the rename
_POD_LABELS = ("pod", "pod_name", "exported_pod")


def is_blank(value: float) -> bool:
    """A DCGM blank sentinel, not a reading: a field that is not supported, not found or not
    permitted (``DCGM_INT64_BLANK`` 0x7ffffffffffffff0 .. +3, ``DCGM_INT32_BLANK`` 0x7ffffff0 .. +3,
    ``DCGM_FP64_BLANK`` 2**47 .. +3; dcgm_structs.h). The exporter prints them as numbers."""
    return (
        value >= 9223372036854775792.0  # int64 blanks (the float nearest 2**63 - 16 and up)
        or 2147483632.0 <= value <= 2147483635.0
        or 140737488355328.0 <= value <= 140737488355331.0
    )


_NAMESPACE_LABELS = ("namespace", "pod_namespace", "exported_namespace")


@dataclass(slots=True)
class _Slice:
    """One GPU (``instance`` None) or one MIG slice of it, as the exporter reports it."""

    profile: str = ""
    values: dict[str, float] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Gpu:
    uuid: str = ""
    time: float | None = None
    device: _Slice = field(default_factory=_Slice)
    instances: dict[str, _Slice] = field(default_factory=dict)


def parse_dcgm(text: str, now: float, *, node: str | None = None, source: str = "dcgm-exporter") -> list[GpuSample]:
    """GPU samples from one DCGM exporter scrape, sorted by (node, GPU index).

    ``now`` is the sample time where the exporter gives no timestamps. ``node``, when given, is the
    node the scrape came from (an exporter scraped through its node or its pod): it wins over the
    ``Hostname`` label, which is the exporter pod's name unless the exporter runs with the host's
    network or ``NODE_NAME`` (as the GPU operator deploys it). Without ``node``, lines need ``Hostname``.
    """
    gpus: dict[tuple[str, int], _Gpu] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            families = list(text_string_to_metric_families(line + "\n"))
        except (ValueError, IndexError, KeyError) as exc:
            detail = str(exc) or "malformed line"
            raise InputError(f"not Prometheus text ({detail}): {_clip(line)}", source=source, line=lineno) from None
        if line.startswith("#"):
            continue
        samples = [s for f in families for s in f.samples]
        if len(samples) != 1:  # pragma: no cover - one sample line gives one sample
            raise InputError(f"expected one sample: {_clip(line)}", source=source, line=lineno)
        sample = samples[0]
        if sample.name not in METRICS:
            continue
        labels = sample.labels

        def bad(message: str, fld: str, lineno: int = lineno) -> InputError:
            return InputError(message, source=source, line=lineno, field=fld)

        raw_index = labels.get("gpu")
        if raw_index is None or not re.fullmatch(r"[0-9]+", raw_index):
            raise bad(f"{sample.name}: the gpu label must be a GPU index, got {raw_index!r}", "gpu")
        host = node or next((labels[k] for k in _HOST_LABELS if labels.get(k)), None)
        if not host:
            raise bad(f"{sample.name}: no Hostname (or hostname) label and no node given", "Hostname")
        value = float(sample.value)
        if not math.isfinite(value) or value < 0:
            raise bad(f"{sample.name}: not a finite, non-negative value: {sample.value!r}", sample.name)
        if is_blank(value):
            continue  # no reading (not supported / not found / not permitted): missing, not a value
        gpu = gpus.setdefault((host, int(raw_index)), _Gpu())
        gpu.uuid = gpu.uuid or labels.get("UUID", "")
        if sample.timestamp is not None:
            t = float(sample.timestamp)
            gpu.time = t if gpu.time is None else max(gpu.time, t)
        instance = labels.get("GPU_I_ID") or None
        part = gpu.device if instance is None else gpu.instances.setdefault(instance, _Slice())
        if instance is not None:
            part.profile = labels.get("GPU_I_PROFILE", part.profile)
        # the same reading repeats once per pod sharing the GPU: keep it once
        part.values[sample.name] = max(part.values.get(sample.name, 0.0), value)
        pod = next((labels[k] for k in _POD_LABELS if labels.get(k)), "")
        if pod:
            ns = next((labels[k] for k in _NAMESPACE_LABELS if labels.get(k)), "")
            part.pods.add(f"{ns}/{pod}")

    out: list[GpuSample] = []
    for (host, index), gpu in sorted(gpus.items()):
        out.append(_sample(host, index, gpu, now))
    return out


def _sample(host: str, index: int, gpu: _Gpu, now: float) -> GpuSample:
    dev, parts = gpu.device, list(gpu.instances.values())
    job_memory: dict[str, float] = {}

    def attribute(part: _Slice) -> None:
        used = part.values.get(FB_USED)
        if used is None or not part.pods:
            return
        for pod in part.pods:
            job_memory[pod] = job_memory.get(pod, 0.0) + used / len(part.pods)

    if FB_USED in dev.values or FB_FREE in dev.values:
        used = dev.values.get(FB_USED, 0.0)
        total = used + dev.values.get(FB_FREE, 0.0) + dev.values.get(FB_RESERVED, 0.0)
    else:
        used = sum(p.values.get(FB_USED, 0.0) for p in parts)
        total = sum(sum(p.values.get(k, 0.0) for k in (FB_USED, FB_FREE, FB_RESERVED)) for p in parts)
    if parts:
        for p in parts:
            attribute(p)
    else:
        attribute(dev)

    if GPU_UTIL in dev.values:
        util = dev.values[GPU_UTIL]
    elif GR_ENGINE_ACTIVE in dev.values:
        util = 100.0 * dev.values[GR_ENGINE_ACTIVE]
    else:
        util = 100.0 * sum(p.values.get(GR_ENGINE_ACTIVE, 0.0) * mig_share(p.profile) for p in parts)
    return GpuSample(
        time=gpu.time if gpu.time is not None else now,
        node=host,
        gpu_index=index,
        uuid=gpu.uuid,
        utilization_pct=min(100.0, util),
        memory_used_mib=used,
        memory_total_mib=total,
        job_memory_mib=job_memory,
        temperature_c=dev.values.get(GPU_TEMP),
        power_w=dev.values.get(POWER_USAGE),
    )


def split_time_sliced_memory(
    samples: Sequence[GpuSample], shared: Mapping[str, Mapping[str, float]], *, source: str = "time-sliced pods"
) -> list[GpuSample]:
    """The samples with the memory of time-sliced GPUs split among the pods holding their replicas,
    each ``used × its share / the shares' total``.

    ``shared`` is, per node, the pods holding replicas of its time-sliced GPUs: pod key
    (``namespace/pod``) → share (replicas, or milli; one unit per node: only the ratio counts).
    Why: on a time-sliced GPU dcgm-exporter names the pod the kubelet lists last for the GPU (its
    device-to-pod map keeps one pod per device), so :func:`parse_dcgm` gave all the memory to that
    one pod, and none to the others sharing the GPU. DCGM cannot see which process uses what, so a
    split by share is the estimate, as the replicas are what each pod was given.

    Which GPU a pod's replicas are on is the device plugin's choice, which gpufleet does not see:

    - a GPU the exporter names two or more pods on (``--kubernetes-virtual-gpus``: it then names
      every pod sharing each GPU) locates those pods: its memory is split among them by share when
      all are in ``shared``; when some are not (someone else's pods, whose shares gpufleet does not
      know), the parser's even split stays. Located pods take no part in the node's other GPUs;
    - every other GPU of the node (the exporter names one pod, which tells nothing about the others
      on it, or none) is split among the node's pods not located so, by share: each pod's memory over
      these GPUs is their memory total × its share / the shares' total. A pod the exporter named
      there that is not in ``shared`` (not gpufleet's) gets nothing: its naming was the kubelet's
      pick, not a measurement. With no such pod left, the GPU stays as parsed.

    Nodes not in ``shared`` are unchanged: GPUs held whole (exclusive) and MIG nodes (gpufleet's
    node model makes a node time-sliced or MIG, never both: :func:`~gpufleet.k8s.adapter.nodes.node_info`).
    Pods gpufleet does not know of are not in the split, so gpufleet's pods carry the memory of any
    foreign pod sharing an unlocated GPU: an over-estimate the caller avoids by naming those pods too.
    A share that is not a finite positive number raises :class:`~gpufleet.errors.InputError` naming
    the node and pod. Pure: the samples are not changed, new ones are returned in their order.
    """
    for node, pods in shared.items():
        for pod, share in pods.items():
            if isinstance(share, bool) or not isinstance(share, int | float) or not math.isfinite(share) or share <= 0:
                raise InputError(
                    f"node {node}: pod {pod}: a share must be a positive number, got {share!r}",
                    source=source,
                    field="share",
                )
    out = list(samples)
    by_node: dict[str, list[int]] = {}
    for i, g in enumerate(out):
        if shared.get(g.node):
            by_node.setdefault(g.node, []).append(i)
    for node, indices in by_node.items():
        shares = shared[node]
        located: set[str] = set()
        pooled: list[int] = []
        for i in indices:
            named = set(out[i].job_memory_mib)
            if len(named) < 2:
                pooled.append(i)
                continue
            located |= named & set(shares)
            if named <= set(shares):
                out[i] = replace(
                    out[i], job_memory_mib=_by_share(out[i].memory_used_mib, {p: shares[p] for p in named})
                )
        rest = {p: s for p, s in shares.items() if p not in located}
        for i in pooled:
            if rest:
                out[i] = replace(out[i], job_memory_mib=_by_share(out[i].memory_used_mib, rest))
    return out


def _by_share(used_mib: float, shares: Mapping[str, float]) -> dict[str, float]:
    total = sum(shares.values())
    return {pod: used_mib * share / total for pod, share in sorted(shares.items())}


def _clip(line: str, n: int = 120) -> str:
    return line if len(line) <= n else line[: n - 1] + "…"
