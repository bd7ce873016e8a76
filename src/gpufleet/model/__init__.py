"""Plain typed domain objects shared by every layer."""

from gpufleet.model.gpu import GPU_MODELS, MILLI, GpuModel, MigProfile, canonical_gpu_name, gpu_model
from gpufleet.model.job import (
    PRIORITY_CLASSES,
    GpuRequest,
    Job,
    JobEvent,
    JobSpec,
    JobState,
    PodPlacement,
)
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode
from gpufleet.model.quota import ANY_GPU, Quota

__all__ = [
    "ANY_GPU",
    "GPU_MODELS",
    "MILLI",
    "PRIORITY_CLASSES",
    "CapacityType",
    "GpuModel",
    "GpuRequest",
    "Job",
    "JobEvent",
    "JobSpec",
    "JobState",
    "MigProfile",
    "Node",
    "NodePool",
    "PodPlacement",
    "Quota",
    "SharingMode",
    "canonical_gpu_name",
    "gpu_model",
]
