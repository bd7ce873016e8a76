"""FGD — Fragmentation Gradient Descent (Weng et al., USENIX ATC 2023), after the reference
simulator (hkust-adsl/kubernetes-scheduler-simulator, ``FGDScore`` with ``gpuSelMethod: FGD``).

**Fragmentation of a node** with respect to a target workload ``M`` (typical pods ``m`` with
popularity ``p_m``, from ``PolicyContext.workload``)::

    F(n) = Σ_m p_m · F_m(n)
    F_m(n) = Σ_{GPUs g with free_g < gpu_milli_m} free_g   if m fits on n ("Q3": GPU type allowed,
                                                            enough CPU, and ≥ count_m GPUs with
                                                            free ≥ gpu_milli_m)
           = Σ_g free_g                                    otherwise (every idle GPU is a fragment
                                                            to m; CPU-only pods always count so)

(milli-GPU; memory is not part of it, as in the reference). **Score** of placing pod ``p`` on
node ``n``: the fragmentation it removes, squashed as the reference does,
``int(100 · sigmoid((F(n) − F(n ⊕ p)) / 1000))``. A fractional pod tries every GPU of the node
that fits it and keeps the best (ties: lowest GPU index); that GPU is also what :meth:`select`
returns. Whole GPUs: the lowest-index free GPUs (the node state after taking any ``k`` free GPUs
is the same). Ties between nodes are left to :func:`place_one`.

**Speed.** ``F`` depends on a node through ``cnt[u]`` (GPUs with free ≥ u) and ``small[u]`` (free
milli on GPUs with free < u) for the few distinct per-GPU requests ``u`` of the workload, its total
free milli, its CPU and its GPU type. These are cached per node and recomputed only for nodes whose
row changed since the last call (found by comparing with a copy, so any mutation of the snapshot is
seen, releases and what-ifs included). The state after a placement is derived from the cached
statistics in O(levels) per candidate: whole GPUs take fully free GPUs (``cnt`` drops by k for every
level, ``small`` is unchanged); a fraction changes one GPU; a CPU-only pod changes only the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.model.gpu import MILLI
from gpufleet.scheduling.framework import PLACEMENT, PolicyContext, WorkloadClass
from gpufleet.scheduling.placement.base import MAX_NODE_SCORE
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest

BoolArray = npt.NDArray[np.bool_]


def sigmoid_score(delta_milli: FloatArray) -> FloatArray:
    """The reference's ``int64(sigmoid(Δ / 1000) · 100)`` (Δ = fragmentation removed, milli-GPU)."""
    result: FloatArray = np.floor(MAX_NODE_SCORE / (1.0 + np.exp(-delta_milli / 1000.0)))
    return result


@dataclass(slots=True)
class _Stats:
    """Per-candidate node statistics from which fragmentation is computed."""

    cnt: IntArray  # [K, U] GPUs with free >= level
    small: IntArray  # [K, U] free milli on GPUs with free < level
    total: IntArray  # [K] free milli-GPU
    cpu: IntArray  # [K] free CPU milli
    gtype: IntArray  # [K] GPU type index (-1: none)
    mem: IntArray | None = None  # [K] free memory MiB (only read when the model uses memory)


class FragModel:
    """Expected GPU fragmentation of nodes against a target workload (see the module docstring)."""

    def __init__(self, workload: Sequence[WorkloadClass], *, use_memory: bool = False) -> None:
        gpu = [w for w in workload if w.gpu_count > 0 and w.weight > 0]
        self.use_memory = use_memory
        self.mem: IntArray = np.array([w.memory_mib for w in gpu], dtype=np.int64)
        total_w = sum(w.weight for w in workload if w.weight > 0)
        norm = 1.0 / total_w if total_w > 0 else 0.0
        self.w_cpu_only = sum(w.weight for w in workload if w.gpu_count == 0 and w.weight > 0) * norm
        self.levels: IntArray = np.array(sorted({min(w.gpu_milli, MILLI) for w in gpu}) or [MILLI], dtype=np.int64)
        self.cpu: IntArray = np.array([w.cpu_milli for w in gpu], dtype=np.int64)
        self.count: IntArray = np.array([w.gpu_count for w in gpu], dtype=np.int64)
        self.level_of: IntArray = np.searchsorted(self.levels, [min(w.gpu_milli, MILLI) for w in gpu]).astype(np.int64)
        self.weight: FloatArray = np.array([w.weight * norm for w in gpu], dtype=np.float64)
        self.types = [w.gpu_types for w in gpu]
        self._access: BoolArray | None = None
        self._access_key: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return len(self.weight) == 0 and self.w_cpu_only == 0

    def access(self, snap: ClusterSnapshot) -> BoolArray:
        """[n_types + 1, T]: may typical pod t use GPU type i (last row: no GPU → False)."""
        key = tuple(snap.gpu_types)
        if self._access is None or key != self._access_key:
            acc = np.zeros((len(key) + 1, len(self.types)), dtype=np.bool_)
            for t, allowed in enumerate(self.types):
                for i, name in enumerate(key):
                    acc[i, t] = not allowed or name in allowed
            self._access, self._access_key = acc, key
        return self._access

    def level_stats(self, free: IntArray) -> tuple[IntArray, IntArray]:
        """(cnt, small) of GPU rows ``free[K, G]``."""
        ge = free[:, :, None] >= self.levels[None, None, :]
        cnt: IntArray = ge.sum(axis=1)
        small: IntArray = np.where(ge, 0, free[:, :, None]).sum(axis=1)
        return cnt, small

    def frag(self, st: _Stats, access: BoolArray) -> FloatArray:
        """Expected fragmentation (milli-GPU) of each candidate."""
        total = st.total.astype(np.float64)
        out = self.w_cpu_only * total
        if len(self.weight) == 0:
            return out
        ok = access[st.gtype]  # gtype -1 → last row (no access)
        ok = ok & (st.cpu[:, None] >= self.cpu[None, :])
        if self.use_memory and st.mem is not None:
            ok &= st.mem[:, None] >= self.mem[None, :]
        ok &= st.cnt[:, self.level_of] >= self.count[None, :]
        val = np.where(ok, st.small[:, self.level_of], total[:, None])
        result: FloatArray = out + val @ self.weight
        return result


