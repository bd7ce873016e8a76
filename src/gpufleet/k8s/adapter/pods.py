"""Kubernetes ``v1`` Pod objects → the facts gpufleet needs about them.

Pure translation: a Pod as the API returns it (a plain dict) in, a :class:`PodFacts` out. A malformed
pod (a missing name or container list, an unparsable quantity, a bad gpufleet annotation) raises
:class:`~gpufleet.errors.InputError` whose message names the pod (``pod namespace/name``) and the
field (e.g. ``spec.containers[0].resources.requests[cpu]``); nothing else escapes.

Requests follow the scheduler's rule for a pod's effective request: the larger of (the sum over the
app containers and the sidecars, i.e. init containers with ``restartPolicy: Always``) and (each
plain init container, plus the sidecars started before it), plus ``spec.overhead``. A container's
request for a resource is its ``requests`` entry, else its ``limits`` entry (as the API server
defaults it).

GPU requests are recorded as asked: ``nvidia.com/gpu`` (whole GPUs, or replicas of a time-sliced
GPU: which one is decided at placement, by the node), ``nvidia.com/gpu.shared`` (replicas of a
time-sliced GPU under ``renameByDefault``), ``nvidia.com/mig-<profile>`` (MIG slices).
:meth:`PodFacts.gpu_request` turns that into a :class:`~gpufleet.model.job.GpuRequest` for a node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpufleet.errors import InputError
from gpufleet.k8s.adapter.nodes import quantity_count, quantity_mib, quantity_milli
from gpufleet.k8s.vocabulary import (
    ANNOTATION_COST_LIMIT,
    ANNOTATION_GANG_SIZE,
    ANNOTATION_KUEUE_GROUP_SIZE,
    CORE_API,
    GPU_RESOURCE,
    JOBSET_API,
    KEY_JOB_ID,
    KEY_RUN,
    LABEL_COMPLETION_INDEX,
    LABEL_JOBSET_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_JOBSET_UID,
    MIG_RESOURCE_PREFIX,
    SHARED_GPU_RESOURCE,
)
from gpufleet.model.constraints import NO_CONSTRAINTS, NodeConstraints, constraints_from_dict
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import GpuRequest
from gpufleet.model.share import mig_milli, mig_slices, replicas_milli, whole_gpus

# Other gang sizes a pod may carry (Kueue's plain-pod groups).
GANG_SIZE_ANNOTATIONS = (ANNOTATION_GANG_SIZE, ANNOTATION_KUEUE_GROUP_SIZE)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The workload a pod belongs to (its controller), or the pod itself for a bare pod."""

    kind: str
    name: str
    uid: str = ""
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class ContainerStatus:
    name: str
    init: bool  # an init container (sidecars included)
    state: str  # waiting | running | terminated | unknown
    started_at: float | None = None  # UNIX seconds
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    restart_count: int = 0


@dataclass(frozen=True, slots=True)
class PodCondition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str = ""
    message: str = ""
    last_transition: float | None = None


