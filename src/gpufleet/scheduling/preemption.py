"""Preemption (PostFilter): free room for a job that does not fit by stopping others.

Victims are only (a) running jobs of strictly lower *base* priority that are preemptible, or
(b) jobs of a cohort member that is borrowing the GPU type when the preemptor would stay within
its own nominal quota (reclaim, Kueue semantics). Among the nodes where the job would then fit we
pick the fewest victims, then the least work lost since their last checkpoint. A preemption
that would close a cycle in the preemption graph (the victim, directly or not, preempted the
preemptor before) is refused, so there is never a preemption cycle.

Works on the snapshot by what-if: removals are undone before returning.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpufleet.model.gpu import MILLI
from gpufleet.model.job import Job
from gpufleet.model.node import SharingMode
from gpufleet.scheduling.snapshot import SHARING_CODE, Assignment, ClusterSnapshot, PodRequest


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


@dataclass(slots=True)
class PreemptionGraph:
    """Edges preemptor → victim seen so far; refuses edges that would close a cycle."""

    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

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

    def forget(self, job: str) -> None:
        """A job ended for good: it can neither preempt nor be preempted again, so no future
        cycle can pass through it."""
        self.edges.pop(job, None)
        for targets in self.edges.values():
            targets.discard(job)


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
        return bool(max(row, default=0) >= g.milli)
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
