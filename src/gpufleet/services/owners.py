"""Owners and grants on a shared server (issue 8): the Unix account a job runs as, the priority
classes a team may use, one team on a server that can only run jobs as itself, and the last admin
token.

- A job runs as its token's ``run_as``, else its team's, else (None) the server's own account —
  which a server with ``run_as_required`` refuses (409 ``no_run_as_account``).
- A team's members may submit with the priority classes it was granted (``teams.priority_classes``;
  NULL: :data:`~gpufleet.wire.DEFAULT_PRIORITY_CLASSES`); admins with any (403
  ``priority_not_allowed`` otherwise).
- A ``single_team`` server (not root, not ``jobs_as_server``) hosts one team besides the seeded
  ``default`` one (409 ``single_team``).
- The last live admin token cannot be revoked (409 ``last_admin_token``).

Free of FastAPI: errors are :class:`~gpufleet.errors.GpufleetError` subclasses with stable codes.
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Iterable

from sqlalchemy.orm import Session

from gpufleet.errors import ConflictError, InputError, NotFoundError, PermissionDeniedError
from gpufleet.model.job import PRIORITY_CLASSES
from gpufleet.store import repo
from gpufleet.store.models import Team, Token
from gpufleet.wire import DEFAULT_PRIORITY_CLASSES, RUN_AS, Role

DEFAULT_TEAM = "default"  # the team `gpufleet up` seeds (control.server.DEFAULT_TEAM): never counted
_RUN_AS = re.compile(RUN_AS)


class NoRunAsAccountError(ConflictError):
    code = "no_run_as_account"


class SingleTeamError(ConflictError):
    code = "single_team"


class PriorityNotAllowedError(PermissionDeniedError):
    code = "priority_not_allowed"


class LastAdminTokenError(ConflictError):
    code = "last_admin_token"


class UnknownTeamError(InputError):
    """A submit names a team that does not exist (422 naming ``team``; teams are created on purpose)."""


# -- accounts ---------------------------------------------------------------------------------------


def check_run_as(name: str | None, field: str = "run_as") -> str | None:
    """``name`` if it is a POSIX user name of an existing, unprivileged account on this host."""
    if name is None:
        return None
    if not _RUN_AS.fullmatch(name):
        raise InputError(f"'{name}' is not a POSIX user name ({RUN_AS})", field=field)
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise InputError(
            f"no Unix account '{name}' on this host (create it first, e.g. useradd)", field=field
        ) from None
    if account.pw_uid == 0:
        raise InputError(f"jobs never run as root ('{name}' has uid 0): name an unprivileged account", field=field)
    return name


def resolve_run_as(token: Token | None, team: Team | None) -> str | None:
    """The account a job runs as: the token's own, else the team's, else None (the server's)."""
    if token is not None and token.run_as:
        return token.run_as
    if team is not None and team.run_as:
        return team.run_as
    return None


# -- priority grants -------------------------------------------------------------------------------


def normalize_classes(classes: Iterable[str] | None) -> list[str] | None:
    """Known classes, each once, lowest first (None stays None: the default grant)."""
    if classes is None:
        return None
    out = sorted(set(classes), key=lambda c: PRIORITY_CLASSES.get(c, -1))
    for c in out:
        if c not in PRIORITY_CLASSES:
            raise InputError(
                f"unknown priority class '{c}' (known: {', '.join(PRIORITY_CLASSES)})", field="priority_classes"
            )
    return out


def granted_classes(team: Team | None) -> list[str]:
    """The priority classes a team's members may submit with."""
    if team is None or team.priority_classes is None:
        return list(DEFAULT_PRIORITY_CLASSES)
    return normalize_classes(str(c) for c in team.priority_classes) or []


def check_priority(priority: str, team_name: str, team: Team | None, role: Role) -> None:
    if role is Role.ADMIN:
        return
    allowed = granted_classes(team)
    if priority not in allowed:
        raise PriorityNotAllowedError(
            f"team '{team_name}' may not submit with priority '{priority}' (allowed: {', '.join(allowed)}); "
            f"an admin grants more with `gpufleet team set {team_name} --priority-classes ...`"
        )


# -- one team on a server that runs jobs as itself ----------------------------------------------------


def check_new_team(s: Session, name: str, *, single_team: bool) -> None:
    """Refuse to create team ``name`` on a single-team server that already hosts another team."""
    if not single_team or name == DEFAULT_TEAM or repo.find_team(s, name) is not None:
        return
    others = [t.name for t in repo.list_teams(s) if t.name not in (DEFAULT_TEAM, name)]
    if others:
        raise SingleTeamError(
            f"cannot create team '{name}': this server runs as a non-root user and can only run jobs as "
            f"itself, so it hosts one team ('{others[0]}'); restart it as root to run each team's jobs as "
            "its own Unix account, or with jobs_as_server to run every team's jobs as the server's user"
        )


# -- submit ---------------------------------------------------------------------------------------------


def submit_owner(
    s: Session,
    *,
    team: str,
    priority: str,
    token_id: str | None,
    role: Role,
    run_as_required: bool,
    single_team: bool,
) -> str | None:
    """The checks a submit makes against the store, in its transaction; returns ``jobs.run_as``.

    The team must exist: a submit never creates one (a typo in ``--team`` would otherwise make a new
    team with default settings, issue 10 observation 12) — an admin creates teams on purpose
    (``PUT /v1/teams/{name}``, ``gpufleet team set``); on a single-team server a second team could
    not be created at all, which the refusal says instead (409 ``single_team``). The priority class
    must be granted to the team (admins: any); the account is the token's, else the team's, and is
    required when the server does not run jobs as itself."""
    row = repo.find_team(s, team)
    if row is None:
        check_new_team(s, team, single_team=single_team)  # one that could not even be created: 409 says why
        raise UnknownTeamError(
            f"team '{team}' does not exist; an admin creates it first with `gpufleet team set {team}` "
            f"(PUT /v1/teams/{team}), then submits to it",
            field="team",
        )
    check_priority(priority, team, row, role)
    token = repo.find_token(s, token_id) if token_id else None
    run_as = resolve_run_as(token, row)
    if run_as is None and run_as_required:
        raise NoRunAsAccountError(
            f"team '{team}' has no Unix account to run its jobs as, and this server does not run jobs as "
            f"itself; an admin sets one with `gpufleet team set {team} --run-as <user>` (or gives the token "
            "its own with `gpufleet token create --run-as <user>`)"
        )
    return run_as


# -- tokens ---------------------------------------------------------------------------------------------


def _live_admins(s: Session, now: float) -> list[str]:
    """Ids of the unrevoked, unexpired admin tokens, locked until the transaction ends (PostgreSQL)."""
    return repo.live_token_ids(s, Role.ADMIN.value, now)


def revoke_token(s: Session, token_id: str, now: float) -> Token:
    """Revoke a token, unless it is the last live admin token (the check and the revocation in one
    transaction; on PostgreSQL the admin token rows are locked so two concurrent revocations of the
    last two admin tokens cannot both pass)."""
    token = repo.find_token(s, token_id)
    if token is None:
        raise NotFoundError(f"token '{token_id}' not found")
    if token.role == Role.ADMIN.value and token.revoked_at is None:
        live = _live_admins(s, now)
        if token_id in live and len(live) <= 1:
            raise LastAdminTokenError(
                f"token '{token_id}' is the last admin token: create another admin token first "
                "(`gpufleet token create --team <team> --role admin`), then revoke this one"
            )
    return repo.revoke_token(s, token_id, now)
