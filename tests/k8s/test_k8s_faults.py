"""Issue 22: the Kubernetes backend under what a real cluster does to it — node lifecycle events
(cordon, NoSchedule taints, NotReady blips) and the API server's faults (409 storms on binding,
5xx and 429 on stops) — on the substrate that now produces them (tests/support/k8s/faults.py,
nodelifecycle.py). Each test failed on the backend before issue 22's changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from gpufleet.backends.base import BackendEvent, EventKind
from tests.support.k8s.backendworld import NS, World
from tests.support.k8s.nodelifecycle import cordon, set_node_condition

LOSSES = (EventKind.LOST, EventKind.STOPPED, EventKind.FAILED)


def _losses(events: list[BackendEvent], job: str) -> list[BackendEvent]:
    return [e for e in events if e.job_id == job and e.kind in LOSSES]


def _node_removed(events: list[BackendEvent], node: str) -> bool:
    return any(e.kind is EventKind.NODE_REMOVED and e.node == node for e in events)


# what happens to the node, and how it heals (None: it stays so)
NODE_CHANGES: dict[str, tuple[Callable[[World], object], Callable[[World], object] | None]] = {
    "kubectl cordon": (lambda w: cordon(w.core, "gpu-a"), None),
    "disk-pressure NoSchedule taint": (lambda w: set_node_condition(w.core, "gpu-a", "DiskPressure", "True"), None),
    "a NotReady blip (Unknown, then Ready)": (
        lambda w: set_node_condition(w.core, "gpu-a", "Ready", "Unknown", "NodeStatusUnknown"),
        lambda w: set_node_condition(w.core, "gpu-a", "Ready", "True", "KubeletReady"),
    ),
}


@pytest.mark.parametrize("change", list(NODE_CHANGES))
def test_a_node_that_stops_taking_work_keeps_the_work_it_runs(make_world: Callable[..., World], change: str) -> None:
    """Observation 1: each of these SIGTERMed a running pod and restarted its job ("lost: node gpu-a is
    gone"). Kubernetes stops only new placements (and waits 300 s before evicting from a NotReady node)."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("long", "gpu-a"))
    w.running("long")
    start, heal = NODE_CHANGES[change]
    start(w)
    events = w.until(lambda evs: any(e.kind is EventKind.NODE_CORDONED and e.node == "gpu-a" for e in evs))
    if heal is not None:
        heal(w)
        events += w.until(lambda evs: any(e.kind is EventKind.NODE_UNCORDONED and e.node == "gpu-a" for e in evs))
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        events += w.backend.poll()
        time.sleep(0.05)
    assert not _losses(events, "long") and not _node_removed(events, "gpu-a"), events
    assert w.cluster.kubelet is not None and w.cluster.kubelet.sigterms(NS) == []
    assert [p["status"]["phase"] for p in w.pods("long")] == ["Running"]


def test_a_cordoned_node_taking_work_again_is_an_event(make_world: Callable[..., World]) -> None:
    w = make_world(duration_s=None)
    w.backend.inventory()
    cordon(w.core, "gpu-a")
    w.until(lambda evs: any(e.kind is EventKind.NODE_CORDONED and e.node == "gpu-a" for e in evs))
    cordon(w.core, "gpu-a", unschedulable=False)
    w.until(lambda evs: any(e.kind is EventKind.NODE_UNCORDONED and e.node == "gpu-a" for e in evs))
    w.core.delete_node("gpu-a")
    w.until(lambda evs: _node_removed(evs, "gpu-a"))


def test_a_409_on_binding_is_resolved_by_reading_the_pod(make_world: Callable[..., World]) -> None:
    """Observation 5: a 409 on pods/binding was taken as "bound"; 6 injected 409s gave each job 4 runs.
    A 409 whose pod is not bound (a conflict, not our earlier binding) is retried."""
    w = make_world(duration_s=0.5)
    w.backend.inventory()
    w.cluster.server.faults.add(verb="create", resource="pods/binding", status=409, times=6)
    for job in ("b1", "b2"):
        w.backend.launch(w.request(job, "gpu-a"))
    events = w.until(
        lambda evs: all(any(e.job_id == j and e.kind is EventKind.SUCCEEDED for e in evs) for j in ("b1", "b2"))
    )
    assert not _losses(events, "b1") and not _losses(events, "b2"), events
    assert sum(w.jobs.created.values()) == 2  # one pod each: no run was lost and made again
    for job in ("b1", "b2"):
        assert [p["spec"]["nodeName"] for p in w.pods(job)] == ["gpu-a"]
