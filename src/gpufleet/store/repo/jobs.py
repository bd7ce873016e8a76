"""Persists jobs and their state-change events (submit, transition, cancel, incremental loads)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from gpufleet.errors import ConflictError, InputError, NotFoundError, TransitionError
from gpufleet.model.job import TRANSITIONS, JobState, PodPlacement
from gpufleet.store.convert import placement_to_json
from gpufleet.store.models import JobEventRow, JobRow
from gpufleet.store.repo._common import _insert, _random_id, _rowcount
from gpufleet.store.repo.teams import ensure_team

TERMINAL_STATES: Final = frozenset(s.value for s in JobState if s.terminal)
MAX_PAGE: Final = 1000

# Columns a submission may set (everything else is identity or runtime state).
SUBMIT_FIELDS: Final = frozenset(
    {
        "name",
        "project",
        "namespace",
        "experiment",
        "labels",
        "priority_class",
        "command",
        "env",
        "cwd",
        "image",
        "pods",
        "checkpoint_interval_s",
        "gpus",
        "gpu_milli",
        "mig_profile",
        "gpu_types",
        "min_gpu_memory_gib",
        "cpu_milli",
        "memory_mib",
        "preemptible",
        "checkpoint_dir",
        "max_runtime_s",
        "estimated_runtime_s",
        "budget_usd",
        "constraints",  # the PodSpec's nodeSelector / required node affinity / tolerations; NULL: none
        "run_as",  # resolved at submit (token's, else team's account)
    }
)
# Columns ``transition`` may set besides state/reason/updated_at.
_TRANSITION_FIELDS: Final = frozenset(
    {"started_at", "ended_at", "run", "restarts", "preemptions", "exit_code", "placement", "cancel_requested"}
)


def _by_idempotency_key(s: Session, submitted_by: str | None, key: str) -> JobRow | None:
    who = JobRow.submitted_by.is_(None) if submitted_by is None else JobRow.submitted_by == submitted_by
    return s.scalar(select(JobRow).where(who, JobRow.idempotency_key == key))


def _replay(existing: JobRow, key: str, request_sha256: str | None) -> tuple[JobRow, bool]:
    if existing.request_sha256 != request_sha256:
        raise ConflictError(
            f"Idempotency-Key '{key}' was used for a different request (job {existing.id}); use a new key for a new job"
        )
    return existing, False


def submit_job(
    s: Session,
    fields: Mapping[str, Any],
    *,
    team: str,
    submitted_by: str | None,
    idempotency_key: str | None,
    request_sha256: str | None,
    now: float,
    job_id: str | None = None,
) -> tuple[JobRow, bool]:
    """Insert a PENDING job (and its first event); returns ``(job, created)``. ``job_id``: the id to
    give it (a replay of a simulator's trace keeps the simulator's ids); default a random one.

    With an ``idempotency_key``, a repeat of the same request (same ``request_sha256``) by the same
    submitter returns the first job with ``created=False``; a different request with the same key
    is a :class:`ConflictError`. Without ``submitted_by`` the key is still honoured, but only the
    database's unique constraint on non-NULL submitters makes it race-proof."""
    unknown = set(fields) - SUBMIT_FIELDS
    if unknown:
        raise InputError(f"unknown job field(s): {', '.join(sorted(unknown))}", field=sorted(unknown)[0])
    if "name" not in fields or "command" not in fields:
        raise InputError("a job needs a name and a command", field="name" if "name" not in fields else "command")
    ensure_team(s, team, now)
    if idempotency_key is not None and submitted_by is None:
        # no submitter (an adopted workload): the unique constraint never matches NULLs, so the key
        # is looked up first. Two adopters (a leader and one that has just lost the lead) may race:
        # on PostgreSQL a transaction-scoped advisory lock on the key makes the look-up and the
        # insert one step (SQLite serializes writers)
        if s.get_bind().dialect.name == "postgresql":
            s.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(idempotency_key, 0x67706C))))
        known = _by_idempotency_key(s, None, idempotency_key)
        if known is not None:
            return _replay(known, idempotency_key, request_sha256)
    # One INSERT ... ON CONFLICT DO NOTHING RETURNING (Core, not the ORM's unit of work): the hot
    # path of a submit is a single round trip, and a racing duplicate key is resolved by the
    # database's unique constraint rather than by a SELECT-then-INSERT that could race.
    values: dict[str, Any] = {
        "labels": {},
        "env": {},
        "gpu_types": [],
        **dict(fields),
        "id": job_id or _random_id("j-"),
        "team": team,
        "submitted_by": submitted_by,
        "idempotency_key": idempotency_key,
        "request_sha256": request_sha256,
        "state": JobState.PENDING.value,
        "reason": "submitted",
        "submitted_at": now,
        "updated_at": now,
        "run": 0,
        "restarts": 0,
        "preemptions": 0,
        "placement": [],
        "cancel_requested": False,
    }
    # values as bound parameters (not .values()): the compiled statement is cached across submits
    stmt = _insert(s)(JobRow)
    if idempotency_key is not None:
        stmt = stmt.on_conflict_do_nothing(index_elements=["submitted_by", "idempotency_key"])  # type: ignore[attr-defined]
    seq = s.connection().execute(stmt.returning(JobRow.seq), values).scalar_one_or_none()
    if seq is None:  # the key was used before (or by a racing request that committed first)
        existing = _by_idempotency_key(s, submitted_by, idempotency_key or "")
        if existing is None:
            raise ConflictError(f"Idempotency-Key '{idempotency_key}' is being used by a concurrent request")
        return _replay(existing, idempotency_key or "", request_sha256)
    s.connection().execute(
        insert(JobEventRow),
        {"job_id": values["id"], "time": now, "old": None, "new": JobState.PENDING.value, "reason": "submitted"},
    )
    job = JobRow(seq=seq, **values)  # the inserted row, not attached to the session
    return job, True


