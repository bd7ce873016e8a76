"""Bearer-token authentication and the role/team rules.

A token belongs to one team and has one role (``admin``, ``member``, ``viewer``). Secrets are
checked against the store (which keeps only their SHA-256); a successful lookup is cached in memory
for ``ApiContext.auth_cache_s`` so the hot submit path does not pay a query for it. Another team's
job is reported exactly like a missing one (:func:`require_visible`), so nothing about it leaks.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpufleet.api.context import ApiContext
from gpufleet.errors import AuthError, NotFoundError, PermissionDeniedError
from gpufleet.store import repo
from gpufleet.wire import Role

_MAX_CACHED = 10_000


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's id, team and role."""

    token_id: str
    team: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def sees_team(self, team: str) -> bool:
        return self.is_admin or team == self.team


@dataclass(frozen=True, slots=True)
class _Cached:
    principal: Principal
    until: float  # trust the lookup until then (cache TTL, capped by the token's expiry)


class TokenCache:
    """Successful token lookups by SHA-256 of the secret, for a few seconds (thread-safe)."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl = ttl_s
        self._entries: dict[str, _Cached] = {}
        self._lock = threading.Lock()

    def get(self, digest: str, now: float) -> Principal | None:
        hit = self._entries.get(digest)
        if hit is None or hit.until <= now:
            return None
        return hit.principal

    def put(self, digest: str, principal: Principal, now: float, expires_at: float | None) -> None:
        if self._ttl <= 0:
            return
        until = now + self._ttl if expires_at is None else min(now + self._ttl, expires_at)
        with self._lock:
            if len(self._entries) >= _MAX_CACHED:
                self._entries.clear()
            self._entries[digest] = _Cached(principal, until)

    def forget_token(self, token_id: str) -> None:
        """Drop a revoked token at once (in this process; other replicas within the TTL)."""
        with self._lock:
            for digest in [d for d, c in self._entries.items() if c.principal.token_id == token_id]:
                del self._entries[digest]


bearer = HTTPBearer(auto_error=False, description="A gpufleet API token: `Authorization: Bearer <token>`")


def _lookup(ctx: ApiContext, secret: str, now: float) -> tuple[Principal, float | None] | None:
    with ctx.database.session(readonly=True) as s:
        token = repo.authenticate(s, secret, now)
        if token is None:
            return None
        return Principal(token.id, token.team, Role(token.role)), token.expires_at


async def principal(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
    """The caller, from ``Authorization: Bearer``; 401 without a valid token.

    ``async`` so that a cache hit costs no threadpool hop; a miss asks the store in a thread.
    """
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise AuthError("missing bearer token (send 'Authorization: Bearer <token>')")
    ctx: ApiContext = request.app.state.ctx
    cache: TokenCache = request.app.state.token_cache
    secret = credentials.credentials
    digest = hashlib.sha256(secret.encode()).hexdigest()
    now = ctx.clock.now()
    found = cache.get(digest, now)
    if found is not None:
        return found
    looked_up = await run_in_threadpool(_lookup, ctx, secret, now)
    if looked_up is None:
        raise AuthError("invalid, expired or revoked token")
    who, expires_at = looked_up
    cache.put(digest, who, now, expires_at)
    return who


def require_admin(who: Principal) -> None:
    if not who.is_admin:
        raise PermissionDeniedError("this needs an admin token")


def require_writer(who: Principal) -> None:
    """Members and admins may submit and cancel; viewers only read."""
    if who.role is Role.VIEWER:
        raise PermissionDeniedError("a viewer token can only read")


def require_visible(who: Principal, team: str, job_id: str) -> None:
    """404 — the same answer as for a missing job — when ``who`` may not see ``team``'s jobs."""
    if not who.sees_team(team):
        raise job_not_found(job_id)


def job_not_found(job_id: str) -> NotFoundError:
    return NotFoundError(f"no job '{job_id}'")
