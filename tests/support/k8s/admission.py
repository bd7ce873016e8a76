"""The kubelet's own admission of a pod bound to its node (``pkg/kubelet/lifecycle/predicate.go``).

A scheduler (or gpufleet, binding pods itself) can bind a pod anywhere; the kubelet then re-checks
what it cares about and rejects a pod that does not fit, which the pod's status shows as
``phase: Failed`` with the first failure as the reason and ``"Pod was rejected: <message>"``:

- **extended resources** (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-*``): the
  pod's requests plus those of the pods already admitted on the node must fit the node's
  ``status.allocatable`` — reason ``OutOf<resource>``, message ``Node didn't have enough resource:
  <r>, requested: N, used: U, capacity: C``. A resource the node does not list at all is *ignored*
  (``removeMissingExtendedResources``: before the device plugin registers, a GPU pod is admitted and
  its containers start without a GPU; :attr:`Verdict.missing` says which);
- **node affinity**: ``spec.nodeSelector`` and ``requiredDuringSchedulingIgnoredDuringExecution``
  node selector terms (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``; ``matchFields``
  on ``metadata.name``) — reason ``NodeAffinity``, message ``Predicate NodeAffinity failed``;
- **taints**: only ``NoExecute`` taints the pod does not tolerate (the kubelet ignores
  ``NoSchedule``: that is the scheduler's business) — reason ``TaintToleration``;
- **devices**: the NVIDIA device plugin's allocation of ``nvidia.com/gpu`` / ``.shared``
  (:mod:`tests.support.k8s.deviceplugin`: replicas spread over GPUs; MPS, and time-slicing with
  ``failRequestsGreaterThanOne``, refuse more than one replica) — reason ``UnexpectedAdmissionError``;
  :attr:`Verdict.devices` says which devices an admitted pod got.

CPU, memory and pod counts are not checked (the substrate's nodes do not run out of them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.support.k8s.deviceplugin import PLUGIN_RESOURCES
from tests.support.k8s.deviceplugin import allocate as allocate_devices
from tests.support.k8s.nodelifecycle import tolerates

__all__ = ["Verdict", "admit", "extended_requests", "matches_node_affinity"]

_BUILTIN = {"cpu", "memory", "ephemeral-storage", "pods"}


@dataclass(frozen=True)
class Verdict:
    admit: bool
    reason: str = ""
    message: str = ""
    missing: tuple[str, ...] = field(default=())  # extended resources requested that the node does not list
    devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # resource -> device IDs it got


def _is_extended(name: str) -> bool:
    return (
        name not in _BUILTIN
        and not name.startswith("hugepages-")
        and "/" in name
        and not name.startswith("kubernetes.io/")
    )


def extended_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """A pod's extended-resource requests: the sum over its containers, or the largest init
    container's when that is more (the effective request)."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        asked = dict(resources.get("limits") or {})  # extended resources: requests must equal limits
        asked.update(resources.get("requests") or {})
        return {k: int(str(v)) for k, v in asked.items() if _is_extended(k)}

    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0), v)
    return total


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for expr in term.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), list(expr.get("values") or [])
        has, value = key in labels, labels.get(key)
        if op == "In" and not (has and value in values):
            return False
        if op == "NotIn" and has and value in values:
            return False
        if op == "Exists" and not has:
            return False
        if op == "DoesNotExist" and has:
            return False
        if op in ("Gt", "Lt"):
            try:
                left, right = int(str(value)), int(values[0])
            except (TypeError, ValueError, IndexError):
                return False
            if not has or (op == "Gt" and not left > right) or (op == "Lt" and not left < right):
                return False
    name = (node.get("metadata") or {}).get("name")
    for expr in term.get("matchFields") or []:
        if expr.get("key") != "metadata.name":
            return False
        values = list(expr.get("values") or [])
        if (expr.get("operator") == "In" and name not in values) or (
            expr.get("operator") == "NotIn" and name in values
        ):
            return False
    return bool(term.get("matchExpressions") or term.get("matchFields"))


def matches_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``PodMatchesNodeSelectorAndAffinityTerms``: the nodeSelector's every pair, and one of the
    required node selector terms (terms are ORed, expressions within a term ANDed)."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {})  # fmt: skip
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_term_matches(t, node) for t in terms)


def admit(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    admitted: Iterable[Mapping[str, Any]],
    used_devices: Iterable[str] = (),
) -> Verdict:
    """The kubelet's verdict on ``pod`` for ``node``, with ``admitted`` the pods it already runs there
    (holding ``used_devices`` of the device plugin's)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    asked = extended_requests(pod)
    missing = tuple(sorted(r for r in asked if r not in allocatable))
    used: dict[str, int] = {}
    for other in admitted:
        for k, v in extended_requests(other).items():
            used[k] = used.get(k, 0) + v
    for resource in sorted(asked):
        if resource in missing or asked[resource] == 0:
            continue
        capacity = int(str(allocatable[resource]))
        if asked[resource] + used.get(resource, 0) > capacity:
            return Verdict(
                False,
                f"OutOf{resource}",
                f"Node didn't have enough resource: {resource}, requested: {asked[resource]}, "
                f"used: {used.get(resource, 0)}, capacity: {capacity}",
                missing,
            )
    if not matches_node_affinity(pod, node):
        return Verdict(False, "NodeAffinity", "Predicate NodeAffinity failed", missing)
    tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") == "NoExecute" and not tolerates(tolerations, taint)[0]:
            return Verdict(False, "TaintToleration", "Predicate TaintToleration failed", missing)
    plugin = {r: asked[r] for r in PLUGIN_RESOURCES if r in asked and r not in missing}
    got = allocate_devices(pod, node, plugin, used_devices) if plugin else None
    if got is not None and got.error:
        return Verdict(False, "UnexpectedAdmissionError", got.error, missing)
    return Verdict(True, missing=missing, devices=dict(got.devices) if got is not None else {})
