"""Kubernetes ``v1`` Node objects → gpufleet :class:`~gpufleet.model.node.Node`.

Pure translation: a Node as the API returns it (a plain dict) in, gpufleet's model out. What is read:

=====================================  ==========================================================
gpufleet                               Kubernetes
=====================================  ==========================================================
GPU model (canonical name)             ``nvidia.com/gpu.product`` (GPU Feature Discovery), e.g.
                                       ``NVIDIA-A100-SXM4-80GB`` → ``A100-80GB``; the ``-SHARED``
                                       (time-slicing) and ``-MIG-<profile>`` (MIG single) suffixes
                                       are removed first; ``nvidia.com/gpu.memory`` (MiB) tells
                                       40 from 80 GB where the name does not. No GFD label: the
                                       cloud's (``cloud.google.com/gke-accelerator``, Karpenter's
                                       ``karpenter.k8s.aws/instance-gpu-name``,
                                       ``k8s.amazonaws.com/accelerator``); else the catalog offering
                                       of the instance type (AKS: ``kubernetes.azure.com/accelerator``
                                       says only ``nvidia``)
GPU count                              allocatable ``nvidia.com/gpu`` (or ``nvidia.com/gpu.shared``)
                                       ÷ replicas (what the kubelet admits; an unhealthy GPU is not
                                       counted); none allocatable: 0, though the node is priced for
                                       its ``nvidia.com/gpu.count``; for MIG see below
time-slicing / MPS                     ``nvidia.com/gpu.replicas`` > 1 → :attr:`SharingMode.SHARED`;
                                       one replica is ``1000 // replicas`` milli-GPU
                                       (``Node.gpu_facts.replicas``); the device plugin advertises
                                       ``replicas × GPUs`` of ``nvidia.com/gpu`` (or of
                                       ``nvidia.com/gpu.shared`` with ``renameByDefault``); on GKE
                                       ``cloud.google.com/gke-max-shared-clients-per-gpu`` > 1 with
                                       ``gke-gpu-sharing-strategy`` (``time-sharing`` | ``mps``)
MIG (mixed strategy)                   allocatable ``nvidia.com/mig-<profile>`` → :attr:`SharingMode.MIG`
                                       with those profiles (``Node.gpu_facts.mig_profiles``);
                                       GPU count from ``nvidia.com/gpu.count``
MIG (single strategy)                  ``nvidia.com/mig.strategy=single``: allocatable
                                       ``nvidia.com/gpu`` counts slices of the one profile named
                                       in the product label; GPUs = slices ÷ slices per GPU. GKE's
                                       MIG is the same: ``cloud.google.com/gke-gpu-partition-size``
                                       names the profile (GPUs: ``gke-accelerator-count``)
MIG profile attributes                 ``1g.10gb+me`` (media engines) is the resource
                                       ``nvidia.com/mig-1g.10gb.me`` and the product suffix
                                       ``-MIG-1g.10gb.me``: a slice of ``1g.10gb``, one per GPU; a
                                       profile the GPU model lacks is noted and logged (sized by its
                                       name), never read as whole GPUs
capacity type                          ``karpenter.sh/capacity-type``, ``eks.amazonaws.com/capacityType``,
                                       ``cloud.google.com/gke-spot`` / ``gke-preemptible``,
                                       ``kubernetes.azure.com/scalesetpriority``, ...
pool                                   ``karpenter.sh/nodepool``, ``eks.amazonaws.com/nodegroup``,
                                       ``cloud.google.com/gke-nodepool``, ``kubernetes.azure.com/agentpool``
CPU / memory                           ``status.allocatable`` (rounded down: never more than the kubelet admits)
hourly price                           annotation ``gpufleet.io/hourly-price-usd``; else the catalog
                                       offering named by ``node.kubernetes.io/instance-type`` (in the
                                       node's region if the catalog has it there); else the catalog's
                                       price per GPU-hour × GPUs; else ``None`` with a note
=====================================  ==========================================================

The node's labels are the Node's own, nothing added: how its GPUs are shared (the resource pods ask,
replicas, strategies, MIG profiles) is :class:`~gpufleet.model.node.GpuSharingFacts` (``Node.gpu_facts``).

Quantities are parsed by :func:`parse_quantity`, which follows apimachinery's ``ParseQuantity``
grammar exactly (the Python client's ``kubernetes.utils.parse_quantity`` is laxer: it takes ``NaN``,
``1_000`` and ``1e3Mi``; and the client is not a runtime dependency of gpufleet).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Any

from gpufleet.cost.catalog import PriceCatalog, PriceEntry
from gpufleet.errors import CatalogError, InputError
from gpufleet.k8s.vocabulary import (
    ANNOTATION_HOURLY_PRICE,
    AWS_GPU_MEMORY,
    AWS_GPU_NAME,
    GPU_RESOURCE,
    LABEL_AKS_ACCELERATOR,
    LABEL_AKS_AGENTPOOL,
    LABEL_AKS_PRIORITY,
    LABEL_CAPACITY_TYPE,
    LABEL_EKS_ACCELERATOR,
    LABEL_EKS_CAPACITY_TYPE,
    LABEL_EKS_NODEGROUP,
    LABEL_GKE_ACCELERATOR,
    LABEL_GKE_ACCELERATOR_COUNT,
    LABEL_GKE_GPU_PARTITION_SIZE,
    LABEL_GKE_GPU_SHARING_STRATEGY,
    LABEL_GKE_MAX_SHARED_CLIENTS,
    LABEL_GKE_NODEPOOL,
    LABEL_GKE_PREEMPTIBLE,
    LABEL_GKE_RESERVATION,
    LABEL_GKE_SPOT,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_REPLICAS,
    LABEL_INSTANCE_TYPE,
    LABEL_INSTANCE_TYPE_BETA,
    LABEL_KARPENTER_CAPACITY_TYPE,
    LABEL_KARPENTER_NODEPOOL,
    LABEL_LIFECYCLE,
    LABEL_MIG_STRATEGY,
    LABEL_NODE_TYPE,
    LABEL_OS,
    LABEL_POOL,
    LABEL_REGION,
    LABEL_REGION_BETA,
    LABEL_SHARING_STRATEGY,
    LABEL_ZONE,
    LABEL_ZONE_BETA,
    MIG_RESOURCE_PREFIX,
    SHARED_GPU_RESOURCE,
    TAINT_AKS_GPU,
    TAINT_CA_DELETING,
    TAINT_CLOUD_PROVIDER_PREFIX,
    TAINT_DEDICATED,
    TAINT_GKE_TERMINATION,
    TAINT_KARPENTER_DISRUPTED,
    TAINT_KARPENTER_DISRUPTION,
    TAINT_KARPENTER_UNREGISTERED,
    TAINT_NODE_LIFECYCLE_PREFIX,
    TAINT_NTH_ASG_TERMINATION,
    TAINT_NTH_MAINTENANCE,
    TAINT_NTH_REBALANCE,
    TAINT_NTH_SPOT_ITN,
    TAINT_OUT_OF_SERVICE,
    TAINT_SHUTDOWN,
)
from gpufleet.model.constraints import KEEPS_OFF, Taint, taint_from_dict
from gpufleet.model.gpu import canonical_gpu_name, gpu_model
from gpufleet.model.node import CapacityType, GpuSharingFacts, Node, SharingMode
from gpufleet.model.share import MIG_PROFILE_PATTERN, advertised_gpus, mig_share, mig_slices, mig_slices_per_gpu

log = logging.getLogger(__name__)

# NoSchedule/NoExecute taints gpufleet's own pods tolerate (objects.batch_job adds the tolerations):
# the GPU taint clouds put on GPU nodes, an operator's taint reserving nodes for gpufleet, and the
# spot taints of AKS/GKE (gpufleet knows spot capacity and places only what may run there).
DEFAULT_TOLERATED_TAINTS: frozenset[str] = frozenset(
    {GPU_RESOURCE, TAINT_AKS_GPU, TAINT_DEDICATED, LABEL_AKS_PRIORITY, LABEL_GKE_SPOT, LABEL_GKE_PREEMPTIBLE}
)

# Taints that announce the node is about to go away, most specific first: key → reason.
NOTICE_TAINTS: tuple[tuple[str, str], ...] = (
    (TAINT_NTH_SPOT_ITN, "EC2 spot interruption notice"),
    (TAINT_GKE_TERMINATION, "GCE preemption / termination notice"),
    (TAINT_NTH_REBALANCE, "EC2 rebalance recommendation"),
    (TAINT_NTH_MAINTENANCE, "EC2 scheduled maintenance"),
    (TAINT_NTH_ASG_TERMINATION, "auto scaling group is terminating the node"),
    (TAINT_KARPENTER_DISRUPTED, "Karpenter is disrupting the node"),
    (TAINT_KARPENTER_DISRUPTION, "Karpenter is disrupting the node"),  # Karpenter < v1
    (TAINT_CA_DELETING, "cluster-autoscaler is deleting the node"),
    (TAINT_SHUTDOWN, "the cloud provider shut the node down"),
    (TAINT_OUT_OF_SERVICE, "the node is out of service"),
)
_NOTICE_KEYS = frozenset(key for key, _ in NOTICE_TAINTS)
# Node labels naming the capacity type (gpufleet's own first: an operator's word wins) and the pool.
CAPACITY_TYPE_LABELS: tuple[str, ...] = (LABEL_CAPACITY_TYPE, LABEL_KARPENTER_CAPACITY_TYPE)
POOL_LABELS: tuple[str, ...] = (
    LABEL_POOL,
    LABEL_KARPENTER_NODEPOOL,
    LABEL_EKS_NODEGROUP,
    LABEL_GKE_NODEPOOL,
    LABEL_AKS_AGENTPOOL,
)

# -- quantities ------------------------------------------------------------------------------------

# apimachinery's grammar: <sign><number><suffix>, suffix = binarySI | decimalSI | e<signed int>.
_QUANTITY = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<dec>[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_QUANTITY = Decimal(2) ** 63  # apimachinery stores quantities in int64 (with a scale)


def parse_quantity(value: object, *, field: str | None = None, source: str | None = None) -> Decimal:
    """A Kubernetes resource quantity (``"64"``, ``"63500m"``, ``"512Gi"``, ``"1e3"``, ``1.5``) as a Decimal.

    Strings follow apimachinery's grammar exactly; ints and finite floats are taken as they are (the
    API's int-or-string fields). Anything else raises :class:`InputError` naming ``field``/``source``.
    """
    if isinstance(value, str):
        result = _parse_quantity_string(value, field, source)
    elif isinstance(value, int) and not isinstance(value, bool):
        result = Decimal(value)
    elif isinstance(value, (float, Decimal)) and math.isfinite(value):
        result = Decimal(repr(value)) if isinstance(value, float) else value
    else:
        raise InputError(f"not a quantity: {value!r}", field=field, source=source)
    if abs(result) >= _MAX_QUANTITY:
        raise InputError(f"quantity out of range: {value!r}", field=field, source=source)
    return result


def _parse_quantity_string(value: str, field: str | None, source: str | None) -> Decimal:
    m = _QUANTITY.fullmatch(value)
    if m is None:
        raise InputError(
            f"not a Kubernetes quantity: {value!r} (expected e.g. 64, 63500m, 512Gi, 1e3)", field=field, source=source
        )
    with localcontext() as ctx:
        ctx.prec = 80  # exact for every value below 2**63 with any suffix
        number = Decimal(m["num"])
        if m["bin"]:
            return number * (Decimal(1024) ** _BINARY[m["bin"]])
        if m["dec"]:
            return number.scaleb(_DECIMAL[m["dec"]])
        if m["exp"]:
            exp = int(m["exp"])
            if abs(exp) > 64:
                raise InputError(f"quantity out of range: {value!r}", field=field, source=source)
            return number.scaleb(exp)
        return +number


def quantity_milli(value: object, *, field: str | None = None, source: str | None = None, round_up: bool = True) -> int:
    """A CPU-like quantity in thousandths (``"500m"`` → 500, ``"2"`` → 2000); must be ≥ 0."""
    q = _non_negative(parse_quantity(value, field=field, source=source), value, field, source)
    with localcontext() as ctx:
        ctx.prec = 80
        return int((q * 1000).to_integral_value(rounding=ROUND_CEILING if round_up else ROUND_FLOOR))


def quantity_mib(value: object, *, field: str | None = None, source: str | None = None, round_up: bool = True) -> int:
    """A byte quantity in MiB (``"512Gi"`` → 524288); ``round_up`` for requests, down for capacity."""
    q = _non_negative(parse_quantity(value, field=field, source=source), value, field, source)
    with localcontext() as ctx:
        ctx.prec = 80
        return int((q / (1 << 20)).to_integral_value(rounding=ROUND_CEILING if round_up else ROUND_FLOOR))


def quantity_count(value: object, *, field: str | None = None, source: str | None = None) -> int:
    """A whole, non-negative count (extended resources such as ``nvidia.com/gpu`` are integers)."""
    q = _non_negative(parse_quantity(value, field=field, source=source), value, field, source)
    if q != q.to_integral_value():
        raise InputError(f"must be a whole number, got {value!r}", field=field, source=source)
    return int(q)


def _non_negative(q: Decimal, raw: object, field: str | None, source: str | None) -> Decimal:
    if q < 0:
        raise InputError(f"must be >= 0, got {raw!r}", field=field, source=source)
    return q


# -- GPU product names -----------------------------------------------------------------------------

_FAMILIES = ("H200", "H100", "A100", "L40S", "A10G", "A10", "L4", "T4", "V100", "P100")
_MEMORY_TOKEN = re.compile(r"(\d+)GB")
_MIG_SUFFIX = re.compile(rf"-MIG-(?P<profile>{MIG_PROFILE_PATTERN})$", re.IGNORECASE)


def split_product(product: str) -> tuple[str, str | None, bool]:
    """``(base product, MIG profile or None, shared)``: the GFD product label without the suffixes
    that time-slicing (``-SHARED``) and MIG single strategy (``-MIG-1g.10gb``) add to it."""
    base = product.strip()
    shared = False
    if base.upper().endswith("-SHARED"):
        base, shared = base[: -len("-SHARED")], True
    profile = None
    m = _MIG_SUFFIX.search(base)
    if m is not None:
        profile = m["profile"].lower()
        base = base[: m.start()]
    return base, profile, shared


def gpu_from_product(product: str, memory_mib: float | None = None) -> str | None:
    """The canonical gpufleet GPU model for a GPU product name, or None when it is not one.

    Takes GFD's ``nvidia.com/gpu.product`` (``NVIDIA-A100-SXM4-80GB``, ``NVIDIA-H100-80GB-HBM3``,
    ``Tesla-T4``, ``NVIDIA-L40S``...), the cloud's accelerator labels (``nvidia-tesla-a100``,
    ``nvidia-a100-80gb``, Karpenter's ``a10g``) and gpufleet's own names. ``memory_mib`` (GFD's
    ``nvidia.com/gpu.memory``) tells the memory variants apart where the name does not.
    """
    direct = canonical_gpu_name(product)
    if direct is not None and memory_mib is None:
        return direct
    base, _, _ = split_product(product)
    tokens = [t for t in re.split(r"[-_\s]+", base.upper()) if t]
    family = next((t for t in tokens if t in _FAMILIES), None)
    if family is None:
        return direct
    mem_gib: float | None = None
    for t in tokens:
        m = _MEMORY_TOKEN.fullmatch(t)
        if m is not None:
            mem_gib = float(m[1])
    if mem_gib is None and memory_mib:
        mem_gib = memory_mib / 1024
    if family == "A100":
        name = "A100-80GB" if mem_gib is not None and mem_gib >= 60 else "A100-40GB"
    elif family == "V100":
        name = "V100-32GB" if mem_gib is not None and mem_gib >= 24 else "V100-16GB"
    elif family == "H100":
        if (mem_gib is not None and not 70 <= mem_gib <= 90) or "NVL" in tokens:
            return None  # H100 NVL (94 GB) / GH200 (96 GB): not a model gpufleet knows
        name = "H100-80GB"
    else:
        name = family
    return canonical_gpu_name(name)


# Node labels clouds put on GPU nodes naming the GPU, read where GFD's nvidia.com/gpu.product names none
# gpufleet knows: GKE's own (nvidia-tesla-a100, nvidia-l4...), Karpenter's for the AWS instance type
# (a100 with instance-gpu-memory in MiB), and the eksctl / cluster-autoscaler convention on EKS node
# groups (nvidia-tesla-t4...). AKS names no GPU (kubernetes.azure.com/accelerator=nvidia): its instance
# type does, through the catalog.
CLOUD_GPU_LABELS: tuple[str, ...] = (LABEL_GKE_ACCELERATOR, AWS_GPU_NAME, LABEL_EKS_ACCELERATOR)


def cloud_gpu_model(labels: Mapping[str, str], aws_gpu_memory_mib: int | None = None) -> tuple[str | None, str | None]:
    """``(model, None)``: the canonical GPU model the first of :data:`CLOUD_GPU_LABELS` names;
    ``(None, name)`` when none names a model gpufleet knows but GKE's label names a GPU (GKE sets it
    itself: the node has that GPU, e.g. ``nvidia-b200``); ``(None, None)`` otherwise."""
    for key in CLOUD_GPU_LABELS:
        raw = labels.get(key, "").strip()
        if raw:
            model = gpu_from_product(raw, aws_gpu_memory_mib if key == AWS_GPU_NAME else None)
            if model is not None:
                return model, None
    return None, labels.get(LABEL_GKE_ACCELERATOR, "").strip() or None


# -- the translation -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A translated node with what the Kubernetes backend needs beyond :class:`Node`."""

    node: Node  # its GPU sharing: node.gpu_facts
    schedulable: bool
    spot_notice: str | None  # a reason when the node is about to go away
    instance_type: str | None = None
    region: str | None = None
    zone: str | None = None
    price_source: str = "none"  # annotation | offering <provider/region/offering> | per-GPU ... | none
    notes: tuple[str, ...] = ()


