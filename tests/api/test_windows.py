"""Usage windows: names, durations and RFC 3339 pairs, each bad one naming the field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.api.windows import Window, parse_window
from gpufleet.errors import InputError


def t(s: str) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()


NOW = t("2026-11-12T15:30:00")  # a Thursday


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("today", t("2026-11-12T00:00:00"), NOW),
        ("TODAY", t("2026-11-12T00:00:00"), NOW),
        ("yesterday", t("2026-11-11T00:00:00"), t("2026-11-12T00:00:00")),
        ("week", t("2026-11-09T00:00:00"), NOW),
        ("lastweek", t("2026-11-02T00:00:00"), t("2026-11-09T00:00:00")),
        ("month", t("2026-11-01T00:00:00"), NOW),
        ("lastmonth", t("2026-10-01T00:00:00"), t("2026-11-01T00:00:00")),
        ("7d", NOW - 7 * 86400, NOW),
        ("30d", NOW - 30 * 86400, NOW),
        ("24h", NOW - 86400, NOW),
        ("90m", NOW - 5400, NOW),
        ("2w", NOW - 14 * 86400, NOW),
        ("1.5h", NOW - 5400, NOW),
        ("2026-11-01T00:00:00Z,2026-11-08T00:00:00Z", t("2026-11-01T00:00:00"), t("2026-11-08T00:00:00")),
        ("2026-11-01T02:00:00+02:00, 2026-11-02T00:00:00Z", t("2026-11-01T00:00:00"), t("2026-11-02T00:00:00")),
        ("1700000000,1700003600", 1700000000.0, 1700003600.0),
        # a pair reaching into the future ends now
        ("2026-11-12T00:00:00Z,2026-11-20T00:00:00Z", t("2026-11-12T00:00:00"), NOW),
    ],
)
def test_windows(text: str, start: float, end: float) -> None:
    assert parse_window(text, NOW) == Window(start, end)


def test_month_boundary_january() -> None:
    now = t("2027-01-05T10:00:00")
    assert parse_window("lastmonth", now) == Window(t("2026-12-01T00:00:00"), t("2027-01-01T00:00:00"))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("fortnight", "neither a name"),
        ("7x", "neither a name"),
        ("0d", "positive"),
        ("99999d", "ten years"),
        ("2026-11-08T00:00:00Z,2026-11-01T00:00:00Z", "after the start"),
        ("2026-11-01T00:00:00,2026-11-08T00:00:00Z", "no time zone"),
        ("2026-13-01T00:00:00Z,2026-11-08T00:00:00Z", "not an RFC 3339"),
        ("a,b,c", "exactly 'start,end'"),
        ("-5,10", "not a valid UNIX time"),
    ],
)
def test_bad_windows(text: str, why: str) -> None:
    with pytest.raises(InputError) as err:
        parse_window(text, NOW, field="query.window")
    assert err.value.field == "query.window"
    assert why in err.value.message
