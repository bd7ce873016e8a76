"""Budget periods: the local month, ISO week or custom window containing an instant, and days.

Months and weeks start at local midnight in a named IANA time zone, so a team in Tokyo gets its
month from Tokyo's midnight, across daylight-saving changes. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpufleet.errors import InputError

PERIODS: Final = ("monthly", "weekly", "custom")
DAY_S: Final = 86400.0


@dataclass(frozen=True, slots=True)
class Period:
    start: float
    end: float

    @property
    def length_s(self) -> float:
        return self.end - self.start


def history_text(seconds: float) -> str:
    """``53 s``, ``24 min``, ``5.5 h``, ``3.2 days``: how much history a projection stands on
    (said one way by the budgets, the spend forecast and the recommendations)."""
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < DAY_S:
        return f"{s / 3600:.3g} h"
    days = f"{s / DAY_S:.3g}"
    return f"{days} day" if days == "1" else f"{days} days"


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"unknown time zone '{name}' (an IANA name such as Europe/Paris)", field="timezone") from None


def period_at(
    kind: str, t: float, timezone: str = "UTC", custom_start: float | None = None, custom_end: float | None = None
) -> Period:
    """The period containing instant ``t`` (UNIX seconds).

    Months and weeks start at local midnight in ``timezone`` (so their length in seconds varies
    with the month and with daylight-saving changes inside it). ``custom`` is the one window given,
    whatever ``t`` is."""
    if kind == "custom":
        if custom_start is None or custom_end is None:
            raise InputError("a custom period needs period_start and period_end", field="period_start")
        return Period(custom_start, custom_end)
    tz = zone(timezone)
    local = datetime.fromtimestamp(t, tz)
    if kind == "monthly":
        start = datetime(local.year, local.month, 1, tzinfo=tz)
        year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
        end = datetime(year, month, 1, tzinfo=tz)
    elif kind == "weekly":
        day = local.date() - timedelta(days=local.weekday())
        start = datetime(day.year, day.month, day.day, tzinfo=tz)
        nxt = day + timedelta(days=7)
        end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz)
    else:
        raise InputError(f"unknown period '{kind}' (known: {', '.join(PERIODS)})", field="period")
    return Period(start.timestamp(), end.timestamp())


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def last_complete_day(t: float, timezone: str = "UTC") -> Period:
    """The last whole local day before instant ``t`` in ``timezone``: ``[yesterday 00:00, today
    00:00)`` local time (23 or 25 hours long across a daylight-saving change). Anomalies are judged
    on complete days only: a day still going would always look low."""
    tz = zone(timezone)
    today = datetime.fromtimestamp(t, tz).date()
    yesterday = today - timedelta(days=1)
    start = datetime(yesterday.year, yesterday.month, yesterday.day, tzinfo=tz)
    end = datetime(today.year, today.month, today.day, tzinfo=tz)
    return Period(start.timestamp(), end.timestamp())
