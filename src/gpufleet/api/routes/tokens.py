"""``/v1/tokens`` (admin): create (the secret is shown once), list, revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from gpufleet.api.auth import TokenCache, require_admin
from gpufleet.api.deps import ADMIN, Caller, Ctx
from gpufleet.api.render import token_out
from gpufleet.store import repo
from gpufleet.wire import NAME, Role, TokenCreate, TokenCreated, TokenOut

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post("", status_code=201, response_model=TokenCreated, responses=ADMIN, summary="Create a token")
def create_token(body: TokenCreate, ctx: Ctx, who: Caller) -> TokenCreated:
    """A new token for ``team`` (created if new). The secret is in this answer only."""
    require_admin(who)
    now = ctx.clock.now()
    expires_at = None if body.expires_in_days is None else now + body.expires_in_days * 86400.0
    with ctx.database.session() as s:
        repo.ensure_team(s, body.team, now)
        token, secret = repo.create_token(
            s, team=body.team, role=Role(body.role).value, name=body.name, expires_at=expires_at, now=now
        )
        out = token_out(token)
    return TokenCreated(**out.model_dump(), token=secret)


@router.get("", response_model=list[TokenOut], responses=ADMIN, summary="List tokens")
def list_tokens(
    ctx: Ctx, who: Caller, team: Annotated[str | None, Query(pattern=NAME, max_length=63)] = None
) -> list[TokenOut]:
    require_admin(who)
    with ctx.database.session(readonly=True) as s:
        return [token_out(t) for t in repo.list_tokens(s, team=team)]


@router.delete(
    "/{token_id}",
    status_code=204,
    response_class=Response,
    responses={**ADMIN, 404: {"description": "No such token"}},
    summary="Revoke a token",
)
def revoke_token(
    token_id: Annotated[str, Path(min_length=1, max_length=32)], request: Request, ctx: Ctx, who: Caller
) -> Response:
    """Revoke at once on this replica; other replicas stop accepting it within their auth cache's
    few seconds."""
    require_admin(who)
    with ctx.database.session() as s:
        repo.revoke_token(s, token_id, ctx.clock.now())
    cache: TokenCache = request.app.state.token_cache
    cache.forget_token(token_id)
    return Response(status_code=204)
