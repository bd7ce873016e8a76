"""What ``gpufleet queue`` and ``gpufleet ls`` say is what will happen (issue 10, observations 11 and 13).

Observation 11: EST. START said "now" for jobs that can never run and for a job blocked by quota,
and one job's estimate flipped between "now", "in 2m 06s" and "unknown" across consecutive calls.
Now a job held by a quota, a budget throttle or missing capacity reads ``blocked: <reason>``, and
every other job gets an estimate anchored on the running jobs' expected ends (see
``gpufleet.scheduling.estimate``): the same from one publication to the next while nothing
changes, never "now" for a job the last cycle could not place, never "unknown" because time passed.

Observation 13: RUNTIME counted the time a job spent queued after a preemption (6m48s shown, 5m09s
run). A job's runtime is now the sum of its runs, as the server reports it (``run_seconds``).

The whole path runs: the API (SQLite store) and the controller on one simulated clock with a
simulated backend, the queue read through ``GET /v1/queue`` and drawn by the CLI's table.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import update

from gpufleet.cli.render import queue_table, runtime, until
from gpufleet.control.controller import Controller, ControllerConfig
from gpufleet.control.leader import FileLeadership
from gpufleet.cost.budgets.model import make_budget
from gpufleet.model.node import Node
from gpufleet.sim.backend import SimBackend
from gpufleet.store import repo
from gpufleet.store.models import JobRow
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.wire import JobOut, QueueEntry
from tests.support.api_support import T0, Api, make_api
from tests.support.budget_support import add_node, add_spend

BOX = Node("box", "A100-80GB", 2, 8000, 65536)  # 2 GPUs, 8 cores, 64 GiB
GRACE_S = 5.0


@dataclass
class Fleet:
    api: Api
    backend: SimBackend
    ctl: Controller

    @property
    def now(self) -> float:
        return self.api.clock.now()

    def submit(self, who: str, name: str, *, run_s: float = 3600.0, **body: Any) -> str:
        job_id: str = self.api.submit(who, name=name, **body)["id"]
        self.backend.durations[job_id] = run_s  # how long the simulated run lasts
        self.api.clock.advance(0.01)  # submit order is queue order among equals (not the ids' order)
        return job_id

    def start(self) -> None:
        """The controller becomes leader: the node registers, a first cycle runs and the queue is published."""
        self.ctl.tick()

    def step(self, dt: float = 1.0) -> None:
        self.api.clock.advance(dt)
        self.ctl.step()

    def queue(self) -> dict[str, QueueEntry]:
        r = self.api.client.get("/v1/queue", headers=self.api.h("admin"))
        assert r.status_code == 200, r.text
        return {e["name"]: QueueEntry.model_validate(e) for e in r.json()}

    def job(self, job_id: str) -> JobOut:
        r = self.api.client.get(f"/v1/jobs/{job_id}", headers=self.api.h("admin"))
        assert r.status_code == 200, r.text
        return JobOut.model_validate(r.json())

    def at(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    for api in make_api(tmp_path):
        backend = SimBackend(api.clock, [BOX])
        config = ControllerConfig(
            cycle_interval_s=2.0,
            min_cycle_gap_s=0.0,
            cycle_cost_factor=0.0,
            grace_s=GRACE_S,
            telemetry_interval_s=math.inf,
            node_price_usd_per_hour=8.0,
            budget_interval_s=1.0,
        )
        ctl = Controller(
            api.db, backend, config=config, clock=api.clock, leadership=FileLeadership(tmp_path / "leader.lock")
        )
        yield Fleet(api, backend, ctl)
        ctl.leadership.release()


def est_start(entry: QueueEntry) -> float | None:
    return None if entry.estimated_start is None else entry.estimated_start.timestamp()


def drawn_row(fleet: Fleet, name: str) -> str:
    """The line the CLI's queue table draws for ``name``."""
    console = Console(width=400, record=True, color_system=None)
    console.print(queue_table(list(fleet.queue().values())))
    return next(line for line in console.export_text().splitlines() if f" {name} " in line)


# -- observation 11: blocked jobs say what holds them ---------------------------------------------------


def quota_holds(f: Fleet) -> str:
    """beta may hold 1 GPU; its first job holds it, the second waits though a GPU is free."""
    r = f.api.client.put("/v1/teams/beta", json={"quota_gpus": {"*": 1}}, headers=f.api.h("admin"))
    assert r.status_code == 200, r.text
    f.start()
    f.submit("bob", "b-run", gpus=1, estimated_runtime_s=600.0)
    f.submit("bob", "b-wait", gpus=1, estimated_runtime_s=600.0)
    return "b-wait"


