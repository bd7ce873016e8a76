"""Bearer-token authentication and the role/team rules.

A token belongs to one team and has one role (``admin``, ``member``, ``viewer``). Secrets are
checked against the store (which keeps only their SHA-256); a successful lookup is cached in memory
for ``ApiContext.auth_cache_s`` so the hot submit path does not pay a query for it. Another team's
job is reported exactly like a missing one (:func:`require_visible`), so nothing about it leaks.
``/metrics`` takes a token optionally (:func:`optional_principal`): without one it shows cluster
totals only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from gpufleet.api.context import ApiContext
from gpufleet.errors import AuthError, NotFoundError, PermissionDeniedError
from gpufleet.store import repo
from gpufleet.wire import Role

_MAX_CACHED = 10_000
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's id, team and role."""

    token_id: str
    team: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def reads_every_series(self) -> bool:
        """``/metrics`` in full: an admin, or a scraper's ``metrics`` token."""
        return self.role in (Role.ADMIN, Role.METRICS)

    def sees_team(self, team: str) -> bool:
        return self.is_admin or team == self.team


@dataclass(frozen=True, slots=True)
class _Cached:
    principal: Principal
    until: float  # trust the lookup until then (cache TTL, capped by the token's expiry)


class TokenCache:
    """Successful token lookups by SHA-256 of the secret, for a few seconds (thread-safe).

    Revocation: the revoking process drops the token at once and appends its id to ``revocations``
    (``ApiContext.revocations_file``), a file every process of the server (its ``api_workers``)
    looks at — one ``stat`` — before trusting its cache: when it changed, the cache is emptied, so a
    revoked token is refused by every worker from the next request on. Other replicas (other
    machines on the same store) trust their cache for at most the TTL; open log follows ask the
    store itself (:func:`token_is_live`) every ``log_recheck_s``. ``revocations`` None: this
    process only."""

    def __init__(self, ttl_s: float, revocations: Path | None = None) -> None:
        self._ttl = ttl_s
        self._entries: dict[str, _Cached] = {}
        self._lock = threading.Lock()
        self._revocations = revocations
        self._seen: tuple[int, int, int] | None = None  # the revocations file's (inode, size, mtime)
        # bumped whenever the cache is emptied for a revocation: a lookup that began before does not
        # put its (possibly stale) answer in the cache
        self.generation = 0

    def _sync(self) -> None:
        """Empty the cache when another process revoked a token (the shared file changed)."""
        if self._revocations is None:
            return
        try:
            st = os.stat(self._revocations)
            key: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            key = None
        if key != self._seen:
            with self._lock:
                if key != self._seen:
                    self._entries.clear()
                    self.generation += 1
                    self._seen = key

    def get(self, digest: str, now: float) -> Principal | None:
        self._sync()
        hit = self._entries.get(digest)
        if hit is None or hit.until <= now:
            return None
        return hit.principal

    def put(
        self, digest: str, principal: Principal, now: float, expires_at: float | None, generation: int | None = None
    ) -> None:
        """Cache a lookup; ``generation``: :attr:`generation` when the lookup began (a revocation
        heard of since discards it)."""
        if self._ttl <= 0:
            return
        until = now + self._ttl if expires_at is None else min(now + self._ttl, expires_at)
        with self._lock:
            if generation is not None and generation != self.generation:
                return
            if len(self._entries) >= _MAX_CACHED:
                self._entries.clear()
            self._entries[digest] = _Cached(principal, until)

    def forget_token(self, token_id: str) -> None:
        """Drop a revoked token at once: in this process, and (through the revocations file) in the
        server's other processes; other replicas within the TTL."""
        with self._lock:
            for digest in [d for d, c in self._entries.items() if c.principal.token_id == token_id]:
                del self._entries[digest]
        if self._revocations is not None:
            try:
                with self._revocations.open("a", encoding="ascii") as f:  # one short append: atomic
                    f.write(token_id + "\n")
            except OSError as e:
                log.warning(
                    "cannot tell the other API workers that token %s is revoked (%s): they "
                    "refuse it within auth_cache_s",
                    token_id,
                    e,
                )


bearer = HTTPBearer(auto_error=False, description="A gpufleet API token: `Authorization: Bearer <token>`")


def _lookup(ctx: ApiContext, secret: str, now: float) -> tuple[Principal, float | None] | None:
    with ctx.database.session(readonly=True) as s:
        token = repo.authenticate(s, secret, now)
        if token is None:
            return None
        return Principal(token.id, token.team, Role(token.role)), token.expires_at


async def principal(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
    """The caller, from ``Authorization: Bearer``; 401 without a valid token, 403 for a ``metrics``
    token (a scraper's: it reads ``/metrics`` and nothing else, see :func:`optional_principal`)."""
    who = await _authenticate(request, credentials)
    if who.role is Role.METRICS:
        raise PermissionDeniedError("a metrics token reads /metrics and /metrics/dcgm only")
    return who


async def _authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    """The token's principal, whatever its role; 401 without a valid token.

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
    generation = cache.generation
    looked_up = await run_in_threadpool(_lookup, ctx, secret, now)
    if looked_up is None:
        raise AuthError("invalid, expired or revoked token")
    who, expires_at = looked_up
    cache.put(digest, who, now, expires_at, generation)
    return who


def token_is_live(s: Session, token_id: str, now: float) -> bool:
    """Whether token ``token_id`` still authenticates (exists, not revoked, not expired), asked of
    the store, never of a cache: a long-lived stream re-checks its token with it."""
    token = repo.find_token(s, token_id)
    return token is not None and token.revoked_at is None and (token.expires_at is None or token.expires_at > now)


async def optional_principal(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> Principal | None:
    """The caller, or None when the request has no ``Authorization`` header (``/metrics``: an
    anonymous scrape gets the cluster totals). A header that is there must be a valid bearer token:
    a wrong one is a 401, not a quiet downgrade to the totals."""
    if credentials is None and "authorization" not in request.headers:
        return None
    return await _authenticate(request, credentials)


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
