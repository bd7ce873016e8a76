"""Karpenter's decisions about pods and NodeClaims, as its v1 code makes them (test substrate, no
controller): which pending pods its provisioner launches nodes for, which nodes its consolidation
may disrupt, when a NodeClaim's launch fails on ``minValues``, and when a launched claim drifted.

Modelled on kubernetes-sigs/karpenter @ 22664681 (v1.14.0+) and aws/karpenter-provider-aws @
1d927085 (v1.14.0+), read, not copied:

- :func:`is_provisionable` — ``pkg/utils/pod/scheduling.go`` ``IsProvisionable``: a
  ``PodScheduled`` condition whose *reason* is ``Unschedulable`` (``FailedToSchedule``: neither the
  condition's status nor the pod's ``schedulerName`` is looked at), not bound (``spec.nodeName``),
  not preempting (``status.nominatedNodeName``), not a DaemonSet's or a static (Node-owned) pod.
  The provisioner lists pods with an empty ``spec.nodeName`` and keeps these
  (``GetProvisionablePods``);
- :func:`is_disruptable` / :func:`node_disruption_blocked` — ``IsDisruptable`` (an inactive pod, or
  one without an active ``karpenter.sh/do-not-disrupt``: ``"true"``, or a Go duration not yet past
  since the pod's start; another value counts as absent) and ``StateNode.ValidatePodsDisruptable``,
  which consolidation (and drift, expiry) run on each candidate node: one such pod blocks the node;
- :func:`launch_error` — the AWS provider's ``filterInstanceTypes`` (the compatible-available
  filter; none left is an InsufficientCapacityError) then ``InstanceTypes.Truncate`` →
  ``SatisfiesMinValues`` (default ``minValuesPolicy: Strict``): for each requirement with
  ``minValues``, the instance types left must bring that many distinct values of its key;
- :func:`registered_node` — ``pkg/controllers/nodeclaim/lifecycle/registration.go`` ``syncNode``:
  the Node a launched claim becomes carries the claim's labels and its taints;
- :func:`drift` — ``pkg/controllers/nodeclaim/disruption/drift.go``: ``areStaticFieldsDrifted``
  (the claim's ``karpenter.sh/nodepool-hash`` differs from the NodePool's, both present with the
  same hash version; a claim without them never drifts statically) and ``areRequirementsDrifted``
  (the claim's labels leave a NodePool requirement on a key they lack without a known value).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


# -- pods ------------------------------------------------------------------------------------------


def _owned_by(pod: Mapping[str, Any], api_version: str, kind: str) -> bool:
    return any(
        o.get("apiVersion") == api_version and o.get("kind") == kind
        for o in (pod.get("metadata") or {}).get("ownerReferences") or []
    )


def failed_to_schedule(pod: Mapping[str, Any]) -> bool:
    """``FailedToSchedule``: some ``PodScheduled`` condition has reason ``Unschedulable``."""
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def is_provisionable(pod: Mapping[str, Any]) -> bool:
    """Would Karpenter's provisioner launch capacity for this pod (``IsProvisionable``)?"""
    return (
        failed_to_schedule(pod)
        and not (pod.get("spec") or {}).get("nodeName")
        and not (pod.get("status") or {}).get("nominatedNodeName")
        and not _owned_by(pod, "apps/v1", "DaemonSet")
        and not _owned_by(pod, "v1", "Node")
    )


