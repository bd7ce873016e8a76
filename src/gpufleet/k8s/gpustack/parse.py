"""Parsing and checking a pool file (:func:`parse_stack`; the packaged one: :func:`packaged_stack`).

**Checks** (each an :class:`~gpufleet.errors.InputError` naming the file and the field): the file's
form (``schemas/gpu-pools.v1.json``); each device-plugin configuration against
``schemas/device-plugin-config.v1.json`` and each mig-parted configuration against
``schemas/mig-parted-config.v1.json`` (both written from NVIDIA's documented formats); a sharing
configuration that exists and is of the named kind, replicates ``nvidia.com/gpu`` on all devices
and lets a pod ask for several replicas (gpufleet asks for a whole GPU as ``replicas`` of them); MPS
only without the ``mixed`` MIG strategy (the device plugin refuses that pair); every MIG layout
used by a pool against gpufleet's MIG profile table (:mod:`gpufleet.model.gpu`): profiles the GPU
model has, slices that fit its 7 compute and 8 memory slices, GPU indices the node has (these
sharing and MIG checks are :mod:`gpufleet.k8s.gpustack.sharing`'s); and, for (a), instance types
the catalog prices for the pool's GPU model and count
(:func:`~gpufleet.k8s.gpustack.pools.gpufleet_pools` checks those, against the catalog it is given).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from gpufleet.errors import InputError
from gpufleet.k8s.gpustack.packaged import PACKAGED_POOLS, packaged_text, schemas
from gpufleet.k8s.gpustack.pools import template_labels
from gpufleet.k8s.gpustack.sharing import MIG_DEVICE_IDS, pool_sharing, sharing_key
from gpufleet.k8s.gpustack.spec import (
    ALL_DISABLED,
    ClusterPolicySettings,
    GpuStack,
    PoolDef,
)
from gpufleet.k8s.schemacheck import check, field_path
from gpufleet.k8s.vocabulary import (
    AWS_NODE_CLASS_GROUP,
    GPU_RESOURCE,
    KARPENTER_GROUP,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_HOSTNAME,
    LABEL_MIG_CONFIG,
    LABEL_POOL,
    LABEL_PROVISIONED,
)
from gpufleet.model.gpu import canonical_gpu_name


def packaged_stack() -> GpuStack:
    """The packaged pools (``gpufleet/data/k8s/gpu-pools.yaml``), checked."""
    text = packaged_text(PACKAGED_POOLS)
    return parse_stack(yaml.safe_load(text), source=f"gpufleet/{PACKAGED_POOLS}")


def parse_stack(document: Any, *, source: str) -> GpuStack:
    """Check a pool file's document (see the module docstring) and return it as a :class:`GpuStack`."""
    check(schemas()["pools"], document, source=source)
    doc: Mapping[str, Any] = document
    mig_strategy = str(doc.get("migStrategy", "mixed"))
    node_class = {
        "group": AWS_NODE_CLASS_GROUP,
        "kind": "EC2NodeClass",
        **(doc.get("nodeClass") or {"name": "default"}),
    }
    np_doc = doc.get("nodePool") or {}
    dp = doc.get("devicePlugin") or {}
    mm = doc.get("migManager") or {}
    cp = doc.get("clusterPolicy") or {}

    dp_configs = {
        name: _device_plugin_config(name, cfg, mig_strategy, source)
        for name, cfg in (dp.get("configs") or {"default": {}}).items()
    }
    dp_default = str(dp.get("default", "default"))
    if dp_default not in dp_configs:
        raise InputError(
            f"no device plugin config {dp_default!r} (configs: {', '.join(sorted(dp_configs))})",
            source=source,
            field="devicePlugin.default",
        )
    if sharing_key(dp_configs[dp_default]) is not None:
        raise InputError(
            f"config {dp_default!r} shares GPUs; the default is what pools with sharing none get: it must not",
            source=source,
            field="devicePlugin.default",
        )

    mig_raw = mm.get("configs") or {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    mig_configs = {name: _mig_config(name, entries, source) for name, entries in mig_raw.items()}
    check(schemas()["mig-parted"], {"version": "v1", "mig-configs": mig_configs}, source=source, field="migManager")
    mig_default = str(mm.get("default", ALL_DISABLED))
    if mig_default and mig_default not in mig_configs:
        raise InputError(
            f"no MIG config {mig_default!r} (configs: {', '.join(sorted(mig_configs))})",
            source=source,
            field="migManager.default",
        )

    pools = tuple(_pool(i, p, source) for i, p in enumerate(doc["pools"]))
    for i, p in enumerate(pools):
        if p.name in (q.name for q in pools[:i]):
            raise InputError(f"pool name {p.name!r} is used twice", source=source, field=f"{p.field}.name")
    nodepools = [p.nodepool_name(c) for p in pools for c in p.capacity_types]
    for p in pools:
        for c in p.capacity_types:
            if nodepools.count(p.nodepool_name(c)) > 1:
                raise InputError(
                    f"NodePool {p.nodepool_name(c)!r} would come from two pools: rename one",
                    source=source,
                    field=f"{p.field}.name",
                )

    stack = GpuStack(
        source=source,
        namespace=str(doc.get("namespace", "gpu-operator")),
        region=doc.get("region"),
        node_class=node_class,
        taints=tuple(
            dict(t) for t in np_doc.get("taints", [{"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}])
        ),
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m", **(np_doc.get("disruption") or {})},
        expire_after=np_doc.get("expireAfter", "720h"),
        mig_strategy=mig_strategy,
        device_plugin_config_map=str(dp.get("configMap", "gpufleet-device-plugin-config")),
        device_plugin_default=dp_default,
        device_plugin_configs=dp_configs,
        mig_config_map=str(mm.get("configMap", "gpufleet-mig-parted-config")),
        mig_default=mig_default,
        mig_configs=mig_configs,
        cluster_policy=ClusterPolicySettings(
            enabled=bool(cp.get("enabled", True)),
            name=str(cp.get("name", "cluster-policy")),
            dcgm_exporter=bool(cp.get("dcgmExporter", True)),
            gfd=bool(cp.get("gfd", True)),
            spec=copy.deepcopy(cp.get("spec") or {}),
        ),
        pools=pools,
    )
    for p in pools:
        pool_sharing(stack, p)  # every pool's configuration suits its GPUs
        for c in p.capacity_types:
            template_labels(stack, p, c)
    return stack


def _device_plugin_config(name: str, cfg: Mapping[str, Any], mig_strategy: str, source: str) -> dict[str, Any]:
    where = field_path("devicePlugin.configs", name)
    out = copy.deepcopy(dict(cfg))
    if out.get("version", "v1") != "v1":
        raise InputError(f"must be 'v1', got {out.get('version')!r}", source=source, field=f"{where}.version")
    out["version"] = "v1"
    flags = out.setdefault("flags", {})
    if not isinstance(flags, dict):
        raise InputError("expected a mapping", source=source, field=f"{where}.flags")
    given = flags.setdefault("migStrategy", mig_strategy)
    if given != mig_strategy:
        raise InputError(
            f"{given!r} differs from migStrategy {mig_strategy!r} (the GPU Operator sets the plugin's MIG_STRATEGY "
            "from the ClusterPolicy, which wins over the file): leave it out",
            source=source,
            field=f"{where}.flags.migStrategy",
        )
    mps = (out.get("sharing") or {}).get("mps") if isinstance(out.get("sharing"), dict) else None
    if isinstance(mps, dict):
        if mig_strategy == "mixed":
            raise InputError(
                "MPS sharing is not supported with the mixed MIG strategy (the device plugin refuses to start): "
                "use time-slicing, or migStrategy single or none",
                source=source,
                field=f"{where}.sharing.mps",
            )
        # the plugin's MPS default is true; gpufleet asks for a whole GPU as `replicas` replicas
        mps.setdefault("failRequestsGreaterThanOne", False)
    check(schemas()["device-plugin"], out, source=source, field=where)
    return {"version": out.pop("version"), "flags": out.pop("flags"), **out}


def _mig_config(name: str, entries: Sequence[Mapping[str, Any]], source: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        where = f"{field_path('migManager.configs', name)}[{i}]"
        e = copy.deepcopy(dict(entry))
        models = e.pop("gpuModels", None)
        if models is not None:
            if "device-filter" in e:
                raise InputError("give gpuModels or device-filter, not both", source=source, field=f"{where}.gpuModels")
            ids: list[str] = []
            for j, m in enumerate(models):
                canon = canonical_gpu_name(str(m))
                if canon not in MIG_DEVICE_IDS:
                    known = ", ".join(MIG_DEVICE_IDS)
                    raise InputError(
                        f"{m!r} is not a MIG-capable GPU model gpufleet knows the PCI IDs of (known: {known})",
                        source=source,
                        field=f"{where}.gpuModels[{j}]",
                    )
                ids.extend(i_ for i_ in MIG_DEVICE_IDS[canon] if i_ not in ids)
            e = {"device-filter": ids, **e}
        out.append(e)
    return out


def _pool(index: int, p: Mapping[str, Any], source: str) -> PoolDef:
    where = f"pools[{index}]"
    model = canonical_gpu_name(str(p["gpuModel"]))
    if model is None:
        raise InputError(f"unknown GPU model {p['gpuModel']!r}", source=source, field=f"{where}.gpuModel")
    caps = [str(c) for c in p["capacityTypes"]]
    if len(set(caps)) != len(caps):
        raise InputError("a capacity type is listed twice", source=source, field=f"{where}.capacityTypes")
    types = [str(t) for t in p["instanceTypes"]]
    if len(set(types)) != len(types):
        raise InputError("an instance type is listed twice", source=source, field=f"{where}.instanceTypes")
    raw_limit = p["gpuLimit"]
    limits = {c: raw_limit for c in caps} if isinstance(raw_limit, int) else dict(raw_limit)
    gpus = int(p["gpusPerNode"])
    for c in caps:
        if c not in limits:
            raise InputError(f"no GPU limit for capacity type {c}", source=source, field=f"{where}.gpuLimit")
    for c, limit in limits.items():
        fld = f"{where}.gpuLimit" + ("" if isinstance(raw_limit, int) else f".{c}")
        if c not in caps:
            raise InputError(f"{c} is not one of the pool's capacityTypes", source=source, field=fld)
        if limit % gpus:
            raise InputError(f"{limit} GPUs is not a whole number of {gpus}-GPU nodes", source=source, field=fld)
    sharing = str(p.get("sharing", "none"))
    kind, _, config = sharing.partition(":")
    reserved = {LABEL_POOL, LABEL_PROVISIONED, LABEL_DEVICE_PLUGIN_CONFIG, LABEL_MIG_CONFIG}
    for key in p.get("labels") or {}:
        restricted = key in reserved or key.split("/")[0].endswith(KARPENTER_GROUP) or key == LABEL_HOSTNAME
        if restricted:
            raise InputError(
                "set by gpufleet or Karpenter, not by the pool file", source=source, field=f"{where}.labels[{key}]"
            )
    return PoolDef(
        name=str(p["name"]),
        instance_types=tuple(types),
        gpu_model=model,
        gpus_per_node=gpus,
        capacity_types=tuple(caps),
        gpu_limits={c: int(limits[c]) for c in caps},
        sharing=kind,  # type: ignore[arg-type]  # the schema's pattern allows these four
        config=config or None,
        labels=dict(p.get("labels") or {}),
        index=index,
    )
