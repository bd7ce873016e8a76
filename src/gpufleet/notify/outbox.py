"""The notification outbox: deliver due alerts with retries and exponential backoff.

An alert and its notifications are inserted in one transaction (``budgets_repo.insert_alert``), so
an alert is never lost between "fired" and "queued". Delivery happens outside any transaction (a
slow SMTP server must not hold a store lock): each due row is first *claimed* (a compare-and-set
that bumps ``attempts`` and leases the row), then sent, then marked ``sent`` — or rescheduled at
``base_backoff_s x 2^(attempts-1)`` (capped), or marked ``failed`` after ``max_attempts``.

Exactly once: a row is claimed by one dispatcher at a time and a sent row is never sent again, so
one delivery attempt succeeds per alert per channel. The one gap a crash can open — the receiver
accepted but the process died before marking the row — ends in a re-delivery with the same
``dedup_key`` (an ``Idempotency-Key`` header, PagerDuty's ``dedup_key``, a stable email
``Message-ID``), which the receiver drops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.clock import Clock
from gpufleet.errors import InputError
from gpufleet.notify.channels import Channel, DeliveryError, deliver, parse_channel
from gpufleet.store.db import Database
from gpufleet.store.repo import budgets as budgets_repo

log = logging.getLogger(__name__)

Sender = Callable[[Channel, Mapping[str, Any]], None]


@dataclass(slots=True)
class DispatchStats:
    sent: int = 0
    retried: int = 0
    failed: int = 0
    skipped: int = 0  # claimed by another dispatcher first


class Outbox:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        max_attempts: int = 8,
        base_backoff_s: float = 2.0,
        max_backoff_s: float = 600.0,
        lease_s: float = 120.0,
        sender: Sender = deliver,
    ) -> None:
        self.db = db
        self.clock = clock
        self.max_attempts = max_attempts
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s
        self.lease_s = lease_s
        self.sender = sender

    def backoff(self, attempts: int) -> float:
        """Delay before the next try after ``attempts`` failed ones."""
        return float(min(self.max_backoff_s, self.base_backoff_s * 2 ** max(0, attempts - 1)))

    def dispatch(self, batch: int = 50) -> DispatchStats:
        """Deliver what is due now (idempotent: calling it again sends nothing already sent)."""
        stats = DispatchStats()
        now = self.clock.now()
        with self.db.session(readonly=True) as s:
            due = [
                (r.id, r.attempts, dict(r.channel), dict(r.payload))
                for r in budgets_repo.due_notifications(s, now, batch)
            ]
        for row_id, attempts, channel_json, payload in due:
            with self.db.session() as s:
                claimed = budgets_repo.claim_notification(s, row_id, attempts, now, self.lease_s)
            if not claimed:
                stats.skipped += 1
                continue
            tried = attempts + 1
            error = ""
            try:
                channel = parse_channel(channel_json)
                self.sender(channel, payload)
            except InputError as e:  # a channel stored before validation tightened: never deliverable
                error, tried = f"invalid channel: {e}", self.max_attempts
            except DeliveryError as e:
                error = str(e)
            done = self.clock.now()
            with self.db.session() as s:
                if not error:
                    budgets_repo.finish_notification(s, row_id, ok=True, now=done)
                    stats.sent += 1
                elif tried >= self.max_attempts:
                    budgets_repo.finish_notification(s, row_id, ok=False, now=done, error=error)
                    stats.failed += 1
                    log.error("notification %s given up after %d attempts: %s", row_id, tried, error)
                else:
                    retry_at = done + self.backoff(tried)
                    budgets_repo.finish_notification(s, row_id, ok=False, now=done, error=error, retry_at=retry_at)
                    stats.retried += 1
                    log.warning(
                        "notification %s failed (attempt %d), retry in %.0fs: %s", row_id, tried, retry_at - done, error
                    )
        return stats
