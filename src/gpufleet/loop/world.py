"""The world loop: one step turns backend events, submissions and the clock into decisions.

:meth:`WorldLoop.step` at time ``now``:

1. backend events: runs that ended (success, failure — retried up to ``max_retries`` —, timeout,
   stop, loss) become job transitions and metering in the store; node events add nodes, cordon
   spot nodes on their interruption notice (running jobs checkpoint then) and remove nodes, whose
   jobs are requeued from their last checkpoint (after ``max_spot_restarts`` spot interruptions a job
   runs on on-demand capacity only);
2. the store: new submissions join the queue (a ``block`` budget may refuse them first);
   cancellations are picked up; quota changes reach the scheduler;
3. budgets, on their own timer: alerts, the throttles in force, jobs over their own budget stopped;
4. the scheduling cycle, when something changed (at most every ``min_cycle_gap_s``) or every
   ``cycle_interval_s``: preemptions become stop requests; placements are bound — the store commits
   ``PENDING → ADMITTED`` and the run before the launch, a launch that fails rolls the reservation
   back and ends that job only; scale-ups ask the backend for nodes;
5. the autoscaler's timer (backends that can provision): scale-ups for jobs still blocked and
   scale-downs of nodes idle past their TTL.

Each job's work is isolated: an exception handling one job's event is logged and the loop goes on
(a store error propagates: the world backs off). One loop, any world: the simulator calls it on a
simulated clock with an in-memory store and a simulated cluster, the server on the wall clock with
the SQL store and real processes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpufleet.backends.base import Backend, BackendEvent, Capability, EventKind, LaunchRequest, Provisioner
from gpufleet.cost.budgets.throttle import ThrottleRule, capacity_limits
from gpufleet.errors import GpufleetError, StoreError
from gpufleet.loop.budgets import BudgetTick
from gpufleet.loop.cluster import ClusterView
from gpufleet.loop.metering import Share, run_shares
from gpufleet.loop.state import RunEnd, StateStore
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import Job, JobState, StopKind, StopReason
from gpufleet.model.node import Node
from gpufleet.scheduling.admission import CapacityLimit, Need, constrained_infeasibility, infeasibility
from gpufleet.scheduling.cycle import Scheduler
from gpufleet.scheduling.decisions import ClusterState, Decisions, Placement
from gpufleet.scheduling.framework import Status
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.scheduling.snapshot import Assignment

log = logging.getLogger(__name__)

FOREIGN_INTERVAL_S = 5.0  # how often others' GPU usage is read from a backend that reports it

NodePricer = Callable[[Node], float]  # node → $ per node-hour


@dataclass(frozen=True, slots=True)
class LoopConfig:
    min_cycle_gap_s: float = 0.05  # least time between two cycles asked for by changes
    cycle_interval_s: float = 2.0  # a cycle at least this often while jobs wait (inf: only on changes)
    cycle_cost_factor: float = 0.0  # and at least this many times the last cycle's measured cost
    autoscale_interval_s: float = 60.0
    max_retries: int = 0  # a run that fails is retried (requeued) this many times before the job fails
    grace_s: float = 30.0  # a stop's grace period (SIGTERM → SIGKILL): time to checkpoint


@dataclass(slots=True)
class ActiveRun:
    job: Job
    run: int
    assignments: tuple[Assignment, ...]
    shares: tuple[Share, ...] = ()
    started_at: float | None = None
    stopping: StopReason | None = None  # why a stop was asked (a cancel, a preemption, its own budget)
    notice_at: float | None = None  # a spot interruption notice reached its node (it checkpointed then)
    lost_spot: bool = False  # stopped because a spot node of it is gone (a spot restart when it ends)


@dataclass(slots=True)
class LoopStats:
    cycles: int = 0
    last_cycle_ms: float = 0.0
    placed: int = 0
    ended: int = 0


class BudgetPolicy(Protocol):
    """Budget enforcement as the loop sees it (the same rules in every world, see loop/budgets.py)."""

    def due(self, now: float) -> bool: ...

    def next_due(self) -> float:
        """When the timer is next due (the earliest ``now`` for which :meth:`due` is true)."""
        ...

    def tick(self, now: float, loop: WorldLoop) -> BudgetTick: ...

    def refuse(self, job: Job, now: float, loop: WorldLoop) -> str | None:
        """Why a ``block`` budget refuses a new job (None: it may queue)."""
        ...


class _Reasons(Mapping[str, str]):
    """A cycle's waiting statuses as reasons, without copying them."""

    def __init__(self, statuses: Mapping[str, Status]) -> None:
        self._s = statuses

    def __getitem__(self, job_id: str) -> str:
        return self._s[job_id].reason

    def __iter__(self) -> Iterator[str]:
        return iter(self._s)

    def __len__(self) -> int:
        return len(self._s)


