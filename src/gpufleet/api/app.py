"""The FastAPI application: ``create_app(ctx)``.

Endpoints doing store work are plain ``def`` (run in the threadpool, so a query never blocks the
event loop); the auth dependency is ``async`` so a cached token costs no thread hop.

A request body larger than ``ctx.max_body_bytes`` (default 1 MiB; the server setting
``max_body_bytes``) is refused with a 413 problem (code ``payload_too_large``) by
:class:`BodyLimitMiddleware`: at once when ``Content-Length`` says so, else as soon as the streamed
(chunked) bytes pass the limit — the body is never buffered whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import gpufleet
from gpufleet.api import problems
from gpufleet.api.auth import TokenCache
from gpufleet.api.context import ApiContext
from gpufleet.api.docs import install as install_docs
from gpufleet.api.metrics import ApiMetrics, MetricsMiddleware, dcgm_router
from gpufleet.api.routes import allocation, budgets, insights, jobs, logs, nodes, queue, system, teams, tokens, usage
from gpufleet.api.routes import proposals as proposal_routes
from gpufleet.api.ui import install as install_ui
from gpufleet.wire import (
    CostLineOut,
    FieldError,
    JobEventOut,
    JobOut,
    JobPage,
    JobSubmit,
    NodeOut,
    Problem,
    QueueEntry,
    TeamIn,
    TeamOut,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UsageReport,
    WhoAmI,
)

# Every wire model, so the OpenAPI document describes all of them (SDK generators rely on it).
WIRE_MODELS = (
    JobSubmit,
    JobOut,
    JobPage,
    JobEventOut,
    QueueEntry,
    NodeOut,
    TeamIn,
    TeamOut,
    TokenCreate,
    TokenOut,
    TokenCreated,
    WhoAmI,
    CostLineOut,
    UsageReport,
    FieldError,
    Problem,
)


class BodyTooLargeError(StarletteHTTPException):
    """Raised from ``receive`` when a streamed body passes the limit (FastAPI re-raises HTTP errors,
    so the problem handler answers it as a 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, detail=_too_large(limit))


def _too_large(limit: int) -> str:
    return f"the request body is larger than the limit of {limit} bytes (max_body_bytes)"


class BodyLimitMiddleware:
    """Pure ASGI middleware refusing request bodies over ``max_bytes`` with a 413 problem document:
    by ``Content-Length`` before anything is read, and by counting the bytes of a body streamed
    without one (``Transfer-Encoding: chunked``)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.strip().isdigit() and int(value) > limit:
                response = problems.problem_response(
                    413,
                    "payload_too_large",
                    _too_large(limit),
                    instance=scope.get("path"),
                    errors=[FieldError(field="body", message=_too_large(limit))],
                    headers={"Connection": "close"},
                )
                await response(scope, receive, send)
                return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLargeError(limit)
            return message

        await self.app(scope, counted, send)


def _version() -> str:
    return str(getattr(gpufleet, "__version__", "0.1.0"))


def create_app(ctx: ApiContext) -> FastAPI:
    """The REST API over ``ctx`` (one per process; tests make many — nothing global is shared)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = ctx.worker_threads
        yield

    app = FastAPI(
        lifespan=lifespan,
        title="gpufleet",
        version=_version(),
        summary="Cost-aware GPU scheduler: jobs, queue, nodes, teams, tokens and usage",
        description="Every error is an RFC 9457 problem document (`application/problem+json`).",
        docs_url=None,  # /docs comes from gpufleet.api.docs, with bundled assets (no CDN)
        redoc_url=None,  # ReDoc's bundle always fetches its logo from a CDN
    )
    app.state.ctx = ctx
    app.state.token_cache = TokenCache(ctx.auth_cache_s, ctx.revocations_file)
    app.state.log_follows = logs.FollowSlots(ctx.log_follows_per_token, ctx.log_follows_total)
    app.state.metrics = ApiMetrics(ctx)
    problems.install(app)
    # Routers carry their full ``/v1/...`` prefix themselves so each route's ``path`` is the
    # template the metrics label requests with.
    for module in (jobs, logs, queue, nodes, teams, tokens, usage):
        app.include_router(module.router)
    app.include_router(insights.router)  # progress, forecasts, anomalies, recommendations, ROI
    app.include_router(budgets.router)  # /v1/budgets
    app.include_router(proposal_routes.router)  # /v1/proposals: agents propose, people approve
    app.include_router(allocation.router)  # /allocation/compute, /allocation: OpenCost's allocation API
    app.include_router(dcgm_router)  # /metrics/dcgm: the DCGM exporter's series of the server's own GPUs
    app.include_router(system.v1)
    app.include_router(system.root)
    install_docs(app)  # /docs (Swagger UI), served offline
    install_ui(app)  # /ui: the web console (static files in the package, same tokens as the API)
    app.add_middleware(BodyLimitMiddleware, max_bytes=ctx.max_body_bytes)  # inside metrics: 413s are counted
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in WIRE_MODELS:
                if model.__name__ not in components:
                    sub = model.model_json_schema(ref_template="#/components/schemas/{model}")
                    for name, d in sub.pop("$defs", {}).items():
                        components.setdefault(name, d)
                    components[model.__name__] = sub
            app.openapi_schema = problems.document_problems(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
