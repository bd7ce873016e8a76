"""``/readyz`` tells the truth about writes (issue 20, point 5): a job filled the disk, every submit
and cancel got 503, and ``/readyz`` said 200 because ``SELECT 1`` still answered.

Now ``/readyz`` is 503 (a problem document whose ``detail`` says why) when

- the store cannot commit a write: a full file system under a SQLite store (a 2 MiB tmpfs filled
  up, as root), a read-only one (the tmpfs remounted read-only), a PostgreSQL database that
  refuses writes (``default_transaction_read_only``);
- the file system of the store or of the job logs has less free space than ``min_free_bytes``;

and 200 again once the cause is gone. The verdict is reused for about a second
(:data:`gpufleet.api.routes.system.READY_CACHE_S`) so that probes do not load the store.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from gpufleet.api.routes.system import Readiness
from tests.support.api_support import Api, make_api, problem

MIB = 1024 * 1024


def _fresh(api: Api, min_free_bytes: int | None = None) -> None:
    """No cached verdict; optionally another free-space threshold."""
    app = api.client.app
    app.state.readiness = Readiness(ttl_s=0.0)  # type: ignore[attr-defined]
    if min_free_bytes is not None:
        app.state.ctx.min_free_bytes = min_free_bytes  # type: ignore[attr-defined]


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "2m") -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(directory: Path) -> Path:
    """Write zeros until the file system is full; the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    os.close(fd)
    return filler


def test_ready_when_the_store_writes(tmp_path: Path, db_url: str) -> None:
    gen = make_api(tmp_path, db_url)
    api = next(gen)
    r = api.client.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    gen.close()


def test_not_ready_when_the_disk_is_full(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "home") as home:
        gen = make_api(tmp_path, f"sqlite:///{home / 'gpufleet.db'}")
        api = next(gen)
        _fresh(api, min_free_bytes=0)  # the write itself, not the threshold
        assert api.client.get("/readyz").status_code == 200
        filler = _fill(home)
        # the store cannot write: submits fail, and readyz says so
        r = api.client.post("/v1/jobs", json={"command": ["x"]}, headers=api.h("alice"))
        assert r.status_code == 503, r.text
        doc = problem(api.client.get("/readyz"), 503, "not_ready")
        assert "cannot write" in doc["detail"] and "full" in doc["detail"], doc
        # with the default threshold the free space is reported too (the first reason found)
        _fresh(api, min_free_bytes=256 * MIB)
        doc = problem(api.client.get("/readyz"), 503, "not_ready")
        assert "free" in doc["detail"] and str(home) in doc["detail"], doc
        filler.unlink()
        _fresh(api, min_free_bytes=0)
        assert api.client.get("/readyz").status_code == 200
        gen.close()


def test_not_ready_when_the_store_is_read_only(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "home", size="16m") as home:
        gen = make_api(tmp_path, f"sqlite:///{home / 'gpufleet.db'}")
        api = next(gen)
        _fresh(api, min_free_bytes=0)
        assert api.client.get("/readyz").status_code == 200
        api.db.dispose()  # no file open for writing: the remount is allowed
        subprocess.run(["mount", "-o", "remount,ro", str(home)], check=True)
        try:
            _fresh(api)
            doc = problem(api.client.get("/readyz"), 503, "not_ready")
            assert "cannot write" in doc["detail"], doc
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(home)], check=True)
        api.db.dispose()
        _fresh(api)
        assert api.client.get("/readyz").status_code == 200
        gen.close()


def test_not_ready_when_postgresql_refuses_writes(tmp_path: Path, pg_url: str) -> None:
    gen = make_api(tmp_path, pg_url)
    api = next(gen)
    _fresh(api)
    assert api.client.get("/readyz").status_code == 200
    name = make_url(pg_url).database
    admin = create_engine(make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
        api.db.dispose()  # new connections take the database's setting
        _fresh(api)
        doc = problem(api.client.get("/readyz"), 503, "not_ready")
        assert "cannot write" in doc["detail"] and "read-only" in doc["detail"], doc
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
        api.db.dispose()
        _fresh(api)
        assert api.client.get("/readyz").status_code == 200
    finally:
        admin.dispose()
        gen.close()


def test_not_ready_below_the_free_space_threshold(tmp_path: Path, db_url: str) -> None:
    gen = make_api(tmp_path, db_url)
    api = next(gen)
    _fresh(api, min_free_bytes=2**62)  # more than any disk has
    doc = problem(api.client.get("/readyz"), 503, "not_ready")
    assert "bytes free" in doc["detail"] and "min_free_bytes" in doc["detail"], doc
    assert str(api.logs) in doc["detail"] or str(tmp_path) in doc["detail"], doc
    _fresh(api, min_free_bytes=1)
    assert api.client.get("/readyz").status_code == 200
    gen.close()


def test_the_verdict_is_reused_for_a_second(tmp_path: Path) -> None:
    """Probes in a burst cost one write: the verdict is kept for ``ttl_s`` (the process's readiness
    flag is read every time)."""
    gen = make_api(tmp_path)
    api = next(gen)
    app = api.client.app
    app.state.readiness = Readiness(ttl_s=3600.0)  # type: ignore[attr-defined]
    assert api.client.get("/readyz").status_code == 200
    app.state.ctx.min_free_bytes = 2**62  # type: ignore[attr-defined]
    assert api.client.get("/readyz").status_code == 200  # the kept verdict
    api.ready[0] = False
    problem(api.client.get("/readyz"), 503, "not_ready")  # not kept: the flag
    api.ready[0] = True
    app.state.readiness = Readiness(ttl_s=3600.0)  # type: ignore[attr-defined]
    problem(api.client.get("/readyz"), 503, "not_ready")
    gen.close()
