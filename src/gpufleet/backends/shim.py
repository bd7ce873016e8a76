"""The run shim: ``python -m gpufleet.backends.shim <run_dir> --lock-fd N``.

One shim process owns one run of one job. It exists so that a run's start, end, stop and timeout
are handled by a process that outlives the server: the server may be SIGKILLed at any moment and
restarted, and the run must neither be started twice nor have its end lost.

The contract with :mod:`gpufleet.backends.local` lives in the run directory:

- ``lock``: flock(LOCK_EX) taken by the *server* before it spawns the shim and inherited by the
  shim (``pass_fds``). While the lock is held, the shim is alive; it is released only when the shim
  exits, after ``status.json`` was written. No pid checks are needed to know the shim is alive.
- ``spec.json``: what to run (written by the server before spawning).
- ``pid.json``: the shim's pid and start time, then also the command's pid, start time and
  ``started_at`` (wall time taken immediately before spawning it).
- ``stop.json``: a stop request (reason, grace); the server writes it, then sends SIGUSR1.
- ``status.json``: how the run ended (written atomically once, right after the command is reaped).

The shim runs with the server's privileges; the job does not. When the spec names an ``account``,
the forked child, before ``exec``: joins the job's cgroup (``cgroup``), sets the account's
supplementary groups, then its gid, then its uid (real, effective and saved), checks that it
cannot become root again, sets ``no_new_privs`` (no setuid binary can raise it), and then, as the
job's account, creates its checkpoint folder and enters its working folder, so the operating
system's permissions decide what it may use. The run directory (spec, pid, stop and status files)
stays the server's: the job cannot write its own status. Its output goes to a log the shim opens.

The command runs in its own process group (so it can be signalled as a whole) inside the shim's
session (so its processes can be found by session id even if the shim is SIGKILLed before it
recorded the command's pid). Leftover processes of the group are killed when the command exits.

This module imports only the standard library: it is started for every run.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from gpufleet.backends import cgroups

SPEC = "spec.json"
PID = "pid.json"
STATUS = "status.json"
STOP = "stop.json"
LOCK = "lock"
SHIM_LOG = "shim.log"

SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"
TIMED_OUT = "timed-out"

log = logging.getLogger("gpufleet.backends.shim")

MAX_WAIT_S = 1.0  # re-check stop.json at least this often, in case a signal was never sent
SETUP_FAILED = 126  # exit code of a child that could not become the job (account, folders)
_PR_SET_NO_NEW_PRIVS = 38


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` so readers see either nothing or the whole file: tmp + fsync + rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)  # spec.json holds the env
    with open(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None if it does not exist (or is not an object)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # written atomically, so this is corruption from outside: treat as missing
    return data if isinstance(data, dict) else None


def process_start_ticks(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone.

    Together with the pid this names one process for life: a recycled pid has another start time.
    Zombies count as gone (they hold no resources and cannot be signalled usefully).
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])  # field 22 of /proc/pid/stat; fields[0] is field 3
    except (IndexError, ValueError):
        return None


def is_same_process(pid: int | None, start_ticks: int | None) -> bool:
    """True if ``pid`` is alive and still the process that started at ``start_ticks``."""
    return pid is not None and pid > 0 and start_ticks is not None and process_start_ticks(pid) == start_ticks


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds")


def killpg(pgid: int, sig: int) -> None:
    """Signal a process group, ignoring one that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@dataclass(slots=True)
class _Ending:
    kind: str | None = None
    reason: str = ""
    kill_at: float | None = None  # when to SIGKILL the group (grace period over)


