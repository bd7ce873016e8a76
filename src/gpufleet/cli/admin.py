"""Commands for teams, tokens, usage and identity: ``team ls|show|set``, ``token create|ls|revoke``,
``usage``, ``whoami``. Thin like :mod:`gpufleet.cli.jobs` (same ``--url``/``--token``, same exit codes),
and they reach the server through the same :func:`gpufleet.cli.jobs.make_client`.
"""

import math
from typing import Annotated, Literal

import typer

from gpufleet.cli import jobs
from gpufleet.cli.common import console, handle_errors
from gpufleet.cli.jobs import JsonOpt, TokenOpt, UrlOpt
from gpufleet.cli.render import (
    bad_option,
    emit_json,
    note,
    teams_table,
    tokens_table,
    usage_table,
)

RoleName = Literal["admin", "member", "viewer", "metrics"]  # gpufleet.wire.Role's values (not imported at start-up)
team_app = typer.Typer(help="Teams: quotas per GPU model, fair-share weight, cohorts.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens (admin).", no_args_is_help=True)

NONE_WORDS = ("", "none", "-")


def parse_quota(items: list[str] | None) -> dict[str, float | None]:
    """``MODEL=GPUS`` pairs (``*`` = any model); ``MODEL=-`` (or ``none``) removes that model's quota."""
    out: dict[str, float | None] = {}
    for item in items or []:
        model, eq, value = item.partition("=")
        model = model.strip()
        if not eq or not model:
            raise bad_option("--quota", f"{item!r} is not MODEL=GPUS (e.g. A100=8, or *=16 for any model)")
        if value.strip().lower() in NONE_WORDS:
            out[model] = None
            continue
        try:
            gpus = float(value)
        except ValueError:
            raise bad_option("--quota", f"{item!r}: {value!r} is not a number of GPUs") from None
        if not math.isfinite(gpus) or gpus < 0:
            raise bad_option("--quota", f"{item!r}: the number of GPUs must be 0 or more")
        out[model] = gpus
    return out


def parse_priority_classes(value: str | None) -> list[str] | None:
    """``normal,high`` → the list; ``default`` (or ``none``) → None: the default grant."""
    from gpufleet.model.job import PRIORITY_CLASSES

    if value is None or value.strip().lower() in (*NONE_WORDS, "default"):
        return None
    classes = [c.strip() for c in value.split(",") if c.strip()]
    unknown = [c for c in classes if c not in PRIORITY_CLASSES]
    if unknown:
        raise bad_option("--priority-classes", f"unknown class {unknown[0]!r} (known: {', '.join(PRIORITY_CLASSES)})")
    return classes