@dataclass(frozen=True, slots=True)
class PodFacts:
    namespace: str
    name: str
    uid: str
    owner: OwnerRef
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    node: str | None  # spec.nodeName once bound
    scheduler: str  # spec.schedulerName
    gpu_resource: str | None = None  # nvidia.com/gpu | nvidia.com/gpu.shared | nvidia.com/mig-<profile>
    gpu_count: int = 0  # of gpu_resource (GPUs, replicas or slices)
    mig_profile: str | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    team: str = ""
    project: str = ""
    experiment: str = ""  # label experiment-id
    cost_center: str = ""
    cost_limit_usd: float | None = None
    priority_class: str | None = None
    priority: int | None = None
    job_id: str | None = None  # gpufleet.io/job-id (annotation, else label)
    run: int | None = None  # gpufleet.io/run
    gang_size: int | None = None  # declared by an annotation (gpufleet.io/gang-size, Kueue's)
    completion_index: int | None = None  # Indexed Job: batch.kubernetes.io/job-completion-index
    created_at: float | None = None
    deletion_timestamp: float | None = None
    containers: tuple[ContainerStatus, ...] = ()
    conditions: tuple[PodCondition, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)  # spec.nodeSelector
    # spec.nodeSelector, required node affinity and tolerations: where the pod may run
    constraints: NodeConstraints = NO_CONSTRAINTS
    # status.reason / status.message: a kubelet's rejection says why here (``NodeAffinity``,
    # ``OutOfnvidia.com/gpu``, ``UnexpectedAdmissionError``: "Pod was rejected: ..."), an eviction too
    status_reason: str = ""
    status_message: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner_key(self) -> str:
        """``namespace/Kind/name`` of the owner: one gpufleet job per owner."""
        return f"{self.namespace}/{self.owner.kind}/{self.owner.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def rejected(self) -> bool:
        """The kubelet refused to admit the pod (``pkg/kubelet/lifecycle``): it failed before any
        container started, for a reason of the node, not of the job's code."""
        return (
            self.phase == "Failed"
            and self.status_message.startswith("Pod was rejected")
            and not any(c.started_at is not None for c in self.containers)
        )

    @property
    def started_at(self) -> float | None:
        """When the first app container started (None before any did)."""
        starts = [c.started_at for c in self.containers if not c.init and c.started_at is not None]
        return min(starts) if starts else None

    @property
    def finished_at(self) -> float | None:
        """When the last app container ended, once all of them have (else None)."""
        apps = [c for c in self.containers if not c.init]
        if not apps or any(c.state != "terminated" or c.finished_at is None for c in apps):
            return None
        return max(c.finished_at for c in apps if c.finished_at is not None)

    @property
    def exit_code(self) -> int | None:
        """The first non-zero exit code of an ended app container, 0 when all ended with 0, else None."""
        apps = [c for c in self.containers if not c.init]
        if not apps or any(c.state != "terminated" for c in apps):
            return None
        return next((c.exit_code for c in apps if c.exit_code), 0)

    def condition(self, type_: str) -> PodCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def gpu_request(self, replicas: int = 1, gpu: str | None = None) -> GpuRequest:
        """The pod's GPU request on a node whose GPUs (model ``gpu``) have ``replicas`` replicas.

        Whole GPUs stay whole; ``k`` replicas of a GPU shared ``replicas`` ways is ``k/replicas`` of
        one GPU (``milli = 1000 * k // replicas``); a MIG slice is that profile, its ``milli`` the
        slice's share of the GPU (of model ``gpu`` if it has the profile, else ``<k>g`` / 7; a name
        gpufleet cannot read, one slice). The arithmetic is :mod:`gpufleet.model.share`'s.
        """
        if self.gpu_count == 0 or self.gpu_resource is None:
            return GpuRequest()
        if self.mig_profile is not None:
            if self.gpu_count != 1:
                raise InputError(
                    f"asks for {self.gpu_count} MIG slices; gpufleet places one slice per pod",
                    source=f"pod {self.key}",
                    field=f"resources[{self.gpu_resource}]",
                )
            return GpuRequest(1, mig_milli(mig_slices(self.mig_profile, gpu) or 1), self.mig_profile)
        if replicas <= 1 and self.gpu_resource == GPU_RESOURCE:
            return GpuRequest(self.gpu_count)
        replicas = max(1, replicas)
        total = replicas_milli(self.gpu_count, replicas)
        if total < MILLI:
            return GpuRequest(1, max(1, total))
        whole = whole_gpus(total)
        if whole is None:
            raise InputError(
                f"{self.gpu_count} replicas of a GPU shared {replicas} ways is not a whole number of GPUs",
                source=f"pod {self.key}",
                field=f"resources[{self.gpu_resource}]",
            )
        return GpuRequest(whole)


