"""Turn a :class:`wire.JobSubmit` from a caller into a typed :class:`~gpufleet.model.submission.Submission`.

Shared by every way of submitting (REST API, CLI, SDK in-process) so they validate alike; adoption
and the admission webhook build theirs with the same builder
(:func:`gpufleet.model.submission.submission`). Free of FastAPI: errors are :class:`InputError`
(naming the field, e.g. ``gpu_types[1]``) and :class:`PermissionDeniedError`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.errors import InputError, PermissionDeniedError
from gpufleet.integrations.mlflow_sync import mlflow_labels
from gpufleet.model.gpu import GPU_MODELS, MILLI, canonical_gpu_name
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest, JobSpec
from gpufleet.model.node import Node, NodePool
from gpufleet.model.submission import Submission, default_name, submission
from gpufleet.scheduling.admission import Need, fit_problem
from gpufleet.wire import JobSubmit, Role

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = [
    "PreparedSubmit",
    "check_fits",
    "check_fits_store",
    "default_name",
    "prepare_submit",
    "request_hash",
    "resolve_team",
    "spec_of_fields",
]


@dataclass(frozen=True, slots=True)
class PreparedSubmit:
    """What to store: the team the job belongs to, the typed submission, and the hash of the
    request (two submits with the same idempotency key must carry the same hash; None: a
    submission no caller sent as a request, e.g. an adopted workload)."""

    team: str
    submission: Submission
    request_sha256: str | None

    @property
    def fields(self) -> dict[str, Any]:
        """The submission as the stored job's columns."""
        return self.submission.fields()


def request_hash(body: JobSubmit) -> str:
    """SHA-256 of the canonical JSON of the request (sorted keys, no spaces, defaults filled in),
    so that a retry with the same content in another key order or spelling hashes the same."""
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def resolve_team(body: JobSubmit, *, caller_team: str, caller_role: Role) -> str:
    """The team to submit to: the body's, defaulting to the caller's. Members submit only to their
    own team; viewers not at all."""
    if caller_role is Role.VIEWER:
        raise PermissionDeniedError("a viewer token cannot submit jobs")
    team = body.team or caller_team
    if caller_role is not Role.ADMIN and team != caller_team:
        raise PermissionDeniedError(f"a {caller_role.value} of team '{caller_team}' cannot submit to team '{team}'")
    return team


def _gpu_types(body: JobSubmit) -> list[str]:
    out: list[str] = []
    for i, name in enumerate(body.gpu_types):
        canon = canonical_gpu_name(name)
        if canon is None:
            raise InputError(f"unknown GPU type '{name}' (known: {', '.join(GPU_MODELS)})", field=f"gpu_types[{i}]")
        if canon not in out:
            out.append(canon)
    return out


def _mig(profile: str, types: list[str]) -> tuple[int, list[str]]:
    """The slice's milli-GPU share and the GPU models that offer ``profile``."""
    offering = [m.name for m in GPU_MODELS.values() if m.mig_profile(profile) is not None]
    if not offering:
        known = sorted({p.name for m in GPU_MODELS.values() for p in m.mig_profiles})
        raise InputError(f"unknown MIG profile '{profile}' (known: {', '.join(known)})", field="mig")
    if types:
        for i, name in enumerate(types):
            if name not in offering:
                raise InputError(
                    f"GPU type {name} has no MIG profile '{profile}' (offered by: {', '.join(offering)})",
                    field=f"gpu_types[{i}]",
                )
        offering = types
    slice_ = GPU_MODELS[offering[0]].mig_profile(profile)
    assert slice_ is not None
    return slice_.milli, offering


