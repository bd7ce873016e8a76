"""The scheduling cycle: one pass from a queue and a snapshot to decisions.

Phases (numbered as in DESIGN.md):

1. order the queue (nominated jobs — whose victims are being stopped — first);
2. admit each job: the configured admission checks in order (``scheduling/admission.py``; default
   feasibility, quota, budget) each admit it — possibly narrowing its pod request (GPU types, spot
   only) —, hold it this cycle (UNSCHEDULABLE) or reject it as never runnable (UNRESOLVABLE);
3. filter, score and reserve in the snapshot (gangs all or nothing);
4. when a job does not fit: try preemption (PostFilter); if it still waits and is the first such
   job, make its EASY-backfill reservation: later jobs may only use the reserved nodes if they end
   (by their runtime estimate) before the reservation's shadow time; collect it for the autoscaler;
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
The decisions are those of the full pass, job for job (``tests/test_cycle.py`` compares them).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model.gpu import MILLI
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
from gpufleet.scheduling.decisions import ClusterState, Decisions, Placement, Preemption
from gpufleet.scheduling.framework import (
    SUCCESS,
    Code,
    QueueDelta,
    QueueSort,
    ScorePlugin,
    SortContext,
    Status,
    aligned_diff,
    diff_queue,
)
from gpufleet.scheduling.placement.base import commit, place_one, uncommit
from gpufleet.scheduling.preemption import PreemptionGraph, RunningJob, VictimFilter, plan_preemption
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.scheduling.snapshot import SHARING_CODE, Assignment, ClusterSnapshot, PodRequest
from gpufleet.scheduling.usage import UsageTracker

BACKFILL_MODES = ("easy", "greedy", "strict")
# The autoscaler plans for at most this many blocked jobs per cycle (in queue order); it opens at
# most ``max_new_nodes_per_cycle`` nodes anyway, and the next cycle sees the rest.
MAX_BLOCKED_FOR_AUTOSCALER = 512
# Queues at least this long are indexed across cycles and ordered lazily (the cycle may stop early);
# shorter ones are ordered whole, which costs less than keeping the index (half as long: dropped).
LAZY_QUEUE_MIN = 64
NO_ROOM = Status(Code.UNSCHEDULABLE, "no node has room")
_BUILTIN_CHECKS = (FeasibilityCheck, QuotaCheck, BudgetCheck)


@dataclass(frozen=True, slots=True)
class CycleConfig:
    backfill: str = "easy"  # easy | greedy (skip blocked jobs) | strict (stop at the first blocked job)
    preemption: bool = True
    max_spot_restarts: int = 3  # after this many spot interruptions a job runs on-demand only
    autoscaler: AutoscalerConfig = field(default_factory=AutoscalerConfig)
    admission: tuple[str, ...] = DEFAULT_CHECKS  # admission checks (by registered name), in order


def _by_est_end(rj: RunningJob) -> tuple[float, str]:
    return (rj.est_end, rj.job.id)


def _has_estimate(job: Job) -> bool:
    """Can the job ever end before an EASY shadow time (it has a runtime estimate)?"""
    return (job.spec.estimated_runtime_s or job.spec.max_runtime_s) is not None


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
        self._ends: list[tuple[float, str]] = []
        self._ends_rj: list[RunningJob] = []
        self._ends_objs: dict[int, RunningJob] = {}
        self._ends_ids: set[int] = set()

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
        gone: set[str] = set()  # victims chosen in this cycle
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
        pure = (
            lazy
            and not self.quotas
            and not state.limits
            and all(type(c) in _BUILTIN_CHECKS for c in self.admission)
        )
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
                wd[job.id] = Status(Code.UNSCHEDULABLE, "waiting for preempted jobs to stop")
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
                by_end = self._by_end(running)
                shadow, nodes = self._reservation(
                    snap, hjob, hpod, [r for r in by_end if r.job.id not in gone] if gone else by_end, now
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
                        assignments = self._place_gang(snap, pod, job.spec.gang_size)
                    finally:
                        snap.schedulable[reserved_nodes] = saved
                else:
                    assignments = self._place_gang(snap, pod, job.spec.gang_size)
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
                    wd[job.id] = Status(Code.UNSCHEDULABLE, "preempting to make room")
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
            k = keys[oid] = (self._pod(snap, j)[1], j.spec.gpu_types, _has_estimate(j))
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

    def _by_end(self, running: Mapping[str, RunningJob]) -> list[RunningJob]:
        """The running jobs by (expected end, id), kept sorted across cycles (a diff by identity)."""
        d = diff_queue(self._ends_ids, self._ends_objs, list(running.values()))
        ends, rjs = self._ends, self._ends_rj
        if d is None or len(d[1]) + len(d[2]) > len(running) // 2 + 16:
            rjs[:] = sorted(running.values(), key=_by_est_end)
            ends[:] = [_by_est_end(r) for r in rjs]
            self._ends_objs = {id(r): r for r in rjs}
            self._ends_ids = set(self._ends_objs)
            return rjs
        self._ends_ids, new, gone = d
        objs = self._ends_objs
        for r in gone:
            del objs[id(r)]
            i = bisect_left(ends, _by_est_end(r))
            while rjs[i] is not r:
                i += 1
            del ends[i]
            del rjs[i]
        for r in new:
            objs[id(r)] = r
            k = _by_est_end(r)
            i = bisect_left(ends, k)
            ends.insert(i, k)
            rjs.insert(i, r)
        return rjs

    def forget(self, job_id: str) -> None:
        """The job left the queue for good (ended or cancelled): drop its cached state."""
        self._pods.pop(job_id, None)
        self.nominated.pop(job_id, None)
        self.graph.forget(job_id)

    def _place_gang(self, snap: ClusterSnapshot, pod: PodRequest, gang: int) -> tuple[Assignment, ...] | None:
        """The pods of a job, all or nothing. A gang's pods are identical and a backend renders them
        from one template (a Kubernetes Job asks every pod for the same devices; a time-sliced node
        needs count x replicas of them), so a gang of GPU pods runs on one kind of node: one GPU type
        and sharing mode. Kinds are tried from the one of the best node for a pod."""
        if gang == 1 or pod.gpu_count == 0:
            return self._place_pods(snap, pod, gang)
        n = snap.n
        saved = snap.schedulable[:n].copy()
        kind = snap.gpu_type[:n] * len(SHARING_CODE) + snap.sharing[:n]
        left = saved.copy()  # nodes of the kinds not tried yet
        try:
            while (first := place_one(snap, self.placement, pod)) is not None:
                same = kind == kind[first.node]
                snap.schedulable[:n] = saved & same
                got = self._place_pods(snap, pod, gang)
                if got is not None:
                    return got
                left &= ~same  # that kind cannot hold the gang: try the next
                snap.schedulable[:n] = left
            return None
        finally:
            snap.schedulable[:n] = saved

    def _place_pods(self, snap: ClusterSnapshot, pod: PodRequest, gang: int) -> tuple[Assignment, ...] | None:
        taken: list[Assignment] = []
        for _ in range(gang):
            a = place_one(snap, self.placement, pod)
            if a is None:
                for t in reversed(taken):
                    uncommit(snap, self.placement, pod, t)
                return None
            commit(snap, self.placement, pod, a)
            taken.append(a)
        return tuple(taken)

    def _outranks(self, job: Job, victim: Job, gpu_type: str) -> bool:
        """May ``job`` preempt ``victim`` by priority? A strictly higher base class and a preemptible
        victim; across teams, when the victim's team is within its nominal quota of the type, only
        with a class that team was granted too (its guaranteed quota is not taken by a class it could
        not use itself). A team without a quota, or one borrowing the type, has no such guarantee."""
        if not (victim.priority < job.priority and victim.spec.preemptible):
            return False
        if victim.team == job.team:
            return True
        q = self.quotas.quotas.get(victim.team)
        if q is None or q.priority_classes is None or job.spec.priority_class in q.priority_classes:
            return True
        return self.quotas.is_borrowing(victim.team, gpu_type, self.usage)

    def _takes_guaranteed(self, job: Job, victims: Iterable[RunningJob]) -> bool:
        """Would ``victims`` take another team below its nominal quota when only its borrowing made
        them fair game? Whole jobs stop, so the last one may cross the line — but every other one
        must fit within what the team borrows."""
        taken: dict[tuple[str, str], list[int]] = {}
        for rj in victims:
            v = rj.job
            if v.team == job.team:
                continue
            q = self.quotas.quotas.get(v.team)
            if q is None:
                continue  # no quota, nothing guaranteed
            granted = q.priority_classes is None or job.spec.priority_class in q.priority_classes
            if granted and v.priority < job.priority and v.spec.preemptible:
                continue  # outranked by a class the team may use itself
            taken.setdefault((v.team, rj.gpu_type), []).append(sum(a.milli * len(a.gpus) for a in rj.assignments))
        for (team, gpu_type), helds in taken.items():
            borrowed = self.usage.held(team, gpu_type) - (self.quotas.nominal(team, gpu_type) or 0)
            if borrowed <= 0 or sum(helds) - max(helds) >= borrowed:
                return True
        return False

    def _victim_filter(self, job: Job, snap: ClusterSnapshot, within_nominal: np.ndarray | None) -> VictimFilter:
        """Who ``job`` may preempt: lower base priority and preemptible (across teams, see
        :meth:`_outranks`); or, when it would stay within its nominal quota of a GPU type, jobs of
        cohort members borrowing that type."""
        by_priority = f"preempted by higher-priority job {job.id} ({job.spec.priority_class})"
        by_reclaim = f"quota reclaimed by team {job.team} (job {job.id})"
        borrowers: dict[str, set[str]] = {}  # GPU type → cohort members borrowing it
        q = self.quotas.quotas.get(job.team)
        if within_nominal is not None and q is not None and q.cohort is not None:
            members = [m for m in self.quotas.cohorts[q.cohort] if m != job.team]
            for i, t in enumerate(snap.gpu_types):
                if i < len(within_nominal) and within_nominal[i]:
                    borrowers[t] = {m for m in members if self.quotas.is_borrowing(m, t, self.usage)}
        priority = job.priority

        def may(rj: RunningJob) -> str | None:
            v = rj.job
            if v.priority < priority and v.spec.preemptible and self._outranks(job, v, rj.gpu_type):
                return by_priority
            teams = borrowers.get(rj.gpu_type)
            if teams and v.team in teams:
                return by_reclaim
            return None

        return may

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
        may_reclaim = within_nominal is not None and bool(within_nominal.any()) and bool(self.quotas.cohorts)
        if not may_reclaim and not any(n > 0 and p < job.priority for p, n in self._preemptible.items()):
            return Status(Code.UNSCHEDULABLE, "no lower-priority preemptible job runs")  # fast path
        candidates = (rj for rj in running.values() if rj.job.id not in gone)
        plan = plan_preemption(
            snap, job, pod, candidates, self._victim_filter(job, snap, within_nominal), self.graph, now
        )
        if plan is None:
            return Status(Code.UNSCHEDULABLE, "no preemption frees enough room")
        if self._takes_guaranteed(job, plan.victims):
            return Status(Code.UNSCHEDULABLE, "preemption would take another team's guaranteed quota")
        victims = set()
        for rj, why in zip(plan.victims, plan.reasons, strict=True):
            self.graph.add(job.id, rj.job.id)
            out.preemptions.append(Preemption(rj, job.id, why))
            victims.add(rj.job.id)
            gone.add(rj.job.id)
        self.nominated[job.id] = victims
        return SUCCESS

    def _try_reclaim(
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
        borrowers (Kueue's reclaimWithinCohort) until the cohort can hold the job. Victims are
        jobs of other cohort members that borrow the type, least work at risk first."""
        if not self.config.preemption or job.spec.gang_size != 1:
            return Status(Code.UNSCHEDULABLE, "quota")
        q = self.quotas.quotas.get(job.team)
        if q is None or q.cohort is None:
            return Status(Code.UNSCHEDULABLE, "quota")
        members = set(self.quotas.cohorts[q.cohort]) - {job.team}
        for i, t in enumerate(snap.gpu_types):
            if i >= len(pod.type_ok) or not (pod.type_ok[i] and within_nominal[i]):
                continue
            need = self.quotas.reclaim_need(job.team, t, job.spec.total_gpu_milli, self.usage)
            if need <= 0:
                continue
            cands = [
                rj
                for rj in running.values()
                if rj.job.id not in gone
                and rj.job.team in members
                and rj.gpu_type == t
                and self.quotas.is_borrowing(rj.job.team, t, self.usage)
                and self.graph.allows(job.id, rj.job.id)
            ]
            cands.sort(key=lambda rj: (rj.job.work_at_risk(now), rj.job.priority, -(rj.job.start_time or 0), rj.job.id))
            chosen, freed = [], 0
            borrowed = {m: self.usage.held(m, t) - (self.quotas.nominal(m, t) or 0) for m in members}
            for rj in cands:
                if freed >= need:
                    break
                held = sum(a.milli * len(a.gpus) for a in rj.assignments)
                if borrowed[rj.job.team] <= 0:
                    continue  # that team is back within its own quota
                chosen.append(rj)
                freed += held
                borrowed[rj.job.team] -= held
            if freed < need:
                continue
            victims = set()
            for rj in chosen:
                self.graph.add(job.id, rj.job.id)
                out.preemptions.append(Preemption(rj, job.id, f"quota reclaimed by team {job.team} (job {job.id})"))
                victims.add(rj.job.id)
                gone.add(rj.job.id)
            self.nominated[job.id] = victims
            return SUCCESS
        return Status(Code.UNSCHEDULABLE, "quota: nothing to reclaim")

    def _reservation(
        self, snap: ClusterSnapshot, job: Job, pod: PodRequest, running: Iterable[RunningJob], now: float
    ) -> tuple[float, set[int]]:
        """EASY backfill: the earliest time the blocked job fits as running jobs end (by estimate),
        and the nodes it would use then. Unknown end times count as never. ``running``: a list is
        taken as already sorted by (expected end, id); any other iterable is sorted.

        Counts, per node, how many of the job's (identical) pods would fit as jobs end — arithmetic
        on copies of the nodes' rows, no change to the snapshot; MIG pods use a what-if instead.
        """
        ends = running if isinstance(running, list) else sorted(running, key=_by_est_end)
        if pod.gpu.is_mig:
            return self._reservation_whatif(snap, job, pod, ends)
        need = job.spec.gang_size
        static = snap._static_mask(pod) & snap.schedulable[: snap.n]
        rows: dict[int, tuple[list[int], int, int]] = {}
        cand = np.flatnonzero(static)
        g = pod.gpu
        if g.count == 0:
            per_node = np.full(len(cand), 64, dtype=np.int64)
        elif g.is_fractional:
            per_node = (snap.gpu_free[cand] // g.milli).sum(axis=1)
        else:
            per_node = snap.whole_free[cand] // g.count
        if pod.cpu_milli:
            per_node = np.minimum(per_node, snap.cpu_free[cand] // pod.cpu_milli)
        if pod.memory_mib:
            per_node = np.minimum(per_node, snap.mem_free[cand] // pod.memory_mib)
        some = per_node > 0
        fit: dict[int, int] = dict(zip(cand[some].tolist(), per_node[some].tolist(), strict=True))
        total = sum(fit.values())  # pods that fit now (the job is blocked, so total < need)
        for rj in ends:
            if math.isinf(rj.est_end):
                break
            for a in rj.assignments:
                i = int(a.node)
                if not static[i]:
                    continue
                if i not in rows:
                    rows[i] = (
                        snap.gpu_free[i, : int(snap.gpu_count[i])].tolist(),
                        int(snap.cpu_free[i]),
                        int(snap.mem_free[i]),
                    )
                row, cpu, mem = rows[i]
                for gi in a.gpus:
                    row[gi] += a.milli
                rows[i] = (row, cpu + a.cpu_milli, mem + a.memory_mib)
                k = _pods_fitting(*rows[i], pod)
                total += k - fit.get(i, 0)
                fit[i] = k
            if total >= need:
                nodes: set[int] = set()
                got = 0
                for i, k in sorted(fit.items(), key=lambda x: (-x[1], x[0])):
                    if got >= need:
                        break
                    if k:
                        nodes.add(i)
                        got += k
                return rj.est_end, nodes
        return math.inf, set()

    def _reservation_whatif(
        self, snap: ClusterSnapshot, job: Job, pod: PodRequest, ends: Sequence[RunningJob]
    ) -> tuple[float, set[int]]:
        restores = []
        shadow, nodes = math.inf, set()
        try:
            for rj in ends:
                if math.isinf(rj.est_end):
                    break
                restores.append(snap.remove(rj.assignments))
                if not any(snap.fits(a.node, pod) for a in rj.assignments):
                    continue  # no node newly fits a pod, so neither does the job (gangs: identical pods)
                got = self._place_gang(snap, pod, job.spec.gang_size)
                if got is not None:
                    for a in reversed(got):
                        uncommit(snap, self.placement, pod, a)
                    shadow, nodes = rj.est_end, {a.node for a in got}
                    break
        finally:
            for r in reversed(restores):
                r()
        return shadow, nodes


def _pods_fitting(row: list[int], cpu: int, mem: int, pod: PodRequest) -> int:
    """How many copies of ``pod`` (not MIG) fit on a node with these free GPUs, CPU and memory."""
    g = pod.gpu
    k = 1 << 30
    if pod.cpu_milli:
        k = min(k, cpu // pod.cpu_milli)
    elif cpu < 0:
        return 0
    if pod.memory_mib:
        k = min(k, mem // pod.memory_mib)
    if g.count == 0:
        return k if k < (1 << 30) else 64
    if g.is_fractional:
        return min(k, sum(f // g.milli for f in row))
    return min(k, row.count(MILLI) // g.count)
