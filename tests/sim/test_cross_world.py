"""One loop, two worlds: the simulator and the server's controller decide the same things.

A workload of 64 jobs — four teams sharing a cohort with quotas and borrowing, three priority
classes, preemptible jobs that checkpoint, a ``block`` budget, a ``throttle`` budget and spot nodes
that are taken back — is run

(a) by the simulator (:class:`Simulation`: the world loop with the in-memory store), and
(b) by the server's :class:`Controller` — its SQL store (SQLite and a real PostgreSQL), its budget
    service and the API's submit-time block check — with the simulated cluster as its backend, on
    the same simulated clock and through the same driver.

Both must make the same decisions in the same order (starts with their placements, preemptions,
requeues, refusals, ends) and charge every job the same cost to the cent.

(d) The same workload with jobs that carry their own budget (``budget_usd``; some are spent before the
job is done, some are not): both worlds stop the same jobs at the same moment, with the same typed
stop reason, and charge them the same to the cent — the loop's rule
(:func:`gpufleet.loop.budgets.overrun`) on each world's ledger.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.backends.base import EventKind
from gpufleet.clock import SimClock
from gpufleet.control.controller import Controller, ControllerConfig
from gpufleet.control.leader import FileLeadership
from gpufleet.cost.budgets.model import Budget, make_budget
from gpufleet.cost.budgets.status import BudgetExceededError
from gpufleet.cost.spend import job_costs_usd
from gpufleet.loop.world import WorldLoop
from gpufleet.model.job import GpuRequest, Job, JobSpec, StopKind, StopReason
from gpufleet.model.node import CapacityType, Node
from gpufleet.model.submission import Submission, submission
from gpufleet.scheduling.profile import Profile, load_profile
from gpufleet.server.host import seed_teams
from gpufleet.services.budgets import BudgetService, check_submission
from gpufleet.sim.backend import SimBackend, SimBackendOptions
from gpufleet.sim.engine import SimOptions, Simulation, drive, job_id
from gpufleet.sim.traces.base import Trace, TraceJob
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobEventRow
from gpufleet.store.repo import budgets as budgets_repo

PROFILE = {
    "teams": {
        "alpha": {
            "weight": 1,
            "quota": {"A100-80GB": 6},
            "cohort": "lab",
            "borrowing_limit": 4,
            "priority_classes": ["low", "normal", "high"],
        },
        "beta": {"weight": 1, "quota": {"A100-80GB": 6}, "cohort": "lab", "borrowing_limit": 4},
        "gamma": {"weight": 1, "quota": {"A100-80GB": 4}, "cohort": "lab", "borrowing_limit": 2},
        "delta": {
            "weight": 2,
            "quota": {"A100-80GB": 4},
            "cohort": "lab",
            "borrowing_limit": 2,
            "priority_classes": ["low", "normal", "high"],
        },
    }
}
OPTIONS = SimOptions(seed=7, spot_hazard_per_node_hour=0.4, max_retries=2, budget_interval_s=60.0)
TEAMS = ("alpha", "beta", "gamma", "delta")
CLASSES = ("low", "normal", "high")


def nodes() -> list[Node]:
    od = [Node(f"od-{i}", "A100-80GB", 4, 64000, 512000, hourly_price_usd=16.0) for i in range(3)]
    spot = [
        Node(f"sp-{i}", "A100-80GB", 4, 64000, 512000, capacity_type=CapacityType.SPOT, hourly_price_usd=6.0)
        for i in range(2)
    ]
    return od + spot


def budgets() -> list[Budget]:
    return [
        make_budget(id="b-block", name="delta-cap", scope="team:delta", limit_usd=60.0, action="block"),
        make_budget(
            id="b-throttle",
            name="gamma-cap",
            scope="team:gamma",
            limit_usd=40.0,
            action="throttle",
            throttle={"max_gpus": 2, "priority": "low"},
        ),
    ]


def workload() -> Trace:
    jobs = []
    for i in range(64):
        team = TEAMS[i % 4]
        klass = CLASSES[(i * 7) % 3]
        gpus = (1, 2, 4, 1, 2)[i % 5]
        duration = 900.0 + 450.0 * ((i * 11) % 13)
        spec = JobSpec(
            name=f"w{i:02d}",
            team=team,
            priority_class=klass,
            gpu=GpuRequest(gpus),
            gpu_types=frozenset({"A100-80GB"}),
            cpu_milli=4000 * gpus,
            memory_mib=32768 * gpus,
            preemptible=klass != "high",
            checkpoint_interval_s=600.0 if i % 3 else None,
            estimated_runtime_s=duration,
            duration_s=duration,
        )
        jobs.append(TraceJob(97.0 * i + 3.0, spec))
    return Trace("cross-world", jobs)


def budgeted_workload() -> Trace:
    """The workload with jobs of their own budget: every 5th from the 3rd (2 GPUs) gets a quarter of
    what it would cost on on-demand nodes — spent before it is done, wherever it runs — and every
    5th from the 1st (1 GPU) twice that cost."""
    jobs = []
    for i, tj in enumerate(workload().jobs):
        spec = tj.spec
        on_demand = spec.gpu.count * 4.0 * (spec.duration_s or 0.0) / 3600.0  # $16/h for 4 GPUs
        if i % 5 == 2:
            spec = replace(spec, budget_usd=round(0.25 * on_demand, 2) + 0.003)
        elif i % 5 == 0:
            spec = replace(spec, budget_usd=round(2.0 * on_demand, 2) + 0.003)
        jobs.append(TraceJob(tj.submit_time, spec))
    return Trace("cross-world-budgets", jobs)


def submission_of(spec: JobSpec) -> Submission:
    """The job as an API submit of it (the one builder)."""
    return submission(
        spec.name,
        ["train"],
        priority_class=spec.priority_class,
        gpu=spec.gpu,
        gpu_types=sorted(spec.gpu_types),
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        preemptible=spec.preemptible,
        checkpoint_interval_s=spec.checkpoint_interval_s,
        estimated_runtime_s=spec.estimated_runtime_s,
        budget_usd=spec.budget_usd,
    )


def insert(s: Session, fields: dict[str, Any], team: str, now: float, jid: str) -> None:
    """Store a submission with the simulator's job id (the store's insert, as the API's)."""
    repo.submit_job(
        s, fields, team=team, submitted_by=None, idempotency_key=None, request_sha256=None, now=now, job_id=jid
    )


