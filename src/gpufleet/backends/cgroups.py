"""Per-job cgroups (v2): memory and CPU limits the kernel enforces, as Slurm's task/cgroup does.

Layout: ``<root>/gpufleet/<job_id>.<run>/`` under the unified hierarchy, with ``memory.max`` (the
job's memory request; swap off where ``memory.swap.max`` exists) and ``cpu.max`` (the job's CPU
request as a quota per 100 ms period). The shim moves the job's process into its cgroup before
``exec`` (still as root), and when the job ends kills whatever is left in it (``cgroup.kill``) and
removes it.

Detection is honest: cgroup v2 must be mounted at ``root`` with the ``memory`` and ``cpu``
controllers available and the folder writable; otherwise :func:`detect` says why, and the backend
reports the missing capability once, at start. GPU device access is *not* filtered by the kernel
here: that needs the cgroup v2 BPF device controller (a BPF program per cgroup), which gpufleet does
not load; GPU isolation is by ``CUDA_VISIBLE_DEVICES`` only.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/sys/fs/cgroup")
PARENT = "gpufleet"
CPU_PERIOD_US = 100_000
NEEDED = ("memory", "cpu")


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    parent: Path | None  # <root>/gpufleet when usable
    reason: str  # why not, when parent is None

    @property
    def available(self) -> bool:
        return self.parent is not None


def detect(root: Path = DEFAULT_ROOT) -> CgroupSupport:
    """Whether per-job cgroups can be made under ``root``; creates ``<root>/gpufleet`` if so."""
    controllers_file = root / "cgroup.controllers"
    try:
        available = controllers_file.read_text().split()
    except OSError:
        return CgroupSupport(None, f"no cgroup v2 hierarchy at {root} (cgroup v1 or hybrid mount)")
    missing = [c for c in NEEDED if c not in available]
    if missing:
        return CgroupSupport(None, f"the cgroup v2 controllers {', '.join(missing)} are not available at {root}")
    if not os.access(root, os.W_OK):
        return CgroupSupport(None, f"{root} is not writable by this server (run it as root, or delegate a cgroup)")
    parent = root / PARENT
    try:
        _enable(root)
        parent.mkdir(exist_ok=True)
        _enable(parent)
    except OSError as e:
        return CgroupSupport(None, f"cannot set up {parent}: {e.strerror or e}")
    return CgroupSupport(parent, "")


def _enable(cgroup: Path) -> None:
    """Let ``cgroup``'s children limit memory and CPU."""
    current = (cgroup / "cgroup.subtree_control").read_text().split()
    wanted = " ".join(f"+{c}" for c in NEEDED if c not in current)
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


def create(parent: Path, name: str, cpu_milli: int, memory_mib: int) -> Path:
    """The job's cgroup ``<parent>/<name>`` with its limits written (an existing one is reused)."""
    path = parent / name
    path.mkdir(exist_ok=True)
    for file, value in limits(cpu_milli, memory_mib).items():
        target = path / file
        if file == "memory.swap.max" and not target.exists():
            continue  # swap accounting off in this kernel
        target.write_text(value)
    return path


def remove(path: Path) -> None:
    """Kill what is left in the cgroup and remove it (a no-op if it is gone)."""
    kill = path / "cgroup.kill"
    with contextlib.suppress(OSError):
        if kill.exists():
            kill.write_text("1")
    for _ in range(100):  # the killed processes leave within milliseconds
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