def node_from_object(obj: Mapping[str, Any], catalog: PriceCatalog | None = None) -> Node | None:
    """The gpufleet :class:`Node` for a ``v1`` Node; None for a node gpufleet never runs work on
    (a virtual-kubelet node, a node of another OS). A CPU-only node is a Node with ``gpu_count=0``.

    Notes (how the price was found, or why it was not) are logged at DEBUG; :func:`node_info`
    returns them along with the rest.
    """
    info = node_info(obj, catalog)
    if info is None:
        return None
    for note in info.notes:
        log.debug("node %s: %s", info.node.name, note)
    return info.node


def node_info(
    obj: Mapping[str, Any],
    catalog: PriceCatalog | None = None,
    *,
    tolerated: Iterable[str] = DEFAULT_TOLERATED_TAINTS,
) -> NodeInfo | None:
    """Translate a ``v1`` Node (see the module docstring); None as for :func:`node_from_object`.

    Raises :class:`InputError` naming the node and the field for a malformed object (no name, an
    allocatable quantity that does not parse, a bad ``gpufleet.io/hourly-price-usd``).
    """
    meta = _mapping(obj.get("metadata"), "metadata", "node")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("missing", source="node", field="metadata.name")
    src = f"node {name}"
    labels = _str_map(meta.get("labels"), "metadata.labels", src)
    annotations = _str_map(meta.get("annotations"), "metadata.annotations", src)
    status = _mapping(obj.get("status"), "status", src)
    allocatable = _mapping(status.get("allocatable") or status.get("capacity"), "status.allocatable", src)
    if labels.get(LABEL_NODE_TYPE) == "virtual-kubelet":
        return None
    if labels.get(LABEL_OS, "linux") != "linux":
        return None
    notes: list[str] = []

    def alloc(key: str) -> Any:
        return allocatable.get(key)

    cpu_milli = (
        quantity_milli(alloc("cpu"), field="status.allocatable.cpu", source=src, round_up=False)
        if alloc("cpu") is not None
        else 0
    )
    memory_mib = (
        quantity_mib(alloc("memory"), field="status.allocatable.memory", source=src, round_up=False)
        if alloc("memory") is not None
        else 0
    )

    def label_int(key: str) -> int | None:
        raw = labels.get(key)
        if raw is None or raw == "":
            return None
        try:
            value = int(raw)
        except ValueError:
            raise InputError(f"not a whole number: {raw!r}", source=src, field=f"metadata.labels[{key}]") from None
        if value < 0:
            raise InputError(f"must be >= 0, got {raw!r}", source=src, field=f"metadata.labels[{key}]")
        return value

    def alloc_count(key: str) -> int | None:
        raw = alloc(key)
        if raw is None:
            return None
        return quantity_count(raw, field=f"status.allocatable[{key}]", source=src)

    # -- GPUs: model, sharing, count
    product = labels.get(LABEL_GPU_PRODUCT, "")
    base_product, single_profile, _ = split_product(product) if product else ("", None, False)
    gpu_memory = label_int(LABEL_GPU_MEMORY)
    mig_strategy = labels.get(LABEL_MIG_STRATEGY) or None
    if mig_strategy == "none":
        mig_strategy = None
    replicas = max(1, label_int(LABEL_GPU_REPLICAS) or 1)
    sharing_strategy = labels.get(LABEL_SHARING_STRATEGY) or "time-slicing"
    gke_clients = label_int(LABEL_GKE_MAX_SHARED_CLIENTS) or 1
    if replicas == 1 and gke_clients > 1:
        # GKE's own GPU sharing: its device plugin advertises GPUs x clients of nvidia.com/gpu, as
        # time-slicing does (GKE's "time-sharing" is NVIDIA's time-slicing)
        replicas = gke_clients
        sharing_strategy = _gke_sharing_strategy(labels.get(LABEL_GKE_GPU_SHARING_STRATEGY), notes)
    mig_profiles: dict[str, int] = {}
    for key in allocatable:
        if key.startswith(MIG_RESOURCE_PREFIX):
            n = alloc_count(key) or 0
            if n > 0:
                mig_profiles[key[len(MIG_RESOURCE_PREFIX) :]] = n
    plain = alloc_count(GPU_RESOURCE)
    shared = alloc_count(SHARED_GPU_RESOURCE)
    gke_partition = labels.get(LABEL_GKE_GPU_PARTITION_SIZE, "").strip().lower()
    if gke_partition and not single_profile and not mig_profiles:
        # GKE's MIG: every GPU cut into partitions of one size, each advertised as one nvidia.com/gpu
        # (GFD's single strategy, without GFD)
        single_profile = gke_partition

    # A single-strategy MIG node's memory label is the slice's memory, not the GPU's.
    model_name = gpu_from_product(base_product, None if single_profile else gpu_memory) if base_product else None
    cloud_unknown: str | None = None
    if model_name is None:
        model_name, cloud_unknown = cloud_gpu_model(labels, label_int(AWS_GPU_MEMORY))
    if base_product and model_name is None:
        model_name = base_product
        notes.append(f"unknown GPU product {product!r}: kept as the model name (the catalog cannot price it)")

    sharing = SharingMode.EXCLUSIVE
    gpu_count = 0
    unadvertised = 0
    whole = 0
    gpu_resource: str | None = None
    # GFD labels every node nvidia.com/mig.strategy=single under the single strategy, MIG or not: a
    # node's GPUs are MIG slices only when the product label names the profile (-MIG-<profile>)
    if single_profile:
        sharing, mig_strategy, gpu_resource = SharingMode.MIG, "single", GPU_RESOURCE
        slices = plain if plain is not None else (label_int(LABEL_GPU_COUNT) or 0)
        if replicas > 1 and slices:
            notes.append(f"{slices} {GPU_RESOURCE} are {single_profile} partitions shared {replicas} ways: read as MIG")
            slices = advertised_gpus(slices, replicas)
        if slices:
            mig_profiles = {single_profile: slices}
            per_gpu = mig_slices_per_gpu(single_profile, model_name)
            gpu_count = label_int(LABEL_GKE_ACCELERATOR_COUNT) or math.ceil(slices / per_gpu)
            notes.append(
                f"MIG single strategy: {slices} {single_profile} slice(s) counted as {gpu_count} GPU(s) "
                f"({per_gpu} per GPU)"
            )
    elif mig_profiles:
        sharing, mig_strategy = SharingMode.MIG, "mixed"
        whole = plain or 0
        gpu_resource = GPU_RESOURCE if whole else None  # MIG slices are asked for as nvidia.com/mig-<profile>
        counted = label_int(LABEL_GPU_COUNT)
        if counted is None:
            counted = whole + math.ceil(sum(n * mig_share(p, model_name) for p, n in mig_profiles.items()))
            notes.append(f"no {LABEL_GPU_COUNT} label: {counted} GPU(s) estimated from the MIG slices")
        gpu_count = counted
    else:
        mig_strategy = None  # mixed strategy with no MIG GPU on this node: plain GPUs
        advertised = shared if shared else plain
        gpu_resource = SHARED_GPU_RESOURCE if shared else GPU_RESOURCE
        if advertised is None:
            # GFD labelled the GPUs but the device plugin has not advertised them (yet): nothing
            # the kubelet would admit a GPU pod for; the node is still paid for its GPUs
            unadvertised = label_int(LABEL_GPU_COUNT) or label_int(LABEL_GKE_ACCELERATOR_COUNT) or 0
            if unadvertised:
                notes.append(f"{unadvertised} GPU(s) labelled but no {GPU_RESOURCE} allocatable: 0 usable")
        elif replicas > 1:
            gpu_count = advertised_gpus(advertised, replicas)
            if advertised % replicas:
                notes.append(f"{advertised} replicas is not a multiple of {replicas}: {gpu_count} GPU(s)")
        else:
            gpu_count = advertised
        if replicas > 1 and gpu_count:
            sharing = SharingMode.SHARED
        whole = gpu_count if sharing is SharingMode.EXCLUSIVE else 0
        if not gpu_count:
            gpu_resource = None

    # -- where, what it costs
    instance_type = labels.get(LABEL_INSTANCE_TYPE) or labels.get(LABEL_INSTANCE_TYPE_BETA) or None
    region = labels.get(LABEL_REGION) or labels.get(LABEL_REGION_BETA) or None
    zone = labels.get(LABEL_ZONE) or labels.get(LABEL_ZONE_BETA) or None
    provider = _provider(obj)
    capacity_type = _capacity_type(labels, notes)
    offering = _offering(catalog, instance_type, region) if catalog is not None and instance_type else None
    if offering is not None and not model_name and gpu_count:
        # GPUs without GFD labels: the catalog knows what the instance type carries
        model_name = offering.gpu
        notes.append(f"no {LABEL_GPU_PRODUCT} label: GPU model {offering.gpu} from the catalog's {instance_type}")
    if not model_name and cloud_unknown:
        model_name = cloud_unknown
        notes.append(f"unknown GPU {cloud_unknown!r} ({LABEL_GKE_ACCELERATOR}): kept as the model name (no price)")
    elif not model_name and gpu_count and labels.get(LABEL_AKS_ACCELERATOR):
        notes.append(f"AKS GPU node: the catalog has no {instance_type or 'instance type'}: GPU model unknown")
    price, price_source = _price(
        annotations,
        src,
        catalog,
        offering,
        model_name or "",
        gpu_count or unadvertised,
        capacity_type,
        provider,
        region,
        notes,
    )

    is_shared, is_mig = sharing is SharingMode.SHARED, sharing is SharingMode.MIG and mig_strategy is not None
    facts = GpuSharingFacts(
        resource=gpu_resource,
        replicas=replicas if is_shared else 1,
        strategy=sharing_strategy if is_shared else None,
        mig_strategy=mig_strategy if is_mig else None,
        mig_profiles=tuple(sorted(mig_profiles.items())) if is_mig else (),
        whole_gpus=whole if is_mig else 0,
    )
    if is_mig:
        for p in mig_profiles:
            if gpu_model(model_name or "").mig_profile(p) is None:
                notes.append(
                    f"MIG profile {p} is not one gpufleet knows for {model_name or 'an unknown GPU'}: "
                    f"counted as {mig_slices(p) or '?'} compute slice(s) by its name"
                )
                _warn_unknown_profile(model_name or "", p)

    node = Node(
        name=name,
        gpu_model=model_name or "",
        gpu_count=gpu_count,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        pool=_pool(labels),
        capacity_type=capacity_type,
        hourly_price_usd=price,
        sharing=sharing,
        labels=dict(labels),
        gpu_facts=facts,
        taints=node_taints(obj, tolerated, source=src),
    )
    return NodeInfo(
        node=node,
        schedulable=node_schedulable(obj, tolerated),
        spot_notice=spot_notice(obj),
        instance_type=instance_type,
        region=region,
        zone=zone,
        price_source=price_source,
        notes=tuple(notes),
    )