@dataclass
class Outcome:
    decisions: list[tuple[Any, ...]]  # in order
    costs: dict[str, float]  # job name → $
    states: dict[str, str]  # job name → final state
    refused: set[str]
    stops: dict[str, StopReason | None]  # job name → the stop the loop last asked of it (typed)


def decisions_of(jobs: dict[str, Job]) -> list[tuple[Any, ...]]:
    """Every transition of every job with its time, in time order (ties by job id): starts with
    their placement, requeues, ends."""
    out = []
    for job in jobs.values():
        for ev in job.events:
            out.append((round(ev.time, 6), job.spec.name, ev.new.value))
    return sorted(out)


def placements(jobs: dict[str, Job]) -> dict[str, list[str]]:
    return {j.spec.name: [e.reason for e in j.events if e.new.value == "ADMITTED"] for j in jobs.values()}


def stops_of(jobs: dict[str, Job]) -> dict[str, StopReason | None]:
    return {j.spec.name: j.stopped_by for j in jobs.values()}


def run_simulator(trace: Trace | None = None) -> tuple[Outcome, dict[str, list[str]], Simulation]:
    trace = trace or workload()
    sim = Simulation(
        trace,
        load_profile(PROFILE).build(),
        lambda n: n.hourly_price_usd or 0.0,
        nodes=nodes(),
        options=OPTIONS,
        budgets=budgets(),
    )
    result = sim.run()
    by_name = {j.spec.name: j for j in sim.jobs.values()}
    refused = {r["job_id"] for r in result.config["budget_blocked"]}
    outcome = Outcome(
        decisions=[d for d in decisions_of(sim.jobs) if sim.jobs[job_id(int(d[1][1:]))].id not in refused],
        costs={r.name: r.cost_usd for r in result.records if r.job_id not in refused},
        states={n: j.state.value for n, j in by_name.items() if j.id not in refused},
        refused={sim.jobs[str(i)].spec.name for i in refused},
        stops=stops_of({k: v for k, v in sim.jobs.items() if k not in refused}),
    )
    return outcome, placements({k: v for k, v in sim.jobs.items() if k not in refused}), sim


