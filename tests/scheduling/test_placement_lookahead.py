"""``fgd-waste``: scenarios where its tie-breaking by expected final waste departs from FGD."""

from __future__ import annotations

import numpy as np

from gpufleet.model.gpu import MILLI
from gpufleet.scheduling.framework import PLACEMENT, PolicyContext, WorkloadClass
from gpufleet.scheduling.placement import place_one
from gpufleet.scheduling.placement.fgdwaste import expected_waste
from tests.scheduling.test_placement import build, node, pod

# Whole-GPU pods, 470-milli pods and 320-milli pods.
WORKLOAD = [
    WorkloadClass(cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=1000, gpu_types=frozenset(), weight=0.5),
    WorkloadClass(cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=470, gpu_types=frozenset(), weight=0.3),
    WorkloadClass(cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=320, gpu_types=frozenset(), weight=0.2),
]


def make(name: str) -> object:
    return PLACEMENT.get(name)(PolicyContext(workload=WORKLOAD, seed=1))


def test_expected_waste_table() -> None:
    w = expected_waste(WORKLOAD)
    assert w[0] == 0 and w[MILLI] == 0
    assert w[180] == 180  # nothing typical fits: all of it is waste
    assert w[330] < 60  # a 320 pod very likely fills it, leaving 10
    assert 60 <= w[530] < 530 / 2  # filled by a 470 (leaves 60) or a 320 (leaves 210)


def test_sharing_pod_avoids_a_dead_leftover_that_fgd_ties() -> None:
    # A 320-milli pod: on "b" (500 free) it leaves 180, which no typical pod fits; on "a" (650 free)
    # it leaves 330, which a 320 pod fits. FGD's integer scores tie (both remove ~60-70 milli of
    # fragmentation: 51 points each) and the tie goes to "b", first in node order; fgd-waste's
    # secondary key (expected final waste removed: about +75 on "a", -90 on "b") picks "a".
    snap = build(node("b").gpus(1).used([500]), node("a").gpus(1).used([350]))
    p = pod(snap, gpus=1, milli=320)
    fgd, mine = make("fgd"), make("fgd-waste")
    nodes = np.array([0, 1], dtype=np.int64)
    s_fgd = fgd.score(snap, p, nodes)  # type: ignore[attr-defined]
    assert s_fgd[0] == s_fgd[1]
    a_fgd = place_one(snap, fgd, p)  # type: ignore[arg-type]
    a_mine = place_one(snap, mine, p)  # type: ignore[arg-type]
    assert a_fgd is not None and snap.names[a_fgd.node] == "b"
    assert a_mine is not None and snap.names[a_mine.node] == "a"
    assert a_mine.gpus == (0,)


def test_same_as_fgd_when_fgd_scores_differ() -> None:
    # A 470 pod next to a 470 (530 free, leaves 60) beats a fresh GPU for both policies.
    snap = build(node("a").gpus(2), node("b").gpus(2).used([0, 470]))
    p = pod(snap, gpus=1, milli=470)
    for name in ("fgd", "fgd-waste"):
        a = place_one(snap, make(name), p)  # type: ignore[arg-type]
        assert a is not None and snap.names[a.node] == "b" and a.gpus == (1,)
