"""Repository functions: every read and write of the store, as plain functions of a ``Session``.

The service layer owns transactions (``with db.session() as s: ...``): a function here never
commits, so several of them compose into one atomic change (e.g. ``end_run`` + ``append_segment``
+ ``transition`` when a job finishes). They flush when they need database-generated values or must
surface a constraint violation at a known place.

Concurrency contracts (they hold on SQLite, where write transactions are serialized by
``BEGIN IMMEDIATE``, and on PostgreSQL at READ COMMITTED, where several API replicas and one
controller write at once):

- ``submit_job`` with an idempotency key creates at most one job per ``(submitted_by, key)``: the
  unique constraint decides, the loser of a race rolls back its SAVEPOINT and returns the winner's.
- ``ensure_team``/``upsert_team``/``heartbeat`` are single-statement upserts (``ON CONFLICT``).
- ``transition`` is a compare-and-set on the job's state: if another transaction moved the job
  since it was read, it raises :class:`ConflictError` instead of overwriting that change.
- ``append_segment`` and ``end_run`` are idempotent, so crash recovery may replay them.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final, cast

from sqlalchemy import CursorResult, Insert, and_, delete, event, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from gpufleet.backends.base import GpuSample
from gpufleet.cost.ledger import SHARE_UNITS, Ledger, LedgerError, NodeInterval, UsageSegment
from gpufleet.errors import ConflictError, InputError, NotFoundError, TransitionError
from gpufleet.model.job import PRIORITY_CLASSES, TRANSITIONS, JobState, PodPlacement
from gpufleet.model.node import CapacityType, Node
from gpufleet.model.quota import DEFAULT_PRIORITY_GRANT, Quota
from gpufleet.store.convert import placement_to_json, pod_share_units
from gpufleet.store.models import (
    ControllerRow,
    GpuSampleRow,
    JobEventRow,
    JobRow,
    NodeIntervalRow,
    NodeRow,
    QuotaRow,
    RunRow,
    Team,
    Token,
    UsageSegmentRow,
)

log = logging.getLogger(__name__)

ROLES: Final = frozenset({"admin", "member", "viewer"})
TERMINAL_STATES: Final = frozenset(s.value for s in JobState if s.terminal)
MAX_PAGE: Final = 1000
_ID_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz234567"  # RFC 4648 base32, lowercase

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
        "run_as",  # resolved at submit (token's, else team's account)
    }
)
# Columns ``transition`` may set besides state/reason/updated_at.
_TRANSITION_FIELDS: Final = frozenset(
    {"started_at", "ended_at", "run", "restarts", "preemptions", "exit_code", "placement", "cancel_requested"}
)


def _random_id(prefix: str, n: int = 10) -> str:
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(n))


def _insert(s: Session) -> Callable[[Any], Insert]:
    """The dialect's INSERT (both SQLite and PostgreSQL offer ``on_conflict_do_*``)."""
    if s.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return cast(Callable[[Any], Insert], pg_insert)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return cast(Callable[[Any], Insert], sqlite_insert)


def _rowcount(result: Any) -> int:
    return int(cast(CursorResult[Any], result).rowcount)


def _check_name(name: str, what: str, max_len: int = 63) -> None:
    if not name or len(name) > max_len:
        raise InputError(f"{what} name must be 1..{max_len} characters, got {name!r}", field=what)


# -- teams and quotas -----------------------------------------------------------------------------


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


# -- tokens ---------------------------------------------------------------------------------------


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
) -> tuple[Token, str]:
    """A new token for ``team`` (created if missing); returns it and its secret, which is not
    stored (only its SHA-256) and so can be shown only now. ``run_as``: the token's own Unix
    account for the jobs it submits (wins over the team's)."""
    if role not in ROLES:
        raise InputError(f"unknown role '{role}' (known: {', '.join(sorted(ROLES))})", field="role")
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


