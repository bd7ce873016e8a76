"""Issue 22, observation 4: a stop is not lost. A run asked to stop stays asked until its pods are
gone: a 500 while stopping is retried at the next poll, an eviction a PodDisruptionBudget refuses
(429) is tried again (and the job says why it still runs), and the Job is never deleted in a way
that leaves its pod running unseen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from gpufleet.backends.base import EventKind
from tests.support.k8s.backendworld import NS, World, ended


def _pdb(w: World, job: str) -> None:
    from kubernetes.client import PolicyV1Api

    PolicyV1Api(w.client).create_namespaced_pod_disruption_budget(
        NS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": f"{job}-pdb"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"gpufleet.io/job-id": job}}},
        },
    )


def test_a_stop_survives_a_500_on_its_first_write(make_world: Callable[..., World]) -> None:
    """Before: ``r.stopping`` was set before the pod list; the list failed with a 500; the retry returned
    early because the run was "already stopping": the pod ran on, the job stayed RUNNING. (The pods now
    come from the informer's cache: the stop's first call is the Job's deletion.)"""
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("long", "gpu-a"))
    w.running("long")
    w.cluster.server.faults.add(verb="delete", resource="jobs", status=500, times=1)
    w.cluster.server.faults.add(verb="create", resource="pods/eviction", status=500, times=1)
    with contextlib.suppress(Exception):
        w.backend.stop("long", 1, "preempted by urgent", grace_s=1)
    w.backend.stop("long", 1, "preempted by urgent", grace_s=1)  # the loop's retry
    events = w.until(ended("long", EventKind.STOPPED), timeout=20)
    assert next(e for e in events if e.job_id == "long").reason == "preempted by urgent"
    assert w.pods("long") == [] or all(p["status"]["phase"] in ("Succeeded", "Failed") for p in w.pods("long"))


def test_an_eviction_a_disruption_budget_refuses_is_retried(make_world: Callable[..., World]) -> None:
    """Before: the 429 was logged once, the Job deleted with Orphan, and the pod ran on for ever."""
    w = make_world(duration_s=None)
    w.backend.inventory()
    w.backend.launch(w.request("guarded", "gpu-a"))
    w.running("guarded")
    _pdb(w, "guarded")
    w.backend.stop("guarded", 1, "budget: over its own limit", grace_s=1)
    early = w.until(lambda evs: True, timeout=1)
    assert not [e for e in early if e.job_id == "guarded"]  # still running: the budget refuses
    assert [p["status"]["phase"] for p in w.pods("guarded")] == ["Running"]
    assert "disruption budget" in (w.backend.stop_blocked("guarded", 1) or "")  # the API server's own words
    from kubernetes.client import PolicyV1Api

    PolicyV1Api(w.client).delete_namespaced_pod_disruption_budget("guarded-pdb", NS)
    w.until(ended("guarded", EventKind.STOPPED), timeout=20)
