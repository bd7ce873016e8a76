"""``/v1/jobs/{job_id}/logs``: a job's output, read within bounds or followed as it is written.

Reading a log must not slow everyone down: a read without ``follow`` sends at most
``log_read_max_bytes`` (``X-Log-Next-Offset`` says where to continue); a sparse log (a job that
truncated its own file to 10 TiB) is served from its data only — its holes are skipped, never
sent as zeros; follows are limited per token and per process (429 with Retry-After); an idle
follow costs one stat per poll (backing off to ``log_poll_max_s``) and asks the store about its
job and its token every ``log_recheck_s``, ending when the token was revoked.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import iterate_in_threadpool
from starlette.types import Receive, Scope, Send

from gpufleet.api.auth import Principal, token_is_live
from gpufleet.api.context import ApiContext, JobLogs
from gpufleet.api.deps import READ_ONE, Caller, Ctx
from gpufleet.api.problems import problem_response
from gpufleet.api.routes.jobs import _visible_job
from gpufleet.errors import GpufleetError, NotFoundError
from gpufleet.model.job import JobState
from gpufleet.store import repo
from gpufleet.wire import FieldError

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_CHUNK = 64 * 1024
log = logging.getLogger(__name__)
_TERMINAL = frozenset(s.value for s in JobState if s.terminal)


_SEEK_DATA: int | None = getattr(os, "SEEK_DATA", None)
_SEEK_HOLE: int | None = getattr(os, "SEEK_HOLE", None)
_RETRY_AFTER_S = 5


class FollowSlots:
    """The open follow streams of this process: at most ``per_token`` per token, ``total`` in all.
    Used from the event loop and threads alike (locked)."""

    def __init__(self, per_token: int, total: int) -> None:
        self.per_token = per_token
        self.total = total
        self._by_token: dict[str, int] = {}
        self._open = 0
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        return self._open

    def acquire(self, token_id: str) -> str | None:
        """Take a slot for ``token_id``: None, else why not (a 429's detail)."""
        with self._lock:
            mine = self._by_token.get(token_id, 0)
            if mine >= self.per_token:
                return (
                    f"this token already follows {mine} logs, the most one token may (log_follows_per_token = "
                    f"{self.per_token}): end one, or read without follow (offset continues where you are)"
                )
            if self._open >= self.total:
                return (
                    f"the server already streams {self._open} followed logs, its limit (log_follows_total = "
                    f"{self.total}): try again later, or read without follow"
                )
            self._by_token[token_id] = mine + 1
            self._open += 1
            return None

    def release(self, token_id: str) -> None:
        with self._lock:
            left = self._by_token.get(token_id, 0) - 1
            if left > 0:
                self._by_token[token_id] = left
            else:
                self._by_token.pop(token_id, None)
            self._open = max(0, self._open - 1)


class _Slot:
    """One taken follow slot, released once."""

    def __init__(self, slots: FollowSlots, token_id: str) -> None:
        self._slots: FollowSlots | None = slots
        self._token_id = token_id

    def release(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots.release(self._token_id)


class _FollowResponse(StreamingResponse):
    """A follow stream that gives its slot back however it ends (drained, client gone, or never
    started because the client left before the first byte)."""

    def __init__(self, content: AsyncIterator[bytes], slot: _Slot, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()


def _data_region(fd: int, pos: int, size: int) -> tuple[int, int, bool] | None:
    """The first region of data at or after ``pos`` (below ``size``): (start, end, whether the
    filesystem said where its data is), or None when only a hole is left. Without SEEK_DATA
    (an older filesystem) the whole rest is data."""
    if _SEEK_DATA is None or _SEEK_HOLE is None:
        return pos, size, False
    try:
        start = os.lseek(fd, pos, _SEEK_DATA)
    except OSError as e:
        if e.errno == errno.ENXIO:  # no data after pos: a hole up to the end
            return None
        return pos, size, False  # EINVAL: this filesystem cannot tell
    if start >= size:
        return None
    try:
        end = os.lseek(fd, start, _SEEK_HOLE)
    except OSError:
        end = size
    return start, min(end, size), True


@dataclass(frozen=True, slots=True)
class _Piece:
    """Bytes ``start``..``end`` of a log, a piece of one data region. Data regions are whole
    filesystem blocks: the zeros that pad a block next to a hole are not the job's output."""

    start: int
    end: int
    after_hole: bool  # a hole was skipped to reach it: its leading zeros are padding
    before_hole: bool  # a hole follows it: its trailing zeros are padding


def _plan(path: Path, offset: int, budget: int) -> tuple[int, list[_Piece], int]:
    """What a read from ``offset`` sends: (the log's size, its pieces of data — at most ``budget``
    bytes, holes skipped —, the offset after them). A log that is not there is empty."""
    try:
        f = path.open("rb")
    except OSError:
        return 0, [], 0
    with f:
        fd = f.fileno()
        st = os.fstat(fd)
        size = st.st_size
        pos, pieces = offset, []
        while pos < size and budget > 0:
            region = _data_region(fd, pos, size)
            if region is None:
                pos = size
                break
            start, end, known = region
            if not known and st.st_blocks * 512 < size:  # sparse, holes unknown: no more than is allocated
                budget = min(budget, st.st_blocks * 512)
            take = min(end - start, budget)
            pieces.append(_Piece(start, start + take, start > pos, start + take == end < size))
            budget -= take
            pos = start + take
    return size, pieces, pos


def _read_pieces(path: Path, pieces: Sequence[_Piece]) -> Iterator[bytes]:
    """The bytes of ``pieces`` in chunks (padding zeros next to holes left out)."""
    if not pieces:
        return
    try:
        f = path.open("rb")
    except OSError:
        return
    with f:
        for piece in pieces:
            pos, leading = piece.start, piece.after_hole
            while pos < piece.end:
                f.seek(pos)
                chunk = f.read(min(_CHUNK, piece.end - pos))
                if not chunk:  # truncated since: nothing more
                    return
                pos += len(chunk)
                if leading:
                    chunk = chunk.lstrip(b"\0")
                    leading = not chunk
                if pos == piece.end and piece.before_hole:
                    chunk = chunk.rstrip(b"\0")
                if chunk:
                    yield chunk


def _read_at(path: Path, pos: int) -> tuple[bytes, int]:
    """Up to one chunk of the log's data from ``pos``, holes skipped: (the bytes, the offset after
    them). Nothing (and ``pos``) when there is no log."""
    try:
        with path.open("rb") as f:
            fd = f.fileno()
            st = os.fstat(fd)
            size = st.st_size
            if pos >= size:
                return b"", pos
            region = _data_region(fd, pos, size)
            if region is None:
                return b"", size
            start, end, known = region
            if not known and st.st_blocks * 512 < size:
                return b"", size  # sparse, and the filesystem cannot say where: follow from its end
            f.seek(start)
            data = f.read(min(_CHUNK, end - start))
    except (OSError, OverflowError):
        return b"", pos
    after = start + len(data)
    if start > pos:
        data = data.lstrip(b"\0")
    if after == end < size:
        data = data.rstrip(b"\0")
    return data, after


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _visible_terminal(ctx: ApiContext, who: Principal, job_id: str) -> bool:
    """Whether the job (visible to ``who``, else a 404) has ended."""
    with ctx.database.session(readonly=True) as s:
        return _visible_job(s, who, job_id).state in _TERMINAL


def _recheck(ctx: ApiContext, job_id: str, token_id: str) -> tuple[bool, bool]:
    """(whether the job has ended, whether the token still authenticates): one store session."""
    now = ctx.clock.now()
    with ctx.database.session(readonly=True) as s:
        live = token_is_live(s, token_id, now)
        try:
            ended = repo.get_job(s, job_id).state in _TERMINAL
        except NotFoundError:
            ended = True
    return ended, live


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


def _read_headers(request: Request, size: int, next_offset: int) -> dict[str, str]:
    """A read's headers: the log's size, where the next read starts, and a ``Link`` to it when
    there is more."""
    headers = {"X-Content-Type-Options": "nosniff", "X-Log-Size": str(size), "X-Log-Next-Offset": str(next_offset)}
    if next_offset < size:
        headers["Link"] = f'<{request.url.path}?offset={next_offset}>; rel="next"'
    return headers


def _revoked(job_id: str, token_id: str) -> None:
    log.info("ending the follow of job %s's log: token %s no longer authenticates", job_id, token_id)


async def _follow_file(
    ctx: ApiContext, request: Request, job_id: str, token_id: str, offset: int, ended: bool
) -> AsyncIterator[bytes]:
    """The log from ``offset`` as it is written, until the job has ended and it is drained, the
    token no longer authenticates, or the client went away. Idle, it costs one stat per poll."""
    path = ctx.log_path(job_id)
    pos = offset
    poll = ctx.log_poll_s
    recheck_at = time.monotonic() + ctx.log_recheck_s
    while True:
        if time.monotonic() >= recheck_at:  # also while bytes flow: a revoked token's stream ends
            now_ended, live = await anyio.to_thread.run_sync(_recheck, ctx, job_id, token_id)
            recheck_at = time.monotonic() + ctx.log_recheck_s
            if not live:
                _revoked(job_id, token_id)
                return
            ended = ended or now_ended  # one more look drains what was written before the end
        if _size(path) > pos:
            chunk, after = await anyio.to_thread.run_sync(_read_at, path, pos)
            if after != pos:
                pos = after
                if chunk:
                    poll = ctx.log_poll_s
                    yield chunk
                continue
        if ended:  # drained after the job ended: done
            return
        if await request.is_disconnected():
            return
        await anyio.sleep(poll)
        poll = min(poll * 2, max(ctx.log_poll_s, ctx.log_poll_max_s))


def _other_logs(
    ctx: ApiContext,
    source: JobLogs,
    request: Request,
    job_id: str,
    offset: int,
    follow: bool,
    token_id: str,
    slot: _Slot | None,
) -> Response:
    """A job's output from a source that is not the server's files (Kubernetes: its pods' logs)."""
    try:
        data = source.read(job_id)
    except GpufleetError as e:
        return problem_response(503, "logs_unavailable", str(e), instance=request.url.path)
    if offset > len(data):
        return _offset_past_end(request, offset, len(data))
    if not follow or slot is None:
        # a read sends at most log_read_max_bytes; a follow of an ended job, all there is (as for files)
        piece = data[offset:] if slot is not None else data[offset : offset + ctx.log_read_max_bytes]
        headers = _read_headers(request, len(data), offset + len(piece))
        return StreamingResponse(iter([piece]), media_type="text/plain; charset=utf-8", headers=headers)

    def chunks(cancelled: threading.Event) -> Iterator[bytes]:
        checked = [time.monotonic(), True]  # when the store was last asked, and whether the job ran then

        def running() -> bool:
            if time.monotonic() - float(checked[0]) < ctx.log_recheck_s:
                return bool(checked[1])
            ended, live = _recheck(ctx, job_id, token_id)
            checked[:] = [time.monotonic(), not ended]
            if not live:
                _revoked(job_id, token_id)
                cancelled.set()
                return False
            return not ended

        try:
            yield from source.follow(job_id, offset, running, cancelled)
        except GpufleetError as e:  # the cluster went away mid-stream: end it, saying why in the server log
            log.warning("following the log of job %s: %s", job_id, e)

    async def stream() -> AsyncIterator[bytes]:
        cancelled = threading.Event()
        try:
            async for chunk in iterate_in_threadpool(chunks(cancelled)):
                if cancelled.is_set():
                    return
                yield chunk
        finally:
            cancelled.set()  # the client went away: the reading thread stops at its next read timeout

    return _FollowResponse(
        stream(), slot, media_type="text/plain; charset=utf-8", headers={"X-Content-Type-Options": "nosniff"}
    )


@router.get(
    "/{job_id}/logs",
    response_class=StreamingResponse,
    responses={
        **READ_ONE,
        200: {
            "description": "The log's bytes from `offset` (without `follow`: at most `log_read_max_bytes` of them; "
            "`X-Log-Next-Offset` is where the next read starts, `X-Log-Size` the log's size)",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        416: {"description": "`offset` is past the end of the log (code offset_out_of_range; the size is named)"},
        429: {"description": "Too many follows: this token's or the server's (code too_many_follows; Retry-After)"},
    },
    summary="A job's output",
)
async def job_logs(
    job_id: str,
    request: Request,
    ctx: Ctx,
    who: Caller,
    offset: Annotated[int, Query(ge=0, le=2**62, description="byte offset to start from")] = 0,
    follow: Annotated[bool, Query(description="keep streaming until the job has ended")] = False,
) -> Response:
    """The job's output (stdout and stderr) from byte ``offset``.

    Without ``follow`` at most ``log_read_max_bytes`` (default 8 MiB) are sent: ``X-Log-Next-Offset`` is
    where the next read starts (and a ``Link: rel="next"`` says so while there is more),
    ``X-Log-Size`` the log's size. With ``follow=true`` the stream stays open, sending new bytes as
    they are written, until the job has ended and its log is drained, the token is revoked, or the
    client goes away; a token may hold ``log_follows_per_token`` follows (default 4) and the server
    ``log_follows_total`` — more is a 429 with ``Retry-After``. Holes of a sparse log are skipped,
    never sent as zeros (so ``X-Log-Next-Offset``, not a count of the bytes received, is the offset
    to continue from). An ``offset`` past the end of the log written so far is a 416 problem naming
    the log's current size (also with ``follow``: resume from a size you saw)."""
    slot: _Slot | None = None
    if follow:  # refused before any thread or store work: a refusal is cheap
        slots: FollowSlots = request.app.state.log_follows
        refusal = slots.acquire(who.token_id)
        if refusal is not None:
            return problem_response(
                429,
                "too_many_follows",
                refusal,
                instance=request.url.path,
                headers={"Retry-After": str(_RETRY_AFTER_S)},
            )
        slot = _Slot(slots, who.token_id)
    try:
        response = await _job_logs(ctx, request, who, job_id, offset, slot)
    except BaseException:
        if slot is not None:
            slot.release()
        raise
    if slot is not None and not isinstance(response, _FollowResponse):
        slot.release()
    return response


async def _job_logs(
    ctx: ApiContext, request: Request, who: Principal, job_id: str, offset: int, slot: _Slot | None
) -> Response:
    terminal = await anyio.to_thread.run_sync(_visible_terminal, ctx, who, job_id)
    if ctx.job_logs is not None:
        return _other_logs(ctx, ctx.job_logs, request, job_id, offset, not terminal, who.token_id, slot)
    path = ctx.log_path(job_id)
    if slot is None:
        size, pieces, next_offset = await anyio.to_thread.run_sync(_plan, path, offset, ctx.log_read_max_bytes)
        if offset > size:
            return _offset_past_end(request, offset, size)
        return StreamingResponse(
            _read_pieces(path, pieces),
            media_type="text/plain; charset=utf-8",
            headers=_read_headers(request, size, next_offset),
        )
    size = _size(path)
    if offset > size:
        return _offset_past_end(request, offset, size)
    # following an ended job sends what there is (holes skipped) and ends
    return _FollowResponse(
        _follow_file(ctx, request, job_id, who.token_id, offset, terminal),
        slot,
        media_type="text/plain; charset=utf-8",
        headers={"X-Content-Type-Options": "nosniff", "X-Log-Size": str(size)},
    )