def pod_facts(obj: Mapping[str, Any]) -> PodFacts:
    """The facts of a ``v1`` Pod (see the module docstring); :class:`InputError` for a malformed one."""
    if not isinstance(obj, Mapping):
        raise InputError(f"expected a Pod object, got {type(obj).__name__}", source="pod")
    meta = _obj(obj.get("metadata"), "metadata", "pod")
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        raise InputError("missing", source=f"pod {namespace or '?'}/?", field="metadata.name")
    if not isinstance(namespace, str) or not namespace:
        raise InputError("missing", source=f"pod ?/{name}", field="metadata.namespace")
    src = f"pod {namespace}/{name}"
    uid = _opt_str(meta.get("uid"), "metadata.uid", src) or ""
    labels = _str_map(meta.get("labels"), "metadata.labels", src)
    annotations = _str_map(meta.get("annotations"), "metadata.annotations", src)
    spec = _obj(obj.get("spec"), "spec", src)
    status = _obj(obj.get("status"), "status", src)

    containers = _list(spec.get("containers"), "spec.containers", src)
    if not containers:
        raise InputError("a pod has at least one container", source=src, field="spec.containers")
    init_containers = _list(spec.get("initContainers"), "spec.initContainers", src)

    # -- resources (the scheduler's effective-request rule)
    totals: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    gpu_kinds: set[str] = set()
    for i, c in enumerate(init_containers):
        path = f"spec.initContainers[{i}]"
        req = _container_requests(c, path, src, gpu_kinds)
        if _obj(c, path, src).get("restartPolicy") == "Always":  # a sidecar: runs alongside the app
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, 0) + v
        else:
            for k, v in req.items():
                init_peak[k] = max(init_peak.get(k, 0), v + sidecars.get(k, 0))
    for i, c in enumerate(containers):
        for k, v in _container_requests(c, f"spec.containers[{i}]", src, gpu_kinds).items():
            totals[k] = totals.get(k, 0) + v
    for k, v in sidecars.items():
        totals[k] = totals.get(k, 0) + v
    effective = {k: max(totals.get(k, 0), init_peak.get(k, 0)) for k in {*totals, *init_peak}}
    overhead = _obj(spec.get("overhead"), "spec.overhead", src)
    for k, v in overhead.items():
        effective[k] = effective.get(k, 0) + _amount(k, v, f"spec.overhead[{k}]", src)
    gpu_kinds = {k for k in gpu_kinds if effective.get(k, 0) > 0}
    if len(gpu_kinds) > 1:
        raise InputError(
            f"asks for {' and '.join(sorted(gpu_kinds))}; gpufleet places one kind of GPU resource per pod",
            source=src,
            field="spec.containers[*].resources",
        )
    gpu_resource = next(iter(gpu_kinds), None)
    mig_profile = None
    if gpu_resource is not None and gpu_resource.startswith(MIG_RESOURCE_PREFIX):
        mig_profile = gpu_resource[len(MIG_RESOURCE_PREFIX) :]

    # -- who it belongs to, what it is for
    owner = _owner(meta, labels, name, uid, src)
    cost_limit = _cost_limit(annotations, src)
    job_id = annotations.get(KEY_JOB_ID) or labels.get(KEY_JOB_ID) or None
    run_raw = annotations.get(KEY_RUN) or labels.get(KEY_RUN)
    run = _positive_int(run_raw, f"metadata.annotations[{KEY_RUN}]", src) if run_raw else None
    gang_size = None
    for key in GANG_SIZE_ANNOTATIONS:
        if annotations.get(key):
            gang_size = _positive_int(annotations[key], f"metadata.annotations[{key}]", src)
            break
    index_raw = labels.get(LABEL_COMPLETION_INDEX) or annotations.get(LABEL_COMPLETION_INDEX)
    completion_index = (
        _positive_int(index_raw, f"metadata.labels[{LABEL_COMPLETION_INDEX}]", src, minimum=0) if index_raw else None
    )
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise InputError(f"not an integer: {priority!r}", source=src, field="spec.priority")

    # -- status
    phase = _opt_str(status.get("phase"), "status.phase", src) or "Pending"
    node = _opt_str(spec.get("nodeName"), "spec.nodeName", src) or None
    statuses: list[ContainerStatus] = []
    for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for i, cs in enumerate(_list(status.get(key), f"status.{key}", src)):
            statuses.append(_container_status(cs, init, f"status.{key}[{i}]", src))
    conditions = tuple(
        _condition(c, f"status.conditions[{i}]", src)
        for i, c in enumerate(_list(status.get("conditions"), "status.conditions", src))
    )

    return PodFacts(
        namespace=namespace,
        name=name,
        uid=uid,
        owner=owner,
        phase=phase,
        node=node,
        scheduler=_opt_str(spec.get("schedulerName"), "spec.schedulerName", src) or "default-scheduler",
        gpu_resource=gpu_resource,
        gpu_count=effective.get(gpu_resource, 0) if gpu_resource else 0,
        mig_profile=mig_profile,
        cpu_milli=effective.get("cpu", 0),
        memory_mib=effective.get("memory", 0),
        team=labels.get("team", ""),
        project=labels.get("project", ""),
        experiment=labels.get("experiment-id", ""),
        cost_center=labels.get("cost-center", ""),
        cost_limit_usd=cost_limit,
        priority_class=_opt_str(spec.get("priorityClassName"), "spec.priorityClassName", src) or None,
        node_selector=_str_map(spec.get("nodeSelector"), "spec.nodeSelector", src),
        constraints=constraints_from_dict(spec, source=src),
        priority=priority,
        job_id=job_id,
        run=run,
        gang_size=gang_size,
        completion_index=completion_index,
        created_at=parse_time(meta.get("creationTimestamp"), field="metadata.creationTimestamp", source=src),
        deletion_timestamp=parse_time(meta.get("deletionTimestamp"), field="metadata.deletionTimestamp", source=src),
        containers=tuple(statuses),
        conditions=conditions,
        labels=labels,
        annotations=annotations,
        status_reason=_opt_str(status.get("reason"), "status.reason", src) or "",
        status_message=_opt_str(status.get("message"), "status.message", src) or "",
    )


