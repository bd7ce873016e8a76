"""Faults a real API server produces, injected into :class:`~tests.support.k8s.apiserver.KubeApiServer`.

A real cluster answers a controller with more than 200s: 500 InternalError while etcd elects a
leader, 503 ServiceUnavailable behind a load balancer during an upgrade, 429 TooManyRequests from API
Priority and Fairness or a PodDisruptionBudget (with ``Retry-After``), 504 Timeout, 409 Conflict
storms when another writer races, slow answers, and silence (a partition: the TCP connection stays
open and nothing comes back). :class:`FaultPlan` holds rules; the server consults it before it
serves a request for a known resource, so an injected error stores nothing, exactly like a request
the real server refused.

A :class:`Fault` matches on the verb as the API server names it (``get``, ``list``, ``watch``,
``create``, ``update``, ``patch``, ``delete``, ``deletecollection``), the resource (``pods``,
``pods/binding``, ``pods/eviction``, ``nodes``, ``leases``, ...), and optionally a name and a
namespace. It answers with a Kubernetes ``Status`` body for ``status`` (and ``Retry-After`` plus
``details.retryAfterSeconds`` when ``retry_after_s`` is set), after ``delay_s``; or it never answers
(``hang``: the request waits until the plan is cleared or the server stops). ``times`` limits it to
the next N matching requests; ``probability`` (seeded) to a share of them.

Every request the plan saw and what it did is in :attr:`FaultPlan.log`, so a test can count what a
client sent (e.g. requests per second in steady state, or whether a write was retried).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["REASONS", "Fault", "FaultPlan", "Seen", "status_body"]

# The reason each status code carries in a real API server's Status (k8s.io/apimachinery metav1.StatusReason).
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(code: int, message: str, retry_after_s: int | None = None) -> dict[str, Any]:
    """A ``Status`` object as the API server sends with an error."""
    details: dict[str, Any] = {}
    if retry_after_s is not None:
        details["retryAfterSeconds"] = retry_after_s
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": REASONS.get(code, "Unknown"),
        "details": details,
        "code": code,
    }


@dataclass
class Fault:
    """One rule: what it matches and what the server does instead of serving."""

    verb: str | None = None  # None: any verb
    resource: str | None = None  # "pods", "pods/binding", ...; None: any resource
    name: str | None = None
    namespace: str | None = None
    status: int | None = None  # the error to answer with; None: serve normally (after delay_s)
    retry_after_s: int | None = None
    delay_s: float = 0.0
    hang: bool = False  # never answer (a partition): until the plan is cleared
    times: int | None = None  # only the next N matching requests; None: all of them
    probability: float = 1.0
    message: str = "injected fault"
    hits: int = 0

    def matches(self, verb: str, resource: str, namespace: str | None, name: str | None) -> bool:
        return (
            (self.verb is None or self.verb == verb)
            and (self.resource is None or self.resource == resource)
            and (self.name is None or self.name == name)
            and (self.namespace is None or self.namespace == namespace)
            and (self.times is None or self.hits < self.times)
        )


@dataclass(frozen=True)
class Seen:
    """A request the plan saw: when (monotonic), what, and what was done (``served``, a status code,
    ``delayed``, ``hung``)."""

    at: float
    verb: str
    resource: str
    namespace: str | None
    name: str | None
    outcome: str


@dataclass
class FaultPlan:
    """The rules in force, consulted in order: the first that matches (and draws under its
    probability) decides. Thread-safe enough for tests: rules are added from the test's thread and
    read on the server's loop; a list append/clear is atomic in CPython."""

    seed: int = 0
    faults: list[Fault] = field(default_factory=list)
    log: list[Seen] = field(default_factory=list)
    _rng: random.Random = field(init=False, repr=False)
    _generation: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def add(self, **kwargs: Any) -> Fault:
        fault = Fault(**kwargs)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        """Remove every rule and let hung requests go on (they are then served)."""
        self.faults.clear()
        self._generation += 1

    def seen(self, verb: str | None = None, resource: str | None = None, outcome: str | None = None) -> list[Seen]:
        return [
            s
            for s in self.log
            if (verb is None or s.verb == verb)
            and (resource is None or s.resource == resource)
            and (outcome is None or s.outcome == outcome)
        ]

    def decide(self, verb: str, resource: str, namespace: str | None, name: str | None) -> Fault | None:
        for fault in list(self.faults):
            if fault.matches(verb, resource, namespace, name) and (
                fault.probability >= 1.0 or self._rng.random() < fault.probability
            ):
                fault.hits += 1
                return fault
        return None

    async def apply(self, verb: str, resource: str, namespace: str | None, name: str | None) -> Fault | None:
        """Delay or hang as the matching rule says; return it when it answers with an error."""
        fault = self.decide(verb, resource, namespace, name)
        if fault is None:
            self.log.append(Seen(time.monotonic(), verb, resource, namespace, name, "served"))
            return None
        if fault.hang:
            self.log.append(Seen(time.monotonic(), verb, resource, namespace, name, "hung"))
            generation = self._generation
            while self._generation == generation:
                await asyncio.sleep(0.02)
            return None
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        outcome = str(fault.status) if fault.status is not None else "delayed"
        self.log.append(Seen(time.monotonic(), verb, resource, namespace, name, outcome))
        return fault if fault.status is not None else None


def verb_of(method: str, name: str | None, watch: bool) -> str:
    """The API server's verb for a request (as RBAC and audit logs name it)."""
    method = method.upper()
    if method == "GET":
        if watch:
            return "watch"
        return "get" if name is not None else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if name is not None else "deletecollection"
    return method.lower()