def run_server_loop(
    db: Database, tmp: Path, trace: Trace | None = None
) -> tuple[Outcome, dict[str, list[str]], Controller]:
    trace = trace or workload()
    profile: Profile = load_profile(PROFILE)
    seed_teams(db, cast(Any, SimpleNamespace(scheduler=profile)), 0.0)
    with db.session() as s:
        for b in budgets():
            budgets_repo.create_budget(s, b, created_by=None, now=0.0)
    clock = SimClock(0.0)
    backend = SimBackend(
        clock,
        nodes(),
        (),
        SimBackendOptions(OPTIONS.seed, OPTIONS.spot_hazard_per_node_hour, OPTIONS.spot_notice_s, OPTIONS.failure_prob),
    )
    config = ControllerConfig(
        cycle_interval_s=math.inf,
        min_cycle_gap_s=OPTIONS.cycle_interval_s,
        cycle_cost_factor=0.0,
        grace_s=0.0,
        budget_interval_s=OPTIONS.budget_interval_s,
        telemetry_interval_s=math.inf,
        max_retries=OPTIONS.max_retries,
    )
    ctl = Controller(
        db,
        backend,
        profile,
        config,
        clock=clock,
        leadership=FileLeadership(tmp / "leader.lock"),
        budgets=BudgetService(db, clock, interval_s=OPTIONS.budget_interval_s),
    )
    ctl.tick()  # leadership, recovery (the nodes join at t = 0), a first step
    jobs: dict[str, Job] = {}
    refused: set[str] = set()

    def submit(i: int) -> None:
        tj = trace.jobs[i]
        spec = tj.spec
        fields = submission_of(spec).fields()
        now = clock.now()
        try:
            with db.session() as s:  # what the API does: the block check in the inserting transaction
                check_submission(s, fields, spec.team, now)
                insert(s, fields, spec.team, now, job_id(i))
        except BudgetExceededError:
            refused.add(spec.name)
            return
        assert spec.duration_s is not None
        backend.durations[job_id(i)] = spec.duration_s  # the store keeps no simulated length of work

    loop: WorldLoop = ctl.loop
    seen: dict[str, Job] = {}

    def step(now: float) -> None:
        ctl.step()
        for j in [*loop.pending.values(), *(ar.job for ar in loop.active.values())]:
            seen.setdefault(j.id, j)

    drive(
        clock,
        backend,
        loop,
        step,
        [tj.submit_time for tj in trace.jobs],
        submit,
        sample=lambda now: None,
        sample_interval_s=OPTIONS.sample_interval_s,
    )
    jobs = seen
    with db.session() as s:
        end = max(clock.now(), 1e-6)
        ledger = repo.load_ledger(s, 0.0, end, end)
        states = {r.name: r.state for r in repo.jobs_in_states(s, ["SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"])}
    costs = job_costs_usd(ledger, None, 0.0, end, as_of=None)
    outcome = Outcome(
        decisions=decisions_of(jobs),
        costs={j.spec.name: costs.get(j.id, 0.0) for j in jobs.values()},
        states=states,
        refused=refused,
        stops=stops_of(jobs),
    )
    return outcome, placements(jobs), ctl


def test_the_workload_exercises_every_rule() -> None:
    outcome, _, sim = run_simulator()
    reasons = [e.reason for j in sim.jobs.values() for e in j.events]
    assert outcome.refused, "the block budget refused nothing"
    assert any(j.preemptions for j in sim.jobs.values()), "nothing was preempted"
    assert any("spot interruption" in r for r in reasons), "no spot interruption"
    assert any(j.work_done_s and j.restarts for j in sim.jobs.values()), "nothing resumed from a checkpoint"
    assert any(a["budget"] == "gamma-cap" and a["threshold"] == 100.0 for a in sim.book.alerts if sim.book)
    assert {j.spec.priority_class for j in sim.jobs.values()} == set(CLASSES)
    assert sum(1 for s in outcome.states.values() if s == "SUCCEEDED") >= 40


@pytest.mark.parametrize("backend_kind", [EventKind.SUCCEEDED], ids=["simulated-cluster"])
def test_simulator_and_server_loop_decide_the_same(db: Database, tmp_path: Path, backend_kind: EventKind) -> None:
    sim_out, sim_places, _ = run_simulator()
    srv_out, srv_places, _ = run_server_loop(db, tmp_path)
    assert srv_out.refused == sim_out.refused
    assert srv_places == sim_places
    assert srv_out.decisions == sim_out.decisions
    assert srv_out.states == sim_out.states
    assert srv_out.costs == sim_out.costs
    assert srv_out.stops == sim_out.stops


