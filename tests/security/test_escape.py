"""The escape suite: a member's job on a live shared server tries to reach what is not its own.

A real ``gpufleet up`` (declared GPUs; SQLite and a real PostgreSQL) hosts two teams whose jobs run
as two throwaway Unix accounts this test creates. Team beta's job checkpoints and keeps running;
then team alpha's job, as its own account, tries every escape a tester found when jobs ran as the
server: read the admin token, write the store, read beta's log, spec and checkpoint, overwrite the
checkpoint, SIGKILL beta's job, read the server's environment, forge its own status file, list the
server's home, read the store's URL from any process's command line, connect to PostgreSQL over
TCP without its password (the suite's cluster wants one), become root. Each must fail while the
job itself keeps running and is metered.
Further cases: a checkpoint path of another team, NUL bytes, an ungranted priority class, and a
poison job stored by an older version that cannot be launched, next to other teams' jobs that
must start on time.

Real accounts need root (CI runs as root). Run as another user, the suite checks the refusals of
a server that cannot switch accounts instead.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.engine import make_url

from gpufleet.store.db import Database
from gpufleet.store.models import JobRow
from tests.support import accounts as accounts_support
from tests.support.accounts import useradd, userdel
from tests.support.serverproc import ServerProcess

pytestmark = pytest.mark.slow

IS_ROOT = os.geteuid() == 0
SYSTEM_PYTHON = "/usr/bin/python3"  # jobs run as other accounts, which cannot read a venv under /root
SECRET = "escape-suite-server-secret"

ESCAPES = [
    "read_admin_token",
    "write_store",
    "read_store_url_from_cmdline",
    "read_other_log",
    "read_other_spec",
    "read_other_checkpoint",
    "write_other_checkpoint",
    "kill_other_job",
    "read_server_environ",
    "forge_own_status",
    "list_server_home",
    "become_root",
]

ATTACK = r"""
import json, os, signal, time
E = os.environ
r = {}
def attempt(name, fn):
    try:
        fn()
        r[name] = "ESCAPED"
    except OSError as e:
        r[name] = f"denied: {type(e).__name__}: {e.strerror}"
def store_url_from_cmdline():
    # every account reads every process's argv: a store URL there is the store's password
    schemes = [b"postgresql" + b"://", b"postgresql+psycopg" + b"://", b"sqlite" + b":///"]  # not this argv's
    for pid in os.listdir("/proc"):
        try:
            line = open("/proc/%s/cmdline" % pid, "rb").read()
        except OSError:
            continue
        if any(scheme in line for scheme in schemes):
            r["harvested"] = line.replace(b"\0", b" ").decode(errors="replace")
            return
    raise PermissionError(13, "no store URL on any command line")
def write_store():
    if "T_PG_PORT" not in E:  # SQLite: the store's file
        open(E["T_DB"], "r+b").close()
        return
    # PostgreSQL over TCP: the startup message as the superuser; trust would answer AuthenticationOk
    import socket, struct
    s = socket.create_connection(("127.0.0.1", int(E["T_PG_PORT"])), timeout=10)
    params = b"user\0postgres\0database\0postgres\0\0"
    s.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
    head = s.recv(9)
    s.close()
    if head[:1] == b"R" and struct.unpack("!i", head[5:9])[0] == 0:
        return
    raise PermissionError(13, "the store wants a password (%r)" % head[:9])