class _NodeCache:
    """Per-node level statistics and fragmentation of a snapshot, refreshed row by row."""

    def __init__(self) -> None:
        self.snap_id = 0
        self.n = -1
        self.ntypes = -1
        self.seen_gpu: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.seen_cpu: IntArray = np.zeros(0, dtype=np.int64)
        self.seen_mem: IntArray = np.zeros(0, dtype=np.int64)
        self.cnt: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.small: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.total: IntArray = np.zeros(0, dtype=np.int64)
        self.frag: FloatArray = np.zeros(0)

    def sync(self, snap: ClusterSnapshot, model: FragModel) -> None:
        n = snap.n
        gpu, cpu, mem = snap.gpu_free[:n], snap.cpu_free[:n], snap.mem_free[:n]
        if id(snap) != self.snap_id or n != self.n or len(snap.gpu_types) != self.ntypes:
            rows = np.arange(n)
            self.snap_id, self.n, self.ntypes = id(snap), n, len(snap.gpu_types)
            self.cnt = np.zeros((n, len(model.levels)), dtype=np.int64)
            self.small = np.zeros((n, len(model.levels)), dtype=np.int64)
            self.total = np.zeros(n, dtype=np.int64)
            self.frag = np.zeros(n)
        else:
            changed = (gpu != self.seen_gpu).any(axis=1) | (cpu != self.seen_cpu) | (mem != self.seen_mem)
            rows = np.flatnonzero(changed)
            if len(rows) == 0:
                return
        self.seen_gpu = gpu.copy()
        self.seen_cpu = cpu.copy()
        self.seen_mem = mem.copy()
        free = gpu[rows]
        cnt, small = model.level_stats(free)
        self.cnt[rows], self.small[rows] = cnt, small
        self.total[rows] = free.sum(axis=1)
        st = _Stats(cnt, small, self.total[rows], cpu[rows], snap.gpu_type[rows], snap.mem_free[:n][rows])
        self.frag[rows] = model.frag(st, model.access(snap))


