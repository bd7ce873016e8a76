"""A kubelet stand-in (KWOK-style stages) and GPU node helpers for :mod:`tests.support.k8s.apiserver`.

:class:`Kubelet` runs as an asyncio task on the API server's own event loop and talks to it
in-process (``KubeApiServer.replace_object`` / ``patch_object`` / ``delete_object`` and
``events_after``: the same code paths, validation and watch events as HTTP requests, without a
second client or thread). It follows every pod bound (``spec.nodeName``) to a Node object that
exists and is ``Ready`` (optionally only the nodes in ``KubeletConfig.nodes``):

1. **Pending → Running** after ``start_delay_s`` (annotation ``kwok.gpufleet.io/start-delay-s``):
   ``containerStatuses[*].state.running.startedAt``, ``ready``/``started``, conditions
   ``PodReadyToStartContainers``, ``Initialized``, ``ContainersReady``, ``Ready`` = True (and
   ``PodScheduled``, which the binding set), ``startTime``, ``hostIP``, ``podIP``.
2. **Running → Succeeded/Failed** after the duration (annotation ``kwok.gpufleet.io/duration-s``;
   default ``default_duration_s``; ``None`` runs until deleted) with the exit code of
   ``kwok.gpufleet.io/exit-code`` (default 0): ``state.terminated.{exitCode,reason,startedAt,
   finishedAt}``, ``Ready``/``ContainersReady`` = False. With ``restartPolicy`` Always (or OnFailure
   and a non-zero code) the container restarts instead (``restartCount`` + 1, ``lastState``), with
   no crash-loop back-off.
3. **Graceful deletion** (``metadata.deletionTimestamp``, from DELETE or the Eviction API): a running
   container "gets SIGTERM" — recorded in :attr:`Kubelet.signals` and, unless disabled, in the pod
   annotation ``kwok.gpufleet.io/sigterm-at`` — and exits after ``min(checkpoint, grace)`` seconds,
   where checkpoint is ``kwok.gpufleet.io/checkpoint-s`` or ``checkpoint_s``: with exit code
   ``kwok.gpufleet.io/sigterm-exit-code`` (default 143) if the checkpoint fits in the grace period,
   otherwise it is killed at the deadline (SIGKILL recorded, exit code 137). Then the kubelet writes
   the terminal status and deletes the pod with grace period 0 (the object goes away unless
   finalizers hold it). A shorter grace period or a force delete during the wait is honoured.

4. **Logs** (``pods/log``): each app container "prints" ``started on <node>`` when it starts, ``step N``
   every ``kwok.gpufleet.io/log-every-s`` seconds while it runs, ``received SIGTERM: checkpointing``
   on a graceful deletion and ``exit code N`` when it ends.

Node helpers: :func:`gpu_node` builds a Node with GPU Feature Discovery labels and ``nvidia.com/gpu``
(or MIG ``nvidia.com/mig-<profile>``) capacity; :func:`create_gpu_node` posts one through a
``CoreV1Api``; :func:`taint_disrupted` puts Karpenter's ``karpenter.sh/disrupted:NoSchedule`` taint
on a node, as Karpenter does on a spot interruption notice before draining it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.support.k8s.admission import admit
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
    "CHECKPOINT_ANNOTATION",
    "DISRUPTED_TAINT",
    "DURATION_ANNOTATION",
    "EXIT_CODE_ANNOTATION",
    "LOG_EVERY_ANNOTATION",
    "SIGTERM_AT_ANNOTATION",
    "SIGTERM_EXIT_CODE_ANNOTATION",
    "START_DELAY_ANNOTATION",
    "Kubelet",
    "KubeletConfig",
    "SignalRecord",
    "create_gpu_node",
    "gpu_node",
    "taint_disrupted",
]

log = logging.getLogger(__name__)

START_DELAY_ANNOTATION = "kwok.gpufleet.io/start-delay-s"
DURATION_ANNOTATION = "kwok.gpufleet.io/duration-s"
EXIT_CODE_ANNOTATION = "kwok.gpufleet.io/exit-code"
CHECKPOINT_ANNOTATION = "kwok.gpufleet.io/checkpoint-s"
SIGTERM_EXIT_CODE_ANNOTATION = "kwok.gpufleet.io/sigterm-exit-code"
SIGTERM_AT_ANNOTATION = "kwok.gpufleet.io/sigterm-at"
LOG_EVERY_ANNOTATION = "kwok.gpufleet.io/log-every-s"  # a container prints "step N" this often
DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


@dataclass(frozen=True)
class KubeletConfig:
    start_delay_s: float = 0.05  # Pending → Running once bound
    default_duration_s: float | None = None  # container run time without the duration annotation; None: forever
    checkpoint_s: float = 0.2  # how long a container takes to exit after SIGTERM
    annotate_sigterm: bool = True  # also record SIGTERM in the pod annotation kwok.gpufleet.io/sigterm-at
    nodes: frozenset[str] | None = None  # the nodes this kubelet runs; None: every Node object
    log_every_s: float | None = None  # containers print "step N" this often without the annotation; None: never
    admission: bool = True  # re-check resources, node affinity and NoExecute taints (tests/support/k8s/admission.py)


@dataclass(frozen=True)
class SignalRecord:
    """A signal the kubelet sent to a pod's containers."""

    namespace: str
    name: str
    uid: str
    node: str
    signal: str  # "SIGTERM" or "SIGKILL"
    at: datetime.datetime
    grace_period_s: int


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def _micro_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _annotation(pod: Mapping[str, Any], key: str, default: float | None) -> float | None:
    value = (_meta(pod).get("annotations") or {}).get(key)
    if value in (None, ""):
        return default
    try:
        return float(value)
    except ValueError:
        log.warning("pod %s: annotation %s=%r is not a number; using %r", _meta(pod).get("name"), key, value, default)
        return default


