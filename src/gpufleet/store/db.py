"""The database handle: one :class:`Database` per process and URL.

Two engines are supported, chosen by URL:

- ``sqlite:///path`` — the embedded default for one server. WAL journal (readers never block the
  writer), a 10 s busy timeout, foreign keys on. Write transactions start with ``BEGIN IMMEDIATE``:
  with SQLite's default deferred ``BEGIN`` two threads that both read and then write deadlock on
  the lock upgrade (one gets ``SQLITE_BUSY`` at once, the busy timeout cannot help), so a write
  session takes the write lock up front and waits for it instead. Read-only sessions
  (``session(readonly=True)``) use a plain ``BEGIN`` and run concurrently with a writer.
- ``postgresql+psycopg://...`` — clusters with several API replicas: a pooled engine with
  pre-ping so connections dropped by a failover or a proxy are replaced transparently.

Schema changes are Alembic migrations shipped inside the package (``store/migrations``) and applied
with :meth:`Database.upgrade`, which holds a PostgreSQL advisory lock so replicas starting together
migrate once. Errors reaching the database become :class:`~gpufleet.errors.StoreError` naming the
URL with its password masked.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gpufleet.errors import ConfigError, StoreError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 10_000
# pg_advisory_lock key for migrations: any constant unique to gpufleet (b"gpfl" as an int).
MIGRATION_LOCK_KEY = 0x6770666C


DB_URL_ENV = "GPUFLEET_DB"  # the store's URL, password included (a process's environment is its own)
DB_URL_FILE_ENV = "GPUFLEET_DB_FILE"  # ... or the path of a file holding it, readable by its owner only
WHERE_TO_PUT_A_PASSWORD = (
    f"put the URL in ${DB_URL_ENV}, or in a file only the server's account can read (chmod 600) named by "
    f"--db-file, `db_file:` in the settings or ${DB_URL_FILE_ENV}, or keep the password in a libpq password "
    "file (~/.pgpass or $PGPASSFILE) or service file ($PGSERVICEFILE) and leave it out of the URL"
)


def url_secrets(url: str) -> list[str]:
    """The parts of a store URL that are secrets: its password and any ``password``/``sslpassword``
    query parameter (libpq takes both). Empty for a URL that names none (or cannot be parsed)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return []
    found = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if key.lower() in ("password", "sslpassword", "passfile_password"):
            found += [value] if isinstance(value, str) else list(value)
    return [str(v) for v in found if v]


def refuse_url_on_command_line(url: str | None, flag: str = "--db") -> str | None:
    """``url`` as given on a command line, refused when it carries a password: every account on the
    machine, each job included, reads ``/proc/<pid>/cmdline``."""
    if url is not None and url_secrets(url):
        raise ConfigError(
            "a password on the command line is readable by every account on this machine "
            f"(/proc/<pid>/cmdline), every job included: {WHERE_TO_PUT_A_PASSWORD}",
            field=flag,
        )
    return url


def read_url_file(path: Path | str) -> str:
    """The store URL kept in ``path``: a file of the server's own account (or root's) that no other
    account can read or write. Anything else is refused, naming the file and what to fix."""
    where = str(path)
    try:
        st = os.stat(path)
        if st.st_uid not in (os.geteuid(), 0):
            raise ConfigError(f"owned by uid {st.st_uid}, not by this server's account", source=where)
        if st.st_mode & 0o077:
            raise ConfigError(
                f"readable or writable by other accounts (mode {st.st_mode & 0o777:04o}): chmod 600 {where}",
                source=where,
            )
        with open(path, encoding="utf-8") as f:
            text = f.read(64 * 1024)
    except OSError as e:
        raise ConfigError(f"cannot read the store URL file: {e.strerror}", source=where) from None
    except UnicodeDecodeError:
        raise ConfigError("the store URL file is not UTF-8 text", source=where) from None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if len(lines) != 1:
        raise ConfigError(f"expected one line with the store URL, found {len(lines)}", source=where)
    return lines[0]


