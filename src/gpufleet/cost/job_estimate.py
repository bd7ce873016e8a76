"""Job cost estimates: what a job (or the rest of it) is expected to cost, and the one price of a
GPU-hour used for estimates (:func:`usd_per_gpu_hour`) — by the block check, the feasibility
check and the simulator alike. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from gpufleet.model.job import Job
from gpufleet.model.share import milli_gpus

# A job with neither a runtime estimate nor a max runtime is assumed to run this long when its
# cost is estimated (the feasibility check and block's committed spend): one hour, the scheduler's
# and the simulator's default too.
DEFAULT_RUNTIME_S: Final = 3600.0


@dataclass(frozen=True, slots=True)
class JobCostEstimate:
    """What a job is expected to cost: GPU-equivalents x hours x price of a GPU-hour."""

    gpus: float
    runtime_s: float
    runtime_source: str  # estimate | max_runtime | default
    usd_per_gpu_hour: float
    cost_usd: float


def job_runtime(estimated_runtime_s: float | None, max_runtime_s: float | None) -> tuple[float, str]:
    """The runtime used for cost estimates: the estimate, else the max runtime, else one hour."""
    if estimated_runtime_s is not None and estimated_runtime_s > 0:
        return float(estimated_runtime_s), "estimate"
    if max_runtime_s is not None and max_runtime_s > 0:
        return float(max_runtime_s), "max_runtime"
    return DEFAULT_RUNTIME_S, "default"


def estimate_job_cost(
    gpus: float,
    usd_per_gpu_hour: float,
    *,
    estimated_runtime_s: float | None = None,
    max_runtime_s: float | None = None,
    elapsed_s: float = 0.0,
) -> JobCostEstimate:
    """Estimated cost of (the rest of) a job: ``gpus`` GPU-equivalents for its runtime less
    ``elapsed_s`` already run (metered by the ledger), at ``usd_per_gpu_hour``. A whole node-price
    per GPU is used (its CPU and memory included), so the estimate errs high: a check against it
    keeps spend under a limit rather than near it."""
    runtime, source = job_runtime(estimated_runtime_s, max_runtime_s)
    left = max(0.0, runtime - max(0.0, elapsed_s))
    cost = gpus * left / 3600.0 * usd_per_gpu_hour
    return JobCostEstimate(gpus, runtime, source, usd_per_gpu_hour, cost)


def job_gpus(job: Job) -> float:
    return milli_gpus(job.spec.total_gpu_milli)


def estimate_for(job: Job, usd_per_gpu_hour: float, now: float) -> JobCostEstimate:
    """:func:`estimate_job_cost` for a scheduler :class:`Job` (its current run's elapsed time)."""
    elapsed = now - job.start_time if job.start_time is not None else 0.0
    return estimate_job_cost(
        job_gpus(job),
        usd_per_gpu_hour,
        estimated_runtime_s=job.spec.estimated_runtime_s,
        max_runtime_s=job.spec.max_runtime_s,
        elapsed_s=elapsed,
    )


def usd_per_gpu_hour(nodes: Iterable[tuple[str, int, float]], gpu_types: Sequence[str] = ()) -> float:
    """The price of a GPU-hour used for cost estimates: the dearest whole-node price per GPU
    (``hourly_usd / gpu_count``) among the GPU nodes ``(gpu_model, gpu_count, hourly_usd)`` whose
    model is one of ``gpu_types`` (any GPU node when ``gpu_types`` is empty or none matches).
    Erring high keeps a block conservative. 0 when no GPU node is known (then only metered spend
    counts)."""
    gpu_nodes = [(model, count, usd) for model, count, usd in nodes if count > 0]
    fit = [n for n in gpu_nodes if not gpu_types or n[0] in gpu_types] or gpu_nodes
    return max((usd / count for _, count, usd in fit), default=0.0)