def _ip(seed: str, prefix: str) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return f"{prefix}.{digest[0]}.{max(digest[1], 1)}"


class Kubelet:
    """Runs the pods bound to the cluster's nodes through their lifecycle (see the module doc)."""

    def __init__(self, server: KubeApiServer, config: KubeletConfig | None = None) -> None:
        self.server = server
        self.config = config or KubeletConfig()
        self.signals: list[SignalRecord] = []
        self.errors: list[BaseException] = []
        self.rejected: list[tuple[str, str, str]] = []  # (namespace, pod, reason) the kubelet refused to run
        self.without: list[tuple[str, str, tuple[str, ...]]] = []  # pods started without a resource they asked for
        self.admitted: set[str] = set()  # uids of the pods this kubelet runs (their resources are in use)
        # the device plugin's devices (tests/support/k8s/deviceplugin.py): held now, by pod uid, and
        # every allocation made, (namespace, pod, node, resource -> device IDs) in order
        self.devices: dict[str, Mapping[str, tuple[str, ...]]] = {}
        self.allocations: list[tuple[str, str, str, Mapping[str, tuple[str, ...]]]] = []
        self._workers: dict[str, _PodWorker] = {}

    def sigterms(self, namespace: str | None = None, name: str | None = None) -> list[SignalRecord]:
        return [
            s for s in list(self.signals)
            if s.signal == "SIGTERM" and namespace in (None, s.namespace) and name in (None, s.name)
        ]  # fmt: skip

    async def run(self) -> None:
        """Follow the cluster until cancelled."""
        while True:
            since = self.server.resource_version
            for pod in self.server.list_objects(PODS):
                self._consider(pod)
            try:
                async for event in self.server.events_after(since):
                    if event.rtype is PODS:
                        worker = self._workers.get(_meta(event.obj).get("uid", ""))
                        if worker is not None:
                            worker.changed.set()
                        elif event.type != "DELETED":
                            self._consider(event.obj)
                    elif event.rtype is NODES and event.type != "DELETED":  # registered, or became Ready
                        node = _meta(event.obj)["name"]
                        for pod in self.server.list_objects(PODS, field_selector=f"spec.nodeName={node}"):
                            self._consider(pod)
                return  # the server closed its watches: it is shutting down
            except ResourceVersionTooOld:
                continue  # fell behind a compaction: re-list, like an informer

    def _manages(self, node_name: str | None) -> bool:
        """A node this kubelet runs: it exists and is Ready (a NotReady node's kubelet starts nothing)."""
        if not node_name or (self.config.nodes is not None and node_name not in self.config.nodes):
            return False
        node = self.server.peek(NODES, None, node_name)
        conditions = ((node or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def _consider(self, pod: dict[str, Any]) -> None:
        uid = _meta(pod).get("uid", "")
        if uid in self._workers or not self._manages((pod.get("spec") or {}).get("nodeName")):
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        worker = _PodWorker(self, _meta(pod)["namespace"], _meta(pod)["name"], uid)
        self._workers[uid] = worker
        worker.task = asyncio.create_task(self._run_worker(worker), name=f"kubelet:{worker.namespace}/{worker.name}")

    async def _run_worker(self, worker: _PodWorker) -> None:
        try:
            await worker.run()
        except ApiError as e:
            if e.code != 404:  # the pod vanished under us (force delete): nothing left to do
                self.errors.append(e)
                log.exception("kubelet: pod %s/%s failed", worker.namespace, worker.name)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.errors.append(e)
            log.exception("kubelet: pod %s/%s failed", worker.namespace, worker.name)
        finally:
            self._workers.pop(worker.uid, None)

    async def aclose(self) -> None:
        tasks = [w.task for w in self._workers.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _PodWorker:
    def __init__(self, kubelet: Kubelet, namespace: str, name: str, uid: str) -> None:
        self.kubelet = kubelet
        self.server = kubelet.server
        self.config = kubelet.config
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def current(self) -> dict[str, Any] | None:
        pod = self.server.peek(PODS, self.namespace, self.name)
        return pod if pod is not None and _meta(pod).get("uid") == self.uid else None

    async def _wait(self, seconds: float | None) -> bool:
        """Sleep up to ``seconds`` (None: forever); True as soon as the pod is being deleted or gone."""
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        while True:
            self.changed.clear()
            pod = self.current()
            if pod is None or _meta(pod).get("deletionTimestamp"):
                return True
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=remaining)

    def _print(self, pod: dict[str, Any], line: str) -> None:
        """What the pod's app containers write to their logs."""
        for container in (pod.get("spec") or {}).get("containers") or []:
            self.server.write_log(self.namespace, self.name, container.get("name", ""), line)

    async def _run_for(self, pod: dict[str, Any], seconds: float | None) -> bool:
        """Run ``seconds`` (None: forever), printing ``step N`` every ``log-every-s``; True when the
        pod is being deleted or gone meanwhile (as :meth:`_wait`)."""
        every = _annotation(pod, LOG_EVERY_ANNOTATION, self.config.log_every_s)
        if not every or every <= 0:
            return await self._wait(seconds)
        loop = asyncio.get_running_loop()
        end = None if seconds is None else loop.time() + seconds
        step = 0
        while True:
            chunk = every if end is None else min(every, end - loop.time())
            if await self._wait(max(0.0, chunk)):
                return True
            if end is not None and loop.time() >= end:
                return False
            step += 1
            self._print(pod, f"step {step}")

    def _write_status(self, status: dict[str, Any]) -> None:
        pod = self.current()
        if pod is None:
            return
        pod["status"] = status
        self.server.replace_object(PODS, self.namespace, self.name, pod, subresource="status")

    def _admit(self, pod: dict[str, Any]) -> bool:
        """The kubelet's admission (tests/support/k8s/admission.py): a refused pod fails at once."""
        if not self.config.admission:
            self.kubelet.admitted.add(self.uid)
            return True
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        node = self.server.peek(NODES, None, node_name) or {}
        others = [
            p for p in self.server.list_objects(PODS, field_selector=f"spec.nodeName={node_name}")
            if _meta(p).get("uid") in self.kubelet.admitted and _meta(p).get("uid") != self.uid
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]  # fmt: skip
        held = [self.kubelet.devices.get(_meta(p).get("uid", ""), {}) for p in others]
        used = [d for devs in held for ids in devs.values() for d in ids]
        verdict = admit(pod, node, others, used)
        if verdict.admit:
            self.kubelet.admitted.add(self.uid)
            self.kubelet.devices[self.uid] = verdict.devices
            if verdict.devices:
                self.kubelet.allocations.append((self.namespace, self.name, node_name, verdict.devices))
            if verdict.missing:
                self.kubelet.without.append((self.namespace, self.name, verdict.missing))
            return True
        self.kubelet.rejected.append((self.namespace, self.name, verdict.reason))
        status = dict(pod.get("status") or {})
        status.update({"phase": "Failed", "reason": verdict.reason, "message": f"Pod was rejected: {verdict.message}"})
        self._write_status(status)
        return False

    async def run(self) -> None:
        pod = self.current()
        if pod is None:
            return
        try:
            if self._admit(pod):
                await self._run_admitted()
        finally:
            self.kubelet.admitted.discard(self.uid)
            self.kubelet.devices.pop(self.uid, None)

    async def _run_admitted(self) -> None:
        pod = self.current()
        if pod is None:
            return
        if await self._wait(_annotation(pod, START_DELAY_ANNOTATION, self.config.start_delay_s)):
            await self._terminate(started_at=None)
            return
        started_at = utcnow()
        self._write_status(self._running_status(started_at, restart_count=0, last_state=None))
        restarts = 0
        while True:
            pod = self.current()
            if pod is None:
                return
            node = (pod.get("spec") or {}).get("nodeName") or ""
            self._print(pod, f"started on {node}")
            duration = _annotation(pod, DURATION_ANNOTATION, self.config.default_duration_s)
            if await self._run_for(pod, duration):
                await self._terminate(started_at=started_at)
                return
            exit_code = int(_annotation(pod, EXIT_CODE_ANNOTATION, 0) or 0)
            self._print(pod, f"exit code {exit_code}")
            policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
            finished_at = utcnow()
            terminated = self._terminated_state(exit_code, started_at, finished_at)
            if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
                restarts += 1
                started_at = utcnow()
                self._write_status(self._running_status(started_at, restart_count=restarts, last_state=terminated))
                continue
            self._write_status(self._terminal_status(exit_code, terminated))
            return

    async def _terminate(self, started_at: datetime.datetime | None) -> None:
        """Graceful termination: SIGTERM, wait for the checkpoint or the grace period, exit, delete."""
        pod = self.current()
        if pod is None:
            return
        loop = asyncio.get_running_loop()
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if started_at is not None:
            grace = int(_meta(pod).get("deletionGracePeriodSeconds") or 0)
            sent = utcnow()
            self._record("SIGTERM", sent, grace, node)
            if self.config.annotate_sigterm:
                self.server.patch_object(
                    PODS,
                    self.namespace,
                    self.name,
                    {"metadata": {"annotations": {SIGTERM_AT_ANNOTATION: _micro_time(sent)}}},
                )
            self._print(pod, "received SIGTERM: checkpointing")
            checkpoint = _annotation(pod, CHECKPOINT_ANNOTATION, self.config.checkpoint_s) or 0.0
            begun = loop.time()
            while True:  # re-read the grace period: a second DELETE may shorten it
                self.changed.clear()
                pod = self.current()
                if pod is None:
                    return  # force-deleted meanwhile
                grace = int(_meta(pod).get("deletionGracePeriodSeconds") or 0)
                remaining = begun + min(checkpoint, grace) - loop.time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), timeout=remaining)
            if checkpoint > grace:
                self._record("SIGKILL", utcnow(), grace, node)
                exit_code = 137
            else:
                exit_code = int(_annotation(pod, SIGTERM_EXIT_CODE_ANNOTATION, 143) or 0)
            terminated = self._terminated_state(exit_code, started_at, utcnow())
            if pod_now := self.current():
                self._print(pod_now, f"exit code {exit_code}")
            self._write_status(self._terminal_status(exit_code, terminated))
        if self.current() is not None:
            self.server.delete_object(
                PODS, self.namespace, self.name, {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
            )

    def _record(self, signal: str, at: datetime.datetime, grace: int, node: str) -> None:
        self.kubelet.signals.append(SignalRecord(self.namespace, self.name, self.uid, node, signal, at, grace))

    # --- status documents ----------------------------------------------------------------------

    def _node_ip(self, node_name: str) -> str:
        node = self.server.peek(NODES, None, node_name) or {}
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address["address"])
        return _ip(node_name, "10.0")

    def _container_id(self, container: str, restart: int) -> str:
        return f"containerd://{hashlib.sha256(f'{self.uid}/{container}/{restart}'.encode()).hexdigest()}"

    def _running_status(
        self, started_at: datetime.datetime, *, restart_count: int, last_state: dict[str, Any] | None
    ) -> dict[str, Any]:
        pod = self.current() or {}
        status = copy.deepcopy(pod.get("status") or {})
        spec = pod.get("spec") or {}
        node_ip = self._node_ip(spec.get("nodeName") or "")
        pod_ip = _ip(self.uid, "10.244")
        status.update(
            phase="Running",
            hostIP=node_ip,
            hostIPs=[{"ip": node_ip}],
            podIP=pod_ip,
            podIPs=[{"ip": pod_ip}],
            startTime=status.get("startTime") or format_time(started_at),
        )
        holder = {"status": status}
        for ctype in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"):
            set_condition(holder, ctype, "True")
        if spec.get("initContainers"):  # init containers ran to completion, instantly
            completed = self._terminated_state(0, started_at, started_at)
            status["initContainerStatuses"] = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": f"{c.get('image', '')}@sha256:{'0' * 64}",
                    "containerID": self._container_id(c["name"], 0),
                    "ready": True,
                    "started": False,
                    "restartCount": 0,
                    "state": {"terminated": {**completed, "containerID": self._container_id(c["name"], 0)}},
                }
                for c in spec["initContainers"]
            ]
        status["containerStatuses"] = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": f"{c.get('image', '')}@sha256:{'0' * 64}",
                "containerID": self._container_id(c["name"], restart_count),
                "ready": True,
                "started": True,
                "restartCount": restart_count,
                "state": {"running": {"startedAt": format_time(started_at)}},
                "lastState": {"terminated": last_state} if last_state else {},
            }
            for c in spec.get("containers") or []
        ]
        return status

    def _terminated_state(
        self, exit_code: int, started_at: datetime.datetime | None, finished_at: datetime.datetime
    ) -> dict[str, Any]:
        return {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": format_time(started_at or finished_at),
            "finishedAt": format_time(finished_at),
        }

    def _terminal_status(self, exit_code: int, terminated: dict[str, Any]) -> dict[str, Any]:
        pod = self.current() or {}
        status = copy.deepcopy(pod.get("status") or {})
        status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        reason = "PodCompleted" if exit_code == 0 else "PodFailed"
        holder = {"status": status}
        set_condition(holder, "Ready", "False", reason)
        set_condition(holder, "ContainersReady", "False", reason)
        set_condition(holder, "PodReadyToStartContainers", "False")
        statuses = status.get("containerStatuses") or [
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "restartCount": 0}
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        for container in statuses:
            restart = int(container.get("restartCount", 0))
            container.update(
                ready=False,
                started=False,
                state={"terminated": {**terminated, "containerID": self._container_id(container["name"], restart)}},
            )
            container.setdefault("lastState", {})
        status["containerStatuses"] = statuses
        return status


