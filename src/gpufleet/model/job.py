"""Job specs, jobs and the job state machine.

``PENDING → ADMITTED → RUNNING → SUCCEEDED | FAILED | CANCELLED | TIMED_OUT``; a running job may
go ``PREEMPTED → PENDING`` (spot interruption, preemption, budget throttle, node failure, retry),
keeping its checkpoint and counting restarts. Every transition is a :class:`JobEvent` with a reason.

A stop the loop asks of a running job carries a :class:`StopReason` (its :class:`StopKind` and the
words): a cancel and a spent job budget end the job CANCELLED, a preemption requeues it. The store
keeps a stop as text (``"<kind>: <detail>"``, :attr:`StopReason.text`); the loop never reads a
reason's words to decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.errors import InputError, TransitionError
from gpufleet.model.constraints import NO_CONSTRAINTS, NodeConstraints
from gpufleet.model.gpu import MILLI


class JobState(StrEnum):
    PENDING = "PENDING"
    ADMITTED = "ADMITTED"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.ADMITTED, JobState.CANCELLED, JobState.FAILED}),
    # ADMITTED → PENDING: the bind failed and was rolled back. ADMITTED → FAILED: the backend could
    # not launch it at all (a bad account, path or command): that job ends, the rest go on.
    JobState.ADMITTED: frozenset({JobState.RUNNING, JobState.PENDING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT, JobState.PREEMPTED}
    ),
    JobState.PREEMPTED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.TIMED_OUT: frozenset(),
}


class StopKind(StrEnum):
    """Why the loop stops a running job (the first word of the stored text)."""

    CANCEL = "cancel"  # someone cancelled it: it ends CANCELLED
    PREEMPT = "preempt"  # the scheduler needs its room: requeued (from its checkpoint), a preemption
    BUDGET = "budget"  # its own budget (``budget_usd``) is spent: it ends CANCELLED
    # a node of a multi-node run is gone: its pods on the other nodes are stopped (they hold their
    # GPUs until they end), then it is requeued from its checkpoint, not counted as a preemption
    LOST = "lost"
    # a stop stored without a kind gpufleet knows (recovered from an older store): requeued, not a preemption
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class StopReason:
    """A stop the loop asked of a running job: what kind, and the words people read (the detail)."""

    kind: StopKind
    detail: str

    @property
    def text(self) -> str:
        """As the store keeps it (``runs.stop_requested``): ``"<kind>: <detail>"``."""
        if self.kind is StopKind.OTHER:
            return self.detail
        return f"{self.kind.value}: {self.detail}"

    @classmethod
    def parse(cls, text: str) -> StopReason:
        """The stop a stored :attr:`text` stands for (recovery reads it back); a text without a
        known kind is :attr:`StopKind.OTHER` with the words after its first ``": "``."""
        head, sep, detail = text.partition(": ")
        if not sep:
            return cls(StopKind.OTHER, text)
        try:
            return cls(StopKind(head), detail)
        except ValueError:
            return cls(StopKind.OTHER, detail)


# Priority classes: name → value. Higher runs first and may preempt lower.
PRIORITY_CLASSES: dict[str, int] = {
    "background": 0,
    "low": 50,
    "normal": 100,
    "high": 500,
    "urgent": 1000,
}


def priority_value(priority_class: str) -> int:
    try:
        return PRIORITY_CLASSES[priority_class]
    except KeyError:
        raise InputError(
            f"unknown priority class '{priority_class}' (known: {', '.join(PRIORITY_CLASSES)})",
            field="priority",
        ) from None


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What one pod of a job asks of GPUs.

    - whole GPUs: ``count >= 1, milli == 1000``
    - a fraction of a time-sliced/MPS GPU: ``count == 1, milli < 1000``
    - a MIG slice: ``count == 1, mig_profile`` set (``milli`` is the slice's share)
    - no GPU: ``count == 0``
    """

    count: int = 0
    milli: int = MILLI
    mig_profile: str | None = None

    def __post_init__(self) -> None:
        if self.count < 0:
            raise InputError(f"GPU count must be >= 0, got {self.count}", field="gpus")
        if not 0 < self.milli <= MILLI:
            raise InputError(f"gpu_milli must be in 1..1000, got {self.milli}", field="gpu_milli")
        if self.milli < MILLI and self.count != 1:
            raise InputError("a fractional GPU request must ask for exactly one GPU", field="gpu_milli")
        if self.mig_profile is not None and self.count != 1:
            raise InputError("a MIG request asks for exactly one slice", field="mig")

    @property
    def total_milli(self) -> int:
        """Milli-GPU this request holds (count x milli)."""
        return self.count * self.milli

    @property
    def is_fractional(self) -> bool:
        return self.count == 1 and self.milli < MILLI and self.mig_profile is None

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user submits. Immutable; runtime state lives on :class:`Job`."""

    name: str
    team: str = "default"
    project: str = ""
    namespace: str = "default"
    experiment: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    priority_class: str = "normal"
    gpu: GpuRequest = field(default_factory=GpuRequest)
    gpu_types: frozenset[str] = frozenset()  # allowed GPU models; empty = any
    min_gpu_memory_gib: float = 0.0
    cpu_milli: int = 0
    memory_mib: int = 0
    preemptible: bool = False
    checkpoint_interval_s: float | None = None  # None: the job never checkpoints
    max_runtime_s: float | None = None
    estimated_runtime_s: float | None = None
    gang_size: int = 1  # number of pods placed all-or-nothing, each with ``gpu``
    # the job's own budget: the loop stops it (CANCELLED) once its cost reaches this; None: no limit
    budget_usd: float | None = None
    # the nodes its pods may run on (selector, required node affinity) and the taints they tolerate;
    # empty: any node without a NoSchedule/NoExecute taint (gpufleet.model.constraints)
    constraints: NodeConstraints = NO_CONSTRAINTS
    # Simulation only: how long the job really runs (seconds of work).
    duration_s: float | None = None

    @property
    def priority(self) -> int:
        return priority_value(self.priority_class)

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu.total_milli * self.gang_size


@dataclass(frozen=True, slots=True)
class JobEvent:
    time: float
    old: JobState | None
    new: JobState
    reason: str


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """Where one pod of a job runs: a node and its GPU indices (with MIG slice mask if any)."""

    node: str
    gpus: tuple[int, ...] = ()
    milli: int = MILLI  # per GPU
    mig_mask: int = 0  # memory-slice mask on gpus[0] for a MIG slice


@dataclass(slots=True)
class Job:
    id: str
    spec: JobSpec
    submit_time: float
    state: JobState = JobState.PENDING
    events: list[JobEvent] = field(default_factory=list)
    placement: tuple[PodPlacement, ...] = ()
    start_time: float | None = None  # of the current run
    first_start_time: float | None = None
    end_time: float | None = None
    restarts: int = 0
    spot_restarts: int = 0
    preemptions: int = 0
    work_done_s: float = 0.0  # checkpointed progress (seconds of work that survive a restart)
    lost_work_s: float = 0.0  # work thrown away by preemptions
    on_demand_only: bool = False  # set after too many spot restarts
    failed_runs: int = 0  # runs that failed and were retried (the loop's retry count)
    stopped_by: StopReason | None = None  # the stop the loop last asked of a run that then ended
    priority: int = field(init=False)  # base priority value of the spec's class (fixed)
    team: str = field(init=False)  # the spec's team (hot in ordering and quotas)

    def __post_init__(self) -> None:
        self.priority = self.spec.priority
        self.team = self.spec.team
        if not self.events:
            self.events.append(JobEvent(self.submit_time, None, JobState.PENDING, "submitted"))

    def transition(self, new: JobState, now: float, reason: str) -> None:
        if new not in TRANSITIONS[self.state]:
            raise TransitionError(f"job {self.id}: illegal transition {self.state} → {new} ({reason})")
        self.events.append(JobEvent(now, self.state, new, reason))
        self.state = new

    def progress_at(self, now: float) -> float:
        """Seconds of work done by ``now`` in the current run plus checkpointed work."""
        if self.state is JobState.RUNNING and self.start_time is not None:
            return self.work_done_s + (now - self.start_time)
        return self.work_done_s

    def checkpointed_progress_at(self, now: float) -> float:
        """Work that would survive a preemption at ``now`` (last checkpoint in this run)."""
        if self.state is not JobState.RUNNING or self.start_time is None:
            return self.work_done_s
        ran = now - self.start_time
        interval = self.spec.checkpoint_interval_s
        if not interval or interval <= 0:
            return self.work_done_s
        return self.work_done_s + (ran // interval) * interval

    def work_at_risk(self, now: float) -> float:
        """Seconds of work lost if the job were stopped at ``now``."""
        return self.progress_at(now) - self.checkpointed_progress_at(now)

    def remaining_estimate(self, now: float) -> float | None:
        """Estimated seconds left (from the runtime estimate, else the max runtime)."""
        est = self.spec.estimated_runtime_s or self.spec.max_runtime_s
        if est is None:
            return None
        return max(0.0, est - self.progress_at(now))
