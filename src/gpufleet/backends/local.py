"""The local backend: jobs are real processes on this machine's real (or declared) GPUs.

Crash safety is the point of the design. The server may be SIGKILLed at any moment and restarted;
a run must never start twice and its end must never be lost. So the server never waits on a job
itself: every run gets a *shim* process (:mod:`gpufleet.backends.shim`) in its own session that
starts the command, enforces stop requests and max runtime, and records the outcome in the run
directory ``<state_dir>/runs/<job_id>/<run>/`` (see the shim's docstring for the files).

Liveness is a file lock, not a pid: the server takes ``flock(LOCK_EX)`` on the run's lock file
*before* spawning the shim and hands the descriptor over (``pass_fds``), so from the instant
``Popen`` returns the lock is held by a live shim, and it is released only when the shim exits
after writing ``status.json``. Hence, for any run:

- ``status.json`` exists → it ended (the file says how and when);
- lock held → a shim is running it;
- neither, but ``pid.json`` exists → it started and its shim vanished (LOST): anything of it still
  running is killed, and it is never started again under the same run number;
- neither and no ``pid.json`` → it never started: a launch may start it.

Ownership (a shared server, see the README's security model): everything under ``state_dir`` is the
server's (folders 0700, files 0600): the store, the admin token, the run directories, the logs.
A job runs as its owner's Unix account (:mod:`gpufleet.backends.accounts`) with an environment
built from nothing, and may write only its own folder ``<job_root>/<team>/<job_id>/`` (0700, owned
by its account: its checkpoints and progress file) and whatever its account may write anyway.
Where cgroup v2 is usable, each run gets a cgroup with its CPU and memory request and the
process limit ``max_job_pids`` as limits (without one, the process limit falls back to the job
account's ``RLIMIT_NPROC``).

Containment: nothing of a run outlives it. When a run ends (on its own, stopped, timed out) its
shim kills every process of it; when its shim vanished, :func:`kill_stale` does, from the run's
cgroup and its marker (``GPUFLEET_RUN_ID``, a per-run nonce every process of it inherits). A run's
log is capped at ``max_log_bytes`` of output and may live on its own file system (``log_dir``),
so a job cannot fill the store's; and a run whose end could not be written to ``status.json`` (a
full disk) records it in place in a file reserved at its start (``status.reserve``), so it is
reported as it ended, never as LOST (which would run it again).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

import gpufleet
from gpufleet.backends import cgroups, shim
from gpufleet.backends.accounts import Account, AccountPolicy, job_environment
from gpufleet.backends.base import (
    BackendEvent,
    Capabilities,
    Capability,
    EventKind,
    GpuSample,
    LaunchRequest,
    Recovered,
    RecoveredState,
    RunHandle,
)
from gpufleet.backends.gpuspec import parse_gpu_spec
from gpufleet.errors import BackendError, InputError
from gpufleet.k8s.vocabulary import LABEL_BACKEND, LABEL_GPU_MEMORY_GIB, LABEL_GPU_MODELS, LABEL_GPU_SOURCE
from gpufleet.model.gpu import MILLI, gpu_model
from gpufleet.model.job import PodPlacement
from gpufleet.model.node import CapacityType, Node, SharingMode
from gpufleet.telemetry.nvml import MigDevice, Nvml

log = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_MAX_LOG_BYTES = 1024 * MIB  # a run's output kept in its log; the rest is dropped
DEFAULT_MAX_JOB_PIDS = 4096  # processes (and threads) of one run
START_TIMEOUT_S = 10.0  # how long launch waits for the shim to report the command's pid
ADOPT_TIMEOUT_S = 2.0  # how long recover waits for a just-started shim's pid.json
_WAIT_STEP_S = 0.005
_TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
ROOT_JOB_ROOT = Path("/var/lib/gpufleet-jobs")  # job folders of a root server (its home is 0700)
_END_KINDS = {
    shim.SUCCEEDED: EventKind.SUCCEEDED,
    shim.FAILED: EventKind.FAILED,
    shim.STOPPED: EventKind.STOPPED,
    shim.TIMED_OUT: EventKind.TIMED_OUT,
}

# Shim processes this server spawned, by pid, reaped by any backend's poll() (a backend that was
# closed or abandoned leaves its children here, so no zombie outlives the next poll).
_SHIMS: dict[int, subprocess.Popen[bytes]] = {}
_SHIMS_LOCK = threading.Lock()


def _reap_shims() -> None:
    with _SHIMS_LOCK:
        for pid, p in list(_SHIMS.items()):
            if p.poll() is not None:
                del _SHIMS[pid]


@dataclass(frozen=True, slots=True)
class LocalGpu:
    """One GPU of this host as the backend uses it (from NVML, or declared)."""

    index: int
    model: str
    memory_gib: float
    mig: bool
    uuid: str | None = None  # None for a declared GPU
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(slots=True)
class _Watch:
    """A run whose end this backend instance will report from poll()."""

    job_id: str
    run: int
    run_dir: Path
    popen: subprocess.Popen[bytes] | None = None  # set when this instance spawned the shim


def _lock_held(run_dir: Path) -> bool:
    """True if a live shim holds the run's lock (probed with a non-blocking flock)."""
    try:
        fd = os.open(run_dir / shim.LOCK, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases the probe's own lock, if it got it
    return False


def _session_members(sid: int, not_before: int) -> list[int]:
    """Pids in session ``sid`` that started at or after ``not_before`` (clock ticks)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.getsid(pid) != sid:
                continue
        except OSError:
            continue
        start = shim.process_start_ticks(pid)
        if start is not None and start >= not_before:
            out.append(pid)
    return out


def kill_stale(run_dir: Path) -> list[int]:
    """Kill whatever is left of a run whose shim is gone; return the pids signalled.

    The command's process group is killed if its leader is still the same process (pid and start
    time); then every process of the dead shim's session that started after it (this finds the
    command even when the shim died before recording its pid); then, until none is left, every
    process in the run's cgroup and every process carrying the run's marker (``GPUFLEET_RUN_ID``):
    daemons that left the session are found that way. The session sweep is skipped if the shim's
    pid now belongs to another process, whose session it could be. Without a cgroup, a process
    that both left the session and dropped the marker from its environment after its shim was
    SIGKILLed is not found (the shim, alive, finds it as its descendant).
    """
    info = shim.read_json(run_dir / shim.PID) or {}
    spec = shim.read_json(run_dir / shim.SPEC) or {}
    killed: list[int] = []
    child, child_start = info.get("child_pid"), info.get("child_start")
    if shim.is_same_process(child, child_start):
        assert isinstance(child, int)
        shim.killpg(child, signal.SIGKILL)
        killed.append(child)
    spid, sstart = info.get("shim_pid"), info.get("shim_start")
    if isinstance(spid, int) and isinstance(sstart, int) and shim.process_start_ticks(spid) is None:
        for pid in _session_members(spid, sstart):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    cg = spec.get("cgroup")
    cgroup = Path(cg["parent"]) / cg["name"] if isinstance(cg, dict) and cg.get("parent") and cg.get("name") else None
    marker = spec.get("run_id") if isinstance(spec.get("run_id"), str) else None
    if (cgroup is not None and cgroup.exists()) or marker:
        killed += shim.kill_run(marker, None, cgroup if cgroup is not None and cgroup.exists() else None)
    if cgroup is not None and cgroup.exists() and not cgroups.remove(cgroup):
        log.warning("cannot remove the cgroup %s of lost run %s", cgroup, run_dir)
    if killed:
        log.warning("killed stale processes %s of lost run %s", sorted(set(killed)), run_dir)
    return killed


def _profile_for_mask(model: str, mask: int, milli: int) -> str:
    """The MIG profile a slice mask denotes on ``model`` (``milli`` tells apart equal-memory ones)."""
    candidates = [p for p in gpu_model(model).mig_profiles if mask in p.masks()]
    if not candidates:
        raise BackendError(f"MIG slice mask {mask:#04x} is not a valid placement on a {model}")
    exact = [p for p in candidates if p.milli == milli]
    return (exact or candidates)[0].name


class LocalBackend:
    """Runs jobs as processes on this host. See the module docstring for the crash-safety design.

    ``gpus`` declares the GPUs (e.g. ``"8xA100-80GB"``, see :mod:`gpufleet.backends.gpuspec`);
    ``None`` asks NVML and falls back to no GPUs where there is no driver. ``cpu_milli`` and
    ``memory_mib`` override what the OS reports (to leave room for the server itself).
    ``log_dir``: where jobs' logs go (default ``<state_dir>/logs``; another file system keeps a job's
    output from filling the store's); ``max_log_bytes``: a run's output kept in its log (None: all);
    ``max_job_pids``: processes of one run (its cgroup's ``pids.max``, else the job account's
    ``RLIMIT_NPROC``; None: no limit). ``cgroup_root``: where cgroup v2 is looked for (None: no
    cgroups, for tests of the fallback).
    """

    name = "local"

    def __init__(
        self,
        state_dir: Path,
        node_name: str | None = None,
        gpus: str | None = None,
        use_nvml: bool = True,
        default_grace_s: float = 30.0,
        python: str = sys.executable,
        *,
        cpu_milli: int | None = None,
        memory_mib: int | None = None,
        nvml_lib: ModuleType | None = None,
        policy: AccountPolicy | None = None,
        job_root: Path | None = None,
        cgroup_root: Path | None = cgroups.DEFAULT_ROOT,
        log_dir: Path | None = None,
        max_log_bytes: int | None = DEFAULT_MAX_LOG_BYTES,
        max_job_pids: int | None = DEFAULT_MAX_JOB_PIDS,
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.log_dir = Path(log_dir).resolve() if log_dir is not None else self.state_dir / "logs"
        self.max_log_bytes = max_log_bytes  # per run; None: no cap
        self.max_job_pids = max_job_pids  # per run (cgroup) or per account (RLIMIT_NPROC); None: none
        self.policy = policy or AccountPolicy()
        if job_root is None:
            job_root = ROOT_JOB_ROOT if os.geteuid() == 0 else self.state_dir / "jobs"
        self.job_root = Path(job_root).resolve()
        self.cgroups = (
            cgroups.detect(cgroup_root)
            if cgroup_root is not None
            else cgroups.CgroupSupport(None, "cgroups switched off in the configuration")
        )
        self._progress_paths: dict[tuple[str, int], Path] = {}
        self.node_name = node_name or socket.gethostname()
        self.default_grace_s = default_grace_s
        self.python = python
        self._cpu_milli = cpu_milli
        self._memory_mib = memory_mib
        self._declared = parse_gpu_spec(gpus) if gpus is not None else None
        self._nvml = Nvml(nvml_lib, enabled=use_nvml)
        self._mutex = threading.RLock()
        self._watched: dict[tuple[str, int], _Watch] = {}
        self._reported: set[tuple[str, int]] = set()
        _private_dir(self.state_dir)
        for sub in ("runs", "logs"):
            _private_dir(self.state_dir / sub)
        _private_dir(self.log_dir)
        _passable_dir(self.job_root)
        self.gpus: list[LocalGpu] = self._discover_gpus()
        self.capabilities = self._capabilities()
        for cap in (Capability.RUN_AS, Capability.RESOURCE_LIMITS, Capability.DEVICE_ISOLATION):
            if cap in self.capabilities.missing:  # once, at start: what the kernel does not enforce here
                log.warning("local backend: no %s: %s", cap.value, self.capabilities.missing[cap])
        if not self.policy.can_switch:
            pass  # jobs run as the server: the warnings above say what that means
        elif not self.cgroups.available:
            log.warning(
                "local backend: runs get no cgroup (%s): their leftover processes are found by their shim "
                "and their environment only, and the process limit is the job account's RLIMIT_NPROC",
                self.cgroups.reason,
            )
        elif not self.cgroups.limits_pids and self.max_job_pids:
            log.warning(
                "local backend: no pids controller in the runs' cgroups: the process limit is the job "
                "account's RLIMIT_NPROC (all its processes together; none for jobs run as the server's account)"
            )

    # ---- inventory -------------------------------------------------------------------------

    @property
    def gpu_source(self) -> str:
        """Where the GPU list comes from: "declared", "nvml" or "none"."""
        if self._declared is not None:
            return "declared"
        return "nvml" if self._nvml.available else "none"

    def _discover_gpus(self) -> list[LocalGpu]:
        if self._declared is not None:
            d = self._declared
            return [LocalGpu(i, d.model, d.memory_gib, d.mig) for i in range(d.count)]
        return [
            LocalGpu(g.index, g.model, g.memory_gib, g.mig_enabled, g.uuid, g.mig_devices) for g in self._nvml.gpus()
        ]

    def _capabilities(self) -> Capabilities:
        supported = {Capability.FRACTIONAL, Capability.PREEMPTION}
        missing = {
            Capability.SPOT: "a single server has no spot market",
            Capability.MULTI_NODE: "one server",
            Capability.AUTOSCALING: "a single server cannot add nodes",
        }
        if any(g.mig for g in self.gpus):
            supported.add(Capability.MIG)
        else:
            missing[Capability.MIG] = "no GPU of this server is in MIG mode"
        if self.policy.can_switch:
            supported.add(Capability.RUN_AS)
        else:
            missing[Capability.RUN_AS] = "the server is not root, so every job runs as the server's own account"
        if self.cgroups.enforces_limits:
            supported.add(Capability.RESOURCE_LIMITS)
        else:
            why = self.cgroups.reason or self.cgroups.limits_reason
            missing[Capability.RESOURCE_LIMITS] = f"CPU and memory requests are not enforced: {why}"
        missing[Capability.DEVICE_ISOLATION] = (
            "GPU access is limited by CUDA_VISIBLE_DEVICES only: the cgroup v2 BPF device filter is not loaded"
        )
        return Capabilities(frozenset(supported), missing)

    def inventory(self) -> list[Node]:
        """This host as one node (GPUs re-read from NVML, so MIG reconfiguration shows up)."""
        with self._mutex:
            self.gpus = self._discover_gpus()
            self.capabilities = self._capabilities()
            gpus = list(self.gpus)
        labels = {LABEL_BACKEND: "local", LABEL_GPU_SOURCE: self.gpu_source}
        model = ""
        if gpus:
            counts = Counter(g.model for g in gpus)
            model = counts.most_common(1)[0][0]
            if len(counts) > 1:
                log.warning("mixed GPU models %s on one host; the node is listed as %s", dict(counts), model)
                labels[LABEL_GPU_MODELS] = ",".join(sorted(counts))
            if gpu_model(model).memory_gib <= 0:
                labels[LABEL_GPU_MEMORY_GIB] = f"{gpus[0].memory_gib:g}"
        return [
            Node(
                name=self.node_name,
                gpu_model=model,
                gpu_count=len(gpus),
                cpu_milli=self._cpu_milli if self._cpu_milli is not None else _host_cpu_milli(),
                memory_mib=self._memory_mib if self._memory_mib is not None else _host_memory_mib(),
                pool="local",
                capacity_type=CapacityType.ON_DEMAND,
                sharing=SharingMode.MIG if any(g.mig for g in gpus) else SharingMode.SHARED,
                labels=labels,
            )
        ]

    # ---- paths -----------------------------------------------------------------------------

    def run_dir(self, job_id: str, run: int) -> Path:
        _check_key(job_id, run)
        return self.state_dir / "runs" / job_id / str(run)

    def log_path(self, job_id: str) -> Path:
        """The job's log: every run appends to it, between a header and a footer line."""
        _check_key(job_id, 1)
        return self.log_dir / f"{job_id}.log"

    # ---- launch ----------------------------------------------------------------------------

    def launch(self, req: LaunchRequest) -> RunHandle:
        """Start run ``(job_id, run)`` unless it already started; return its handle.

        A run that is alive is adopted, one that ended or was lost is reported by poll() (unless
        this instance already reported it): a run number is never started twice.
        """
        key = (req.job_id, req.run)
        run_dir = self.run_dir(req.job_id, req.run)
        with self._mutex:
            existing = self._watched.get(key)
            if existing is not None:
                return self._handle(existing)
            if key in self._reported:  # ended, and this instance already said so
                return self._handle(_Watch(req.job_id, req.run, run_dir))
            _check_strings(req)
            account = self.policy.resolve(req.run_as)
            job_dir = self._job_dir(req, account)
            run_id = f"{req.job_id}.{req.run}.{secrets.token_hex(4)}"  # unique on this host, across servers
            env = self._job_env(req, account, job_dir, run_id)
            _private_dir(run_dir.parent)
            _private_dir(run_dir)
            fd = os.open(run_dir / shim.LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return self._adopt(key, run_dir)  # a live shim (maybe another server's) runs it
                if shim.has_ended(run_dir) or (run_dir / shim.PID).exists():
                    return self._watch_existing(key, run_dir)
                popen = self._spawn(req, run_dir, env, fd, account, job_dir, run_id)
                watch = _Watch(req.job_id, req.run, run_dir, popen)
            finally:
                os.close(fd)
            self._watched[key] = watch
            try:
                return self._wait_started(watch)
            except BackendError:
                del self._watched[key]
                self._reported.add(key)  # the caller was told by the exception
                raise

    def _spawn(
        self,
        req: LaunchRequest,
        run_dir: Path,
        env: dict[str, str],
        lock_fd: int,
        account: Account,
        job_dir: Path,
        run_id: str,
    ) -> subprocess.Popen[bytes]:
        """Write spec.json and start the shim, handing it the held lock."""
        switch = account.uid != os.geteuid()
        cgroup = None
        if self.cgroups.parent is not None:
            cgroup = {
                "parent": str(self.cgroups.parent),
                "name": run_id,
                "cpu_milli": req.cpu_milli,
                "memory_mib": req.memory_mib,
            }
        spec = {
            "job_id": req.job_id,
            "run": req.run,
            "run_id": run_id,
            "command": list(req.command),
            "env": env,
            "cwd": req.cwd,
            "job_dir": str(job_dir),
            "checkpoint_dir": env["GPUFLEET_CHECKPOINT_DIR"],
            "progress_path": env["GPUFLEET_PROGRESS_FILE"],
            "account": account.to_json() if switch else None,
            "cgroup": cgroup,
            "log_path": str(self.log_path(req.job_id)),
            "max_log_bytes": self.max_log_bytes,
            "max_pids": self.max_job_pids,
            "max_runtime_s": req.max_runtime_s,
            "grace_s": req.grace_s,
            "restart_count": req.restart_count,
        }
        self._progress_paths[(req.job_id, req.run)] = Path(env["GPUFLEET_PROGRESS_FILE"])
        shim.write_json_atomic(run_dir / shim.SPEC, spec)
        shim_env = dict(os.environ)
        src_root = str(Path(gpufleet.__file__).resolve().parent.parent)
        shim_env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, shim_env.get("PYTHONPATH")) if p)
        cmd = [self.python, "-m", "gpufleet.backends.shim", str(run_dir), "--lock-fd", str(lock_fd)]
        try:
            with open(run_dir / shim.SHIM_LOG, "ab") as shim_log:
                popen = subprocess.Popen(
                    cmd,
                    pass_fds=(lock_fd,),
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                    stdout=shim_log,
                    stderr=subprocess.STDOUT,
                    env=shim_env,
                    cwd=run_dir,
                )
        except OSError as e:
            raise BackendError(f"job {req.job_id}: cannot start the run shim ({self.python}): {e}") from e
        with _SHIMS_LOCK:
            _SHIMS[popen.pid] = popen
        log.info("launched %s run %d (shim pid %d): %s", req.job_id, req.run, popen.pid, list(req.command))
        return popen

    def _wait_started(self, watch: _Watch) -> RunHandle:
        """Wait until the shim has started the command (or ended the run) and return the handle."""
        assert watch.popen is not None
        started = time.time()
        deadline = started + START_TIMEOUT_S
        while time.time() < deadline:
            info = shim.read_json(watch.run_dir / shim.PID) or {}
            if "child_pid" in info or shim.has_ended(watch.run_dir):
                return self._handle(watch)
            if watch.popen.poll() is not None and not shim.has_ended(watch.run_dir):
                raise BackendError(
                    f"job {watch.job_id} run {watch.run}: the run shim exited with code {watch.popen.returncode} "
                    f"before starting it: {_tail(watch.run_dir / shim.SHIM_LOG)}"
                )
            time.sleep(_WAIT_STEP_S)
        log.warning("shim of %s run %d slow to start; returning a provisional handle", watch.job_id, watch.run)
        return RunHandle(watch.job_id, watch.run, watch.popen.pid, started, str(self.log_path(watch.job_id)))

    def _adopt(self, key: tuple[str, int], run_dir: Path) -> RunHandle:
        """Watch a run whose shim is alive (started by another server instance)."""
        watch = _Watch(key[0], key[1], run_dir)
        self._watched[key] = watch
        deadline = time.time() + ADOPT_TIMEOUT_S
        while "child_pid" not in (shim.read_json(run_dir / shim.PID) or {}) and time.time() < deadline:
            if shim.has_ended(run_dir) or not _lock_held(run_dir):
                break
            time.sleep(_WAIT_STEP_S)
        return self._handle(watch)

    def _watch_existing(self, key: tuple[str, int], run_dir: Path) -> RunHandle:
        """A run that ended or was lost: never re-run it; poll() reports it once."""
        watch = _Watch(key[0], key[1], run_dir)
        if key not in self._reported:
            self._watched[key] = watch
        return self._handle(watch)

    def _handle(self, watch: _Watch) -> RunHandle:
        info = shim.read_json(watch.run_dir / shim.PID) or {}
        status = shim.read_status(watch.run_dir) or {}
        pid = info.get("child_pid") or info.get("shim_pid") or (watch.popen.pid if watch.popen else 0)
        started_at = info.get("started_at") or status.get("started_at") or 0.0
        return RunHandle(watch.job_id, watch.run, int(pid), float(started_at), str(self.log_path(watch.job_id)))

    # ---- environment -----------------------------------------------------------------------

    def _job_dir(self, req: LaunchRequest, account: Account) -> Path:
        """``<job_root>/<team>/<job_id>``: the job's own folder, 0700 and owned by its account.

        The team folder is the server's (0711: others may pass through, not list it), so nobody
        else can plant a link where the job folder goes; an existing job folder is kept only if it
        is a real folder owned by the account (a restarted job finds its checkpoints there)."""
        if not _TEAM_RE.match(req.team):
            raise BackendError(f"job {req.job_id}: team name {req.team!r} cannot name a folder")
        team_dir = self.job_root / req.team
        try:
            _passable_dir(team_dir)
            job_dir = team_dir / req.job_id
            with contextlib.suppress(FileExistsError):
                os.mkdir(job_dir, 0o700)
            st = os.lstat(job_dir)
            if not stat.S_ISDIR(st.st_mode):
                raise BackendError(f"job {req.job_id}: {job_dir} is not a folder")
            if st.st_uid != account.uid:
                if st.st_uid != os.geteuid():
                    raise BackendError(f"job {req.job_id}: {job_dir} belongs to uid {st.st_uid}, not {account.name!r}")
                os.chown(job_dir, account.uid, account.gid, follow_symlinks=False)
            os.chmod(job_dir, 0o700)  # a folder (lstat above), in a folder only the server writes
        except OSError as e:
            why = e.strerror or e
            raise BackendError(f"job {req.job_id}: cannot prepare its folder under {team_dir}: {why}") from e
        return job_dir

    def _job_env(self, req: LaunchRequest, account: Account, job_dir: Path, run_id: str) -> dict[str, str]:
        """The command's environment, built from nothing (see :func:`accounts.job_environment`):
        the account's basics, the request's ``env``, the placement's GPU selection and the gpufleet
        variables (which win)."""
        ckpt = req.checkpoint_dir or str(job_dir / "checkpoints")
        extra = self._gpu_env(req.job_id, req.placement)
        extra.update(
            {
                "GPUFLEET_JOB_ID": req.job_id,
                "GPUFLEET_RUN": str(req.run),
                shim.RUN_ID_ENV: run_id,  # the run's marker: its leftover processes are found by it
                "GPUFLEET_CHECKPOINT_DIR": ckpt,
                "GPUFLEET_RESTART_COUNT": str(req.restart_count),
                "GPUFLEET_NODE": self.node_name,
                "GPUFLEET_JOB_DIR": str(job_dir),
                # where the job may report its progress (steps, metrics) for cost forecasts
                "GPUFLEET_PROGRESS_FILE": str(job_dir / f"progress.{req.run}.jsonl"),
            }
        )
        same_user = account.uid == os.geteuid()
        return job_environment(account, dict(req.env), extra, server_path=os.environ.get("PATH") if same_user else None)

    def progress_path(self, job_id: str, run: int) -> Path | None:
        """The progress file a run may write (JSON lines, see gpufleet.cost.forecast), in the job's
        own folder; None for a run this server knows nothing of. The job owns the file: read it
        with :func:`read_job_file`."""
        key = (job_id, run)
        path = self._progress_paths.get(key)
        if path is None:
            spec = shim.read_json(self.run_dir(job_id, run) / shim.SPEC) or {}
            if isinstance(spec.get("progress_path"), str):
                path = self._progress_paths[key] = Path(spec["progress_path"])
        return path

    def _gpu_env(self, job_id: str, placement: tuple[PodPlacement, ...]) -> dict[str, str]:
        """CUDA_VISIBLE_DEVICES (and MPS share / MIG slice variables) for a placement."""
        pods = [p for p in placement if p.gpus]
        if not pods:
            return {"CUDA_VISIBLE_DEVICES": ""}
        if len(placement) > 1:
            raise BackendError(f"job {job_id}: the local backend runs one pod per job, got {len(placement)}")
        pod = pods[0]
        if pod.node != self.node_name:
            raise BackendError(f"job {job_id}: placed on node {pod.node!r}, but this server is {self.node_name!r}")
        gpus = self._placed_gpus(job_id, pod)
        if pod.mig_mask:
            return self._mig_env(job_id, gpus[0], pod)
        if any(g.mig for g in gpus):
            raise BackendError(f"job {job_id}: GPU {pod.gpus} is in MIG mode; a placement on it needs a MIG slice")
        env = {"CUDA_VISIBLE_DEVICES": ",".join(g.uuid or str(g.index) for g in gpus)}
        env["GPUFLEET_GPU_MILLI"] = str(pod.milli)
        if pod.milli < MILLI:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(math.ceil(pod.milli / 10))
        return env

    def _placed_gpus(self, job_id: str, pod: PodPlacement) -> list[LocalGpu]:
        if len(set(pod.gpus)) != len(pod.gpus):
            raise BackendError(f"job {job_id}: GPU indices {pod.gpus} repeat")
        bad = [i for i in pod.gpus if not 0 <= i < len(self.gpus)]
        if bad:
            raise BackendError(f"job {job_id}: GPU index {bad[0]} does not exist (this server has {len(self.gpus)})")
        if (pod.milli < MILLI or pod.mig_mask) and len(pod.gpus) != 1:
            raise BackendError(f"job {job_id}: a GPU share or MIG slice is on exactly one GPU, got {pod.gpus}")
        return [self.gpus[i] for i in pod.gpus]

    def _mig_env(self, job_id: str, gpu: LocalGpu, pod: PodPlacement) -> dict[str, str]:
        if not gpu.mig:
            raise BackendError(f"job {job_id}: GPU {gpu.index} is not in MIG mode")
        mask = pod.mig_mask
        if gpu.uuid is None:  # declared: the job gets the index and the slice to use
            profile = _profile_for_mask(gpu.model, mask, pod.milli)
            return {
                "CUDA_VISIBLE_DEVICES": str(gpu.index),
                "GPUFLEET_MIG_PROFILE": profile,
                "GPUFLEET_MIG_MASK": str(mask),
            }
        device = self._find_mig_device(gpu.index, mask)
        if device is None:
            raise BackendError(
                f"job {job_id}: no MIG device with slice mask {mask:#04x} exists on GPU {gpu.index} "
                "(create the MIG instance, or fix the placement)"
            )
        return {
            "CUDA_VISIBLE_DEVICES": device.uuid,
            "GPUFLEET_MIG_PROFILE": device.profile,
            "GPUFLEET_MIG_MASK": str(mask),
        }

    def _find_mig_device(self, index: int, mask: int) -> MigDevice | None:
        """The MIG device at ``mask`` on GPU ``index``; NVML is re-read once on a miss."""
        for attempt in range(2):
            if attempt:
                self.gpus = self._discover_gpus()
                if index >= len(self.gpus):
                    return None
            found = next((d for d in self.gpus[index].mig_devices if d.mask == mask), None)
            if found is not None:
                return found
        return None

    # ---- stop ------------------------------------------------------------------------------

    def stop(self, job_id: str, run: int, reason: str, grace_s: float | None = None) -> None:
        """Ask the run's shim to stop it: SIGTERM to the job's process group, SIGKILL after
        ``grace_s`` (None: the backend's ``default_grace_s``). The request is durable (stop.json),
        so it completes even if this server dies right after. Stopping an ended or unknown run is
        a no-op."""
        grace_s = self.default_grace_s if grace_s is None else grace_s
        run_dir = self.run_dir(job_id, run)
        if not run_dir.is_dir() or shim.has_ended(run_dir):
            return
        if not (run_dir / shim.STOP).exists():  # the first request's reason and grace stand
            shim.write_json_atomic(
                run_dir / shim.STOP, {"reason": reason, "grace_s": grace_s, "requested_at": time.time()}
            )
        info = shim.read_json(run_dir / shim.PID)
        if info is None:
            return  # the shim has not started the command yet; it reads stop.json before it does
        spid, sstart = info.get("shim_pid"), info.get("shim_start")
        if shim.is_same_process(spid, sstart):
            assert isinstance(spid, int)
            with contextlib.suppress(ProcessLookupError):
                os.kill(spid, signal.SIGUSR1)
            log.info("stopping %s run %d (%s, grace %.1f s)", job_id, run, reason, grace_s)
        elif not _lock_held(run_dir) and not shim.has_ended(run_dir):
            kill_stale(run_dir)  # the shim is gone: make sure nothing of the run runs; poll() says LOST

    # ---- poll / recover --------------------------------------------------------------------

    def poll(self) -> list[BackendEvent]:
        """End events of watched runs (each once), and LOST for runs whose shim vanished.

        Cheap: one open() per watched run, plus a waitpid (own shims) or a flock probe (adopted).
        """
        _reap_shims()
        events = []
        with self._mutex:
            for key, watch in list(self._watched.items()):
                event = self._check(watch)
                if event is not None:
                    events.append(event)
                    del self._watched[key]
                    self._reported.add(key)
        return events

    def _check(self, watch: _Watch) -> BackendEvent | None:
        status = shim.read_status(watch.run_dir)
        if status is not None:
            return self._end_event(watch.job_id, watch.run, status)
        alive = watch.popen.poll() is None if watch.popen is not None else _lock_held(watch.run_dir)
        if alive:
            return None
        status = shim.read_status(watch.run_dir)  # it may have ended since the first look
        if status is not None:
            return self._end_event(watch.job_id, watch.run, status)
        if watch.popen is not None and watch.popen.returncode == shim.UNRECORDED:
            return self._unrecorded_event(watch.job_id, watch.run, watch.run_dir)
        return self._lost_event(watch.job_id, watch.run, watch.run_dir)

    def _unrecorded_event(self, job_id: str, run: int, run_dir: Path) -> BackendEvent:
        """The shim said (by its exit code) that the run ended but it could write its end nowhere:
        FAILED, not LOST, so that a run that ran to its end is not started again."""
        why = "the run ended, but its shim could not record how (is the state folder's file system full?)"
        return self._unrecorded_end(EventKind.FAILED, job_id, run, run_dir, why)

    def _unrecorded_end(self, kind: EventKind, job_id: str, run: int, run_dir: Path, reason: str) -> BackendEvent:
        """A run whose end no status file holds: what is left of it is killed, and it ends now."""
        kill_stale(run_dir)
        info = shim.read_json(run_dir / shim.PID) or {}
        now = time.time()
        return BackendEvent(
            kind=kind,
            time=now,
            job_id=job_id,
            run=run,
            reason=reason,
            started_at=info.get("started_at"),
            ended_at=now,
            node=self.node_name,
        )

    def _end_event(self, job_id: str, run: int, status: dict[str, Any]) -> BackendEvent:
        ended_at = float(status.get("ended_at") or time.time())
        return BackendEvent(
            kind=_END_KINDS.get(str(status.get("kind")), EventKind.FAILED),
            time=ended_at,
            job_id=job_id,
            run=run,
            exit_code=status.get("exit_code"),
            signal=status.get("signal"),
            reason=str(status.get("reason", "")),
            started_at=status.get("started_at"),
            ended_at=ended_at,
            node=self.node_name,
        )

    def _lost_event(self, job_id: str, run: int, run_dir: Path) -> BackendEvent:
        why = "the run's shim vanished without recording an exit"
        return self._unrecorded_end(EventKind.LOST, job_id, run, run_dir, why)

    def recover(self, job_id: str, run: int) -> Recovered:
        """What became of a run while no server watched it (called by a restarted server).

        ENDED (with its event; poll() will not report it again), RUNNING (adopted: poll() reports
        its end), or ABSENT (never started, or vanished; anything left of it has been killed).
        """
        key = (job_id, run)
        run_dir = self.run_dir(job_id, run)
        with self._mutex:
            status = shim.read_status(run_dir)
            if status is None and _lock_held(run_dir):
                handle = self._watched.get(key)
                return Recovered(RecoveredState.RUNNING, self._handle(handle) if handle else self._adopt(key, run_dir))
            status = status or shim.read_status(run_dir)
            self._watched.pop(key, None)
            if status is not None:
                self._reported.add(key)
                event = self._end_event(job_id, run, status)
                return Recovered(RecoveredState.ENDED, self._handle(_Watch(job_id, run, run_dir)), event)
            if run_dir.is_dir():
                kill_stale(run_dir)
            return Recovered(RecoveredState.ABSENT)

    # ---- telemetry -------------------------------------------------------------------------

    def telemetry(self) -> list[GpuSample]:
        """Per-GPU utilization and memory, with each watched job's share; [] without NVML."""
        if not self._nvml.available:
            return []
        samples = self._nvml.samples()
        sessions = self._shim_sessions()
        out = []
        for s in samples:
            per_job: dict[str, float] = {}
            for pid, mib in s.process_memory_mib.items():
                job = _job_of_pid(pid, sessions)
                if job is not None:
                    per_job[job] = per_job.get(job, 0.0) + mib
            out.append(
                GpuSample(
                    time=s.time,
                    node=self.node_name,
                    gpu_index=s.index,
                    uuid=s.uuid,
                    utilization_pct=s.utilization_pct,
                    memory_used_mib=s.memory_used_mib,
                    memory_total_mib=s.memory_total_mib,
                    job_memory_mib=per_job,
                    temperature_c=s.temperature_c,
                    power_w=s.power_w,
                )
            )
        return out

    def _shim_sessions(self) -> dict[int, str]:
        """Shim pid (= session id of the job's processes) → job id, for watched runs."""
        with self._mutex:
            watches = list(self._watched.values())
        out = {}
        for w in watches:
            info = shim.read_json(w.run_dir / shim.PID) or {}
            if isinstance(info.get("shim_pid"), int):
                out[info["shim_pid"]] = w.job_id
        return out

    # ---- close -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop watching and release NVML. Running jobs keep running: the next server adopts them."""
        with self._mutex:
            self._watched.clear()
        self._nvml.close()


