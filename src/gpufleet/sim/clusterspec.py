"""Cluster descriptions in YAML: static node groups and autoscaled pools, validated.

Example::

    nodes:                       # static nodes (never scaled)
      - {count: 4, gpu_model: A100-80GB, gpus: 8, cpu: 96, memory_gib: 1024, capacity_type: on-demand}
    pools:                       # autoscaled node pools
      - {name: spot-a100, gpu_model: A100-80GB, gpus: 8, cpu: 96, memory_gib: 1024,
         capacity_type: spot, min_nodes: 0, max_nodes: 20, provisioning_delay_s: 180}
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.config import load_model
from gpufleet.model.gpu import canonical_gpu_name
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _gpu(v: str) -> str:
    if v == "":
        return v
    canon = canonical_gpu_name(v)
    if canon is None:
        raise ValueError(f"unknown GPU model '{v}'")
    return canon


class NodeGroup(_Strict):
    name: str = "node"
    count: int = Field(1, ge=0)
    pool: str = "static"
    gpu_model: str = ""
    gpus: int = Field(0, ge=0, le=64)
    cpu: float = Field(..., gt=0, description="cores")
    memory_gib: float = Field(..., gt=0)
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    hourly_price_usd: float | None = Field(None, ge=0)
    sharing: SharingMode = SharingMode.SHARED
    labels: dict[str, str] = Field(default_factory=dict)

    _g = field_validator("gpu_model")(classmethod(lambda cls, v: _gpu(v)))

    @model_validator(mode="after")
    def _gpu_needs_model(self) -> NodeGroup:
        if self.gpus and not self.gpu_model:
            raise ValueError("gpu_model is required when gpus > 0")
        return self

    def make(self) -> list[Node]:
        return [
            Node(
                name=f"{self.name}-{i:04d}",
                gpu_model=self.gpu_model,
                gpu_count=self.gpus,
                cpu_milli=round(self.cpu * 1000),
                memory_mib=round(self.memory_gib * 1024),
                pool=self.pool,
                capacity_type=self.capacity_type,
                hourly_price_usd=self.hourly_price_usd,
                sharing=self.sharing,
                labels=dict(self.labels),
            )
            for i in range(self.count)
        ]


class PoolSpec(_Strict):
    name: str
    gpu_model: str = ""
    gpus: int = Field(0, ge=0, le=64)
    cpu: float = Field(..., gt=0)
    memory_gib: float = Field(..., gt=0)
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    hourly_price_usd: float | None = Field(None, ge=0)
    min_nodes: int = Field(0, ge=0)
    max_nodes: int = Field(10, ge=0)
    initial_nodes: int = Field(0, ge=0)
    provisioning_delay_s: float = Field(180.0, ge=0)
    sharing: SharingMode = SharingMode.SHARED
    labels: dict[str, str] = Field(default_factory=dict)

    _g = field_validator("gpu_model")(classmethod(lambda cls, v: _gpu(v)))

    @model_validator(mode="after")
    def _limits(self) -> PoolSpec:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes ({self.min_nodes}) > max_nodes ({self.max_nodes})")
        if not self.min_nodes <= self.initial_nodes <= self.max_nodes and self.initial_nodes:
            raise ValueError("initial_nodes must lie between min_nodes and max_nodes")
        return self

    def make(self) -> NodePool:
        return NodePool(
            name=self.name,
            gpu_model=self.gpu_model,
            gpus_per_node=self.gpus,
            cpu_milli=round(self.cpu * 1000),
            memory_mib=round(self.memory_gib * 1024),
            capacity_type=self.capacity_type,
            hourly_price_usd=self.hourly_price_usd,
            min_nodes=self.min_nodes,
            max_nodes=self.max_nodes,
            initial_nodes=self.initial_nodes,
            provisioning_delay_s=self.provisioning_delay_s,
            sharing=self.sharing,
            labels=dict(self.labels),
        )


class ClusterSpec(_Strict):
    nodes: list[NodeGroup] = Field(default_factory=list)
    pools: list[PoolSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> ClusterSpec:
        names = [g.name for g in self.nodes] + [p.name for p in self.pools]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate node group / pool names: {', '.join(sorted(dup))}")
        if not self.nodes and not any(p.max_nodes for p in self.pools):
            raise ValueError("a cluster needs static nodes or a pool with max_nodes > 0")
        return self

    def build(self) -> tuple[list[Node], list[NodePool]]:
        nodes = [n for g in self.nodes for n in g.make()]
        return nodes, [p.make() for p in self.pools]


def load_cluster(data: Mapping[str, Any] | str | Path, source: str = "cluster") -> ClusterSpec:
    """A cluster from a mapping or a YAML file (at the top or under ``cluster:``)."""
    return load_model(
        ClusterSpec, data, source=source, section="cluster", what="a cluster (with 'nodes' and/or 'pools')"
    )