def node_schedulable(obj: Mapping[str, Any], tolerated: Iterable[str] = DEFAULT_TOLERATED_TAINTS) -> bool:
    """Whether gpufleet may place new work on the node: not cordoned, Ready, and without a
    NoSchedule/NoExecute lifecycle taint (:func:`lifecycle_taint`; PreferNoSchedule is ignored).
    Any other taint is no reason: it keeps off the jobs that do not tolerate it (:func:`node_taints`)."""
    return unschedulable_reason(obj, tolerated) is None


def lifecycle_taint(key: str) -> bool:
    """Is a taint with this key the node's lifecycle speaking (``node.kubernetes.io/*``: not ready,
    unreachable, cordoned, under pressure, out of service; ``node.cloudprovider.kubernetes.io/*``;
    Karpenter's unregistered; the notices of :data:`NOTICE_TAINTS`) rather than its owner saying
    which pods it is for? Lifecycle taints make a node unschedulable for every job, whatever it
    tolerates; the others are :func:`node_taints`."""
    return (
        key.startswith((TAINT_NODE_LIFECYCLE_PREFIX, TAINT_CLOUD_PROVIDER_PREFIX))
        or key == TAINT_KARPENTER_UNREGISTERED
        or key in _NOTICE_KEYS
    )


def node_taints(
    obj: Mapping[str, Any], tolerated: Iterable[str] = DEFAULT_TOLERATED_TAINTS, *, source: str = "node"
) -> tuple[Taint, ...]:
    """The node's taints that keep off the jobs not tolerating them (``Node.taints``): NoSchedule and
    NoExecute ones, but the lifecycle's (:func:`lifecycle_taint`) and those whose key is in
    ``tolerated`` (gpufleet's own pods tolerate them: ``objects.batch_job`` writes the tolerations
    from the same list). :class:`InputError` names a malformed one."""
    return keep_off_taints((obj.get("spec") or {}).get("taints"), tolerated, source=source)


