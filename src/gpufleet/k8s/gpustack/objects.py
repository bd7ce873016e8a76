"""(b)–(d): the cluster's objects from the chart's ``gpuStack`` values
(:func:`objects_from_values`), as ``deploy/helm/gpufleet/templates/gpu-stack/`` renders them, so
``gpufleet k8s gpu-config`` and ``helm template`` agree object for object:

(b) Karpenter ``NodePool`` objects (``karpenter.sh/v1``), one per pool and capacity type
    (``<pool>-<capacity type>``), tainted ``nvidia.com/gpu:NoSchedule``, limited in ``nvidia.com/gpu``
    and nodes, consolidated when empty; their template labels
    (:func:`~gpufleet.k8s.gpustack.pools.template_labels`) select the device-plugin and MIG
    configurations and name the gpufleet pool;
(c) the ``ConfigMap`` the GPU Operator's ``devicePlugin.config.name`` names (one key per device
    plugin configuration, NVIDIA's ``api/config/v1``) and the one its ``migManager.config.name``
    names (``config.yaml``: a mig-parted configuration);
(d) the GPU Operator's ``ClusterPolicy`` (``nvidia.com/v1``) that points at both.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Final

import yaml

from gpufleet.errors import InputError
from gpufleet.k8s.gpustack.spec import PARTS, GpuStack, Part
from gpufleet.k8s.gpustack.values import chart_values
from gpufleet.k8s.vocabulary import (
    CLUSTER_POLICY_API,
    CORE_API,
    KARPENTER_API,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGER,
)

MIG_PARTED_KEY: Final = "config.yaml"  # the key of the mig-parted ConfigMap the MIG manager reads
MANAGED: Final = {LABEL_MANAGED_BY: MANAGER, LABEL_COMPONENT: "gpu-stack"}
# Sections the ClusterPolicy CRD requires (empty objects take the operator's defaults).
CLUSTER_POLICY_REQUIRED: Final = ("operator", "daemonsets", "driver", "toolkit", "dcgm", "nodeStatusExporter")


class _GoYamlDumper(yaml.SafeDumper):
    """Writes what Helm's ``toYaml`` (go-yaml) writes: a string that would read back as another type
    (``'0x20B010DE'``, ``'true'``) in double quotes, not PyYAML's single quotes."""


def _go_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    plain_tag = dumper.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
    style = '"' if plain_tag != "tag:yaml.org,2002:str" else ("|" if "\n" in value else None)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_GoYamlDumper.add_representer(str, _go_str)


def _to_yaml(obj: Any) -> str:
    """YAML text as Helm's ``toYaml`` writes it (keys sorted, block style), with a final newline."""
    return str(yaml.dump(obj, Dumper=_GoYamlDumper, sort_keys=True, default_flow_style=False, allow_unicode=True))


