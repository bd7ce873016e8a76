"""Containment of a run on the local backend: nothing of it outlives it, it cannot exhaust the host.

Real processes, and real throwaway Unix accounts where the kernel's rules depend on the account
(a per-user process limit does not bind root). Each escape is tried both with a cgroup v2 (when
this host has a writable one) and with the cgroup path switched off, the fallback every host has:

- a ``setsid`` daemon (double fork), one with the run's environment and one that cleared it, must
  be gone soon after the run is cancelled, ends, or is lost (its shim SIGKILLed);
- a fork bomb is bounded by the process limit (``pids.max``, else ``RLIMIT_NPROC``);
- a job starts with default signal dispositions and an empty signal mask;
- a run's log is capped, the job still drains and succeeds, and logs may live elsewhere;
- a run whose end cannot be recorded (its file system full) is not LOST, and never runs twice.
"""

from __future__ import annotations

import os
import pwd
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.backends import cgroups, shim
from gpufleet.backends.accounts import AccountPolicy
from gpufleet.backends.base import BackendEvent, EventKind, LaunchRequest, RecoveredState
from gpufleet.backends.local import LocalBackend, _Watch, kill_stale
from gpufleet.server.settings import Settings, load_settings
from tests.support import accounts as accounts_support
from tests.support.accounts import IS_ROOT, useradd, userdel

PY = "/usr/bin/python3"  # jobs run as other accounts, which cannot read a venv under /root
NODE = "n1"
SHARED = AccountPolicy(jobs_as_server=False)  # jobs only as their own accounts
SINGLE_USER = AccountPolicy(jobs_as_server=True)
MakeBackend = Callable[..., LocalBackend]

needs_root = pytest.mark.skipif(not IS_ROOT, reason="real Unix accounts (and mounts) need root")


def _v2_root() -> Path | None:
    """A writable cgroup v2 hierarchy of this host (unified, or the v2 part of a hybrid mount)."""
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (root / "cgroup.controllers").exists() and os.access(root, os.W_OK) and (root / "cgroup.procs").exists():
            return root
    return None


V2_ROOT = _v2_root()
NO_V2 = "no writable cgroup v2 hierarchy on this host (/sys/fs/cgroup, /sys/fs/cgroup/unified)"
V2_HAS_PIDS = V2_ROOT is not None and "pids" in (V2_ROOT / "cgroup.controllers").read_text().split()

CGROUP_MODES = [
    pytest.param("cgroup-v2", id="cgroup-v2", marks=pytest.mark.skipif(V2_ROOT is None, reason=NO_V2)),
    pytest.param("no-cgroup", id="no-cgroup"),
]


def _cgroup_root(mode: str) -> Path | None:
    return V2_ROOT if mode == "cgroup-v2" else None


# -- accounts, folders, backends ------------------------------------------------------------------


@pytest.fixture
def account() -> Iterator[pwd.struct_passwd]:
    """A throwaway Unix account (removed afterwards, its processes killed by pid)."""
    if not IS_ROOT:
        pytest.skip("real Unix accounts need root")
    name = f"gfc{secrets.token_hex(3)}"
    useradd(name)
    try:
        yield pwd.getpwnam(name)
    finally:
        userdel(name)


@pytest.fixture
def job_root() -> Iterator[Path]:
    """Jobs' folders: outside root's 0700 pytest folders, passable by the job accounts."""
    with accounts_support.job_root() as root:
        yield root


@pytest.fixture
def make_backend(tmp_path: Path, job_root: Path) -> Iterator[MakeBackend]:
    """Backends (state in ``tmp_path/state`` unless given); teardown kills whatever is left."""
    made: list[LocalBackend] = []

    def make(**kw: object) -> LocalBackend:
        kw.setdefault("node_name", NODE)
        kw.setdefault("gpus", "1xA100-80GB")
        kw.setdefault("use_nvml", False)
        kw.setdefault("policy", SHARED)
        kw.setdefault("job_root", job_root)
        state_dir = kw.pop("state_dir", tmp_path / "state")
        b = LocalBackend(state_dir, **kw)  # type: ignore[arg-type]
        made.append(b)
        return b

    yield make
    for b in made:
        runs = b.state_dir / "runs"
        for run_dir in runs.glob("*/*") if runs.exists() else []:
            info = shim.read_json(run_dir / shim.PID) or {}
            if shim.is_same_process(info.get("shim_pid"), info.get("shim_start")):
                os.kill(info["shim_pid"], signal.SIGKILL)
            kill_stale(run_dir)


