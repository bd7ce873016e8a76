"""Cluster descriptions in YAML: static node groups and autoscaled pools, validated.

Example::

    nodes:                       # static nodes (never scaled)
      - {count: 4, gpu_model: A100-80GB, gpus: 8, cpu: 96, memory_gib: 1024, capacity_type: on-demand}
    pools:                       # autoscaled node pools
      - {name: spot-a100, gpu_model: A100-80GB, gpus: 8, cpu: 96, memory_gib: 1024,
         capacity_type: spot, min_nodes: 0, max_nodes: 20, provisioning_delay_s: 180,
         taints: [{key: dedicated, value: ml, effect: NoSchedule}]}

``taints`` (of a group's nodes, of a pool's nodes) are a Node's ``spec.taints``: key, value, effect
(``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute``); a job runs there only if it tolerates the
NoSchedule and NoExecute ones (:mod:`gpufleet.model.constraints`).

Sizes are bounded by :mod:`gpufleet.sim.limits`: GPUs, CPU and memory per node, a group's ``count``
and a pool's node counts, all static nodes plus every pool's ``max_nodes`` (``MAX_NODES``), the
number of groups and pools, and the provisioning delay.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from gpufleet.config import load_model
from gpufleet.errors import InputError
from gpufleet.model.constraints import Taint, taint_from_dict
from gpufleet.model.gpu import canonical_gpu_name
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode
from gpufleet.sim.limits import MAX_CPU_MILLI, MAX_GPUS_PER_NODE, MAX_MEMORY_MIB, MAX_NODES, MAX_POOLS, MAX_TIME_S

_MAX_CORES = MAX_CPU_MILLI / 1000
_MAX_GIB = MAX_MEMORY_MIB / 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _gpu(v: str) -> str:
    if v == "":
        return v
    canon = canonical_gpu_name(v)
    if canon is None:
        raise ValueError(f"unknown GPU model '{v}'")
    return canon


def _taints(raw: Any) -> Any:
    """``taints`` read with the one codec of a Node's taints (:func:`taint_from_dict`); a bad one is
    a validation error at its own path (``pools.0.taints.1.effect``)."""
    if not isinstance(raw, list | tuple):
        return raw  # pydantic says what is wrong with it
    out: list[Any] = []
    for i, t in enumerate(raw):
        if isinstance(t, Taint):
            out.append(t)
            continue
        try:
            out.append(taint_from_dict(t, at=str(i)))
        except InputError as e:
            at = e.field or str(i)
            loc = tuple(int(p) if p.isdigit() else p for p in at.split("."))
            why = e.message.removeprefix(f"field '{at}': ")
            error = InitErrorDetails(type=PydanticCustomError("taint", "{why}", {"why": why}), loc=loc, input=t)
            raise ValidationError.from_exception_data("taints", [error]) from None
    return tuple(out)


class NodeGroup(_Strict):
    name: str = "node"
    count: int = Field(1, ge=0, le=MAX_NODES)
    pool: str = "static"
    gpu_model: str = ""
    gpus: int = Field(0, ge=0, le=MAX_GPUS_PER_NODE)
    cpu: float = Field(..., gt=0, le=_MAX_CORES, description="cores")
    memory_gib: float = Field(..., gt=0, le=_MAX_GIB)
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    hourly_price_usd: float | None = Field(None, ge=0)
    sharing: SharingMode = SharingMode.SHARED
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    _g = field_validator("gpu_model")(classmethod(lambda cls, v: _gpu(v)))
    _t = field_validator("taints", mode="before")(classmethod(lambda cls, v: _taints(v)))

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
                taints=self.taints,
            )
            for i in range(self.count)
        ]


class PoolSpec(_Strict):
    name: str
    gpu_model: str = ""
    gpus: int = Field(0, ge=0, le=MAX_GPUS_PER_NODE)
    cpu: float = Field(..., gt=0, le=_MAX_CORES)
    memory_gib: float = Field(..., gt=0, le=_MAX_GIB)
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    hourly_price_usd: float | None = Field(None, ge=0)
    min_nodes: int = Field(0, ge=0, le=MAX_NODES)
    max_nodes: int = Field(10, ge=0, le=MAX_NODES)
    initial_nodes: int = Field(0, ge=0, le=MAX_NODES)
    provisioning_delay_s: float = Field(180.0, ge=0, le=MAX_TIME_S)
    sharing: SharingMode = SharingMode.SHARED
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    _g = field_validator("gpu_model")(classmethod(lambda cls, v: _gpu(v)))
    _t = field_validator("taints", mode="before")(classmethod(lambda cls, v: _taints(v)))

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
            taints=self.taints,
        )


class ClusterSpec(_Strict):
    nodes: list[NodeGroup] = Field(default_factory=list, max_length=MAX_POOLS)
    pools: list[PoolSpec] = Field(default_factory=list, max_length=MAX_POOLS)

    @model_validator(mode="after")
    def _unique(self) -> ClusterSpec:
        total = sum(g.count for g in self.nodes) + sum(p.max_nodes for p in self.pools)
        if total > MAX_NODES:
            raise ValueError(f"{total} nodes (static counts plus the pools' max_nodes) is more than {MAX_NODES}")
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
