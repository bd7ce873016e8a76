"""Fenced writes: a leader that cannot be sure it still leads does not write.

Leadership that expires by time (a Lease) can end while the leader is blocked in a request — in a
partition the old leader would go on believing it leads while another replica already does. Every
write of the leader's therefore asks :meth:`Fenced.check` first: it answers the timeout that write
may use — the leadership's :meth:`write_window` (how long a write started now may still take while
this replica is surely the only leader), at most the default read timeout — or raises
:class:`FencedError` when the window is closed. The call pattern (one number: urllib3's *total*
timeout, connect included, so the whole request fits in the window)::

    self.core.create_namespaced_pod_binding(
        name, ns, body, _request_timeout=self.fence.check(f"binding pod {ns}/{name}")
    )

:class:`FencedError` is a :class:`~gpufleet.errors.BackendError`: the loop treats it as any failed
write (retried at a later step); by then :meth:`still_held` is False and the controller has stopped
leading. Reads are not fenced: a stale read decides nothing a fenced write does not carry out.
"""

from __future__ import annotations

import math
from typing import Protocol

from gpufleet.errors import BackendError
from gpufleet.k8s.adapter.api import DEFAULT_TIMEOUT_S


class FencedError(BackendError):
    """A write was not sent: this replica cannot be sure it is still the only leader."""

    code = "fenced"


class WriteWindow(Protocol):
    """What a fence reads: :class:`gpufleet.control.leader.Leadership` provides it (the Kubernetes
    adapter ranks below control/, so the protocol is restated here, structurally)."""

    def write_window(self) -> float: ...


class _Unfenced:
    def write_window(self) -> float:
        return math.inf


UNFENCED: WriteWindow = _Unfenced()  # a backend used without leader election (tools, tests)


class Fenced:
    """Checks each write against ``leadership``'s write window."""

    def __init__(self, leadership: WriteWindow = UNFENCED, *, default_timeout_s: float = DEFAULT_TIMEOUT_S[1]) -> None:
        if not default_timeout_s > 0:
            raise ValueError(f"default_timeout_s must be positive, not {default_timeout_s}")
        self.leadership = leadership
        self.default_timeout_s = default_timeout_s

    def check(self, what: str) -> float | None:
        """The timeout (seconds, > 0) a write may use now: ``min(window, default read timeout)``, or
        None when nothing bounds it (no leader election, a lock held for the session: the client's
        own deadline applies); raises :class:`FencedError` (naming ``what``) when the window is closed."""
        window = self.leadership.write_window()
        if not window > 0:  # NaN included
            raise FencedError(
                f"{what}: not sent: this replica cannot be sure it still leads (its lease was not "
                "renewed in time); the new leader will do it"
            )
        return None if math.isinf(window) else min(window, self.default_timeout_s)