@dataclass(frozen=True, slots=True)
class Gang:
    """The pods of one owner: one gpufleet job, placed all-or-nothing."""

    key: str  # namespace/Kind/name
    namespace: str
    owner: OwnerRef
    pods: tuple[PodFacts, ...]
    size: int  # declared (annotation) or the pods seen

    @property
    def complete(self) -> bool:
        """All pods of the gang exist (a gang is placed only when complete)."""
        return len(self.pods) >= self.size


def group_gangs(pods: Iterable[PodFacts]) -> dict[str, Gang]:
    """Pods grouped by owner (``namespace/Kind/name``): one job per owner, a group of pods a gang.

    A gang's size is the one its pods declare (``gpufleet.io/gang-size`` or Kueue's
    ``kueue.x-k8s.io/pod-group-total-count``), else the pods seen. Pods are in order of JobSet
    child job, completion index, then name. Pods of one owner that declare different sizes raise :class:`InputError`.
    """
    groups: dict[str, list[PodFacts]] = {}
    for p in pods:
        groups.setdefault(p.owner_key, []).append(p)
    gangs: dict[str, Gang] = {}
    for key, members in groups.items():
        members.sort(key=_gang_order)
        declared = {p.gang_size for p in members if p.gang_size is not None}
        if len(declared) > 1:
            raise InputError(
                f"pods of {key} declare different gang sizes {sorted(declared)}",
                source=f"pod {members[0].key}",
                field=f"metadata.annotations[{ANNOTATION_GANG_SIZE}]",
            )
        size = declared.pop() if declared else len(members)
        first = members[0]
        gangs[key] = Gang(key, first.namespace, first.owner, tuple(members), size)
    return gangs


