"""Per-run cgroups (v2): containment, and memory, CPU and process limits the kernel enforces, as
Slurm's task/cgroup does.

Layout: ``<root>/gpufleet/<run id>/`` under the unified hierarchy (the run id is
``<job_id>.<run>.<nonce>``, unique even across servers sharing a host), with ``memory.max`` (the
job's memory request; swap off where ``memory.swap.max`` exists), ``cpu.max`` (the job's CPU request
as a quota per 100 ms period) and ``pids.max`` (the backend's ``max_job_pids``). The shim moves the
job's process into its cgroup before ``exec`` (still as root), and when the run ends kills whatever
is left in it (``cgroup.kill``, or SIGKILL to each of ``cgroup.procs`` on kernels before 5.14,
repeated until it is empty) and removes it: a process that left the job's session, process group
and environment (a ``setsid`` daemon) is still in its cgroup.

Detection is honest: a cgroup v2 hierarchy must be mounted at ``root`` (or, on a hybrid v1/v2 host,
at ``root/unified``) and writable; otherwise :func:`detect` says why and runs get no cgroup. Each
limit is enforced only where its controller (``memory``, ``cpu``, ``pids``) can be enabled there: a
hybrid host's v2 part usually has none, so its cgroups contain and kill, but limit nothing (the
backend reports the missing capability once, at start, and falls back to ``RLIMIT_NPROC`` for the
process limit). GPU device access is *not* filtered by the kernel here: that needs the cgroup v2
BPF device controller (a BPF program per cgroup), which gpufleet does not load; GPU isolation is by
``CUDA_VISIBLE_DEVICES`` only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_ROOT = Path("/sys/fs/cgroup")
HYBRID_SUBDIR = "unified"  # where systemd mounts the v2 hierarchy on a hybrid (v1 + v2) host
PARENT = "gpufleet"
CPU_PERIOD_US = 100_000
NEEDED = ("memory", "cpu")  # for resource limits
WANTED = ("memory", "cpu", "pids")
KILL_TIMEOUT_S = 5.0
LEFTOVER_AGE_S = 600.0  # an empty run cgroup this old is a leftover (a run's is filled within ms)


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    parent: Path | None  # <root>/gpufleet when runs get cgroups
    reason: str  # why not, when parent is None
    controllers: frozenset[str] = field(default_factory=frozenset)  # enabled for the runs' cgroups
    limits_reason: str = ""  # why CPU and memory are not limited, when they are not

    @property
    def available(self) -> bool:
        """Runs get a cgroup (containment: all their processes are found and killed at the end)."""
        return self.parent is not None

    @property
    def enforces_limits(self) -> bool:
        """The CPU and memory requests are enforced."""
        return self.parent is not None and all(c in self.controllers for c in NEEDED)

    @property
    def limits_pids(self) -> bool:
        return self.parent is not None and "pids" in self.controllers


def _v2_root(root: Path) -> Path | None:
    for candidate in (root, root / HYBRID_SUBDIR):
        if (candidate / "cgroup.controllers").is_file():
            return candidate
    return None


def detect(root: Path = DEFAULT_ROOT) -> CgroupSupport:
    """Whether per-run cgroups can be made under ``root``; creates ``<root>/gpufleet`` if so."""
    v2 = _v2_root(root)
    if v2 is None:
        return CgroupSupport(None, f"no cgroup v2 hierarchy at {root} (nor at {root / HYBRID_SUBDIR})")
    if not os.access(v2, os.W_OK):
        return CgroupSupport(None, f"{v2} is not writable by this server (run it as root, or delegate a cgroup)")
    parent = v2 / PARENT
    try:
        available = (v2 / "cgroup.controllers").read_text().split()
        parent.mkdir(exist_ok=True)
    except OSError as e:
        return CgroupSupport(None, f"cannot set up {parent}: {e.strerror or e}")
    problems = []
    for cgroup in (v2, parent):
        try:
            _enable(cgroup, [c for c in WANTED if c in available])
        except OSError as e:
            problems.append(f"cannot enable controllers in {cgroup}: {e.strerror or e}")
    _remove_leftovers(parent)
    try:
        enabled = frozenset((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        enabled = frozenset()
    missing = [c for c in NEEDED if c not in enabled]
    limits_reason = ""
    if missing:
        why = "; ".join(problems) or f"not available at {v2} (a hybrid host keeps them in cgroup v1)"
        limits_reason = f"the cgroup v2 controllers {', '.join(missing)} are not usable: {why}"
    return CgroupSupport(parent, "", frozenset(c for c in WANTED if c in enabled), limits_reason)


def _remove_leftovers(parent: Path, older_than_s: float = LEFTOVER_AGE_S) -> None:
    """Remove empty run cgroups left by shims that were SIGKILLed and whose runs no server
    recovered (a recovered run's cgroup is removed by ``kill_stale``). The kernel refuses to remove
    a cgroup that still holds a process; the age keeps a cgroup a shim has just made, and not yet
    filled, from being taken away."""
    now = time.time()
    with contextlib.suppress(OSError):
        for child in parent.iterdir():
            with contextlib.suppress(OSError):
                if child.is_dir() and now - child.stat().st_mtime > older_than_s and not procs(child):
                    child.rmdir()


def _enable(cgroup: Path, controllers: list[str]) -> None:
    """Let ``cgroup``'s children use ``controllers``."""
    current = (cgroup / "cgroup.subtree_control").read_text().split()
    wanted = " ".join(f"+{c}" for c in controllers if c not in current)
    if wanted:
        (cgroup / "cgroup.subtree_control").write_text(wanted)


def limits(cpu_milli: int, memory_mib: int) -> dict[str, str]:
    """The files and values that enforce a request (0 = unlimited for that resource)."""
    out = {
        "memory.max": str(memory_mib * 1024 * 1024) if memory_mib > 0 else "max",
        "cpu.max": f"{max(1000, cpu_milli * CPU_PERIOD_US // 1000)} {CPU_PERIOD_US}" if cpu_milli > 0 else "max",
    }
    if memory_mib > 0:
        out["memory.swap.max"] = "0"
    return out


def create(parent: Path, name: str, cpu_milli: int, memory_mib: int, max_pids: int | None = None) -> Path:
    """The run's cgroup ``<parent>/<name>`` with its limits written (an existing one is reused).

    A limit whose controller is not enabled here (its file is absent) is skipped: :func:`detect`
    reported that once. ``max_pids`` goes to ``pids.max`` where the pids controller is enabled
    (see :func:`limits_pids`)."""
    path = parent / name
    path.mkdir(exist_ok=True)
    values = limits(cpu_milli, memory_mib)
    if max_pids is not None and max_pids > 0:
        values["pids.max"] = str(max_pids)
    for file, value in values.items():
        target = path / file
        if not target.exists():
            continue  # controller not enabled here, or swap accounting off in this kernel
        target.write_text(value)
    return path


def limits_pids(path: Path) -> bool:
    """True if ``pids.max`` of this cgroup is set (not ``max``)."""
    try:
        return (path / "pids.max").read_text().strip() != "max"
    except OSError:
        return False


def procs(path: Path) -> list[int]:
    """The pids in the cgroup (and in any child cgroup a process of it made; [] if it is gone)."""
    out: list[int] = []
    for dirpath, _dirs, _files in os.walk(path):
        with contextlib.suppress(OSError, ValueError):
            out += [int(p) for p in (Path(dirpath) / "cgroup.procs").read_text().split()]
    return out


def kill(path: Path) -> None:
    """SIGKILL every process in the cgroup (and its children), once."""
    kill_file = path / "cgroup.kill"
    if kill_file.exists():
        with contextlib.suppress(OSError):
            kill_file.write_text("1")
            return
    for pid in procs(path):  # kernels before 5.14 have no cgroup.kill
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def remove(path: Path, timeout: float = KILL_TIMEOUT_S) -> bool:
    """Kill what is left in the cgroup, until nothing is, and remove it; False if it could not be
    removed within ``timeout`` (True if it is gone, or was)."""
    deadline = time.monotonic() + timeout
    while True:
        kill(path)
        for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                child.rmdir()  # cgroups made inside the run's own (delegated), deepest first
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
