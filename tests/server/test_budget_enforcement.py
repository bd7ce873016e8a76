"""Budgets enforced by the controller in-process (real SQLite store, local backend, real processes):
throttles change what the scheduling cycle starts, and a job's own budget stops it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from gpufleet.backends.accounts import AccountPolicy
from gpufleet.backends.local import LocalBackend
from gpufleet.control.controller import Controller, ControllerConfig
from gpufleet.control.leader import FileLeadership
from gpufleet.cost.budgets.model import make_budget
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.budget_support import add_node, add_spend

NODE_USD = 360.0  # $180 per GPU-hour on the 2-GPU node: 5 cents a GPU-second, so limits are reached fast

SINGLE_USER = AccountPolicy(jobs_as_server=True)  # CI runs as root: jobs run as the test's own user


@dataclass
class World:
    tmp: Path
    db: Database
    backend: LocalBackend
    ctl: Controller

    def submit(self, command: list[str], team: str = "default", **fields: Any) -> str:
        base: dict[str, Any] = {"name": "t", "command": command, "gpus": 1, **fields}
        with self.db.session() as s:
            row, _ = repo.submit_job(
                s, base, team=team, submitted_by=None, idempotency_key=None, request_sha256=None, now=time.time()
            )
            return row.id

    def state(self, job_id: str) -> str:
        with self.db.session() as s:
            return repo.get_job(s, job_id).state

    def reason(self, job_id: str) -> str:
        with self.db.session() as s:
            return repo.get_job(s, job_id).reason

    def until(self, cond: Callable[[], bool], timeout: float = 15.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.ctl.tick()
            if cond():
                return
            time.sleep(0.05)
        raise AssertionError("condition not reached")

    def ticks(self, n: int = 5) -> None:
        for _ in range(n):
            self.ctl.tick()
            time.sleep(0.05)

    def budget(self, **kw: Any) -> None:
        b = make_budget(id="", name=kw.pop("name", "alpha"), scope=kw.pop("scope", "team:alpha"), **kw)
        with self.db.session() as s:
            budgets_repo.create_budget(s, b, created_by=None, now=time.time())
        self.ctl.budgets._last = float("-inf")  # evaluate at the next step

    def overspend(self, team: str = "alpha", usd: float = 2.0) -> None:
        """Spend of ``team`` on a node that went away (the box's own node is younger than the spend)."""
        now = time.time()
        add_node(self.db, now - 86400, name="gone", gpus=2, usd=NODE_USD)
        add_spend(self.db, team, usd, now - 1, gpus=2, node_usd=NODE_USD, node="gone")
        with self.db.session() as s:
            repo.remove_node(s, "gone", now)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    db = Database(f"sqlite:///{tmp_path / 'g.db'}")
    db.upgrade()
    backend = LocalBackend(
        tmp_path / "home", gpus="2xA100-80GB", use_nvml=False, policy=SINGLE_USER, job_root=tmp_path / "jobs"
    )
    cfg = ControllerConfig(
        poll_interval_s=0.05, cycle_interval_s=0.2, grace_s=2.0, node_price_usd_per_hour=NODE_USD, budget_interval_s=0.2
    )
    ctl = Controller(db, backend, config=cfg, leadership=FileLeadership(tmp_path / "leader.lock"))
    w = World(tmp_path, db, backend, ctl)
    ctl.tick()  # recover: the node exists in the store
    yield w
    ctl.leadership.release()
    for job_id, ar in list(ctl.active.items()):
        backend.stop(job_id, ar.run, "test over", 0.0)
    db.dispose()


def test_throttled_priority_lets_another_team_start_first(world: World) -> None:
    blocker = world.submit(["sleep", "30"], team="gamma", gpus=2)
    world.until(lambda: world.state(blocker) == "RUNNING")
    world.budget(limit_usd=1.0, action="throttle", throttle={"priority": "low"})
    world.overspend()
    alpha = world.submit(["sleep", "30"], team="alpha", gpus=2)  # first in line
    time.sleep(0.01)
    beta = world.submit(["sleep", "30"], team="beta", gpus=2)
    world.ticks()
    assert [r.scope for r in world.ctl.budgets.throttles] and world.ctl.pending[alpha].priority == 50
    with world.db.session() as s:
        repo.request_cancel(s, blocker, time.time())
    world.until(lambda: world.state(beta) == "RUNNING")
    assert world.state(alpha) == "PENDING"


def test_gpu_cap_holds_and_lifts_when_the_budget_goes(world: World) -> None:
    world.budget(limit_usd=1.0, action="throttle", throttle={"max_gpus": 1})
    world.overspend()
    a1 = world.submit(["sleep", "30"], team="alpha")
    a2 = world.submit(["sleep", "30"], team="alpha")
    world.until(lambda: "RUNNING" in (world.state(a1), world.state(a2)))
    world.ticks(8)
    assert sorted((world.state(a1), world.state(a2))) == ["PENDING", "RUNNING"]
    waiting = a2 if world.state(a2) == "PENDING" else a1
    assert "1 GPUs at once" in world.ctl._waiting[waiting]
    with world.db.session() as s:
        budgets_repo.delete_budget(s, "alpha")
    world.until(lambda: world.state(waiting) == "RUNNING")


def test_spot_only_holds_work_that_may_not_run_on_spot(world: World) -> None:
    world.budget(limit_usd=1.0, action="throttle", throttle={"spot_only": True})
    world.overspend()
    world.ticks(2)
    plain = world.submit(["sleep", "30"], team="alpha")
    pre = world.submit(["sleep", "30"], team="alpha", preemptible=True)
    other = world.submit(["sleep", "30"], team="beta")
    world.until(lambda: world.state(other) == "RUNNING")
    world.ticks(5)
    assert world.state(plain) == world.state(pre) == "PENDING"  # this box has no spot capacity
    assert "not preemptible" in world.ctl._waiting[plain]


def test_grace_delays_the_throttle(world: World) -> None:
    world.budget(limit_usd=1.0, action="throttle", throttle={"max_gpus": 0}, grace_s=3600)
    world.overspend()
    job = world.submit(["sleep", "30"], team="alpha")
    world.until(lambda: world.state(job) == "RUNNING")


def test_a_job_is_stopped_at_its_own_budget_after_a_checkpoint_signal(world: World) -> None:
    marker = world.tmp / "checkpointed"
    script = f"trap 'echo saved > {marker}; exit 0' TERM; sleep 30 & wait"
    job = world.submit(["sh", "-c", script], team="alpha")
    with world.db.session() as s:
        s.execute(update(JobRow).where(JobRow.id == job).values(budget_usd=0.1))  # 2 GPU-seconds
    world.until(lambda: world.state(job) == "RUNNING")
    world.until(lambda: world.state(job) == "CANCELLED", timeout=20)
    assert world.reason(job).startswith("job budget of $0.10 reached")
    assert marker.read_text().strip() == "saved"
    assert world.ctl.snapshot.allocated_milli() == 0