class WorldLoop:
    def __init__(
        self,
        state: StateStore,
        backend: Backend,
        scheduler: Scheduler,
        pricer: NodePricer,
        config: LoopConfig | None = None,
        *,
        budgets: BudgetPolicy | None = None,
        max_gpus: int = 8,
    ) -> None:
        self.state = state
        self.backend = backend
        self.scheduler = scheduler
        self.pricer = pricer
        self.config = config or LoopConfig()
        self.budgets = budgets
        self.cluster = ClusterView(max_gpus=max_gpus)
        self.pending: dict[str, Job] = {}
        self.active: dict[str, ActiveRun] = {}
        self.budgeted = 0  # runs in ``active`` whose job has its own budget (the budget timer is work then)
        self.running: dict[str, RunningJob] = {}
        self.stats = LoopStats()
        self.throttles: list[ThrottleRule] = []
        self.limits: list[CapacityLimit] = []
        self.decisions: Decisions | None = None  # the last cycle's
        self.dirty = True
        self.last_cycle = -math.inf
        self._foreign: dict[str, Assignment] = {}  # node → the GPUs others' pods hold there
        self._foreign_checked = -math.inf
        self.last_autoscale = -math.inf
        # the world's hook when a run ends, before it leaves the running set (the server reads the
        # run's last progress reports there)
        self.run_ending: Callable[[str, int], None] | None = None
        # the world's hook after each scheduling cycle, with its duration in seconds (the server's
        # metrics); None: nothing observes cycles
        self.on_cycle: Callable[[float], None] | None = None
        # capabilities are checked once, here: a backend that cannot provision gets no scale-ups
        caps = backend.capabilities
        self.provisioner: Provisioner | None = (
            backend if Capability.AUTOSCALING in caps and isinstance(backend, Provisioner) else None
        )
        if Capability.PREEMPTION not in caps and scheduler.config.preemption:
            why = caps.missing.get(Capability.PREEMPTION, "not supported")
            log.warning("backend %s cannot stop runs (%s): preemption is off", backend.name, why)
            scheduler.config = dataclasses.replace(scheduler.config, preemption=False)
        if self.provisioner is not None:
            for pool in self.provisioner.pools():
                self.cluster.add_pool(pool, pricer(pool.make_node(0)))

    # -- nodes -------------------------------------------------------------------------------------
    def add_node(self, node: Node, now: float, *, ready: bool = True) -> None:
        """A node joins (from the inventory, or provisioned: billed now, schedulable once ready)."""
        price = self.pricer(node)
        self.cluster.request(node, price, now)
        self.state.node_added(node, price, now)
        if ready:
            self.cluster.ready(node.name, now)
            self.dirty = True

    def remove_node(self, name: str, now: float, reason: str) -> None:
        """A node is gone with what ran on it: a run that ran only there ends (requeued from its
        checkpoint). A run with pods on other nodes too is stopped: those pods run on, holding their
        GPUs, until they end (a Kubernetes pod has its grace period), so their GPUs are free only
        when the backend reports the run's end — freeing them now would place other work beside
        them (issue 22: GPUs over-committed in the chaos run)."""
        ns = self.cluster.nodes.get(name)
        if ns is None or ns.removed_at is not None:
            return
        spot = self.cluster.is_spot(name)
        names = self.cluster.snapshot.names
        for job_id in sorted(ns.jobs):
            ar = self.active.get(job_id)
            if ar is None:
                continue
            elsewhere = any(names[a.node] != name and names[a.node] in self.cluster.live for a in ar.assignments)
            if elsewhere:
                ar.lost_spot = ar.lost_spot or spot
                self._isolated(
                    job_id,
                    "its node's removal",
                    functools.partial(self.request_stop, job_id, StopReason(StopKind.LOST, reason)),
                )
                continue
            ev = BackendEvent(EventKind.LOST, now, job_id=job_id, run=ar.run, reason=reason, ended_at=now)
            self._isolated(job_id, "its node's removal", functools.partial(self._end_run, ev, now, spot=spot))
        self._foreign.pop(name, None)
        self.cluster.remove(name, now)
        self.state.node_removed(name, now)
        self.dirty = True

    # -- the step ----------------------------------------------------------------------------------
    def step(self, now: float) -> None:
        for ev in self.backend.poll():
            self.handle(ev, now)
        self.sync_foreign(now)
        self.sync(now)
        if self.budgets is not None and self.budgets.due(now):
            self.budget_tick(now)
        if self.cycle_due(now):
            self.run_cycle(now)
        if self.autoscale_due(now):
            self.autoscale(now)

    def handle(self, ev: BackendEvent, now: float) -> None:
        kind = ev.kind
        if kind is EventKind.NODE_ADDED and ev.node is not None:
            known = self.cluster.nodes.get(ev.node)
            if known is not None and known.removed_at is None:
                self.cluster.ready(ev.node, ev.time)
                self.dirty = True
            else:  # a node that joined by itself (a cluster's autoscaler, an operator): the backend knows it
                lookup = getattr(self.backend, "node", None)
                node = lookup(ev.node) if callable(lookup) else None
                if isinstance(node, Node):
                    self.add_node(node, ev.time)
        elif kind is EventKind.NODE_INTERRUPTED and ev.node is not None:
            self._on_notice(ev.node, ev.time)
        elif kind is EventKind.NODE_REMOVED and ev.node is not None:
            self.remove_node(ev.node, now, ev.reason or f"node {ev.node} was removed")
        elif kind is EventKind.NODE_CORDONED and ev.node is not None:
            known = self.cluster.nodes.get(ev.node)
            if known is not None and known.removed_at is None:  # no new work there; what runs there stays
                log.info("%s", ev.reason or f"node {ev.node} takes no new work")
                self.cluster.cordon(ev.node)
                self.dirty = True
        elif kind is EventKind.NODE_CHANGED and ev.node is not None:
            lookup = getattr(self.backend, "node", None)
            node = lookup(ev.node) if callable(lookup) else None
            if isinstance(node, Node) and ev.node in self.cluster.snapshot.index:
                self.cluster.snapshot.relabel(ev.node, dict(node.labels), node.taints)
                self.dirty = True
        elif kind is EventKind.NODE_UNCORDONED and ev.node is not None:
            if ev.node in self.cluster.nodes:
                self.cluster.uncordon(ev.node)
                self.dirty = True
        else:
            self._isolated(ev.job_id, "its end", lambda: self._end_run(ev, now))

    def sync_foreign(self, now: float) -> None:
        """Hold in the snapshot the GPUs that others' pods use (a backend with ``foreign_usage()``:
        node → whole GPUs held by pods gpufleet did not place, e.g. another scheduler's on a shared
        Kubernetes cluster), so gpufleet never places work on them; checked every
        ``FOREIGN_INTERVAL_S``. A node with fewer free GPUs than others hold keeps what is free."""
        usage_of = getattr(self.backend, "foreign_usage", None)
        if not callable(usage_of) or now - self._foreign_checked < FOREIGN_INTERVAL_S:
            return
        self._foreign_checked = now
        try:
            wanted: Mapping[str, int] = usage_of()
        except GpufleetError as e:
            log.warning("foreign GPU usage: %s", e)
            return
        snap = self.cluster.snapshot
        for name in sorted(set(self._foreign) | set(wanted)):
            have = self._foreign.get(name)
            k = int(wanted.get(name, 0))
            if have is not None and len(have.gpus) == k:
                continue
            if have is not None:
                snap.release(have)
                del self._foreign[name]
            i = snap.index.get(name)
            if k <= 0 or i is None or name not in self.cluster.live:
                self.dirty = True
                continue
            free = [g for g in range(int(snap.gpu_count[i])) if int(snap.gpu_free[i, g]) == MILLI]
            take = tuple(free[-k:]) if k <= len(free) else tuple(free)
            if len(take) < k:
                log.warning("node %s: others' pods use %d GPUs, %d are free in gpufleet's view", name, k, len(take))
            if take:
                a = Assignment(i, take, MILLI, 0, 0)
                snap.allocate(a)
                self._foreign[name] = a
            self.dirty = True

    def _on_notice(self, name: str, t: float) -> None:
        ns = self.cluster.nodes.get(name)
        if ns is None or ns.removed_at is not None:
            return
        self.cluster.cordon(name)
        for job_id in ns.jobs:
            ar = self.active.get(job_id)
            if ar is not None and ar.notice_at is None:
                ar.notice_at = t

    def sync(self, now: float) -> None:
        """New submissions, changes made by others (cancels), quota changes."""
        for job in self.state.take_new(now):
            if job.id in self.pending or job.id in self.active:
                continue
            self.pending[job.id] = job
            self.dirty = True
            self.dirty = True
        for job_id, st, cancel in self.state.take_changes(now):
            if job_id in self.pending and st in ("CANCELLED", "FAILED", "SUCCEEDED", "TIMED_OUT"):
                job = self.pending.pop(job_id)
                job.state = JobState(st)
                self.scheduler.forget(job_id)
                self.dirty = True
            elif job_id in self.active and cancel and self.active[job_id].stopping is None:
                self.request_stop(job_id, StopReason(StopKind.CANCEL, "cancelled by request"))
        quotas = self.state.quotas(now)
        if quotas is not None:
            # a team with no quota rows and no cohort is unlimited (it has no Quota in the scheduler)
            self.scheduler.quotas = QuotaPolicy(q for q in quotas if q.nominal_milli or q.cohort)
            for q in quotas:
                self.scheduler.weights[q.team] = q.weight
            self.dirty = True

    def refuse_submission(self, job: Job, now: float) -> str | None:
        """The submit-time checks: why ``job`` may not queue, or None (it ends: FAILED when no node
        or pool could ever hold it, CANCELLED when a ``block`` budget refuses it). A world calls it
        where a job is submitted, before the job is stored: the simulator's submit event here, the
        API in the transaction that inserts the job — the same rules
        (:func:`gpufleet.scheduling.admission.submission_status`'s, over the cluster's node kinds;
        :func:`gpufleet.loop.budgets.block_refusal`)."""
        shapes = self.cluster.shapes()
        if shapes:  # nothing is refused before any capacity is known
            need = Need.of_spec(job.spec, on_demand_only=job.on_demand_only)
            constraints = job.spec.constraints
            if constraints or self.cluster.tainted():  # where it may run: by places (constraints, taints)
                places = self.cluster.places(each=constraints.selects)
                why = constrained_infeasibility(need, places, constraints)
            else:
                why = infeasibility(need, shapes)
            if why is not None:
                reason = f"unschedulable: {why[0]}"
                self._end(job, JobState.FAILED, reason, now)
                return reason
        refused = self.budgets.refuse(job, now, self) if self.budgets is not None else None
        if refused is not None:
            self._end(job, JobState.CANCELLED, refused, now)
        return refused

    # -- budgets -----------------------------------------------------------------------------------
    def budget_tick(self, now: float) -> None:
        assert self.budgets is not None
        try:
            tick = self.budgets.tick(now, self)
        except GpufleetError as e:  # the store went away: budgets wait for the next tick
            log.warning("budget evaluation failed: %s", e)
            return
        if tick.throttles != self.throttles:
            self.throttles = tick.throttles
            self.limits = capacity_limits(tick.throttles)
            self.dirty = True
        # jobs over their own budget, stopped in the order the loop holds its runs (whatever order
        # the world found them in: the same stops in the same order in every world)
        over = {o.job_id: o for o in tick.overruns}
        for job_id in [j for j in self.active if j in over]:
            o = over[job_id]
            log.info("stopping %s: %s", job_id, o.reason)
            self.request_stop(job_id, o.stop)

    # -- the cycle ---------------------------------------------------------------------------------
    def cycle_gap(self) -> float:
        return max(self.config.min_cycle_gap_s, self.config.cycle_cost_factor * self.stats.last_cycle_ms / 1000)

    def cycle_due(self, now: float) -> bool:
        if not self.pending:
            return False
        # the same sums as next_due's, so a driver that advances to that time finds the cycle due
        return (
            (self.dirty and now >= self.last_cycle + self.cycle_gap())
            or now >= self.last_cycle + self.config.cycle_interval_s
            or (self.decisions is not None and now >= self.decisions.retry_at)  # a minimum runtime ran out
        )

    def cluster_state(self) -> ClusterState:
        """What a cycle reads; budget throttles in force narrow it as capacity limits (one pass)."""
        return ClusterState(
            self.cluster.snapshot,
            list(self.pending.values()),
            self.running,
            self.cluster.pool_states(),
            limits=self.limits,
        )

    @property
    def order(self) -> list[Job]:
        """The queue in the order the last cycle considered it (built when first read)."""
        return self.decisions.order if self.decisions is not None else []

    @property
    def waiting(self) -> Mapping[str, str]:
        """Why each queued job still waits after the last cycle (read on demand)."""
        return _Reasons(self.decisions.waiting if self.decisions is not None else {})

    @property
    def waiting_statuses(self) -> Mapping[str, Status]:
        """Why each queued job still waits, as the cycle's statuses: the reason and its
        :class:`~gpufleet.scheduling.framework.WaitKind` (a backend tells node autoscalers only of
        capacity waits)."""
        return self.decisions.waiting if self.decisions is not None else {}

    def run_cycle(self, now: float) -> Decisions:
        t0 = time.perf_counter()
        self.dirty = False
        self.last_cycle = now
        decisions = self.scheduler.cycle(self.cluster_state(), now)
        self.decisions = decisions
        for p in decisions.preemptions:
            self.request_stop(p.victim.job.id, StopReason(StopKind.PREEMPT, p.reason))
        for pl in decisions.placements:
            self._isolated(pl.job.id, "its bind", functools.partial(self._bind, pl, now))
        self._scale_up(decisions, now)
        self.stats.cycles += 1
        self.stats.last_cycle_ms = (time.perf_counter() - t0) * 1000
        if self.on_cycle is not None:
            self.on_cycle(self.stats.last_cycle_ms / 1000)
        return decisions

    def _bind(self, pl: Placement, now: float) -> None:
        job = pl.job
        snap = self.cluster.snapshot
        placement = tuple(snap.placement_of(a) for a in pl.assignments)
        node_name = placement[0].node if placement else next(iter(self.cluster.live), "")
        ns = self.cluster.nodes.get(node_name)
        where = ", ".join(f"{p.node} GPU {','.join(map(str, p.gpus)) or '-'}" for p in placement) or node_name
        reason = f"placed on {where}"
        launch = self.state.bind(job, placement, ns.node if ns else None, ns.hourly_usd if ns else 0.0, reason, now)
        if launch is None:  # cancelled (or changed) since the cycle saw it
            self.scheduler.unreserve(pl, snap, now)
            self.pending.pop(job.id, None)
            self.scheduler.forget(job.id)
            return
        del self.pending[job.id]
        job.transition(JobState.ADMITTED, now, reason)
        job.placement = placement
        try:
            handle = self.backend.launch(
                LaunchRequest(
                    job_id=job.id,
                    run=launch.run,
                    command=launch.command,
                    placement=placement,
                    env=launch.env,
                    cwd=launch.cwd,
                    image=launch.image,
                    labels=launch.labels,
                    checkpoint_dir=launch.checkpoint_dir,
                    restart_count=launch.restarts,
                    max_runtime_s=job.spec.max_runtime_s,
                    grace_s=self.config.grace_s,
                    team=launch.team,
                    run_as=launch.run_as,
                    cpu_milli=launch.cpu_milli,
                    memory_mib=launch.memory_mib,
                    work_done_s=job.work_done_s,
                    duration_s=job.spec.duration_s,
                    constraints=job.spec.constraints,
                )
            )
        except Exception as e:  # one job's bad launch ends that job, never the loop
            if isinstance(e, StoreError):
                raise
            if not isinstance(e, GpufleetError | OSError):
                log.exception("launch of %s raised an unexpected error", job.id)
            log.warning("launch of %s failed: %s", job.id, e)
            self.scheduler.unreserve(pl, snap, now)
            self.state.launch_failed(job, launch.run, str(e), now)
            self._end(job, JobState.FAILED, f"could not launch: {e}", now)
            return
        shares = run_shares(job, placement, self.cluster.gpu_model, node_name, self.cluster.node_replicas)
        self.state.run_started(job, launch.run, handle.pid, handle.started_at, shares, now)
        job.transition(JobState.RUNNING, now, f"started (run {launch.run}, pid {handle.pid})")
        self._adopt(job, launch.run, pl.assignments, shares, handle.started_at)
        self.stats.placed += 1

    def _adopt(
        self,
        job: Job,
        run: int,
        assignments: tuple[Assignment, ...],
        shares: tuple[Share, ...],
        started_at: float,
        stopping: StopReason | None = None,
    ) -> None:
        job.start_time = started_at
        if job.first_start_time is None:
            job.first_start_time = started_at
        self.active[job.id] = ActiveRun(job, run, assignments, shares, started_at, stopping)
        if job.spec.budget_usd is not None:
            self.budgeted += 1
        self.running[job.id] = RunningJob(job, assignments, self._gpu_type(assignments))
        snap = self.cluster.snapshot
        for a in assignments:
            self.cluster.hold(snap.names[a.node], job.id)

    def adopt(self, job: Job, run: int, started_at: float, stopping: StopReason | None, now: float) -> None:
        """Put a run that already exists (found by recovery) into the snapshot, the scheduler's
        usage and the running set."""
        snap = self.cluster.snapshot
        # a node that is gone (deleted while no leader ran) holds nothing in the view: the caller
        # ends such a run as lost (Controller.recover)
        known = [p for p in job.placement if p.node in snap.index]
        assignments = tuple(snap.assignment_of(p, job.spec.cpu_milli, job.spec.memory_mib) for p in known)
        for a in assignments:
            snap.allocate(a)
        self.scheduler.account(job, assignments, snap, now, +1)
        node_name = job.placement[0].node if job.placement else next(iter(self.cluster.live), "")
        shares = run_shares(job, job.placement, self.cluster.gpu_model, node_name, self.cluster.node_replicas)
        self._adopt(job, run, assignments, shares, started_at, stopping)

    def _gpu_type(self, assignments: Sequence[Assignment]) -> str:
        if not assignments:
            return ""
        snap = self.cluster.snapshot
        t = int(snap.gpu_type[assignments[0].node])
        return snap.gpu_types[t] if t >= 0 else ""

    def request_stop(self, job_id: str, why: StopReason) -> None:
        """Ask the run of ``job_id`` to stop (once): the store keeps ``why`` as its text, the backend
        is told its words."""
        ar = self.active.get(job_id)
        if ar is None or ar.stopping is not None:
            return
        ar.stopping = why
        self.state.request_stop(job_id, ar.run, why.text)
        try:
            self.backend.stop(job_id, ar.run, why.detail, self.config.grace_s)
        except StoreError:
            raise
        except Exception:  # one job that cannot be stopped must not stop the loop: asked again next time
            log.exception("stopping %s failed; will retry", job_id)
            ar.stopping = None

    # -- ends --------------------------------------------------------------------------------------
    def _end_run(self, ev: BackendEvent, now: float, *, spot: bool = False) -> None:
        if ev.job_id is None or ev.run is None:
            return
        ar = self.active.get(ev.job_id)
        if ar is None or ar.run != ev.run:
            return  # already handled (a duplicate report) or not ours
        # lost with a spot node: on its removal (``spot``), or reported by the backend naming the node
        lost_on = ev.node if ev.kind is EventKind.LOST else None
        spot = spot or ar.lost_spot or (lost_on is not None and self.cluster.is_spot(lost_on))
        job = ar.job
        if self.run_ending is not None:
            self.run_ending(job.id, ar.run)
        ended = ev.ended_at if ev.ended_at is not None else now
        # the backend's own measure of the start wins: a Kubernetes launch returns before its pods are
        # bound and their containers start (the handle's time is the launch's)
        started = ev.started_at if ev.started_at is not None else ar.started_at
        stop = ar.stopping
        stop_kind = stop.kind if stop is not None else None
        kind = ev.kind
        target, reason = JobState.PENDING, ""
        retried = False  # a failed run retried: counted in job.failed_runs once requeued
        if kind is EventKind.SUCCEEDED:
            target, reason = JobState.SUCCEEDED, "exited 0"
        elif kind is EventKind.TIMED_OUT:
            target, reason = JobState.TIMED_OUT, f"ran past its max runtime of {job.spec.max_runtime_s or 0:.0f}s"
        elif stop is not None and kind in (EventKind.STOPPED, EventKind.FAILED) and stop_kind is StopKind.BUDGET:
            target, reason = JobState.CANCELLED, stop.detail  # stopped at its own budget
        elif stop is not None and kind is EventKind.STOPPED and stop_kind is StopKind.CANCEL:
            target, reason = JobState.CANCELLED, stop.detail
        elif kind is EventKind.FAILED and stop is None:
            how = ev.reason or (f"killed by signal {ev.signal}" if ev.signal else f"exited with code {ev.exit_code}")
            failures = job.failed_runs
            if failures < self.config.max_retries:
                reason = f"run failed; retry {failures + 1}/{self.config.max_retries}"
                retried = True
            else:
                target = JobState.FAILED
                reason = f"{how} (after {failures} retries)" if failures else how
        # requeued: stopped for preemption (or failed while being stopped), lost, or retried
        requeue = target is JobState.PENDING
        preempted = requeue and kind is EventKind.STOPPED and stop_kind is StopKind.PREEMPT
        stopped_as = reason or (stop.detail if stop is not None else "") or ev.reason or kind.value
        if stop is not None:
            job.stopped_by = stop
        if requeue:
            # the work since the last checkpoint is lost (the job checkpointed on a spot notice too)
            saved = job.checkpointed_progress_at(ended)
            if ar.notice_at is not None and job.spec.checkpoint_interval_s:
                saved = max(saved, job.progress_at(ar.notice_at))
            job.lost_work_s += max(0.0, job.progress_at(ended) - saved)
            job.work_done_s = saved
            reason = "requeued" + (" from its checkpoint" if saved > 0 else "")
        elif target is JobState.SUCCEEDED and job.spec.duration_s is not None:
            job.work_done_s = job.spec.duration_s
        end = RunEnd(
            job=job,
            run=ar.run,
            outcome=kind.value,
            state=target,
            reason=reason,
            started_at=started,
            ended_at=ended,
            shares=ar.shares if started is not None else (),
            exit_code=ev.exit_code,
            run_reason=ev.reason,
            stopped_as=stopped_as,
            preempted=preempted,
        )
        applied = self.state.run_ended(end, now)
        # in memory: free what it held
        self.scheduler.release(job, ar.assignments, self.cluster.snapshot, now)
        del self.active[job.id]
        if job.spec.budget_usd is not None:
            self.budgeted -= 1
        self.running.pop(job.id, None)
        snap = self.cluster.snapshot
        for a in ar.assignments:
            self.cluster.free(snap.names[a.node], job.id)
        self.scheduler.job_stopped(job.id)
        self.stats.ended += 1
        self.dirty = True
        if applied is JobState.PENDING:
            job.transition(JobState.PREEMPTED, ended, stopped_as)
            job.transition(JobState.PENDING, ended, reason)
            job.restarts += 1
            if retried:
                job.failed_runs += 1
            if preempted:
                job.preemptions += 1
            if spot:
                job.spot_restarts += 1
                if job.spot_restarts >= self.scheduler.config.max_spot_restarts:
                    job.on_demand_only = True
            job.start_time = None
            job.placement = ()
            self.pending[job.id] = job
        else:
            self._end(job, applied, reason if applied is target else "cancelled by request", ended)

    def _end(self, job: Job, state: JobState, reason: str, now: float) -> None:
        job.transition(state, now, reason)
        job.end_time = now
        self.scheduler.forget(job.id)

    def fail_waiting(self, now: float, why: Callable[[str], str]) -> None:
        """End every queued job FAILED (they can never run: the world knows nothing will change)."""
        for job in list(self.pending.values()):
            del self.pending[job.id]
            reason = f"unschedulable: {why(job.id)}"
            self.state.finish_pending(job, JobState.FAILED, reason, now)
            self._end(job, JobState.FAILED, reason, now)

    # -- autoscaling -------------------------------------------------------------------------------
    def autoscale_due(self, now: float) -> bool:
        if self.provisioner is None or not self.scheduler.config.autoscaler.enabled:
            return False
        if now < self.last_autoscale + self.config.autoscale_interval_s:  # the same sum as next_due's
            return False
        return bool(self.pending) or self.cluster.above_min()

    def autoscale(self, now: float) -> None:
        self.last_autoscale = now
        if self.scheduler.autoscale_quiet() and not self.cluster.idle_autoscaled():
            return  # nothing blocked, no idle timer running, no empty node to start one: a no-op tick
        d = self.scheduler.autoscale(self.cluster_state(), now)
        self._scale_up(d, now)
        assert self.provisioner is not None
        for down in d.scale_down:
            ns = self.cluster.nodes.get(down.node)
            if ns is None or ns.removed_at is not None:
                continue
            self.provisioner.release(down.node, now)
            self.remove_node(down.node, now, f"node {down.node} scaled down")

    def _scale_up(self, d: Decisions, now: float) -> None:
        if self.provisioner is None:
            return
        for up in d.scale_up:
            for node in self.provisioner.provision(up.pool, up.count, now):
                self.add_node(node, now, ready=False)

    # -- for drivers and publishers ----------------------------------------------------------------
    def next_due(self, now: float) -> float:
        """When the loop next has work of its own (a cycle, the autoscaler's timer, the budget timer
        while a job with its own budget runs: it is stopped at the tick that finds its budget spent);
        inf: none. Drivers on a simulated clock advance to the earliest of this, the backend's next
        event and the next submission."""
        t = math.inf
        if self.pending:
            if self.dirty:
                t = max(now, self.last_cycle + self.cycle_gap())
            if self.config.cycle_interval_s < math.inf:
                t = min(t, max(now, self.last_cycle + self.config.cycle_interval_s))
            if self.decisions is not None:  # a preemption waits for its victims' minimum runtime
                t = min(t, max(now, self.decisions.retry_at))
        autoscaling = self.provisioner is not None and self.scheduler.config.autoscaler.enabled
        if autoscaling and (self.pending or self.cluster.above_min()):
            t = min(t, max(now, self.last_autoscale + self.config.autoscale_interval_s))
        if self.budgeted and self.budgets is not None:
            t = min(t, max(now, self.budgets.next_due()))
        return t

    def unfinished(self) -> Iterable[Job]:
        yield from self.pending.values()
        for ar in self.active.values():
            yield ar.job

    def _isolated(self, job_id: str | None, what: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` (work for one job); a failure that is the job's, not the store's, is logged
        and the loop goes on: one bad job never stops scheduling for everyone."""
        try:
            fn()
        except StoreError:
            raise  # the store went away: the world backs off and recovers
        except Exception:
            log.exception("handling %s of job %s failed; the loop carries on", what, job_id)
