"""Throwaway Unix accounts and job folders for the tests that run jobs as real accounts (root only).

``useradd``/``userdel`` make and remove a system account with no home and no shell; removing one
first kills its processes (by uid, from ``/proc``: ``pkill -u`` misses processes that are starting)
and retries while ``userdel`` finds one still running. ``job_root`` is a folder outside root's 0700
pytest folders that job accounts may pass through (0711).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

IS_ROOT = os.geteuid() == 0


def uid_pids(uid: int) -> list[int]:
    """The processes of account ``uid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    out.append(int(entry))
    return out


def useradd(name: str) -> None:
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )


def userdel(name: str) -> None:
    """Remove account ``name`` after killing its processes (retried: a process may be starting)."""
    try:
        import pwd

        uid: int | None = pwd.getpwnam(name).pw_uid
    except KeyError:
        uid = None
    for _ in range(50):
        if uid is not None:
            for pid in uid_pids(uid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if subprocess.run(["userdel", name], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)


@contextlib.contextmanager
def job_root() -> Iterator[Path]:
    """Where jobs' folders live: outside root's 0700 folders, passable by the job accounts."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-jobs-", dir="/tmp"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