def _metadata(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(MANAGED)
    return meta


def _named(values: Mapping[str, Any], section: str) -> dict[str, Any]:
    """``{name: config}`` of ``values[section]["configs"]``; a name given twice is an error (the chart fails too)."""
    out: dict[str, Any] = {}
    for c in values[section]["configs"]:
        if c["name"] in out:
            raise InputError(f"config {c['name']!r} is given twice", field=f"gpuStack.{section}.configs")
        out[c["name"]] = c["config"]
    return out


def device_plugin_configmap(values: Mapping[str, Any]) -> dict[str, Any]:
    """(c) The device plugin's ConfigMap: one key per configuration."""
    dp = values["devicePlugin"]
    return {
        "apiVersion": CORE_API,
        "kind": "ConfigMap",
        "metadata": _metadata(dp["configMap"], values["namespace"]),
        "data": {name: _to_yaml(cfg) for name, cfg in sorted(_named(values, "devicePlugin").items())},
    }


def mig_parted_configmap(values: Mapping[str, Any]) -> dict[str, Any]:
    """(c) mig-parted's ConfigMap: ``config.yaml``, the mig-parted configuration."""
    mm = values["migManager"]
    return {
        "apiVersion": CORE_API,
        "kind": "ConfigMap",
        "metadata": _metadata(mm["configMap"], values["namespace"]),
        "data": {MIG_PARTED_KEY: _to_yaml({"version": "v1", "mig-configs": _named(values, "migManager")})},
    }


def cluster_policy(values: Mapping[str, Any]) -> dict[str, Any]:
    """(d) The ClusterPolicy: ``clusterPolicy.spec`` with gpufleet's fields set over it."""
    cp = values["clusterPolicy"]
    spec: dict[str, Any] = copy.deepcopy(dict(cp["spec"] or {}))
    for key in CLUSTER_POLICY_REQUIRED:
        if key not in spec:
            spec[key] = {}

    def section(key: str, **fields: Any) -> None:
        current = spec.get(key)
        spec[key] = {**(current if isinstance(current, dict) else {}), **fields}

    section("mig", strategy=values["migStrategy"])
    section(
        "devicePlugin",
        enabled=True,
        config={"name": values["devicePlugin"]["configMap"], "default": values["devicePlugin"]["default"]},
    )
    section(
        "migManager",
        enabled=True,
        config={"name": values["migManager"]["configMap"], "default": values["migManager"]["default"]},
    )
    section("gfd", enabled=bool(cp["gfd"]))
    section("dcgmExporter", enabled=bool(cp["dcgmExporter"]))
    return {"apiVersion": CLUSTER_POLICY_API, "kind": "ClusterPolicy", "metadata": _metadata(cp["name"]), "spec": spec}


def karpenter_nodepools(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """(b) The Karpenter NodePools."""
    np_values = values["nodePools"]
    out = []
    for pool in np_values["pools"]:
        tspec: dict[str, Any] = {
            "nodeClassRef": dict(np_values["nodeClass"]),
            "requirements": copy.deepcopy(pool["requirements"]),
        }
        if np_values["taints"]:
            tspec["taints"] = copy.deepcopy(np_values["taints"])
        if np_values.get("expireAfter"):
            tspec["expireAfter"] = np_values["expireAfter"]
        out.append(
            {
                "apiVersion": KARPENTER_API,
                "kind": "NodePool",
                "metadata": _metadata(pool["name"]),
                "spec": {
                    "template": {"metadata": {"labels": dict(pool["labels"])}, "spec": tspec},
                    "limits": dict(pool["limits"]),
                    "disruption": dict(np_values["disruption"]),
                },
            }
        )
    return out


def objects_from_values(
    values: Mapping[str, Any], *, only: Iterable[Part] | None = None, karpenter: bool = True
) -> list[dict[str, Any]]:
    """What the chart renders from these ``gpuStack`` values: nothing unless ``enabled``; the two
    ConfigMaps; the ClusterPolicy if ``clusterPolicy.enabled``; the NodePools if
    ``nodePools.enabled`` and the cluster serves ``karpenter.sh/v1`` (``karpenter``) or
    ``nodePools.force``. ``only`` keeps the named parts."""
    if not values.get("enabled"):
        return []
    parts = set(only) if only is not None else set(PARTS)
    out: list[dict[str, Any]] = []
    if "devicePlugin" in parts:
        out.append(device_plugin_configmap(values))
    if "mig" in parts:
        out.append(mig_parted_configmap(values))
    if "clusterPolicy" in parts and values["clusterPolicy"]["enabled"]:
        out.append(cluster_policy(values))
    np_values = values["nodePools"]
    if "nodePools" in parts and np_values["enabled"] and (karpenter or np_values["force"]):
        out.extend(karpenter_nodepools(values))
    return out


def render(stack: GpuStack, *, only: Iterable[Part] | None = None) -> list[dict[str, Any]]:
    """(b)–(d) of ``stack``, as ``gpufleet k8s gpu-config`` prints them."""
    return objects_from_values(chart_values(stack), only=only)


def parts_of(names: Iterable[str]) -> list[Part]:
    """Check part names (``devicePlugin``, ``mig``, ``clusterPolicy``, ``nodePools``)."""
    out: list[Part] = []
    for n in names:
        if n not in PARTS:
            raise InputError(f"unknown part {n!r} (known: {', '.join(PARTS)})", field="only")
        out.append(n)  # type: ignore[arg-type]  # checked just above
    return out
