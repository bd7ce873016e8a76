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
among them — an estimate, as DCGM does not see per-process memory.

DCGM's blank sentinels (:func:`is_blank`) are missing readings, not values. Every line is checked
by ``prometheus_client``'s parser; a malformed one (or a metric of ours with
a bad ``gpu`` label or a value that is not finite) raises :class:`~gpufleet.errors.InputError`
naming the line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

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


def _clip(line: str, n: int = 120) -> str:
    return line if len(line) <= n else line[: n - 1] + "…"