def wait_events(b: LocalBackend, n: int = 1, timeout: float = 10.0) -> list[BackendEvent]:
    events: list[BackendEvent] = []
    deadline = time.time() + timeout
    while len(events) < n and time.time() < deadline:
        events += b.poll()
        time.sleep(0.02)
    assert len(events) >= n, f"expected {n} events, got {events}"
    return events


def wait_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def alive(pid: int) -> bool:
    return shim.process_start_ticks(pid) is not None


def seconds_until_gone(pids: list[int], timeout: float = 5.0) -> float | None:
    """How long until none of ``pids`` runs (None: some still ran after ``timeout``)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not any(alive(p) for p in pids):
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def job_folder(job_root: Path, job_id: str, team: str = "t") -> Path:
    return job_root / team / job_id


# -- finding 4: nothing of a run outlives it ----------------------------------------------------

# Two daemons (fork, setsid, fork: a new session and process group, parent gone): one keeps the
# run's environment, one exec's with an empty one. Both ignore SIGTERM and SIGHUP.
DAEMONS = r"""
import os, signal, sys, time
d = os.environ["GPUFLEET_CHECKPOINT_DIR"]
def put(name, text):
    with open(f"{d}/{name}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{d}/{name}.tmp", f"{d}/{name}")
SLEEPER = "import os, time; open(%r, 'w').write(str(os.getpid()) + '\\n'); time.sleep(300)"
def daemon(name, clean_env):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            if clean_env:
                os.execve(sys.executable, [sys.executable, "-c", SLEEPER % f"{d}/{name}"], {})
            put(name, f"{os.getpid()}\n")
            time.sleep(300)
        os._exit(0)
    os.wait()
daemon("daemon", False)
daemon("clean-daemon", True)
while not all(os.path.exists(f"{d}/{n}") for n in ("daemon", "clean-daemon")):
    time.sleep(0.01)
put("ready", "1\n")
if os.environ.get("EXIT_AT_ONCE"):
    sys.exit(0)
