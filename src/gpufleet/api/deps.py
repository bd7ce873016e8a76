"""Shared FastAPI dependencies and OpenAPI response declarations for the routers.

The dependencies are ``async``: FastAPI runs a plain ``def`` dependency in the threadpool, a thread
hop per request for what is an attribute read."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from gpufleet.api.auth import Principal, principal
from gpufleet.api.context import ApiContext
from gpufleet.api.metrics import ApiMetrics


async def get_ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


async def get_metrics(request: Request) -> ApiMetrics:
    metrics: ApiMetrics = request.app.state.metrics
    return metrics


Ctx = Annotated[ApiContext, Depends(get_ctx)]
Caller = Annotated[Principal, Depends(principal)]
Metrics = Annotated[ApiMetrics, Depends(get_metrics)]


def _problem(description: str) -> dict[str, Any]:
    # The content is rewritten to application/problem+json + Problem by problems.document_problems.
    return {"description": description}


AUTHED: dict[int | str, dict[str, Any]] = {
    401: _problem("No, or an invalid, bearer token"),
    422: _problem("Invalid input"),
}
READ_ONE = {**AUTHED, 404: _problem("Not found (or not visible to this token)")}
ADMIN = {**AUTHED, 403: _problem("The token's role does not allow this")}
SCOPED = {**AUTHED, 403: _problem("Another team's data or project: not allowed for this token")}
WRITE_ONE = {**READ_ONE, **ADMIN, 409: _problem("Conflicts with the job's state or an earlier request")}