# -- jobs -----------------------------------------------------------------------------------------


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
) -> tuple[JobRow, bool]:
    """Insert a PENDING job (and its first event); returns ``(job, created)``.

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
    # One INSERT ... ON CONFLICT DO NOTHING RETURNING (Core, not the ORM's unit of work): the hot
    # path of a submit is a single round trip, and a racing duplicate key is resolved by the
    # database's unique constraint rather than by a SELECT-then-INSERT that could race.
    values: dict[str, Any] = {
        "labels": {},
        "env": {},
        "gpu_types": [],
        **dict(fields),
        "id": _random_id("j-"),
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


# -- runs -----------------------------------------------------------------------------------------


def open_run(
    s: Session,
    *,
    job_id: str,
    run: int,
    node: str,
    placement: list[dict[str, Any]],
    capacity_type: str,
    node_hourly_usd: float,
    now: float,
) -> RunRow:
    """Record attempt ``run`` of a job as admitted to ``node`` (idempotent: an existing run is
    returned unchanged, so a controller replaying its last binding after a crash is harmless)."""
    existing = s.get(RunRow, (job_id, run))
    if existing is not None:
        return existing
    row = RunRow(
        job_id=job_id,
        run=run,
        node=node,
        placement=list(placement),
        capacity_type=str(capacity_type),
        node_hourly_usd=node_hourly_usd,
        admitted_at=now,
        reason="",
    )
    s.add(row)
    s.flush()
    return row


def get_run(s: Session, job_id: str, run: int) -> RunRow | None:
    return s.get(RunRow, (job_id, run), populate_existing=True)


def _run_or_404(s: Session, job_id: str, run: int) -> RunRow:
    row = get_run(s, job_id, run)
    if row is None:
        raise NotFoundError(f"run {run} of job '{job_id}' not found")
    return row


def mark_run_started(s: Session, job_id: str, run: int, *, pid: int, started_at: float) -> RunRow:
    """The backend started the run's process (``started_at`` as the backend measured it)."""
    row = _run_or_404(s, job_id, run)
    if row.ended_at is None:
        row.pid, row.started_at = pid, started_at
        s.flush()
    return row


def end_run(
    s: Session,
    job_id: str,
    run: int,
    *,
    outcome: str,
    exit_code: int | None,
    reason: str,
    started_at: float | None,
    ended_at: float,
) -> RunRow:
    """The run ended. Idempotent: ending an ended run returns it unchanged. ``started_at`` fills
    in a start the store never saw (the process started while the controller was down)."""
    row = _run_or_404(s, job_id, run)
    if row.ended_at is not None:
        return row
    if row.started_at is None and started_at is not None:
        row.started_at = started_at
    row.outcome, row.exit_code, row.reason, row.ended_at = str(outcome), exit_code, reason, ended_at
    s.flush()
    return row


def request_stop(s: Session, job_id: str, run: int, reason: str) -> RunRow:
    """Ask for a run to be stopped (the first reason given is kept)."""
    row = _run_or_404(s, job_id, run)
    if row.stop_requested is None and row.ended_at is None:
        row.stop_requested = reason
        s.flush()
    return row


def open_runs(s: Session) -> list[RunRow]:
    return list(s.scalars(select(RunRow).where(RunRow.ended_at.is_(None)).order_by(RunRow.job_id, RunRow.run)))


# -- nodes ----------------------------------------------------------------------------------------


def _open_interval(s: Session, name: str) -> NodeIntervalRow | None:
    q = select(NodeIntervalRow).where(NodeIntervalRow.node == name, NodeIntervalRow.end.is_(None))
    return s.scalars(q.order_by(NodeIntervalRow.start.desc())).first()


def _interval_shape(
    pool: str, model: str, gpus: int, cpu: int, mem: int, capacity: str, usd: float
) -> tuple[str, str, int, int, int, str, float]:
    return (pool, model, gpus, cpu, mem, capacity, usd)


def upsert_node(s: Session, node: Node, *, hourly_usd: float, now: float) -> NodeRow:
    """Record that ``node`` exists now at ``hourly_usd``. A new node gets an open ledger interval;
    a change of shape or price closes the open interval at ``now`` and opens a new one (so the
    ledger prices each second at the price of that second); a removed node comes back."""
    capacity = CapacityType(node.capacity_type).value
    shape = _interval_shape(
        node.pool, node.gpu_model, node.gpu_count, node.cpu_milli, node.memory_mib, capacity, hourly_usd
    )
    row = s.get(NodeRow, node.name)
    if row is None:
        row = NodeRow(name=node.name, added_at=now, state="ready")
        s.add(row)
    elif row.state == "removed":
        row.state, row.removed_at, row.added_at = "ready", None, now
    row.gpu_model, row.gpu_count, row.cpu_milli, row.memory_mib = (
        node.gpu_model,
        node.gpu_count,
        node.cpu_milli,
        node.memory_mib,
    )
    row.pool, row.capacity_type, row.sharing = node.pool, capacity, str(node.sharing)
    row.hourly_price_usd, row.labels = hourly_usd, dict(node.labels)
    iv = _open_interval(s, node.name)
    if iv is not None:
        same = (
            _interval_shape(
                iv.pool, iv.gpu_model, iv.gpu_count, iv.cpu_milli, iv.memory_mib, iv.capacity_type, iv.hourly_usd
            )
            == shape
        )
        if same:
            s.flush()
            return row
        iv.end = max(now, iv.start)
    s.add(
        NodeIntervalRow(
            node=node.name,
            pool=node.pool,
            gpu_model=node.gpu_model,
            gpu_count=node.gpu_count,
            cpu_milli=node.cpu_milli,
            memory_mib=node.memory_mib,
            capacity_type=capacity,
            hourly_usd=hourly_usd,
            start=now,
            end=None,
        )
    )
    s.flush()
    return row


