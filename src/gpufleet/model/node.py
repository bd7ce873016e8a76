"""Nodes and node pools."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.k8s.vocabulary import GPU_RESOURCE
from gpufleet.model.constraints import Taint
from gpufleet.model.share import replicas_milli


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"


class SharingMode(StrEnum):
    """How a node's GPUs may be shared."""

    EXCLUSIVE = "exclusive"  # whole GPUs only
    SHARED = "shared"  # time-sliced / MPS fractions (milli-GPU) allowed
    MIG = "mig"  # MIG-enabled: only MIG slices (and whole 7g slices)


@dataclass(frozen=True, slots=True)
class GpuSharingFacts:
    """How a node's GPUs are handed out, as gpufleet read them (on Kubernetes: from the device
    plugin's resources and GPU Feature Discovery's labels, :func:`gpufleet.k8s.adapter.nodes.node_info`).
    Facts of the node, not labels: nothing here is on the cluster's Node. The defaults are an
    unshared node whose pods ask ``nvidia.com/gpu``."""

    # the extended resource a pod asks for whole GPUs or replicas with (nvidia.com/gpu, .../gpu.shared);
    # None: the node hands out none (no GPUs, or MIG slices only: those are asked as nvidia.com/mig-<profile>)
    resource: str | None = GPU_RESOURCE
    replicas: int = 1  # replicas per physical GPU (> 1: time-slicing / MPS)
    strategy: str | None = None  # time-sliced or MPS GPUs: time-slicing | mps
    mig_strategy: str | None = None  # MIG GPUs: single | mixed
    mig_profiles: tuple[tuple[str, int], ...] = ()  # MIG GPUs: (profile, allocatable slices), by profile
    whole_gpus: int = 0  # MIG GPUs: the node's GPUs not in MIG mode (mixed strategy)

    @property
    def replica_milli(self) -> int:
        """One replica in milli-GPU (1000 for an unshared GPU; rounded down: 1 of 3 = 333)."""
        return replicas_milli(1, self.replicas)


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
    labels: dict[str, str] = field(default_factory=dict)  # the node's own (on Kubernetes: the Node's)
    gpu_facts: GpuSharingFacts = GpuSharingFacts()
    # NoSchedule/NoExecute taints that keep off the pods of jobs not tolerating them (on Kubernetes:
    # the Node's, less the node-lifecycle ones and those gpufleet's own pods tolerate, see nodes.py)
    taints: tuple[Taint, ...] = ()


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
    gpu_facts: GpuSharingFacts = GpuSharingFacts()  # of each node
    # the taints each node is made with (what keeps off the jobs not tolerating them, as Node.taints):
    # the autoscaler grows a pool only for jobs that tolerate them, feasibility counts it only for those
    taints: tuple[Taint, ...] = ()

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
            gpu_facts=self.gpu_facts,
            taints=self.taints,
        )
