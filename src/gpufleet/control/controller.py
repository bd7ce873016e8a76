"""The controller: the server's world — the world loop on the wall clock, the SQL store, a backend.

One replica — the leader — runs :meth:`Controller.step` in a loop: one step of the world loop
(:class:`~gpufleet.loop.world.WorldLoop`, the same rules the simulator runs: backend events, new
submissions and cancels, budgets, the scheduling cycle with binding, autoscaling) followed by what
only a server does: the queue (order, reasons, estimated starts) and a heartbeat are published for
the API, and the progress files and GPU telemetry of running jobs are read.

On becoming leader (start-up, or after another replica died) the in-memory state is rebuilt from
the store and the backend (:meth:`Controller.recover`): every run the store thinks is active is
adopted if alive, finished if it ended while nobody watched, and requeued if it was lost.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.backends.base import Backend, BackendEvent, EventKind, RecoveredState
from gpufleet.clock import Clock, WallClock
from gpufleet.control.leader import FileLeadership, Leadership, PgLeadership
from gpufleet.control.progress_files import (
    PROGRESS_READ_LIMIT,
    ProgressRead,
    pick_progress,
    progress_lines,
)
from gpufleet.control.sqlstate import QUOTA_REFRESH_S, SqlState
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.forecast import MAX_PROGRESS_LINE_BYTES, ProgressReport
from gpufleet.errors import BackendError, GpufleetError
from gpufleet.io.catalog import load_catalog
from gpufleet.loop.budgets import BudgetTick, next_tick
from gpufleet.loop.world import ActiveRun, LoopConfig, WorldLoop
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import Job, JobState, StopReason
from gpufleet.model.node import Node
from gpufleet.scheduling.cycle import Scheduler
from gpufleet.scheduling.decisions import Decisions
from gpufleet.scheduling.estimate import Release, estimate_queue, expected_end
from gpufleet.scheduling.framework import Status
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.profile import Profile
from gpufleet.scheduling.snapshot import ClusterSnapshot
from gpufleet.services.budgets import BudgetService
from gpufleet.store import repo
from gpufleet.store.convert import job_from_row
from gpufleet.store.db import Database

log = logging.getLogger(__name__)

ACTIVE = ("ADMITTED", "RUNNING")
QUEUE_PUBLISH_INTERVAL_S = 1.0
HEARTBEAT_INTERVAL_S = 1.0
MIN_STEP_GAP_S = 0.05
MIN_CYCLE_GAP_S = 0.05  # least time between two cycles triggered by changes
CYCLE_COST_FACTOR = 5.0  # ... and at least this many times the last cycle's duration


@dataclass
class ControllerConfig:
    poll_interval_s: float = 0.2
    cycle_interval_s: float = 2.0
    grace_s: float = 30.0
    telemetry_interval_s: float = 10.0
    node_price_usd_per_hour: float | None = None
    budget_interval_s: float = 10.0  # how often budgets are evaluated and alerts dispatched
    replica: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    min_cycle_gap_s: float = MIN_CYCLE_GAP_S
    cycle_cost_factor: float = CYCLE_COST_FACTOR  # 0 where the clock is simulated (deterministic)
    quota_refresh_s: float = QUOTA_REFRESH_S
    max_retries: int = 0  # a failed run is requeued this many times before its job fails
    # A run's progress file becomes at most this many rows a look, and at most progress_rows_per_s
    # sustained (a token bucket holding progress_burst): more lines are thinned evenly, the newest
    # report always kept (it waits for a token, at the latest the run's end).
    progress_rows_per_look: int = 100
    progress_rows_per_s: float = 10.0
    progress_burst: int = 100


@dataclass(slots=True)
class StepStats:
    cycles: int = 0
    last_cycle_ms: float = 0.0
    last_step_ms: float = 0.0
    placed: int = 0
    ended: int = 0


class ServiceBudgets:
    """The server's budget policy for the loop: :class:`BudgetService` on the SQL store (its
    evaluation applies :func:`gpufleet.loop.budgets.evaluate`'s rules). Submissions were checked by
    the API in the transaction that inserted them, so the loop refuses none."""

    def __init__(self, service: BudgetService) -> None:
        self.service = service
        self._last = -math.inf  # the last tick (the service's timer is reset by the same call)

    def due(self, now: float) -> bool:
        return self.service.due(now)

    def next_due(self) -> float:
        return next_tick(self._last, self.service.interval_s)

    def tick(self, now: float, loop: WorldLoop) -> BudgetTick:
        self._last = now
        # jobs over their own budget: the loop's rule (gpufleet.loop.budgets.overrun) on the store's ledger
        overruns = self.service.run(now)
        return BudgetTick(list(self.service.throttles), list(overruns))

    def refuse(self, job: Job, now: float, loop: WorldLoop) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class Periodic:
    """A duty the leader runs every ``interval_s`` before its step (e.g. adopting pods)."""

    name: str
    interval_s: float
    run: Callable[[float], object]


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
        periodic: Sequence[Periodic] = (),
        on_cycle: Callable[[float], None] | None = None,
    ) -> None:
        self.db = db
        # metrics hook: called with each scheduling cycle's duration in seconds (None: not observed);
        # Server.app() points it at the API's metrics when the API runs in this process
        self.on_cycle = on_cycle
        self.periodic = list(periodic)  # the leader's other duties (adoption, custom resources, ...)
        self._periodic_last: dict[str, float] = {}
        self.backend = backend
        self.profile = profile or Profile()
        self.config = config or ControllerConfig()
        self.clock = clock or WallClock()
        self.leadership = leadership or self._default_leadership()
        self.catalog = catalog
        self.budgets = budgets or BudgetService(db, self.clock, interval_s=self.config.budget_interval_s)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leader = False
        self._ready = False
        self.step_ms = 0.0
        self._reset_state()

    def _default_leadership(self) -> Leadership:
        if self.db.is_postgres:
            return PgLeadership(self.db.engine)
        url = str(self.db.engine.url)
        path = Path(url.split("///", 1)[1] + ".leader.lock") if "///" in url else Path("gpufleet.leader.lock")
        return FileLeadership(path)

    def _reset_state(self, inventory: Sequence[Node] = ()) -> None:
        cfg = self.config
        self.state = SqlState(self.db, quota_refresh_s=cfg.quota_refresh_s)
        self.loop = WorldLoop(
            self.state,
            self.backend,
            self.profile.build(),
            self._price,
            LoopConfig(
                min_cycle_gap_s=cfg.min_cycle_gap_s,
                cycle_interval_s=cfg.cycle_interval_s,
                cycle_cost_factor=cfg.cycle_cost_factor,
                grace_s=cfg.grace_s,
                max_retries=cfg.max_retries,
            ),
            budgets=ServiceBudgets(self.budgets),
            max_gpus=max([8, *(n.gpu_count for n in inventory)]),
        )
        self.loop.run_ending = self._run_ending
        self.loop.on_cycle = self._cycle_done
        self._last_publish = -math.inf
        self._publish_s = 0.0
        self._last_heartbeat = -math.inf
        self._last_telemetry = -math.inf
        self._progress: dict[tuple[str, int], ProgressRead] = {}  # run → what is known of its progress file

    # -- the loop's state, as tools and tests read it --------------------------------------------------
    @property
    def scheduler(self) -> Scheduler:
        return self.loop.scheduler

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.loop.cluster.snapshot

    @property
    def pending(self) -> dict[str, Job]:
        return self.loop.pending

    @property
    def active(self) -> dict[str, ActiveRun]:
        return self.loop.active

    @property
    def running(self) -> dict[str, RunningJob]:
        return self.loop.running

    @property
    def nodes(self) -> dict[str, Node]:
        return {name: ns.node for name, ns in self.loop.cluster.live.items()}

    @property
    def _waiting(self) -> Mapping[str, str]:
        return self.loop.waiting

    @property
    def _statuses(self) -> Mapping[str, Status]:
        """Why each queued job still waits after the last cycle, with the kind of wait."""
        decisions = self.loop.decisions
        return decisions.waiting if decisions is not None else {}

    @property
    def stats(self) -> StepStats:
        st = self.loop.stats
        return StepStats(st.cycles, st.last_cycle_ms, self.step_ms, st.placed, st.ended)

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
        self.loop.dirty = True
        self._wake.set()

    def ready(self) -> bool:
        """Ready to serve: a follower always is; a leader once it has recovered."""
        return self._ready

    @property
    def is_leader(self) -> bool:
        return self._leader

    def _loop(self) -> None:
        follower_ready_at = time.monotonic() + 1.0
        # after a transient backend error: wait 0.2 s, doubling up to 5 s; a good tick starts again
        first_backoff_s, most_backoff_s = 0.2, 5.0
        backoff_s = 0.0
        while not self._stop.is_set():
            try:
                self.tick()
                backoff_s = 0.0
            except BackendError as e:
                # a failed list, a 5xx, a timeout, a fenced write: the world is still as the leader
                # knew it, so leadership and state are kept and the step is tried again. Only a lost
                # lease (still_held) or a store failure (below) drops them.
                backoff_s = min(most_backoff_s, max(first_backoff_s, backoff_s * 2))
                log.warning("controller step: %s; trying again in %.1f s (leadership and state kept)", e, backoff_s)
                self._stop.wait(backoff_s)
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
        """One turn of the loop: win or keep leadership, then step (leader) or heartbeat (follower).

        A leader recovers before its first step; a recovery that failed (a backend error, which
        :meth:`_loop` retries without giving up the lease) is tried again at the next tick, never
        skipped. A Lease renews on its own thread (:class:`~gpufleet.k8s.adapter.lease.LeaseLeadership`),
        so a slow step does not cost the lease; its ``still_held`` only reads that thread's state."""
        if self._leader and not self.leadership.still_held():
            self._leader_lost()
        if not self._leader and self.leadership.try_acquire():
            log.info("replica %s is now the scheduling leader", self.config.replica)
            self._leader = True
            self._ready = False
        if self._leader and not self._ready:
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
        now = self.clock.now()
        inventory = self.backend.inventory()
        self._reset_state(inventory)
        loop, state = self.loop, self.state
        state.sync_nodes(inventory, {n.name: self._price(n) for n in inventory}, now)
        for node in inventory:
            loop.cluster.request(node, self._price(node), now)
            loop.cluster.ready(node.name, now)
        with self.db.session() as s:
            active = repo.jobs_in_states(s, list(ACTIVE))
            runs = {(r.job_id, r.run): r for r in repo.open_runs(s)}
        for row in active:
            job = job_from_row(row)
            state.recovered(row.id, row.seq)
            run_row = runs.get((row.id, row.run))
            stored = run_row.stop_requested if run_row is not None else None
            stopping = StopReason.parse(stored) if stored else None  # the stop's stored text, typed again
            got = self.backend.recover(row.id, row.run)
            gone = sorted({p.node for p in job.placement} - {n.name for n in inventory})
            if got.state is RecoveredState.RUNNING and got.handle is not None and gone:
                # placed on a node that is no longer there (deleted while no leader ran): lost
                self._adopt(job, row.run, got.handle.pid, got.handle.started_at, stopping, now)
                loop.handle(
                    BackendEvent(
                        EventKind.LOST,
                        now,
                        job_id=row.id,
                        run=row.run,
                        reason=f"node {gone[0]} is gone",
                        started_at=got.handle.started_at,
                        ended_at=now,
                    ),
                    now,
                )
            elif got.state is RecoveredState.RUNNING and got.handle is not None:
                self._adopt(job, row.run, got.handle.pid, got.handle.started_at, stopping, now)
            elif got.state is RecoveredState.ENDED and got.event is not None:
                self._adopt(job, row.run, None, got.event.started_at, stopping, now)
                loop.handle(got.event, now)
            elif row.state == "ADMITTED" and (run_row is None or run_row.started_at is None):
                if state.requeue_unlaunched(job, row.run, "launch interrupted by a controller restart", now):
                    job.state = JobState.PENDING
                    job.placement = ()
                    loop.pending[job.id] = job
            else:
                started = run_row.started_at if run_row else None
                self._adopt(job, row.run, None, started, stopping, now)
                loop.handle(
                    BackendEvent(
                        EventKind.LOST,
                        now,
                        job_id=row.id,
                        run=row.run,
                        reason="the run was gone when the controller restarted",
                        started_at=started,
                        ended_at=self._last_seen_alive(now),
                    ),
                    now,
                )
        with self.db.session() as s:
            for row in repo.jobs_in_states(s, ["PENDING"]):
                state.recovered(row.id, row.seq)
                loop.pending[row.id] = job_from_row(row)
        loop.dirty = True
        log.info("recovered: %d node(s), %d running, %d pending", len(inventory), len(loop.active), len(loop.pending))

    def _last_seen_alive(self, now: float) -> float:
        """When a lost run was last known alive: the previous leader's last heartbeat, else now."""
        with self.db.session() as s:
            row = repo.leader(s, now, stale_after_s=math.inf)
            return min(now, row.heartbeat_at) if row is not None else now

    def _adopt(
        self,
        job: Job,
        run: int,
        pid: int | None,
        started_at: float | None,
        stopping: StopReason | None,
        now: float,
    ) -> None:
        """A run the store knows joins the loop's running set (RUNNING in the store if it was ADMITTED)."""
        started = started_at if started_at is not None else now
        if job.state is JobState.ADMITTED:
            with self.db.session() as s:
                repo.mark_run_started(s, job.id, run, pid=pid or 0, started_at=started)
                row = repo.get_job(s, job.id)
                repo.transition(
                    s, row, "RUNNING", f"adopted after restart (pid {pid})", now, started_at=row.started_at or started
                )
            job.transition(JobState.RUNNING, now, "adopted")
        self.loop.adopt(job, run, started, stopping, now)

    def _price(self, node: Node) -> float:
        if self.config.node_price_usd_per_hour is not None:
            return self.config.node_price_usd_per_hour
        if node.hourly_price_usd is not None:
            return node.hourly_price_usd
        if not node.gpu_count:
            return 0.0
        try:
            if self.catalog is None:
                self.catalog = load_catalog()
            return self.catalog.node_hour_usd(node)
        except GpufleetError as e:
            log.warning("no catalog price for node %s (%s): metered at $0/h; set node_price_usd_per_hour", node.name, e)
            return 0.0

    # -- the step --------------------------------------------------------------------------------------
    def _run_periodic(self, now: float) -> None:
        """The leader's periodic duties, each isolated: one that fails is logged, never fatal."""
        for p in self.periodic:
            if now - self._periodic_last.get(p.name, -math.inf) < p.interval_s:
                continue
            self._periodic_last[p.name] = now
            try:
                p.run(now)
            except Exception:
                log.exception("periodic duty %s failed", p.name)

    def step(self) -> None:
        t0 = time.perf_counter()
        now = self.clock.now()
        self._run_periodic(now)
        cycles = self.loop.stats.cycles
        self.loop.step(now)
        self._publish(now)
        if self.loop.stats.cycles != cycles:  # the whole step: store sync, cycle, binds, queue publication
            self.step_ms = (time.perf_counter() - t0) * 1000
        self._heartbeat(force=False)
        if now - self._last_telemetry >= self.config.telemetry_interval_s:
            self._last_telemetry = now
            self._telemetry()
            self._read_progress()

    def run_cycle(self, now: float) -> Decisions:
        return self.loop.run_cycle(now)

    # -- publishing ------------------------------------------------------------------------------------
    def queue_entries(self, now: float) -> list[dict[str, Any]]:
        """The queue as published: the last cycle's order (jobs it has not seen after, by submit
        time), why each waits, and its estimate (:mod:`gpufleet.scheduling.estimate`: blocked with a
        short reason, or a start anchored on the running jobs' expected ends). Capacity is that of
        the schedulable nodes; what a running job holds on a node that is not counts for nothing."""
        order = [j for j in self.loop.order if j.id in self.pending]
        seen = {j.id for j in order}
        order += sorted((j for j in self.pending.values() if j.id not in seen), key=lambda j: (j.submit_time, j.id))
        snap = self.snapshot
        live = snap.schedulable[: snap.n]
        capacity = int(snap.gpu_count[: snap.n][live].sum()) * MILLI
        grace = self.config.grace_s
        releases = []
        for job_id, rj in self.running.items():
            ar = self.active.get(job_id)
            end = expected_end(rj.job, now, grace_s=grace, stopping=ar is not None and ar.stopping is not None)
            milli = sum(a.milli * len(a.gpus) for a in rj.assignments if a.node < snap.n and live[a.node])
            releases.append(Release(end, milli))
        statuses = self._statuses
        estimates = estimate_queue(order, statuses, releases, capacity, now, can_grow=self.loop.provisioner is not None)
        out = []
        for i, j in enumerate(order):
            status = statuses.get(j.id)
            est = estimates[j.id]
            out.append(
                {
                    "job": j.id,
                    "position": i + 1,
                    "reason": status.reason if status is not None else "waiting for the next scheduling cycle",
                    "estimated_start": est.start,
                    "blocked": est.blocked,
                }
            )
        return out

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

    def _cycle_done(self, seconds: float) -> None:
        """A scheduling cycle ended: tell the metrics hook (a failing hook never stops scheduling)."""
        hook = self.on_cycle
        if hook is None:
            return
        try:
            hook(seconds)
        except Exception:
            log.exception("the cycle metrics hook failed")

    def _run_ending(self, job_id: str, run: int) -> None:
        """A run ends: its last progress reports are read (the newest stored even without a token)
        before it leaves the running set, and what its limits dropped is logged once."""
        self._read_progress(only=job_id)
        st = self._progress.pop((job_id, run), None)
        if st is not None and (st.thinned or st.skipped or st.ignored):
            log.info(
                "progress of %s run %d: %d rows stored; %d lines thinned, %d bytes of backlog skipped, "
                "%d lines ignored",
                job_id,
                run,
                st.stored,
                st.thinned,
                st.skipped,
                st.ignored,
            )

    def _read_progress(self, only: str | None = None) -> None:
        """New lines of the progress files running jobs write (``$GPUFLEET_PROGRESS_FILE``, JSON
        Lines, see :func:`gpufleet.cost.forecast.parse_progress_file`) become progress rows, as if
        reported through the API (``only``: just that job, read once more as its run ends). Only
        whole lines are read; after a restart, reports already stored (by time) are skipped.

        A job cannot flood the store or hold up the loop: each look reads at most
        ``PROGRESS_READ_LIMIT`` bytes of a file (the newest, when more wait: a backlog is skipped,
        never re-read), ignores lines longer than ``MAX_PROGRESS_LINE_BYTES`` or over the API's
        limits (:class:`~gpufleet.wire.ProgressIn`: 32 metrics...) one by one, and stores at most
        ``progress_rows_per_look`` rows and ``progress_rows_per_s`` sustained per run (a token
        bucket): the lines in between are thinned evenly and the newest report is always kept. A
        job event says so, once per run."""
        path_of = getattr(self.backend, "progress_path", None)
        if path_of is None:
            return
        now = self.clock.now()
        rows: list[tuple[str, ProgressReport]] = []
        events: list[tuple[str, str, str]] = []  # (job id, its state, reason): job events that keep the state
        for job_id, ar in self.active.items():
            if only is None or job_id == only:
                path = path_of(job_id, ar.run)
                if path is not None:
                    fresh = self._progress_rows(job_id, ar, path, now, ending=only is not None, events=events)
                    rows += [(job_id, r) for r in fresh]
        if rows or events:
            with self.db.session() as s:
                repo.add_progress_reports(s, rows)
                for job_id, state, why in events:
                    repo.add_job_note(s, job_id, time=now, state=state, reason=why)

    def _progress_rows(
        self, job_id: str, ar: ActiveRun, path: Path, now: float, *, ending: bool, events: list[tuple[str, str, str]]
    ) -> list[ProgressReport]:
        cfg = self.config
        st = self._progress.get((job_id, ar.run))
        if st is None:
            st = self._progress[(job_id, ar.run)] = ProgressRead(0, float(cfg.progress_burst), now)
        st.tokens = min(float(cfg.progress_burst), st.tokens + max(0.0, now - st.refilled) * cfg.progress_rows_per_s)
        st.refilled = now
        lines = progress_lines(st, path)
        if (lines or st.pending is not None) and not st.known:
            with self.db.session(readonly=True) as s:
                st.seen = repo.latest_progress_time(s, job_id)
            st.known = True
        budget = min(cfg.progress_rows_per_look, int(st.tokens))
        if ending:  # the run's last look stores its newest report, token or not
            budget = max(budget, 1)
        fresh = pick_progress(st, lines, budget, str(path))
        st.tokens -= len(fresh)
        st.stored += len(fresh)
        if fresh:
            st.seen = max(fresh[-1].time, st.seen if st.seen is not None else fresh[-1].time)
        state = str(ar.job.state)
        if (st.thinned or st.skipped) and not st.told_thinned:
            st.told_thinned = True
            why = (
                f"progress throttled: the progress file grows faster than gpufleet reads it (at most "
                f"{PROGRESS_READ_LIMIT // 1024} KiB a look) or stores it (at most {cfg.progress_rows_per_look} "
                f"rows a look, {cfg.progress_rows_per_s:g} a second, bursts of {cfg.progress_burst}); "
                "lines in between are dropped, the newest report is always kept"
            )
            log.warning("job %s run %d: %s", job_id, ar.run, why)
            events.append((job_id, state, why))
        if st.ignored and not st.told_ignored:
            st.told_ignored = True
            why = (
                f"progress lines ignored: {st.first_error} (a line is one JSON report of at most "
                f"{MAX_PROGRESS_LINE_BYTES} bytes, within the limits of POST /v1/jobs/{{id}}/progress); "
                "the other lines are read"
            )
            log.warning("job %s run %d: %s", job_id, ar.run, why)
            events.append((job_id, state, why))
        return fresh

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