def keep_off_taints(
    raw: Any, tolerated: Iterable[str] = DEFAULT_TOLERATED_TAINTS, *, source: str = "node", at: str = "spec.taints"
) -> tuple[Taint, ...]:
    """:func:`node_taints` of a list of taints as a Node's ``spec.taints`` holds them (``at`` is its
    path in ``source``, for the field an :class:`InputError` names): also what a Karpenter NodePool's
    ``spec.template.spec.taints`` will put on its nodes (the provisioner's pools carry them)."""
    ok = set(tolerated)
    out: list[Taint] = []
    raw = raw or []
    if not isinstance(raw, list):
        raise InputError(f"expected a list, got {type(raw).__name__}", source=source, field=at)
    for i, t in enumerate(raw):
        taint = taint_from_dict(t, source=source, at=f"{at}[{i}]")
        if taint.effect in KEEPS_OFF and taint.key not in ok and not lifecycle_taint(taint.key):
            out.append(taint)
    return tuple(out)


def unschedulable_reason(obj: Mapping[str, Any], tolerated: Iterable[str] = DEFAULT_TOLERATED_TAINTS) -> str | None:
    """Why gpufleet places no new work on the node (None: it may). None of these ends the work the
    node runs: Kubernetes evicts that itself (NoExecute taints after their toleration, a drain).
    Only lifecycle taints (:func:`lifecycle_taint`) are a reason: the others are :func:`node_taints`."""
    spec = obj.get("spec") or {}
    if spec.get("unschedulable") is True:
        return "cordoned (spec.unschedulable)"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "being deleted"
    ready: str | None = None
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = str(cond.get("status"))
    if ready != "True":
        return f"not Ready (Ready={ready or 'missing'})"
    ok = set(tolerated)
    for taint in spec.get("taints") or []:
        if not isinstance(taint, Mapping):
            continue
        key = str(taint.get("key") or "")
        if taint.get("effect") in KEEPS_OFF and key not in ok and lifecycle_taint(key):
            return f"tainted {key}:{taint.get('effect')}"
    return None


