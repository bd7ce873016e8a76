"""The gpufleet JSONL trace format: reader, writer and its wire models.

One JSON object per line (UTF-8). Blank lines are ignored. Every object has a ``kind``:

- ``{"kind": "cluster", ...}`` — optional, and only as the first object: the trace's ``name``,
  its ``nodes`` and autoscaling ``pools`` (see :class:`ClusterLine`).
- ``{"kind": "job", ...}`` — one job (see :class:`JobLine`); jobs may come in any order, the
  :class:`Trace` sorts them by ``submit`` (stable).

A job's GPU request per pod is given by ``gpus`` (count, default 1 when ``gpu_milli`` or ``mig`` is
given, else 0 = no GPU), ``gpu_milli`` (milli-GPU per GPU, 1..1000, default 1000, or the MIG slice's
share) and ``mig`` (a MIG profile name such as ``"1g.10gb"``). Examples::

    {"kind": "job", "submit": 0, "name": "train", "gpus": 8, "duration_s": 3600}
    {"kind": "job", "submit": 12.5, "name": "nb", "gpu_milli": 500, "duration_s": 600}
    {"kind": "job", "submit": 30, "name": "inf", "mig": "1g.10gb", "gpu_types": ["A100-80GB"]}

A job may carry its own budget, ``budget_usd`` (dollars, > 0): the simulator stops it (CANCELLED) once
its cost reaches it, as the server stops a job submitted with ``budget_usd``.

Validation is strict (pydantic ``strict=True, extra="forbid", allow_inf_nan=False``): unknown keys,
strings where numbers belong, booleans where integers belong, and NaN/Infinity are errors. Sizes and
times are bounded by :mod:`gpufleet.sim.limits` (gang size, GPUs per pod and node, node and job
counts, times up to 10 years). Every error is a
:class:`~gpufleet.errors.TraceError` naming the file, the line and the field path
(``nodes.2.gpu_count``). GPU model names are canonicalized (``V100M16`` → ``V100-16GB``); unknown
names are kept as written. Compatibility rule: new fields get defaults, so older files stay valid.

The writer omits fields equal to their defaults; ``parse_jsonl(iter_jsonl(t))`` gives back the
same jobs, nodes and pools (GPU type names canonicalized). Files are read and written by
:mod:`gpufleet.io.traces` (``load_jsonl``/``dump_jsonl``): this module does no I/O.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpufleet.errors import InputError, TraceError
from gpufleet.model.gpu import GPU_MODELS, MILLI, MigProfile, canonical_gpu_name
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest, JobSpec
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode
from gpufleet.sim.limits import (
    MAX_CPU_MILLI,
    MAX_GANG_SIZE,
    MAX_GPUS_PER_NODE,
    MAX_GPUS_PER_POD,
    MAX_JOBS,
    MAX_MEMORY_MIB,
    MAX_NODES,
    MAX_POOLS,
    MAX_TIME_S,
)
from gpufleet.sim.traces.base import Trace, TraceJob

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)
MAX_BUDGET_USD = 1e9  # a job's own budget, at most (the API's bound, gpufleet.wire.JobSubmit.budget_usd)


def _canon(name: str) -> str:
    return canonical_gpu_name(name) or name.strip()


def mig_profile(name: str) -> MigProfile | None:
    """The MIG profile called ``name`` on any built-in GPU model (same name = same share)."""
    for model in GPU_MODELS.values():
        profile = model.mig_profile(name)
        if profile is not None:
            return profile
    return None


class NodeLine(BaseModel):
    """A node of the cluster (mirrors :class:`gpufleet.model.Node`)."""

    model_config = _STRICT

    name: str = Field(min_length=1)
    gpu_model: str = ""
    gpu_count: int = Field(default=0, ge=0, le=MAX_GPUS_PER_NODE)
    cpu_milli: int = Field(default=0, ge=0, le=MAX_CPU_MILLI)
    memory_mib: int = Field(default=0, ge=0, le=MAX_MEMORY_MIB)
    pool: str = "default"
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    hourly_price_usd: float | None = Field(default=None, ge=0)
    sharing: SharingMode = SharingMode.SHARED
    labels: dict[str, str] = Field(default_factory=dict)

    def to_node(self) -> Node:
        fields = self.model_dump()
        fields["gpu_model"] = _canon(self.gpu_model) if self.gpu_model else ""
        return Node(**fields)

    @classmethod
    def from_node(cls, node: Node) -> NodeLine:
        """The node as a trace line. Its GPU sharing facts (what a Kubernetes device plugin
        advertises) are not part of the trace format: a simulated node hands out GPUs as its
        ``sharing`` mode says; nor are its taints (a simulated node keeps no job off)."""
        fields = asdict(node)
        fields.pop("gpu_facts", None)
        fields.pop("taints", None)
        return cls.model_validate(fields)


class PoolLine(BaseModel):
    """An autoscaling node pool (mirrors :class:`gpufleet.model.NodePool`)."""

    model_config = _STRICT

    name: str = Field(min_length=1)
    gpu_model: str = Field(min_length=1)
    gpus_per_node: int = Field(ge=0, le=MAX_GPUS_PER_NODE)
    cpu_milli: int = Field(ge=0, le=MAX_CPU_MILLI)
    memory_mib: int = Field(ge=0, le=MAX_MEMORY_MIB)
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    hourly_price_usd: float | None = Field(default=None, ge=0)
    min_nodes: int = Field(default=0, ge=0, le=MAX_NODES)
    max_nodes: int = Field(default=0, ge=0, le=MAX_NODES)
    initial_nodes: int = Field(default=0, ge=0, le=MAX_NODES)
    provisioning_delay_s: float = Field(default=180.0, ge=0, le=MAX_TIME_S)
    sharing: SharingMode = SharingMode.SHARED
    labels: dict[str, str] = Field(default_factory=dict)

    def to_pool(self) -> NodePool:
        fields = self.model_dump()
        fields["gpu_model"] = _canon(self.gpu_model)
        return NodePool(**fields)

    @classmethod
    def from_pool(cls, pool: NodePool) -> PoolLine:
        fields = asdict(pool)
        fields.pop("gpu_facts", None)  # not part of the trace format, as for a node
        fields.pop("taints", None)  # nor its nodes' taints (a cluster file's pools have them: sim.clusterspec)
        return cls.model_validate(fields)


class ClusterLine(BaseModel):
    """``{"kind": "cluster", "name": ..., "nodes": [...], "pools": [...]}`` — first line only."""

    model_config = _STRICT

    kind: Literal["cluster"]
    name: str | None = None  # the trace's name; None: the file's stem
    nodes: list[NodeLine] = Field(default_factory=list, max_length=MAX_NODES)
    pools: list[PoolLine] = Field(default_factory=list, max_length=MAX_POOLS)

    @model_validator(mode="after")
    def _bounded(self) -> ClusterLine:
        if len(self.nodes) + sum(p.max_nodes for p in self.pools) > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} nodes (static nodes plus the pools' max_nodes)")
        return self


class JobLine(BaseModel):
    """One job. Times are seconds; ``submit`` is from the start of the trace."""

    model_config = _STRICT

    kind: Literal["job"]
    submit: float = Field(ge=0, le=MAX_TIME_S)
    name: str = Field(min_length=1)
    team: str = "default"
    project: str = ""
    namespace: str = "default"
    experiment: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    priority: str = "normal"  # a priority class name (background, low, normal, high, urgent)
    gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS_PER_POD)  # per pod
    gpu_milli: int | None = Field(default=None, ge=1, le=MILLI)  # per GPU
    mig: str | None = None
    gpu_types: list[str] = Field(default_factory=list)  # allowed GPU models; empty = any
    min_gpu_memory_gib: float = Field(default=0.0, ge=0)
    cpu_milli: int = Field(default=0, ge=0, le=MAX_CPU_MILLI)  # per pod
    memory_mib: int = Field(default=0, ge=0, le=MAX_MEMORY_MIB)  # per pod
    preemptible: bool = False
    checkpoint_interval_s: float | None = Field(default=None, gt=0, le=MAX_TIME_S)
    duration_s: float | None = Field(default=None, ge=0, le=MAX_TIME_S)  # how long it really runs (simulation)
    estimated_runtime_s: float | None = Field(default=None, ge=0, le=MAX_TIME_S)
    max_runtime_s: float | None = Field(default=None, gt=0, le=MAX_TIME_S)
    gang_size: int = Field(default=1, ge=1, le=MAX_GANG_SIZE)
    budget_usd: float | None = Field(default=None, gt=0, le=MAX_BUDGET_USD)  # its own budget: stopped at this cost

    @field_validator("priority")
    @classmethod
    def _known_priority(cls, v: str) -> str:
        if v not in PRIORITY_CLASSES:
            raise ValueError(f"unknown priority class '{v}' (known: {', '.join(PRIORITY_CLASSES)})")
        return v

    @field_validator("mig")
    @classmethod
    def _known_mig(cls, v: str | None) -> str | None:
        if v is not None and mig_profile(v) is None:
            known = sorted({p.name for m in GPU_MODELS.values() for p in m.mig_profiles})
            raise ValueError(f"unknown MIG profile '{v}' (known: {', '.join(known)})")
        return v

    def gpu_request(self) -> GpuRequest:
        """The per-pod request; raises :class:`InputError` (with the field) if inconsistent."""
        profile = mig_profile(self.mig) if self.mig is not None else None
        default_milli = profile.milli if profile is not None else MILLI
        has_share = self.gpu_milli is not None or profile is not None
        count = self.gpus if self.gpus is not None else (1 if has_share else 0)
        milli = self.gpu_milli if self.gpu_milli is not None else default_milli
        if profile is not None and count != 1:  # before GpuRequest, which would blame gpu_milli
            raise InputError(f"a MIG request asks for exactly one slice, got gpus={count}", field="mig")
        return GpuRequest(count=count, milli=milli, mig_profile=self.mig)

    def to_trace_job(self) -> TraceJob:
        spec = JobSpec(
            name=self.name,
            team=self.team,
            project=self.project,
            namespace=self.namespace,
            experiment=self.experiment,
            labels=dict(self.labels),
            priority_class=self.priority,
            gpu=self.gpu_request(),
            gpu_types=frozenset(_canon(t) for t in self.gpu_types),
            min_gpu_memory_gib=self.min_gpu_memory_gib,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            preemptible=self.preemptible,
            checkpoint_interval_s=self.checkpoint_interval_s,
            max_runtime_s=self.max_runtime_s,
            estimated_runtime_s=self.estimated_runtime_s,
            gang_size=self.gang_size,
            duration_s=self.duration_s,
            budget_usd=self.budget_usd,
        )
        return TraceJob(self.submit, spec)

    @classmethod
    def from_trace_job(cls, job: TraceJob) -> JobLine:
        spec = job.spec
        req = spec.gpu
        profile = mig_profile(req.mig_profile) if req.mig_profile is not None else None
        default_milli = profile.milli if profile is not None else MILLI
        has_share = req.milli != default_milli or profile is not None
        implied_count = 1 if has_share else 0
        return cls(
            kind="job",
            submit=job.submit_time,
            name=spec.name,
            team=spec.team,
            project=spec.project,
            namespace=spec.namespace,
            experiment=spec.experiment,
            labels=dict(spec.labels),
            priority=spec.priority_class,
            gpus=None if req.count == implied_count else req.count,
            gpu_milli=None if req.milli == default_milli else req.milli,
            mig=req.mig_profile,
            gpu_types=sorted(spec.gpu_types),
            min_gpu_memory_gib=spec.min_gpu_memory_gib,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            preemptible=spec.preemptible,
            checkpoint_interval_s=spec.checkpoint_interval_s,
            duration_s=spec.duration_s,
            estimated_runtime_s=spec.estimated_runtime_s,
            max_runtime_s=spec.max_runtime_s,
            gang_size=spec.gang_size,
            budget_usd=spec.budget_usd,
        )


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(line)"


def _from_validation_error(exc: ValidationError, source: str, line: int) -> TraceError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    more = len(errors) - 1
    if more:
        others = ", ".join(_field_path(e["loc"]) for e in errors[1:4])
        msg += f" (and {more} more: {others}{', ...' if more > 3 else ''})"
    return TraceError(msg, source=source, line=line, field=_field_path(first["loc"]))


def parse_jsonl(lines: Iterable[str], *, source: str = "<jsonl>", name: str | None = None) -> Trace:
    """Parse JSONL text lines (``source`` names them in errors) into a :class:`Trace`."""
    cluster: ClusterLine | None = None
    jobs: list[TraceJob] = []
    seen_object = False
    for lineno, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"not JSON: {exc.msg} at column {exc.colno}", source=source, line=lineno) from None
        if not isinstance(obj, dict):
            raise TraceError(f"expected a JSON object, got {type(obj).__name__}", source=source, line=lineno)
        kind = obj.get("kind")
        try:
            # Validate the text itself (JSON mode): strict, and enums are given by their values.
            if kind == "job":
                if len(jobs) >= MAX_JOBS:
                    raise TraceError(f"more than {MAX_JOBS} jobs in one trace", source=source, line=lineno)
                jobs.append(JobLine.model_validate_json(text).to_trace_job())
            elif kind == "cluster":
                if seen_object:
                    raise TraceError(
                        "the cluster object must be the first object of the file",
                        source=source,
                        line=lineno,
                        field="kind",
                    )
                cluster = ClusterLine.model_validate_json(text)
            else:
                got = "nothing" if kind is None else repr(kind)
                raise TraceError(f"expected 'job' or 'cluster', got {got}", source=source, line=lineno, field="kind")
        except ValidationError as exc:
            raise _from_validation_error(exc, source, lineno) from None
        except TraceError:
            raise
        except InputError as exc:  # a model invariant (e.g. GpuRequest) refused the values
            msg = exc.message.removeprefix(f"field '{exc.field}': ") if exc.field else exc.message
            raise TraceError(msg, source=source, line=lineno, field=exc.field) from None
        seen_object = True
    trace_name = name or (cluster.name if cluster is not None and cluster.name else None)
    return Trace(
        name=trace_name or posixpath.splitext(posixpath.basename(source))[0],
        jobs=jobs,
        nodes=[n.to_node() for n in cluster.nodes] if cluster is not None else [],
        pools=[p.to_pool() for p in cluster.pools] if cluster is not None else [],
        source=source,
    )


def iter_jsonl(trace: Trace) -> Iterator[str]:
    """The lines (without newlines) of ``trace`` in the JSONL format; a cluster line first."""
    cluster = ClusterLine(
        kind="cluster",
        name=trace.name,
        nodes=[NodeLine.from_node(n) for n in trace.nodes],
        pools=[PoolLine.from_pool(p) for p in trace.pools],
    )
    yield cluster.model_dump_json(exclude_defaults=True)
    for job in trace.jobs:
        yield JobLine.from_trace_job(job).model_dump_json(exclude_defaults=True)
