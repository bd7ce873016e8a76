"""Builders of the Kubernetes objects gpufleet writes: plain dicts, valid for Kubernetes 1.29–1.33.

- :func:`batch_job` — the ``batch/v1`` Job running one attempt (``run``) of a gpufleet job;
- :func:`binding` — the ``v1`` Binding that places a pod on the node gpufleet chose;
- :func:`eviction` — the ``policy/v1`` Eviction that preempts a pod (PodDisruptionBudgets apply);
- :func:`node_claim` — a ``karpenter.sh/v1`` NodeClaim from a NodePool, for capacity gpufleet chose;
- :func:`nodepool_offer` — what a Karpenter NodePool can offer the autoscaler.

No I/O: the backend sends these with the Kubernetes client.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from gpufleet.errors import InputError
from gpufleet.k8s.adapter.nodes import (
    DEFAULT_TOLERATED_TAINTS,
    gpu_from_product,
    quantity_count,
    quantity_mib,
    quantity_milli,
)
from gpufleet.k8s.vocabulary import (
    ANNOTATION_CHECKPOINT_DIR,
    ANNOTATION_COST_LIMIT,
    ANNOTATION_GANG_SIZE,
    ANNOTATION_KARPENTER_DO_NOT_DISRUPT,
    ANNOTATION_KARPENTER_NODEPOOL_HASH,
    ANNOTATION_KARPENTER_NODEPOOL_HASH_VERSION,
    ANNOTATION_MAX_RUNTIME,
    AWS_GPU_COUNT,
    AWS_GPU_MEMORY,
    AWS_GPU_NAME,
    AWS_NODE_CLASS_GROUP,
    AZURE_GPU_COUNT,
    AZURE_GPU_NAME,
    AZURE_NODE_CLASS_GROUP,
    BATCH_API,
    CORE_API,
    GPU_RESOURCE,
    KARPENTER_API,
    KARPENTER_GROUP,
    KEY_JOB_ID,
    KEY_RUN,
    LABEL_ARCH,
    LABEL_GKE_ACCELERATOR,
    LABEL_GPU_PRODUCT,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_KARPENTER_CAPACITY_TYPE,
    LABEL_KARPENTER_NODEPOOL,
    LABEL_MANAGED_BY,
    LABEL_OS,
    LABEL_REGION,
    LABEL_WINDOWS_BUILD,
    LABEL_ZONE,
    MANAGER,
    MIG_RESOURCE_PREFIX,
    POLICY_API,
    PRIORITY_CLASS_PREFIX,
    SCHEDULER_NAME,
)
from gpufleet.model.constraints import NO_CONSTRAINTS, NodeConstraints, constraints_to_dict
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest

CONTAINER_NAME = "main"
CHECKPOINT_VOLUME = "gpufleet-checkpoint"
# NodePool requirement keys naming the GPU model (AWS, Azure, GKE providers; GFD's own label).
GPU_NAME_KEYS = (AWS_GPU_NAME, AZURE_GPU_NAME, LABEL_GKE_ACCELERATOR, LABEL_GPU_PRODUCT)
GPU_COUNT_KEYS = (AWS_GPU_COUNT, AZURE_GPU_COUNT)
# Karpenter's default when a NodePool says nothing of capacity type; reserved capacity is offered
# only where a NodePool asks for it by name.
DEFAULT_CAPACITY_TYPES = ("on-demand",)
OPEN_CAPACITY_TYPES = ("on-demand", "spot")

_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")  # the rule of Kubernetes < 1.34


# -- names and labels ------------------------------------------------------------------------------


def _digest(value: str, n: int = 8) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:n]


def label_value(value: str) -> str:
    """``value`` as a valid label value (≤ 63 characters of ``[-A-Za-z0-9_.]``, alphanumeric at
    both ends). A value that needs changing gets a hash of the original appended, so two different
    values never map to the same label."""
    if len(value) <= 63 and _LABEL_VALUE.fullmatch(value):
        return value
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "-", value)[:54].strip("-_.")
    return f"{cleaned}-{_digest(value)}" if cleaned else _digest(value)


def check_label_key(key: str) -> None:
    """Raise :class:`InputError` unless ``key`` is a valid label or annotation key."""
    prefix, _, name = key.rpartition("/")
    ok = bool(_LABEL_NAME.fullmatch(name)) and len(name) <= 63
    if prefix:
        ok = ok and len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(prefix))
    if not ok:
        raise InputError(f"not a valid label key: {key!r}", field=f"labels[{key}]")


def dns_label(value: str, max_len: int = 63) -> str:
    """``value`` as a DNS-1123 label (lowercase alphanumerics and '-', ≤ ``max_len``); a hash of
    the original is appended when anything had to change."""
    if len(value) <= max_len and _DNS_LABEL.fullmatch(value):
        return value
    cleaned = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", value.lower())).strip("-")
    cleaned = cleaned[: max(0, max_len - 9)].strip("-")
    return f"{cleaned}-{_digest(value)}" if cleaned else _digest(value)[:max_len]


def job_name(job_id: str, run: int, gang_size: int = 1) -> str:
    """``gf-<job_id>-r<run>`` as a DNS-1123 label. Short enough that an Indexed Job's pod
    hostnames (``<name>-<index>``) are valid labels too."""
    suffix = f"-r{run}"
    max_len = 63 - (len(f"-{gang_size - 1}") if gang_size > 1 else 0)
    return "gf-" + dns_label(job_id, max_len - 3 - len(suffix)) + suffix


def priority_class_name(priority_class: str) -> str:
    """The Kubernetes PriorityClass for a gpufleet priority class (``normal`` → ``gpufleet-normal``)."""
    if priority_class not in PRIORITY_CLASSES:
        raise InputError(
            f"unknown priority class '{priority_class}' (known: {', '.join(PRIORITY_CLASSES)})", field="priority"
        )
    return PRIORITY_CLASS_PREFIX + priority_class


def gpu_resources(gpu: GpuRequest, resource: str | None = None, replicas: int = 1) -> dict[str, int]:
    """The extended resources (name → count) one pod asks for to hold ``gpu``.

    - whole GPUs: ``nvidia.com/gpu: count``, on a node whose GPUs are not shared (``replicas`` 1:
      the device plugin hands out replicas from several GPUs, so no count of them is a whole GPU, and
      the scheduler places none there; asked anyway, :class:`InputError`);
    - a fraction: exactly one replica of a time-sliced or MPS GPU (``replicas`` ≥ 2): MPS refuses
      more, and time-slicing spreads more over GPUs; the scheduler reserved at least one replica's
      share of one GPU for it (``ClusterSnapshot.share_milli``);
    - a MIG slice: ``nvidia.com/mig-<profile>: 1`` (mixed strategy).

    ``resource`` overrides the name: ``nvidia.com/gpu.shared`` (``renameByDefault``), or
    ``nvidia.com/gpu`` for a slice on a MIG single-strategy node.
    """
    if gpu.count == 0:
        return {}
    if gpu.mig_profile is not None:
        return {resource or f"{MIG_RESOURCE_PREFIX}{gpu.mig_profile}": 1}
    if gpu.is_fractional:
        if replicas < 2:
            raise InputError(
                f"a fractional GPU ({gpu.milli} milli) needs a node with time-sliced GPUs (replicas >= 2)",
                field="gpu_milli",
            )
        return {resource or GPU_RESOURCE: 1}
    if replicas > 1:
        raise InputError(
            f"{gpu.count} whole GPU(s) on a node whose GPUs are shared {replicas} ways: the device plugin "
            "would hand out replicas of several GPUs",
            field="gpus",
        )
    return {resource or GPU_RESOURCE: gpu.count}


# -- batch/v1 Job ----------------------------------------------------------------------------------


def batch_job(
    job_id: str,
    run: int,
    *,
    namespace: str,
    image: str,
    command: Sequence[str],
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    working_dir: str | None = None,
    gpu: GpuRequest | None = None,
    gpu_resource: str | None = None,
    gpu_replicas: int = 1,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    team: str = "",
    project: str = "",
    experiment: str = "",
    cost_center: str = "",
    labels: Mapping[str, str] | None = None,
    priority_class: str = "normal",
    cost_limit_usd: float | None = None,
    checkpoint_dir: str | None = None,
    checkpoint_volume: Mapping[str, Any] | None = None,
    checkpoint_sub_path: str | None = None,
    grace_s: float = 30.0,
    max_runtime_s: float | None = None,
    gang_size: int = 1,
    backoff_limit: int = 0,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    service_account: str | None = None,
    ttl_after_finished_s: int | None = None,
    constraints: NodeConstraints = NO_CONSTRAINTS,
) -> dict[str, Any]:
    """The ``batch/v1`` Job for attempt ``run`` of gpufleet job ``job_id``.

    Its pods wait for gpufleet (``schedulerName: gpufleet``) and carry the job's attribution labels
    (``team``, ``project``, ``experiment-id``, ``cost-center``, values made label-safe) and gpufleet's
    annotations (job id, run, cost limit, checkpoint directory, gang size). Failures are gpufleet's
    to retry: ``backoffLimit`` 0, and a ``podFailurePolicy`` that ignores disruptions (a pod with
    condition ``DisruptionTarget``: eviction, preemption, node drain — the Job controller makes a
    new pod, which waits for gpufleet) and fails the Job on a non-zero exit of the main container.
    ``max_runtime_s`` becomes the Job's ``activeDeadlineSeconds`` (counted from the Job's start,
    so the time its pods wait for a node counts too). A gang (``gang_size`` > 1) is an Indexed Job
    with ``parallelism = completions = gang_size``.

    ``checkpoint_volume`` is a volume source (``{"persistentVolumeClaim": {"claimName": ...}}``,
    ``{"hostPath": {...}}``, ...), mounted at ``checkpoint_dir`` (with ``checkpoint_sub_path``).
    ``tolerations`` replaces the default ones (``Exists`` on each of the node module's
    ``DEFAULT_TOLERATED_TAINTS``). ``constraints`` (the job's, which its placement honoured) become
    the pods' ``nodeSelector``, required node affinity and further tolerations, so the kubelet's
    admission checks what the scheduler did.
    """
    if run < 1:
        raise InputError(f"run counts attempts from 1, got {run}", field="run")
    if gang_size < 1:
        raise InputError(f"gang size must be >= 1, got {gang_size}", field="gang_size")
    if not command:
        raise InputError("empty command", field="command")
    if not image:
        raise InputError("empty image", field="image")
    if not _DNS_LABEL.fullmatch(namespace) or len(namespace) > 63:
        raise InputError(f"not a valid namespace name: {namespace!r}", field="namespace")
    if grace_s < 0 or not math.isfinite(grace_s):
        raise InputError(f"grace must be >= 0 seconds, got {grace_s}", field="grace_s")
    if max_runtime_s is not None and (not math.isfinite(max_runtime_s) or max_runtime_s <= 0):
        raise InputError(f"max runtime must be > 0 seconds, got {max_runtime_s}", field="max_runtime_s")
    if cost_limit_usd is not None and (not math.isfinite(cost_limit_usd) or cost_limit_usd <= 0):
        raise InputError(f"cost limit must be > 0 dollars, got {cost_limit_usd}", field="cost_limit_usd")
    if checkpoint_volume is not None and not checkpoint_dir:
        raise InputError("a checkpoint volume needs a checkpoint directory to mount it at", field="checkpoint_dir")
    if cpu_milli < 0 or memory_mib < 0:
        raise InputError("cpu and memory requests must be >= 0", field="cpu_milli" if cpu_milli < 0 else "memory_mib")

    name = job_name(job_id, run, gang_size)
    all_labels: dict[str, str] = {}
    for k, v in (labels or {}).items():
        check_label_key(k)
        all_labels[k] = label_value(v)
    for k, v in (("team", team), ("project", project), ("experiment-id", experiment), ("cost-center", cost_center)):
        if v:
            all_labels[k] = label_value(v)
    all_labels[LABEL_MANAGED_BY] = MANAGER
    all_labels[KEY_JOB_ID] = label_value(job_id)
    all_labels[KEY_RUN] = str(run)

    annotations = {KEY_JOB_ID: job_id, KEY_RUN: str(run)}
    if cost_limit_usd is not None:
        annotations[ANNOTATION_COST_LIMIT] = _dollars(cost_limit_usd)
    if checkpoint_dir:
        annotations[ANNOTATION_CHECKPOINT_DIR] = checkpoint_dir
    if gang_size > 1:
        annotations[ANNOTATION_GANG_SIZE] = str(gang_size)
    if max_runtime_s is not None:
        annotations[ANNOTATION_MAX_RUNTIME] = str(math.ceil(max_runtime_s))  # = the Job's activeDeadlineSeconds

    env_list: list[dict[str, Any]] = []
    ours = {"GPUFLEET_JOB_ID": job_id, "GPUFLEET_RUN": str(run)}
    if checkpoint_dir:
        ours["GPUFLEET_CHECKPOINT_DIR"] = checkpoint_dir
    if gang_size > 1:
        ours["GPUFLEET_GANG_SIZE"] = str(gang_size)
    for k, v in {**(env or {}), **ours}.items():
        if not _ENV_NAME.fullmatch(k):
            raise InputError(f"not a valid environment variable name: {k!r}", field=f"env[{k}]")
        env_list.append({"name": k, "value": str(v)})

    gpus = gpu_resources(gpu or GpuRequest(), gpu_resource, gpu_replicas)
    requests: dict[str, str] = {k: str(v) for k, v in gpus.items()}
    if cpu_milli:
        requests["cpu"] = f"{cpu_milli}m"
    if memory_mib:
        requests["memory"] = f"{memory_mib}Mi"
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if gpus:
        resources["limits"] = {k: str(v) for k, v in gpus.items()}  # extended resources: limits == requests

    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": [str(c) for c in command],
        "env": env_list,
        "resources": resources,
    }
    if args:
        container["args"] = [str(a) for a in args]
    if working_dir:
        container["workingDir"] = working_dir

    pod_spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "priorityClassName": priority_class_name(priority_class),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": math.ceil(grace_s),
        "containers": [container],
        "tolerations": [dict(t) for t in tolerations]
        if tolerations is not None
        else [{"key": k, "operator": "Exists"} for k in sorted(DEFAULT_TOLERATED_TAINTS)],
    }
    placed = constraints_to_dict(constraints)
    pod_spec["tolerations"] += placed.pop("tolerations", [])
    pod_spec.update(placed)  # nodeSelector, affinity
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    if checkpoint_volume is not None:
        pod_spec["volumes"] = [{"name": CHECKPOINT_VOLUME, **dict(checkpoint_volume)}]
        mount: dict[str, Any] = {"name": CHECKPOINT_VOLUME, "mountPath": checkpoint_dir}
        if checkpoint_sub_path:
            mount["subPath"] = checkpoint_sub_path
        container["volumeMounts"] = [mount]

    job_spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "parallelism": gang_size,
        "completions": gang_size,
        "podFailurePolicy": {
            "rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "NotIn", "values": [0]},
                },
            ]
        },
        "template": {
            # do-not-disrupt: Karpenter's consolidation (and drift, expiry) never takes the node from under a run
            "metadata": {
                "labels": dict(all_labels),
                "annotations": {**annotations, ANNOTATION_KARPENTER_DO_NOT_DISRUPT: "true"},
            },
            "spec": pod_spec,
        },
    }
    if gang_size > 1:
        job_spec["completionMode"] = "Indexed"
    if max_runtime_s is not None:
        job_spec["activeDeadlineSeconds"] = math.ceil(max_runtime_s)
    if ttl_after_finished_s is not None:
        job_spec["ttlSecondsAfterFinished"] = ttl_after_finished_s
    return {
        "apiVersion": BATCH_API,
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": all_labels, "annotations": annotations},
        "spec": job_spec,
    }


def _dollars(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")


# -- small objects ---------------------------------------------------------------------------------


def binding(namespace: str, pod: str, node: str) -> dict[str, Any]:
    """The ``v1`` Binding placing ``namespace/pod`` on ``node`` (POST pods/{pod}/binding)."""
    return {
        "apiVersion": CORE_API,
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": CORE_API, "kind": "Node", "name": node},
    }


def eviction(namespace: str, pod: str, grace_s: float | None = None) -> dict[str, Any]:
    """The ``policy/v1`` Eviction of ``namespace/pod`` (POST pods/{pod}/eviction), with
    ``deleteOptions.gracePeriodSeconds`` when ``grace_s`` is given (None: the pod's own)."""
    body: dict[str, Any] = {
        "apiVersion": POLICY_API,
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    if grace_s is not None:
        if grace_s < 0 or not math.isfinite(grace_s):
            raise InputError(f"grace must be >= 0 seconds, got {grace_s}", field="grace_s")
        body["deleteOptions"] = {"gracePeriodSeconds": math.ceil(grace_s)}
    return body


# -- Karpenter -------------------------------------------------------------------------------------


def node_claim(
    pool: Mapping[str, Any],
    *,
    instance_type: str | None = None,
    capacity_type: str | None = None,
    zone: str | None = None,
    name: str | None = None,
    requests: Mapping[str, str | int] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ``karpenter.sh/v1`` NodeClaim for one node of NodePool ``pool`` (a NodePool object), as
    Karpenter's own provisioner makes one (``NodeClaimTemplate.ToNodeClaim``), so that Karpenter
    launches it and later judges it as one of its own:

    - the pool's template: ``nodeClassRef``, requirements, taints, startup taints, ``expireAfter``,
      ``terminationGracePeriod``, labels and annotations; the requirement
      ``karpenter.sh/nodepool In [<pool>]`` and an owner reference to the pool (with its uid);
    - labels ``karpenter.sh/nodepool`` and ``<nodeclass group>/<nodeclass kind, lowercase>`` (the
      NodeClass's name), and a value for each custom (not well-known) key the requirements constrain:
      Karpenter marks a launched claim *RequirementsDrifted* when its labels leave a NodePool
      requirement without a known value, and replaces the node;
    - the NodePool's ``karpenter.sh/nodepool-hash`` and ``-hash-version`` annotations (its hash
      controller writes them on the NodePool; the hash is Go's hashstructure of the template,
      copied rather than recomputed): without them Karpenter never sees the claim drift when
      the NodePool's template changes;
    - no ``minValues`` on any requirement: the claim pins the instance type, and with one instance
      type no key has two values, so Karpenter's launch (``InstanceTypes.Truncate`` →
      ``SatisfiesMinValues``; the AWS provider's ``filterInstanceTypes``) fails with "minValues
      requirement is not met" and deletes the claim — a scale-up that loops.

    Each choice given (``instance_type``, ``capacity_type``, ``zone``) replaces the pool's
    requirements on that key by ``In [choice]``; a choice the pool excludes raises
    :class:`InputError`. Without ``name`` the claim has ``generateName: <pool>-``.
    """
    meta = pool.get("metadata") or {}
    pool_name = meta.get("name")
    if not isinstance(pool_name, str) or not pool_name:
        raise InputError("a NodePool needs metadata.name", source="nodepool", field="metadata.name")
    src = f"nodepool {pool_name}"
    template = (pool.get("spec") or {}).get("template") or {}
    tspec = template.get("spec") or {}
    tmeta = template.get("metadata") or {}
    node_class = tspec.get("nodeClassRef")
    if not isinstance(node_class, Mapping):
        raise InputError("missing", source=src, field="spec.template.spec.nodeClassRef")

    reqs: list[dict[str, Any]] = [
        {k: v for k, v in r.items() if k != "minValues"} for r in tspec.get("requirements") or []
    ]
    for key, choice in (
        (LABEL_INSTANCE_TYPE, instance_type),
        (LABEL_KARPENTER_CAPACITY_TYPE, capacity_type),
        (LABEL_ZONE, zone),
    ):
        if choice is None:
            continue
        if key == LABEL_KARPENTER_CAPACITY_TYPE:
            caps = _capacity_types(reqs)
            ok, shown = choice in caps, ", ".join(caps) or "none"
        else:
            allowed = _allowed(reqs, key)
            listed = allowed.listed()
            ok = allowed.permits(choice)
            shown = ", ".join(listed) if listed is not None else "any but " + ", ".join(sorted(allowed.excluded))
        if not ok:
            raise InputError(
                f"{choice!r} is not offered by the pool (allowed: {shown})",
                source=src,
                field=f"spec.template.spec.requirements[{key}]",
            )
        reqs = [r for r in reqs if r.get("key") != key]
        reqs.append({"key": key, "operator": "In", "values": [choice]})
    if not any(r.get("key") == LABEL_KARPENTER_NODEPOOL for r in reqs):
        reqs.append({"key": LABEL_KARPENTER_NODEPOOL, "operator": "In", "values": [pool_name]})

    spec: dict[str, Any] = {"nodeClassRef": dict(node_class), "requirements": reqs}
    for fld in ("taints", "startupTaints"):
        if tspec.get(fld):
            spec[fld] = [dict(t) for t in tspec[fld]]
    for fld in ("expireAfter", "terminationGracePeriod"):
        if tspec.get(fld) is not None:
            spec[fld] = tspec[fld]
    if requests:
        spec["resources"] = {"requests": {k: str(v) for k, v in requests.items()}}

    claim_labels = {
        **(tmeta.get("labels") or {}),
        **_custom_labels(reqs),
        **(labels or {}),
        LABEL_KARPENTER_NODEPOOL: pool_name,
    }
    if node_class.get("group") and node_class.get("kind") and node_class.get("name"):
        claim_labels[f"{node_class['group']}/{str(node_class['kind']).lower()}"] = str(node_class["name"])
    pool_annotations = meta.get("annotations") or {}
    hashes = {
        k: str(pool_annotations[k])
        for k in (ANNOTATION_KARPENTER_NODEPOOL_HASH, ANNOTATION_KARPENTER_NODEPOOL_HASH_VERSION)
        if pool_annotations.get(k) is not None
    }
    claim_annotations = {**(tmeta.get("annotations") or {}), **(annotations or {}), **hashes}
    metadata: dict[str, Any] = {"labels": claim_labels}
    if claim_annotations:
        metadata["annotations"] = claim_annotations
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{pool_name}-"
    if meta.get("uid"):
        metadata["ownerReferences"] = [
            {
                "apiVersion": KARPENTER_API,
                "kind": "NodePool",
                "name": pool_name,
                "uid": meta["uid"],
                "blockOwnerDeletion": True,
            }
        ]
    return {"apiVersion": KARPENTER_API, "kind": "NodeClaim", "metadata": metadata, "spec": spec}


# Keys Karpenter (core and its AWS and Azure providers) knows values of, or keeps to itself: they get
# no label from a requirement (``resolveCustomLabelsFromRequirements`` skips well-known and
# restricted labels; the providers' instance labels are well-known, in their own domains).
_KNOWN_KEYS = frozenset(
    {
        LABEL_INSTANCE_TYPE,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_WINDOWS_BUILD,
        LABEL_HOSTNAME,
        LABEL_KARPENTER_CAPACITY_TYPE,
        LABEL_KARPENTER_NODEPOOL,
    }
)
_KARPENTER_DOMAINS = (KARPENTER_GROUP, AWS_NODE_CLASS_GROUP, AZURE_NODE_CLASS_GROUP)


def _custom_labels(reqs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """A value for each custom key the requirements constrain, as Karpenter labels its claims
    (``Requirement.Any``): a value ``In`` allows (the first in sorted order, where Karpenter takes
    any), else for ``Exists`` / ``NotIn`` / ``Gt`` / ``Lt`` the smallest whole number the bounds
    allow and ``NotIn`` does not exclude (Karpenter draws one at random); none for
    ``DoesNotExist``."""
    keys: list[str] = []
    for r in reqs:
        key = str(r.get("key") or "")
        domain = key.split("/", 1)[0] if "/" in key else ""
        if not key or key in _KNOWN_KEYS or key in keys:
            continue
        if any(domain == d or domain.endswith("." + d) for d in _KARPENTER_DOMAINS):
            continue
        keys.append(key)
    out: dict[str, str] = {}
    for key in keys:
        mine = [r for r in reqs if r.get("key") == key]
        if any(r.get("operator") == "DoesNotExist" for r in mine):
            continue
        low, high = 0, math.inf
        for r in mine:
            first = (r.get("values") or [None])[0]
            try:
                bound = int(str(first))
            except ValueError:
                continue
            op = r.get("operator")
            if op == "Gt":
                low = max(low, bound + 1)
            elif op == "Gte":
                low = max(low, bound)
            elif op == "Lt":
                high = min(high, bound - 1)
            elif op == "Lte":
                high = min(high, bound)
        allowed = _allowed(mine, key)
        listed = allowed.listed()
        if listed is not None:
            fits = [v for v in listed if not v.lstrip("-").isdigit() or low <= int(v) <= high]
            if fits:
                out[key] = fits[0]
            continue
        n = low
        while str(n) in allowed.excluded:
            n += 1
        if n <= high:
            out[key] = str(n)
    return out


@dataclass(frozen=True, slots=True)
class _Allowed:
    """The values a NodePool's requirements allow for one key."""

    values: frozenset[str] | None  # None: any value (no In requirement) except ``excluded``
    excluded: frozenset[str]

    def permits(self, value: str) -> bool:
        return value not in self.excluded and (self.values is None or value in self.values)

    def listed(self) -> list[str] | None:
        return None if self.values is None else sorted(self.values - self.excluded)


def _allowed(reqs: Sequence[Mapping[str, Any]], key: str) -> _Allowed:
    values: frozenset[str] | None = None
    excluded: set[str] = set()
    for r in reqs:
        if r.get("key") != key:
            continue
        op, vals = r.get("operator"), frozenset(str(v) for v in r.get("values") or [])
        if op == "In":
            values = vals if values is None else values & vals
        elif op == "NotIn":
            excluded |= vals
        elif op == "DoesNotExist":
            values = frozenset()
    return _Allowed(values, frozenset(excluded))


def _capacity_types(reqs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Capacity types a pool allows: Karpenter's default (on-demand) when it says nothing; NotIn
    and Exists range over on-demand and spot (reserved only where asked for by name)."""
    if not any(r.get("key") == LABEL_KARPENTER_CAPACITY_TYPE for r in reqs):
        return list(DEFAULT_CAPACITY_TYPES)
    allowed = _allowed(reqs, LABEL_KARPENTER_CAPACITY_TYPE)
    listed = allowed.listed()
    if listed is not None:
        return listed
    return [c for c in OPEN_CAPACITY_TYPES if allowed.permits(c)]


class PoolLimits(TypedDict):
    gpus: int | None  # limits["nvidia.com/gpu"]
    cpu_milli: int | None
    memory_mib: int | None
    nodes: int | None


class NodePoolOffer(TypedDict):
    """What a Karpenter NodePool can offer (lists are sorted; None = not restricted by the pool)."""

    name: str
    weight: int
    capacity_types: list[str]
    instance_types: list[str] | None  # In requirement on node.kubernetes.io/instance-type
    excluded_instance_types: list[str]
    gpu_models: list[str] | None  # canonical names from the GPU-name requirements
    unknown_gpu_names: list[str]  # GPU names in requirements that gpufleet does not know
    gpu_counts: list[int] | None  # In requirement on the GPU-count key
    min_gpus: int | None  # from Gt/Gte on the GPU-count key
    max_gpus: int | None  # from Lt/Lte
    zones: list[str] | None
    limits: PoolLimits
    labels: dict[str, str]
    taints: list[dict[str, Any]]
    node_class: dict[str, Any]


def nodepool_offer(pool: Mapping[str, Any]) -> NodePoolOffer:
    """What a ``karpenter.sh/v1`` NodePool offers the autoscaler: capacity types (Karpenter's
    default is on-demand), instance types, GPU models and counts from its requirements, and its
    limits (``nvidia.com/gpu``, cpu, memory, nodes). Turning it into gpufleet ``NodePool``s is the
    autoscaler's work, with the price catalog (instance type → GPUs and price)."""
    meta = pool.get("metadata") or {}
    pool_name = meta.get("name")
    if not isinstance(pool_name, str) or not pool_name:
        raise InputError("a NodePool needs metadata.name", source="nodepool", field="metadata.name")
    src = f"nodepool {pool_name}"
    spec = pool.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    reqs: list[Mapping[str, Any]] = list(tspec.get("requirements") or [])

    caps = _capacity_types(reqs)
    instance = _allowed(reqs, LABEL_INSTANCE_TYPE)
    zones = _allowed(reqs, LABEL_ZONE).listed()

    memory = None
    mem_values = _allowed(reqs, AWS_GPU_MEMORY).listed()
    if mem_values and len(mem_values) == 1 and mem_values[0].isdigit():
        memory = float(mem_values[0])
    gpu_models: list[str] | None = None
    unknown: list[str] = []
    for key in GPU_NAME_KEYS:
        names = _allowed(reqs, key).listed()
        if names is None:
            continue
        found = set(gpu_models or [])
        for n in names:
            canon = gpu_from_product(n, memory)
            if canon is None:
                unknown.append(n)
            else:
                found.add(canon)
        gpu_models = sorted(found)

    gpu_counts: list[int] | None = None
    min_gpus = max_gpus = None
    for key in GPU_COUNT_KEYS:
        for r in reqs:
            if r.get("key") != key:
                continue
            op, values = r.get("operator"), [str(v) for v in r.get("values") or []]
            try:
                nums = [int(v) for v in values]
            except ValueError:
                raise InputError(f"not whole numbers: {values}", source=src, field=f"requirements[{key}]") from None
            if op == "In":
                gpu_counts = sorted(set(nums) & set(gpu_counts) if gpu_counts is not None else set(nums))
            elif op in ("Gt", "Gte") and nums:
                lo = nums[0] + (1 if op == "Gt" else 0)
                min_gpus = lo if min_gpus is None else max(min_gpus, lo)
            elif op in ("Lt", "Lte") and nums:
                hi = nums[0] - (1 if op == "Lt" else 0)
                max_gpus = hi if max_gpus is None else min(max_gpus, hi)

    raw_limits = spec.get("limits") or {}

    def limit(key: str) -> Any:
        return raw_limits.get(key)

    limits: PoolLimits = {
        "gpus": quantity_count(limit(GPU_RESOURCE), field=f"spec.limits[{GPU_RESOURCE}]", source=src)
        if limit(GPU_RESOURCE) is not None
        else None,
        "cpu_milli": quantity_milli(limit("cpu"), field="spec.limits[cpu]", source=src, round_up=False)
        if limit("cpu") is not None
        else None,
        "memory_mib": quantity_mib(limit("memory"), field="spec.limits[memory]", source=src, round_up=False)
        if limit("memory") is not None
        else None,
        "nodes": quantity_count(limit("nodes"), field="spec.limits[nodes]", source=src)
        if limit("nodes") is not None
        else None,
    }
    weight = spec.get("weight") or 0
    return {
        "name": pool_name,
        "weight": int(weight),
        "capacity_types": caps,
        "instance_types": instance.listed(),
        "excluded_instance_types": sorted(instance.excluded),
        "gpu_models": gpu_models,
        "unknown_gpu_names": sorted(set(unknown)),
        "gpu_counts": gpu_counts,
        "min_gpus": min_gpus,
        "max_gpus": max_gpus,
        "zones": zones,
        "limits": limits,
        "labels": dict((template.get("metadata") or {}).get("labels") or {}),
        "taints": [dict(t) for t in tspec.get("taints") or []],
        "node_class": dict(tspec.get("nodeClassRef") or {}),
    }
