"""Leader election through a ``coordination.k8s.io/v1`` Lease, against the test API server
(``tests/k8s``: kmock 0.8 with compare-and-swap on ``resourceVersion``). Each replica's clock is a
fake monotonic one, so expiry is decided as the code decides it: by what a replica observed; the
renewals the renew thread would make are made here by hand (:meth:`LeaseLeadership.renew`). The
renew thread, the fence and the partition are in ``tests/k8s/test_k8s_leader_fencing.py``."""

from __future__ import annotations

import threading
from typing import Any

import kubernetes.client
import pytest

from gpufleet.k8s.adapter.lease import LeaseLeadership
from tests.support.k8s.cluster import Cluster

NS = "gpufleet-system"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def api(k8s_cluster: Cluster) -> Any:
    client = k8s_cluster.api_client()
    core: Any = kubernetes.client.CoreV1Api(client)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield kubernetes.client.CoordinationV1Api(client)
    client.close()  # type: ignore[no-untyped-call]


def _replica(api: Any, name: str, clock: Clock) -> LeaseLeadership:
    return LeaseLeadership(
        api,
        NS,
        "gpufleet-scheduler",
        name,
        lease_duration_s=15,
        renew_deadline_s=10,
        renew_every_s=2,
        monotonic=clock,
        renew_in_background=False,
    )


def test_a_renewing_leader_keeps_the_lease(api: Any) -> None:
    ca, cb = Clock(), Clock()
    a, b = _replica(api, "a", ca), _replica(api, "b", cb)
    assert a.try_acquire() and not b.try_acquire()
    lease = api.read_namespaced_lease("gpufleet-scheduler", NS)
    assert lease.spec.holder_identity == "a" and lease.spec.lease_transitions == 0
    for _ in range(10):  # 30 s: a renews every 3 s; b keeps seeing the record change and waits
        ca.t += 3
        cb.t += 3
        assert a.renew() and a.still_held()
        assert not b.try_acquire()


def test_a_silent_leader_loses_the_lease_and_steps_down_before_it_can_be_taken(api: Any) -> None:
    ca, cb = Clock(), Clock()
    a, b = _replica(api, "a", ca), _replica(api, "b", cb)
    assert a.try_acquire()
    assert not b.try_acquire()  # b observes the record now
    # a is cut off (no renewals) for 12 s: past its renew deadline (10 s) it steps down, while
    # b, having seen no change for only 12 s of the 15 s lease, still waits
    ca.t += 12
    cb.t += 12
    a.api = None  # every call of a's now fails, as a partitioned replica's would
    assert not a.renew()
    assert not a.still_held() and a.write_window() <= 0
    assert not b.try_acquire()
    cb.t += 4  # 16 s unchanged: expired as b sees it
    assert b.try_acquire()
    lease = api.read_namespaced_lease("gpufleet-scheduler", NS)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1


def test_release_hands_over_at_once(api: Any) -> None:
    a, b = _replica(api, "a", Clock()), _replica(api, "b", Clock())
    assert a.try_acquire() and not b.try_acquire()
    a.release()
    assert not a.still_held()
    assert b.try_acquire()  # no waiting for the lease duration


def test_of_racing_replicas_exactly_one_wins(api: Any) -> None:
    replicas = [_replica(api, f"r{i}", Clock()) for i in range(8)]
    barrier = threading.Barrier(len(replicas))
    won: list[str] = []

    def go(r: LeaseLeadership) -> None:
        barrier.wait()
        if r.try_acquire():
            won.append(r.identity)

    threads = [threading.Thread(target=go, args=(r,)) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(won) == 1
    assert api.read_namespaced_lease("gpufleet-scheduler", NS).spec.holder_identity == won[0]


class NoCalls:
    """An API that fails the test if called: what still_held and write_window must not do."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} called: still_held/write_window must do no I/O")


@pytest.mark.parametrize(
    ("after_s", "held", "window_s"),
    [
        (0.0, True, 14.0),  # sent + 15 s lease - 1 s margin
        (6.0, True, 8.0),
        (9.9, True, 4.1),  # a write started just before the renew deadline may still take 4.1 s
        (10.0, False, 0.0),  # the renew deadline: stepping down, no write
        (14.5, False, 0.0),
    ],
    ids=["just-renewed", "midway", "before-the-deadline", "at-the-deadline", "past-it"],
)
def test_still_held_and_the_write_window_follow_the_last_renewal_without_io(
    api: Any, after_s: float, held: bool, window_s: float
) -> None:
    clock = Clock()
    a = _replica(api, "a", clock)
    assert a.try_acquire()
    a.api = NoCalls()
    clock.t += after_s
    assert a.still_held() is held
    assert a.write_window() == pytest.approx(window_s)


def test_the_window_closes_on_release(api: Any) -> None:
    a = _replica(api, "a", Clock())
    assert a.try_acquire() and a.write_window() > 0
    a.release()
    assert a.write_window() == 0.0 and not a.still_held()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"lease_duration_s": 0.5, "renew_deadline_s": 0.3, "renew_every_s": 0.1}, "lease_duration_s"),
        ({"lease_duration_s": 15, "renew_deadline_s": 15, "renew_every_s": 2}, "renew_deadline_s"),
        ({"lease_duration_s": 15, "renew_deadline_s": 10, "renew_every_s": 0}, "renew_every_s"),
        ({"lease_duration_s": 15.9, "renew_deadline_s": 15.5, "renew_every_s": 2}, "renew_deadline_s"),
        ({"lease_duration_s": 15, "renew_deadline_s": 10, "renew_every_s": 2, "fence_margin_s": 5}, "fence_margin_s"),
        ({"lease_duration_s": 15, "renew_deadline_s": 10, "renew_every_s": 2, "fence_margin_s": -1}, "fence_margin_s"),
    ],
    ids=[
        "lease-under-a-second",
        "deadline-not-under-lease",
        "no-renew-period",
        "whole-seconds",
        "margin-too-big",
        "negative-margin",
    ],
)
def test_bad_timings_are_refused_naming_the_setting(options: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LeaseLeadership(None, NS, "gpufleet-scheduler", "a", **options)  # type: ignore[arg-type]