time.sleep(300)
"""


def _launch_daemons(b: LocalBackend, job_root: Path, job_id: str, acct: str, **env: str) -> list[int]:
    b.launch(LaunchRequest(job_id, 1, [PY, "-c", DAEMONS], (), team="t", run_as=acct, env=env))
    folder = job_folder(job_root, job_id) / "checkpoints"
    wait_file(folder / "ready")
    pids = [int(wait_file(folder / "daemon")), int(wait_file(folder / "clean-daemon"))]
    assert all(alive(p) for p in pids)
    assert all(os.stat(f"/proc/{p}").st_uid != 0 for p in pids)  # they run as the job's account
    return pids


def _assert_cgroup_used(b: LocalBackend, job_id: str, mode: str) -> None:
    spec = shim.read_json(b.run_dir(job_id, 1) / shim.SPEC) or {}
    assert bool(spec.get("cgroup")) == (mode == "cgroup-v2"), spec.get("cgroup")


@needs_root
@pytest.mark.parametrize("mode", CGROUP_MODES)
def test_setsid_daemons_die_when_the_run_is_cancelled(
    make_backend: MakeBackend, job_root: Path, account: pwd.struct_passwd, mode: str
) -> None:
    b = make_backend(cgroup_root=_cgroup_root(mode))
    pids = _launch_daemons(b, job_root, "cancel-me", account.pw_name)
    _assert_cgroup_used(b, "cancel-me", mode)
    stopped = time.monotonic()
    b.stop("cancel-me", 1, "cancelled", grace_s=1.0)
    [ev] = wait_events(b)
    assert (ev.kind, ev.reason) == (EventKind.STOPPED, "cancelled")
    ended = time.monotonic() - stopped
    took = seconds_until_gone(pids)
    survivors = [p for p in pids if alive(p)]
    assert took is not None, f"daemons {survivors} of a cancelled run still run as {account.pw_name!r}"
    print(f"[{mode}] cancel: end event after {ended:.3f} s, daemons gone {ended + took:.3f} s after stop()")


@needs_root
@pytest.mark.parametrize("mode", CGROUP_MODES)
def test_setsid_daemons_die_when_the_job_exits_on_its_own(
    make_backend: MakeBackend, job_root: Path, account: pwd.struct_passwd, mode: str
) -> None:
    b = make_backend(cgroup_root=_cgroup_root(mode))
    b.launch(
        LaunchRequest("exits", 1, [PY, "-c", DAEMONS], (), team="t", run_as=account.pw_name, env={"EXIT_AT_ONCE": "1"})
    )
    [ev] = wait_events(b)
    assert ev.kind is EventKind.SUCCEEDED
    folder = job_folder(job_root, "exits") / "checkpoints"
    pids = [int(wait_file(folder / "daemon")), int(wait_file(folder / "clean-daemon"))]
    assert seconds_until_gone(pids) is not None, "daemons outlived a run that ended"


@needs_root
@pytest.mark.parametrize("mode", CGROUP_MODES)
def test_daemons_of_a_lost_run_are_killed(
    make_backend: MakeBackend, job_root: Path, account: pwd.struct_passwd, mode: str
) -> None:
    """The shim is SIGKILLed: the server finds what is left by the run's cgroup, or its marker."""
    b = make_backend(cgroup_root=_cgroup_root(mode))
    daemon, clean = _launch_daemons(b, job_root, "lost", account.pw_name)
    info = shim.read_json(b.run_dir("lost", 1) / shim.PID) or {}
    os.kill(info["shim_pid"], signal.SIGKILL)
    [ev] = wait_events(b)
    assert ev.kind is EventKind.LOST
    assert seconds_until_gone([daemon]) is not None, "the daemon of a lost run survived"
    if mode == "cgroup-v2":  # the cgroup holds even a process that cleared its environment
        assert seconds_until_gone([clean]) is not None, "the env-clearing daemon of a lost run survived"


FORK_BOMB = r"""
import os, subprocess
ok = failed = 0
for _ in range(300):
    try:
        subprocess.Popen(["sleep", "30"])
        ok += 1
    except OSError:
        failed += 1
d = os.environ["GPUFLEET_CHECKPOINT_DIR"]
with open(d + "/count.tmp", "w") as f:
    f.write(f"{ok} {failed}\n")
os.replace(d + "/count.tmp", d + "/count")
"""


@needs_root
@pytest.mark.parametrize(
    "mode",
    [
        pytest.param(
            "cgroup-v2",
            id="cgroup-pids.max",
            marks=pytest.mark.skipif(not V2_HAS_PIDS, reason="no pids controller in this host's cgroup v2"),
        ),
        pytest.param("no-cgroup", id="rlimit-nproc"),
    ],
)
def test_fork_bomb_is_bounded_by_the_process_limit(
    make_backend: MakeBackend, job_root: Path, account: pwd.struct_passwd, mode: str
) -> None:
    b = make_backend(cgroup_root=_cgroup_root(mode), max_job_pids=50)
    b.launch(LaunchRequest("bomb", 1, [PY, "-c", FORK_BOMB], (), team="t", run_as=account.pw_name))
    [ev] = wait_events(b, timeout=20)
    ok, failed = map(int, wait_file(job_folder(job_root, "bomb") / "checkpoints" / "count").split())
    print(f"[{mode}] fork bomb with a limit of 50: {ok} children started, {failed} refused")
    assert ev.kind is EventKind.SUCCEEDED
    assert ok < 50 and ok + failed == 300