def spot_notice(obj: Mapping[str, Any]) -> str | None:
    """A reason when the node carries a taint announcing its end (a spot interruption notice,
    Karpenter or cluster-autoscaler disruption, a shutdown), else None."""
    keys = {t.get("key") for t in (obj.get("spec") or {}).get("taints") or [] if isinstance(t, Mapping)}
    for key, reason in NOTICE_TAINTS:
        if key in keys:
            return f"{reason} (taint {key})"
    return None


# -- helpers ---------------------------------------------------------------------------------------


def _mapping(value: Any, fld: str, source: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"expected an object, got {type(value).__name__}", source=source, field=fld)
    return value


def _str_map(value: Any, fld: str, source: str) -> dict[str, str]:
    m = _mapping(value, fld, source)
    out: dict[str, str] = {}
    for k, v in m.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InputError(f"expected a string value for {k!r}, got {type(v).__name__}", source=source, field=fld)
        out[k] = v
    return out


_GKE_STRATEGIES = {"time-sharing": "time-slicing", "mps": "mps"}  # GKE's word → GFD's


def _gke_sharing_strategy(raw: str | None, notes: list[str]) -> str:
    """GKE's ``gke-gpu-sharing-strategy`` as GFD's ``nvidia.com/gpu.sharing-strategy`` names it."""
    value = (raw or "time-sharing").strip().lower()
    if value not in _GKE_STRATEGIES:
        notes.append(f"unknown {LABEL_GKE_GPU_SHARING_STRATEGY}={raw!r}: taken as time-sharing")
    return _GKE_STRATEGIES.get(value, "time-slicing")


