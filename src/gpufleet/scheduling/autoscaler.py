"""Autoscaler decisions: which pool to grow, which idle nodes to remove.

Scale up when a job blocked for lack of capacity has waited longer than ``wait_threshold_s``
(default 5 min) or the queue is longer than ``queue_threshold`` (default 10): for blocked jobs in
queue order, first count the capacity of nodes already provisioning, then open new nodes from the
cheapest pool that fits (price per GPU-hour; spot pools only for preemptible jobs; only pools whose
nodes the job's node selector and required affinity match and whose taints it tolerates), within
``max_nodes``. Scale down nodes idle (nothing allocated) longer than ``idle_ttl_s`` (default 10 min),
never below a pool's ``min_nodes``. Decisions only: the world provisions and drains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.model.constraints import matches, tolerates_all
from gpufleet.model.gpu import MILLI, canonical_gpu_name, gpu_model
from gpufleet.model.job import Job
from gpufleet.model.node import CapacityType, NodePool, SharingMode
from gpufleet.scheduling.snapshot import ClusterSnapshot, PodRequest


@dataclass(frozen=True, slots=True)
class AutoscalerConfig:
    enabled: bool = False
    wait_threshold_s: float = 300.0
    queue_threshold: int = 10
    idle_ttl_s: float = 600.0
    max_new_nodes_per_cycle: int = 100


@dataclass(slots=True)
class PoolState:
    pool: NodePool
    live: int  # nodes up (schedulable or draining)
    provisioning: int  # nodes asked for, not ready yet
    node_hour_usd: float

    @property
    def gpu_hour_usd(self) -> float:
        return self.node_hour_usd / max(1, self.pool.gpus_per_node)


@dataclass(frozen=True, slots=True)
class ScaleUp:
    pool: str
    count: int
    reason: str


@dataclass(frozen=True, slots=True)
class ScaleDown:
    node: str
    reason: str


@dataclass(slots=True)
class _Planned:
    pool: PoolState
    gpu_free: list[int]
    cpu_free: int
    mem_free: int
    mig_free: list[int] = field(default_factory=list)

    def take(self, pod: PodRequest) -> bool:
        g = pod.gpu
        if self.cpu_free < pod.cpu_milli or self.mem_free < pod.memory_mib:
            return False
        if g.count == 0:
            pass
        elif g.is_mig:
            prof = gpu_model(self.pool.pool.gpu_model).mig_profile(g.mig_profile or "")
            if prof is None:
                return False
            for gi, free in enumerate(self.mig_free):
                m = next((m for m in prof.masks() if free & m == m), None)
                if m is not None:
                    self.mig_free[gi] &= ~m
                    break
            else:
                return False
        elif g.is_fractional:
            fits = [i for i, f in enumerate(self.gpu_free) if f >= g.milli]
            if not fits:
                return False
            i = min(fits, key=lambda i: self.gpu_free[i])
            self.gpu_free[i] -= g.milli
        else:
            whole = [i for i, f in enumerate(self.gpu_free) if f >= MILLI]
            if len(whole) < g.count:
                return False
            for i in whole[: g.count]:
                self.gpu_free[i] = 0
        self.cpu_free -= pod.cpu_milli
        self.mem_free -= pod.memory_mib
        return True


def pool_fits(ps: PoolState, pod: PodRequest, snap: ClusterSnapshot) -> bool:
    """Could ``pod`` run on an empty node of this pool? Its job's constraints are judged against the
    node the pool would make (:meth:`NodePool.make_node`: the pool's labels and taints; no name yet,
    so a job pinned to a node by name grows no pool), as placement will judge that node."""
    p = ps.pool
    if p.capacity_type is CapacityType.SPOT and not pod.allow_spot:
        return False
    if pod.spot_only and p.capacity_type is not CapacityType.SPOT:
        return False
    c = pod.constraints
    if c is not None and c.selects and not matches(c, p.labels, ""):
        return False
    if p.taints and not tolerates_all(c.tolerations if c is not None else (), p.taints):
        return False
    if pod.cpu_milli > p.cpu_milli or pod.memory_mib > p.memory_mib:
        return False
    g = pod.gpu
    if g.count == 0:
        return True
    if g.count > p.gpus_per_node:
        return False
    model = canonical_gpu_name(p.gpu_model) or p.gpu_model
    if model in snap.gpu_types:
        idx = snap.gpu_types.index(model)
        if idx < len(pod.type_ok) and not pod.type_ok[idx]:
            return False
        if idx >= len(pod.type_ok) and not pod.type_ok.all():
            return False
    elif not pod.type_ok.all():
        return False
    if pod.min_gpu_memory_gib > 0 and gpu_model(model).memory_gib < pod.min_gpu_memory_gib:
        return False
    if g.is_mig:
        return p.sharing is SharingMode.MIG and gpu_model(model).mig_profile(g.mig_profile or "") is not None
    if p.sharing is SharingMode.MIG:
        return False
    return not (g.is_fractional and p.sharing is not SharingMode.SHARED)


class Autoscaler:
    def __init__(self, config: AutoscalerConfig) -> None:
        self.config = config
        self.idle_since: dict[str, float] = {}
        self._autoscaled: tuple[tuple[object, ...], npt.NDArray[np.bool_]] | None = None

    def scale_up(
        self,
        blocked: Sequence[tuple[Job, PodRequest]],
        pools: Sequence[PoolState],
        snap: ClusterSnapshot,
        *,
        queue_length: int,
        now: float,
    ) -> list[ScaleUp]:
        """Decide new nodes for jobs blocked by capacity (``blocked`` in queue order)."""
        cfg = self.config
        if not cfg.enabled or not blocked or not pools:
            return []
        long_wait = any(now - j.submit_time >= cfg.wait_threshold_s for j, _ in blocked)
        if not long_wait and queue_length <= cfg.queue_threshold:
            return []
        planned: list[_Planned] = []
        # capacity that is already on its way counts first
        for ps in pools:
            for _ in range(ps.provisioning):
                planned.append(self._empty(ps))
        new_counts: dict[str, int] = {}
        reasons: dict[str, str] = {}
        total_new = 0
        for job, pod in blocked:
            need = job.spec.gang_size
            for _ in range(need):
                if any(p.take(pod) for p in planned if pool_fits(p.pool, pod, snap)):
                    continue
                candidates = [
                    ps
                    for ps in pools
                    if ps.live + ps.provisioning + new_counts.get(ps.pool.name, 0) < ps.pool.max_nodes
                    and pool_fits(ps, pod, snap)
                ]
                if not candidates or total_new >= cfg.max_new_nodes_per_cycle:
                    break
                best = min(
                    candidates,
                    key=lambda ps: (
                        ps.gpu_hour_usd if pod.gpu.count else ps.node_hour_usd,
                        ps.pool.gpus_per_node,
                        ps.pool.name,
                    ),
                )
                node = self._empty(best)
                node.take(pod)
                planned.append(node)
                new_counts[best.pool.name] = new_counts.get(best.pool.name, 0) + 1
                reasons.setdefault(
                    best.pool.name,
                    f"job {job.id} waited {now - job.submit_time:.0f}s; "
                    f"queue {queue_length}; cheapest fitting pool at ${best.gpu_hour_usd:.3f}/GPU-h",
                )
                total_new += 1
        return [ScaleUp(name, n, reasons[name]) for name, n in new_counts.items()]

    @staticmethod
    def _empty(ps: PoolState) -> _Planned:
        p = ps.pool
        mig = [(1 << 8) - 1] * p.gpus_per_node if p.sharing is SharingMode.MIG else []
        return _Planned(ps, [MILLI] * p.gpus_per_node, p.cpu_milli, p.memory_mib, mig)

    def scale_down(self, snap: ClusterSnapshot, pools: Sequence[PoolState], now: float) -> list[ScaleDown]:
        """Nodes of autoscaled pools idle past the TTL, keeping each pool at or above min_nodes."""
        cfg = self.config
        if not cfg.enabled or all(ps.live <= ps.pool.min_nodes for ps in pools):
            self.idle_since.clear()
            return []
        by_pool = {ps.pool.name: ps for ps in pools}
        n = snap.n
        key = (tuple(by_pool), len(snap.pools))
        if self._autoscaled is None or self._autoscaled[0] != key:
            self._autoscaled = (key, np.array([p in by_pool for p in snap.pools], dtype=np.bool_))
        autoscaled = self._autoscaled[1]  # per pool index: is it an autoscaled pool?
        empty = snap.schedulable[:n] & (snap.pods[:n] == 0) & autoscaled[snap.pool[:n]]
        out: list[ScaleDown] = []
        removed: dict[str, int] = {}
        idle_now: set[str] = set()
        for i in np.flatnonzero(empty):
            name = snap.names[int(i)]
            pool = snap.pools[int(snap.pool[i])]
            ps = by_pool.get(pool)
            if ps is None:
                continue  # static nodes are never scaled down
            idle_now.add(name)
            since = self.idle_since.setdefault(name, now)
            if now - since < cfg.idle_ttl_s:
                continue
            if ps.live - removed.get(pool, 0) <= ps.pool.min_nodes:
                continue
            removed[pool] = removed.get(pool, 0) + 1
            out.append(ScaleDown(name, f"idle for {now - since:.0f}s (ttl {cfg.idle_ttl_s:.0f}s)"))
        for name in [k for k in self.idle_since if k not in idle_now]:
            del self.idle_since[name]
        return out
