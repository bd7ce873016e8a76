"""``/v1/jobs``: submit (idempotent), list, get, cancel and events (a job's logs: :mod:`.logs`)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response
from sqlalchemy.orm import Session

from gpufleet.api.auth import Principal, job_not_found, require_visible, require_writer
from gpufleet.api.context import ApiContext
from gpufleet.api.deps import AUTHED, READ_ONE, WRITE_ONE, Caller, Ctx, Metrics
from gpufleet.api.problems import input_at, problem_response
from gpufleet.api.render import event_out, job_out
from gpufleet.cost.budgets.status import BudgetExceededError
from gpufleet.errors import InputError, NotFoundError
from gpufleet.model.job import JobState
from gpufleet.services import jobs as jobs_service  # owners, budgets, insert; cancel
from gpufleet.services.submit import prepare_submit
from gpufleet.store import repo
from gpufleet.store.models import JobRow
from gpufleet.wire import JobEventOut, JobOut, JobPage, JobSubmit

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_CURSOR_PREFIX = "s1:"
_CURSOR_MAX_SEQ = 2**63 - 1  # a store sequence is a signed 64-bit integer
_CURSOR_MAX_DIGITS = len(str(_CURSOR_MAX_SEQ))


def encode_cursor(seq: int) -> str:
    """An opaque cursor (clients must not build them; the format may change)."""
    return base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The sequence number of a cursor :func:`encode_cursor` made; anything else (garbage, a forged
    cursor, a number no store column holds) is an :class:`InputError` naming ``query.cursor``."""
    try:
        raw = base64.urlsafe_b64decode(cursor.encode("ascii") + b"=" * (-len(cursor) % 4)).decode("ascii")
        digits = raw.removeprefix(_CURSOR_PREFIX)
        if digits == raw or not digits.isascii() or not digits.isdigit() or len(digits) > _CURSOR_MAX_DIGITS:
            raise ValueError(raw)
        seq = int(digits)
        if seq > _CURSOR_MAX_SEQ:
            raise ValueError(raw)
        return seq
    except (ValueError, OverflowError, UnicodeError, binascii.Error):
        raise InputError(
            "not a cursor this server issued (pass next_cursor from the previous page unchanged)", field="query.cursor"
        ) from None


def _visible_job(s: Session, who: Principal, job_id: str) -> JobRow:
    """The job, or the same 404 whether it is missing or another team's."""
    try:
        row = repo.get_job(s, job_id)
    except NotFoundError:
        raise job_not_found(job_id) from None
    require_visible(who, row.team, job_id)
    return row


def _outs(s: Session, rows: Sequence[JobRow], now: float) -> list[JobOut]:
    """The jobs on the wire, each with its running time summed over its runs (one query)."""
    ran = repo.run_seconds(s, [r.id for r in rows if r.started_at is not None], now)
    return [job_out(r).model_copy(update={"run_seconds": round(ran.get(r.id, 0.0), 3)}) for r in rows]


def _wake(ctx: ApiContext) -> None:
    if ctx.wake is not None:
        ctx.wake()


@router.post(
    "",
    status_code=201,
    response_model=JobOut,
    responses={
        **WRITE_ONE,
        200: {"model": JobOut, "description": "A replay: the job created by an earlier request with this key"},
        402: {"description": "A budget of the job's scope blocks it (code budget_exceeded)"},
        403: {"description": "A viewer, another team, or a priority class not granted (priority_not_allowed)"},
        409: {
            "description": "An Idempotency-Key reused for another request; no Unix account to run the job as "
            "(no_run_as_account); a second team on a single-team server (single_team)"
        },
    },
    summary="Submit a job",
)
def submit_job(
    body: JobSubmit,
    ctx: Ctx,
    who: Caller,
    metrics: Metrics,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=255)] = None,
) -> Response:
    """Queue a job. With an ``Idempotency-Key`` a retried submit returns the job the first one
    created (200) instead of creating another; the same key with a different body is a 409. Two GPU
    shapes in one body (``gpus`` with ``mig`` or ``gpu_milli``, ``gpu_milli`` with ``mig``) are a
    422 naming both fields; a team that does not exist is a 422 naming ``body.team`` — a submit never
    creates one (an admin does, with ``PUT /v1/teams/{name}``)."""
    with input_at("body"):
        prepared = prepare_submit(body, caller_team=who.team, caller_role=who.role)
    now = ctx.clock.now()
    try:
        with ctx.database.session() as s, input_at("body"):  # a field at fault is named body.<field>
            row, created = jobs_service.submit(
                s,
                prepared,
                priority=body.priority,
                token_id=who.token_id,
                role=who.role,
                run_as_required=ctx.run_as_required,
                single_team=ctx.single_team,
                idempotency_key=idempotency_key,
                now=now,
                rules=ctx.pricing_rules,
            )
            out = _outs(s, [row], now)[0] if not created else job_out(row).model_copy(update={"run_seconds": 0.0})
    except BudgetExceededError as e:  # a block budget refused it: RFC 9457 problem, 402 Payment Required
        return problem_response(402, e.code, e.message, instance="/v1/jobs")
    if created:
        metrics.submits.labels(prepared.team).inc()
        _wake(ctx)
    # already a validated JobOut: serialize it once (a returned model would be validated again)
    return Response(out.model_dump_json(), status_code=201 if created else 200, media_type="application/json")