def remove_node(s: Session, name: str, now: float) -> NodeRow:
    """The node went away: close its ledger interval (idempotent)."""
    row = s.get(NodeRow, name)
    if row is None:
        raise NotFoundError(f"node '{name}' not found")
    if row.state != "removed":
        row.state, row.removed_at = "removed", now
    iv = _open_interval(s, name)
    if iv is not None:
        iv.end = max(now, iv.start)
    s.flush()
    return row


def list_nodes(s: Session, include_removed: bool = False) -> list[NodeRow]:
    q = select(NodeRow).order_by(NodeRow.name)
    if not include_removed:
        q = q.where(NodeRow.state != "removed")
    return list(s.scalars(q))


def node_intervals(s: Session, name: str) -> list[NodeIntervalRow]:
    q = select(NodeIntervalRow).where(NodeIntervalRow.node == name).order_by(NodeIntervalRow.start)
    return list(s.scalars(q))


# -- the ledger -----------------------------------------------------------------------------------


def append_segment(
    s: Session,
    *,
    job: JobRow,
    run: int,
    node: NodeRow,
    gpu_share_units: int,
    cpu_milli: int,
    memory_mib: int,
    node_hourly_usd: float,
    capacity_type: str,
    start: float,
    end: float,
) -> UsageSegmentRow:
    """Record what run ``run`` of ``job`` held on ``node`` (shares in 1/7000 GPU). Inserted once:
    a second call for the same (job, run, node) returns the first row unchanged."""
    if end < start or gpu_share_units < 0 or cpu_milli < 0 or memory_mib < 0:
        raise InputError(f"bad usage segment for job {job.id}: [{start}, {end}], share {gpu_share_units}")

    def existing() -> UsageSegmentRow | None:
        return s.scalar(
            select(UsageSegmentRow).where(
                UsageSegmentRow.job_id == job.id, UsageSegmentRow.run == run, UsageSegmentRow.node == node.name
            )
        )

    found = existing()
    if found is not None:
        return found
    row = UsageSegmentRow(
        job_id=job.id,
        run=run,
        team=job.team,
        project=job.project,
        namespace=job.namespace,
        experiment=job.experiment,
        labels=dict(job.labels or {}),
        node=node.name,
        pool=node.pool,
        gpu_model=node.gpu_model,
        capacity_type=str(capacity_type),
        gpu_share_units=gpu_share_units,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        node_hourly_usd=node_hourly_usd,
        start=start,
        end=end,
        priority_class=job.priority_class,
    )
    try:
        with s.begin_nested():
            s.add(row)
            s.flush()
    except IntegrityError:
        found = existing()
        if found is None:
            raise
        return found
    return row


class _Seg:
    """A usage record to clip into the node's intervals (stored segment or open run)."""

    __slots__ = (
        "cpu_milli",
        "end",
        "experiment",
        "job_id",
        "labels",
        "memory_mib",
        "namespace",
        "node",
        "priority_class",
        "project",
        "share_units",
        "start",
        "team",
    )

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)

    job_id: str
    team: str
    project: str
    namespace: str
    experiment: str
    labels: dict[str, str]
    node: str
    share_units: int | Callable[[str], int]  # or a function of the node's GPU model (open runs)
    cpu_milli: int
    memory_mib: int
    start: float
    end: float
    priority_class: str


