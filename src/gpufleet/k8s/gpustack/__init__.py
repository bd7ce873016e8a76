"""The GPU stack of a Kubernetes cluster, from the same pool definitions gpufleet's autoscaler uses.

One file of GPU pools (packaged: ``gpufleet/data/k8s/gpu-pools.yaml``; its form:
``schemas/gpu-pools.v1.json``), checked (:func:`parse_stack`), becomes

(a) gpufleet :class:`~gpufleet.model.node.NodePool` objects (:func:`gpufleet_pools`), one per
    pool, instance type and capacity type, priced from the catalog, with the shape and sharing
    gpufleet's node reader will see;
(b) Karpenter ``NodePool`` objects (``karpenter.sh/v1``), one per pool and capacity type, whose
    nodes read back as the intended gpufleet pool, whoever asked for it;
(c) the device plugin's and mig-parted's ``ConfigMap``\\ s that the GPU Operator reads;
(d) the GPU Operator's ``ClusterPolicy`` (``nvidia.com/v1``) that points at both.

(b)–(d) are rendered from the Helm chart's ``gpuStack`` values (:func:`chart_values`) by
:func:`objects_from_values`, which does what ``deploy/helm/gpufleet/templates/gpu-stack/`` does,
so ``gpufleet k8s gpu-config`` and ``helm template`` agree object for object.

Pure functions: the only I/O is :func:`packaged_text`, which reads packaged data.

One module per purpose (this package re-exports their public names):

- :mod:`~gpufleet.k8s.gpustack.spec` — the definitions (:class:`GpuStack`, :class:`PoolDef`,
  :class:`GpuSharing`, :class:`ClusterPolicySettings`) and the names the modules share;
- :mod:`~gpufleet.k8s.gpustack.packaged` — the packaged data: the pool file and the JSON Schemas;
- :mod:`~gpufleet.k8s.gpustack.parse` — parsing and checking a pool file (its **checks**);
- :mod:`~gpufleet.k8s.gpustack.sharing` — what a pool's sharing or MIG configuration does to its
  GPUs, and that it suits them;
- :mod:`~gpufleet.k8s.gpustack.pools` — (a), and the node-template labels that tie (b) to it;
- :mod:`~gpufleet.k8s.gpustack.values` — the chart's ``gpuStack`` values and their schema;
- :mod:`~gpufleet.k8s.gpustack.objects` — (b)–(d) from the values;
- :mod:`~gpufleet.k8s.gpustack.yamltext` — YAML text as ``gpufleet k8s gpu-config`` prints it.
"""

from gpufleet.k8s.gpustack.objects import (
    MIG_PARTED_KEY,
    cluster_policy,
    device_plugin_configmap,
    karpenter_nodepools,
    mig_parted_configmap,
    objects_from_values,
    parts_of,
    render,
)
from gpufleet.k8s.gpustack.packaged import PACKAGED_POOLS, packaged_text, schema
from gpufleet.k8s.gpustack.parse import packaged_stack, parse_stack
from gpufleet.k8s.gpustack.pools import gpufleet_pool_name, gpufleet_pools, sharing_facts
from gpufleet.k8s.gpustack.sharing import MIG_DEVICE_IDS, pool_sharing
from gpufleet.k8s.gpustack.spec import (
    ALL_DISABLED,
    PARTS,
    ClusterPolicySettings,
    GpuSharing,
    GpuStack,
    Part,
    PoolDef,
)
from gpufleet.k8s.gpustack.values import chart_values, values_schema
from gpufleet.k8s.gpustack.yamltext import dump_objects, dump_values

__all__ = [
    "ALL_DISABLED",
    "MIG_DEVICE_IDS",
    "MIG_PARTED_KEY",
    "PACKAGED_POOLS",
    "PARTS",
    "ClusterPolicySettings",
    "GpuSharing",
    "GpuStack",
    "Part",
    "PoolDef",
    "chart_values",
    "cluster_policy",
    "device_plugin_configmap",
    "dump_objects",
    "dump_values",
    "gpufleet_pool_name",
    "gpufleet_pools",
    "karpenter_nodepools",
    "mig_parted_configmap",
    "objects_from_values",
    "packaged_stack",
    "packaged_text",
    "parse_stack",
    "parts_of",
    "pool_sharing",
    "render",
    "schema",
    "sharing_facts",
    "values_schema",
]