def budget_throttle_holds(f: Fleet) -> str:
    """alpha overspent its budget, which throttles it to 1 GPU at once: its second job waits."""
    db = f.api.db
    add_node(db, T0 - 86400, name="gone", gpus=2, usd=360.0)
    add_spend(db, "alpha", 2.0, T0 - 1, gpus=2, node_usd=360.0, node="gone")
    with db.session() as s:
        repo.remove_node(s, "gone", T0 - 1)
        budget = make_budget(
            id="", name="alpha", scope="team:alpha", limit_usd=1.0, action="throttle", throttle={"max_gpus": 1}
        )
        budgets_repo.create_budget(s, budget, created_by=None, now=T0 - 1)
    f.start()
    f.submit("alice", "a-run", gpus=1, estimated_runtime_s=600.0)
    f.submit("alice", "a-wait", gpus=1, estimated_runtime_s=600.0)
    return "a-wait"


def never_fits_type(f: Fleet) -> str:
    """Submitted before any node was known (nothing is judged then): no node has an H100."""
    f.submit("alice", "h100", gpus=1, gpu_types=["H100-80GB"], estimated_runtime_s=600.0)
    f.start()
    return "h100"


def never_fits_size(f: Fleet) -> str:
    """Submitted before any node was known: 4 GPUs on one node, and the only node has 2."""
    f.submit("alice", "four", gpus=4, estimated_runtime_s=600.0)
    f.start()
    return "four"


BLOCKED = [
    ("quota", quota_holds, "quota"),
    ("budget throttle", budget_throttle_holds, "budget 'alpha'"),
    ("no node has the GPU type", never_fits_type, "capacity"),
    ("more GPUs than a node has", never_fits_size, "capacity"),
]


@pytest.mark.parametrize(("setup", "held_by"), [c[1:] for c in BLOCKED], ids=[c[0] for c in BLOCKED])
def test_a_blocked_job_says_what_holds_it(fleet: Fleet, setup: Callable[[Fleet], str], held_by: str) -> None:
    name = setup(fleet)
    for _ in range(3):  # submissions picked up, a cycle, budgets evaluated, the queue published
        fleet.step()
    entry = fleet.queue()[name]
    assert entry.blocked == held_by, entry
    assert entry.estimated_start is None, entry  # was "now" with a free GPU
    assert f"blocked: {held_by}" in drawn_row(fleet, name)
    assert fleet.job(fleet.queue()[name].job_id).state == "PENDING"


# -- observation 11: a stable estimate --------------------------------------------------------------------


def test_the_estimate_is_stable_and_never_now_for_a_job_that_could_not_be_placed(fleet: Fleet) -> None:
    """``b-run`` holds one GPU and 6 of the 8 cores; ``a-cpu`` wants the other GPU and 4 cores: the
    cycle cannot place it (no room for its CPU), though a GPU is free. ``a-two`` wants both GPUs."""
    fleet.start()
    fleet.submit("bob", "b-run", gpus=1, cpu_milli=6000, estimated_runtime_s=600.0, run_s=3600.0)
    fleet.step()
    started = fleet.now
    fleet.submit("alice", "a-cpu", gpus=1, cpu_milli=4000, estimated_runtime_s=300.0)
    fleet.submit("alice", "a-two", gpus=2, estimated_runtime_s=300.0)
    fleet.step()
    assert fleet.job(fleet.queue()["a-cpu"].job_id).state == "PENDING"

    # consecutive publications, nothing changed: the same estimates (within a second), never "now"
    seen: list[dict[str, float | None]] = []
    for _ in range(4):
        fleet.step()
        q = fleet.queue()
        seen.append({n: est_start(e) for n, e in q.items()})
        assert q["a-cpu"].blocked is None and q["a-two"].blocked is None
    for a, b in itertools.pairwise(seen):
        for name in ("a-cpu", "a-two"):
            x, y = a[name], b[name]
            assert x is not None and y is not None and abs(x - y) < 1.0, seen
    # anchored on b-run's expected end (its start + 600 s), then a-cpu's (+300 s)
    assert seen[-1]["a-cpu"] == pytest.approx(started + 600.0, abs=1.0)
    assert seen[-1]["a-two"] == pytest.approx(started + 900.0, abs=1.0)
    assert until(fleet.queue()["a-cpu"].estimated_start, fleet.at()).startswith("in 9m")

    # time passes: the estimate neither moves nor turns unknown
    fleet.step(120.0)
    q = fleet.queue()
    assert est_start(q["a-cpu"]) == pytest.approx(started + 600.0, abs=1.0)

    # b-run runs past its estimate: it has not ended, so a-cpu starts "soon", not now, not unknown
    for dt in (500.0, 1.0, 30.0, 300.0):
        fleet.step(dt)
        q = fleet.queue()
        for name in ("a-cpu", "a-two"):
            start = est_start(q[name])
            assert start is not None, (name, q[name])
            assert start > fleet.now, (name, start - fleet.now)
            assert until(q[name].estimated_start, fleet.at()) not in ("now", "unknown")
        assert est_start(q["a-cpu"]) == pytest.approx(fleet.now + 60.0, abs=1.0)