@team_app.command("ls")
@handle_errors
def team_ls(as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """List teams with their quotas and what they use now."""
    with jobs.make_client(url, token) as client:
        teams = client.teams()
    if as_json:
        emit_json(teams)
    elif not teams:
        note("no teams")
    else:
        console.print(teams_table(teams))


@team_app.command("show")
@handle_errors
def team_show(
    name: Annotated[str, typer.Argument()], as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None
) -> None:
    """Show one team."""
    with jobs.make_client(url, token) as client:
        team = client.team(name)
    if as_json:
        emit_json(team)
    else:
        console.print(teams_table([team]))


@team_app.command("set")
@handle_errors
def team_set(
    name: Annotated[str, typer.Argument()],
    quota: Annotated[
        list[str] | None,
        typer.Option("--quota", help="MODEL=GPUS (repeatable; '*' = any model; MODEL=- removes)", show_default=False),
    ] = None,
    weight: Annotated[float | None, typer.Option("--weight", help="fair-share weight", show_default=False)] = None,
    cohort: Annotated[
        str | None, typer.Option("--cohort", help="share idle quota within this cohort ('none' leaves it)")
    ] = None,
    borrowing_limit: Annotated[
        str | None, typer.Option("--borrowing-limit", help="GPUs it may borrow from its cohort ('none': no limit)")
    ] = None,
    run_as: Annotated[
        str | None,
        typer.Option("--run-as", help="the Unix account its jobs run as ('none' clears it)", show_default=False),
    ] = None,
    priority_classes: Annotated[
        str | None,
        typer.Option(
            "--priority-classes",
            help="classes its members may submit with, e.g. normal,high ('default': background,low,normal)",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a team or change it (admin). Only the options given change; quotas merge per model."""
    from gpufleet.sdk.errors import NotFound
    from gpufleet.wire import TeamIn

    changes = parse_quota(quota)
    grant = parse_priority_classes(priority_classes)
    limit: float | None = None
    if borrowing_limit is not None and borrowing_limit.strip().lower() not in NONE_WORDS:
        try:
            limit = float(borrowing_limit)
        except ValueError:
            raise bad_option("--borrowing-limit", f"{borrowing_limit!r} is not a number of GPUs (or 'none')") from None
    with jobs.make_client(url, token) as client:
        try:
            current = client.team(name)
            base = TeamIn(
                weight=current.weight,
                cohort=current.cohort,
                borrowing_limit_gpus=current.borrowing_limit_gpus,
                quota_gpus=dict(current.quota_gpus),
            ).model_dump()
            created = False
        except NotFound:
            base = TeamIn().model_dump()
            created = True
        quotas: dict[str, float] = dict(base["quota_gpus"])
        for model, gpus in changes.items():
            if gpus is None:
                quotas.pop(model, None)
            else:
                quotas[model] = gpus
        base["quota_gpus"] = quotas
        if weight is not None:
            base["weight"] = weight
        if cohort is not None:
            base["cohort"] = None if cohort.strip().lower() in NONE_WORDS else cohort
        if borrowing_limit is not None:
            base["borrowing_limit_gpus"] = limit
        # left out unless given: the server keeps the team's account and grant
        base.pop("run_as", None)
        base.pop("priority_classes", None)
        if run_as is not None:
            base["run_as"] = None if run_as.strip().lower() in NONE_WORDS else run_as.strip()
        if priority_classes is not None:
            base["priority_classes"] = grant
        team = client.set_team(name, **base)
    if as_json:
        emit_json(team)
    else:
        note(f"team {team.name} {'created' if created else 'updated'}")
        console.print(teams_table([team]))


@token_app.command("create")
@handle_errors
def token_create(
    team: Annotated[str, typer.Option("--team", help="the team the token acts for")],
    role: Annotated[RoleName, typer.Option("--role", help="admin, member, viewer, metrics")] = "member",
    name: Annotated[str, typer.Option("--name", help="what it is for")] = "",
    expires_in_days: Annotated[
        float | None, typer.Option("--expires-in-days", help="default: never", show_default=False)
    ] = None,
    run_as: Annotated[
        str | None,
        typer.Option("--run-as", help="its own Unix account for its jobs (default: the team's)", show_default=False),
    ] = None,
    owner: Annotated[
        str | None,
        typer.Option(
            "--owner",
            help="the person holding it (a login or e-mail); needed to approve proposals, which "
            "another person than the proposer's owner must approve",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a token and print its secret — the only time it is shown."""
    from gpufleet.wire import Role

    with jobs.make_client(url, token) as client:
        created = client.create_token(team, Role(role), name, expires_in_days, run_as=run_as, owner=owner)
    if as_json:
        emit_json(created)
        return
    typer.echo(created.token)
    held = f", held by {created.owner}" if created.owner else ""
    note(
        f"token {created.id} ({created.role.value} of team {created.team}{held}): "
        "store the secret now, it is shown once"
    )


@token_app.command("ls")
@handle_errors
def token_ls(as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """List tokens (never their secrets)."""
    with jobs.make_client(url, token) as client:
        tokens = client.tokens()
    if as_json:
        emit_json(tokens)
    elif not tokens:
        note("no tokens")
    else:
        console.print(tokens_table(tokens))


@token_app.command("revoke")
@handle_errors
def token_revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID")], url: UrlOpt = None, token: TokenOpt = None
) -> None:
    """Revoke a token: it stops working at once."""
    with jobs.make_client(url, token) as client:
        client.revoke_token(token_id)
    note(f"token {token_id} revoked")


@handle_errors
def usage(
    window: Annotated[
        str, typer.Option("--window", help="24h, 7d, today, yesterday, week, month, or START,END (RFC 3339)")
    ] = "7d",
    by: Annotated[str, typer.Option("--by", help="group by: team, project, job, ... (comma-separated)")] = "team",
    spread_idle: Annotated[bool, typer.Option("--spread-idle", help="charge idle GPUs to the teams")] = False,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU-hours and cost over a window, by team (or other fields), with idle cost on its own line."""
    aggregate = [a.strip() for a in by.split(",") if a.strip()]
    if not aggregate:
        raise bad_option("--by", "name at least one field (e.g. team)")
    with jobs.make_client(url, token) as client:
        report = client.usage(window, aggregate, spread_idle)
    if as_json:
        emit_json(report)
    else:
        console.print(usage_table(report))


@handle_errors
def whoami(as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Which token, team and role the server sees."""
    with jobs.make_client(url, token) as client:
        me = client.whoami()
        server = client.url
    if as_json:
        emit_json(me)
    else:
        typer.echo(f"{me.role.value} of team {me.team} (token {me.token_id}) at {server}")
