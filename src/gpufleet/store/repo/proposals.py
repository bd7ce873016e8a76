"""Persists proposals (actions an agent proposes, a person decides) and reads what deciding them needs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.errors import ConflictError, InputError, NotFoundError
from gpufleet.store.models import GpuSampleRow, ProposalRow, Team
from gpufleet.store.repo._common import _random_id, _rowcount

MAX_PROPOSALS_PAGE: Final = 1000


def proposal_by_key(s: Session, proposed_by: str, key: str) -> ProposalRow | None:
    """The proposal ``proposed_by`` made with Idempotency-Key ``key``, if any."""
    q = select(ProposalRow).where(ProposalRow.proposed_by == proposed_by, ProposalRow.idempotency_key == key)
    return s.scalar(q.execution_options(populate_existing=True))


def insert_proposal(s: Session, values: Mapping[str, Any]) -> tuple[ProposalRow, bool]:
    """Insert a pending proposal (``values``: its columns but ``id`` and ``state``); returns
    ``(proposal, created)``. With an ``idempotency_key`` a repeat of the same request
    (``request_sha256``) by the same token returns the first proposal (``created=False``); another
    request with the same key is a :class:`ConflictError` (the unique constraint decides races)."""
    key = values.get("idempotency_key")
    by = str(values["proposed_by"])

    def replay() -> tuple[ProposalRow, bool] | None:
        found = proposal_by_key(s, by, str(key)) if key is not None else None
        if found is None:
            return None
        if found.request_sha256 != values.get("request_sha256"):
            raise ConflictError(
                f"Idempotency-Key '{key}' was used for a different proposal ({found.id}); use a new key"
            )
        return found, False

    seen = replay()
    if seen is not None:
        return seen
    row = ProposalRow(**{**values, "id": _random_id("p-"), "state": "pending"})
    try:
        with s.begin_nested():
            s.add(row)
            s.flush()
    except IntegrityError:
        seen = replay()
        if seen is None:
            raise
        return seen
    return row, True


def get_proposal(s: Session, id: str, *, for_update: bool = False) -> ProposalRow:
    q = select(ProposalRow).where(ProposalRow.id == id).execution_options(populate_existing=True)
    if for_update:
        q = q.with_for_update()
    row = s.scalar(q)
    if row is None:
        raise NotFoundError(f"no proposal '{id}'")
    return row


def lock_team(s: Session, name: str) -> Team:
    """Team ``name``, its row locked until the transaction ends (PostgreSQL; SQLite serializes
    writers anyway): its quota read while approving a quota change cannot change before it is set."""
    team = s.get(Team, name, with_for_update=True, populate_existing=True)
    if team is None:
        raise NotFoundError(f"team '{name}' not found")
    return team


def list_proposals(
    s: Session, *, teams: Sequence[str] | None = None, state: str | None = None, limit: int = 100
) -> list[ProposalRow]:
    """Proposals newest first, of ``teams`` (None: all; a proposal with no team is an admin's
    only) and in ``state`` (None: any)."""
    if not 1 <= limit <= MAX_PROPOSALS_PAGE:
        raise InputError(f"limit must be in 1..{MAX_PROPOSALS_PAGE}, got {limit}", field="limit")
    q = select(ProposalRow)
    if teams is not None:
        q = q.where(ProposalRow.team.in_(list(teams)))
    if state is not None:
        q = q.where(ProposalRow.state == state)
    return list(s.scalars(q.order_by(ProposalRow.seq.desc()).limit(limit)))


def decide_proposal(s: Session, row: ProposalRow, new_state: str, **fields: Any) -> None:
    """Move ``row`` from ``pending`` to ``new_state`` with ``fields`` (compare-and-set: a
    :class:`ConflictError` when another transaction decided it first)."""
    values = {**fields, "state": new_state}
    result = s.execute(
        update(ProposalRow)
        .where(ProposalRow.id == row.id, ProposalRow.state == "pending")
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if _rowcount(result) != 1:
        current = s.scalar(select(ProposalRow.state).where(ProposalRow.id == row.id))
        raise ConflictError(f"proposal {row.id} is {current}, not pending any more (decided concurrently)")
    for k, v in values.items():
        setattr(row, k, v)
    s.flush()


def expire_proposals(s: Session, now: float) -> int:
    """Pending proposals whose time is up become ``expired``; returns how many."""
    result = s.execute(
        update(ProposalRow)
        .where(ProposalRow.state == "pending", ProposalRow.expires_at <= now)
        .values(state="expired", reason="expired before anyone decided it")
        .execution_options(synchronize_session=False)
    )
    return _rowcount(result)


def _measurable(now: float) -> Any:
    return and_(
        ProposalRow.state == "executed",
        ProposalRow.measured_at.is_(None),
        ProposalRow.executed_at.is_not(None),
        ProposalRow.executed_at + ProposalRow.effect_window_s <= now,
    )


def proposals_to_measure(s: Session, now: float, *, limit: int = 100) -> list[ProposalRow]:
    """Executed proposals whose after-window has passed and whose effect is not measured yet."""
    q = select(ProposalRow).where(_measurable(now)).order_by(ProposalRow.seq).limit(limit)
    return list(s.scalars(q))


def proposal_upkeep_due(s: Session, now: float) -> bool:
    """Whether a proposal expired or an effect is due to be measured (a cheap read first)."""
    expired = and_(ProposalRow.state == "pending", ProposalRow.expires_at <= now)
    return s.scalar(select(func.count()).select_from(ProposalRow).where(or_(expired, _measurable(now)))) != 0


def job_utilization(s: Session, job_id: str, since: float, until: float) -> tuple[int, float | None]:
    """``(samples, mean GPU utilization %)`` of the GPUs ``job_id`` was on, sampled in ``[since, until]``."""
    q = select(func.count(GpuSampleRow.id), func.avg(GpuSampleRow.utilization_pct)).where(
        GpuSampleRow.job_id == job_id,
        GpuSampleRow.time >= since,
        GpuSampleRow.time <= until,
        GpuSampleRow.utilization_pct.is_not(None),
    )
    n, mean = s.execute(q).one()
    return int(n), None if mean is None else float(mean)