class FGD:
    """The FGD score plugin (see the module docstring)."""

    name = "fgd"

    def __init__(self, workload: Sequence[WorkloadClass], *, use_memory: bool = False) -> None:
        self.model = FragModel(workload, use_memory=use_memory)
        self._cache = _NodeCache()
        self._last: tuple[PodRequest, IntArray, IntArray] | None = None  # pod, nodes, chosen GPU

    def key(self, delta_milli: FloatArray) -> FloatArray:
        """What node and GPU choices compare: the reference's integer sigmoid score."""
        return sigmoid_score(delta_milli)

    # -- the fragmentation removed by placing ``pod`` on each node -------------------------------------
    def frag_delta(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> tuple[FloatArray, IntArray]:
        """(Δ fragmentation in milli-GPU per node — positive is better, chosen GPU per node or -1)."""
        c = self._cache
        c.sync(snap, self.model)
        model = self.model
        access = model.access(snap)
        g = pod.gpu
        before = c.frag[nodes]
        gpus = np.full(len(nodes), -1, dtype=np.int64)
        cpu_after = snap.cpu_free[nodes] - pod.cpu_milli
        mem_after = snap.mem_free[nodes] - pod.memory_mib
        gtype = snap.gpu_type[nodes]
        if g.count == 0:
            st = _Stats(c.cnt[nodes], c.small[nodes], c.total[nodes], cpu_after, gtype, mem_after)
            return before - model.frag(st, access), gpus
        if g.is_mig:
            return self._delta_generic(snap, pod, nodes, before, access), gpus
        if not g.is_fractional:
            k = g.count
            st = _Stats(c.cnt[nodes] - k, c.small[nodes], c.total[nodes] - k * MILLI, cpu_after, gtype, mem_after)
            return before - model.frag(st, access), gpus
        return self._delta_fractional(snap, pod, nodes, before, access)

    def _delta_fractional(
        self,
        snap: ClusterSnapshot,
        pod: PodRequest,
        nodes: IntArray,
        before: FloatArray,
        access: npt.NDArray[np.bool_],
    ) -> tuple[FloatArray, IntArray]:
        c, model, m = self._cache, self.model, pod.gpu.milli
        free = snap.gpu_free[nodes]  # [K, G]
        g_max = free.shape[1]
        fits = free >= m
        # GPUs with the same free share give the same node state: keep the first of each value.
        dup = (free[:, :, None] == free[:, None, :]) & np.tri(g_max, g_max, -1, dtype=np.bool_)[None, :, :]
        cand = fits & ~dup.any(axis=2)
        pk, pg = np.nonzero(cand)  # sorted by node position, then GPU
        f = free[pk, pg]
        lv = model.levels[None, :]
        f_, a_ = f[:, None], (f - m)[:, None]
        cnt = c.cnt[nodes[pk]] - (f_ >= lv) + (a_ >= lv)
        small = c.small[nodes[pk]] - np.where(f_ < lv, f_, 0) + np.where(a_ < lv, a_, 0)
        st = _Stats(
            cnt,
            small,
            c.total[nodes[pk]] - m,
            snap.cpu_free[nodes[pk]] - pod.cpu_milli,
            snap.gpu_type[nodes[pk]],
            snap.mem_free[nodes[pk]] - pod.memory_mib,
        )
        delta = before[pk] - model.frag(st, access)
        score = self.key(delta)
        starts = np.flatnonzero(np.r_[True, pk[1:] != pk[:-1]])
        best_score = np.maximum.reduceat(score, starts)
        per_pair_best = best_score[np.searchsorted(starts, np.arange(len(pk)), side="right") - 1]
        is_best = score == per_pair_best
        # first best pair of each node (lowest GPU index among integer-score ties)
        first_pos, first_idx = np.unique(pk[is_best], return_index=True)
        chosen = np.flatnonzero(is_best)[first_idx]
        out = np.full(len(nodes), -np.inf)
        gpus = np.full(len(nodes), -1, dtype=np.int64)
        out[first_pos] = delta[chosen]
        gpus[first_pos] = pg[chosen]
        return out, gpus

    def _delta_generic(
        self,
        snap: ClusterSnapshot,
        pod: PodRequest,
        nodes: IntArray,
        before: FloatArray,
        access: npt.NDArray[np.bool_],
    ) -> FloatArray:
        """Any request (MIG slices): apply the snapshot's default assignment and recompute."""
        out = np.full(len(nodes), -np.inf)
        for k, node in enumerate(nodes.tolist()):
            a = snap.assignment(node, pod)
            if a is None:
                continue
            free = snap.gpu_free[node : node + 1].copy()
            for gi in a.gpus:
                free[0, gi] -= a.milli
            cnt, small = self.model.level_stats(free)
            st = _Stats(
                cnt,
                small,
                free.sum(axis=1),
                np.array([snap.cpu_free[node] - pod.cpu_milli]),
                snap.gpu_type[node : node + 1],
                np.array([snap.mem_free[node] - pod.memory_mib]),
            )
            out[k] = before[k] - self.model.frag(st, access)[0]
        return out

    # -- ScorePlugin ------------------------------------------------------------------------------------
    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        delta, gpus = self.frag_delta(snap, pod, nodes)
        self._last = (pod, nodes, gpus)
        out = self.key(delta)
        out[~np.isfinite(delta)] = -np.inf
        return out

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return self._select(snap, pod, node)

    def _select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        if not pod.gpu.is_fractional:
            return None
        gpu = -1
        if self._last is not None and self._last[0] is pod:
            _, nodes, gpus = self._last
            pos = int(np.searchsorted(nodes, node))
            if pos < len(nodes) and nodes[pos] == node:
                gpu = int(gpus[pos])
        if gpu < 0:
            _, gpus = self.frag_delta(snap, pod, np.array([node], dtype=np.int64))
            gpu = int(gpus[0])
        if gpu < 0:
            return None
        return Assignment(node, (gpu,), pod.gpu.milli, pod.cpu_milli, pod.memory_mib)


@PLACEMENT.register("fgd")
def make_fgd(ctx: PolicyContext) -> FGD:
    return FGD(ctx.workload)