def test_job_starts_with_default_signal_dispositions(make_backend: MakeBackend) -> None:
    """Nothing ignored, nothing blocked: not what the shim sets (SIGHUP ignored) nor what it inherits."""
    b = make_backend(policy=SINGLE_USER, cgroup_root=None)
    old_quit = signal.signal(signal.SIGQUIT, signal.SIG_IGN)  # inherited by the shim through exec
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    try:
        b.launch(LaunchRequest("sigs", 1, ["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"], ()))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        signal.signal(signal.SIGQUIT, old_quit)
    [ev] = wait_events(b)
    assert ev.kind is EventKind.SUCCEEDED
    lines = [line for line in b.log_path("sigs").read_text().splitlines() if line.startswith("Sig")]
    # glibc reserves signals 32 and 33 for its threads (SIGCANCEL, SIGSETXID): sigaction refuses them
    # (EINVAL), so no program can reset them, and glibc installs its own handlers when it needs them.
    # A CI shell may hand them down ignored; every signal a program can set must be at its default.
    reserved = (1 << 31) | (1 << 32)
    masks = {k: int(v, 16) & ~reserved for k, v in (line.split(":\t") for line in lines)}
    assert masks == {"SigIgn": 0, "SigBlk": 0}, lines


# -- finding 5: logs are capped, may live elsewhere; an unrecorded end is not a lost run ----------


def test_log_is_capped_and_the_job_still_succeeds(make_backend: MakeBackend) -> None:
    cap = 64 * 1024
    b = make_backend(policy=SINGLE_USER, cgroup_root=None, max_log_bytes=cap)
    script = "yes 0123456789abcdef | head -c 10485760; echo after-the-cap >&2"
    started = time.monotonic()
    b.launch(LaunchRequest("chatty", 1, ["sh", "-c", script], ()))
    [ev] = wait_events(b, timeout=15)
    took = time.monotonic() - started
    assert (ev.kind, ev.exit_code) == (EventKind.SUCCEEDED, 0)
    log = b.log_path("chatty")
    text = log.read_text()
    size = log.stat().st_size
    print(f"10 MiB of output with a {cap} B cap: log {size} B, run ended in {took:.2f} s")
    assert size <= cap + 1024  # the cap, plus gpufleet's header, notice and footer lines
    assert f"log truncated at {cap} bytes by gpufleet" in text
    assert "after-the-cap" not in text
    assert text.rstrip().splitlines()[-1].startswith("=== gpufleet run 1 ended")


