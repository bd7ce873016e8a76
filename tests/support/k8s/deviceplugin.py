"""The NVIDIA device plugin's allocation on a node (``NVIDIA/k8s-device-plugin``), for the kubelet stand-in.

When the kubelet admits a pod that asks ``nvidia.com/gpu`` (or ``nvidia.com/gpu.shared``), its device
manager asks the plugin for the devices (``GetPreferredAllocation``) and then hands them out
(``Allocate``). On a node whose GPUs are shared (time-slicing or MPS: ``replicas`` > 1) each GPU is
advertised as ``replicas`` devices ``<GPU>::<i>``, and the plugin

- **spreads** a request over the physical GPUs: ``internal/rm/allocate.go``'s default policy
  (``distributed``) takes, replica by replica, one of the GPU with the fewest replicas allocated,
  ties broken by the fewest taken in this request — so ``k`` > 1 replicas come from several GPUs,
  never a whole GPU's worth from one;
- **refuses** a request of more than one replica (``internal/rm/rm.go`` ``ValidateRequest``) under
  MPS always, and under time-slicing with ``failRequestsGreaterThanOne``: the kubelet fails the pod
  with reason ``UnexpectedAdmissionError`` and message ``Allocate failed due to rpc error: code =
  Unknown desc = invalid allocation request for "<resource>": invalid request: maximum request size
  for shared resources is 1; found <k>, which is unexpected``.

What the node's plugin is configured with, the substrate reads from the Node: GFD's
``nvidia.com/gpu.replicas`` and ``nvidia.com/gpu.sharing-strategy`` (``time-slicing`` | ``mps``), and
:data:`FAIL_REQUESTS_GREATER_THAN_ONE` (an annotation of the substrate's: the real setting lives in
the plugin's ConfigMap, not on the Node). The device IDs a pod got are what its containers would see
(``NVIDIA_VISIBLE_DEVICES``): :attr:`tests.support.k8s.kubelet.Kubelet.devices` keeps them.

Real kubelets run the device manager before the other admission checks (an over-request reads
``UnexpectedAdmissionError: ... requested number of devices unavailable``); the substrate allocates
after its count check (:mod:`tests.support.k8s.admission`), whose ``OutOf<resource>`` reason the
existing tests rely on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FAIL_REQUESTS_GREATER_THAN_ONE",
    "PLUGIN_RESOURCES",
    "Allocation",
    "allocate",
    "gpu_of",
]

PLUGIN_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")  # what the plugin hands out (not MIG)
FAIL_REQUESTS_GREATER_THAN_ONE = "kwok.gpufleet.io/fail-requests-greater-than-one"  # "true": time-slicing refuses k > 1
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"


@dataclass(frozen=True)
class Allocation:
    """The plugin's answer for one pod: the devices per resource, or why it refused."""

    devices: Mapping[str, tuple[str, ...]]  # resource -> device IDs (``GPU-<n>`` or ``GPU-<n>::<replica>``)
    error: str = ""  # non-empty: Allocate failed (the kubelet's UnexpectedAdmissionError message)


def gpu_of(device: str) -> str:
    """The physical GPU of a device ID (``GPU-1::3`` → ``GPU-1``; AnnotatedID.GetID)."""
    return device.split("::", 1)[0]


def _devices(node: Mapping[str, Any], resource: str) -> list[str]:
    """The devices the plugin advertises for ``resource`` on the node (allocatable of them)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    advertised = int(str(allocatable.get(resource, 0)))
    replicas = max(1, int(str(labels.get(REPLICAS_LABEL) or 1)))
    if replicas == 1:
        return [f"GPU-{g}" for g in range(advertised)]
    return [f"GPU-{g}::{r}" for g in range(advertised // replicas) for r in range(replicas)]


def _distributed(candidates: list[str], in_use: set[str], all_devices: list[str], size: int) -> list[str]:
    """``greedyAlloc`` with the ``distributed`` comparator: each pick from the GPU with the fewest
    replicas allocated (before this request and during it), then the fewest picked in this request,
    then the GPU's own order (the heap's tie: the substrate keeps it deterministic)."""
    total: dict[str, int] = {}
    for d in all_devices:
        total[gpu_of(d)] = total.get(gpu_of(d), 0) + 1
    available: dict[str, list[str]] = {}
    for d in candidates:
        available.setdefault(gpu_of(d), []).append(d)
    allocated = {g: total[g] - len(free) for g, free in available.items()}
    picked = dict.fromkeys(available, 0)
    order = {g: i for i, g in enumerate(available)}
    out: list[str] = []
    for _ in range(size):
        live = [g for g in available if available[g]]
        g = min(live, key=lambda x: (allocated[x], picked[x], order[x]))
        out.append(available[g].pop())
        allocated[g] += 1
        picked[g] += 1
    return out


def allocate(
    pod: Mapping[str, Any], node: Mapping[str, Any], requests: Mapping[str, int], used: Iterable[str]
) -> Allocation:
    """The devices the node's plugin hands ``pod`` for its ``requests`` (resource → count; the
    kubelet checked they fit), with ``used`` the device IDs other admitted pods hold."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    strategy = labels.get(STRATEGY_LABEL) or "none"
    replicas = max(1, int(str(labels.get(REPLICAS_LABEL) or 1)))
    fail_gt_one = strategy == "mps" or (
        strategy == "time-slicing" and annotations.get(FAIL_REQUESTS_GREATER_THAN_ONE) == "true"
    )
    in_use = set(used)
    out: dict[str, tuple[str, ...]] = {}
    for resource in PLUGIN_RESOURCES:
        size = requests.get(resource, 0)
        if size <= 0:
            continue
        devices = _devices(node, resource)
        if replicas > 1 and size > 1 and fail_gt_one:
            return Allocation(
                out,
                f"Allocate failed due to rpc error: code = Unknown desc = invalid allocation request for "
                f'"{resource}": invalid request: maximum request size for shared resources is 1; found {size}, '
                "which is unexpected",
            )
        free = [d for d in devices if d not in in_use]
        if len(free) < size:
            return Allocation(
                out,
                f"Allocate failed due to requested number of devices unavailable for {resource}. "
                f"Requested: {size}, Available: {len(free)}, which is unexpected",
            )
        chosen = _distributed(free, in_use, devices, size) if replicas > 1 else free[:size]
        out[resource] = tuple(chosen)
        in_use.update(chosen)
    return Allocation(out)
