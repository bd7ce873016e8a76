"""(a) gpufleet's pools from the definitions, and the node-template labels that make a Karpenter
NodePool's nodes read back as them.

:func:`gpufleet_pools` makes gpufleet :class:`~gpufleet.model.node.NodePool` objects, one per pool,
instance type and capacity type, named ``<nodepool>_<instance type>_<capacity type>``
(:func:`gpufleet_pool_name`) as :class:`~gpufleet.k8s.adapter.provisioner.KarpenterProvisioner`
names the pools it reads from the cluster: price from the catalog by instance type and capacity
type, CPU and memory the kubelet's allocatable estimate of the instance type's published shape
(:data:`~gpufleet.k8s.adapter.provisioner.INSTANCE_SHAPES`), ``max_nodes`` from the GPU
limit, and the sharing the pool's device-plugin or MIG configuration gives its GPUs
(:func:`sharing_facts`).

:func:`template_labels` are a Karpenter NodePool's template labels: they select the device-plugin
and MIG configurations (``nvidia.com/device-plugin.config``, ``nvidia.com/mig.config``) and name
the gpufleet pool (``gpufleet.io/pool``, where the NodePool offers one instance type), so a node
Karpenter makes from them reads back (:func:`~gpufleet.k8s.adapter.nodes.node_info`) as the
intended gpufleet pool, whoever asked for it.
"""

from __future__ import annotations

from gpufleet.cost.catalog import PriceCatalog, PriceEntry
from gpufleet.errors import InputError
from gpufleet.k8s.adapter.nodes import keep_off_taints
from gpufleet.k8s.adapter.objects import label_value
from gpufleet.k8s.adapter.provisioner import INSTANCE_SHAPES, allocatable, instance_labels
from gpufleet.k8s.gpustack.sharing import SHARING_KEYS, mig_layout, pool_sharing
from gpufleet.k8s.gpustack.spec import ALL_DISABLED, GpuSharing, GpuStack, PoolDef
from gpufleet.k8s.schemacheck import field_path
from gpufleet.k8s.vocabulary import (
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_INSTANCE_TYPE,
    LABEL_KARPENTER_CAPACITY_TYPE,
    LABEL_KARPENTER_NODEPOOL,
    LABEL_MIG_CONFIG,
    LABEL_POOL,
    LABEL_PROVISIONED,
    LABEL_REGION,
)
from gpufleet.model.gpu import gpu_model
from gpufleet.model.node import CapacityType, GpuSharingFacts, NodePool, SharingMode


def _catalog_entry(catalog: PriceCatalog, stack: GpuStack, instance_type: str) -> PriceEntry | None:
    """The catalog row for the instance type, as the provisioner picks it (the stack's provider; its
    region, else the first region)."""
    rows = sorted(
        (
            e
            for e in catalog.entries
            if e.offering == instance_type and (stack.provider is None or e.provider == stack.provider)
        ),
        key=lambda e: (e.provider, e.region),
    )
    in_region = [e for e in rows if e.region == stack.region]
    found = in_region or rows
    return found[0] if found else None


def gpufleet_pool_name(nodepool: str, instance_type: str, capacity_type: str) -> str:
    """The gpufleet pool of a NodePool's instance type and capacity type (the provisioner's name)."""
    return label_value(f"{nodepool}_{instance_type}_{capacity_type}")


def sharing_facts(sharing: GpuSharing) -> GpuSharingFacts:
    """The GPU sharing gpufleet's node reader finds on a node with this configuration
    (:func:`~gpufleet.k8s.adapter.nodes.node_info`'s ``Node.gpu_facts``)."""
    shared = sharing.mode is SharingMode.SHARED
    mig = sharing.mode is SharingMode.MIG and sharing.mig_strategy is not None
    return GpuSharingFacts(
        resource=sharing.resource,
        replicas=sharing.replicas if shared else 1,
        strategy=sharing.strategy if shared else None,
        mig_strategy=sharing.mig_strategy if mig else None,
        mig_profiles=tuple(sorted((sharing.mig_slices or {}).items())) if mig else (),
        whole_gpus=sharing.whole_gpus if mig else 0,
    )


