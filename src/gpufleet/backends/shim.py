"""The run shim: ``python -m gpufleet.backends.shim <run_dir> --lock-fd N``.

One shim process owns one run of one job. It exists so that a run's start, end, stop and timeout
are handled by a process that outlives the server: the server may be SIGKILLed at any moment and
restarted, and the run must neither be started twice nor have its end lost.

The contract with :mod:`gpufleet.backends.local` lives in the run directory:

- ``lock``: flock(LOCK_EX) taken by the *server* before it spawns the shim and inherited by the
  shim (``pass_fds``). While the lock is held, the shim is alive; it is released only when the shim
  exits, after ``status.json`` was written. No pid checks are needed to know the shim is alive.
- ``spec.json``: what to run (written by the server before spawning).
- ``status.reserve``: 4 KiB of blanks written (and synced) before anything is started, so that the
  run's end can be recorded *in place* there when ``status.json`` cannot be written (its file
  system is full): a run that ended is never mistaken for a lost one, and so never run twice.
- ``pid.json``: the shim's pid and start time, then also the command's pid, start time and
  ``started_at`` (wall time taken immediately before spawning it).
- ``stop.json``: a stop request (reason, grace); the server writes it, then sends SIGUSR1.
- ``status.json``: how the run ended (written atomically once, after the run's last process is
  gone; see :func:`read_status` for the fallback).

The shim runs with the server's privileges; the job does not. When the spec names an ``account``,
the forked child, before ``exec``: resets every signal to its default action and empties the signal
mask (a job does not inherit the shim's ignored SIGHUP, nor anything the server ignored or blocked),
joins the run's cgroup (``cgroup``), sets the account's supplementary groups, lowers its
``RLIMIT_NPROC`` to ``max_pids`` where the cgroup cannot limit processes, then sets its gid and uid
(real, effective and saved), checks that it cannot become root again, sets ``no_new_privs`` (no
setuid binary can raise it), and then, as the job's account, creates its checkpoint folder and
enters its working folder, so the operating system's permissions decide what it may use. The run
directory (spec, pid, stop and status files) stays the server's: the job cannot write its own
status.

The job's output (stdout and stderr) goes through a pipe to the shim, which appends it to the log
(``log_path``) up to ``max_log_bytes`` per run; past that it writes one notice line and drops the
rest, still draining the pipe so the job never blocks on a full pipe. The head of the output is
kept (where a job says what it runs); the footer line says how many bytes were dropped. The job
never holds the log file itself.

The command runs in its own process group (so it can be signalled as a whole) inside the shim's
session. Every process of the run carries ``GPUFLEET_RUN_ID=<run id>`` in its environment, and the
shim is a *child subreaper*: a process that leaves the group and the session (a ``setsid`` daemon,
double-forked) is re-parented to the shim, not to init. When the command exits, or is stopped, the
shim kills every process of the run, repeatedly until none is left (a fork race): its cgroup
(``cgroup.kill``), every descendant of the shim, and every process carrying the run's marker. Only
then is the end recorded. If the shim itself is SIGKILLed, the server does the same from the
cgroup and the marker (:func:`kill_run`).

This module imports only the standard library (and :mod:`gpufleet.backends.cgroups`, which does
too): it is started for every run.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import logging
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
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
STATUS_RESERVE = "status.reserve"
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
UNRECORDED = 75  # the shim's exit code when the run ended but neither status file could be written
RESERVE_BYTES = 4096
RUN_ID_ENV = "GPUFLEET_RUN_ID"  # every process of a run inherits it: the run's marker
KILL_TIMEOUT_S = 5.0  # how long kill_run keeps sweeping a run that keeps forking
DRAIN_TIMEOUT_S = 2.0  # how long the shim reads leftover output after the run's processes are gone
_READ_CHUNK = 65536
_CHUNKS_PER_WAKE = 32  # output read per wake-up before the shim looks at signals and the clock again
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_RESET_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` so readers see either nothing or the whole file: tmp + fsync + rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)  # spec.json holds the env
    try:
        with open(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a full file system: leave no half-written file taking room
        raise
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


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """How the run ended: ``status.json``, else the end recorded in place in ``status.reserve``
    (blank, and so None, until then); None while it has not ended (or never started)."""
    status = read_json(run_dir / STATUS)
    if status is None:
        status = read_json(run_dir / STATUS_RESERVE)
        if status is not None and "kind" not in status:
            status = None
    return status


def has_ended(run_dir: Path) -> bool:
    """True once the run's end is recorded (in either file)."""
    return (run_dir / STATUS).exists() or read_status(run_dir) is not None


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


