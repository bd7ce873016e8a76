"""Backfill: what jobs behind a blocked one may do (phase 4 of the cycle, ``scheduling/cycle.py``).

Modes (:attr:`CycleConfig.backfill <gpufleet.scheduling.cycle.CycleConfig>`):

- ``easy``: the first job that does not fit (the head) gets a reservation: the earliest time it
  would fit as running jobs end by their runtime estimate (the *shadow time*) and the nodes it would
  use then (:func:`reservation`). Later jobs may only use those nodes if they end, by their own
  estimate, before the shadow time; elsewhere they start as usual;
- ``greedy``: later jobs start wherever they fit (no reservation);
- ``strict``: the cycle stops at the first job that does not fit.

A job without a runtime estimate (nor a maximum runtime) never ends before a shadow time
(:func:`has_estimate`); a running job with an unknown end time frees nothing.

Pure: the reservation is arithmetic on copies of the nodes' rows (MIG pods use a what-if on the
snapshot, undone before returning); :class:`RunningByEnd` keeps the running jobs sorted by expected
end across cycles.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from gpufleet.model.gpu import MILLI
from gpufleet.model.job import Job
from gpufleet.scheduling.framework import ScorePlugin, diff_queue
from gpufleet.scheduling.gang import place_gang
from gpufleet.scheduling.placement.base import uncommit
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.snapshot import ClusterSnapshot, PodRequest

BACKFILL_MODES = ("easy", "greedy", "strict")


def by_est_end(rj: RunningJob) -> tuple[float, str]:
    """The sort key of running jobs for EASY reservations: (expected end, id)."""
    return (rj.est_end, rj.job.id)


def has_estimate(job: Job) -> bool:
    """Can the job ever end before an EASY shadow time (it has a runtime estimate)?"""
    return (job.spec.estimated_runtime_s or job.spec.max_runtime_s) is not None


class RunningByEnd:
    """The running jobs by (expected end, id), kept sorted across cycles (a diff by identity)."""

    def __init__(self) -> None:
        self._ends: list[tuple[float, str]] = []
        self._rjs: list[RunningJob] = []
        self._objs: dict[int, RunningJob] = {}
        self._ids: set[int] = set()

    def update(self, running: Mapping[str, RunningJob]) -> list[RunningJob]:
        """Bring the order to ``running`` and return it (the index's own list: read it, do not
        change it; the next call updates it in place)."""
        d = diff_queue(self._ids, self._objs, list(running.values()))
        ends, rjs = self._ends, self._rjs
        if d is None or len(d[1]) + len(d[2]) > len(running) // 2 + 16:
            rjs[:] = sorted(running.values(), key=by_est_end)
            ends[:] = [by_est_end(r) for r in rjs]
            self._objs = {id(r): r for r in rjs}
            self._ids = set(self._objs)
            return rjs
        self._ids, new, gone = d
        objs = self._objs
        for r in gone:
            del objs[id(r)]
            i = bisect_left(ends, by_est_end(r))
            while rjs[i] is not r:
                i += 1
            del ends[i]
            del rjs[i]
        for r in new:
            objs[id(r)] = r
            k = by_est_end(r)
            i = bisect_left(ends, k)
            ends.insert(i, k)
            rjs.insert(i, r)
        return rjs


def reservation(
    snap: ClusterSnapshot, placement: ScorePlugin, job: Job, pod: PodRequest, running: Iterable[RunningJob]
) -> tuple[float, set[int]]:
    """EASY backfill: the earliest time the blocked job fits as running jobs end (by estimate),
    and the nodes it would use then. Unknown end times count as never. ``running``: a list is
    taken as already sorted by (expected end, id); any other iterable is sorted.

    Counts, per node, how many of the job's (identical) pods would fit as jobs end — arithmetic
    on copies of the nodes' rows, no change to the snapshot; MIG pods use a what-if instead (gang
    placement with ``placement``, undone before returning).
    """
    ends = running if isinstance(running, list) else sorted(running, key=by_est_end)
    if pod.gpu.is_mig:
        return _reservation_whatif(snap, placement, job, pod, ends)
    need = job.spec.gang_size
    static = snap._static_mask(pod) & snap.schedulable[: snap.n]
    rows: dict[int, tuple[list[int], int, int]] = {}
    cand = np.flatnonzero(static)
    g = pod.gpu
    if g.count == 0:
        per_node = np.full(len(cand), 64, dtype=np.int64)
    elif g.is_fractional:  # one replica at least on a node whose GPUs are replicas (ClusterSnapshot.share_milli)
        per_node = (snap.gpu_free[cand] // np.maximum(snap.share_floor[cand], g.milli)[:, None]).sum(axis=1)
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
            k = _pods_fitting(*rows[i], pod, snap.share_milli(i, pod))
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
    snap: ClusterSnapshot, placement: ScorePlugin, job: Job, pod: PodRequest, ends: Sequence[RunningJob]
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
            got = place_gang(snap, placement, pod, job.spec.gang_size)
            if got is not None:
                for a in reversed(got):
                    uncommit(snap, placement, pod, a)
                shadow, nodes = rj.est_end, {a.node for a in got}
                break
    finally:
        for r in reversed(restores):
            r()
    return shadow, nodes


def _pods_fitting(row: list[int], cpu: int, mem: int, pod: PodRequest, share_milli: int) -> int:
    """How many copies of ``pod`` (not MIG) fit on a node with these free GPUs, CPU and memory
    (``share_milli``: what a fraction reserves there, :meth:`ClusterSnapshot.share_milli`)."""
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
        return min(k, sum(f // share_milli for f in row))
    return min(k, row.count(MILLI) // g.count)
