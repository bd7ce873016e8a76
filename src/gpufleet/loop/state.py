"""The state store the loop persists through, and the in-memory one the simulator uses.

The loop decides; the store records. Each call is one atomic change (the SQL store makes each one
transaction), so a crash between two calls leaves a state recovery understands. The in-memory
store keeps the ledger (node intervals and usage segments) and hands over submissions; the
:class:`~gpufleet.model.job.Job` objects the loop holds are its jobs' state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.cost.ledger import Ledger, SegmentHandle
from gpufleet.loop.metering import Share
from gpufleet.model.job import Job, JobState, PodPlacement
from gpufleet.model.node import Node
from gpufleet.model.quota import Quota


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What the store knows about a job that the backend needs to launch its run."""

    run: int
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    checkpoint_dir: str | None = None
    restarts: int = 0
    image: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    team: str = "default"
    run_as: str | None = None
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a run ended and what the loop decided about its job (one atomic change in the store)."""

    job: Job
    run: int
    outcome: str  # the backend's event kind ("succeeded", "failed", "stopped", "timed-out", "lost", ...)
    state: JobState  # terminal, or PENDING: requeued
    reason: str  # of the job's transition
    started_at: float | None
    ended_at: float
    shares: tuple[Share, ...] = ()
    exit_code: int | None = None
    run_reason: str = ""  # the backend's words about the run
    stopped_as: str = ""  # requeued: why it was stopped (the PREEMPTED transition's reason)
    preempted: bool = False  # requeued because another job needed the room


class StateStore(Protocol):
    def take_new(self, now: float) -> list[Job]:
        """Jobs submitted since the last call (PENDING, not yet handed to the loop)."""
        ...

    def take_changes(self, now: float) -> list[tuple[str, str, bool]]:
        """``(job id, state, cancel requested)`` of jobs changed by someone else since the last call."""
        ...

    def quotas(self, now: float) -> list[Quota] | None:
        """The teams' quotas when they may have changed since the last call (None: unchanged)."""
        ...

    def node_added(self, node: Node, hourly_usd: float, now: float) -> None: ...

    def node_removed(self, name: str, now: float) -> None: ...

    def bind(
        self,
        job: Job,
        placement: tuple[PodPlacement, ...],
        node: Node | None,
        hourly_usd: float,
        reason: str,
        now: float,
    ) -> LaunchSpec | None:
        """``PENDING → ADMITTED`` (with ``reason``) and a new run, before the launch; None when the
        job may no longer start (cancelled or changed meanwhile)."""
        ...

    def launch_failed(self, job: Job, run: int, reason: str, now: float) -> None:
        """The backend could not launch the run: the job ends FAILED."""
        ...

    def run_started(self, job: Job, run: int, pid: int, started_at: float, shares: Sequence[Share], now: float) -> None:
        """``ADMITTED → RUNNING``; metering of the run starts at ``started_at``."""
        ...

    def run_ended(self, end: RunEnd, now: float) -> JobState:
        """Record the end of a run, its metering and the job's transition; returns the state the
        job is in now (a requeue becomes CANCELLED when a cancel was asked meanwhile)."""
        ...

    def request_stop(self, job_id: str, run: int, why: str) -> None: ...

    def finish_pending(self, job: Job, state: JobState, reason: str, now: float) -> None:
        """A queued job ends without running (refused, or it can never run)."""
        ...


class MemoryState:
    """The simulator's store: submissions handed over by the world, the ledger in memory."""

    def __init__(self) -> None:
        self.ledger = Ledger()
        self._incoming: list[Job] = []
        self._runs: dict[str, int] = {}
        self._open: dict[tuple[str, int], list[SegmentHandle]] = {}

    # -- what the world feeds in ---------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        self._incoming.append(job)

    # -- the StateStore protocol ---------------------------------------------------------------------
    def take_new(self, now: float) -> list[Job]:
        out, self._incoming = self._incoming, []
        return out

    def take_changes(self, now: float) -> list[tuple[str, str, bool]]:
        return []

    def quotas(self, now: float) -> list[Quota] | None:
        return None  # the simulator's quotas are its profile's, fixed for the run

    def node_added(self, node: Node, hourly_usd: float, now: float) -> None:
        self.ledger.open_node(node, hourly_usd=hourly_usd, start=now)

    def node_removed(self, name: str, now: float) -> None:
        self.ledger.close_node(name, now)

    def bind(
        self,
        job: Job,
        placement: tuple[PodPlacement, ...],
        node: Node | None,
        hourly_usd: float,
        reason: str,
        now: float,
    ) -> LaunchSpec | None:
        run = self._runs.get(job.id, 0) + 1
        self._runs[job.id] = run
        spec = job.spec
        return LaunchSpec(
            run, team=spec.team, cpu_milli=spec.cpu_milli, memory_mib=spec.memory_mib, restarts=job.restarts
        )

    def launch_failed(self, job: Job, run: int, reason: str, now: float) -> None:
        return None

    def run_started(self, job: Job, run: int, pid: int, started_at: float, shares: Sequence[Share], now: float) -> None:
        spec = job.spec
        self._open[(job.id, run)] = [
            self.ledger.open(
                job_id=job.id,
                node=sh.node,
                start=started_at,
                gpu_share=sh.gpu_share,
                cpu_milli=sh.cpu_milli,
                memory_mib=sh.memory_mib,
                team=spec.team,
                project=spec.project,
                namespace=spec.namespace,
                experiment=spec.experiment,
                labels=spec.labels,
                priority_class=spec.priority_class,
            )
            for sh in shares
        ]

    def run_ended(self, end: RunEnd, now: float) -> JobState:
        for h in self._open.pop((end.job.id, end.run), []):
            self.ledger.close(h, end.ended_at)
        return end.state

    def request_stop(self, job_id: str, run: int, why: str) -> None:
        return None

    def finish_pending(self, job: Job, state: JobState, reason: str, now: float) -> None:
        return None

    def close_open(self, now: float) -> None:
        """End the metering of every run still open at ``now`` (the end of a simulation)."""
        for handles in self._open.values():
            for h in handles:
                self.ledger.close(h, now)
        self._open.clear()
