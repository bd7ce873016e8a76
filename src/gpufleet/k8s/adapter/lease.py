"""Leader election on Kubernetes: a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection
does it, behind gpufleet's :class:`~gpufleet.control.leader.Leadership` protocol.

- **Acquire**: create the Lease naming this replica, or take it over when its record (holder,
  renew time, transitions) has not changed for ``lease_duration_s`` *as observed by this replica's
  own monotonic clock* — never by comparing another machine's timestamps with ours, so clock skew
  between replicas cannot make two leaders. The observation time is taken when the read *returns*
  (client-go's ``observedTime``), never before it was sent. Every write is a compare-and-swap on
  ``metadata.resourceVersion``: of two replicas racing, the API server lets one win (409 for the
  other).
- **Hold**: a daemon thread renews every ``renew_every_s`` (client-go's renew loop), so renewals go
  on while the controller's step is blocked in a slow call. Each renew request's deadline is the
  time left before the renew deadline. :meth:`still_held` does no I/O: it is False once the last
  successful renew was *sent* ``renew_deadline_s`` (shorter than the lease duration) ago.
- **Fence**: :meth:`write_window` says how long a write started now may still take while this
  replica is surely the only leader (see :meth:`write_window` for the argument);
  :class:`~gpufleet.k8s.adapter.fence.Fenced` turns it into each write's timeout.
- **Release** (clean shutdown): the holder is cleared and the duration set to 1 s, so a standby
  takes over within a second instead of a whole lease duration.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

LEASE_DURATION_S = 15.0
RENEW_DEADLINE_S = 10.0
RENEW_EVERY_S = 2.0
# Kept off the write window: the two replicas' monotonic clocks may run at slightly different rates,
# and a request leaves a little after its timeout was worked out. At most half the gap between the
# renew deadline and the lease duration, so a write started at the renew deadline still gets time.
FENCE_MARGIN_S = 1.0
MIN_REQUEST_S = 0.05  # a renew request with less time than this left is not sent: it could not finish


@dataclass(frozen=True, slots=True)
class _Record:
    holder: str
    renew_time: str
    transitions: int


class _Conflict(Exception):
    """A compare-and-swap lost (409): the record changed between our read and our write."""


def _now_micro() -> datetime:
    return datetime.now(UTC)


class LeaseLeadership:
    """Leadership through a Lease ``namespace/name``; ``api`` is a ``CoordinationV1Api``.

    ``monotonic`` may be a fake clock for tests; the renew thread waits on the real one, so a test
    with a fake clock passes ``renew_in_background=False`` and calls :meth:`renew` itself."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration_s: float = LEASE_DURATION_S,
        renew_deadline_s: float = RENEW_DEADLINE_S,
        renew_every_s: float = RENEW_EVERY_S,
        fence_margin_s: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        renew_in_background: bool = True,
    ) -> None:
        if not lease_duration_s >= 1:
            raise ValueError(
                f"lease_duration_s must be at least 1 (the Lease holds whole seconds), not {lease_duration_s}"
            )
        # what the Lease says, and so what other replicas wait for: whole seconds, never more than ours
        self.recorded_duration_s = int(lease_duration_s)
        if not 0 < renew_every_s < renew_deadline_s < self.recorded_duration_s:
            raise ValueError(
                "need 0 < renew_every_s < renew_deadline_s < lease_duration_s (whole seconds), not "
                f"renew_every_s={renew_every_s}, renew_deadline_s={renew_deadline_s}, "
                f"lease_duration_s={lease_duration_s}"
            )
        gap = self.recorded_duration_s - renew_deadline_s
        margin = min(FENCE_MARGIN_S, gap / 2) if fence_margin_s is None else fence_margin_s
        if not 0 <= margin < gap:
            raise ValueError(f"fence_margin_s must be in [0, lease_duration_s - renew_deadline_s), not {margin}")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.renew_every_s = renew_every_s
        self.fence_margin_s = margin
        self.renew_in_background = renew_in_background
        self._mono = monotonic
        # guards the fields below: the renew thread and the controller's thread both read and write them
        self._lock = threading.Lock()
        self._held = False
        self._term = 0  # bumped on every win and every loss: a renewal of an older term changes nothing
        self._renewed_at = -math.inf  # monotonic time our last successful write was *sent*
        self._observed: _Record | None = None
        self._observed_at = -math.inf  # monotonic time we first saw the observed record (after the read)
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    # -- the protocol ------------------------------------------------------------------------------
    def try_acquire(self) -> bool:
        if self.still_held():
            return True
        try:
            sent = self._attempt(self._mono() + self.renew_deadline_s)
        except _Conflict:
            return False
        except Exception as e:  # the API server is unreachable: not leader, try again later
            log.warning("leader election: lease %s/%s: %s", self.namespace, self.name, e)
            return False
        if sent is None:
            return False
        with self._lock:
            self._held = True
            self._renewed_at = sent
            self._term += 1
            term = self._term
        if self.renew_in_background:
            stop = threading.Event()
            thread = threading.Thread(
                target=self._renew_loop, args=(term, stop), name=f"lease-renew-{self.name}", daemon=True
            )
            with self._lock:
                self._stop, self._thread = stop, thread
            thread.start()
        return True

    def still_held(self) -> bool:
        """True while the last successful renew was sent less than ``renew_deadline_s`` ago (no I/O)."""
        with self._lock:
            if not self._held:
                return False
            if self._mono() - self._renewed_at < self.renew_deadline_s:
                return True
            term = self._term
        self._step_down(term, f"not renewed within the renew deadline ({self.renew_deadline_s:g} s)")
        return False

    def write_window(self) -> float:
        """Seconds a write started now may still take while this replica is surely the only leader;
        ``<= 0``: do not write.

        Why it holds: another replica takes the lease over only after it has seen the record
        unchanged for the lease's duration *by its own clock*, counted from when its read of our
        latest record returned — which is after the API server stored that record, which is after
        we sent it. So no one else can lead before ``sent + lease duration``; a write that ends
        ``fence_margin_s`` before that (slack for the two clocks' rates and for the request leaving
        a little after this answer) is ours alone. Once the renew deadline has passed the window is
        closed outright: the replica is stepping down. What it cannot fence: a request the network
        delivers after our client gave up on it (TCP keeps resending bytes already handed to it) —
        writes stay compare-and-swap or idempotent for that."""
        with self._lock:
            if not self._held:
                return 0.0
            now = self._mono()
            if now - self._renewed_at >= self.renew_deadline_s:
                return 0.0
            duration = min(self.lease_duration_s, self.recorded_duration_s)
            return max(0.0, self._renewed_at + duration - self.fence_margin_s - now)

    def renew(self) -> bool:
        """One renewal (what the renew thread does every ``renew_every_s``); True if it succeeded.

        A failed attempt (a timeout, a 5xx, a lost compare-and-swap) leaves leadership as it was:
        :meth:`still_held` turns False by itself at the renew deadline. Another holder in the record
        ends leadership at once."""
        with self._lock:
            if not self._held:
                return False
            term, deadline = self._term, self._renewed_at + self.renew_deadline_s
        if self._mono() >= deadline:
            self._step_down(term, f"not renewed within the renew deadline ({self.renew_deadline_s:g} s)")
            return False
        try:
            sent = self._attempt(deadline)
        except _Conflict:
            log.warning(
                "leader election: renewing lease %s/%s: it changed under us; retrying", self.namespace, self.name
            )
            return False
        except Exception as e:
            log.warning("leader election: renewing lease %s/%s failed: %s", self.namespace, self.name, e)
            return False
        if sent is None:
            self._step_down(term, "another replica holds it")
            return False
        with self._lock:
            if self._term != term or not self._held:
                return False  # released or lost while the request was out: it changes nothing
            self._renewed_at = sent
        return True

    def release(self) -> None:
        with self._lock:
            held = self._held
            self._held = False
            self._term += 1
            stop, thread = self._stop, self._thread
            self._stop = self._thread = None
        if stop is not None:
            stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.renew_every_s)  # a renew request in flight ends by its own deadline
        if not held:
            return
        timeout = self.renew_deadline_s
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=timeout)
            if (lease.spec.holder_identity or "") != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = _now_micro()
            self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=timeout)
        except Exception as e:  # best effort: the lease expires by itself
            log.warning("leader election: releasing lease %s/%s: %s", self.namespace, self.name, e)

    def close(self) -> None:
        """Stop renewing and hand the lease back (the same as :meth:`release`)."""
        self.release()

    # -- internals ---------------------------------------------------------------------------------
    def _renew_loop(self, term: int, stop: threading.Event) -> None:
        """Renew every ``renew_every_s`` until released or lost (client-go's ``renew``)."""
        while True:
            with self._lock:
                if self._term != term or not self._held:
                    return
                last = self._renewed_at
            wait = min(self.renew_every_s, max(0.0, last + self.renew_every_s - self._mono()))
            if stop.wait(wait):
                return
            began = self._mono()
            if not self.renew():
                with self._lock:
                    if self._term != term or not self._held:
                        return
                # failed: try again one period after this attempt began (never a busy loop)
                if stop.wait(max(0.0, began + self.renew_every_s - self._mono())):
                    return

    def _step_down(self, term: int, why: str) -> None:
        with self._lock:
            if self._term != term or not self._held:
                return
            self._held = False
            self._term += 1
            stop = self._stop
        if stop is not None:
            stop.set()
        log.error("leader election: lease %s/%s: stepping down: %s", self.namespace, self.name, why)

    def _timeout(self, deadline: float) -> float:
        """A request's timeout: the time left before ``deadline`` (raises when too little is left)."""
        left = deadline - self._mono()
        if left < MIN_REQUEST_S:
            raise TimeoutError(f"{left:.2f} s left before the renew deadline: no request sent")
        return left

    def _attempt(self, deadline: float) -> float | None:
        """client-go's ``tryAcquireOrRenew``: the monotonic time the winning write was sent, or None
        when another replica holds the lease. Raises :class:`_Conflict` on a lost compare-and-swap,
        anything else when the API server cannot be reached before ``deadline``."""
        from kubernetes.client import V1Lease, V1LeaseSpec, V1ObjectMeta
        from kubernetes.client.exceptions import ApiException

        stamp = _now_micro()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self._timeout(deadline))
        except ApiException as e:
            if e.status != 404:
                raise
            body = V1Lease(
                metadata=V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=V1LeaseSpec(
                    holder_identity=self.identity,
                    lease_duration_seconds=self.recorded_duration_s,
                    acquire_time=stamp,
                    renew_time=stamp,
                    lease_transitions=0,
                ),
            )
            timeout = self._timeout(deadline)
            sent = self._mono()
            try:
                self.api.create_namespaced_lease(self.namespace, body, _request_timeout=timeout)
            except ApiException as e2:
                if e2.status == 409:  # another replica created it first
                    raise _Conflict() from None
                raise
            self._won("created the lease")
            return sent
        now = self._mono()  # after the read returned: the earliest we can claim to have seen it
        spec = lease.spec
        record = _Record(spec.holder_identity or "", str(spec.renew_time), spec.lease_transitions or 0)
        with self._lock:
            if record != self._observed:
                self._observed, self._observed_at = record, now
            observed_at = self._observed_at
        holder = record.holder
        duration = float(spec.lease_duration_seconds or self.lease_duration_s)
        if holder and holder != self.identity and now - observed_at < duration:
            return None  # someone else holds it and has renewed within its duration
        if holder != self.identity:
            spec.acquire_time = stamp
            spec.lease_transitions = record.transitions + 1
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = self.recorded_duration_s
        spec.renew_time = stamp
        timeout = self._timeout(deadline)
        sent = self._mono()
        try:  # CAS on resourceVersion
            self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=timeout)
        except ApiException as e:
            if e.status == 409:  # it changed under us: someone else renewed or took it
                raise _Conflict() from None
            raise
        if holder != self.identity:
            self._won("took over the lease")
        return sent

    def _won(self, what: str) -> None:
        log.info("leader election: %s %s/%s as %s", what, self.namespace, self.name, self.identity)
        with self._lock:
            self._observed = None
