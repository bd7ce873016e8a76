"""The scheduler's leader lock on PostgreSQL: a session-level advisory lock on a connection kept for it."""

from __future__ import annotations

from sqlalchemy import Connection, text

# These take the dedicated Connection, not a Session: the lock belongs to the database session of
# that connection and outlives every transaction on it. The caller commits (and closes).


def try_advisory_lock(conn: Connection, key: int) -> bool:
    """Take advisory lock ``key`` without waiting (``pg_try_advisory_lock``): True when this
    connection holds it now. It is held until :func:`advisory_unlock` or the connection closes."""
    return bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar())


def ping_connection(conn: Connection) -> None:
    """A round trip on ``conn`` (``SELECT 1``): raises when the connection, and with it the lock, is gone."""
    conn.execute(text("SELECT 1"))


def advisory_unlock(conn: Connection, key: int) -> None:
    """Release advisory lock ``key`` held by this connection (``pg_advisory_unlock``)."""
    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
