"""Checks that the store answers and can write (the readiness probe's queries)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from gpufleet.errors import StoreError

# PostgreSQL: lock the version row only if no one holds it (a replica migrating the schema does,
# for the whole migration): the probe must not queue behind it.
_PG_WRITE = text(
    "UPDATE alembic_version SET version_num = version_num "
    "WHERE version_num IN (SELECT version_num FROM alembic_version FOR UPDATE SKIP LOCKED)"
)
_SQLITE_WRITE = text("UPDATE alembic_version SET version_num = version_num")


def ping(s: Session) -> None:
    """Run ``SELECT 1``; raises whatever the database raises when it does not answer."""
    s.execute(text("SELECT 1"))


def write_probe(s: Session) -> None:
    """A real write that changes nothing: rewrite the schema version row (Alembic's
    ``alembic_version``) with its own value. Run it in a write session: the update or its commit fails on
    a full disk (SQLite: "database or disk is full"), a read-only file or file system, or a
    PostgreSQL database that refuses writes (read-only transactions, a standby). Raises
    :class:`StoreError` with the database's reason (the first line of the driver's message);
    persists nothing new (no table of its own, so no migration).

    On PostgreSQL a version row locked by a migration in progress is skipped (``SKIP LOCKED``):
    that transaction is writing, and a probe waiting for it would time out."""
    try:
        s.execute(_PG_WRITE if s.get_bind().dialect.name == "postgresql" else _SQLITE_WRITE)
        s.flush()
    except DBAPIError as e:
        orig = str(e.orig if e.orig is not None else e).strip()
        raise StoreError(orig.splitlines()[0] if orig else type(e).__name__) from e
