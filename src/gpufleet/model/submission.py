"""A submission: what a caller asks gpufleet to run, typed — built once, whoever submits.

Three callers turn their input into a :class:`Submission` through :func:`submission`: the API
(:func:`gpufleet.services.submit.prepare_submit`, a ``JobSubmit`` body), adoption
(:mod:`gpufleet.k8s.adopt`, the pods of an owner people created) and the admission webhook
(:func:`gpufleet.k8s.review.submission_of`, the workload it judges). The store keeps it as the
columns of a job (:meth:`Submission.fields`; read back with :meth:`Submission.from_fields`), the
scheduler and the loop see it as a :class:`~gpufleet.model.job.JobSpec` (:meth:`Submission.spec`),
with the job's own budget (``budget_usd``) in both.

Pure: no I/O, no store; importable from every layer.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpufleet.model.constraints import NO_CONSTRAINTS, NodeConstraints, constraints_from_dict, constraints_to_dict
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.model.share import milli_gpus

MAX_NAME: Final = 255  # the store's column


def default_name(command: Iterable[str]) -> str:
    """A readable default job name: the program's base name and its first arguments."""
    words = list(command)
    if not words:
        return "job"
    prog = words[0].rstrip("/").rsplit("/", 1)[-1] or words[0]
    text = shlex.join([prog, *words[1:]])
    return text if len(text) <= 63 else text[:60] + "..."


