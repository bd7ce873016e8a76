"""The backend contract: the only code that touches processes, GPUs or a cluster API.

A backend declares its capabilities up front (with a reason for each one it lacks) and offers
idempotent verbs: launching a run that already runs is a no-op that returns its handle, stopping a
stopped run is a no-op. Runs are keyed by ``(job_id, run)`` where ``run`` counts the job's attempts
from 1, so a restarted job never collides with the remains of its previous attempt.

Times in events are wall-clock UNIX seconds measured by the backend as close to the process as it
can (the local backend's shim records them next to ``fork``/``wait``), so the ledger meters the
process's own wall time even when the controller was down when it started or ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gpufleet.model.job import PodPlacement
from gpufleet.model.node import Node


class Capability(StrEnum):
    FRACTIONAL = "fractional"  # milli-GPU shares of one GPU (time-slicing / MPS)
    MIG = "mig"
    SPOT = "spot"
    PREEMPTION = "preemption"
    MULTI_NODE = "multi-node"
    AUTOSCALING = "autoscaling"


@dataclass(frozen=True, slots=True)
class Capabilities:
    supported: frozenset[Capability]
    missing: Mapping[Capability, str] = field(default_factory=dict)  # capability → why not

    def __contains__(self, cap: object) -> bool:
        return cap in self.supported


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    job_id: str
    run: int  # attempt number, from 1
    command: Sequence[str]
    placement: tuple[PodPlacement, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    checkpoint_dir: str | None = None  # same directory on every attempt
    restart_count: int = 0
    max_runtime_s: float | None = None  # the backend enforces it (SIGTERM, grace, SIGKILL)
    grace_s: float = 30.0  # grace used when max runtime is reached


@dataclass(frozen=True, slots=True)
class RunHandle:
    job_id: str
    run: int
    pid: int
    started_at: float  # wall time the process started
    log_path: str


class EventKind(StrEnum):
    STARTED = "started"
    SUCCEEDED = "succeeded"  # exited 0
    FAILED = "failed"  # non-zero exit or killed by a signal nobody asked for
    STOPPED = "stopped"  # stopped on request (preemption, cancel): see ``reason``
    TIMED_OUT = "timed-out"  # ran past max runtime
    LOST = "lost"  # the run vanished without a recorded exit (machine reboot, shim killed)
    NODE_ADDED = "node-added"
    NODE_INTERRUPTED = "node-interrupted"
    NODE_REMOVED = "node-removed"


@dataclass(frozen=True, slots=True)
class BackendEvent:
    kind: EventKind
    time: float
    job_id: str | None = None
    run: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    node: str | None = None


class RecoveredState(StrEnum):
    RUNNING = "running"  # alive: adopted, will be reported by poll() when it ends
    ENDED = "ended"  # ended while nobody watched: ``event`` says how
    ABSENT = "absent"  # never started, or vanished: nothing of it runs now (stale processes were killed)


@dataclass(frozen=True, slots=True)
class Recovered:
    state: RecoveredState
    handle: RunHandle | None = None
    event: BackendEvent | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    time: float
    node: str
    gpu_index: int
    uuid: str
    utilization_pct: float
    memory_used_mib: float
    memory_total_mib: float
    job_memory_mib: Mapping[str, float] = field(default_factory=dict)  # job id → MiB its processes use


@runtime_checkable
class Backend(Protocol):
    name: str
    capabilities: Capabilities

    def inventory(self) -> list[Node]: ...

    def launch(self, req: LaunchRequest) -> RunHandle: ...

    def stop(self, job_id: str, run: int, reason: str, grace_s: float = 30.0) -> None: ...

    def poll(self) -> list[BackendEvent]: ...

    def recover(self, job_id: str, run: int) -> Recovered: ...

    def telemetry(self) -> list[GpuSample]: ...

    def close(self) -> None: ...