class Shim:
    """Runs one command, enforces stop requests and max runtime, records the outcome."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._signalled: list[int] = []
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGCHLD:
            self._signalled.append(signum)

    def run(self) -> int:
        if (self.run_dir / STATUS).exists() or (self.run_dir / PID).exists():
            log.error("run %s was already started: refusing to start it again", self.run_dir)
            return 3
        spec = read_json(self.run_dir / SPEC)
        if spec is None:
            log.error("no readable %s in %s", SPEC, self.run_dir)
            return 2
        me = {"shim_pid": os.getpid(), "shim_start": process_start_ticks(os.getpid())}
        write_json_atomic(self.run_dir / PID, me)
        fd = os.open(spec["log_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with open(fd, "ab", buffering=0) as job_log:
            return self._run(spec, me, job_log)

    def _run(self, spec: dict[str, Any], me: dict[str, Any], job_log: Any) -> int:
        run = spec["run"]
        stop = read_json(self.run_dir / STOP)
        started_at = time.time()
        job_log.write(f"=== gpufleet run {run} started {iso(started_at)} ===\n".encode())
        if stop is not None:
            return self._finish(job_log, run, started_at, started_at, None, None, STOPPED, _stop_reason(stop))
        cgroup = _make_cgroup(spec)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)  # the child's setup error, if any (EOF: it exec'd)
        try:
            child = subprocess.Popen(
                spec["command"],
                env=spec["env"],
                stdin=subprocess.DEVNULL,
                stdout=job_log,
                stderr=subprocess.STDOUT,
                process_group=0,
                close_fds=True,
                umask=0o077,
                preexec_fn=_child_setup(spec, cgroup, err_w),
            )
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            os.close(err_w)
            os.close(err_r)
            if cgroup is not None:
                cgroups.remove(cgroup)
            errno_ = getattr(e, "errno", None)
            code = 127 if errno_ in (errno.ENOENT, errno.ENOTDIR) else 126
            reason = f"cannot start {str(spec['command'][0])!r}: {getattr(e, 'strerror', None) or e}"
            return self._finish(job_log, run, started_at, time.time(), code, None, FAILED, reason)
        os.close(err_w)
        setup_error = _read_all(err_r)
        me |= {"child_pid": child.pid, "child_start": process_start_ticks(child.pid), "started_at": started_at}
        write_json_atomic(self.run_dir / PID, me)
        ending, rc, ended_at = self._wait(child, spec, started_at)
        killpg(child.pid, signal.SIGKILL)  # leftovers of the job's process group
        if cgroup is not None:
            cgroups.remove(cgroup)  # and anything that left the group but not the cgroup
        exit_code, sig = (None, -rc) if rc < 0 else (rc, None)
        kind = ending.kind or (SUCCEEDED if rc == 0 else FAILED)
        reason = ending.reason or _exit_reason(exit_code, sig)
        if setup_error:
            kind, reason = FAILED, setup_error
            job_log.write(f"gpufleet: {setup_error}\n".encode())
        return self._finish(job_log, run, started_at, ended_at, exit_code, sig, kind, reason)

    def _wait(
        self, child: subprocess.Popen[bytes], spec: dict[str, Any], started_at: float
    ) -> tuple[_Ending, int, float]:
        """Wait for the command, acting on stop requests and max runtime; (ending, rc, ended_at)."""
        max_rt = spec.get("max_runtime_s")
        deadline = started_at + float(max_rt) if max_rt is not None else None
        ending = _Ending()
        while True:
            rc = child.poll()
            if rc is not None:
                return ending, rc, time.time()
            now = time.time()
            if ending.kind is None:
                self._maybe_begin_ending(child.pid, spec, ending, deadline, now)
            elif ending.kill_at is not None and now >= ending.kill_at:
                killpg(child.pid, signal.SIGKILL)
                ending.kill_at = None
            waits = [MAX_WAIT_S]
            if ending.kind is None and deadline is not None:
                waits.append(deadline - now)
            if ending.kill_at is not None:
                waits.append(ending.kill_at - now)
            self._sleep(max(0.0, min(waits)))

    def _maybe_begin_ending(
        self, pgid: int, spec: dict[str, Any], ending: _Ending, deadline: float | None, now: float
    ) -> None:
        """Start a stop (stop.json or a signal to the shim) or a timeout: SIGTERM now, SIGKILL later."""
        grace = float(spec.get("grace_s", 30.0))
        stop = read_json(self.run_dir / STOP)
        if stop is not None:
            ending.kind, ending.reason = STOPPED, _stop_reason(stop)
            grace = float(stop.get("grace_s", grace))
        elif self._signalled and self._signalled[-1] in (signal.SIGTERM, signal.SIGINT):
            name = signal.Signals(self._signalled[-1]).name
            ending.kind, ending.reason = STOPPED, f"the run's shim received {name}"
        elif deadline is not None and now >= deadline:
            ending.kind, ending.reason = TIMED_OUT, f"ran past its max runtime of {spec['max_runtime_s']:g} s"
            grace = float(spec.get("grace_s", 30.0))
        else:
            return
        killpg(pgid, signal.SIGTERM)
        ending.kill_at = now + max(0.0, grace)

    def _sleep(self, timeout: float) -> None:
        """Sleep until a signal (child exit, stop) arrives or ``timeout`` passes."""
        with contextlib.suppress(InterruptedError):
            select.select([self._wake_r], [], [], timeout)
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self._wake_r, 512):
                pass

    def _finish(
        self,
        job_log: Any,
        run: int,
        started_at: float,
        ended_at: float,
        exit_code: int | None,
        sig: int | None,
        kind: str,
        reason: str,
    ) -> int:
        """Write the log footer and status.json (the run's durable end)."""
        how = f"exit code {exit_code}" if sig is None else f"signal {_signame(sig)}"
        job_log.write(
            f"=== gpufleet run {run} ended {iso(ended_at)}: {kind} ({how}; {reason}) "
            f"after {ended_at - started_at:.3f} s ===\n".encode()
        )
        status = {
            "exit_code": exit_code,
            "signal": sig,
            "started_at": started_at,
            "ended_at": ended_at,
            "kind": kind,
            "reason": reason,
        }
        write_json_atomic(self.run_dir / STATUS, status)
        return 0


def _read_all(fd: int) -> str:
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace").strip()


def _make_cgroup(spec: Mapping[str, Any]) -> Path | None:
    """The run's cgroup with its limits, when the backend asked for one (None otherwise)."""
    cg = spec.get("cgroup")
    if not cg:
        return None
    try:
        return cgroups.create(Path(cg["parent"]), cg["name"], int(cg["cpu_milli"]), int(cg["memory_mib"]))
    except OSError as e:
        log.warning("no cgroup for this run (%s): limits are not enforced", e)
        return None


def _no_new_privs(libc: ctypes.CDLL) -> None:
    """prctl(PR_SET_NO_NEW_PRIVS): exec of a setuid or file-capability binary grants nothing."""
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _child_setup(spec: Mapping[str, Any], cgroup: Path | None, err_w: int) -> Callable[[], None]:
    """What the forked child does before ``exec`` (see the module docstring), in this order.

    Runs between fork and exec of a single-threaded shim; any failure is written to ``err_w`` and
    ends the child with :data:`SETUP_FAILED`, so the run fails with that reason instead of running
    with the wrong identity or folders.
    """
    account = spec.get("account")
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the job's account may not read Python's files
    checkpoint_dir = spec.get("checkpoint_dir")
    workdir = spec.get("cwd") or spec.get("job_dir")

    def setup() -> None:
        step = "setting up the job"
        try:
            if cgroup is not None:
                step = f"joining its cgroup {cgroup}"
                with open(cgroup / "cgroup.procs", "w") as f:
                    f.write("0")
            if account is not None:
                name, uid, gid = account["name"], int(account["uid"]), int(account["gid"])
                step = f"switching to the Unix account {name!r}"
                os.setgroups([int(g) for g in account["groups"]])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
                if uid != 0:
                    try:
                        os.setuid(0)
                    except PermissionError:
                        pass
                    else:
                        raise OSError(errno.EPERM, "the job could become root again")
                    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
                        raise OSError(errno.EPERM, "the job's ids are not the account's")
            step = "setting no_new_privs"
            _no_new_privs(libc)
            if checkpoint_dir:
                step = f"creating the checkpoint folder {checkpoint_dir}"
                os.makedirs(checkpoint_dir, mode=0o700, exist_ok=True)
                if not os.access(checkpoint_dir, os.W_OK | os.X_OK):
                    raise PermissionError(errno.EACCES, "not writable by the job's account")
            if workdir:
                step = f"entering the working folder {workdir}"
                os.chdir(workdir)
        except BaseException as e:  # nothing may escape between fork and exec
            who = f" as {account['name']!r}" if account is not None else ""
            detail = f"{type(e).__name__}: {e}" if not isinstance(e, OSError) else (e.strerror or str(e))
            with contextlib.suppress(OSError):
                os.write(err_w, f"could not start the job{who}: {step}: {detail}".encode())
            os._exit(SETUP_FAILED)

    return setup


def _stop_reason(stop: Mapping[str, Any]) -> str:
    return str(stop.get("reason") or "stopped on request")


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _exit_reason(exit_code: int | None, sig: int | None) -> str:
    if sig is not None:
        return f"killed by signal {_signame(sig)}"
    return "exited normally" if exit_code == 0 else f"exited with code {exit_code}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufleet.backends.shim", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--lock-fd", type=int, required=True, help="inherited fd holding the run's flock")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s shim[%(process)d] %(levelname)s %(message)s")
    # The lock fd stays open (never closed explicitly) until this process exits.
    os.set_inheritable(args.lock_fd, False)
    return Shim(args.run_dir).run()


if __name__ == "__main__":
    sys.exit(main())
