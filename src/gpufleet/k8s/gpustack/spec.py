"""The definitions of a checked pool file: :class:`GpuStack`, its pools (:class:`PoolDef`), its
ClusterPolicy settings, what a pool's configuration does to its GPUs (:class:`GpuSharing`), and the
names the GPU stack's modules share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from gpufleet.k8s.adapter.provisioner import PROVIDER_OF_NODECLASS
from gpufleet.k8s.gpustack.packaged import schemas
from gpufleet.k8s.schemacheck import check
from gpufleet.model.node import SharingMode

ALL_DISABLED: Final = "all-disabled"  # the MIG config that leaves MIG off
# The parts of (b)-(d) that `gpufleet k8s gpu-config --only` and objects_from_values(only=) name.
PARTS: Final = ("devicePlugin", "mig", "clusterPolicy", "nodePools")
Part = Literal["devicePlugin", "mig", "clusterPolicy", "nodePools"]

SharingKind = Literal["none", "time-slicing", "mps", "mig"]


@dataclass(frozen=True, slots=True)
class PoolDef:
    """One pool of the file: what gpufleet and Karpenter both need to know of it."""

    name: str
    instance_types: tuple[str, ...]
    gpu_model: str  # canonical
    gpus_per_node: int
    capacity_types: tuple[str, ...]  # file order
    gpu_limits: Mapping[str, int]  # capacity type -> physical GPUs of its NodePool
    sharing: SharingKind
    config: str | None  # the device-plugin config (none, time-slicing, mps) or the MIG config (mig)
    labels: Mapping[str, str]  # more template labels
    index: int  # position in the file's pools (for error fields)

    @property
    def field(self) -> str:
        return f"pools[{self.index}]"

    def nodepool_name(self, capacity_type: str) -> str:
        """The Karpenter NodePool of this pool and capacity type."""
        return f"{self.name}-{capacity_type}"


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """What a pool's configuration does to its GPUs, as gpufleet's node reader will see it."""

    mode: SharingMode
    resource: str | None  # the extended resource pods ask for whole GPUs / replicas with
    replicas: int = 1  # time-slicing / MPS
    strategy: str | None = None  # time-slicing | mps
    mig_strategy: str | None = None  # single | mixed (MIG pools)
    mig_slices: Mapping[str, int] | None = None  # profile -> slices per node (MIG pools)
    whole_gpus: int = 0  # GPUs of a MIG node left whole


@dataclass(frozen=True, slots=True)
class ClusterPolicySettings:
    enabled: bool
    name: str
    dcgm_exporter: bool
    gfd: bool
    spec: Mapping[str, Any]  # more spec, under gpufleet's fields


@dataclass(frozen=True, slots=True)
class GpuStack:
    """A checked pool file (:func:`~gpufleet.k8s.gpustack.parse.parse_stack`)."""

    source: str
    namespace: str
    region: str | None
    node_class: Mapping[str, str]  # group, kind, name
    taints: tuple[Mapping[str, str], ...]
    disruption: Mapping[str, str]
    expire_after: str | None
    mig_strategy: str
    device_plugin_config_map: str
    device_plugin_default: str
    device_plugin_configs: Mapping[str, Mapping[str, Any]]  # name -> the config as rendered
    mig_config_map: str
    mig_default: str
    mig_configs: Mapping[str, Sequence[Mapping[str, Any]]]  # name -> mig-parted entries as rendered
    cluster_policy: ClusterPolicySettings
    pools: tuple[PoolDef, ...]

    @property
    def provider(self) -> str | None:
        """The catalog provider of the NodeClass (``aws`` for ``karpenter.k8s.aws``)."""
        return PROVIDER_OF_NODECLASS.get(self.node_class["group"])

    def with_node_class(self, name: str) -> GpuStack:
        """The same stack with every NodePool pointing at NodeClass ``name``."""
        check(schemas()["pools"]["$defs"]["dnsSubdomain"], name, source="--node-class")
        return replace(self, node_class={**self.node_class, "name": name})