def get_job(s: Session, id: str, *, for_update: bool = False) -> JobRow:
    q = select(JobRow).where(JobRow.id == id).execution_options(populate_existing=True)
    if for_update:
        q = q.with_for_update()
    job = s.scalar(q)
    if job is None:
        raise NotFoundError(f"job '{id}' not found")
    return job


def list_jobs(
    s: Session,
    *,
    teams: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
    project: str | None = None,
    labels: Mapping[str, str] | None = None,
    cursor: int | None = None,
    limit: int = 100,
) -> tuple[list[JobRow], int | None]:
    """Jobs newest first, filtered; returns ``(page, next_cursor)``. Pass ``next_cursor`` back as
    ``cursor`` for the next page (keyset on ``seq``: stable while jobs are added); None at the end.
    ``teams=[]`` or ``states=[]`` match nothing. Label values match exactly (JSON path queries,
    the same on SQLite and PostgreSQL)."""
    if not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit must be in 1..{MAX_PAGE}, got {limit}", field="limit")
    q = select(JobRow)
    if teams is not None:
        q = q.where(JobRow.team.in_(list(teams)))
    if states is not None:
        q = q.where(JobRow.state.in_(list(states)))
    if project is not None:
        q = q.where(JobRow.project == project)
    for key, value in (labels or {}).items():
        q = q.where(JobRow.labels[key].as_string() == value)
    if cursor is not None:
        q = q.where(JobRow.seq < cursor)
    rows = list(s.scalars(q.order_by(JobRow.seq.desc()).limit(limit + 1)))
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].seq
    return rows, None


def job_events(s: Session, id: str) -> list[JobEventRow]:
    get_job(s, id)
    return list(s.scalars(select(JobEventRow).where(JobEventRow.job_id == id).order_by(JobEventRow.id)))