# -- observation 13: the runtime is the time spent running --------------------------------------------------


def runs(fleet: Fleet, job_id: str, spans: list[tuple[float, float | None]], *, ended: float | None) -> None:
    """Give ``job_id`` runs over ``spans`` (seconds after T0; None: still running)."""
    db = fleet.api.db
    with db.session() as s:
        for i, (start, end) in enumerate(spans, start=1):
            repo.open_run(
                s, job_id=job_id, run=i, node="box", placement=[], capacity_type="on-demand",
                node_hourly_usd=8.0, now=T0 + start,
            )  # fmt: skip
            repo.mark_run_started(s, job_id, i, pid=1, started_at=T0 + start)
            if end is not None:
                repo.end_run(
                    s, job_id, i, outcome="stopped", exit_code=None, reason="preempted", started_at=None,
                    ended_at=T0 + end,
                )  # fmt: skip
        state = "SUCCEEDED" if ended is not None else "RUNNING" if spans[-1][1] is None else "PENDING"
        s.execute(
            update(JobRow)
            .where(JobRow.id == job_id)
            .values(
                state=state,
                run=len(spans),
                started_at=T0 + spans[0][0],
                ended_at=None if ended is None else T0 + ended,
                preemptions=len(spans) - 1,
            )
        )


RUNTIMES = [
    # name, runs (start, end) in seconds after T0, the job's end, now, the runtime shown
    ("preempted, queued, running again", [(0.0, 309.0), (400.0, None)], None, 500.0, 409.0),
    ("preempted and waiting", [(0.0, 309.0)], None, 408.0, 309.0),
    ("finished after a preemption", [(0.0, 300.0), (400.0, 700.0)], 700.0, 900.0, 600.0),
    ("one run, still going", [(0.0, None)], None, 120.0, 120.0),
]


@pytest.mark.parametrize(("spans", "ended", "now", "shown"), [c[1:] for c in RUNTIMES], ids=[c[0] for c in RUNTIMES])
def test_runtime_counts_only_the_time_spent_running(
    fleet: Fleet, spans: list[tuple[float, float | None]], ended: float | None, now: float, shown: float
) -> None:
    job_id = fleet.submit("alice", "j", gpus=1)
    runs(fleet, job_id, spans, ended=ended)
    fleet.api.clock.advance_to(T0 + now)
    job = fleet.job(job_id)
    assert job.run_seconds == pytest.approx(shown)
    assert runtime(job, fleet.at()) == pytest.approx(shown)  # what `gpufleet ls` and `show` print
    listed = fleet.api.client.get("/v1/jobs", headers=fleet.api.h("alice")).json()["items"]
    assert [j["run_seconds"] for j in listed] == [pytest.approx(shown)]


def test_a_job_that_never_ran_has_no_runtime(fleet: Fleet) -> None:
    job = fleet.job(fleet.submit("alice", "j", gpus=1))
    assert job.run_seconds == 0.0 and runtime(job) is None


# -- the expected end of a running job, as the estimate uses it (gpufleet.scheduling.estimate) ---------

END_RULES = [
    # name, (estimate, max runtime, checkpointed work), now − start, stopping, expected end − start
    ("on time: start + estimate", (600.0, None, 0.0), 100.0, False, 600.0),
    ("checkpointed work is not redone", (600.0, None, 200.0), 100.0, False, 400.0),
    ("the max runtime caps it", (600.0, 300.0, 0.0), 100.0, False, 300.0 + GRACE_S),
    ("the max runtime is the estimate when none is given", (None, 300.0, 0.0), 100.0, False, 300.0),
    ("overdue: soon, not now", (600.0, None, 0.0), 700.0, False, 700.0 + 60.0),
    ("being stopped: within the grace period", (600.0, None, 0.0), 100.0, True, 100.0 + GRACE_S),
    ("no estimate: unknown", (None, None, 0.0), 100.0, False, math.inf),
]


@pytest.mark.parametrize(
    ("declared", "elapsed", "stopping", "end"), [c[1:] for c in END_RULES], ids=[c[0] for c in END_RULES]
)
def test_expected_end_of_a_running_job(
    declared: tuple[float | None, float | None, float], elapsed: float, stopping: bool, end: float
) -> None:
    from gpufleet.model.job import Job, JobSpec, JobState
    from gpufleet.scheduling.estimate import expected_end

    est, max_rt, done = declared
    job = Job("j", JobSpec("j", estimated_runtime_s=est, max_runtime_s=max_rt), submit_time=0.0)
    job.state, job.start_time, job.work_done_s = JobState.RUNNING, 1000.0, done
    assert expected_end(job, 1000.0 + elapsed, grace_s=GRACE_S, stopping=stopping) - 1000.0 == end
