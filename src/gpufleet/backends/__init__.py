"""Backends: the only code that touches processes, GPUs or a cluster API.

Only the contract is imported here, so light users (the local backend's shim, which runs as
``python -m gpufleet.backends.shim``) do not pay for psutil, NVML or cluster clients. Import a
concrete backend from its module, e.g. ``from gpufleet.backends.local import LocalBackend``.
"""

from gpufleet.backends.base import (
    Backend,
    BackendEvent,
    Capabilities,
    Capability,
    EventKind,
    GpuSample,
    LaunchRequest,
    Recovered,
    RecoveredState,
    RunHandle,
)

__all__ = [
    "Backend",
    "BackendEvent",
    "Capabilities",
    "Capability",
    "EventKind",
    "GpuSample",
    "LaunchRequest",
    "Recovered",
    "RecoveredState",
    "RunHandle",
]