attempt("read_admin_token", lambda: open(E["T_HOME"] + "/admin.token").read())
attempt("write_store", write_store)
attempt("read_store_url_from_cmdline", store_url_from_cmdline)
attempt("read_other_log", lambda: open(E["T_B_LOG"]).read())
attempt("read_other_spec", lambda: open(E["T_B_SPEC"]).read())
attempt("read_other_checkpoint", lambda: open(E["T_B_CKPT"]).read())
attempt("write_other_checkpoint", lambda: open(E["T_B_CKPT"], "w").write("overwritten by alpha"))
attempt("kill_other_job", lambda: os.kill(int(E["T_B_PID"]), signal.SIGKILL))
attempt("read_server_environ", lambda: open("/proc/%s/environ" % E["T_SERVER_PID"], "rb").read())
attempt("forge_own_status", lambda: open(E["T_OWN_STATUS"], "w").write('{"kind": "succeeded"}'))
attempt("list_server_home", lambda: os.listdir(E["T_HOME"]))
attempt("become_root", lambda: os.setuid(0))
r["uid"], r["gid"], r["groups"] = os.getuid(), os.getgid(), sorted(os.getgroups())
r["env"] = sorted(os.environ)
r["env_values"] = sorted(os.environ.values())
r["secret_seen"] = any("escape-suite-server-secret" in v for v in os.environ.values())
r["cwd"] = os.getcwd()
d = E["GPUFLEET_CHECKPOINT_DIR"]
with open(d + "/escape.tmp", "w") as f:
    json.dump(r, f)
os.replace(d + "/escape.tmp", d + "/escape.json")
time.sleep(600)
"""

VICTIM = r"""
import os, time
d = os.environ["GPUFLEET_CHECKPOINT_DIR"]
with open(d + "/ckpt", "w") as f:
    f.write("beta's weights\n")
