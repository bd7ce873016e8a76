"""The node lifecycle as Kubernetes runs it: condition taints and taint-based eviction.

Modelled on kube-controller-manager's node lifecycle controller (``pkg/controller/nodelifecycle``:
TaintNodesByCondition, MarkPodsNotReady) and its taint eviction controller
(``pkg/controller/tainteviction``), with the API server's ``DefaultTolerationSeconds`` admission
plugin (applied in :func:`tests.support.k8s.apiserver._default_pod`):

- a node's conditions and ``spec.unschedulable`` become taints the scheduler reads:
  ``node.kubernetes.io/unschedulable:NoSchedule`` (``kubectl cordon``),
  ``node.kubernetes.io/not-ready`` (Ready=False) and ``node.kubernetes.io/unreachable``
  (Ready=Unknown) as ``NoSchedule`` *and* ``NoExecute``, ``node.kubernetes.io/disk-pressure``,
  ``memory-pressure``, ``pid-pressure`` and ``network-unavailable`` as ``NoSchedule``; a taint goes
  when its condition does;
- ``NoSchedule`` taints never touch running pods: only new placements are refused;
- a ``NoExecute`` taint evicts (deletes) every pod on the node that does not tolerate it at once, and
  a pod that tolerates it for ``tolerationSeconds`` when that time has passed since the taint's
  ``timeAdded``; the taint's removal in time cancels the eviction. Every pod gets a 300 s toleration of
  ``not-ready`` and ``unreachable`` from ``DefaultTolerationSeconds``, so a 5 s NotReady blip evicts
  nothing;
- pods on a node that is not Ready are marked ``Ready=False`` (MarkPodsNotReady).

``time_scale`` shrinks every toleration (0.01 turns 300 s into 3 s) so a test can watch an eviction
happen; the default 1.0 keeps Kubernetes' own timing. Runs on the API server's loop, in process, like
the kubelet stand-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.support.k8s.apiserver import (
    NODES,
    PODS,
    ApiError,
    KubeApiServer,
    ResourceVersionTooOld,
    format_time,
    set_condition,
    utcnow,
)

__all__ = [
    "CONDITION_TAINTS",
    "NOT_READY",
    "UNREACHABLE",
    "UNSCHEDULABLE",
    "NodeLifecycle",
    "NodeLifecycleConfig",
    "cordon",
    "set_node_condition",
    "tolerates",
]

log = logging.getLogger(__name__)

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
# (condition type, status that taints) -> taint key, NoSchedule (TaintNodesByCondition).
CONDITION_TAINTS: dict[tuple[str, str], str] = {
    ("Ready", "False"): NOT_READY,
    ("Ready", "Unknown"): UNREACHABLE,
    ("MemoryPressure", "True"): "node.kubernetes.io/memory-pressure",
    ("DiskPressure", "True"): "node.kubernetes.io/disk-pressure",
    ("PIDPressure", "True"): "node.kubernetes.io/pid-pressure",
    ("NetworkUnavailable", "True"): "node.kubernetes.io/network-unavailable",
}
_OWNED = {*CONDITION_TAINTS.values(), UNSCHEDULABLE}


@dataclass(frozen=True)
class NodeLifecycleConfig:
    time_scale: float = 1.0  # multiplies every tolerationSeconds (and the eviction timing)


def tolerates(tolerations: list[Mapping[str, Any]], taint: Mapping[str, Any]) -> tuple[bool, float | None]:
    """(whether a pod's tolerations tolerate the taint, for how long: None = forever), as
    ``v1helper.TolerationsTolerateTaint`` and the eviction controller's minimum tolerationSeconds."""
    best: float | None = None
    found = False
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        operator = t.get("operator") or "Equal"
        if key and key != taint.get("key"):
            continue
        if not key and operator != "Exists":
            continue
        if operator == "Equal" and (t.get("value") or "") != (taint.get("value") or ""):
            continue
        seconds = t.get("tolerationSeconds")
        if seconds is None:
            return True, None  # tolerated forever by this one
        found = True
        best = float(seconds) if best is None else min(best, float(seconds))
    return found, best


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def _parse_time(value: str | None) -> datetime.datetime:
    if not value:
        return utcnow()
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


class NodeLifecycle:
    """Keeps condition taints on nodes and evicts pods from ``NoExecute``-tainted nodes."""

    def __init__(self, server: KubeApiServer, config: NodeLifecycleConfig | None = None) -> None:
        self.server = server
        self.config = config or NodeLifecycleConfig()
        self.evicted: list[tuple[str, str, str]] = []  # (namespace, pod, taint key) in eviction order
        self.errors: list[BaseException] = []
        self._timers: dict[str, asyncio.TimerHandle] = {}  # pod uid -> pending eviction

    async def run(self) -> None:
        while True:
            since = self.server.resource_version
            for node in self.server.list_objects(NODES):
                self._reconcile_node(node)
            try:
                async for event in self.server.events_after(since):
                    if event.rtype is NODES and event.type != "DELETED":
                        self._reconcile_node(event.obj)
                    elif event.rtype is PODS and event.type != "DELETED":
                        node_name = (event.obj.get("spec") or {}).get("nodeName")
                        node = self.server.peek(NODES, None, node_name) if node_name else None
                        if node is not None:
                            self._consider_pod(event.obj, node)
                return
            except ResourceVersionTooOld:
                continue

    def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    # --- taints from conditions -----------------------------------------------------------------

    def _wanted(self, node: Mapping[str, Any]) -> list[tuple[str, str]]:
        wanted: list[tuple[str, str]] = []
        if (node.get("spec") or {}).get("unschedulable"):
            wanted.append((UNSCHEDULABLE, "NoSchedule"))
        for cond in (node.get("status") or {}).get("conditions") or []:
            key = CONDITION_TAINTS.get((cond.get("type"), cond.get("status")))
            if key is None:
                continue
            wanted.append((key, "NoSchedule"))
            if key in (NOT_READY, UNREACHABLE):
                wanted.append((key, "NoExecute"))
        return wanted

    def _reconcile_node(self, node: Mapping[str, Any]) -> None:
        name = _meta(node)["name"]
        taints: list[dict[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
        wanted = self._wanted(node)
        have = {(t.get("key"), t.get("effect")) for t in taints if t.get("key") in _OWNED}
        kept = [t for t in taints if t.get("key") not in _OWNED or (t.get("key"), t.get("effect")) in wanted]
        now = format_time(utcnow())
        added = [{"key": k, "effect": e, "timeAdded": now} for k, e in wanted if (k, e) not in have]
        new_taints = kept + added
        if new_taints != taints:
            try:
                node = self.server.patch_object(NODES, None, name, {"spec": {"taints": new_taints}}, "merge")
            except ApiError as e:
                if e.code not in (404, 409):
                    self.errors.append(e)
                return  # the write's own event brings us back here
        ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        not_ready = ready is not None and ready.get("status") != "True"
        for pod in self.server.list_objects(PODS, field_selector=f"spec.nodeName={name}"):
            if not_ready:
                self._mark_not_ready(pod)
            self._consider_pod(pod, node)

    def _mark_not_ready(self, pod: Mapping[str, Any]) -> None:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        cond = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        if cond is not None and cond.get("status") == "False":
            return
        status = dict(pod.get("status") or {})
        holder = {"status": status}
        set_condition(holder, "Ready", "False", "NodeNotReady")
        with contextlib.suppress(ApiError):
            meta = _meta(pod)
            self.server.patch_object(
                PODS, meta["namespace"], meta["name"], {"status": holder["status"]}, "merge", subresource="status"
            )

    # --- taint-based eviction -------------------------------------------------------------------

    def _consider_pod(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> None:
        meta = _meta(pod)
        uid = meta.get("uid", "")
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self._cancel(uid)
            return
        tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
        deadline: datetime.datetime | None = None
        reason = ""
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("effect") != "NoExecute":
                continue
            ok, seconds = tolerates(tolerations, taint)
            if ok and seconds is None:
                continue
            when = (
                utcnow()
                if not ok
                else _parse_time(taint.get("timeAdded"))
                + datetime.timedelta(seconds=max(seconds or 0.0, 0.0) * self.config.time_scale)
            )
            if deadline is None or when < deadline:
                deadline, reason = when, str(taint.get("key"))
        if deadline is None:
            self._cancel(uid)
            return
        delay = max((deadline - utcnow()).total_seconds(), 0.0)
        self._cancel(uid)
        loop = asyncio.get_running_loop()
        self._timers[uid] = loop.call_later(delay, self._evict, meta["namespace"], meta["name"], uid, reason)

    def _cancel(self, uid: str) -> None:
        timer = self._timers.pop(uid, None)
        if timer is not None:
            timer.cancel()

    def _evict(self, namespace: str, name: str, uid: str, taint_key: str) -> None:
        self._timers.pop(uid, None)
        pod = self.server.peek(PODS, namespace, name)
        if pod is None or _meta(pod).get("uid") != uid or _meta(pod).get("deletionTimestamp"):
            return
        node = self.server.peek(NODES, None, (pod.get("spec") or {}).get("nodeName") or "")
        if node is None:
            return
        still = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == taint_key]
        if not any(t.get("effect") == "NoExecute" for t in still):
            return  # the taint went in time
        holder = {"status": dict(pod.get("status") or {})}
        set_condition(
            holder,
            "DisruptionTarget",
            "True",
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        )
        try:
            self.server.patch_object(PODS, namespace, name, {"status": holder["status"]}, "merge", subresource="status")
            self.server.delete_object(PODS, namespace, name, {"preconditions": {"uid": uid}})
        except ApiError as e:
            if e.code not in (404, 409):
                self.errors.append(e)
            return
        self.evicted.append((namespace, name, taint_key))
        log.info("taint eviction: pod %s/%s (%s)", namespace, name, taint_key)


# --- what people do to nodes (through the API, like kubectl and the kubelet) ------------------------


def cordon(core: Any, name: str, unschedulable: bool = True) -> Any:
    """``kubectl cordon`` (``uncordon`` with ``unschedulable=False``): ``spec.unschedulable``."""
    return core.patch_node(name, {"spec": {"unschedulable": unschedulable}})


def set_node_condition(core: Any, name: str, ctype: str, status: str, reason: str = "") -> Any:
    """Post a node condition as the kubelet (Ready, DiskPressure, ...) or the node controller
    (Ready=Unknown when the kubelet stops posting) does, through the status subresource."""
    node = core.api_client.sanitize_for_serialization(core.read_node(name))
    conditions = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") != ctype]
    now = format_time(utcnow())
    conditions.append(
        {"type": ctype, "status": status, "reason": reason or ctype, "message": reason or ctype,
         "lastHeartbeatTime": now, "lastTransitionTime": now}
    )  # fmt: skip
    return core.patch_node_status(name, {"status": {"conditions": conditions}})
