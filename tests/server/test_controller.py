"""The controller in-process, against a real SQLite store and the local backend (real processes):
the paths a crash or a person can take a job through, named as scenarios."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpufleet.backends.accounts import AccountPolicy
from gpufleet.backends.base import LaunchRequest
from gpufleet.backends.local import LocalBackend
from gpufleet.control.controller import Controller, ControllerConfig
from gpufleet.control.leader import FileLeadership
from gpufleet.model.job import PodPlacement
from gpufleet.store import repo
from gpufleet.store.convert import placement_to_json
from gpufleet.store.db import Database
from gpufleet.store.models import JobProgressRow, JobRow, UsageSegmentRow

SINGLE_USER = AccountPolicy(jobs_as_server=True)  # CI runs as root: jobs run as the test's own user


@dataclass
class World:
    tmp: Path
    db: Database
    backend: LocalBackend
    ctl: Controller

    def submit(self, command: list[str], **fields: Any) -> str:
        base: dict[str, Any] = {"name": "t", "command": command, "gpus": 1}
        base.update(fields)
        team = base.pop("team", "default")
        with self.db.session() as s:
            row, _ = repo.submit_job(
                s, base, team=team, submitted_by=None, idempotency_key=None, request_sha256=None, now=time.time()
            )
            return row.id

    def job(self, job_id: str) -> JobRow:
        with self.db.session() as s:
            row = repo.get_job(s, job_id)
            s.expunge(row)
            return row

    def until(self, cond: Callable[[], bool], timeout: float = 15.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.ctl.tick()
            if cond():
                return
            time.sleep(0.05)
        raise AssertionError("condition not reached")

    def state(self, job_id: str) -> str:
        return self.job(job_id).state

    def restart(self) -> None:
        """A new controller and backend on the same store and state: what a restart after SIGKILL sees."""
        self.ctl.leadership.release()
        self.backend = LocalBackend(
            self.tmp / "home", gpus="2xA100-80GB", use_nvml=False, policy=SINGLE_USER, job_root=self.tmp / "jobs"
        )
        self.ctl = make_controller(self.tmp, self.db, self.backend)


def make_controller(tmp: Path, db: Database, backend: LocalBackend) -> Controller:
    cfg = ControllerConfig(
        poll_interval_s=0.05, cycle_interval_s=0.2, grace_s=2.0, node_price_usd_per_hour=8.0, telemetry_interval_s=0.2
    )
    return Controller(db, backend, config=cfg, leadership=FileLeadership(tmp / "leader.lock"))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    db = Database(f"sqlite:///{tmp_path / 'g.db'}")
    db.upgrade()
    backend = LocalBackend(
        tmp_path / "home", gpus="2xA100-80GB", use_nvml=False, policy=SINGLE_USER, job_root=tmp_path / "jobs"
    )
    w = World(tmp_path, db, backend, make_controller(tmp_path, db, backend))
    yield w
    w.ctl.leadership.release()
    for job_id, ar in list(w.ctl.active.items()):  # leave nothing running
        w.backend.stop(job_id, ar.run, "test over", 0.0)
    db.dispose()


def test_success_meters_the_process_time(world: World) -> None:
    jid = world.submit(["sleep", "0.3"])
    world.until(lambda: world.state(jid) == "SUCCEEDED")
    row = world.job(jid)
    assert row.exit_code == 0 and row.run == 1 and row.started_at is not None
    with world.db.session() as s:
        seg = s.query(UsageSegmentRow).filter_by(job_id=jid).one()
        assert seg.gpu_share_units == 7000 and seg.node_hourly_usd == 8.0
        assert 0.3 <= seg.end - seg.start < 0.8


@pytest.mark.parametrize(
    ("command", "fields", "state", "reason"),
    [
        (["sh", "-c", "exit 3"], {}, "FAILED", "exited with code 3"),
        (["sleep", "30"], {"max_runtime_s": 0.5}, "TIMED_OUT", "max runtime"),
        (["sh", "-c", "kill -9 $$"], {}, "FAILED", "signal SIGKILL"),
    ],
    ids=["exit-code", "max-runtime", "killed"],
)
def test_unsuccessful_ends(world: World, command: list[str], fields: dict[str, Any], state: str, reason: str) -> None:
    jid = world.submit(command, **fields)
    world.until(lambda: world.state(jid) == state)
    assert reason in world.job(jid).reason


@pytest.mark.parametrize(
    ("command", "fields", "reason"),
    [
        (["sleep\x00", "1"], {}, "NUL"),
        (["sleep", "1"], {"env": {"X": "a\x00b"}}, "NUL"),
        (["sleep", "1"], {"cwd": "relative/dir"}, "absolute"),
        (["sleep", "1"], {"cwd": "/nonexistent/gpufleet-test"}, "working folder"),
        (["sleep", "1"], {"run_as": "no-such-user-gf"}, "no Unix account"),
        (["/nonexistent/program"], {}, "cannot start"),
    ],
    ids=["nul-command", "nul-env", "relative-cwd", "missing-cwd", "missing-account", "missing-program"],
)
def test_a_job_that_cannot_launch_fails_and_the_loop_goes_on(
    world: World, command: list[str], fields: dict[str, Any], reason: str
) -> None:
    """Rows an older version stored unchecked: the job ends FAILED with the reason; the next job runs."""
    run_as = fields.pop("run_as", None)
    bad = world.submit(command, **fields)
    if run_as is not None:
        with world.db.session() as s:
            repo.get_job(s, bad, for_update=True).run_as = run_as
    good = world.submit(["sleep", "0.1"])
    world.until(lambda: world.state(bad) == "FAILED" and world.state(good) == "SUCCEEDED")
    assert reason in world.job(bad).reason
    assert world.ctl.is_leader and world.ctl.snapshot.allocated_milli() == 0


def test_an_unexpected_error_in_one_launch_does_not_stop_the_loop(world: World) -> None:
    bad = world.submit(["sleep", "1"])
    launch = world.backend.launch

    def flaky(req: Any) -> Any:
        if req.job_id == bad:
            raise RuntimeError("a bug in the backend")
        return launch(req)

    world.backend.launch = flaky  # type: ignore[method-assign]
    good = world.submit(["sleep", "0.1"])
    world.until(lambda: world.state(bad) == "FAILED" and world.state(good) == "SUCCEEDED")
    assert "a bug in the backend" in world.job(bad).reason and world.ctl.is_leader


def test_cancel_a_running_job(world: World) -> None:
    jid = world.submit(["sleep", "30"])
    world.until(lambda: world.state(jid) == "RUNNING")
    with world.db.session() as s:
        repo.request_cancel(s, jid, time.time())
    world.until(lambda: world.state(jid) == "CANCELLED")
    assert world.ctl.snapshot.allocated_milli() == 0


def test_quota_from_the_store_holds(world: World) -> None:
    with world.db.session() as s:
        repo.upsert_team(s, "nlp", quotas_milli={"*": 1000}, now=time.time())
    a = world.submit(["sleep", "0.5"], team="nlp")
    b = world.submit(["sleep", "0.5"], team="nlp")
    world.until(lambda: world.state(a) == "RUNNING")
    for _ in range(5):
        world.ctl.tick()
    assert world.state(b) == "PENDING"  # a free GPU, but the team's quota is used
    world.until(lambda: world.state(b) == "SUCCEEDED")


def test_restart_adopts_a_running_job(world: World) -> None:
    jid = world.submit(["sleep", "1.0"])
    world.until(lambda: world.state(jid) == "RUNNING")
    world.restart()  # the old controller is gone without a word; its job runs on
    world.until(lambda: world.state(jid) == "SUCCEEDED")
    assert world.job(jid).run == 1 and world.job(jid).restarts == 0


def test_restart_finishes_a_job_that_ended_while_away(world: World) -> None:
    jid = world.submit(["sleep", "0.2"])
    world.until(lambda: world.state(jid) == "RUNNING")
    time.sleep(0.6)  # it ends while nobody watches
    world.restart()
    world.until(lambda: world.state(jid) == "SUCCEEDED")
    with world.db.session() as s:
        seg = s.query(UsageSegmentRow).filter_by(job_id=jid).one()
        assert 0.2 <= seg.end - seg.start < 0.5  # the process's time, not the restart's


def test_restart_requeues_an_admitted_job_never_launched(world: World) -> None:
    """The crash came between committing ADMITTED and launching: the backend has no such run."""
    jid = world.submit(["true"])
    placement = placement_to_json((PodPlacement("vm", (0,), 1000),))
    with world.db.session() as s:
        row = repo.get_job(s, jid)
        repo.transition(s, row, "ADMITTED", "placed", time.time(), run=1, placement=placement)
        repo.open_run(
            s,
            job_id=jid,
            run=1,
            node="vm",
            placement=placement,
            capacity_type="on-demand",
            node_hourly_usd=8.0,
            now=time.time(),
        )
    world.restart()
    world.until(lambda: world.state(jid) == "SUCCEEDED")
    row = world.job(jid)
    assert row.run == 2  # run 1 was recorded as never started; run 2 ran


def test_restart_requeues_a_lost_run(world: World) -> None:
    """The store says RUNNING but nothing of the run exists any more (e.g. the machine rebooted)."""
    jid = world.submit(["true"])
    placement = placement_to_json((PodPlacement("vm", (1,), 1000),))
    now = time.time()
    with world.db.session() as s:
        row = repo.get_job(s, jid)
        repo.transition(s, row, "ADMITTED", "placed", now, run=1, placement=placement)
        repo.open_run(
            s,
            job_id=jid,
            run=1,
            node="vm",
            placement=placement,
            capacity_type="on-demand",
            node_hourly_usd=8.0,
            now=now,
        )
        repo.mark_run_started(s, jid, 1, pid=999999, started_at=now)
        repo.transition(s, row, "RUNNING", "started", now, started_at=now)
    world.restart()
    world.until(lambda: world.state(jid) == "SUCCEEDED")
    row = world.job(jid)
    assert row.restarts == 1 and row.run == 2
    with world.db.session() as s:
        events = [e.reason for e in repo.job_events(s, jid)]
    assert any("gone" in r for r in events), events


def test_launch_is_never_repeated_for_a_live_run(world: World) -> None:
    """Idempotent launch underneath: the same (job, run) twice gives the same process."""
    req = LaunchRequest(job_id="j-x", run=1, command=["sleep", "5"], placement=(PodPlacement("vm", (0,), 1000),))
    h1 = world.backend.launch(req)
    h2 = world.backend.launch(req)
    assert h1.pid == h2.pid
    world.backend.stop("j-x", 1, "test over", 0.0)


def test_progress_file_becomes_progress_rows(world: World) -> None:
    """A job appends JSON lines to $GPUFLEET_PROGRESS_FILE; the controller stores each report once."""
    script = (
        'for i in 1 2 3; do echo "{\\"time\\": $(date +%s).$i, \\"step\\": $i, \\"total_steps\\": 3, '
        '\\"metrics\\": {\\"loss\\": 0.$i}}" >> "$GPUFLEET_PROGRESS_FILE"; sleep 0.3; done; sleep 0.6'
    )
    jid = world.submit(["sh", "-c", script])
    world.until(lambda: world.state(jid) == "RUNNING")
    world.until(lambda: world.state(jid) == "SUCCEEDED", timeout=20)
    with world.db.session() as s:
        rows = s.query(JobProgressRow).filter_by(job_id=jid).order_by(JobProgressRow.time).all()
        steps = [r.step for r in rows]
    assert steps == [1, 2, 3], steps
