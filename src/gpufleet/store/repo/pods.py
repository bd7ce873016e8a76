"""What a run is called as a pod: ``<job>-r<run>`` on the server's own GPUs, the Job's name on a cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.k8s.adapter.objects import job_name
from gpufleet.k8s.vocabulary import LABEL_BACKEND


def is_local(labels: Mapping[str, Any] | None) -> bool:
    """A node of the server's own GPUs (the local backend), not a cluster's."""
    return str((labels or {}).get(LABEL_BACKEND, "")) == "local"  # the server's own node (backends/local.py)


def pod_name(job_id: str, run: int, pods: int = 1, *, local: bool = True) -> str:
    """The pod a run is: ``<job_id>-r<run>`` on the server's own GPUs; on a Kubernetes cluster the
    ``batch/v1`` Job the run created (``gf-<job_id>-r<run>``), whose pods are ``<that>-<suffix>`` (the
    store does not record the generated suffixes)."""
    return f"{job_id}-r{run}" if local else job_name(job_id, run, max(1, pods))
