"""The harness of the whole-fleet runs on the Kubernetes substrate: the issue-11 acceptance run
(``tests/k8s/test_k8s_scale.py``) and the scale and chaos benchmarks (``benchmarks/k8s_scale.py``,
``benchmarks/k8s_chaos.py``) assemble the server's world in-process and check it with these parts.

- :func:`kwok_webhook`: a job's ``KWOK_*`` environment variables become the kubelet stand-in's
  annotations as each pod is created (a mutating admission webhook's part: the Job builder sets no
  arbitrary pod annotation);
- :class:`Recorder`: every pod and node write from inside the API server, in order, plus the two
  garbage collectors the substrate lacks; :func:`replay` applies the record and checks node GPU
  capacity and quotas after every write; :func:`story` tells one job's pods, change by change;
- :class:`TcpProxy`: a TCP relay in front of the API server for one client: bytes each way, and a
  partition (silence) that can be healed;
- :class:`TickMeter` (the controller thread's CPU per loop turn), :class:`PodEndWatch` (when the
  kubelet wrote a pod's end, as the API server committed it) and :class:`EventClock` (when the loop
  got the backend's event for it): what the benchmarks measure;
- :func:`replica`: one gpufleet replica as ``gpufleet up --backend kubernetes`` assembles it
  (backend, pod adopter, the leader's periodic duties), for a given leadership and client.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from gpufleet.backends.base import BackendEvent
from gpufleet.control.controller import Controller, ControllerConfig, Periodic
from gpufleet.control.leader import Leadership
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.k8s.adapter.backend import KubernetesBackend
from gpufleet.k8s.adapter.nodes import node_info
from gpufleet.k8s.adapter.pods import PodFacts, pod_facts
from gpufleet.k8s.vocabulary import KEY_JOB_ID
from gpufleet.loop.metering import share_units
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.scheduling.usage import UsageTracker
from gpufleet.store.db import Database
from tests.support.k8s import apiserver
from tests.support.k8s.apiserver import NODES, PODS, WatchEvent
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.kubelet import CHECKPOINT_ANNOTATION, DURATION_ANNOTATION, EXIT_CODE_ANNOTATION

__all__ = [
    "ENV_ANNOTATIONS",
    "EventClock",
    "NodeShape",
    "PodEndWatch",
    "Recorder",
    "Replay",
    "TcpProxy",
    "TickMeter",
    "ended",
    "kwok_webhook",
    "percentile",
    "phase",
    "pod_milli",
    "pod_units",
    "replay",
    "replica",
    "rss_mib",
    "stop_within",
    "story",
]

# The "webhook": a job's KWOK_* environment variables become the kubelet stand-in's annotations.
ENV_ANNOTATIONS = {
    "KWOK_DURATION_S": DURATION_ANNOTATION,
    "KWOK_EXIT_CODE": EXIT_CODE_ANNOTATION,
    "KWOK_CHECKPOINT_S": CHECKPOINT_ANNOTATION,
}


def kwok_webhook(original: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """Wrap the substrate's pod defaulter (``apiserver._DEFAULTERS["pods"]``) with the "webhook"."""

    def default_pod(pod: dict[str, Any]) -> None:
        original(pod)
        annotations = pod.setdefault("metadata", {}).setdefault("annotations", {})
        for container in (pod.get("spec") or {}).get("containers") or []:
            for env in container.get("env") or []:
                key = ENV_ANNOTATIONS.get(env.get("name", ""))
                if key is not None:
                    annotations.setdefault(key, str(env.get("value", "")))

    return default_pod


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def ended(pod: dict[str, Any]) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (``None`` for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def stop_within(stop: Callable[[], None], timeout_s: float) -> float | None:
    """Run ``stop`` on a daemon thread; the seconds it took, or ``None`` if it still hangs after
    ``timeout_s`` (a benchmark reports a hang instead of waiting on it)."""
    t0 = time.monotonic()
    thread = threading.Thread(target=stop, name="stopping", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return None if thread.is_alive() else round(time.monotonic() - t0, 2)


def rss_mib() -> float:
    """This process's peak resident set (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the record of the API's history ------------------------------------------------------------------


class Recorder:
    """Every pod and node write, in resourceVersion order, from inside the API server (the events a
    watch from the start would get; the objects are the server's copies, never changed after).

    It also plays two parts of kube-controller-manager the substrate lacks: the garbage collector
    (a pod created for a Job that is already gone — the Job controller's sync raced the Job's
    deletion — has a dangling owner and is deleted) and the pod garbage collector (a pod bound to a
    Node that is gone is force-deleted)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.events: list[tuple[float, WatchEvent]] = []
        self.errors: list[BaseException] = []
        self.collected: list[str] = []  # pods deleted for a dangling owner
        self.orphans: list[str] = []  # pods force-deleted for a node that is gone

    def start(self) -> None:
        server = self.cluster.server

        def spawn() -> None:  # on the cluster's loop: no write can come between the version and the task
            asyncio.get_running_loop().create_task(self._run(server, server.resource_version), name="recorder")

        self.cluster.call(spawn)

    async def _run(self, server: apiserver.KubeApiServer, since: int) -> None:
        jobs_gone: set[str] = set()
        nodes_gone: set[str] = set()
        try:
            async for ev in server.events_after(since):
                if ev.rtype is apiserver.JOBS and ev.type == "DELETED":
                    jobs_gone.add(ev.obj["metadata"]["uid"])
                if ev.rtype is not PODS and ev.rtype is not NODES:
                    continue
                self.events.append((time.time(), ev))
                meta = ev.obj["metadata"]
                if ev.rtype is NODES:
                    if ev.type == "DELETED":
                        nodes_gone.add(meta["name"])
                        for pod in server.list_objects(PODS, field_selector=f"spec.nodeName={meta['name']}"):
                            self._orphaned(server, pod)
                    else:
                        nodes_gone.discard(meta["name"])  # a node of that name joined (again)
                    continue
                if ev.type == "DELETED":
                    continue
                owners = [r["uid"] for r in meta.get("ownerReferences") or [] if r.get("controller")]
                if ev.type == "ADDED" and owners and owners[0] in jobs_gone:
                    server.delete_object(PODS, meta["namespace"], meta["name"], {"propagationPolicy": "Background"})
                    self.collected.append(f"{meta['namespace']}/{meta['name']}")
                elif ev.obj["spec"].get("nodeName") in nodes_gone:
                    self._orphaned(server, ev.obj)
        except Exception as e:  # fell behind the retained history: the checks would be blind
            self.errors.append(e)

    def _orphaned(self, server: apiserver.KubeApiServer, pod: dict[str, Any]) -> None:
        """The pod garbage collector: a pod bound to a Node that is gone is force-deleted. (It deletes
        finished ones too, once the Job controller has counted them through its tracking finalizer;
        the stand-in Job controller has none and would make them again, so those are left.)"""
        if ended(pod):
            return
        meta = pod["metadata"]
        # as pkg/controller/podgc's markFailedAndDeletePodWithCondition: the pod is marked Failed with
        # DisruptionTarget (DeletionByPodGC) before the force deletion, so its end reads as a
        # disruption, not as its containers' failure (the kubelet, if any, then kills them: 137)
        holder = {"status": dict(pod.get("status") or {})}
        holder["status"]["phase"] = "Failed"
        apiserver.set_condition(holder, "DisruptionTarget", "True", "DeletionByPodGC", "PodGC: node no longer exists")
        try:
            server.patch_object(
                PODS, meta["namespace"], meta["name"], {"status": holder["status"]}, "merge", subresource="status"
            )
            server.delete_object(PODS, meta["namespace"], meta["name"], {"gracePeriodSeconds": 0})
        except apiserver.ApiError as e:
            if e.code == 404:  # gone meanwhile (its own deletion, the Job's): nothing to collect
                return
            raise
        self.orphans.append(f"{meta['namespace']}/{meta['name']}")


@dataclass
class NodeShape:
    model: str
    replicas: int
    allocatable: dict[str, int]  # GPU resources


@dataclass
class Replay:
    violations: list[str] = field(default_factory=list)
    last: dict[str, PodFacts] = field(default_factory=dict)  # pod uid → its last state
    ever_bound: dict[str, str] = field(default_factory=dict)  # pod uid → node
    rebound: list[str] = field(default_factory=list)  # pods whose nodeName changed once set (never allowed)
    created: int = 0
    peak_pods: int = 0
    peak_team_milli: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    shapes: dict[str, NodeShape] = field(default_factory=dict)
    deleted_at: dict[str, float] = field(default_factory=dict)  # pod uid → when it was deleted
    nodes_seen_busy: Counter[str] = field(default_factory=Counter)  # node → pods that ran there


def _gpu_resources(obj: dict[str, Any]) -> dict[str, int]:
    alloc = (obj.get("status") or {}).get("allocatable") or {}
    return {k: int(v) for k, v in alloc.items() if k.startswith("nvidia.com/")}


def pod_milli(p: PodFacts, shape: NodeShape) -> int:
    """What the pod holds in gpufleet's quota units (milli-GPU of the node's model)."""
    req = p.gpu_request(shape.replicas, shape.model)
    return req.count * req.milli


def pod_units(p: PodFacts, shape: NodeShape) -> int:
    """What the pod holds in the ledger's units (1/7000 GPU)."""
    return share_units(p.gpu_request(shape.replicas, shape.model), shape.model)


def replay(events: list[tuple[float, WatchEvent]], quotas: QuotaPolicy | None, catalog: PriceCatalog) -> Replay:
    """Apply the writes in order; after each, check node capacity and quotas (unless ``None``)
    where it changed."""
    out = Replay()
    live_nodes: set[str] = set()
    pods: dict[str, PodFacts] = {}
    usage = UsageTracker()
    held: dict[str, tuple[str, str, int]] = {}  # pod uid → (team, model, milli) while it holds GPUs
    models: set[str] = set()

    def holds(p: PodFacts) -> bool:
        return p.node is not None and p.node in live_nodes and not p.terminal and p.gpu_count > 0

    def check_node(node: str, rv: int) -> None:
        shape = out.shapes.get(node)
        if shape is None or node not in live_nodes:
            return
        used: Counter[str] = Counter()
        on_node = [q for q in pods.values() if q.node == node and holds(q) and q.gpu_resource is not None]
        for q in on_node:
            assert q.gpu_resource is not None
            used[q.gpu_resource] += q.gpu_count
        for resource_name, n in used.items():
            if n > shape.allocatable.get(resource_name, 0):
                out.violations.append(
                    f"rv {rv}: node {node} has {n} {resource_name} bound to running pods, allocatable "
                    f"{shape.allocatable.get(resource_name, 0)}: "
                    f"{[(q.name, q.gpu_count, q.phase, q.deletion_timestamp is not None) for q in on_node]}"
                )

    for t, ev in events:
        obj = ev.obj
        name = obj["metadata"]["name"]
        if ev.rtype is NODES:
            if ev.type == "DELETED":
                live_nodes.discard(name)
            else:
                info = node_info(obj, catalog)
                assert info is not None, name
                out.shapes[name] = NodeShape(
                    info.node.gpu_model,
                    info.node.gpu_facts.replicas,
                    _gpu_resources(obj),
                )
                models.add(info.node.gpu_model)
                live_nodes.add(name)
            continue
        p = pod_facts(obj)
        if ev.type == "ADDED":
            out.created += 1
        out.last[p.uid] = p
        if p.node is not None:
            first = out.ever_bound.setdefault(p.uid, p.node)
            if first != p.node:
                out.rebound.append(f"rv {ev.rv}: pod {p.key} bound to {first}, then to {p.node}")
        if ev.type == "DELETED":
            pods.pop(p.uid, None)
            out.deleted_at[p.uid] = t
        else:
            pods[p.uid] = p
        before = held.pop(p.uid, None)
        if before is not None:
            usage.remove(before[0], before[1], before[2], 0, 0, 0.0)
        if ev.type != "DELETED" and holds(p):
            assert p.node is not None
            shape = out.shapes[p.node]
            now_held = (p.team, shape.model, pod_milli(p, shape))
            held[p.uid] = now_held
            usage.add(now_held[0], now_held[1], now_held[2], 0, 0, 0.0)
            if before is None:
                out.nodes_seen_busy[p.node] += 1
        if before is None and p.uid not in held:
            continue  # nothing held changed
        out.peak_pods = max(out.peak_pods, len(held))
        for team, u in usage.teams.items():
            out.peak_team_milli[team] = max(out.peak_team_milli[team], u.total_gpu_milli)
        if quotas is not None:
            bad = quotas.holds(usage, sorted(models))
            if bad:
                out.violations.append(f"rv {ev.rv} ({ev.type} pod {p.key} on {p.node}): quota broken: {bad}")
        if p.node is not None:
            check_node(p.node, ev.rv)
    return out


def story(events: list[tuple[float, WatchEvent]], job_id: str, t0: float) -> list[str]:
    """What the API saw of one job's pods, change by change (for failure messages)."""
    out: list[str] = []
    seen: dict[str, tuple[Any, ...]] = {}
    for t, ev in events:
        if ev.rtype is not PODS:
            continue
        meta = ev.obj["metadata"]
        if (meta.get("annotations") or {}).get(KEY_JOB_ID) != job_id:
            continue
        status = ev.obj.get("status") or {}
        disrupted = any(c.get("type") == "DisruptionTarget" for c in status.get("conditions") or [])
        state = (
            ev.type,
            ev.obj["spec"].get("nodeName"),
            status.get("phase"),
            bool(meta.get("deletionTimestamp")),
            (meta.get("annotations") or {}).get("gpufleet.io/run"),
            disrupted,
        )
        if seen.get(meta["uid"]) != state:
            seen[meta["uid"]] = state
            out.append(f"{t - t0:.1f}s {meta['name']} {'/'.join(str(x) for x in state)}")
    return out


# -- measuring ------------------------------------------------------------------------------------------


class TcpProxy:
    """A TCP relay in front of the API server for one client (one replica), on its own thread and
    event loop: it counts the bytes each way, and it can partition that client from the server —
    :meth:`cut` lets nothing through while connections stay open (what a real partition looks like
    to a client: silence until its own deadline), :meth:`heal` closes every connection opened so far
    (their streams lost bytes) and relays new ones again."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.bytes_down = 0  # server → client
        self.bytes_up = 0  # client → server
        self.connections = 0
        self.port = 0
        self._cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="tcp-proxy", daemon=True)

    @classmethod
    def for_cluster(cls, cluster: Cluster) -> Self:
        host_port = cluster.url.split("://", 1)[-1]
        host, port = host_port.rsplit(":", 1)
        return cls(host, int(port)).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the TCP proxy did not start")
        return self

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._server = loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()
        self._server.close()
        loop.run_until_complete(self._server.wait_closed())
        loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pump(reader, up_writer, up=True), self._pump(up_reader, writer, up=False))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool) -> None:
        try:
            while data := await reader.read(65536):
                if self._cut:
                    continue  # partitioned: the bytes are lost, the connection stays open
                if up:
                    self.bytes_up += len(data)
                else:
                    self.bytes_down += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def cut(self) -> None:
        self._cut = True

    def heal(self) -> None:
        def close_all() -> None:
            for w in list(self._writers):
                w.close()
            self._cut = False

        assert self._loop is not None
        self._loop.call_soon_threadsafe(close_all)

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            self.heal()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


@dataclass(frozen=True, slots=True)
class Tick:
    at: float  # monotonic, when the turn ended
    cpu_s: float  # the controller thread's CPU time in it
    wall_s: float
    leader: bool


class TickMeter:
    """The controller thread's CPU time per loop turn (:meth:`Controller.tick`: leadership, one step
    of the world loop with its backend poll, or a follower's heartbeat), by wrapping the instance's
    ``tick`` (``time.thread_time`` counts that thread's CPU only)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.ticks: list[Tick] = []
        inner = controller.tick

        def tick() -> None:
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                inner()
            finally:
                self.ticks.append(
                    Tick(time.monotonic(), time.thread_time() - c0, time.perf_counter() - w0, controller.is_leader)
                )

        controller.tick = tick  # type: ignore[method-assign]

    def between(self, start: float, end: float, *, leader_only: bool = True) -> list[Tick]:
        return [t for t in self.ticks if start <= t.at <= end and (t.leader or not leader_only)]


class EventClock:
    """When the loop first got a backend event for each (job, run) of each kind: wraps the
    backend instance's ``poll`` (what :class:`~gpufleet.loop.world.WorldLoop` calls each step)."""

    def __init__(self, backend: KubernetesBackend) -> None:
        self.seen: dict[tuple[str, int, str], float] = {}  # (job, run, kind) → time.time()
        self.events: list[tuple[float, BackendEvent]] = []
        inner = backend.poll

        def poll() -> list[BackendEvent]:
            out = inner()
            now = time.time()
            for ev in out:
                self.events.append((now, ev))
                if ev.job_id is not None and ev.run is not None:
                    self.seen.setdefault((ev.job_id, ev.run, ev.kind.value), now)
            return out

        backend.poll = poll  # type: ignore[method-assign]


class PodEndWatch:
    """When each gpufleet pod's container end was committed by the API server (the kubelet's status
    write that made it Succeeded or Failed): an in-process watch on the server's loop."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ends: dict[tuple[str, int], float] = {}  # (job, run) → time.time() of its last pod's end
        self.errors: list[BaseException] = []

    def start(self) -> Self:
        server = self.cluster.server

        def spawn() -> None:
            asyncio.get_running_loop().create_task(self._run(server, server.resource_version), name="pod-ends")

        self.cluster.call(spawn)
        return self

    async def _run(self, server: apiserver.KubeApiServer, since: int) -> None:
        try:
            async for ev in server.events_after(since):
                if ev.rtype is not PODS or ev.type != "MODIFIED" or not ended(ev.obj):
                    continue
                if ev.old is not None and ended(ev.old):
                    continue
                p = pod_facts(ev.obj)
                if p.job_id is not None and p.run is not None:
                    self.ends[(p.job_id, p.run)] = time.time()
        except Exception as e:  # fell behind the retained history
            self.errors.append(e)


# -- one replica ------------------------------------------------------------------------------------------


@dataclass
class Replica:
    name: str
    db: Database
    backend: KubernetesBackend
    controller: Controller
    leadership: Leadership


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: substrate
  cluster: {{server: "{url}"}}
contexts:
- name: substrate
  context: {{cluster: substrate, user: nobody}}
current-context: substrate
users:
- name: nobody
  user: {{}}
"""


def replica(
    name: str,
    db: Database,
    url: str,
    home: Path,
    *,
    lease_duration_s: float = 15.0,
    config: ControllerConfig | None = None,
) -> Replica:
    """One gpufleet replica talking to the API server at ``url``, assembled by the server's own
    code: :func:`gpufleet.server.host.kubernetes_world` (the backend, the Lease leadership, the pod
    adopter as a periodic duty) from a kubeconfig, and the Controller as ``build_server`` makes it,
    with its "pod conditions" duty. (The custom-resources and proposals duties are left out.)"""
    from gpufleet.server.host import kubernetes_world
    from gpufleet.server.settings import KubernetesSettings, Settings

    home.mkdir(parents=True, exist_ok=True)
    kubeconfig = home / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(url=url))
    settings = Settings(
        home=home,
        backend="kubernetes",
        replica=name,
        kubernetes=KubernetesSettings(kubeconfig=kubeconfig, lease_duration_s=lease_duration_s),
    )
    backend, leadership, periodic = kubernetes_world(settings, db)
    assert isinstance(backend, KubernetesBackend)
    cfg = config or ControllerConfig(
        poll_interval_s=settings.poll_interval_s,
        cycle_interval_s=settings.cycle_interval_s,
        grace_s=settings.grace_s,
        telemetry_interval_s=settings.telemetry_interval_s,
        budget_interval_s=settings.budget_interval_s,
    )
    cfg.replica = name
    ctl = Controller(db, backend, settings.scheduler, cfg, leadership=leadership, periodic=periodic)
    ctl.periodic.append(Periodic("pod conditions", 5.0, lambda now: backend.report_waiting(ctl.loop.waiting_statuses)))
    return Replica(name, db, backend, ctl, leadership)


# -- the store ------------------------------------------------------------------------------------------


def make_store(path: Path, teams: dict[str, int]) -> Database:
    """A SQLite store with ``teams`` (team → nominal GPUs of any type, no cohort) and the default team."""
    from gpufleet.store import repo

    db = Database(f"sqlite:///{path}")
    db.upgrade()
    now = time.time()
    with db.session() as s:
        repo.ensure_team(s, "default", now)
        for team, gpus in teams.items():
            row = repo.upsert_team(
                s, team, cohort=None, borrowing_limit_milli=None, quotas_milli={"*": gpus * 1000}, now=now
            )
            row.priority_classes = ["low", "normal", "high"]
    return db


def submit_jobs(db: Database, bodies: list[dict[str, Any]], *, per_session: int = 500) -> list[str]:
    """Submit jobs through the API's own path (:func:`~gpufleet.services.submit.prepare_submit`,
    :func:`gpufleet.services.jobs.submit`), ``per_session`` to a transaction; returns their ids."""
    from gpufleet.services import jobs as control_jobs
    from gpufleet.services.submit import prepare_submit
    from gpufleet.wire import JobSubmit, Role

    ids: list[str] = []
    for i in range(0, len(bodies), per_session):
        with db.session() as s:
            for body in bodies[i : i + per_session]:
                prepared = prepare_submit(JobSubmit(**body), caller_team="default", caller_role=Role.ADMIN)
                row, _ = control_jobs.submit(
                    s,
                    prepared,
                    priority=body.get("priority", "normal"),
                    token_id=None,
                    role=Role.ADMIN,
                    run_as_required=False,
                    single_team=False,
                    idempotency_key=None,
                    now=time.time(),
                )
                ids.append(row.id)
    return ids
