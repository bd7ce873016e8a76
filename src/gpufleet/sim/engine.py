"""The discrete-event simulator: the real scheduling cycle against a simulated cluster.

All state lives in one :class:`Simulation`; only its event loop moves the :class:`SimClock`.
Events are keyed on ``(time, kind priority, sequence)`` so ties break the same way every run,
and all randomness comes from one seeded generator: the same seed gives the same result.

What is simulated: node pools (static nodes and autoscaled pools with provisioning delays),
spot interruptions (a hazard per node-hour with a notice before the node is taken back; jobs that
checkpoint save their work on the notice), checkpoint/restore (work since the last checkpoint is
lost on preemption), run failures with retries, max-runtime timeouts, and the fall-back of a job
to on-demand capacity after N spot interruptions. Every allocated second is a ledger segment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.clock import SimClock
from gpufleet.cost.budgets import (  # budgets: the same pure rules as the controller and the API
    LIMIT_PERCENT,
    Budget,
    BudgetExceededError,
    ThrottleRule,
    budget_status,
    check_block,
    enforcing,
    estimate_for,
    throttled_cycle,
)
from gpufleet.cost.ledger import Ledger, SegmentHandle, allocate
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import Job, JobState
from gpufleet.model.node import CapacityType, Node, NodePool
from gpufleet.scheduling.cycle import ClusterState, Decisions, Scheduler
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.snapshot import Assignment
from gpufleet.sim.cluster import SimCluster
from gpufleet.sim.events import EventQueue, Kind
from gpufleet.sim.results import JobRecord, Sample, SimResult
from gpufleet.sim.traces.base import Trace

DEFAULT_RUNTIME_S = 3600.0  # a trace job with no duration runs this long


@dataclass(frozen=True, slots=True)
class SimOptions:
    seed: int = 0
    spot_hazard_per_node_hour: float = 0.0  # interruptions per spot node-hour
    spot_notice_s: float = 120.0
    failure_prob: float = 0.0  # chance that a run fails at a uniformly random point
    max_retries: int = 2
    sample_interval_s: float = 300.0
    cycle_interval_s: float = 10.0  # least time between two scheduling cycles (0: one per event time)
    autoscale_interval_s: float = 60.0
    horizon_s: float | None = None  # stop after this much simulated time
    budget_interval_s: float = 60.0  # budgets: how often thresholds and throttles are evaluated


@dataclass(slots=True)
class _Run:
    job: Job
    assignments: tuple[Assignment, ...]
    start: float
    seq: int
    handles: tuple[SegmentHandle, ...] = ()  # open ledger segments, one per pod
    notice_at: float | None = None  # spot notice received (work checkpointed then)


@dataclass
class Simulation:
    trace: Trace
    scheduler: Scheduler
    pricer: Callable[[Node], float]
    nodes: Sequence[Node] = ()
    pools: Sequence[NodePool] = ()
    options: SimOptions = field(default_factory=SimOptions)
    name: str = "simulation"
    # budgets enforced as in production (block at submit, throttles in cycles, alerts recorded);
    # periods are computed on the simulated clock (t = 0 is 1970-01-01 00:00 UTC, a month's start)
    budgets: Sequence[Budget] = ()

    clock: SimClock = field(init=False)
    events: EventQueue = field(init=False)
    cluster: SimCluster = field(init=False)
    ledger: Ledger = field(init=False)
    jobs: dict[str, Job] = field(init=False)
    pending: dict[str, Job] = field(init=False)
    runs: dict[str, _Run] = field(init=False)
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.clock = SimClock(0.0)
        self.events = EventQueue()
        max_gpus = max([8, *(n.gpu_count for n in self.nodes), *(p.gpus_per_node for p in self.pools)])
        self.cluster = SimCluster(self.pricer, max_gpus=max_gpus)
        self.ledger = Ledger()
        self.jobs = {}
        self.pending = {}
        self.runs = {}
        self.rng = np.random.default_rng(self.options.seed)
        self._cycle_at: float | None = None  # when the next cycle is due (None: none asked for)
        self._last_cycle = -math.inf
        self._submitted = 0
        self._run_seq = 0
        self._events_processed = 0
        self._samples: list[Sample] = []
        self._records: list[JobRecord] = []
        self._gpu_seconds: dict[str, float] = {}
        self._capacity: dict[str, str] = {}
        self._allocated_milli = 0
        # budgets
        self._over_since: dict[tuple[str, float], float] = {}
        self._alerted: set[tuple[str, float, float]] = set()
        self._budget_alerts: list[dict[str, object]] = []
        self._budget_blocked: list[dict[str, object]] = []
        self._throttles: list[ThrottleRule] = []
        self._throttled = False
        self._last_budget_eval = -math.inf

    # -- set-up ----------------------------------------------------------------------------------------
    def _setup(self) -> None:
        for node in self.nodes:
            self._request_node(node)
            self._node_ready(node.name)
        for pool in self.pools:
            self.cluster.add_pool(pool)
            for _ in range(pool.initial_nodes or pool.min_nodes):
                node = self._request_node(self.cluster.new_pool_node(pool.name))
                self._node_ready(node.name)
        for tj in self.trace.jobs:
            self.events.push(tj.submit_time, Kind.SUBMIT, tj)
        self.events.push(0.0, Kind.SAMPLE)
        if self.scheduler.config.autoscaler.enabled and any(p.max_nodes > 0 for p in self.pools):
            self.events.push(0.0, Kind.AUTOSCALE_TICK)

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        self._setup()
        horizon = self.options.horizon_s
        while self.events:
            ev = self.events.pop()
            if horizon is not None and ev.time > horizon:
                break
            self.clock.advance_to(ev.time)
            self._events_processed += 1
            kind = ev.kind
            if kind is Kind.JOB_END:
                self._on_job_end(ev.payload)
            elif kind is Kind.SUBMIT:
                self._on_submit(ev.payload)
            elif kind is Kind.CYCLE:
                self._on_cycle()
            elif kind is Kind.NODE_READY:
                self._node_ready(ev.payload)  # type: ignore[arg-type]
                self._want_cycle()
            elif kind is Kind.SPOT_NOTICE:
                self._on_spot_notice(ev.payload)  # type: ignore[arg-type]
            elif kind is Kind.NODE_INTERRUPT:
                self._on_interrupt(ev.payload)  # type: ignore[arg-type]
            elif kind is Kind.AUTOSCALE_TICK:
                self._on_tick()
            elif kind is Kind.SAMPLE:
                self._sample()
                if not self._finished():
                    self.events.push(self.clock.now() + self.options.sample_interval_s, Kind.SAMPLE)
        return self._result()

    def _finished(self) -> bool:
        return self._submitted == len(self.trace.jobs) and not self.pending and not self.runs

    def _want_cycle(self) -> None:
        """Ask for a cycle: now, or ``cycle_interval_s`` after the last one (events in between
        are handled together, as a scheduler running on a short timer would)."""
        if self._cycle_at is not None:
            return  # one is already due
        t = max(self.clock.now(), self._last_cycle + self.options.cycle_interval_s)
        self._cycle_at = t
        self.events.push(t, Kind.CYCLE)

    # -- handlers --------------------------------------------------------------------------------------
    def _on_submit(self, tj: object) -> None:
        from gpufleet.sim.traces.base import TraceJob

        assert isinstance(tj, TraceJob)
        self._submitted += 1
        job = Job(id=f"j{self._submitted:06d}", spec=tj.spec, submit_time=tj.submit_time)
        self.jobs[job.id] = job
        refused = self._budget_block(job) if self.budgets else None
        if refused is not None:  # budgets: refused at submission, as the API would (402)
            self._end(job, JobState.CANCELLED, refused)
            return
        self.pending[job.id] = job
        self._want_cycle()

    def _on_tick(self) -> None:
        if self._finished() and not any(ps.live > ps.pool.min_nodes for ps in self.cluster.pool_states()):
            return
        now = self.clock.now()
        state = ClusterState(
            self.cluster.snapshot, list(self.pending.values()), self.cluster.running, self.cluster.pool_states()
        )
        self._apply(self.scheduler.autoscale(state, now), now)
        self.events.push(now + self.options.autoscale_interval_s, Kind.AUTOSCALE_TICK)

    def _on_cycle(self) -> None:
        now = self.clock.now()
        self._cycle_at = None
        self._last_cycle = now
        if not self.pending:
            return  # nothing waits: a cycle would decide nothing (scale-down runs on the timer)
        state = ClusterState(
            snapshot=self.cluster.snapshot,
            pending=list(self.pending.values()),
            running=self.cluster.running,
            pools=self.cluster.pool_states(),
        )
        if self.budgets:  # budgets: alerts and throttles on their timer, throttles applied to the cycle
            self._evaluate_budgets(now)
            rules = self._throttles
            decisions = throttled_cycle(self.scheduler, state, rules, now, restore=self._throttled and not rules)
            self._throttled = bool(rules)
        else:
            decisions = self.scheduler.cycle(state, now)
        self._apply(decisions, now)
        self._fail_unschedulable(decisions, now)

    def _apply(self, d: Decisions, now: float) -> None:
        # preemptions first: their room is for the preemptor in the next cycle
        for p in d.preemptions:
            if p.victim.job.id in self.runs:
                self._stop(p.victim.job.id, now, reason=p.reason, preempted=True)
        if d.preemptions:
            self._want_cycle()
        for pl in d.placements:
            self._start(pl.job, pl.assignments, now)
        for up in d.scale_up:
            pool = self.cluster.pools[up.pool]
            for _ in range(up.count):
                node = self._request_node(self.cluster.new_pool_node(up.pool))
                self.events.push(now + pool.provisioning_delay_s, Kind.NODE_READY, node.name)
        for down in d.scale_down:
            self._remove_node(down.node, now)

    def _fail_unschedulable(self, d: Decisions, now: float) -> None:
        """Jobs that can never run (nothing running, arriving or provisioning could change it)."""
        if d.placements or d.preemptions or d.scale_up or self.runs or not self.pending:
            return
        if self._submitted < len(self.trace.jobs):
            return
        if any(sn.ready_at is None for sn in self.cluster.live_nodes()):
            return
        for job in list(self.pending.values()):
            st = d.waiting.get(job.id)
            del self.pending[job.id]
            self._end(job, JobState.FAILED, f"unschedulable: {st.reason if st else 'no capacity'}")

    # -- budgets -------------------------------------------------------------------------------------
    def _usd_per_gpu_hour(self) -> float:
        """The dearest whole-node price per GPU among the nodes (as the API estimates)."""
        return max(
            (sn.hourly_usd / sn.node.gpu_count for sn in self.cluster.live_nodes() if sn.node.gpu_count),
            default=0.0,
        )

    def _scope_spend(self, budget: Budget, start: float, now: float) -> float:
        if now <= start:
            return 0.0
        alloc = allocate(self.ledger, start, now, budget.scope.aggregates, as_of=now)
        return float(sum(r.total_cost_usd for r in alloc.rows if budget.scope.matches(r.key)))

    def _budget_block(self, job: Job) -> str | None:
        """Why a ``block`` budget refuses ``job`` now (committed + its estimate past the limit), or None."""
        now = self.clock.now()
        price = self._usd_per_gpu_hour()
        cost = estimate_for(job, price, now).cost_usd
        for b in self.budgets:
            if b.action != "block" or not b.enabled or not b.covers_job(job):
                continue
            period = b.period_at(now)
            if not period.start <= now < period.end:
                continue
            unfinished = [*self.pending.values(), *(r.job for r in self.runs.values())]
            committed = self._scope_spend(b, period.start, now) + sum(
                estimate_for(j, price, now).cost_usd for j in unfinished if b.covers_job(j)
            )
            since = self._over_since.get((b.id, period.start))
            in_grace = since is not None and b.grace_s > 0 and now - since < b.grace_s
            if check_block(b, committed, cost, in_grace=in_grace).fits:
                continue
            if since is None and b.grace_s > 0:
                self._over_since[(b.id, period.start)] = now  # the grace window starts with this job
                continue
            err = BudgetExceededError(b, committed, cost)
            self._budget_blocked.append(
                {
                    "job_id": job.id,
                    "time": now,
                    "team": job.team,
                    "budget": b.name,
                    "limit_usd": b.limit_usd,
                    "committed_usd": round(committed, 2),
                    "job_cost_usd": round(cost, 2),
                }
            )
            return f"budget_exceeded: {err.message}"
        return None

    def _evaluate_budgets(self, now: float) -> None:
        """Thresholds crossed (recorded once per period, as alerts) and the throttles in force."""
        if now - self._last_budget_eval < self.options.budget_interval_s:
            return
        self._last_budget_eval = now
        rules = []
        for b in self.budgets:
            if not b.enabled:
                continue
            period = b.period_at(now)
            if not period.start <= now < period.end:
                continue
            st = budget_status(b, period, self._scope_spend(b, period.start, now), now)
            for th in st.crossed:
                key = (b.id, period.start, th.percent)
                if key not in self._alerted:
                    self._alerted.add(key)
                    self._budget_alerts.append(
                        {
                            "time": now,
                            "budget": b.name,
                            "threshold": th.percent,
                            "severity": th.severity,
                            "spend_usd": round(st.spend_usd, 2),
                            "limit_usd": b.limit_usd,
                        }
                    )
                if th.percent == LIMIT_PERCENT:
                    self._over_since.setdefault((b.id, period.start), now)
            if st.over:
                self._over_since.setdefault((b.id, period.start), now)
            if b.action == "throttle" and enforcing(b, self._over_since.get((b.id, period.start)), now):
                rules.append(ThrottleRule(b.name, b.scope, b.throttle))
        self._throttles = rules

    # -- runs --------------------------------------------------------------------------------------------
    def _start(self, job: Job, assignments: tuple[Assignment, ...], now: float) -> None:
        snap = self.cluster.snapshot
        job.transition(JobState.ADMITTED, now, "placed")
        job.transition(
            JobState.RUNNING, now, "started on " + ",".join(sorted({snap.names[a.node] for a in assignments}))
        )
        del self.pending[job.id]
        job.placement = tuple(snap.placement_of(a) for a in assignments)
        job.start_time = now
        if job.first_start_time is None:
            job.first_start_time = now
        self._run_seq += 1
        handles = tuple(self.ledger.open_pod(job, p, now) for p in job.placement)
        run = _Run(job, assignments, now, self._run_seq, handles)
        self.runs[job.id] = run
        gtype = snap.gpu_types[int(snap.gpu_type[assignments[0].node])] if job.spec.gpu.count else ""
        self.cluster.running[job.id] = RunningJob(job, assignments, gtype)
        for a in assignments:
            self.cluster.nodes[snap.names[a.node]].jobs.add(job.id)
            self._allocated_milli += a.milli * len(a.gpus)
        self._capacity[job.id] = self.cluster.nodes[snap.names[assignments[0].node]].node.capacity_type.value
        # when does this run end, and how?
        duration = job.spec.duration_s if job.spec.duration_s is not None else DEFAULT_RUNTIME_S
        remaining = max(0.0, duration - job.work_done_s)
        end, outcome = now + remaining, "done"
        if job.spec.max_runtime_s is not None:
            limit = now + max(0.0, job.spec.max_runtime_s - job.work_done_s)
            if limit < end:
                end, outcome = limit, "timeout"
        if self.options.failure_prob > 0 and self.rng.random() < self.options.failure_prob:
            fail_at = now + (end - now) * float(self.rng.random())
            if fail_at < end:
                end, outcome = fail_at, "failed"
        self.events.push(end, Kind.JOB_END, (job.id, run.seq, outcome))

    def _on_job_end(self, payload: object) -> None:
        assert isinstance(payload, tuple)
        job_id: str = payload[0]
        seq: int = payload[1]
        outcome: str = payload[2]
        run = self.runs.get(job_id)
        if run is None or run.seq != seq:
            return  # the run was stopped earlier (preempted or interrupted)
        now = self.clock.now()
        job = run.job
        if outcome == "done":
            self._release(run, now)
            job.work_done_s = job.spec.duration_s if job.spec.duration_s is not None else DEFAULT_RUNTIME_S
            self._end(job, JobState.SUCCEEDED, "exited 0")
        elif outcome == "timeout":
            self._release(run, now)
            self._end(job, JobState.TIMED_OUT, f"ran past max runtime {job.spec.max_runtime_s:.0f}s")
        else:
            failures = sum(1 for e in job.events if e.reason.startswith("run failed"))
            if failures < self.options.max_retries:
                self._stop(
                    job_id, now, reason=f"run failed; retry {failures + 1}/{self.options.max_retries}", preempted=False
                )
            else:
                self._release(run, now)
                self._end(job, JobState.FAILED, f"run failed after {failures} retries")
        self._want_cycle()

    def _end(self, job: Job, state: JobState, reason: str) -> None:
        now = self.clock.now()
        job.transition(state, now, reason)
        job.end_time = now
        self.scheduler.forget(job.id)

    def _stop(self, job_id: str, now: float, *, reason: str, preempted: bool, spot: bool = False) -> None:
        """Stop a running job and queue it again; work since its last checkpoint is lost."""
        run = self.runs[job_id]
        job = run.job
        saved = job.checkpointed_progress_at(now)
        if run.notice_at is not None and job.spec.checkpoint_interval_s:
            saved = max(saved, job.progress_at(run.notice_at))  # checkpointed on the spot notice
        job.lost_work_s += job.progress_at(now) - saved
        self._release(run, now)
        job.work_done_s = saved
        job.transition(JobState.PREEMPTED, now, reason)
        job.transition(JobState.PENDING, now, "requeued" + (" from checkpoint" if saved > 0 else ""))
        job.restarts += 1
        if preempted:
            job.preemptions += 1
        if spot:
            job.spot_restarts += 1
            if job.spot_restarts >= self.scheduler.config.max_spot_restarts:
                job.on_demand_only = True
        job.start_time = None
        job.placement = ()
        self.pending[job_id] = job
        self.scheduler.job_stopped(job_id)

    def _release(self, run: _Run, now: float) -> None:
        job = run.job
        snap = self.cluster.snapshot
        del self.runs[job.id]
        del self.cluster.running[job.id]
        self.scheduler.release(job, run.assignments, snap, now)
        for a in run.assignments:
            self._allocated_milli -= a.milli * len(a.gpus)
            self.cluster.nodes[snap.names[a.node]].jobs.discard(job.id)
        for h in run.handles:
            seg = self.ledger.close(h, now)
            self._gpu_seconds[job.id] = self._gpu_seconds.get(job.id, 0.0) + seg.gpu_seconds

    # -- nodes -------------------------------------------------------------------------------------------
    def _request_node(self, node: Node) -> Node:
        """Ask for a node: billed from now, schedulable once ready."""
        now = self.clock.now()
        sn = self.cluster.request(node, now)
        self.ledger.open_node(node, hourly_usd=sn.hourly_usd, start=now)
        return node

    def _node_ready(self, name: str) -> None:
        now = self.clock.now()
        sn = self.cluster.nodes[name]
        if sn.removed_at is not None:
            return
        self.cluster.ready(name, now)
        hazard = self.options.spot_hazard_per_node_hour
        if sn.node.capacity_type is CapacityType.SPOT and hazard > 0:
            t = now + float(self.rng.exponential(3600.0 / hazard))
            sn.interrupt_at = t
            self.events.push(max(now, t - self.options.spot_notice_s), Kind.SPOT_NOTICE, name)
            self.events.push(t, Kind.NODE_INTERRUPT, name)

    def _on_spot_notice(self, name: str) -> None:
        sn = self.cluster.nodes[name]
        if sn.removed_at is not None:
            return
        self.cluster.cordon(name)
        now = self.clock.now()
        for job_id in sn.jobs:
            self.runs[job_id].notice_at = now

    def _on_interrupt(self, name: str) -> None:
        sn = self.cluster.nodes[name]
        if sn.removed_at is not None:
            return
        now = self.clock.now()
        for job_id in sorted(sn.jobs):
            if job_id in self.runs:
                self._stop(job_id, now, reason=f"spot interruption of node {name}", preempted=False, spot=True)
        self._remove_node(name, now)
        self._want_cycle()

    def _remove_node(self, name: str, now: float) -> None:
        sn = self.cluster.nodes[name]
        if sn.removed_at is not None:
            return
        self.cluster.remove(name, now)
        self.ledger.close_node(name, now)

    # -- outputs -----------------------------------------------------------------------------------------
    def _sample(self) -> None:
        now = self.clock.now()
        if self.budgets:  # budgets: alerts are also evaluated while nothing waits
            self._evaluate_budgets(now)
        total = sum(sn.node.gpu_count for sn in self.cluster.live_nodes())
        alloc = self._allocated_milli / MILLI
        self._samples.append(
            Sample(
                time=now,
                allocated_gpus=alloc,
                total_gpus=float(total),
                idle_gpus=total - alloc,
                queue_length=len(self.pending),
                running_jobs=len(self.runs),
                cost_rate_usd_per_hour=self.cluster.cost_rate_usd_per_hour(),
                nodes=sum(1 for _ in self.cluster.live_nodes()),
            )
        )

    def _result(self) -> SimResult:
        now = self.clock.now()
        # close what is still open (horizon reached): running jobs and live nodes
        for job_id in list(self.runs):
            self._release(self.runs[job_id], now)
        for sn in list(self.cluster.live_nodes()):
            self._remove_node(sn.node.name, now)
        self._sample()
        alloc = allocate(self.ledger, 0.0, max(now, 1e-6), ("job_id",))
        costs = {r.key[0]: float(r.total_cost_usd) for r in alloc.rows}
        records = []
        for job in self.jobs.values():
            spec = job.spec
            start = job.first_start_time
            end = job.end_time
            records.append(
                JobRecord(
                    job_id=job.id,
                    name=spec.name,
                    team=spec.team,
                    project=spec.project,
                    gpus=spec.total_gpu_milli / MILLI,
                    submit=job.submit_time,
                    start=start,
                    end=end,
                    state=job.state.value,
                    wait_s=None if start is None else start - job.submit_time,
                    jct_s=None if end is None else end - job.submit_time,
                    gpu_seconds=self._gpu_seconds.get(job.id, 0.0),
                    cost_usd=costs.get(job.id, 0.0),
                    preemptions=job.preemptions,
                    restarts=job.restarts,
                    lost_work_s=job.lost_work_s,
                    capacity_type=self._capacity.get(job.id, ""),
                    spot_restarts=job.spot_restarts,
                )
            )
        return SimResult(
            name=self.name,
            records=records,
            samples=self._samples,
            makespan=now,
            events_processed=self._events_processed,
            config={
                "trace": self.trace.name,
                "seed": self.options.seed,
                "cluster_cost_usd": float(alloc.totals.total_cost_usd),
                "idle_cost_usd": float(alloc.idle.total_cost_usd),
                **(
                    {"budget_blocked": self._budget_blocked, "budget_alerts": self._budget_alerts}
                    if self.budgets
                    else {}
                ),
            },
        )
