"""Root endpoints without auth: liveness, readiness, Prometheus metrics; and ``/v1/whoami``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpufleet.api.deps import AUTHED, Caller, Ctx
from gpufleet.api.problems import problem_response
from gpufleet.errors import StoreError
from gpufleet.store import repo
from gpufleet.wire import WhoAmI

root = APIRouter(tags=["system"])
v1 = APIRouter(prefix="/v1", tags=["system"])


@root.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    """The process answers (no store access: a slow store must not get the process restarted)."""
    return {"status": "ok"}


@root.get(
    "/readyz",
    summary="Readiness",
    responses={503: {"description": "Not ready: the store does not answer or the service is starting"}},
)
def readyz(ctx: Ctx, request: Request) -> Response:
    """Ready when the store answers ``SELECT 1`` and the hosting process says it is ready."""
    try:
        with ctx.database.session(readonly=True) as s:
            repo.ping(s)
    except Exception as e:  # whatever the failure, the answer is "not ready", not a 500
        msg = e.message if isinstance(e, StoreError) else type(e).__name__
        return problem_response(503, "not_ready", f"the store does not answer: {msg}", instance=request.url.path)
    if not ctx.ready():
        return problem_response(503, "not_ready", "the service is not ready yet", instance=request.url.path)
    return Response(content='{"status":"ready"}', media_type="application/json")


@root.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}},
)
def metrics(request: Request) -> Response:
    registry = request.app.state.metrics.registry
    return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@v1.get("/whoami", response_model=WhoAmI, responses=AUTHED, summary="The caller's token")
async def whoami(who: Caller) -> WhoAmI:
    return WhoAmI(token_id=who.token_id, team=who.team, role=who.role)
