"""``/v1/teams``: teams, their quotas and what they use now; admins set quotas with PUT."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated

from fastapi import APIRouter, Path
from sqlalchemy.orm import Session

from gpufleet.api.auth import require_admin
from gpufleet.api.deps import ADMIN, AUTHED, READ_ONE, Caller, Ctx
from gpufleet.api.problems import input_at
from gpufleet.errors import InputError, NotFoundError
from gpufleet.model.gpu import MILLI, canonical_gpu_name
from gpufleet.model.share import gpus_milli, milli_gpus
from gpufleet.services import owners
from gpufleet.store import repo
from gpufleet.store.models import Team
from gpufleet.wire import NAME, TeamIn, TeamOut

router = APIRouter(prefix="/v1/teams", tags=["teams"])

TeamName = Annotated[str, Path(pattern=NAME, max_length=63)]


def _used(s: Session, teams: list[str] | None) -> dict[str, dict[str, float]]:
    """team → GPU model → GPU-equivalents held by its running jobs (one join)."""
    rows = repo.open_runs_by_team(s, teams)
    if not rows:
        return {}
    models = repo.node_models(s)
    used: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for team, node, placement in rows:
        for pod in placement:
            n = str(pod.get("node", node))
            gpus = milli_gpus(len(pod.get("gpus") or ()) * float(pod.get("milli", MILLI)))
            if gpus:
                used[team][models.get(n, "") or "unknown"] += gpus
    return {t: {m: round(v, 3) for m, v in per.items()} for t, per in used.items()}


def _quotas(s: Session, teams: list[str] | None) -> dict[str, dict[str, float]]:
    return {t: {m: milli_gpus(milli) for m, milli in q.items()} for t, q in repo.quotas_by_team(s, teams).items()}


def _team_out(t: Team, quotas: dict[str, float], used: dict[str, float]) -> TeamOut:
    return TeamOut(
        name=t.name,
        weight=t.weight,
        cohort=t.cohort,
        borrowing_limit_gpus=None if t.borrowing_limit_milli is None else milli_gpus(t.borrowing_limit_milli),
        quota_gpus=quotas,
        used_gpus=used,
        run_as=t.run_as,
        priority_classes=owners.granted_classes(t),
    )


def _render(s: Session, teams: list[Team]) -> list[TeamOut]:
    names = [t.name for t in teams]
    quotas, used = _quotas(s, names), _used(s, names)
    return [_team_out(t, quotas.get(t.name, {}), used.get(t.name, {})) for t in teams]


@router.get("", response_model=list[TeamOut], responses=AUTHED, summary="List teams")
def list_teams(ctx: Ctx, who: Caller) -> list[TeamOut]:
    """All teams for an admin; one's own team otherwise."""
    with ctx.database.session(readonly=True) as s:
        teams = list(repo.list_teams(s))
        if not who.is_admin:
            teams = [t for t in teams if t.name == who.team]
        return _render(s, teams)


def _not_found(name: str) -> NotFoundError:
    return NotFoundError(f"no team '{name}'")


@router.get("/{name}", response_model=TeamOut, responses=READ_ONE, summary="Get a team")
def get_team(name: TeamName, ctx: Ctx, who: Caller) -> TeamOut:
    if not who.sees_team(name):
        raise _not_found(name)
    with ctx.database.session(readonly=True) as s:
        try:
            team = repo.get_team(s, name)
        except NotFoundError:
            raise _not_found(name) from None
        return _render(s, [team])[0]


def _quota_milli(quota_gpus: dict[str, float]) -> dict[str, int]:
    out: dict[str, int] = {}
    for model, gpus in quota_gpus.items():
        canon = "*" if model == "*" else canonical_gpu_name(model)
        if canon is None:
            raise InputError(f"unknown GPU model '{model}' (or '*' for any)", field=f"body.quota_gpus.{model}")
        out[canon] = gpus_milli(gpus)
    return out


@router.put(
    "/{name}",
    response_model=TeamOut,
    responses={**ADMIN, **READ_ONE, 409: {"description": "A single-team server already hosts another team"}},
    summary="Create or update a team",
)
def put_team(name: TeamName, body: TeamIn, ctx: Ctx, who: Caller) -> TeamOut:
    """Set a team's weight, cohort, borrowing limit and quotas (GPUs per model, ``*`` for any);
    the quotas given replace the team's quotas. ``run_as`` (an existing, non-root Unix account) and
    ``priority_classes`` (what its members may submit with) change only when given; ``null``
    clears them."""
    require_admin(who)
    quotas = _quota_milli(body.quota_gpus)
    given = body.model_fields_set
    with input_at("body"):
        run_as = owners.check_run_as(body.run_as) if "run_as" in given else None
        classes = owners.normalize_classes(body.priority_classes)
    now = ctx.clock.now()
    with ctx.database.session() as s:
        owners.check_new_team(s, name, single_team=ctx.single_team)
        team = repo.upsert_team(
            s,
            name,
            weight=body.weight,
            cohort=body.cohort,
            borrowing_limit_milli=None if body.borrowing_limit_gpus is None else gpus_milli(body.borrowing_limit_gpus),
            quotas_milli=quotas,
            now=now,
        )
        if "run_as" in given:
            team.run_as = run_as
        if "priority_classes" in given:
            team.priority_classes = classes
        s.flush()
        return _render(s, [team])[0]
