"""The store: SQLAlchemy tables, repository functions and Alembic migrations.

Only the service layer uses it. ``Database`` is the handle (``with db.session() as s:``); the
functions of :mod:`gpufleet.store.repo` take that session first; :mod:`gpufleet.store.convert` turns
rows into the model objects the scheduler and the cost engine use.
"""

from __future__ import annotations

from gpufleet.store import repo
from gpufleet.store.convert import (
    gpu_request_from_row,
    job_from_row,
    job_spec_from_row,
    node_from_row,
    placement_from_json,
    placement_to_json,
    pod_share_units,
)
from gpufleet.store.db import Database, default_db_url, mask_url
from gpufleet.store.models import (
    Base,
    ControllerRow,
    GpuSampleRow,
    JobEventRow,
    JobRow,
    NodeIntervalRow,
    NodeRow,
    QuotaRow,
    RunRow,
    Team,
    Token,
    UsageSegmentRow,
)

__all__ = [
    "Base",
    "ControllerRow",
    "Database",
    "GpuSampleRow",
    "JobEventRow",
    "JobRow",
    "NodeIntervalRow",
    "NodeRow",
    "QuotaRow",
    "RunRow",
    "Team",
    "Token",
    "UsageSegmentRow",
    "default_db_url",
    "gpu_request_from_row",
    "job_from_row",
    "job_spec_from_row",
    "mask_url",
    "node_from_row",
    "placement_from_json",
    "placement_to_json",
    "pod_share_units",
    "repo",
]