def test_logs_can_live_in_their_own_folder(make_backend: MakeBackend, tmp_path: Path) -> None:
    logs = tmp_path / "job-logs"
    b = make_backend(policy=SINGLE_USER, cgroup_root=None, log_dir=logs)
    handle = b.launch(LaunchRequest("elsewhere", 1, ["echo", "hello"], ()))
    [ev] = wait_events(b)
    assert ev.kind is EventKind.SUCCEEDED
    assert b.log_path("elsewhere") == logs / "elsewhere.log" and handle.log_path == str(logs / "elsewhere.log")
    assert "hello" in (logs / "elsewhere.log").read_text()
    assert not (b.state_dir / "logs" / "elsewhere.log").exists()


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: the server's state on a file system a job's output can fill."""
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_unrecorded_end_is_not_lost_and_never_runs_twice(
    make_backend: MakeBackend, full_fs: Path, tmp_path: Path
) -> None:
    """The job's output fills the file system of the run directory: status.json cannot be written.

    The run ended (exit 0): it must be reported as it ended, not LOST (which requeues it), both to
    the server that watched it and to a restarted one, and launching it again must not re-run it."""
    marker = tmp_path / "ran"
    state = full_fs / "state"
    script = f"echo ran >> {marker}; head -c 3145728 /dev/zero; exit 0"
    a = make_backend(state_dir=state, policy=SINGLE_USER, cgroup_root=None)
    a.launch(LaunchRequest("filler", 1, ["sh", "-c", script], ()))
    [ev] = wait_events(a, timeout=15)
    assert not (a.run_dir("filler", 1) / shim.STATUS).exists()  # really unrecorded the usual way
    assert (ev.kind, ev.exit_code) == (EventKind.SUCCEEDED, 0), ev
    b = make_backend(state_dir=state, policy=SINGLE_USER, cgroup_root=None)  # a restarted server
    rec = b.recover("filler", 1)
    assert rec.state is RecoveredState.ENDED and rec.event is not None
    assert (rec.event.kind, rec.event.exit_code) == (EventKind.SUCCEEDED, 0)
    c = make_backend(state_dir=state, policy=SINGLE_USER, cgroup_root=None)
    c.launch(LaunchRequest("filler", 1, ["sh", "-c", script], ()))  # a launch of the same run
    [again] = wait_events(c)
    assert (again.kind, again.exit_code) == (EventKind.SUCCEEDED, 0)
    time.sleep(0.3)
    assert marker.read_text() == "ran\n"  # it ran once


# -- the limits as written, and the settings -------------------------------------------------------


def test_cgroup_limits_are_written_where_their_controller_is(tmp_path: Path) -> None:
    """pids.max (and the others) go to the files the kernel gives a cgroup whose controllers are on;
    without the pids controller the shim falls back to RLIMIT_NPROC (limits_pids False)."""
    for name, files in (("with-pids", ("memory.max", "cpu.max", "pids.max")), ("without", ("cpu.max",))):
        run = tmp_path / name
        run.mkdir()
        for f in files:
            (run / f).write_text("max\n")
        cgroups.create(tmp_path, name, cpu_milli=1500, memory_mib=0, max_pids=50)
        assert (run / "cpu.max").read_text() == "150000 100000"
        assert cgroups.limits_pids(run) == ("pids.max" in files)
    assert (tmp_path / "with-pids" / "pids.max").read_text() == "50"
    assert (tmp_path / "with-pids" / "memory.max").read_text() == "max"
    assert not (tmp_path / "without" / "pids.max").exists()


def test_containment_settings_and_their_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    s = Settings()
    assert (s.log_dir, s.max_log_bytes, s.max_job_pids) == (None, 1024**3, 4096)
    monkeypatch.setenv("GPUFLEET_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("GPUFLEET_MAX_LOG_BYTES", "65536")
    monkeypatch.setenv("GPUFLEET_MAX_JOB_PIDS", "512")
    s = load_settings()
    assert (s.log_dir, s.max_log_bytes, s.max_job_pids) == (tmp_path / "logs", 65536, 512)


def test_shim_that_could_record_nothing_makes_the_run_failed_not_lost(make_backend: MakeBackend) -> None:
    """Neither status file could be written (the shim exits UNRECORDED): the server that spawned it
    reports FAILED (the run did run to its end), never LOST (which would requeue and re-run it)."""
    b = make_backend(policy=SINGLE_USER, cgroup_root=None)
    run_dir = b.run_dir("unrecorded", 1)
    run_dir.mkdir(parents=True)
    shim.write_json_atomic(run_dir / shim.PID, {"shim_pid": 1, "started_at": time.time() - 5})
    popen = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({shim.UNRECORDED})"])
    popen.wait()
    ev = b._check(_Watch("unrecorded", 1, run_dir, popen))
    assert ev is not None and ev.kind is EventKind.FAILED and "could not record" in ev.reason
    other = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])  # a shim that crashed
    other.wait()
    ev = b._check(_Watch("unrecorded", 1, run_dir, other))
    assert ev is not None and ev.kind is EventKind.LOST


@needs_root
@pytest.mark.skipif(V2_ROOT is None, reason=NO_V2)
def test_leftover_cgroups_are_removed_when_empty_and_old() -> None:
    """A shim SIGKILLed with no server to recover its run leaves an empty cgroup: the next start
    removes it, but never one that holds a process or was made just now."""
    assert V2_ROOT is not None
    support = cgroups.detect(V2_ROOT)
    assert support.parent is not None
    tag = secrets.token_hex(3)
    old, fresh, busy = (support.parent / f"leftover-{tag}-{n}" for n in ("old", "fresh", "busy"))
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        for cg in (old, fresh, busy):
            cg.mkdir()
        (busy / "cgroup.procs").write_text(str(sleeper.pid))
        for cg in (old, busy):
            os.utime(cg, (time.time() - 3600, time.time() - 3600))
        cgroups.detect(V2_ROOT)
        assert (not old.exists(), fresh.exists(), busy.exists()) == (True, True, True)
    finally:
        sleeper.kill()
        sleeper.wait()
        for cg in (old, fresh, busy):
            cgroups.remove(cg)