def test_both_worlds_stop_a_job_at_its_own_budget(db: Database, tmp_path: Path) -> None:
    """(d): jobs with their own budget — the simulator stops the same ones as the server, at the same
    moment (their CANCELLED transition's time), with the same typed stop reason, charged the same to
    the cent; the server's store keeps the stop as the same text."""
    trace = budgeted_workload()
    sim_out, sim_places, sim = run_simulator(trace)
    srv_out, srv_places, ctl = run_server_loop(db, tmp_path, trace)
    budgeted = {tj.spec.name: tj.spec.budget_usd for tj in trace.jobs if tj.spec.budget_usd is not None}
    stopped = {
        name
        for name, stop in sim_out.stops.items()
        if stop is not None and stop.kind is StopKind.BUDGET and sim_out.states.get(name) == "CANCELLED"
    }
    # the workload exercises both: budgets spent before the job is done, and budgets never reached
    assert stopped and stopped <= set(budgeted)
    assert any(sim_out.states.get(n) == "SUCCEEDED" for n in budgeted), "every budgeted job was stopped"
    for name in stopped:  # stopped once its cost reached its budget (and not long after: a tick)
        budget = budgeted[name]
        assert budget is not None and budget <= sim_out.costs[name] <= budget + 1.0, (name, budget)
        stop = sim_out.stops[name]
        assert stop is not None and stop.detail.startswith(f"job budget of ${budget:,.2f} reached")
    assert srv_out.refused == sim_out.refused
    assert srv_places == sim_places
    assert srv_out.decisions == sim_out.decisions  # the CANCELLED transitions at the same times
    assert srv_out.states == sim_out.states
    assert srv_out.costs == sim_out.costs
    assert srv_out.stops == sim_out.stops
    by_name = {j.spec.name: j for j in sim.jobs.values()}
    with db.session() as s:
        for name in stopped:
            row = repo.get_job(s, by_name[name].id)
            run = repo.get_run(s, row.id, row.run)
            assert run is not None and run.stop_requested is not None
            stop = srv_out.stops[name]
            assert stop is not None and StopReason.parse(run.stop_requested) == stop  # stored as text, typed again
            assert run.stop_requested == f"budget: {stop.detail}" and row.reason == stop.detail
    assert ctl.loop.active == {}


# -- (c) the live server loop: real processes on the wall clock -------------------------------------

SCALE = 1.0 / 400.0  # one simulated second is 2.5 ms of wall time
LIVE_JOBS = 16  # the workload's first 16 jobs: every team and class, ~35 s of wall time
# Tolerances of the live run against the simulator (documented here, asserted below):
# - admission order: a launch blocks the loop for 0.1-0.3 s (the shim's start-up; 40-120 simulated
#   seconds at this scale), so submissions that arrive meanwhile are decided together and a job can
#   lose a free slot to a later one of higher priority — and then wait for the next. Of the pairs of
#   jobs the simulator admits more than LIVE_TIE_S apart, at most LIVE_INVERSIONS (a fraction) may be
#   admitted in the other order live (a Kendall distance on the pairs that are not near-ties);
# - GPU-seconds per team (metered from the process's start to its end), scaled back to simulated
#   seconds: within 5 % of the simulator's.
LIVE_TIE_S = 900.0
LIVE_INVERSIONS = 0.10
LIVE_GPU_SECONDS_TOLERANCE = 0.05
# every time constant of the policy scales with the clock: aging and fair-share decay
SIM_AGING_S, SIM_HALF_LIFE_S = 3600.0, 7 * 24 * 3600.0
SIM_PROFILE = {**PROFILE, "aging": {"interval_s": SIM_AGING_S}, "fair_share": {"half_life_s": SIM_HALF_LIFE_S}}
LIVE_PROFILE = {
    **PROFILE,
    "aging": {"interval_s": SIM_AGING_S * SCALE},
    "fair_share": {"half_life_s": SIM_HALF_LIFE_S * SCALE},
}


def live_workload() -> Trace:
    """The workload's first jobs for one 8-GPU host: no spot (the host has none), no preemption (a
    stopped process restarts from scratch, unlike the simulator's checkpointed work), no budgets
    (wall-clock dollars are tiny), no CPU or memory requests (the host's are real)."""
    jobs = []
    for tj in workload().jobs[:LIVE_JOBS]:
        spec = replace(tj.spec, cpu_milli=0, memory_mib=0, preemptible=False, checkpoint_interval_s=None)
        jobs.append(TraceJob(tj.submit_time, spec))
    return Trace("cross-world-live", jobs)


