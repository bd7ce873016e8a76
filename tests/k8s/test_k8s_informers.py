"""Issue 22, observations 2 and 11: the backend read the cluster by listing it on every poll.

Before: ``poll()`` listed every node and every gpufleet pod each time (5.8 requests/s with 2 nodes and
4 jobs; at 20,000 pods one list is ~80 MB); ``recover()`` listed every gpufleet pod once per active
job; one failed list was an error of the whole step. Now the backend reads informers' caches (list
once, then watch from the resourceVersion; 410 → list again; failures back off and keep the cache),
and calls the API server to write.

Reads are counted on the client the backend shares with the Job controller stand-in (by their URL:
gpufleet's pods are those with its job-id label), faults injected through the cluster's fault plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpufleet.backends.base import EventKind, RecoveredState
from gpufleet.k8s.adapter.backend import KubernetesBackend, KubernetesOptions
from tests.support.k8s.backendworld import NS, World, ended


def _reads(client: Any) -> list[str]:
    """Every GET that is not a watch (a list or a read) ``client`` sends from now on, by its URL."""
    seen: list[str] = []
    rest = client.rest_client
    inner = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "GET" and "watch=true" not in url:
            seen.append(url)
        return inner(method, url, *args, **kwargs)

    rest.request = request
    return seen


def _pod_lists(urls: list[str]) -> list[str]:
    return [u for u in urls if "/pods?" in u and "labelSelector=gpufleet.io" in u]


def _node_lists(urls: list[str]) -> list[str]:
    return [u for u in urls if "/api/v1/nodes" in u]


def test_a_steady_cluster_is_watched_not_listed(make_world: Callable[..., World]) -> None:
    """Two nodes, four running jobs, 3 s of polling every 0.2 s: no list after the first."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    for i, node in enumerate(("gpu-a", "gpu-a", "gpu-b", "gpu-b")):
        w.backend.launch(w.request(f"steady-{i}", node))
    for i in range(4):
        w.running(f"steady-{i}")
    reads = _reads(w.client)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:
        assert w.backend.poll() == []
        time.sleep(0.2)
    assert _node_lists(reads) == []  # before: one list of nodes per poll (15 here)
    assert _pod_lists(reads) == []  # before: one list of gpufleet's pods per poll


def test_recovery_lists_once_for_every_active_run(make_world: Callable[..., World]) -> None:
    """Before: one full pod list per active job (2,000 jobs x 3.6 s ≈ 2 h without renewing the lease)."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    jobs = [f"r{i}" for i in range(12)]
    for i, job in enumerate(jobs):
        w.backend.launch(w.request(job, "gpu-a" if i % 2 else "gpu-b"))
    for job in jobs:
        w.running(job)
    reads = _reads(w.client)
    restarted = KubernetesBackend(w.client)
    try:
        restarted.inventory()
        states = [restarted.recover(job, 1).state for job in jobs]
    finally:
        restarted.close()
    assert states == [RecoveredState.RUNNING] * len(jobs)
    assert len(_pod_lists(reads)) == 1  # before: 12, one per active run


def test_a_run_of_500s_neither_fails_the_poll_nor_forgets_the_cluster(make_world: Callable[..., World]) -> None:
    """4 s of 500s on every list and watch: ``poll()`` raises nothing and reports no node gone; once the
    API server is well again, a run's end is seen."""
    w = make_world(duration_s=8.0)
    w.backend.inventory()
    w.backend.launch(w.request("calm", "gpu-a"))
    w.running("calm")
    plan = w.cluster.server.faults
    for verb in ("list", "watch"):
        for resource in ("pods", "nodes"):
            plan.add(verb=verb, resource=resource, status=500)
    w.cluster.call(w.cluster.server.end_watches)  # the open watches break (an API server restart)
    events = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 4.0:
        events += w.backend.poll()  # before: a BackendError out of poll(): the step failed
        time.sleep(0.2)
    plan.clear()
    assert events == []
    assert w.backend.node("gpu-a") is not None and w.backend.node("gpu-b") is not None
    got = w.until(ended("calm", EventKind.SUCCEEDED), timeout=30)
    assert [e.kind for e in got if e.job_id == "calm"] == [EventKind.SUCCEEDED]


def test_a_watch_that_fell_out_of_the_history_lists_again(make_world: Callable[..., World]) -> None:
    """410 Expired: the informer lists again and the cache has what happened meanwhile."""
    w = make_world(duration_s=0.3)
    w.backend.inventory()
    w.backend.poll()
    plan = w.cluster.server.faults
    plan.add(verb="watch", resource="pods", status=503)  # the pod watch is down for a while
    w.cluster.call(w.cluster.server.end_watches)
    w.backend.launch(w.request("meanwhile", "gpu-a"))
    time.sleep(0.5)
    w.cluster.call(w.cluster.server.compact)  # etcd compacted past the informer's resourceVersion
    reads = _reads(w.client)
    plan.clear()
    got = w.until(ended("meanwhile", EventKind.SUCCEEDED), timeout=30)
    assert [e.kind for e in got if e.job_id == "meanwhile"] == [EventKind.SUCCEEDED]
    assert _pod_lists(reads)  # listed again after the 410


