"""Settings of ``gpufleet up``: YAML file < environment < flags, validated with clear messages;
the single-user admin token file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpufleet.errors import ConfigError
from gpufleet.server.host import ensure_admin_token, seed_teams
from gpufleet.server.settings import load_settings
from gpufleet.store import repo
from gpufleet.store.db import Database


def test_defaults_live_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path))
    s = load_settings()
    assert s.home == tmp_path
    assert s.db_url == f"sqlite:///{tmp_path / 'gpufleet.db'}"
    assert s.url == "http://127.0.0.1:8470"
    assert s.scheduler.queue_sort == "drf"


def test_precedence_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text("port: 9001\ngpus: 4xH100\nscheduler:\n  backfill: strict\n  teams:\n    nlp: {quota: {'*': 4}}\n")
    monkeypatch.setenv("GPUFLEET_PORT", "9002")
    monkeypatch.setenv("GPUFLEET_SCHEDULER__PREEMPTION", "false")
    s = load_settings(cfg)
    assert s.port == 9002  # the environment beats the file
    assert s.gpus == "4xH100" and s.scheduler.backfill == "strict" and not s.scheduler.preemption
    assert s.scheduler.teams["nlp"].quota == {"*": 4}
    assert load_settings(cfg, port=9003).port == 9003  # a flag beats both


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("port: 70000\n", "port"),
        ("port: [1\n", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("scheduler:\n  queue_sort: nope\n", "scheduler.queue_sort"),
        ("scheduler:\n  teams:\n    x: {quota: {Z100: 1}}\n", "unknown GPU model 'Z100'"),
        ("db: mysql://x\n", "db must be a sqlite"),
        ("colour: blue\n", "colour"),
        ("poll_interval_s: 0\n", "poll_interval_s"),
    ],
    ids=["port-range", "bad-yaml", "not-mapping", "queue-sort", "quota-model", "db-url", "unknown-key", "poll"],
)
def test_bad_settings_name_the_field(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert needle in str(err.value) and "bad.yaml" in str(err.value)


def test_bad_environment_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_PORT", "eighty")
    with pytest.raises(ConfigError, match="port"):
        load_settings()


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "nope.yaml")


def test_admin_token_is_private_and_kept(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'g.db'}")
    db.upgrade()
    path = ensure_admin_token(db, tmp_path, now=1000.0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text().strip()
    with db.session() as s:
        tok = repo.authenticate(s, secret, 1001.0)
        assert tok is not None and tok.role == "admin"
    assert ensure_admin_token(db, tmp_path, now=1002.0).read_text().strip() == secret  # kept
    path.write_text("gpf_stale\n")  # a token this store does not know is replaced
    assert ensure_admin_token(db, tmp_path, now=1003.0).read_text().strip() != "gpf_stale"
    db.dispose()


def test_seed_teams_from_settings(tmp_path: Path) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        "scheduler:\n  teams:\n    nlp: {weight: 2, quota: {A100: 4, '*': 1}, cohort: lab, borrowing_limit: 2}\n"
    )
    db = Database(f"sqlite:///{tmp_path / 'g.db'}")
    db.upgrade()
    seed_teams(db, load_settings(cfg, home=tmp_path), now=5.0)
    with db.session() as s:
        q = {x.team: x for x in repo.all_quotas(s)}
    assert q["nlp"].nominal_milli == {"*": 1000, "A100-40GB": 4000}
    assert q["nlp"].cohort == "lab" and q["nlp"].borrowing_limit_milli == 2000 and q["nlp"].weight == 2
    assert "default" in q
    db.dispose()


def test_a_taken_port_is_one_clear_error() -> None:
    import socket

    from gpufleet.io.ports import check_port

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            check_port("127.0.0.1", port)


def test_up_takes_the_backend_as_a_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 22, observation 12: the README's ``gpufleet up --backend kubernetes`` was refused ("No such
    option"). The flag wins over the file, as every flag does; a bad value names the field."""
    from typer.testing import CliRunner

    import gpufleet.server.host as host
    from gpufleet.cli.main import app

    seen: list[str] = []

    def fake_build_server(settings: object) -> object:
        seen.append(settings.backend)
        raise ConfigError("stop here: the test only reads the settings", field="backend")

    monkeypatch.setattr(host, "build_server", fake_build_server)
    cfg = tmp_path / "s.yaml"
    import socket

    with socket.socket() as s:  # a port free now (check_port binds it before the server is built)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg.write_text(f"backend: local\nhome: {tmp_path}\nport: {port}\n")
    runner = CliRunner()
    result = runner.invoke(app, ["up", "--config", str(cfg), "--backend", "kubernetes"])
    assert seen == ["kubernetes"], result.output
    result = runner.invoke(app, ["up", "--config", str(cfg), "--backend", "nosuch"])
    assert result.exit_code != 0 and "backend" in result.output and seen == ["kubernetes"]