def gpufleet_pools(stack: GpuStack, catalog: PriceCatalog, *, provisioning_delay_s: float = 180.0) -> list[NodePool]:
    """(a): the autoscaler's pools, one per pool, instance type and capacity type (see the module
    docstring). Raises :class:`InputError` naming the field for an instance type the catalog does
    not price (for that capacity type), or prices with another GPU model or count, or whose shape
    gpufleet does not know."""
    out: list[NodePool] = []
    # what the NodePools' taints keep off (as the provisioner reads them back from the cluster)
    taints = keep_off_taints([dict(t) for t in stack.taints], source=stack.source, at="nodePool.taints")
    for pool in stack.pools:
        sharing = pool_sharing(stack, pool)
        for j, itype in enumerate(pool.instance_types):
            fld = f"{pool.field}.instanceTypes[{j}]"
            entry = _catalog_entry(catalog, stack, itype)
            where = f"{stack.provider or 'any provider'}/{stack.region or 'any region'}"
            if entry is None:
                raise InputError(f"the price catalog has no {itype} ({where})", source=stack.source, field=fld)
            if entry.gpu != pool.gpu_model or entry.gpu_count != pool.gpus_per_node:
                raise InputError(
                    f"{itype} has {entry.gpu_count} x {entry.gpu} (catalog), the pool says "
                    f"{pool.gpus_per_node} x {pool.gpu_model}",
                    source=stack.source,
                    field=fld,
                )
            shape = INSTANCE_SHAPES.get(itype)
            if shape is None:
                raise InputError(
                    f"gpufleet does not know the vCPUs and memory of {itype} "
                    "(gpufleet.k8s.adapter.provisioner.INSTANCE_SHAPES)",
                    source=stack.source,
                    field=fld,
                )
            cpu, memory = allocatable(shape.vcpus, shape.memory_gib * 1024)
            for cap in sorted(pool.capacity_types):
                capacity_type = CapacityType(cap)
                price = entry.hourly_usd(capacity_type, catalog.spot_estimate)
                if price is None:
                    raise InputError(
                        f"the price catalog has no {cap} price for {itype} ({entry.provider}/{entry.region})",
                        source=stack.source,
                        field=f"{pool.field}.capacityTypes",
                    )
                nodepool = pool.nodepool_name(cap)
                name = gpufleet_pool_name(nodepool, itype, cap)
                labels = {
                    # what its nodes will carry (the provisioner's pools say the same)
                    **instance_labels(itype, entry, shape.vcpus, shape.memory_gib * 1024),
                    **template_labels(stack, pool, cap),
                    LABEL_KARPENTER_NODEPOOL: nodepool,
                    LABEL_INSTANCE_TYPE: itype,
                    LABEL_KARPENTER_CAPACITY_TYPE: cap,
                    LABEL_POOL: name,
                    LABEL_PROVISIONED: "true",
                }
                if stack.region:
                    labels[LABEL_REGION] = stack.region
                out.append(
                    NodePool(
                        name=name,
                        gpu_model=entry.gpu,
                        gpus_per_node=entry.gpu_count,
                        cpu_milli=cpu,
                        memory_mib=memory,
                        capacity_type=capacity_type,
                        hourly_price_usd=price,
                        min_nodes=0,
                        max_nodes=pool.gpu_limits[cap] // pool.gpus_per_node,
                        provisioning_delay_s=provisioning_delay_s,
                        sharing=sharing.mode,
                        labels=labels,
                        gpu_facts=sharing_facts(sharing),
                        taints=taints,
                    )
                )
    return out


def template_labels(stack: GpuStack, pool: PoolDef, capacity_type: str) -> dict[str, str]:
    """The labels of a NodePool's node template: the pool's own, the device-plugin and MIG configs
    that the GPU Operator applies to the node, and the gpufleet pool where the NodePool offers one
    instance type."""
    labels = dict(pool.labels)
    if len(pool.instance_types) == 1:
        labels[LABEL_POOL] = gpufleet_pool_name(
            pool.nodepool_name(capacity_type), pool.instance_types[0], capacity_type
        )
    dp_config = pool.config if pool.sharing in SHARING_KEYS else stack.device_plugin_default
    labels[LABEL_DEVICE_PLUGIN_CONFIG] = str(dp_config)
    if pool.sharing == "mig":
        labels[LABEL_MIG_CONFIG] = str(pool.config)
    elif gpu_model(pool.gpu_model).supports_mig:
        # MIG-capable GPUs used whole: pinned off (the operator's default could be changed)
        entries = stack.mig_configs.get(ALL_DISABLED)
        if entries is None:
            raise InputError(
                f"pool {pool.name} has MIG-capable {pool.gpu_model} GPUs used whole: a MIG config "
                f"{ALL_DISABLED!r} must exist",
                source=stack.source,
                field="migManager.configs",
            )
        slices, _, _ = mig_layout(stack, ALL_DISABLED, entries, pool.gpu_model, pool.gpus_per_node)
        if slices:
            raise InputError(
                f"must leave MIG off (pool {pool.name} uses its {pool.gpu_model} GPUs whole)",
                source=stack.source,
                field=field_path("migManager.configs", ALL_DISABLED),
            )
        labels[LABEL_MIG_CONFIG] = ALL_DISABLED
    return labels