def _gang_order(p: PodFacts) -> tuple[int, int, str]:
    """Pods of a gang in order: JobSet child job index, then completion index, then name."""
    job_index = p.labels.get(LABEL_JOBSET_JOB_INDEX, "")
    return (
        int(job_index) if job_index.isdigit() else -1,
        p.completion_index if p.completion_index is not None else -1,
        p.name,
    )


def parse_time(value: Any, *, field: str, source: str) -> float | None:
    """An RFC 3339 time as the API writes it (``2024-05-01T12:00:00Z``, micro-times too) in UNIX seconds."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InputError(f"not a time: {value!r}", source=source, field=field)
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise InputError(f"not an RFC 3339 time: {value!r}", source=source, field=field) from None
    if t.tzinfo is None:
        raise InputError(f"a time without a zone: {value!r}", source=source, field=field)
    return t.timestamp()


# -- helpers ---------------------------------------------------------------------------------------


def _obj(value: Any, fld: str, source: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"expected an object, got {type(value).__name__}", source=source, field=fld)
    return value


def _list(value: Any, fld: str, source: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"expected a list, got {type(value).__name__}", source=source, field=fld)
    return value


def _opt_str(value: Any, fld: str, source: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {value!r}", source=source, field=fld)
    return value


def _str_map(value: Any, fld: str, source: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in _obj(value, fld, source).items():
        if not isinstance(v, str):
            raise InputError(f"expected a string, got {v!r}", source=source, field=f"{fld}[{k}]")
        out[str(k)] = v
    return out


def _is_gpu(resource: str) -> bool:
    return resource in (GPU_RESOURCE, SHARED_GPU_RESOURCE) or resource.startswith(MIG_RESOURCE_PREFIX)


def _amount(resource: str, value: Any, fld: str, source: str) -> int:
    if resource == "cpu":
        return quantity_milli(value, field=fld, source=source)
    if resource == "memory":
        return quantity_mib(value, field=fld, source=source)
    if _is_gpu(resource):
        return quantity_count(value, field=fld, source=source)
    return 0  # other resources (ephemeral-storage, hugepages, ...) are not gpufleet's to place


def _container_requests(c: Any, path: str, source: str, gpu_kinds: set[str]) -> dict[str, int]:
    container = _obj(c, path, source)
    resources = _obj(container.get("resources"), f"{path}.resources", source)
    requests = _obj(resources.get("requests"), f"{path}.resources.requests", source)
    limits = _obj(resources.get("limits"), f"{path}.resources.limits", source)
    out: dict[str, int] = {}
    for k in {*requests, *limits}:
        if k not in ("cpu", "memory") and not _is_gpu(k):
            continue
        where = "requests" if k in requests else "limits"
        raw = requests[k] if k in requests else limits[k]
        amount = _amount(k, raw, f"{path}.resources.{where}[{k}]", source)
        if _is_gpu(k) and k in requests and k in limits:
            limit = _amount(k, limits[k], f"{path}.resources.limits[{k}]", source)
            if limit != amount:
                raise InputError(
                    f"requests {amount} but limits {limit}; extended resources need requests == limits",
                    source=source,
                    field=f"{path}.resources.requests[{k}]",
                )
        if _is_gpu(k) and amount:
            gpu_kinds.add(k)
        out[k] = amount
    return out


def _owner(meta: Mapping[str, Any], labels: Mapping[str, str], name: str, uid: str, src: str) -> OwnerRef:
    jobset = labels.get(LABEL_JOBSET_NAME)
    if jobset:  # JobSet → child Jobs → pods: the whole JobSet is one gang
        return OwnerRef("JobSet", jobset, labels.get(LABEL_JOBSET_UID, ""), JOBSET_API)
    refs = _list(meta.get("ownerReferences"), "metadata.ownerReferences", src)
    for i, r in enumerate(refs):
        ref = _obj(r, f"metadata.ownerReferences[{i}]", src)
        if ref.get("controller") is True:
            kind, ref_name = ref.get("kind"), ref.get("name")
            if not isinstance(kind, str) or not kind or not isinstance(ref_name, str) or not ref_name:
                raise InputError(
                    "a controller reference needs kind and name", source=src, field=f"metadata.ownerReferences[{i}]"
                )
            return OwnerRef(kind, ref_name, str(ref.get("uid") or ""), str(ref.get("apiVersion") or ""))
    return OwnerRef("Pod", name, uid, CORE_API)


def _cost_limit(annotations: Mapping[str, str], src: str) -> float | None:
    raw = annotations.get(ANNOTATION_COST_LIMIT)
    if raw is None:
        return None
    text = raw.strip()
    text = text[1:].strip() if text.startswith("$") else text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or "_" in text:
        raise InputError(
            f"not a dollar amount: {raw!r} (expected a positive number of US dollars, e.g. '250' or '12.50')",
            source=src,
            field=f"metadata.annotations[{ANNOTATION_COST_LIMIT}]",
        )
    return value


def _positive_int(raw: str, fld: str, src: str, minimum: int = 1) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise InputError(f"not a whole number: {raw!r}", source=src, field=fld) from None
    if value < minimum:
        raise InputError(f"must be >= {minimum}, got {raw!r}", source=src, field=fld)
    return value


def _container_status(value: Any, init: bool, path: str, src: str) -> ContainerStatus:
    cs = _obj(value, path, src)
    name = _opt_str(cs.get("name"), f"{path}.name", src) or ""
    restarts = cs.get("restartCount") or 0
    if isinstance(restarts, bool) or not isinstance(restarts, int):
        raise InputError(f"not an integer: {restarts!r}", source=src, field=f"{path}.restartCount")
    state = _obj(cs.get("state"), f"{path}.state", src)
    if "terminated" in state:
        t = _obj(state["terminated"], f"{path}.state.terminated", src)
        code = t.get("exitCode")
        if isinstance(code, bool) or not isinstance(code, int):
            raise InputError(f"not an integer: {code!r}", source=src, field=f"{path}.state.terminated.exitCode")
        return ContainerStatus(
            name,
            init,
            "terminated",
            started_at=parse_time(t.get("startedAt"), field=f"{path}.state.terminated.startedAt", source=src),
            finished_at=parse_time(t.get("finishedAt"), field=f"{path}.state.terminated.finishedAt", source=src),
            exit_code=code,
            reason=_opt_str(t.get("reason"), f"{path}.state.terminated.reason", src) or "",
            restart_count=restarts,
        )
    if "running" in state:
        r = _obj(state["running"], f"{path}.state.running", src)
        started = parse_time(r.get("startedAt"), field=f"{path}.state.running.startedAt", source=src)
        return ContainerStatus(name, init, "running", started_at=started, restart_count=restarts)
    if "waiting" in state:
        w = _obj(state["waiting"], f"{path}.state.waiting", src)
        reason = _opt_str(w.get("reason"), f"{path}.state.waiting.reason", src) or ""
        return ContainerStatus(name, init, "waiting", reason=reason, restart_count=restarts)
    return ContainerStatus(name, init, "unknown", restart_count=restarts)


def _condition(value: Any, path: str, src: str) -> PodCondition:
    c = _obj(value, path, src)
    ctype = _opt_str(c.get("type"), f"{path}.type", src)
    if not ctype:
        raise InputError("missing", source=src, field=f"{path}.type")
    return PodCondition(
        type=ctype,
        status=_opt_str(c.get("status"), f"{path}.status", src) or "Unknown",
        reason=_opt_str(c.get("reason"), f"{path}.reason", src) or "",
        message=_opt_str(c.get("message"), f"{path}.message", src) or "",
        last_transition=parse_time(c.get("lastTransitionTime"), field=f"{path}.lastTransitionTime", source=src),
    )
