"""The chaos acceptance run (issue 22): gpufleet on the Kubernetes substrate under mixed faults, then
counts of what went wrong. Asserts nothing; prints one JSON summary object.

The world: ``--nodes`` 8-GPU A100 nodes (default 50; a fifth spot, two pools ``acme.io/pool`` a/b,
one node tainted ``acme.io/dedicated=ml:NoSchedule``), the kubelet stand-in (with its admission),
the node lifecycle (taint-based eviction; ``--time-scale`` shrinks its 300 s toleration), the Job
controller stand-in, and two gpufleet replicas assembled by the server's own code
(``kubernetes_world`` from a kubeconfig: backend, Lease leadership, pod adopter) sharing one SQLite
store and one Lease, each talking to the API server through its own TCP relay (so one can be
partitioned). ``--jobs`` jobs (default 200) arrive over the first 70 % of a ``--window`` (default
600 s): API submissions (whole GPUs, gangs) and one in ten a batch/v1 Job with
``schedulerName: gpufleet``, a ``nodeSelector`` and a toleration, adopted.

The faults during the window: 5 % of API requests (every client's) answered 500, 429 with
``Retry-After``, 504, or delayed past the client's 10 s read deadline; two cordons (uncordoned
later); two NotReady blips shorter than the toleration; one NotReady longer than it (its pods
evicted by the taint); one Node deleted (its pods force-deleted as the pod garbage collector does);
the leader partitioned from the API server for two lease durations. Then the faults stop and the
run drains.

The counts: jobs lost (not SUCCEEDED at the end) and duplicated (two gpufleet jobs for one owner or
one name); pods bound twice (a nodeName changed, a pod index of a run bound more than once) and
jobs with two runs' pods running at once; node GPU over-commitment after any write; the leader's
GPU view per node against the cluster's (after the window, and at the end); the ledger: usage
segments against the pods' container times, segments outside their node's life, share units over
a node's GPUs, idle cost below zero (jobs + idle = node cost per node).

    python benchmarks/k8s_chaos.py [--quick] [--nodes 50] [--jobs 200] [--window 600]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import logging
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.k8s import apiserver
from tests.support.k8s.apiserver import LEASES, NAMESPACES, NODES, PODS, format_time, utcnow
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.fleetrun import (
    Recorder,
    Replica,
    TcpProxy,
    kwok_webhook,
    make_store,
    pod_units,
    replay,
    replica,
    rss_mib,
    stop_within,
    submit_jobs,
)
from tests.support.k8s.jobcontroller import JobController
from tests.support.k8s.kubelet import DURATION_ANNOTATION, KubeletConfig, gpu_node
from tests.support.k8s.nodelifecycle import NodeLifecycleConfig

from gpufleet.cost.ledger import SHARE_UNITS
from gpufleet.io.catalog import load_catalog
from gpufleet.k8s.vocabulary import LABEL_ADOPTED_OWNER
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow, NodeIntervalRow, RunRow, UsageSegmentRow

TEAMS = ("alpha", "beta", "gamma")
POOL = "acme.io/pool"
DEDICATED = {"key": "acme.io/dedicated", "value": "ml", "effect": "NoSchedule"}
TOLERATION_S = 300.0  # DefaultTolerationSeconds for not-ready / unreachable
FAULT_SHARE = 0.05
POLL_LAG_S = 10.0  # how late a deleted pod's end may be metered (gpufleet learns of it when it looks)
SEED = 22


def node_names(n: int) -> list[str]:
    return [f"gpu-{i:02d}" for i in range(n)]


def api_body(i: int, rng: random.Random, run_s: tuple[float, float]) -> dict[str, Any]:
    duration = round(rng.uniform(*run_s), 1)
    body: dict[str, Any] = {
        "name": f"api-{i:03d}",
        "team": TEAMS[i % len(TEAMS)],
        "command": ["python", "train.py"],
        "image": "ghcr.io/acme/train:1.4",
        "env": {"KWOK_DURATION_S": str(duration)},
        "estimated_runtime_s": duration,
        "gpus": rng.choice((1, 1, 2, 4)),
    }
    if i % 10 == 3:
        body.update(gpus=4, pods=2)
    return body


def adopted_job(i: int, rng: random.Random, run_s: tuple[float, float]) -> dict[str, Any]:
    team = TEAMS[i % len(TEAMS)]
    duration = round(rng.uniform(*run_s), 1)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"ext-{i:03d}", "namespace": team},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": {"team": team, "project": "external"},
                    "annotations": {"gpufleet.io/gang-size": "1", DURATION_ANNOTATION: str(duration)},
                },
                "spec": {
                    "schedulerName": "gpufleet",
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "nodeSelector": {POOL: "b"},
                    "tolerations": [{**DEDICATED, "operator": "Equal"}],
                    "containers": [
                        {"name": "main", "image": "acme/ray:2", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            },
        },
    }


class Chaos:
    """The faults, played on the cluster in-process (the chaos is not a client under test)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.server = cluster.server
        self.log: list[str] = []
        self.t0 = time.monotonic()

    def note(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self.t0:6.1f}s {what}")

    def cordon(self, node: str, on: bool) -> None:
        self.cluster.call(lambda: self.server.patch_object(NODES, None, node, {"spec": {"unschedulable": on}}))
        self.note(f"{'cordon' if on else 'uncordon'} {node}")

    def ready(self, node: str, ready: bool) -> None:
        def write() -> None:
            obj = self.server.peek(NODES, None, node)
            if obj is None:
                return
            now = format_time(utcnow())
            conditions = [c for c in obj["status"].get("conditions") or [] if c.get("type") != "Ready"]
            conditions.append(
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady" if ready else
                 "KubeletNotReady", "message": "chaos", "lastHeartbeatTime": now, "lastTransitionTime": now}
            )  # fmt: skip
            obj["status"]["conditions"] = conditions
            self.server.replace_object(NODES, None, node, obj, subresource="status")

        self.cluster.call(write)
        self.note(f"{node} {'Ready' if ready else 'NotReady'}")

    def remove(self, node: str) -> None:
        self.cluster.call(lambda: self.server.delete_object(NODES, None, node, {}))
        self.note(f"node {node} deleted")

    def faults_on(self, seed: int) -> None:
        faults = self.server.faults
        faults.seed = seed
        # consulted in order, each drawing on what the ones before let through: shares of all requests
        left = 1.0
        for share, rule in (
            (0.40, {"status": 500, "message": "etcdserver: leader changed"}),
            (0.30, {"status": 429, "retry_after_s": 1, "message": "too many requests, please try again later"}),
            (0.15, {"status": 504, "message": "the server was unable to return a response in the time allotted"}),
            (0.15, {"delay_s": 11.0}),  # past the client's 10 s read deadline
        ):
            p = FAULT_SHARE * share / left
            faults.add(probability=p, **rule)
            left -= FAULT_SHARE * share
        self.note("API faults on (5 %)")

    def faults_off(self) -> None:
        self.server.faults.clear()
        self.note("API faults off")