def test_live_server_loop_matches_the_simulator(tmp_path: Path) -> None:
    from gpufleet.backends.accounts import AccountPolicy
    from gpufleet.backends.local import LocalBackend

    backend = LocalBackend(
        tmp_path / "home",
        node_name="host",
        gpus="8xA100-80GB",
        use_nvml=False,
        policy=AccountPolicy(jobs_as_server=True),
        job_root=tmp_path / "jobs",
    )
    host = backend.inventory()[0]
    trace = live_workload()
    sim = Simulation(
        trace,
        load_profile(SIM_PROFILE).build(),
        lambda n: 16.0,
        nodes=[host],
        options=SimOptions(seed=7, cycle_interval_s=0.0),
    )
    sim.run()
    sim_admit = {j.spec.name: j.first_start_time for j in sim.jobs.values()}
    sim_gpu_s: dict[str, float] = {}
    for j in sim.jobs.values():
        sim_gpu_s[j.team] = sim_gpu_s.get(j.team, 0.0) + j.spec.gpu.count * (j.spec.duration_s or 0.0)

    db = Database(f"sqlite:///{tmp_path / 'live.db'}")
    db.upgrade()
    profile = load_profile(LIVE_PROFILE)
    seed_teams(db, cast(Any, SimpleNamespace(scheduler=profile)), time.time())
    config = ControllerConfig(
        poll_interval_s=0.01,
        cycle_interval_s=0.5,
        min_cycle_gap_s=0.0,  # a cycle at every change, as the simulator's (cycle_interval_s=0)
        cycle_cost_factor=0.0,
        grace_s=1.0,
        node_price_usd_per_hour=16.0,
    )
    ctl = Controller(db, backend, profile, config, leadership=FileLeadership(tmp_path / "leader.lock"))
    try:
        t0 = time.time()
        submitted = 0
        deadline = t0 + 150.0
        while time.time() < deadline:
            now = time.time()
            while submitted < len(trace.jobs) and t0 + trace.jobs[submitted].submit_time * SCALE <= now:
                spec = trace.jobs[submitted].spec
                secs = (spec.duration_s or 0.0) * SCALE
                fields = {
                    "name": spec.name,
                    "command": ["sleep", f"{secs:.4f}"],
                    "priority_class": spec.priority_class,
                    "gpus": spec.gpu.count,
                    "gpu_types": sorted(spec.gpu_types),
                    "estimated_runtime_s": secs,
                }
                with db.session() as s:
                    insert(s, fields, spec.team, now, job_id(submitted))
                submitted += 1
            ctl.tick()
            with db.session(readonly=True) as s:
                done = len(repo.jobs_in_states(s, ["SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"]))
            if submitted == len(trace.jobs) and done == len(trace.jobs):
                break
            time.sleep(0.005)
        with db.session(readonly=True) as s:
            rows = repo.jobs_in_states(s, ["SUCCEEDED"])
            assert len(rows) == len(trace.jobs), "the live run did not finish every job"
            # admission: the loop's decision (the first ADMITTED event), not the process's start
            admitted: dict[str, float] = {}
            for ev in s.scalars(select(JobEventRow).where(JobEventRow.new == "ADMITTED")):
                admitted.setdefault(ev.job_id, ev.time)
            live_admit = {r.name: admitted[r.id] for r in rows}
            live_gpu_s: dict[str, float] = {}
            for r in rows:
                held = (r.ended_at or 0.0) - (r.started_at or 0.0)
                live_gpu_s[r.team] = live_gpu_s.get(r.team, 0.0) + r.gpus * held
    finally:
        ctl.leadership.release()
        db.dispose()
    pairs = [(a, b) for a in sim_admit for b in sim_admit if (sim_admit[a] or 0.0) + LIVE_TIE_S < (sim_admit[b] or 0.0)]
    inversions = [
        (a, b)
        for a in sim_admit
        for b in sim_admit
        if (sim_admit[a] or 0.0) + LIVE_TIE_S < (sim_admit[b] or 0.0) and live_admit[a] > live_admit[b]
    ]
    t00 = min(live_admit.values())
    orders = (
        sorted((round(v or 0.0), k) for k, v in sim_admit.items()),
        sorted((round((v - t00) / SCALE), k) for k, v in live_admit.items()),
    )
    assert len(inversions) <= LIVE_INVERSIONS * len(pairs), (len(inversions), len(pairs), inversions, orders)
    for team, sim_s in sim_gpu_s.items():
        live_s = live_gpu_s.get(team, 0.0) / SCALE
        assert abs(live_s - sim_s) <= LIVE_GPU_SECONDS_TOLERANCE * sim_s, (team, live_s, sim_s)