@dataclass(frozen=True, slots=True)
class Submission:
    """A job as submitted: its name and command, attribution, priority, the shape of one pod
    (``gpu``, CPU, memory; ``pods`` of them placed all or nothing), where it may run, how long it
    is expected to run and its own budget. Build it with :func:`submission` (which normalizes)."""

    name: str
    command: tuple[str, ...] = ()
    project: str = ""
    namespace: str = "default"
    experiment: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    priority_class: str = "normal"
    gpu: GpuRequest = field(default_factory=GpuRequest)  # per pod
    gpu_types: tuple[str, ...] = ()  # allowed GPU models (canonical names, each once); empty: any
    min_gpu_memory_gib: float = 0.0
    cpu_milli: int = 0  # per pod
    memory_mib: int = 0  # per pod
    pods: int = 1
    preemptible: bool = False
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    image: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_interval_s: float | None = None
    max_runtime_s: float | None = None
    estimated_runtime_s: float | None = None
    budget_usd: float | None = None  # the job's own budget: stopped (CANCELLED) when its cost reaches it
    # the nodes its pods may run on and the taints they tolerate (an adopted workload's pods' own)
    constraints: NodeConstraints = NO_CONSTRAINTS

    @property
    def gpus(self) -> float:
        """GPU-equivalents of all its pods (what an estimate prices)."""
        return milli_gpus(self.pods * self.gpu.total_milli)

    def spec(self, team: str = "default") -> JobSpec:
        """What the scheduler and the loop see of it, as a job of ``team``."""
        return JobSpec(
            name=self.name,
            team=team,
            project=self.project,
            namespace=self.namespace,
            experiment=self.experiment,
            labels=dict(self.labels),
            priority_class=self.priority_class,
            gpu=self.gpu,
            gpu_types=frozenset(self.gpu_types),
            min_gpu_memory_gib=self.min_gpu_memory_gib,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            preemptible=self.preemptible,
            checkpoint_interval_s=self.checkpoint_interval_s,
            max_runtime_s=self.max_runtime_s,
            estimated_runtime_s=self.estimated_runtime_s,
            gang_size=self.pods,
            budget_usd=self.budget_usd,
            constraints=self.constraints,
        )

    def fields(self) -> dict[str, Any]:
        """The columns of the stored job (``gpufleet.store.repo.submit_job``'s fields)."""
        return {
            "name": self.name,
            "project": self.project,
            "namespace": self.namespace,
            "experiment": self.experiment,
            "labels": dict(self.labels),
            "priority_class": self.priority_class,
            "command": list(self.command),
            "env": dict(self.env),
            "cwd": self.cwd,
            "image": self.image,
            "pods": self.pods,
            "gpus": self.gpu.count,
            "gpu_milli": self.gpu.milli,
            "mig_profile": self.gpu.mig_profile,
            "gpu_types": list(self.gpu_types),
            "min_gpu_memory_gib": self.min_gpu_memory_gib,
            "cpu_milli": self.cpu_milli,
            "memory_mib": self.memory_mib,
            "preemptible": self.preemptible,
            "checkpoint_dir": self.checkpoint_dir,
            "checkpoint_interval_s": self.checkpoint_interval_s,
            "max_runtime_s": self.max_runtime_s,
            "estimated_runtime_s": self.estimated_runtime_s,
            "budget_usd": self.budget_usd,
            # the PodSpec's shape (gpufleet.model.constraints); NULL: none
            "constraints": constraints_to_dict(self.constraints) or None,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Submission:
        """A submission of stored columns (:meth:`fields`; missing ones take their defaults)."""
        return submission(
            str(fields.get("name") or "job"),
            [str(c) for c in fields.get("command") or ()],
            project=str(fields.get("project") or ""),
            namespace=str(fields.get("namespace") or "default"),
            experiment=str(fields.get("experiment") or ""),
            labels=fields.get("labels") or {},
            priority_class=str(fields.get("priority_class") or "normal"),
            gpu=GpuRequest(
                int(fields.get("gpus") or 0), int(fields.get("gpu_milli") or MILLI), fields.get("mig_profile")
            ),
            gpu_types=fields.get("gpu_types") or (),
            min_gpu_memory_gib=float(fields.get("min_gpu_memory_gib") or 0.0),
            cpu_milli=int(fields.get("cpu_milli") or 0),
            memory_mib=int(fields.get("memory_mib") or 0),
            pods=int(fields.get("pods") or 1),
            preemptible=bool(fields.get("preemptible", False)),
            env=fields.get("env") or {},
            cwd=fields.get("cwd"),
            image=fields.get("image"),
            checkpoint_dir=fields.get("checkpoint_dir"),
            checkpoint_interval_s=fields.get("checkpoint_interval_s"),
            max_runtime_s=fields.get("max_runtime_s"),
            estimated_runtime_s=fields.get("estimated_runtime_s"),
            budget_usd=fields.get("budget_usd"),
            constraints=constraints_from_dict(fields.get("constraints"), source="job", at="constraints"),
        )


def submission(
    name: str,
    command: Iterable[str] = (),
    *,
    project: str = "",
    namespace: str = "",
    experiment: str = "",
    labels: Mapping[str, Any] | None = None,
    priority_class: str = "normal",
    gpu: GpuRequest | None = None,
    gpu_types: Iterable[str] = (),
    min_gpu_memory_gib: float = 0.0,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    pods: int = 1,
    preemptible: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    image: str | None = None,
    checkpoint_dir: str | None = None,
    checkpoint_interval_s: float | None = None,
    max_runtime_s: float | None = None,
    estimated_runtime_s: float | None = None,
    budget_usd: float | None = None,
    constraints: NodeConstraints = NO_CONSTRAINTS,
) -> Submission:
    """The one builder of a :class:`Submission` (the API, adoption and the webhook call it).

    Normalizes what every caller would otherwise do its own way: a blank name becomes
    :func:`default_name` of the command, a name is cut to the store's :data:`MAX_NAME`, a blank
    namespace is ``default``, label keys and values are strings, GPU types are kept once each in
    the order given. Validation of the caller's input (names of GPU types, priority classes,
    permissions) is the caller's: its errors name the caller's fields."""
    words = tuple(command)
    title = name.strip() or default_name(words)
    return Submission(
        name=title[:MAX_NAME],
        command=words,
        project=project,
        namespace=namespace or "default",
        experiment=experiment,
        labels={str(k): str(v) for k, v in (labels or {}).items()},
        priority_class=priority_class,
        gpu=gpu if gpu is not None else GpuRequest(),
        gpu_types=tuple(dict.fromkeys(gpu_types)),
        min_gpu_memory_gib=min_gpu_memory_gib,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        pods=max(1, pods),
        preemptible=preemptible,
        env=dict(env or {}),
        cwd=cwd,
        image=image,
        checkpoint_dir=checkpoint_dir,
        checkpoint_interval_s=checkpoint_interval_s,
        max_runtime_s=max_runtime_s,
        estimated_runtime_s=estimated_runtime_s,
        budget_usd=budget_usd,
        constraints=constraints,
    )