def transition(s: Session, job: JobRow, new: str, reason: str, now: float, **fields: Any) -> JobEventRow:
    """Move ``job`` to state ``new`` (validated against the state machine), record the event and
    set ``fields`` (e.g. ``run=2, placement=...``; a tuple of :class:`PodPlacement` is converted).
    A terminal state sets ``ended_at=now`` unless given. Raises :class:`TransitionError` for an
    illegal move and :class:`ConflictError` when the stored job is no longer in ``job.state``."""
    try:
        old, target = JobState(job.state), JobState(new)
    except ValueError:
        raise TransitionError(f"job {job.id}: unknown state '{new}'") from None
    if target not in TRANSITIONS[old]:
        raise TransitionError(f"job {job.id}: illegal transition {old} → {target} ({reason})")
    bad = set(fields) - _TRANSITION_FIELDS
    if bad:
        raise TypeError(f"transition() cannot set {', '.join(sorted(bad))}")
    values: dict[str, Any] = dict(fields)
    if "placement" in values and values["placement"] and isinstance(values["placement"][0], PodPlacement):
        values["placement"] = placement_to_json(values["placement"])
    if target.terminal:
        values.setdefault("ended_at", now)
    values.update(state=target.value, reason=reason, updated_at=now)
    result = s.execute(
        update(JobRow)
        .where(JobRow.id == job.id, JobRow.state == old.value)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if _rowcount(result) != 1:
        current = s.scalar(select(JobRow.state).where(JobRow.id == job.id))
        if current is None:
            raise NotFoundError(f"job '{job.id}' not found")
        raise ConflictError(f"job {job.id} is {current}, not {old} any more (changed concurrently)")
    for k, v in values.items():  # keep the caller's object in step without re-reading it
        set_committed_value(job, k, v)
    event = JobEventRow(job_id=job.id, time=now, old=old.value, new=target.value, reason=reason)
    s.add(event)
    s.flush()
    return event


def request_cancel(s: Session, job_id: str, now: float) -> JobRow:
    """Flag a job for cancellation (the controller stops it and moves it to CANCELLED).
    :class:`ConflictError` if it already ended; asking twice is fine."""
    result = s.execute(
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.state.not_in(TERMINAL_STATES))
        .values(cancel_requested=True, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    job = get_job(s, job_id)
    if _rowcount(result) != 1:
        raise ConflictError(f"job {job_id} already ended ({job.state}); nothing to cancel")
    return job


def jobs_after(s: Session, after_seq: int, states: Sequence[str]) -> list[JobRow]:
    """Jobs submitted after ``after_seq`` in ``states``, oldest first (the controller's incremental load)."""
    q = select(JobRow).where(JobRow.seq > after_seq, JobRow.state.in_(list(states))).order_by(JobRow.seq)
    return list(s.scalars(q))


def jobs_in_states(s: Session, states: Sequence[str]) -> list[JobRow]:
    return list(s.scalars(select(JobRow).where(JobRow.state.in_(list(states))).order_by(JobRow.seq)))


def job_ids_in_states(s: Session, states: Sequence[str]) -> list[str]:
    return list(s.scalars(select(JobRow.id).where(JobRow.state.in_(list(states)))))


def changed_since(s: Session, t: float) -> list[JobRow]:
    """Jobs updated after ``t`` (state changes, cancel requests), oldest first."""
    return list(s.scalars(select(JobRow).where(JobRow.updated_at > t).order_by(JobRow.seq)))


def state_changes_since(s: Session, t: float) -> list[tuple[str, str, bool]]:
    """``(id, state, cancel_requested)`` of jobs updated after ``t`` that left PENDING or were asked
    to cancel — what a scheduler holding jobs in memory must notice. Plain submits are not
    included (the scheduler reads those by ``seq``), so this stays small under a flood of submits."""
    q = (
        select(JobRow.id, JobRow.state, JobRow.cancel_requested)
        .where(JobRow.updated_at > t, or_(JobRow.state != "PENDING", JobRow.cancel_requested.is_(True)))
        .order_by(JobRow.seq)
    )
    return [(r[0], r[1], bool(r[2])) for r in s.execute(q)]


def job_counts(s: Session) -> list[tuple[str, str, int]]:
    """``(state, team, jobs)`` for every state and team that has jobs."""
    q = select(JobRow.state, JobRow.team, func.count()).group_by(JobRow.state, JobRow.team)
    return [(str(state), str(team), int(n)) for state, team, n in s.execute(q)]


def pending_jobs(s: Session, *, teams: Collection[str] | None = None, limit: int) -> list[JobRow]:
    """The first ``limit`` PENDING jobs in submit order, of ``teams`` (None: all)."""
    q = select(JobRow).where(JobRow.state == JobState.PENDING.value).order_by(JobRow.seq).limit(limit)
    if teams is not None:
        q = q.where(JobRow.team.in_(list(teams)))
    return list(s.scalars(q))


def jobs_by_id(
    s: Session, ids: Collection[str], *, states: Collection[str], teams: Collection[str] | None = None
) -> dict[str, JobRow]:
    """The jobs among ``ids`` that are in ``states`` (and of ``teams``; None: all), by id."""
    q = select(JobRow).where(JobRow.id.in_(list(ids)), JobRow.state.in_(list(states)))
    if teams is not None:
        q = q.where(JobRow.team.in_(list(teams)))
    return {r.id: r for r in s.scalars(q)}


def find_job(s: Session, id: str) -> JobRow | None:
    """Job ``id``, or None (a plain SELECT: unlike :func:`get_job`, it neither raises nor refreshes
    a row this session already holds)."""
    return s.scalar(select(JobRow).where(JobRow.id == id))


def job_state(s: Session, id: str) -> str | None:
    return s.scalar(select(JobRow.state).where(JobRow.id == id))


def job_ended_at(s: Session, id: str) -> float | None:
    return s.scalar(select(JobRow.ended_at).where(JobRow.id == id))


def add_job_note(s: Session, job_id: str, *, time: float, state: str, reason: str) -> None:
    """Record an event about job ``job_id`` that keeps its state (``old`` = ``new`` = ``state``):
    something worth saying that is no transition, so nothing that replays states is affected."""
    s.add(JobEventRow(job_id=job_id, time=time, old=state, new=state, reason=reason))
