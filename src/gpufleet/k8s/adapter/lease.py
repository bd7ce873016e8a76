"""Leader election on Kubernetes: a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection
does it, behind gpufleet's :class:`~gpufleet.control.leader.Leadership` protocol.

- **Acquire**: create the Lease naming this replica, or take it over when its record (holder,
  renew time, transitions) has not changed for ``lease_duration_s`` *as observed by this replica's
  own monotonic clock* — never by comparing another machine's timestamps with ours, so clock skew
  between replicas cannot make two leaders. Every write is a compare-and-swap on
  ``metadata.resourceVersion``: of two replicas racing, the API server lets one win (409 for the
  other).
- **Hold**: :meth:`still_held` renews every ``renew_every_s``; a leader that has not renewed within
  ``renew_deadline_s`` (shorter than the lease duration) stops at once, before any other replica
  may take the lease over.
- **Release** (clean shutdown): the holder is cleared and the duration set to 1 s, so a standby
  takes over within a second instead of a whole lease duration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

LEASE_DURATION_S = 15.0
RENEW_DEADLINE_S = 10.0
RENEW_EVERY_S = 2.0


@dataclass(frozen=True, slots=True)
class _Record:
    holder: str
    renew_time: str
    transitions: int


def _now_micro() -> datetime:
    return datetime.now(UTC)


class LeaseLeadership:
    """Leadership through a Lease ``namespace/name``; ``api`` is a ``CoordinationV1Api``."""

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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < renew_every_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need 0 < renew_every_s < renew_deadline_s < lease_duration_s")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.renew_every_s = renew_every_s
        self._mono = monotonic
        self._held = False
        self._renewed_at = -float("inf")  # monotonic time of our last successful write
        self._observed: _Record | None = None
        self._observed_at = -float("inf")  # monotonic time the observed record last changed

    # -- the protocol ------------------------------------------------------------------------------
    def try_acquire(self) -> bool:
        if self._held:
            return self.still_held()
        try:
            return self._try()
        except Exception as e:  # the API server is unreachable: not leader, try again later
            log.warning("leader election: lease %s/%s: %s", self.namespace, self.name, e)
            return False

    def still_held(self) -> bool:
        if not self._held:
            return False
        now = self._mono()
        if now - self._renewed_at >= self.renew_every_s:
            try:
                self._try()
            except Exception as e:
                log.warning("leader election: renewing lease %s/%s failed: %s", self.namespace, self.name, e)
        if self._held and self._mono() - self._renewed_at >= self.renew_deadline_s:
            log.error(
                "leader election: lease %s/%s not renewed in %.0fs: stepping down",
                self.namespace,
                self.name,
                self.renew_deadline_s,
            )
            self._held = False
        return self._held

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if (lease.spec.holder_identity or "") != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = _now_micro()
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as e:  # best effort: the lease expires by itself
            log.warning("leader election: releasing lease %s/%s: %s", self.namespace, self.name, e)

    # -- internals ---------------------------------------------------------------------------------
    def _try(self) -> bool:
        from kubernetes.client import V1Lease, V1LeaseSpec, V1ObjectMeta
        from kubernetes.client.exceptions import ApiException

        now = self._mono()
        stamp = _now_micro()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            body = V1Lease(
                metadata=V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=V1LeaseSpec(
                    holder_identity=self.identity,
                    lease_duration_seconds=round(self.lease_duration_s),
                    acquire_time=stamp,
                    renew_time=stamp,
                    lease_transitions=0,
                ),
            )
            try:
                self.api.create_namespaced_lease(self.namespace, body)
            except ApiException as e2:
                if e2.status == 409:  # another replica created it first
                    return False
                raise
            return self._won(now, "created the lease")
        spec = lease.spec
        record = _Record(spec.holder_identity or "", str(spec.renew_time), spec.lease_transitions or 0)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = record.holder
        duration = float(spec.lease_duration_seconds or self.lease_duration_s)
        if holder and holder != self.identity and now - self._observed_at < duration:
            self._held = False
            return False  # someone else holds it and has renewed within its duration
        if holder != self.identity:
            spec.acquire_time = stamp
            spec.lease_transitions = record.transitions + 1
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = round(self.lease_duration_s)
        spec.renew_time = stamp
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)  # CAS on resourceVersion
        except ApiException as e:
            if e.status == 409:  # it changed under us: someone else renewed or took it
                self._held = False
                return False
            raise
        return self._won(now, "took over the lease" if holder != self.identity else "")

    def _won(self, now: float, what: str) -> bool:
        if what:
            log.info("leader election: %s %s/%s as %s", what, self.namespace, self.name, self.identity)
        self._held = True
        self._renewed_at = now
        self._observed = None
        return True
