"""A throwaway PostgreSQL cluster for tests and benchmarks.

``PostgresCluster`` runs ``initdb`` + ``pg_ctl`` from the PostgreSQL binaries into a temporary
directory, listening on a free port of 127.0.0.1 with password authentication (SCRAM-SHA-256, for
TCP and the Unix socket alike: a local account or a job that knows the port still needs the
password, as on a real server) and durability turned
off (fsync, synchronous_commit, full_page_writes: a test cluster that dies is simply thrown away).
PostgreSQL refuses to run as root, so as root the server commands run as the ``postgres`` user
through ``runuser``.

Tests use one cluster per pytest session and xdist worker (see ``conftest.py``), migrate a template
database once and clone it per test (``CREATE DATABASE ... TEMPLATE``, milliseconds). Scripts use::

    from tests.support.pg import running_postgres
    with running_postgres() as url:   # postgresql+psycopg://postgres:PASSWORD@127.0.0.1:PORT/gpufleet
        ...
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

PG_BIN_CANDIDATES = (
    os.environ.get("GPUFLEET_PG_BIN", ""),
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/14/bin",
    "/usr/pgsql-16/bin",
    "/usr/pgsql-15/bin",
)
PG_USER = "postgres"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine (or it cannot start)."""


def find_pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    for cand in PG_BIN_CANDIDATES:
        if cand and (Path(cand) / "initdb").exists() and (Path(cand) / "pg_ctl").exists():
            return Path(cand)
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    """One PostgreSQL server in a temporary directory (``start()`` / ``stop()``)."""

    def __init__(self, bin_dir: Path | None = None, *, durable: bool = False) -> None:
        found = bin_dir or find_pg_bin()
        if found is None:
            raise PostgresUnavailable(
                "PostgreSQL server binaries (initdb, pg_ctl) not found: install postgresql "
                "(e.g. apt-get install postgresql) or set GPUFLEET_PG_BIN"
            )
        self.bin_dir = found
        self.as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="gpufleet-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self._names = itertools.count(1)
        self.started = False
        self.durable = durable  # PostgreSQL's default durability (benchmarks), else fsync off (tests)
        self.password = secrets.token_urlsafe(18)  # the superuser's; every connection must give it

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", PG_USER, "--", *args] if self.as_root else list(args)

    def _run(self, *args: str) -> None:
        proc = subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise PostgresUnavailable(f"{' '.join(args[:2])} failed: {proc.stderr.strip() or proc.stdout.strip()}")

    def start(self) -> PostgresCluster:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        if self.as_root:
            shutil.chown(self.root, PG_USER, PG_USER)
            shutil.chown(pwfile, PG_USER, PG_USER)
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            PG_USER,
            "-A",
            "scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        options = " ".join(
            (
                f"-k {self.root}",
                "-c listen_addresses=127.0.0.1",
                "-c max_connections=200",
                "-c shared_buffers=32MB" if not self.durable else "-c shared_buffers=128MB",
            )
        )
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        last = ""
        for _ in range(3):  # the free port may be taken between probing and binding: retry
            self.port = _free_port()
            try:
                self._run(
                    str(self.bin_dir / "pg_ctl"),
                    "start",
                    "-D",
                    str(self.data),
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    str(self.root / "server.log"),
                    "-o",
                    f"-p {self.port} {options}",
                )
            except PostgresUnavailable as e:
                last = str(e)
                continue
            self.started = True
            return self
        log = self.root / "server.log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise PostgresUnavailable(f"PostgreSQL did not start: {last}\n{tail}")

    def stop(self) -> None:
        if self.started:
            with contextlib.suppress(Exception):
                self._run(str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.data), "-m", "immediate", "-w")
            self.started = False
        shutil.rmtree(self.root, ignore_errors=True)

    # -- databases --------------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://{PG_USER}:{self.password}@127.0.0.1:{self.port}/{dbname}"

    def execute(self, sql: str) -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE) on the admin database."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=PG_USER, password=self.password, dbname="postgres", autocommit=True
        ) as c:
            c.execute(sql.encode())  # our own literal statements (bytes: not a LiteralString check)

    def create_database(self, name: str | None = None, *, template: str | None = None) -> str:
        """A new empty (or ``template``-cloned) database; returns its name."""
        name = name or f"test_{os.getpid()}_{next(self._names)}"
        self.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_postgres(dbname: str = "gpufleet", *, durable: bool = False) -> Iterator[str]:
    """A fresh PostgreSQL server with an empty database ``dbname``; yields its SQLAlchemy URL and
    removes everything on exit. For benchmarks and scripts (tests use the conftest fixtures)."""
    with PostgresCluster(durable=durable) as cluster:
        cluster.create_database(dbname)
        yield cluster.url(dbname)
