"""The controller: the simulator's scheduling cycle, on the wall clock, against a backend and a store.

One replica — the leader — runs :meth:`Controller.step` in a loop:

1. ``backend.poll()``: runs that ended become job transitions and ledger segments (one transaction
   per run, with the times the backend measured next to the process);
2. the store: new submissions join the in-memory queue; cancellations are picked up;
3. a scheduling cycle (the same :class:`~gpufleet.scheduling.cycle.Scheduler` as the simulator) when
   something changed or ``cycle_interval_s`` passed; its decisions are bound through the backend:
   ``PENDING → ADMITTED`` and the run row are committed *before* the launch, so a crash between the
   two is recovered (the backend says whether the run exists) and a job never runs twice;
4. the queue (order, reasons, estimated starts) and a heartbeat are published for the API.

On becoming leader (start-up, or after another replica died) the in-memory state is rebuilt from
the store and the backend (:meth:`Controller.recover`): every run the store thinks is active is
adopted if alive, finished if it ended while nobody watched, and requeued if it was lost.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from gpufleet.backends.base import Backend, BackendEvent, EventKind, LaunchRequest, RecoveredState, read_job_file
from gpufleet.clock import Clock, WallClock
from gpufleet.control.budgets import BudgetService  # budgets: evaluation, alerts, throttles, job limits
from gpufleet.control.leader import FileLeadership, Leadership, PgLeadership
from gpufleet.cost.budgets import throttled_cycle  # budgets
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.forecast import parse_progress_file
from gpufleet.errors import GpufleetError, StoreError
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import Job, JobState
from gpufleet.model.node import Node
from gpufleet.scheduling.cycle import ClusterState, Decisions, Placement, Scheduler
from gpufleet.scheduling.estimate import estimate_starts
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.profile import Profile
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot
from gpufleet.store import repo
from gpufleet.store.convert import job_from_row, placement_to_json, pod_share_units
from gpufleet.store.db import Database
from gpufleet.store.models import JobProgressRow

log = logging.getLogger(__name__)

ACTIVE = ("ADMITTED", "RUNNING")
QUEUE_PUBLISH_INTERVAL_S = 1.0
HEARTBEAT_INTERVAL_S = 1.0
QUOTA_REFRESH_S = 2.0
FULL_RESYNC_S = 30.0
MIN_STEP_GAP_S = 0.05
PROGRESS_READ_LIMIT = 1024 * 1024  # bytes of a job's progress file read per look
MIN_CYCLE_GAP_S = 0.05  # least time between two cycles triggered by changes
CYCLE_COST_FACTOR = 5.0  # ... and at least this many times the last cycle's duration


@dataclass
class ControllerConfig:
    poll_interval_s: float = 0.2
    cycle_interval_s: float = 2.0
    grace_s: float = 30.0
    telemetry_interval_s: float = 10.0
    node_price_usd_per_hour: float | None = None
    budget_interval_s: float = 10.0  # budgets: how often budgets are evaluated and alerts dispatched
    replica: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")


@dataclass(slots=True)
class ActiveRun:
    job: Job
    run: int
    assignments: tuple[Assignment, ...]
    stopping: str | None = None  # why a stop was asked ("cancel: ..." or "preempt: ...")


@dataclass(slots=True)
class StepStats:
    cycles: int = 0
    last_cycle_ms: float = 0.0
    last_step_ms: float = 0.0
    placed: int = 0
    ended: int = 0


class Controller:
    def __init__(
        self,
        db: Database,
        backend: Backend,
        profile: Profile | None = None,
        config: ControllerConfig | None = None,
        *,
        clock: Clock | None = None,
        leadership: Leadership | None = None,
        catalog: PriceCatalog | None = None,
        budgets: BudgetService | None = None,
    ) -> None:
        self.db = db
        self.backend = backend
        self.profile = profile or Profile()
        self.config = config or ControllerConfig()
        self.clock = clock or WallClock()
        self.leadership = leadership or self._default_leadership()
        self.catalog = catalog
        # budgets: evaluated on their own timer from step(); throttles applied to each cycle
        self.budgets = budgets or BudgetService(db, self.clock, interval_s=self.config.budget_interval_s)
        self._throttled = False
        self.stats = StepStats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leader = False
        self._ready = False
        self._reset_state()

    def _default_leadership(self) -> Leadership:
        if self.db.is_postgres:
            return PgLeadership(self.db.engine)
        url = str(self.db.engine.url)
        path = Path(url.split("///", 1)[1] + ".leader.lock") if "///" in url else Path("gpufleet.leader.lock")
        return FileLeadership(path)

    def _reset_state(self) -> None:
        self.scheduler: Scheduler = self.profile.build()
        self.snapshot = ClusterSnapshot(max_gpus=8, capacity=16)
        self.nodes: dict[str, Node] = {}
        self.node_price: dict[str, float] = {}
        self.pending: dict[str, Job] = {}
        self.active: dict[str, ActiveRun] = {}
        self.running: dict[str, RunningJob] = {}
        self.last_seq = 0
        self.changes_seen_at = 0.0
        self._dirty = True
        self._last_cycle = -math.inf
        self._last_quota = -math.inf
        self._last_resync = 0.0
        self._quota_key: object = None
        self._last_publish = -math.inf
        self._publish_s = 0.0
        self._last_heartbeat = -math.inf
        self._last_telemetry = -math.inf
        self._order: list[Job] = []
        self._progress: dict[tuple[str, int], tuple[int, float | None]] = {}  # run → (offset read, last time)
        self._waiting: dict[str, str] = {}

    # -- thread ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpufleet-controller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.leadership.release()
        self.backend.close()

    def wake(self) -> None:
        """Something changed (a submit, a cancel): run a step now."""
        self._dirty = True
        self._wake.set()

    def ready(self) -> bool:
        """Ready to serve: a follower always is; a leader once it has recovered."""
        return self._ready

    @property
    def is_leader(self) -> bool:
        return self._leader

    def _loop(self) -> None:
        follower_ready_at = time.monotonic() + 1.0
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a bug or the store going away: log, back off, keep serving
                log.exception("controller step failed")
                self._leader_lost()
                self._stop.wait(1.0)
            if not self._leader and time.monotonic() > follower_ready_at:
                self._ready = True
            self._stop.wait(MIN_STEP_GAP_S)  # wake-ups coalesce: at most ~20 steps a second
            self._wake.wait(self.config.poll_interval_s)
            self._wake.clear()

    def tick(self) -> None:
        """One turn of the loop: win or keep leadership, then step (leader) or heartbeat (follower)."""
        if self._leader and not self.leadership.still_held():
            self._leader_lost()
        if not self._leader and self.leadership.try_acquire():
            log.info("replica %s is now the scheduling leader", self.config.replica)
            self._leader = True
            self._ready = False
            self.recover()
            self._ready = True
        if self._leader:
            self.step()
        else:
            self._heartbeat(force=False)

    def _leader_lost(self) -> None:
        if self._leader:
            log.error("replica %s lost leadership; state dropped", self.config.replica)
        self._leader = False
        self.leadership.release()
        self._reset_state()

    # -- recovery --------------------------------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild the in-memory world from the backend's inventory and the store."""
        self._reset_state()
        now = self.clock.now()
        inventory = self.backend.inventory()
        with self.db.session() as s:
            known = {n.name for n in inventory}
            for node in inventory:
                price = self._price(node)
                repo.upsert_node(s, node, hourly_usd=price, now=now)
            for node_row in repo.list_nodes(s):
                if node_row.name not in known:
                    repo.remove_node(s, node_row.name, now)
        max_gpus = max([8, *(n.gpu_count for n in inventory)])
        self.snapshot = ClusterSnapshot(max_gpus=max_gpus, capacity=max(16, len(inventory)))
        for node in inventory:
            price = self._price(node)
            self.snapshot.add_node(node, price / node.gpu_count if node.gpu_count else price)
            self.nodes[node.name] = node
            self.node_price[node.name] = price
        self._refresh_quotas(force=True)
        with self.db.session() as s:
            active = repo.jobs_in_states(s, list(ACTIVE))
            runs = {(r.job_id, r.run): r for r in repo.open_runs(s)}
        for row in active:
            job = job_from_row(row)
            run_row = runs.get((row.id, row.run))
            got = self.backend.recover(row.id, row.run)
            if got.state is RecoveredState.RUNNING and got.handle is not None:
                self._adopt(job, row.run, got.handle.pid, got.handle.started_at, run_row)
            elif got.state is RecoveredState.ENDED and got.event is not None:
                self._adopt(job, row.run, None, got.event.started_at, run_row)
                self._on_end(got.event)
            elif row.state == "ADMITTED" and (run_row is None or run_row.started_at is None):
                self._requeue_unlaunched(job, row.run, "launch interrupted by a controller restart")
            else:
                self._adopt(job, row.run, None, run_row.started_at if run_row else None, run_row)
                self._on_end(
                    BackendEvent(
                        EventKind.LOST,
                        now,
                        job_id=row.id,
                        run=row.run,
                        reason="the run was gone when the controller restarted",
                        started_at=run_row.started_at if run_row else None,
                        ended_at=self._last_seen_alive(now),
                    )
                )
        with self.db.session() as s:
            for row in repo.jobs_in_states(s, ["PENDING"]):
                self.pending[row.id] = job_from_row(row)
                self.last_seq = max(self.last_seq, row.seq)
        self.changes_seen_at = now - 5.0
        self._dirty = True
        log.info("recovered: %d node(s), %d running, %d pending", len(self.nodes), len(self.active), len(self.pending))

    def _last_seen_alive(self, now: float) -> float:
        """When a lost run was last known alive: the previous leader's last heartbeat, else now."""
        with self.db.session() as s:
            row = repo.leader(s, now, stale_after_s=math.inf)
            return min(now, row.heartbeat_at) if row is not None else now

    def _adopt(self, job: Job, run: int, pid: int | None, started_at: float | None, run_row: Any) -> None:
        """Put a run the store knows into the snapshot, the scheduler's usage and the running set."""
        now = self.clock.now()
        started = started_at if started_at is not None else now
        assignments = tuple(
            self.snapshot.assignment_of(p, job.spec.cpu_milli, job.spec.memory_mib) for p in job.placement
        )
        for a in assignments:
            self.snapshot.allocate(a)
        self.scheduler.account(job, assignments, self.snapshot, now, +1)
        if job.state is JobState.ADMITTED:
            with self.db.session() as s:
                repo.mark_run_started(s, job.id, run, pid=pid or 0, started_at=started)
                row = repo.get_job(s, job.id)
                repo.transition(
                    s, row, "RUNNING", f"adopted after restart (pid {pid})", now, started_at=row.started_at or started
                )
            job.transition(JobState.RUNNING, now, "adopted")
        job.start_time = started
        stopping = run_row.stop_requested if run_row is not None else None
        self.active[job.id] = ActiveRun(job, run, assignments, stopping)
        self.running[job.id] = RunningJob(job, assignments, self._gpu_type(assignments))

    def _gpu_type(self, assignments: tuple[Assignment, ...]) -> str:
        if not assignments:
            return ""
        t = int(self.snapshot.gpu_type[assignments[0].node])
        return self.snapshot.gpu_types[t] if t >= 0 else ""

    def _price(self, node: Node) -> float:
        if self.config.node_price_usd_per_hour is not None:
            return self.config.node_price_usd_per_hour
        if node.hourly_price_usd is not None:
            return node.hourly_price_usd
        if not node.gpu_count:
            return 0.0
        try:
            if self.catalog is None:
                self.catalog = PriceCatalog.load()
            return self.catalog.node_hour_usd(node)
        except GpufleetError as e:
            log.warning("no catalog price for node %s (%s): metered at $0/h; set node_price_usd_per_hour", node.name, e)
            return 0.0

    # -- the step --------------------------------------------------------------------------------------
    def step(self) -> None:
        t0 = time.perf_counter()
        now = self.clock.now()
        for ev in self.backend.poll():
            self._isolated(ev.job_id, "its end", functools.partial(self._on_end, ev))
        self._sync_store(now)
        self._refresh_quotas()
        self._budget_tick(now)
        cycled = False
        # a change asks for a cycle now, but cycles are spaced by a multiple of their own cost, so a
        # flood of submits against a long queue cannot starve the API threads of the GIL
        gap = max(MIN_CYCLE_GAP_S, CYCLE_COST_FACTOR * self.stats.last_cycle_ms / 1000)
        since = now - self._last_cycle
        if self.pending and ((self._dirty and since >= gap) or since >= self.config.cycle_interval_s):
            self.run_cycle(now)
            cycled = True
        self._publish(now)
        if cycled:  # the whole step: store sync, cycle, binds, queue publication
            self.stats.last_step_ms = (time.perf_counter() - t0) * 1000
        self._heartbeat(force=False)
        if now - self._last_telemetry >= self.config.telemetry_interval_s:
            self._last_telemetry = now
            self._telemetry()
            self._read_progress()

    def run_cycle(self, now: float) -> Decisions:
        t0 = time.perf_counter()
        self._dirty = False
        self._last_cycle = now
        state = ClusterState(self.snapshot, list(self.pending.values()), self.running, ())
        # budgets: throttles in force lower priorities, cap GPUs or allow spot only (a plain cycle when none)
        rules = self.budgets.throttles
        decisions = throttled_cycle(self.scheduler, state, rules, now, restore=self._throttled and not rules)
        self._throttled = bool(rules)
        self._order = decisions.order
        self._waiting = {k: v.reason for k, v in decisions.waiting.items()}
        for p in decisions.preemptions:
            self._request_stop(p.victim.job.id, f"preempt: {p.reason}")
        for pl in decisions.placements:
            self._bind(pl, now)
        self.stats.cycles += 1
        self.stats.last_cycle_ms = (time.perf_counter() - t0) * 1000
        return decisions

    # -- budgets ---------------------------------------------------------------------------------------
    def _budget_tick(self, now: float) -> None:
        """Evaluate budgets when due: alerts, the throttles in force, and jobs over their own budget
        (stopped like a cancel, with the grace period for a checkpoint; they end CANCELLED)."""
        before = self.budgets.throttles
        try:
            overruns = self.budgets.maybe_run(now)
        except GpufleetError as e:  # the store went away: budgets wait for the next tick
            log.warning("budget evaluation failed: %s", e)
            return
        if overruns is None:
            return
        if self.budgets.throttles != before:
            self._dirty = True
        for o in overruns:
            if o.job_id in self.active:
                log.info("stopping %s: %s", o.job_id, o.reason)
                self._request_stop(o.job_id, f"budget: {o.reason}")

    def _sync_store(self, now: float) -> None:
        """New submissions, and jobs changed by the API (cancel) since the last look."""
        with self.db.session(readonly=True) as s:
            new = repo.jobs_after(s, self.last_seq, ["PENDING"])
            for row in new:
                self.last_seq = max(self.last_seq, row.seq)
                if row.id not in self.pending and row.id not in self.active:
                    self.pending[row.id] = job_from_row(row)
                    self._dirty = True
            since = self.changes_seen_at
            self.changes_seen_at = now - 2.0  # overlap: rows committed late with an earlier updated_at
            changes = repo.state_changes_since(s, since)
            if now - self._last_resync >= FULL_RESYNC_S:
                # safety net: a submit whose transaction committed after later ones (PostgreSQL hands
                # out seq at insert, not at commit) is missed by the seq watermark
                self._last_resync = now
                known = self.pending.keys() | self.active.keys()
                for job_id in repo.job_ids_in_states(s, ["PENDING"]):
                    if job_id not in known:
                        self.pending[job_id] = job_from_row(repo.get_job(s, job_id))
                        self._dirty = True
        for job_id, state, cancel in changes:
            if job_id in self.pending and state in ("CANCELLED", "FAILED", "SUCCEEDED", "TIMED_OUT"):
                del self.pending[job_id]
                self.scheduler.forget(job_id)
                self._dirty = True
            elif job_id in self.active and cancel and self.active[job_id].stopping is None:
                self._request_stop(job_id, "cancel: cancelled by request")

    def _refresh_quotas(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_quota < QUOTA_REFRESH_S:
            return
        self._last_quota = now
        with self.db.session() as s:
            quotas = repo.all_quotas(s)
        key = tuple(sorted(repr(q) for q in quotas))
        if key == self._quota_key:
            return
        self._quota_key = key
        # a team with no quota rows and no cohort is unlimited (it has no Quota in the scheduler)
        self.scheduler.quotas = QuotaPolicy(q for q in quotas if q.nominal_milli or q.cohort)
        for q in quotas:
            self.scheduler.weights[q.team] = q.weight
        self._dirty = True

    # -- binding ---------------------------------------------------------------------------------------
    def _bind(self, pl: Placement, cycle_time: float) -> None:
        job = pl.job
        now = max(cycle_time, self.clock.now())  # events carry the time they happened
        snap = self.snapshot
        placement = tuple(snap.placement_of(a) for a in pl.assignments)
        node_name = placement[0].node if placement else next(iter(self.nodes), "")
        with self.db.session() as s:
            row = repo.get_job(s, job.id, for_update=True)
            if row.state != "PENDING" or row.cancel_requested:
                skip = True
            else:
                skip = False
                run = row.run + 1
                where = ", ".join(f"{p.node} GPU {','.join(map(str, p.gpus)) or '-'}" for p in placement) or node_name
                repo.transition(
                    s, row, "ADMITTED", f"placed on {where}", now, run=run, placement=placement_to_json(placement)
                )
                node = self.nodes.get(node_name)
                repo.open_run(
                    s,
                    job_id=job.id,
                    run=run,
                    node=node_name,
                    placement=placement_to_json(placement),
                    capacity_type=node.capacity_type.value if node else "on-demand",
                    node_hourly_usd=self.node_price.get(node_name, 0.0),
                    now=now,
                )
                command, env, cwd, ckpt = list(row.command), dict(row.env or {}), row.cwd, row.checkpoint_dir
                owner = (row.team, row.run_as, row.cpu_milli, row.memory_mib)
                restarts = row.restarts
        if skip:
            self.scheduler.unreserve(pl, snap, now)
            self.pending.pop(job.id, None)
            self.scheduler.forget(job.id)
            return
        del self.pending[job.id]
        job.transition(JobState.ADMITTED, now, "placed")
        job.placement = placement
        try:
            handle = self.backend.launch(
                LaunchRequest(
                    job_id=job.id,
                    run=run,
                    command=command,
                    placement=placement,
                    env=env,
                    cwd=cwd,
                    checkpoint_dir=ckpt,
                    restart_count=restarts,
                    max_runtime_s=job.spec.max_runtime_s,
                    grace_s=self.config.grace_s,
                    team=owner[0],
                    run_as=owner[1],
                    cpu_milli=owner[2],
                    memory_mib=owner[3],
                )
            )
        except Exception as e:  # one job's bad launch ends that job, never the loop (or leadership)
            if not isinstance(e, GpufleetError | OSError):
                log.exception("launch of %s raised an unexpected error", job.id)
            log.warning("launch of %s failed: %s", job.id, e)
            self.scheduler.unreserve(pl, snap, now)
            with self.db.session() as s:
                repo.end_run(
                    s,
                    job.id,
                    run,
                    outcome="launch-failed",
                    exit_code=None,
                    reason=str(e),
                    started_at=None,
                    ended_at=now,
                )
                row = repo.get_job(s, job.id, for_update=True)
                repo.transition(s, row, "FAILED", f"could not launch: {e}", now, ended_at=now, placement=[])
            job.transition(JobState.FAILED, now, "launch failed")
            self.scheduler.forget(job.id)
            return
        with self.db.session() as s:
            repo.mark_run_started(s, job.id, run, pid=handle.pid, started_at=handle.started_at)
            row = repo.get_job(s, job.id, for_update=True)
            repo.transition(
                s,
                row,
                "RUNNING",
                f"started (run {run}, pid {handle.pid})",
                now,
                started_at=row.started_at if row.started_at is not None else handle.started_at,
            )
        job.transition(JobState.RUNNING, now, "started")
        job.start_time = handle.started_at
        if job.first_start_time is None:
            job.first_start_time = handle.started_at
        self.active[job.id] = ActiveRun(job, run, pl.assignments)
        self.running[job.id] = RunningJob(job, pl.assignments, self._gpu_type(pl.assignments))
        self.stats.placed += 1

    def _requeue_unlaunched(self, job: Job, run: int, reason: str) -> None:
        now = self.clock.now()
        with self.db.session() as s:
            repo.end_run(
                s, job.id, run, outcome="never-started", exit_code=None, reason=reason, started_at=None, ended_at=now
            )
            row = repo.get_job(s, job.id, for_update=True)
            if row.cancel_requested:
                repo.transition(s, row, "CANCELLED", "cancelled before it started", now, ended_at=now, placement=[])
                return
            repo.transition(s, row, "PENDING", reason, now, placement=[])
        job.state = JobState.PENDING
        job.placement = ()
        self.pending[job.id] = job

    def _request_stop(self, job_id: str, why: str) -> None:
        ar = self.active.get(job_id)
        if ar is None or ar.stopping is not None:
            return
        ar.stopping = why
        with self.db.session() as s:
            repo.request_stop(s, job_id, ar.run, why)
        try:
            self.backend.stop(job_id, ar.run, why.split(": ", 1)[-1], self.config.grace_s)
        except (StoreError, SQLAlchemyError):
            raise
        except Exception:  # one job that cannot be stopped must not stop the loop: asked again next time
            log.exception("stopping %s failed; will retry", job_id)
            ar.stopping = None

    def _isolated(self, job_id: str | None, what: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` (work for one job); a failure that is the job's, not the store's, is logged
        and the loop goes on: one bad job never stops scheduling for everyone."""
        try:
            fn()
        except (StoreError, SQLAlchemyError):
            raise  # the store went away: the loop backs off and recovers
        except Exception:
            log.exception("handling %s of job %s failed; the loop carries on", what, job_id)

    # -- ends ------------------------------------------------------------------------------------------
    def _on_end(self, ev: BackendEvent) -> None:
        if ev.job_id is None or ev.run is None:
            return
        ar = self.active.get(ev.job_id)
        if ar is None or ar.run != ev.run:
            return  # already handled (a duplicate report) or not ours
        now = self.clock.now()
        job = ar.job
        ended = ev.ended_at if ev.ended_at is not None else now
        with self.db.session() as s:
            row = repo.get_job(s, job.id, for_update=True)
            run_row = repo.end_run(
                s,
                job.id,
                ar.run,
                outcome=ev.kind.value,
                exit_code=ev.exit_code,
                reason=ev.reason,
                started_at=ev.started_at,
                ended_at=ended,
            )
            started = run_row.started_at if run_row.started_at is not None else ev.started_at
            if started is not None:
                self._meter(s, row, ar, started, ended)
            stopping = ar.stopping or run_row.stop_requested
            requeue = False
            if ev.kind is EventKind.SUCCEEDED:
                repo.transition(s, row, "SUCCEEDED", "exited 0", now, ended_at=ended, exit_code=0)
            elif ev.kind is EventKind.TIMED_OUT:
                limit = job.spec.max_runtime_s or 0
                repo.transition(
                    s,
                    row,
                    "TIMED_OUT",
                    f"ran past its max runtime of {limit:.0f}s",
                    now,
                    ended_at=ended,
                    exit_code=ev.exit_code,
                )
            elif ev.kind in (EventKind.STOPPED, EventKind.FAILED) and stopping and stopping.startswith("budget"):
                repo.transition(  # budgets: a job stopped at its own budget ends; it is not requeued
                    s, row, "CANCELLED", stopping.split(": ", 1)[-1], now, ended_at=ended, exit_code=ev.exit_code
                )
            elif ev.kind is EventKind.STOPPED and stopping and stopping.startswith("cancel"):
                repo.transition(
                    s, row, "CANCELLED", stopping.split(": ", 1)[-1], now, ended_at=ended, exit_code=ev.exit_code
                )
            elif ev.kind is EventKind.FAILED and not stopping:
                how = f"killed by signal {ev.signal}" if ev.signal else f"exited with code {ev.exit_code}"
                repo.transition(s, row, "FAILED", ev.reason or how, now, ended_at=ended, exit_code=ev.exit_code)
            elif row.cancel_requested:
                repo.transition(
                    s, row, "CANCELLED", "cancelled by request", now, ended_at=ended, exit_code=ev.exit_code
                )
            else:  # stopped for preemption (or failed while being stopped), or lost: back to the queue
                why = (stopping or "").split(": ", 1)[-1] or ev.reason or ev.kind.value
                preempted = ev.kind is not EventKind.LOST
                repo.transition(s, row, "PREEMPTED", why, now, exit_code=ev.exit_code)
                repo.transition(
                    s,
                    row,
                    "PENDING",
                    "requeued" + (" (resumes from its checkpoint)" if row.checkpoint_dir else ""),
                    now,
                    restarts=row.restarts + 1,
                    preemptions=row.preemptions + (1 if preempted else 0),
                    placement=[],
                )
                requeue = True
        self._read_progress(only=job.id)  # the last reports of the run
        self._progress.pop((job.id, ar.run), None)
        # in memory
        self.scheduler.release(job, ar.assignments, self.snapshot, now)
        del self.active[job.id]
        self.running.pop(job.id, None)
        self.scheduler.job_stopped(job.id)
        self.stats.ended += 1
        self._dirty = True
        if requeue:
            job.state = JobState.PENDING
            job.start_time = None
            job.placement = ()
            job.restarts += 1
            self.pending[job.id] = job
        else:
            self.scheduler.forget(job.id)

    def _meter(self, s: Any, row: Any, ar: ActiveRun, start: float, end: float) -> None:
        """Ledger segments of a run that ended: one per node, the share the job held there."""
        per_node: dict[str, tuple[int, int, int]] = {}
        spec = ar.job.spec
        for p in ar.job.placement or tuple(self.snapshot.placement_of(a) for a in ar.assignments):
            node = self.nodes.get(p.node)
            units = pod_share_units(row, node.gpu_model if node else "") if p.gpus else 0
            u, c, m = per_node.get(p.node, (0, 0, 0))
            per_node[p.node] = (u + units, c + spec.cpu_milli, m + spec.memory_mib)
        if not per_node and self.nodes:  # a CPU-only job still holds CPU and memory on its node
            per_node[next(iter(self.nodes))] = (0, spec.cpu_milli, spec.memory_mib)
        node_rows = {n.name: n for n in repo.list_nodes(s, include_removed=True)}
        for name, (units, cpu, mem) in per_node.items():
            node_row = node_rows.get(name)
            if node_row is None:
                continue
            repo.append_segment(
                s,
                job=row,
                run=ar.run,
                node=node_row,
                gpu_share_units=units,
                cpu_milli=cpu,
                memory_mib=mem,
                node_hourly_usd=node_row.hourly_price_usd,
                capacity_type=node_row.capacity_type,
                start=start,
                end=max(start, end),
            )

    # -- publishing ------------------------------------------------------------------------------------
    def queue_entries(self, now: float) -> list[dict[str, Any]]:
        order = [j for j in self._order if j.id in self.pending]
        seen = {j.id for j in order}
        order += sorted((j for j in self.pending.values() if j.id not in seen), key=lambda j: j.submit_time)
        capacity = int(self.snapshot.gpu_count[: self.snapshot.n].sum()) * MILLI
        starts = estimate_starts(order, self.running.values(), capacity, now)
        return [
            {
                "job": j.id,
                "position": i + 1,
                "reason": self._waiting.get(j.id, "waiting for the next scheduling cycle"),
                "estimated_start": starts.get(j.id),
            }
            for i, j in enumerate(order)
        ]

    def _publish(self, now: float) -> None:
        if now - self._last_publish < max(QUEUE_PUBLISH_INTERVAL_S, CYCLE_COST_FACTOR * self._publish_s):
            return
        self._last_publish = now
        t0 = time.perf_counter()
        self._heartbeat(force=True, queue=self.queue_entries(now))
        self._publish_s = time.perf_counter() - t0

    def _heartbeat(self, *, force: bool, queue: list[dict[str, Any]] | None = None) -> None:
        now = self.clock.now()
        if not force and now - self._last_heartbeat < HEARTBEAT_INTERVAL_S:
            return
        self._last_heartbeat = now
        info = {
            "pending": len(self.pending),
            "running": len(self.active),
            "cycles": self.stats.cycles,
            "last_step_ms": round(self.stats.last_step_ms, 3),
        }
        with self.db.session() as s:
            repo.heartbeat(
                s,
                self.config.replica,
                is_leader=self._leader,
                now=now,
                cycle_ms=self.stats.last_cycle_ms if self._leader else None,
                queue=queue,
                info=info,
            )

    def _read_progress(self, only: str | None = None) -> None:
        """New lines of the progress files running jobs write (``$GPUFLEET_PROGRESS_FILE``, JSON
        Lines, see :func:`gpufleet.cost.forecast.parse_progress_file`) become progress rows, as if
        reported through the API (``only``: just that job, read once more as its run ends). Only
        whole lines are read; after a restart, reports already stored (by time) are skipped."""
        path_of = getattr(self.backend, "progress_path", None)
        if path_of is None:
            return
        rows: list[JobProgressRow] = []
        for job_id, ar in self.active.items():
            if only is None or job_id == only:
                path = path_of(job_id, ar.run)
                if path is not None:
                    rows += self._progress_rows(job_id, ar.run, path)
        if rows:
            with self.db.session() as s:
                s.add_all(rows)

    def _progress_rows(self, job_id: str, run: int, path: Path) -> list[JobProgressRow]:
        key = (job_id, run)
        offset, seen = self._progress.get(key, (0, None))
        # the job owns the file: no link is followed, at most PROGRESS_READ_LIMIT bytes per look
        chunk = read_job_file(path, offset, PROGRESS_READ_LIMIT)
        if not chunk:
            return []
        if key not in self._progress:
            with self.db.session(readonly=True) as s:
                seen = s.scalar(select(func.max(JobProgressRow.time)).where(JobProgressRow.job_id == job_id))
        end = chunk.rfind(b"\n") + 1
        if end == 0 and len(chunk) == PROGRESS_READ_LIMIT:  # one line longer than the limit: skip it
            self._progress[key] = (offset + len(chunk), seen)
            return []
        if end == 0:
            return []
        try:
            reports = parse_progress_file(chunk[:end].decode(errors="replace"), source=str(path))
        except GpufleetError as e:
            log.warning("ignoring progress of %s: %s", job_id, e)
            reports = []
        fresh = [r for r in reports if seen is None or r.time > seen]
        last = max([*(r.time for r in fresh), *([seen] if seen is not None else [])], default=None)
        self._progress[key] = (offset + end, last)
        return [
            JobProgressRow(job_id=job_id, time=r.time, step=r.step, total_steps=r.total_steps, metrics=dict(r.metrics))
            for r in fresh
        ]

    def _telemetry(self) -> None:
        try:
            samples = self.backend.telemetry()
        except GpufleetError as e:
            log.warning("telemetry failed: %s", e)
            return
        if samples:
            with self.db.session() as s:
                repo.record_gpu_samples(s, samples)


def run_until(cond: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Wait for ``cond`` (tests and tools)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(interval)
    return cond()