# --- nodes ----------------------------------------------------------------------------------------


def gpu_node(
    name: str,
    *,
    product: str = "NVIDIA-A100-SXM4-80GB",
    gpu_count: int = 8,
    gpu_memory_mib: int = 81920,
    replicas: int = 1,
    sharing_strategy: str = "time-slicing",
    mig: Mapping[str, int] | None = None,
    capacity_type: str = "on-demand",
    instance_type: str = "p4de.24xlarge",
    region: str = "us-east-1",
    zone: str | None = None,
    nodepool: str | None = None,
    cpu: str = "96",
    memory: str = "1152Gi",
    labels: Mapping[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    ready: bool = True,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as GPU Feature Discovery, the NVIDIA device plugin and Karpenter would label it.

    ``replicas`` > 1 is time-slicing, or MPS with ``sharing_strategy="mps"`` (``nvidia.com/gpu`` =
    count × replicas; the device plugin's allocation: :mod:`tests.support.k8s.deviceplugin`, which
    also reads ``annotations``); ``mig`` maps MIG
    profiles (``"1g.10gb"``) to instance counts under the mixed strategy (``nvidia.com/mig-1g.10gb``
    resources instead of ``nvidia.com/gpu``).
    """
    node_labels: dict[str, str] = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone or f"{region}a",
        "karpenter.sh/capacity-type": capacity_type,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(gpu_memory_mib),
        "nvidia.com/gpu.count": str(gpu_count),
        "nvidia.com/gpu.replicas": str(replicas),
    }
    if nodepool:
        node_labels["karpenter.sh/nodepool"] = nodepool
        node_labels["karpenter.sh/registered"] = "true"
    if replicas > 1:
        node_labels["nvidia.com/gpu.sharing-strategy"] = sharing_strategy
    capacity: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "500Gi"}
    if mig:
        node_labels["nvidia.com/mig.strategy"] = "mixed"
        for profile, count in mig.items():
            node_labels[f"nvidia.com/mig-{profile}.count"] = str(count)
            capacity[f"nvidia.com/mig-{profile}"] = str(count)
    else:
        capacity["nvidia.com/gpu"] = str(gpu_count * replicas)
    node_labels.update(labels or {})
    now = format_time(utcnow())
    conditions = [
        {
            "type": ctype,
            "status": "False",
            "reason": f"KubeletHas{reason}",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for ctype, reason in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            **({"annotations": dict(annotations)} if annotations else {}),
        },
        "spec": {"providerID": f"kwok://{region}/{name}"},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": _ip(name, "10.0")}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "",
                "containerRuntimeVersion": "containerd://1.7.0",
                "kernelVersion": "6.1.0",
                "kubeProxyVersion": "v1.29.0",
                "kubeletVersion": "v1.29.0-kwok",
                "machineID": "",
                "operatingSystem": "linux",
                "osImage": "gpufleet kwok",
                "systemUUID": "",
            },
        },
    }
    if taints:
        node["spec"]["taints"] = list(taints)
    return node


def create_gpu_node(core: Any, name: str, **options: Any) -> Any:
    """POST :func:`gpu_node` through a ``kubernetes.client.CoreV1Api``; returns the created V1Node."""
    return core.create_node(gpu_node(name, **options))


def taint_disrupted(core: Any, node_name: str) -> Any:
    """Karpenter's spot-interruption move: taint the node ``karpenter.sh/disrupted:NoSchedule``.

    Read-modify-write with the node's resourceVersion as a precondition (409 if it changed), as a
    controller does; idempotent. Returns the updated V1Node.
    """
    node = core.read_node(node_name)
    taints = [core.api_client.sanitize_for_serialization(t) for t in (node.spec.taints or [])]
    if not any(t.get("key") == DISRUPTED_TAINT["key"] and t.get("effect") == DISRUPTED_TAINT["effect"] for t in taints):
        taints.append({**DISRUPTED_TAINT, "timeAdded": format_time(utcnow())})
    patch = {"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"taints": taints}}
    return core.patch_node(node_name, patch)
