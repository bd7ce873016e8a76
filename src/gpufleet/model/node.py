"""Nodes and node pools."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"


class SharingMode(StrEnum):
    """How a node's GPUs may be shared."""

    EXCLUSIVE = "exclusive"  # whole GPUs only
    SHARED = "shared"  # time-sliced / MPS fractions (milli-GPU) allowed
    MIG = "mig"  # MIG-enabled: only MIG slices (and whole 7g slices)


@dataclass(slots=True)
class Node:
    name: str
    gpu_model: str = ""  # canonical name; "" for a CPU-only node
    gpu_count: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    pool: str = "default"
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    hourly_price_usd: float | None = None  # the node's own price; None = from the catalog
    sharing: SharingMode = SharingMode.SHARED
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodePool:
    """A group of identical nodes the autoscaler can grow and shrink."""

    name: str
    gpu_model: str
    gpus_per_node: int
    cpu_milli: int
    memory_mib: int
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    hourly_price_usd: float | None = None  # per node; None = catalog price x gpus_per_node
    min_nodes: int = 0
    max_nodes: int = 0
    initial_nodes: int = 0
    provisioning_delay_s: float = 180.0
    sharing: SharingMode = SharingMode.SHARED
    labels: dict[str, str] = field(default_factory=dict)

    def make_node(self, index: int) -> Node:
        return Node(
            name=f"{self.name}-{index:04d}",
            gpu_model=self.gpu_model,
            gpu_count=self.gpus_per_node,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            pool=self.name,
            capacity_type=self.capacity_type,
            hourly_price_usd=self.hourly_price_usd,
            sharing=self.sharing,
            labels=dict(self.labels),
        )