def leader(replicas: list[Replica]) -> Replica | None:
    held = [r for r in replicas if r.controller.is_leader]
    return held[0] if len(held) == 1 else None


def cluster_gpus(cluster: Cluster) -> dict[str, int]:
    """GPUs held per node as the cluster has it: bound pods not yet ended (terminating ones too)."""

    def count() -> dict[str, int]:
        out: Counter[str] = Counter()
        for pod in cluster.server.list_objects(PODS):
            node = pod["spec"].get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for c in pod["spec"].get("containers") or []:
                out[node] += int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
        return {n: k for n, k in out.items() if k}

    return cluster.call(count)


def loop_gpus(rep: Replica) -> dict[str, int]:
    out: Counter[str] = Counter()
    for ar in list(rep.controller.active.values()):
        for p in ar.job.placement:
            out[p.node] += len(p.gpus)
    return {n: k for n, k in out.items() if k}


def view_diff(cluster: Cluster, replicas: list[Replica], within_s: float) -> dict[str, Any]:
    """The leader's GPUs per node against the cluster's, sampled until equal or ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        rep = leader(replicas)
        theirs = cluster_gpus(cluster)
        ours = loop_gpus(rep) if rep is not None else {}
        diff = {n: (ours.get(n, 0), theirs.get(n, 0)) for n in set(ours) | set(theirs) if ours.get(n) != theirs.get(n)}
        if (rep is not None and not diff) or time.monotonic() > deadline:
            return {
                "leader": rep.name if rep else None,
                "mismatched_nodes": len(diff),
                "diff_loop_vs_cluster": dict(sorted(diff.items())[:10]),
                "gpus_in_use_cluster": sum(theirs.values()),
            }
        time.sleep(0.5)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(SEED)
    window = args.window
    scale = args.time_scale
    toleration_s = TOLERATION_S * scale
    run_s = (window / 30, window / 8)  # job run times
    lease_s = args.lease_duration
    apiserver._DEFAULTERS["pods"] = kwok_webhook(apiserver._DEFAULTERS["pods"])
    tmp = Path(tempfile.mkdtemp(prefix="k8s_chaos_"))
    cluster = Cluster(
        kubelet=KubeletConfig(default_duration_s=5.0, checkpoint_s=0.3),
        watch_history=200_000,
        node_lifecycle=NodeLifecycleConfig(time_scale=scale),
    ).start()
    recorder = Recorder(cluster)
    recorder.start()
    server = cluster.server
    nodes = node_names(args.nodes)

    def base() -> None:
        for ns in (*TEAMS, "gpufleet-system"):
            server.create_object(NAMESPACES, None, {"metadata": {"name": ns}})
        for i, n in enumerate(nodes):
            server.create_object(
                NODES,
                None,
                gpu_node(
                    n,
                    capacity_type="spot" if i % 5 == 4 else "on-demand",
                    labels={POOL: "ab"[i % 2]},
                    taints=[dict(DEDICATED)] if i == 1 else None,
                ),
            )

    cluster.call(base)
    jobs_client = cluster.api_client()
    jobs = JobController(jobs_client, interval_s=0.2).start()
    db = make_store(tmp / "store.db", dict.fromkeys(TEAMS, args.nodes * 8))
    proxies = [TcpProxy.for_cluster(cluster), TcpProxy.for_cluster(cluster)]
    dbs = [db, Database(f"sqlite:///{tmp / 'store.db'}")]
    replicas = [
        replica(name, d, p.url, tmp / name, lease_duration_s=lease_s)
        for name, d, p in zip(("replica-a", "replica-b"), dbs, proxies, strict=True)
    ]
    for r in replicas:
        r.controller.start()
    chaos = Chaos(cluster)

    n_adopted = max(1, args.jobs // 10)
    plan: list[tuple[float, str, Any]] = []  # (offset s, kind, body)
    for i in range(args.jobs):
        at = round(window * 0.7 * i / args.jobs, 2)
        if i % 10 == 5 and sum(1 for _, k, _ in plan if k == "adopted") < n_adopted:
            plan.append((at, "adopted", adopted_job(i, rng, run_s)))
        else:
            plan.append((at, "api", api_body(i, rng, run_s)))
    n_adopted = sum(1 for _, k, _ in plan if k == "adopted")
    api_names = [b["name"] for _, k, b in plan if k == "api"]
    adopted_owners = [f"{b['metadata']['namespace']}/{b['metadata']['name']}" for _, k, b in plan if k == "adopted"]

    # the faults: (offset s, action)
    blip = min(window * 0.05, toleration_s * 0.3)
    long_down = toleration_s * 1.5 + 2.0
    actions: list[tuple[float, str, Any]] = [
        (0.0, "faults_on", None),
        (0.10 * window, "cordon", (nodes[2], True)),
        (0.20 * window, "cordon", (nodes[2], False)),
        (0.55 * window, "cordon", (nodes[3], True)),
        (0.65 * window, "cordon", (nodes[3], False)),
        (0.15 * window, "ready", (nodes[4], False)),
        (0.15 * window + blip, "ready", (nodes[4], True)),
        (0.60 * window, "ready", (nodes[5 % len(nodes)], False)),
        (0.60 * window + blip, "ready", (nodes[5 % len(nodes)], True)),
        (0.25 * window, "ready", (nodes[6 % len(nodes)], False)),
        (0.25 * window + long_down, "ready", (nodes[6 % len(nodes)], True)),
        (0.45 * window, "remove", nodes[7 % len(nodes)]),
        (0.40 * window, "partition", None),
        (0.40 * window + 2 * lease_s, "heal", None),
    ]
    schedule = sorted([*plan, *actions], key=lambda x: x[0])
    both_leaders = 0
    leader_samples: Counter[str] = Counter()
    partitioned: TcpProxy | None = None
    chaos.t0 = t0 = time.monotonic()
    t_wall = time.time()
    for at, kind, body in schedule:
        while time.monotonic() - t0 < at:
            held = [r.name for r in replicas if r.controller.is_leader]
            both_leaders += len(held) > 1
            leader_samples[",".join(held) or "none"] += 1
            time.sleep(0.25)
        if kind == "api":
            submit_jobs(db, [body])
            for r in replicas:
                r.controller.wake()
        elif kind == "adopted":
            cluster.call(functools.partial(server.create_object, apiserver.JOBS, body["metadata"]["namespace"], body))
        elif kind == "faults_on":
            chaos.faults_on(SEED)
        elif kind == "cordon":
            chaos.cordon(*body)
        elif kind == "ready":
            chaos.ready(*body)
        elif kind == "remove":
            chaos.remove(body)
        elif kind == "partition":
            # the Lease's holder (the replicas' own beliefs may disagree: that is counted separately)
            lease_obj = cluster.call(lambda: server.peek(LEASES, "gpufleet-system", "gpufleet-scheduler")) or {}
            holder = (lease_obj.get("spec") or {}).get("holderIdentity")
            lead = next((r for r in replicas if r.name == holder), None)
            if lead is not None:
                partitioned = proxies[replicas.index(lead)]
                partitioned.cut()
                chaos.note(f"{lead.name} partitioned from the API server")
        elif kind == "heal" and partitioned is not None:
            partitioned.heal()
            chaos.note("partition healed")
    while time.monotonic() - t0 < window:
        held = [r.name for r in replicas if r.controller.is_leader]
        both_leaders += len(held) > 1
        leader_samples[",".join(held) or "none"] += 1
        time.sleep(0.25)
    chaos.faults_off()
    for p in proxies:
        p.heal()
    alive = {n["metadata"]["name"] for n in cluster.call(lambda: server.list_objects(NODES))}
    for n in nodes:
        if n in alive:
            chaos.cordon(n, False)
            chaos.ready(n, True)
    view_after_window = view_diff(cluster, replicas, 20.0)

    # -- drain --------------------------------------------------------------------------------------
    deadline = time.monotonic() + args.drain
    final: dict[str, JobRow] = {}
    while time.monotonic() < deadline:
        with db.session(readonly=True) as s:
            rows = list(s.query(JobRow).all())
            s.expunge_all()
        final = {r.id: r for r in rows}
        terminal = [r for r in rows if r.state in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")]
        if len(rows) >= args.jobs and len(terminal) == len(rows):
            break
        time.sleep(1.0)
    chaos.note("drained" if time.monotonic() < deadline else "drain timed out")
    view_at_end = view_diff(cluster, replicas, 10.0)
    time.sleep(1.0)  # the last writes land in the record
    lease = cluster.call(lambda: server.peek(LEASES, "gpufleet-system", "gpufleet-scheduler"))
    stopped = [stop_within(r.controller.stop, 30.0) for r in replicas]
    jobs.stop()

    # -- the counts ---------------------------------------------------------------------------------
    rows = list(final.values())
    by_name = Counter(r.name for r in rows if not (r.labels or {}).get(LABEL_ADOPTED_OWNER))
    by_owner = Counter(
        (r.labels or {}).get(LABEL_ADOPTED_OWNER) for r in rows if (r.labels or {}).get(LABEL_ADOPTED_OWNER)
    )
    ok_names = {r.name for r in rows if r.state == "SUCCEEDED" and not (r.labels or {}).get(LABEL_ADOPTED_OWNER)}
    ok_owners = {(r.labels or {}).get(LABEL_ADOPTED_OWNER) for r in rows if r.state == "SUCCEEDED"} - {None}
    lost = [n for n in api_names if n not in ok_names]
    lost_adopted = max(0, n_adopted - len(ok_owners))
    states = Counter(r.state for r in rows)

    catalog = load_catalog()
    rp = replay(list(recorder.events), None, catalog)
    per_index: Counter[tuple[str, int, int]] = Counter()
    run_spans: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for uid, pod in rp.last.items():
        if pod.job_id is None or pod.run is None:
            continue
        if uid in rp.ever_bound:
            per_index[(pod.job_id, pod.run, pod.completion_index or 0)] += 1
        if pod.started_at is not None:
            end = pod.finished_at or rp.deleted_at.get(uid) or time.time()
            s0, s1 = run_spans[pod.job_id].get(pod.run, (pod.started_at, end))
            run_spans[pod.job_id][pod.run] = (min(s0, pod.started_at), max(s1, end))
    overlapping = []
    for job_id, spans in run_spans.items():
        ordered = sorted(spans.values())
        if any(b[0] < a[1] - 1.0 for a, b in itertools.pairwise(ordered)):  # timestamps: whole seconds
            overlapping.append(job_id)
    overlap_detail = {
        j: {n: [round(a - t_wall, 1), round(b - t_wall, 1)] for n, (a, b) in sorted(run_spans[j].items())}
        for j in overlapping[:5]
    }

    ledger = ledger_checks(dbs[0], rp, t_wall)
    figures: dict[str, Any] = {
        "benchmark": "k8s_chaos",
        "shape": {"nodes": args.nodes, "jobs": args.jobs, "adopted": n_adopted, "window_s": window},
        "jobs_lost": len(lost) + lost_adopted,
        "jobs_lost_names": lost[:10],
        "jobs_not_succeeded": _not_succeeded(dbs[0], [r for r in rows if r.state != "SUCCEEDED"][:10], t_wall),
        "adopted_owners": adopted_owners[:3],
        "adopted_owner_labels": sorted(str(o) for o in ok_owners)[:3],
        "jobs_duplicated": sum(n - 1 for n in by_name.values() if n > 1)
        + sum(n - 1 for n in by_owner.values() if n > 1),
        "job_states": dict(states),
        "runs": sum(len(s) for s in run_spans.values()),
        "pods_rebound": len(rp.rebound),
        "pod_indexes_bound_twice": sum(1 for n in per_index.values() if n > 1),
        "jobs_with_two_runs_running_at_once": len(overlapping),
        "two_runs_at_once_examples": overlap_detail,
        "node_gpu_overcommit_writes": len(rp.violations),
        "gpu_view_after_window": view_after_window,
        "gpu_view_at_end": view_at_end,
        **ledger,
        "faults_injected": dict(Counter(s.outcome for s in server.faults.log if s.outcome != "served")),
        "requests_seen": len(server.faults.log),
        "kubelet_rejected": len(cluster.kubelet.rejected) if cluster.kubelet else None,
        "taint_evictions": len(cluster.node_lifecycle.evicted) if cluster.node_lifecycle else None,
        "pods_on_deleted_nodes_collected": len(recorder.orphans),
        "job_controller_errors": len(jobs.errors),
        "recorder_errors": [repr(e) for e in recorder.errors][:3],
        "lease_transitions": ((lease or {}).get("spec") or {}).get("leaseTransitions"),
        "samples_with_two_leaders": both_leaders,
        "leader_samples": dict(leader_samples),
        "controllers_stopped_in_s": stopped,
        "peak_rss_mib": round(rss_mib(), 1),
        "timeline": chaos.log,
    }
    for p in proxies:
        p.stop()
    try:
        cluster.stop()
    except BaseExceptionGroup as e:
        figures["substrate_errors"] = [repr(x) for x in e.exceptions][:5]
    jobs_client.close()  # type: ignore[no-untyped-call]
    for d in dbs:
        d.dispose()
    return figures


def ledger_checks(db: Database, rp: Any, t_wall: float) -> dict[str, Any]:
    """Usage segments against the pods' container times; per node, jobs + idle = node cost with
    idle ≥ 0, every segment inside the node's life, share units never over the node's GPUs."""
    with db.session(readonly=True) as s:
        segs = [(x.job_id, x.run, x.node, x.gpu_share_units, x.start, x.end) for x in s.query(UsageSegmentRow).all()]
        intervals = [(x.node, x.gpu_count, x.hourly_usd, x.start, x.end) for x in s.query(NodeIntervalRow).all()]
        runs = {(x.job_id, x.run): x.outcome for x in s.query(RunRow).all()}
    now = time.time()
    by_node: dict[str, list[tuple[int, float, float, float]]] = defaultdict(list)
    for node, gpus, usd, start, end in intervals:
        by_node[node].append((gpus, usd, start, end if end is not None else now))
    outside = overbooked = negative_idle = 0
    node_usd = jobs_usd = 0.0
    for _job, _run, node, units, start, end in segs:
        ivs = [iv for iv in by_node.get(node, []) if iv[2] - 1e-6 <= start and end <= iv[3] + 1e-6]
        if not ivs:
            outside += 1
            continue
        gpus, usd, _, _ = ivs[0]
        jobs_usd += units / SHARE_UNITS / max(gpus, 1) * usd * (end - start) / 3600
    for node, ivs in by_node.items():
        cost = sum(usd * (e - s0) / 3600 for _, usd, s0, e in ivs)
        node_usd += cost
        mine = [seg for seg in segs if seg[2] == node]
        used = 0.0
        for _job, _run, _, units, start, end in mine:
            iv = next((iv for iv in ivs if iv[2] - 1e-6 <= start and end <= iv[3] + 1e-6), None)
            if iv is not None:
                used += units / SHARE_UNITS / max(iv[0], 1) * iv[1] * (end - start) / 3600
        if cost - used < -1e-6:
            negative_idle += 1
        points = sorted([(x[4], x[3]) for x in mine] + [(x[5], -x[3]) for x in mine], key=lambda p: (p[0], p[1]))
        cap = max((iv[0] for iv in ivs), default=0) * SHARE_UNITS
        level = 0
        for _, delta in points:  # ends before starts at the same instant
            level += delta
            if level > cap:
                overbooked += 1
                break
    # segments against containers (each run: its pods' earliest start to latest end)
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for uid, pod in rp.last.items():
        if pod.job_id is None or pod.run is None or pod.started_at is None or uid not in rp.ever_bound:
            continue
        end = pod.finished_at or rp.deleted_at.get(uid)
        if end is None:
            continue
        s0, s1 = spans.get((pod.job_id, pod.run), (pod.started_at, end))
        spans[(pod.job_id, pod.run)] = (min(s0, pod.started_at), max(s1, end))
    off = []
    gpu_s_ledger = gpu_s_pods = 0.0
    for job_id, run, node, units, start, end in segs:
        span = spans.get((job_id, run))
        if span is None:
            if end - start > POLL_LAG_S:
                off.append(f"{job_id} r{run}: {end - start:.1f} s metered, no container ran")
            continue
        slack = 1.0 if runs.get((job_id, run)) in ("succeeded", "failed") else POLL_LAG_S
        if not (span[0] - slack <= start <= span[0] + slack and span[1] - slack <= end <= span[1] + slack):
            off.append(f"{job_id} r{run} on {node}: ledger [{start - t_wall:.1f}, {end - t_wall:.1f}] vs containers "
                       f"[{span[0] - t_wall:.1f}, {span[1] - t_wall:.1f}]")  # fmt: skip
        gpu_s_ledger += units / SHARE_UNITS * (end - start)
    for uid, pod in rp.last.items():
        if pod.started_at is not None and uid in rp.ever_bound and pod.job_id is not None:
            end = pod.finished_at or rp.deleted_at.get(uid)
            if end is not None:
                gpu_s_pods += pod_units(pod, rp.shapes[rp.ever_bound[uid]]) / SHARE_UNITS * (end - pod.started_at)
    return {
        "ledger_segments": len(segs),
        "ledger_segments_unlike_containers": len(off),
        "ledger_unlike_examples": off[:5],
        "ledger_segments_outside_node_life": outside,
        "ledger_nodes_overbooked": overbooked,
        "ledger_nodes_negative_idle": negative_idle,
        "ledger_node_cost_usd": round(node_usd, 4),
        "ledger_jobs_cost_usd": round(jobs_usd, 4),
        "ledger_idle_cost_usd": round(node_usd - jobs_usd, 4),
        "gpu_hours_ledger": round(gpu_s_ledger / 3600, 4),
        "gpu_hours_pods": round(gpu_s_pods / 3600, 4),
    }


def _not_succeeded(db: Any, rows: list[JobRow], t0: float) -> list[dict[str, Any]]:
    """What became of the jobs that did not succeed: state, reason, their transitions and runs."""
    from gpufleet.store import repo

    out = []
    with db.session(readonly=True) as s:
        for r in rows:
            events = [f"{e.time - t0:6.1f}s {e.old}->{e.new} {e.reason}"[:240] for e in repo.job_events(s, r.id)]
            out.append(
                {"name": r.name, "id": r.id, "state": r.state, "reason": (r.reason or "")[:300], "events": events}
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10 nodes, 40 jobs, a 60 s window, tolerations × 0.05")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--window", type=float, help="seconds of faults")
    ap.add_argument("--time-scale", type=float, help="multiplies the 300 s NotReady toleration")
    ap.add_argument("--lease-duration", type=float, help="the Lease's duration, s (3 to 300)")
    ap.add_argument("--drain", type=float, help="seconds the jobs may take to finish after the window")
    args = ap.parse_args()
    defaults = (10, 40, 60.0, 0.05, 15.0, 120.0) if args.quick else (50, 200, 600.0, 1.0, 15.0, 600.0)
    names = ("nodes", "jobs", "window", "time_scale", "lease_duration", "drain")
    for name, value in zip(names, defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.nodes < 8:
        ap.error("--nodes must be at least 8 (the faults need eight distinct nodes)")
    if args.jobs < 10:
        ap.error("--jobs must be at least 10")
    if not 3 <= args.lease_duration <= 300:
        ap.error("--lease-duration must be between 3 and 300 s")
    logs = LogCount()
    gpufleet_log = logging.getLogger("gpufleet")
    gpufleet_log.addHandler(logs)
    gpufleet_log.propagate = False  # counted, not printed
    figures = run(args)
    figures["gpufleet_log_records"] = dict(logs.counts.most_common(12))
    figures["gpufleet_first_errors"] = logs.errors
    figures["gpufleet_warnings"] = dict(sorted(logs.warnings.items(), key=lambda kv: -kv[1])[:12])
    print(json.dumps(figures), flush=True)


class LogCount(logging.Handler):
    """Counts gpufleet's warnings and errors by level and logger (the run prints one JSON object)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []  # the first distinct errors, with their exception's last line
        self.warnings: dict[str, int] = {}  # distinct warnings (numbers and names folded), counted

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.levelname} {record.name}"] += 1
        if record.levelno == logging.WARNING:
            import re

            shape = re.sub(r"\d+(\.\d+)?", "N", record.getMessage())
            shape = re.sub(r"j-[a-z0-9]{10}|gf-[a-z0-9-]+", "ID", shape)[:160]
            if shape in self.warnings or len(self.warnings) < 40:
                self.warnings[shape] = self.warnings.get(shape, 0) + 1
        if record.levelno >= logging.ERROR and len(self.errors) < 5:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                import traceback

                where = traceback.extract_tb(record.exc_info[2])[-3:]
                text += f": {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"[:300]
                frames = (f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in reversed(where))
                text += " at " + " < ".join(frames)
            if text not in self.errors:
                self.errors.append(text)


if __name__ == "__main__":
    main()
