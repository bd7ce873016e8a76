"""Preemption (PostFilter): free room for a job that does not fit by stopping others.

A job that is not preemptible is never a victim, whatever the reason. Victims are only preemptible
jobs that are (a) of strictly lower *base* priority (across teams, see :func:`outranks`), or (b) of
a cohort member that is borrowing the GPU type when the preemptor would stay within its own nominal
quota (reclaim, Kueue's ``reclaimWithinCohort``). A run younger than the minimum runtime of its kind
(``preempt_min_runtime_s``, ``reclaim_min_runtime_s``: KAI-scheduler's preemptMinRuntime and
reclaimMinRuntime) is not a victim yet: the preemptor waits (:class:`Deferred`) rather than take
work that has barely started. Among the nodes where the job would then fit we pick the fewest
victims, then the least work lost since their last checkpoint. A preemption that would close a
cycle in the preemption graph (the victim, directly or not, preempted the preemptor before) is
refused, so there is never a preemption cycle.

The cycle preempts in three ways, all planned here: :func:`choose_preemption` for a job that does
not fit (phase 4); :func:`choose_reclaim` for a job held by its quota while its cohort lent the
quota out, and :func:`choose_within_team` for a job held by its own team's quota while the team's
lower-priority preemptible jobs hold it (Kueue's ``withinClusterQueue: LowerPriority``), both from
the quota admission check. The last two take only what the job needs: the lowest priority first,
then the least progress at risk, then the youngest, pruned of victims that turn out not to be
needed. Planning changes nothing: the scheduler records the victims it is given (preemption graph,
nominations, decisions).

Works on the snapshot by what-if: removals are undone before returning.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model.gpu import MILLI
from gpufleet.model.job import Job
from gpufleet.model.node import SharingMode
from gpufleet.scheduling.framework import Code, Status, WaitKind
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.scheduling.snapshot import SHARING_CODE, Assignment, ClusterSnapshot, PodRequest
from gpufleet.scheduling.usage import UsageTracker


@dataclass(slots=True)
class RunningJob:
    job: Job
    assignments: tuple[Assignment, ...]
    gpu_type: str  # GPU model it runs on ("" for CPU-only)
    est_end: float = field(init=False)  # when it should end by its runtime estimate (inf: unknown)

    def __post_init__(self) -> None:
        start = self.job.start_time
        est = self.job.spec.estimated_runtime_s or self.job.spec.max_runtime_s
        if start is None or est is None:
            self.est_end = math.inf
        else:
            self.est_end = start + max(0.0, est - self.job.work_done_s)


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    node: int
    victims: tuple[RunningJob, ...]
    lost_work_s: float
    reasons: tuple[str, ...]


# Why a job waits when the victims it needs have not run their minimum runtime yet (fixed texts: the
# queue estimate reads them as waits for room, ``scheduling/estimate.py``)
PREEMPT_MIN_RUNTIME_WAIT = "preempting to make room once lower-priority jobs have run their minimum runtime"
RECLAIM_MIN_RUNTIME_WAIT = "reclaiming quota lent to the cohort once its borrowed jobs have run their minimum runtime"
WITHIN_TEAM_WAIT = "preempting lower-priority jobs of its team to stay within its quota"
WITHIN_TEAM_MIN_RUNTIME_WAIT = "preempting its team's lower-priority jobs once they have run their minimum runtime"
NO_WITHIN_TEAM_VICTIM = "quota: no lower-priority preemptible job of its team to preempt"


@dataclass(frozen=True, slots=True)
class Deferred(Status):
    """No victim may be taken yet, but enough will be once their runs reach the minimum runtime,
    at ``until`` (the cycle runs again then, :attr:`~gpufleet.scheduling.decisions.Decisions.retry_at`)."""

    until: float = math.inf


def young(rj: RunningJob, now: float, min_runtime_s: float) -> bool:
    """Has ``rj``'s current run not yet run ``min_runtime_s``? A run whose start was not seen yet
    counts as just started. (``start + min > now`` rather than ``now - start < min``: the time it
    comes of age is then always after ``now``.)"""
    if min_runtime_s <= 0:
        return False
    start = rj.job.start_time
    return start is None or start + min_runtime_s > now


def _of_age(rj: RunningJob, now: float, min_runtime_s: float) -> float:
    start = rj.job.start_time
    return (now if start is None else start) + min_runtime_s


def reclaim_order(now: float) -> Callable[[RunningJob], tuple[float, float, float, str]]:
    """The order in which reclaim and within-team preemption take victims: the lowest priority,
    then the least progress at risk (the work since the last checkpoint, what a stop throws away),
    then the youngest run."""

    def key(rj: RunningJob) -> tuple[float, float, float, str]:
        start = rj.job.start_time
        return (rj.job.priority, rj.job.work_at_risk(now), -(now if start is None else start), rj.job.id)

    return key


def take_needed(cands: Iterable[RunningJob], need: int, room: Callable[[RunningJob], int]) -> list[RunningJob] | None:
    """Victims taken in ``cands`` order until they free ``need`` (each frees ``room(victim)``, 0: it
    may not be taken any more), then pruned of those not needed (latest first but the last one, as
    :func:`_greedy_set`); None when all of them are not enough."""
    taken: list[tuple[RunningJob, int]] = []
    freed = 0
    for rj in cands:
        if freed >= need:
            break
        got = room(rj)
        if got <= 0:
            continue
        taken.append((rj, got))
        freed += got
    if freed < need:
        return None
    for k in range(len(taken) - 2, -1, -1):
        if freed - taken[k][1] >= need:
            freed -= taken[k][1]
            del taken[k]
    return [rj for rj, _ in taken]


def held_milli(rj: RunningJob) -> int:
    return sum(a.milli * len(a.gpus) for a in rj.assignments)


@dataclass(slots=True)
class PreemptionGraph:
    """Edges preemptor → victim seen so far; refuses edges that would close a cycle."""

    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    _victims: set[str] | None = field(default=None, repr=False)  # every edge's target (made on demand)

    def is_victim(self, job: str) -> bool:
        """Is ``job`` the target of an edge? A job that is not may preempt any job but itself
        (:meth:`allows`: a cycle back to it would have to pass an edge into it)."""
        if self._victims is None:
            self._victims = set().union(*self.edges.values())
        return job in self._victims

    def reaches(self, src: str, dst: str) -> bool:
        stack, seen = [src], {src}
        while stack:
            x = stack.pop()
            if x == dst:
                return True
            for y in self.edges.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False

    def allows(self, preemptor: str, victim: str) -> bool:
        if preemptor == victim:
            return False
        return victim not in self.edges or not self.reaches(victim, preemptor)

    def add(self, preemptor: str, victim: str) -> None:
        self.edges[preemptor].add(victim)
        self._victims = None

    def forget(self, job: str) -> None:
        """A job ended for good: it can neither preempt nor be preempted again, so no future
        cycle can pass through it."""
        self.edges.pop(job, None)
        for targets in self.edges.values():
            targets.discard(job)
        self._victims = None


VictimFilter = Callable[[RunningJob], str | None]  # → reason it may be preempted, or None


def plan_preemption(
    snap: ClusterSnapshot,
    job: Job,
    pod: PodRequest,
    running: Iterable[RunningJob],
    may_preempt: VictimFilter,
    graph: PreemptionGraph,
    now: float,
) -> PreemptionPlan | None:
    """The best single-node plan for one pod of ``job``, or None."""
    by_node: dict[int, list[tuple[RunningJob, str]]] = defaultdict(list)
    for rj in running:
        if rj.job.id == job.id:
            continue
        why = may_preempt(rj)
        if why is None or not graph.allows(job.id, rj.job.id):
            continue
        for a in rj.assignments:
            by_node[a.node].append((rj, why))
    # a node with fewer candidate victims can need no more victims than it has: look there first
    nodes = sorted(by_node, key=lambda nd: (len(by_node[nd]), nd))[:MAX_NODES_EXAMINED]
    cands_of: dict[int, list[tuple[RunningJob, str]]] = {}
    for node in nodes:
        # cheapest victims first: least work at risk, then lowest priority, then youngest
        cands = sorted(
            by_node[node],
            key=lambda c: (c[0].job.work_at_risk(now), c[0].job.priority, -(c[0].job.start_time or 0), c[0].job.id),
        )
        uniq: list[tuple[RunningJob, str]] = []
        for c in cands:
            if all(u[0] is not c[0] for u in uniq):
                uniq.append(c)
        if snap.static_ok(node, pod) and _fits_without(snap, node, pod, (rj for rj, _ in uniq)):
            cands_of[node] = uniq  # stopping every candidate here would be enough
    # fewest victims first, over all nodes at once: sets of one, then of two, then greedy
    for k in range(1, EXHAUSTIVE_UP_TO + 1):
        found = [
            (sum(rj.job.work_at_risk(now) for rj, _ in combo), node, [rj.job.id for rj, _ in combo], combo)
            for node, cands in cands_of.items()
            if len(cands) <= EXHAUSTIVE_CANDIDATES or k == 1
            for combo in itertools.combinations(cands, k)
            if _fits_without(snap, node, pod, (rj for rj, _ in combo))
        ]
        if found:
            lost, node, _, combo = min(found, key=lambda f: (f[0], f[1], f[2]))
            return PreemptionPlan(node, tuple(rj for rj, _ in combo), lost, tuple(w for _, w in combo))
    best: PreemptionPlan | None = None
    for node, cands in cands_of.items():
        taken = _greedy_set(snap, node, pod, cands)
        lost = sum(rj.job.work_at_risk(now) for rj, _ in taken)
        plan = PreemptionPlan(node, tuple(rj for rj, _ in taken), lost, tuple(w for _, w in taken))
        if best is None or (len(plan.victims), plan.lost_work_s, plan.node) < (
            len(best.victims),
            best.lost_work_s,
            best.node,
        ):
            best = plan
    return best


EXHAUSTIVE_UP_TO = 2  # try every victim set of up to this size (pairs only on nodes with few candidates)
EXHAUSTIVE_CANDIDATES = 8
MAX_NODES_EXAMINED = 64  # nodes with the fewest candidate victims first


def _fits_without(snap: ClusterSnapshot, node: int, pod: PodRequest, victims: Iterable[RunningJob]) -> bool:
    """Would ``pod`` fit on ``node`` if ``victims`` stopped? Arithmetic on the node's row (the
    static checks were done by the caller); MIG nodes go through a what-if on the snapshot."""
    if snap.sharing[node] == SHARING_CODE[SharingMode.MIG]:
        restores = []
        try:
            for rj in victims:
                restores.append(snap.remove(rj.assignments))
            return snap.fits(node, pod)
        finally:
            for r in reversed(restores):
                r()
    row: list[int] = snap.gpu_free[node, : int(snap.gpu_count[node])].tolist()
    cpu = int(snap.cpu_free[node])
    mem = int(snap.mem_free[node])
    for rj in victims:
        for a in rj.assignments:
            if a.node == node:
                cpu += a.cpu_milli
                mem += a.memory_mib
                for gi in a.gpus:
                    row[gi] += a.milli
    if cpu < pod.cpu_milli or mem < pod.memory_mib:
        return False
    g = pod.gpu
    if g.count == 0:
        return True
    if g.is_fractional:
        return bool(max(row, default=0) >= snap.share_milli(node, pod))
    return row.count(MILLI) >= g.count


def _greedy_set(
    snap: ClusterSnapshot, node: int, pod: PodRequest, cands: list[tuple[RunningJob, str]]
) -> list[tuple[RunningJob, str]]:
    """Victims on ``node`` taken in ``cands`` order until ``pod`` fits, then pruned of those that
    turn out not to be needed. The caller checked that all of ``cands`` would be enough."""
    taken: list[tuple[RunningJob, str]] = []
    for c in cands:
        taken.append(c)
        if _fits_without(snap, node, pod, (rj for rj, _ in taken)):
            break
    for k in range(len(taken) - 2, -1, -1):
        rest = taken[:k] + taken[k + 1 :]
        if _fits_without(snap, node, pod, (rj for rj, _ in rest)):
            taken = rest
    return taken


# -- who may be preempted, and the cycle's two ways to preempt --------------------------------------
def outranks(job: Job, victim: Job, gpu_type: str, quotas: QuotaPolicy, usage: UsageTracker) -> bool:
    """May ``job`` preempt ``victim`` by priority? A strictly higher base class and a preemptible
    victim; across teams, when the victim's team is within its nominal quota of the type, only
    with a class that team was granted too (its guaranteed quota is not taken by a class it could
    not use itself). A team without a quota, or one borrowing the type, has no such guarantee."""
    if not (victim.priority < job.priority and victim.spec.preemptible):
        return False
    if victim.team == job.team:
        return True
    q = quotas.quotas.get(victim.team)
    if q is None or q.priority_classes is None or job.spec.priority_class in q.priority_classes:
        return True
    return quotas.is_borrowing(victim.team, gpu_type, usage)


def takes_guaranteed(job: Job, victims: Iterable[RunningJob], quotas: QuotaPolicy, usage: UsageTracker) -> bool:
    """Would ``victims`` take another team below its nominal quota when only its borrowing made
    them fair game? Whole jobs stop, so the last one may cross the line — but every other one
    must fit within what the team borrows."""
    taken: dict[tuple[str, str], list[int]] = {}
    for rj in victims:
        v = rj.job
        if v.team == job.team:
            continue
        q = quotas.quotas.get(v.team)
        if q is None:
            continue  # no quota, nothing guaranteed
        granted = q.priority_classes is None or job.spec.priority_class in q.priority_classes
        if granted and v.priority < job.priority and v.spec.preemptible:
            continue  # outranked by a class the team may use itself
        taken.setdefault((v.team, rj.gpu_type), []).append(sum(a.milli * len(a.gpus) for a in rj.assignments))
    for (team, gpu_type), helds in taken.items():
        borrowed = usage.held(team, gpu_type) - (quotas.nominal(team, gpu_type) or 0)
        if borrowed <= 0 or sum(helds) - max(helds) >= borrowed:
            return True
    return False


def priority_reason(job: Job) -> str:
    """Why a victim of ``job``'s priority is stopped (the world's stop reason)."""
    return f"preempted by higher-priority job {job.id} ({job.spec.priority_class})"


def reclaim_reason(job: Job) -> str:
    """Why a borrower is stopped for ``job``'s reclaim (``quota`` first: the requeue metrics count
    stops whose reason starts so as quota reclaims)."""
    return f"quota reclaimed by team {job.team} (job {job.id})"


def within_team_reason(job: Job) -> str:
    """Why a job of ``job``'s own team is stopped for it (a priority preemption)."""
    return f"preempted by higher-priority job {job.id} ({job.spec.priority_class}) of its team, within its quota"