_warned_profiles: set[tuple[str, str]] = set()


def _warn_unknown_profile(model: str, profile: str) -> None:
    """Log a MIG profile gpufleet does not know once per model (each sync reads every node again)."""
    if (model, profile) not in _warned_profiles:
        _warned_profiles.add((model, profile))
        log.warning("MIG profile %s is not one gpufleet knows for %s: its slices are sized by name", profile, model)


def _capacity_type(labels: Mapping[str, str], notes: list[str]) -> CapacityType:
    for key in CAPACITY_TYPE_LABELS:
        raw = labels.get(key)
        if raw:
            try:
                return CapacityType(raw.strip().lower())
            except ValueError:
                notes.append(f"unknown capacity type {key}={raw!r}: taken as on-demand")
                return CapacityType.ON_DEMAND
    eks = labels.get(LABEL_EKS_CAPACITY_TYPE)
    if eks:
        if eks.upper() == "SPOT":
            return CapacityType.SPOT
        if eks.upper() == "CAPACITY_BLOCK":
            return CapacityType.RESERVED
        return CapacityType.ON_DEMAND
    if labels.get(LABEL_GKE_SPOT) == "true" or labels.get(LABEL_GKE_PREEMPTIBLE) == "true":
        return CapacityType.SPOT
    if labels.get(LABEL_GKE_RESERVATION):
        return CapacityType.RESERVED
    if labels.get(LABEL_AKS_PRIORITY, "").lower() == "spot":
        return CapacityType.SPOT
    if labels.get(LABEL_LIFECYCLE, "").lower() in ("spot", "preemptible"):
        return CapacityType.SPOT
    return CapacityType.ON_DEMAND


