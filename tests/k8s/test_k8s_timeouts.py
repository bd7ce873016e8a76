"""Issue 22, observation 3: no API call had a timeout. Against a silent API server (a partition: the
connection stays open, nothing comes back) ``poll()`` blocked for as long as the silence lasted. Every
call now has a deadline (connect and read), so a silent server is an error the loop retries, not a
hang of the leader's step; and ``poll()`` reads the informers' caches, so a silent watch does not
reach the step at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gpufleet.k8s.adapter.api import DEFAULT_TIMEOUT_S, with_deadline
from tests.support.k8s.backendworld import World


def test_a_silent_api_server_does_not_hang_the_poll(make_world: Callable[..., World]) -> None:
    w = make_world(duration_s=None)
    w.backend.inventory()
    with_deadline(w.client, read_s=1.0)  # the same deadline as the default, shortened for the test
    w.backend.launch(w.request("long", "gpu-a"))
    w.running("long")
    plan = w.cluster.server.faults
    for verb, resource in (("list", "nodes"), ("watch", "nodes"), ("watch", "pods")):  # (the Job controller lists pods)
        plan.add(verb=verb, resource=resource, hang=True)
    plan.add(verb="create", resource="pods/eviction", hang=True)
    plan.add(verb="delete", resource="jobs", hang=True)
    healer = threading.Timer(8.0, plan.clear)  # the partition heals after 8 s
    healer.start()
    try:
        began = time.monotonic()
        w.backend.poll()
        w.backend.stop("long", 1, "preempted", grace_s=1)  # a write: its own deadline
        w.backend.poll()
        took = time.monotonic() - began
    finally:
        healer.cancel()
        plan.clear()
    assert took < 4.0, f"poll() and stop() waited {took:.1f} s on a silent API server"
    assert plan.seen(verb="delete", resource="jobs", outcome="hung")
    w.until(lambda evs: any(e.job_id == "long" for e in evs), timeout=30)  # once healed, the stop goes through


def test_every_client_gets_the_default_deadline(make_world: Callable[..., World]) -> None:
    w = make_world(duration_s=None)
    assert getattr(w.client.rest_client, "gpufleet_deadline", None) == DEFAULT_TIMEOUT_S  # set by the backend