def victim_filter(
    job: Job,
    snap: ClusterSnapshot,
    within_nominal: np.ndarray | None,
    quotas: QuotaPolicy,
    usage: UsageTracker,
    *,
    now: float = 0.0,
    preempt_min_runtime_s: float = 0.0,
    reclaim_min_runtime_s: float = 0.0,
) -> VictimFilter:
    """Who ``job`` may preempt: preemptible jobs only, of lower base priority (across teams, see
    :func:`outranks`) that have run ``preempt_min_runtime_s``; or, when it would stay within its
    nominal quota of a GPU type, of cohort members borrowing that type that have run
    ``reclaim_min_runtime_s``."""
    by_priority = priority_reason(job)
    by_reclaim = reclaim_reason(job)
    borrowers: dict[str, set[str]] = {}  # GPU type → cohort members borrowing it
    q = quotas.quotas.get(job.team)
    if within_nominal is not None and q is not None and q.cohort is not None:
        members = [m for m in quotas.cohorts[q.cohort] if m != job.team]
        for i, t in enumerate(snap.gpu_types):
            if i < len(within_nominal) and within_nominal[i]:
                borrowers[t] = {m for m in members if quotas.is_borrowing(m, t, usage)}
    priority = job.priority

    def may(rj: RunningJob) -> str | None:
        v = rj.job
        if not v.spec.preemptible:
            return None  # never stopped by the scheduler, whatever the reason
        if (
            v.priority < priority
            and not young(rj, now, preempt_min_runtime_s)
            and outranks(job, v, rj.gpu_type, quotas, usage)
        ):
            return by_priority
        teams = borrowers.get(rj.gpu_type)
        if teams and v.team in teams and not young(rj, now, reclaim_min_runtime_s):
            return by_reclaim
        return None

    return may


