"""The placement step shared by the scheduling cycle and the experiments.

:func:`place_one` is Filter → Score → select host → choose GPUs, for one pod, without reserving:

1. ``snap.feasible(pod)`` (vectorized Filter over all nodes);
2. ``plugin.score(snap, pod, nodes)`` for the feasible nodes (higher is better, ``-inf`` vetoes);
3. the best-scoring node; ties go to the lowest node index, or, given ``tie_rank`` (one integer
   per node), to the tied node of lowest rank. The FGD paper's simulator patches kube-scheduler's
   ``selectHost`` to break ties by the smallest node name, and names nodes with a random
   permutation prefix per seed: a fixed random priority order, which is what ``tie_rank`` gives;
4. ``plugin.select(snap, pod, node)`` chooses the GPUs, or ``snap.assignment`` does by default.

The caller reserves with ``snap.allocate`` — or with :func:`commit`, which also tells plugins that
keep per-node state (:class:`AllocationObserver`, e.g. GpuClustering's affinity counts) about it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from gpufleet.scheduling.framework import ScorePlugin
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest

# kube-scheduler's score range (framework.MinNodeScore / MaxNodeScore).
MIN_NODE_SCORE = 0
MAX_NODE_SCORE = 100
# Normalization constants of the FGD simulator (open-gpu-share utils): the largest node spec.
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000


@runtime_checkable
class AllocationObserver(Protocol):
    """A plugin that keeps per-node state beyond the snapshot's arrays.

    ``observe`` is called after every reservation (``sign=+1``) and release (``sign=-1``) made
    through :func:`commit` / :func:`uncommit`. Plugins must stay correct (if less precise) when
    it is never called.
    """

    def observe(self, snap: ClusterSnapshot, pod: PodRequest, a: Assignment, sign: int) -> None: ...


def place_one(
    snap: ClusterSnapshot,
    plugin: ScorePlugin,
    pod: PodRequest,
    *,
    tie_rank: IntArray | None = None,
) -> Assignment | None:
    """Where ``pod`` should go now (node and GPUs), or None if no node fits. Does not allocate."""
    nodes = np.flatnonzero(snap.feasible(pod))
    if len(nodes) == 0:
        return None
    scores = np.asarray(plugin.score(snap, pod, nodes), dtype=np.float64)
    best = scores.max()
    if best == -np.inf:
        return None
    ties = nodes[scores == best]
    node = int(ties[0] if tie_rank is None or len(ties) == 1 else ties[np.argmin(tie_rank[ties])])
    a = plugin.select(snap, pod, node)
    return snap.widen(a, pod) if a is not None else snap.assignment(node, pod)


def commit(snap: ClusterSnapshot, plugin: ScorePlugin, pod: PodRequest, a: Assignment) -> None:
    """Reserve ``a`` in the snapshot and notify the plugin if it observes allocations."""
    snap.allocate(a)
    observe = getattr(plugin, "observe", None)  # cheaper than isinstance on a runtime Protocol
    if observe is not None:
        observe(snap, pod, a, +1)


def uncommit(snap: ClusterSnapshot, plugin: ScorePlugin, pod: PodRequest, a: Assignment) -> None:
    """Release ``a`` (the inverse of :func:`commit`)."""
    snap.release(a)
    observe = getattr(plugin, "observe", None)
    if observe is not None:
        observe(snap, pod, a, -1)


# -- helpers shared by policies -----------------------------------------------------------------------
def normalize_scores(scores: FloatArray) -> FloatArray:
    """kube-scheduler's NormalizeScore as the FGD simulator does it: min-max to 0..100, integer math
    (all equal → all 0). ``-inf`` (vetoed) entries stay ``-inf``."""
    out = np.full(len(scores), -np.inf)
    ok = np.isfinite(scores)
    if not ok.any():
        return out
    s = scores[ok].astype(np.int64)
    lo, hi = int(s.min()), int(s.max())
    if hi == lo:
        out[ok] = MIN_NODE_SCORE
    else:
        out[ok] = (s - lo) * (MAX_NODE_SCORE - MIN_NODE_SCORE) // (hi - lo) + MIN_NODE_SCORE
    return out


def minmax01(scores: FloatArray) -> FloatArray:
    """Floating min-max normalization to 0..1 over the finite entries (all equal → 0)."""
    out = np.full(len(scores), -np.inf)
    ok = np.isfinite(scores)
    if not ok.any():
        return out
    s = scores[ok]
    lo, hi = float(s.min()), float(s.max())
    out[ok] = 0.0 if hi == lo else (s - lo) / (hi - lo)
    return out


def free_gpu_milli(snap: ClusterSnapshot, nodes: IntArray) -> IntArray:
    """Total free milli-GPU of each node in ``nodes``."""
    result: IntArray = snap.free_milli[nodes]
    return result


def fully_free_gpus(snap: ClusterSnapshot, nodes: IntArray) -> IntArray:
    result: IntArray = snap.whole_free[nodes]
    return result


def fractional_choice(
    snap: ClusterSnapshot, pod: PodRequest, node: int, pick: Callable[[IntArray, IntArray], int]
) -> Assignment | None:
    """For a fractional pod: the GPU ``pick(fitting_gpus, their_free_milli)`` chooses among the
    node's GPUs with room; None for other pods (the snapshot's default applies) or no room."""
    g = pod.gpu
    if not g.is_fractional:
        return None
    free = snap.gpu_free[node, : int(snap.gpu_count[node])]
    fits = np.flatnonzero(free >= g.milli)
    if len(fits) == 0:
        return None
    gpu = int(fits[pick(fits, free[fits])])
    return Assignment(node, (gpu,), g.milli, pod.cpu_milli, pod.memory_mib)


def random_gpu_assignment(
    snap: ClusterSnapshot, pod: PodRequest, node: int, rng: np.random.Generator
) -> Assignment | None:
    """A uniformly random fitting GPU for a fractional pod (whole GPUs: lowest free indices)."""
    return fractional_choice(snap, pod, node, lambda fits, _: int(rng.integers(len(fits))))
