"""The Kubernetes backend at scale (issue 22): what the leader costs the API server and itself in
steady state on a large cluster, on the test substrate (``tests/support/k8s``), in-process.

The cluster: ``--nodes`` 8-GPU A100 nodes (default 1,000) and ``--pods`` pods (default 20,000):
``--gpufleet`` of them gpufleet's (default 5,000, one GPU each), the rest foreign pods (services,
DaemonSet-like, CPU only) bound round-robin and run by the kubelet stand-in. gpufleet's jobs are
submitted through the API's own path into the SQLite store and launched by the loop; their Jobs and
pods are made in-process beforehand, as the Job controller would (the launch's create gets 409 and
takes the Job as its own, then the loop binds the pods), so the setup does not run a Job controller
over HTTP. ``--enders`` of the jobs get their pods only when the steady-state window opens, with run
times spread over the window: the loop binds them, the kubelet ends them, and the latency from the
container's end (the kubelet's status write, committed by the API server) to the loop's event for it
is measured.

One replica, assembled by the server's own code (``kubernetes_world`` from a kubeconfig: the
backend, the Lease leadership, the pod adopter; the pod-conditions duty), talks to the API server
through a TCP relay that counts the bytes it is served. During the window (``--window`` s, default
60) nothing else talks HTTP to the API server, so the server's request log is the leader's:
requests/s by verb (goal: watches only, no periodic full lists), bytes/s served, the controller
thread's CPU per loop turn (``time.thread_time`` around ``Controller.tick``; goal < 100 ms), a pod
end seen by the loop (goal < 1 s), and the process's peak RSS (server, kubelet and loop together).
Setup time is reported per phase. Prints one JSON object per metric; asserts nothing.

    python benchmarks/k8s_scale.py [--quick] [--nodes 1000] [--pods 20000] [--gpufleet 5000] [--window 60]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.k8s.apiserver import JOBS, NAMESPACES, NODES, PODS
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.fleetrun import (
    EventClock,
    PodEndWatch,
    TcpProxy,
    TickMeter,
    make_store,
    percentile,
    replica,
    rss_mib,
    stop_within,
    submit_jobs,
)
from tests.support.k8s.kubelet import DURATION_ANNOTATION, KubeletConfig, gpu_node

from gpufleet.backends.base import EventKind
from gpufleet.k8s.adapter.objects import batch_job
from gpufleet.model.job import GpuRequest

TEAMS = ("t0", "t1", "t2", "t3")
FOREIGN_NAMESPACES = ("apps", "batch", "monitoring")
TARGET_CPU_MS_PER_TICK = 100.0
TARGET_END_SEEN_S = 1.0
IMAGE = "ghcr.io/acme/train:1.4"
CHUNK = 500  # objects created per call on the cluster's loop (the kubelet runs between calls)


def emit(metric: str, value: Any, unit: str, **extra: Any) -> None:
    row = {"benchmark": "k8s_scale", "metric": metric, "value": value, "unit": unit, **extra}
    print(json.dumps(row), flush=True)


def foreign_pod(i: int, node: str) -> dict[str, Any]:
    ns = FOREIGN_NAMESPACES[i % len(FOREIGN_NAMESPACES)]
    return {
        "metadata": {"name": f"svc-{i:05d}", "namespace": ns, "labels": {"app": f"svc-{i % 97}"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "main", "image": "nginx:1.25", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
            ],
        },
    }


def job_pod(job: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    """Pod 0 of a Job as the Job controller makes it (labels, the index, a controller reference)."""
    meta, template = job["metadata"], job["spec"]["template"]
    tmeta = template.get("metadata") or {}
    index = "batch.kubernetes.io/job-completion-index"
    return {
        "metadata": {
            "name": f"{meta['name']}-0-{meta['uid'][:5]}",
            "namespace": meta["namespace"],
            "labels": {
                **(tmeta.get("labels") or {}),
                "batch.kubernetes.io/job-name": meta["name"],
                "batch.kubernetes.io/controller-uid": meta["uid"],
                index: "0",
            },
            "annotations": {**(tmeta.get("annotations") or {}), index: "0", **annotations},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True}
            ],
        },
        "spec": template["spec"],
    }


def run(args: argparse.Namespace) -> None:
    setup: dict[str, float] = {}
    t = time.perf_counter()

    def phase_done(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        setup[name] = round(now - t, 1)
        t = now

    tmp = Path(tempfile.mkdtemp(prefix="k8s_scale_"))
    cluster = Cluster(
        kubelet=KubeletConfig(admission=False, start_delay_s=0.05),  # admission lists a node's pods: O(pods)
        schema_version=None,  # OpenAPI validation of 40,000 writes: setup time only
        watch_history=5000,
        node_lifecycle=None,
    ).start()
    proxy = TcpProxy.for_cluster(cluster)
    server = cluster.server
    nodes = [f"gpu-{i:04d}" for i in range(args.nodes)]
    foreign = args.pods - args.gpufleet

    def base() -> None:
        for ns in (*TEAMS, *FOREIGN_NAMESPACES, "gpufleet-system"):
            server.create_object(NAMESPACES, None, {"metadata": {"name": ns}})
        for n in nodes:
            server.create_object(NODES, None, gpu_node(n))

    cluster.call(base, timeout=600)
    phase_done("nodes_s")
    for start in range(0, foreign, CHUNK):

        def make(start: int = start) -> None:
            for i in range(start, min(foreign, start + CHUNK)):
                body = foreign_pod(i, nodes[i % len(nodes)])
                server.create_object(PODS, body["metadata"]["namespace"], body)

        cluster.call(make, timeout=600)
    phase_done("foreign_pods_s")

    db = make_store(tmp / "store.db", dict.fromkeys(TEAMS, args.nodes * 8))
    bodies: list[dict[str, Any]] = [
        {
            "name": f"train-{i:05d}",
            "team": TEAMS[i % len(TEAMS)],
            "command": ["python", "train.py"],
            "image": IMAGE,
            "gpus": 1,
            "estimated_runtime_s": 3600.0,
        }
        for i in range(args.gpufleet)
    ]
    ids = submit_jobs(db, bodies)
    phase_done("submit_s")
    enders = set(ids[:: max(1, len(ids) // args.enders)][: args.enders])
    jobs: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), CHUNK):

        def launch(start: int = start) -> None:
            for job_id, body in zip(ids[start : start + CHUNK], bodies[start : start + CHUNK], strict=True):
                spec = batch_job(
                    job_id,
                    1,
                    namespace=body["team"],
                    image=IMAGE,
                    command=body["command"],
                    gpu=GpuRequest(1, 1000),
                    gpu_resource="nvidia.com/gpu",
                    team=body["team"],
                )
                job = server.create_object(JOBS, body["team"], spec)
                jobs[job_id] = job
                if job_id not in enders:
                    pod = job_pod(job, {})
                    server.create_object(PODS, body["team"], pod)

        cluster.call(launch, timeout=600)
    phase_done("jobs_and_pods_s")

    rep = replica("leader", db, proxy.url, tmp / "leader")
    ticks = TickMeter(rep.controller)
    clock = EventClock(rep.backend)
    rep.controller.start()
    want = foreign + args.gpufleet - len(enders)
    running = 0
    deadline = time.monotonic() + args.setup_timeout
    while time.monotonic() < deadline:
        running = cluster.call(lambda: server.count_objects(PODS, field_selector="status.phase=Running"), 120)
        if running >= want:
            break
        time.sleep(5)
    phase_done("loop_binds_s")
    if running < want:
        emit("setup_timed_out", True, "bool", running_pods=running, wanted=want, setup_s=setup)
    time.sleep(max(2.0, 3 * rep.controller.config.poll_interval_s))  # the loop has seen them run
    phase_done("settle_s")
    # The substrate (API server, kubelet, 20,000 pods and their history) shares this process: a
    # full collection walks all of it (~11 M objects, ~2.4 s), and is charged to whichever thread
    # allocates, often the leader's tick. What exists now is frozen out of collection, so the ticks
    # measure gpufleet's own work; the collections during the window are reported.
    gc.collect()
    gc.freeze()
    pauses: list[tuple[int, float]] = []
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - gc_started[0]))

    gc.callbacks.append(on_gc)

    # -- the steady-state window ----------------------------------------------------------------------
    ends = PodEndWatch(cluster).start()
    log_from = len(server.faults.log)
    down0, up0 = proxy.bytes_down, proxy.bytes_up
    t0 = time.monotonic()
    spread = args.window * 0.7

    def ender_pods() -> None:
        for k, job_id in enumerate(sorted(enders)):
            job = jobs[job_id]
            duration = round(1.0 + spread * (k + 1) / (len(enders) + 1), 2)
            server.create_object(PODS, job["metadata"]["namespace"], job_pod(job, {DURATION_ANNOTATION: str(duration)}))

    cluster.call(ender_pods, timeout=120)
    time.sleep(args.window)
    t1 = time.monotonic()
    window_s = t1 - t0
    requests = [s for s in list(server.faults.log)[log_from:] if t0 <= s.at <= t1]
    by_verb = Counter(s.verb for s in requests)
    by_call = Counter(f"{s.verb} {s.resource}" for s in requests)
    down, up = proxy.bytes_down - down0, proxy.bytes_up - up0
    leader_ticks = ticks.between(t0, t1)
    cpu_ms = [x.cpu_s * 1000 for x in leader_ticks]
    wall_ms = [x.wall_s * 1000 for x in leader_ticks]
    lat = [
        clock.seen[(j, 1, EventKind.SUCCEEDED.value)] - ends.ends[(j, 1)]
        for j in enders
        if (j, 1) in ends.ends and (j, 1, EventKind.SUCCEEDED.value) in clock.seen
    ]
    missed = sum(1 for j in enders if (j, 1) in ends.ends and (j, 1, EventKind.SUCCEEDED.value) not in clock.seen)

    shape = {"nodes": args.nodes, "pods": args.pods, "gpufleet_pods": args.gpufleet, "window_s": round(window_s, 1)}
    emit("shape", shape, "count")
    emit("setup_s", setup, "s", total=round(sum(setup.values()), 1))
    emit("requests_per_s", round(len(requests) / window_s, 2), "req/s")
    emit("requests_per_s_by_verb", {v: round(n / window_s, 2) for v, n in sorted(by_verb.items())}, "req/s")
    emit("requests_by_call", dict(sorted(by_call.items())), "count")
    emit("full_lists_per_s", round(by_verb.get("list", 0) / window_s, 2), "req/s", goal=0)
    emit("bytes_served_per_s", round(down / window_s), "B/s", total_mib=round(down / 2**20, 1), sent_b=up)
    emit(
        "leader_cpu_ms_per_tick",
        {"p50": _r(percentile(cpu_ms, 50)), "p95": _r(percentile(cpu_ms, 95)), "max": _r(max(cpu_ms, default=None))},
        "ms",
        ticks=len(cpu_ms),
        goal=TARGET_CPU_MS_PER_TICK,
        leader_cpu_share=round(sum(cpu_ms) / 1000 / window_s, 3),
    )
    emit(
        "leader_wall_ms_per_tick",
        {"p50": _r(percentile(wall_ms, 50)), "p95": _r(percentile(wall_ms, 95)), "max": _r(max(wall_ms, default=None))},
        "ms",
    )
    emit(
        "pod_end_seen_s",
        {"p50": _r(percentile(lat, 50), 3), "p95": _r(percentile(lat, 95), 3), "max": _r(max(lat, default=None), 3)},
        "s",
        ends=len(ends.ends),
        seen=len(lat),
        not_seen_in_window=missed,
        goal=TARGET_END_SEEN_S,
    )
    gc.callbacks.remove(on_gc)
    emit(
        "gc_pauses_in_window",
        {
            "count": len(pauses),
            "gen2": sum(1 for g, _ in pauses if g == 2),
            "max_ms": _r(max((d * 1000 for _, d in pauses), default=None)),
        },
        "ms",
        frozen_objects=gc.get_freeze_count(),
    )
    emit("peak_rss_mib", round(rss_mib(), 1), "MiB", python_blocks=sys.getallocatedblocks())
    emit("watch_errors", [repr(e) for e in ends.errors][:3], "list")
    emit("controller_stopped_in_s", stop_within(rep.controller.stop, 30.0), "s")
    proxy.stop()
    try:
        cluster.stop()
    except BaseExceptionGroup as e:  # reported, never raised: a benchmark reports
        emit("substrate_errors", [repr(x) for x in e.exceptions][:5], "list")
    db.dispose()


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="50 nodes, 1,000 pods (250 gpufleet's), a 10 s window")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--pods", type=int)
    ap.add_argument("--gpufleet", type=int, help="of --pods, gpufleet's (one GPU each)")
    ap.add_argument("--enders", type=int, help="gpufleet's pods that end during the window")
    ap.add_argument("--window", type=float, help="steady-state seconds measured")
    ap.add_argument("--setup-timeout", type=float, default=1800.0, help="seconds the loop may take to bind")
    args = ap.parse_args()
    defaults = (50, 1000, 250, 5, 10.0) if args.quick else (1000, 20000, 5000, 20, 60.0)
    for name, value in zip(("nodes", "pods", "gpufleet", "enders", "window"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if not 0 < args.gpufleet <= args.pods or args.gpufleet > args.nodes * 8:
        ap.error("--gpufleet must be within --pods and fit --nodes × 8 GPUs")
    if not 0 < args.enders <= args.gpufleet:
        ap.error("--enders must be between 1 and --gpufleet")
    logging.basicConfig(level=logging.ERROR)
    run(args)


if __name__ == "__main__":
    main()