def provisionable(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """``namespace/name`` of the pods Karpenter's provisioner would launch nodes for."""
    return sorted(
        f"{p['metadata'].get('namespace', '')}/{p['metadata']['name']}"
        for p in pods
        if not (p.get("spec") or {}).get("nodeName") and is_provisionable(p)
    )


def go_duration_s(value: str) -> float | None:
    """Go's ``time.ParseDuration`` (seconds), or None where Go refuses the text."""
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    if text == "0":
        return 0.0
    parts = _DURATION_PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        return None
    return sign * sum(float(n) * _UNIT_S[u] for n, u in parts)


def is_active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def is_do_not_disrupt_active(pod: Mapping[str, Any], now: float) -> bool:
    """``IsDoNotDisruptActive``: ``"true"``; or a positive Go duration not yet past since the pod's
    ``status.startTime`` (no start time: active); any other value: as if absent."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(DO_NOT_DISRUPT)
    if value is None:
        return False
    if value == "true":
        return True
    duration = go_duration_s(str(value))
    if duration is None or duration <= 0:
        return False
    start = (pod.get("status") or {}).get("startTime")
    if not start:
        return True
    started = datetime.fromisoformat(str(start).replace("Z", "+00:00")).timestamp()
    return now - started < duration


def is_disruptable(pod: Mapping[str, Any], now: float) -> bool:
    """``IsDisruptable``: not active, or no active do-not-disrupt."""
    return not is_active(pod) or not is_do_not_disrupt_active(pod, now)


def node_disruption_blocked(pods_on_node: Iterable[Mapping[str, Any]], now: float) -> str | None:
    """``ValidatePodsDisruptable`` (PDBs left out): why consolidation may not take the node, or None."""
    for pod in pods_on_node:
        if not is_disruptable(pod, now):
            meta = pod.get("metadata") or {}
            return f'pod {meta.get("namespace")}/{meta.get("name")} has "{DO_NOT_DISRUPT}" annotation'
    return None


# -- NodeClaims --------------------------------------------------------------------------------------


def _admits(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Do ``labels`` (an instance type's, or a claim's) satisfy one requirement on a key they
    define? (The compatible-available filter checks only the keys an instance type defines: a
    claim's custom keys and its zone never reject one; offerings settle zones.)"""
    key, op = str(req.get("key")), req.get("operator")
    values = [str(v) for v in req.get("values") or []]
    if key not in labels:
        return True
    value = labels[key]
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in ("Gt", "Lt") and values:
        try:
            x, bound = int(value), int(values[0])
        except ValueError:
            return False
        return x > bound if op == "Gt" else x < bound
    return True


def launch_error(claim: Mapping[str, Any], instance_types: Mapping[str, Mapping[str, str]]) -> str | None:
    """Why the AWS provider fails to launch ``claim`` among ``instance_types`` (name → its labels,
    ``node.kubernetes.io/instance-type`` included), or None when it launches. Karpenter deletes a
    claim whose launch fails this way (and its provisioner makes another for the same pods)."""
    reqs: Sequence[Mapping[str, Any]] = (claim.get("spec") or {}).get("requirements") or []
    fit = [name for name, labels in sorted(instance_types.items()) if all(_admits(r, labels) for r in reqs)]
    if not fit:
        return "all requested instance types were unavailable during launch"
    short = []
    for r in reqs:
        need = r.get("minValues")
        if need is None:
            continue
        key = str(r.get("key"))
        seen = {instance_types[name][key] for name in fit if key in instance_types[name]}
        if len(seen) < int(need):
            short.append(key)
    if short:
        return f"minValues requirement is not met for label(s) {sorted(short)}"
    return None


def drift(nodepool: Mapping[str, Any], claim: Mapping[str, Any]) -> str | None:
    """``NodePoolDrifted`` / ``RequirementsDrifted`` for a launched claim (its labels as Karpenter
    completed them), or None."""
    pool_ann = (nodepool.get("metadata") or {}).get("annotations") or {}
    claim_meta = claim.get("metadata") or {}
    claim_ann = claim_meta.get("annotations") or {}
    if is_static_drift_visible(nodepool, claim) and pool_ann[NODEPOOL_HASH] != claim_ann[NODEPOOL_HASH]:
        return "NodePoolDrifted"
    labels = claim_meta.get("labels") or {}
    template = ((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}
    for r in template.get("requirements") or []:
        key, op = str(r.get("key")), r.get("operator")
        if key not in labels:
            if op not in ("NotIn", "DoesNotExist"):
                return "RequirementsDrifted"  # "label does not have known values"
            continue
        if not _admits(r, labels):
            return "RequirementsDrifted"
    return None


def is_static_drift_visible(nodepool: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """Can Karpenter see this claim drift when the NodePool's template changes? Only where both
    carry the hash annotations with the same hash version (``areStaticFieldsDrifted``)."""
    pool_ann = (nodepool.get("metadata") or {}).get("annotations") or {}
    claim_ann = (claim.get("metadata") or {}).get("annotations") or {}
    keys = (NODEPOOL_HASH, NODEPOOL_HASH_VERSION)
    return (
        all(k in pool_ann for k in keys)
        and all(k in claim_ann for k in keys)
        and pool_ann[NODEPOOL_HASH_VERSION] == claim_ann[NODEPOOL_HASH_VERSION]
    )


# -- registration ------------------------------------------------------------------------------------

REGISTERED = "karpenter.sh/registered"
UNREGISTERED = "karpenter.sh/unregistered"


def _same_taint(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``Taint.MatchTaint``: the same key and effect (the value is not compared)."""
    return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")


def registered_node(claim: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """The Node ``node`` once Karpenter registered it for ``claim`` (``pkg/controllers/nodeclaim/
    lifecycle/registration.go`` ``syncNode``): the claim's labels and annotations over the node's;
    the claim's ``spec.taints`` then ``spec.startupTaints`` merged into the node's
    (``scheduling.Taints.Merge``: a taint is added unless the node has one with its key and effect);
    the ``karpenter.sh/unregistered:NoExecute`` taint the node registered with removed; the label
    ``karpenter.sh/registered: "true"``. (Its owner reference and termination finalizer are left out.
    Read at kubernetes-sigs/karpenter @ 007859a5.)"""
    out = copy.deepcopy(dict(node))
    meta = out.setdefault("metadata", {})
    claim_meta = claim.get("metadata") or {}
    meta["labels"] = {**(meta.get("labels") or {}), **(claim_meta.get("labels") or {}), REGISTERED: "true"}
    if claim_meta.get("annotations"):
        meta["annotations"] = {**(meta.get("annotations") or {}), **claim_meta["annotations"]}
    spec = out.setdefault("spec", {})
    taints: list[dict[str, Any]] = [dict(t) for t in spec.get("taints") or []]
    claim_spec = claim.get("spec") or {}
    for t in [*(claim_spec.get("taints") or []), *(claim_spec.get("startupTaints") or [])]:
        if not any(_same_taint(t, have) for have in taints):
            taints.append(dict(t))
    taints = [t for t in taints if not _same_taint(t, {"key": UNREGISTERED, "effect": "NoExecute"})]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    return out