def choose_preemption(
    snap: ClusterSnapshot,
    job: Job,
    pod: PodRequest,
    running: Mapping[str, RunningJob],
    gone: set[str],
    now: float,
    within_nominal: np.ndarray | None,
    *,
    quotas: QuotaPolicy,
    usage: UsageTracker,
    graph: PreemptionGraph,
    preemptible: Mapping[int, int],
    preempt_min_runtime_s: float = 0.0,
    reclaim_min_runtime_s: float = 0.0,
) -> PreemptionPlan | Status:
    """The victims that would make room for (single-pod) ``job`` (:func:`plan_preemption` with
    :func:`victim_filter`), or why there are none (UNSCHEDULABLE; :class:`Deferred` when runs
    younger than their minimum runtime would do once they come of age). ``gone``: victims already
    chosen (not candidates again); ``preemptible``: base priority → preemptible jobs holding
    resources (none below the job's priority and no reclaim possible: no search)."""
    may_reclaim = within_nominal is not None and bool(within_nominal.any()) and bool(quotas.cohorts)
    if not may_reclaim and not any(n > 0 and p < job.priority for p, n in preemptible.items()):
        return Status(Code.UNSCHEDULABLE, "no lower-priority preemptible job runs")  # fast path
    cands = [rj for rj in running.values() if rj.job.id not in gone]

    def plan_with(preempt_min: float, reclaim_min: float) -> PreemptionPlan | Status:
        may = victim_filter(
            job,
            snap,
            within_nominal,
            quotas,
            usage,
            now=now,
            preempt_min_runtime_s=preempt_min,
            reclaim_min_runtime_s=reclaim_min,
        )
        plan = plan_preemption(snap, job, pod, cands, may, graph, now)
        if plan is None:
            return Status(Code.UNSCHEDULABLE, "no preemption frees enough room")
        if takes_guaranteed(job, plan.victims, quotas, usage):
            return Status(Code.UNSCHEDULABLE, "preemption would take another team's guaranteed quota")
        return plan

    plan = plan_with(preempt_min_runtime_s, reclaim_min_runtime_s)
    if not isinstance(plan, Status):
        return plan
    youngest = max(preempt_min_runtime_s, reclaim_min_runtime_s if may_reclaim else 0.0)
    if youngest > 0 and any(rj.job.spec.preemptible and young(rj, now, youngest) for rj in cands):
        later = plan_with(0.0, 0.0)  # would runs that are still too young do?
        if not isinstance(later, Status):
            by_reclaim = reclaim_reason(job)
            until = max(
                _of_age(rj, now, reclaim_min_runtime_s if why == by_reclaim else preempt_min_runtime_s)
                for rj, why in zip(later.victims, later.reasons, strict=True)
            )
            if until > now:
                return Deferred(Code.UNSCHEDULABLE, PREEMPT_MIN_RUNTIME_WAIT, WaitKind.PREEMPTION, until)
    return plan


