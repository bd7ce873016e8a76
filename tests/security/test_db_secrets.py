"""The store's password never reaches a command line (issue 20, finding 1).

Every account on the machine, every job included, reads ``/proc/<pid>/cmdline``: a password in
``--db`` let a member's job read the store URL of the server, write an admin token into the store
and become admin. The password comes from ``$GPUFLEET_DB``, a 0600 file (``--db-file``,
``db_file:``, ``$GPUFLEET_DB_FILE``) or libpq's own password file; a ``--db`` that carries one is
refused with a message saying where to put it, and a live server's processes show none.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.errors import ConfigError
from gpufleet.store.db import read_url_file, refuse_url_on_command_line, url_secrets
from tests.support.serverproc import ServerProcess

SECRET = "pw-on-the-command-line"
URLS_WITH_A_PASSWORD = {
    "userinfo": f"postgresql+psycopg://gpf:{SECRET}@127.0.0.1:1/gpufleet",
    "query": f"postgresql+psycopg://gpf@127.0.0.1:1/gpufleet?password={SECRET}",
    "plain driver": f"postgresql://gpf:{SECRET}@127.0.0.1:1/gpufleet",
}
COMMANDS = {
    "up": ["up", "--gpus", "1xA100-80GB", "--db"],
    "db upgrade": ["db", "upgrade", "--db"],
    "db current": ["db", "current", "--db"],
    "whatif": ["whatif", "--change", "spot", "--trace", "history:30d", "--db"],
}


@pytest.mark.parametrize("url", list(URLS_WITH_A_PASSWORD.values()), ids=list(URLS_WITH_A_PASSWORD))
@pytest.mark.parametrize("command", list(COMMANDS.values()), ids=list(COMMANDS))
def test_a_password_in_db_on_the_command_line_is_refused(
    command: list[str], url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path / "home"))
    res = CliRunner().invoke(app, [*command, url])
    out = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "--db" in out and "/proc/<pid>/cmdline" in out
    assert "$GPUFLEET_DB" in out and "chmod 600" in out and "pgpass" in out  # where to put it
    assert SECRET not in res.output
    assert not (tmp_path / "home").exists()  # refused before anything was written


def test_urls_without_a_password_pass_on_the_command_line() -> None:
    for url in (
        "sqlite:///tmp/x.db",
        "postgresql+psycopg://gpf@db.internal/gpufleet",
        "postgresql://h/db?sslmode=require",
    ):
        assert url_secrets(url) == []
        assert refuse_url_on_command_line(url) == url
    assert sorted(url_secrets(f"postgresql://u:{SECRET}@h/d?sslpassword=k")) == sorted([SECRET, "k"])


def test_the_url_file_must_be_the_servers_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    f = tmp_path / "db-url"
    f.write_text(f"# the store\n{url}\n")
    f.chmod(0o644)
    with pytest.raises(ConfigError, match=r"mode 0644.*chmod 600"):
        read_url_file(f)
    f.chmod(0o600)
    assert read_url_file(f) == url
    f.write_text("")
    with pytest.raises(ConfigError, match="expected one line"):
        read_url_file(f)
    with pytest.raises(ConfigError, match=r"absent.*cannot read|cannot read"):
        read_url_file(tmp_path / "absent")
    # the db commands find the store through $GPUFLEET_DB_FILE
    f.write_text(url + "\n")
    monkeypatch.delenv("GPUFLEET_DB", raising=False)
    monkeypatch.setenv("GPUFLEET_DB_FILE", str(f))
    res = CliRunner().invoke(app, ["db", "upgrade"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "g.db").exists()


def test_a_settings_file_with_the_password_must_be_private(tmp_path: Path) -> None:
    from gpufleet.server.settings import load_settings

    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(f"db: postgresql+psycopg://gpf:{SECRET}@127.0.0.1:1/gpufleet\n")
    cfg.chmod(0o644)
    with pytest.raises(ConfigError, match=r"field 'db'.*other accounts can read it.*chmod 600") as err:
        load_settings(cfg)
    assert SECRET not in str(err.value)
    cfg.chmod(0o600)
    assert load_settings(cfg).db_url.endswith("@127.0.0.1:1/gpufleet")
    url_file = tmp_path / "url"
    url_file.write_text("sqlite:///x.db\n")
    url_file.chmod(0o600)
    with pytest.raises(ConfigError, match="give one"):
        load_settings(cfg, db_file=url_file)
    assert load_settings(None, db_file=url_file).db_url == "sqlite:///x.db"


def _cmdlines() -> dict[int, str]:
    """Every process's command line, as any account on the machine reads them."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = (
                    Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("how", ["environment", "db_file", "pgpass"])
def test_a_live_server_on_postgresql_shows_no_password(
    how: str, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpufleet up`` on PostgreSQL with password authentication, the URL given three ways, two API
    workers: no process's command line holds the password or the URL, and the store works."""
    from sqlalchemy.engine import make_url

    parsed = make_url(pg_url)
    password = str(parsed.password)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    server = ServerProcess(home, gpus="1xA100-80GB", settings={"api_workers": 2})
    if how == "environment":
        server.db = pg_url
    elif how == "db_file":
        url_file = home / "db-url"
        url_file.write_text(pg_url + "\n")
        url_file.chmod(0o600)
        server.settings["db_file"] = str(url_file)
    else:  # libpq's password file: the URL names no password at all
        pgpass = tmp_path / "pgpass"
        pgpass.write_text(f"{parsed.host}:{parsed.port}:{parsed.database}:{parsed.username}:{password}\n")
        pgpass.chmod(0o600)
        monkeypatch.setenv("PGPASSFILE", str(pgpass))
        server.db = f"{parsed.drivername}://{parsed.username}@{parsed.host}:{parsed.port}/{parsed.database}"
        assert url_secrets(server.db) == []
    server.start()
    try:
        r = httpx.get(f"{server.url}/v1/whoami", headers={"Authorization": f"Bearer {server.token}"}, timeout=30)
        assert r.status_code == 200 and r.json()["role"] == "admin", r.text
        leaks = {pid: line for pid, line in _cmdlines().items() if password in line or "postgresql://" in line}
        leaks.update({pid: line for pid, line in _cmdlines().items() if "postgresql+psycopg://" in line})
        assert not leaks, f"the store URL on a command line: {leaks}"
    finally:
        server.stop()