def _labels(raw: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, item in enumerate(raw):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"a label filter is key=value, got '{item}'", field=f"query.label[{i}]")
        out[key] = value
    return out


def _states(raw: list[str]) -> list[str]:
    out = []
    for i, item in enumerate(raw):
        name = item.strip().upper()
        if name not in JobState.__members__:
            raise InputError(
                f"unknown job state '{item}' (known: {', '.join(JobState.__members__)})", field=f"query.state[{i}]"
            )
        out.append(name)
    return out


@router.get("", response_model=JobPage, responses=AUTHED, summary="List jobs")
def list_jobs(
    ctx: Ctx,
    who: Caller,
    team: Annotated[str | None, Query(max_length=63)] = None,
    state: Annotated[list[str] | None, Query(description="repeat for several states")] = None,
    project: Annotated[str | None, Query(max_length=255)] = None,
    label: Annotated[list[str] | None, Query(description="key=value; repeat to require several")] = None,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobPage:
    """Jobs newest first (keyset pages on submit order); a token other than admin sees only its team's jobs."""
    states = _states(state or [])
    labels = _labels(label or [])
    after = decode_cursor(cursor) if cursor else None
    if who.is_admin:
        teams = [team] if team else None
    elif team and team != who.team:
        return JobPage(items=[], next_cursor=None)  # another team's jobs: as if there were none
    else:
        teams = [who.team]
    now = ctx.clock.now()
    with ctx.database.session(readonly=True) as s:
        rows, next_seq = repo.list_jobs(
            s, teams=teams, states=states or None, project=project, labels=labels or None, cursor=after, limit=limit
        )
        items = _outs(s, rows, now)
    return JobPage(items=items, next_cursor=None if next_seq is None else encode_cursor(next_seq))


@router.get("/{job_id}", response_model=JobOut, responses=READ_ONE, summary="Get a job")
def get_job(job_id: str, ctx: Ctx, who: Caller) -> JobOut:
    now = ctx.clock.now()
    with ctx.database.session(readonly=True) as s:
        return _outs(s, [_visible_job(s, who, job_id)], now)[0]


@router.post(
    "/{job_id}/cancel",
    response_model=JobOut,
    responses={**WRITE_ONE, 202: {"model": JobOut, "description": "Being stopped; the controller ends it"}},
    summary="Cancel a job",
)
def cancel_job(job_id: str, response: Response, ctx: Ctx, who: Caller) -> JobOut:
    """A waiting job is cancelled at once (200); an admitted or running one is asked to stop (202,
    ``cancel_requested``) and turns CANCELLED when the controller has stopped it; an ended job is a 409."""
    now = ctx.clock.now()
    with ctx.database.session() as s:
        row = _visible_job(s, who, job_id)
        require_writer(who)
        out = _outs(s, [jobs_service.cancel(s, row, by=who.token_id, now=now)], now)[0]
    if out.state != JobState.CANCELLED.value:
        response.status_code = 202
    _wake(ctx)
    return out


@router.get("/{job_id}/events", response_model=list[JobEventOut], responses=READ_ONE, summary="A job's events")
def job_events(job_id: str, ctx: Ctx, who: Caller) -> list[JobEventOut]:
    with ctx.database.session(readonly=True) as s:
        _visible_job(s, who, job_id)
        return [event_out(e) for e in repo.job_events(s, job_id)]
