"""``gpufleet db``: the store's schema (Alembic migrations shipped with gpufleet).

The server migrates its store on start; these commands are for operators who migrate ahead of a
rollout (e.g. a Kubernetes init job against PostgreSQL) or want to see where a store stands.
"""

from typing import Annotated

import typer

from gpufleet.cli.common import console, handle_errors

db_app = typer.Typer(no_args_is_help=True, help="The store's schema: apply migrations, show the current one.")

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="SQLAlchemy URL of the store without a password (sqlite:///path or postgresql+psycopg://user@host/db); "
        "default: $GPUFLEET_DB, the file $GPUFLEET_DB_FILE names, or the server's SQLite file",
        show_default=False,
    ),
]


@db_app.command()
@handle_errors
def upgrade(db: DbOption = None) -> None:
    """Apply the migrations up to the newest (safe to run again, and from several replicas)."""
    from gpufleet.store.db import Database, default_db_url, refuse_url_on_command_line

    database = Database(refuse_url_on_command_line(db) or default_db_url())
    try:
        before = database.current_revision()
        database.upgrade()
        after = database.current_revision()
    finally:
        database.dispose()
    if before == after:
        console.print(f"{database.masked_url}: already at {after}", highlight=False, soft_wrap=True)
    else:
        console.print(
            f"{database.masked_url}: upgraded {before or '(empty)'} → {after}", highlight=False, soft_wrap=True
        )


@db_app.command()
@handle_errors
def current(db: DbOption = None) -> None:
    """Show the schema revision of the store and the newest this gpufleet ships."""
    from gpufleet.store.db import Database, default_db_url, refuse_url_on_command_line

    database = Database(refuse_url_on_command_line(db) or default_db_url())
    try:
        rev, head = database.current_revision(), database.head_revision()
    finally:
        database.dispose()
    state = "up to date" if rev == head else "needs 'gpufleet db upgrade'"
    console.print(f"{database.masked_url}: {rev or '(empty)'} (head {head}; {state})", highlight=False, soft_wrap=True)
