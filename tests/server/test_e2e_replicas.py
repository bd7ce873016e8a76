"""Several ``gpufleet up`` replicas on one PostgreSQL: exactly one schedules (advisory-lock leader
election); when the leader dies (SIGKILL) another takes over within seconds, adopts the running
job and keeps scheduling. Both replicas serve the API throughout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select

from gpufleet.store.db import Database
from gpufleet.store.models import ControllerRow
from tests.support.serverproc import ServerProcess

pytestmark = pytest.mark.slow


def leaders(db: Database, fresh_s: float = 3.0) -> list[str]:
    with db.session(readonly=True) as s:
        now = time.time()
        return [r.replica for r in s.scalars(select(ControllerRow)) if r.is_leader and now - r.heartbeat_at < fresh_s]


def test_one_leader_and_failover(tmp_path: Path, pg_url: str) -> None:
    home = tmp_path / "home"  # one machine: the replicas share the backend's run directory
    a = ServerProcess(home, gpus="2xA100-80GB", db=pg_url, replica="a").start()
    b = ServerProcess(home, gpus="2xA100-80GB", db=pg_url, replica="b").start()
    db = Database(pg_url)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(leaders(db)) != 1:
            time.sleep(0.2)
        assert leaders(db) == ["a"]  # the first replica won; b only serves the API
        with b.client() as c:  # submitted through the follower, scheduled by the leader
            long = c.submit(command=["sleep", "4"], gpus=1, name="long")
            deadline = time.monotonic() + 10
            while c.get(long.id).state != "RUNNING":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            a.kill()
            t_kill = time.monotonic()
            while leaders(db) != ["b"]:
                assert time.monotonic() - t_kill < 10, leaders(db)
                time.sleep(0.1)
            takeover_s = time.monotonic() - t_kill
            after = c.submit(command=["true"], gpus=1, name="after")
            assert c.wait(after.id, timeout=20).state == "SUCCEEDED"
            done = c.wait(long.id, timeout=20)
        assert done.state == "SUCCEEDED" and done.run == 1 and done.restarts == 0  # adopted, not rerun
        assert takeover_s < 10
        assert len(list((home / "runs" / long.id).iterdir())) == 1  # one run directory: it ran once
    finally:
        db.dispose()
        a.kill()
        b.stop()
        b.kill_jobs()
