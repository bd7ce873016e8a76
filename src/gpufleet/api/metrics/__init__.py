"""Prometheus metrics, one :class:`CollectorRegistry` per app (never the global one: tests and
embedders create many apps in one process). The catalog, with example PromQL, is docs/metrics.md.

Two endpoints, two registries:

- ``/metrics`` (:attr:`ApiMetrics.registry`): gpufleet's own series, OpenCost's cost series and the
  scheduler's — everything ``promtool check metrics`` accepts;
- ``/metrics/dcgm`` (:attr:`ApiMetrics.dcgm_registry`): the DCGM exporter's series for the GPUs of
  the server's own node (local backend), with the exporter's own label names (``UUID``,
  ``modelName``, ``Hostname``), which promtool's linter rejects as camelCase — so they are served
  apart, as a separate exporter would be (one more scrape job). On a Kubernetes cluster the DCGM
  exporter publishes these series itself; gpufleet does not repeat them.

What the request path touches: counters and a histogram observation (labelled by route template,
so ``/v1/jobs/{job_id}`` is one series). The scheduling cycle's duration is observed by the
controller through :meth:`ApiMetrics.observe_cycle` when it runs in the same process
(``Server.app()`` wires it); a standby replica or an API worker process has no cycle samples.
Everything else is read from the store when Prometheus scrapes (:mod:`gpufleet.api.metrics.collectors`;
the families by kind in :mod:`~gpufleet.api.metrics.scheduler`, :mod:`~gpufleet.api.metrics.nodes`,
:mod:`~gpufleet.api.metrics.cost` and :mod:`~gpufleet.api.metrics.dcgm`), so every replica answers the same.

Who sees what (:mod:`gpufleet.api.metrics.audience`): both endpoints take a bearer token, optionally.
Without one a scrape gets cluster totals (no job, team, namespace, project, pod or budget label);
a member's or viewer's token its own team's series; an admin token (Prometheus') every series.
An invalid token is a 401.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.auth import Principal, optional_principal
from gpufleet.api.context import ApiContext
from gpufleet.api.metrics.audience import ANONYMOUS, EVERYTHING, Audience, restrict
from gpufleet.api.metrics.collectors import StoreCollector
from gpufleet.api.metrics.dcgm import DcgmCollector

__all__ = [
    "ANONYMOUS",
    "EVERYTHING",
    "ApiMetrics",
    "Audience",
    "DcgmCollector",
    "MetricsMiddleware",
    "StoreCollector",
    "dcgm_router",
]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _CycleCollector(Collector):
    """The scheduling cycle's duration histogram, exposed only once a cycle was observed in this
    process (a standby replica or an API worker never shows an empty one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._observed = False
        self.histogram = Histogram(
            "gpufleet_scheduler_cycle_duration_seconds",
            "Duration of the scheduling cycles this process ran as the leader (placement, preemption, "
            "binding); no samples on a standby replica or an API worker",
            buckets=CYCLE_BUCKETS,
            registry=None,
        )

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._observed = True
        self.histogram.observe(max(0.0, seconds))

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        if self._observed:
            yield from self.histogram.collect()


class _Families:
    """A ready list of families, in the shape :func:`generate_latest` reads (``collect()``)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


class ApiMetrics:
    """The app's registries and the instruments the request path and the controller update."""

    def __init__(self, ctx: ApiContext) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "gpufleet_http_requests",
            "HTTP requests answered, by method (GET, POST, ...), route (the route template, or "
            "<unmatched>) and status (the HTTP status code)",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpufleet_http_request_duration_seconds",
            "Time to answer an HTTP request (to the response start for streams), by method and route template",
            ("method", "route"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.submits = Counter(
            "gpufleet_job_submits",
            "Jobs created through this process's API (idempotent replays not counted), by team",
            ("team",),
            registry=self.registry,
        )
        self.cycles = _CycleCollector()
        self.registry.register(self.cycles)
        self.store = StoreCollector(ctx)
        self.registry.register(self.store)
        self.dcgm_registry = CollectorRegistry(auto_describe=True)
        self.dcgm = DcgmCollector(ctx)
        self.dcgm_registry.register(self.dcgm)

    def observe_cycle(self, seconds: float) -> None:
        """One scheduling cycle took ``seconds`` (the controller's hook)."""
        self.cycles.observe(seconds)

    def exposition(self, audience: Audience = EVERYTHING) -> bytes:
        """``/metrics`` as ``audience`` sees it (the text format)."""
        if audience.everything:
            return generate_latest(self.registry)
        families = [
            *self.requests.collect(),
            *self.latency.collect(),
            *self.submits.collect(),
            *self.cycles.collect(),
        ]
        store, owners = self.store.collect_owned()
        view = restrict([*families, *store], audience, owners, self.store.high_water)
        return generate_latest(_Families(view))

    def dcgm_exposition(self, audience: Audience = EVERYTHING) -> bytes:
        """``/metrics/dcgm`` as ``audience`` sees it."""
        if audience.everything:
            return generate_latest(self.dcgm_registry)
        return generate_latest(_Families(self.dcgm.collect_for(audience)))


dcgm_router = APIRouter(tags=["system"])


@dcgm_router.get(
    "/metrics/dcgm",
    summary="DCGM exporter metrics of the server's own GPUs",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}},
        401: {"description": "An invalid bearer token (no token: no pod is named)"},
    },
    openapi_extra={"security": [{}]},  # the token is optional (FastAPI lists it as required)
)
def dcgm_metrics(request: Request, who: Annotated[Principal | None, Depends(optional_principal)]) -> Response:
    """``DCGM_FI_DEV_*`` of the local backend's GPUs from their latest stored telemetry sample. The
    ``pod``/``namespace``/``container`` of a run holding a GPU are shown to an admin token and to
    the run's own team's tokens; without a token no holder is named."""
    metrics: ApiMetrics = request.app.state.metrics
    return Response(content=metrics.dcgm_exposition(Audience.of(who)), media_type=CONTENT_TYPE_LATEST)


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
