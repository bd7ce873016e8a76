"""The simulator: the world loop on a simulated clock, an in-memory store and a simulated cluster.

:class:`Simulation` is a discrete-event driver around :class:`~gpufleet.loop.world.WorldLoop` — the
same loop the server runs. It advances the :class:`SimClock` to the earliest of the next
submission of the trace, the simulated cluster's next event (a run ending, a node joining, a spot
notice or interruption: :class:`~gpufleet.sim.backend.SimBackend`), the loop's own next work (a
cycle, the autoscaler's timer) and the next sample, then runs one loop step. Ties break the same
way every run and all randomness comes from one seeded generator: the same seed gives the same
result. Every allocated second is a ledger segment in the in-memory store.

When every job has been submitted and nothing runs, arrives or is being provisioned, a cycle that
still leaves jobs waiting is final: they can never run and end FAILED ("unschedulable: ...").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpufleet.clock import SimClock
from gpufleet.cost.budgets.model import Budget
from gpufleet.cost.ledger import Ledger
from gpufleet.cost.spend import spend_report
from gpufleet.cost.waste import WastedRun, waste_cause, waste_gpu_hours
from gpufleet.errors import SchedulingError
from gpufleet.loop.budgets import BudgetEnforcer, LedgerBook
from gpufleet.loop.cluster import ClusterView
from gpufleet.loop.state import MemoryState, RunEnd
from gpufleet.loop.world import LoopConfig, WorldLoop
from gpufleet.model.job import Job, JobState
from gpufleet.model.node import Node, NodePool
from gpufleet.model.share import milli_gpus
from gpufleet.scheduling.cycle import Scheduler
from gpufleet.sim.backend import DEFAULT_RUNTIME_S, SimBackend, SimBackendOptions
from gpufleet.sim.results import JobRecord, Sample, SimResult
from gpufleet.sim.traces.base import Trace

__all__ = ["DEFAULT_RUNTIME_S", "SimOptions", "Simulation"]


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
    budget_interval_s: float = 60.0  # how often budget thresholds and throttles are evaluated
    # called as the run goes with (jobs ended, jobs in the trace), e.g. to draw a progress bar; the
    # engine does no I/O itself. Not part of the run's identity (no effect on the result).
    progress: Callable[[float, float], None] | None = field(default=None, compare=False, repr=False)


MAX_STEPS_AT_ONE_TIME = 10_000  # more steps than this at one simulated time: the loop is stuck


def job_id(i: int) -> str:
    """The id of the ``i``-th job of a trace (from 0)."""
    return f"j{i + 1:06d}"


def drive(
    clock: SimClock,
    backend: SimBackend,
    loop: WorldLoop,
    step: Callable[[float], None],
    arrivals: Sequence[float],
    submit: Callable[[int], None],
    *,
    sample: Callable[[float], None] | None = None,
    sample_interval_s: float = 300.0,
    horizon_s: float | None = None,
) -> int:
    """Run a world on a simulated clock until its workload is done (or ``horizon_s``).

    Each turn advances ``clock`` to the earliest of the next arrival (``arrivals``, sorted; the
    ``i``-th is handed to ``submit(i)``), the backend's next event, the loop's own next work and the
    next sample, then calls ``step(now)`` — the world's step, which runs the loop's. After a cycle
    that leaves jobs waiting when nothing runs, arrives or is provisioned any more, those jobs can
    never run: they end FAILED. The run ends when every arrival was submitted and no job waits or
    runs: later node events (a spot interruption drawn for next month, an idle node's scale-down)
    would only stretch the makespan and bill idle nodes nobody asked for. Returns the number of
    steps. Any world whose backend is the simulated cluster runs through here: the simulator
    (in-memory store) and the server's controller (SQL store) alike."""
    n = len(arrivals)
    submitted = 0
    steps = 0
    stalled = 0  # steps in a row at the same time
    next_sample = 0.0 if sample is not None else math.inf
    while True:
        now = clock.now()
        t = min(
            arrivals[submitted] if submitted < n else math.inf,
            backend.next_time(),
            loop.next_due(now),
            next_sample,
        )
        if t == math.inf or (horizon_s is not None and t > horizon_s):
            return steps
        stalled = stalled + 1 if t <= now else 0
        if stalled > MAX_STEPS_AT_ONE_TIME:  # a bug, not a workload: fail loudly rather than spin
            raise SchedulingError(f"the world loop makes no progress at t={now} (next work at {t})")
        clock.advance_to(max(t, now))
        now = clock.now()
        while submitted < n and arrivals[submitted] <= now:
            submit(submitted)
            submitted += 1
        step(now)
        steps += 1
        if submitted == n:
            _settle(loop, backend, now)
        finished = submitted == n and not loop.pending and not loop.active
        if sample is not None and (now >= next_sample or finished):
            sample(now)
            next_sample = now + sample_interval_s
        if finished:  # the workload is done: what nodes would do afterwards is nobody's bill
            return steps


def _settle(loop: WorldLoop, backend: SimBackend, now: float) -> None:
    """If nothing can change any more, the jobs still waiting never run: nothing runs, no node is
    on its way, and the autoscaler (if any) has had its chance — its wait threshold and two of its
    ticks past the oldest waiting job's submission — with a pool that could still grow."""
    if loop.active or not loop.pending or loop.dirty:
        return
    if loop.cluster.provisioning() or backend.adding():
        return
    cfg = loop.scheduler.config.autoscaler
    if loop.provisioner is not None and cfg.enabled and loop.cluster.can_grow():
        patience = cfg.wait_threshold_s + 2 * loop.config.autoscale_interval_s
        if any(now - j.submit_time < patience for j in loop.pending.values()):
            return
    loop.fail_waiting(now, lambda job_id: loop.waiting.get(job_id, "no capacity"))


class _SimState(MemoryState):
    """The in-memory store, also noting each requeued run's preemption waste (the GPU-hours redone,
    :mod:`gpufleet.cost.waste`): the simulator reports it by cause, as the server's ``/metrics`` does
    from its run rows. It reads the loop's run while the loop ends it (what it was asked to stop
    for, a spot notice, its node), which the loop forgets right after."""

    def __init__(self) -> None:
        super().__init__()
        self.wasted: list[WastedRun] = []
        self.loop: WorldLoop | None = None

    def run_ended(self, end: RunEnd, now: float) -> JobState:
        state = super().run_ended(end, now)
        if end.state is JobState.PENDING and self.loop is not None:
            self._note(end, self.loop)
        return state

    def _note(self, end: RunEnd, loop: WorldLoop) -> None:
        job = end.job
        ar = loop.active.get(job.id)
        stop = ar.stopping if ar is not None else None
        node = job.placement[0].node if job.placement else ""
        capacity = "spot" if node and loop.cluster.is_spot(node) else ""
        cause = waste_cause(end.outcome, stop.text if stop is not None else None, capacity)
        if cause is None:  # a failed run retried: not a preemption
            return
        started = end.started_at if end.started_at is not None else end.ended_at
        notice = ar.notice_at if ar is not None else None
        hours = waste_gpu_hours(
            milli_gpus(job.spec.total_gpu_milli),
            end.ended_at - started,
            job.spec.checkpoint_interval_s,
            None if notice is None else notice - started,
        )
        self.wasted.append(WastedRun(job.id, job.spec.team, cause, hours))


@dataclass
class Simulation:
    trace: Trace
    scheduler: Scheduler
    pricer: Callable[[Node], float]
    nodes: Sequence[Node] = ()
    pools: Sequence[NodePool] = ()
    options: SimOptions = field(default_factory=SimOptions)
    name: str = "simulation"
    # enforced as in production (block at submit, throttles in cycles, alerts recorded; a job's own
    # budget_usd stops it); periods are computed on the simulated clock (t = 0 is 1970-01-01 00:00
    # UTC, a month's start)
    budgets: Sequence[Budget] = ()

    clock: SimClock = field(init=False)
    state: _SimState = field(init=False)
    backend: SimBackend = field(init=False)
    loop: WorldLoop = field(init=False)
    jobs: dict[str, Job] = field(init=False)

    def __post_init__(self) -> None:
        o = self.options
        self.clock = SimClock(0.0)
        self.state = _SimState()
        self.backend = SimBackend(
            self.clock,
            self.nodes,
            self.pools,
            SimBackendOptions(o.seed, o.spot_hazard_per_node_hour, o.spot_notice_s, o.failure_prob),
        )
        # a book when budgets are enforced: the trace's, or jobs' own (JobSpec.budget_usd, stopped by
        # the loop when their cost reaches it, as the server stops them)
        own = any(tj.spec.budget_usd is not None for tj in self.trace.jobs)
        self.book = LedgerBook(self.budgets, self.state.ledger) if self.budgets or own else None
        self.enforcer = BudgetEnforcer(self.book, interval_s=o.budget_interval_s) if self.book is not None else None
        max_gpus = max([8, *(n.gpu_count for n in self.nodes), *(p.gpus_per_node for p in self.pools)])
        self.loop = WorldLoop(
            self.state,
            self.backend,
            self.scheduler,
            self.pricer,
            LoopConfig(
                min_cycle_gap_s=o.cycle_interval_s,
                cycle_interval_s=math.inf,  # a cycle when something changed, never on a bare timer
                autoscale_interval_s=o.autoscale_interval_s,
                max_retries=o.max_retries,
                grace_s=0.0,
            ),
            budgets=self.enforcer,
            max_gpus=max_gpus,
        )
        self.state.loop = self.loop
        self.jobs = {}
        self.steps = 0
        self._samples: list[Sample] = []

    @property
    def cluster(self) -> ClusterView:
        return self.loop.cluster

    @property
    def ledger(self) -> Ledger:
        return self.state.ledger

    # -- the driver --------------------------------------------------------------------------------
    def run(self) -> SimResult:
        for node in self.backend.inventory():
            self.loop.add_node(node, 0.0)
        trace_jobs = self.trace.jobs

        def submit(i: int) -> None:
            tj = trace_jobs[i]
            job = Job(id=job_id(i), spec=tj.spec, submit_time=tj.submit_time)
            self.jobs[job.id] = job
            if self.loop.refuse_submission(job, self.clock.now()) is None:
                self.state.submit(job)

        step = self.loop.step
        progress = self.options.progress
        if progress is not None:
            total = len(trace_jobs)

            def step(now: float) -> None:
                self.loop.step(now)
                progress(len(self.jobs) - len(self.loop.pending) - len(self.loop.active), total)

        self.steps = drive(
            self.clock,
            self.backend,
            self.loop,
            step,
            [tj.submit_time for tj in trace_jobs],
            submit,
            sample=self._sample,
            sample_interval_s=self.options.sample_interval_s,
            horizon_s=self.options.horizon_s,
        )
        return self._result()

    # -- outputs -----------------------------------------------------------------------------------
    def _sample(self, now: float) -> None:
        live = list(self.cluster.live_nodes())
        total = sum(ns.node.gpu_count for ns in live)
        alloc = milli_gpus(self.cluster.snapshot.allocated_milli())
        self._samples.append(
            Sample(
                time=now,
                allocated_gpus=alloc,
                total_gpus=float(total),
                idle_gpus=total - alloc,
                queue_length=len(self.loop.pending),
                running_jobs=len(self.loop.active),
                cost_rate_usd_per_hour=self.cluster.cost_rate_usd_per_hour(),
                nodes=len(live),
            )
        )

    def _result(self) -> SimResult:
        now = self.clock.now()
        # close what is still open (horizon reached): running jobs' segments and live nodes
        self.state.close_open(now)
        for ns in list(self.cluster.live_nodes()):
            self.cluster.remove(ns.node.name, now)
            self.state.node_removed(ns.node.name, now)
        self._sample(now)
        end = max(now, 1e-6)
        report = spend_report(self.ledger, 0.0, end, aggregate=("job",))  # what each job was charged
        costs = {r.key[0]: float(r.total_cost_usd) for r in report.rows}
        gpu_seconds: dict[str, float] = {}
        capacity: dict[str, tuple[float, str]] = {}
        for seg in self.ledger.segments():
            gpu_seconds[seg.job_id] = gpu_seconds.get(seg.job_id, 0.0) + seg.gpu_seconds
            last = capacity.get(seg.job_id)
            if last is None or seg.start >= last[0]:
                capacity[seg.job_id] = (seg.start, str(seg.capacity_type))
        records = []
        wasted: dict[str, float] = {}
        for w in self.state.wasted:
            wasted[w.job_id] = wasted.get(w.job_id, 0.0) + w.gpu_hours
        for job in self.jobs.values():
            spec = job.spec
            start = job.first_start_time
            end_t = job.end_time
            records.append(
                JobRecord(
                    job_id=job.id,
                    name=spec.name,
                    team=spec.team,
                    project=spec.project,
                    gpus=milli_gpus(spec.total_gpu_milli),
                    submit=job.submit_time,
                    start=start,
                    end=end_t,
                    state=job.state.value,
                    wait_s=None if start is None else start - job.submit_time,
                    jct_s=None if end_t is None else end_t - job.submit_time,
                    gpu_seconds=gpu_seconds.get(job.id, 0.0),
                    cost_usd=costs.get(job.id, 0.0),
                    preemptions=job.preemptions,
                    restarts=job.restarts,
                    lost_work_s=job.lost_work_s,
                    capacity_type=capacity[job.id][1] if job.id in capacity else "",
                    spot_restarts=job.spot_restarts,
                    waste_gpu_hours=wasted.get(job.id, 0.0),
                )
            )
        budget_out = (
            {"budget_blocked": self.enforcer.blocked, "budget_alerts": self.book.alerts}
            if self.enforcer is not None and self.book is not None
            else {}
        )
        return SimResult(
            name=self.name,
            records=records,
            samples=self._samples,
            wasted=list(self.state.wasted),
            makespan=now,
            events_processed=self.steps,
            config={
                "trace": self.trace.name,
                "seed": self.options.seed,
                "cluster_cost_usd": float(report.node_cost_usd),
                "idle_cost_usd": float(report.idle.total_cost_usd),
                **budget_out,
            },
        )