print("beta checkpointed", flush=True)
time.sleep(600)
"""


# -- accounts and the server -----------------------------------------------------------------------


@pytest.fixture
def accounts() -> Iterator[dict[str, pwd.struct_passwd]]:
    """Two throwaway Unix accounts, one per team (removed afterwards, with their processes)."""
    if not IS_ROOT:
        pytest.skip("real Unix accounts need root (the non-root refusals are checked below)")
    tag = secrets.token_hex(3)
    names = {"alpha": f"gfa{tag}", "beta": f"gfb{tag}"}
    made = []
    try:
        for name in names.values():
            useradd(name)
            made.append(name)
        yield {team: pwd.getpwnam(name) for team, name in names.items()}
    finally:
        for name in made:
            userdel(name)


@pytest.fixture
def job_root() -> Iterator[Path]:
    """Where jobs' folders live: outside the server's 0700 home, passable by the job accounts."""
    with accounts_support.job_root() as root:
        yield root


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_server(
    request: pytest.FixtureRequest, tmp_path: Path, job_root: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServerProcess]:
    """A live shared server (jobs only as their owners) whose own environment holds a secret."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)  # the server's; no job may see it
    db = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    server = ServerProcess(
        tmp_path / "home", gpus="4xA100-80GB", db=db, settings={"jobs_as_server": False, "job_root": str(job_root)}
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _setup_teams(server: ServerProcess, accounts: dict[str, pwd.struct_passwd]) -> dict[str, str]:
    """Teams alpha and beta, each with its account, and a member token each."""
    admin = {"Authorization": f"Bearer {server.token}"}
    tokens = {}
    for team, acct in accounts.items():
        r = httpx.put(f"{server.url}/v1/teams/{team}", json={"run_as": acct.pw_name}, headers=admin)
        assert r.status_code == 200, r.text
        r = httpx.post(f"{server.url}/v1/tokens", json={"team": team, "role": "member"}, headers=admin)
        assert r.status_code == 201, r.text
        tokens[team] = r.json()["token"]
    return tokens


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _submit(server: ServerProcess, token: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/jobs", json=body, headers=_h(token), timeout=30)


def _job(server: ServerProcess, token: str, job_id: str) -> dict[str, Any]:
    r = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers=_h(token), timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _wait_state(
    server: ServerProcess, token: str, job_id: str, states: set[str], timeout: float = 30
) -> dict[str, Any]:
    end = time.monotonic() + timeout
    job = _job(server, token, job_id)
    while job["state"] not in states and time.monotonic() < end:
        time.sleep(0.1)
        job = _job(server, token, job_id)
    assert job["state"] in states, (job, server.server_log()[-3000:])
    return job


def _wait_file(path: Path, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert path.exists(), f"{path} never appeared"


def _metered(server: ServerProcess, job_id: str) -> float:
    r = httpx.get(
        f"{server.url}/v1/usage", params={"window": "1h", "aggregate": "job"}, headers=_h(server.token), timeout=30
    )
    assert r.status_code == 200, r.text
    rows = [line for line in r.json()["rows"] if job_id in line["key"].values()]
    return sum(float(line["gpu_hours"]) for line in rows)  # GPU-hours: cents round away a few seconds


# -- the escape suite ------------------------------------------------------------------------------


def test_a_members_job_cannot_escape(
    shared_server: ServerProcess, accounts: dict[str, pwd.struct_passwd], job_root: Path
) -> None:
    server = shared_server
    tokens = _setup_teams(server, accounts)
    home = server.home

    # beta's job: checkpoints, then keeps running
    r = _submit(server, tokens["beta"], command=[SYSTEM_PYTHON, "-c", VICTIM], gpus=1, name="victim")
    assert r.status_code == 201, r.text
    b_id = r.json()["id"]
    _wait_state(server, tokens["beta"], b_id, {"RUNNING"})
    b_ckpt = job_root / "beta" / b_id / "checkpoints" / "ckpt"
    _wait_file(b_ckpt)
    b_pid = json.loads((home / "runs" / b_id / "1" / "pid.json").read_text())["child_pid"]
    assert os.stat(b_ckpt.parent.parent).st_uid == accounts["beta"].pw_uid  # the job's folder is beta's

    # alpha's job tries everything
    db_file = home / "gpufleet.db"
    env = {
        "T_HOME": str(home),
        "T_DB": str(db_file),
        **({"T_PG_PORT": str(make_url(server.db).port)} if server.db else {}),
        "T_B_LOG": str(home / "logs" / f"{b_id}.log"),
        "T_B_SPEC": str(home / "runs" / b_id / "1" / "spec.json"),
        "T_B_CKPT": str(b_ckpt),
        "T_B_PID": str(b_pid),
        "T_SERVER_PID": str(server.proc.pid if server.proc else 0),
    }
    # the attack job's own status path: its id is known only after submit, so the job fills it in
    env["T_OWN_STATUS"] = str(home / "runs" / "{self}" / "1" / "status.json")
    attack = ATTACK.replace('E["T_OWN_STATUS"]', 'E["T_OWN_STATUS"].replace("{self}", E["GPUFLEET_JOB_ID"])')
    r = _submit(server, tokens["alpha"], command=[SYSTEM_PYTHON, "-c", attack], gpus=1, env=env, name="attacker")
    assert r.status_code == 201, r.text
    a_id = r.json()["id"]
    _wait_state(server, tokens["alpha"], a_id, {"RUNNING"})
    results_file = job_root / "alpha" / a_id / "checkpoints" / "escape.json"
    _wait_file(results_file)
    results = json.loads(results_file.read_text())

    escaped = {k: v for k, v in results.items() if k in ESCAPES and not str(v).startswith("denied")}
    assert not escaped, f"escapes that worked: {escaped} {results.get('harvested', '')}"
    assert set(ESCAPES) <= set(results)
    alpha = accounts["alpha"]
    assert (results["uid"], results["gid"]) == (alpha.pw_uid, alpha.pw_gid)
    assert 0 not in results["groups"]
    assert not results["secret_seen"], "the server's environment reached the job"
    if server.db:  # the store's password is in the server's environment: never in the job's
        password = str(make_url(server.db).password)
        assert password and not any(password in v for v in results["env_values"])
    assert "AWS_SECRET_ACCESS_KEY" not in results["env"] and "GPUFLEET_HOME" not in results["env"]
    assert {"PATH", "HOME", "USER", "LANG", "GPUFLEET_JOB_ID", "GPUFLEET_CHECKPOINT_DIR"} <= set(results["env"])
    assert results["cwd"] == str(job_root / "alpha" / a_id)

    # beta is untouched and still running; alpha is still running and metered
    assert b_ckpt.read_text() == "beta's weights\n"
    assert _job(server, tokens["beta"], b_id)["state"] == "RUNNING"
    assert _job(server, tokens["alpha"], a_id)["state"] == "RUNNING"
    metered = _metered(server, a_id)
    time.sleep(1.5)
    assert _metered(server, a_id) > metered > 0, httpx.get(
        f"{server.url}/v1/usage", params={"window": "1h", "aggregate": "job"}, headers=_h(server.token)
    ).text
    # what the server writes is its own: home 0700, store, token and logs 0600
    assert oct(home.stat().st_mode & 0o777) == "0o700"
    for path in [home / "admin.token", home / "logs" / f"{a_id}.log", home / "runs" / a_id / "1" / "spec.json"]:
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
    if db_file.exists():
        assert oct(db_file.stat().st_mode & 0o777) == "0o600"
    for job_id, team in ((a_id, "alpha"), (b_id, "beta")):
        r = httpx.post(f"{server.url}/v1/jobs/{job_id}/cancel", headers=_h(tokens[team]), timeout=30)
        assert r.status_code < 300, r.text


def test_foreign_paths_and_bad_strings_are_refused(
    shared_server: ServerProcess, accounts: dict[str, pwd.struct_passwd], job_root: Path
) -> None:
    server = shared_server
    tokens = _setup_teams(server, accounts)
    r = _submit(server, tokens["beta"], command=[SYSTEM_PYTHON, "-c", VICTIM], gpus=1)
    b_id = r.json()["id"]
    _wait_state(server, tokens["beta"], b_id, {"RUNNING"})
    b_ckpt_dir = job_root / "beta" / b_id / "checkpoints"
    _wait_file(b_ckpt_dir / "ckpt")

    # alpha names beta's checkpoint folder: the OS refuses it to alpha's account, the job fails
    write = f"open({str(b_ckpt_dir / 'ckpt')!r}, 'w').write('x')"
    r = _submit(server, tokens["alpha"], command=[SYSTEM_PYTHON, "-c", write], checkpoint_dir=str(b_ckpt_dir))
    assert r.status_code == 201, r.text
    job = _wait_state(server, tokens["alpha"], r.json()["id"], {"FAILED", "SUCCEEDED"})
    assert job["state"] == "FAILED" and "Permission denied" in job["reason"], job
    assert (b_ckpt_dir / "ckpt").read_text() == "beta's weights\n"

    # relative paths and NUL bytes are refused at the door, naming the field
    for body, field in [
        ({"checkpoint_dir": "ckpt"}, "checkpoint_dir"),
        ({"cwd": "work"}, "cwd"),
        ({"command": ["sleep\x00", "1"]}, "command"),
        ({"env": {"X": "a\x00b"}}, "env"),
        ({"cwd": "/tmp/\x00"}, "cwd"),
        ({"name": "evil\u202etxt.exe"}, "name"),
    ]:
        payload = {"command": ["true"], **body}
        r = _submit(server, tokens["alpha"], **payload)
        assert r.status_code == 422, (body, r.text)
        assert field in r.text, (body, r.text)

    # a member cannot choose a priority class its team was not granted
    r = _submit(server, tokens["alpha"], command=["true"], priority="urgent")
    assert r.status_code == 403, r.text
    assert "normal" in r.text  # the classes it may use are named
    httpx.post(f"{server.url}/v1/jobs/{b_id}/cancel", headers=_h(tokens["beta"]), timeout=30)


def test_a_poison_job_does_not_stop_scheduling(
    shared_server: ServerProcess, accounts: dict[str, pwd.struct_passwd]
) -> None:
    """A stored job that cannot be launched (a NUL byte in its command, as an older version
    accepted) fails with the reason; other teams' jobs start on time, the controller stays leader."""
    server = shared_server
    tokens = _setup_teams(server, accounts)
    # hold every GPU so the poison job waits, then plant the NUL while the server is down
    r = _submit(server, tokens["beta"], command=["sleep", "600"], gpus=4)
    assert r.status_code == 201, r.text
    blocker = r.json()["id"]
    _wait_state(server, tokens["beta"], blocker, {"RUNNING"})
    r = _submit(server, tokens["alpha"], command=[SYSTEM_PYTHON, "-c", "print(1)"], gpus=1, name="poison")
    poison = r.json()["id"]
    time.sleep(0.5)
    assert _job(server, tokens["alpha"], poison)["state"] == "PENDING"
    server.stop()
    db = Database(server.db or f"sqlite:///{server.home / 'gpufleet.db'}")
    with db.session() as s:
        s.execute(update(JobRow).where(JobRow.id == poison).values(command=["print\x00", "1"]))
    db.dispose()
    server.start()
    httpx.post(f"{server.url}/v1/jobs/{blocker}/cancel", headers=_h(tokens["beta"]), timeout=30)
    r = _submit(server, tokens["beta"], command=[SYSTEM_PYTHON, "-c", "import time; time.sleep(600)"], gpus=1)
    beta_job = r.json()["id"]
    t0 = time.monotonic()
    _wait_state(server, tokens["beta"], beta_job, {"RUNNING"}, timeout=20)
    waited = time.monotonic() - t0
    job = _wait_state(server, tokens["alpha"], poison, {"FAILED"}, timeout=20)
    assert "NUL" in job["reason"], job
    assert waited < 15, f"beta waited {waited:.1f} s behind the poison job"
    # still scheduling afterwards, and still the leader
    r = _submit(server, tokens["alpha"], command=[SYSTEM_PYTHON, "-c", "print('fine')"], gpus=1)
    assert _wait_state(server, tokens["alpha"], r.json()["id"], {"SUCCEEDED"}, timeout=20)
    assert "lost leadership" not in server.server_log()
    httpx.post(f"{server.url}/v1/jobs/{beta_job}/cancel", headers=_h(tokens["beta"]), timeout=30)


# -- a server that is not root ---------------------------------------------------------------------


@pytest.mark.skipif(IS_ROOT, reason="as root the real escape suite above runs; this checks a non-root server")
def test_a_non_root_server_refuses_to_run_jobs_as_itself(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "home", gpus="2xA100-80GB", settings={"jobs_as_server": False}).start()
    try:
        admin = server.token
        r = _submit(server, admin, command=["true"])
        assert r.status_code == 409 and "run-as" in r.text, r.text
        r = httpx.put(f"{server.url}/v1/teams/second", json={}, headers=_h(admin), timeout=30)
        r2 = httpx.put(f"{server.url}/v1/teams/third", json={}, headers=_h(admin), timeout=30)
        assert 409 in (r.status_code, r2.status_code), (r.text, r2.text)
    finally:
        server.stop()


def test_the_policy_of_a_non_root_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever user runs the suite: the account rules of a server that cannot switch accounts."""
    from gpufleet.backends import accounts as acc
    from gpufleet.errors import BackendError

    me = pwd.getpwuid(os.geteuid())
    other = next(p for p in pwd.getpwall() if p.pw_uid not in (0, os.geteuid()) and acc.USER_RE.match(p.pw_name))
    monkeypatch.setattr(acc.AccountPolicy, "can_switch", property(lambda self: False))
    strict = acc.AccountPolicy(jobs_as_server=False)
    with pytest.raises(BackendError, match="no Unix account to run as"):
        strict.resolve(None)
    with pytest.raises(BackendError, match="server's own account"):
        strict.resolve(me.pw_name)
    with pytest.raises(BackendError, match="not root"):
        strict.resolve(other.pw_name)
    assert acc.AccountPolicy(jobs_as_server=True).resolve(None).uid == me.pw_uid
    assert "single-user" in acc.AccountPolicy(jobs_as_server=True).describe()
    assert "cannot run jobs as their owners" in strict.describe()
    if me.pw_uid != 0:
        with pytest.raises(BackendError):
            acc.AccountPolicy(jobs_as_server=True).resolve(other.pw_name)
    else:
        with pytest.raises(BackendError, match="root"):
            acc.AccountPolicy(jobs_as_server=False).resolve("root")


def test_the_job_environment_is_built_from_nothing() -> None:
    from gpufleet.backends.accounts import job_environment, lookup

    nobody = lookup("nobody")
    env = job_environment(nobody, {"MY": "1"}, {"GPUFLEET_JOB_ID": "j"}, server_path=None)
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": nobody.home,
        "USER": "nobody",
        "LOGNAME": "nobody",
        "SHELL": nobody.shell,
        "LANG": "C.UTF-8",
        "MY": "1",
        "GPUFLEET_JOB_ID": "j",
    }
    assert sys.executable  # (the server's own PATH is passed only to jobs of its own account)
