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

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gpufleet.model.constraints import NO_CONSTRAINTS, NodeConstraints
from gpufleet.model.job import PodPlacement
from gpufleet.model.node import Node, NodePool


class Capability(StrEnum):
    FRACTIONAL = "fractional"  # milli-GPU shares of one GPU (time-slicing / MPS)
    MIG = "mig"
    SPOT = "spot"
    PREEMPTION = "preemption"
    MULTI_NODE = "multi-node"
    AUTOSCALING = "autoscaling"
    RUN_AS = "run-as"  # jobs run as their owners' accounts, not as the server
    RESOURCE_LIMITS = "resource-limits"  # the kernel enforces a job's CPU and memory request (cgroups)
    DEVICE_ISOLATION = "device-isolation"  # the kernel denies a job the GPUs it was not given


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
    image: str | None = None  # the container image (Kubernetes); None: the backend's default
    labels: Mapping[str, str] = field(default_factory=dict)  # the job's labels (attribution, adoption)
    checkpoint_dir: str | None = None  # same directory on every attempt
    restart_count: int = 0
    max_runtime_s: float | None = None  # the backend enforces it (SIGTERM, grace, SIGKILL)
    grace_s: float = 30.0  # grace used when max runtime is reached
    team: str = "default"  # the owning team (its jobs' files live in a folder of the team's)
    run_as: str | None = None  # the Unix account to run as; None: the server's own (single-user only)
    cpu_milli: int = 0  # the request, enforced where the backend can (0: no limit)
    memory_mib: int = 0
    # the work already saved by checkpoints, as the scheduler accounts it, and the job's declared
    # length of work: a simulated backend runs the rest for that long, a real one ignores both
    work_done_s: float = 0.0
    duration_s: float | None = None
    # where its pods may run and the taints they tolerate (the job's; placement honoured them): a
    # backend that makes the pods writes them in (Kubernetes: nodeSelector, affinity, tolerations)
    constraints: NodeConstraints = NO_CONSTRAINTS


@dataclass(frozen=True, slots=True)
class RunHandle:
    job_id: str
    run: int
    pid: int
    started_at: float  # wall time the process started
    log_path: str


class EventKind(StrEnum):
    SUCCEEDED = "succeeded"  # exited 0
    FAILED = "failed"  # non-zero exit or killed by a signal nobody asked for
    STOPPED = "stopped"  # stopped on request (preemption, cancel): see ``reason``
    TIMED_OUT = "timed-out"  # ran past max runtime
    LOST = "lost"  # the run vanished without a recorded exit (machine reboot, shim killed)
    NODE_ADDED = "node-added"  # a node (provisioned earlier) is ready for work: ``node``
    NODE_INTERRUPTED = "node-interrupted"  # notice that spot capacity is being taken back: ``node``
    NODE_REMOVED = "node-removed"  # a node is gone, with whatever ran on it: ``node``
    # a node takes no new work but keeps what it runs (cordoned, NotReady, a NoSchedule taint): ``node``
    NODE_CORDONED = "node-cordoned"
    NODE_UNCORDONED = "node-uncordoned"  # a cordoned node takes new work again: ``node``
    # a known node's labels or taints changed (placements follow them; what runs there stays): ``node``
    NODE_CHANGED = "node-changed"


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
    temperature_c: float | None = None  # None: not known (no sensor reading)
    power_w: float | None = None


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


@runtime_checkable
class Provisioner(Protocol):
    """What a backend with :attr:`Capability.AUTOSCALING` also offers: node pools it can grow and
    shrink. A provisioned node is billed from the call and reported ready by a ``NODE_ADDED`` event."""

    def pools(self) -> list[NodePool]: ...

    def provision(self, pool: str, count: int, now: float) -> list[Node]: ...

    def release(self, node: str, now: float) -> None: ...


def read_job_file(path: os.PathLike[str] | str, offset: int, limit: int) -> bytes | None:
    """Up to ``limit`` bytes from ``offset`` of a file a job owns, or None if it cannot be read.

    The job controls the path's last component: a symbolic link is not followed and only a
    regular file is read, so a job cannot make the server read something else for it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.pread(fd, limit, offset)
    except OSError:
        return None
    finally:
        os.close(fd)
