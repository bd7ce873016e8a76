"""A running job's progress file, read within bounds: what the controller lets through of it.

Jobs write JSON Lines reports to ``$GPUFLEET_PROGRESS_FILE`` (see
:func:`gpufleet.cost.forecast.parse_progress_file`). A job owns its file and may write anything, as
fast as it likes, so one look reads at most ``PROGRESS_READ_LIMIT`` bytes (the newest: a backlog is
skipped, never re-read), drops lines longer than ``MAX_PROGRESS_LINE_BYTES`` and lines over the API's
limits one by one, and hands the controller at most a budget of fresh reports, thinned evenly, the
newest always kept (:func:`pick_progress`). :class:`ProgressRead` is one run's reading state; the
controller (:mod:`gpufleet.control.controller`) owns the budget (a token bucket) and the store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gpufleet.backends.base import read_job_file
from gpufleet.cost.forecast import MAX_PROGRESS_LINE_BYTES, ProgressReport, parse_progress_line
from gpufleet.errors import InputError
from gpufleet.wire import ProgressIn

PROGRESS_READ_LIMIT = 1024 * 1024  # bytes of a job's progress file read per look (the newest, if more wait)
PROGRESS_NEWEST_TRIES = 16  # lines looked back from a look's last for the newest valid report


@dataclass(slots=True)
class ProgressRead:
    """What the controller knows of one run's progress file, and what it let through."""

    offset: int  # bytes consumed
    tokens: float  # the run's token bucket: rows it may still store now ...
    refilled: float  # ... as of this time
    seen: float | None = None  # the newest report stored (its time): older ones are not stored again
    known: bool = False  # seen has been read from the store (once per run: a restart re-reads the file)
    midline: bool = False  # offset is inside a line (an over-long one, or a skipped backlog)
    pending: ProgressReport | None = None  # the newest report, waiting for a token
    stored: int = 0  # rows stored
    thinned: int = 0  # lines dropped by the limits (rows a look, rows a second)
    skipped: int = 0  # bytes of backlog left unread (more than a read behind)
    ignored: int = 0  # lines ignored: too long, not a report, or over the API's limits
    first_error: str = ""  # why the first ignored line was
    told_thinned: bool = False  # the job event saying so is written once per run ...
    told_ignored: bool = False  # ... and this one too

    def note_ignored(self, why: str) -> None:
        self.ignored += 1
        if not self.first_error:
            self.first_error = why[:500]


def _progress_report(raw: bytes, source: str) -> ProgressReport:
    """One line of a progress file as a report, within the limits the API puts on the same report
    (:class:`~gpufleet.wire.ProgressIn`: at most 32 metrics, names of at most 63 printable
    characters, steps up to 1e15); :class:`InputError` naming the field otherwise."""
    r = parse_progress_line(raw.decode(errors="replace"), source=source)
    try:
        ProgressIn(step=r.step, total_steps=r.total_steps, metrics=dict(r.metrics))
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        where = ".".join(str(x) for x in err["loc"])
        raise InputError(f"{err['msg']} (as for POST /v1/jobs/{{id}}/progress)", source=source, field=where) from None
    return r


def progress_lines(st: ProgressRead, path: Path) -> list[bytes]:
    """The whole, non-blank lines of ``path`` past ``st.offset``, at most
    ``PROGRESS_READ_LIMIT`` bytes of them (the newest: a larger backlog is skipped). Lines
    longer than ``MAX_PROGRESS_LINE_BYTES`` are dropped (counted as ignored); the offset moves
    past everything returned or dropped, so nothing is read twice."""
    try:
        size = os.lstat(path).st_size  # a hint only: read_job_file checks what it opens
    except OSError:
        return []
    if size < st.offset:  # truncated or replaced: read from the start (stored reports are skipped by time)
        st.offset, st.midline = 0, False
    offset, limit = st.offset, PROGRESS_READ_LIMIT
    if size - offset > limit:  # more than a read behind: read the newest, skip the backlog
        st.skipped += size - limit - offset
        # from the byte before the newest read: the first line is whole if that byte ends a line
        offset, limit, st.midline = size - limit - 1, limit + 1, True
    # the job owns the file: no link is followed, at most PROGRESS_READ_LIMIT bytes per look
    chunk = read_job_file(path, offset, limit)
    if not chunk:
        return []
    begin = 0
    if st.midline:  # inside a line: drop it up to its end
        nl = chunk.find(b"\n")
        if nl < 0:
            st.offset = offset + len(chunk)
            return []
        begin, st.midline = nl + 1, False
    end = max(begin, chunk.rfind(b"\n") + 1)
    if len(chunk) - end > MAX_PROGRESS_LINE_BYTES:  # the line being written is already too long
        st.note_ignored(f"a line longer than {MAX_PROGRESS_LINE_BYTES} bytes")
        st.offset, st.midline = offset + len(chunk), True
    else:
        st.offset = offset + end  # a partial last line is read again when whole
    lines = []
    for raw in chunk[begin:end].split(b"\n"):
        if len(raw) > MAX_PROGRESS_LINE_BYTES:
            st.note_ignored(f"a line longer than {MAX_PROGRESS_LINE_BYTES} bytes")
        elif raw.strip():
            lines.append(raw)
    return lines


def pick_progress(st: ProgressRead, lines: list[bytes], budget: int, source: str) -> list[ProgressReport]:
    """The fresh reports (newer than ``st.seen``) to store of a look's ``lines``, at most
    ``budget``, in time order: the newest valid one (or, if none, the one waiting in
    ``st.pending``) and others evenly spread before it. With no budget the newest waits in
    ``st.pending`` for the next look that has one. Lines are parsed only if picked."""

    def report(i: int) -> ProgressReport | None:
        try:
            return _progress_report(lines[i], source)
        except InputError as e:
            st.note_ignored(str(e))
            return None

    def fresh(r: ProgressReport | None) -> bool:
        return r is not None and (st.seen is None or r.time > st.seen)

    n = len(lines)
    newest: ProgressReport | None = None
    rest = n  # lines[:rest] are not looked at yet
    while newest is None and rest > max(0, n - PROGRESS_NEWEST_TRIES):
        rest -= 1
        newest = report(rest)
    if not fresh(newest):  # older than what is stored: so are the lines before it
        newest = None
    picks: list[ProgressReport] = []
    if newest is not None:
        if st.pending is not None:  # superseded by a newer report
            st.thinned += 1
        st.pending = None
        if budget < 1:
            st.pending = newest
        else:
            picks.append(newest)
    elif st.pending is not None and budget >= 1:
        picks.append(st.pending)
        st.pending = None
    room = max(0, budget - len(picks))
    chosen = range(rest) if rest <= room else [(j * rest) // room for j in range(room)]
    st.thinned += rest - len(chosen)
    for i in chosen:
        r = report(i)
        if r is not None and fresh(r):
            picks.append(r)
    picks.sort(key=lambda r: r.time)
    return picks
