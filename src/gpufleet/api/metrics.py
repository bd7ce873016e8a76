"""Prometheus metrics, one :class:`CollectorRegistry` per app (never the global one: tests and
embedders create many apps in one process).

Per request only counters and a histogram observation are touched (labelled by route template, so
``/v1/jobs/{job_id}`` is one series). Store-derived gauges (jobs by state and team, queue length,
GPUs allocated and total) are computed when Prometheus scrapes, with a few aggregate queries (store
functions of :mod:`gpufleet.store.repo`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.context import ApiContext
from gpufleet.store import repo

log = logging.getLogger(__name__)

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    """The app's registry and the instruments the request path updates."""

    def __init__(self, ctx: ApiContext) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "gpufleet_http_requests",
            "HTTP requests answered, by method, route template and status",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpufleet_http_request_duration_seconds",
            "Time to answer an HTTP request (to the response start for streams)",
            ("method", "route"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.submits = Counter(
            "gpufleet_job_submits",
            "Jobs created through the API (idempotent replays not counted), by team",
            ("team",),
            registry=self.registry,
        )
        self.registry.register(StoreCollector(ctx))


class StoreCollector(Collector):
    """Gauges read from the store at scrape time."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx

    def describe(self) -> Iterable[Metric]:
        return []  # computed at scrape time; nothing to describe up front (no store query on register)

    def collect(self) -> Iterable[Metric]:
        jobs = GaugeMetricFamily("gpufleet_jobs", "Jobs by state and team", labels=("state", "team"))
        queue = GaugeMetricFamily("gpufleet_queue_length", "Jobs waiting (the leader's last published queue)")
        allocated = GaugeMetricFamily("gpufleet_gpus_allocated", "GPU-equivalents held by running jobs")
        total = GaugeMetricFamily("gpufleet_gpus_capacity", "GPUs on nodes that are not removed")
        up = GaugeMetricFamily("gpufleet_store_up", "1 if the store answered this scrape")
        try:
            with self._ctx.database.session() as s:
                pending = 0
                for state, team, n in repo.job_counts(s):
                    jobs.add_metric([state, team], n)
                    if state == "PENDING":
                        pending += n
                leader = repo.leader(s, self._ctx.clock.now())
                queue.add_metric([], len(leader.queue) if leader is not None else pending)
                total.add_metric([], float(repo.gpu_capacity(s)))
                allocated.add_metric([], sum(_held(p) for p in repo.open_run_placements(s)))
            up.add_metric([], 1)
        except Exception:  # a scrape must not fail because the store is down: say so instead
            log.warning("metrics: the store did not answer", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        yield from (jobs, queue, allocated, total, up)


def _held(placement: Any) -> float:
    """GPU-equivalents of one run's placement JSON ``[{node, gpus, milli, mig_mask}]``."""
    total = 0.0
    for pod in placement or ():
        total += len(pod.get("gpus") or ()) * float(pod.get("milli", 1000)) / 1000.0
    return total


class MetricsMiddleware:
    """Pure ASGI middleware (cheaper than ``BaseHTTPMiddleware``): count and time each request by
    the route template the router matched (``scope["route"]``), ``<unmatched>`` for unknown paths."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        observed = False

        async def send_wrapper(message: Message) -> None:
            nonlocal observed
            if message["type"] == "http.response.start" and not observed:
                observed = True
                self._observe(scope, message["status"], started)
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except BaseException:
            if not observed:
                self._observe(scope, 500, started)
            raise

    def _observe(self, scope: Scope, status: int, started: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "<unmatched>"
        method = scope.get("method", "")
        self.metrics.requests.labels(method, template, str(status)).inc()
        self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)
