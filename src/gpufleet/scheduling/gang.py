"""Gang placement: the pods of a job, all or nothing, on one kind of node.

A gang's pods are identical and a backend renders them from one template (a Kubernetes Job asks
every pod for the same devices; a time-sliced node needs count x replicas of them), so a gang of GPU
pods runs on one kind of node: one GPU type and sharing mode. Kinds are tried from the one of the
best node for a pod.

Placements are reserved in the snapshot (and the placement policy told, see
:func:`~gpufleet.scheduling.placement.base.commit`); a gang that does not fit leaves both as they
were.
"""

from __future__ import annotations

from gpufleet.scheduling.framework import ScorePlugin
from gpufleet.scheduling.placement.base import commit, place_one, uncommit
from gpufleet.scheduling.snapshot import SHARING_CODE, Assignment, ClusterSnapshot, PodRequest


def place_gang(
    snap: ClusterSnapshot, placement: ScorePlugin, pod: PodRequest, gang: int
) -> tuple[Assignment, ...] | None:
    """The ``gang`` pods of a job, all or nothing, reserved in the snapshot; None when they do not
    fit. A gang of GPU pods goes on one kind of node (GPU type and sharing mode, see the module);
    kinds are tried from the one of the best node for a pod."""
    if gang == 1 or pod.gpu_count == 0:
        return place_pods(snap, placement, pod, gang)
    n = snap.n
    saved = snap.schedulable[:n].copy()
    kind = snap.gpu_type[:n] * len(SHARING_CODE) + snap.sharing[:n]
    left = saved.copy()  # nodes of the kinds not tried yet
    try:
        while (first := place_one(snap, placement, pod)) is not None:
            same = kind == kind[first.node]
            snap.schedulable[:n] = saved & same
            got = place_pods(snap, placement, pod, gang)
            if got is not None:
                return got
            left &= ~same  # that kind cannot hold the gang: try the next
            snap.schedulable[:n] = left
        return None
    finally:
        snap.schedulable[:n] = saved


def place_pods(
    snap: ClusterSnapshot, placement: ScorePlugin, pod: PodRequest, gang: int
) -> tuple[Assignment, ...] | None:
    """``gang`` copies of ``pod``, each on the best node left for it, all or nothing (no node
    kind is imposed: :func:`place_gang` restricts the nodes first)."""
    taken: list[Assignment] = []
    for _ in range(gang):
        a = place_one(snap, placement, pod)
        if a is None:
            for t in reversed(taken):
                uncommit(snap, placement, pod, t)
            return None
        commit(snap, placement, pod, a)
        taken.append(a)
    return tuple(taken)
