"""Packaged data: the pool file gpufleet ships (``gpufleet/data/k8s/gpu-pools.yaml``) and the JSON
Schemas the checks use (``gpufleet/k8s/schemas/``).

:func:`packaged_text` is the GPU stack's only I/O: it reads data packaged with gpufleet (resolved from
the ``gpufleet`` package, not from this subpackage). Everything else in :mod:`gpufleet.k8s.gpustack`
is pure functions.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any, Final, Literal

PACKAGED_POOLS: Final = "data/k8s/gpu-pools.yaml"  # inside the gpufleet package
SCHEMA_FILES: Final = {
    "pools": "k8s/schemas/gpu-pools.v1.json",
    "device-plugin": "k8s/schemas/device-plugin-config.v1.json",
    "mig-parted": "k8s/schemas/mig-parted-config.v1.json",
}


def packaged_text(path: str) -> str:
    """A file packaged with gpufleet (``data/k8s/gpu-pools.yaml``, ``k8s/schemas/*.json``), as text."""
    return resources.files("gpufleet").joinpath(path).read_text(encoding="utf-8")


_SCHEMA_CACHE: dict[str, dict[str, Any]] = {}


def schemas() -> dict[str, dict[str, Any]]:
    """gpufleet's JSON Schemas by name, read once (shared: do not change them; :func:`schema` gives a copy)."""
    if not _SCHEMA_CACHE:
        for key, path in SCHEMA_FILES.items():
            _SCHEMA_CACHE[key] = json.loads(packaged_text(path))
    return _SCHEMA_CACHE


def schema(name: Literal["pools", "device-plugin", "mig-parted"]) -> dict[str, Any]:
    """One of gpufleet's JSON Schemas (a copy)."""
    return copy.deepcopy(schemas()[name])