def _process_table() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, state letter) of every process (not threads) on this host."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        with contextlib.suppress(IndexError, ValueError):
            table[int(entry)] = (int(fields[1]), fields[0])
    return table


def _carries(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False  # gone, or not ours to read (a server that is not root reads its own only)
    return env.startswith(needle) or b"\0" + needle in env


def run_processes(marker: str | None, ancestor: int | None) -> set[int]:
    """The live processes of a run (zombies excluded, this process too).

    Those whose environment holds ``GPUFLEET_RUN_ID=<marker>`` (inherited by every descendant,
    daemons included, unless a process dropped it), and every descendant of ``ancestor`` (the
    shim: a child subreaper, so orphans of the run are re-parented to it, whatever their session).
    """
    table = _process_table()
    found: set[int] = set()
    if ancestor is not None:
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _state) in table.items():
            children[ppid].append(pid)
        stack = [ancestor]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in found:
                    found.add(child)
                    stack.append(child)
    if marker:
        needle = f"{RUN_ID_ENV}={marker}\0".encode()
        found |= {pid for pid in table if pid not in found and _carries(pid, needle)}
    found.discard(os.getpid())
    return {pid for pid in found if table.get(pid, (0, "Z"))[1] not in ("Z", "X")}


def kill_run(
    marker: str | None, ancestor: int | None, cgroup: Path | None, timeout: float = KILL_TIMEOUT_S
) -> list[int]:
    """SIGKILL every process of a run, sweep after sweep until one finds none (a process may fork
    while it is being killed; a killed one cannot fork any more); return the pids signalled.

    The run's processes: everything in its ``cgroup`` (``cgroup.kill``), and what
    :func:`run_processes` finds by ``marker`` and ``ancestor``. The shim's killed children stay
    zombies until it reaps them; zombies hold nothing and are not counted.
    """
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        if cgroup is not None:
            cgroups.kill(cgroup)
        pids = run_processes(marker, ancestor)
        if cgroup is not None:
            pids |= {p for p in cgroups.procs(cgroup) if process_start_ticks(p) is not None}
        pids.discard(os.getpid())
        if not pids:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        if time.monotonic() > deadline:
            log.error("processes %s of run %s still alive after %.0f s of SIGKILL", sorted(pids), marker, timeout)
            return killed
        time.sleep(0.005)