@dataclass(slots=True)
class QuotaVictims:
    """The running preemptible jobs by team, made once per cycle: a quota preemption (reclaim,
    within-team) looks at one team's or one cohort's preemptible jobs, not at every running job —
    with every pending job held by its quota, a cycle asks once per job (a long queue on a busy
    cluster: thousands of scans of every running job per cycle)."""

    by_team: dict[str, list[RunningJob]]
    lowest: dict[str, int]  # the lowest priority among a team's preemptible running jobs

    @classmethod
    def of(cls, running: Mapping[str, RunningJob]) -> QuotaVictims:
        by_team: dict[str, list[RunningJob]] = {}
        lowest: dict[str, int] = {}
        for rj in running.values():
            if rj.job.spec.preemptible:
                team = rj.job.team
                by_team.setdefault(team, []).append(rj)
                p = rj.job.priority
                if team not in lowest or p < lowest[team]:
                    lowest[team] = p
        return cls(by_team, lowest)


def choose_reclaim(
    snap: ClusterSnapshot,
    job: Job,
    pod: PodRequest,
    within_nominal: np.ndarray,
    running: Mapping[str, RunningJob],
    gone: set[str],
    now: float,
    *,
    quotas: QuotaPolicy,
    usage: UsageTracker,
    graph: PreemptionGraph,
    min_runtime_s: float = 0.0,
    victims: QuotaVictims | None = None,
) -> list[RunningJob] | Status:
    """The team is within its nominal quota but its cohort lent the quota out: the borrowers to
    preempt (Kueue's reclaimWithinCohort) until the cohort can hold the job, or why there are
    none (UNSCHEDULABLE; :class:`Deferred` when borrowed runs younger than ``min_runtime_s`` would
    do once they come of age). Victims are preemptible jobs of other cohort members that borrow the
    type, in :func:`reclaim_order`, no more than needed (:func:`take_needed`), and never so many of
    one team that it would fall below its nominal quota by more than its last job; GPU types are
    tried in the snapshot's order, the first that frees enough wins. ``gone``: victims already
    chosen; ``victims``: the cycle's :class:`QuotaVictims` of ``running``."""
    q = quotas.quotas.get(job.team)
    if q is None or q.cohort is None:
        return Status(Code.UNSCHEDULABLE, "quota")
    members = set(quotas.cohorts[q.cohort]) - {job.team}
    index = victims if victims is not None else QuotaVictims.of(running)
    pool = [rj for m in members for rj in index.by_team.get(m, ())]
    until = math.inf
    for i, t in enumerate(snap.gpu_types):
        if i >= len(pod.type_ok) or not (pod.type_ok[i] and within_nominal[i]):
            continue
        need = quotas.reclaim_need(job.team, t, job.spec.total_gpu_milli, usage)
        if need <= 0:
            continue
        cands = sorted(
            (
                rj
                for rj in pool
                if rj.job.id not in gone
                and rj.gpu_type == t
                and quotas.is_borrowing(rj.job.team, t, usage)
                and graph.allows(job.id, rj.job.id)
            ),
            key=reclaim_order(now),
        )
        old = [rj for rj in cands if not young(rj, now, min_runtime_s)]
        chosen = _take_borrowed(old, need, t, members, quotas, usage)
        if chosen is not None:
            return chosen
        later = _take_borrowed(cands, need, t, members, quotas, usage)
        if later is not None:
            until = min(until, max(_of_age(rj, now, min_runtime_s) for rj in later))
    if until < math.inf:
        return Deferred(Code.UNSCHEDULABLE, RECLAIM_MIN_RUNTIME_WAIT, WaitKind.QUOTA, until)
    return Status(Code.UNSCHEDULABLE, "quota: nothing to reclaim")


