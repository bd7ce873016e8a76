"""What the API needs from the process that hosts it (the server wires it; tests build their own)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpufleet.clock import Clock, WallClock
from gpufleet.cost.rules import PricingRules
from gpufleet.store.db import Database


class JobLogs(Protocol):
    """Where jobs' output lives when it is not a file of the server's (Kubernetes: pods' logs)."""

    def read(self, job_id: str) -> bytes:
        """The job's whole log as it is now."""
        ...

    def follow(
        self, job_id: str, offset: int, running: Callable[[], bool], cancelled: threading.Event
    ) -> Iterator[bytes]:
        """The log from byte ``offset`` of :meth:`read`'s view as it is written, until the job has
        ended (``running()`` is False) and it is drained, or ``cancelled`` is set. Blocking."""
        ...


def _always_ready() -> bool:
    return True


@dataclass
class ApiContext:
    """Dependencies of the API.

    - ``database``: the store;
    - ``logs_dir``: where a job's output lives, as ``<logs_dir>/<job_id>.log``;
    - ``job_logs``: instead of those files, another source of jobs' output (Kubernetes: pod logs);
    - ``clock``: the wall clock in production; a fixed clock in tests;
    - ``wake``: called after a submit or a cancel so an in-process controller runs a cycle now
      instead of waiting for its next tick (None: nothing to wake);
    - ``ready``: whether the process is ready to serve (``/readyz``), besides the store answering;
    - ``auth_cache_s``: how long a successful token lookup is trusted without asking the store (a
      revoked token keeps working on other replicas for at most this long);
    - ``revocations_file``: a file the processes of one server share (its ``api_workers``): a
      revocation appends to it, and every process drops its cached tokens when it changes, so a
      revoked token is refused by all of them at once (None: this process only);
    - ``log_poll_s``, ``log_poll_max_s``: a followed log is looked at (one ``stat``) every
      ``log_poll_s``, backing off to ``log_poll_max_s`` while nothing is written;
    - ``log_recheck_s``: how often a follow asks the store whether its job has ended and its token
      is still live (a revoked token's streams end within this long, on every replica);
    - ``log_read_max_bytes``: the most bytes one read without ``follow`` sends (``offset`` continues);
    - ``log_follows_per_token``, ``log_follows_total``: open ``follow`` streams allowed per token
      and in this process (more: a 429 with ``Retry-After``);
    - ``min_free_bytes``: ``/readyz`` is 503 while the store's or the logs' file system has less free;
    - ``pricing_rules``: the server's pricing rules (time-of-day, priority, reservations, on-prem);
    - ``max_body_bytes``, ``run_as_required``, ``single_team``: the shared-server safety settings
      (see the README's security model);
    - ``worker_threads``: threads that run blocking endpoint code (store transactions). Few: the
      GIL runs one at a time anyway, and many threads only contend for it and for the store.
    """

    database: Database
    logs_dir: Path
    job_logs: JobLogs | None = None
    clock: Clock = field(default_factory=WallClock)
    wake: Callable[[], None] | None = None
    ready: Callable[[], bool] = _always_ready
    auth_cache_s: float = 5.0
    revocations_file: Path | None = None
    log_poll_s: float = 0.2
    log_poll_max_s: float = 1.0
    log_recheck_s: float = 2.0
    log_read_max_bytes: int = 8 * 1024 * 1024
    log_follows_per_token: int = 4
    log_follows_total: int = 64
    min_free_bytes: int = 256 * 1024 * 1024
    worker_threads: int = 8
    pricing_rules: PricingRules | None = None  # the server's pricing rules (usage reports apply them)
    max_body_bytes: int = 1024 * 1024  # a larger request body gets a 413 problem
    # Jobs must name a Unix account (token's or team's run_as): the server does not run jobs as itself.
    run_as_required: bool = False
    # The server cannot switch accounts (not root) and was not opted in to run several teams' jobs
    # as itself: it hosts one team only (creating a second one is refused with the reason).
    single_team: bool = False

    def log_path(self, job_id: str) -> Path:
        return self.logs_dir / f"{job_id}.log"