def _job_of_pid(pid: int, sessions: dict[int, str]) -> str | None:
    """The job a GPU process belongs to: by its session id, else by an ancestor that is a shim."""
    try:
        job = sessions.get(os.getsid(pid))
    except OSError:
        job = None
    if job is not None:
        return job
    try:
        for parent in psutil.Process(pid).parents():
            if parent.pid in sessions:
                return sessions[parent.pid]
    except psutil.Error:
        pass
    return None


def _private_dir(path: Path) -> None:
    """A folder only the server may enter (0700), created if missing."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        path.chmod(0o700)


def _passable_dir(path: Path) -> None:
    """A folder of the server's that others may pass through but not list (0711; the umask is 077)."""
    path.mkdir(mode=0o711, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != 0o711:
        path.chmod(0o711)


def _check_strings(req: LaunchRequest) -> None:
    """Refuse what no process can be started with (the API refuses it first; old rows may have it)."""
    fields: list[tuple[str, str]] = [("command", a) for a in req.command]
    fields += [("env", k) for k in req.env] + [("env", v) for v in req.env.values()]
    fields += [("cwd", req.cwd or ""), ("checkpoint_dir", req.checkpoint_dir or "")]
    for name, value in fields:
        if "\x00" in value:
            raise BackendError(f"job {req.job_id}: {name} contains a NUL byte")
    for name, path in (("cwd", req.cwd), ("checkpoint_dir", req.checkpoint_dir)):
        if path is not None and not os.path.isabs(path):
            raise BackendError(f"job {req.job_id}: {name} {path!r} must be an absolute path")
    if not req.command:
        raise BackendError(f"job {req.job_id}: empty command")


def _check_key(job_id: str, run: int) -> None:
    """Job ids name files and directories, so they must be plain names."""
    if not _JOB_ID_RE.match(job_id):
        raise InputError(
            f"job id {job_id!r} must be 1-200 of A-Z a-z 0-9 _ . - (not starting with . - _)", field="job_id"
        )
    if run < 1:
        raise InputError(f"run must be >= 1, got {run}", field="run")


def _host_cpu_milli() -> int:
    try:
        return len(os.sched_getaffinity(0)) * 1000
    except AttributeError:  # not Linux
        return (os.cpu_count() or 1) * 1000


def _host_memory_mib() -> int:
    return int(psutil.virtual_memory().total // MIB)


def _tail(path: Path, limit: int = 800) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no shim log)"
    return text[-limit:].strip() or "(empty shim log)"
