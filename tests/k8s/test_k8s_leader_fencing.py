"""Issue 22, observations 2 and 3 (leadership): the leader renews its Lease on its own thread, stops
writing before another replica can take the lease over, and keeps its leadership and state through
transient API errors.

Before: renewals happened only at the start of a controller tick, so a step blocked in a slow call
renewed nothing — in a partition the old leader went on believing it led for 19 s while another
replica led — and one failed list ended the leader's step in ``_leader_lost()`` (lease released,
state reset, full recovery: 4 s of 500s cost 3 leadership drops and 4 recoveries).

The partition is a TCP link between replica A and the API server that the test cuts (:class:`Link`):
A's requests and their answers are dropped while its connections stay open — silence, as in a real
partition — while replica B reaches the server directly. Durations are short (lease 3 s, renew
deadline 2 s, renew every 0.5 s) to keep the tests fast.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes.client
import pytest

from gpufleet.control.controller import Controller, ControllerConfig, run_until
from gpufleet.errors import BackendError
from gpufleet.k8s.adapter.api import with_deadline
from gpufleet.k8s.adapter.fence import Fenced
from gpufleet.k8s.adapter.lease import LeaseLeadership
from gpufleet.store import repo
from gpufleet.store.db import Database
from tests.support.k8s.backendworld import NS as TEAM
from tests.support.k8s.backendworld import World
from tests.support.k8s.cluster import Cluster

LEASE_NS = "gpufleet-system"
LEASE = "gpufleet-scheduler"
LEASE_S, RENEW_DEADLINE_S, RENEW_EVERY_S = 3.0, 2.0, 0.5
WRITES = ("POST ", "PUT ", "PATCH ", "DELETE ")


# -- a link that can be cut ------------------------------------------------------------------------------


@dataclass
class _Pair:
    client: socket.socket
    server: socket.socket
    lost: bool = False  # bytes were dropped: the HTTP stream is broken, TCP would reset it

    def close(self) -> None:
        for s in (self.client, self.server):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@dataclass
class Link:
    """A TCP proxy between one replica and the API server. :meth:`cut` drops every byte both ways
    while the connections stay open (the replica's requests go unanswered: silence); :meth:`heal`
    lets bytes through again and closes the connections that lost bytes. ``writes`` records each
    write request that reached the server through the link: (monotonic time, request line)."""

    upstream: tuple[str, int]
    writes: list[tuple[float, str]] = field(default_factory=list)
    _cut: threading.Event = field(default_factory=threading.Event)
    _pairs: list[_Pair] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="link-accept", daemon=True).start()

    def cut(self) -> None:
        self._cut.set()

    def heal(self) -> None:
        self._cut.clear()
        with self._lock:
            broken = [p for p in self._pairs if p.lost]
        for p in broken:
            p.close()

    def close(self) -> None:
        self.listener.close()
        with self._lock:
            pairs = list(self._pairs)
        for p in pairs:
            p.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            pair = _Pair(conn, socket.create_connection(self.upstream))
            with self._lock:
                self._pairs.append(pair)
            for src, dst, up in ((pair.client, pair.server, True), (pair.server, pair.client, False)):
                threading.Thread(target=self._pump, args=(pair, src, dst, up), name="link-pump", daemon=True).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket, to_server: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            if self._cut.is_set():
                pair.lost = True  # dropped on the floor
                continue
            if to_server:
                line = data.split(b"\r\n", 1)[0].decode("latin-1")
                if line.startswith(WRITES):
                    self.writes.append((time.monotonic(), line))
            try:
                dst.sendall(data)
            except OSError:
                break
        pair.close()


def _replica(api: Any, identity: str) -> LeaseLeadership:
    return LeaseLeadership(
        api,
        LEASE_NS,
        LEASE,
        identity,
        lease_duration_s=LEASE_S,
        renew_deadline_s=RENEW_DEADLINE_S,
        renew_every_s=RENEW_EVERY_S,
    )


@pytest.fixture
def lease_ns(k8s_api_client: kubernetes.client.ApiClient) -> str:
    core: Any = kubernetes.client.CoreV1Api(k8s_api_client)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}})
    return LEASE_NS


# -- (a) the partition -----------------------------------------------------------------------------------


def test_a_partitioned_leader_stops_writing_before_another_replica_can_take_the_lease(
    k8s_cluster: Cluster, k8s_api_client: kubernetes.client.ApiClient, lease_ns: str
) -> None:
    from gpufleet.k8s.adapter.fence import Fenced, FencedError

    server = urlsplit(k8s_cluster.url)
    link = Link((server.hostname or "127.0.0.1", server.port or 80))
    conf = k8s_cluster.configuration()
    conf.host = link.url
    client_a = with_deadline(kubernetes.client.ApiClient(conf))
    a = _replica(kubernetes.client.CoordinationV1Api(client_a), "a")
    b = _replica(kubernetes.client.CoordinationV1Api(k8s_api_client), "b")
    core_a: Any = kubernetes.client.CoreV1Api(client_a)
    fence = Fenced(a)
    stop = threading.Event()
    fenced: list[float] = []

    def write() -> None:  # A's step: one fenced write after another, as the backend makes them
        i = 0
        while not stop.is_set():
            i += 1
            try:
                timeout = fence.check(f"creating ConfigMap a-{i}")
                cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"a-{i}"}}
                core_a.create_namespaced_config_map(lease_ns, cm, _request_timeout=timeout)
            except FencedError:
                fenced.append(time.monotonic())
            except Exception:  # a timeout in the partition, a connection closed when it heals
                pass
            stop.wait(0.05)

    lost_at: dict[str, float] = {}

    def watch() -> None:  # when A knew it no longer led (no I/O: still_held reads the renew thread's state)
        while not stop.is_set() and len(lost_at) < 2:
            now = time.monotonic()
            if not a.still_held():
                lost_at.setdefault("still_held", now)
            if a.write_window() <= 0:
                lost_at.setdefault("write_window", now)
            stop.wait(0.01)

    threads = [threading.Thread(target=write, daemon=True), threading.Thread(target=watch, daemon=True)]
    try:
        assert a.try_acquire()
        assert not b.try_acquire()  # b observes a's record
        threads[0].start()
        k8s_cluster.wait_for(
            lambda: sum("/leases/" in w for _, w in link.writes) >= 2 and len(link.writes) >= 6,
            timeout=10,
            what="a renewing and writing",
        )
        assert a.still_held() and a.write_window() > 0

        t_cut = time.monotonic()
        link.cut()
        threads[1].start()
        t_b: float | None = None
        while time.monotonic() - t_cut < 15:
            began = time.monotonic()
            if b.try_acquire():
                t_b = began  # the earliest b can have led: before its winning request was sent
                break
            time.sleep(0.05)
        assert t_b is not None, "b never took the lease over"
        b_led = time.monotonic()

        link.heal()  # a reaches the server again: its writes are still fenced, it only follows
        follow_until = time.monotonic() + 1.5
        while time.monotonic() < follow_until:
            assert not a.try_acquire()
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            if t.is_alive():
                t.join(15)
        a.release()
        b.release()
        link.close()
        client_a.close()

    # a knew it no longer led before b could lead
    assert "still_held" in lost_at and lost_at["still_held"] < t_b, (lost_at, t_b - t_cut)
    assert "write_window" in lost_at and lost_at["write_window"] < t_b, (lost_at, t_b - t_cut)
    # b waited a whole lease duration after the last renewal of a's that reached the server
    last_renewal = max(t for t, w in link.writes if "/leases/" in w)
    assert b_led - last_renewal >= LEASE_S, b_led - last_renewal
    # no write of a's reached the server once b could lead; a's step was refused by the fence
    late = [(round(t - t_b, 2), w) for t, w in link.writes if t >= t_b]
    assert not late, f"a's writes reached the server after b took the lease: {late}"
    assert fenced and min(fenced) < t_b + 1.0, "a's writes were never fenced"
    lease: Any = kubernetes.client.CoordinationV1Api(k8s_api_client).read_namespaced_lease(LEASE, lease_ns)
    assert lease.spec.lease_transitions == 1


# -- (b) and (c): the controller on a Kubernetes backend -----------------------------------------------


@dataclass
class Leader:
    world: World
    db: Database
    ctl: Controller
    coordination: Any
    recoveries: list[float] = field(default_factory=list)
    drops: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)  # when each step of the leader's ended well

    def submit(self) -> str:
        fields = {"name": "t", "command": ["python", "train.py"], "gpus": 1}
        with self.db.session() as s:
            row, _ = repo.submit_job(
                s, fields, team=TEAM, submitted_by=None, idempotency_key=None, request_sha256=None, now=time.time()
            )
            return row.id

    def state(self, job_id: str) -> str:
        with self.db.session() as s:
            return repo.get_job(s, job_id).state

    def lease(self) -> Any:
        return self.coordination.read_namespaced_lease(LEASE, LEASE_NS)


@pytest.fixture
def leader(make_world: Callable[..., World], sqlite_template: Path, tmp_path: Path) -> Iterator[Leader]:
    w = make_world(duration_s=None)  # pods run until stopped
    w.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}})
    path = tmp_path / "g.db"
    shutil.copyfile(sqlite_template, path)
    db = Database(f"sqlite:///{path}")
    coordination = kubernetes.client.CoordinationV1Api(w.client)
    lease = _replica(coordination, "a")
    cfg = ControllerConfig(
        poll_interval_s=0.05,
        cycle_interval_s=0.2,
        grace_s=2.0,
        node_price_usd_per_hour=8.0,
        telemetry_interval_s=0.5,
        replica="a",
    )
    ctl = Controller(db, w.backend, config=cfg, leadership=lease)
    got = Leader(w, db, ctl, coordination)
    recover, lost, step = ctl.recover, ctl._leader_lost, ctl.step

    def counted_recover() -> None:
        got.recoveries.append(time.monotonic())
        recover()

    def counted_lost() -> None:
        if ctl.is_leader:
            got.drops.append(time.monotonic())
        lost()

    def counted_step() -> None:
        step()
        got.steps.append(time.monotonic())

    ctl.recover = counted_recover  # type: ignore[method-assign]
    ctl.step = counted_step  # type: ignore[method-assign]
    ctl._leader_lost = counted_lost  # type: ignore[method-assign]
    try:
        yield got
    finally:
        ctl.stop()
        db.dispose()


def _fail_lists(leader: Leader) -> Callable[[], int] | None:
    """The API server answers 500 to every list (the Job controller stand-in retries 5xx, as
    controllers do). A backend that reads informers' caches may not list at all in 4 s: the outage
    must cost nothing either way, so whether it reached the step is not asserted here."""
    leader.world.cluster.server.faults.add(verb="list", status=500)
    return None


def _fail_reads(leader: Leader) -> Callable[[], int] | None:
    """Every step's read fails with the error a failed list is (a BackendError out of ``poll``)."""
    backend = leader.world.backend
    raised: list[float] = []

    def failing() -> Any:
        raised.append(time.monotonic())
        raise BackendError("listing nodes: Kubernetes API 500 InternalError (injected)")

    backend.poll = failing  # type: ignore[method-assign]
    return lambda: len(raised)


def _heal(leader: Leader) -> None:
    leader.world.cluster.server.faults.clear()
    backend = leader.world.backend
    if "poll" in vars(backend):
        del backend.poll  # the class's method again


@pytest.mark.parametrize("inject", [_fail_lists, _fail_reads], ids=["500s-on-every-list", "every-step-fails"])
def test_four_seconds_of_api_errors_keep_leadership_and_state(
    leader: Leader, inject: Callable[[Leader], Callable[[], int] | None]
) -> None:
    job = leader.submit()
    leader.ctl.start()
    assert run_until(lambda: leader.ctl.is_leader and leader.state(job) == "RUNNING", 30), "the job never ran"
    loop, transitions = leader.ctl.loop, leader.lease().spec.lease_transitions

    failures = inject(leader)
    time.sleep(4.0)  # the outage: the controller runs on its own thread meanwhile
    _heal(leader)
    healed = time.monotonic()
    assert run_until(lambda: leader.steps[-1] > healed, 20), "the controller did not step again"

    assert failures is None or failures() >= 3, "the outage did not reach the step"
    assert leader.drops == [], f"leadership dropped {len(leader.drops)} times"
    assert len(leader.recoveries) == 1, f"{len(leader.recoveries)} recoveries"
    assert leader.ctl.is_leader and leader.ctl.loop is loop, "the in-memory state was rebuilt"
    assert job in leader.ctl.active and leader.state(job) == "RUNNING"
    lease = leader.lease()
    assert lease.spec.holder_identity == "a" and lease.spec.lease_transitions == transitions


# -- (c) a blocked step ----------------------------------------------------------------------------------


def test_the_lease_is_renewed_while_a_step_is_blocked(leader: Leader) -> None:
    """A step blocked longer than the lease duration (4 s > 3 s) loses nothing: the renew thread
    keeps the lease, so another replica trying all along never gets it."""
    other = _replica(leader.coordination, "b")
    leader.ctl.start()
    assert run_until(lambda: leader.ctl.is_leader and leader.ctl.ready(), 30), "a never led"
    backend = leader.world.backend
    poll = backend.poll
    blocked = threading.Event()

    def slow() -> Any:
        if not blocked.is_set():
            blocked.set()
            time.sleep(4.0)  # a call hanging in the step, e.g. a slow API server
        return poll()

    backend.poll = slow  # type: ignore[method-assign]
    assert blocked.wait(10), "the step never ran"
    b_won: list[float] = []
    held: list[bool] = []
    end = time.monotonic() + 4.5
    while time.monotonic() < end:
        held.append(leader.ctl.leadership.still_held())
        if other.try_acquire():
            b_won.append(time.monotonic())
            break
        time.sleep(0.1)
    unblocked = time.monotonic()
    assert run_until(lambda: leader.steps[-1] > unblocked, 20), "the controller did not step again"
    other.release()

    assert not b_won, "another replica took the lease while the step was blocked"
    assert held and all(held), "still_held turned False during the blocked step"
    assert leader.drops == [] and len(leader.recoveries) == 1
    assert leader.lease().spec.holder_identity == "a"


# -- the fence itself --------------------------------------------------------------------------------------


@dataclass
class Window:
    seconds: float

    def write_window(self) -> float:
        return self.seconds


@pytest.mark.parametrize(
    ("window_s", "timeout_s"),
    [(2.5, 2.5), (0.01, 0.01), (30.0, 10.0), (math.inf, "client's"), (0.0, None), (-1.0, None), (math.nan, None)],
    ids=["within-the-lease", "barely-open", "capped-by-the-read-timeout", "a-lock", "closed", "past", "nan"],
)
def test_a_write_gets_the_window_as_its_timeout_or_is_refused(window_s: float, timeout_s: float | str | None) -> None:
    """A finite window bounds the write's timeout; an unbounded one (a lock held for the session)
    leaves the client's own deadline (None: ``with_deadline``'s connect and read timeouts)."""
    from gpufleet.k8s.adapter.fence import Fenced, FencedError

    fence = Fenced(Window(window_s))
    if timeout_s is None:
        with pytest.raises(FencedError, match="binding pod alpha/p-0: not sent") as caught:
            fence.check("binding pod alpha/p-0")
        assert isinstance(caught.value, BackendError)  # the loop retries it like any failed write
    elif timeout_s == "client's":
        assert fence.check("binding pod alpha/p-0") is None
    else:
        assert fence.check("binding pod alpha/p-0") == pytest.approx(timeout_s)


def test_a_file_lock_fences_nothing_while_held(tmp_path: Path) -> None:
    from gpufleet.control.leader import FileLeadership
    from gpufleet.k8s.adapter.fence import Fenced, FencedError

    lock = FileLeadership(tmp_path / "leader.lock")
    fence = Fenced(lock)
    with pytest.raises(FencedError):
        fence.check("before winning")
    assert lock.try_acquire() and fence.check("while held") is None  # the client's own deadline
    lock.release()
    with pytest.raises(FencedError):
        fence.check("after release")


def test_the_backend_writes_nothing_once_its_write_window_is_closed(make_world: Callable[..., World]) -> None:
    """The backend asks the fence before each write: a replica whose Lease may already be another's
    creates no Job, binds no pod and evicts nothing (each is tried again once it may write)."""

    class Window:
        open = True

        def write_window(self) -> float:
            return 30.0 if self.open else 0.0

    window = Window()
    w = make_world(duration_s=None)
    w.backend.fence = Fenced(window)
    w.backend.inventory()
    w.backend.launch(w.request("held", "gpu-a"))
    w.running("held")
    window.open = False
    plan = w.cluster.server.faults
    start = len(plan.log)
    w.backend.launch(w.request("late", "gpu-b"))  # its Job waits: created once this replica may write
    w.backend.stop("held", 1, "preempted", grace_s=1)
    for _ in range(5):
        w.backend.poll()
    mine = [s for s in plan.log[start:] if s.verb in ("create", "patch", "update", "delete") and s.resource != "leases"]
    assert [s for s in mine if s.resource in ("jobs", "pods/binding", "pods/eviction", "pods")] == []
    window.open = True
    w.until(lambda evs: any(e.job_id == "held" for e in evs), timeout=30)  # the stop goes through once it may write
