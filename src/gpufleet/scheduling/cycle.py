"""The scheduling cycle: one pass from a queue and a snapshot to decisions.

Phases (numbered as in DESIGN.md):

1. order the queue (nominated jobs — whose victims are being stopped — first);
2. admit each job: the configured admission checks in order (``scheduling/admission.py``; default
   feasibility, quota, budget) each admit it — possibly narrowing its pod request (GPU types, spot
   only) —, hold it this cycle (UNSCHEDULABLE) or reject it as never runnable (UNRESOLVABLE);
3. filter, score and reserve in the snapshot (gangs all or nothing, on one kind of node:
   ``scheduling/gang.py``);
4. when a job does not fit: try preemption (PostFilter, planned in ``scheduling/preemption.py``;
   when only runs younger than their minimum runtime would do, the job waits for them and
   :attr:`Decisions.retry_at` says when to look again); if
   it still waits and is the first such job, make its EASY-backfill reservation
   (``scheduling/backfill.py``): later jobs may only use the reserved nodes if they end (by their
   runtime estimate) before the reservation's shadow time; collect it for the autoscaler;
5. emit decisions (placements are already reserved; the caller binds them, and on failure calls
   :meth:`Scheduler.unreserve`);
6. scale down nodes idle past their TTL (on the autoscaler's timer, :meth:`Scheduler.autoscale`).

The scheduler keeps the team usage (for fair share and quotas), the preemption graph, the
nominations and the autoscaler's idle timers. It never reads a clock: ``now`` is passed in.

Cost: a cycle grows with what it can start, not with the queue. From ``LAZY_QUEUE_MIN`` queued jobs
on, the scheduler keeps state across cycles — the queue's change since the last cycle (found by
identity, with C-level scans), the queue's shapes, running jobs sorted by expected end (EASY), and
the fair-share order's index (``ordering/fairshare.py``), which yields the order lazily. Once every
shape still queued can only wait for room (it failed with every node, or — when admission can
only admit — no node fits it now, or it failed beside the reservation and none of its jobs can end
before the shadow time), the cycle stops: the rest of the queue waits with "no node has room",
filled into :attr:`Decisions.waiting` (and the rest of :attr:`Decisions.order`) only when read.
The decisions are those of the full pass, job for job (``tests/scheduling/test_cycle.py`` compares them).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model.job import Job
from gpufleet.scheduling.admission import (
    DEFAULT_CHECKS,
    AdmissionCheck,
    AdmissionContext,
    BudgetCheck,
    FeasibilityCheck,
    QuotaCheck,
    build_checks,
)
from gpufleet.scheduling.autoscaler import Autoscaler, AutoscalerConfig
from gpufleet.scheduling.backfill import BACKFILL_MODES, RunningByEnd, has_estimate, reservation
from gpufleet.scheduling.decisions import ClusterState, Decisions, Placement, Preemption
from gpufleet.scheduling.framework import (
    SUCCESS,
    Code,
    QueueDelta,
    QueueSort,
    ScorePlugin,
    SortContext,
    Status,
    WaitKind,
    aligned_diff,
    diff_queue,
)
from gpufleet.scheduling.gang import place_gang
from gpufleet.scheduling.placement.base import uncommit
from gpufleet.scheduling.preemption import (
    Deferred,
    PreemptionGraph,
    QuotaVictims,
    RunningJob,
    choose_preemption,
    choose_reclaim,
    choose_within_team,
    reclaim_reason,
    within_team_reason,
)
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, PodRequest
from gpufleet.scheduling.usage import UsageTracker

# The autoscaler plans for at most this many blocked jobs per cycle (in queue order); it opens at
# most ``max_new_nodes_per_cycle`` nodes anyway, and the next cycle sees the rest.
MAX_BLOCKED_FOR_AUTOSCALER = 512
# Queues at least this long are indexed across cycles and ordered lazily (the cycle may stop early);
# shorter ones are ordered whole, which costs less than keeping the index (half as long: dropped).
LAZY_QUEUE_MIN = 64
NO_ROOM = Status(Code.UNSCHEDULABLE, "no node has room", WaitKind.CAPACITY)
_BUILTIN_CHECKS = (FeasibilityCheck, QuotaCheck, BudgetCheck)


@dataclass(frozen=True, slots=True)
class CycleConfig:
    backfill: str = "easy"  # easy | greedy (skip blocked jobs) | strict (stop at the first blocked job)
    preemption: bool = True
    max_spot_restarts: int = 3  # after this many spot interruptions a job runs on-demand only
    autoscaler: AutoscalerConfig = field(default_factory=AutoscalerConfig)
    admission: tuple[str, ...] = DEFAULT_CHECKS  # admission checks (by registered name), in order
    # a run younger than this is not a victim of priority preemption / of a quota reclaim (KAI's
    # preemptMinRuntime / reclaimMinRuntime): a job is not stopped before it has done some work
    preempt_min_runtime_s: float = 0.0
    reclaim_min_runtime_s: float = 120.0


def key_failed(base_key: tuple[object, ...], failed: set[tuple[object, ...]]) -> bool:
    """Did this shape already fail in this cycle with every node available to it?"""
    return (base_key, None) in failed


class Scheduler:
    def __init__(
        self,
        queue_sort: QueueSort,
        placement: ScorePlugin,
        config: CycleConfig | None = None,
        quotas: QuotaPolicy | None = None,
        usage: UsageTracker | None = None,
        weights: Mapping[str, float] | None = None,
        admission: Sequence[AdmissionCheck] | None = None,
    ) -> None:
        self.queue_sort = queue_sort
        self.placement = placement
        self.config = config or CycleConfig()
        if self.config.backfill not in BACKFILL_MODES:
            raise ValueError(f"backfill must be one of {BACKFILL_MODES}")
        self.quotas = quotas or QuotaPolicy()
        self.usage = usage or UsageTracker()
        self.weights = dict(weights or {})
        for team, q in self.quotas.quotas.items():
            self.weights.setdefault(team, q.weight)
        self.graph = PreemptionGraph()
        self.autoscaler = Autoscaler(self.config.autoscaler)
        self.admission: list[AdmissionCheck] = (
            list(admission) if admission is not None else build_checks(self.config.admission)
        )
        self.nominated: dict[str, set[str]] = {}  # preemptor id → victim ids still stopping
        self._pods: dict[str, tuple[tuple[object, ...], PodRequest, tuple[object, ...]]] = {}
        self._blocked: list[tuple[Job, PodRequest]] = []  # left blocked for capacity by the last cycle
        self._preemptible: Counter[int] = Counter()  # base priority → preemptible jobs holding resources
        # the queue's shapes, kept current across cycles (object identity → shape key; shape → jobs)
        self._queued: dict[int, Job] = {}
        self._view: list[Job] = []  # the last cycle's queue, as given
        self._view_ids: set[int] = set()
        self._queue_version = 0
        self._indexed = False  # the queue index below is kept (long queues only)
        self.lazy_queue_min = LAZY_QUEUE_MIN
        self._unqueued: list[Job] = []  # placed by the last cycle: dropped here, still in the sort's index
        self._delta: QueueDelta | None = None
        self._queued_key: dict[int, tuple[object, ...]] = {}
        self._queued_shapes: dict[tuple[object, ...], dict[int, Job]] = {}  # shape → its queued jobs
        self._queued_sig: tuple[ClusterSnapshot | None, int] = (None, -1)
        # per queue shape with runtime estimates: (remaining estimate, object id), ascending (an
        # estimate does not change while a job waits)
        self._queued_est: dict[tuple[object, ...], list[tuple[float, int]]] = {}
        # running jobs by expected end (EASY reservations), kept current across cycles
        self._running_by_end = RunningByEnd()
        self._quota_victims: QuotaVictims | None = None  # the cycle's, made on its first quota preemption

    # -- usage bookkeeping (the world calls these when jobs start and stop) -----------------------
    def account(
        self, job: Job, assignments: Sequence[Assignment], snap: ClusterSnapshot, now: float, sign: int
    ) -> None:
        for a in assignments:
            t = int(snap.gpu_type[a.node])
            gtype = snap.gpu_types[t] if t >= 0 else ""
            milli = a.milli * len(a.gpus)
            args = (job.team, gtype, milli, a.cpu_milli, a.memory_mib, now)
            if sign > 0:
                self.usage.add(*args)
            else:
                self.usage.remove(*args)
        if job.spec.preemptible:
            self._preemptible[job.priority] += sign

    def unreserve(self, placement: Placement, snap: ClusterSnapshot, now: float) -> None:
        """Roll back a reservation whose bind failed. Not idempotent: call it once per failure."""
        self.release(placement.job, placement.assignments, snap, now)

    def release(self, job: Job, assignments: Sequence[Assignment], snap: ClusterSnapshot, now: float) -> None:
        """A job stopped holding ``assignments`` (it ended, was preempted, or its bind failed):
        free them in the snapshot, tell the placement policy, and update the team's usage."""
        pod = self._pod(snap, job)[0]
        for a in assignments:
            uncommit(snap, self.placement, pod, a)
        self.account(job, assignments, snap, now, -1)

    def job_stopped(self, job_id: str) -> None:
        """Forget nominations once a victim is gone."""
        for pre in list(self.nominated):
            self.nominated[pre].discard(job_id)

    # -- the cycle ---------------------------------------------------------------------------------
    def cycle(self, state: ClusterState, now: float) -> Decisions:
        snap = state.snapshot
        out = Decisions()
        if not state.pending:
            self._blocked = []
            return out
        n = snap.n
        live = snap.schedulable[:n]
        running = state.running
        # victims chosen in this cycle, and those chosen before that are still stopping: neither is
        # a candidate again (one stop frees room once)
        gone: set[str] = set().union(*self.nominated.values())
        self._quota_victims = None
        actx = AdmissionContext(self, state, now, out, gone)
        for check in self.admission:
            check.start(actx)
        # a short queue is ordered whole (no index to keep); a long one is indexed across cycles
        small = len(state.pending) < (self.lazy_queue_min // 2 if self._indexed else self.lazy_queue_min)
        if small:
            self._drop_queue_index()
            unsettled: set[tuple[object, ...]] = set()
        else:
            unsettled = self._sync_queue_shapes(snap, state.pending)
        ctx = SortContext(
            now=now,
            usage=self.usage,
            gpu_total_milli=int(snap.gpu_count[:n][live].sum()) * 1000,
            cpu_total_milli=int(snap.cpu_cap[:n][live].sum()),
            memory_total_mib=int(snap.mem_cap[:n][live].sum()),
            weights=self.weights,
            priorities_changed=actx.priorities_changed,
            queue_delta=self._delta,
        )
        # 1. order: nominated jobs first (their room is being freed), then the queue policy. Without
        # nominations a lazy policy yields the order as the loop consumes it, and the loop stops
        # early once every shape still queued has failed (each job left would take the fast path)
        iter_order = getattr(self.queue_sort, "iter_order", None)
        lazy = not small and not self.nominated and iter_order is not None
        # "pure": admission can neither narrow a pod nor hold a job nor act (no quotas, no limits,
        # built-in checks only), so a job whose shape failed both before and after the EASY shadow
        # can only wait for room; and the jobs the autoscaler is told about are enough
        pure = lazy and not self.quotas and not state.limits and all(type(c) in _BUILTIN_CHECKS for c in self.admission)
        autoscaled = self.config.autoscaler.enabled and bool(state.pools)
        wd = out.waiting._d  # the cycle fills the plain dict; the rest may be filled lazily (early stop)
        order: Iterable[Job]
        if lazy:
            assert iter_order is not None
            order = it = iter_order(state.pending, ctx)
            seen: list[Job] = []
            seen_ids: set[int] = set()
            out.order = seen
        else:
            full = self.queue_sort.order(state.pending, ctx)
            if self.nominated:
                full.sort(key=lambda j: j.id not in self.nominated)
            out.order = order = full
        blocked_for_capacity: list[tuple[Job, PodRequest]] = []
        failed_shapes: set[tuple[object, ...]] = set()
        reserved_nodes: np.ndarray | None = None
        pending_reservation: tuple[Job, PodRequest] | None = None
        shadow = math.inf
        head_blocked = False
        changed = False  # a shape failed, a job was placed or the reservation made since the last look
        memo: dict[tuple[object, ...], tuple[bool, int]] = {}  # shape → (admitted, placements when it fit)
        for job in order:
            if lazy:
                seen.append(job)
                if head_blocked and changed:
                    changed = False
                    deep = (
                        pure
                        and pending_reservation is None  # the EASY reservation a later job would make is made
                        and (not autoscaled or len(blocked_for_capacity) >= MAX_BLOCKED_FOR_AUTOSCALER)
                    )
                    unsettled = {
                        kx
                        for kx in unsettled
                        if (kx[0], None) not in failed_shapes
                        and not (
                            deep and self._settled(kx, failed_shapes, reserved_nodes, seen_ids, shadow, actx, memo)
                        )
                    }
                if head_blocked and not unsettled:
                    # every job left would wait for room with no other effect: stop here
                    wd[job.id] = NO_ROOM
                    out.waiting.wait_rest(tuple(state.pending), {p.job.id for p in out.placements}, NO_ROOM)
                    out._order_rest = it
                    break
                seen_ids.add(id(job))  # after the look above: this job may still be the one that fits
            if self.nominated.get(job.id):
                wd[job.id] = Status(Code.UNSCHEDULABLE, "waiting for preempted jobs to stop", WaitKind.PREEMPTION)
                continue
            pod, base_key = self._pod(snap, job)
            key0 = base_key
            if head_blocked and key_failed(base_key, failed_shapes):
                # fast path: this shape failed with every node; admission only narrows that
                wd[job.id] = NO_ROOM
                continue
            # 2. admission checks, in order; each may narrow the pod
            within: np.ndarray | None = None
            held: Status | None = None
            for check in self.admission:
                verdict = check.admit(job, pod, actx)
                if verdict.within_nominal is not None:
                    within = verdict.within_nominal
                if not verdict.status.ok:
                    held = verdict.status
                    break
                if verdict.pod is not None and verdict.pod is not pod:
                    pod = verdict.pod
                    base_key = (*key0, pod.type_ok.tobytes(), pod.spot_only)
                    if head_blocked and key_failed(base_key, failed_shapes):
                        held = NO_ROOM
                        break
            if held is not None:
                wd[job.id] = held
                continue
            if pending_reservation is not None:
                # EASY: computed only once a later job might fit somewhere (it is costly)
                hjob, hpod = pending_reservation
                pending_reservation = None
                by_end = self._running_by_end.update(running)
                shadow, nodes = reservation(
                    snap, self.placement, hjob, hpod, [r for r in by_end if r.job.id not in gone] if gone else by_end
                )
                reserved_nodes = np.array(sorted(nodes), dtype=np.int64)
                out.reservation = (hjob.id, shadow)
                changed = True
            ends_before_shadow = False
            if reserved_nodes is not None:
                est = job.remaining_estimate(now)
                ends_before_shadow = est is not None and now + est <= shadow
            # a shape that failed in this cycle fails again (the cycle only takes capacity)
            key = (base_key, ends_before_shadow)
            # 3. filter, score, reserve
            assignments = None
            if key not in failed_shapes:
                if reserved_nodes is not None and not ends_before_shadow:
                    saved = snap.schedulable[reserved_nodes].copy()
                    snap.schedulable[reserved_nodes] = False
                    try:
                        assignments = place_gang(snap, self.placement, pod, job.spec.gang_size)
                    finally:
                        snap.schedulable[reserved_nodes] = saved
                else:
                    assignments = place_gang(snap, self.placement, pod, job.spec.gang_size)
            if assignments is not None:
                self.account(job, assignments, snap, now, +1)
                out.placements.append(Placement(job, assignments, backfilled=head_blocked))
                self.nominated.pop(job.id, None)
                changed = True
                continue
            if key not in failed_shapes:
                failed_shapes.add(key)
                changed = True
            if (reserved_nodes is None or ends_before_shadow) and (base_key, None) not in failed_shapes:
                failed_shapes.add((base_key, None))  # fails even with no node reserved
                changed = True
            # 4. does not fit: preemption, reservation, autoscaler
            if self.config.preemption and job.spec.gang_size == 1 and not head_blocked:
                status = self._try_preempt(snap, job, pod, running, gone, out, now, within)
                if status.ok:
                    wd[job.id] = Status(Code.UNSCHEDULABLE, "preempting to make room", WaitKind.PREEMPTION)
                    continue
                if isinstance(status, Deferred):  # its victims are not old enough yet: wait for them
                    wd[job.id] = Status(status.code, status.reason, status.kind)
                    continue
            wd[job.id] = NO_ROOM
            if len(blocked_for_capacity) < MAX_BLOCKED_FOR_AUTOSCALER:
                blocked_for_capacity.append((job, pod))
            if not head_blocked:
                head_blocked = True
                if self.config.backfill == "strict":
                    break
                if self.config.backfill == "easy":
                    pending_reservation = (job, pod)
        if lazy:
            out._order_rest = it  # the order past where the loop stopped (strict backfill, early stop)
        self._blocked = blocked_for_capacity
        for pl in out.placements:  # placed: if it comes back before the next cycle, index it afresh
            self._unqueue(pl.job)
        if blocked_for_capacity:
            out.scale_up = self.autoscaler.scale_up(
                blocked_for_capacity, state.pools, snap, queue_length=len(state.pending), now=now
            )
        return out

    def autoscale_quiet(self) -> bool:
        """Would an autoscaler tick decide nothing whatever the nodes? True when the last cycle left
        no job blocked for capacity and no node is being timed as idle: then a tick only starts idle
        timers, which the world can skip while no autoscaled node is empty."""
        return not self._blocked and not self.autoscaler.idle_since

    def autoscale(self, state: ClusterState, now: float) -> Decisions:
        """The autoscaler's timer tick: scale up for the jobs the last cycle left blocked (placement
        would decide the same when nothing changed) and scale down idle nodes. The world calls it
        every ``autoscale_interval_s`` while the autoscaler is enabled."""
        out = Decisions()
        if self._blocked:
            pending = {j.id for j in state.pending}
            self._blocked = [(j, p) for j, p in self._blocked if j.id in pending]
        if self._blocked:
            out.scale_up = self.autoscaler.scale_up(
                self._blocked, state.pools, state.snapshot, queue_length=len(state.pending), now=now
            )
        # 6. scale down (on the autoscaler's timer: idle TTLs are minutes, cycles are frequent)
        out.scale_down = self.autoscaler.scale_down(state.snapshot, state.pools, now)
        return out

    # -- helpers -------------------------------------------------------------------------------------
    def _pod(self, snap: ClusterSnapshot, job: Job) -> tuple[PodRequest, tuple[object, ...]]:
        """The job's PodRequest and shape key, cached while the job's constraints stay the same."""
        ck = (job.id, job.on_demand_only, len(snap.gpu_types))
        hit = self._pods.get(job.id)
        if hit is not None and hit[0] == ck:
            return hit[1], hit[2]
        pod = snap.pod(job.spec, on_demand_only=job.on_demand_only)
        key = (
            pod.cpu_milli,
            pod.memory_mib,
            pod.gpu,
            pod.type_ok.tobytes(),
            pod.min_gpu_memory_gib,
            pod.allow_spot,
            job.spec.gang_size,
            pod.constraints,  # None for none: jobs may share a shape only where they may share nodes
        )
        self._pods[job.id] = (ck, pod, key)
        return pod, key

    def _drop_queue_index(self) -> None:
        if self._indexed:
            self._indexed = False
            self._queued, self._queued_key, self._queued_shapes, self._queued_est = {}, {}, {}, {}
            self._view, self._view_ids = [], set()
            self._unqueued = []
            self._delta = None
            self._queued_sig = (None, -1)

    def _sync_queue_shapes(self, snap: ClusterSnapshot, pending: Sequence[Job]) -> set[tuple[object, ...]]:
        """Bring the index of the queue's (shape key, GPU types, has a runtime estimate) to
        ``pending`` (a diff by object identity) and return the set of them queued."""
        sig = (snap, len(snap.gpu_types))
        fresh = sig[0] is not self._queued_sig[0] or sig[1] != self._queued_sig[1]
        self._queued_sig = sig
        self._indexed = True
        # the change since the last cycle's queue (the "view"; the sort's index was synced to it)
        view, view_ids = self._view, self._view_ids
        d = None if fresh else aligned_diff(view, view_ids, pending)
        if d is None and not fresh:
            dq = diff_queue(view_ids, {id(j): j for j in view}, pending)
            if dq is not None:
                d = (dq[1], dq[2])
        if d is None:  # a new snapshot or GPU type, or a job queued twice: index the distinct jobs afresh
            fresh = True
            self._queued, self._queued_key, self._queued_shapes, self._queued_est = {}, {}, {}, {}
            self._unqueued = []
            pending = list({id(j): j for j in pending}.values())
            d, view_ids = (pending, []), set()
        arrived, left = d
        view_ids.difference_update(map(id, left))
        view_ids.update(map(id, arrived))
        self._view, self._view_ids = list(pending), view_ids
        since = -1 if fresh else self._queue_version  # afresh: the sort diffs on its own
        self._queue_version += 1
        self._delta = QueueDelta(since, self._queue_version, arrived, left)
        # this index dropped the jobs placed last cycle: those still queued come back
        queued = self._queued
        back = [u for u in self._unqueued if id(u) in view_ids and id(u) not in queued]
        self._unqueued = []
        for j in left:
            if queued.pop(id(j), None) is not None:
                self._drop_queued(id(j), j)
        keys, shapes, ests = self._queued_key, self._queued_shapes, self._queued_est
        for j in (*arrived, *back):
            oid = id(j)
            if oid in queued:
                continue
            queued[oid] = j
            k = keys[oid] = (self._pod(snap, j)[1], j.spec.gpu_types, has_estimate(j))
            shapes.setdefault(k, {})[oid] = j
            if k[2]:
                est = j.remaining_estimate(0.0)  # a waiting job's estimate does not depend on the time
                lst = ests.setdefault(k, [])
                e = (est if est is not None else math.inf, oid)
                lst.insert(bisect_left(lst, e), e)
        return set(shapes)

    def _drop_queued(self, oid: int, job: Job) -> None:
        k = self._queued_key.pop(oid)
        members = self._queued_shapes[k]
        del members[oid]
        if not members:
            del self._queued_shapes[k]
        if k[2]:
            lst = self._queued_est[k]
            est = job.remaining_estimate(0.0)
            i = bisect_left(lst, (est if est is not None else math.inf, oid))
            if i < len(lst) and lst[i][1] == oid:
                del lst[i]
            else:  # the estimate changed after all: find it by identity
                del lst[next(x for x, e in enumerate(lst) if e[1] == oid)]
            if not lst:
                del self._queued_est[k]

    def _settled(
        self,
        kx: tuple[object, ...],
        failed: set[tuple[object, ...]],
        reserved: np.ndarray | None,
        seen: set[int],
        shadow: float,
        actx: AdmissionContext,
        memo: dict[tuple[object, ...], tuple[bool, int]],
    ) -> bool:
        """(Admission that can only admit, see ``pure`` in :meth:`cycle`.) Would every queued job of
        shape ``kx`` the cycle has not looked at yet only wait for room, with no other effect?
        Yes when admission admits the shape and either no node could take one of its pods now
        (capacity only shrinks within a cycle), or, once the EASY reservation is made, the shape
        failed beside the reserved nodes and no such job could end before the shadow time."""
        members = self._queued_shapes.get(kx)
        if not members:
            return True
        k0 = kx[0]
        placed = len(actx.out.placements)
        hit = memo.get(kx)
        if hit is None or (hit[0] and hit[1] >= 0 and hit[1] != placed):
            rep = next(iter(members.values()))
            pod = self._pod(actx.state.snapshot, rep)[0]
            if hit is None and not all(c.admit(rep, pod, actx).ok for c in self.admission):
                memo[kx] = (False, -1)
                return False
            # capacity only shrinks within a cycle: once no node fits a pod, none will (-1)
            fits = bool(actx.state.snapshot.feasible(pod).any())
            hit = memo[kx] = (True, placed if fits else -1)
        if not hit[0]:
            return False
        if hit[1] < 0:
            return True
        return (
            reserved is not None
            and (k0, False) in failed
            and (not kx[2] or (k0, True) in failed or not self._may_end_before(kx, seen, actx.now, shadow))
        )

    def _may_end_before(self, kx: tuple[object, ...], seen: set[int], now: float, shadow: float) -> bool:
        """Could a queued job of shape ``kx`` that the cycle has not looked at yet end (by its
        estimate) before the EASY shadow time?"""
        for est, oid in self._queued_est.get(kx, ()):
            if oid not in seen:
                return now + est <= shadow
        return False

    def _unqueue(self, job: Job) -> None:
        oid = id(job)
        if self._queued.pop(oid, None) is not None:
            self._drop_queued(oid, job)
            self._unqueued.append(job)

    def forget(self, job_id: str) -> None:
        """The job left the queue for good (ended or cancelled): drop its cached state."""
        self._pods.pop(job_id, None)
        self.nominated.pop(job_id, None)
        self.graph.forget(job_id)

    # -- preemption (planned in scheduling/preemption.py; recorded here) -----------------------------
    def _try_preempt(
        self,
        snap: ClusterSnapshot,
        job: Job,
        pod: PodRequest,
        running: Mapping[str, RunningJob],
        gone: set[str],
        out: Decisions,
        now: float,
        within_nominal: np.ndarray | None = None,
    ) -> Status:
        """Phase 4: preempt to make room for ``job`` (victims chosen by
        :func:`~gpufleet.scheduling.preemption.choose_preemption`); on success they are nominated
        and the job waits for them to stop."""
        plan = choose_preemption(
            snap,
            job,
            pod,
            running,
            gone,
            now,
            within_nominal,
            quotas=self.quotas,
            usage=self.usage,
            graph=self.graph,
            preemptible=self._preemptible,
            preempt_min_runtime_s=self.config.preempt_min_runtime_s,
            reclaim_min_runtime_s=self.config.reclaim_min_runtime_s,
        )
        if isinstance(plan, Status):
            self._deferred(plan, out)
            return plan
        self._nominate(job, zip(plan.victims, plan.reasons, strict=True), gone, out)
        return SUCCESS

    def try_reclaim(
        self,
        snap: ClusterSnapshot,
        job: Job,
        pod: PodRequest,
        within_nominal: np.ndarray,
        running: Mapping[str, RunningJob],
        gone: set[str],
        out: Decisions,
        now: float,
    ) -> Status:
        """The team is within its nominal quota but its cohort lent the quota out: preempt
        borrowers (Kueue's reclaimWithinCohort) until the cohort can hold the job
        (:func:`~gpufleet.scheduling.preemption.choose_reclaim`). Called by the quota admission
        check; single-pod jobs only, and only while preemption is enabled."""
        if not self.config.preemption or job.spec.gang_size != 1:
            return Status(Code.UNSCHEDULABLE, "quota")
        chosen = choose_reclaim(
            snap,
            job,
            pod,
            within_nominal,
            running,
            gone,
            now,
            quotas=self.quotas,
            usage=self.usage,
            graph=self.graph,
            min_runtime_s=self.config.reclaim_min_runtime_s,
            victims=self._victims(running),
        )
        return self._take(job, chosen, reclaim_reason(job), gone, out)

    def try_within_team(
        self,
        snap: ClusterSnapshot,
        job: Job,
        pod: PodRequest,
        running: Mapping[str, RunningJob],
        gone: set[str],
        out: Decisions,
        now: float,
    ) -> Status:
        """The job is held by its own team's quota: preempt the team's lower-priority preemptible
        jobs that hold it (Kueue's ``withinClusterQueue: LowerPriority``,
        :func:`~gpufleet.scheduling.preemption.choose_within_team`). Called by the quota admission
        check; single-pod jobs only, and only while preemption is enabled."""
        if not self.config.preemption or job.spec.gang_size != 1:
            return Status(Code.UNSCHEDULABLE, "quota")
        chosen = choose_within_team(
            snap,
            job,
            pod,
            running,
            gone,
            now,
            quotas=self.quotas,
            usage=self.usage,
            graph=self.graph,
            min_runtime_s=self.config.preempt_min_runtime_s,
            victims=self._victims(running),
        )
        return self._take(job, chosen, within_team_reason(job), gone, out)

    def _victims(self, running: Mapping[str, RunningJob]) -> QuotaVictims:
        """The cycle's running preemptible jobs by team (``running`` does not change in a cycle)."""
        if self._quota_victims is None:
            self._quota_victims = QuotaVictims.of(running)
        return self._quota_victims

    def _take(self, job: Job, chosen: list[RunningJob] | Status, reason: str, gone: set[str], out: Decisions) -> Status:
        """A quota preemption's outcome: its victims nominated (SUCCESS), or why not (a deferral
        makes the cycle run again when the victims come of age)."""
        if isinstance(chosen, Status):
            self._deferred(chosen, out)
            return chosen
        self._nominate(job, ((rj, reason) for rj in chosen), gone, out)
        return SUCCESS

    @staticmethod
    def _deferred(status: Status, out: Decisions) -> None:
        """A preemption waits for runs to reach their minimum runtime: the cycle must run again then."""
        if isinstance(status, Deferred):
            out.retry_at = min(out.retry_at, status.until)

    def _nominate(self, job: Job, victims: Iterable[tuple[RunningJob, str]], gone: set[str], out: Decisions) -> None:
        """Record ``job``'s victims (with why each is preempted): edges of the preemption graph,
        preemption decisions, this cycle's ``gone``, and the job's nomination."""
        nominated = set()
        for rj, why in victims:
            self.graph.add(job.id, rj.job.id)
            out.preemptions.append(Preemption(rj, job.id, why))
            nominated.add(rj.job.id)
            gone.add(rj.job.id)
        self.nominated[job.id] = nominated
