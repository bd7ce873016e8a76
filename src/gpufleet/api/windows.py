"""Usage windows, OpenCost-style (``window=7d``, ``today``, ``2026-11-01T00:00:00Z,2026-11-08T00:00:00Z``).

Calendar windows are in UTC. A window that contains ``now`` ends at ``now`` (what has happened so
far), a past one at its calendar end. Weeks start on Monday (ISO 8601).

- ``today``, ``yesterday``, ``week`` (this week), ``month`` (this month), ``lastweek``,
  ``lastmonth``;
- a duration back from now: ``<n>m``, ``<n>h``, ``<n>d``, ``<n>w`` (e.g. ``90m``, ``24h``, ``7d``);
- an explicit pair ``start,end`` of RFC 3339 times with a zone (``Z`` or ``+02:00``), or of UNIX
  seconds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpufleet.errors import InputError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([mhdw])$")
_UNIT_S = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_MAX_SPAN_S = 3660 * 86400.0  # ten years: anything longer is a typo
_NAMED = ("today", "yesterday", "week", "lastweek", "month", "lastmonth")


@dataclass(frozen=True, slots=True)
class Window:
    start: float  # UNIX seconds, inclusive
    end: float  # UNIX seconds, exclusive (<= now)


def parse_window(text: str, now: float, *, field: str = "window") -> Window:
    """Parse ``text`` into a window ending no later than ``now``; :class:`InputError` names ``field``."""
    spec = text.strip().lower()
    if not spec:
        raise _bad(text, "it is empty", field)
    if "," in spec:
        return _pair(text, now, field)
    if spec in _NAMED:
        return _named(spec, now)
    m = _DURATION.match(spec)
    if m is None:
        raise _bad(text, "it is neither a name, a duration nor a 'start,end' pair", field)
    span = float(m.group(1)) * _UNIT_S[m.group(2)]
    if span <= 0:
        raise _bad(text, "the duration must be positive", field)
    if span > _MAX_SPAN_S:
        raise _bad(text, "the duration is longer than ten years", field)
    return Window(now - span, now)


def _named(spec: str, now: float) -> Window:
    today = datetime.fromtimestamp(now, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if spec == "today":
        start, end = today, None
    elif spec == "yesterday":
        start, end = today - timedelta(days=1), today
    elif spec in ("week", "lastweek"):
        monday = today - timedelta(days=today.weekday())
        start, end = (monday, None) if spec == "week" else (monday - timedelta(days=7), monday)
    else:
        first = today.replace(day=1)
        if spec == "month":
            start, end = first, None
        else:
            prev = (first - timedelta(days=1)).replace(day=1)
            start, end = prev, first
    return Window(start.timestamp(), now if end is None else min(now, end.timestamp()))


def _pair(text: str, now: float, field: str) -> Window:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise _bad(text, "a window pair is exactly 'start,end'", field)
    start, end = (_instant(p, text, field) for p in parts)
    if end <= start:
        raise _bad(text, "the end must be after the start", field)
    if end - start > _MAX_SPAN_S:
        raise _bad(text, "the window is longer than ten years", field)
    return Window(start, min(end, max(start, now)))


def _instant(part: str, text: str, field: str) -> float:
    try:
        value = float(part)
    except ValueError:
        pass
    else:
        if not math.isfinite(value) or value < 0:
            raise _bad(text, f"'{part}' is not a valid UNIX time", field)
        return value
    try:
        when = datetime.fromisoformat(part.replace("z", "Z").replace("t", "T"))
    except ValueError:
        raise _bad(text, f"'{part}' is not an RFC 3339 time (e.g. 2026-11-01T00:00:00Z)", field) from None
    if when.tzinfo is None:
        raise _bad(text, f"'{part}' has no time zone (add 'Z' for UTC)", field)
    return when.timestamp()


def _bad(text: str, why: str, field: str) -> InputError:
    return InputError(
        f"bad window '{text}': {why}; use today, yesterday, week, month, lastweek, lastmonth, a duration "
        "such as 90m, 24h, 7d, 2w, or 'start,end' in RFC 3339",
        field=field,
    )
