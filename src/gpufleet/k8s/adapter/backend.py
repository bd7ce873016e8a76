"""The Kubernetes backend: gpufleet's world loop driving a cluster through its API server.

What it does with the contract's verbs (:mod:`gpufleet.backends.base`):

- :meth:`inventory` — the cluster's nodes as gpufleet nodes (GPU Feature Discovery labels, MIG and
  time-slicing resources, capacity type, price: :mod:`.nodes`);
- :meth:`launch` — creates the run's ``batch/v1`` Job in the team's namespace (:func:`.objects.batch_job`:
  ``schedulerName: gpufleet``, attribution labels, PriorityClass, a ``podFailurePolicy`` that
  ignores disruptions). The Job controller creates its pods; :meth:`poll` binds each one to the node
  the placement chose through the ``pods/binding`` subresource (pod ``i`` of a gang to placement
  ``i``; a gang is bound all together, once all its pods exist);
- :meth:`poll` — reports ended runs from their pods (container start and end times as the kubelet
  recorded them, so the ledger meters the container's own run time), node changes (added, removed,
  spot notices from the disruption taints) as ``NODE_*`` events, and binds waiting pods;
- :meth:`stop` — deletes the run's Job (its pods orphaned, so the Job controller cannot replace one),
  then evicts the pods through the Eviction API with the job's grace (SIGTERM → checkpoint → SIGKILL
  by the kubelet); the run ends ``STOPPED`` when its pods are gone;
- :meth:`recover` — finds a run by its Job after a restart (adopts running pods).

Reads come from informers (:mod:`.informer`): nodes and gpufleet's pods are listed once, then
watched; the loop reads the caches, and the API server is called to write (and to read one pod
back after a conflict). A failed list or watch is retried with back-off and never empties a cache;
until a cache has listed once, nothing is decided from it (no node is reported removed, no run
ended). A pod gpufleet bound is *assumed* bound until the watch shows it (kube-scheduler's assume
cache), so a binding is never taken back for a stale view. Writes send plain dicts. Everything goes
through the official ``kubernetes`` client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpufleet.backends.base import (
    BackendEvent,
    Capabilities,
    Capability,
    EventKind,
    GpuSample,
    LaunchRequest,
    Recovered,
    RecoveredState,
    RunHandle,
)
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.errors import BackendError, GpufleetError
from gpufleet.k8s.adapter.api import call_json, with_deadline
from gpufleet.k8s.adapter.dcgm import split_time_sliced_memory
from gpufleet.k8s.adapter.dcgm_scrape import DcgmScraper
from gpufleet.k8s.adapter.fence import Fenced
from gpufleet.k8s.adapter.informer import Informer, wait_filled
from gpufleet.k8s.adapter.nodes import node_info, unschedulable_reason
from gpufleet.k8s.adapter.objects import batch_job, binding, eviction, job_name
from gpufleet.k8s.adapter.pods import PodFacts, pod_facts
from gpufleet.k8s.adapter.runs import Run, run_end
from gpufleet.k8s.adapter.waiting import pod_condition_for
from gpufleet.k8s.vocabulary import (
    ANNOTATION_KARPENTER_DO_NOT_DISRUPT,
    ANNOTATION_MAX_RUNTIME,
    KEY_JOB_ID,
    KEY_RUN,
    LABEL_ADOPTED_OWNER,
    LABEL_GPU_COUNT,
)
from gpufleet.model.gpu import gpu_model, split_mig_attribute
from gpufleet.model.job import GpuRequest
from gpufleet.model.node import Node, NodePool
from gpufleet.model.share import replicas_gpus
from gpufleet.scheduling.framework import Status

if TYPE_CHECKING:
    from gpufleet.k8s.adapter.provisioner import KarpenterProvisioner

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "python:3.11-slim"
# how long an adopted run waits for its controller's replacement pods before it fails
ADOPTED_PODS_WAIT_S = 60.0
# how long a run's Job may have no pod at all, unbound, before the run is lost (and requeued)
RUN_WITHOUT_PODS_S = 60.0
# why a run a new leader found before its pods were bound is stopped (see recover)
GIVEN_UP = "given up by a new leader: found before its pods were bound"


@dataclass(frozen=True, slots=True)
class KubernetesOptions:
    """How gpufleet maps its world onto the cluster."""

    namespace_of_team: Mapping[str, str] = field(default_factory=dict)  # team → namespace (default: the team)
    default_image: str = DEFAULT_IMAGE
    checkpoint_volume: Mapping[str, Any] | None = None  # a pod volume (e.g. a PVC) holding checkpoints
    # DCGM exporter endpoints scraped for GPU utilization and memory per pod (Prometheus text)
    dcgm_urls: tuple[str, ...] = ()
    now: Callable[[], float] = time.time
    # how long inventory()/recover() wait for the informers' first list before giving up (an error
    # the loop retries: nothing is decided from an empty cache)
    sync_timeout_s: float = 30.0
    # an ended run's Job and pods are kept this long after the poll that reported its end (its logs:
    # ``gpufleet logs``, ``kubectl logs``), then deleted: the ledger has the end, and finished Jobs
    # must not pile up in the cluster and in every watch cache
    keep_finished_s: float = 600.0
    keep_failed_s: float = 3600.0  # a run that failed or timed out: longer, for its post-mortem

    def namespace(self, team: str) -> str:
        return self.namespace_of_team.get(team, team)


def _retry_after(e: Exception) -> float:
    """Seconds a refusal asks to wait (``Retry-After``, or the Status' ``details.retryAfterSeconds``)."""
    headers = getattr(e, "headers", None) or {}
    try:
        return float(headers.get("Retry-After") or 0)
    except (TypeError, ValueError):
        return 0.0


def _status_message(e: Exception) -> str:
    import json

    try:
        return str(json.loads(getattr(e, "body", "") or "{}").get("message") or getattr(e, "reason", ""))
    except ValueError:
        return str(getattr(e, "reason", ""))


def _pod_or_none(obj: dict[str, Any]) -> PodFacts | None:
    return pod_facts(obj)


def _unbound(pod: PodFacts) -> bool:
    """Waiting to be bound: no node yet, not ended, not going."""
    return pod.node is None and not pod.terminal and pod.deletion_timestamp is None


def _job_of(pod: PodFacts) -> str | None:
    return pod.job_id


def _foreign_gpu_pod(obj: dict[str, Any]) -> PodFacts | None:
    """Another scheduler's pod that holds GPUs on a node (what :meth:`foreign_usage` counts); None
    for the rest, so the cache keeps only those."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(KEY_JOB_ID) or not (obj.get("spec") or {}).get("nodeName"):
        return None
    pod = pod_facts(obj)
    return pod if pod.gpu_count and not pod.terminal and pod.node is not None else None


def _gpus_not_advertised(obj: Mapping[str, Any], node: Node) -> bool:
    """GPU Feature Discovery labelled GPUs the device plugin has not advertised yet (the GPU
    Operator's usual order: the node is Ready first): no GPU pod can be admitted there yet."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    try:
        labelled = int(labels.get(LABEL_GPU_COUNT) or 0)
    except ValueError:
        return False
    return labelled > 0 and node.gpu_count == 0


def _deadline(pods: Sequence[PodFacts]) -> tuple[float | None, float | None]:
    """A recovered run's max runtime (its pods' annotation: the Job's activeDeadlineSeconds) and when
    it started running (the first pod's creation: the Job's start, within its first sync)."""
    raw = next(
        (p.annotations.get(ANNOTATION_MAX_RUNTIME) for p in pods if p.annotations.get(ANNOTATION_MAX_RUNTIME)), None
    )
    try:
        limit = float(raw) if raw is not None else None
    except ValueError:
        return None, None  # not one gpufleet wrote: no deadline known
    created = [p.created_at for p in pods if p.created_at is not None]
    return limit, (min(created) if created else None)


def _mig_profile(node: Node | None, mask: int, milli: int, job_id: str) -> str:
    """The MIG profile a placement's slice mask denotes on the node's GPU model (``milli`` tells
    apart profiles of equal memory), as the local backend reads it."""
    model = gpu_model(node.gpu_model) if node is not None and node.gpu_model else None
    candidates = [p for p in model.mig_profiles if mask in p.masks()] if model is not None else []
    if not candidates:
        where = f"a {node.gpu_model}" if node is not None else "an unknown node"
        raise BackendError(f"job {job_id}: MIG slice mask {mask:#04x} is not a valid placement on {where}")
    name = next((p for p in candidates if p.milli == milli), candidates[0]).name
    advertised = {profile for profile, _ in node.gpu_facts.mig_profiles} if node is not None else set()
    if advertised and name not in advertised:
        # the node's slices of this geometry may carry a media extension (the device plugin's
        # ``1g.10gb.me``): ask for the resource the node has
        media = [p for p in sorted(advertised) if split_mig_attribute(p)[0] == name]
        if media:
            return media[0]
    return name


class KubernetesBackend:
    name = "kubernetes"

    def __init__(
        self,
        api_client: Any,
        catalog: PriceCatalog | None = None,
        options: KubernetesOptions | None = None,
        *,
        provisioner: KarpenterProvisioner | None = None,  # node provisioning through Karpenter NodeClaims
        fence: Fenced | None = None,  # writes only while leadership is sure (default: never refused)
    ) -> None:
        from kubernetes import client

        if not hasattr(api_client.rest_client, "gpufleet_deadline"):
            with_deadline(api_client)  # every call with a deadline (a silent API server is an error)
        self.api_client = api_client
        # typed Any: bodies are sent as the plain dicts of :mod:`.objects`, which the client serializes
        self.core: Any = client.CoreV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)
        self.catalog = catalog
        self.options = options or KubernetesOptions()
        # every write asks the fence for its deadline: a leader that cannot renew its Lease stops
        # writing before another replica can take the Lease over (:mod:`.fence`)
        self.fence = fence or Fenced()
        self._runs: dict[tuple[str, int], Run] = {}
        self._nodes: dict[str, Node] = {}
        self._dcgm: DcgmScraper | None = None  # made on the first telemetry() (its urls can change)
        self._notified: set[str] = set()  # nodes whose spot notice was reported
        self._cordoned: dict[str, str] = {}  # nodes that take no new work (reported NODE_CORDONED) -> why
        self.provisioner = provisioner
        # the caches the loop reads (started by the first inventory()/poll(); stopped by close())
        self.pod_cache: Informer[PodFacts] = Informer(
            "gpufleet pods",
            self.core.list_pod_for_all_namespaces,
            _pod_or_none,
            label_selector=KEY_JOB_ID,
            index=_job_of,
        )
        self.node_cache: Informer[dict[str, Any]] = Informer("nodes", self.core.list_node, lambda obj: obj)
        self.foreign_cache: Informer[PodFacts] = Informer(
            "others' GPU pods",
            self.core.list_pod_for_all_namespaces,
            _foreign_gpu_pod,
            label_selector=f"!{KEY_JOB_ID}",
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )
        self._nodes_seen = -1  # node_cache.version when node events were last worked out
        # ended runs whose Job is deleted at the next poll, once the loop has stored their end
        self._finished: list[tuple[float, Run]] = []  # (monotonic time due, run)
        self.capabilities = Capabilities(
            frozenset(
                {
                    Capability.FRACTIONAL,
                    Capability.MIG,
                    Capability.SPOT,
                    Capability.PREEMPTION,
                    Capability.MULTI_NODE,
                    Capability.RESOURCE_LIMITS,
                    Capability.DEVICE_ISOLATION,
                }
                | ({Capability.AUTOSCALING} if provisioner is not None else set())
            ),
            {
                **(
                    {Capability.AUTOSCALING: "no Karpenter provisioner configured (kubernetes.karpenter)"}
                    if provisioner is None
                    else {}
                ),
                Capability.RUN_AS: "pods run as their image's user (the namespace's security policies apply)",
            },
        )

    # -- reading -----------------------------------------------------------------------------------
    def _json(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        return call_json(getattr(call, "__name__", "calling the API"), call, *args, **kwargs)

    def _node_objects(self) -> list[dict[str, Any]]:
        wait_filled([self.node_cache], self.options.sync_timeout_s, "reading the nodes")
        return self.node_cache.items()

    def _pods(self) -> list[PodFacts]:
        """gpufleet's pods, from the cache (waiting for its first list if need be)."""
        wait_filled([self.pod_cache], self.options.sync_timeout_s, "reading gpufleet's pods")
        return self.pod_cache.items()

    def _node_info(self, obj: dict[str, Any]) -> Any:
        try:
            return node_info(obj, self.catalog)
        except GpufleetError as e:  # one bad node must not stop the loop
            log.warning("ignoring a node gpufleet cannot read: %s", e)
            return None

    # -- the contract ------------------------------------------------------------------------------
    def inventory(self) -> list[Node]:
        self.pod_cache.start()  # listing while the nodes are read
        nodes = []
        for obj in self._node_objects():
            info = self._node_info(obj)
            if info is None or _gpus_not_advertised(obj, info.node):
                continue
            # a node that takes no work now (cordoned, tainted NoSchedule, NotReady) is in it too: the
            # runs there go on (recovery would take them for lost), and the first poll says it takes
            # no work (NODE_CORDONED) before any cycle places by it
            nodes.append(info.node)
        self._nodes = {n.name: n for n in nodes}
        self._cordoned = {}
        self._nodes_seen = -1
        return nodes

    def launch(self, req: LaunchRequest) -> RunHandle:
        key = (req.job_id, req.run)
        existing = self._runs.get(key)
        if existing is not None:
            return self._handle(existing)
        if not req.placement:
            raise BackendError(f"job {req.job_id} run {req.run}: no placement")
        if LABEL_ADOPTED_OWNER in req.labels:
            return self._launch_adopted(req)

        ns = self.options.namespace(req.team)
        first = req.placement[0]
        node = self._nodes.get(first.node)
        gpu = GpuRequest(len(first.gpus), first.milli) if first.gpus else GpuRequest()
        if first.gpus and first.mig_mask:  # a MIG slice: its profile, from the slice's mask on the node's model
            gpu = GpuRequest(1, first.milli, _mig_profile(node, first.mig_mask, first.milli, req.job_id))
        replicas = node.gpu_facts.replicas if node else 1
        resource = node.gpu_facts.resource if node else None
        image = req.image or self.options.default_image
        body = batch_job(
            req.job_id,
            req.run,
            namespace=ns,
            image=image,
            command=list(req.command),
            env=dict(req.env),
            working_dir=req.cwd,
            gpu=gpu,
            gpu_resource=resource,
            gpu_replicas=replicas,
            cpu_milli=req.cpu_milli,
            memory_mib=req.memory_mib,
            team=req.team,
            checkpoint_dir=req.checkpoint_dir,
            checkpoint_volume=self.options.checkpoint_volume,
            grace_s=req.grace_s,
            max_runtime_s=req.max_runtime_s,
            gang_size=len(req.placement),
            constraints=req.constraints,
        )
        name = str(body["metadata"]["name"])
        run = Run(req.job_id, req.run, ns, name, tuple(p.node for p in req.placement), self.options.now())
        run.create_body = body
        deadline = body["spec"].get("activeDeadlineSeconds")
        run.max_runtime_s = float(deadline) if deadline is not None else None
        self._create(run, first=True)  # a refusal for good raises; a transient one is retried by poll()
        self._runs[key] = run
        return self._handle(run)

    def _create(self, r: Run, *, first: bool = False) -> None:
        """Create the run's Job. A 409 is a Job that exists (a launch replayed after a crash, or an
        earlier attempt whose answer was lost): ours. A 5xx, a 429, a timeout or a closed write
        window is tried again at a later poll, after a back-off honouring ``Retry-After`` (the run
        waits; its pods come once the Job exists); any other refusal (400, 403, 422: the Job is
        wrong or not allowed) raises on the first attempt and ends the run at a later one."""
        from kubernetes.client.exceptions import ApiException

        body = r.create_body
        if body is None or (not first and time.monotonic() < r.retry_at):
            return
        what = f"creating Job {r.namespace}/{r.job}"
        try:
            self.batch.create_namespaced_job(
                r.namespace, body, _preload_content=False, _request_timeout=self.fence.check(what)
            )
        except ApiException as e:
            if e.status != 409:
                if e.status in (429, 500, 502, 503, 504):
                    log.warning("%s: %s %s (retrying)", what, e.status, e.reason)
                    self._back_off(r, _retry_after(e))
                    return
                message = f"{what}: {e.status} {e.reason}: {(e.body or '')[:300]}"
                if first:
                    raise BackendError(message) from None
                r.create_failed = message
                return
        except Exception as e:  # a timeout (it may have been created: the next attempt's 409 says so)
            log.warning("%s: %s (retrying)", what, e)
            self._back_off(r, 0.0)
            return
        r.create_body = None
        r.backoff_s = 0.0

    def _launch_adopted(self, req: LaunchRequest) -> RunHandle:
        """A job adopted from pods someone else created (:mod:`gpufleet.k8s.adopt`): no Job
        is created; its waiting pods are marked as this run and bound by :meth:`poll` once the gang
        is complete (after a stop, its own controller may still be making the pods again)."""
        wait_filled([self.pod_cache], self.options.sync_timeout_s, "reading gpufleet's pods")
        pods = self.pod_cache.by_index(req.job_id)
        owner = req.labels[LABEL_ADOPTED_OWNER]  # namespace/Kind/name
        namespace = pods[0].namespace if pods else owner.split("/", 1)[0]
        if not namespace:
            raise BackendError(f"job {req.job_id} ({owner}) has no pod left to run")
        run = Run(req.job_id, req.run, namespace, "", tuple(p.node for p in req.placement), self.options.now())
        if not any(not p.terminal and p.deletion_timestamp is None for p in pods):
            # its controller replaces a failed or deleted pod only once that pod is gone or has
            # failed (podReplacementPolicy Failed): the run waits a while for the replacement (its
            # pods join by the job id the adopter gave them) rather than failing the job
            run.pods_due = time.monotonic() + ADOPTED_PODS_WAIT_S
        self._runs[(req.job_id, req.run)] = run
        self._claim(run, pods)
        return self._handle(run)

    def _claim(self, r: Run, pods: list[PodFacts]) -> None:
        """Mark an adopted job's waiting pods as run ``r`` (then :meth:`_run_pods` finds them)."""
        from kubernetes.client.exceptions import ApiException

        for pod in pods:
            if (
                pod.job_id != r.job_id
                or pod.run == r.run
                or pod.node is not None
                or pod.terminal
                or pod.deletion_timestamp is not None
            ):
                continue
            marks = {KEY_RUN: str(r.run)}
            if ANNOTATION_KARPENTER_DO_NOT_DISRUPT not in pod.annotations:
                # as gpufleet's own pods (objects.batch_job): Karpenter's consolidation never takes
                # the node from under the run; a value its owner set (a duration, "false") stays
                marks[ANNOTATION_KARPENTER_DO_NOT_DISRUPT] = "true"
            try:
                self.core.patch_namespaced_pod(
                    pod.name,
                    pod.namespace,
                    {"metadata": {"annotations": marks}},
                    _preload_content=False,
                    _request_timeout=self.fence.check(f"marking pod {pod.key}"),
                )
            except ApiException as e:
                if e.status != 404:
                    log.warning("marking pod %s as run %d: %s %s", pod.key, r.run, e.status, e.reason)
            except Exception as e:  # a timeout, a closed write window: marked again at the next poll
                log.warning("marking pod %s as run %d: %s", pod.key, r.run, e)

    def _handle(self, run: Run) -> RunHandle:
        return RunHandle(run.job_id, run.run, 0, run.started_at, f"k8s://{run.namespace}/job/{run.job}")

    def stop(self, job_id: str, run: int, reason: str, grace_s: float = 30.0) -> None:
        """Ask the run to stop. Idempotent until its pods are gone: a call while it is stopping tries
        again at once (the loop asks again after an error); :meth:`poll` drives it in between."""
        r = self._runs.get((job_id, run))
        if r is None:
            return
        if r.stopping is None:
            r.stopping = reason or "stopped"
            r.grace_s = grace_s
        self._drive_stop(r, None, force=True)

    def stop_blocked(self, job_id: str, run: int) -> str | None:
        """Why a stopping run still runs (an eviction a PodDisruptionBudget refuses), else None."""
        r = self._runs.get((job_id, run))
        return r.blocked if r is not None else None

    def _drive_stop(self, r: Run, pods: list[PodFacts] | None, *, force: bool = False) -> None:
        """One attempt at stopping ``r``: delete its Job (orphaning the pods, so its controller
        cannot replace a pod evicted below), then evict each bound pod with the run's grace (delete an
        unbound one). A 5xx, a timeout or a 429 (a PodDisruptionBudget, API Priority and Fairness) is
        tried again after a back-off that honours ``Retry-After``; a pod already terminating is left
        to end."""
        from kubernetes.client.exceptions import ApiException

        if not force and time.monotonic() < r.retry_at:
            return
        try:
            if r.job and not r.job_deleted:  # (adopted pods: their own controller decides about replacements)
                self._delete_run_job(r, "Orphan")
                r.job_deleted = True
            blocked: str | None = None
            retry_after = 0.0
            for pod in self._run_pods(r, pods):
                if pod.terminal or pod.deletion_timestamp is not None:
                    continue
                try:
                    if pod.node is None:  # never bound: nothing runs, delete it outright
                        self.core.delete_namespaced_pod(
                            pod.name,
                            pod.namespace,
                            grace_period_seconds=0,
                            _request_timeout=self.fence.check(f"deleting pod {pod.key}"),
                        )
                    else:
                        self.core.create_namespaced_pod_eviction(
                            pod.name,
                            pod.namespace,
                            eviction(pod.namespace, pod.name, r.grace_s),
                            _preload_content=False,
                            _request_timeout=self.fence.check(f"evicting pod {pod.key}"),
                        )
                except ApiException as e:
                    if e.status == 404:
                        continue
                    if e.status != 429:
                        raise
                    blocked = f"the eviction of pod {pod.key} was refused (429: {_status_message(e)}); retrying"
                    retry_after = max(retry_after, _retry_after(e))
            r.blocked = blocked
            if blocked is not None:
                log.warning("stopping %s run %d: %s", r.job_id, r.run, blocked)
                self._back_off(r, retry_after)
            else:
                r.backoff_s = 0.0
        except Exception as e:  # a 5xx, a timeout, a refused connection: tried again after a back-off
            status = getattr(e, "status", None)
            log.warning("stopping %s run %d: %s (retrying)", r.job_id, r.run, f"{status} {getattr(e, 'reason', e)}")
            self._back_off(r, _retry_after(e) if isinstance(e, ApiException) else 0.0)

    @staticmethod
    def _back_off(r: Run, retry_after: float) -> None:
        """The run's next write attempt (a stop, its Job's creation) waits: 0.5 s doubling to 10 s,
        or what ``Retry-After`` asks if longer."""
        r.backoff_s = min(max(r.backoff_s * 2, 0.5), 10.0)
        r.retry_at = time.monotonic() + max(r.backoff_s, retry_after)

    def _run_pods(self, r: Run, pods: list[PodFacts] | None = None) -> list[PodFacts]:
        """The run's pods as the cache has them, with the bindings we made and it has not shown yet."""
        pods = self.pod_cache.by_index(r.job_id) if pods is None else pods
        mine = []
        for p in pods:
            if p.job_id != r.job_id or p.run != r.run or p.namespace != r.namespace:
                continue
            if p.node is not None:
                r.assumed.pop(p.name, None)
            elif p.name in r.assumed and not p.terminal and p.deletion_timestamp is None:
                p = replace(p, node=r.assumed[p.name])
            mine.append(p)
        return sorted(mine, key=lambda p: (p.completion_index if p.completion_index is not None else 0, p.name))

    def poll(self) -> list[BackendEvent]:
        """Node changes and ended runs, from the caches: only runs whose pods changed since the last
        poll, that are being stopped or bound, or whose node went are looked at (a steady cluster
        costs next to nothing). Until the pod cache has listed once, no run is judged."""
        self.node_cache.start()
        self.pod_cache.start()
        self._clean_finished()
        node_events = self._node_events()
        if self.provisioner is not None:  # claims that will not join under their own name
            node_events += self.provisioner.events(set(self._nodes), self.options.now())
        if not self.pod_cache.synced():
            return node_events
        changed = self.pod_cache.drain_changed()
        if not self._runs:
            return node_events
        # a run placed on a node that is gone is lost (the loop requeues it) unless it ended first
        gone = {e.node for e in node_events if e.kind is EventKind.NODE_REMOVED and e.node is not None}
        events: list[BackendEvent] = []
        # runs not bound before this poll: none of their containers can have run
        unbound = {key for key, r in self._runs.items() if not r.bound}
        for key, r in list(self._runs.items()):
            lost = not gone.isdisjoint(r.nodes)
            if r.bound and r.stopping is None and not lost and r.job_id not in changed and not r.assumed:
                continue  # nothing moved
            if r.create_body is not None and r.stopping is None:
                self._create(r)
                if r.create_failed is not None:
                    del self._runs[key]
                    events.append(
                        BackendEvent(EventKind.FAILED, self.options.now(), r.job_id, r.run, reason=r.create_failed)
                    )
                    continue
                if r.create_body is not None:
                    continue  # not created yet: tried again after its back-off
            pods = self.pod_cache.by_index(r.job_id)
            mine = self._run_pods(r, pods)
            if lost and r.bound and r.lost_node is None and any(n in self._nodes for n in r.nodes):
                # its pods on the nodes still there run on (a grace period, a finalizer): stopped, and
                # reported LOST once they have ended — the loop holds their GPUs until then
                r.lost_node = min(gone.intersection(r.nodes))
                r.stopping = r.stopping or f"node {r.lost_node} is gone"
            if r.stopping is not None:
                self._drive_stop(r, pods)
                mine = self._without_strays(mine)
                if r.lost_node is not None:  # its pods on a gone node went with it
                    mine = [p for p in mine if p.node in self._nodes]
            elif not r.bound and not lost:
                if not r.job:  # adopted: pods its controller made since the launch join the run
                    self._claim(r, [p for p in pods if p.run != r.run])
                    live = [p for p in mine if not p.terminal and p.deletion_timestamp is None]
                    if live:
                        r.pods_due = None
                    elif r.pods_due is not None:
                        if time.monotonic() > r.pods_due:
                            del self._runs[key]
                            events.append(
                                BackendEvent(
                                    EventKind.FAILED,
                                    self.options.now(),
                                    r.job_id,
                                    r.run,
                                    reason=f"its controller made no pod to run in {ADOPTED_PODS_WAIT_S:.0f} s",
                                )
                            )
                        continue
                if r.job and not mine:
                    # its Job exists but has no pod: the Job controller makes them within seconds; a
                    # run whose pods never come (its Job deleted by someone, its pods gone before
                    # they were bound) is lost, not waited for for ever
                    r.no_pods_since = r.no_pods_since or time.monotonic()
                    if time.monotonic() - r.no_pods_since > RUN_WITHOUT_PODS_S:
                        del self._runs[key]
                        events.append(
                            BackendEvent(
                                EventKind.LOST,
                                self.options.now(),
                                r.job_id,
                                r.run,
                                reason=f"no pod of its Job {r.namespace}/{r.job} in {RUN_WITHOUT_PODS_S:.0f} s",
                            )
                        )
                        self._delete_job(r)
                    continue
                r.no_pods_since = None
                self._bind(r, mine)
                if r.bound:
                    continue  # the pods as cached predate their binding
            ev = self._ended(r, mine)
            if ev is not None and r.lost_node is not None:
                reason = f"node {r.lost_node} is gone"
                ev = replace(ev, kind=EventKind.LOST, reason=reason, node=r.lost_node, exit_code=None, signal=None)
            if ev is None and (not lost or r.lost_node is not None):
                continue
            if ev is None:  # lost with its node: said here, the node named (a spot node's loss is a spot restart)
                node = min(gone.intersection(r.nodes))
                ev = BackendEvent(
                    EventKind.LOST, self.options.now(), r.job_id, r.run, reason=f"node {node} is gone", node=node
                )
            del self._runs[key]
            if ev is not None:
                events.append(ev)
            if ev.kind in (EventKind.STOPPED, EventKind.LOST) and r.stopping is None:
                # disrupted by someone else (a drain, a node gone): its Job goes, so the Job controller
                # does not make its pods again (nor for those the pod garbage collector deletes)
                self._delete_job(r)
            elif r.job:
                failed = ev.kind in (EventKind.FAILED, EventKind.TIMED_OUT)
                keep = self.options.keep_failed_s if failed else self.options.keep_finished_s
                self._finished.append((time.monotonic() + keep, r))
        # a run ended before any of its pods was bound ran nothing: its end says so (a zero-length
        # span). One that was bound but whose start was never seen (its pods deleted first) is
        # metered from its launch: it held its GPUs, and its containers may have run
        events = [
            replace(e, started_at=e.ended_at or e.time, ended_at=e.ended_at or e.time)
            if e.started_at is None and (e.job_id, e.run) in unbound
            else e
            for e in events
        ]
        # ends first: a run that ended on a node before the node went is ended, not lost
        return events + node_events

    def _without_strays(self, pods: list[PodFacts]) -> list[PodFacts]:
        """A stopping run's pods, less the ones never bound: a pod the Job controller made for an
        evicted one before the Job was deleted never ran; it is deleted, not waited for."""
        from kubernetes.client.exceptions import ApiException

        kept = []
        for p in pods:
            if p.node is not None or p.terminal:
                kept.append(p)
                continue
            try:
                self.core.delete_namespaced_pod(
                    p.name,
                    p.namespace,
                    grace_period_seconds=0,
                    _request_timeout=self.fence.check(f"deleting pod {p.key}"),
                )
            except ApiException as e:
                if e.status != 404:
                    log.warning("deleting stray pod %s: %s %s", p.key, e.status, e.reason)
            except Exception as e:  # deleted at the next poll
                log.warning("deleting stray pod %s: %s", p.key, e)
        return kept

    def _delete_run_job(self, r: Run, propagation: str) -> None:
        """Delete the run's Job (a fenced write); one already gone (404) is deleted. ``Orphan``
        keeps its pods (a stop evicts them with their grace), ``Background`` takes them along."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.batch.delete_namespaced_job(
                r.job,
                r.namespace,
                propagation_policy=propagation,
                _request_timeout=self.fence.check(f"deleting Job {r.namespace}/{r.job}"),
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def _clean_finished(self) -> None:
        """Delete the Jobs (and pods) of ended runs once their time is up (``keep_finished_s`` after
        the poll that reported the end; the loop has stored the end since, so nothing is lost), so
        finished Jobs do not pile up in the cluster (and in every list and watch cache) for ever. A
        Job that cannot be deleted now is tried at the next poll."""

        left = []
        now = time.monotonic()
        for due, r in self._finished:
            if due > now:
                left.append((due, r))
                continue
            try:
                self._delete_run_job(r, "Background")
            except Exception:  # a 5xx, a timeout: the next poll tries again
                left.append((due, r))
        self._finished = left

    def _delete_job(self, r: Run) -> None:
        """Delete a run's Job with its pods (none is replaced; running ones get their grace)."""
        if not r.job:
            return  # adopted pods: their own controller decides
        from kubernetes.client.exceptions import ApiException

        try:
            self._delete_run_job(r, "Background")
        except ApiException as e:
            log.warning("deleting Job %s/%s: %s %s", r.namespace, r.job, e.status, e.reason)
        except Exception as e:  # its pods end anyway; the Job stays until someone deletes it
            log.warning("deleting Job %s/%s: %s", r.namespace, r.job, e)

    def _bind(self, r: Run, pods: list[PodFacts]) -> None:
        waiting = [p for p in pods if not p.terminal and p.deletion_timestamp is None]
        if len(waiting) < len(r.nodes):
            return  # a gang is bound all together, once all its pods exist
        from kubernetes.client.exceptions import ApiException

        for pod, node in zip(waiting, r.nodes, strict=False):
            if pod.node is not None:
                continue
            if not self._can_admit(pod, node):
                return  # the device plugin has not advertised the GPUs yet: a container would start without one
            try:
                self.core.create_namespaced_pod_binding(
                    pod.name,
                    pod.namespace,
                    binding(pod.namespace, pod.name, node),
                    _preload_content=False,
                    _request_timeout=self.fence.check(f"binding pod {pod.key}"),
                )
            except ApiException as e:
                # A 409 is "already bound" only if the pod says so (ours, before a restart or a lost
                # answer); a conflict on a pod still unbound is retried at the next poll.
                if e.status == 409 and self._bound_to(pod, node):
                    r.assumed[pod.name] = node
                    continue
                log.warning("binding pod %s to %s: %s %s", pod.key, node, e.status, e.reason)
                return
            except Exception as e:  # a timeout: whether it bound is unknown; the cache will say
                log.warning("binding pod %s to %s: %s", pod.key, node, e)
                return
            r.assumed[pod.name] = node
        r.bound = True

    def _can_admit(self, pod: PodFacts, node: str) -> bool:
        """The node advertises the GPU resource the pod asks for (the kubelet ignores a resource a
        node does not list at all, so a pod bound before the device plugin registers would start
        without its GPU)."""
        if not pod.gpu_count or not pod.gpu_resource:
            return True
        obj = self.node_cache.get("", node)
        if obj is None:
            return True  # not in the cache (yet): the kubelet's own admission decides
        alloc = (obj.get("status") or {}).get("allocatable") or {}
        raw = alloc.get(pod.gpu_resource)
        try:
            ok = raw is not None and int(str(raw)) > 0
        except ValueError:
            ok = False
        if not ok:
            log.info("pod %s waits: node %s does not advertise %s yet", pod.key, node, pod.gpu_resource)
        return ok

    def _bound_to(self, pod: PodFacts, node: str) -> bool:
        """Read the pod back after a 409 on its binding: bound (to ``node``, or elsewhere: it runs
        there, and the run's end will say so) or not yet."""
        from kubernetes.client.exceptions import ApiException

        try:
            got = self._json(self.core.read_namespaced_pod, pod.name, pod.namespace)
        except (ApiException, BackendError) as e:
            log.warning("reading pod %s after a 409 on its binding: %s", pod.key, e)
            return False
        bound = (got.get("spec") or {}).get("nodeName")
        if bound and bound != node:
            log.warning("pod %s is bound to %s, not %s", pod.key, bound, node)
        return bool(bound)

    def _ended(self, r: Run, pods: list[PodFacts]) -> BackendEvent | None:
        return run_end(r, pods, self.options.now())

    def _node_events(self) -> list[BackendEvent]:
        now = self.options.now()
        out: list[BackendEvent] = []
        if not self.node_cache.synced() or self.node_cache.version == self._nodes_seen:
            return out  # not listed yet (nothing is known, so nothing is gone), or nothing moved
        self._nodes_seen = self.node_cache.version
        objs = self.node_cache.items()
        # A node that stops taking work (cordoned, NotReady, a NoSchedule taint) keeps what it runs:
        # only its removal ends that work here; Kubernetes evicts pods itself (after a NoExecute
        # taint's toleration, 300 s by default; a drain) and the runs see their pods go.
        seen: dict[str, Node] = {}
        cordoned: dict[str, str] = {}
        for obj in objs:
            info = self._node_info(obj)
            if info is None:
                continue
            name = info.node.name
            if name not in self._nodes and _gpus_not_advertised(obj, info.node):
                continue  # still joining: its GPUs are not allocatable yet
            if info.spot_notice and name in self._nodes and name not in self._notified:
                self._notified.add(name)
                out.append(BackendEvent(EventKind.NODE_INTERRUPTED, now, node=name, reason=info.spot_notice))
            if not (info.schedulable or name in self._nodes or name in self._notified):
                continue  # a node that never took work (still joining, NotReady): not added until it can
            seen[name] = info.node
            if not info.schedulable and name not in self._notified:
                cordoned[name] = unschedulable_reason(obj) or "not schedulable"
        for name in sorted(set(self._nodes) - set(seen)):
            out.append(BackendEvent(EventKind.NODE_REMOVED, now, node=name, reason=f"node {name} is gone"))
            self._notified.discard(name)
        for name in sorted(set(seen) - set(self._nodes)):
            out.append(BackendEvent(EventKind.NODE_ADDED, now, node=name))
        for name in sorted(set(seen) & set(self._nodes)):
            old, new = self._nodes[name], seen[name]
            if old.labels != new.labels or old.taints != new.taints:  # relabelled, tainted: placements follow
                out.append(BackendEvent(EventKind.NODE_CHANGED, now, node=name))
        for name in sorted(set(cordoned) - set(self._cordoned)):
            out.append(BackendEvent(EventKind.NODE_CORDONED, now, node=name, reason=f"node {name}: {cordoned[name]}"))
        for name in sorted((set(self._cordoned) - set(cordoned)) & set(seen)):
            out.append(BackendEvent(EventKind.NODE_UNCORDONED, now, node=name))
        self._cordoned = cordoned
        self._nodes = seen
        return out

    def foreign_usage(self) -> dict[str, int]:
        """Whole GPUs that pods gpufleet did not place hold on each node (another scheduler's, a
        DaemonSet's): the loop keeps them out of its snapshot. A time-sliced resource counts
        ``ceil(replicas asked / replicas per GPU)`` GPUs; a MIG slice counts its GPU."""
        wait_filled([self.foreign_cache], self.options.sync_timeout_s, "reading others' GPU pods")
        out: dict[str, int] = {}
        for pod in self.foreign_cache.items():
            if pod.node is None:
                continue
            node = self._nodes.get(pod.node)
            replicas = node.gpu_facts.replicas if node else 1
            whole = 1 if pod.mig_profile else replicas_gpus(pod.gpu_count, replicas)
            out[pod.node] = out.get(pod.node, 0) + whole
        return out

    def report_waiting(self, waiting: Mapping[str, Status]) -> int:
        """Say on each unbound pod of a queued job why it waits (job id → the cycle's status):
        condition ``PodScheduled=False`` with gpufleet's reason as the message — what ``kubectl get
        pods`` shows. The condition's reason is ``Unschedulable`` (what node autoscalers provision
        for) only when capacity is why and gpufleet does not provision nodes itself; every other wait
        is ``SchedulingGated`` (:func:`.waiting.pod_condition_for`: one provisioner at a time). Only
        changed conditions are written; returns how many pods were patched."""
        from kubernetes.client.exceptions import ApiException

        provisioning = self.provisioner is not None
        patched = 0
        for pod in self._pods():
            st = waiting.get(pod.job_id or "")
            if st is None or pod.node is not None or pod.terminal or pod.deletion_timestamp is not None:
                continue
            cond = pod_condition_for(st.kind, st.reason, provisioning, self.options.now())
            old = pod.condition("PodScheduled")
            if (
                old is not None
                and old.status == "False"
                and old.reason == cond.get("reason")
                and old.message == cond.get("message")
            ):
                continue
            try:
                self.core.patch_namespaced_pod_status(
                    pod.name,
                    pod.namespace,
                    {"status": {"conditions": [cond]}},
                    _preload_content=False,
                    _request_timeout=self.fence.check(f"writing pod {pod.key}'s PodScheduled"),
                )
                patched += 1
            except ApiException as e:
                if e.status != 404:
                    log.warning("pod %s: writing PodScheduled=False: %s %s", pod.key, e.status, e.reason)
            except Exception as e:  # a timeout: written again at the next report
                log.warning("pod %s: writing PodScheduled=False: %s", pod.key, e)
        return patched

    def node(self, name: str) -> Node | None:
        """A node the backend knows (what a ``NODE_ADDED`` event names)."""
        return self._nodes.get(name)

    # -- the Provisioner protocol (Capability.AUTOSCALING only with a provisioner) ----------------
    def pools(self) -> list[NodePool]:
        return self.provisioner.pools() if self.provisioner is not None else []

    def provision(self, pool: str, count: int, now: float) -> list[Node]:
        if self.provisioner is None:
            raise BackendError("this Kubernetes backend has no node provisioner (kubernetes.karpenter is off)")
        return self.provisioner.provision(pool, count, now)

    def release(self, node: str, now: float) -> None:
        if self.provisioner is None:
            log.warning("node %s not released: no node provisioner", node)
            return
        self.provisioner.release(node, now)

    def recover(self, job_id: str, run: int) -> Recovered:
        """Find a run from the pod cache (listed once for all runs, not once per run). A run the
        cache shows absent or not yet bound is read again from the API server before it is given
        up: a new leader's cache may lag behind (its watch slow or cut, as in a partition), and
        giving up a run that runs starts its job a second time beside it."""
        wait_filled([self.pod_cache], self.options.sync_timeout_s, "reading gpufleet's pods")
        pods = [p for p in self.pod_cache.by_index(job_id) if p.run == run]
        if not pods or any(_unbound(p) for p in pods):
            pods = self._live_pods(job_id, run)
        if not pods:
            return Recovered(RecoveredState.ABSENT)
        ns = pods[0].namespace
        name = job_name(job_id, run, len(pods))
        started = min((p.started_at for p in pods if p.started_at is not None), default=self.options.now())
        if any(_unbound(p) for p in pods):
            # found before all its pods were bound (the leader that launched it went away meanwhile):
            # where it meant to place them is not known here (binding to "" is refused, 422), and a
            # gang starts together, so the run is given up. Its own Job's run is stopped: the Job and
            # its pods deleted, and STOPPED reported (the job requeued) only once they are gone — a
            # binding the old leader sent may still land (a delayed request runs after its client
            # gave up), and until the pods are gone the run holds what the loop gave it.
            if not any(p.owner.kind == "Job" and p.owner.name == name for p in pods):
                return Recovered(RecoveredState.ABSENT)  # adopted pods: claimed again at the next launch
            nodes = tuple(p.node or "" for p in sorted(pods, key=lambda p: p.completion_index or 0))
            r = Run(job_id, run, ns, name, nodes, started, stopping=GIVEN_UP)
            self._runs[(job_id, run)] = r
            return Recovered(RecoveredState.RUNNING, self._handle(r))
        nodes = tuple(p.node or "" for p in sorted(pods, key=lambda p: p.completion_index or 0))
        r = Run(job_id, run, ns, name, nodes, started, bound=all(p.node for p in pods))
        r.max_runtime_s, r.deadline_from = _deadline(pods)
        # bindings the cache has not shown yet (read live above): assumed until it does, so a
        # lagging cache's unbound pod is not taken for a deleted one at the next poll
        cached = {p.name: p.node for p in self.pod_cache.by_index(job_id) if p.run == run}
        r.assumed = {p.name: p.node for p in pods if p.node and cached.get(p.name) != p.node}
        ev = self._ended(r, pods)
        if ev is not None:
            return Recovered(RecoveredState.ENDED, event=ev)
        self._runs[(job_id, run)] = r
        return Recovered(RecoveredState.RUNNING, self._handle(r))

    def _live_pods(self, job_id: str, run: int) -> list[PodFacts]:
        """The run's pods as the API server has them now (a BackendError if it cannot say: the
        loop tries the recovery again rather than decide from a cache that may lag)."""
        data = call_json(
            f"reading the pods of job {job_id}",
            self.core.list_pod_for_all_namespaces,
            label_selector=f"{KEY_JOB_ID}={job_id}",
        )
        out = []
        for obj in data.get("items") or []:
            try:
                p = pod_facts(obj)
            except GpufleetError:  # a pod gpufleet cannot read is not this run's
                continue
            if p.job_id == job_id and p.run == run:
                out.append(p)
        return out

    def telemetry(self) -> list[GpuSample]:
        """GPU utilization and memory from the DCGM exporters (``dcgm_urls``), per GPU, with each
        gpufleet job's memory (the exporter's ``pod``/``namespace`` labels mapped to the job of the
        pod; a time-sliced GPU's split among the pods holding its replicas, by share). The
        exporters are read in the background, all at once with one deadline
        (:class:`.dcgm_scrape.DcgmScraper`): the leader's step never waits on one; what has not been
        read yet, or was read too long ago, is missing."""
        urls = tuple(dict.fromkeys(self.options.dcgm_urls))
        if self._dcgm is None or self._dcgm.urls != urls:
            if self._dcgm is not None:
                self._dcgm.close()
            self._dcgm = DcgmScraper(urls, now=self.options.now) if urls else None
        if self._dcgm is None:
            return []
        pods = self._pods()
        job_of = {p.key: p.job_id for p in pods if p.job_id}
        shared: dict[str, dict[str, float]] = {}
        for p in pods:
            node = self._nodes.get(p.node or "")
            if node is not None and node.gpu_facts.replicas > 1 and p.gpu_count and p.phase == "Running":
                shared.setdefault(node.name, {})[p.key] = p.gpu_count
        out: list[GpuSample] = []
        for g in split_time_sliced_memory(self._dcgm.latest(), shared):
            jobs: dict[str, float] = {}
            for pod, mib in g.job_memory_mib.items():
                job = job_of.get(pod)
                if job is not None:
                    jobs[job] = jobs.get(job, 0.0) + mib
            out.append(replace(g, job_memory_mib=jobs))
        return out

    def close(self) -> None:
        self._runs.clear()
        self._finished.clear()
        if self._dcgm is not None:
            self._dcgm.close()
        for cache in (self.pod_cache, self.node_cache, self.foreign_cache):
            cache.stop()


__all__ = ["KubernetesBackend", "KubernetesOptions"]