def _take_borrowed(
    cands: list[RunningJob], need: int, gpu_type: str, members: Iterable[str], quotas: QuotaPolicy, usage: UsageTracker
) -> list[RunningJob] | None:
    """:func:`take_needed` over borrowers: a team's jobs are taken while it still borrows (whole
    jobs stop, so its last victim may take it below its nominal quota, never a second one)."""
    borrowed = {m: usage.held(m, gpu_type) - (quotas.nominal(m, gpu_type) or 0) for m in members}

    def room(victim: RunningJob) -> int:
        team = victim.job.team
        if borrowed[team] <= 0:
            return 0  # that team is back within its own quota
        held = held_milli(victim)
        borrowed[team] -= held
        return held

    return take_needed(cands, need, room)


def choose_within_team(
    snap: ClusterSnapshot,
    job: Job,
    pod: PodRequest,
    running: Mapping[str, RunningJob],
    gone: set[str],
    now: float,
    *,
    quotas: QuotaPolicy,
    usage: UsageTracker,
    graph: PreemptionGraph,
    min_runtime_s: float = 0.0,
    victims: QuotaVictims | None = None,
) -> list[RunningJob] | Status:
    """The job is held by its own team's quota while the team's lower-priority preemptible jobs
    hold it (Kueue's ``withinClusterQueue: LowerPriority``): those to preempt so that the quota
    admits it (:meth:`QuotaPolicy.own_shortfall`), in :func:`reclaim_order`, no more than needed;
    or why there are none (UNSCHEDULABLE; :class:`Deferred` when runs younger than
    ``min_runtime_s`` would do once they come of age). GPU types are tried in the snapshot's order,
    the first that frees enough wins. ``gone``: victims already chosen; ``victims``: the cycle's
    :class:`QuotaVictims` of ``running``."""
    index = victims if victims is not None else QuotaVictims.of(running)
    if index.lowest.get(job.team, job.priority) >= job.priority:
        return Status(Code.UNSCHEDULABLE, NO_WITHIN_TEAM_VICTIM)  # no job of its team it outranks
    own = index.by_team[job.team]
    until = math.inf
    for i, t in enumerate(snap.gpu_types):
        if i >= len(pod.type_ok) or not pod.type_ok[i]:
            continue
        need = quotas.own_shortfall(job.team, t, job.spec.total_gpu_milli, usage, may_borrow=job.spec.preemptible)
        if need is None:
            continue
        cands = sorted(
            (
                rj
                for rj in own
                if rj.gpu_type == t
                and rj.job.priority < job.priority
                and rj.job.id not in gone
                and graph.allows(job.id, rj.job.id)
            ),
            key=reclaim_order(now),
        )
        chosen = take_needed((rj for rj in cands if not young(rj, now, min_runtime_s)), need, held_milli)
        if chosen is not None:
            return chosen
        later = take_needed(cands, need, held_milli)
        if later is not None:
            until = min(until, max(_of_age(rj, now, min_runtime_s) for rj in later))
    if until < math.inf:
        return Deferred(Code.UNSCHEDULABLE, WITHIN_TEAM_MIN_RUNTIME_WAIT, WaitKind.PREEMPTION, until)
    return Status(Code.UNSCHEDULABLE, NO_WITHIN_TEAM_VICTIM)
