"""What a pool's sharing configuration does to its GPUs (:func:`pool_sharing`), and the checks that
it suits them: a sharing configuration that exists and is of the named kind, replicates
``nvidia.com/gpu`` on all devices and lets a pod ask for several replicas (gpufleet asks for a whole
GPU as ``replicas`` of them); every MIG layout used by a pool against gpufleet's MIG profile table
(:mod:`gpufleet.model.gpu`): profiles the GPU model has, slices that fit its 7 compute and 8 memory
slices, GPU indices the node has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpufleet.errors import InputError
from gpufleet.k8s.gpustack.spec import GpuSharing, GpuStack, PoolDef
from gpufleet.k8s.schemacheck import field_path
from gpufleet.k8s.vocabulary import GPU_RESOURCE, NVIDIA_PREFIX, SHARED_GPU_RESOURCE
from gpufleet.model.gpu import MigProfile, gpu_model
from gpufleet.model.node import SharingMode
from gpufleet.model.share import mig_fit_problem

# PCI device IDs of the GPUs with each gpufleet model's MIG geometry, as NVIDIA's default mig-parted
# configuration groups them (gpu-operator assets/state-mig-manager/0400_configmap.yaml): a
# mig-parted entry's ``gpuModels`` becomes ``device-filter``, and a ``device-filter`` is read back
# as the models it covers.
MIG_DEVICE_IDS: Final[dict[str, tuple[str, ...]]] = {
    "A100-40GB": ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
    "A100-80GB": ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"),
    "H100-80GB": ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"),
    "H200": ("0x233510DE", "0x233B10DE"),
}

# A device-plugin sharing kind of a pool -> its key under the config's ``sharing``.
SHARING_KEYS: Final = {"time-slicing": "timeSlicing", "mps": "mps"}


def sharing_key(cfg: Mapping[str, Any]) -> str | None:
    """``mps`` or ``timeSlicing`` where the config replicates devices (as the plugin decides), else None."""
    sharing = cfg.get("sharing") or {}
    for key in ("mps", "timeSlicing"):  # MPS wins when both are given
        rr = sharing.get(key)
        if isinstance(rr, Mapping) and any(int(r.get("replicas", 0)) > 1 for r in rr.get("resources") or []):
            return key
    return None


def _models_of_filter(device_filter: Any) -> frozenset[str] | None:
    """The gpufleet models a mig-parted ``device-filter`` covers; None: no filter (every GPU)."""
    if device_filter is None:
        return None
    ids = [device_filter] if isinstance(device_filter, str) else list(device_filter)
    wanted = {str(i).upper() for i in ids}
    return frozenset(m for m, known in MIG_DEVICE_IDS.items() if wanted & {k.upper() for k in known})


def pool_sharing(stack: GpuStack, pool: PoolDef) -> GpuSharing:
    """What the pool's configuration does to its GPUs; an :class:`InputError` naming the field when
    the configuration does not exist, is of another kind, or does not suit the pool's GPUs."""
    src = stack.source
    fld = f"{pool.field}.sharing"
    model = gpu_model(pool.gpu_model)
    if pool.sharing == "none":
        return GpuSharing(SharingMode.EXCLUSIVE, GPU_RESOURCE)
    if pool.sharing == "mig":
        return _mig_sharing(stack, pool, model.name)
    name = str(pool.config)
    cfg = stack.device_plugin_configs.get(name)
    if cfg is None:
        known = ", ".join(sorted(stack.device_plugin_configs))
        raise InputError(f"no device plugin config {name!r} (configs: {known})", source=src, field=fld)
    key = SHARING_KEYS[pool.sharing]
    cfg_field = f"{field_path('devicePlugin.configs', name)}.sharing.{key}"
    if sharing_key(cfg) != key:
        raise InputError(f"config {name!r} does not share GPUs by {pool.sharing}", source=src, field=fld)
    rr = cfg["sharing"][key]
    gpu_entries = [r for r in rr["resources"] if str(r["name"]) in (GPU_RESOURCE, "gpu")]
    if len(gpu_entries) != 1 or len(rr["resources"]) != 1:
        raise InputError(
            f"a pool's config must replicate {GPU_RESOURCE} and nothing else (gpufleet counts one replica as "
            "1/replicas of a GPU)",
            source=src,
            field=f"{cfg_field}.resources",
        )
    (res,) = gpu_entries
    if res.get("devices", "all") != "all":
        raise InputError(
            "a pool's config must replicate all devices (gpufleet takes every GPU of the node as shared)",
            source=src,
            field=f"{cfg_field}.resources[0].devices",
        )
    if rr.get("failRequestsGreaterThanOne") is True:
        raise InputError(
            "gpufleet asks for a whole GPU as `replicas` replicas (and for larger fractions as several): set it false",
            source=src,
            field=f"{cfg_field}.failRequestsGreaterThanOne",
        )
    rename = res.get("rename")
    resource = SHARED_GPU_RESOURCE if rr.get("renameByDefault") else GPU_RESOURCE
    if rename:
        full = rename if "/" in str(rename) else f"{NVIDIA_PREFIX}{rename}"
        if full not in (GPU_RESOURCE, SHARED_GPU_RESOURCE):
            raise InputError(
                f"gpufleet's node reader knows {GPU_RESOURCE} and {SHARED_GPU_RESOURCE}, not {full}",
                source=src,
                field=f"{cfg_field}.resources[0].rename",
            )
        resource = full
    strategy = "mps" if key == "mps" else "time-slicing"
    return GpuSharing(SharingMode.SHARED, resource, replicas=int(res["replicas"]), strategy=strategy)


