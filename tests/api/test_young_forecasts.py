"""Forecasts through HTTP on servers as they really are (issue 23, items 3 and 6): a young server's
period-end spend at the rate it has spent at, with an honest interval and its real age, never below
what is committed; and job forecasts around preemption (running time only, pending jobs priced).

Every expected figure is hand arithmetic from the node's price: n1 has 4 A100-80GB (or 8, for the
issue's $705/day server), one GPU of the $8/h node is $2/h. T0 is Thursday 2026-11-12 12:00 UTC:
18.5 days are left in the month."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model.node import CapacityType, Node
from gpufleet.store import repo, usage_repo
from tests.support.api_support import T0, Api, make_api

DAY = 86400.0
Z90 = 1.6448536269514722
MONTH_LEFT_S = 18.5 * DAY  # T0 → 2026-12-01 00:00 UTC


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url)


def _node(api: Api, *, since: float, gpus: int = 4, hourly: float = 8.0) -> None:
    with api.db.session() as s:
        node = Node("n1", gpu_model="A100-80GB", gpu_count=gpus, capacity_type=CapacityType.ON_DEMAND)
        repo.upsert_node(s, node, hourly_usd=hourly, now=since)


def _run(api: Api, job_id: str, run: int, start: float, end: float | None = None) -> None:
    """Run ``run`` of a job on GPU 0 of n1 from ``start``; ended at ``end`` by a preemption (the job
    requeued), or still running."""
    placement = [{"node": "n1", "gpus": [0], "milli": 1000}]
    with api.db.session() as s:
        repo.transition(s, repo.get_job(s, job_id), "ADMITTED", "placed", start, run=run, placement=placement)
        repo.open_run(
            s,
            job_id=job_id,
            run=run,
            node="n1",
            placement=placement,
            capacity_type="on-demand",
            node_hourly_usd=8.0,
            now=start,
        )
        repo.mark_run_started(s, job_id, run, pid=1, started_at=start)
        repo.transition(s, repo.get_job(s, job_id), "RUNNING", "started", start, started_at=start)
        if end is not None:
            repo.end_run(
                s, job_id, run, outcome="preempted", exit_code=None, reason="preempted", started_at=None, ended_at=end
            )
            repo.transition(s, repo.get_job(s, job_id), "PREEMPTED", "preempted", end)
            repo.transition(s, repo.get_job(s, job_id), "PENDING", "requeued", end)


def _progress(api: Api, job_id: str, *reports: tuple[float, float, float]) -> None:
    with api.db.session() as s:
        for t, step, total in reports:
            usage_repo.add_progress(s, job_id, t, step=step, total_steps=total, metrics={})


# -- item 6: a job's forecast around preemption ----------------------------------------------------


def _resumed(api: Api, job_id: str) -> None:
    """0.95 steps/s while running: run 1 T0-1000..T0-800 (190 steps), a 700 s wait, run 2 resumed
    from its checkpoint at T0-100 and at step 285 of 600 now."""
    _run(api, job_id, 1, T0 - 1000, T0 - 800)
    _run(api, job_id, 2, T0 - 100)
    _progress(api, job_id, (T0 - 900, 95, 600), (T0 - 800, 190, 600), (T0, 285, 600))


def _preempted_with_progress(api: Api, job_id: str) -> None:
    """Run 1 did 190 of 300 steps at 0.95 steps/s and was preempted 800 s ago; pending since."""
    _run(api, job_id, 1, T0 - 1000, T0 - 800)
    _progress(api, job_id, (T0 - 900, 95, 300), (T0 - 800, 190, 300))


@dataclass(frozen=True)
class JobCase:
    submit: dict[str, Any]
    setup: Callable[[Api, str], None]
    method: str
    remaining_s: float


JOB_CASES = {
    # measured since the first start (wall time): 190 steps / 900 s → 1492 s; running time: 332 s
    "resumed-after-preemption": JobCase({}, _resumed, "progress", 315 / 0.95),
    # `--estimate 5m`, never started: was "no runtime estimate"
    "pending-with-estimate": JobCase({"estimated_runtime_s": 300.0}, lambda api, j: None, "estimate", 300.0),
    # "110 of 300 steps left" at $0.00: the 800 s wait was taken as progress
    "pending-with-progress": JobCase({}, _preempted_with_progress, "progress", 110 / 0.95),
}


@pytest.mark.parametrize("case", JOB_CASES.values(), ids=JOB_CASES.keys())
def test_job_forecast_counts_running_time_and_prices_pending_jobs(api: Api, case: JobCase) -> None:
    _node(api, since=T0 - 10 * 3600)
    job_id = api.submit("bob", gpus=1, **case.submit)["id"]
    case.setup(api, job_id)
    f = api.client.get(f"/v1/jobs/{job_id}/forecast", headers=api.h("bob")).json()
    assert f["method"] == case.method, f["explanation"]
    assert f["remaining_s"] == pytest.approx(case.remaining_s, rel=1e-3), f["explanation"]
    # running or not, its GPU costs $2/h (a running one as the ledger charges it; a pending one at
    # the price of the GPU it will likely run on)
    assert f["cost_rate_usd_per_hour"] == pytest.approx(2.0, rel=1e-3)
    assert f["remaining_usd"] == pytest.approx(case.remaining_s / 3600 * 2.0, rel=1e-3)


# -- item 3: a scope's period-end spend ------------------------------------------------------------


@dataclass(frozen=True)
class SpendCase:
    node_since: float
    gpus: int
    hourly: float
    job_since: float | None  # bob's 1-GPU job (estimate 100 h) running since
    who: str
    method: str
    history_days: float
    rate_per_day: float
    spent: float
    total: float  # hand arithmetic: spent + rest, or spent + committed where that is more
    rel_half_width: float  # (high - total) / rest


SPEND_CASES = {
    # the server: 24 minutes old, $705/day; was forecast = spent ± 0, "$0.00/day",
    # "56 days of history"
    "young-server-24-minutes": SpendCase(
        T0 - 1440,
        8,
        29.384,
        None,
        "admin",
        "rate",
        1 / 60,
        29.384 * 24,
        29.384 * 0.4,
        29.384 * 0.4 + 29.384 * MONTH_LEFT_S / 3600,
        Z90 * 1.0,
    ),
    # ten days old: the 46 days before it existed are not days of $0 (they made the model's
    # median $0/day: forecast = spent)
    "ten-day-server": SpendCase(
        T0 - 10.5 * DAY,
        4,
        8.0,
        None,
        "admin",
        "trend",
        10.5,
        192.0,
        192.0 * 10.5,
        192.0 * (10.5 + 18.5),
        Z90 / (10.5 * 24) ** 0.5,
    ),
    # team beta's first job, an hour into an estimated 100: its history says $0/day, but $2 spent
    # + 99 h × $2/h is committed (was: forecast $2, below committed)
    "team-below-committed": SpendCase(
        T0 - 10.5 * DAY,
        4,
        8.0,
        T0 - 3600,
        "bob",
        "trend",
        10.5,
        0.0,
        2.0,
        2.0 + 99 * 2.0,
        0.0,
    ),
}


@pytest.mark.parametrize("case", SPEND_CASES.values(), ids=SPEND_CASES.keys())
def test_spend_forecast_on_a_server_as_old_as_its_ledger(api: Api, case: SpendCase) -> None:
    _node(api, since=case.node_since, gpus=case.gpus, hourly=case.hourly)
    if case.job_since is not None:
        job_id = api.submit("bob", gpus=1, estimated_runtime_s=100 * 3600.0)["id"]
        _run(api, job_id, 1, case.job_since)
    r = api.client.get("/v1/forecast?period=month", headers=api.h(case.who))
    assert r.status_code == 200, r.text
    f = r.json()
    assert f["total_usd"] == pytest.approx(case.total, rel=1e-3)
    assert f["spent_usd"] == pytest.approx(case.spent, rel=1e-3)
    assert f["method"] == case.method
    assert f["rate_usd_per_day"] == pytest.approx(case.rate_per_day, rel=1e-3)
    assert f["history_days"] == pytest.approx(case.history_days, rel=1e-3)
    assert f["floor_usd"] <= f["low_usd"] <= f["total_usd"] <= f["high_usd"]
    rest = case.rate_per_day / DAY * MONTH_LEFT_S
    assert f["high_usd"] - f["total_usd"] == pytest.approx(case.rel_half_width * rest, rel=1e-3, abs=1e-6)
