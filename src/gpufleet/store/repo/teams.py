"""Persists teams (weight, cohort, borrowing limit, run-as account, priority grants) and their quota rows."""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, event, select
from sqlalchemy.orm import Session

from gpufleet.errors import InputError, NotFoundError
from gpufleet.model.job import PRIORITY_CLASSES
from gpufleet.model.quota import DEFAULT_PRIORITY_GRANT, Quota
from gpufleet.store.models import QuotaRow, Team
from gpufleet.store.repo._common import _check_name, _insert

# Teams known to exist, per engine (teams are never deleted): the hot submit path skips the upsert.
_KNOWN_TEAMS: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def ensure_team(s: Session, name: str, now: float) -> None:
    """Create team ``name`` with default settings if it does not exist (safe under races)."""
    _check_name(name, "team")
    bind = s.get_bind()
    known = _KNOWN_TEAMS.setdefault(bind, set())
    if name in known:
        return
    stmt = _insert(s)(Team).on_conflict_do_nothing()  # type: ignore[attr-defined]
    s.connection().execute(stmt, {"name": name, "weight": 1.0, "created_at": now})
    # remembered once this transaction commits (a rollback must not leave a team that does not exist)
    event.listen(s, "after_commit", lambda _s: known.add(name), once=True)


def upsert_team(
    s: Session,
    name: str,
    *,
    weight: float = 1.0,
    cohort: str | None = None,
    borrowing_limit_milli: int | None = None,
    quotas_milli: dict[str, int] | None = None,
    now: float,
) -> Team:
    """Create or update a team: weight, cohort and borrowing limit are set to the values given
    (defaults included). ``quotas_milli``: None leaves the team's quotas alone, ``{}`` clears them,
    otherwise it replaces them (GPU model or ``"*"`` → milli-GPU)."""
    _check_name(name, "team")
    if not weight > 0:
        raise InputError(f"weight must be > 0, got {weight}", field="weight")
    if borrowing_limit_milli is not None and borrowing_limit_milli < 0:
        raise InputError(f"borrowing limit must be >= 0, got {borrowing_limit_milli}", field="borrowing_limit")
    for model, milli in (quotas_milli or {}).items():
        if not model or milli < 0:
            raise InputError(f"quota for '{model}' must name a GPU model and be >= 0, got {milli}", field="quotas")
    stmt = _insert(s)(Team).values(
        name=name, weight=weight, cohort=cohort, borrowing_limit_milli=borrowing_limit_milli, created_at=now
    )
    s.execute(
        stmt.on_conflict_do_update(  # type: ignore[attr-defined]
            index_elements=[Team.name],
            set_={"weight": weight, "cohort": cohort, "borrowing_limit_milli": borrowing_limit_milli},
        )
    )
    if quotas_milli is not None:
        s.execute(delete(QuotaRow).where(QuotaRow.team == name))
        s.add_all(QuotaRow(team=name, gpu_model=m, nominal_milli=v) for m, v in quotas_milli.items())
        s.flush()
    return get_team(s, name)


def get_team(s: Session, name: str) -> Team:
    team = s.get(Team, name, populate_existing=True)
    if team is None:
        raise NotFoundError(f"team '{name}' not found")
    return team


def list_teams(s: Session) -> list[Team]:
    return list(s.scalars(select(Team).order_by(Team.name)))


def team_quotas(s: Session, name: str) -> dict[str, int]:
    get_team(s, name)
    rows = s.scalars(select(QuotaRow).where(QuotaRow.team == name).order_by(QuotaRow.gpu_model))
    return {r.gpu_model: r.nominal_milli for r in rows}


def all_quotas(s: Session) -> list[Quota]:
    """Every team as a scheduler :class:`Quota` (a team with no quota rows has an empty one)."""
    by_team: dict[str, dict[str, int]] = defaultdict(dict)
    for r in s.scalars(select(QuotaRow)):
        by_team[r.team][r.gpu_model] = r.nominal_milli
    return [
        Quota(
            team=t.name,
            nominal_milli=dict(sorted(by_team.get(t.name, {}).items())),
            cohort=t.cohort,
            borrowing_limit_milli=t.borrowing_limit_milli,
            weight=t.weight,
            priority_classes=DEFAULT_PRIORITY_GRANT
            if t.priority_classes is None
            else tuple(sorted({str(c) for c in t.priority_classes}, key=lambda c: PRIORITY_CLASSES.get(c, -1))),
        )
        for t in list_teams(s)
    ]


def quotas_by_team(s: Session, teams: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
    """team → GPU model (or ``"*"``) → nominal milli-GPU, of ``teams`` (None: all); a team without
    quota rows is absent."""
    q = select(QuotaRow.team, QuotaRow.gpu_model, QuotaRow.nominal_milli)
    if teams is not None:
        q = q.where(QuotaRow.team.in_(list(teams)))
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for team, model, milli in s.execute(q):
        out[team][model] = milli
    return dict(out)


def find_team(s: Session, name: str) -> Team | None:
    """Team ``name``, or None (``Session.get``: a team this session holds is not read again)."""
    return s.get(Team, name)
