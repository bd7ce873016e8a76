"""``/v1/tokens`` (admin): create (the secret is shown once), list, revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from gpufleet.api.auth import TokenCache, require_admin
from gpufleet.api.deps import ADMIN, Caller, Ctx
from gpufleet.api.problems import input_at
from gpufleet.api.render import token_out
from gpufleet.services import owners
from gpufleet.store import repo
from gpufleet.wire import NAME, Role, TokenCreate, TokenCreated, TokenOut

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post(
    "",
    status_code=201,
    response_model=TokenCreated,
    responses={**ADMIN, 409: {"description": "A single-team server already hosts another team"}},
    summary="Create a token",
)
def create_token(body: TokenCreate, ctx: Ctx, who: Caller) -> TokenCreated:
    """A new token for ``team`` (created if new). The secret is in this answer only. ``run_as``:
    the token's own Unix account (an existing, non-root one), which wins over the team's.
    ``owner``: the person holding it — proposals are approved by another person, so a second
    token of the proposer's owner cannot approve, and a token without an owner cannot approve
    any proposal."""
    require_admin(who)
    with input_at("body"):
        run_as = owners.check_run_as(body.run_as)
    now = ctx.clock.now()
    expires_at = None if body.expires_in_days is None else now + body.expires_in_days * 86400.0
    with ctx.database.session() as s:
        owners.check_new_team(s, body.team, single_team=ctx.single_team)
        repo.ensure_team(s, body.team, now)
        token, secret = repo.create_token(
            s,
            team=body.team,
            role=Role(body.role).value,
            name=body.name,
            expires_at=expires_at,
            now=now,
            run_as=run_as,
            owner=body.owner,
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
    responses={
        **ADMIN,
        404: {"description": "No such token"},
        409: {"description": "The last live admin token (code last_admin_token)"},
    },
    summary="Revoke a token",
)
def revoke_token(
    token_id: Annotated[str, Path(min_length=1, max_length=32)], request: Request, ctx: Ctx, who: Caller
) -> Response:
    """Revoke at once on this replica; other replicas stop accepting it within their auth cache's
    few seconds. The last unrevoked, unexpired admin token cannot be revoked (409)."""
    require_admin(who)
    with ctx.database.session() as s:
        owners.revoke_token(s, token_id, ctx.clock.now())
    cache: TokenCache = request.app.state.token_cache
    cache.forget_token(token_id)
    return Response(status_code=204)
