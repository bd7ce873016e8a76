"""Root endpoints: liveness, readiness, Prometheus metrics (a token optional); and ``/v1/whoami``."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gpufleet.api.auth import Principal, optional_principal
from gpufleet.api.context import ApiContext
from gpufleet.api.deps import AUTHED, Caller, Ctx
from gpufleet.api.metrics import Audience
from gpufleet.api.problems import problem_response
from gpufleet.errors import StoreError
from gpufleet.store.repo import health
from gpufleet.wire import WhoAmI

root = APIRouter(tags=["system"])
v1 = APIRouter(prefix="/v1", tags=["system"])

READY_CACHE_S = 1.0  # a readiness verdict is reused this long: probes in a burst cost one write
Scraper = Annotated[Principal | None, Depends(optional_principal)]
# OpenAPI: the bearer token is optional (FastAPI lists it as required; ``{}`` adds "or none")
OPTIONAL_TOKEN: dict[str, Any] = {"security": [{}]}


@root.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    """The process answers (no store access: a slow store must not get the process restarted)."""
    return {"status": "ok"}


class Readiness:
    """The store's and the disks' readiness verdict, reused for ``ttl_s`` seconds (thread-safe:
    concurrent probes wait for the one that checks, then share its verdict)."""

    def __init__(self, ttl_s: float = READY_CACHE_S) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._why: str | None = None

    def check(self, ctx: ApiContext) -> str | None:
        """Why the store or the disks are not ready, or None when they are."""
        with self._lock:
            now = time.monotonic()
            if not (0 <= now - self._at < self.ttl_s):
                self._why = _not_ready_because(ctx)
                self._at = time.monotonic()
            return self._why


_readiness_lock = threading.Lock()


def readiness(app: FastAPI) -> Readiness:
    """The app's :class:`Readiness` (made on first use; tests replace it to change the TTL)."""
    with _readiness_lock:
        found = getattr(app.state, "readiness", None)
        if not isinstance(found, Readiness):
            found = Readiness()
            app.state.readiness = found
        return found


def _watched_dirs(ctx: ApiContext) -> list[Path]:
    """The folders whose file systems must have room: the jobs' logs and a SQLite store's."""
    dirs = [ctx.logs_dir]
    db = ctx.database
    name = db.url.database or ""
    if db.is_sqlite and name and name != ":memory:" and not name.startswith("file:"):
        dirs.append(Path(name).expanduser().parent)
    return dirs


def _existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def low_disk(dirs: list[Path], min_free_bytes: int) -> str | None:
    """Why one of ``dirs``' file systems is too full (fewer than ``min_free_bytes`` free for the
    server's account), or None."""
    if min_free_bytes <= 0:
        return None
    seen: set[int] = set()
    for d in dirs:
        path = _existing(d)
        try:
            st = os.statvfs(path)
            dev = os.stat(path).st_dev
        except OSError as e:
            return f"cannot read the free space of {path}: {e.strerror}"
        if dev in seen:
            continue
        seen.add(dev)
        free = st.f_bavail * st.f_frsize
        if free < min_free_bytes:
            return (
                f"low disk space: {free} bytes free on the file system of {path}, "
                f"under min_free_bytes ({min_free_bytes})"
            )
    return None


def _not_ready_because(ctx: ApiContext) -> str | None:
    """Disks first (no store write onto a full disk), then a real write to the store."""
    why = low_disk(_watched_dirs(ctx), ctx.min_free_bytes)
    if why is not None:
        return why
    try:
        with ctx.database.session() as s:
            health.write_probe(s)
    except Exception as e:  # whatever the failure, the answer is "not ready", not a 500
        msg = e.message if isinstance(e, StoreError) else type(e).__name__
        return f"the store cannot write: {msg}"
    return None


@root.get(
    "/readyz",
    summary="Readiness",
    responses={
        503: {
            "description": "Not ready: the store cannot write (down, disk full, read-only), a disk of the "
            "server has less free space than min_free_bytes, or the service is starting"
        }
    },
)
def readyz(ctx: Ctx, request: Request) -> Response:
    """Ready when the store commits a write (a no-op update of its schema version row), the file
    systems of the store and the job logs have ``min_free_bytes`` free, and the hosting process
    says it is ready. The store and disk verdict is reused for about a second."""
    why = readiness(request.app).check(ctx)
    if why is not None:
        return problem_response(503, "not_ready", why, instance=request.url.path)
    if not ctx.ready():
        return problem_response(503, "not_ready", "the service is not ready yet", instance=request.url.path)
    return Response(content='{"status":"ready"}', media_type="application/json")


@root.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}},
        401: {"description": "An invalid bearer token (no token: the cluster totals)"},
    },
    openapi_extra=OPTIONAL_TOKEN,
)
def metrics(request: Request, who: Scraper) -> Response:
    """Without a token, cluster totals only (no job, team, namespace, project, pod or budget label);
    a member's or viewer's token: its team's series; an admin token: every series."""
    content = request.app.state.metrics.exposition(Audience.of(who))
    return Response(content=content, media_type=CONTENT_TYPE_LATEST)


@v1.get("/whoami", response_model=WhoAmI, responses=AUTHED, summary="The caller's token")
async def whoami(who: Caller) -> WhoAmI:
    return WhoAmI(token_id=who.token_id, team=who.team, role=who.role)