def default_db_url() -> str:
    """The store the server uses when none is configured: ``$GPUFLEET_DB``, else the URL in the file
    ``$GPUFLEET_DB_FILE`` names, else ``sqlite:///<home>/gpufleet.db`` with home ``$GPUFLEET_HOME`` or
    the user's data directory.

    (This reads the environment because the CLI's ``db`` commands must find the same store as the
    server without loading the server's settings.)"""
    env = os.environ.get(DB_URL_ENV)
    if env:
        return env
    url_file = os.environ.get(DB_URL_FILE_ENV)
    if url_file:
        return read_url_file(url_file)
    home = os.environ.get("GPUFLEET_HOME")
    if home:
        base = Path(home).expanduser()
    else:
        import platformdirs

        base = Path(platformdirs.user_data_dir("gpufleet"))
    return f"sqlite:///{base / 'gpufleet.db'}"


def mask_url(url: str | URL) -> str:
    """``url`` with its password replaced by ``***`` (safe for logs and error messages)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def _first_line(exc: BaseException) -> str:
    """The driver's message without SQLAlchemy's SQL/background boilerplate."""
    orig = getattr(exc, "orig", None)
    msg = str(orig if orig is not None else exc).strip()
    return msg.splitlines()[0] if msg else type(exc).__name__


def _ensure_wal(cur: Any) -> None:
    """Switch the file to WAL (persistent, so this only works once per file). Unlike other
    statements the switch fails at once, ignoring the busy timeout, while another connection holds
    a lock, which happens when several processes create a new store together: retry it."""
    import sqlite3

    if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
        return
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class Database:
    """A connection pool to one store and the session factory on it (thread-safe).

    ``session()`` is the unit of work: it commits when the block ends normally and rolls back when
    it raises. Repository functions (:mod:`gpufleet.store.repo`) take the session as their first
    argument so the service decides what is atomic.
    """

    def __init__(self, url: str, *, echo: bool = False) -> None:
        try:
            self.url: URL = make_url(url)
        except ArgumentError as e:
            raise StoreError(f"invalid database URL {url!r}: {e}") from None
        self.masked_url = self.url.render_as_string(hide_password=True)
        backend = self.url.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise StoreError(f"unsupported database URL {self.masked_url}: use sqlite:/// or postgresql+psycopg://")
        try:
            if backend == "sqlite":
                self.engine = self._sqlite_engine(immediate=True, echo=echo)
                in_memory = self.url.database in (None, "", ":memory:")  # one engine = one database
                self._read_engine = self.engine if in_memory else self._sqlite_engine(immediate=False, echo=echo)
            else:
                if self.url.drivername == "postgresql":  # psycopg 3 is the one installed driver
                    self.url = self.url.set(drivername="postgresql+psycopg")
                self.engine = create_engine(
                    self.url,
                    echo=echo,
                    pool_size=10,
                    max_overflow=20,
                    pool_pre_ping=True,
                    pool_recycle=1800,
                    connect_args={"connect_timeout": 10},
                )
                self._read_engine = self.engine
        except (ArgumentError, NoSuchModuleError, ImportError) as e:
            raise StoreError(f"cannot use database URL {self.masked_url}: {e}") from None
        self._write_lock = threading.Lock()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._read_sessions = sessionmaker(self._read_engine, expire_on_commit=False)

    # -- engines ----------------------------------------------------------------------------------

    def _sqlite_engine(self, *, immediate: bool, echo: bool) -> Engine:
        database = self.url.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            try:
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the directory of {self.masked_url}: {e.strerror}") from None
        engine = create_engine(self.url, echo=echo, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control away from the driver so "begin" below decides how to BEGIN.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            try:
                cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
                _ensure_wal(cur)
                cur.execute("PRAGMA synchronous = NORMAL")  # durable enough with WAL, much faster
                cur.execute("PRAGMA foreign_keys = ON")
            finally:
                cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql(begin)

        return engine

    @property
    def safe_url(self) -> str:
        """The URL with its password masked (same as ``masked_url``)."""
        return self.masked_url

    @property
    def is_postgres(self) -> bool:
        return self.url.get_backend_name() == "postgresql"

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    # -- sessions ---------------------------------------------------------------------------------

    @contextmanager
    def session(self, *, readonly: bool = False) -> Iterator[Session]:
        """A transaction: commit on success, roll back on error.

        ``readonly=True`` promises not to write; on SQLite it then does not take the write lock
        (on PostgreSQL it changes nothing). Database errors become :class:`StoreError`; integrity
        errors the caller did not handle propagate unchanged (they are bugs or conflicts)."""
        factory = self._read_sessions if readonly else self._sessions
        # SQLite has one writer: queue this process's writers on a lock (a fair, immediate hand-off)
        # rather than in SQLite's busy handler, which sleeps and backs off (seconds under load)
        lock = self._write_lock if (self.is_sqlite and not readonly) else nullcontext()
        with lock, factory() as s:
            try:
                s.connection()  # connect (and BEGIN) now, so an unreachable store fails here
            except DBAPIError as e:
                raise StoreError(f"cannot connect to the store at {self.masked_url}: {_first_line(e)}") from e
            try:
                yield s
                s.commit()
            except OperationalError as e:
                s.rollback()
                raise StoreError(f"store error at {self.masked_url}: {_first_line(e)}") from e
            except BaseException:
                s.rollback()
                raise

    # -- schema -----------------------------------------------------------------------------------

    def _alembic_config(self, connection: Connection | None = None) -> Any:
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        # ConfigParser interpolation would choke on '%' in passwords; the env uses the connection.
        cfg.set_main_option("sqlalchemy.url", self.url.render_as_string(hide_password=False).replace("%", "%%"))
        if connection is not None:
            cfg.attributes["connection"] = connection
        return cfg

    def head_revision(self) -> str | None:
        """The newest migration this code ships."""
        from alembic.script import ScriptDirectory

        return ScriptDirectory.from_config(self._alembic_config()).get_current_head()

    def upgrade(self, revision: str = "head") -> None:
        """Apply the shipped migrations up to ``revision``. Idempotent; on PostgreSQL several
        processes may call it at once (an advisory lock serializes them, the later ones find the
        schema already at head). On SQLite ``BEGIN IMMEDIATE`` serializes them."""
        from alembic import command

        try:
            with self.engine.connect() as conn:
                if self.is_postgres:
                    conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
                    conn.commit()
                try:
                    with conn.begin():
                        command.upgrade(self._alembic_config(conn), revision)
                finally:
                    if self.is_postgres:
                        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
                        conn.commit()
        except DBAPIError as e:
            raise StoreError(f"cannot migrate the store at {self.masked_url}: {_first_line(e)}") from e

    def current_revision(self) -> str | None:
        """The migration the database is at (None: never migrated)."""
        from alembic.runtime.migration import MigrationContext

        try:
            with self._read_engine.connect() as conn:
                return MigrationContext.configure(conn).get_current_revision()
        except DBAPIError as e:
            raise StoreError(f"cannot connect to the store at {self.masked_url}: {_first_line(e)}") from e

    def check_schema(self) -> None:
        """Refuse to run on a store that is not at this code's schema (StoreError says what to do)."""
        current, head = self.current_revision(), self.head_revision()
        if current == head:
            return
        if current is None:
            raise StoreError(f"the store at {self.masked_url} has no schema: run 'gpufleet db upgrade'")
        raise StoreError(
            f"the store at {self.masked_url} is at schema {current}, this gpufleet expects {head}: "
            "run 'gpufleet db upgrade' (or upgrade gpufleet if the store is newer)"
        )

    def dispose(self) -> None:
        """Close every pooled connection (call at shutdown and in tests)."""
        self.engine.dispose()
        if self._read_engine is not self.engine:
            self._read_engine.dispose()

    def __repr__(self) -> str:
        return f"Database({self.masked_url!r})"