def test_a_binding_the_cache_has_not_shown_yet_is_not_a_lost_run(make_world: Callable[..., World]) -> None:
    """The pod watch lags behind our binding (a slow watch): the run is bound, not lost, and not
    bound twice."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("lagged", "gpu-a"))
    w.cluster.wait_for(lambda: bool(w.pods("lagged")), timeout=10, what="the Job's pod")
    w.cluster.wait_for(lambda: bool(w.backend.pod_cache.by_index("lagged")), timeout=10, what="the pod in the cache")
    plan = w.cluster.server.faults
    plan.add(verb="watch", resource="pods", delay_s=3.0)  # the next pod watch answers late
    w.cluster.call(w.cluster.server.end_watches)
    events = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:
        events += w.backend.poll()
        time.sleep(0.1)
    plan.clear()
    assert [e for e in events if e.job_id == "lagged"] == []
    assert len(plan.seen(verb="create", resource="pods/binding")) == 1
    w.running("lagged")


def _jobs(w: World) -> list[str]:
    import kubernetes.client

    return [j.metadata.name for j in kubernetes.client.BatchV1Api(w.client).list_namespaced_job(NS).items]


def test_a_finished_run_leaves_no_job_behind_once_its_end_was_reported(make_world: Callable[..., World]) -> None:
    """Observation 11: succeeded Jobs were never deleted, so every list (and now every watch cache)
    grew for ever. A run's Job goes ``keep_finished_s`` after the poll that reported its end (the
    loop has stored the end by then; the pods' logs stay readable meanwhile)."""
    w = make_world(duration_s=0.3)
    w.backend.options = KubernetesOptions(keep_finished_s=0.5)  # (default: 10 minutes, for the logs)
    w.backend.inventory()
    w.backend.launch(w.request("done", "gpu-a"))
    w.until(ended("done", EventKind.SUCCEEDED), timeout=30)
    assert _jobs(w) == ["gf-done-r1"]  # its end was just reported: kept a while (its logs)
    w.backend.poll()
    assert _jobs(w) == ["gf-done-r1"]
    time.sleep(0.6)
    w.backend.poll()
    w.cluster.wait_for(lambda: _jobs(w) == [] and w.pods("done") == [], timeout=10, what="the Job and its pod gone")


def test_a_watch_stopped_while_it_opened_never_goes_back_to_the_shared_pool(make_world: Callable[..., World]) -> None:
    """CI (stop 30): an informer stopped while its watch was being opened (a slow API server) put
    the watch's connection back into the client's pool when the answer came; the server went on
    streaming on it, and the next request the client sent on that connection (the Job controller's
    list) read a watch event as its answer (``BadStatusLine('944\\r\\n')``) — or, with no event, waited
    for the watch's end. A watch not read to its end closes its connection."""
    import kubernetes.client

    from gpufleet.k8s.adapter.informer import Informer

    w = make_world(duration_s=None)
    core = kubernetes.client.CoreV1Api(w.client)
    plan = w.cluster.server.faults
    plan.add(verb="watch", resource="pods", delay_s=1.0)  # its watch answers late
    cache: Informer[dict[str, Any]] = Informer("pods (test)", core.list_pod_for_all_namespaces, lambda obj: obj)
    cache.start()
    w.cluster.wait_for(lambda: cache.watches >= 1, timeout=10, interval=0.02, what="the watch asked for")
    cache.stop(timeout=5.0)  # while that watch waits for its answer
    assert not cache.running
    plan.clear()
    t0 = time.monotonic()
    for _ in range(3):  # the pool hands out its most recently returned connection first
        core.list_namespaced_pod(NS, _request_timeout=(2.0, 2.0))
    assert time.monotonic() - t0 < 3.0


def test_a_followed_log_left_early_never_goes_back_to_the_shared_pool(make_world: Callable[..., World]) -> None:
    """The same for ``gpufleet logs -f`` left while the container still writes: the followed log's
    connection went back into the pool with the server still streaming on it."""
    import threading

    import kubernetes.client

    from gpufleet.k8s.adapter.logs import PodLogs

    w = make_world(duration_s=None, log_every_s=1.0)  # quiet between two lines
    w.backend.inventory()
    w.backend.launch(w.request("chatty", "gpu-a"))
    w.running("chatty")
    cancelled = threading.Event()
    stream = PodLogs(w.client).follow("chatty", 0, lambda: True, cancelled)
    first = next(stream)
    assert first  # the pod's header
    while b"step" not in next(stream):
        pass
    stream.close()  # the reader went away (the HTTP client of `logs -f` hung up)
    core = kubernetes.client.CoreV1Api(w.client)
    t0 = time.monotonic()
    for _ in range(3):
        core.list_namespaced_pod(NS, _request_timeout=(2.0, 2.0))
    assert time.monotonic() - t0 < 3.0