def _pool(labels: Mapping[str, str]) -> str:
    for key in POOL_LABELS:
        if labels.get(key):
            return labels[key]
    return "default"


def _provider(obj: Mapping[str, Any]) -> str | None:
    """The catalog provider from ``spec.providerID`` (``aws:///...``, ``gce://...``, ``azure://...``)."""
    pid = (obj.get("spec") or {}).get("providerID")
    if not isinstance(pid, str) or "://" not in pid:
        return None
    scheme = pid.split("://", 1)[0].lower()
    return {"aws": "aws", "gce": "gcp", "azure": "azure"}.get(scheme)


def _offering(catalog: PriceCatalog, instance_type: str, region: str | None) -> PriceEntry | None:
    """The catalog row for ``instance_type``: in ``region`` if it has one there, else the first other."""
    rows = sorted((e for e in catalog.entries if e.offering == instance_type), key=lambda e: (e.provider, e.region))
    if not rows:
        return None
    in_region = [e for e in rows if e.region == region]
    return (in_region or rows)[0]


def _price(
    annotations: Mapping[str, str],
    src: str,
    catalog: PriceCatalog | None,
    offering: PriceEntry | None,
    model: str,
    gpu_count: int,
    capacity_type: CapacityType,
    provider: str | None,
    region: str | None,
    notes: list[str],
) -> tuple[float | None, str]:
    raw = annotations.get(ANNOTATION_HOURLY_PRICE)
    if raw is not None:
        try:
            price = float(raw.strip().lstrip("$"))
        except ValueError:
            price = math.nan
        if not math.isfinite(price) or price < 0:
            raise InputError(
                f"not a price in USD per hour: {raw!r} (expected e.g. '32.77')",
                source=src,
                field=f"metadata.annotations[{ANNOTATION_HOURLY_PRICE}]",
            )
        return price, "annotation"
    if catalog is None:
        return None, "none"
    if offering is not None:
        hourly = offering.hourly_usd(capacity_type, catalog.spot_estimate)
        where = f"{offering.provider}/{offering.region}/{offering.offering}"
        if hourly is not None and (offering.gpu == canonical_gpu_name(model) or not model):
            if region is not None and offering.region != region:
                notes.append(f"priced as {where}: the catalog has no {offering.offering} row in {region}")
            return hourly, f"offering {where}"
        if hourly is None:
            notes.append(f"the catalog has no {capacity_type} price for {where}: priced per GPU")
        else:
            notes.append(f"catalog offering {where} has {offering.gpu}, the node {model}: priced per GPU")
    if gpu_count <= 0 or not model:
        notes.append("no GPUs and no price annotation: the GPU catalog cannot price it")
        return None, "none"
    if canonical_gpu_name(model) is None:
        notes.append(f"GPU model {model!r} is unknown: no catalog price")
        return None, "none"
    attempts: list[tuple[str | None, str | None]] = [(provider, region), (provider, None), (None, None)]
    last: CatalogError | None = None
    for prov, reg in dict.fromkeys(attempts):
        try:
            quote = catalog.quote(model, capacity_type, provider=prov, region=reg)
        except CatalogError as exc:
            last = exc
            continue
        row = quote.entry
        return quote.usd_per_gpu_hour * gpu_count, f"per-GPU {row.provider}/{row.region}/{row.offering} x {gpu_count}"
    notes.append(f"no catalog price: {last.message if last else 'no offering'}")
    return None, "none"
