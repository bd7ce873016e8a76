"""Waiting for a backend's informers to catch up with the API server, for tests that act on the
cluster and then look at one ``poll()``: a real controller sees changes a watch's latency later;
a test that wants "the next poll after the change" waits for the caches to hold exactly what the
server holds (same objects, same resourceVersions)."""

from __future__ import annotations

import json
import time
from typing import Any

from gpufleet.backends.base import BackendEvent
from gpufleet.k8s.adapter.backend import KubernetesBackend
from gpufleet.k8s.vocabulary import KEY_JOB_ID


def _server(core: Any, call: str, **kwargs: Any) -> dict[tuple[str, str], str]:
    resp = getattr(core, call)(_preload_content=False, **kwargs)
    out = {}
    for obj in json.loads(resp.data).get("items", []):
        meta = obj.get("metadata") or {}
        out[(str(meta.get("namespace") or ""), str(meta["name"]))] = str(meta.get("resourceVersion") or "")
    return out


def caught_up(backend: KubernetesBackend, core: Any) -> bool:
    """The backend's node and pod caches hold what the server holds now."""
    backend.node_cache.start()
    backend.pod_cache.start()
    if not (backend.node_cache.synced() and backend.pod_cache.synced()):
        return False
    return backend.node_cache.resource_versions() == _server(
        core, "list_node"
    ) and backend.pod_cache.resource_versions() == _server(
        core, "list_pod_for_all_namespaces", label_selector=KEY_JOB_ID
    )


def settle(backend: KubernetesBackend, core: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not caught_up(backend, core):
        if time.monotonic() > end:
            raise AssertionError("the backend's caches did not catch up with the API server")
        time.sleep(0.02)


def settled_poll(backend: KubernetesBackend, core: Any, timeout: float = 10.0) -> list[BackendEvent]:
    """``backend.poll()`` once its caches hold what the server holds."""
    settle(backend, core, timeout)
    return backend.poll()
