"""Helpers shared by the repository modules: ids, the dialect's INSERT, name checks."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Final, cast

from sqlalchemy import CursorResult, Insert
from sqlalchemy.orm import Session

from gpufleet.errors import InputError

_ID_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz234567"  # RFC 4648 base32, lowercase


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