def _mig_sharing(stack: GpuStack, pool: PoolDef, model: str) -> GpuSharing:
    src = stack.source
    name = str(pool.config)
    entries = stack.mig_configs.get(name)
    if entries is None:
        known = ", ".join(sorted(stack.mig_configs))
        raise InputError(f"no MIG config {name!r} (configs: {known})", source=src, field=f"{pool.field}.sharing")
    slices, whole, profiles_used = mig_layout(stack, name, entries, model, pool.gpus_per_node)
    if not slices:
        if whole == pool.gpus_per_node:  # a config that leaves MIG off: whole GPUs
            return GpuSharing(SharingMode.EXCLUSIVE, GPU_RESOURCE)
        raise InputError(
            f"MIG config {name!r} enables MIG on {model} but creates no MIG devices: the pool's GPUs would be unusable",
            source=src,
            field=f"{pool.field}.sharing",
        )
    if stack.mig_strategy == "none":
        raise InputError(
            "migStrategy none: the device plugin would advertise no MIG devices", source=src, field="migStrategy"
        )
    if stack.mig_strategy == "single" and (whole or len(profiles_used) != 1):
        raise InputError(
            f"MIG config {name!r} on {model}: the single strategy needs every GPU of a node in MIG mode with one "
            "profile; use migStrategy mixed",
            source=src,
            field=f"{pool.field}.sharing",
        )
    resource = GPU_RESOURCE if stack.mig_strategy == "single" or whole else None
    return GpuSharing(
        SharingMode.MIG,
        resource,
        mig_strategy=stack.mig_strategy,
        mig_slices=dict(sorted(slices.items())),
        whole_gpus=whole,
    )


def mig_layout(
    stack: GpuStack, name: str, entries: Sequence[Mapping[str, Any]], model: str, gpus: int
) -> tuple[dict[str, int], int, set[str]]:
    """(MIG slices per node by profile, GPUs left whole, profiles used) of MIG config ``name`` on a
    node of ``gpus`` ``model`` GPUs; checks each entry that applies to the model."""
    src = stack.source
    base = field_path("migManager.configs", name)
    covered: dict[int, int] = {}  # GPU index -> entry
    slices: dict[str, int] = {}
    whole = 0
    used: set[str] = set()
    applies = False
    info = gpu_model(model)
    for i, entry in enumerate(entries):
        where = f"{base}[{i}]"
        models = _models_of_filter(entry.get("device-filter"))
        if models is not None and model not in models:
            continue
        applies = True
        devices = entry["devices"]
        indices = list(range(gpus)) if devices == "all" else [int(d) for d in devices]
        for d in indices:
            if d >= gpus:
                raise InputError(
                    f"GPU index {d}: a {model} node of this config's pools has {gpus} GPU(s) (0-{gpus - 1})",
                    source=src,
                    field=f"{where}.devices",
                )
            if d in covered:
                raise InputError(
                    f"GPU {d} is set up by entries {covered[d]} and {i} (for {model})",
                    source=src,
                    field=f"{where}.devices",
                )
            covered[d] = i
        if not entry["mig-enabled"]:
            whole += len(indices)
            continue
        if not info.supports_mig:
            raise InputError(f"{model} has no MIG", source=src, field=f"{where}.mig-enabled")
        wanted: list[MigProfile] = []
        for profile, count in (entry.get("mig-devices") or {}).items():
            p = info.mig_profile(profile)
            if p is None:
                known = ", ".join(m.name for m in info.mig_profiles)
                raise InputError(
                    f"{model} has no MIG profile {profile!r} (known: {known})",
                    source=src,
                    field=f"{where}.mig-devices[{profile}]",
                )
            wanted.extend([p] * int(count))
        problem = mig_fit_problem(wanted)
        if problem:
            raise InputError(f"does not fit one {model}: {problem}", source=src, field=f"{where}.mig-devices")
        for p in wanted:
            slices[p.name] = slices.get(p.name, 0) + len(indices)
            used.add(p.name)
    if not applies:
        raise InputError(f"MIG config {name!r} has no entry for {model}", source=src, field=base)
    whole += gpus - len(covered)  # GPUs no entry names keep their mode: gpufleet takes them as whole
    return slices, whole, used
