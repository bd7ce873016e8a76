"""Persists NVML GPU samples and summarizes a job's GPU use from them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.backends.base import GpuSample
from gpufleet.store.models import GpuSampleRow
from gpufleet.store.repo._common import _insert


def record_gpu_samples(s: Session, samples: Sequence[GpuSample]) -> int:
    """Store NVML samples: one row per GPU, plus one per job using it (``job_id`` set, the job's
    memory on that GPU). Returns the number of rows written."""
    rows: list[dict[str, Any]] = []
    for g in samples:
        base = {
            "time": g.time,
            "node": g.node,
            "gpu_index": g.gpu_index,
            "utilization_pct": g.utilization_pct,
            "uuid": g.uuid or None,
            "temperature_c": g.temperature_c,
            "power_w": g.power_w,
        }
        rows.append(
            {**base, "job_id": None, "memory_used_mib": g.memory_used_mib, "memory_total_mib": g.memory_total_mib}
        )
        for job_id, mib in g.job_memory_mib.items():
            rows.append({**base, "job_id": job_id, "memory_used_mib": mib, "memory_total_mib": g.memory_total_mib})
    if rows:
        s.execute(_insert(s)(GpuSampleRow), rows)
    return len(rows)


def job_gpu_stats(s: Session, job_id: str) -> dict[str, Any]:
    """What the job's GPUs did: ``samples``, ``mean_utilization_pct`` (of the GPUs it was on, while
    it was on them) and ``max_memory_mib`` (its own processes); None values when never sampled."""
    q = select(
        func.count(GpuSampleRow.id),
        func.avg(GpuSampleRow.utilization_pct),
        func.max(GpuSampleRow.memory_used_mib),
        func.min(GpuSampleRow.time),
        func.max(GpuSampleRow.time),
    ).where(GpuSampleRow.job_id == job_id)
    n, mean_util, max_mem, first, last = s.execute(q).one()
    return {
        "samples": int(n),
        "mean_utilization_pct": None if mean_util is None else float(mean_util),
        "max_memory_mib": None if max_mem is None else float(max_mem),
        "first_sample_at": first,
        "last_sample_at": last,
    }
