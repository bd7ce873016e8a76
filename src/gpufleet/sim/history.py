"""Recorded jobs as a trace, so that "what if" can replay a cluster's own history.

:class:`HistoryJob` is what the store recorded of a job (loaded by
:func:`gpufleet.services.whatif.history_from_store`); :func:`trace_from_history` turns a list of them
into a :class:`~gpufleet.sim.traces.base.Trace` the what-if engine (:mod:`gpufleet.sim.whatif`)
replays. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.model.gpu import MILLI, canonical_gpu_name
from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.sim.traces.base import Trace, TraceJob


@dataclass(frozen=True, slots=True)
class HistoryJob:
    """A recorded job: when it was submitted, how long it really ran (seconds of run time over its
    runs), its shape and its scheduling attributes."""

    job_id: str
    submitted_at: float
    run_time_s: float
    team: str = "default"
    project: str = ""
    priority_class: str = "normal"
    gpus: int = 0
    gpu_milli: int = MILLI
    mig_profile: str | None = None
    gpu_types: tuple[str, ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0
    pods: int = 1
    preemptible: bool = False
    checkpoint_interval_s: float | None = None
    labels: dict[str, str] = field(default_factory=dict)


def trace_from_history(
    jobs: Sequence[HistoryJob], name: str = "history", *, recorded_cost_usd: float | None = None
) -> Trace:
    """Recorded jobs as a trace: submit times from the first one, duration = recorded run time, the
    requests as the cluster ran them (``as_run``: a what-if's baseline keeps their sharing).
    ``recorded_cost_usd``: what the ledger billed for the replayed nodes over the span of these
    jobs (:func:`gpufleet.services.whatif.recorded_node_cost_usd`), shown beside the baseline."""
    if not jobs:
        return Trace(name, [], source=name, as_run=True, recorded_cost_usd=recorded_cost_usd)
    t0 = min(j.submitted_at for j in jobs)
    out = []
    for j in jobs:
        gpu = GpuRequest(count=j.gpus, milli=j.gpu_milli if j.gpus else MILLI, mig_profile=j.mig_profile)
        spec = JobSpec(
            name=j.job_id,
            team=j.team,
            project=j.project,
            labels={**j.labels, "history/job_id": j.job_id},
            priority_class=j.priority_class,
            gpu=gpu,
            gpu_types=frozenset(g for g in (canonical_gpu_name(x) for x in j.gpu_types) if g),
            cpu_milli=j.cpu_milli,
            memory_mib=j.memory_mib,
            preemptible=j.preemptible,
            checkpoint_interval_s=j.checkpoint_interval_s,
            gang_size=max(1, j.pods),
            duration_s=max(1.0, j.run_time_s),
            estimated_runtime_s=max(1.0, j.run_time_s),
        )
        out.append(TraceJob(j.submitted_at - t0, spec))
    return Trace(name, out, source=name, as_run=True, recorded_cost_usd=recorded_cost_usd)