def _reap_all() -> None:
    """Reap every child that has exited (call only once Popen has reaped the command)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _reap_orphans(exclude: int | None) -> None:
    """Reap exited orphans re-parented to this subreaper, leaving the command (``exclude``) to Popen."""
    me = os.getpid()
    for pid, (ppid, state) in _process_table().items():
        if ppid == me and state == "Z" and pid != exclude:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


class _Log:
    """The job's log: gpufleet's own lines always, the job's output up to ``cap`` bytes per run.

    A write that fails (a full disk) never ends the run: the shim keeps draining the job's output
    and records the run's end all the same."""

    def __init__(self, fd: int | None, cap: int | None) -> None:
        self.fd = fd
        self.cap = cap if cap is not None and cap > 0 else None
        self.kept = 0  # bytes of the job's output written
        self.dropped = 0  # bytes of the job's output past the cap
        self._newline = True  # the last byte written ends a line
        self._failed = False

    def note(self, text: str) -> None:
        """A line of gpufleet's own (header, notice, footer): not counted against the cap."""
        self._write((b"" if self._newline else b"\n") + text.encode())

    def output(self, data: bytes) -> None:
        keep = data if self.cap is None else data[: max(0, self.cap - self.kept)]
        if keep:
            self.kept += len(keep)
            self._write(keep)
        if len(keep) < len(data):
            if not self.dropped:
                self.note(
                    f"=== log truncated at {self.cap} bytes by gpufleet: further output of this run is dropped ===\n"
                )
            self.dropped += len(data) - len(keep)

    def _write(self, data: bytes) -> None:
        if self.fd is None:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
            self._newline = data.endswith(b"\n") if data else self._newline
            self._failed = False
        except OSError as e:
            if not self._failed:
                log.warning("cannot write the job's log: %s; its output is dropped until it can", e.strerror or e)
            self._failed = True


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
        self._child_exited = False
        self._child_pid: int | None = None
        self._out: int | None = None  # read end of the job's stdout and stderr
        self._reserve: int | None = None  # fd of status.reserve
        signal.pthread_sigmask(signal.SIG_SETMASK, set())  # whatever the server had blocked
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the shim's own; the job starts with SIG_DFL

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGCHLD:
            self._child_exited = True
        else:
            self._signalled.append(signum)

    def run(self) -> int:
        if (self.run_dir / STATUS).exists() or (self.run_dir / PID).exists():
            log.error("run %s was already started: refusing to start it again", self.run_dir)
            return 3
        spec = read_json(self.run_dir / SPEC)
        if spec is None:
            log.error("no readable %s in %s", SPEC, self.run_dir)
            return 2
        try:
            self._reserve = _reserve(self.run_dir / STATUS_RESERVE)
        except OSError as e:
            log.error("cannot reserve room to record the run's end (%s): not starting it", e.strerror or e)
            return 2
        me = {"shim_pid": os.getpid(), "shim_start": process_start_ticks(os.getpid())}
        write_json_atomic(self.run_dir / PID, me)
        _become_subreaper()
        try:
            fd: int | None = os.open(spec["log_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            log.warning("cannot open the job's log %s (%s): its output is dropped", spec["log_path"], e.strerror or e)
            fd = None
        try:
            return self._run(spec, me, _Log(fd, spec.get("max_log_bytes")))
        finally:
            if fd is not None:
                os.close(fd)

    def _run(self, spec: dict[str, Any], me: dict[str, Any], job_log: _Log) -> int:
        run = spec["run"]
        stop = read_json(self.run_dir / STOP)
        started_at = time.time()
        job_log.note(f"=== gpufleet run {run} started {iso(started_at)} ===\n")
        if stop is not None:
            return self._finish(job_log, run, started_at, started_at, None, None, STOPPED, _stop_reason(stop))
        cgroup = _make_cgroup(spec)
        max_pids = spec.get("max_pids")
        nproc = int(max_pids) if max_pids and (cgroup is None or not cgroups.limits_pids(cgroup)) else None
        err_r, err_w = os.pipe2(os.O_CLOEXEC)  # the child's setup error, if any (EOF: it exec'd)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)  # the job's stdout and stderr, to the log
        try:
            child = subprocess.Popen(
                spec["command"],
                env=spec["env"],
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=subprocess.STDOUT,
                process_group=0,
                close_fds=True,
                umask=0o077,
                preexec_fn=_child_setup(spec, cgroup, err_w, nproc),
            )
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            for fd in (err_w, err_r, out_w, out_r):
                os.close(fd)
            if cgroup is not None:
                cgroups.remove(cgroup)
            errno_ = getattr(e, "errno", None)
            code = 127 if errno_ in (errno.ENOENT, errno.ENOTDIR) else 126
            reason = f"cannot start {str(spec['command'][0])!r}: {getattr(e, 'strerror', None) or e}"
            return self._finish(job_log, run, started_at, time.time(), code, None, FAILED, reason)
        self._child_pid = child.pid
        os.close(err_w)
        os.close(out_w)
        self._out = out_r
        os.set_blocking(out_r, False)
        setup_error = _read_all(err_r)
        me |= {"child_pid": child.pid, "child_start": process_start_ticks(child.pid), "started_at": started_at}
        try:
            write_json_atomic(self.run_dir / PID, me)
        except OSError as e:  # a full disk: the run goes on (the server finds the command by session)
            log.warning("cannot record the command's pid: %s", e.strerror or e)
        ending, rc, ended_at = self._wait(child, spec, started_at, job_log)
        killpg(child.pid, signal.SIGKILL)  # leftovers of the job's process group, at once
        killed = kill_run(spec.get("run_id"), os.getpid(), cgroup)  # and of the run: daemons included
        _reap_all()
        if killed:
            log.info("killed %d leftover process(es) of the run: %s", len(killed), sorted(set(killed)))
        self._drain(job_log)
        if cgroup is not None and not cgroups.remove(cgroup):
            log.warning("cannot remove the run's cgroup %s", cgroup)
        exit_code, sig = (None, -rc) if rc < 0 else (rc, None)
        kind = ending.kind or (SUCCEEDED if rc == 0 else FAILED)
        reason = ending.reason or _exit_reason(exit_code, sig)
        if setup_error:
            kind, reason = FAILED, setup_error
            job_log.note(f"gpufleet: {setup_error}\n")
        return self._finish(job_log, run, started_at, ended_at, exit_code, sig, kind, reason)

    def _wait(
        self, child: subprocess.Popen[bytes], spec: dict[str, Any], started_at: float, job_log: _Log
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
            self._sleep(max(0.0, min(waits)), job_log)

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

    def _sleep(self, timeout: float, job_log: _Log) -> None:
        """Sleep until a signal (child exit, stop) or output arrives, or ``timeout`` passes; copy
        the output to the log and reap exited orphans."""
        fds = [self._wake_r] if self._out is None else [self._wake_r, self._out]
        with contextlib.suppress(InterruptedError):
            select.select(fds, [], [], timeout)
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self._wake_r, 512):
                pass
        self._pump(job_log, _CHUNKS_PER_WAKE)
        if self._child_exited:
            self._child_exited = False
            _reap_orphans(exclude=self._child_pid)

    def _pump(self, job_log: _Log, chunks: int) -> None:
        """Copy up to ``chunks`` reads of available output to the log; close the pipe at EOF."""
        for _ in range(chunks):
            if self._out is None:
                return
            try:
                data = os.read(self._out, _READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            if not data:  # every writer is gone
                os.close(self._out)
                self._out = None
                return
            job_log.output(data)

    def _drain(self, job_log: _Log) -> None:
        """Copy what is left in the pipe once the run's processes are gone (bounded in time: a
        process outside the run could hold the pipe's write end)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self._out is not None and time.monotonic() < deadline:
            with contextlib.suppress(InterruptedError):
                select.select([self._out], [], [], max(0.0, deadline - time.monotonic()))
            self._pump(job_log, _CHUNKS_PER_WAKE)
        if self._out is not None:
            log.warning("the job's output pipe is still open after its processes were killed: closing it")
            os.close(self._out)
            self._out = None

    def _finish(
        self,
        job_log: _Log,
        run: int,
        started_at: float,
        ended_at: float,
        exit_code: int | None,
        sig: int | None,
        kind: str,
        reason: str,
    ) -> int:
        """Write the log footer and status.json (the run's durable end), else record it in place in
        status.reserve; UNRECORDED if neither could be written."""
        how = f"exit code {exit_code}" if sig is None else f"signal {_signame(sig)}"
        dropped = f"; {job_log.dropped} bytes of output dropped past the log cap" if job_log.dropped else ""
        job_log.note(
            f"=== gpufleet run {run} ended {iso(ended_at)}: {kind} ({how}; {reason}) "
            f"after {ended_at - started_at:.3f} s{dropped} ===\n"
        )
        status = {
            "exit_code": exit_code,
            "signal": sig,
            "started_at": started_at,
            "ended_at": ended_at,
            "kind": kind,
            "reason": reason,
        }
        try:
            write_json_atomic(self.run_dir / STATUS, status)
        except OSError as e:
            log.error("cannot write %s (%s): recording the run's end in %s", STATUS, e.strerror or e, STATUS_RESERVE)
            return 0 if self._record_in_reserve(status) else UNRECORDED
        with contextlib.suppress(OSError):
            os.unlink(self.run_dir / STATUS_RESERVE)
        return 0

    def _record_in_reserve(self, status: dict[str, Any]) -> bool:
        """Overwrite the reserved blanks of status.reserve in place: no new block is needed."""
        if self._reserve is None:
            return False
        data = json.dumps(status, sort_keys=True).encode()
        if len(data) > RESERVE_BYTES:
            status = status | {"reason": str(status["reason"])[:500]}
            data = json.dumps(status, sort_keys=True).encode()[:RESERVE_BYTES]
        try:
            os.pwrite(self._reserve, data.ljust(RESERVE_BYTES), 0)
            os.fsync(self._reserve)
        except OSError as e:
            log.error("cannot record the run's end in %s either: %s", STATUS_RESERVE, e.strerror or e)
            return False
        return True


def _reserve(path: Path) -> int:
    """Create ``path`` holding RESERVE_BYTES blanks, synced (its blocks allocated); its fd."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(b" " * RESERVE_BYTES)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return fd


def _become_subreaper() -> None:
    """prctl(PR_SET_CHILD_SUBREAPER): orphans of the run (double-forked daemons) become this
    process's children instead of init's, so the shim finds and kills them when the run ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("cannot become a child subreaper (errno %d): daemons are found by marker only", ctypes.get_errno())


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
    max_pids = spec.get("max_pids")
    try:
        return cgroups.create(
            Path(cg["parent"]),
            cg["name"],
            int(cg["cpu_milli"]),
            int(cg["memory_mib"]),
            int(max_pids) if max_pids else None,
        )
    except OSError as e:
        log.warning("no cgroup for this run (%s): limits are not enforced", e)
        return None


def _no_new_privs(libc: ctypes.CDLL) -> None:
    """prctl(PR_SET_NO_NEW_PRIVS): exec of a setuid or file-capability binary grants nothing."""
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _child_setup(spec: Mapping[str, Any], cgroup: Path | None, err_w: int, nproc: int | None) -> Callable[[], None]:
    """What the forked child does before ``exec`` (see the module docstring), in this order.

    ``nproc``: the process limit to set as ``RLIMIT_NPROC`` where the cgroup cannot set one. That
    limit is the *account's*, all its processes together (other runs of it included), and the
    kernel applies it only to an account that is not root, so it is set only when the job runs as
    another account than the server's.

    Runs between fork and exec of a single-threaded shim; any failure is written to ``err_w`` and
    ends the child with :data:`SETUP_FAILED`, so the run fails with that reason instead of running
    with the wrong identity or folders.
    """
    account = spec.get("account")
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the job's account may not read Python's files
    checkpoint_dir = spec.get("checkpoint_dir")
    workdir = spec.get("cwd") or spec.get("job_dir")

    def setup() -> None:
        step = "resetting its signal dispositions"
        try:
            for sig in _RESET_SIGNALS:
                with contextlib.suppress(OSError, ValueError):
                    signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            if cgroup is not None:
                step = f"joining its cgroup {cgroup}"
                with open(cgroup / "cgroup.procs", "w") as f:
                    f.write("0")
            if account is not None:
                name, uid, gid = account["name"], int(account["uid"]), int(account["gid"])
                step = f"switching to the Unix account {name!r}"
                os.setgroups([int(g) for g in account["groups"]])
                if nproc is not None and uid != 0:
                    step = f"limiting the account {name!r} to {nproc} processes (RLIMIT_NPROC)"
                    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
                    step = f"switching to the Unix account {name!r}"
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
