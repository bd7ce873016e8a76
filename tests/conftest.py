"""Shared fixtures: a fresh, migrated store per test on SQLite and on a real PostgreSQL.

- ``db_url`` — parametrized ``sqlite`` / ``postgresql``: the URL of a fresh database at the newest
  schema (SQLite: a copy of a migrated template file; PostgreSQL: ``CREATE DATABASE ... TEMPLATE``
  of a database migrated once per session).
- ``db`` — a :class:`~gpufleet.store.db.Database` on ``db_url`` (disposed after the test).
- ``empty_db_url`` — the same two backends, but an empty database (for migration tests).
- ``pg_url`` — PostgreSQL only, fresh and migrated (end-to-end tests, benchmarks).

One PostgreSQL cluster runs per pytest session and xdist worker (``tests/support/pg.py``), started on first
use. Without PostgreSQL binaries the PostgreSQL cases fail with a message saying what to install;
set ``GPUFLEET_SKIP_PG=1`` to skip them instead (CI installs PostgreSQL, so there they always run).
"""

from __future__ import annotations

import atexit
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.store.db import Database
from tests.support.pg import PostgresCluster, PostgresUnavailable

PG_TEMPLATE = "gpufleet_template"
BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    """This worker's PostgreSQL server, with a migrated template database."""
    problem = ""
    try:
        cluster = PostgresCluster()
        atexit.register(cluster.stop)  # also when the session is interrupted
        cluster.start()
    except PostgresUnavailable as e:
        problem = str(e)
    if problem:  # outside the except block: one clear message, no chained traceback
        if os.environ.get("GPUFLEET_SKIP_PG") == "1":
            pytest.skip(f"PostgreSQL tests skipped (GPUFLEET_SKIP_PG=1): {problem}")
        pytest.fail(f"{problem}\n(set GPUFLEET_SKIP_PG=1 to skip the PostgreSQL tests)", pytrace=False)
    try:
        cluster.create_database(PG_TEMPLATE)
        template = Database(cluster.url(PG_TEMPLATE))
        template.upgrade()
        template.dispose()  # CREATE DATABASE ... TEMPLATE needs the template unused
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "gpufleet.db"
    template = Database(f"sqlite:///{path}")
    template.upgrade()
    template.dispose()  # the last connection checkpoints the WAL into the file
    return path


def _pg_database(cluster: PostgresCluster, *, migrated: bool) -> Iterator[str]:
    name = cluster.create_database(template=PG_TEMPLATE if migrated else None)
    try:
        yield cluster.url(name)
    finally:
        cluster.drop_database(name)


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        path = tmp_path / "gpufleet.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
    else:
        yield from _pg_database(request.getfixturevalue("pg_cluster"), migrated=True)


@pytest.fixture(params=BACKENDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        yield from _pg_database(request.getfixturevalue("pg_cluster"), migrated=False)


@pytest.fixture
def pg_url(pg_cluster: PostgresCluster) -> Iterator[str]:
    yield from _pg_database(pg_cluster, migrated=True)


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    try:
        yield database
    finally:
        database.dispose()
