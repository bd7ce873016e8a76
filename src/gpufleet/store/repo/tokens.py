"""Persists API tokens (only the SHA-256 of their secrets) and authenticates them."""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpufleet.errors import InputError, NotFoundError
from gpufleet.store.models import Token
from gpufleet.store.repo._common import _random_id
from gpufleet.store.repo.teams import ensure_team

ROLES: Final = frozenset({"admin", "member", "viewer", "metrics"})


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    s: Session,
    *,
    team: str,
    role: str,
    name: str = "",
    expires_at: float | None = None,
    now: float,
    run_as: str | None = None,
    owner: str | None = None,
) -> tuple[Token, str]:
    """A new token for ``team`` (created if missing); returns it and its secret, which is not
    stored (only its SHA-256) and so can be shown only now. ``run_as``: the token's own Unix
    account for the jobs it submits (wins over the team's). ``owner``: the person holding it (a
    proposal is approved by another person; a token without an owner cannot approve one)."""
    if role not in ROLES:
        raise InputError(f"unknown role '{role}' (known: {', '.join(sorted(ROLES))})", field="role")
    if owner is not None and not owner.strip():
        raise InputError("owner must name a person (or be left out)", field="owner")
    if expires_at is not None and expires_at <= now:
        raise InputError("expires_at must be in the future", field="expires_at")
    ensure_team(s, team, now)
    secret = "gpf_" + secrets.token_urlsafe(32)
    token = Token(
        id=_random_id("tok_"),
        name=name,
        team=team,
        role=role,
        secret_sha256=hash_secret(secret),
        created_at=now,
        expires_at=expires_at,
        revoked_at=None,
        run_as=run_as,
        owner=owner,
    )
    s.add(token)
    s.flush()
    return token, secret


def authenticate(s: Session, secret: str, now: float) -> Token | None:
    """The live token with this secret; None if unknown, revoked or expired. (No constant-time
    compare is needed: the lookup is by hash, so timing reveals nothing about the secret.)"""
    token = s.scalar(select(Token).where(Token.secret_sha256 == hash_secret(secret)))
    if token is None or token.revoked_at is not None:
        return None
    if token.expires_at is not None and token.expires_at <= now:
        return None
    return token


def token_owner(s: Session, token_id: str) -> str | None:
    """The person holding token ``token_id`` (None: it has no owner, or there is no such token)."""
    return s.scalar(select(Token.owner).where(Token.id == token_id))


def list_tokens(s: Session, team: str | None = None) -> list[Token]:
    q = select(Token).order_by(Token.created_at, Token.id)
    if team is not None:
        q = q.where(Token.team == team)
    return list(s.scalars(q))


def revoke_token(s: Session, id: str, now: float) -> Token:
    """Revoke a token (revoking a revoked token keeps its first revocation time)."""
    token = s.get(Token, id)
    if token is None:
        raise NotFoundError(f"token '{id}' not found")
    if token.revoked_at is None:
        token.revoked_at = now
        s.flush()
    return token


def find_token(s: Session, id: str) -> Token | None:
    """Token ``id``, or None (``Session.get``: a token this session holds is not read again)."""
    return s.get(Token, id)


def live_token_ids(s: Session, role: str, now: float) -> list[str]:
    """Ids of the unrevoked, unexpired tokens of ``role``, by id; on PostgreSQL their rows are locked
    (``FOR UPDATE``) until the transaction ends."""
    q = (
        select(Token.id)
        .where(
            Token.role == role,
            Token.revoked_at.is_(None),
            or_(Token.expires_at.is_(None), Token.expires_at > now),
        )
        .order_by(Token.id)
    )
    if s.get_bind().dialect.name == "postgresql":
        q = q.with_for_update()
    return list(s.scalars(q))
