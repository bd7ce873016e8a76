"""``/v1/jobs``: submit (idempotent), list, get, cancel, events and logs."""

from __future__ import annotations

import base64
import binascii
import logging
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import iterate_in_threadpool

from gpufleet.api.auth import Principal, job_not_found, require_visible, require_writer
from gpufleet.api.context import ApiContext, JobLogs
from gpufleet.api.deps import AUTHED, READ_ONE, WRITE_ONE, Caller, Ctx, Metrics
from gpufleet.api.problems import input_at, problem_response
from gpufleet.api.render import event_out, job_out
from gpufleet.control import jobs as jobs_service  # owners, budgets, insert; cancel
from gpufleet.control.submit import prepare_submit
from gpufleet.cost.budget_status import BudgetExceededError
from gpufleet.errors import GpufleetError, InputError, NotFoundError
from gpufleet.model.job import JobState
from gpufleet.store import repo
from gpufleet.store.models import JobRow
from gpufleet.wire import FieldError, JobEventOut, JobOut, JobPage, JobSubmit

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_CHUNK = 64 * 1024
log = logging.getLogger(__name__)
_TERMINAL = frozenset(s.value for s in JobState if s.terminal)
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


def _read_from(ctx: ApiContext, job_id: str, offset: int) -> bytes:
    """Up to one chunk of the job's log from ``offset`` (empty when there is none yet)."""
    try:
        with ctx.log_path(job_id).open("rb") as f:
            f.seek(offset)
            return f.read(_CHUNK)
    except (OSError, OverflowError):  # no log yet (or it went away): nothing to send
        return b""


def _log_size(ctx: ApiContext, job_id: str) -> int:
    try:
        return ctx.log_path(job_id).stat().st_size
    except OSError:
        return 0


def _job_state(ctx: ApiContext, job_id: str) -> str:
    with ctx.database.session(readonly=True) as s:
        return repo.get_job(s, job_id).state


def _offset_past_end(request: Request, offset: int, size: int) -> Response:
    message = f"offset {offset} is past the end of the log ({size} bytes so far)"
    return problem_response(
        416,
        "offset_out_of_range",
        message,
        instance=request.url.path,
        errors=[FieldError(field="query.offset", message=message)],
        headers={"Content-Range": f"bytes */{size}"},
    )


def _other_logs(ctx: ApiContext, source: JobLogs, request: Request, job_id: str, offset: int, follow: bool) -> Response:
    """A job's output from a source that is not the server's files (Kubernetes: its pods' logs)."""
    try:
        data = source.read(job_id)
    except GpufleetError as e:
        return problem_response(503, "logs_unavailable", str(e), instance=request.url.path)
    if offset > len(data):
        return _offset_past_end(request, offset, len(data))
    headers = {"X-Content-Type-Options": "nosniff"}
    if not follow:
        return StreamingResponse(iter([data[offset:]]), media_type="text/plain; charset=utf-8", headers=headers)

    def running() -> bool:
        try:
            return _job_state(ctx, job_id) not in _TERMINAL
        except NotFoundError:
            return False

    def chunks(cancelled: threading.Event) -> Iterator[bytes]:
        try:
            yield from source.follow(job_id, offset, running, cancelled)
        except GpufleetError as e:  # the cluster went away mid-stream: end it, saying why in the server log
            log.warning("following the log of job %s: %s", job_id, e)

    async def stream() -> AsyncIterator[bytes]:
        cancelled = threading.Event()
        try:
            async for chunk in iterate_in_threadpool(chunks(cancelled)):
                yield chunk
        finally:
            cancelled.set()  # the client went away: the reading thread stops at its next read timeout

    return StreamingResponse(stream(), media_type="text/plain; charset=utf-8", headers=headers)


@router.get(
    "/{job_id}/logs",
    response_class=StreamingResponse,
    responses={
        **READ_ONE,
        200: {
            "description": "The log's bytes from `offset`",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        416: {"description": "`offset` is past the end of the log (code offset_out_of_range; the size is named)"},
    },
    summary="A job's output",
)
def job_logs(
    job_id: str,
    request: Request,
    ctx: Ctx,
    who: Caller,
    offset: Annotated[int, Query(ge=0, le=2**62, description="byte offset to start from")] = 0,
    follow: Annotated[bool, Query(description="keep streaming until the job has ended")] = False,
) -> Response:
    """The job's output (stdout and stderr) from byte ``offset``. With ``follow=true`` the stream
    stays open, sending new bytes as they are written, until the job has ended and its log is
    drained (or the client goes away). An ``offset`` past the end of the log written so far is a
    416 problem naming the log's current size (also with ``follow``: resume from a size you saw)."""
    with ctx.database.session(readonly=True) as s:
        row = _visible_job(s, who, job_id)
        terminal = row.state in _TERMINAL
    if ctx.job_logs is not None:
        return _other_logs(ctx, ctx.job_logs, request, job_id, offset, follow and not terminal)
    size = _log_size(ctx, job_id)
    if offset > size:
        return _offset_past_end(request, offset, size)

    def once() -> Iterator[bytes]:
        pos = offset
        while chunk := _read_from(ctx, job_id, pos):
            pos += len(chunk)
            yield chunk

    async def follow_stream() -> AsyncIterator[bytes]:
        pos = offset
        ended = terminal
        while True:
            chunk = await anyio.to_thread.run_sync(_read_from, ctx, job_id, pos)
            if chunk:
                pos += len(chunk)
                yield chunk
                continue
            if ended:  # drained after the job ended: done
                return
            if await request.is_disconnected():
                return
            await anyio.sleep(ctx.log_poll_s)
            try:
                state = await anyio.to_thread.run_sync(_job_state, ctx, job_id)
            except NotFoundError:
                return
            ended = state in _TERMINAL  # one more read drains what was written before the end

    body = follow_stream() if follow and not terminal else once()
    return StreamingResponse(
        body, media_type="text/plain; charset=utf-8", headers={"X-Content-Type-Options": "nosniff"}
    )