def load_ledger(s: Session, start: float, end: float, now: float) -> Ledger:
    """The ledger of the window ``[start, end]`` as of ``now``: node intervals overlapping it (open
    ones end at ``now``), stored segments overlapping it, and every open run that has started as a
    segment ending at ``now``. Pass it to :func:`gpufleet.cost.ledger.allocate` with the same window.

    Each usage record is clipped to the window and split over its node's intervals, taking the
    pool, model, capacity type and price of each interval (a price change during a run bills each
    part at its own price). A part outside every recorded interval (data from before the node was
    recorded) is skipped with a warning, as is a record that contradicts its node."""
    ledger = Ledger()
    # 1. Node intervals overlapping the window.
    iv_rows = s.scalars(
        select(NodeIntervalRow)
        .where(NodeIntervalRow.start <= end, or_(NodeIntervalRow.end.is_(None), NodeIntervalRow.end >= start))
        .order_by(NodeIntervalRow.node, NodeIntervalRow.start)
    )
    intervals: dict[str, list[NodeInterval]] = defaultdict(list)
    for r in iv_rows:
        iv_end = r.end if r.end is not None else max(now, r.start)
        try:
            iv = NodeInterval(
                r.node,
                r.pool,
                r.gpu_model,
                r.gpu_count,
                r.cpu_milli,
                r.memory_mib,
                CapacityType(r.capacity_type),
                r.hourly_usd,
                r.start,
                iv_end,
            )
            ledger.add_node(iv)
        except (LedgerError, ValueError) as e:
            log.warning("ledger: skipping node interval %s of %s: %s", r.id, r.node, e)
            continue
        intervals[r.node].append(iv)

    # 2. Stored segments overlapping the window.
    records: list[_Seg] = []
    seg_rows = s.scalars(
        select(UsageSegmentRow)
        .where(UsageSegmentRow.start < end, UsageSegmentRow.end > start)
        .order_by(UsageSegmentRow.id)
    )
    for sr in seg_rows:
        records.append(
            _Seg(
                job_id=sr.job_id,
                team=sr.team,
                project=sr.project,
                namespace=sr.namespace,
                experiment=sr.experiment,
                labels={str(k): str(v) for k, v in (sr.labels or {}).items()},
                node=sr.node,
                share_units=sr.gpu_share_units,
                cpu_milli=sr.cpu_milli,
                memory_mib=sr.memory_mib,
                start=sr.start,
                end=sr.end,
                priority_class=sr.priority_class or "normal",
            )
        )

    # 3. Open runs, metered from their start to now (one record per node of their placement).
    open_q = (
        select(RunRow, JobRow)
        .join(JobRow, JobRow.id == RunRow.job_id)
        .where(RunRow.ended_at.is_(None), RunRow.started_at.is_not(None), RunRow.started_at < end)
        .order_by(RunRow.job_id, RunRow.run)
    )
    for run, job in s.execute(open_q):
        assert run.started_at is not None
        if now <= run.started_at:
            continue
        pods: dict[str, int] = defaultdict(int)
        for pod in run.placement or [{"node": run.node}]:
            pods[str(pod.get("node", run.node))] += 1
        for node_name, n in pods.items():
            records.append(
                _Seg(
                    job_id=job.id,
                    team=job.team,
                    project=job.project,
                    namespace=job.namespace,
                    experiment=job.experiment,
                    labels={str(k): str(v) for k, v in (job.labels or {}).items()},
                    node=node_name,
                    share_units=_open_share(job, n),
                    cpu_milli=job.cpu_milli * n,
                    memory_mib=job.memory_mib * n,
                    start=run.started_at,
                    end=now,
                    priority_class=job.priority_class or "normal",
                )
            )

    for rec in records:
        _add_clipped(ledger, intervals.get(rec.node, []), rec, start, end)
    return ledger


def _open_share(job: JobRow, pods: int) -> Callable[[str], int]:
    return lambda model: pod_share_units(job, model) * pods


def _add_clipped(ledger: Ledger, intervals: Iterable[NodeInterval], rec: _Seg, ws: float, we: float) -> None:
    lo, hi = max(rec.start, ws), min(rec.end, we)
    if hi <= lo:
        return
    covered = 0.0
    for iv in intervals:
        a, b = max(lo, iv.start), min(hi, iv.end)
        if b <= a:
            continue
        units = rec.share_units(iv.gpu_model) if callable(rec.share_units) else rec.share_units
        try:
            ledger.append(
                UsageSegment(
                    rec.job_id,
                    rec.team,
                    rec.project,
                    rec.namespace,
                    rec.experiment,
                    rec.labels,
                    rec.node,
                    iv.pool,
                    iv.gpu_model,
                    iv.capacity_type,
                    Fraction(units, SHARE_UNITS),
                    rec.cpu_milli,
                    rec.memory_mib,
                    iv.hourly_usd,
                    a,
                    b,
                    rec.priority_class,
                )
            )
        except LedgerError as e:
            log.warning("ledger: skipping usage of job %s on %s [%s, %s]: %s", rec.job_id, rec.node, a, b, e)
            continue
        covered += b - a
    if hi - lo - covered > 1e-6:
        log.warning(
            "ledger: %.3f s of job %s on node %s in [%s, %s] lie outside every recorded interval of the node; "
            "not billed",
            hi - lo - covered,
            rec.job_id,
            rec.node,
            lo,
            hi,
        )