def prepare_submit(body: JobSubmit, *, caller_team: str, caller_role: Role) -> PreparedSubmit:
    """Validate ``body`` for the caller and build its :class:`Submission` (stored as the job's
    columns, :attr:`PreparedSubmit.fields`).

    GPU shape: ``gpus`` whole GPUs (``gpu_milli`` 1000); a fraction is one GPU with ``gpu_milli``
    < 1000; a MIG slice is one GPU with ``mig_profile`` set, ``gpu_milli`` its share and, when no
    GPU types are given, the types that offer the profile.
    """
    team = resolve_team(body, caller_team=caller_team, caller_role=caller_role)
    if body.priority not in PRIORITY_CLASSES:  # the wire type already limits it; keep the rule here too
        raise InputError(f"unknown priority class '{body.priority}'", field="priority")
    types = _gpu_types(body)
    gpus, milli, mig = body.gpus, MILLI, None
    if body.mig is not None:
        milli, types = _mig(body.mig, types)
        gpus, mig = 1, body.mig
    elif body.gpu_milli is not None:
        gpus, milli = 1, body.gpu_milli
    if body.min_gpu_memory_gib > 0 and types:
        need = body.min_gpu_memory_gib
        roomy = [t for t in types if GPU_MODELS[t].memory_gib in (0, None) or GPU_MODELS[t].memory_gib >= need]
        if not roomy:
            raise InputError(
                f"none of the GPU types {', '.join(types)} has {body.min_gpu_memory_gib:g} GiB",
                field="min_gpu_memory_gib",
            )
    if gpus == 0 and body.gpu_types:
        raise InputError("gpu_types given for a job that asks for no GPU (set gpus)", field="gpu_types")
    if any(not part for part in body.command[:1]):
        raise InputError("the program (command[0]) is empty", field="command[0]")
    sub = submission(
        body.name,
        body.command,
        project=body.project,
        namespace=body.namespace or "default",
        experiment=body.experiment,
        labels=mlflow_labels(body.labels, body.env),  # MLFLOW_RUN_ID in env → label mlflow-run-id
        priority_class=body.priority,
        gpu=GpuRequest(gpus, milli, mig),
        gpu_types=types,
        min_gpu_memory_gib=body.min_gpu_memory_gib,
        cpu_milli=body.cpu_milli,
        memory_mib=body.memory_mib,
        pods=body.pods,
        preemptible=body.preemptible,
        env=body.env,
        cwd=body.cwd,
        image=body.image,
        checkpoint_dir=body.checkpoint_dir,
        checkpoint_interval_s=body.checkpoint_interval_s,
        max_runtime_s=body.max_runtime_s,
        estimated_runtime_s=body.estimated_runtime_s,
        budget_usd=body.budget_usd,
    )
    return PreparedSubmit(team, sub, request_hash(body))


def spec_of_fields(fields: Mapping[str, Any] | Submission, team: str = "default") -> JobSpec:
    """The scheduler's :class:`JobSpec` of a submission (or of stored columns)."""
    sub = fields if isinstance(fields, Submission) else Submission.from_fields(fields)
    return sub.spec(team)


def check_fits(fields: Mapping[str, Any] | Submission, nodes: Sequence[Node], pools: Sequence[NodePool] = ()) -> None:
    """Refuse (:class:`InputError`, naming the field at fault) a job that no node of ``nodes`` and no
    empty node of ``pools`` could ever hold — its resources, its node selector and affinity
    (``constraints.nodeSelector`` / ``constraints.affinity``), the taints it does not tolerate
    (``constraints.tolerations``): the rules of the cycle's ``feasibility`` admission check
    (:func:`gpufleet.scheduling.admission.submission_status`). Nothing is refused while no node and
    no pool is known (a fresh server whose nodes have not registered yet)."""
    if not nodes and not pools:
        return
    spec = spec_of_fields(fields)
    why = fit_problem(Need.of_spec(spec), spec.constraints, nodes, pools)
    if why is not None:
        reason, field = why
        raise InputError(f"no node could ever run this job: {reason}", field=field)


def check_fits_store(s: Session, fields: Mapping[str, Any] | Submission) -> None:
    """:func:`check_fits` against the nodes the store knows (read-only; removed nodes excluded).
    The submit route calls it inside its ``input_at("body")`` block, so the 422 names ``body.<field>``."""
    from gpufleet.store import repo
    from gpufleet.store.convert import node_from_row

    check_fits(fields, [node_from_row(r) for r in repo.list_nodes(s)])
