"""The Helm chart's ``gpuStack`` values (:func:`chart_values`: what ``gpufleet k8s gpu-config
--values`` prints) and their JSON Schema (:func:`values_schema`, which the chart's
``values.schema.json`` embeds).

(b)–(d) are rendered from these values by the chart's ``deploy/helm/gpufleet/templates/gpu-stack/``
and, the same way, by :func:`~gpufleet.k8s.gpustack.objects.objects_from_values`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpufleet.k8s.adapter.provisioner import INSTANCE_SHAPES
from gpufleet.k8s.gpustack.packaged import schemas
from gpufleet.k8s.gpustack.pools import template_labels
from gpufleet.k8s.gpustack.sharing import pool_sharing
from gpufleet.k8s.gpustack.spec import ALL_DISABLED, GpuStack, PoolDef
from gpufleet.k8s.schemacheck import inline_refs
from gpufleet.k8s.vocabulary import (
    AWS_GPU_COUNT,
    AWS_GPU_NAME,
    AWS_NODE_CLASS_GROUP,
    GPU_RESOURCE,
    KARPENTER_API,
    LABEL_ARCH,
    LABEL_INSTANCE_TYPE,
    LABEL_KARPENTER_CAPACITY_TYPE,
    LABEL_OS,
)


def _requirements(stack: GpuStack, pool: PoolDef, capacity_type: str) -> list[dict[str, Any]]:
    reqs: list[dict[str, Any]] = [
        {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": list(pool.instance_types)},
        {"key": LABEL_KARPENTER_CAPACITY_TYPE, "operator": "In", "values": [capacity_type]},
    ]
    if stack.node_class["group"] == AWS_NODE_CLASS_GROUP:
        family = pool.gpu_model.split("-", 1)[0].lower()
        reqs.append({"key": AWS_GPU_NAME, "operator": "In", "values": [family]})
        reqs.append({"key": AWS_GPU_COUNT, "operator": "In", "values": [str(pool.gpus_per_node)]})
    archs = sorted({INSTANCE_SHAPES[t].arch for t in pool.instance_types if t in INSTANCE_SHAPES} or {"amd64"})
    reqs.append({"key": LABEL_ARCH, "operator": "In", "values": archs})
    reqs.append({"key": LABEL_OS, "operator": "In", "values": ["linux"]})
    return reqs


def chart_values(stack: GpuStack, *, enabled: bool = True) -> dict[str, Any]:
    """The Helm chart's ``gpuStack`` values that render (b)–(d) of ``stack``
    (``deploy/helm/gpufleet/templates/gpu-stack/``;
    :func:`~gpufleet.k8s.gpustack.objects.objects_from_values` does the same)."""
    pools = []
    for pool in stack.pools:
        sharing = pool_sharing(stack, pool)
        for cap in pool.capacity_types:
            gpus = pool.gpu_limits[cap]
            # Karpenter counts the nvidia.com/gpu a node advertises once it joins: replicas per GPU
            # with time-slicing / MPS, none on a MIG node; `nodes` holds the physical limit.
            limits = {GPU_RESOURCE: str(gpus * sharing.replicas), "nodes": str(gpus // pool.gpus_per_node)}
            pools.append(
                {
                    "name": pool.nodepool_name(cap),
                    "labels": template_labels(stack, pool, cap),
                    "requirements": _requirements(stack, pool, cap),
                    "limits": limits,
                }
            )
    cp = stack.cluster_policy
    node_pools: dict[str, Any] = {
        "enabled": True,
        "force": False,
        "nodeClass": dict(stack.node_class),
        "taints": [dict(t) for t in stack.taints],
        "disruption": dict(stack.disruption),
    }
    # null (never expire) drops the chart's default under Helm's merge; the templates leave it out
    node_pools["expireAfter"] = stack.expire_after
    node_pools["pools"] = pools
    return {
        "enabled": enabled,
        "namespace": stack.namespace,
        "migStrategy": stack.mig_strategy,
        "devicePlugin": {
            "configMap": stack.device_plugin_config_map,
            "default": stack.device_plugin_default,
            "configs": [{"name": k, "config": copy.deepcopy(dict(v))} for k, v in stack.device_plugin_configs.items()],
        },
        "migManager": {
            "configMap": stack.mig_config_map,
            "default": stack.mig_default,
            "configs": [{"name": k, "config": copy.deepcopy(list(v))} for k, v in stack.mig_configs.items()],
        },
        "clusterPolicy": {
            "enabled": cp.enabled,
            "name": cp.name,
            "dcgmExporter": cp.dcgm_exporter,
            "gfd": cp.gfd,
            "spec": copy.deepcopy(dict(cp.spec)),
        },
        "nodePools": node_pools,
    }


def values_schema() -> dict[str, Any]:
    """The JSON Schema of the ``gpuStack`` values (the chart's values.schema.json embeds it): the
    device-plugin and mig-parted schemas inlined, so the chart refuses what the operator would."""
    dp = inline_refs(schemas()["device-plugin"])
    mig = inline_refs(schemas()["mig-parted"])
    pools = schemas()["pools"]["$defs"]
    dns_subdomain = pools["dnsSubdomain"]
    label_value_schema = pools["labelValue"]
    config_name = pools["configName"]
    label_key = pools["labelKey"]
    requirement = {
        "type": "object",
        "additionalProperties": False,
        "required": ["key", "operator"],
        "properties": {
            "key": label_key,
            "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]},
            "values": {"type": "array", "items": label_value_schema},
            "minValues": {"type": "integer", "minimum": 1},
        },
    }
    quantity = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE]|m)?$"}
    return {
        "description": "The GPU stack (docs/gpu-stack.md): what `gpufleet k8s gpu-config --values` prints.",
        "type": "object",
        "additionalProperties": False,
        "required": ["enabled"],
        "properties": {
            "enabled": {"type": "boolean", "description": "Render the GPU stack's objects."},
            "namespace": {**pools["dnsLabel"], "description": "The GPU Operator's namespace (its ConfigMaps)."},
            "migStrategy": {"enum": ["none", "single", "mixed"], "description": "ClusterPolicy spec.mig.strategy."},
            "devicePlugin": {
                "type": "object",
                "additionalProperties": False,
                "required": ["configMap", "default", "configs"],
                "properties": {
                    "configMap": dns_subdomain,
                    "default": config_name,
                    "configs": named_list(config_name, dp),
                },
            },
            "migManager": {
                "type": "object",
                "additionalProperties": False,
                "required": ["configMap", "default", "configs"],
                "properties": {
                    "configMap": dns_subdomain,
                    "default": {"enum": [ALL_DISABLED, ""]},
                    "configs": named_list(config_name, mig["properties"]["mig-configs"]["additionalProperties"]),
                },
            },
            "clusterPolicy": {
                "type": "object",
                "additionalProperties": False,
                "required": ["enabled", "name", "dcgmExporter", "gfd", "spec"],
                "properties": {
                    "enabled": {"type": "boolean"},
                    "name": dns_subdomain,
                    "dcgmExporter": {"type": "boolean"},
                    "gfd": {"type": "boolean"},
                    "spec": {"type": "object", "description": "More ClusterPolicy spec, under gpufleet's fields."},
                },
            },
            "nodePools": {
                "type": "object",
                "additionalProperties": False,
                "required": ["enabled", "force", "nodeClass", "taints", "disruption", "pools"],
                "properties": {
                    "enabled": {"type": "boolean"},
                    "force": {
                        "type": "boolean",
                        "description": f"Render the NodePools even where the cluster does not serve {KARPENTER_API}.",
                    },
                    "nodeClass": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["group", "kind", "name"],
                        "properties": {
                            "group": {"type": "string", "minLength": 1},
                            "kind": {"type": "string", "minLength": 1},
                            "name": dns_subdomain,
                        },
                    },
                    "taints": pools_taints(),
                    "disruption": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "consolidationPolicy": {"enum": ["WhenEmpty", "WhenEmptyOrUnderutilized"]},
                            "consolidateAfter": {"type": "string", "pattern": "^(([0-9]+(s|m|h))+|Never)$"},
                        },
                    },
                    "expireAfter": {"type": ["string", "null"], "pattern": "^(([0-9]+(s|m|h))+|Never)$"},
                    "pools": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name", "labels", "requirements", "limits"],
                            "properties": {
                                "name": dns_subdomain,
                                "labels": {
                                    "type": "object",
                                    "propertyNames": label_key,
                                    "additionalProperties": label_value_schema,
                                },
                                "requirements": {"type": "array", "minItems": 1, "items": requirement},
                                "limits": {"type": "object", "additionalProperties": quantity},
                            },
                        },
                    },
                },
            },
        },
    }


def named_list(name: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The schema of a list of ``{name, config}`` (a list, not a mapping: Helm replaces a list given in
    a values file whole, where it would merge a mapping into the chart's defaults)."""
    return {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "config"],
            "properties": {"name": dict(name), "config": dict(config)},
        },
    }


def pools_taints() -> dict[str, Any]:
    """The schema of ``nodePool.taints`` (shared by the pool file and the chart's values)."""
    out: dict[str, Any] = inline_refs(
        {"$defs": schemas()["pools"]["$defs"], **schemas()["pools"]["properties"]["nodePool"]["properties"]["taints"]}
    )
    return out
