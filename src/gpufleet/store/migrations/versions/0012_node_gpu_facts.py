"""A node's GPU sharing as facts, not labels (issue 21): ``nodes.gpu_facts``.

The Kubernetes node reader used to add labels no cluster node carries to ``nodes.labels``: the
extended resource pods ask for, replicas per GPU (and one replica in milli-GPU), the sharing strategy,
the MIG strategy, profiles and whole GPUs (``gpufleet.io/gpu-resource``, ``gpu-replicas``,
``replica-milli``, ``sharing-strategy``, ``mig-strategy``, ``mig-profiles``, ``whole-gpus``), and
copies of the instance type and region labels (``gpufleet.io/instance-type``, ``gpufleet.io/region``).
The GPU ones move into ``gpu_facts`` (JSON: resource, replicas, strategy, mig_strategy, mig_profiles,
whole_gpus); the copies are dropped. A row with none of them keeps ``gpu_facts`` NULL: the default
(one replica, ``nvidia.com/gpu``), as its missing labels were read before. The downgrade puts the
labels back (replica-milli and the copies computed as the reader wrote them).

The label names are written out here, not imported: they are what stored rows hold, whatever the
code's vocabulary says later.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-20 00:00:00
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RESOURCE = "gpufleet.io/gpu-resource"
REPLICAS = "gpufleet.io/gpu-replicas"
REPLICA_MILLI = "gpufleet.io/replica-milli"
STRATEGY = "gpufleet.io/sharing-strategy"
MIG_STRATEGY = "gpufleet.io/mig-strategy"
MIG_PROFILES = "gpufleet.io/mig-profiles"
WHOLE_GPUS = "gpufleet.io/whole-gpus"
GPU_LABELS = (RESOURCE, REPLICAS, REPLICA_MILLI, STRATEGY, MIG_STRATEGY, MIG_PROFILES, WHOLE_GPUS)
# gpufleet's copies of the well-known labels: (copy, the labels it copied, first found)
COPIES = (
    ("gpufleet.io/instance-type", ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")),
    ("gpufleet.io/region", ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")),
)

# what NULL stands for: an unshared node whose pods ask nvidia.com/gpu
DEFAULT_FACTS = {
    "resource": "nvidia.com/gpu",
    "replicas": 1,
    "strategy": None,
    "mig_strategy": None,
    "mig_profiles": {},
    "whole_gpus": 0,
}

nodes = sa.table(
    "nodes",
    sa.column("name", sa.String),
    sa.column("labels", sa.JSON),
    sa.column("gpu_facts", sa.JSON(none_as_null=True)),
)


def _count(raw: Any, default: int) -> int:
    text = str(raw if raw is not None else "").strip()
    return int(text) if text.isdigit() else default


def facts_from_labels(labels: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``gpu_facts`` the reader's labels stood for; None for the default (none of them, or only
    ``gpu-resource: nvidia.com/gpu``)."""
    if not any(k in labels for k in GPU_LABELS):
        return None
    profiles: dict[str, int] = {}
    for part in str(labels.get(MIG_PROFILES) or "").split(","):
        profile, _, n = part.partition(":")
        if profile.strip():
            profiles[profile.strip()] = _count(n, 0)
    facts = {
        "resource": str(labels[RESOURCE]) if labels.get(RESOURCE) else None,
        "replicas": max(1, _count(labels.get(REPLICAS), 1)),
        "strategy": str(labels[STRATEGY]) if labels.get(STRATEGY) else None,
        "mig_strategy": str(labels[MIG_STRATEGY]) if labels.get(MIG_STRATEGY) else None,
        "mig_profiles": dict(sorted(profiles.items())),
        "whole_gpus": _count(labels.get(WHOLE_GPUS), 0),
    }
    return None if facts == DEFAULT_FACTS else facts


def labels_from_facts(facts: Mapping[str, Any]) -> dict[str, str]:
    """The labels the reader wrote for ``facts`` (the inverse of :func:`facts_from_labels`)."""
    out: dict[str, str] = {}
    if facts.get("resource"):
        out[RESOURCE] = str(facts["resource"])
    replicas = int(facts.get("replicas") or 1)
    if replicas > 1:
        out[REPLICAS] = str(replicas)
        out[REPLICA_MILLI] = str(1000 // replicas)
        out[STRATEGY] = str(facts.get("strategy") or "time-slicing")
    if facts.get("mig_strategy"):
        out[MIG_STRATEGY] = str(facts["mig_strategy"])
        out[MIG_PROFILES] = ",".join(f"{p}:{n}" for p, n in sorted((facts.get("mig_profiles") or {}).items()))
        if facts.get("whole_gpus"):
            out[WHOLE_GPUS] = str(facts["whole_gpus"])
    return out


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("gpu_facts", sa.JSON(), nullable=True))
    conn = op.get_bind()
    for name, labels in conn.execute(sa.select(nodes.c.name, nodes.c.labels)).all():
        labels = dict(labels or {})
        facts = facts_from_labels(labels)
        kept = {k: v for k, v in labels.items() if k not in GPU_LABELS and k not in {c for c, _ in COPIES}}
        if kept != labels:
            conn.execute(nodes.update().where(nodes.c.name == name).values(labels=kept, gpu_facts=facts))


def downgrade() -> None:
    conn = op.get_bind()
    for name, labels, facts in conn.execute(sa.select(nodes.c.name, nodes.c.labels, nodes.c.gpu_facts)).all():
        labels = dict(labels or {})
        restored = {**labels, **labels_from_facts(facts or {})}
        for copy, sources in COPIES:
            value = next((labels[s] for s in sources if labels.get(s)), None)
            if value is not None:
                restored[copy] = value
        if restored != labels:
            conn.execute(nodes.update().where(nodes.c.name == name).values(labels=restored))
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("gpu_facts")
