"""The SQL state store: the world loop's :class:`~gpufleet.loop.state.StateStore` on the server's
database (SQLite or PostgreSQL). Every call is one transaction; database errors become
:class:`~gpufleet.errors.StoreError`, so the loop backs off instead of blaming a job."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from gpufleet.errors import StoreError
from gpufleet.loop.metering import Share
from gpufleet.loop.state import LaunchSpec, RunEnd
from gpufleet.model.job import Job, JobState, PodPlacement
from gpufleet.model.node import Node
from gpufleet.model.quota import Quota
from gpufleet.store import repo
from gpufleet.store.convert import job_from_row, placement_to_json
from gpufleet.store.db import Database

QUOTA_REFRESH_S = 2.0  # wall seconds between two reads of the quotas
FULL_RESYNC_S = 30.0  # a full look at the queue this often (a safety net for late commits)


class SqlState:
    def __init__(self, db: Database, *, quota_refresh_s: float = QUOTA_REFRESH_S) -> None:
        self.db = db
        self.last_seq = 0
        self.changes_seen_at = 0.0
        self.quota_refresh_s = quota_refresh_s
        self._last_quota = -math.inf
        self._quota_key: object = None
        self._last_resync = 0.0
        self._known: set[str] = set()  # jobs handed to the loop and not finished
        self._fresh = True

    @contextmanager
    def _session(self, *, readonly: bool = False) -> Iterator[Session]:
        try:
            with self.db.session(readonly=readonly) as s:
                yield s
        except SQLAlchemyError as e:
            raise StoreError(f"store error: {str(e).splitlines()[0]}") from e

    # -- what recovery reads -----------------------------------------------------------------------
    def recovered(self, job_id: str, seq: int) -> None:
        """A job recovery handed to the loop (running or pending)."""
        self._known.add(job_id)
        self.last_seq = max(self.last_seq, seq)

    # -- StateStore --------------------------------------------------------------------------------
    def take_new(self, now: float) -> list[Job]:
        out: list[Job] = []
        with self._session(readonly=True) as s:
            for row in repo.jobs_after(s, self.last_seq, ["PENDING"]):
                self.last_seq = max(self.last_seq, row.seq)
                if row.id not in self._known:
                    self._known.add(row.id)
                    out.append(job_from_row(row))
            if now - self._last_resync >= FULL_RESYNC_S:
                # a submit whose transaction committed after later ones (PostgreSQL hands out seq at
                # insert, not at commit) is missed by the seq watermark
                self._last_resync = now
                for job_id in repo.job_ids_in_states(s, ["PENDING"]):
                    if job_id not in self._known:
                        self._known.add(job_id)
                        out.append(job_from_row(repo.get_job(s, job_id)))
        return out

    def take_changes(self, now: float) -> list[tuple[str, str, bool]]:
        since = self.changes_seen_at
        self.changes_seen_at = now - 2.0  # overlap: rows committed late with an earlier updated_at
        if self._fresh:
            self._fresh = False
            since = now - 5.0
        with self._session(readonly=True) as s:
            return list(repo.state_changes_since(s, since))

    def quotas(self, now: float) -> list[Quota] | None:
        t = time.monotonic()  # quotas are re-read on the wall clock whatever the loop's clock is
        if t - self._last_quota < self.quota_refresh_s:
            return None
        self._last_quota = t
        with self._session(readonly=True) as s:
            quotas = repo.all_quotas(s)
        key = tuple(sorted(repr(q) for q in quotas))
        if key == self._quota_key:
            return None
        self._quota_key = key
        return quotas

    def node_added(self, node: Node, hourly_usd: float, now: float) -> None:
        with self._session() as s:
            repo.upsert_node(s, node, hourly_usd=hourly_usd, now=now)

    def node_removed(self, name: str, now: float) -> None:
        with self._session() as s:
            repo.remove_node(s, name, now)

    def sync_nodes(self, inventory: Sequence[Node], prices: dict[str, float], now: float) -> None:
        """The store's nodes become the backend's inventory (start-up and recovery)."""
        with self._session() as s:
            known = {n.name for n in inventory}
            for node in inventory:
                repo.upsert_node(s, node, hourly_usd=prices[node.name], now=now)
            for row in repo.list_nodes(s):
                if row.name not in known:
                    repo.remove_node(s, row.name, now)

    def bind(
        self,
        job: Job,
        placement: tuple[PodPlacement, ...],
        node: Node | None,
        hourly_usd: float,
        reason: str,
        now: float,
    ) -> LaunchSpec | None:
        with self._session() as s:
            row = repo.get_job(s, job.id, for_update=True)
            if row.state != "PENDING" or row.cancel_requested:
                self._known.discard(job.id)
                return None
            run = row.run + 1
            node_name = node.name if node is not None else ""
            repo.transition(s, row, "ADMITTED", reason, now, run=run, placement=placement_to_json(placement))
            repo.open_run(
                s,
                job_id=job.id,
                run=run,
                node=node_name,
                placement=placement_to_json(placement),
                capacity_type=node.capacity_type.value if node is not None else "on-demand",
                node_hourly_usd=hourly_usd,
                now=now,
            )
            return LaunchSpec(
                run=run,
                command=tuple(row.command),
                env=dict(row.env or {}),
                cwd=row.cwd,
                checkpoint_dir=row.checkpoint_dir,
                restarts=row.restarts,
                image=row.image,
                labels={str(k): str(v) for k, v in (row.labels or {}).items()},
                team=row.team,
                run_as=row.run_as,
                cpu_milli=row.cpu_milli,
                memory_mib=row.memory_mib,
            )

    def launch_failed(self, job: Job, run: int, reason: str, now: float) -> None:
        with self._session() as s:
            repo.end_run(
                s, job.id, run, outcome="launch-failed", exit_code=None, reason=reason, started_at=None, ended_at=now
            )
            row = repo.get_job(s, job.id, for_update=True)
            repo.transition(s, row, "FAILED", f"could not launch: {reason}", now, ended_at=now, placement=[])
        self._known.discard(job.id)

    def run_started(self, job: Job, run: int, pid: int, started_at: float, shares: Sequence[Share], now: float) -> None:
        with self._session() as s:
            repo.mark_run_started(s, job.id, run, pid=pid, started_at=started_at)
            row = repo.get_job(s, job.id, for_update=True)
            if row.state == "ADMITTED":
                repo.transition(
                    s,
                    row,
                    "RUNNING",
                    f"started (run {run}, pid {pid})",
                    now,
                    started_at=row.started_at if row.started_at is not None else started_at,
                )

    def run_ended(self, end: RunEnd, now: float) -> JobState:
        job = end.job
        with self._session() as s:
            row = repo.get_job(s, job.id, for_update=True)
            run_row = repo.end_run(
                s,
                job.id,
                end.run,
                outcome=end.outcome,
                exit_code=end.exit_code,
                reason=end.run_reason,
                started_at=end.started_at,
                ended_at=end.ended_at,
            )
            started = end.started_at if end.started_at is not None else run_row.started_at
            run_row.started_at = started  # as the backend measured it when the run ended
            if started is not None:
                self._meter(s, row, end.run, end.shares, started, end.ended_at)
            state = end.state
            if state is JobState.PENDING and row.cancel_requested:
                state = JobState.CANCELLED
            if state is JobState.PENDING:
                repo.transition(s, row, "PREEMPTED", end.stopped_as, now, exit_code=end.exit_code)
                repo.transition(
                    s,
                    row,
                    "PENDING",
                    "requeued" + (" (resumes from its checkpoint)" if row.checkpoint_dir else ""),
                    now,
                    restarts=row.restarts + 1,
                    preemptions=row.preemptions + (1 if end.preempted else 0),
                    placement=[],
                )
            else:
                reason = end.reason if state is end.state else "cancelled by request"
                repo.transition(s, row, state.value, reason, now, ended_at=end.ended_at, exit_code=end.exit_code)
                self._known.discard(job.id)
            return state

    def _meter(self, s: Session, row: Any, run: int, shares: Sequence[Share], start: float, end: float) -> None:
        node_rows = repo.nodes_named(s, (sh.node for sh in shares))
        for sh in shares:
            node_row = node_rows.get(sh.node)
            if node_row is None:
                continue
            repo.append_segment(
                s,
                job=row,
                run=run,
                node=node_row,
                gpu_share_units=sh.gpu_units,
                cpu_milli=sh.cpu_milli,
                memory_mib=sh.memory_mib,
                node_hourly_usd=node_row.hourly_price_usd,
                capacity_type=node_row.capacity_type,
                start=start,
                end=max(start, end),
            )

    def request_stop(self, job_id: str, run: int, why: str) -> None:
        with self._session() as s:
            repo.request_stop(s, job_id, run, why)

    def finish_pending(self, job: Job, state: JobState, reason: str, now: float) -> None:
        with self._session() as s:
            row = repo.get_job(s, job.id, for_update=True)
            if row.state == "PENDING":
                repo.transition(s, row, state.value, reason, now, ended_at=now)
        self._known.discard(job.id)

    def requeue_unlaunched(self, job: Job, run: int, reason: str, now: float) -> bool:
        """Recovery: a job ADMITTED whose run never started goes back to the queue (False: it was
        cancelled meanwhile and ends CANCELLED)."""
        with self._session() as s:
            repo.end_run(
                s, job.id, run, outcome="never-started", exit_code=None, reason=reason, started_at=None, ended_at=now
            )
            row = repo.get_job(s, job.id, for_update=True)
            if row.cancel_requested:
                repo.transition(s, row, "CANCELLED", "cancelled before it started", now, ended_at=now, placement=[])
                return False
            repo.transition(s, row, "PENDING", reason, now, placement=[])
            self._known.add(job.id)
            return True
