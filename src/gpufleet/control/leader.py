"""Leader election: of several replicas sharing a store, exactly one schedules.

- PostgreSQL: a session-level advisory lock held on a dedicated connection. When the leader dies
  its connection closes, PostgreSQL drops the lock, and the next replica that tries takes it
  (replicas try every second, so a new leader takes over within seconds).
- SQLite: an exclusive ``flock`` on a file next to the database (replicas share one machine).

``still_held`` is checked before every scheduling step; a leader that lost its lock stops
scheduling at once and rebuilds its state from the store if it becomes leader again.
``write_window`` fences the backend's writes (:class:`gpufleet.k8s.adapter.fence.Fenced`): how long a
write started now may take while this replica is surely the only leader.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
from pathlib import Path
from typing import Protocol

from sqlalchemy import Connection, Engine

from gpufleet.store import repo

log = logging.getLogger(__name__)

# pg_advisory_lock key: the first 8 bytes of sha1("gpufleet-scheduler"), as a signed bigint
LOCK_KEY = 0x5E7A_61C2_D2B9_04F1 - (1 << 63)


class Leadership(Protocol):
    def try_acquire(self) -> bool: ...

    def still_held(self) -> bool: ...

    def write_window(self) -> float:
        """Seconds a write started now may still take while this replica is surely the only leader
        (``<= 0``: do not write). A lease that expires by time bounds it
        (:meth:`gpufleet.k8s.adapter.lease.LeaseLeadership.write_window`); a lock that lasts as
        long as a session or a descriptor does not (``inf`` while held)."""
        ...

    def release(self) -> None: ...


class FileLeadership:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def still_held(self) -> bool:
        return self._fd is not None

    def write_window(self) -> float:
        """``inf`` while the lock is held: only this process's death (or :meth:`release`) drops a
        ``flock``, and then nothing of this process writes any more."""
        return math.inf if self._fd is not None else 0.0

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


class PgLeadership:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: Connection | None = None

    def try_acquire(self) -> bool:
        if self._conn is not None:
            return self.still_held()
        try:
            conn = self.engine.connect()
        except Exception as e:  # the store is down: not leader, try again later
            log.warning("leader election: cannot connect: %s", e)
            return False
        try:
            got = repo.try_advisory_lock(conn, LOCK_KEY)
            conn.commit()
        except Exception as e:
            log.warning("leader election failed: %s", e)
            conn.close()
            return False
        if not got:
            conn.close()
            return False
        self._conn = conn
        return True

    def still_held(self) -> bool:
        if self._conn is None:
            return False
        try:
            repo.ping_connection(self._conn)
            self._conn.commit()
            return True
        except Exception as e:
            log.error("lost the leader lock's connection: %s", e)
            self._drop()
            return False

    def write_window(self) -> float:
        """``inf`` while the lock's connection is alive (no I/O here: :meth:`still_held`, checked
        before every step, pings it). The advisory lock is the session's, not a lease that runs out
        by time: PostgreSQL hands it to another replica only once it has ended this session, so
        there is no deadline to fence against; the store's own writes go to the same server."""
        return math.inf if self._conn is not None else 0.0

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.invalidate()
                self._conn.close()
            except Exception:  # already broken
                pass
            self._conn = None

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            repo.advisory_unlock(self._conn, LOCK_KEY)
            self._conn.commit()
            self._conn.close()
        except Exception:  # the session ends anyway, which drops the lock
            self._drop()
        self._conn = None