# -- telemetry ------------------------------------------------------------------------------------


def record_gpu_samples(s: Session, samples: Sequence[GpuSample]) -> int:
    """Store NVML samples: one row per GPU, plus one per job using it (``job_id`` set, the job's
    memory on that GPU). Returns the number of rows written."""
    rows: list[dict[str, Any]] = []
    for g in samples:
        base = {"time": g.time, "node": g.node, "gpu_index": g.gpu_index, "utilization_pct": g.utilization_pct}
        rows.append(
            {**base, "job_id": None, "memory_used_mib": g.memory_used_mib, "memory_total_mib": g.memory_total_mib}
        )
        for job_id, mib in g.job_memory_mib.items():
            rows.append({**base, "job_id": job_id, "memory_used_mib": mib, "memory_total_mib": g.memory_total_mib})
    if rows:
        s.execute(_insert(s)(GpuSampleRow), rows)
    return len(rows)


def job_gpu_stats(s: Session, job_id: str) -> dict[str, Any]:
    """What the job's GPUs did: ``samples``, ``mean_utilization_pct`` (of the GPUs it was on, while
    it was on them) and ``max_memory_mib`` (its own processes); None values when never sampled."""
    q = select(
        func.count(GpuSampleRow.id),
        func.avg(GpuSampleRow.utilization_pct),
        func.max(GpuSampleRow.memory_used_mib),
        func.min(GpuSampleRow.time),
        func.max(GpuSampleRow.time),
    ).where(GpuSampleRow.job_id == job_id)
    n, mean_util, max_mem, first, last = s.execute(q).one()
    return {
        "samples": int(n),
        "mean_utilization_pct": None if mean_util is None else float(mean_util),
        "max_memory_mib": None if max_mem is None else float(max_mem),
        "first_sample_at": first,
        "last_sample_at": last,
    }


# -- controllers ----------------------------------------------------------------------------------


def heartbeat(
    s: Session,
    replica: str,
    *,
    is_leader: bool,
    now: float,
    cycle_ms: float | None = None,
    queue: list[dict[str, Any]] | None = None,
    info: dict[str, Any] | None = None,
) -> None:
    """Record that ``replica`` is alive (and whether it leads). ``cycle_ms``, ``queue`` and
    ``info`` are kept from the previous heartbeat when not given."""
    values: dict[str, Any] = {
        "replica": replica,
        "is_leader": is_leader,
        "heartbeat_at": now,
        "started_at": now,
        "last_cycle_ms": cycle_ms,
        "queue": queue if queue is not None else [],
        "info": info if info is not None else {},
    }
    set_: dict[str, Any] = {"is_leader": is_leader, "heartbeat_at": now}
    if cycle_ms is not None:
        set_["last_cycle_ms"] = cycle_ms
    if queue is not None:
        set_["queue"] = queue
    if info is not None:
        set_["info"] = info
    stmt = _insert(s)(ControllerRow).values(**values)
    s.execute(stmt.on_conflict_do_update(index_elements=[ControllerRow.replica], set_=set_))  # type: ignore[attr-defined]


def leader(s: Session, now: float, stale_after_s: float = 15.0) -> ControllerRow | None:
    """The replica leading now: flagged leader with a heartbeat within ``stale_after_s``."""
    q = (
        select(ControllerRow)
        .where(and_(ControllerRow.is_leader.is_(True), ControllerRow.heartbeat_at >= now - stale_after_s))
        .order_by(ControllerRow.heartbeat_at.desc())
        .execution_options(populate_existing=True)
    )
    return s.scalars(q).first()


def list_controllers(s: Session) -> list[ControllerRow]:
    q = select(ControllerRow).order_by(ControllerRow.replica).execution_options(populate_existing=True)
    return list(s.scalars(q))
