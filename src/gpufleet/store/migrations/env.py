"""Alembic environment for gpufleet's store.

Run programmatically by :meth:`gpufleet.store.db.Database.upgrade`, which passes an open connection
in ``config.attributes["connection"]`` (inside the transaction and, on PostgreSQL, the advisory lock
it holds). Without one (the ``alembic`` command pointed at this directory during development) it
connects to ``sqlalchemy.url``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from gpufleet.store.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
