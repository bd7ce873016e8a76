"""Issue 10, observations 5 and 6: a job's money is its price, not a rounded cent.

5. ``report_progress(id, step=50, total_steps=100)`` then ``forecast(id)`` answered ``method='none'``
   ("no progress reports with total_steps"), and the forecast's cost rate read 5.78 then 3.23 $/h
   for a job billed at $3.673/h (one GPU of an 8-GPU $29.38/h node): a cent rounded up over a few
   seconds is not a rate.
6. ``submit --budget 0.01`` was stopped after 4.4 s "at $0.01" with $0.0045 in the ledger: the
   largest-remainder rounding gave the job the node's first cent.
"""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path

import pytest
from sqlalchemy import update

from gpufleet.clock import WallClock
from gpufleet.cost.forecast import ProgressReport, forecast_job, job_cost_rate
from gpufleet.cost.ledger import Ledger, NodeInterval, UsageSegment
from gpufleet.cost.spend import job_costs_usd
from gpufleet.model.node import CapacityType, Node
from gpufleet.services.budgets import BudgetService, job_spend
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow

NODE_USD = 29.38  # 8× A100-80GB: $3.6725 per GPU-hour
OD = CapacityType.ON_DEMAND


def _one_gpu_ledger(seconds: float) -> Ledger:
    led = Ledger()
    led.add_node(NodeInterval("box", "box", "A100-80GB", 8, 0, 0, OD, NODE_USD, 0.0, 3600.0))
    led.append(
        UsageSegment(
            "j", "t", "", "default", "", {}, "box", "box", "A100-80GB", OD, Fraction(1), 0, 0, NODE_USD, 0.0, seconds
        )
    )
    return led


@pytest.mark.parametrize("seconds", [2.0, 4.4, 7.0, 10.0, 60.0])
def test_the_cost_rate_of_a_young_job_is_its_price(seconds: float) -> None:
    spent, held = job_cost_rate(_one_gpu_ledger(seconds), "j", seconds)
    assert held == pytest.approx(seconds)
    assert spent / held * 3600 == pytest.approx(NODE_USD / 8, rel=1e-6)


def test_exact_spend_is_not_the_rounded_cent() -> None:
    led = _one_gpu_ledger(4.4)
    assert job_costs_usd(led, None, 0.0, 4.4, as_of=4.4) == {"j": 0.01}  # as billed: the node's first cent
    assert job_costs_usd(led, None, 0.0, 4.4, as_of=4.4, exact=True)["j"] == pytest.approx(NODE_USD / 8 * 4.4 / 3600)


def test_one_progress_report_is_enough_for_a_forecast() -> None:
    f = forecast_job(
        "j",
        [ProgressReport(1060.0, step=50, total_steps=100)],
        spent_usd=1.0,
        cost_rate_usd_per_hour=3.6725,
        now=1060.0,
        started_at=1000.0,
    )
    assert f.method == "progress"
    assert f.fraction_done == pytest.approx(0.5)
    assert f.remaining_s == pytest.approx(60.0)  # 50 steps in the 60 s since it started: 50 more take 60 s
    assert f.remaining_usd == pytest.approx(60 / 3600 * 3.6725)


@pytest.fixture
def store(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'g.db'}")
    db.upgrade()
    return db


def test_a_job_budget_stops_the_job_at_its_limit_not_before(store: Database) -> None:
    started = time.time() - 4.4
    with store.session() as s:
        repo.upsert_node(s, Node("box", "A100-80GB", 8, 64_000, 512 * 1024), hourly_usd=NODE_USD, now=started - 60)
        row, _ = repo.submit_job(
            s,
            {"name": "tiny", "command": ["x"], "gpus": 1},
            team="default",
            submitted_by=None,
            idempotency_key=None,
            request_sha256=None,
            now=started - 1,
        )
        job = row.id
        s.execute(update(JobRow).where(JobRow.id == job).values(budget_usd=0.01))
        repo.open_run(
            s,
            job_id=job,
            run=1,
            node="box",
            capacity_type="on-demand",
            node_hourly_usd=NODE_USD,
            now=started,
            placement=[{"node": "box", "gpus": [0], "milli": 1000, "mig_mask": 0}],
        )
        repo.mark_run_started(s, job, 1, pid=1, started_at=started)
        repo.transition(s, repo.get_job(s, job), "ADMITTED", "placed", started)
        repo.transition(s, repo.get_job(s, job), "RUNNING", "started", started, started_at=started)
    service = BudgetService(store, WallClock())
    assert service.job_overruns(started + 4.4) == []  # under a cent spent: not yet at $0.01
    with store.session() as s:
        rate = job_spend(s, repo.get_job(s, job), started + 20) / 20  # $/s the job is charged
    limit_at = started + 0.01 / rate  # the second its cost reaches $0.01
    assert limit_at - started > 9  # one GPU of this node at its GPU price: more than 9 s for a cent
    assert service.job_overruns(limit_at - 0.3) == []
    over = service.job_overruns(limit_at + 0.3)
    assert [o.job_id for o in over] == [job]
    assert over[0].spent_usd == pytest.approx(0.01, abs=0.3 * rate + 1e-9)
    assert "($0.01" in over[0].reason
