"""Rows to model objects and back.

The scheduler and the cost engine work on :mod:`gpufleet.model` dataclasses; the store keeps flat
rows. These functions are the only place that knows how one maps to the other, so the controller's
loader, the API and the ledger agree (e.g. on what a MIG request's ``milli`` is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.errors import InputError
from gpufleet.model.constraints import Taint, constraints_from_dict, taint_from_dict, taint_to_dict
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import GpuRequest, Job, JobSpec, JobState, PodPlacement
from gpufleet.model.node import CapacityType, GpuSharingFacts, Node, SharingMode
from gpufleet.model.share import landed_units, mig_slices
from gpufleet.model.share import mig_milli as _slices_milli
from gpufleet.store.models import JobRow, NodeRow


def mig_milli(profile: str, gpu_types: Iterable[str] = ()) -> int:
    """Milli-GPU of a MIG slice: its share of the first allowed GPU model that has the profile,
    else ``1000 * k / 7`` (rounded) from the profile's name ``<k>g.<mem>gb``; :class:`InputError`
    for a name gpufleet cannot read."""
    slices = mig_slices(profile, *gpu_types)
    if slices is None:
        raise InputError(f"not a MIG profile name: '{profile}' (expected e.g. 1g.10gb)", field="mig")
    return _slices_milli(slices)


def gpu_request_from_row(row: JobRow) -> GpuRequest:
    """What one pod of the job asks of GPUs (see :class:`GpuRequest` for the three shapes)."""
    if row.mig_profile:
        return GpuRequest(count=1, milli=mig_milli(row.mig_profile, row.gpu_types), mig_profile=row.mig_profile)
    if row.gpus <= 0:
        return GpuRequest(count=0)
    if row.gpu_milli < MILLI:
        return GpuRequest(count=1, milli=row.gpu_milli)
    return GpuRequest(count=row.gpus, milli=MILLI)


def pod_share_units(row: JobRow, gpu_model_name: str, node_replicas: int) -> int:
    """GPU share (1/7000 GPU) one pod of the job holds on a node of ``gpu_model_name`` whose GPUs are
    shared ``node_replicas`` ways (the loop's metering rule, :func:`gpufleet.model.share.landed_units`)."""
    return landed_units(gpu_request_from_row(row), gpu_model_name, row.labels or {}, node_replicas)


def job_spec_from_row(row: JobRow) -> JobSpec:
    return JobSpec(
        name=row.name,
        team=row.team,
        project=row.project,
        namespace=row.namespace,
        experiment=row.experiment,
        labels={str(k): str(v) for k, v in (row.labels or {}).items()},
        priority_class=row.priority_class,
        gpu=gpu_request_from_row(row),
        gpu_types=frozenset(row.gpu_types or ()),
        min_gpu_memory_gib=row.min_gpu_memory_gib,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        preemptible=row.preemptible,
        checkpoint_interval_s=row.checkpoint_interval_s,
        max_runtime_s=row.max_runtime_s,
        estimated_runtime_s=row.estimated_runtime_s,
        gang_size=max(1, row.pods or 1),
        budget_usd=row.budget_usd,
        constraints=constraints_from_dict(row.constraints, source=f"job {row.id}", at="constraints"),
    )


def job_from_row(row: JobRow, *, run_started_at: float | None = None) -> Job:
    """The scheduler's view of a stored job. ``run_started_at`` is when the current run started
    (from ``runs``; the job row only keeps the first start)."""
    return Job(
        id=row.id,
        spec=job_spec_from_row(row),
        submit_time=row.submitted_at,
        state=JobState(row.state),
        placement=placement_from_json(row.placement or []),
        start_time=run_started_at,
        first_start_time=row.started_at,
        end_time=row.ended_at,
        restarts=row.restarts,
        preemptions=row.preemptions,
    )


def placement_to_json(placement: Iterable[PodPlacement]) -> list[dict[str, Any]]:
    return [{"node": p.node, "gpus": list(p.gpus), "milli": p.milli, "mig_mask": p.mig_mask} for p in placement]


def placement_from_json(data: Iterable[Mapping[str, Any]]) -> tuple[PodPlacement, ...]:
    return tuple(
        PodPlacement(
            node=str(d["node"]),
            gpus=tuple(int(g) for g in d.get("gpus", ())),
            milli=int(d.get("milli", MILLI)),
            mig_mask=int(d.get("mig_mask", 0)),
        )
        for d in data
    )


def node_from_row(row: NodeRow) -> Node:
    return Node(
        name=row.name,
        gpu_model=row.gpu_model,
        gpu_count=row.gpu_count,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        pool=row.pool,
        capacity_type=CapacityType(row.capacity_type),
        hourly_price_usd=row.hourly_price_usd,
        sharing=SharingMode(row.sharing),
        labels={str(k): str(v) for k, v in (row.labels or {}).items()},
        gpu_facts=gpu_facts_from_json(row.gpu_facts),
        taints=taints_from_json(row.taints),
    )


def taints_to_json(taints: Iterable[Taint]) -> list[dict[str, str]] | None:
    """A node's taints as its row keeps them (``nodes.taints``, a Node's ``spec.taints`` shape);
    None for none."""
    return [taint_to_dict(t) for t in taints] or None


def taints_from_json(data: Iterable[Any] | None) -> tuple[Taint, ...]:
    """The inverse of :func:`taints_to_json` (NULL: none)."""
    return tuple(taint_from_dict(d, source="nodes.taints", at=f"taints[{i}]") for i, d in enumerate(data or ()))


def gpu_facts_to_json(facts: GpuSharingFacts) -> dict[str, Any] | None:
    """A node's GPU sharing as its row keeps it (``nodes.gpu_facts``); None for the default."""
    if facts == GpuSharingFacts():
        return None
    return {
        "resource": facts.resource,
        "replicas": facts.replicas,
        "strategy": facts.strategy,
        "mig_strategy": facts.mig_strategy,
        "mig_profiles": dict(facts.mig_profiles),
        "whole_gpus": facts.whole_gpus,
    }


def gpu_facts_from_json(data: Mapping[str, Any] | None) -> GpuSharingFacts:
    """The inverse of :func:`gpu_facts_to_json` (NULL: the default)."""
    if data is None:
        return GpuSharingFacts()
    return GpuSharingFacts(
        resource=str(data["resource"]) if data.get("resource") else None,
        replicas=max(1, int(data.get("replicas") or 1)),
        strategy=str(data["strategy"]) if data.get("strategy") else None,
        mig_strategy=str(data["mig_strategy"]) if data.get("mig_strategy") else None,
        mig_profiles=tuple(sorted((str(p), int(n)) for p, n in (data.get("mig_profiles") or {}).items())),
        whole_gpus=int(data.get("whole_gpus") or 0),
    )
